#!/usr/bin/python3
"""The command-line tool on malformed and on accepted command lines: every bad argument is one line on stderr
and exit status 2 before anything runs (no benchmark, no --json file), never a crash or an uncaught exception;
a bad MOEGRAD_NUM_THREADS is one warning and the default thread count; MOEGRAD_MAX_SIMD caps the SIMD target
(a name the build does not know: one warning, every target). Usage: tool_args_test.py PATH/moegrad.

Each case: the arguments ("{json}" stands for a --json path and "{svg}" for a --plot path in a fresh temporary
folder, which must still not exist afterwards when the case fails), extra environment, the expected exit status and a substring of stderr.
A failing case must also print exactly one line on stderr and finish in a few seconds. A small --sweep with
--values tiny must write a well-formed SVG (parsed with xml.etree: a line per row and one for the copy rate) and
a JSON document with one report per size. Last, an allocation that
fails in spite of the up-front checks (a small RLIMIT_AS) must be the one line "moegrad: out of memory".
"""

import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

MAX_THREADS = 4096
THREADS_RULE = "must be an integer in 1..4096, not "
TOKENS_RULE = "--tokens must be an integer in 1..9223372036854775807, not "
SECONDS_RULE = "--seconds must be a number in 0..1000000, not "
SEED_RULE = "--seed must be an integer in 0..18446744073709551615, not "
VALUES_RULE = "--values must be tiny, normal or mixed, not "
EVICT_RULE = "--evict-mib must be an integer in 1..65536, not "
SWEEP_RULE = "--sweep must be tokens=N,N,... (1 to 32 different integers in 1..9223372036854775807), not "
PLOT_RULE = "--plot must be a file name ending in .svg, not "
FAST_S = 5.0  # a refused command line runs nothing: far less than any benchmark or self-test

# The default thread count: every CPU the process may use (as the library counts them), at most 4096.
DEFAULT_THREADS = min(len(os.sched_getaffinity(0)), MAX_THREADS)
ENV_WARNING = "is not an integer in 1..4096; using %d threads (every CPU)" % DEFAULT_THREADS

# (arguments, environment, exit status, stderr substring)
BAD = [
    # --threads: one range for every command, checked before anything runs (100000 crashed in the copy
    # bandwidth measurement, 4294967297 ran 1 thread, 2147483648 the default)
    (["--threads", "0"], {}, 2, "--threads " + THREADS_RULE + "'0'"),
    (["--threads", "-1"], {}, 2, "--threads " + THREADS_RULE + "'-1'"),
    (["info", "--threads", "100000"], {}, 2, "--threads " + THREADS_RULE + "'100000'"),
    (["bench", "--threads", "100000", "--json", "{json}"], {}, 2, THREADS_RULE + "'100000'"),
    (["--threads", "4097", "check"], {}, 2, THREADS_RULE + "'4097'"),
    (["--threads", "2147483648"], {}, 2, THREADS_RULE + "'2147483648'"),
    (["--threads", "4294967297"], {}, 2, THREADS_RULE + "'4294967297'"),
    (["--threads", "abc"], {}, 2, THREADS_RULE + "'abc'"),
    (["--threads", ""], {}, 2, THREADS_RULE + "''"),
    (["--threads", "8 "], {}, 2, THREADS_RULE + "'8 '"),
    # --tokens: an integer, no overflow, and a size the machine can hold
    (["bench", "--tokens", "-1", "--json", "{json}"], {}, 2, TOKENS_RULE + "'-1'"),
    (["--tokens", "0"], {}, 2, TOKENS_RULE + "'0'"),
    (["--tokens", "1e3", "--json", "{json}"], {}, 2, TOKENS_RULE + "'1e3'"),
    (["--tokens", "99999999999999999999"], {}, 2, TOKENS_RULE + "'99999999999999999999'"),
    (["--tokens", "9223372036854775808"], {}, 2, TOKENS_RULE + "'9223372036854775808'"),
    (["bench", "--tokens", "1000000000000", "--json", "{json}"], {}, 2, "moegrad: --tokens 1000000000000 needs "),
    (["--tokens", "1000000000000"], {}, 2, " GiB, have "),
    (["--tokens", "9223372036854775807"], {}, 2, "--tokens 9223372036854775807 needs more than "),
    # --seconds: finite, 0..1000000
    (["check", "--seconds", "nan"], {}, 2, SECONDS_RULE + "'nan'"),
    (["check", "--seconds", "inf"], {}, 2, SECONDS_RULE + "'inf'"),
    (["check", "--seconds", "-inf"], {}, 2, SECONDS_RULE + "'-inf'"),
    (["check", "--seconds", "-1"], {}, 2, SECONDS_RULE + "'-1'"),
    (["check", "--seconds", "abc"], {}, 2, SECONDS_RULE + "'abc'"),
    (["check", "--seconds", "1e7"], {}, 2, SECONDS_RULE + "'1e7'"),
    (["check", "--seconds", "0x10"], {}, 2, SECONDS_RULE + "'0x10'"),
    (["check", "--seconds", ""], {}, 2, SECONDS_RULE + "''"),
    # --seed: 0..2^64-1
    (["check", "--seed", "-1"], {}, 2, SEED_RULE + "'-1'"),
    (["check", "--seed", "18446744073709551616"], {}, 2, SEED_RULE + "'18446744073709551616'"),
    (["check", "--seed", "abc"], {}, 2, SEED_RULE + "'abc'"),
    # a missing value: one line, not two
    (["--tokens"], {}, 2, "moegrad: --tokens needs a value"),
    (["bench", "--preset"], {}, 2, "--preset needs a value"),
    (["bench", "--dtype"], {}, 2, "--dtype needs a value"),
    (["bench", "--op"], {}, 2, "--op needs a value"),
    (["bench", "--json"], {}, 2, "--json needs a value"),
    (["--json", "--tokens", "8"], {}, 2, "--json needs a value"),
    (["check", "--seconds"], {}, 2, "--seconds needs a value"),
    (["check", "--seed"], {}, 2, "--seed needs a value"),
    (["info", "--threads"], {}, 2, "--threads needs a value"),
    # unknown arguments and values
    (["--frob"], {}, 2, "moegrad: unknown argument '--frob'"),
    (["bench", "-x"], {}, 2, "unknown argument '-x'"),
    (["frob"], {}, 2, "unknown argument 'frob'"),
    (["bench", "--preset", "nope", "--json", "{json}"], {}, 2, "unknown preset 'nope'"),
    (["bench", "--preset", ""], {}, 2, "--preset must be non-empty, not ''"),
    (["bench", "--dtype", "f64", "--json", "{json}"], {}, 2,
     "--dtype must be f32, f16, bf16, bf16+f32 or all, not 'f64'"),
    (["bench", "--dtype", "f32+bf16", "--json", "{json}"], {}, 2, "--dtype must be f32, f16, bf16, bf16+f32 or all"),
    (["bench", "--op", "nope", "--json", "{json}"], {}, 2, "unknown --op 'nope'; one of: all,"),
    (["check", "--op", "nope"], {}, 2, "unknown --op 'nope'; one of: all,"),
    # an operator without routing weights has no mixed precision to run
    (["bench", "--op", "init-routing-v2-grad", "--dtype", "bf16+f32", "--json", "{json}"], {}, 2,
     "moegrad bench: --op init-routing-v2-grad has no routing weights: run it with --dtype f32, f16, bf16 or all"),
    # an option of another command (with none the command is bench; the command may come last)
    (["check", "--tokens", "8"], {}, 2, "moegrad: check does not take --tokens (see moegrad --help)"),
    (["check", "--json", "{json}"], {}, 2, "check does not take --json"),
    (["check", "--preset", "mixtral-8x7b"], {}, 2, "check does not take --preset"),
    (["check", "--dtype", "f32"], {}, 2, "check does not take --dtype"),
    (["bench", "--seconds", "1", "--json", "{json}"], {}, 2, "bench does not take --seconds"),
    (["--seed", "1", "--json", "{json}"], {}, 2, "bench does not take --seed"),
    (["info", "--json", "{json}"], {}, 2, "info does not take --json"),
    (["info", "--preset", "x"], {}, 2, "info does not take --preset"),
    (["info", "--op", "all"], {}, 2, "info does not take --op"),
    (["--seconds", "1", "info"], {}, 2, "info does not take --seconds"),
    (["--tokens", "5", "check"], {}, 2, "check does not take --tokens"),
    # --json is opened before the run: a bad path fails at once
    (["bench", "--json", "/nonexistent-dir/x.json"], {}, 2,
     "moegrad: --json /nonexistent-dir/x.json: No such file or directory"),
    (["--json", "/"], {}, 2, "moegrad: --json /: Is a directory"),
    (["bench", "--json", ""], {}, 2, "--json must be non-empty, not ''"),
    # --values: the magnitudes of the inputs
    (["bench", "--values", "small", "--json", "{json}"], {}, 2, VALUES_RULE + "'small'"),
    (["--values", "", "--json", "{json}"], {}, 2, "--values must be non-empty, not ''"),
    (["--values", "tiny,normal"], {}, 2, VALUES_RULE + "'tiny,normal'"),
    (["bench", "--values"], {}, 2, "--values needs a value"),
    (["check", "--values", "tiny"], {}, 2, "check does not take --values"),
    (["info", "--values", "normal"], {}, 2, "info does not take --values"),
    # --sweep: tokens=N,N,... with each N >= 1, different, at most 32 of them; not with --tokens
    (["bench", "--sweep", "1,16", "--json", "{json}"], {}, 2, SWEEP_RULE + "'1,16'"),
    (["--sweep", "tokens=", "--json", "{json}"], {}, 2, SWEEP_RULE + "'tokens='"),
    (["--sweep", "tokens=0,16"], {}, 2, SWEEP_RULE + "'tokens=0,16'"),
    (["--sweep", "tokens=-1"], {}, 2, SWEEP_RULE + "'tokens=-1'"),
    (["--sweep", "tokens=1,,16"], {}, 2, SWEEP_RULE + "'tokens=1,,16'"),
    (["--sweep", "tokens=1,16,"], {}, 2, SWEEP_RULE + "'tokens=1,16,'"),
    (["--sweep", "tokens=1,1"], {}, 2, SWEEP_RULE + "'tokens=1,1'"),
    (["--sweep", "tokens=1e3"], {}, 2, SWEEP_RULE + "'tokens=1e3'"),
    (["--sweep", "tokens=99999999999999999999"], {}, 2, SWEEP_RULE + "'tokens=99999999999999999999'"),
    (["--sweep", "tokens=" + ",".join(str(n) for n in range(1, 34))], {}, 2, SWEEP_RULE + "'tokens=1,2,3,"),
    (["--sweep", "experts=1,2"], {}, 2, SWEEP_RULE + "'experts=1,2'"),
    (["bench", "--sweep"], {}, 2, "--sweep needs a value"),
    (["check", "--sweep", "tokens=1"], {}, 2, "check does not take --sweep"),
    (["--sweep", "tokens=1,16", "--tokens", "8", "--json", "{json}", "--plot", "{svg}"], {}, 2,
     "moegrad: --sweep and --tokens do not go together"),
    (["--sweep", "tokens=1,1000000000000", "--json", "{json}", "--plot", "{svg}"], {}, 2,
     "moegrad: --sweep tokens 1000000000000 needs "),
    # --plot: an SVG file, only with a sweep, opened before the run
    (["--sweep", "tokens=1", "--plot", "chart.png"], {}, 2, PLOT_RULE + "'chart.png'"),
    (["--sweep", "tokens=1", "--plot", ".svg"], {}, 2, PLOT_RULE + "'.svg'"),
    (["--sweep", "tokens=1", "--plot", ""], {}, 2, "--plot must be non-empty, not ''"),
    (["bench", "--plot", "{svg}", "--json", "{json}"], {}, 2, "moegrad: --plot needs --sweep"),
    (["--tokens", "8", "--plot", "{svg}"], {}, 2, "moegrad: --plot needs --sweep"),
    (["bench", "--plot"], {}, 2, "--plot needs a value"),
    (["info", "--plot", "{svg}"], {}, 2, "info does not take --plot"),
    # --evict-mib: the paired copy's buffers, 1..65536 MiB, and only what the memory holds
    (["bench", "--evict-mib", "0", "--json", "{json}"], {}, 2, EVICT_RULE + "'0'"),
    (["bench", "--evict-mib", "65537", "--json", "{json}"], {}, 2, EVICT_RULE + "'65537'"),
    (["bench", "--evict-mib", "-8", "--json", "{json}"], {}, 2, EVICT_RULE + "'-8'"),
    (["bench", "--evict-mib", "1.5", "--json", "{json}"], {}, 2, EVICT_RULE + "'1.5'"),
    (["bench", "--evict-mib"], {}, 2, "--evict-mib needs a value"),
    (["info", "--evict-mib", "64"], {}, 2, "info does not take --evict-mib"),
    (["check", "--evict-mib", "64"], {}, 2, "check does not take --evict-mib"),
    (["bench", "--evict-mib", "65536", "--json", "{json}"], {}, 2, "moegrad: --evict-mib 65536 needs 128.1 GiB, have "),
    (["--sweep", "tokens=1", "--plot", "/nonexistent-dir/x.svg"], {}, 2,
     "moegrad: --plot /nonexistent-dir/x.svg: No such file or directory"),
    (["--sweep", "tokens=1", "--values", "tiny", "--preset", "nope", "--plot", "{svg}"], {}, 2,
     "unknown preset 'nope'"),
    # one command only
    (["bench", "check"], {}, 2, "more than one command (bench, check)"),
    (["check", "check"], {}, 2, "more than one command (check, check)"),
    (["info", "--threads", "2", "bench"], {}, 2, "more than one command (info, bench)"),
]

# (arguments, environment, exit status, stderr substring or None, stdout substring)
GOOD = [
    (["info"], {}, 0, None, "threads:        %d (every CPU)" % DEFAULT_THREADS),
    (["info", "--threads", "4096"], {}, 0, None, "threads:        4096 (--threads)"),
    (["--threads", "1", "info"], {}, 0, None, "threads:        1 (--threads)"),
    # a bad MOEGRAD_NUM_THREADS: one warning from the library, the default thread count, exit 0
    (["info"], {"MOEGRAD_NUM_THREADS": "abc"}, 0, "moegrad: MOEGRAD_NUM_THREADS=abc " + ENV_WARNING,
     "threads:        %d (every CPU; MOEGRAD_NUM_THREADS=abc ignored)" % DEFAULT_THREADS),
    (["info"], {"MOEGRAD_NUM_THREADS": "100000"}, 0, "moegrad: MOEGRAD_NUM_THREADS=100000 " + ENV_WARNING,
     "threads:        %d (every CPU;" % DEFAULT_THREADS),
    (["info"], {"MOEGRAD_NUM_THREADS": "3"}, 0, "", "threads:        3 (MOEGRAD_NUM_THREADS=3)"),
    # the seconds as given (0.5 used to print as "0 s")
    (["check", "--seconds", "0", "--seed", "1", "--op", "finalize-routing-v2"], {}, 0, None, ", 0 s, "),
    (["check", "--seconds", "0.25", "--seed", "18446744073709551615", "--op", "permute"], {}, 0, None,
     "seed 18446744073709551615, 0.25 s, "),
    (["--preset", "mixtral-8x7b", "--tokens", "8", "--dtype", "f32", "--op", "finalize-routing-v2", "--json",
      "{json}", "bench"], {}, 0, None, "MoeFinalizeRoutingV2"),
    # bf16 tokens with fp32 routing weights: its own dtype name in the table (and the JSON)
    (["bench", "--preset", "mixtral-8x7b", "--tokens", "8", "--dtype", "bf16+f32", "--op", "permute-grad",
      "--json", "{json}"], {}, 0, None, " bf16+f32 "),
    # ... and runs the token dtypes only with --dtype all
    (["bench", "--preset", "mixtral-8x7b", "--tokens", "8", "--op", "init-routing-v2-grad", "--json", "{json}"], {},
     0, None, "MoeInitRoutingV2Grad"),
    # --values: every row still verified against the reference, the kind named in the table
    (["bench", "--preset", "mixtral-8x7b", "--tokens", "8", "--dtype", "bf16", "--op", "finalize-routing-v2-grad",
      "--values", "tiny", "--json", "{json}"], {}, 0, None, ", tiny values, "),
    (["bench", "--preset", "mixtral-8x7b", "--tokens", "8", "--dtype", "f16", "--op", "token-unpermute-with-routing-map",
      "--values", "MIXED"], {}, 0, None, ", mixed values, "),
    # the paired copy as asked, named in the table's header; by default twice the last-level cache (info shows it)
    (["bench", "--preset", "mixtral-8x7b", "--tokens", "8", "--dtype", "f32", "--op", "permute", "--evict-mib", "16",
      "--json", "{json}"], {}, 0, None, "copy bandwidth (16 MiB copy, streaming stores"),
    (["info"], {}, 0, None, " MiB last level, as reported (bench copies "),
    (["info"], {}, 0, None, ", the faster walk, bytes read, median), "),
    # the write half of the copy alone (the dispatches' ceiling)
    (["info"], {}, 0, None, "write bandwidth: "),
    # the yardstick copy's walk, the faster of the two on this machine, with both rates
    (["info"], {}, 0, None, "copy walk:      "),
    (["info"], {}, 0, None, " GB/s, the faster)"),
    (["--help"], {}, 0, "",
     "--evict-mib N         MiB in each buffer of the copy made before every timed call, 1..65536"),
    (["--help"], {}, 0, "", "--threads N             worker threads, 1..4096"),
    (["--help"], {}, 0, "", "--values tiny|normal|mixed"),
    (["--version"], {}, 0, "", "moegrad "),
]


def run(tool, args, env_extra, json_path, address_space=None):
    env = {k: v for k, v in os.environ.items() if k not in ("MOEGRAD_NUM_THREADS", "MOEGRAD_MAX_SIMD")}
    env.update(env_extra)
    svg_path = os.path.join(os.path.dirname(json_path), "out.svg")
    argv = [tool] + [a.replace("{json}", json_path).replace("{svg}", svg_path) for a in args]

    def limit():
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    start = time.monotonic()
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120,
                       preexec_fn=limit)
    return p, time.monotonic() - start


def sanitized(tool):
    """A sanitizer build reserves terabytes of address space for its shadow memory: no RLIMIT_AS there."""
    with open(tool, "rb") as f:
        data = f.read()
    return any(s in data for s in (b"__asan_init", b"__tsan_init", b"__msan_init"))


def describe(args, env):
    return " ".join(["%s=%s" % kv for kv in env.items()] + ["moegrad"] + [repr(a) if a == "" else a for a in args])


def check_sweep(tool, json_path, svg_path):
    """A small sweep of two rows at two sizes with tiny values and a 64 MiB eviction copy: the table, the JSON
    and the SVG."""
    args = ["bench", "--preset", "mixtral-8x7b", "--dtype", "bf16", "--op", "finalize-routing-v2-grad",
            "--values", "tiny", "--sweep", "tokens=1,16", "--evict-mib", "64", "--json", "{json}", "--plot", "{svg}"]
    p, _ = run(tool, args, {}, json_path)
    name = describe(args, {})
    if p.returncode != 0:
        return ["%s: exit status %d (stderr %r)" % (name, p.returncode, p.stderr)]
    rows = ["MoeFinalizeRoutingV2Grad dropless scales+bias bf16", "MoeFinalizeRoutingV2Grad drop-pad scales bf16"]
    problems = []
    for title in rows + ["tokens 1,16, tiny values", "overhead", "cold copy", "warm over", "(64 MiB copy, "]:
        if title not in p.stdout:
            problems.append("%s: stdout does not contain %r:\n%s" % (name, title, p.stdout))
    try:
        with open(json_path, encoding="utf-8") as f:
            doc = json.load(f)
        sizes = [(r["tokens"], r["values"], len(r["rows"]), all(row["verified"] for row in r["rows"]))
                 for r in doc["sweep"]]
        if sizes != [(1, "tiny", 2, True), (16, "tiny", 2, True)]:
            problems.append("%s: JSON sweep (tokens, values, rows, verified) %r" % (name, sizes))
        evictions = [r["eviction_bytes"] for r in doc["sweep"]]
        if evictions != [64 << 20, 64 << 20]:
            problems.append("%s: JSON eviction_bytes %r, expected 64 MiB at each size" % (name, evictions))
        walks = {r.get("copy_walk") for r in doc["sweep"]}
        if len(walks) != 1 or not walks <= {"four pages in step", "page after page"}:
            problems.append("%s: JSON copy_walk %r, expected one of the two walks for every size" % (name, walks))
        for key in ("cold_copy_same_size_s", "warm_median_s"):
            times = [row.get(key, 0) for r in doc["sweep"] for row in r["rows"]]
            if not all(isinstance(t, float) and t > 0 for t in times):
                problems.append("%s: JSON %s %r" % (name, key, times))
    except (OSError, ValueError, KeyError, TypeError) as e:
        problems.append("%s: JSON: %s" % (name, e))
    try:
        root = ET.parse(svg_path).getroot()
        ns = "{http://www.w3.org/2000/svg}"
        lines = root.findall(ns + "polyline")
        texts = [t.text for t in root.iter(ns + "text")]
        if root.tag != ns + "svg":
            problems.append("%s: SVG root %r" % (name, root.tag))
        # two panels (GB/s, % of the paired copy): in each a line per row and one reference line (the
        # copy rate, 100%), each through both sizes
        if len(lines) != 6 or any(len(l.get("points").split()) != 2 for l in lines):
            problems.append("%s: SVG polylines %r" % (name, [l.get("points") for l in lines]))
        for label in rows + ["1", "16"]:
            if label not in texts:
                problems.append("%s: SVG has no text %r (%r)" % (name, label, texts))
        if not any(t and t.startswith("copy rate (64 MiB copy paired") for t in texts):
            problems.append("%s: SVG has no copy-rate legend (%r)" % (name, texts))
        if not any(t and t.startswith("% of the paired copy") for t in texts):
            problems.append("%s: SVG has no %%-of-copy panel (%r)" % (name, texts))
        # the lower panel's 100% line: one y for both sizes
        hundred = [l for l in lines[3:] if l.get("stroke") == "black"]
        if len(hundred) != 1 or len({p.split(",")[1] for p in hundred[0].get("points").split()}) != 1:
            problems.append("%s: SVG has no flat 100%% line in the lower panel (%r)" % (name, hundred))
    except (OSError, ET.ParseError) as e:
        problems.append("%s: SVG: %s" % (name, e))
    for path in (json_path, svg_path):
        if os.path.exists(path):
            os.remove(path)
    return problems


def check_max_simd(tool, json_path):
    """MOEGRAD_MAX_SIMD: `info` and `check` report the named target (any case), or the default where the CPU
    lacks it; a name this build does not have is one warning line and the default target, exit status 0; a
    capped `check` still passes. Returns the problems and the number of command lines run."""
    def target(env):
        p, _ = run(tool, ["info", "--threads", "1"], env, json_path)
        line = [l for l in p.stdout.splitlines() if l.startswith("SIMD target:")]
        return p, (line[0].split(":", 1)[1].strip() if line else None)

    problems = []
    _, default = target({})
    if default is None:
        return ["info: no 'SIMD target:' line"], 1
    # The build's targets, from the warning a name it does not have gives ("... of this build (AVX3, AVX2, ...)"):
    # a build with -DMOEGRAD_SIMD_TARGETS=native has one, the default build every x86 target below.
    p, _ = target({"MOEGRAD_MAX_SIMD": "avx9"})
    built = re.findall(r"of this build \(([^)]*)\)", p.stderr)
    if not built or default not in built[0].split(", "):
        return ["MOEGRAD_MAX_SIMD=avx9 moegrad info: no list of the build's targets with %r in stderr %r" %
                (default, p.stderr)], 2
    built = built[0].split(", ")
    cases = [(default.lower(), default), (default, default)]
    if (default.startswith("AVX3") or default == "AVX2") and len(built) > 1:  # x86 with AVX2, every target built
        cases += [("avx2", "AVX2"), ("Sse4", "SSE4"), ("SCALAR", "SCALAR")]
    for value, expect in cases:
        p, got = target({"MOEGRAD_MAX_SIMD": value})
        if p.returncode != 0 or p.stderr or got != expect:
            problems.append("MOEGRAD_MAX_SIMD=%s moegrad info: exit status %d, stderr %r, target %r, expected %r" %
                            (value, p.returncode, p.stderr, got, expect))
    for value in ("avx9", "", "AVX2 "):
        p, got = target({"MOEGRAD_MAX_SIMD": value})
        warning = "moegrad: MOEGRAD_MAX_SIMD=%s is not a SIMD target of this build (" % value
        lines = p.stderr.splitlines()
        if (p.returncode != 0 or len(lines) != 1 or not lines[0].startswith(warning) or
                not lines[0].endswith("); using every target") or got != default):
            problems.append("MOEGRAD_MAX_SIMD=%r moegrad info: exit status %d, stderr %r, target %r; expected one "
                            "warning %r... and %r" % (value, p.returncode, p.stderr, got, warning, default))
    capped = cases[-1]
    args = ["check", "--seconds", "0", "--seed", "1"]
    p, _ = run(tool, args, {"MOEGRAD_MAX_SIMD": capped[0]}, json_path)
    if p.returncode != 0 or ", %s\n" % capped[1] not in p.stdout or "all cases passed" not in p.stdout:
        problems.append("%s: exit status %d, stdout %r" % (describe(args, {"MOEGRAD_MAX_SIMD": capped[0]}),
                                                           p.returncode, p.stdout))
    return problems, 2 + len(cases) + 3 + 1


def main():
    tool = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        json_path = os.path.join(tmp, "out.json")
        svg_path = os.path.join(tmp, "out.svg")
        for args, env, status, expect in BAD:
            p, seconds = run(tool, args, env, json_path)
            name = describe(args, env)
            lines = p.stderr.splitlines()
            if p.returncode != status:
                failures.append("%s: exit status %d, expected %d (stderr %r)" % (name, p.returncode, status, p.stderr))
            elif len(lines) != 1 or not p.stderr.endswith("\n"):
                failures.append("%s: stderr is %d lines, expected 1: %r" % (name, len(lines), p.stderr))
            elif expect not in lines[0]:
                failures.append("%s: stderr %r does not contain %r" % (name, lines[0], expect))
            elif os.path.exists(json_path):
                failures.append("%s: wrote %s" % (name, json_path))
            elif os.path.exists(svg_path):
                failures.append("%s: wrote %s" % (name, svg_path))
            elif seconds > FAST_S:
                failures.append("%s: took %.1f s to refuse its arguments" % (name, seconds))
            for path in (json_path, svg_path):
                if os.path.exists(path):
                    os.remove(path)
        for args, env, status, expect_err, expect_out in GOOD:
            p, _ = run(tool, args, env, json_path)
            name = describe(args, env)
            if p.returncode != status:
                failures.append("%s: exit status %d, expected %d (stderr %r)" % (name, p.returncode, status, p.stderr))
            elif expect_out not in p.stdout:
                failures.append("%s: stdout does not contain %r:\n%s" % (name, expect_out, p.stdout))
            elif expect_err == "" and p.stderr:
                failures.append("%s: expected nothing on stderr, got %r" % (name, p.stderr))
            elif expect_err and (p.stderr.splitlines() != [expect_err] or not p.stderr.endswith("\n")):
                failures.append("%s: stderr %r, expected exactly the line %r" % (name, p.stderr, expect_err))
            elif "{json}" in args and not os.path.exists(json_path):
                failures.append("%s: no %s" % (name, json_path))
            if os.path.exists(json_path):
                os.remove(json_path)
        # An allocation that fails anyway (here: 200 MiB of address space for info's 2 x 256 MiB copy) is
        # one line and exit status 1, not an uncaught std::bad_alloc. One thread: no thread stacks to map.
        ran = len(BAD) + len(GOOD) + 1
        failures += check_sweep(tool, json_path, svg_path)
        simd_failures, simd_ran = check_max_simd(tool, json_path)
        failures += simd_failures
        ran += simd_ran
        if not sanitized(tool):
            ran += 1
            p, _ = run(tool, ["info", "--threads", "1"], {}, json_path, address_space=200 << 20)
            if p.returncode != 1 or p.stderr != "moegrad: out of memory\n":
                failures.append("info --threads 1 in 200 MiB: exit status %d, stderr %r, expected 1 and "
                                "'moegrad: out of memory'" % (p.returncode, p.stderr))
    for f in failures:
        print("FAIL " + f)
    print("tool_args_test: %d command lines, %d failed" % (ran, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
