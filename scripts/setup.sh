#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, test and benchmark moegrad: the toolchain and C++
# libraries from Debian's archive (needs root or sudo), and the Python environment of the moegrad package
# and its tests, a virtual environment .venv with pinned torch 2.13.0, pytest and megatron-core (MOEGRAD_VENV
# elsewhere; MOEGRAD_PYTHON is the interpreter that makes it, default python3). CMake builds the package for
# that venv's interpreter. Installs nothing when all is present.
set -euo pipefail

packages=(
  cmake ninja-build g++ ccache             # build
  libhwy-dev                               # Google Highway: SIMD with run-time dispatch
  libgtest-dev libbenchmark-dev            # GoogleTest, Google Benchmark
  pybind11-dev python3-dev                 # the Python package (torch and pytest: the venv below)
  clang libclang-rt-14-dev libomp-14-dev   # libFuzzer, the sanitizer runtimes, OpenMP for clang
)
if [[ "${MOEGRAD_SETUP_MINIMAL:-0}" == 1 ]]; then
  packages=(cmake ninja-build g++ libhwy-dev libgtest-dev)
fi

here=$(cd "$(dirname "$0")/.." && pwd)
venv=${MOEGRAD_VENV:-$here/.venv}
# The Python pins of the tests (the package itself asks for torch>=2.4). megatron-core: the reference of
# tests/python/test_megatron.py; 0.16.1 is its newest release for Python 3.11 (0.17 and later need 3.12).
python_pins=(torch==2.13.0 pytest==8.3.5 numpy==2.2.6 megatron-core==0.16.1)

setup_venv() {
  if [[ "${MOEGRAD_SETUP_MINIMAL:-0}" == 1 ]]; then return 0; fi
  if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" - "${python_pins[@]}" 2>/dev/null <<'PY'
import importlib.metadata as m, sys
sys.exit(any(m.version(p.split("==")[0]).split("+")[0] != p.split("==")[1] for p in sys.argv[1:]))
PY
  then
    return 0
  fi
  echo "setup: Python environment $venv (${python_pins[*]})" >&2
  [[ -x "$venv/bin/python" ]] || "${MOEGRAD_PYTHON:-python3}" -m venv "$venv" >&2
  # torch's CPU wheel: pinned, so pip never reaches for a CUDA build.
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${python_pins[@]}" >&2
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  setup_venv
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
sudo=""
if [[ $(id -u) != 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q >&2
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
setup_venv
