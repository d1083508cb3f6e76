"""The gradient operators called directly, against their formulas evaluated element by element."""
import pytest
import torch

import moegrad.torch as mt
from reference import assert_close, make_view

# (tokens, weights): the dtype of every float tensor but the routing weights, and that of the routing weights
# (scales, probs) and their gradients: one dtype, bf16 tokens with fp32 weights, fp32 tokens with f16 weights.
PRECISIONS = [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32),
              (torch.float32, torch.float16)]


def check_output(got, want, shape, dtype, name):
    """An operator's output: of `shape` and `dtype` and close to `want`; None where `want` is None."""
    if want is None:
        assert got is None
        return
    assert got.shape == shape and got.dtype == dtype
    assert_close(got, want, dtype, name)


def finalize_routing_v2_grad_formula(grad_y, idx, expanded_x, scales, expert_idx, bias, mode, active_num, rows_shape):
    """gradExpandedX[v] += gradY[i/K] * s_i; gradScales[i] = sum_j (x_i + b_i)[j] * gradY[i/K][j] (float64)."""
    tokens, hidden = grad_y.shape
    topk = scales.shape[1] if scales is not None else idx.numel() // tokens
    gy = grad_y.double()
    grad_x = torch.zeros(rows_shape, dtype=torch.float64).reshape(-1, hidden)
    rows = grad_x.shape[0]
    grad_s = torch.zeros(tokens, topk, dtype=torch.float64) if scales is not None else None
    flat_x = expanded_x.double().reshape(-1, hidden) if expanded_x is not None else None
    for i in range(tokens * topk):
        r, k = divmod(i, topk)
        v = int(idx[i])
        kept = v >= 0 and (mode == 1 or v < rows)
        s = float(scales[r, k]) if scales is not None else 1.0
        if kept:
            grad_x[v] += gy[r] * s
        if scales is not None:
            x_i = flat_x[v] if kept else torch.zeros(hidden, dtype=torch.float64)
            b_i = bias[int(expert_idx[r, k])].double() if bias is not None else 0.0
            grad_s[r, k] = ((x_i + b_i) * gy[r]).sum()
    return grad_x.reshape(rows_shape), grad_s


@pytest.mark.parametrize("dtype,weight_dtype", PRECISIONS)
@pytest.mark.parametrize("mode,active_num", [(0, 0), (0, 11), (0, 1000), (1, 0)])
@pytest.mark.parametrize("with_scales,with_bias", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_finalize_routing_v2_grad_operator(dtype, weight_dtype, mode, active_num, with_scales, with_bias, layout):
    tokens, topk, hidden, experts, capacity = 9, 2, 13, 4, 4
    pairs = tokens * topk
    if mode == 0:
        rows = active_num if 0 < active_num < pairs else pairs
        shape = (rows, hidden)
        idx = torch.randperm(pairs).to(torch.int32)  # values >= activeNum are dropped pairs
    else:
        shape = (experts, capacity, hidden)
        idx = torch.randint(-1, experts * capacity, (pairs,), dtype=torch.int32)
    grad_y = make_view(torch.randn(tokens, hidden).to(dtype), layout)
    expanded_x = make_view(torch.randn(shape).to(dtype), layout) if with_scales else None
    scales = make_view(torch.rand(tokens, topk).to(weight_dtype), layout) if with_scales else None
    expert_idx = torch.randint(0, experts, (tokens, topk), dtype=torch.int32) if with_bias else None
    bias = make_view(torch.randn(experts, hidden).to(dtype), layout) if with_bias else None

    grad_x, grad_s = mt.moe_finalize_routing_v2_grad(
        grad_y, make_view(idx, layout), expanded_x=expanded_x, scales=scales, expert_idx=expert_idx, bias=bias,
        drop_pad_mode=mode, active_num=active_num, expert_num=experts if mode == 1 else 0,
        expert_capacity=capacity if mode == 1 else 0)
    want_x, want_s = finalize_routing_v2_grad_formula(grad_y, idx, expanded_x, scales, expert_idx, bias, mode,
                                                      active_num, shape)
    check_output(grad_x, want_x, shape, dtype, "grad_expanded_x")
    check_output(grad_s, want_s if with_scales else None, (tokens, topk), weight_dtype, "grad_scales")


def token_permute_with_routing_map_grad_formula(grad, sorted_indices, experts, tokens, drop_and_pad, probs_grad,
                                                routing_map):
    hidden = grad.shape[1]
    tokens_grad = torch.zeros(tokens, hidden, dtype=torch.float64)
    out_probs = torch.zeros(tokens, experts, dtype=torch.float64) if probs_grad is not None else None
    rows = grad.shape[0]
    if drop_and_pad:
        capacity = rows // experts
        for p in range(rows):
            t = int(sorted_indices[p])
            tokens_grad[t] += grad[p].double()
            if probs_grad is not None:
                out_probs[t, p // capacity] += float(probs_grad[p])
    else:
        topk = rows // tokens
        for t in range(tokens):
            for k in range(topk):
                tokens_grad[t] += grad[int(sorted_indices[t * topk + k])].double()
        if probs_grad is not None:
            c = 0
            for e in range(experts):
                for t in range(tokens):
                    if routing_map[t, e]:
                        out_probs[t, e] = float(probs_grad[c])
                        c += 1
    return tokens_grad, out_probs


@pytest.mark.parametrize("dtype,weight_dtype", PRECISIONS)
@pytest.mark.parametrize("drop_and_pad", [False, True])
@pytest.mark.parametrize("with_probs", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "sliced"])
def test_token_permute_with_routing_map_grad_operator(dtype, weight_dtype, drop_and_pad, with_probs, layout):
    tokens, experts, hidden, topk, capacity = 11, 5, 9, 2, 4
    routing_map = torch.zeros(tokens, experts, dtype=torch.bool).scatter_(
        1, torch.rand(tokens, experts).topk(topk, dim=1).indices, True)
    rows = experts * capacity if drop_and_pad else tokens * topk
    if drop_and_pad:  # any token ids, repeats included: they sum
        sorted_indices = torch.randint(0, tokens, (rows,), dtype=torch.int32)
    else:
        sorted_indices = torch.randperm(rows).to(torch.int32)
    grad = make_view(torch.randn(rows, hidden).to(dtype), layout)
    probs_grad = make_view(torch.randn(rows).to(weight_dtype), layout) if with_probs else None

    tokens_grad, out_probs = mt.moe_token_permute_with_routing_map_grad(
        grad, make_view(sorted_indices, layout), experts, tokens, drop_and_pad=drop_and_pad,
        permuted_probs_output_grad=probs_grad, routing_map=routing_map if with_probs else None)
    want_t, want_p = token_permute_with_routing_map_grad_formula(grad, sorted_indices, experts, tokens, drop_and_pad,
                                                                 probs_grad, routing_map)
    check_output(tokens_grad, want_t, (tokens, hidden), dtype, "tokens_grad")
    check_output(out_probs, want_p if with_probs else None, (tokens, experts), weight_dtype, "probs_grad")


def init_routing_v2_grad_formula(grad_expanded_x, idx, top_k, mode):
    """out[n] = sum over k of gradExpandedX[idx[n*K + k]], skipped values (mode 0: >= rows, mode 1: -1) left out
    (float64)."""
    hidden = grad_expanded_x.shape[-1]
    rows = grad_expanded_x.double().reshape(-1, hidden)
    padded = torch.cat([rows, torch.zeros(1, hidden, dtype=torch.float64)])  # row `len(rows)`: no term
    v = idx.long().reshape(-1, top_k)
    kept = v >= 0 if mode == 1 else v < rows.shape[0]
    return padded[torch.where(kept, v, rows.shape[0])].sum(1)


def init_routing_v2_indices(experts, capacity):
    """expandedRowIdx as MoeInitRoutingV2 writes it for token-major expert ids: the pairs sorted by expert, stably;
    capacity 0: each pair's position in that order, else e*C + its rank inside its expert (-1 from rank C on)."""
    flat = experts.reshape(-1).long()
    order = torch.sort(flat, stable=True).indices
    position = torch.empty_like(order)
    position[order] = torch.arange(flat.numel())
    if capacity == 0:
        return position.to(torch.int32)
    start = torch.searchsorted(flat[order], flat)  # the first position of the pair's expert
    rank = position - start
    return torch.where(rank < capacity, flat * capacity + rank, -1).to(torch.int32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode,active_num", [(0, 0), (0, 7), (0, 1000), (1, 0), (1, 3)])
@pytest.mark.parametrize("indices", ["forward", "random"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_init_routing_v2_grad_operator(dtype, mode, active_num, indices, layout):
    tokens, topk, hidden, experts, capacity = 9, 3, 13, 4, 5
    pairs = tokens * topk
    if indices == "forward":
        idx = init_routing_v2_indices(torch.randint(0, experts, (tokens, topk)), capacity if mode == 1 else 0)
    elif mode == 0:
        idx = torch.randint(0, pairs, (pairs,), dtype=torch.int32)  # repeats sum; values >= activeNum skipped
    else:
        idx = torch.randint(-1, experts * capacity, (pairs,), dtype=torch.int32)
    rows = active_num if 0 < active_num < pairs else pairs
    shape = (experts, capacity, hidden) if mode == 1 else (rows, hidden)
    grad = make_view(torch.randn(shape).to(dtype), layout)

    out = mt.moe_init_routing_v2_grad(grad, make_view(idx, layout), topk, drop_pad_mode=mode, active_num=active_num)
    check_output(out, init_routing_v2_grad_formula(grad, idx, topk, mode), (tokens, hidden), dtype, "out")


@pytest.mark.parametrize("mode", [0, 1])
def test_init_routing_v2_grad_is_the_backward_of_a_plain_pytorch_dispatch(mode):
    """The forward as plain PyTorch (index_select of the token rows into expert-sorted order, drops left out),
    differentiated by autograd, gives the operator's result; small integers keep every sum exact."""
    tokens, topk, hidden, experts, capacity = 12, 2, 8, 3, 5
    x = torch.randn(tokens, hidden, requires_grad=True)
    idx = init_routing_v2_indices(torch.randint(0, experts, (tokens, topk)), capacity if mode == 1 else 0)
    rows = experts * capacity if mode == 1 else tokens * topk
    kept = idx >= 0
    token_of_row = torch.zeros(rows, dtype=torch.long)
    token_of_row[idx[kept].long()] = torch.arange(tokens * topk)[kept] // topk
    filled = torch.zeros(rows, 1)
    filled[idx[kept].long()] = 1.0
    expanded = x.index_select(0, token_of_row) * filled  # rows no pair fills are +0
    g = torch.randint(-8, 8, (rows, hidden)).float()
    (want,) = torch.autograd.grad(expanded, x, g)
    grad = g.reshape(experts, capacity, hidden) if mode == 1 else g
    assert torch.equal(mt.moe_init_routing_v2_grad(grad, idx, topk, drop_pad_mode=mode), want)


def test_init_routing_v2_grad_worked_examples():
    g = torch.arange(1.0, 7.0).reshape(6, 1)
    idx = torch.tensor([3, 0, 1, 2, 4, 5], dtype=torch.int32)
    assert mt.moe_init_routing_v2_grad(g, idx, 2).flatten().tolist() == [5, 5, 11]
    assert mt.moe_init_routing_v2_grad(g[:4], idx, 2, active_num=4).flatten().tolist() == [5, 5, 0]
    idx = torch.tensor([4, 0, 1, 2, 5, -1], dtype=torch.int32)
    assert mt.moe_init_routing_v2_grad(g.reshape(3, 2, 1), idx, 2, drop_pad_mode=1).flatten().tolist() == [6, 5, 6]


def test_grad_operators_are_not_differentiable_but_accept_grad_inputs():
    grad_y = torch.randn(4, 6, requires_grad=True)
    idx = torch.randperm(4).to(torch.int32)
    grad_x, _ = mt.moe_finalize_routing_v2_grad(grad_y, idx)
    want, _ = finalize_routing_v2_grad_formula(grad_y.detach(), idx, None, None, None, None, 0, 0, (4, 6))
    assert_close(grad_x, want, torch.float32, "grad_expanded_x")


# --- MoeTokenUnpermuteWithRoutingMapGrad ---------------------------------------------------------------------

ALL_PRECISIONS = [(t, w) for t in (torch.float32, torch.float16, torch.bfloat16)
                  for w in (torch.float32, torch.float16, torch.bfloat16)]


def token_unpermute_indices(routing_map, drop_and_pad, capacity):
    """(out_index, permute_token_id) as MoeTokenUnpermuteWithRoutingMap writes them from the permute's
    sortedIndices: dropless out_index = sortedIndices (slot t*K + k: token t's k-th routed expert's row in
    expert-major order), permute_token_id[i] = i // K; drop-and-pad the stable sort of sortedIndices (expert e's
    C rows: its routed tokens ascending, then the others) and its positions."""
    tokens, experts = routing_map.shape
    if not drop_and_pad:
        row = {}
        for e in range(experts):
            for t in range(tokens):
                if routing_map[t, e]:
                    row[(t, e)] = len(row)
        sorted_indices = [row[(t, e)] for t in range(tokens) for e in range(experts) if routing_map[t, e]]
        topk = len(sorted_indices) // tokens
        return (torch.tensor(sorted_indices, dtype=torch.int32),
                torch.tensor([i // topk for i in range(len(sorted_indices))], dtype=torch.int32))
    sorted_indices = []
    for e in range(experts):
        order = [t for t in range(tokens) if routing_map[t, e]] + [t for t in range(tokens) if not routing_map[t, e]]
        sorted_indices += order[:capacity]
    token_id, out_index = torch.tensor(sorted_indices, dtype=torch.int64).sort(stable=True)
    return out_index.to(torch.int32), token_id.to(torch.int32)


def token_unpermute_with_routing_map_grad_formula(g, out_index, token_id, routing_map, permuted, probs,
                                                  drop_and_pad):
    """permutedTokensGrad[r_i] += v_i * g[t_i]; probsGrad[t_i][e_i] += permuted[r_i] . g[t_i] (float64)."""
    tokens, hidden = g.shape
    n = out_index.numel()
    topk = n // tokens if tokens else 0
    experts = probs.shape[1] if probs is not None else 0
    capacity = n // experts if experts else 0
    grad = torch.zeros(n, hidden, dtype=torch.float64)
    probs_grad = torch.zeros(tokens, experts, dtype=torch.float64) if probs is not None else None
    routed = [[e for e in range(experts) if routing_map[t, e]] for t in range(tokens)] if probs is not None else None
    for i in range(n):
        r = int(out_index[i])
        t = int(token_id[i]) if drop_and_pad else i // topk
        v = 1.0
        if probs is not None:
            e = r // capacity if drop_and_pad else routed[t][i % topk]
            v = float(probs[t, e])
            probs_grad[t, e] += float((permuted[r].double() * g[t].double()).sum())
        grad[r] += v * g[t].double()
    return grad, probs_grad


@pytest.mark.parametrize("dtype,weight_dtype", ALL_PRECISIONS)
@pytest.mark.parametrize("drop_and_pad", [False, True])
@pytest.mark.parametrize("with_probs", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_token_unpermute_with_routing_map_grad_operator(dtype, weight_dtype, drop_and_pad, with_probs, layout):
    tokens, experts, hidden, topk, capacity = 11, 5, 13, 2, 4
    routing_map = torch.zeros(tokens, experts, dtype=torch.bool).scatter_(
        1, torch.rand(tokens, experts).topk(topk, dim=1).indices, True)
    out_index, token_id = token_unpermute_indices(routing_map, drop_and_pad, capacity)
    rows = out_index.numel()
    g = make_view(torch.randn(tokens, hidden).to(dtype), layout)
    permuted = make_view(torch.randn(rows, hidden).to(dtype), layout) if with_probs else None
    probs = make_view(torch.rand(tokens, experts).to(weight_dtype), layout) if with_probs else None
    grad, probs_grad = mt.moe_token_unpermute_with_routing_map_grad(
        g, make_view(out_index, layout), make_view(token_id, layout), routing_map=routing_map if with_probs else None,
        permuted_tokens=permuted, probs=probs, drop_and_pad=drop_and_pad, restore_shape=(tokens, hidden))
    want, want_p = token_unpermute_with_routing_map_grad_formula(g, out_index, token_id, routing_map, permuted, probs,
                                                                 drop_and_pad)
    check_output(grad, want, (rows, hidden), dtype, "permuted_tokens_grad")
    check_output(probs_grad, want_p, (tokens, experts), weight_dtype, "probs_grad")


@pytest.mark.parametrize("dtype,weight_dtype", PRECISIONS)
def test_token_unpermute_with_routing_map_grad_arbitrary_indices(dtype, weight_dtype):
    # Rows named twice (they sum) or never (+0), a token twice under one expert (its d_i sum).
    tokens, experts, hidden, capacity = 6, 3, 17, 4
    rows = experts * capacity
    out_index = torch.randint(0, rows, (rows,), dtype=torch.int32)
    token_id = torch.randint(0, tokens, (rows,), dtype=torch.int32)
    routing_map = torch.ones(tokens, experts, dtype=torch.int8)
    g = torch.randn(tokens, hidden).to(dtype)
    permuted = torch.randn(rows, hidden).to(dtype)
    probs = torch.rand(tokens, experts).to(weight_dtype)
    grad, probs_grad = mt.moe_token_unpermute_with_routing_map_grad(g, out_index, token_id, routing_map, permuted,
                                                                    probs, drop_and_pad=True)
    want, want_p = token_unpermute_with_routing_map_grad_formula(g, out_index, token_id, routing_map, permuted, probs,
                                                                 True)
    check_output(grad, want, (rows, hidden), dtype, "permuted_tokens_grad")
    check_output(probs_grad, want_p, (tokens, experts), weight_dtype, "probs_grad")
    unreferenced = sorted(set(range(rows)) - set(out_index.tolist()))
    assert all(grad[r].eq(0).all() and not grad[r].signbit().any() for r in unreferenced)


def test_token_unpermute_with_routing_map_grad_worked_examples():
    permuted = torch.arange(1.0, 13.0).reshape(6, 2)
    # Dropless, K = 2, through torch.ops with restore_shape as a torch.Size.
    routing_map = torch.tensor([[1, 0, 1], [1, 1, 0], [0, 1, 1]], dtype=torch.int8)
    probs = torch.tensor([[0.5, 0, 0.25], [1, 2, 0], [0, 4, 0.5]])
    g = torch.tensor([[1.0, 0], [0, 1], [1, 1]])
    out_index = torch.tensor([0, 4, 1, 2, 3, 5], dtype=torch.int32)
    token_id = torch.tensor([0, 0, 1, 1, 2, 2], dtype=torch.int32)
    grad, probs_grad = mt.moe_token_unpermute_with_routing_map_grad(g, out_index, token_id, routing_map, permuted,
                                                                    probs, False, torch.Size([3, 2]))
    assert grad.flatten().tolist() == [0.5, 0, 0, 1, 0, 2, 4, 4, 0.25, 0, 0.5, 0.5]
    assert probs_grad.flatten().tolist() == [1, 0, 9, 4, 6, 0, 0, 15, 23]
    got = token_unpermute_indices(routing_map.bool(), False, 0)
    assert got[0].tolist() == out_index.tolist() and got[1].tolist() == token_id.tolist()
    # Drop-and-pad, C = 2: expert 0 drops token 2; token 1 pads experts 1 and 2 (weight 0, a probs gradient).
    routing_map = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 0, 0]], dtype=torch.bool)
    probs = torch.tensor([[0.5, 0.25, 0.25], [1, 0, 0], [1, 0, 0]])
    g = torch.tensor([[1.0, 0], [0, 1], [5, 5]])
    out_index, token_id = token_unpermute_indices(routing_map, True, 2)
    assert out_index.tolist() == [0, 2, 4, 1, 3, 5] and token_id.tolist() == [0, 0, 0, 1, 1, 1]
    grad, probs_grad = mt.moe_token_unpermute_with_routing_map_grad(g, out_index, token_id, routing_map, permuted,
                                                                    probs, True)
    assert grad.flatten().tolist() == [0.5, 0, 0, 1, 0.25, 0, 0, 0, 0.25, 0, 0, 0]
    assert probs_grad.flatten().tolist() == [1, 5, 9, 4, 8, 12, 0, 0, 0]
    grad, probs_grad = mt.moe_token_unpermute_with_routing_map_grad(g, out_index, token_id, drop_and_pad=True)
    assert probs_grad is None
    assert grad.flatten().tolist() == [1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1]  # token 0's rows 0, 2, 4; token 1's


@pytest.mark.parametrize("with_probs", [False, True])
def test_token_unpermute_with_routing_map_grad_mindspeed_call(with_probs):
    # MindSpeed passes the permute's sortedIndices as both index inputs; dropless never reads permuteTokenId.
    tokens, experts, hidden, topk = 7, 4, 10, 2
    routing_map = torch.zeros(tokens, experts, dtype=torch.bool).scatter_(
        1, torch.rand(tokens, experts).topk(topk, dim=1).indices, True)
    _, sorted_indices = mt.moe_token_permute_with_routing_map(torch.randn(tokens, hidden), routing_map)[:3:2]
    g = torch.randn(tokens, hidden)
    permuted = torch.randn(tokens * topk, hidden)
    probs = torch.rand(tokens, experts)
    args = (routing_map, permuted, probs) if with_probs else (None, None, None)
    got = mt.moe_token_unpermute_with_routing_map_grad(g, sorted_indices, sorted_indices, *args)
    token_id = torch.arange(tokens * topk, dtype=torch.int32) // topk
    want = mt.moe_token_unpermute_with_routing_map_grad(g, sorted_indices, token_id, *args)
    assert torch.equal(got[0], want[0])
    assert (got[1] is None) == (not with_probs) and (got[1] is None or torch.equal(got[1], want[1]))
    want_t, want_p = token_unpermute_with_routing_map_grad_formula(g, sorted_indices, token_id, routing_map,
                                                                   permuted if with_probs else None,
                                                                   probs if with_probs else None, False)
    check_output(got[0], want_t, (tokens * topk, hidden), torch.float32, "permuted_tokens_grad")


def test_token_unpermute_with_routing_map_grad_is_not_differentiable():
    g = torch.randn(2, 3, requires_grad=True)
    idx = torch.tensor([1, 0], dtype=torch.int32)
    grad, probs_grad = mt.moe_token_unpermute_with_routing_map_grad(g, idx, idx)
    assert probs_grad is None
    assert torch.equal(grad, g.detach()[[1, 0]])
    with pytest.raises(RuntimeError, match="MoeTokenUnpermuteWithRoutingMapGrad: the outputs of "
                                           "moe_token_unpermute_with_routing_map_grad are not differentiable"):
        grad.sum().backward()
