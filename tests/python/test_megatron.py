"""moegrad.torch.megatron against Megatron-core's own unfused permute / unpermute (the pinned megatron-core of
scripts/setup.sh): signatures, outputs and gradients, dropless and drop-and-pad, f32, bf16 and bf16 tokens with
fp32 probabilities; install() / uninstall(). Skipped, with the reason, only when megatron-core cannot be
imported; the CTest test python_megatron_installed fails in that case."""
import inspect
import warnings

import pytest
import torch

import moegrad.torch as mt
from moegrad.torch import megatron as mg

with warnings.catch_warnings():  # Megatron-core warns at import that Transformer Engine and Apex are absent
    warnings.simplefilter("ignore")
    moe_utils = pytest.importorskip("megatron.core.transformer.moe.moe_utils",
                                    reason="megatron-core is not installed (scripts/setup.sh pins it)")
    token_dispatcher = pytest.importorskip("megatron.core.transformer.moe.token_dispatcher")

# Megatron-core's own functions, whatever install() does later.
MG_PERMUTE, MG_UNPERMUTE = moe_utils.permute, moe_utils.unpermute

# name -> (tokens' dtype, probabilities' dtype)
PRECISIONS = {"f32": (torch.float32, torch.float32), "bf16": (torch.bfloat16, torch.bfloat16),
              "bf16+f32": (torch.bfloat16, torch.float32)}


def params(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("name", ["permute", "unpermute"])
def test_signature_is_megatrons(name):
    assert params(getattr(mg, name)) == params({"permute": MG_PERMUTE, "unpermute": MG_UNPERMUTE}[name])


def routing(tokens, experts, topk, seed, probs_dtype):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=g)
    top_probs, top_experts = logits.softmax(-1).topk(topk, dim=-1)
    routing_map = torch.zeros(tokens, experts, dtype=torch.bool).scatter_(1, top_experts, True)
    probs = torch.zeros(tokens, experts).scatter(1, top_experts, top_probs).to(probs_dtype)
    return routing_map, probs


def exact_sum_bound(terms_abs_sum, count, dtype):
    """The documented bound between two results of a sum of `count` products: each side within half an ulp of
    its dtype of its fp32 (or promoted) accumulation, which is within count * 2**-23 of the exact sum, scaled
    by the sum of the terms' magnitudes."""
    eps = torch.finfo(dtype).eps
    return (eps + 2 * count * 2.0 ** -23) * terms_abs_sum


def assert_within(got, want, bound, what):
    diff = (got.double() - want.double()).abs()
    excess = diff - bound
    assert bool((excess <= 0).all()), f"{what}: max excess {excess.max().item():.3g} over the bound"


CASES = [  # (tokens, experts, topk, capacity or None)
    (37, 8, 2, None), (64, 16, 4, None), (37, 8, 2, 6), (37, 8, 2, 12), (50, 4, 3, 40)]


@pytest.mark.parametrize("precision", list(PRECISIONS))
@pytest.mark.parametrize("tokens,experts,topk,capacity", CASES)
@pytest.mark.parametrize("with_probs", [True, False])
def test_permute_matches_megatron(precision, tokens, experts, topk, capacity, with_probs):
    """Forward bit for bit (a copy); the gradients: bit for bit where a token has at most two rows (a sum of
    two is one rounding on both sides), else within the bound of a sum in fp32."""
    dtype, probs_dtype = PRECISIONS[precision]
    hidden = 24
    routing_map, probs = routing(tokens, experts, topk, tokens * experts + topk, probs_dtype)
    x = torch.randn(tokens, hidden).to(dtype)
    pad = capacity is not None
    num_out = capacity * experts if pad else None
    results = []
    for fn in (mg.permute, MG_PERMUTE):
        xl = x.clone().requires_grad_(True)
        pl = probs.clone().requires_grad_(True) if with_probs else None
        results.append((xl, pl, *fn(xl, routing_map, pl, num_out_tokens=num_out, drop_and_pad=pad)))
    (x1, p1, out1, pp1, si1), (x2, p2, out2, pp2, si2) = results
    assert torch.equal(si1, si2) and si1.dtype == si2.dtype == torch.int64
    assert out1.dtype == out2.dtype and torch.equal(out1, out2)
    if with_probs:
        assert pp1.dtype == pp2.dtype and torch.equal(pp1, pp2)
    else:
        assert pp1 is None and pp2 is None
    gy = torch.randn(out1.shape).to(dtype)
    gp = torch.randn(out1.shape[0]).to(probs_dtype)
    outs1, outs2 = ([out1, pp1], [out2, pp2]) if with_probs else ([out1], [out2])
    grads = [gy, gp] if with_probs else [gy]
    torch.autograd.backward(outs1, grads)
    torch.autograd.backward(outs2, grads)
    rows_per_token = torch.bincount(si2, minlength=tokens)
    if int(rows_per_token.max()) <= 2:
        assert torch.equal(x1.grad, x2.grad)
    else:
        abs_sum = torch.zeros(tokens, hidden, dtype=torch.float64).index_add_(0, si2, gy.double().abs())
        bound = exact_sum_bound(abs_sum, rows_per_token.unsqueeze(1).double(), dtype)
        assert_within(x1.grad, x2.grad, bound, "tokens.grad")
    if with_probs:  # each probability goes to at most one row: a copy, bit for bit
        assert p1.grad.dtype == p2.grad.dtype and torch.equal(p1.grad, p2.grad)


@pytest.mark.parametrize("precision", list(PRECISIONS))
@pytest.mark.parametrize("tokens,experts,topk,capacity", CASES)
@pytest.mark.parametrize("with_probs", [True, False])
def test_unpermute_matches_megatron(precision, tokens, experts, topk, capacity, with_probs):
    """Output and gradients against Megatron's unpermute on the same permutation: bit for bit where both round
    once (fp32 without probs and at most two rows a token), else within the documented bound: moegrad rounds
    once from fp32, Megatron once per product and per addition in the promoted dtype."""
    dtype, probs_dtype = PRECISIONS[precision]
    hidden = 24
    routing_map, probs = routing(tokens, experts, topk, 7 * tokens + experts, probs_dtype)
    pad = capacity is not None
    num_out = capacity * experts if pad else None
    _, _, sorted_indices = MG_PERMUTE(torch.zeros(tokens, 1), routing_map, None, num_out_tokens=num_out,
                                      drop_and_pad=pad)
    permuted = torch.randn(sorted_indices.shape[0], hidden).to(dtype)
    results = []
    for fn in (mg.unpermute, MG_UNPERMUTE):
        tl = permuted.clone().requires_grad_(True)
        pl = probs.clone().requires_grad_(True) if with_probs else None
        out = fn(tl, sorted_indices, torch.Size([tokens, hidden]), probs=pl, routing_map=routing_map,
                 drop_and_pad=pad)
        results.append((tl, pl, out))
    (t1, p1, out1), (t2, p2, out2) = results
    assert out1.dtype == out2.dtype == dtype and out1.shape == out2.shape == (tokens, hidden)
    g = torch.randn(tokens, hidden).to(dtype)
    out1.backward(g)
    out2.backward(g)

    # The row weights (1 without probs) and each output's terms, exactly.
    if with_probs:
        rows = torch.arange(sorted_indices.shape[0])
        expert_of_row = rows // (rows.shape[0] // experts) if pad else \
            torch.repeat_interleave(torch.arange(experts), routing_map.sum(0))
        w = probs.double()[sorted_indices, expert_of_row]
    else:
        w = torch.ones(sorted_indices.shape[0], dtype=torch.float64)
    terms = permuted.double() * w.unsqueeze(1)
    count = torch.bincount(sorted_indices, minlength=tokens).double().unsqueeze(1)
    abs_sum = torch.zeros(tokens, hidden, dtype=torch.float64).index_add_(0, sorted_indices, terms.abs())
    if dtype == torch.float32 and not with_probs and int(count.max()) <= 2:
        assert torch.equal(out1, out2)
    else:
        assert_within(out1, out2, exact_sum_bound(abs_sum, count, dtype), "out")
    # permuted_tokens.grad: g[token] * w, one product each
    if not with_probs:
        assert torch.equal(t1.grad, t2.grad)
    else:
        bound = exact_sum_bound((g.double()[sorted_indices] * w.unsqueeze(1)).abs(), 1, dtype)
        assert_within(t1.grad, t2.grad, bound, "permuted_tokens.grad")
        assert p1.grad.dtype == p2.grad.dtype == probs_dtype
        # probs.grad[t, e]: a dot product over H of the row and g[t]; zero off the rows (pad mode: the padding
        # rows too, whose probability is 0 but whose gradient is not)
        dots_abs = (permuted.double().abs() * g.double().abs()[sorted_indices]).sum(1)
        bound_rows = exact_sum_bound(dots_abs, hidden, probs_dtype)
        bound = torch.zeros(tokens, experts, dtype=torch.float64).index_put_((sorted_indices, expert_of_row),
                                                                             bound_rows, accumulate=True)
        assert_within(p1.grad, p2.grad, bound, "probs.grad")


@pytest.mark.parametrize("precision", list(PRECISIONS))
def test_round_trip_through_both_implementations(precision):
    """A dropless layer: permute -> a per-row transform -> unpermute with probs, on moegrad's drop-in and on
    Megatron-core's; and each one's sorted_indices fed to the other's unpermute."""
    dtype, probs_dtype = PRECISIONS[precision]
    tokens, hidden, experts, topk = 29, 16, 6, 2
    routing_map, probs = routing(tokens, experts, topk, 3, probs_dtype)
    x = torch.randn(tokens, hidden).to(dtype)
    scale = torch.randn(hidden).to(dtype)
    outs = []
    for p_fn, u_fn in ((mg.permute, mg.unpermute), (MG_PERMUTE, MG_UNPERMUTE), (mg.permute, MG_UNPERMUTE),
                       (MG_PERMUTE, mg.unpermute)):
        permuted, _, si = p_fn(x, routing_map, probs)
        outs.append(u_fn(permuted * scale, si, x.shape, probs=probs, routing_map=routing_map))
    assert torch.equal(outs[0], outs[3]) and torch.equal(outs[1], outs[2])
    torch.testing.assert_close(outs[0].float(), outs[1].float(), rtol=2 * torch.finfo(dtype).eps,
                               atol=torch.finfo(dtype).eps)


def test_unequal_counts_per_token_match_megatron():
    """Capacity dropping without padding leaves tokens with different numbers of experts: the drop-in's
    PyTorch path gives Megatron's results bit for bit, forward and backward."""
    tokens, hidden, experts = 20, 8, 5
    routing_map, probs = routing(tokens, experts, 3, 11, torch.float32)
    routing_map[::3, :] = False
    routing_map[1, :] = True
    x = torch.randn(tokens, hidden)
    results = []
    for p_fn, u_fn in ((mg.permute, mg.unpermute), (MG_PERMUTE, MG_UNPERMUTE)):
        xl, pl = x.clone().requires_grad_(True), probs.clone().requires_grad_(True)
        permuted, pp, si = p_fn(xl, routing_map, pl)
        out = u_fn(permuted * 2, si, x.shape, probs=pl, routing_map=routing_map)
        (out.sum() + pp.sum()).backward()
        results.append((out, si, xl.grad, pl.grad))
    for a, b in zip(*results):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["permute", "unpermute"])
def test_fused_is_refused(name):
    routing_map, probs = routing(4, 3, 1, 0, torch.float32)
    x = torch.randn(4, 2)
    with pytest.raises(ValueError) as e:
        if name == "permute":
            mg.permute(x, routing_map, fused=True)
        else:
            mg.unpermute(x, torch.arange(4), x.shape, fused=True)
    assert str(e.value) == (f"{name}: fused=True selects Transformer Engine's fused {name}, which moegrad does "
                            f"not replace; moegrad's {name} is the unfused one's drop-in (pass fused=False)")


def test_probs_without_routing_map_is_megatrons_assertion():
    x = torch.randn(4, 2)
    with pytest.raises(AssertionError, match="Mask must be provided"):
        mg.unpermute(x, torch.arange(4), x.shape, probs=torch.ones(4, 3))


def test_install_swaps_the_dispatchers_functions():
    assert not mg.installed()
    mg.install()
    try:
        mg.install()  # idempotent
        assert mg.installed()
        for module in (moe_utils, token_dispatcher):
            assert module.permute is mg.permute and module.unpermute is mg.unpermute
    finally:
        mg.uninstall()
    assert not mg.installed()
    for module in (moe_utils, token_dispatcher):
        assert module.permute is MG_PERMUTE and module.unpermute is MG_UNPERMUTE


def test_megatron_submodule_imports_by_name():
    import importlib
    assert importlib.import_module("moegrad.torch.megatron") is mt.megatron is mg


def test_allgather_dispatcher_with_moegrad_installed():
    """Megatron-core's MoEAllGatherTokenDispatcher (which runs on CPU; one rank on gloo, so its all-gathers are
    identities) through a whole dispatch -> experts -> combine, forward and backward, with moegrad installed
    and without: the same outputs and gradients of the hidden states and the probabilities."""
    import os
    import socket

    import torch.distributed as dist
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.transformer_config import TransformerConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        w = dist.group.WORLD
        pg = ProcessGroupCollection(ep=w, expt_tp=w, tp_ep=w, tp=w, expt_dp=w)
        experts, topk, hidden, tokens = 6, 2, 16, 40
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = TransformerConfig(num_layers=1, hidden_size=hidden, num_attention_heads=2,
                                       num_moe_experts=experts, moe_router_topk=topk,
                                       moe_token_dispatcher_type="allgather", use_cpu_initialization=True)
        routing_map, probs = routing(tokens, experts, topk, 5, torch.float32)
        x = torch.randn(4, tokens // 4, hidden)  # [S, B, H]
        scale = torch.randn(experts, hidden)

        def run():
            d = token_dispatcher.MoEAllGatherTokenDispatcher(experts, list(range(experts)), config,
                                                             pg_collection=pg)
            xl, pl = x.clone().requires_grad_(True), probs.clone().requires_grad_(True)
            h, p = d.dispatch_preprocess(xl, routing_map, pl)
            h, p = d.token_dispatch(h, p)
            h, counts, local_probs = d.dispatch_postprocess(h, p)
            rows = torch.repeat_interleave(torch.arange(experts), counts)
            y = h * scale[rows] * local_probs.unsqueeze(1)  # the experts, weighed by their probabilities
            out = d.combine_postprocess(d.token_combine(d.combine_preprocess(y)))
            out.backward(torch.ones_like(out))
            return out, xl.grad, pl.grad

        theirs = run()
        mg.install()
        try:
            ours = run()
        finally:
            mg.uninstall()
        for a, b, what in zip(ours, theirs, ("out", "hidden.grad", "probs.grad")):
            # fp32, two rows a token: one rounding on both sides
            assert a.dtype == b.dtype and torch.equal(a, b), what
    finally:
        dist.destroy_process_group()
