"""Expert parallelism over torch.distributed (gloo, local processes): examples/expert_parallel.py's layer on 2 and
4 ranks, each rank's output and gradients (tokens, router probabilities, its experts' weights; the router's
after an all-reduce) against the single-process run on the concatenated batch, computed here. And what stops
Megatron-core's MoEAlltoAllTokenDispatcher on a CPU build of torch (docs/python.md, "distributed")."""
import importlib.util
import os
import pathlib
import socket
import time
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "expert_parallel.py"


def load_example():
    spec = importlib.util.spec_from_file_location("expert_parallel", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ep = load_example()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank, world, port, precisions, out_dir):
    """A spawned rank: its results of every precision saved for the parent."""
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        problem = ep.make_problem(world)
        results = {name: ep.rank_run(problem, rank, world, *ep.PRECISIONS[name]) for name in precisions}
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_expert_parallel_equals_single_process(world, tmp_path):
    precisions = list(ep.PRECISIONS)
    ctx = tmp.start_processes(_rank, args=(world, free_port(), precisions, str(tmp_path)), nprocs=world,
                              join=False, start_method="spawn")
    limit = 120
    deadline = time.monotonic() + limit
    while not ctx.join(timeout=max(deadline - time.monotonic(), 0.1)):  # True once all ranks exited
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.terminate()
            pytest.fail(f"{world} ranks did not finish in {limit} s")
    torch.set_num_threads(1)
    problem = ep.make_problem(world)
    for name in precisions:
        ref = ep.reference(problem, *ep.PRECISIONS[name])
        # The reference itself is a real MoE layer: every expert saw tokens and every gradient is non-zero.
        assert all(bool(ref[k].abs().sum() > 0) for k in ("x_grad", "probs_grad", "w1_grad", "w2_grad"))
        for rank in range(world):
            got = torch.load(tmp_path / f"rank{rank}.pt")[name]
            want = ep.reference_part(ref, rank, world)
            assert set(got) == set(want)
            for key, w in want.items():
                g = got[key]
                assert g.dtype == w.dtype and g.shape == w.shape, f"{name} rank {rank} {key}"
                if key == "router_grad":  # an all-reduce of partial sums: another order of additions
                    torch.testing.assert_close(g, w, **ep.ROUTER_GRAD_TOLERANCE)
                else:
                    assert torch.equal(g, w), f"{name} rank {rank}: {key} differs from the single-process run"


def test_megatron_alltoall_dispatcher_needs_cuda():
    """Megatron-core's MoEAlltoAllTokenDispatcher cannot be built on a CPU build of torch: its constructor
    creates a torch.cuda.Stream (and its dispatch synchronizes through CUDA streams). docs/python.md says so;
    when this stops holding, the comparison with moegrad installed is due."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        td = pytest.importorskip("megatron.core.transformer.moe.token_dispatcher",
                                 reason="megatron-core is not installed (scripts/setup.sh pins it)")
        from megatron.core.process_groups_config import ProcessGroupCollection
        from megatron.core.transformer.transformer_config import TransformerConfig
    if torch.cuda.is_available():
        pytest.skip("a CUDA build with a GPU: the dispatcher is not CPU-bound here")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        w = dist.group.WORLD
        pg = ProcessGroupCollection(ep=w, expt_tp=w, tp_ep=w, tp=w, expt_dp=w)
        config = TransformerConfig(num_layers=1, hidden_size=16, num_attention_heads=2, num_moe_experts=4,
                                   moe_router_topk=2, moe_token_dispatcher_type="alltoall",
                                   use_cpu_initialization=True)
        with pytest.raises(RuntimeError, match="torch.cuda.Stream requires CUDA support"):
            td.MoEAlltoAllTokenDispatcher(4, [0, 1, 2, 3], config, pg_collection=pg)
    finally:
        dist.destroy_process_group()
