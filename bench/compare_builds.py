#!/usr/bin/python3
"""A/B comparison of two builds of libmoegrad on this machine.

Runs `moegrad bench` alternately against the library in DIR_A and the one in DIR_B (A, B, A, B, ...), each
run loading its library through LD_LIBRARY_PATH, and prints for every row the "% of copy" of each run, the
two medians and their difference. Alternating run by run, and comparing the paired % of copy rather than
times, is what makes a difference of a few points visible on a shared machine whose bandwidth drifts.

    /usr/bin/python3 bench/compare_builds.py build-old build-perf --runs 4 -- \\
        --preset deepseek-v3 --tokens 1024 --dtype all --op finalize-routing-v2-grad

With `--sweep tokens=N,...` among the bench options, each row is compared at each token count.

DIR_A and DIR_B are folders holding libmoegrad.so.0 (two build trees, or copies of their libraries). The
options after `--` go to `moegrad bench` unchanged. One tool runs both libraries unless `--own-tools` is given:
then each build runs its own DIR/tools/moegrad, for two builds whose public structs differ (an ABI change).
Rows are paired by preset, operator name, mode and dtype. Exit status 1 when a run fails or a row is not
verified against the scalar reference (or is missing from one build).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

LIBRARY = "libmoegrad.so.0"


def parse_args(argv):
    """This script's options, and after `--` those for `moegrad bench`."""
    own, bench_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(
        usage="%(prog)s DIR_A DIR_B [--runs N] [--moegrad PATH] [-- moegrad bench options]",
        description="Alternate two builds of libmoegrad under `moegrad bench`; per row, % of copy of each.")
    parser.add_argument("dir_a", help="folder with the first build's " + LIBRARY)
    parser.add_argument("dir_b", help="folder with the second build's " + LIBRARY)
    parser.add_argument("--runs", type=int, default=4, help="runs of each build (default 4)")
    parser.add_argument("--moegrad", default=None,
                        help="the moegrad tool (default: tools/moegrad in DIR_B, else in DIR_A)")
    parser.add_argument("--own-tools", action="store_true",
                        help="each build runs its own DIR/tools/moegrad (builds of different ABIs)")
    args = parser.parse_args(own)
    args.bench_args = bench_args
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    for name in ("dir_a", "dir_b"):
        folder = getattr(args, name)
        if not os.path.isfile(os.path.join(folder, LIBRARY)):
            parser.error(f"{folder} holds no {LIBRARY}")
    if args.own_tools:
        for name in ("dir_a", "dir_b"):
            tool = os.path.join(getattr(args, name), "tools", "moegrad")
            if not os.access(tool, os.X_OK):
                parser.error(f"--own-tools: {tool} is not an executable")
    elif args.moegrad is None:
        for folder in (args.dir_b, args.dir_a):
            candidate = os.path.join(folder, "tools", "moegrad")
            if os.access(candidate, os.X_OK):
                args.moegrad = candidate
                break
        else:
            parser.error("no tools/moegrad in DIR_A or DIR_B: give --moegrad")
    return args


def run_once(moegrad, library_dir, bench_args, json_path):
    """One `moegrad bench` run with the library from library_dir; returns its JSON document. A run whose
    results do not match the reference (status 1, rows marked unverified) still counts: an experimental
    build may be timed on purpose with wrong results."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.abspath(library_dir)
    command = [moegrad, "bench", *bench_args, "--json", json_path]
    if os.path.exists(json_path):
        os.remove(json_path)
    result = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if result.returncode not in (0, 1) or not os.path.exists(json_path):
        sys.stderr.write(result.stderr)
        raise SystemExit(f"compare_builds: `{' '.join(command)}` failed (status {result.returncode})")
    with open(json_path, encoding="utf-8") as f:
        return json.load(f)


def main(argv):
    args = parse_args(argv)
    builds = (("A", args.dir_a), ("B", args.dir_b))
    pct = {}  # (row name, build) -> [% of copy per run]
    order = []
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        json_path = os.path.join(tmp, "run.json")
        for run in range(args.runs):
            for build, folder in builds:
                tool = os.path.join(folder, "tools", "moegrad") if args.own_tools else args.moegrad
                doc = run_once(tool, folder, args.bench_args, json_path)
                # With --sweep the document holds one run per token count, and each row is named by its count.
                sweep = "sweep" in doc
                for part in doc["sweep"] if sweep else [doc]:
                    for row in part["rows"]:
                        tokens = f" T={part['tokens']}" if sweep else ""
                        name = f"{part['preset']}{tokens} {row['op']} {row['mode']} {row['dtype']}"
                        if name not in order:
                            order.append(name)
                        pct.setdefault((name, build), []).append(row["pct_copy"])
                        if not row["verified"]:
                            failed.append(f"{name}: not verified against the reference (build {build}, run {run + 1})")
                print(f"compare_builds: run {run + 1}/{args.runs} of build {build} done", file=sys.stderr)

    if not order:
        raise SystemExit("compare_builds: `moegrad bench` reported no rows")
    print(f"A = {args.dir_a}, B = {args.dir_b}; {args.runs} alternated runs each; % of copy (paired)")
    width = max(len(name) for name in order)
    print(f"{'row':<{width}}  {'A, each run':<24} {'B, each run':<24} {'A':>5} {'B':>5} {'B - A':>6}")
    for name in order:
        a, b = pct.get((name, "A"), []), pct.get((name, "B"), [])
        runs_a = " ".join(f"{v:.0f}" for v in a)
        runs_b = " ".join(f"{v:.0f}" for v in b)
        if not a or not b:
            print(f"{name:<{width}}  {runs_a:<24} {runs_b:<24} (row missing from one build)")
            failed.append(f"{name}: missing from one build")
            continue
        med_a, med_b = statistics.median(a), statistics.median(b)
        print(f"{name:<{width}}  {runs_a:<24} {runs_b:<24} {med_a:>4.0f}% {med_b:>4.0f}% {med_b - med_a:>+6.0f}")
    for line in failed:
        print(f"FAILED: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
