"""moe_token_unpermute_with_routing_map: bit for bit against a plain PyTorch reference (Megatron's unpermute
written out: every permuted row weighted by its probability in fp32 and added into its token, in ascending
contribution order, rounded once), in both modes, with and without probs, every token x weight dtype pair,
layouts, zero weights, repeated indices, empty batches; the index outputs; the spec's worked examples; the
permute followed by the unpermute; torch.ops registration; the backward (MoeTokenUnpermuteWithRoutingMapGrad)
against autograd of the reference, and the whole routing-map MoE layer (Megatron's permute, per-expert
matmuls, unpermute) forward and backward against PyTorch autograd of it written out."""
import pytest
import torch

import moegrad.torch as mt
from reference import make_view, permute_ref

FLOATS = [torch.float32, torch.bfloat16, torch.float16]
PAIRS = [(t, w) for t in FLOATS for w in FLOATS]
_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def unpermute_ref(permuted, sorted_indices, restore_shape, probs=None, routing_map=None, padded_mode=False):
    """Megatron's unpermute as the contract fixes its arithmetic. Contribution q: dropless (N = T*K) token
    q // K, row sorted_indices[q], weight probs[token][its (q % K)-th routed expert]; pad (N = E*C) token
    sorted_indices[q], row q, weight probs[token][q // C]. Each term is one fp32 multiply (weight 1 without
    probs), added in fp32 from the first term of its token, ascending q; one rounding to the tokens' dtype.
    Returns (unpermuted, out_index, permute_token_id, permute_probs or None)."""
    T, H = restore_shape
    N = sorted_indices.numel()
    idx = sorted_indices.long()
    if padded_mode:
        tok = idx
        row = torch.arange(N)
        if probs is not None:
            C = N // probs.shape[1]
            expert = torch.arange(N) // max(C, 1)
    else:
        K = N // T if T else 0
        tok = torch.arange(N) // max(K, 1)
        row = idx
        if probs is not None:
            # Token t's routed experts in ascending id, token after token.
            expert = routing_map.bool().nonzero()[:, 1]
    weight = None if probs is None else probs[tok, expert]
    acc = torch.zeros(T, H, dtype=torch.float32)
    started = torch.zeros(T, dtype=torch.bool)
    for q in range(N):
        t = int(tok[q])
        x = permuted[int(row[q])].float()
        term = x * (weight[q].float() if weight is not None else torch.tensor(1.0))
        acc[t] = acc[t] + term if started[t] else term
        started[t] = True
    out_token_id, out_index = torch.sort(tok, stable=True)
    out_index = row[out_index]
    return acc.to(permuted.dtype), out_index.int(), out_token_id.int(), weight


def assert_bits(got, want, what):
    if want is None:
        assert got is None, what
        return
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if got.is_floating_point():
        got, want = got.contiguous().view(_BITS[got.dtype]), want.contiguous().view(_BITS[want.dtype])
    assert torch.equal(got, want), what


def routing(tokens, experts, topk, gen):
    """A top-k routing map: K distinct experts per token."""
    choice = torch.rand(tokens, experts, generator=gen).topk(topk, dim=1).indices
    return torch.zeros(tokens, experts, dtype=torch.bool).scatter_(1, choice, True)


def make_case(padded, with_probs, dtype, weight_dtype, T=9, E=5, H=13, K=2, C=3, seed=0, random_indices=False):
    gen = torch.Generator().manual_seed(seed)
    routing_map = routing(T, E, K, gen) if not padded else torch.rand(T, E, generator=gen) < 0.4
    N = E * C if padded else T * K
    permuted = torch.randn(N, H, generator=gen).to(dtype)
    probs = torch.rand(T, E, generator=gen).to(weight_dtype) if with_probs else None
    if probs is not None:
        probs[torch.rand(T, E, generator=gen) < 0.2] = 0.0  # zero weights are multiplied, not skipped
    if random_indices or padded:
        hi = T if padded else N
        sorted_indices = torch.randint(0, hi, (N,), generator=gen).int()
    else:
        sorted_indices = torch.randperm(N, generator=gen).int()
    return permuted, sorted_indices, routing_map, probs


def run_and_compare(permuted, sorted_indices, routing_map, probs, padded, restore_shape, what):
    got = mt.moe_token_unpermute_with_routing_map(permuted, sorted_indices, routing_map, probs, padded, restore_shape)
    shape = tuple(restore_shape) if restore_shape is not None else (probs.shape[0], permuted.shape[1])
    want = unpermute_ref(permuted, sorted_indices, shape, probs, routing_map, padded)
    for g, w, name in zip(got, want, ("unpermuted_tokens", "out_index", "permute_token_id", "permute_probs")):
        assert_bits(g, w, f"{name} {what}")
    return got


def test_spec_worked_examples():
    permuted = torch.arange(1, 13, dtype=torch.float32).view(6, 2)
    dmap = torch.tensor([[1, 0, 1], [1, 1, 0], [0, 1, 1]], dtype=torch.int8)
    dprobs = torch.tensor([[0.5, 0, 0.25], [1, 2, 0], [0, 4, 0.5]])
    out, index, token_id, pprobs = mt.moe_token_unpermute_with_routing_map(
        permuted, torch.tensor([0, 4, 1, 2, 3, 5], dtype=torch.int32), dmap, dprobs)
    assert out.view(-1).tolist() == [2.75, 3.5, 13, 16, 33.5, 38]
    assert index.tolist() == [0, 4, 1, 2, 3, 5] and token_id.tolist() == [0, 0, 1, 1, 2, 2]
    assert pprobs.tolist() == [0.5, 0.25, 1, 2, 4, 0.5]
    pmap = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 0, 0]], dtype=torch.int8)
    pprobs_in = torch.tensor([[0.5, 0.25, 0.25], [1, 0, 0], [1, 0, 0]])
    out, index, token_id, pprobs = mt.moe_token_unpermute_with_routing_map(
        permuted, torch.tensor([0, 1, 0, 1, 0, 1], dtype=torch.int32), pmap, pprobs_in, padded_mode=True)
    assert out.view(-1).tolist() == [4, 5, 3, 4, 0, 0]
    assert token_id.tolist() == [0, 0, 0, 1, 1, 1] and index.tolist() == [0, 2, 4, 1, 3, 5]
    assert pprobs.tolist() == [0.5, 1, 0.25, 0, 0.25, 0]


@pytest.mark.parametrize("dtype,weight_dtype", PAIRS)
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("with_probs", [False, True])
def test_every_mode_and_dtype_pair(dtype, weight_dtype, padded, with_probs):
    permuted, idx, routing_map, probs = make_case(padded, with_probs, dtype, weight_dtype, seed=hash((dtype, padded)))
    T, H = routing_map.shape[0], permuted.shape[1]
    run_and_compare(permuted, idx, routing_map, probs, padded, (T, H), "")
    if with_probs:  # restore_shape is optional with probs, and a torch.Size will do
        run_and_compare(permuted, idx, routing_map, probs, padded, None, "without restore_shape")
        run_and_compare(permuted, idx, routing_map, probs, padded, torch.Size([T, H]), "torch.Size")


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("dtype,weight_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.float32),
                                                (torch.float16, torch.bfloat16)])
def test_layouts(layout, padded, dtype, weight_dtype):
    permuted, idx, routing_map, probs = make_case(padded, True, dtype, weight_dtype, T=11, E=6, H=33, seed=5)
    T, H = routing_map.shape[0], permuted.shape[1]
    views = [make_view(t, layout) for t in (permuted, idx, routing_map, probs)]
    run_and_compare(*views, padded, (T, H), layout)


@pytest.mark.parametrize("padded", [False, True])
def test_repeated_and_unreferenced_indices(padded):
    permuted, idx, routing_map, probs = make_case(padded, True, torch.float32, torch.float32, T=12, E=4, K=3, C=2,
                                                  seed=9, random_indices=True)
    run_and_compare(permuted, idx, routing_map, probs, padded, (12, permuted.shape[1]), "random indices")
    run_and_compare(permuted, idx, None if padded else routing_map, None, padded, (12, permuted.shape[1]),
                    "random indices, no probs")


@pytest.mark.parametrize("hidden", [1, 7, 16, 17, 64, 129])
@pytest.mark.parametrize("topk", [1, 3, 8])
def test_hidden_sizes_and_topk(hidden, topk):
    permuted, idx, routing_map, probs = make_case(False, True, torch.bfloat16, torch.float32, T=20, E=10, H=hidden,
                                                  K=topk, seed=hidden * 10 + topk)
    run_and_compare(permuted, idx, routing_map, probs, False, (20, hidden), f"H {hidden} K {topk}")


def test_zero_weight_times_infinity_is_nan():
    permuted = torch.tensor([[float("inf"), -3.0], [1.0, -0.0]])
    routing_map = torch.ones(1, 2, dtype=torch.bool)
    out, *_ = mt.moe_token_unpermute_with_routing_map(permuted, torch.tensor([0, 1], dtype=torch.int32), routing_map,
                                                      torch.zeros(1, 2))
    assert torch.isnan(out[0, 0]) and out[0, 1].item() == 0.0 and torch.signbit(out[0, 1])


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("with_probs", [False, True])
def test_empty_batches(padded, with_probs):
    permuted = torch.empty(0, 6, dtype=torch.bfloat16)
    probs = torch.empty(0, 4) if with_probs else None
    routing_map = torch.empty(0, 4, dtype=torch.bool)
    out, index, token_id, pprobs = mt.moe_token_unpermute_with_routing_map(
        permuted, torch.empty(0, dtype=torch.int32), routing_map, probs, padded, (0, 6))
    assert out.shape == (0, 6) and out.dtype == torch.bfloat16 and index.shape == (0,) and token_id.shape == (0,)
    assert (pprobs is None) == (not with_probs)
    # Tokens that nothing reaches are +0.
    out, *_ = mt.moe_token_unpermute_with_routing_map(torch.empty(0, 3), torch.empty(0, dtype=torch.int32),
                                                      padded_mode=padded, restore_shape=(4, 3))
    assert torch.equal(out.view(torch.int32), torch.zeros(4, 3, dtype=torch.int32))


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("dtype,weight_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.float32)])
def test_permute_then_unpermute(padded, dtype, weight_dtype):
    """On the permute's outputs: without probs every token comes back times its number of experts (dropless) or
    of the experts that kept it (pad); with probs, weighted by them."""
    gen = torch.Generator().manual_seed(3)
    T, E, H, K = 16, 6, 8, 2
    tokens = torch.randn(T, H, generator=gen).to(dtype)
    routing_map = routing(T, E, K, gen)
    probs = (torch.rand(T, E, generator=gen) * routing_map).to(weight_dtype)
    n = E * 3 if padded else T * K
    permuted, permuted_probs, sorted_indices = mt.moe_token_permute_with_routing_map(
        tokens, routing_map, probs, num_out_tokens=n, drop_and_pad=padded)
    want_permuted, _, _ = permute_ref(tokens, routing_map, probs, n, padded)
    assert_bits(permuted, want_permuted, "permute")
    out, index, token_id, pprobs = run_and_compare(permuted, sorted_indices, routing_map, probs, padded, (T, H),
                                                   "after the permute")
    if not padded:
        # Every slot of a token holds a copy of it: the token comes back times the sum of its routed probs.
        sums = (tokens.float() * probs.float().sum(1, keepdim=True)).to(dtype)
        torch.testing.assert_close(out.float(), sums.float(), rtol=2e-2, atol=2e-2)


def test_torch_ops_registration_and_fallback(monkeypatch):
    permuted, idx, routing_map, probs = make_case(True, True, torch.float32, torch.float16, seed=4)
    T, H = routing_map.shape[0], permuted.shape[1]
    want = run_and_compare(permuted, idx, routing_map, probs, True, (T, H), "")
    if mt.REGISTRATION_ERROR is None:
        direct = torch.ops.moegrad.moe_token_unpermute_with_routing_map(permuted, idx, routing_map, probs, True,
                                                                         [T, H])
        for g, w in zip(direct, want):
            assert_bits(g, w, "torch.ops")
    entry = {name: auto for name, (_cpu, auto) in mt._KERNELS.items()}
    monkeypatch.setattr(mt, "_ENTRY", entry)
    for g, w in zip(mt.moe_token_unpermute_with_routing_map(permuted, idx, routing_map, probs, True, (T, H)), want):
        assert_bits(g, w, "without the dispatcher")


@pytest.mark.parametrize("through_ops", [True, False])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("dtype,weight_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.float32),
                                                (torch.float16, torch.float16)])
@pytest.mark.parametrize("with_probs", [True, False])
def test_backward(monkeypatch, through_ops, padded, dtype, weight_dtype, with_probs):
    """The gradients of permuted_tokens and probs are MoeTokenUnpermuteWithRoutingMapGrad's outputs bit for bit on
    the forward's out_index / permute_token_id, and match autograd of the float64 reference."""
    if not through_ops:
        monkeypatch.setattr(mt, "_ENTRY", {name: auto for name, (_cpu, auto) in mt._KERNELS.items()})
    permuted, idx, routing_map, probs = make_case(padded, True, dtype, weight_dtype, seed=5)
    T, H = routing_map.shape[0], permuted.shape[1]
    x = permuted.clone().requires_grad_(True)
    p = probs.clone().requires_grad_(True) if with_probs else None
    out, out_index, token_id, pprobs = mt.moe_token_unpermute_with_routing_map(
        x, idx, routing_map, p, padded_mode=padded, restore_shape=None if with_probs else (T, H))
    assert out.requires_grad and not out_index.requires_grad and not token_id.requires_grad
    assert pprobs is None or not pprobs.requires_grad
    g = torch.randn(T, H).to(dtype)
    out.backward(g)
    want_x, want_p = mt.moe_token_unpermute_with_routing_map_grad(
        g, out_index, token_id, routing_map if with_probs else None, permuted if with_probs else None,
        probs if with_probs else None, drop_and_pad=padded)
    assert_bits(x.grad, want_x, "permuted_tokens.grad vs the grad operator")
    if with_probs:
        assert_bits(p.grad, want_p, "probs.grad vs the grad operator")

    # Autograd of the reference in float64: out[tok(q)] += w(q) * x[row(q)].
    x64 = permuted.double().requires_grad_(True)
    p64 = probs.double().requires_grad_(True)
    N = idx.numel()
    if padded:
        tok, row, expert = idx.long(), torch.arange(N), torch.arange(N) // (N // probs.shape[1])
    else:
        tok, row = torch.arange(N) // (N // T), idx.long()
        expert = routing_map.bool().nonzero()[:, 1]
    w = p64[tok, expert] if with_probs else torch.ones(N, dtype=torch.float64)
    want = torch.zeros(T, H, dtype=torch.float64).index_add(0, tok, w.unsqueeze(1) * x64[row])
    want.backward(g.double())
    tol = {torch.float32: 1e-5, torch.bfloat16: 2 ** -7, torch.float16: 2 ** -9}
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=tol[dtype], atol=tol[dtype])
    if with_probs:
        torch.testing.assert_close(p.grad.double(), p64.grad, rtol=tol[weight_dtype] * 4, atol=tol[weight_dtype] * 4)


def test_backward_twice_is_refused():
    permuted, idx, routing_map, probs = make_case(False, True, torch.float32, torch.float32, seed=6)
    x = permuted.clone().requires_grad_(True)
    out, *_ = mt.moe_token_unpermute_with_routing_map(x, idx, routing_map, probs)
    (gx,) = torch.autograd.grad(out, x, torch.randn(out.shape, requires_grad=True), create_graph=True)
    with pytest.raises(RuntimeError) as info:
        gx.sum().backward()
    assert str(info.value) == ("MoeTokenUnpermuteWithRoutingMapGrad: the gradients of "
                               "moe_token_unpermute_with_routing_map are not differentiable (double backward is not "
                               "supported)")


def megatron_layer(tokens, routing_map, probs, weights, capacity):
    """Megatron-core's routing-map MoE layer written out in plain PyTorch: permute (dropless: token ids per expert
    in ascending order; drop_and_pad: each expert's first `capacity` routed tokens, then unrouted ones), the
    experts' matmuls, unpermute (each row weighted by its probability and index_add-ed into its token)."""
    T, E = routing_map.shape
    if capacity == 0:
        sorted_indices = torch.arange(T).unsqueeze(0).expand(E, T).masked_select(routing_map.T.bool())
        counts = routing_map.bool().sum(0).tolist()
        # Megatron's probs.T.masked_select(routing_map.T), as plain indexing (the same values in the same order)
        permuted_probs = probs[sorted_indices, torch.arange(E).repeat_interleave(torch.tensor(counts))]
    else:
        sorted_indices = routing_map.T.int().argsort(dim=-1, descending=True, stable=True)[:, :capacity].reshape(-1)
        permuted_probs = probs.T.reshape(-1)[torch.arange(E).repeat_interleave(capacity) * T + sorted_indices]
        counts = [capacity] * E
    permuted = tokens.index_select(0, sorted_indices)
    y = torch.cat([part @ weights[e] for e, part in enumerate(permuted.split(counts))])
    return torch.zeros_like(tokens).index_add(0, sorted_indices, y * permuted_probs.unsqueeze(1).to(y.dtype))


def moegrad_layer(tokens, routing_map, probs, weights, capacity):
    """The same layer on moegrad: MoeTokenPermuteWithRoutingMap, the experts' matmuls on its expert-major rows,
    MoeTokenUnpermuteWithRoutingMap with the permute's sorted_indices and the probs."""
    T, E = routing_map.shape
    padded = capacity > 0
    n = E * capacity if padded else int(routing_map.bool().sum())
    permuted, _, sorted_indices = mt.moe_token_permute_with_routing_map(tokens, routing_map, None, num_out_tokens=n,
                                                                        drop_and_pad=padded)
    counts = [capacity] * E if padded else routing_map.bool().sum(0).tolist()
    y = torch.cat([part @ weights[e] for e, part in enumerate(permuted.split(counts))])
    out, *_ = mt.moe_token_unpermute_with_routing_map(y, sorted_indices, routing_map, probs, padded_mode=padded)
    return out


@pytest.mark.parametrize("dtype,weight_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.float32)])
@pytest.mark.parametrize("capacity", [0, 2, 9])
def test_round_trip_matches_autograd_of_megatron(dtype, weight_dtype, capacity):
    """MoeTokenPermuteWithRoutingMap -> per-expert transform -> MoeTokenUnpermuteWithRoutingMap forward and the
    two gradient operators backward, against PyTorch autograd of Megatron's permute / unpermute in float64: the
    output and the gradients of the tokens, the router probabilities and the expert weights."""
    gen = torch.Generator().manual_seed(11)
    T, E, H, K = 21, 5, 12, 2
    routing_map = routing(T, E, K, gen)
    scores = torch.rand(T, E, generator=gen)
    probs = (scores * routing_map).to(weight_dtype).requires_grad_(True)
    tokens = torch.randn(T, H, generator=gen).to(dtype).requires_grad_(True)
    weights = (torch.randn(E, H, H, generator=gen) / H ** 0.5).to(dtype).requires_grad_(True)
    out = moegrad_layer(tokens, routing_map, probs, weights, capacity)
    g = torch.randn(T, H, generator=gen).to(dtype)
    out.backward(g)

    t64, p64, w64 = (v.detach().double().requires_grad_(True) for v in (tokens, probs, weights))
    want = megatron_layer(t64, routing_map, p64, w64, capacity)
    want.backward(g.double())
    tol = 1e-5 if dtype == torch.float32 else 2 ** -5  # bf16: the expert matmuls round too
    for got, ref, what in ((out, want, "out"), (tokens.grad, t64.grad, "tokens.grad"),
                           (probs.grad, p64.grad, "probs.grad"), (weights.grad, w64.grad, "weights.grad")):
        torch.testing.assert_close(got.double(), ref.double(), rtol=tol, atol=tol, msg=lambda m, w=what: f"{w}: {m}")
    assert probs.grad.dtype == weight_dtype and tokens.grad.dtype == dtype
