"""moegrad.torch.megatron: drop-in replacements of Megatron-core's unfused routing-map dispatch and combine,
`megatron.core.transformer.moe.moe_utils.permute` and `unpermute`, on moegrad's operators
(MoeTokenPermuteWithRoutingMap, MoeTokenUnpermuteWithRoutingMap and their gradients).

The signatures, defaults and return values are Megatron-core's (checked against the installed 0.16.1):
`sorted_indices` is Megatron's, the token of each permuted row (int64), so tensors of either implementation
can be handed to the other's function. `fused=True` names Transformer Engine's fused kernels and raises
ValueError. moegrad's dropless operators need every token routed to the same number K of experts (top-k
routing); a routing map with unequal counts per token (capacity dropping without padding) runs an unfused
PyTorch path of the same semantics. `install()` puts the two functions where Megatron-core's token dispatchers
look them up; `uninstall()` puts Megatron's own back.

Megatron-core itself is not needed to use permute / unpermute; install() needs it.
"""
import importlib

import torch

from . import torch as _mt

__all__ = ["permute", "unpermute", "install", "uninstall", "installed"]

_FUSED = ("{fn}: fused=True selects Transformer Engine's fused {fn}, which moegrad does not replace; "
          "moegrad's {fn} is the unfused one's drop-in (pass fused=False)")


def _equal_counts(counts):
    """K when every entry of `counts` (per-token routed experts) equals K, else None."""
    if counts.numel() == 0:
        return 0
    k = int(counts[0])
    return k if bool((counts == k).all()) else None


def permute(tokens, routing_map, probs=None, num_out_tokens=None, fused=False, drop_and_pad=False):
    """Megatron-core's permute on MoeTokenPermuteWithRoutingMap: the rows of tokens [T, H] grouped by expert as
    routed by routing_map [T, E] (bool). Returns (permuted tokens [N, H], permuted probs [N] or None,
    sorted_indices [N] int64: the token of each permuted row).

    Dropless (drop_and_pad False, or num_out_tokens None): N = the routed entries (num_out_tokens is not read,
    as in Megatron). drop_and_pad with num_out_tokens: every expert gets C = num_out_tokens // E rows, its
    routed tokens first, then unrouted ones in ascending order. Differentiable in tokens and probs.
    """
    if fused:
        raise ValueError(_FUSED.format(fn="permute"))
    if drop_and_pad and num_out_tokens is not None:
        num_experts = routing_map.shape[1]
        capacity = num_out_tokens // num_experts
        permuted, permuted_probs, sorted_indices = _mt.moe_token_permute_with_routing_map(
            tokens, routing_map, probs, num_out_tokens=num_experts * capacity, drop_and_pad=True)
        return permuted, permuted_probs, sorted_indices.long()
    per_token = routing_map.sum(dim=1) if routing_map.dim() == 2 else None
    k = _equal_counts(per_token) if per_token is not None else None
    if k is None or tokens.dim() != 2 or tokens.shape[0] == 0:
        return _permute_torch(tokens, routing_map, probs)
    permuted, permuted_probs, slot_rows = _mt.moe_token_permute_with_routing_map(tokens, routing_map, probs)
    # moegrad's dropless index maps token-major slot t*K + k to its row; Megatron's gives each row's token.
    n = slot_rows.shape[0]
    sorted_indices = torch.empty(n, dtype=torch.int64)
    sorted_indices[slot_rows.long()] = torch.arange(n, dtype=torch.int64) // k
    return permuted, permuted_probs, sorted_indices


def unpermute(permuted_tokens, sorted_indices, restore_shape, probs=None, routing_map=None, fused=False,
              drop_and_pad=False):
    """Megatron-core's unpermute on MoeTokenUnpermuteWithRoutingMap: out[t] = the sum over the permuted rows r
    of token sorted_indices[r] of w(r) * permuted_tokens[r], w the token's prob of the row's expert (1 without
    probs), in restore_shape [T, H] and permuted_tokens' dtype. With probs, routing_map is required (Megatron's
    assertion). moegrad accumulates in fp32 and rounds once per output element (Megatron: one rounding per
    product and per addition, in the promoted dtype of tokens and probs). Differentiable in permuted_tokens and
    probs.
    """
    if fused:
        raise ValueError(_FUSED.format(fn="unpermute"))
    if probs is not None:
        assert routing_map is not None, "Mask must be provided to permute the probs."
    shape = [int(s) for s in restore_shape]
    if drop_and_pad:
        return _mt.moe_token_unpermute_with_routing_map(
            permuted_tokens, sorted_indices.to(torch.int32), routing_map=routing_map, probs=probs, padded_mode=True,
            restore_shape=shape)[0]
    tokens = shape[0]
    n = sorted_indices.shape[0]
    k = None
    if tokens > 0 and n % tokens == 0 and permuted_tokens.dim() == 2 and shape[1] > 0:
        k = _equal_counts(torch.bincount(sorted_indices, minlength=tokens)) if n > 0 else None
        if routing_map is not None and k is not None and routing_map.shape[0] == tokens:
            k = k if n == tokens * k and _equal_counts(routing_map.sum(dim=1)) == k else None
    if k is None or k == 0:
        return _unpermute_torch(permuted_tokens, sorted_indices, shape, probs, routing_map)
    # Rows by token, stably (a token's rows are in expert order): moegrad's token-major slot -> row index.
    slot_rows = torch.argsort(sorted_indices, stable=True).to(torch.int32)
    if routing_map is None:
        # moegrad's dropless combine reads K from the routing map: any map with K entries per token will do,
        # the weights being 1.
        routing_map = torch.zeros(tokens, k, dtype=torch.bool).fill_(True)
    return _mt.moe_token_unpermute_with_routing_map(permuted_tokens, slot_rows, routing_map=routing_map,
                                                    probs=probs, padded_mode=False, restore_shape=shape)[0]


# --- unequal per-token counts: plain PyTorch of Megatron's semantics -------------------------------------------

def _permute_torch(tokens, routing_map, probs):
    num_tokens = tokens.shape[0]
    num_experts = routing_map.shape[1]
    mask = routing_map.bool().T.contiguous()
    sorted_indices = torch.arange(num_tokens).unsqueeze(0).expand(num_experts, -1).masked_select(mask)
    permuted_probs = None if probs is None else probs.T.contiguous().masked_select(mask)
    return tokens.index_select(0, sorted_indices), permuted_probs, sorted_indices


def _unpermute_torch(permuted_tokens, sorted_indices, shape, probs, routing_map):
    dtype = permuted_tokens.dtype
    if probs is not None:
        weights = probs.T.contiguous().masked_select(routing_map.bool().T.contiguous())
        permuted_tokens = permuted_tokens * weights.unsqueeze(-1)
    out = torch.zeros(shape, dtype=permuted_tokens.dtype)
    return out.index_add(0, sorted_indices, permuted_tokens).to(dtype)


# --- install ---------------------------------------------------------------------------------------------------

# The modules of Megatron-core that bind permute / unpermute at import (from moe_utils import ...).
_MODULES = ("megatron.core.transformer.moe.moe_utils", "megatron.core.transformer.moe.token_dispatcher")
_saved = {}


def install():
    """Replaces permute and unpermute in Megatron-core's moe_utils and in the token dispatchers' module (which
    imported them by name) with moegrad's. Idempotent; ImportError when Megatron-core is not importable."""
    for name in _MODULES:
        module = importlib.import_module(name)
        if name not in _saved:
            _saved[name] = (module.permute, module.unpermute)
        module.permute, module.unpermute = permute, unpermute


def uninstall():
    """Puts Megatron-core's own permute and unpermute back where install() replaced them."""
    for name, (p, u) in list(_saved.items()):
        module = importlib.import_module(name)
        module.permute, module.unpermute = p, u
        del _saved[name]


def installed():
    """Whether install() is in effect."""
    return bool(_saved)
