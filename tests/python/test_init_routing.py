"""moe_init_routing_v2: values against a plain PyTorch reference (a stable sort of the pairs by expert), in every
mode and flag, dtypes, layouts, empty batches; torch.ops registration; what its index output feeds downstream;
and that it is not differentiable yet."""
import pytest
import torch

import moegrad.torch as mt
from reference import finalize_ref, init_routing_ref, make_view

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
def test_not_differentiable_yet(monkeypatch, through_ops):
    if not through_ops:
        monkeypatch.setattr(mt, "_ENTRY", {name: auto for name, (_cpu, auto) in mt._KERNELS.items()})
    x = torch.randn(6, 3, requires_grad=True)
    ex, row, _, _ = mt.moe_init_routing_v2(x, topk_experts(6, 4, 2))
    assert ex.requires_grad and not row.requires_grad
    with pytest.raises(RuntimeError) as info:
        ex.sum().backward()
    assert str(info.value) == ("MoeInitRoutingV2: moe_init_routing_v2 is not differentiable yet (its gradient "
                               "operator MoeInitRoutingV2Grad is not wired in)")
    ex, _, _, _ = mt.moe_init_routing_v2(x.detach(), topk_experts(6, 4, 2))
    assert not ex.requires_grad and ex.grad_fn is None


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
