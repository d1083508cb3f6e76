#!/usr/bin/env python3
"""Holds the layering of docs/design.md: reads every `#include "..."` of the project's C and C++ files and fails
when a file includes what its layer must never include. Usage: scripts/check_layering.py [checkout]."""
import pathlib
import re
import sys

PUBLIC = ("moegrad/", "acl/", "aclnn/", "aclnnop/")  # the public API folder, include/
SOURCES = (".h", ".hpp", ".cc", ".cpp", ".c")

# (files under this folder, what they never include, why). Prefixes of the included path; the first matching
# exception (a prefix that is allowed although a rule forbids a wider one) wins.
RULES = [
    ("include/", ("src/",), (), "the public headers stand alone when installed"),
    ("src/core/", PUBLIC + ("src/", "hwy/"), ("src/core/",), "core depends on nothing but itself"),
    ("src/backend/", PUBLIC + ("src/entry/", "src/ops/", "src/ref/", "src/testing/"), (),
     "a backend sees problems and core types, never the public API or the rules"),
    ("src/ops/", ("src/entry/", "src/ref/", "src/testing/", "src/backend/cpu/", "hwy/"), (),
     "the rules reach execution only through src/backend/backend.h"),
    ("src/entry/", ("src/ref/", "src/testing/", "src/backend/cpu/kernels/", "hwy/"), (),
     "the entries go through the operator layer"),
    ("src/ref/", ("src/",), ("src/ref/", "src/core/float16.h"),
     "the reference shares only the scalar fp16/bf16 conversions with the library"),
]
# Outside src/: the library only through its public API, the reference and the test-support API.
CLIENTS = ("tests/", "tools/", "fuzz/", "bench/", "python/", "examples/")
CLIENT_ALLOWED = ("src/ref/", "src/testing/")


def includes(path):
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if m:
            yield n, m.group(1)


def violation(rel, inc):
    """The reason `rel` must not include `inc`, or None."""
    # hwy only in the CPU backend (kernels, SIMD target) and tests.
    if inc.startswith("hwy/") and not (rel.startswith("src/backend/cpu/") or rel.startswith("tests/")
                                       or rel.startswith("src/testing/")):
        if not any(rel.startswith(folder) for folder, *_ in RULES):
            return None  # tools and others may use Highway themselves
        return "Highway belongs to the CPU backend"
    if rel.startswith("src/backend/") and not rel.startswith("src/backend/cpu/") and rel != "src/backend/backend.h":
        if inc.startswith("src/backend/cpu/"):
            return "the backend interface knows no implementation (only the registry, src/backend/backend.h)"
    for folder, never, allowed, why in RULES:
        if not rel.startswith(folder):
            continue
        if any(inc.startswith(a) for a in allowed):
            return None
        if any(inc.startswith(p) for p in never):
            return why
        return None
    if rel.startswith(CLIENTS) and inc.startswith("src/") and not inc.startswith(CLIENT_ALLOWED):
        return "outside src/ the library is used through include/, src/ref/ and src/testing/"
    return None


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    failures = 0
    checked = 0
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.suffix not in SOURCES or not path.is_file() or rel.startswith(("build", ".git")):
            continue
        checked += 1
        for n, inc in includes(path):
            why = violation(rel, inc)
            if why:
                print(f"{rel}:{n}: includes \"{inc}\": {why}")
                failures += 1
    print(f"layering: {checked} files, {failures} violation(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
