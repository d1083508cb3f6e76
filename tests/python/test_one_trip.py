"""The one-round-trip path of moegrad.torch (_C.<key>_call, taken by plain eager calls that autograd does not
record): the same bits as the full path for every operator and sample, outputs without autograd history, the
full path where autograd records, and every bad input raising exactly what the full path raises, with nothing
allocated or written."""
import pytest
import torch

import moegrad.torch as mt
from test_torch2 import SAMPLES, T, H, E, K, _routing

FORWARDS = {"moe_token_permute_with_routing_map": (0, 2), "moe_token_unpermute_with_routing_map": (0, 3),
            "moe_init_routing_v2": (0,), "moe_finalize_routing_v2": (0, 2, 3, 4, 5)}
KEYS = {"moe_" + key: key for key in mt._C.OPS}  # public name -> operator key


def _bits(t):
    if t is None or not t.is_floating_point():
        return t
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _tuple(result):
    return result if isinstance(result, tuple) else (result,)


def _same(a, b):
    a, b = _tuple(a), _tuple(b)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert (x is None) == (y is None)
        if x is not None:
            assert x.dtype == y.dtype and x.shape == y.shape and x.stride() == y.stride()
            assert torch.equal(_bits(x), _bits(y))


class _Spy:
    """Replaces mt._CALLS: records which one-trip calls ran and what they returned; `decline` makes every one
    return None (the full path then runs)."""

    def __init__(self, monkeypatch, decline=False):
        self.real, self.results = dict(mt._CALLS), []
        calls = {k: (lambda *a, k=k: self._call(k, a)) for k in self.real}
        self.decline = decline
        monkeypatch.setattr(mt, "_CALLS", calls)

    def _call(self, key, args):
        result = None if self.decline else self.real[key](*args)
        self.results.append((key, result))
        return result


def _full_path(monkeypatch, fn, args):
    with monkeypatch.context() as m:
        spy = _Spy(m, decline=True)
        result = fn(*args)
    return result, spy


@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad-on", "no-grad"])
@pytest.mark.parametrize("case", range(len(SAMPLES)), ids=lambda i: f"{SAMPLES[i][0]}-{i}")
def test_one_trip_gives_the_full_paths_bits(case, grad_mode, monkeypatch):
    name, args = SAMPLES[case]
    fn = getattr(mt, name)
    with torch.set_grad_enabled(grad_mode):
        want, _ = _full_path(monkeypatch, fn, args)
        spy = _Spy(monkeypatch)
        got = fn(*args)
    assert [(k, r is not None) for k, r in spy.results] == [(KEYS[name], True)]
    _same(got, want)
    for t in _tuple(got):
        assert t is None or (t.grad_fn is None and not t.requires_grad)


@pytest.mark.parametrize("name", sorted(FORWARDS))
def test_no_grad_mode_takes_the_one_trip_with_inputs_requiring_grad(name, monkeypatch):
    sample = next(args for n, args in SAMPLES if n == name)
    args = list(sample)
    for i in FORWARDS[name]:
        if isinstance(args[i], torch.Tensor) and args[i].is_floating_point():
            args[i] = args[i].detach().clone().requires_grad_()
    want = getattr(mt, name)(*sample)
    with torch.no_grad():
        spy = _Spy(monkeypatch)
        got = getattr(mt, name)(*args)
    assert [r is not None for _, r in spy.results] == [True]
    _same(got, want)
    assert all(t is None or t.grad_fn is None for t in _tuple(got))


def _forward_backward(name, sample):
    """The outputs of `name` on `sample` with its first differentiable input requiring grad, and that input's
    gradient for a random upstream gradient of the first output."""
    args = list(sample)
    i = FORWARDS[name][0]
    args[i] = args[i].detach().clone().requires_grad_()
    got = _tuple(getattr(mt, name)(*args))
    assert got[0].grad_fn is not None  # recorded: the autograd Function, not the bare operator
    upstream = torch.randn(got[0].shape, generator=torch.Generator().manual_seed(11)).to(got[0].dtype)
    got[0].backward(upstream)
    return tuple(t.detach() if t is not None else None for t in got) + (args[i].grad,)


@pytest.mark.parametrize("name", sorted(FORWARDS))
def test_autograd_recorded_calls_give_the_full_paths_bits(name, monkeypatch):
    # Recorded calls take the autograd Function, whose kernels (_run) use the one trip too: forward and backward
    # against the full path (every one-trip call declined).
    sample = next(args for n, args in SAMPLES if n == name and args[0].is_floating_point() and args[0].numel())
    want, _ = _full_path(monkeypatch, _forward_backward, (name, sample))
    spy = _Spy(monkeypatch)
    got = _forward_backward(name, sample)
    assert len(spy.results) >= 2 and all(r is not None for _, r in spy.results)  # forward and backward kernels
    _same(got, want)
    _same(got[:-1], getattr(mt, name)(*sample))


def _bad_calls():
    """(name, args) of calls the one trip declines or the library rejects."""
    gen = torch.Generator().manual_seed(7)
    expert_idx, rmap = _routing(gen)
    tokens, probs = torch.randn(T, H, generator=gen), torch.rand(T, E, generator=gen)
    permuted, _, idx = mt.moe_token_permute_with_routing_map(tokens, rmap, probs, T * K, False)
    out, out_index, token_id, _ = mt.moe_token_unpermute_with_routing_map(permuted, idx, rmap, probs, False, [T, H])
    ex, row_idx, _, _ = mt.moe_init_routing_v2(tokens, expert_idx, 0, 0, E, 0, 1, False)
    p = "moe_token_permute_with_routing_map"
    yield p, (tokens, rmap, probs, T * K + 1, False)  # the library's: not the routed count
    yield p, (tokens.tolist(), rmap, probs, T * K, False)  # not a tensor
    yield p, (torch._neg_view(tokens), rmap, probs, T * K, False)  # a lazily negated view
    yield p, (tokens.to(torch.complex64), rmap, probs, T * K, False)  # a dtype moegrad does not know
    yield p, (tokens.to("meta"), rmap, probs, T * K, False)  # not a CPU tensor
    yield p, (tokens.to_sparse(), rmap, probs, T * K, False)  # not strided
    yield p, (tokens.reshape(1, 1, 1, 1, 1, 1, 1, 1, T, H), rmap, probs, T * K, False)  # rank 10
    yield p, (tokens, rmap, probs, True, False)  # a bool for an int
    yield p, (tokens, rmap, probs, float(T * K), False)  # a float for an int
    yield p, (tokens, rmap, probs, 2**63, False)  # outside int64
    yield p, (tokens, rmap, probs, T * K, 2)  # a flag that is not 0 / 1
    yield p, (tokens, None, probs, T * K, False)  # a required tensor absent
    yield "moe_token_permute_with_routing_map_grad", (torch.randn_like(permuted), idx, E, T + 1, False, None, None)
    u = "moe_token_unpermute_with_routing_map"
    yield u, (permuted, idx, rmap, probs, False, [T, H + 1])  # the library's: restore_shape does not match
    yield u, (permuted, idx, rmap, probs, False, "TH")  # not a sequence of ints
    yield u, (permuted, idx, rmap, probs, False, [T, 1.5])
    yield u, (permuted, idx, rmap, probs, False, torch.tensor([T, H]))
    yield "moe_token_unpermute_with_routing_map_grad", (out[:, :-1], out_index, token_id, rmap, permuted, probs,
                                                        False, [T, H])
    yield "moe_init_routing_v2", (tokens, expert_idx, 0, 0, E, 2, 1, False)  # no mode 2
    yield "moe_init_routing_v2_grad", (ex, row_idx, K + 1, 0, 0)
    yield "moe_finalize_routing_v2", (ex, row_idx, None, None, None, None, None, 7)
    yield "moe_finalize_routing_v2_grad", (torch.randn(T + 1, H), row_idx, ex, None, None, None, 0, 0, 0, 0)


BAD = list(_bad_calls())


def _raised(fn, args):
    with pytest.raises(Exception) as info:
        fn(*args)
    return type(info.value), str(info.value)


@pytest.mark.parametrize("case", range(len(BAD)), ids=lambda i: f"{BAD[i][0]}-{i}")
def test_bad_inputs_raise_as_on_the_full_path_and_write_nothing(case, monkeypatch):
    name, args = BAD[case]
    fn = getattr(mt, name)
    before = [a.clone() if isinstance(a, torch.Tensor) and a.layout == torch.strided and not a.is_meta else None
              for a in args]
    with monkeypatch.context() as m:
        _Spy(m, decline=True)
        want = _raised(fn, args)
    allocated = []
    mt._C.bind_tensor_type((torch.Tensor, torch.nn.Parameter), torch.strided, mt._DTYPE_CODES, mt._DTYPES,
                           lambda *a, **kw: (allocated.append(a), torch.empty(*a, **kw))[1])
    try:
        got = _raised(fn, args)
    finally:
        mt._C.bind_tensor_type((torch.Tensor, torch.nn.Parameter), torch.strided, mt._DTYPE_CODES, mt._DTYPES,
                               torch.empty)
    assert got == want
    assert want[0] in (ValueError, TypeError)
    assert allocated == []
    for a, b in zip(args, before):
        if b is not None:
            assert torch.equal(_bits(a.resolve_neg()), _bits(b.resolve_neg()))


def test_the_library_rejects_in_the_one_trip_itself():
    gen = torch.Generator().manual_seed(8)
    _, rmap = _routing(gen)
    tokens = torch.randn(T, H, generator=gen)
    want = _raised(mt._C.token_permute_with_routing_map_outputs,
                   ([mt._desc("token_permute_with_routing_map", n, t) for n, t in
                     (("tokens", tokens), ("routingMap", rmap), ("probs", None))] + [None] * 3, [T * K + 1, 0]))
    assert want[0] is ValueError
    assert _raised(mt._C.token_permute_with_routing_map_call, ((tokens, rmap, None), (T * K + 1, False))) == want


def test_declined_calls_return_none():
    gen = torch.Generator().manual_seed(9)
    _, rmap = _routing(gen)
    tokens, probs = torch.randn(T, H, generator=gen), torch.rand(T, E, generator=gen)
    call = mt._C.token_permute_with_routing_map_call
    good = call((tokens, rmap, probs), (T * K, False))
    assert isinstance(good, tuple) and len(good) == 3 and good[0].shape == (T * K, H)

    class Sub(torch.Tensor):
        pass

    for inputs, attrs in (((tokens, rmap), (T * K, False)),  # too few tensors
                          ((tokens, rmap, probs, probs), (T * K, False)),  # too many
                          ((tokens, rmap, probs), (T * K,)),  # too few attributes
                          ((tokens, rmap, probs), (T * K, False, 0)),
                          ((tokens.as_subclass(Sub), rmap, probs), (T * K, False)),  # a subclass
                          ((tokens, rmap, probs), (torch.tensor(T * K), False)),  # a tensor for an int
                          ((tokens, rmap, probs), (T * K, 1.0))):  # a float for a flag
        assert call(inputs, attrs) is None
    unpermute = mt._C.token_unpermute_with_routing_map_call
    permuted, _, idx = good
    assert unpermute((permuted, idx, rmap, probs), (False,), ([T, H], None)) is None  # too many arrays
    assert unpermute((permuted, idx, rmap, probs), (False,), ((T, H),))[0].shape == (T, H)


def test_a_failing_allocator_declines_with_nothing_written():
    gen = torch.Generator().manual_seed(10)
    _, rmap = _routing(gen)
    tokens, probs = torch.randn(T, H, generator=gen), torch.rand(T, E, generator=gen)
    allocated = []

    def empty(sizes, dtype):
        if allocated:
            raise RuntimeError("out of memory")
        allocated.append(torch.full(sizes, 7, dtype=dtype))
        return allocated[-1]

    mt._C.bind_tensor_type((torch.Tensor, torch.nn.Parameter), torch.strided, mt._DTYPE_CODES, mt._DTYPES, empty)
    try:
        assert mt._C.token_permute_with_routing_map_call((tokens, rmap, probs), (T * K, False)) is None
    finally:
        mt._C.bind_tensor_type((torch.Tensor, torch.nn.Parameter), torch.strided, mt._DTYPE_CODES, mt._DTYPES,
                               torch.empty)
    assert len(allocated) == 1 and bool((allocated[0] == 7).all())  # the first output, never written
