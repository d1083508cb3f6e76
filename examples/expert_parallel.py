#!/usr/bin/env python3
"""Expert parallelism over torch.distributed with moegrad as the per-rank operator: a MoE layer whose experts are
split over the ranks. Each rank routes its own tokens, dispatches them with moegrad (moe_permute), sends each
expert's rows to the rank that owns the expert with all_to_all_single (split sizes from the per-expert counts),
runs its local experts, sends the results back and combines them with moegrad (moe_unpermute), forward and
backward. Every rank then checks its output and every gradient (its tokens, its router probabilities, its
experts' weights, the replicated router's weight after an all-reduce) against the single-process run of the
same layer on the concatenated batch, which every rank computes too. Exit status 0 only when all agree.

Launch on one machine with torchrun-style arguments (this script starts the processes, gloo backend on CPU):

    PYTHONPATH=<build>/python .venv/bin/python examples/expert_parallel.py --nproc-per-node 4

or under torchrun itself (one process per rank; RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from it):

    PYTHONPATH=<build>/python .venv/bin/torchrun --nproc-per-node 4 examples/expert_parallel.py
"""
import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist

import moegrad.torch as mt

# name -> (tokens' dtype, router probabilities' dtype)
PRECISIONS = {"f32": (torch.float32, torch.float32), "bf16": (torch.bfloat16, torch.bfloat16),
              "bf16+f32": (torch.bfloat16, torch.float32)}


def make_problem(world, tokens_per_rank=24, hidden=16, ffn=32, experts_per_rank=2, topk=2, seed=0):
    """The whole batch and the layer's weights, the same on every rank (one seed)."""
    g = torch.Generator().manual_seed(seed)
    experts = experts_per_rank * world
    tokens = tokens_per_rank * world
    return dict(
        x=torch.randn(tokens, hidden, generator=g),
        router=torch.randn(hidden, experts, generator=g) / hidden ** 0.5,
        w1=torch.randn(experts, hidden, ffn, generator=g) / hidden ** 0.5,
        w2=torch.randn(experts, ffn, hidden, generator=g) / ffn ** 0.5,
        grad_out=torch.randn(tokens, hidden, generator=g),
        topk=topk, world=world)


def route(x, router, topk, probs_dtype):
    """Top-k routing: the routing map [T, E] and the dense probabilities [T, E] (0 off the map)."""
    logits = x.float() @ router
    top_probs, top_experts = logits.softmax(dim=-1).topk(topk, dim=-1)
    routing_map = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, top_experts, True)
    probs = torch.zeros_like(logits).scatter(1, top_experts, top_probs).to(probs_dtype)
    return routing_map, probs


class AllToAll(torch.autograd.Function):
    """all_to_all_single along dim 0 with the given split sizes; its backward is the reverse exchange."""

    @staticmethod
    def forward(ctx, rows, output_splits, input_splits, group):
        ctx.splits, ctx.group = (output_splits, input_splits), group
        out = rows.new_empty((sum(output_splits), *rows.shape[1:]))
        dist.all_to_all_single(out, rows.contiguous(), output_splits, input_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        output_splits, input_splits = ctx.splits
        out = grad.new_empty((sum(input_splits), *grad.shape[1:]))
        dist.all_to_all_single(out, grad.contiguous(), input_splits, output_splits, group=ctx.group)
        return out, None, None, None


def expert_mlp(rows, w1, w2):
    return torch.nn.functional.gelu(rows @ w1.to(rows.dtype)) @ w2.to(rows.dtype)


def layer(x, router, w1, w2, topk, dtype, probs_dtype, group=None):
    """The MoE layer on this rank's tokens x. group None: one process holds every expert (w1, w2: all experts).
    Otherwise w1 / w2 are this rank's experts (E / world of them, rank r owns [r*E/W, (r+1)*E/W)). Returns
    (out, probs): probs is the router's output, kept for its gradient."""
    routing_map, probs = route(x, router, topk, probs_dtype)
    probs.retain_grad()
    permuted, _, counts, handle = mt.moe_permute(x.to(dtype), routing_map)
    if group is None:
        expert_out = torch.cat([expert_mlp(rows, w1[e], w2[e])
                                for e, rows in enumerate(permuted.split(counts.tolist()))])
        return mt.moe_unpermute(expert_out, handle, probs), probs
    world = dist.get_world_size(group)
    local = w1.shape[0]
    # How many rows go to each rank, and how many of each local expert come from each rank.
    send_counts = counts.view(world, local)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts, group=group)
    input_splits = send_counts.sum(dim=1).tolist()
    output_splits = recv_counts.sum(dim=1).tolist()
    received = AllToAll.apply(permuted, output_splits, input_splits, group)
    # received: source rank major, local expert minor. Each expert's rows in source-rank order are exactly its
    # rows of the single-process run (the concatenated batch, expert-major, tokens in order).
    chunks = received.split(recv_counts.flatten().tolist())
    outs = [None] * len(chunks)
    for e in range(local):
        mine = [chunks[r * local + e] for r in range(world)]
        y = expert_mlp(torch.cat(mine), w1[e], w2[e])
        for r, part in enumerate(y.split([c.shape[0] for c in mine])):
            outs[r * local + e] = part
    back = AllToAll.apply(torch.cat(outs), input_splits, output_splits, group)
    return mt.moe_unpermute(back, handle, probs), probs


def leaves(problem, dtype):
    return {n: problem[n].clone().requires_grad_(True) for n in ("x", "router", "w1", "w2")}


def reference(problem, dtype, probs_dtype):
    """The single-process run on the whole batch: output and gradients."""
    p = leaves(problem, dtype)
    out, probs = layer(p["x"], p["router"], p["w1"], p["w2"], problem["topk"], dtype, probs_dtype)
    out.backward(problem["grad_out"].to(out.dtype))
    return dict(out=out.detach(), probs_grad=probs.grad, **{n + "_grad": t.grad for n, t in p.items()})


def rank_run(problem, rank, world, dtype, probs_dtype, group=None):
    """This rank's part: its tokens, its experts. Returns its output and gradients (the router's all-reduced)."""
    group = dist.group.WORLD if group is None else group
    p = leaves(problem, dtype)
    tokens = p["x"].shape[0] // world
    experts = p["w1"].shape[0] // world
    rows, own = slice(rank * tokens, (rank + 1) * tokens), slice(rank * experts, (rank + 1) * experts)
    x = p["x"].detach()[rows].clone().requires_grad_(True)
    w1 = p["w1"].detach()[own].clone().requires_grad_(True)
    w2 = p["w2"].detach()[own].clone().requires_grad_(True)
    router = p["router"]
    out, probs = layer(x, router, w1, w2, problem["topk"], dtype, probs_dtype, group=group)
    out.backward(problem["grad_out"][rows].to(out.dtype))
    router_grad = router.grad.clone()
    dist.all_reduce(router_grad, group=group)
    return dict(out=out.detach(), probs_grad=probs.grad, x_grad=x.grad, w1_grad=w1.grad, w2_grad=w2.grad,
                router_grad=router_grad)


def reference_part(ref, rank, world):
    """The rows of ref that rank_run's results of `rank` correspond to."""
    tokens = ref["x_grad"].shape[0] // world
    experts = ref["w1_grad"].shape[0] // world
    rows, own = slice(rank * tokens, (rank + 1) * tokens), slice(rank * experts, (rank + 1) * experts)
    return dict(out=ref["out"][rows], probs_grad=ref["probs_grad"][rows], x_grad=ref["x_grad"][rows],
                w1_grad=ref["w1_grad"][own], w2_grad=ref["w2_grad"][own], router_grad=ref["router_grad"])


# The router's gradient sums x * dlogits over the batch's tokens; the all-reduce of per-rank partial sums adds
# them in another order, and which order each rank's matmul takes depends on the CPU's kernels. Two orders of
# n fp32 additions may differ by up to 2 (n - 1) 2^-24 of the sum of the terms' magnitudes (measured: 1.5e-6
# at a value of 0.043 with 4 ranks, 96 tokens, on an AVX-512 machine), so the check allows 1e-4 relative and
# 1e-5 absolute: the order of that bound for these sizes, and far below any real error (a wrong index or weight
# changes the leading digits).
ROUTER_GRAD_TOLERANCE = dict(rtol=1e-4, atol=1e-5)


def compare(got, want):
    """Names of the results that differ: bit for bit, except the router's gradient, an all-reduce of per-rank
    partial sums (another order of additions), within fp32 rounding."""
    bad = []
    for name, w in want.items():
        g = got[name]
        if name == "router_grad":
            ok = torch.allclose(g, w, **ROUTER_GRAD_TOLERANCE)
        else:
            ok = g.dtype == w.dtype and torch.equal(g, w)
        if not ok:
            bad.append(name)
    return bad


def run(rank, world, precisions, seed=0):
    """One rank's whole check (the process group is initialized); returns the messages of its mismatches."""
    torch.set_num_threads(1)  # the same matmul kernels as the single-process run's
    problem = make_problem(world, seed=seed)
    failures = []
    for name in precisions:
        dtype, probs_dtype = PRECISIONS[name]
        got = rank_run(problem, rank, world, dtype, probs_dtype)
        bad = compare(got, reference_part(reference(problem, dtype, probs_dtype), rank, world))
        failures += [f"rank {rank} {name}: {b} differs from the single-process run" for b in bad]
    return failures


def _worker(rank, world, addr, port, precisions, queue=None):
    os.environ.update(MASTER_ADDR=addr, MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        failures = run(rank, world, precisions)
        flag = torch.tensor([len(failures)])
        dist.all_reduce(flag)
        if queue is not None:
            queue.put((rank, failures))
        return failures, int(flag)
    finally:
        dist.destroy_process_group()


def _spawned(rank, world, addr, port, precisions):
    failures, total = _worker(rank, world, addr, port, precisions)
    for f in failures:
        print(f, flush=True)
    if rank == 0:
        print(f"{world} ranks: " + ("every output and gradient equals the single-process run" if total == 0
                                    else f"{total} mismatches"), flush=True)
    if total:
        sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=2, help="ranks (processes)")
    ap.add_argument("--master-addr", "--master_addr", default="127.0.0.1")
    ap.add_argument("--master-port", "--master_port", type=int, default=0, help="0: a free port")
    ap.add_argument("--dtype", default="all", choices=[*PRECISIONS, "all"])
    args = ap.parse_args(argv)
    precisions = list(PRECISIONS) if args.dtype == "all" else [args.dtype]
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun: this process is one rank
        _spawned(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), os.environ.get("MASTER_ADDR", "127.0.0.1"),
                 int(os.environ.get("MASTER_PORT", "29500")), precisions)
        return 0
    port = args.master_port or free_port()
    try:
        torch.multiprocessing.spawn(_spawned, args=(args.nproc_per_node, args.master_addr, port, precisions),
                                    nprocs=args.nproc_per_node, join=True)
    except torch.multiprocessing.ProcessExitedException as e:
        print(f"expert_parallel: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
