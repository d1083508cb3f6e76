"""CTest python_megatron_installed: fails unless the pinned megatron-core (scripts/setup.sh's python_pins) is
installed and has its MoE modules, so that tests/python/test_megatron.py cannot pass by being skipped."""
import importlib.metadata
import re
import sys
from pathlib import Path

setup = (Path(__file__).resolve().parents[2] / "scripts" / "setup.sh").read_text()
pinned = re.search(r"megatron-core==([\w.]+)", setup).group(1)
try:
    version = importlib.metadata.version("megatron-core")
except importlib.metadata.PackageNotFoundError:
    sys.exit(f"megatron-core is not installed in {sys.executable} (scripts/setup.sh pins {pinned})")
if version != pinned:
    sys.exit(f"megatron-core {version} is installed, scripts/setup.sh pins {pinned}")
# Its files, not an import (importing megatron.core takes seconds; the tests import it).
files = {str(f) for f in importlib.metadata.files("megatron-core") or ()}
for module in ("moe_utils", "token_dispatcher"):
    if f"megatron/core/transformer/moe/{module}.py" not in files:
        sys.exit(f"megatron-core {version} has no megatron/core/transformer/moe/{module}.py")
print(f"megatron-core {version}: the pinned version, with moe_utils and token_dispatcher")
