"""The whole pipelines of moegrad.torch: moe_permute -> experts -> moe_unpermute and moe_dispatch_v2 -> experts
-> moe_combine_v2, forward and backward, against float64 autograd of the same MoE layer written from its
definition (which pairs are kept, each pair's weight), dropless and with capacity; their counts; the handle
checks."""
import pytest
import torch

import moegrad.torch as mt
from reference import assert_close, layer_checker, leaf64

T, H, E, K = 29, 12, 6, 2


def routed(seed):
    g = torch.Generator().manual_seed(seed)
    top_probs, top_experts = torch.randn(T, E, generator=g).softmax(-1).topk(K, dim=-1)
    return top_probs, top_experts


def kept_routing_map(routing_map, capacity):
    """Megatron-core's drop-and-pad: each expert keeps its first `capacity` routed tokens (ascending)."""
    if capacity is None:
        return routing_map
    rank = routing_map.long().cumsum(0) - 1
    return routing_map & (rank < capacity)


def kept_pairs_v2(top_experts, capacity):
    """MoeInitRoutingV2's capacity: the pairs p = t*K + k sorted by expert, ties by p; each expert keeps C."""
    if capacity == 0:
        return torch.ones(T, K, dtype=torch.bool)
    flat = top_experts.reshape(-1)
    kept = torch.zeros(T * K, dtype=torch.bool)
    seen = [0] * E
    for p in range(T * K):
        e = int(flat[p])
        kept[p] = seen[e] < capacity
        seen[e] += 1
    return kept.view(T, K)


def layer_reference(x, w, weights, kept, experts, bias=None, residual=None):
    """out[t] = residual[t] + sum over (t, k) of weights[t, k] * (x[t] @ w[e] if kept + bias[e]), e = experts[t, k]:
    a dropped pair still adds its weight times its expert's bias (MoeFinalizeRoutingV2's definition)."""
    per_pair = torch.einsum("th,tkhj->tkj", x, w[experts]) * kept.unsqueeze(-1).to(x.dtype)
    if bias is not None:
        per_pair = per_pair + bias[experts]
    out = (weights.unsqueeze(-1) * per_pair).sum(1)
    return out if residual is None else out + residual


def grouped(rows, w, counts):
    return torch.cat([part @ w[e].to(rows.dtype) for e, part in enumerate(rows.split(counts.tolist()))])


PRECISIONS = [(torch.float32, torch.float32), (torch.bfloat16, torch.float32), (torch.bfloat16, torch.bfloat16)]


@pytest.mark.parametrize("dtype,probs_dtype", PRECISIONS)
@pytest.mark.parametrize("capacity", [None, 4, 20])
def test_routing_map_pipeline(dtype, probs_dtype, capacity):
    top_probs, top_experts = routed(1)
    routing_map = torch.zeros(T, E, dtype=torch.bool).scatter_(1, top_experts, True)
    x = torch.randn(T, H).to(dtype).requires_grad_(True)
    w = torch.randn(E, H, H).to(dtype).requires_grad_(True)
    probs = torch.zeros(T, E).scatter(1, top_experts, top_probs).to(probs_dtype).requires_grad_(True)
    pad = capacity is not None
    permuted, permuted_probs, counts, handle = mt.moe_permute(
        x, routing_map, probs, num_out_tokens=capacity * E if pad else None, drop_and_pad=pad)
    assert counts.dtype == torch.int64 and int(counts.sum()) == permuted.shape[0]
    assert counts.tolist() == ([capacity] * E if pad else routing_map.sum(0).tolist())
    if pad:  # (E, C, H) as a batched matmul
        y = torch.bmm(permuted.view(E, capacity, H), w).view(-1, H)
    else:
        y = grouped(permuted, w, counts)
    out = mt.moe_unpermute(y, handle, probs)
    assert out.dtype == dtype and out.shape == (T, H)
    g = torch.randn(T, H).to(dtype)
    out.backward(g)

    x64, w64, p64 = leaf64(x), leaf64(w), leaf64(probs)
    kept = kept_routing_map(routing_map, capacity)
    weights = p64.gather(1, top_experts)
    want = layer_reference(x64, w64, weights, kept.gather(1, top_experts), top_experts)
    want.backward(g.double())
    check = layer_checker(dtype)
    check(out, want, "out")
    check(x.grad, x64.grad, "x.grad")
    check(w.grad, w64.grad, "w.grad")
    # probs.grad: the reference's gradient reaches only the routed entries; pad mode's padding rows give the
    # unrouted entries they carry a gradient of their own (their probability is 0, their contribution is not)
    check(probs.grad * routing_map, p64.grad * routing_map, "probs.grad")
    assert probs.grad.dtype == probs_dtype and x.grad.dtype == dtype


@pytest.mark.parametrize("dtype,probs_dtype", PRECISIONS)
@pytest.mark.parametrize("capacity", [0, 4, 30])
def test_v2_pipeline(dtype, probs_dtype, capacity):
    top_probs, top_experts = routed(2)
    x = torch.randn(T, H).to(dtype).requires_grad_(True)
    w = torch.randn(E, H, H).to(dtype).requires_grad_(True)
    bias = torch.randn(E, H).to(dtype).requires_grad_(True)
    residual = torch.randn(T, H).to(dtype).requires_grad_(True)
    scales = top_probs.to(probs_dtype).requires_grad_(True)
    expanded, counts, handle = mt.moe_dispatch_v2(x, top_experts, E, capacity=capacity)
    kept = kept_pairs_v2(top_experts, capacity)
    want_counts = torch.bincount(top_experts[kept], minlength=E)
    assert counts.dtype == torch.int64 and torch.equal(counts, want_counts)
    if capacity:
        assert expanded.shape == (E, capacity, H)
        y = torch.bmm(expanded, w)
    else:
        assert expanded.shape == (T * K, H)
        y = grouped(expanded, w, counts)
    out = mt.moe_combine_v2(y, handle, scales=scales, bias=bias, residual=residual)
    assert out.dtype == dtype and out.shape == (T, H)
    g = torch.randn(T, H).to(dtype)
    out.backward(g)

    x64, w64, s64, b64, r64 = (leaf64(t) for t in (x, w, scales, bias, residual))
    want = layer_reference(x64, w64, s64, kept, top_experts, bias=b64, residual=r64)
    want.backward(g.double())
    check = layer_checker(dtype)
    for got, ref, what in ((out, want, "out"), (x.grad, x64.grad, "x.grad"), (w.grad, w64.grad, "w.grad"),
                           (scales.grad, s64.grad, "scales.grad"), (bias.grad, b64.grad, "bias.grad"),
                           (residual.grad, r64.grad, "residual.grad")):
        check(got, ref, what)
    assert scales.grad.dtype == probs_dtype


def test_v2_combine_without_scales_weighs_one():
    _, top_experts = routed(3)
    x = torch.randn(T, H)
    expanded, counts, handle = mt.moe_dispatch_v2(x, top_experts.to(torch.int32), E)
    out = mt.moe_combine_v2(expanded * 3, handle)
    assert_close(out, 3 * K * x.double(), torch.float32, "out")


def test_both_pipelines_agree_dropless():
    top_probs, top_experts = routed(4)
    routing_map = torch.zeros(T, E, dtype=torch.bool).scatter_(1, top_experts, True)
    probs = torch.zeros(T, E).scatter(1, top_experts, top_probs)
    x, w = torch.randn(T, H), torch.randn(E, H, H)
    permuted, _, counts, handle = mt.moe_permute(x, routing_map)
    out_map = mt.moe_unpermute(grouped(permuted, w, counts), handle, probs)
    expanded, counts2, handle2 = mt.moe_dispatch_v2(x, top_experts, E)
    out_v2 = mt.moe_combine_v2(grouped(expanded, w, counts2), handle2, scales=top_probs)
    assert torch.equal(counts, counts2)
    assert_close(out_map, out_v2, torch.float32, "out")


def test_handles_are_not_interchangeable():
    _, top_experts = routed(5)
    routing_map = torch.zeros(T, E, dtype=torch.bool).scatter_(1, top_experts, True)
    x = torch.randn(T, H)
    permuted, _, _, handle = mt.moe_permute(x, routing_map)
    expanded, _, handle2 = mt.moe_dispatch_v2(x, top_experts, E)
    with pytest.raises(TypeError, match="^moe_combine_v2: handle must be moe_dispatch_v2's DispatchV2Handle, "
                                        "not PermuteHandle$"):
        mt.moe_combine_v2(expanded, handle)
    with pytest.raises(TypeError, match="^moe_unpermute: handle must be moe_permute's PermuteHandle, not "
                                        "DispatchV2Handle$"):
        mt.moe_unpermute(permuted, handle2)


def test_drop_and_pad_needs_num_out_tokens():
    routing_map = torch.ones(4, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"^moe_permute: num_out_tokens is required with drop_and_pad "
                                         r"\(capacity C = num_out_tokens // E\)$"):
        mt.moe_permute(torch.randn(4, 3), routing_map, drop_and_pad=True)
