#!/usr/bin/env python3
"""Trains a small Mixture-of-Experts layer on CPU for a few steps twice: once with moegrad's dispatch
(moe_token_permute_with_routing_map) and combine (moe_finalize_routing_v2), once with the same steps written
in plain PyTorch (Megatron-style permute / index_add unpermute). Both start from the same weights; the losses
must agree to within the precision of the dtype. Exit status 0 only when they do.

Precisions (--dtype, default all): f32; bf16 (tokens and router probabilities in bf16); bf16+f32 (bf16 tokens
with the router's probabilities kept in fp32, as Megatron-core's moe_router_dtype does: the permuted
probabilities, the combine's scales and their gradients stay fp32 on both sides).

    PYTHONPATH=<build>/python /usr/bin/python3 examples/train_moe_layer.py [--dtype f32|bf16|bf16+f32|all]
"""
import argparse
import copy
import sys

import torch

import moegrad.torch as mt


class MoeLayer(torch.nn.Module):
    """Router -> top-k -> dispatch -> one small MLP per expert -> combine (+ per-expert bias, + residual)."""

    def __init__(self, hidden, ffn, experts, topk, use_moegrad):
        super().__init__()
        self.experts, self.topk, self.use_moegrad = experts, topk, use_moegrad
        self.router = torch.nn.Linear(hidden, experts, bias=False)
        # fp32 master weights; the expert MLPs run in the layer's compute dtype.
        self.w1 = torch.nn.Parameter(torch.randn(experts, hidden, ffn) / hidden ** 0.5)
        self.b1 = torch.nn.Parameter(torch.zeros(experts, ffn))
        self.w2 = torch.nn.Parameter(torch.randn(experts, ffn, hidden) / ffn ** 0.5)
        self.expert_bias = torch.nn.Parameter(torch.randn(experts, hidden) * 0.1)

    def forward(self, x, dtype, probs_dtype):
        logits = self.router(x)
        top_probs, top_experts = logits.softmax(dim=-1).topk(self.topk, dim=-1)
        routing_map = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, top_experts, True)
        probs = torch.zeros_like(logits).scatter(1, top_experts, top_probs).to(probs_dtype)
        tokens = x.to(dtype)
        counts = routing_map.sum(dim=0).tolist()  # rows of each expert in the expert-major permuted tokens
        if self.use_moegrad:
            return self._moegrad(tokens, routing_map, probs, counts)
        return self._torch(tokens, routing_map, probs, counts)

    def _experts(self, permuted, counts):
        dt = permuted.dtype
        chunks = permuted.split(counts)
        return torch.cat([torch.nn.functional.gelu(c @ self.w1[e].to(dt) + self.b1[e].to(dt)) @ self.w2[e].to(dt)
                          for e, c in enumerate(chunks)])

    def _moegrad(self, tokens, routing_map, probs, counts):
        num_tokens = tokens.shape[0]
        permuted, permuted_probs, sorted_indices = mt.moe_token_permute_with_routing_map(tokens, routing_map, probs)
        expert_out = self._experts(permuted, counts)
        # Dropless sortedIndices maps token-major slot r*K + k to its permuted row: it is the combine's
        # expandedRowIdx for the token-major mode 2, and picks each slot's routing weight.
        scales = permuted_probs[sorted_indices.long()].view(num_tokens, self.topk)
        expert_idx = routing_map.nonzero()[:, 1].view(num_tokens, self.topk).to(torch.int32)
        return mt.moe_finalize_routing_v2(expert_out, sorted_indices, x1=tokens,
                                          bias=self.expert_bias.to(tokens.dtype), scales=scales,
                                          expert_idx=expert_idx, drop_pad_mode=2)

    def _torch(self, tokens, routing_map, probs, counts):
        num_tokens = tokens.shape[0]
        mask = routing_map.t().contiguous()  # (E, T)
        token_of_row = torch.arange(num_tokens).unsqueeze(0).expand(self.experts, -1).masked_select(mask)
        permuted = tokens.index_select(0, token_of_row)
        permuted_probs = probs.t().contiguous().masked_select(mask)
        expert_out = self._experts(permuted, counts)
        expert_of_row = torch.repeat_interleave(torch.arange(self.experts), torch.tensor(counts))
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
PRECISIONS = {
    "f32": (torch.float32, torch.float32, 1e-4),
    "bf16": (torch.bfloat16, torch.bfloat16, 3e-2),
    "bf16+f32": (torch.bfloat16, torch.float32, 3e-2),
}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="all", choices=[*PRECISIONS, "all"],
                    help="tokens[+probabilities] dtype; bf16+f32: bf16 tokens, fp32 router probabilities")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    tokens, hidden, ffn, experts, topk, steps = 128, 32, 64, 8, 2, 8
    data = torch.randn(tokens, hidden)
    target = torch.tanh(data @ torch.randn(hidden, hidden) / hidden ** 0.5)
    ok = True
    for name, (dtype, probs_dtype, rtol) in PRECISIONS.items():
        if args.dtype not in ("all", name):
            continue
        reference = MoeLayer(hidden, ffn, experts, topk, use_moegrad=False)
        model = copy.deepcopy(reference)
        model.use_moegrad = True
        ours = train(model, data, target, dtype, probs_dtype, steps)
        theirs = train(reference, data, target, dtype, probs_dtype, steps)
        print(f"{name:16} {'step':>4} {'loss (moegrad)':>16} {'loss (pytorch)':>16}")
        for step, (a, b) in enumerate(zip(ours, theirs)):
            close = abs(a - b) <= rtol * abs(b)
            ok &= close
            print(f"{'':16} {step:4d} {a:16.8f} {b:16.8f}{'' if close else '   MISMATCH'}")
        if ours[-1] >= ours[0]:
            print(f"{name}: the loss did not decrease")
            ok = False
    print("losses agree" if ok else "losses DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
