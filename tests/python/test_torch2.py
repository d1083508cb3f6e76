"""PyTorch 2: torch.ops.moegrad.* under torch.library.opcheck (schema, autograd registration, fake kernels,
AOT dispatch with dynamic shapes), fake kernels against real calls, and torch.compile of a small MoE layer."""
import pytest
import torch

import moegrad.torch as mt

pytestmark = pytest.mark.skipif(not hasattr(torch.library, "opcheck"), reason="needs PyTorch 2.4 or newer")

OPS = torch.ops.moegrad
T, H, E, K = 4, 8, 3, 2


def _routing(gen):
    top = torch.rand(T, E, generator=gen).topk(K, dim=1).indices
    rmap = torch.zeros(T, E, dtype=torch.bool).scatter_(1, top, True)
    return top.sort(dim=1).values.to(torch.int32), rmap


def _samples():
    """(name, args) for every operator, every float dtype, with and without probs/scales/bias, contiguous and
    strided."""
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        expert_idx, rmap = _routing(gen)
        for strided in (False, True):
            tokens = torch.randn(T, H, generator=gen).to(dtype)
            if strided:
                tokens = torch.randn(H, T, generator=gen).to(dtype).t()
            probs = torch.rand(T, E, generator=gen).to(dtype)
            for p in (probs, None):
                yield "moe_token_permute_with_routing_map", (tokens, rmap, p, T * K, False)
            yield "moe_token_permute_with_routing_map", (tokens, rmap, probs, E * 2, True)
            permuted, pprobs, idx = OPS.moe_token_permute_with_routing_map(tokens, rmap, probs, T * K, False)
            yield "moe_token_permute_with_routing_map_grad", (torch.randn_like(permuted), idx, E, T, False,
                                                              torch.randn_like(pprobs), rmap)
            yield "moe_token_permute_with_routing_map_grad", (torch.randn_like(permuted), idx, E, T, False, None,
                                                              None)
            for p in (probs, None):
                yield "moe_token_unpermute_with_routing_map", (permuted, idx, rmap, p, False, [T, H])
            out, out_index, token_id, _ = OPS.moe_token_unpermute_with_routing_map(permuted, idx, rmap, probs,
                                                                                   False, [T, H])
            yield "moe_token_unpermute_with_routing_map_grad", (torch.randn_like(out), out_index, token_id, rmap,
                                                                permuted, probs, False, [T, H])
            yield "moe_init_routing_v2", (tokens, expert_idx, 0, 0, E, 0, 1, False)
            yield "moe_init_routing_v2", (tokens, expert_idx, 0, 2, E, 1, 0, True)
            ex, row_idx, _, _ = OPS.moe_init_routing_v2(tokens, expert_idx, 0, 0, E, 0, 1, False)
            yield "moe_init_routing_v2_grad", (torch.randn_like(ex), row_idx, K, 0, 0)
            scales = torch.rand(T, K, generator=gen).to(dtype)
            bias = torch.randn(E, H, generator=gen).to(dtype)
            for s, b in ((scales, bias), (scales, None), (None, None)):
                yield "moe_finalize_routing_v2", (ex, row_idx, None, None, b, s, expert_idx if s is not None or
                                                  b is not None else None, 2)
                yield "moe_finalize_routing_v2_grad", (torch.randn(T, H, generator=gen).to(dtype), row_idx, ex, s,
                                                       expert_idx if s is not None else None,
                                                       b if s is not None else None, 0, 0, 0, 0)


def _empty_samples():
    """Hidden size 0 and no tokens: every operator's empty call."""
    gen = torch.Generator().manual_seed(1)
    expert_idx, rmap = _routing(gen)
    probs = torch.rand(T, E, generator=gen)
    tokens = torch.empty(T, 0)
    yield "moe_token_permute_with_routing_map", (tokens, rmap, probs, T * K, False)
    permuted, pprobs, idx = OPS.moe_token_permute_with_routing_map(tokens, rmap, probs, T * K, False)
    yield "moe_token_permute_with_routing_map_grad", (torch.empty_like(permuted), idx, E, T, False,
                                                      torch.rand_like(pprobs), rmap)
    yield "moe_token_unpermute_with_routing_map", (permuted, idx, rmap, probs, False, [T, 0])
    out, out_index, token_id, _ = OPS.moe_token_unpermute_with_routing_map(permuted, idx, rmap, probs, False, [T, 0])
    yield "moe_token_unpermute_with_routing_map_grad", (torch.empty_like(out), out_index, token_id, rmap, permuted,
                                                        probs, False, [T, 0])
    yield "moe_init_routing_v2", (torch.empty(0, H), torch.empty(0, K, dtype=torch.int32), 0, 0, E, 0, 1, False)
    ex, row_idx, _, _ = OPS.moe_init_routing_v2(tokens, expert_idx, 0, 0, E, 0, 1, False)
    yield "moe_init_routing_v2_grad", (torch.empty_like(ex), row_idx, K, 0, 0)
    yield "moe_finalize_routing_v2", (ex, row_idx, None, None, None, torch.rand(T, K, generator=gen), expert_idx, 2)
    yield "moe_finalize_routing_v2_grad", (torch.empty(T, 0), row_idx, ex, torch.rand(T, K, generator=gen),
                                           expert_idx, None, 0, 0, 0, 0)


SAMPLES = list(_samples()) + list(_empty_samples())
DIFFERENTIABLE = {"moe_token_permute_with_routing_map": (0, 2), "moe_token_unpermute_with_routing_map": (0, 3),
                  "moe_init_routing_v2": (0,), "moe_finalize_routing_v2": (0, 4, 5)}


def _with_grad(name, args):
    args = list(args)
    for i in DIFFERENTIABLE.get(name, ()):
        if isinstance(args[i], torch.Tensor) and args[i].is_floating_point():
            args[i] = args[i].detach().clone().requires_grad_()
    return tuple(args)


@pytest.mark.parametrize("case", range(len(SAMPLES)), ids=lambda i: f"{SAMPLES[i][0]}-{i}")
def test_opcheck(case):
    name, args = SAMPLES[case]
    torch.library.opcheck(getattr(OPS, name).default, _with_grad(name, args))


def test_every_operator_has_samples():
    assert {name for name, _ in SAMPLES} == set(mt._SCHEMAS)


@pytest.mark.parametrize("case", range(0, len(SAMPLES), 3), ids=lambda i: f"{SAMPLES[i][0]}-{i}")
def test_fake_kernel_matches_a_real_call(case):
    from torch._subclasses.fake_tensor import FakeTensorMode
    name, args = SAMPLES[case]
    real = getattr(OPS, name)(*args)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake_args = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)
        fake = getattr(OPS, name)(*fake_args)
    real = real if isinstance(real, tuple) else (real,)
    fake = fake if isinstance(fake, tuple) else (fake,)
    assert len(real) == len(fake)
    for r, f in zip(real, fake):
        assert (r is None) == (f is None)
        if r is not None:
            assert (tuple(r.shape), r.dtype) == (tuple(f.shape), f.dtype)


def test_fake_call_raises_the_librarys_message():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        tokens = torch.empty(T, H)
        rmap = torch.empty(T + 1, E, dtype=torch.bool)
        with pytest.raises(ValueError) as real:
            OPS.moe_token_permute_with_routing_map(tokens, rmap, None, T * K, False)
    with pytest.raises(ValueError) as eager:
        OPS.moe_token_permute_with_routing_map(torch.zeros(T, H), torch.zeros(T + 1, E, dtype=torch.bool), None,
                                               T * K, False)
    assert str(real.value) == str(eager.value)
    assert str(real.value).startswith("MoeTokenPermuteWithRoutingMap: ")


class _Layer(torch.nn.Module):
    """Router, top-k, dispatch, per-expert linear maps, combine: moegrad's permute and unpermute."""

    def __init__(self, hidden, experts, topk):
        super().__init__()
        self.topk = topk
        self.router = torch.nn.Linear(hidden, experts, bias=False)
        self.w = torch.nn.Parameter(torch.randn(experts, hidden, hidden) / hidden ** 0.5)

    def forward(self, x):
        scores = self.router(x).softmax(dim=-1)
        top = scores.topk(self.topk, dim=-1).indices
        rmap = torch.zeros_like(scores, dtype=torch.bool).scatter(1, top, True)
        probs = scores * rmap
        permuted, _, idx = mt.moe_token_permute_with_routing_map(x, rmap, num_out_tokens=x.shape[0] * self.topk)
        # Rows are expert-major: expert e's rows follow e's count of routed tokens; with a fixed routing per
        # expert count unknown to the graph, every row goes through its expert's map by a gather.
        expert_of_row = torch.repeat_interleave(torch.arange(rmap.shape[1]), rmap.sum(0), output_size=idx.shape[0])
        h = torch.bmm(permuted.unsqueeze(1), self.w[expert_of_row]).squeeze(1)
        out, _, _, _ = mt.moe_token_unpermute_with_routing_map(h, idx, rmap, probs, restore_shape=list(x.shape))
        return out


def _layer_and_input(tokens=16, seed=0):
    torch.manual_seed(seed)
    return _Layer(H, E, K), torch.randn(tokens, H)


def test_compiled_layer_matches_eager():
    """Inductor compiles the torch ops around moegrad's (router, softmax, top-k, bmm): outputs and gradients
    match eager within what its fused kernels' different fp32 rounding allows."""
    layer, x = _layer_and_input()
    compiled = torch.compile(layer, fullgraph=True)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    want, got = layer(x1), compiled(x2)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    want.square().sum().backward()
    got.square().sum().backward()
    torch.testing.assert_close(x2.grad, x1.grad, rtol=1e-5, atol=1e-5)
    for p_eager, p_compiled in zip(layer.parameters(), layer.parameters()):
        assert p_eager.grad is not None and p_compiled.grad is not None


def test_moegrad_ops_in_a_compiled_graph_are_bit_identical():
    """The operators inside a compiled graph run the same kernels on the same inputs: the same bits, forward
    and backward, every dtype."""
    def combine(x, rmap, probs):
        permuted, _, idx = mt.moe_token_permute_with_routing_map(x, rmap, num_out_tokens=x.shape[0] * K)
        out, _, _, _ = mt.moe_token_unpermute_with_routing_map(permuted * 2, idx, rmap, probs,
                                                               restore_shape=list(x.shape))
        return out

    compiled = torch.compile(combine, fullgraph=True)
    gen = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        _, rmap = _routing(gen)
        x = torch.randn(T, H, generator=gen).to(dtype)
        probs = (torch.rand(T, E, generator=gen) * rmap).to(dtype)
        xs = [x.clone().requires_grad_() for _ in range(2)]
        ps = [probs.clone().requires_grad_() for _ in range(2)]
        want, got = combine(xs[0], rmap, ps[0]), compiled(xs[1], rmap, ps[1])
        assert torch.equal(got, want)
        g = torch.randn(want.shape, generator=gen).to(dtype)
        want.backward(g)
        got.backward(g)
        assert torch.equal(xs[1].grad, xs[0].grad) and torch.equal(ps[1].grad, ps[0].grad)


def test_dynamic_token_counts_compile_once():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    layer, _ = _layer_and_input()
    compiled = torch.compile(layer, fullgraph=True, dynamic=True, backend=backend)
    for tokens in (16, 24, 40, 7):
        x = torch.randn(tokens, H)
        torch.testing.assert_close(compiled(x), layer(x), rtol=0, atol=0)
    assert len(graphs) == 1


# --- plain eager calls skip the dispatcher; anything that watches the dispatcher still sees the operators -------

def _layer_step(tokens, rmap, probs):
    """The routing-map dispatch and combine, forward and backward: outputs and gradients."""
    tokens = tokens.detach().requires_grad_(True)
    probs = probs.detach().requires_grad_(True)
    permuted, _, idx = mt.moe_token_permute_with_routing_map(tokens, rmap, probs, num_out_tokens=T * K)
    out = mt.moe_token_unpermute_with_routing_map(permuted * 2, idx, rmap, probs, restore_shape=[T, H])[0]
    out.backward(torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(out.dtype))
    return out, tokens.grad, probs.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_plain_eager_path_equals_the_dispatcher_path(dtype, monkeypatch):
    gen = torch.Generator().manual_seed(3)
    _, rmap = _routing(gen)
    tokens, probs = torch.randn(T, H, generator=gen).to(dtype), torch.rand(T, E, generator=gen)
    direct = _layer_step(tokens, rmap, probs)
    calls = []
    real_below = mt._below
    monkeypatch.setattr(mt, "_plain_eager", lambda args: False)
    monkeypatch.setattr(mt, "_below", lambda name, *a: (calls.append(name), real_below(name, *a))[1])
    dispatched = _layer_step(tokens, rmap, probs)
    assert calls == ["moe_token_permute_with_routing_map", "moe_token_unpermute_with_routing_map",
                     "moe_token_unpermute_with_routing_map_grad", "moe_token_permute_with_routing_map_grad"]
    for a, b in zip(direct, dispatched):
        assert a.dtype == b.dtype and torch.equal(a.view(torch.int16 if a.element_size() == 2 else torch.int32),
                                                  b.view(torch.int16 if b.element_size() == 2 else torch.int32))


def test_plain_eager_calls_do_not_enter_the_dispatcher(monkeypatch):
    gen = torch.Generator().manual_seed(4)
    _, rmap = _routing(gen)
    tokens, probs = torch.randn(T, H, generator=gen), torch.rand(T, E, generator=gen)

    def refuse(*args):
        raise AssertionError("torch.ops.moegrad entered in plain eager mode")
    monkeypatch.setattr(mt, "_ENTRY", {name: refuse for name in mt._ENTRY})
    _layer_step(tokens, rmap, probs)  # forward and backward without the dispatcher


def test_dispatch_modes_and_the_profiler_see_every_operator():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    gen = torch.Generator().manual_seed(5)
    _, rmap = _routing(gen)
    tokens, probs = torch.randn(T, H, generator=gen), torch.rand(T, E, generator=gen)
    with Recorder() as mode:
        _layer_step(tokens, rmap, probs)
    for name in ("moe_token_permute_with_routing_map", "moe_token_unpermute_with_routing_map",
                 "moe_token_unpermute_with_routing_map_grad", "moe_token_permute_with_routing_map_grad"):
        assert f"moegrad.{name}" in mode.ops, (name, mode.ops)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _layer_step(tokens, rmap, probs)
    names = {e.name for e in prof.events()}
    assert "moegrad::moe_token_permute_with_routing_map" in names
    assert "moegrad::moe_token_unpermute_with_routing_map_grad" in names
