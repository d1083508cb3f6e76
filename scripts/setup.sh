#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, test and benchmark moegrad; everything comes
# from Debian's archive. Installs nothing when all is present. Needs root (or sudo) only to install.
set -euo pipefail

packages=(
  cmake ninja-build g++ ccache             # build
  libhwy-dev                               # Google Highway: SIMD with run-time dispatch
  libgtest-dev libbenchmark-dev            # GoogleTest, Google Benchmark
  pybind11-dev python3-dev python3-torch python3-pytest   # the Python package and its tests
  clang libclang-rt-14-dev libomp-14-dev   # libFuzzer, the sanitizer runtimes, OpenMP for clang
)
if [[ "${MOEGRAD_SETUP_MINIMAL:-0}" == 1 ]]; then
  packages=(cmake ninja-build g++ libhwy-dev libgtest-dev)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
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
