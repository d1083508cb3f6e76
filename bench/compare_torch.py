#!/usr/bin/env python3
"""moegrad against the PyTorch eager alternative, on the same shapes, in one run.

The PyTorch side is what a training framework runs without fused routing kernels:
  * dispatch: Megatron-style permute from a (T, E) routing map -- masked_select of token ids and probs
    (dropless) or a stable descending argsort per expert cut to the capacity (drop-and-pad), then
    index_select of the token rows;
  * V2 dispatch (MoeInitRoutingV2): a stable sort of the token-major pairs by expert, then index_select of
    the token rows (dropless, the first activeNum rows with active truncation) or index_copy into a zeroed
    (E*C, H) tensor of the pairs under the capacity (drop-and-pad); its backward is autograd's index_add;
  * routing-map combine (MoeTokenUnpermuteWithRoutingMap): Megatron-LM's unpermute -- each permuted row times
    its probability (gathered from probs by the permute's expert-major order), index_add-ed into its token;
    its backward is autograd's (index_select of the gradient rows, and the probabilities' products);
  * combine: the formula MoeFinalizeRoutingV2 computes -- index_select of the expert-output rows named by
    expandedRowIdx (dropped rows masked to zero), plus the gathered expert bias, weighted by the routing
    scales and summed over the top-k (the pattern of Megatron's unpermute).
For the two gradient operators only the backward pass is timed: the forward graph is built once and
torch.autograd.grad(..., retain_graph=True) is timed on it. The forward operators are timed under no_grad.

moegrad is timed by its own tool in the same run (`moegrad bench --json`), whose shapes (preset table,
capacity C = ceil(T*K/E)) this script takes over, so both sides see the same problem sizes and the same kind
of routing: a random top-k of distinct experts per token.

Both sides run each row in its dtypes: bf16+f32 is bf16 tokens with fp32 routing weights (scales, probs and
their gradients), so the PyTorch side multiplies bf16 rows by fp32 weights (type promotion: fp32 products) and
rounds the combined output to bf16, as Megatron's unpermute does with fp32 probabilities.

  PYTHONPATH=build/python .venv/bin/python bench/compare_torch.py [--preset deepseek-v3] [--tokens N] [--dtype bf16|f16|f32|bf16+f32|all]
                                          [--op NAME] [--moegrad build/tools/moegrad] [--json out.json]
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def row_dtypes(name):
    """(tokens' dtype, routing weights' dtype) of a `moegrad bench` dtype name: "bf16", or "bf16+f32"."""
    tokens, _, weights = name.partition("+")
    return DTYPES[tokens], DTYPES[weights or tokens]


def median_seconds(fn, warmup=2, min_runs=5, max_runs=200, budget=0.5):
    for _ in range(warmup):
        fn()
    times = []
    while len(times) < max_runs and (len(times) < min_runs or sum(times) < budget):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# ----- routing data, as the forward routing operators produce it ----------------------------------------

def random_routing(T, E, K, gen):
    """K distinct experts per token (a top-k of random scores) and the (T, E) routing map."""
    experts = torch.rand(T, E, generator=gen).topk(K, dim=1).indices
    routing_map = torch.zeros(T, E, dtype=torch.bool)
    routing_map.scatter_(1, experts, True)
    return experts, routing_map


def init_routing_row_idx(experts, E, capacity):
    """expandedRowIdx of MoeInitRoutingV2 for token-major pairs: the stable expert order (dropless), or
    e*C + position inside expert e, -1 past the capacity (drop-and-pad)."""
    flat = experts.reshape(-1)
    order = torch.sort(flat, stable=True).indices
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel())
    if capacity == 0:
        return rank
    counts = torch.bincount(flat, minlength=E)
    pos = rank - (counts.cumsum(0) - counts)[flat]
    return torch.where(pos < capacity, flat * capacity + pos, torch.full_like(pos, -1))


# ----- the PyTorch eager operators ------------------------------------------------------------------------

def combine(expanded_x, row_idx, scales, bias, expert_idx, drop_pad):
    """out[r] = sum_k scales[r, k] * (expanded_x[row_idx[r*K + k]] + bias[expert_idx[r, k]]), in expanded_x's
    dtype (scales of another dtype: the products in the promoted one)."""
    R, K = scales.shape
    H = expanded_x.shape[-1]
    rows = expanded_x.reshape(-1, H)
    if drop_pad:
        kept = row_idx >= 0
        gathered = rows.index_select(0, row_idx.clamp(min=0)).masked_fill(~kept.unsqueeze(1), 0)
    else:
        gathered = rows.index_select(0, row_idx)
    if bias is not None:
        gathered = gathered + bias.index_select(0, expert_idx.reshape(-1))
    out = (gathered.view(R, K, H) * scales.unsqueeze(-1)).sum(dim=1)
    return out if out.dtype == expanded_x.dtype else out.to(expanded_x.dtype)


def permute(tokens, routing_map, probs, num_out_tokens, drop_and_pad):
    """Megatron-LM's routing-map permute: expert-major rows of tokens and their probabilities."""
    T = tokens.shape[0]
    E = routing_map.shape[1]
    if drop_and_pad:
        capacity = num_out_tokens // E
        rm = routing_map.to(torch.int8).T.contiguous()
        sorted_indices = rm.argsort(dim=-1, descending=True, stable=True)[:, :capacity].contiguous().view(-1)
        offsets = torch.arange(E).repeat_interleave(capacity) * T
        permuted_probs = probs.T.contiguous().view(-1).index_select(0, offsets + sorted_indices)
    else:
        rm = routing_map.T.contiguous()
        sorted_indices = torch.arange(T).unsqueeze(0).expand(E, -1).masked_select(rm)
        permuted_probs = probs.T.contiguous().masked_select(rm)
    return tokens.index_select(0, sorted_indices), permuted_probs


def unpermute(permuted, sorted_indices, probs, expert_of_row, T):
    """Megatron-LM's routing-map unpermute: out[token] += permuted[row] * probs[token][expert of row], the
    products in the promoted dtype (fp32 probs with bf16 rows: fp32), rounded to the rows' dtype."""
    weights = probs[sorted_indices, expert_of_row].unsqueeze(1)
    out = torch.zeros(T, permuted.shape[1], dtype=torch.promote_types(permuted.dtype, probs.dtype))
    return out.index_add(0, sorted_indices, permuted * weights).to(permuted.dtype)


def init_routing(x, experts, E, capacity, active_num):
    """MoeInitRoutingV2 in plain PyTorch: expanded_x and expandedRowIdx from token-major pairs sorted stably by
    expert (dropless, the first active_num rows when 0 < active_num < N*K), or the rows under the capacity
    placed at e*C + rank into zeros (drop-and-pad)."""
    K = experts.shape[1]
    flat = experts.reshape(-1)
    order = torch.sort(flat, stable=True).indices
    row_idx = init_routing_row_idx(experts, E, capacity)
    token = order // K
    if capacity == 0:
        if 0 < active_num < flat.numel():
            token = token[:active_num]
        return x.index_select(0, token), row_idx
    kept = row_idx >= 0
    out = torch.zeros(E * capacity, x.shape[1], dtype=x.dtype)
    out = out.index_copy(0, row_idx[kept], x.index_select(0, torch.arange(flat.numel())[kept] // K))
    return out, row_idx


# ----- one benchmark row each -------------------------------------------------------------------------------

def finalize_case(shape, dtypes, drop_pad, with_bias, backward, gen):
    T, H, E, K, C = shape
    dtype, weight_dtype = dtypes
    experts, _ = random_routing(T, E, K, gen)
    row_idx = init_routing_row_idx(experts, E, C if drop_pad else 0)
    rows = E * C if drop_pad else T * K
    expanded_x = torch.rand(rows, H, generator=gen).to(dtype)
    scales = torch.rand(T, K, generator=gen).to(weight_dtype)
    bias = torch.rand(E, H, generator=gen).to(dtype) if with_bias else None
    if not backward:
        def forward():
            with torch.no_grad():
                combine(expanded_x, row_idx, scales, bias, experts, drop_pad)
        return forward
    expanded_x.requires_grad_()
    scales.requires_grad_()
    out = combine(expanded_x, row_idx, scales, bias, experts, drop_pad)
    grad_y = torch.rand(T, H, generator=gen).to(dtype)
    return lambda: torch.autograd.grad(out, (expanded_x, scales), grad_y, retain_graph=True)


def permute_case(shape, dtypes, drop_and_pad, backward, gen):
    T, H, E, K, C = shape
    dtype, weight_dtype = dtypes
    _, routing_map = random_routing(T, E, K, gen)
    n = E * C if drop_and_pad else T * K
    tokens = torch.rand(T, H, generator=gen).to(dtype)
    probs = torch.rand(T, E, generator=gen).to(weight_dtype)
    if not backward:
        def forward():
            with torch.no_grad():
                permute(tokens, routing_map, probs, n, drop_and_pad)
        return forward
    tokens.requires_grad_()
    probs.requires_grad_()
    out_tokens, out_probs = permute(tokens, routing_map, probs, n, drop_and_pad)
    g_tokens = torch.rand(out_tokens.shape, generator=gen).to(dtype)
    g_probs = torch.rand(out_probs.shape, generator=gen).to(weight_dtype)
    return lambda: torch.autograd.grad((out_tokens, out_probs), (tokens, probs), (g_tokens, g_probs),
                                       retain_graph=True)


def init_routing_case(shape, dtypes, drop_pad, half_active, backward, gen):
    T, H, E, K, C = shape
    dtype, _ = dtypes
    experts, _ = random_routing(T, E, K, gen)
    x = torch.rand(T, H, generator=gen).to(dtype)
    active = max(1, T * K // 2) if half_active else 0
    capacity = C if drop_pad else 0
    if not backward:
        def forward():
            with torch.no_grad():
                init_routing(x, experts, E, capacity, active)
        return forward
    x.requires_grad_()
    out, _ = init_routing(x, experts, E, capacity, active)
    grad = torch.rand(out.shape, generator=gen).to(dtype)
    return lambda: torch.autograd.grad(out, x, grad, retain_graph=True)


def unpermute_case(shape, dtypes, drop_and_pad, backward, gen):
    T, H, E, K, C = shape
    dtype, weight_dtype = dtypes
    _, routing_map = random_routing(T, E, K, gen)
    if drop_and_pad:
        sorted_indices = routing_map.T.to(torch.int8).argsort(dim=-1, descending=True, stable=True)[:, :C]
        sorted_indices = sorted_indices.contiguous().view(-1)
        expert_of_row = torch.arange(E).repeat_interleave(C)
    else:
        sorted_indices = torch.arange(T).unsqueeze(0).expand(E, -1).masked_select(routing_map.T.contiguous())
        expert_of_row = torch.arange(E).repeat_interleave(routing_map.sum(0))
    permuted = torch.rand(sorted_indices.numel(), H, generator=gen).to(dtype)
    probs = torch.rand(T, E, generator=gen).to(weight_dtype)
    if not backward:
        def forward():
            with torch.no_grad():
                unpermute(permuted, sorted_indices, probs, expert_of_row, T)
        return forward
    permuted.requires_grad_()
    probs.requires_grad_()
    out = unpermute(permuted, sorted_indices, probs, expert_of_row, T)
    grad = torch.rand(T, H, generator=gen).to(dtype)
    return lambda: torch.autograd.grad(out, (permuted, probs), grad, retain_graph=True)


# moegrad bench rows (key, mode) -> (what PyTorch runs, its case builder)
TORCH_ROWS = {
    ("finalize-routing-v2-grad", "dropless scales+bias"):
        ("combine backward", lambda s, d, g: finalize_case(s, d, False, True, True, g)),
    ("finalize-routing-v2-grad", "drop-pad scales"):
        ("combine backward", lambda s, d, g: finalize_case(s, d, True, False, True, g)),
    ("token-permute-with-routing-map-grad", "dropless probs"):
        ("permute backward", lambda s, d, g: permute_case(s, d, False, True, g)),
    ("token-permute-with-routing-map-grad", "drop-pad probs"):
        ("permute backward", lambda s, d, g: permute_case(s, d, True, True, g)),
    ("finalize-routing-v2", "mode2 dropless scales+bias"):
        ("combine forward", lambda s, d, g: finalize_case(s, d, False, True, False, g)),
    ("finalize-routing-v2", "mode3 drop-pad scales"):
        ("combine forward", lambda s, d, g: finalize_case(s, d, True, False, False, g)),
    ("token-permute-with-routing-map", "dropless probs"):
        ("permute forward", lambda s, d, g: permute_case(s, d, False, False, g)),
    ("token-permute-with-routing-map", "drop-pad probs"):
        ("permute forward", lambda s, d, g: permute_case(s, d, True, False, g)),
    ("token-unpermute-with-routing-map", "dropless probs"):
        ("unpermute forward", lambda s, d, g: unpermute_case(s, d, False, False, g)),
    ("token-unpermute-with-routing-map", "drop-pad probs"):
        ("unpermute forward", lambda s, d, g: unpermute_case(s, d, True, False, g)),
    ("token-unpermute-with-routing-map-grad", "dropless probs"):
        ("unpermute backward", lambda s, d, g: unpermute_case(s, d, False, True, g)),
    ("token-unpermute-with-routing-map-grad", "drop-pad probs"):
        ("unpermute backward", lambda s, d, g: unpermute_case(s, d, True, True, g)),
    ("init-routing-v2", "dropless cumsum"):
        ("sort + index_select", lambda s, d, g: init_routing_case(s, d, False, False, False, g)),
    ("init-routing-v2", "dropless active-half cumsum"):
        ("sort + index_select", lambda s, d, g: init_routing_case(s, d, False, True, False, g)),
    ("init-routing-v2", "drop-pad before-capacity"):
        ("sort + index_copy", lambda s, d, g: init_routing_case(s, d, True, False, False, g)),
    ("init-routing-v2-grad", "dropless"):
        ("dispatch backward", lambda s, d, g: init_routing_case(s, d, False, False, True, g)),
    ("init-routing-v2-grad", "dropless active=N*K/2"):
        ("dispatch backward", lambda s, d, g: init_routing_case(s, d, False, True, True, g)),
    ("init-routing-v2-grad", "drop-pad"):
        ("dispatch backward", lambda s, d, g: init_routing_case(s, d, True, False, True, g)),
}


def find_moegrad():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = sorted(glob.glob(os.path.join(root, "build*", "tools", "moegrad")), key=os.path.getmtime)
    if found:
        return found[-1]
    return "moegrad"


def fmt_ms(s):
    return "-" if s is None else f"{s * 1e3:.3f} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="deepseek-v3")
    ap.add_argument("--tokens", type=int, default=0, help="0: the preset's default")
    ap.add_argument("--dtype", default="bf16", choices=["f32", "f16", "bf16", "bf16+f32", "all"],
                    help="bf16+f32: bf16 tokens with fp32 routing weights")
    ap.add_argument("--moegrad", default=None, help="the moegrad tool (default: the newest build*/tools/moegrad)")
    ap.add_argument("--op", default="all", help="one operator (moegrad bench's --op names), default all")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    tool = args.moegrad or find_moegrad()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "moegrad.json")
        cmd = [tool, "bench", "--preset", args.preset, "--dtype", args.dtype, "--threads", str(args.threads),
               "--op", args.op, "--json", out]
        if args.tokens:
            cmd += ["--tokens", str(args.tokens)]
        print("running:", " ".join(cmd), file=sys.stderr)
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL)
        with open(out) as f:
            mg = json.load(f)
    shape = (mg["tokens"], mg["hidden"], mg["experts"], mg["topk"], mg["capacity"])

    gen = torch.Generator().manual_seed(1)
    results = []
    for row in mg["rows"]:
        what, build = TORCH_ROWS.get((row["key"], row["mode"]), (None, None))
        torch_s = None
        if build is not None:
            print(f"torch: {row['op']} {row['mode']} {row['dtype']}", file=sys.stderr)
            try:
                torch_s = median_seconds(build(shape, row_dtypes(row["dtype"]), gen))
            except RuntimeError as e:  # an op without a kernel for this dtype on CPU
                what = f"n/a ({str(e).splitlines()[0][:40]})"
        results.append(dict(op=row["op"], mode=row["mode"], dtype=row["dtype"], torch=what, torch_s=torch_s,
                            moegrad_s=row["median_s"], verified=row["verified"],
                            speedup=(torch_s / row["median_s"]) if torch_s and row["median_s"] else None))

    T, H, E, K, C = shape
    print(f"{mg['preset']}: T={T} H={H} E={E} K={K} (drop-pad C={C}), {args.threads} threads; "
          f"torch {torch.__version__} eager, moegrad {mg['version']} {mg['simd_target']}")
    w_op = max(len(r["op"]) for r in results)
    w_mode = max(len(r["mode"]) for r in results)
    w_t = max(len(r["torch"] or "-") for r in results)
    w_d = max([5] + [len(r["dtype"]) for r in results])
    print(f"{'operator':<{w_op}}  {'mode':<{w_mode}}  {'dtype':<{w_d}}  {'torch runs':<{w_t}}  {'torch':>12}  "
          f"{'moegrad':>12}  speedup  verified")
    for r in results:
        sp = f"{r['speedup']:.2f}x" if r["speedup"] else "-"
        print(f"{r['op']:<{w_op}}  {r['mode']:<{w_mode}}  {r['dtype']:<{w_d}}  {r['torch'] or '-':<{w_t}}  "
              f"{fmt_ms(r['torch_s']):>12}  {fmt_ms(r['moegrad_s']):>12}  {sp:>7}  "
              f"{'ok' if r['verified'] else 'FAIL'}")
    print("torch times: backward only (autograd.grad on a built graph) for the gradient operators, no_grad "
          "forward for the others; moegrad: plan + run, median.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(shape=dict(tokens=T, hidden=H, experts=E, topk=K, capacity=C), threads=args.threads,
                           torch=torch.__version__, moegrad=mg["version"], rows=results), f, indent=1)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
