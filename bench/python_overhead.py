#!/usr/bin/env python3
"""Per-call cost of moegrad.torch at decode sizes, against the C++ API and PyTorch eager in the same run.

For T = 1 and 16 tokens of DeepSeek-V3's layer (H 7168, E 256, K 8), bf16 tokens with fp32 probabilities,
dropless: the median time of one call of the routing-map dispatch and combine and their gradients
  * through moegrad.torch (argument checks, the output query, allocation, the call);
  * through the extension alone (`moegrad._C`, the C++ API on the same tensors' descriptors and preallocated
    outputs, recorded from the moegrad.torch call): the library's own time in this process;
  * through the extension on outputs allocated afresh for each call (`torch.empty`, as moegrad.torch and any
    PyTorch operator does): what the call costs with its outputs' allocation and first touch, which at these
    sizes can exceed the kernel's own time;
  * through Megatron-style PyTorch eager code for the forwards (bench/compare_torch.py's permute and unpermute);
  * and, for reference, `moegrad bench --tokens T` (the tool's plan + run, in another process).
The three moegrad columns are timed call by call in alternation (the machine's speed drifts), each the median
over the rounds; the eager code after them, in rounds of its own (a quarter as many): its large temporaries,
freed, leave caches and the allocator cold for whatever call follows (interleaved, the 16-token unpermute's
"Python adds" measured 246-276 us, 9-12 us with no eager call in the rounds); "Python adds" is moegrad.torch's
median minus that of the extension on fresh outputs: the Python layer's own cost (checks, the output query, the
autograd wrapper). The recording call takes moegrad.torch's full path (descriptors, output query, call), the
timed ones its usual one.

    PYTHONPATH=build/python .venv/bin/python bench/python_overhead.py [--moegrad build/tools/moegrad] [--rounds N]
        [--threads N]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_torch as ct  # noqa: E402  (Megatron-style references and the timer)
import moegrad.torch as mt  # noqa: E402

H, E, K = 7168, 256, 8
OPS = ["token-permute-with-routing-map", "token-permute-with-routing-map-grad", "token-unpermute-with-routing-map",
       "token-unpermute-with-routing-map-grad"]


def cpp_seconds(tool, tokens):
    """{op key: median seconds} of the C++ API's dropless probs bf16+f32 rows at T = tokens."""
    out = {}
    for op in OPS:
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            subprocess.run([tool, "bench", "--preset", "deepseek-v3", "--tokens", str(tokens), "--dtype", "bf16+f32",
                            "--op", op, "--json", f.name], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            rows = json.load(open(f.name))["rows"]
        out[op] = next(r["median_s"] for r in rows if r["mode"] == "dropless probs")
    return out


def recorded_extension_call(key, call):
    """(result of call(), a function that repeats only its extension call `_C.<key>` on the same descriptors and
    outputs, a function that allocates the outputs afresh as moegrad.torch does and then makes that call): the
    moegrad.torch call is made once with the extension's entries wrapped to record their arguments."""
    extension, real, query, recorded = mt._C, getattr(mt._C, key), getattr(mt._C, key + "_outputs"), {}

    class Recorder:
        def __getattr__(self, name):
            if name == key:
                return lambda *a: (recorded.setdefault("call", a), real(*a))[1]
            if name == key + "_outputs":
                return lambda *a: recorded.setdefault("specs", query(*a))
            return getattr(extension, name)

    # The one-round-trip entry (_C.<key>_call) declines this call, so that it takes the path that hands the
    # extension descriptors and preallocated outputs (the same library call on the same tensors).
    calls = getattr(mt, "_CALLS", {})
    one_trip = calls.get(key)
    mt._C = Recorder()
    if one_trip is not None:
        calls[key] = lambda *a: None
    try:
        result = call()  # holds the outputs the recorded descriptors point at
    finally:
        mt._C = extension
        if one_trip is not None:
            calls[key] = one_trip
    descs, *rest = recorded["call"]
    names = mt._C.OPS[key][0]
    specs = {names.index(n): spec for n, spec in recorded["specs"].items() if spec is not None}

    def fresh():
        d = list(descs)
        outputs = []
        for i, (code, sizes) in specs.items():
            t = torch.empty(sizes, dtype=mt._DTYPES[code])
            outputs.append(t)
            d[i] = (t.data_ptr(), code, t.shape, t.stride())
        real(d, *rest)
        return outputs

    return result, lambda: real(descs, *rest), fresh


def python_calls(tokens, gen):
    """{op key: (moegrad.torch call, the extension's call alone, Megatron-style eager call or None)}; the
    extension calls write into outputs that stay referenced from the returned closures."""
    _, rmap = ct.random_routing(tokens, E, K, gen)
    x = torch.rand(tokens, H, generator=gen).to(torch.bfloat16)
    probs = torch.rand(tokens, E, generator=gen)
    n = tokens * K
    permuted, pprobs, idx = mt.moe_token_permute_with_routing_map(x, rmap, probs, num_out_tokens=n)
    g_perm, g_probs = torch.rand_like(permuted.float()).to(permuted.dtype), torch.rand_like(pprobs)
    out, out_index, token_id, _ = mt.moe_token_unpermute_with_routing_map(permuted, idx, rmap, probs,
                                                                         restore_shape=[tokens, H])
    g_out = torch.rand_like(out.float()).to(out.dtype)
    sorted_tokens = torch.arange(tokens).unsqueeze(0).expand(E, -1).masked_select(rmap.T.contiguous())
    expert_of_row = torch.arange(E).repeat_interleave(rmap.sum(0))
    calls = {
        "token-permute-with-routing-map": (
            lambda: mt.moe_token_permute_with_routing_map(x, rmap, probs, num_out_tokens=n),
            lambda: ct.permute(x, rmap, probs, n, False)),
        "token-permute-with-routing-map-grad": (
            lambda: mt.moe_token_permute_with_routing_map_grad(g_perm, idx, E, tokens, False, g_probs, rmap),
            None),
        "token-unpermute-with-routing-map": (
            lambda: mt.moe_token_unpermute_with_routing_map(permuted, idx, rmap, probs, restore_shape=[tokens, H]),
            lambda: ct.unpermute(permuted, sorted_tokens, probs, expert_of_row, tokens)),
        "token-unpermute-with-routing-map-grad": (
            lambda: mt.moe_token_unpermute_with_routing_map_grad(g_out, out_index, token_id, rmap, permuted,
                                                                 probs, False, [tokens, H]),
            None),
    }
    result = {}
    for op, (ours, eager) in calls.items():
        kept, direct, fresh = recorded_extension_call(op.replace("-", "_"), ours)
        result[op] = (ours, (lambda d=direct, k=kept: d()), fresh, eager)
    return result


def copy_gbps(size=64 << 20, runs=9):
    """GB/s (bytes read + written) of torch's copy_ of `size` bytes into a tensor already touched: the machine's
    state in this run, printed with the rows."""
    src, dst = torch.ones(size, dtype=torch.uint8), torch.zeros(size, dtype=torch.uint8)
    return 2 * size / ct.median_seconds(lambda: dst.copy_(src), warmup=1, min_runs=runs, budget=0) * 1e-9


def alternated_medians(fns, rounds, warmup=20):
    """The median seconds of each of `fns` (None entries give None), timed one call each per round in turn."""
    live = [f for f in fns if f is not None]
    for _ in range(warmup):
        for f in live:
            f()
    times = [[] for _ in fns]
    for _ in range(rounds):
        for i, f in enumerate(fns):
            if f is not None:
                t0 = time.perf_counter()
                f()
                times[i].append(time.perf_counter() - t0)
    return [sorted(t)[len(t) // 2] if t else None for t in times]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--moegrad", default=os.path.join(here, "build", "tools", "moegrad"))
    parser.add_argument("--rounds", type=int, default=2000, help="alternated calls of each kind (default 2000)")
    parser.add_argument("--threads", type=int, default=0,
                        help="threads of moegrad, the tool and torch (default 0: each one's default); 1 keeps a "
                             "loaded machine's other work from stalling a call's second thread")
    args = parser.parse_args()
    if args.threads > 0:
        os.environ["MOEGRAD_NUM_THREADS"] = str(args.threads)  # the tool's
        mt._C.set_num_threads(args.threads)
        torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, moegrad {mt._C.version()} {mt._C.simd_target()}, "
          f"{mt._C.num_threads()} threads (torch {torch.get_num_threads()}); DeepSeek-V3 H={H} E={E} K={K}, "
          f"bf16 tokens, fp32 probs, dropless; copy {copy_gbps():.1f} GB/s")
    print(f"{'op':40} {'T':>3} {'tool':>9} {'extension':>10} {'+ outputs':>10} {'moegrad.torch':>14} "
          f"{'Python adds':>12} {'torch eager':>12}")
    for tokens in (1, 16):
        cpp = cpp_seconds(args.moegrad, tokens)
        with torch.no_grad():
            for op, (ours, direct, fresh, eager) in python_calls(tokens, gen).items():
                t, d, f = alternated_medians([ours, direct, fresh], args.rounds)
                (e,) = alternated_medians([eager], args.rounds // 4 if eager else 0)
                print(f"{op:40} {tokens:>3} {cpp[op] * 1e6:>7.1f}us {d * 1e6:>8.1f}us {f * 1e6:>8.1f}us "
                      f"{t * 1e6:>12.1f}us {(t - f) * 1e6:>10.1f}us {(f'{e * 1e6:.1f}us') if e else '-':>12}")
    print(f"copy {copy_gbps():.1f} GB/s after the rows")


if __name__ == "__main__":
    main()
