"""moe_finalize_routing_v2 (combine): values and autograd gradients against the index-based weighted sum."""
import pytest
import torch

import moegrad.torch as mt
from reference import assert_close, finalize_ref, leaf64, make_view

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# (tokens, scales) of mixed precision: the scales and their gradient keep a dtype of their own.
MIXED = [(t, w) for t in DTYPES for w in DTYPES if t != w]


def make_combine(tokens, topk, hidden, experts, capacity, mode, duplicates=False):
    """Index data as a MoE layer makes it: distinct experts per token, expandedRowIdx in the pair order of
    `mode`; modes 1/3 give each expert `capacity` slots and drop (-1) the pairs past them."""
    expert_idx = torch.rand(tokens, experts).topk(topk, dim=1).indices.to(torch.int32)
    if mode in (0, 2):
        pairs = tokens * topk
        rows = torch.randint(0, pairs, (tokens, topk)) if duplicates else torch.randperm(pairs).reshape(tokens, topk)
        expanded_shape = (pairs, hidden)
    else:
        if duplicates:
            rows = torch.randint(-1, experts * capacity, (tokens, topk))
        else:
            rows = torch.empty(tokens, topk, dtype=torch.int64)
            fill = [0] * experts
            for r in range(tokens):
                for k in range(topk):
                    e = int(expert_idx[r, k])
                    rows[r, k] = e * capacity + fill[e] if fill[e] < capacity else -1
                    fill[e] += 1
        expanded_shape = (experts, capacity, hidden)
    layout = rows.t() if mode in (0, 1) else rows  # expert-major p = k*R + r in modes 0/1
    return expanded_shape, layout.reshape(-1).to(torch.int32), expert_idx


def run_case(mode, dtype, with_scales, with_bias, with_x12, layout, duplicates=False,
             tokens=13, topk=3, hidden=19, experts=5, capacity=6, scales_dtype=None):
    """`dtype`: every float tensor's but the scales', which are in `scales_dtype` (default: dtype)."""
    scales_dtype = scales_dtype or dtype
    shape, idx, expert_idx = make_combine(tokens, topk, hidden, experts, capacity, mode, duplicates)
    data = {
        "expanded_x": torch.randn(shape),
        "scales": torch.rand(tokens, topk) if with_scales else None,
        "bias": torch.randn(experts, hidden) if with_bias else None,
        "x1": torch.randn(tokens, hidden) if with_x12 else None,
        "x2": torch.randn(tokens, hidden) if with_x12 else None,
    }
    data = {k: None if v is None else make_view(v.to(scales_dtype if k == "scales" else dtype), layout)
            for k, v in data.items()}
    idx = make_view(idx, layout)
    # expert_idx is needed with bias; otherwise it only tells R (without it, and without scales/x1/x2, K = 1).
    expert_idx = make_view(expert_idx, layout)

    ref_in = {k: leaf64(v) for k, v in data.items()}
    ref = finalize_ref(ref_in["expanded_x"], idx, ref_in["x1"], ref_in["x2"], ref_in["bias"], ref_in["scales"],
                       expert_idx, mode, num_tokens=tokens, topk=topk)
    for v in data.values():
        if v is not None:
            v.requires_grad_(True)
    out = mt.moe_finalize_routing_v2(data["expanded_x"], idx, x1=data["x1"], x2=data["x2"], bias=data["bias"],
                                     scales=data["scales"], expert_idx=expert_idx, drop_pad_mode=mode)
    assert out.shape == (tokens, hidden) and out.dtype == dtype
    assert_close(out, ref, dtype, "out")

    grad_y = torch.randn(tokens, hidden).to(dtype)
    out.backward(grad_y)
    ref.backward(grad_y.double())
    for name, v in data.items():
        if v is not None:
            assert v.grad is not None and v.grad.shape == v.shape and v.grad.dtype == v.dtype, name
            # bias grads sum up to R*K products in fp32 before their one rounding.
            assert_close(v.grad, ref_in[name].grad, v.dtype, name + ".grad")


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype,scales_dtype", MIXED)
@pytest.mark.parametrize("with_bias", [False, True])
def test_mixed_precision(mode, dtype, scales_dtype, with_bias):
    """expanded_x, bias, x1, x2 and out in one dtype, scales in another (bf16 tokens with fp32 routing weights,
    and every other pair): out and the token gradients in the tokens' dtype, scales.grad in the scales'."""
    run_case(mode, dtype, True, with_bias, True, "contiguous", scales_dtype=scales_dtype)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype,scales_dtype", [(torch.bfloat16, torch.float32), (torch.float32, torch.float16)])
def test_mixed_precision_views_and_duplicates(mode, dtype, scales_dtype):
    run_case(mode, dtype, True, True, True, "transposed", scales_dtype=scales_dtype)
    run_case(mode, dtype, True, True, False, "contiguous", duplicates=True, scales_dtype=scales_dtype)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_scales", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("with_x12", [False, True])
def test_modes(mode, dtype, with_scales, with_bias, with_x12):
    run_case(mode, dtype, with_scales, with_bias, with_x12, "contiguous")


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", ["transposed", "sliced"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_views(mode, dtype, layout, with_bias):
    run_case(mode, dtype, True, with_bias, True, layout)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_duplicate_and_dropped_indices(mode, dtype):
    """Any valid index data: repeated rows sum their gradients, -1 (modes 1/3) reads zeros."""
    run_case(mode, dtype, True, True, False, "contiguous", duplicates=True)


@pytest.mark.parametrize("mode", [0, 2])
def test_topk_one_without_scales(mode):
    """With none of scales/x1/x2/expert_idx, R = expandedRowIdx.numel() (K = 1)."""
    x = torch.randn(7, 5, requires_grad=True)
    idx = torch.randperm(7).to(torch.int32)
    out = mt.moe_finalize_routing_v2(x, idx, drop_pad_mode=mode)
    assert torch.equal(out, x.detach()[idx.long()])
    out.backward(torch.arange(35.0).reshape(7, 5))
    expected = torch.zeros(7, 5).index_add_(0, idx.long(), torch.arange(35.0).reshape(7, 5))
    assert torch.equal(x.grad, expected)


@pytest.mark.parametrize("scales_dtype", [torch.bfloat16, torch.float32])
def test_realistic_shape_bf16(scales_dtype):
    run_case(2, torch.bfloat16, True, True, False, "contiguous", tokens=64, topk=8, hidden=256, experts=32,
             capacity=24, scales_dtype=scales_dtype)
    run_case(1, torch.bfloat16, True, True, True, "contiguous", tokens=64, topk=8, hidden=256, experts=32,
             capacity=12, scales_dtype=scales_dtype)


def test_scales_only_gradient():
    """expanded_x without requires_grad: only the scale gradient is asked for."""
    shape, idx, expert_idx = make_combine(9, 2, 8, 4, 5, 3)
    x = torch.randn(shape)
    bias = torch.randn(4, 8)
    scales = torch.rand(9, 2, requires_grad=True)
    out = mt.moe_finalize_routing_v2(x, idx, bias=bias, scales=scales, expert_idx=expert_idx, drop_pad_mode=3)
    out.sum().backward()
    ref_scales = leaf64(scales)
    finalize_ref(x.double(), idx, bias=bias.double(), scales=ref_scales, expert_idx=expert_idx,
                 drop_pad_mode=3).sum().backward()
    assert_close(scales.grad, ref_scales.grad, torch.float32, "scales.grad")


# (tokens, scales) dtypes of the calls whose gradients come without the gradient operator.
NO_ROWS_DTYPES = [(torch.float32, torch.float32), (torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16)]


@pytest.mark.parametrize("mode", [1, 3])
@pytest.mark.parametrize("dtype,scales_dtype", NO_ROWS_DTYPES)
def test_zero_capacity_only_bias_contributes(mode, dtype, scales_dtype):
    tokens, topk, hidden, experts = 3, 2, 4, 3
    x = torch.randn(experts, 0, hidden, dtype=dtype, requires_grad=True)
    scales = torch.rand(tokens, topk).to(scales_dtype).requires_grad_(True)
    bias = torch.randn(experts, hidden).to(dtype).requires_grad_(True)
    expert_idx = torch.randint(0, experts, (tokens, topk), dtype=torch.int32)
    idx = torch.full((tokens * topk,), -1, dtype=torch.int32)
    out = mt.moe_finalize_routing_v2(x, idx, bias=bias, scales=scales, expert_idx=expert_idx, drop_pad_mode=mode)
    ref_scales, ref_bias = leaf64(scales), leaf64(bias)
    ref = finalize_ref(x.detach().double(), idx, bias=ref_bias, scales=ref_scales, expert_idx=expert_idx,
                       drop_pad_mode=mode)
    grad_y = torch.randn(tokens, hidden).to(dtype)
    out.backward(grad_y)
    ref.backward(grad_y.double())
    assert out.dtype == dtype and scales.grad.dtype == scales_dtype and bias.grad.dtype == dtype
    assert_close(out, ref, dtype, "out")
    assert_close(scales.grad, ref_scales.grad, scales_dtype, "scales.grad")
    assert_close(bias.grad, ref_bias.grad, dtype, "bias.grad")
    assert x.grad.shape == x.shape and x.grad.dtype == dtype


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_no_tokens(mode):
    x = torch.randn((0, 4) if mode % 2 == 0 else (2, 3, 4), requires_grad=True)
    scales = torch.rand(0, 2, requires_grad=True)
    out = mt.moe_finalize_routing_v2(x, torch.zeros(0, dtype=torch.int32), scales=scales, drop_pad_mode=mode)
    assert out.shape == (0, 4)
    out.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x)) and scales.grad.shape == (0, 2)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("with_scales", [False, True])
@pytest.mark.parametrize("dtype,scales_dtype", NO_ROWS_DTYPES)
def test_no_tokens_with_bias(mode, with_scales, dtype, scales_dtype):
    """An expert-parallel rank that receives no tokens: bias and expert_idx of shape (0, K), scales or not."""
    x = torch.randn((0, 4) if mode % 2 == 0 else (2, 3, 4), dtype=dtype, requires_grad=True)
    bias = torch.randn(2, 4, dtype=dtype, requires_grad=True)
    scales = torch.rand(0, 2, dtype=scales_dtype, requires_grad=True) if with_scales else None
    out = mt.moe_finalize_routing_v2(x, torch.zeros(0, dtype=torch.int32), bias=bias, scales=scales,
                                     expert_idx=torch.zeros(0, 2, dtype=torch.int32), drop_pad_mode=mode)
    assert out.shape == (0, 4) and out.dtype == dtype
    out.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))
    assert torch.equal(bias.grad, torch.zeros_like(bias))
    if with_scales:
        assert scales.grad.shape == (0, 2) and scales.grad.dtype == scales_dtype
