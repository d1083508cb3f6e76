"""The two MoE pipelines of moegrad.torch, each one call in (dispatch) and one call out (combine), differentiable
end to end, with the per-expert row counts a grouped expert MLP needs:

- routing map: moe_permute (MoeTokenPermuteWithRoutingMap) -> experts -> moe_unpermute
  (MoeTokenUnpermuteWithRoutingMap), for a router that gives a [T, E] mask and [T, E] probabilities
  (Megatron-core's layout), dropless or drop-and-pad by capacity;
- V2: moe_dispatch_v2 (MoeInitRoutingV2) -> experts -> moe_combine_v2 (MoeFinalizeRoutingV2), for a router that
  gives top-k expert indices [T, K] and weights [T, K] (CANN's layout), dropless or with a capacity that
  drops, with an optional per-expert bias and residual inside the combine.

The handle a dispatch returns holds what its combine needs; a handle of one pipeline is refused by the other.
"""
from typing import NamedTuple, Optional, Tuple

import torch

from . import torch as _mt

__all__ = ["PermuteHandle", "DispatchV2Handle", "moe_permute", "moe_unpermute", "moe_dispatch_v2",
           "moe_combine_v2"]


class PermuteHandle(NamedTuple):
    """What moe_unpermute needs from moe_permute."""
    sorted_indices: torch.Tensor   # INT32: dropless slot t*K + k -> row; drop-and-pad row -> token
    routing_map: torch.Tensor      # [T, E]
    restore_shape: Tuple[int, int]  # (T, H)
    drop_and_pad: bool


class DispatchV2Handle(NamedTuple):
    """What moe_combine_v2 needs from moe_dispatch_v2."""
    expanded_row_idx: torch.Tensor  # INT32 [T*K]: token-major pair -> row (-1: dropped)
    expert_idx: torch.Tensor        # INT32 [T, K]
    capacity: int                   # 0: dropless, rows [T*K, H]; > 0: rows [E, C, H]


def moe_permute(tokens, routing_map, probs=None, num_out_tokens=None, drop_and_pad=False):
    """Dispatch of the routing-map pipeline: tokens [T, H] grouped by expert as routing_map [T, E] routes them.

    Returns (permuted_tokens [N, H], permuted_probs [N] or None, counts [E] int64, handle). Expert e's rows are
    counts[e] consecutive rows, experts in ascending order (permuted_tokens.split(counts.tolist())).
    Dropless (default): every token routed to the same K experts, N = T*K, counts = routing_map.sum(0).
    drop_and_pad: capacity C = num_out_tokens // E rows per expert (routed tokens first, then padding tokens),
    N = E*C, counts all C; the padding rows carry tokens not routed to that expert, which moe_unpermute weighs
    with their probability, 0 for an unrouted entry. Differentiable in tokens and probs.
    """
    if drop_and_pad:
        if num_out_tokens is None:
            raise ValueError("moe_permute: num_out_tokens is required with drop_and_pad (capacity "
                             "C = num_out_tokens // E)")
        num_experts = routing_map.shape[1]
        num_out_tokens = num_experts * (int(num_out_tokens) // max(num_experts, 1))
    permuted, permuted_probs, sorted_indices = _mt.moe_token_permute_with_routing_map(
        tokens, routing_map, probs, num_out_tokens=num_out_tokens, drop_and_pad=drop_and_pad)
    num_experts = routing_map.shape[1]
    if drop_and_pad:
        counts = torch.full((num_experts,), permuted.shape[0] // max(num_experts, 1), dtype=torch.int64)
    else:
        counts = routing_map.bool().sum(dim=0)
    handle = PermuteHandle(sorted_indices, routing_map, (tokens.shape[0], tokens.shape[1]), bool(drop_and_pad))
    return permuted, permuted_probs, counts, handle


def moe_unpermute(expert_output, handle, probs=None):
    """Combine of the routing-map pipeline: out [T, H], out[t] = the sum over t's rows of expert_output of the
    row times probs[t, its expert] (1 without probs), fp32 accumulation, one rounding, in expert_output's dtype.
    handle: moe_permute's. probs [T, E] may have its own float dtype (fp32 router probabilities with bf16
    tokens). Differentiable in expert_output and probs.
    """
    if not isinstance(handle, PermuteHandle):
        raise TypeError(f"moe_unpermute: handle must be moe_permute's PermuteHandle, not {type(handle).__name__}")
    return _mt.moe_token_unpermute_with_routing_map(
        expert_output, handle.sorted_indices, routing_map=handle.routing_map, probs=probs,
        padded_mode=handle.drop_and_pad, restore_shape=list(handle.restore_shape))[0]


def moe_dispatch_v2(x, expert_idx, num_experts, capacity=0):
    """Dispatch of the V2 pipeline: the rows of x [T, H] for the token-major pairs of expert_idx [T, K] (INT32
    or int64), grouped by expert (ties in pair order).

    Returns (expanded_x, counts [E] int64, handle). capacity 0 (dropless): expanded_x [T*K, H], expert e's rows
    counts[e] consecutive rows (expanded_x.split(counts.tolist())). capacity C > 0: expanded_x [E, C, H]
    (a batched matmul's layout), expert e's first counts[e] = min(its pairs, C) rows filled, the rest +0, pairs
    past C dropped. Differentiable in x.
    """
    expert_idx = expert_idx.to(torch.int32) if expert_idx.dtype != torch.int32 else expert_idx
    num_experts, capacity = int(num_experts), int(capacity)
    if capacity > 0:
        expanded_x, row_idx, _, before = _mt.moe_init_routing_v2(
            x, expert_idx, expert_capacity=capacity, expert_num=num_experts, drop_pad_mode=1,
            expert_tokens_before_capacity_flag=True)
        counts = before.long().clamp(max=capacity)
    else:
        expanded_x, row_idx, counts, _ = _mt.moe_init_routing_v2(
            x, expert_idx, expert_num=num_experts, drop_pad_mode=0, expert_tokens_count_or_cumsum_flag=2)
        counts = counts.long()
    return expanded_x, counts, DispatchV2Handle(row_idx, expert_idx, capacity)


def moe_combine_v2(expert_output, handle, scales=None, bias=None, residual=None):
    """Combine of the V2 pipeline: out[t] = residual[t] + the sum over k of scales[t, k] * (expert_output[row of
    (t, k)] + bias[expert_idx[t, k]]); a pair dropped by the capacity reads no row but still adds its
    scales * bias (MoeFinalizeRoutingV2's definition). expert_output has moe_dispatch_v2's layout
    ([T*K, H], or [E, C, H] with a capacity); scales [T, K] (1 when None) may be fp32 with bf16 rows; bias
    [E, H]; residual [T, H]. Differentiable in expert_output, scales, bias and residual.
    """
    if not isinstance(handle, DispatchV2Handle):
        raise TypeError(f"moe_combine_v2: handle must be moe_dispatch_v2's DispatchV2Handle, not "
                        f"{type(handle).__name__}")
    if scales is None:
        scales = torch.ones(handle.expert_idx.shape, dtype=expert_output.dtype)
    return _mt.moe_finalize_routing_v2(expert_output, handle.expanded_row_idx, x1=residual, bias=bias,
                                       scales=scales, expert_idx=handle.expert_idx,
                                       drop_pad_mode=3 if handle.capacity > 0 else 2)
