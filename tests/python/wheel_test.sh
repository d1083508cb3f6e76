#!/usr/bin/env bash
# `pip install <source>` into a fresh virtual environment, then moegrad.torch imports and runs without
# PYTHONPATH: the wheel holds the extension and libmoegrad.so (found through a $ORIGIN RUNPATH), no headers
# and no CMake package. The venv borrows torch from the interpreter that runs this test (a .pth file), so
# that the test installs no second torch.
#   tests/python/wheel_test.sh <python with torch> <source dir>
set -euo pipefail
python=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$python" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check "$src"
site=$("$tmp/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['platlib'])")
torch_site=$("$python" -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))")
echo "$torch_site" > "$site/zz_moegrad_test_torch.pth"

files=$(cd "$site" && ls moegrad)
echo "wheel_test: installed moegrad/: $(echo $files)"
for f in __init__.py torch.py _pipelines.py _megatron.py libmoegrad.so; do
  grep -qx "$f" <<<"$files" || { echo "wheel_test: moegrad/$f missing" >&2; exit 1; }
done
if ls "$site" | grep -qx include || [[ -d "$site/moegrad/cmake" ]]; then
  echo "wheel_test: headers or the CMake package were installed" >&2
  exit 1
fi
readelf -d "$site"/moegrad/_C*.so | grep -q 'RUNPATH.*\$ORIGIN' || { echo "wheel_test: no \$ORIGIN RUNPATH" >&2; exit 1; }

cd "$tmp"
env -u PYTHONPATH -u LD_LIBRARY_PATH "$tmp/venv/bin/python" - <<'PY'
import torch
import moegrad
import moegrad.torch as mt

assert moegrad.__file__.startswith(__import__("sysconfig").get_paths()["platlib"]), moegrad.__file__
tokens = torch.arange(12, dtype=torch.float32).view(4, 3)
rmap = torch.tensor([[1, 0], [0, 1], [0, 1], [1, 0]], dtype=torch.bool)
permuted, _, idx = mt.moe_token_permute_with_routing_map(tokens, rmap)
assert torch.equal(permuted, tokens[[0, 3, 1, 2]]), permuted  # expert 0: tokens 0, 3; expert 1: 1, 2
print("wheel_test: moegrad", moegrad.version(), moegrad.simd_target(), "from", moegrad.__file__)
PY
