"""Mixed precision: bf16 tokens with fp32 router probabilities, as Megatron-core and TransformerEngine
train. A MoE layer (router -> permute -> expert MLPs -> combine) through moegrad against the same layer written
in plain PyTorch in the same dtypes, differentiated with autograd; and the output query reporting each output
in its own group's dtype."""
import pytest
import torch

import moegrad.torch as mt
from reference import tolerance

_C = mt._C


def close(actual, expected, dtype, what):
    """Two results of the same dtype, each rounded from fp32 sums of different orders: within one unit in the
    last place of `dtype` (twice its rounding of one result) and a little more near zero."""
    rtol, _ = tolerance(dtype)
    atol = 1e-3 if dtype != torch.float32 else 1e-5
    assert actual.dtype == expected.dtype == dtype, what
    torch.testing.assert_close(actual.double(), expected.double(), rtol=2 * rtol, atol=atol,
                               msg=lambda m: f"{what}: {m}")


def experts_mlp(permuted, counts, w1, w2):
    """One small MLP per expert on its expert-major rows, in the tokens' dtype."""
    chunks = permuted.split(counts)
    return torch.cat([torch.nn.functional.gelu(c @ w1[e]) @ w2[e] for e, c in enumerate(chunks)])


def moe_layer(x, router, w1, w2, bias, topk, use_moegrad):
    """Returns (out in x's dtype, the fp32 probs (T, E) of the router, retaining their gradient)."""
    num_tokens, experts = x.shape[0], router.shape[1]
    logits = x.float() @ router  # the router in fp32
    top_probs, top_experts = logits.softmax(dim=-1).topk(topk, dim=-1)
    routing_map = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, top_experts, True)
    probs = torch.zeros_like(logits).scatter(1, top_experts, top_probs)  # fp32, as moe_router_dtype keeps it
    probs.retain_grad()
    counts = routing_map.sum(dim=0).tolist()
    if use_moegrad:
        permuted, permuted_probs, sorted_indices = mt.moe_token_permute_with_routing_map(x, routing_map, probs)
        assert permuted.dtype == x.dtype and permuted_probs.dtype == torch.float32
        expert_out = experts_mlp(permuted, counts, w1, w2)
        # Dropless sortedIndices: token-major slot r*K + k -> its permuted row (expandedRowIdx of mode 2).
        scales = permuted_probs[sorted_indices.long()].view(num_tokens, topk)
        expert_idx = routing_map.nonzero()[:, 1].view(num_tokens, topk).to(torch.int32)
        out = mt.moe_finalize_routing_v2(expert_out, sorted_indices, x1=x, bias=bias, scales=scales,
                                         expert_idx=expert_idx, drop_pad_mode=2)
    else:
        # Megatron's permute with a routing map and its unpermute (index_add of the fp32-weighted rows).
        mask = routing_map.t().contiguous()
        token_of_row = torch.arange(num_tokens).unsqueeze(0).expand(experts, -1).masked_select(mask)
        permuted = x.index_select(0, token_of_row)
        permuted_probs = probs.t().contiguous().masked_select(mask)
        expert_out = experts_mlp(permuted, counts, w1, w2)
        expert_of_row = torch.repeat_interleave(torch.arange(experts), torch.tensor(counts))
        weighted = (expert_out.float() + bias.float()[expert_of_row]) * permuted_probs.unsqueeze(-1)
        combined = torch.zeros(x.shape, dtype=torch.float32).index_add_(0, token_of_row, weighted)
        out = (combined + x.float()).to(x.dtype)
    return out, probs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_moe_layer_with_fp32_router_probabilities(seed):
    torch.manual_seed(seed)
    dtype = torch.bfloat16  # (CPU matmuls of torch 1.13 have no f16 kernels)
    num_tokens, hidden, ffn, experts, topk = 48, 32, 24, 6, 2
    params = dict(
        x=torch.randn(num_tokens, hidden).to(dtype),
        router=torch.randn(hidden, experts) / hidden ** 0.5,  # fp32
        w1=(torch.randn(experts, hidden, ffn) / hidden ** 0.5).to(dtype),
        w2=(torch.randn(experts, ffn, hidden) / ffn ** 0.5).to(dtype),
        bias=(torch.randn(experts, hidden) * 0.1).to(dtype),
    )
    grad_out = torch.randn(num_tokens, hidden)  # a fixed dL/dout, so both sides see the same one
    results = {}
    for use_moegrad in (True, False):
        leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        out, probs = moe_layer(leaves["x"], leaves["router"], leaves["w1"], leaves["w2"], leaves["bias"], topk,
                               use_moegrad)
        loss = (out.float() * grad_out).sum()
        loss.backward()
        results[use_moegrad] = dict(loss=loss.detach(), out=out.detach(), probs=probs.grad,
                                    **{k: v.grad for k, v in leaves.items()})
    ours, theirs = results[True], results[False]
    assert ours["out"].dtype == dtype
    assert ours["probs"].dtype == torch.float32 and ours["router"].dtype == torch.float32
    for name in ("x", "w1", "w2", "bias"):
        assert ours[name].dtype == dtype, name
    # The loss is an fp32 sum over outputs that may differ in the last place of `dtype`.
    torch.testing.assert_close(ours["loss"], theirs["loss"], rtol=2 * tolerance(dtype)[0], atol=1e-3)
    for name in ("out", "x", "w1", "w2", "bias"):
        close(ours[name], theirs[name], dtype, name)
    # The probability gradients are fp32 sums of products of the tokens' dtype: fp32-close, not just bf16-close.
    for name in ("probs", "router"):
        torch.testing.assert_close(ours[name], theirs[name], rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def _desc(t):
    return (t.data_ptr(), _C.DTYPES[mt._DTYPE_NAMES[t.dtype]], tuple(t.shape), tuple(t.stride()))


def test_output_query_reports_each_group_dtype():
    """bf16 tokens with fp32 weights: the token outputs bf16, the weight outputs fp32."""
    tokens, routing_map, probs = torch.randn(4, 3).bfloat16(), torch.eye(4, 2).bool(), torch.rand(4, 2)
    routing_map[2:, 0] = True
    names = _C.OPS["token_permute_with_routing_map"][0]
    given = dict(tokens=tokens, routingMap=routing_map, probs=probs)
    descs = [_desc(given[n]) if n in given else None for n in names]
    assert _C.token_permute_with_routing_map_outputs(descs, [4, 0]) == {
        "permuteTokensOut": (_C.DTYPES["BFLOAT16"], (4, 3)), "permuteProbsOut": (_C.DTYPES["FLOAT32"], (4,)),
        "sortedIndicesOut": (_C.DTYPES["INT32"], (4,))}
    names = _C.OPS["finalize_routing_v2_grad"][0]
    given = dict(gradY=torch.randn(4, 3).half(), expandedRowIdx=torch.randperm(8).int(),
                 expandedX=torch.randn(8, 3).half(), scales=torch.rand(4, 2).bfloat16())
    descs = [_desc(given[n]) if n in given else None for n in names]
    assert _C.finalize_routing_v2_grad_outputs(descs, [0, 0, 0, 0]) == {
        "gradExpandedXOut": (_C.DTYPES["FLOAT16"], (8, 3)), "gradScalesOut": (_C.DTYPES["BFLOAT16"], (4, 2))}


def test_a_weight_output_of_another_dtype_is_refused():
    """Each group is one dtype: a gradScalesOut that is not the scales' dtype is the library's one-line error."""
    names = _C.OPS["finalize_routing_v2_grad"][0]
    given = dict(gradY=torch.randn(4, 3).bfloat16(), expandedRowIdx=torch.randperm(8).int(),
                 expandedX=torch.randn(8, 3).bfloat16(), scales=torch.rand(4, 2),
                 gradExpandedXOut=torch.empty(8, 3).bfloat16(), gradScalesOut=torch.empty(4, 2).half())
    descs = [_desc(given[n]) if n in given else None for n in names]
    with pytest.raises(ValueError) as info:
        _C.finalize_routing_v2_grad(descs, [0, 0, 0, 0])
    assert str(info.value) == ("MoeFinalizeRoutingV2Grad: gradScalesOut is FLOAT16 but scales is FLOAT32 (scales and "
                               "gradScalesOut share a dtype)")
