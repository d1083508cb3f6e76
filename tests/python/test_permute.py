"""moe_token_permute_with_routing_map: values and autograd gradients against the Megatron-style reference."""
import pytest
import torch

import moegrad.torch as mt
from reference import assert_close, expected_sorted_indices, leaf64, make_view, permute_ref

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# (tokens, probs) of mixed precision: the probabilities and their gradients keep a dtype of their own.
MIXED = [(t, p) for t in DTYPES for p in DTYPES if t != p]


def topk_routing_map(tokens, experts, topk, map_dtype):
    scores = torch.rand(tokens, experts)
    chosen = scores.topk(topk, dim=1).indices
    routing_map = torch.zeros(tokens, experts, dtype=torch.bool).scatter_(1, chosen, True)
    return routing_map.to(map_dtype)


def random_routing_map(tokens, experts, density, map_dtype):
    """Uneven routing: some experts over capacity, some under, some tokens routed nowhere."""
    return (torch.rand(tokens, experts) < density).to(map_dtype)


def run_case(tokens, routing_map, probs, num_out_tokens, drop_and_pad, dtype):
    """Forward + backward through moegrad and through the reference; compares every output and gradient.
    `dtype` is the tokens'; probs (and so permuted_probs and probs.grad) may have another."""
    ref_tokens, ref_probs = leaf64(tokens), leaf64(probs)
    ref_perm, ref_pprobs, token_of_row = permute_ref(ref_tokens, routing_map, ref_probs,
                                                     num_out_tokens, drop_and_pad)
    tokens = tokens.requires_grad_(True)
    if probs is not None:
        probs.requires_grad_(True)
    perm, pprobs, sorted_indices = mt.moe_token_permute_with_routing_map(
        tokens, routing_map, probs=probs, num_out_tokens=num_out_tokens, drop_and_pad=drop_and_pad)

    # The forward is a copy: bit-exact.
    assert perm.dtype == dtype and sorted_indices.dtype == torch.int32
    assert torch.equal(perm.double(), ref_perm.detach())
    assert torch.equal(sorted_indices, expected_sorted_indices(token_of_row, drop_and_pad))
    assert not sorted_indices.requires_grad
    if probs is None:
        assert pprobs is None
    else:
        assert pprobs.dtype == probs.dtype
        assert torch.equal(pprobs.double(), ref_pprobs.detach())

    grad_perm = torch.randn(perm.shape).to(dtype)
    loss = (perm * grad_perm).sum()
    ref_loss = (ref_perm * grad_perm.double()).sum()
    if probs is not None:
        grad_pprobs = torch.randn(pprobs.shape).to(probs.dtype)
        loss = loss + (pprobs * grad_pprobs).sum()
        ref_loss = ref_loss + (ref_pprobs * grad_pprobs.double()).sum()
    loss.backward()
    ref_loss.backward()
    assert tokens.grad.dtype == dtype and tokens.grad.shape == tokens.shape
    assert_close(tokens.grad, ref_tokens.grad, dtype, "tokens.grad")
    if probs is not None:
        assert probs.grad.dtype == probs.dtype and probs.grad.shape == probs.shape
        assert_close(probs.grad, ref_probs.grad, probs.dtype, "probs.grad")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_probs", [False, True])
@pytest.mark.parametrize("map_dtype", [torch.bool, torch.int8])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_dropless(dtype, with_probs, map_dtype, layout):
    num_tokens, hidden, experts, topk = 37, 20, 8, 3
    tokens = make_view(torch.randn(num_tokens, hidden).to(dtype), layout)
    probs = make_view(torch.rand(num_tokens, experts).to(dtype), layout) if with_probs else None
    routing_map = make_view(topk_routing_map(num_tokens, experts, topk, map_dtype), layout)
    run_case(tokens, routing_map, probs, None, False, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_probs", [False, True])
@pytest.mark.parametrize("map_dtype", [torch.bool, torch.int8])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("capacity", [1, 6, 29])
def test_drop_and_pad(dtype, with_probs, map_dtype, layout, capacity):
    num_tokens, hidden, experts = 29, 17, 6
    tokens = make_view(torch.randn(num_tokens, hidden).to(dtype), layout)
    probs = make_view(torch.rand(num_tokens, experts).to(dtype), layout) if with_probs else None
    routing_map = make_view(random_routing_map(num_tokens, experts, 0.3, map_dtype), layout)
    run_case(tokens, routing_map, probs, experts * capacity, True, dtype)


@pytest.mark.parametrize("dtype,probs_dtype", MIXED)
@pytest.mark.parametrize("drop_and_pad", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_mixed_precision(dtype, probs_dtype, drop_and_pad, layout):
    """Tokens in one dtype, probs in another (bf16 tokens with fp32 router probabilities, and every other pair):
    permuted_probs and probs.grad in the probs' dtype, the rest in the tokens'."""
    num_tokens, hidden, experts, topk = 23, 19, 6, 2
    tokens = make_view(torch.randn(num_tokens, hidden).to(dtype), layout)
    probs = make_view(torch.rand(num_tokens, experts).to(probs_dtype), layout)
    if drop_and_pad:
        routing_map = random_routing_map(num_tokens, experts, 0.3, torch.bool)
        run_case(tokens, routing_map, probs, experts * 5, True, dtype)
    else:
        run_case(tokens, topk_routing_map(num_tokens, experts, topk, torch.int8), probs, None, False, dtype)


@pytest.mark.parametrize("topk", [1, 2, 8])
def test_dropless_explicit_num_out_tokens(topk):
    num_tokens, hidden, experts = 16, 64, 8
    tokens = torch.randn(num_tokens, hidden)
    probs = torch.rand(num_tokens, experts)
    routing_map = topk_routing_map(num_tokens, experts, topk, torch.bool)
    run_case(tokens, routing_map, probs, num_tokens * topk, False, torch.float32)


def test_grad_of_one_output_only():
    """Only permuted_probs used: tokens get a zero gradient, probs the exact one."""
    tokens = torch.randn(10, 4, requires_grad=True)
    probs = torch.rand(10, 5, requires_grad=True)
    routing_map = topk_routing_map(10, 5, 2, torch.bool)
    _, pprobs, _ = mt.moe_token_permute_with_routing_map(tokens, routing_map, probs)
    pprobs.sum().backward()
    assert torch.equal(tokens.grad, torch.zeros_like(tokens))
    assert torch.equal(probs.grad, routing_map.float())


def test_no_grad_inputs_and_inference_mode():
    tokens = torch.randn(12, 8)
    routing_map = topk_routing_map(12, 4, 2, torch.bool)
    perm, _, _ = mt.moe_token_permute_with_routing_map(tokens, routing_map)
    assert not perm.requires_grad
    with torch.inference_mode():
        perm2, _, _ = mt.moe_token_permute_with_routing_map(tokens, routing_map)
    assert torch.equal(perm, perm2)


def test_empty_hidden():
    tokens = torch.randn(6, 0, requires_grad=True)
    routing_map = topk_routing_map(6, 3, 1, torch.bool)
    perm, _, idx = mt.moe_token_permute_with_routing_map(tokens, routing_map)
    assert perm.shape == (6, 0) and idx.shape == (6,)
    perm.sum().backward()
    assert tokens.grad.shape == (6, 0)


@pytest.mark.parametrize("dtype,probs_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.float32)])
def test_no_tokens(dtype, probs_dtype):
    tokens = torch.randn(0, 4, dtype=dtype, requires_grad=True)
    probs = torch.rand(0, 3, dtype=probs_dtype, requires_grad=True)
    perm, pprobs, idx = mt.moe_token_permute_with_routing_map(tokens, torch.zeros(0, 3, dtype=torch.bool), probs)
    assert perm.shape == (0, 4) and pprobs.shape == (0,) and idx.shape == (0,)
    assert perm.dtype == dtype and pprobs.dtype == probs_dtype
    (perm.sum() + pprobs.sum()).backward()
    assert tokens.grad.shape == (0, 4) and probs.grad.shape == (0, 3)
    assert tokens.grad.dtype == dtype and probs.grad.dtype == probs_dtype
