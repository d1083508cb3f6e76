#!/usr/bin/python3
"""Tiny against normal values on one build: `moegrad bench --values normal` and `--values tiny` alternated
run by run (normal, tiny, then tiny, normal, ...), printing per row each run's paired % of copy and the median
of the per-run ratio tiny / normal. A row whose speed does not depend on the values has a ratio near 1.

    /usr/bin/python3 bench/compare_values.py --runs 4 -- --preset deepseek-v3 --tokens 1024 --dtype bf16 \\
        --op finalize-routing-v2-grad

Exit status 1 when a run fails or a row is not verified against the scalar reference.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def main(argv):
    own, bench_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(usage="%(prog)s [--runs N] [--moegrad PATH] [-- moegrad bench options]")
    parser.add_argument("--runs", type=int, default=4, help="runs of each value set (default 4)")
    parser.add_argument("--moegrad", default="build/tools/moegrad", help="the moegrad tool")
    args = parser.parse_args(own)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if "--values" in bench_args or "--json" in bench_args:
        parser.error("--values and --json are this script's to set")
    runs = {"normal": [], "tiny": []}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        for r in range(args.runs):
            for values in (("normal", "tiny") if r % 2 == 0 else ("tiny", "normal")):
                cmd = [args.moegrad, "bench", *bench_args, "--values", values, "--json", out]
                if subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode != 0:
                    print(f"compare_values: failed: {' '.join(cmd)}", file=sys.stderr)
                    return 1
                with open(out) as f:
                    rows = json.load(f)["rows"]
                if not all(row["verified"] for row in rows):
                    print(f"compare_values: a row was not verified: {' '.join(cmd)}", file=sys.stderr)
                    return 1
                runs[values].append({f"{row['op']} {row['mode']} {row['dtype']}": row["pct_copy"] for row in rows})
            print(f"compare_values: run {r + 1}/{args.runs} done", file=sys.stderr)
    print(f"{'row':<64} {'normal, each run':<22} {'tiny, each run':<22} normal  tiny  tiny/normal")
    for key in runs["normal"][0]:
        normal = [run[key] for run in runs["normal"]]
        tiny = [run[key] for run in runs["tiny"]]
        ratio = statistics.median(t / n for t, n in zip(tiny, normal))
        print(f"{key:<64} {' '.join(f'{v:.0f}' for v in normal):<22} {' '.join(f'{v:.0f}' for v in tiny):<22} "
              f"{statistics.median(normal):5.0f}% {statistics.median(tiny):4.0f}%  {ratio:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
