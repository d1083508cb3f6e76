#!/usr/bin/env python3
"""Trains a small Mixture-of-Experts layer on CPU for a few steps with each of moegrad's whole pipelines, and
with the same steps written in plain PyTorch (Megatron-style permute / index_add unpermute): the routing-map
pipeline (moe_permute -> experts -> moe_unpermute) and the V2 pipeline (moe_dispatch_v2 -> experts ->
moe_combine_v2, the expert bias and the residual inside the combine). Each starts from the reference's weights;
the losses must agree to within the precision of the dtype. Exit status 0 only when they do.

Precisions (--dtype, default all): f32; bf16 (tokens and router probabilities in bf16); bf16+f32 (bf16 tokens
with the router's probabilities kept in fp32, as Megatron-core's moe_router_dtype does: the permuted
probabilities, the combine's scales and their gradients stay fp32 on both sides).

    PYTHONPATH=<build>/python .venv/bin/python examples/train_moe_layer.py [--dtype f32|bf16|bf16+f32|all]
        [--pipeline routing-map|v2|all]
"""
import argparse
import copy
import itertools
import sys

import torch

import moegrad.torch as mt


class MoeLayer(torch.nn.Module):
    """Router -> top-k -> dispatch -> one small MLP per expert -> combine (+ per-expert bias, + residual).
    pipeline: "torch" (plain PyTorch, the reference), "routing-map" (moe_permute -> moe_unpermute) or "v2"
    (moe_dispatch_v2 -> moe_combine_v2)."""

    def __init__(self, hidden, ffn, experts, topk, pipeline):
        super().__init__()
        self.experts, self.topk, self.pipeline = experts, topk, pipeline
        self.router = torch.nn.Linear(hidden, experts, bias=False)
        # fp32 master weights; the expert MLPs run in the layer's compute dtype.
        self.w1 = torch.nn.Parameter(torch.randn(experts, hidden, ffn) / hidden ** 0.5)
        self.b1 = torch.nn.Parameter(torch.zeros(experts, ffn))
        self.w2 = torch.nn.Parameter(torch.randn(experts, ffn, hidden) / ffn ** 0.5)
        self.expert_bias = torch.nn.Parameter(torch.randn(experts, hidden) * 0.1)

    def forward(self, x, dtype, probs_dtype):
        logits = self.router(x)
        top_probs, top_experts = logits.softmax(dim=-1).topk(self.topk, dim=-1)
        tokens = x.to(dtype)
        if self.pipeline == "v2":  # the router's top-k indices and weights as they are
            return self._v2(tokens, top_experts, top_probs.to(probs_dtype))
        routing_map = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, top_experts, True)
        probs = torch.zeros_like(logits).scatter(1, top_experts, top_probs).to(probs_dtype)
        if self.pipeline == "routing-map":
            return self._routing_map(tokens, routing_map, probs)
        return self._torch(tokens, routing_map, probs)

    def _experts(self, rows, counts):
        """Expert e's MLP on its counts[e] consecutive rows (what a grouped matmul does)."""
        dt = rows.dtype
        chunks = rows.split(counts.tolist())
        return torch.cat([torch.nn.functional.gelu(c @ self.w1[e].to(dt) + self.b1[e].to(dt)) @ self.w2[e].to(dt)
                          for e, c in enumerate(chunks)])

    def _routing_map(self, tokens, routing_map, probs):
        permuted, _, counts, handle = mt.moe_permute(tokens, routing_map)
        expert_out = self._experts(permuted, counts)
        expert_of_row = torch.repeat_interleave(torch.arange(self.experts), counts)
        biased = expert_out + self.expert_bias.to(tokens.dtype)[expert_of_row]
        return mt.moe_unpermute(biased, handle, probs) + tokens

    def _v2(self, tokens, top_experts, top_probs):
        expanded, counts, handle = mt.moe_dispatch_v2(tokens, top_experts, self.experts)
        expert_out = self._experts(expanded, counts)
        return mt.moe_combine_v2(expert_out, handle, scales=top_probs, bias=self.expert_bias.to(tokens.dtype),
                                 residual=tokens)

    def _torch(self, tokens, routing_map, probs):
        num_tokens = tokens.shape[0]
        mask = routing_map.t().contiguous()  # (E, T)
        token_of_row = torch.arange(num_tokens).unsqueeze(0).expand(self.experts, -1).masked_select(mask)
        permuted = tokens.index_select(0, token_of_row)
        permuted_probs = probs.t().contiguous().masked_select(mask)
        counts = routing_map.sum(dim=0)
        expert_out = self._experts(permuted, counts)
        expert_of_row = torch.repeat_interleave(torch.arange(self.experts), counts)
        biased = expert_out.float() + self.expert_bias.to(tokens.dtype).float()[expert_of_row]
        weighted = biased * permuted_probs.float().unsqueeze(-1)
        out = torch.zeros(tokens.shape, dtype=torch.float32).index_add_(0, token_of_row, weighted)
        return (out + tokens.float()).to(tokens.dtype)


def train(model, data, target, dtype, probs_dtype, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(data, dtype, probs_dtype).float(), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# name -> (tokens' dtype, router probabilities' dtype, relative tolerance of the losses)
PIPELINES = ("routing-map", "v2")
PRECISIONS = {
    "f32": (torch.float32, torch.float32, 1e-4),
    "bf16": (torch.bfloat16, torch.bfloat16, 3e-2),
    "bf16+f32": (torch.bfloat16, torch.float32, 3e-2),
}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="all", choices=[*PRECISIONS, "all"],
                    help="tokens[+probabilities] dtype; bf16+f32: bf16 tokens, fp32 router probabilities")
    ap.add_argument("--pipeline", default="all", choices=[*PIPELINES, "all"],
                    help="routing-map: moe_permute -> moe_unpermute; v2: moe_dispatch_v2 -> moe_combine_v2")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    tokens, hidden, ffn, experts, topk, steps = 128, 32, 64, 8, 2, 8
    data = torch.randn(tokens, hidden)
    target = torch.tanh(data @ torch.randn(hidden, hidden) / hidden ** 0.5)
    ok = True
    for (name, (dtype, probs_dtype, rtol)), pipeline in itertools.product(PRECISIONS.items(), PIPELINES):
        if args.dtype not in ("all", name) or args.pipeline not in ("all", pipeline):
            continue
        torch.manual_seed(1)
        reference = MoeLayer(hidden, ffn, experts, topk, pipeline="torch")
        model = copy.deepcopy(reference)
        model.pipeline = pipeline
        ours = train(model, data, target, dtype, probs_dtype, steps)
        theirs = train(reference, data, target, dtype, probs_dtype, steps)
        name = f"{pipeline} {name}"
        print(f"{name:20} {'step':>4} {'loss (moegrad)':>16} {'loss (pytorch)':>16}")
        for step, (a, b) in enumerate(zip(ours, theirs)):
            close = abs(a - b) <= rtol * abs(b)
            ok &= close
            print(f"{'':20} {step:4d} {a:16.8f} {b:16.8f}{'' if close else '   MISMATCH'}")
        if ours[-1] >= ours[0]:
            print(f"{name}: the loss did not decrease")
            ok = False
    print("losses agree" if ok else "losses DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
