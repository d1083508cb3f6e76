#!/usr/bin/env python3
"""Strided rows against tiny values: the combine (MoeTokenUnpermuteWithRoutingMap), the finalize gradient
(MoeFinalizeRoutingV2Grad) and the forward finalize (MoeFinalizeRoutingV2, mode 0, no bias) on rows of inner
stride 2 (every other column of a (rows, 2H) bf16 tensor), which take the element-by-element loops, with
ordinary values and with tiny ones (scaled by 2^-70 with their weights, so that the products fall below
fp32's normal range), alternated; medians of 11 calls per run and of the runs, in ms, and the ratio of the
speeds (docs/performance.md, "Strided rows with tiny values").

  PYTHONPATH=build/python .venv/bin/python bench/strided_values.py [RUNS]
"""
import sys, time, statistics, torch
import moegrad.torch as mt
torch.manual_seed(0)
T, E, K, H = 256, 128, 8, 2048
dt = torch.bfloat16
scores = torch.rand(T, E)
top = scores.topk(K, dim=1).indices
rmap = torch.zeros(T, E, dtype=torch.bool); rmap.scatter_(1, top, True)
probs = torch.rand(T, E, dtype=dt)
tokens = torch.randn(T, H).to(dt)
outs = mt.moe_token_permute_with_routing_map(tokens, rmap, probs, num_out_tokens=T * K)
sidx = outs[2]
N = T * K
idx = torch.randperm(N).to(torch.int32)
def strided(rows, tiny):
    base = torch.rand(rows, 2 * H) * 2 - 1
    if tiny: base = base * 2.0 ** -70
    return base.to(dt)[:, ::2]
def scale_of(t, tiny):
    return (t.float() * (2.0 ** -70 if tiny else 1.0)).to(t.dtype)
def combine(tiny):
    x, p = strided(N, tiny), scale_of(probs, tiny)
    return lambda: mt.moe_token_unpermute_with_routing_map(x, sidx, rmap, p, restore_shape=(T, H))
def finalize_grad(tiny):
    g, x = strided(T, tiny), strided(N, tiny)
    s = scale_of(torch.rand(T, K, dtype=dt), tiny)
    return lambda: mt.moe_finalize_routing_v2_grad(g, idx, x, s)
def forward_finalize(tiny):
    x = strided(N, tiny)
    s = scale_of(torch.rand(T, K, dtype=dt), tiny)
    return lambda: mt.moe_finalize_routing_v2(x, idx, scales=s)
def time_of(f):
    f()
    ts = []
    for _ in range(11):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts)
runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
for name, make in (("combine", combine), ("finalize grad", finalize_grad), ("forward finalize", forward_finalize)):
    res = {False: [], True: []}
    for rep in range(runs):
        for tiny in (False, True):
            res[tiny].append(time_of(make(tiny)))
    n, t = statistics.median(res[False]), statistics.median(res[True])
    print(f"strided {name} bf16 T={T} H={H}: normal {n*1e3:.3f} ms tiny {t*1e3:.3f} ms tiny/normal speed {n/t:.2f}")
