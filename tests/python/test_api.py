"""Errors, torch.ops registration, zero-copy hand-over, GIL release and thread-count determinism."""
import threading
import time

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import moegrad
import moegrad.torch as mt
from reference import make_view


def routing(tokens, experts, topk):
    return torch.zeros(tokens, experts, dtype=torch.bool).scatter_(
        1, torch.rand(tokens, experts).topk(topk, dim=1).indices, True)


# --- errors -------------------------------------------------------------------------------------------------

def test_index_out_of_range_raises_value_error_with_library_message():
    x = torch.randn(8, 4)
    idx = torch.arange(8, dtype=torch.int32)
    idx[5] = 40
    with pytest.raises(ValueError, match=r"^MoeFinalizeRoutingV2: expandedRowIdx\[5\] = 40 is outside"):
        mt.moe_finalize_routing_v2(x, idx, scales=torch.rand(4, 2), drop_pad_mode=2)
    with pytest.raises(ValueError, match=r"^MoeFinalizeRoutingV2Grad: expandedRowIdx\[5\] = 40 is outside \[0, 8\)"):
        mt.moe_finalize_routing_v2_grad(torch.randn(4, 4), idx, expanded_x=x, scales=torch.rand(4, 2))


def test_backward_error_surfaces_as_value_error():
    """An index corrupted between forward and backward is caught by the gradient operator."""
    x = torch.randn(6, 3, requires_grad=True)
    idx = torch.randperm(6).to(torch.int32)
    out = mt.moe_finalize_routing_v2(x, idx, scales=torch.rand(3, 2), drop_pad_mode=0)
    idx.data[0] = -1  # behind autograd's version counter, which would catch a visible change
    with pytest.raises(ValueError, match=r"^MoeFinalizeRoutingV2Grad: expandedRowIdx\[0\] = -1"):
        out.sum().backward()


@pytest.mark.parametrize("call,pattern", [
    (lambda: mt.moe_finalize_routing_v2(torch.randn(6, 3), torch.arange(6, dtype=torch.int64),
                                        scales=torch.rand(3, 2)), r"^MoeFinalizeRoutingV2: expandedRowIdx .*INT64"),
    (lambda: mt.moe_finalize_routing_v2(torch.randn(6, 3), torch.arange(6, dtype=torch.int32),
                                        x1=torch.randn(3, 3).bfloat16(), scales=torch.rand(3, 2)),
     r"^MoeFinalizeRoutingV2: x1 is BFLOAT16 but expandedX is FLOAT32"),
    (lambda: mt.moe_finalize_routing_v2(torch.randn(6, 3), torch.arange(6, dtype=torch.int32),
                                        scales=torch.rand(3, 2), drop_pad_mode=4),
     r"^MoeFinalizeRoutingV2: dropPadMode"),
    (lambda: mt.moe_finalize_routing_v2(torch.randn(6, 3).double(), torch.arange(6, dtype=torch.int32),
                                        scales=torch.rand(3, 2).double()), r"^MoeFinalizeRoutingV2: .*DOUBLE"),
    (lambda: mt.moe_finalize_routing_v2_grad(torch.randn(3, 4), torch.arange(6, dtype=torch.int32),
                                             scales=torch.rand(3, 2)),
     r"^MoeFinalizeRoutingV2Grad: expandedX \(required with scales\)"),
    (lambda: mt.moe_token_permute_with_routing_map(torch.randn(4, 3), torch.eye(4, dtype=torch.bool)[:, :3]),
     r"^MoeTokenPermuteWithRoutingMap: "),
    (lambda: mt.moe_token_permute_with_routing_map(torch.randn(4, 3), routing(5, 3, 1)),
     r"^MoeTokenPermuteWithRoutingMap: "),
    (lambda: mt.moe_token_permute_with_routing_map(torch.randn(4, 3), routing(4, 3, 1), num_out_tokens=13),
     r"^MoeTokenPermuteWithRoutingMap: numOutTokens"),
    (lambda: mt.moe_token_permute_with_routing_map_grad(torch.randn(8, 3), torch.arange(8, dtype=torch.int32), 0, 4),
     r"^MoeTokenPermuteWithRoutingMapGrad: numExperts"),
    (lambda: mt.moe_token_permute_with_routing_map_grad(
        torch.randn(8, 3), torch.arange(8, dtype=torch.int32) + 1, 2, 4),
     r"^MoeTokenPermuteWithRoutingMapGrad: sortedIndices\[7\] = 8"),
])
def test_bad_arguments(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


def test_python_side_errors():
    with pytest.raises(ValueError, match="num_out_tokens is required with drop_and_pad"):
        mt.moe_token_permute_with_routing_map(torch.randn(4, 3), routing(4, 2, 1), drop_and_pad=True)
    with pytest.raises(ValueError, match="complex64"):
        mt.moe_finalize_routing_v2_grad(torch.randn(4, 3, dtype=torch.complex64), torch.arange(4, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"^moegrad: set_num_threads\(-1\)"):
        moegrad.set_num_threads(-1)


# --- torch.ops registration ------------------------------------------------------------------------------------

def test_registered_as_torch_ops():
    assert mt.REGISTRATION_ERROR is None
    assert set(mt._SCHEMAS) <= set(mt.__all__)  # every operator is public; the pipelines are Python functions
    for name in mt._SCHEMAS:
        assert hasattr(torch.ops.moegrad, name)
    tokens = torch.randn(10, 6, requires_grad=True)
    probs = torch.rand(10, 4, requires_grad=True)
    rmap = routing(10, 4, 2)
    perm, pprobs, idx = torch.ops.moegrad.moe_token_permute_with_routing_map(tokens, rmap, probs=probs)
    perm2, pprobs2, idx2 = mt.moe_token_permute_with_routing_map(tokens, rmap, probs)
    assert torch.equal(perm, perm2) and torch.equal(pprobs, pprobs2) and torch.equal(idx, idx2)
    (perm.sum() + pprobs.sum()).backward()  # autograd through the dispatcher's Autograd kernel
    tokens_grad, probs_grad = torch.ops.moegrad.moe_token_permute_with_routing_map_grad(
        torch.ones_like(perm), idx, 4, 10, permuted_probs_output_grad=torch.ones_like(pprobs), routing_map=rmap)
    assert torch.equal(tokens.grad, tokens_grad) and torch.equal(probs.grad, probs_grad)
    assert torch.equal(tokens_grad, torch.full((10, 6), 2.0))


# --- zero copy ----------------------------------------------------------------------------------------------

class _Spy:
    """Stands in for moegrad._C and records the descriptors each call hands to the library."""

    def __init__(self, real):
        self.real, self.calls = real, []

    def __getattr__(self, name):
        fn = getattr(self.real, name)
        if not callable(fn):
            return fn

        def record(*args):
            self.calls.append((name, args))
            return fn(*args)
        return record


def test_inputs_are_handed_over_in_place(monkeypatch):
    spy = _Spy(mt._C)
    monkeypatch.setattr(mt, "_C", spy)
    # The descriptor path (the one-round-trip _C.<name>_call declining): its descriptors are visible here.
    # test_one_trip.py holds the one trip to it bit for bit, strided inputs included.
    monkeypatch.setattr(mt, "_CALLS", {key: (lambda *a: None) for key in mt._CALLS})
    tokens = make_view(torch.randn(20, 16), "transposed").requires_grad_(True)
    probs = make_view(torch.rand(20, 4), "sliced").requires_grad_(True)
    rmap = make_view(routing(20, 4, 2), "transposed")
    perm, pprobs, _ = mt.moe_token_permute_with_routing_map(tokens, rmap, probs)
    grad_perm = make_view(torch.randn(perm.shape), "transposed")
    perm.backward(grad_perm, retain_graph=True)
    # Each operator call follows its output query, which gets the same input descriptors.
    assert [name for name, _ in spy.calls] == [
        "token_permute_with_routing_map_outputs", "token_permute_with_routing_map",
        "token_permute_with_routing_map_grad_outputs", "token_permute_with_routing_map_grad"]
    assert spy.calls[0][1][0][:3] == spy.calls[1][1][0][:3]
    calls = [call for call in spy.calls if call[0] in mt._C.OPS]
    name, (tensors, _) = calls[0]  # tensors in the order of mt._C.OPS[name]
    assert name == "token_permute_with_routing_map"
    assert mt._C.OPS[name][0][:3] == ["tokens", "routingMap", "probs"]
    for desc, t in ((tensors[0], tokens), (tensors[1], rmap), (tensors[2], probs)):
        assert not t.is_contiguous()
        assert desc[0] == t.data_ptr() and desc[2] == tuple(t.shape) and desc[3] == t.stride()
    name, (tensors, _) = calls[1]
    assert name == "token_permute_with_routing_map_grad"
    assert tensors[0][0] == grad_perm.data_ptr() and tensors[0][3] == grad_perm.stride()


def _allocated_bytes(fn):
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    total = sum(max(e.cpu_memory_usage, 0) for e in prof.events() if e.name == "[memory]")
    total += sum(max(e.self_cpu_memory_usage, 0) for e in prof.events() if e.name != "[memory]")
    return result, total


def test_large_non_contiguous_inputs_are_not_copied():
    # combine: expanded_x (R*K, H) is 8x the output; a copy of it would be 32 MiB.
    rows, topk, hidden = 2048, 8, 512
    x = make_view(torch.randn(rows * topk, hidden), "transposed")
    idx = torch.randperm(rows * topk).to(torch.int32)
    scales = torch.rand(rows, topk)
    out, allocated = _allocated_bytes(lambda: mt.moe_finalize_routing_v2(x, idx, scales=scales, drop_pad_mode=2))
    assert out.numel() * 4 <= allocated < 2 * out.numel() * 4, allocated
    assert torch.equal(out, mt.moe_finalize_routing_v2(x.contiguous(), idx, scales=scales, drop_pad_mode=2))

    # dispatch with top-1: the result is as large as the input; a copy would double the allocation.
    tokens = make_view(torch.randn(16384, 512), "sliced")
    rmap = routing(16384, 8, 1)
    (perm, _, idx), allocated = _allocated_bytes(lambda: mt.moe_token_permute_with_routing_map(tokens, rmap))
    assert perm.numel() * 4 <= allocated < perm.numel() * 4 + 16384 * 64, allocated
    assert torch.equal(perm, mt.moe_token_permute_with_routing_map(tokens.contiguous(), rmap)[0])


def test_the_profiler_sees_a_copy():
    """The measurement above can fail: an input-sized copy is counted."""
    x = make_view(torch.randn(4096, 512), "transposed")
    _, allocated = _allocated_bytes(lambda: x.contiguous())
    assert allocated >= x.numel() * 4


# --- GIL and threads ----------------------------------------------------------------------------------------

def test_gil_is_released_while_kernels_run():
    rows, topk, hidden = 4096, 8, 1024
    x = torch.randn(rows * topk, hidden)
    idx = torch.randperm(rows * topk).to(torch.int32)
    scales = torch.rand(rows, topk)
    saved = moegrad.num_threads()
    moegrad.set_num_threads(1)
    try:
        for _attempt in range(3):  # a loaded machine may starve the ticker; a held GIL would fail every time
            ticks, stop = [], threading.Event()

            def ticker():
                while not stop.is_set():
                    ticks.append(time.perf_counter())
            thread = threading.Thread(target=ticker)
            thread.start()
            time.sleep(0.02)
            calls = []
            for _ in range(3):
                start = time.perf_counter()
                mt.moe_finalize_routing_v2(x, idx, scales=scales, drop_pad_mode=2)
                calls.append((start, time.perf_counter()))
            stop.set()
            thread.join()
            shortest = min(end - start for start, end in calls)
            inside = [t for t in ticks if calls[0][0] <= t <= calls[-1][1]]
            gaps = [b - a for a, b in zip(inside, inside[1:])] or [float("inf")]
            if max(gaps) < shortest / 2:
                return
        pytest.fail(f"ticker stalled {max(gaps):.3f} s during calls of {shortest:.3f} s: GIL held?")
    finally:
        moegrad.set_num_threads(saved)


@pytest.mark.parametrize("probs_dtype", [torch.bfloat16, torch.float32])
def test_results_identical_for_every_thread_count(probs_dtype):
    tokens = torch.randn(300, 96).bfloat16().requires_grad_(True)
    probs = torch.rand(300, 16).to(probs_dtype).requires_grad_(True)
    rmap = routing(300, 16, 4)
    saved = moegrad.num_threads()
    results = []
    try:
        for n in (1, 2, 3):
            moegrad.set_num_threads(n)
            assert moegrad.num_threads() == n
            tokens.grad = probs.grad = None
            perm, pprobs, idx = mt.moe_token_permute_with_routing_map(tokens, rmap, probs)
            # Dropless sortedIndices is mode 2's expandedRowIdx: slot r*K + k -> permuted row.
            scales = pprobs[idx.long()].view(300, 4)
            out = mt.moe_finalize_routing_v2(perm * 3, idx, scales=scales, drop_pad_mode=2)
            out.float().square().sum().backward()
            results.append((perm, pprobs, out, tokens.grad.clone(), probs.grad.clone()))
    finally:
        moegrad.set_num_threads(saved)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)


def test_module_info():
    assert moegrad.__version__ == moegrad.version()
    assert moegrad.simd_target()


# --- MOEGRAD_MAX_SIMD -----------------------------------------------------------------------------------------

_CAPPED = r"""
import sys, torch, moegrad, moegrad.torch as mt
g = torch.Generator().manual_seed(7)
x = torch.randn(64, 300, generator=g).bfloat16()
bias = torch.randn(4, 300, generator=g).bfloat16()
idx = torch.randperm(64, generator=g).int()
experts = torch.randint(0, 4, (32, 2), generator=g).int()
gy = torch.randn(32, 300, generator=g).bfloat16()
s = torch.rand(32, 2, generator=g).bfloat16()
gx, gs = mt.moe_finalize_routing_v2_grad(gy, idx, expanded_x=x, scales=s, expert_idx=experts, bias=bias)
y = mt.moe_finalize_routing_v2(x, idx, scales=s, expert_idx=experts, bias=bias, drop_pad_mode=2)
print(moegrad.simd_target(), hash(tuple(gx.view(torch.int16).flatten().tolist())),
      hash(tuple(gs.view(torch.int16).flatten().tolist())), hash(tuple(y.view(torch.int16).flatten().tolist())))
"""


def _run_with_max_simd(value):
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "MOEGRAD_MAX_SIMD"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    env["PYTHONHASHSEED"] = "0"
    if value is not None:
        env["MOEGRAD_MAX_SIMD"] = value
    p = subprocess.run([sys.executable, "-c", _CAPPED], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.split(), p.stderr


def test_max_simd_caps_the_target_and_keeps_every_bit():
    default, err = _run_with_max_simd(None)
    assert err == "" and default[0] == moegrad.simd_target()
    values = [default[0].lower()]
    if default[0].startswith("AVX3") or default[0] == "AVX2":  # x86 with AVX2: the targets below it
        values += ["AVX2", "sse4", "Scalar"]
    for value in values:
        capped, err = _run_with_max_simd(value)
        assert err == ""
        assert capped[0] == value.upper()
        assert capped[1:] == default[1:], value  # gradExpandedX, gradScales and the forward, bit for bit


def test_max_simd_unknown_name_warns_once_and_keeps_every_target():
    default, _ = _run_with_max_simd(None)
    for value in ("avx9", ""):
        capped, err = _run_with_max_simd(value)
        assert err.startswith("moegrad: MOEGRAD_MAX_SIMD=%s is not a SIMD target of this build (" % value)
        assert err.endswith("); using every target\n") and err.count("\n") == 1
        assert capped == default
