#!/usr/bin/env python3
"""moegrad against the PyTorch eager alternative, on the same shapes and the same inputs, in one run.

Every row of `moegrad bench` (the eight operators: MoeFinalizeRoutingV2 and its Grad,
MoeTokenPermuteWithRoutingMap and its Grad, MoeInitRoutingV2 and its Grad, MoeTokenUnpermuteWithRoutingMap and
its Grad) is run three ways in the same run:
  * PyTorch eager, as Megatron-core (or a careful user without fused routing kernels) writes it;
  * moegrad through `moegrad.torch` on the very same tensors, timed interleaved with the eager code (A, B, B, A,
    ...; medians of every repetition), which gives the speed-up;
  * moegrad's own tool (`moegrad bench --json`): plan + run from cold caches, each call paired with a parallel
    copy, which gives the % of copy bandwidth and the shapes (preset table, capacity C = ceil(T*K/E)) the
    other two take over.
Every moegrad.torch result is checked against the same eager code run in float64 on the same inputs
(torch.testing.assert_close at the output dtype's tolerance: one rounding of an fp32 result, 4x that for the
outputs that sum a row of H products); a mismatch is FAIL in the table and exit status 1.

The eager side of each operator:
  * MoeTokenPermuteWithRoutingMap: Megatron-LM's routing-map permute -- masked_select of token ids and probs
    (dropless) or a stable descending argsort per expert cut to the capacity (drop-and-pad), then index_select
    of the token rows;
  * MoeInitRoutingV2: a stable sort of the token-major pairs by expert, then index_select of the token rows
    (dropless, the first activeNum rows with active truncation) or index_copy into a zeroed (E*C, H) tensor of
    the pairs under the capacity (drop-and-pad), and bincount (+ cumsum) for the per-expert counts;
  * MoeTokenUnpermuteWithRoutingMap: Megatron-LM's unpermute -- each permuted row times its probability
    (gathered from probs by the permute's expert-major order), index_add-ed into its token;
  * MoeFinalizeRoutingV2: the formula the operator computes -- index_select of the expert-output rows named by
    expandedRowIdx (dropped rows masked to zero), plus the gathered expert bias, weighted by the routing scales
    and summed over the top-k (the pattern of Megatron's unpermute);
  * the four gradient operators: autograd of the eager forward above, which is what Megatron-style training
    runs for them (index_add / scatter of the gradient rows for an index_select, index_select for an
    index_add, and the probabilities' or scales' products). Only the backward pass is timed: the forward graph
    is built once and torch.autograd.grad(..., retain_graph=True) is timed on it; moegrad.torch calls the
    gradient operator itself (moe_*_grad) on the same gradient and saved tensors. The forward operators are
    timed under no_grad on both sides.

Both sides run each row in its dtypes: bf16+f32 is bf16 tokens with fp32 routing weights (scales, probs and
their gradients), so the PyTorch side multiplies bf16 rows by fp32 weights (type promotion: fp32 products) and
rounds the combined output to bf16, as Megatron's unpermute does with fp32 probabilities.

  PYTHONPATH=build/python .venv/bin/python bench/compare_torch.py [--preset deepseek-v3] [--tokens N] [--dtype bf16|f16|f32|bf16+f32|all]
                                          [--op NAME] [--moegrad build/tools/moegrad] [--runs N] [--json out.json]
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
# (rtol, atol) of one rounding of an fp32 result to the dtype, against float64
TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2 ** -8, 1e-5), torch.float16: (2 ** -11, 1e-5)}


def row_dtypes(name):
    """(tokens' dtype, routing weights' dtype) of a `moegrad bench` dtype name: "bf16", or "bf16+f32"."""
    tokens, _, weights = name.partition("+")
    return DTYPES[tokens], DTYPES[weights or tokens]


def median_seconds(fn, warmup=2, min_runs=5, max_runs=200, budget=0.5):
    """The median seconds of fn alone (bench/python_overhead.py times with it)."""
    return interleaved_medians([fn], warmup, min_runs, max_runs, budget)[0][0]


def interleaved_medians(fns, warmup=2, min_runs=5, max_runs=200, budget=1.0):
    """The median seconds of each of fns, called in turn (order reversed every other round, A B B A ...), at least
    min_runs rounds and until the calls took `budget` seconds together."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times = [[] for _ in fns]
    rounds = 0
    while rounds < max_runs and (rounds < min_runs or sum(map(sum, times)) < budget):
        order = range(len(fns)) if rounds % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            t0 = time.perf_counter()
            fns[i]()
            times[i].append(time.perf_counter() - t0)
        rounds += 1
    return [statistics.median(t) for t in times], rounds


def mismatch(name, got, want, dtype, wide=False):
    """None when got (moegrad) is close to want (the eager code in float64) at dtype's tolerance (4x for an
    output that sums a row of products, wide), else a line saying where it is not."""
    if got is None or tuple(got.shape) != tuple(want.shape):
        return f"{name}: shape {None if got is None else tuple(got.shape)}, eager {tuple(want.shape)}"
    if got.dtype != dtype:
        return f"{name}: dtype {got.dtype}, expected {dtype}"
    rtol, atol = TOLERANCE[dtype] if dtype in TOLERANCE else (0, 0)
    if wide:
        rtol, atol = 4 * rtol, 4 * atol
    try:
        torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=atol)
    except AssertionError as e:
        return f"{name}: " + " ".join(str(e).split())[:200]
    return None


def fresh_memory_gbps(size=256 << 20, runs=5):
    """GB/s of torch.empty(size bytes).zero_(): the first touch of fresh memory, which every call that returns
    a new large tensor pays (eager and moegrad.torch alike; the tool reuses its buffers)."""
    def once():
        torch.empty(size, dtype=torch.uint8).zero_()
    return size / median_seconds(once, warmup=1, min_runs=runs, budget=0) * 1e-9


# ----- routing data, as the forward routing operators produce it ----------------------------------------

def random_routing(T, E, K, gen):
    """K distinct experts per token (a top-k of random scores) and the (T, E) routing map."""
    experts = torch.rand(T, E, generator=gen).topk(K, dim=1).indices
    routing_map = torch.zeros(T, E, dtype=torch.bool)
    routing_map.scatter_(1, experts, True)
    return experts, routing_map


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


def permute_order(routing_map, num_out_tokens, drop_and_pad):
    """Megatron-LM's routing-map permute order: the source token of every expert-major row (its sorted_indices)
    and the index of the row's probability in probs.T flattened."""
    T, E = routing_map.shape
    if drop_and_pad:
        capacity = num_out_tokens // E
        rm = routing_map.to(torch.int8).T.contiguous()
        token_of_row = rm.argsort(dim=-1, descending=True, stable=True)[:, :capacity].contiguous().view(-1)
        return token_of_row, torch.arange(E).repeat_interleave(capacity)
    rm = routing_map.T.contiguous()
    token_of_row = torch.arange(T).unsqueeze(0).expand(E, -1).masked_select(rm)
    return token_of_row, torch.arange(E).repeat_interleave(rm.sum(1))


def permute(tokens, routing_map, probs, num_out_tokens, drop_and_pad):
    """Megatron-LM's routing-map permute: expert-major rows of tokens, their probabilities, their source tokens."""
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
    return tokens.index_select(0, sorted_indices), permuted_probs, sorted_indices


def unpermute(permuted, sorted_indices, probs, expert_of_row, T):
    """Megatron-LM's routing-map unpermute: out[token] += permuted[row] * probs[token][expert of row], the
    products in the promoted dtype (fp32 probs with bf16 rows: fp32), rounded to the rows' dtype."""
    weights = probs[sorted_indices, expert_of_row].unsqueeze(1)
    out = torch.zeros(T, permuted.shape[1], dtype=torch.promote_types(permuted.dtype, probs.dtype))
    return out.index_add(0, sorted_indices, permuted * weights).to(permuted.dtype)


def init_routing(x, experts, E, capacity, active_num):
    """MoeInitRoutingV2 in plain PyTorch: (expanded_x, expandedRowIdx, per-expert counts) from token-major pairs
    sorted stably by expert. Dropless: the rows in that order (the first active_num when 0 < active_num < N*K),
    the cumsum of the counts; drop-and-pad: the rows under the capacity placed at e*C + rank into zeros,
    -1 for the others, the counts before capacity."""
    K = experts.shape[1]
    flat = experts.reshape(-1)
    order = torch.sort(flat, stable=True).indices
    row_idx = torch.empty_like(order)
    row_idx[order] = torch.arange(order.numel())
    counts = torch.bincount(flat, minlength=E)
    if capacity == 0:
        token = order // K
        if 0 < active_num < flat.numel():
            token = token[:active_num]
        return x.index_select(0, token), row_idx, counts.cumsum(0)
    pos = row_idx - (counts.cumsum(0) - counts)[flat]
    row_idx = torch.where(pos < capacity, flat * capacity + pos, torch.full_like(pos, -1))
    kept = row_idx >= 0
    out = torch.zeros(E * capacity, x.shape[1], dtype=x.dtype)
    out = out.index_copy(0, row_idx[kept], x.index_select(0, torch.arange(flat.numel())[kept] // K))
    return out, row_idx, counts


# ----- one benchmark row each: (eager, moegrad.torch, check) ----------------------------------------------
# eager and moegrad.torch are the timed calls; check() runs moegrad once more and the eager code in float64 on
# the same inputs and returns the mismatches (empty: every output agrees).

def f64(t):
    return None if t is None else t.detach().double()


def leaf(t):
    return None if t is None else t.detach().clone().requires_grad_()


def finalize_case(mt, shape, dtypes, drop_pad, with_bias, backward, gen):
    T, H, E, K, C = shape
    dtype, weight_dtype = dtypes
    experts, _ = random_routing(T, E, K, gen)
    row_idx = init_routing(torch.empty(T, 0), experts, E, C if drop_pad else 0, 0)[1]
    rows = E * C if drop_pad else T * K
    expanded_x = torch.rand(rows, H, generator=gen).to(dtype)
    scales = torch.rand(T, K, generator=gen).to(weight_dtype)
    bias = torch.rand(E, H, generator=gen).to(dtype) if with_bias else None
    idx32, experts32 = row_idx.int(), (experts.int() if with_bias else None)
    x_mg = expanded_x.view(E, C, H) if drop_pad else expanded_x
    if not backward:
        def eager():
            with torch.no_grad():
                return combine(expanded_x, row_idx, scales, bias, experts, drop_pad)

        def mg():
            return mt.moe_finalize_routing_v2(x_mg, idx32, bias=bias, scales=scales, expert_idx=experts32,
                                              drop_pad_mode=3 if drop_pad else 2)

        def check():
            want = combine(f64(expanded_x), row_idx, f64(scales), f64(bias), experts, drop_pad)
            return [mismatch("out", mg(), want, dtype)]
        return eager, mg, check
    x_leaf, s_leaf = leaf(expanded_x), leaf(scales)
    out = combine(x_leaf, row_idx, s_leaf, bias, experts, drop_pad)
    grad_y = torch.rand(T, H, generator=gen).to(dtype)

    def mg():
        return mt.moe_finalize_routing_v2_grad(grad_y, idx32, expanded_x=x_mg, scales=scales, expert_idx=experts32,
                                               bias=bias, drop_pad_mode=1 if drop_pad else 0,
                                               expert_num=E if drop_pad else 0, expert_capacity=C if drop_pad else 0)

    def check():
        x64, s64 = leaf(f64(expanded_x)), leaf(f64(scales))
        gx, gs = torch.autograd.grad(combine(x64, row_idx, s64, f64(bias), experts, drop_pad), (x64, s64), f64(grad_y))
        got_x, got_s = mg()
        return [mismatch("grad_expanded_x", got_x.reshape(rows, H), gx, dtype),
                mismatch("grad_scales", got_s, gs, weight_dtype, wide=True)]
    return lambda: torch.autograd.grad(out, (x_leaf, s_leaf), grad_y, retain_graph=True), mg, check


def permute_case(mt, shape, dtypes, drop_and_pad, backward, gen):
    T, H, E, K, C = shape
    dtype, weight_dtype = dtypes
    _, routing_map = random_routing(T, E, K, gen)
    n = E * C if drop_and_pad else T * K
    tokens = torch.rand(T, H, generator=gen).to(dtype)
    probs = torch.rand(T, E, generator=gen).to(weight_dtype)

    def mg_forward():
        return mt.moe_token_permute_with_routing_map(tokens, routing_map, probs=probs, num_out_tokens=n,
                                                     drop_and_pad=drop_and_pad)
    if not backward:
        def eager():
            with torch.no_grad():
                return permute(tokens, routing_map, probs, n, drop_and_pad)

        def check():
            want_t, want_p, token_of_row = permute(f64(tokens), routing_map, f64(probs), n, drop_and_pad)
            # the operator's sortedIndices: the token-major slot -> row map (dropless), the token ids (drop/pad)
            want_i = token_of_row if drop_and_pad else torch.sort(token_of_row, stable=True).indices
            got_t, got_p, got_i = mg_forward()
            return [mismatch("permuted_tokens", got_t, want_t, dtype),
                    mismatch("permuted_probs", got_p, want_p, weight_dtype),
                    mismatch("sorted_indices", got_i, want_i.int(), torch.int32)]
        return eager, mg_forward, check
    sorted_indices = mg_forward()[2]
    t_leaf, p_leaf = leaf(tokens), leaf(probs)
    out_tokens, out_probs, _ = permute(t_leaf, routing_map, p_leaf, n, drop_and_pad)
    g_tokens = torch.rand(out_tokens.shape, generator=gen).to(dtype)
    g_probs = torch.rand(out_probs.shape, generator=gen).to(weight_dtype)

    def mg():
        return mt.moe_token_permute_with_routing_map_grad(g_tokens, sorted_indices, E, T, drop_and_pad=drop_and_pad,
                                                          permuted_probs_output_grad=g_probs, routing_map=routing_map)

    def check():
        t64, p64 = leaf(f64(tokens)), leaf(f64(probs))
        o_t, o_p, _ = permute(t64, routing_map, p64, n, drop_and_pad)
        gt, gp = torch.autograd.grad((o_t, o_p), (t64, p64), (f64(g_tokens), f64(g_probs)))
        got_t, got_p = mg()
        return [mismatch("tokens_grad", got_t, gt, dtype), mismatch("probs_grad", got_p, gp, weight_dtype)]
    return (lambda: torch.autograd.grad((out_tokens, out_probs), (t_leaf, p_leaf), (g_tokens, g_probs),
                                        retain_graph=True)), mg, check


def init_routing_case(mt, shape, dtypes, drop_pad, half_active, backward, gen):
    T, H, E, K, C = shape
    dtype, _ = dtypes
    experts, _ = random_routing(T, E, K, gen)
    x = torch.rand(T, H, generator=gen).to(dtype)
    active = max(1, T * K // 2) if half_active else 0
    capacity = C if drop_pad else 0
    experts32 = experts.int()
    mode = 1 if drop_pad else 0
    if not backward:
        def eager():
            with torch.no_grad():
                return init_routing(x, experts, E, capacity, active)

        def mg():
            return mt.moe_init_routing_v2(x, experts32, active_num=active, expert_capacity=capacity, expert_num=E,
                                          drop_pad_mode=mode, expert_tokens_count_or_cumsum_flag=0 if drop_pad else 1,
                                          expert_tokens_before_capacity_flag=drop_pad)

        def check():
            want_x, want_i, want_c = init_routing(f64(x), experts, E, capacity, active)
            got_x, got_i, got_cumsum, got_before = mg()
            return [mismatch("expanded_x", got_x.reshape(-1, H), want_x, dtype),
                    mismatch("expanded_row_idx", got_i, want_i.int(), torch.int32),
                    mismatch("expert_tokens_before_capacity" if drop_pad else "expert_tokens_cumsum",
                             got_before if drop_pad else got_cumsum, want_c.int(), torch.int32)]
        return eager, mg, check
    x_leaf = leaf(x)
    out, row_idx, _ = init_routing(x_leaf, experts, E, capacity, active)
    grad = torch.rand(out.shape, generator=gen).to(dtype)
    idx32 = row_idx.int()
    grad_mg = grad.view(E, C, H) if drop_pad else grad

    def mg():
        return mt.moe_init_routing_v2_grad(grad_mg, idx32, K, drop_pad_mode=mode, active_num=active)

    def check():
        x64 = leaf(f64(x))
        (gx,) = torch.autograd.grad(init_routing(x64, experts, E, capacity, active)[0], x64, f64(grad))
        return [mismatch("grad_x", mg(), gx, dtype)]
    return lambda: torch.autograd.grad(out, x_leaf, grad, retain_graph=True), mg, check


def unpermute_case(mt, shape, dtypes, drop_and_pad, backward, gen):
    T, H, E, K, C = shape
    dtype, weight_dtype = dtypes
    _, routing_map = random_routing(T, E, K, gen)
    token_of_row, expert_of_row = permute_order(routing_map, E * C if drop_and_pad else T * K, drop_and_pad)
    # the permute operator's sortedIndices, which the unpermute operator takes
    sorted_indices = (token_of_row if drop_and_pad else torch.sort(token_of_row, stable=True).indices).int()
    permuted = torch.rand(token_of_row.numel(), H, generator=gen).to(dtype)
    probs = torch.rand(T, E, generator=gen).to(weight_dtype)

    def mg_forward():
        return mt.moe_token_unpermute_with_routing_map(permuted, sorted_indices, routing_map=routing_map, probs=probs,
                                                       padded_mode=drop_and_pad)
    if not backward:
        def eager():
            with torch.no_grad():
                return unpermute(permuted, token_of_row, probs, expert_of_row, T)

        def check():
            want = unpermute(f64(permuted), token_of_row, f64(probs), expert_of_row, T)
            return [mismatch("unpermuted_tokens", mg_forward()[0], want, dtype)]
        return eager, mg_forward, check
    _, out_index, permute_token_id, _ = mg_forward()
    x_leaf, p_leaf = leaf(permuted), leaf(probs)
    out = unpermute(x_leaf, token_of_row, p_leaf, expert_of_row, T)
    grad = torch.rand(T, H, generator=gen).to(dtype)

    def mg():
        return mt.moe_token_unpermute_with_routing_map_grad(grad, out_index, permute_token_id, routing_map=routing_map,
                                                            permuted_tokens=permuted, probs=probs,
                                                            drop_and_pad=drop_and_pad)

    def check():
        x64, p64 = leaf(f64(permuted)), leaf(f64(probs))
        gx, gp = torch.autograd.grad(unpermute(x64, token_of_row, p64, expert_of_row, T), (x64, p64), f64(grad))
        got_x, got_p = mg()
        return [mismatch("permuted_tokens_grad", got_x, gx, dtype),
                mismatch("probs_grad", got_p, gp, weight_dtype, wide=True)]
    return lambda: torch.autograd.grad(out, (x_leaf, p_leaf), grad, retain_graph=True), mg, check


# moegrad bench rows (key, mode) -> (what PyTorch runs, its case builder (moegrad.torch, shape, dtypes, gen))
TORCH_ROWS = {
    ("finalize-routing-v2-grad", "dropless scales+bias"):
        ("combine backward", lambda m, s, d, g: finalize_case(m, s, d, False, True, True, g)),
    ("finalize-routing-v2-grad", "drop-pad scales"):
        ("combine backward", lambda m, s, d, g: finalize_case(m, s, d, True, False, True, g)),
    ("token-permute-with-routing-map-grad", "dropless probs"):
        ("permute backward", lambda m, s, d, g: permute_case(m, s, d, False, True, g)),
    ("token-permute-with-routing-map-grad", "drop-pad probs"):
        ("permute backward", lambda m, s, d, g: permute_case(m, s, d, True, True, g)),
    ("finalize-routing-v2", "mode2 dropless scales+bias"):
        ("combine forward", lambda m, s, d, g: finalize_case(m, s, d, False, True, False, g)),
    ("finalize-routing-v2", "mode3 drop-pad scales"):
        ("combine forward", lambda m, s, d, g: finalize_case(m, s, d, True, False, False, g)),
    ("token-permute-with-routing-map", "dropless probs"):
        ("permute forward", lambda m, s, d, g: permute_case(m, s, d, False, False, g)),
    ("token-permute-with-routing-map", "drop-pad probs"):
        ("permute forward", lambda m, s, d, g: permute_case(m, s, d, True, False, g)),
    ("token-unpermute-with-routing-map", "dropless probs"):
        ("unpermute forward", lambda m, s, d, g: unpermute_case(m, s, d, False, False, g)),
    ("token-unpermute-with-routing-map", "drop-pad probs"):
        ("unpermute forward", lambda m, s, d, g: unpermute_case(m, s, d, True, False, g)),
    ("token-unpermute-with-routing-map-grad", "dropless probs"):
        ("unpermute backward", lambda m, s, d, g: unpermute_case(m, s, d, False, True, g)),
    ("token-unpermute-with-routing-map-grad", "drop-pad probs"):
        ("unpermute backward", lambda m, s, d, g: unpermute_case(m, s, d, True, True, g)),
    ("init-routing-v2", "dropless cumsum"):
        ("sort + index_select", lambda m, s, d, g: init_routing_case(m, s, d, False, False, False, g)),
    ("init-routing-v2", "dropless active-half cumsum"):
        ("sort + index_select", lambda m, s, d, g: init_routing_case(m, s, d, False, True, False, g)),
    ("init-routing-v2", "drop-pad before-capacity"):
        ("sort + index_copy", lambda m, s, d, g: init_routing_case(m, s, d, True, False, False, g)),
    ("init-routing-v2-grad", "dropless"):
        ("dispatch backward", lambda m, s, d, g: init_routing_case(m, s, d, False, False, True, g)),
    ("init-routing-v2-grad", "dropless active=N*K/2"):
        ("dispatch backward", lambda m, s, d, g: init_routing_case(m, s, d, False, True, True, g)),
    ("init-routing-v2-grad", "drop-pad"):
        ("dispatch backward", lambda m, s, d, g: init_routing_case(m, s, d, True, False, True, g)),
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
    ap.add_argument("--runs", type=int, default=7,
                    help="interleaved rounds of eager and moegrad.torch per row, at least (more until 1 s)")
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error(f"--runs {args.runs}: must be >= 1")
    try:
        import moegrad
        import moegrad.torch as mt
    except ImportError as e:
        print(f"compare_torch.py: moegrad.torch does not import ({e}); run with PYTHONPATH=build/python",
              file=sys.stderr)
        return 2

    torch.set_num_threads(args.threads)
    moegrad.set_num_threads(args.threads)
    tool = args.moegrad or find_moegrad()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "moegrad.json")
        cmd = [tool, "bench", "--preset", args.preset, "--dtype", args.dtype, "--threads", str(args.threads),
               "--op", args.op, "--json", out]
        if args.tokens:
            cmd += ["--tokens", str(args.tokens)]
        print("running:", " ".join(cmd), file=sys.stderr)
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL)
        if proc.returncode != 0 and not os.path.exists(out):
            print(f"compare_torch.py: {tool} exited with status {proc.returncode}", file=sys.stderr)
            return proc.returncode or 1
        with open(out) as f:
            mg = json.load(f)
    shape = (mg["tokens"], mg["hidden"], mg["experts"], mg["topk"], mg["capacity"])
    fresh_gbps = fresh_memory_gbps()

    gen = torch.Generator().manual_seed(1)
    results = []
    failed = proc.returncode != 0
    for row in mg["rows"]:
        what, build = TORCH_ROWS.get((row["key"], row["mode"]), (None, None))
        r = dict(op=row["op"], key=row["key"], mode=row["mode"], dtype=row["dtype"], torch=what, torch_s=None,
                 moegrad_torch_s=None, speedup=None, rounds=0, matches_eager=None, mismatches=[],
                 moegrad_s=row["median_s"], pct_copy=row["pct_copy"], paired_copy_gbps=row["paired_copy_gbps"],
                 verified=row["verified"],
                 tool_speedup=None)
        failed |= not row["verified"]
        if build is None:
            print(f"no eager alternative for {row['key']} / {row['mode']}", file=sys.stderr)
            failed = True
        else:
            print(f"torch: {row['op']} {row['mode']} {row['dtype']}", file=sys.stderr)
            try:
                eager, mg_call, check = build(mt, shape, row_dtypes(row["dtype"]), gen)
                r["mismatches"] = [m for m in check() if m]
                r["matches_eager"] = not r["mismatches"]
                for m in r["mismatches"]:
                    print(f"  MISMATCH {m}", file=sys.stderr)
                failed |= bool(r["mismatches"])
                (r["torch_s"], r["moegrad_torch_s"]), r["rounds"] = interleaved_medians([eager, mg_call],
                                                                                        min_runs=args.runs)
                r["speedup"] = r["torch_s"] / r["moegrad_torch_s"]
                if r["moegrad_s"]:
                    r["tool_speedup"] = r["torch_s"] / r["moegrad_s"]
                del eager, mg_call, check
            except RuntimeError as e:  # an op without a kernel for this dtype on CPU
                r["torch"] = f"n/a ({str(e).splitlines()[0][:40]})"
        results.append(r)

    T, H, E, K, C = shape
    print(f"{mg['preset']}: T={T} H={H} E={E} K={K} (drop-pad C={C}), {args.threads} threads; "
          f"torch {torch.__version__} eager, moegrad {mg['version']} {mg['simd_target']}; "
          f"copy {mg['copy_gbps']:.1f} GB/s; a fresh 256 MiB tensor zeroed at {fresh_gbps:.2f} GB/s")
    w_op = max(len(r["op"]) for r in results)
    w_mode = max(len(r["mode"]) for r in results)
    w_t = max(len(r["torch"] or "-") for r in results)
    w_d = max([5] + [len(r["dtype"]) for r in results])
    print(f"{'operator':<{w_op}}  {'mode':<{w_mode}}  {'dtype':<{w_d}}  {'torch runs':<{w_t}}  {'torch':>12}  "
          f"{'moegrad.torch':>13}  speedup  {'tool':>12}  %copy  vs tool  matches eager  verified")
    for r in results:
        sp = f"{r['speedup']:.2f}x" if r["speedup"] else "-"
        tsp = f"{r['tool_speedup']:.2f}x" if r["tool_speedup"] else "-"
        match = "-" if r["matches_eager"] is None else ("ok" if r["matches_eager"] else "FAIL")
        print(f"{r['op']:<{w_op}}  {r['mode']:<{w_mode}}  {r['dtype']:<{w_d}}  {r['torch'] or '-':<{w_t}}  "
              f"{fmt_ms(r['torch_s']):>12}  {fmt_ms(r['moegrad_torch_s']):>13}  {sp:>7}  {fmt_ms(r['moegrad_s']):>12}  "
              f"{r['pct_copy']:4.0f}%  {tsp:>7}  {match:>13}  {'ok' if r['verified'] else 'FAIL'}")
    print("torch / moegrad.torch: the same tensors, called in turn (medians of >= "
          f"{args.runs} rounds); torch times the backward only (autograd.grad on a built graph) for the gradient "
          "operators, no_grad forward for the others; speedup = torch / moegrad.torch (both allocate their outputs "
          "anew each call, as a training step does). tool: `moegrad bench` "
          "(plan + run from cold caches, median), %copy its paired copy bandwidth, vs tool = torch / tool. "
          "matches eager: every moegrad.torch output against the eager code in float64; verified: the tool's "
          "own check against its scalar reference.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(shape=dict(tokens=T, hidden=H, experts=E, topk=K, capacity=C), threads=args.threads,
                           torch=torch.__version__, moegrad=mg["version"], simd_target=mg["simd_target"],
                           copy_gbps=mg["copy_gbps"], fresh_zero_gbps=fresh_gbps, runs=args.runs, rows=results),
                      f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
