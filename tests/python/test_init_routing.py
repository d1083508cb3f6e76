"""moe_init_routing_v2: values against a plain PyTorch reference (a stable sort of the pairs by expert), in every
mode and flag, dtypes, layouts, empty batches; torch.ops registration; what its index output feeds downstream;
its backward (MoeInitRoutingV2Grad) against autograd of the reference; and the whole V2 pipeline (dispatch,
per-expert transform, combine, and back) against autograd of a plain PyTorch MoE layer."""
import pytest
import torch

import moegrad.torch as mt
from reference import assert_close, finalize_ref, init_routing_ref, layer_checker, leaf64, make_view

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def topk_experts(tokens, experts, topk):
    return torch.rand(tokens, experts).topk(topk, dim=1).indices.int()


def assert_same(got, want, what):
    """Equal element for element; float tensors bit for bit (rows are copies: -0.0 stays -0.0)."""
    if want is None:
        assert got is None, what
        return
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if got.is_floating_point():
        got, want = got.contiguous().view(_BITS[got.dtype]), want.contiguous().view(_BITS[want.dtype])
    assert torch.equal(got, want), what


def run_case(x, expert_idx, **attrs):
    got = mt.moe_init_routing_v2(x, expert_idx, **attrs)
    want = init_routing_ref(x, expert_idx, attrs.get("active_num", 0), attrs.get("expert_capacity", 0),
                            attrs.get("expert_num", 0), attrs.get("drop_pad_mode", 0),
                            attrs.get("expert_tokens_count_or_cumsum_flag", 0),
                            attrs.get("expert_tokens_before_capacity_flag", False))
    for g, w, what in zip(got, want, ("expanded_x", "expanded_row_idx", "count_or_cumsum", "before_capacity")):
        assert_same(g, w, what)
    return got


def test_spec_worked_example():
    x = torch.tensor([[10.0], [20.0], [30.0]])
    idx = torch.tensor([[2, 0], [0, 1], [2, 2]], dtype=torch.int32)
    ex, row, cumsum, before = mt.moe_init_routing_v2(x, idx, expert_num=3, expert_tokens_count_or_cumsum_flag=1)
    assert row.tolist() == [3, 0, 1, 2, 4, 5] and ex.view(-1).tolist() == [10, 20, 20, 10, 30, 30]
    assert cumsum.tolist() == [2, 3, 6] and before is None
    ex, _, count, _ = mt.moe_init_routing_v2(x, idx, active_num=4, expert_num=3, expert_tokens_count_or_cumsum_flag=2)
    assert ex.view(-1).tolist() == [10, 20, 20, 10] and count.tolist() == [2, 1, 3]
    ex, row, counts, before = mt.moe_init_routing_v2(x, idx, expert_capacity=2, expert_num=3, drop_pad_mode=1,
                                                     expert_tokens_before_capacity_flag=True)
    assert ex.shape == (3, 2, 1) and ex.view(-1).tolist() == [10, 20, 20, 0, 10, 30]
    assert row.tolist() == [4, 0, 1, 2, 5, -1] and counts is None and before.tolist() == [2, 1, 3]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("flag", [0, 1, 2])
@pytest.mark.parametrize("active_num", [0, 50, 111, 200])
def test_dropless(dtype, layout, flag, active_num):
    tokens, hidden, experts, topk = 37, 20, 8, 3
    x = make_view(torch.randn(tokens, hidden).to(dtype), layout)
    idx = make_view(topk_experts(tokens, experts, topk), layout)
    run_case(x, idx, active_num=active_num, expert_num=experts, expert_tokens_count_or_cumsum_flag=flag)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("capacity", [1, 4, 14, 60])
@pytest.mark.parametrize("before", [False, True])
def test_drop_pad(dtype, layout, capacity, before):
    tokens, hidden, experts, topk = 37, 20, 8, 3
    x = make_view(torch.randn(tokens, hidden).to(dtype), layout)
    # Repeats within a token and experts without a pair: any ids in [0, E).
    idx = make_view(torch.randint(0, experts - 2, (tokens, topk), dtype=torch.int32), layout)
    run_case(x, idx, expert_capacity=capacity, expert_num=experts, drop_pad_mode=1,
             expert_tokens_before_capacity_flag=before)


def test_any_id_without_expert_count():
    x = torch.randn(50, 6)
    idx = torch.randint(0, 2**31 - 1, (50, 4), dtype=torch.int32)
    idx[0, 0] = 2**31 - 1
    run_case(x, idx)  # expert_num 0: unused


@pytest.mark.parametrize("shape", [(0, 5, 2), (6, 0, 2), (6, 5, 0)])
@pytest.mark.parametrize("mode", [0, 1])
def test_empty(shape, mode):
    tokens, hidden, topk = shape
    x = torch.randn(tokens, hidden)
    idx = torch.randint(0, 3, (tokens, topk), dtype=torch.int32)
    ex, _, counts, before = run_case(x, idx, expert_num=3, expert_capacity=2, drop_pad_mode=mode,
                                     expert_tokens_count_or_cumsum_flag=1, expert_tokens_before_capacity_flag=True)
    if mode == 1:
        assert ex.shape == (3, 2, hidden)
    if tokens * topk == 0:  # written counts are 0
        assert (before if mode == 1 else counts).tolist() == [0, 0, 0]


def test_registered_as_torch_op():
    x, idx = torch.randn(10, 4), topk_experts(10, 6, 2)
    direct = torch.ops.moegrad.moe_init_routing_v2(x, idx, 0, 4, 6, 1, 0, True)
    for a, b in zip(direct, mt.moe_init_routing_v2(x, idx, expert_capacity=4, expert_num=6, drop_pad_mode=1,
                                                   expert_tokens_before_capacity_flag=True)):
        assert_same(a, b, "torch.ops")


@pytest.mark.parametrize("mode", [0, 1])
def test_expanded_row_idx_feeds_the_combine(mode):
    """MoeFinalizeRoutingV2 mode 2 (dropless) / 3 (drop/pad) takes expandedRowIdx as it is."""
    tokens, hidden, experts, topk = 13, 8, 5, 2
    x, idx, scales = torch.randn(tokens, hidden), topk_experts(tokens, experts, topk), torch.rand(tokens, topk)
    ex, row, _, _ = mt.moe_init_routing_v2(x, idx, expert_capacity=4, expert_num=experts, drop_pad_mode=mode)
    out = mt.moe_finalize_routing_v2(ex, row, scales=scales, drop_pad_mode=2 + mode)
    torch.testing.assert_close(out, finalize_ref(ex, row, scales=scales, drop_pad_mode=2 + mode))
    if mode == 0:  # every pair kept: the combine of the dispatch is sum_k scales * x
        torch.testing.assert_close(out, scales.sum(1, keepdim=True) * x)


@pytest.mark.parametrize("through_ops", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode,active_num,capacity", [(0, 0, 0), (0, 25, 0), (0, 500, 0), (1, 0, 2), (1, 0, 40)])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_backward(monkeypatch, through_ops, dtype, mode, active_num, capacity, layout):
    """x.grad is MoeInitRoutingV2Grad of the saved expanded_row_idx, bit for bit, and matches autograd of the
    plain PyTorch reference (float64, then one rounding); the index outputs are not differentiable."""
    if not through_ops:
        monkeypatch.setattr(mt, "_ENTRY", {name: auto for name, (_cpu, auto) in mt._KERNELS.items()})
    tokens, hidden, experts, topk = 19, 12, 6, 3
    x = make_view(torch.randn(tokens, hidden).to(dtype), layout).requires_grad_(True)
    idx = torch.randint(0, experts, (tokens, topk), dtype=torch.int32)  # repeats and empty experts
    attrs = dict(active_num=active_num, expert_capacity=capacity, expert_num=experts, drop_pad_mode=mode,
                 expert_tokens_count_or_cumsum_flag=2 if mode == 0 else 0, expert_tokens_before_capacity_flag=mode == 1)
    ex, row, counts, before = mt.moe_init_routing_v2(x, idx, **attrs)
    assert ex.requires_grad and not row.requires_grad
    assert not (counts if mode == 0 else before).requires_grad
    g = make_view(torch.randn(ex.shape).to(dtype), layout)
    ex.backward(g)
    assert x.grad.dtype == dtype and x.grad.shape == x.shape
    want_bits = mt.moe_init_routing_v2_grad(g, row, topk, drop_pad_mode=mode, active_num=active_num)
    assert_same(x.grad, want_bits, "x.grad vs the grad operator")

    x64 = leaf64(x)
    ex64 = init_routing_ref(x64, idx, active_num, capacity, experts, mode)[0]
    (want,) = torch.autograd.grad(ex64, x64, g.double())
    assert_close(x.grad, want, dtype, "x.grad")


def test_backward_without_slots_and_twice():
    x = torch.randn(5, 4, requires_grad=True)
    ex, _, _, _ = mt.moe_init_routing_v2(x, torch.zeros(5, 0, dtype=torch.int32))  # K = 0: nothing copied
    assert ex.shape == (0, 4)
    ex.sum().backward()
    assert torch.equal(x.grad, torch.zeros(5, 4))
    x.grad = None
    ex, _, _, _ = mt.moe_init_routing_v2(x, topk_experts(5, 4, 2))
    (gx,) = torch.autograd.grad(ex, x, torch.randn(ex.shape, requires_grad=True), create_graph=True)
    with pytest.raises(RuntimeError) as info:
        gx.sum().backward()
    assert str(info.value) == ("MoeInitRoutingV2Grad: the gradients of moe_init_routing_v2 are not differentiable "
                               "(double backward is not supported)")
    ex, _, _, _ = mt.moe_init_routing_v2(x.detach(), topk_experts(5, 4, 2))
    assert not ex.requires_grad and ex.grad_fn is None


def moe_layer_reference(x, weights, scales, expert_idx, capacity):
    """A plain MoE layer: out[n] = sum_k scales[n, k] * (x[n] @ weights[e]) over token n's pairs (n, k) with
    e = expert_idx[n, k]; with a capacity, only the first `capacity` pairs of each expert in token-major order."""
    tokens, topk = expert_idx.shape
    out = torch.zeros_like(x)
    seen = [0] * weights.shape[0]
    rows = []
    for n in range(tokens):
        terms = []
        for k in range(topk):
            e = int(expert_idx[n, k])
            seen[e] += 1
            if capacity == 0 or seen[e] <= capacity:
                terms.append(scales[n, k] * (x[n] @ weights[e]))
        rows.append(sum(terms) if terms else torch.zeros_like(x[n]))
    return torch.stack(rows) if rows else out


def moe_layer_moegrad(x, weights, scales, expert_idx, capacity):
    """The same layer on moegrad: MoeInitRoutingV2 (dropless with per-expert counts, or drop/pad (E, C, H)), the
    experts as torch matmuls over each expert's rows, MoeFinalizeRoutingV2 mode 2 / 3 on expanded_row_idx."""
    experts = weights.shape[0]
    mode = 1 if capacity > 0 else 0
    ex, row, count, _ = mt.moe_init_routing_v2(x, expert_idx, expert_capacity=capacity, expert_num=experts,
                                               drop_pad_mode=mode, expert_tokens_count_or_cumsum_flag=2 - 2 * mode)
    if mode == 1:
        y = torch.bmm(ex, weights)  # (E, C, H): the +0 rows stay 0 and no pair reads them
    else:
        y = torch.cat([part @ weights[e] for e, part in enumerate(ex.split(count.tolist()))])
    return mt.moe_finalize_routing_v2(y, row, scales=scales, drop_pad_mode=2 + mode)


@pytest.mark.parametrize("tokens_dtype,weights_dtype", [(torch.float32, torch.float32),
                                                        (torch.bfloat16, torch.float32)])
@pytest.mark.parametrize("capacity", [0, 3, 50])
def test_pipeline_matches_autograd_of_a_plain_moe_layer(tokens_dtype, weights_dtype, capacity):
    """InitRoutingV2 -> per-expert transform -> FinalizeRoutingV2 (mode 2 / 3) forward, and its backward
    (FinalizeRoutingV2Grad mode 0 / 1 -> MoeInitRoutingV2Grad), against autograd of the plain layer in float64:
    the output and the gradients of x, the routing scales and the expert weights."""
    tokens, hidden, experts, topk = 23, 16, 5, 2
    logits = torch.randn(tokens, experts)
    scales_f, expert_idx = logits.softmax(-1).topk(topk, dim=-1)
    expert_idx = expert_idx.int()
    x = torch.randn(tokens, hidden).to(tokens_dtype).requires_grad_(True)
    weights = (torch.randn(experts, hidden, hidden) / hidden ** 0.5).to(tokens_dtype).requires_grad_(True)
    scales = scales_f.to(weights_dtype).requires_grad_(True)
    out = moe_layer_moegrad(x, weights, scales, expert_idx, capacity)
    assert out.dtype == tokens_dtype
    g = torch.randn(tokens, hidden).to(tokens_dtype)
    out.backward(g)

    x64, w64, s64 = leaf64(x), leaf64(weights), leaf64(scales)
    want = moe_layer_reference(x64, w64, s64, expert_idx, capacity)
    want.backward(g.double())
    check = layer_checker(tokens_dtype)
    check(out, want, "out")
    check(x.grad, x64.grad, "x.grad")
    check(weights.grad, w64.grad, "weights.grad")
    check(scales.grad, s64.grad, "scales.grad")
    assert scales.grad.dtype == weights_dtype and x.grad.dtype == tokens_dtype


def test_pipeline_backward_with_active_num():
    """Dropless with activeNum A < N*K: only the first A sorted pairs are materialized. The backward chain
    MoeFinalizeRoutingV2Grad (mode 0, same activeNum) -> per-expert transform backward -> MoeInitRoutingV2Grad
    (same activeNum) gives autograd's gradients of the layer whose combine skips the other pairs."""
    tokens, hidden, experts, topk, active = 17, 8, 4, 3, 30
    expert_idx = topk_experts(tokens, experts, topk)
    x = torch.randn(tokens, hidden, requires_grad=True)
    weights = torch.randn(experts, hidden, hidden, requires_grad=True)
    scales = torch.rand(tokens, topk, requires_grad=True)
    ex, row, cumsum, _ = mt.moe_init_routing_v2(x, expert_idx, active_num=active, expert_num=experts,
                                                expert_tokens_count_or_cumsum_flag=1)
    assert ex.shape == (active, hidden)
    # Rows of expert e: [cumsum[e-1], cumsum[e]) clipped to A.
    bounds = [0] + [min(int(c), active) for c in cumsum]
    y = torch.cat([ex[bounds[e]:bounds[e + 1]] @ weights[e] for e in range(experts)])
    g = torch.randn(tokens, hidden)
    grad_y_rows, grad_scales = mt.moe_finalize_routing_v2_grad(g, row, expanded_x=y.detach(), scales=scales.detach(),
                                                               drop_pad_mode=0, active_num=active)
    (grad_ex,) = torch.autograd.grad(y, ex, grad_y_rows, retain_graph=True)
    grad_x = mt.moe_init_routing_v2_grad(grad_ex, row, topk, drop_pad_mode=0, active_num=active)
    (grad_w,) = torch.autograd.grad(y, weights, grad_y_rows)

    x64, w64, s64 = leaf64(x), leaf64(weights), leaf64(scales)
    kept = (row.long() < active).reshape(tokens, topk).double()
    per_pair = torch.einsum("nh,nkhj->nkj", x64, w64[expert_idx.long()])
    want = (s64.unsqueeze(-1) * kept.unsqueeze(-1) * per_pair).sum(1)
    want.backward(g.double())
    assert_close(grad_x, x64.grad, torch.float32, "x.grad")
    assert_close(grad_w, w64.grad, torch.float32, "weights.grad")
    assert_close(grad_scales, s64.grad, torch.float32, "scales.grad")


def test_errors():
    x, idx = torch.randn(4, 3), topk_experts(4, 3, 2)
    with pytest.raises(ValueError, match=r"^MoeInitRoutingV2: dropPadMode = 2 must be 0 \(dropless\) or 1"):
        mt.moe_init_routing_v2(x, idx, drop_pad_mode=2)
    with pytest.raises(ValueError, match=r"^MoeInitRoutingV2: expertCapacity = 0 must be > 0 for dropPadMode 1$"):
        mt.moe_init_routing_v2(x, idx, expert_num=3, drop_pad_mode=1)
    bad = idx.clone()
    bad[1, 1] = 3
    with pytest.raises(ValueError,
                       match=r"^MoeInitRoutingV2: expertIdx\[3\] = 3 is outside \[0, 3\) for dropPadMode 0$"):
        mt.moe_init_routing_v2(x, bad, expert_num=3, expert_tokens_count_or_cumsum_flag=2)
    with pytest.raises(TypeError, match=r"^MoeInitRoutingV2: expertNum must be an int, not float$"):
        mt.moe_init_routing_v2(x, idx, expert_num=3.0)
    with pytest.raises(TypeError, match=r"^MoeInitRoutingV2: expertTokensBeforeCapacityFlag must be a bool, not str$"):
        mt.moe_init_routing_v2(x, idx, expert_tokens_before_capacity_flag="yes")
