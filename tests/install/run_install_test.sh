#!/usr/bin/env bash
# Installs a built moegrad into a temporary prefix and uses it the way outside programs do:
#   1. the installed tree of the interface (headers, library, CMake package, command-line tool), every
#      public header compiling from the installed tree alone;
#   2. every tests/install/*_client.cpp built with nothing but
#        g++ -std=c++17 client.cpp -I<prefix>/include -L<libdir> -lmoegrad
#      (their common code, client_util.h, is included from next to them) and run with LD_LIBRARY_PATH=<libdir>:
#      exit status 0 and last line "RESULT: PASS";
#   3. tests/install/consumer/, a CMake project using find_package(moegrad) and moegrad::moegrad.
# Usage: run_install_test.sh <build dir> <tests/install dir>
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 <build dir> <tests/install dir>" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
here=$(cd "$2" && pwd)
source_include=$(cd "$here/../../include" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/moegrad-install-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
show() {  # the tail of a log, indented
  tail -n "${2:-40}" "$1" | sed 's/^/    /'
}

# A library built for fuzzing (MOEGRAD_FUZZ=ON) carries libFuzzer's coverage hooks, which only a libFuzzer
# program provides: no outside program can link it, so the test has nothing to check there (ctest: skipped).
fuzz=$(sed -n 's/^MOEGRAD_FUZZ:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
if [[ ${fuzz^^} =~ ^(ON|1|TRUE|YES|Y)$ ]]; then
  echo "install test: skipped: the build is instrumented for libFuzzer (MOEGRAD_FUZZ=$fuzz)"
  exit 77
fi

# A sanitized library needs its runtime in the executables that load it; only then are flags added.
sanitize=$(sed -n 's/^MOEGRAD_SANITIZE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
san_flags=()
if [[ -n $sanitize ]]; then
  san_flags=(-fsanitize="$sanitize")
  echo "note: the build uses -fsanitize=$sanitize; clients are built with it too"
fi

# --- 1. install and inspect the tree -------------------------------------------------------------------
if ! cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1; then
  fail "cmake --install $build --prefix $prefix"
  show "$work/install.log"
  exit 1
fi

for header in acl/acl.h aclnn/acl_meta.h moegrad/tensor.hpp moegrad/status.hpp moegrad/plan.hpp moegrad/ops.hpp; do
  [[ -f $prefix/include/$header ]] || fail "include/$header is not installed"
done
for op in moe_finalize_routing_v2 moe_finalize_routing_v2_grad moe_token_permute_with_routing_map \
          moe_token_permute_with_routing_map_grad moe_init_routing_v2 moe_init_routing_v2_grad \
          moe_token_unpermute_with_routing_map moe_token_unpermute_with_routing_map_grad; do
  [[ -f $prefix/include/aclnnop/aclnn_$op.h ]] || fail "include/aclnnop/aclnn_$op.h is not installed"
done
# Every public header of the source tree, unchanged.
while IFS= read -r -d '' header; do
  rel=${header#"$source_include"/}
  cmp -s "$header" "$prefix/include/$rel" || fail "include/$rel is missing or differs from the source tree"
done < <(find "$source_include" -type f -print0)

mapfile -t libs < <(find "$prefix" -path "$prefix/lib*" -name libmoegrad.so)
if [[ ${#libs[@]} -ne 1 ]]; then
  fail "expected one libmoegrad.so under $prefix/lib*, found ${#libs[@]}: ${libs[*]:-none}"
  exit 1
fi
libdir=$(dirname "${libs[0]}")
config=$(find "$prefix" -name moegradConfig.cmake -print -quit)
[[ -n $config ]] || fail "no moegradConfig.cmake (CMake package) installed"
[[ -f $(dirname "${config:-/none}")/moegradConfigVersion.cmake ]] || fail "no moegradConfigVersion.cmake next to the config"
if [[ ! -x $prefix/bin/moegrad ]]; then
  fail "bin/moegrad is not installed"
elif command -v ldd >/dev/null; then
  missing=$(env -u LD_LIBRARY_PATH ldd "$prefix/bin/moegrad" | grep 'not found' || true)
  [[ -z $missing ]] || fail "bin/moegrad does not find its libraries without LD_LIBRARY_PATH: $missing"
fi

# The installed headers need nothing outside the installed tree (no src/, no Highway).
while IFS= read -r -d '' header; do
  rel=${header#"$prefix/include"/}
  case $rel in
    *.h) compile=(gcc -std=c99 -pedantic-errors -Wall -Wextra -Werror -x c) ;;
    *.hpp) compile=(g++ -std=c++17 -Wall -Wextra -Werror -x c++) ;;
    *) continue ;;
  esac
  if ! printf '#include "%s"\n' "$rel" | "${compile[@]}" -fsyntax-only -I"$prefix/include" - >"$work/header.log" 2>&1; then
    fail "installed $rel does not compile on its own (${compile[*]})"
    show "$work/header.log" 10
  fi
done < <(find "$prefix/include" -type f -print0)

# --- 2. CANN-style clients -----------------------------------------------------------------------------
shopt -s nullglob
clients=("$here"/*_client.cpp)
shopt -u nullglob
[[ ${#clients[@]} -gt 0 ]] || fail "no *_client.cpp in $here"
for client in "${clients[@]}"; do
  name=$(basename "$client" .cpp)
  if ! (cd "$work" && g++ -std=c++17 "$client" -I"$prefix/include" -L"$libdir" -lmoegrad ${san_flags[@]+"${san_flags[@]}"} \
          -o "$work/$name") >"$work/$name.build.log" 2>&1; then
    fail "$name does not build with g++ -std=c++17 $name.cpp -I<prefix>/include -L<libdir> -lmoegrad"
    show "$work/$name.build.log"
    continue
  fi
  rc=0
  LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 300 "$work/$name" >"$work/$name.out" 2>&1 || rc=$?
  last=$(tail -n 1 "$work/$name.out")
  if [[ $rc -ne 0 || $last != "RESULT: PASS" ]]; then
    fail "$name exited with $rc, last line \"$last\""
    show "$work/$name.out"
  else
    echo "ok: $name ($(wc -l <"$work/$name.out") lines of output, RESULT: PASS)"
  fi
done

# --- 3. a CMake consumer -------------------------------------------------------------------------------
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
consumer_flags=()
if [[ -n $sanitize ]]; then
  consumer_flags=(-DCMAKE_CXX_FLAGS="${san_flags[*]}" -DCMAKE_EXE_LINKER_FLAGS="${san_flags[*]}")
fi
if ! cmake -S "$here/consumer" -B "$work/consumer" ${generator[@]+"${generator[@]}"} -DCMAKE_BUILD_TYPE=Release \
       -DCMAKE_PREFIX_PATH="$prefix" ${consumer_flags[@]+"${consumer_flags[@]}"} >"$work/consumer.log" 2>&1 ||
   ! cmake --build "$work/consumer" >>"$work/consumer.log" 2>&1; then
  fail "the find_package(moegrad) consumer does not configure or build"
  show "$work/consumer.log"
else
  found=$(sed -n 's/^moegrad_DIR:PATH=//p' "$work/consumer/CMakeCache.txt")
  [[ $found == "$prefix"/* ]] || fail "find_package(moegrad) found $found, not the package under $prefix"
  rc=0
  # No LD_LIBRARY_PATH: the imported target's location must be enough.
  timeout 300 "$work/consumer/moegrad_consumer" >"$work/consumer.out" 2>&1 || rc=$?
  last=$(tail -n 1 "$work/consumer.out")
  if [[ $rc -ne 0 || $last != "RESULT: PASS" ]]; then
    fail "moegrad_consumer exited with $rc, last line \"$last\""
    show "$work/consumer.out"
  else
    echo "ok: consumer (find_package(moegrad), moegrad::moegrad)"
  fi
fi

if [[ $failures -ne 0 ]]; then
  echo "install test: $failures failure(s)"
  exit 1
fi
echo "install test: PASS (prefix layout, ${#clients[@]} client(s), CMake consumer)"
