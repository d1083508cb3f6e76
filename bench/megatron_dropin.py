#!/usr/bin/env python3
"""moegrad.torch.megatron's permute / unpermute against Megatron-core's own unfused ones, in one run.

DeepSeek-V3's layer (H 7168, E 256, K 8), bf16 tokens with fp32 probabilities, dropless and drop-and-pad
(capacity factor 1: num_out_tokens = T*K): the median time of permute, of unpermute with probs, and of the
round trip permute -> unpermute forward and backward, for each implementation, and in the same run the median
time of a copy of the permuted tokens (clone), as GB/s, the machine's bandwidth at that moment.

    PYTHONPATH=build/python .venv/bin/python bench/megatron_dropin.py [--tokens 256] [--threads N]
"""
import argparse
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_torch import median_seconds  # noqa: E402
from moegrad.torch import megatron as mg  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from megatron.core.transformer.moe import moe_utils  # noqa: E402

H, E, K = 7168, 256, 8


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=0, help="torch and moegrad threads (0: their defaults)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
        import moegrad
        moegrad.set_num_threads(args.threads)
    T = args.tokens
    gen = torch.Generator().manual_seed(0)
    top_probs, top_experts = torch.rand(T, E, generator=gen).softmax(-1).topk(K, dim=-1)
    routing_map = torch.zeros(T, E, dtype=torch.bool).scatter_(1, top_experts, True)
    probs = torch.zeros(T, E).scatter(1, top_experts, top_probs)
    x = torch.randn(T, H, generator=gen).bfloat16()
    impls = {"megatron-core": (moe_utils.permute, moe_utils.unpermute), "moegrad": (mg.permute, mg.unpermute)}
    print(f"T {T}, H {H}, E {E}, K {K}, bf16 tokens, fp32 probs, {torch.get_num_threads()} torch threads")
    print(f"{'mode':13} {'step':28} {'megatron-core':>14} {'moegrad':>10} {'speed-up':>9} {'copy GB/s':>10}")
    for mode, pad in (("dropless", False), ("drop-and-pad", True)):
        num_out = T * K if pad else None
        permuted, _, sorted_indices = moe_utils.permute(x, routing_map, probs, num_out_tokens=num_out,
                                                        drop_and_pad=pad)
        copy_s = median_seconds(lambda: permuted.clone())
        gbps = 2 * permuted.numel() * permuted.element_size() / copy_s / 1e9

        def steps(p_fn, u_fn):
            def round_trip():
                xl, pl = x.clone().requires_grad_(True), probs.clone().requires_grad_(True)
                y, _, si = p_fn(xl, routing_map, pl, num_out_tokens=num_out, drop_and_pad=pad)
                u_fn(y, si, x.shape, probs=pl, routing_map=routing_map, drop_and_pad=pad).sum().backward()
            return {
                "permute": lambda: p_fn(x, routing_map, probs, num_out_tokens=num_out, drop_and_pad=pad),
                "unpermute (probs)": lambda: u_fn(permuted, sorted_indices, x.shape, probs=probs,
                                                  routing_map=routing_map, drop_and_pad=pad),
                "round trip, fwd + bwd": round_trip,
            }
        theirs, ours = steps(*impls["megatron-core"]), steps(*impls["moegrad"])
        for step in theirs:
            a, b = median_seconds(theirs[step], budget=1.0), median_seconds(ours[step], budget=1.0)
            print(f"{mode:13} {step:28} {a * 1e3:11.2f} ms {b * 1e3:7.2f} ms {a / b:8.2f}x {gbps:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
