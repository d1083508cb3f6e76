import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # reference.py


@pytest.fixture(autouse=True)
def _seed():
    import torch
    torch.manual_seed(1234)
