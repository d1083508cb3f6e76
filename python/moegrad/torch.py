"""PyTorch functions of moegrad: MoE dispatch (permute with a routing map) and combine (finalize routing),
differentiable through moegrad's exact gradient operators, plus the two gradient operators themselves.

Tensors are handed to the library in place (data pointer, sizes and strides: no copy, any strides); only the
outputs are allocated here. Every rule is the library's and a violation raises ValueError with its message.
The functions are also registered as torch.ops.moegrad.<name> (see docs/python.md).
"""
import torch
from torch.autograd.function import once_differentiable

from . import _C

__all__ = [
    "moe_token_permute_with_routing_map",
    "moe_finalize_routing_v2",
    "moe_finalize_routing_v2_grad",
    "moe_token_permute_with_routing_map_grad",
]

_DTYPE_NAMES = {
    torch.float32: "FLOAT32", torch.float16: "FLOAT16", torch.bfloat16: "BFLOAT16", torch.float64: "DOUBLE",
    torch.int8: "INT8", torch.uint8: "UINT8", torch.int16: "INT16", torch.int32: "INT32",
    torch.int64: "INT64", torch.bool: "BOOL",
}
_DTYPE_CODES = {t: _C.DTYPES[name] for t, name in _DTYPE_NAMES.items()}


def _desc(t, name):
    """(data_ptr, dtype code, sizes, strides) of a CPU tensor, for the extension; None stays None."""
    if t is None:
        return None
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"moegrad: {name} must be a torch.Tensor, not {type(t).__name__}")
    if t.device.type != "cpu" or t.layout != torch.strided:
        raise ValueError(f"moegrad: {name} is a {t.layout} tensor on {t.device}; moegrad takes strided CPU tensors")
    code = _DTYPE_CODES.get(t.dtype)
    if code is None:
        raise ValueError(f"moegrad: {name} has dtype {t.dtype}, which moegrad does not know")
    if t.is_neg() or t.is_conj():
        raise ValueError(f"moegrad: {name} is a lazily negated/conjugated view; call resolve_neg() first")
    return (t.data_ptr(), code, tuple(t.shape), tuple(t.stride()))


def _dim(t, d):
    """Size of dimension d, or 0 when t has no such dimension (the library reports the bad rank)."""
    return t.shape[d] if t is not None and t.dim() > d else 0


# --- the operators on plain tensors (the CPU kernels of torch.ops.moegrad.*) ----------------------------

def _call(op, tensors, **attrs):
    """Runs _C.<op>: `tensors` and `attrs` by the names of the operator's description (_C.OPS[op], the library's
    OpInfo), absent tensors None."""
    tensor_names, attr_names = _C.OPS[op]
    unknown = (set(tensors) - set(tensor_names)) | (set(attrs) - set(attr_names))
    if unknown:
        raise TypeError(f"moegrad: {op} has no argument {sorted(unknown)[0]}")
    getattr(_C, op)([_desc(tensors.get(n), n) for n in tensor_names], [int(attrs[n]) for n in attr_names])


def _permute(tokens, routing_map, probs=None, num_out_tokens=None, drop_and_pad=False):
    t_num, hidden, e_num = _dim(tokens, 0), _dim(tokens, 1), _dim(routing_map, 1)
    if num_out_tokens is None:
        if drop_and_pad:
            raise ValueError("moe_token_permute_with_routing_map: num_out_tokens is required with drop_and_pad")
        num_out_tokens = int(torch.count_nonzero(routing_map)) if isinstance(routing_map, torch.Tensor) else 0
    num_out_tokens = int(num_out_tokens)
    # Output rows as the operator defines them: T*K (K = numOutTokens / T) or E*C (C = numOutTokens / E).
    groups = e_num if drop_and_pad else t_num
    rows = groups * (num_out_tokens // groups) if groups > 0 and num_out_tokens >= 0 else 0
    permuted = torch.empty((rows, hidden), dtype=tokens.dtype)
    permuted_probs = torch.empty((rows,), dtype=probs.dtype) if probs is not None else None
    sorted_indices = torch.empty((rows,), dtype=torch.int32)
    _call("token_permute_with_routing_map",
          dict(tokens=tokens, routingMap=routing_map, probs=probs, permuteTokensOut=permuted,
               permuteProbsOut=permuted_probs, sortedIndicesOut=sorted_indices),
          numOutTokens=num_out_tokens, dropAndPad=drop_and_pad)
    return permuted, permuted_probs, sorted_indices


def _permute_grad(permuted_token_output_grad, sorted_indices, num_experts, tokens_num, drop_and_pad=False,
                  permuted_probs_output_grad=None, routing_map=None):
    g = permuted_token_output_grad
    tokens_grad = torch.empty((max(int(tokens_num), 0), _dim(g, 1)), dtype=g.dtype)
    probs_grad = None
    if permuted_probs_output_grad is not None:
        probs_grad = torch.empty((max(int(tokens_num), 0), max(int(num_experts), 0)),
                                 dtype=permuted_probs_output_grad.dtype)
    _call("token_permute_with_routing_map_grad",
          dict(permutedTokenOutputGrad=g, permutedProbsOutputGrad=permuted_probs_output_grad,
               sortedIndices=sorted_indices, routingMap=routing_map, tokensGradOut=tokens_grad,
               probsGradOut=probs_grad),
          numExperts=num_experts, tokensNum=tokens_num, dropAndPad=drop_and_pad)
    return tokens_grad, probs_grad


def _combine_tokens(expanded_row_idx, x1, x2, scales, expert_idx):
    """R of the combine: from the first (R, ...) tensor given; with none of them K = 1, so R = R*K."""
    for t in (scales, x1, x2, expert_idx):
        if t is not None and t.dim() >= 1:
            return t.shape[0]
    return expanded_row_idx.numel()


def _finalize(expanded_x, expanded_row_idx, x1=None, x2=None, bias=None, scales=None, expert_idx=None,
              drop_pad_mode=0):
    rows = _combine_tokens(expanded_row_idx, x1, x2, scales, expert_idx)
    out = torch.empty((rows, _dim(expanded_x, expanded_x.dim() - 1)), dtype=expanded_x.dtype)
    _call("finalize_routing_v2",
          dict(expandedX=expanded_x, expandedRowIdx=expanded_row_idx, x1=x1, x2=x2, bias=bias, scales=scales,
               expertIdx=expert_idx, out=out),
          dropPadMode=drop_pad_mode)
    return out


def _finalize_grad(grad_y, expanded_row_idx, expanded_x=None, scales=None, expert_idx=None, bias=None,
                   drop_pad_mode=0, active_num=0, expert_num=0, expert_capacity=0):
    rows, hidden = _dim(grad_y, 0), _dim(grad_y, 1)
    if scales is not None:
        topk = _dim(scales, 1)
    else:
        topk = expanded_row_idx.numel() // rows if rows > 0 else 0
    if expanded_x is not None:
        shape = tuple(expanded_x.shape)
    elif drop_pad_mode == 1:
        shape = (max(int(expert_num), 0), max(int(expert_capacity), 0), hidden)
    else:
        pairs = rows * topk
        shape = (int(active_num) if 0 < active_num < pairs else pairs, hidden)
    grad_x = torch.empty(shape, dtype=grad_y.dtype)
    grad_scales = torch.empty((rows, topk), dtype=grad_y.dtype) if scales is not None else None
    _call("finalize_routing_v2_grad",
          dict(gradY=grad_y, expandedRowIdx=expanded_row_idx, expandedX=expanded_x, scales=scales,
               expertIdx=expert_idx, bias=bias, gradExpandedXOut=grad_x, gradScalesOut=grad_scales),
          dropPadMode=drop_pad_mode, activeNum=active_num, expertNum=expert_num, expertCapacity=expert_capacity)
    return grad_x, grad_scales


# --- autograd ---------------------------------------------------------------------------------------------

class _PermuteFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tokens, routing_map, probs, num_out_tokens, drop_and_pad):
        permuted, permuted_probs, sorted_indices = _permute(tokens, routing_map, probs, num_out_tokens,
                                                            drop_and_pad)
        ctx.mark_non_differentiable(sorted_indices)
        ctx.save_for_backward(sorted_indices, routing_map if probs is not None else None)
        ctx.shape = (tokens.shape[0], routing_map.shape[1], tokens.shape[1])
        ctx.drop_and_pad = bool(drop_and_pad)
        ctx.has_probs = probs is not None
        return permuted, permuted_probs, sorted_indices

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_permuted, grad_permuted_probs, _grad_sorted_indices):
        sorted_indices, routing_map = ctx.saved_tensors
        tokens_num, num_experts, hidden = ctx.shape
        want_probs = ctx.has_probs and ctx.needs_input_grad[2]
        if tokens_num == 0 or num_experts == 0:  # nothing was routed; the operator needs T, E > 0
            tokens_grad = grad_permuted.new_zeros((tokens_num, hidden))
            probs_grad = grad_permuted_probs.new_zeros((tokens_num, num_experts)) if want_probs else None
        else:
            tokens_grad, probs_grad = _permute_grad(
                grad_permuted, sorted_indices, num_experts, tokens_num, ctx.drop_and_pad,
                grad_permuted_probs if want_probs else None, routing_map if want_probs else None)
        return (tokens_grad if ctx.needs_input_grad[0] else None), None, probs_grad, None, None


class _FinalizeFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, expanded_x, expanded_row_idx, x1, x2, bias, scales, expert_idx, drop_pad_mode):
        out = _finalize(expanded_x, expanded_row_idx, x1, x2, bias, scales, expert_idx, drop_pad_mode)
        ctx.save_for_backward(expanded_x, expanded_row_idx, bias, scales, expert_idx)
        ctx.drop_pad_mode = int(drop_pad_mode)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y):
        expanded_x, idx, bias, scales, expert_idx = ctx.saved_tensors
        need_x, _, need_x1, need_x2, need_bias, need_scales = ctx.needs_input_grad[:6]
        need_scales = need_scales and scales is not None
        rows, hidden = grad_y.shape
        topk = scales.shape[1] if scales is not None else (idx.numel() // rows if rows else 0)
        mode = ctx.drop_pad_mode
        grad_x = grad_scales = grad_bias = None
        if need_x or need_scales:
            if mode in (0, 1) and rows * topk > 0:
                # Forward modes 0/1 pair p = k*R + r; the gradient operator wants token-major i = r*K + k.
                idx = idx.reshape(topk, rows).t().contiguous().view(-1)
            drop_pad = mode % 2 == 1
            experts, capacity = (expanded_x.shape[0], expanded_x.shape[1]) if drop_pad else (0, 0)
            if rows == 0 or (drop_pad and experts * capacity == 0):
                grad_x, grad_scales = _finalize_grad_without_rows(grad_y, expanded_x, bias, scales, expert_idx)
            else:
                grad_x, grad_scales = _finalize_grad(
                    grad_y, idx, expanded_x, scales, expert_idx if scales is not None else None,
                    bias if scales is not None else None, 1 if drop_pad else 0, 0, experts, capacity)
        if need_bias:
            # Not an operator output: grad_bias[e] = sum over pairs with expert e of s * gradY[r], in fp32.
            weight = scales.float() if scales is not None else grad_y.new_ones((rows, topk), dtype=torch.float32)
            contrib = (weight.unsqueeze(-1) * grad_y.float().unsqueeze(1)).reshape(-1, hidden)
            grad_bias = torch.zeros(bias.shape, dtype=torch.float32).index_add_(
                0, expert_idx.reshape(-1).long(), contrib).to(bias.dtype)
        return (grad_x if need_x else None, None, grad_y if need_x1 else None, grad_y if need_x2 else None,
                grad_bias, grad_scales if need_scales else None, None, None)


def _finalize_grad_without_rows(grad_y, expanded_x, bias, scales, expert_idx):
    """Gradients when expandedX has no rows to read (R = 0, or E*C = 0): only scale * bias contributed."""
    grad_x = torch.zeros_like(expanded_x)
    if scales is None:
        return grad_x, None
    if bias is None:
        return grad_x, torch.zeros_like(scales)
    gathered = bias.float()[expert_idx.long()]  # (R, K, H)
    return grad_x, (gathered * grad_y.float().unsqueeze(1)).sum(-1).to(scales.dtype)


def _permute_autograd(tokens, routing_map, probs=None, num_out_tokens=None, drop_and_pad=False):
    return _PermuteFunction.apply(tokens, routing_map, probs, num_out_tokens, drop_and_pad)


def _finalize_autograd(expanded_x, expanded_row_idx, x1=None, x2=None, bias=None, scales=None, expert_idx=None,
                       drop_pad_mode=0):
    return _FinalizeFunction.apply(expanded_x, expanded_row_idx, x1, x2, bias, scales, expert_idx, drop_pad_mode)


# --- torch.ops.moegrad.* ----------------------------------------------------------------------------------

_SCHEMAS = {
    "moe_token_permute_with_routing_map":
        "(Tensor tokens, Tensor routing_map, Tensor? probs=None, int? num_out_tokens=None, "
        "bool drop_and_pad=False) -> (Tensor, Tensor?, Tensor)",
    "moe_finalize_routing_v2":
        "(Tensor expanded_x, Tensor expanded_row_idx, Tensor? x1=None, Tensor? x2=None, Tensor? bias=None, "
        "Tensor? scales=None, Tensor? expert_idx=None, int drop_pad_mode=0) -> Tensor",
    "moe_finalize_routing_v2_grad":
        "(Tensor grad_y, Tensor expanded_row_idx, Tensor? expanded_x=None, Tensor? scales=None, "
        "Tensor? expert_idx=None, Tensor? bias=None, int drop_pad_mode=0, int active_num=0, int expert_num=0, "
        "int expert_capacity=0) -> (Tensor, Tensor?)",
    "moe_token_permute_with_routing_map_grad":
        "(Tensor permuted_token_output_grad, Tensor sorted_indices, int num_experts, int tokens_num, "
        "bool drop_and_pad=False, Tensor? permuted_probs_output_grad=None, Tensor? routing_map=None) "
        "-> (Tensor, Tensor?)",
}
# name -> (CPU kernel, Autograd kernel or None)
_KERNELS = {
    "moe_token_permute_with_routing_map": (_permute, _permute_autograd),
    "moe_finalize_routing_v2": (_finalize, _finalize_autograd),
    "moe_finalize_routing_v2_grad": (_finalize_grad, None),
    "moe_token_permute_with_routing_map_grad": (_permute_grad, None),
}


def _register():
    """Defines torch.ops.moegrad.* with Python kernels; returns (library, None) or (None, the reason)."""
    try:
        lib = torch.library.Library("moegrad", "DEF")
        for name, schema in _SCHEMAS.items():
            lib.define(name + schema)
            cpu, autograd = _KERNELS[name]
            lib.impl(name, cpu, "CPU")
            if autograd is not None:
                lib.impl(name, autograd, "Autograd")
        return lib, None
    except (RuntimeError, AttributeError, ValueError) as e:  # e.g. the namespace is taken already
        return None, e


_LIBRARY, REGISTRATION_ERROR = _register()
# The public functions go through the dispatcher when registration worked, otherwise straight to Python.
_ENTRY = {name: (getattr(torch.ops.moegrad, name) if _LIBRARY is not None else (auto or cpu))
          for name, (cpu, auto) in _KERNELS.items()}


# --- public API -------------------------------------------------------------------------------------------

def moe_token_permute_with_routing_map(tokens, routing_map, probs=None, num_out_tokens=None, drop_and_pad=False):
    """Dispatch: copies the rows of tokens (T, H) into expert-major order as routed by routing_map (T, E).

    Returns (permuted_tokens (N, H), permuted_probs (N) or None, sorted_indices (N) INT32). Dropless:
    num_out_tokens defaults to the routed entries, every token routed to the same K experts, N = T*K.
    drop_and_pad: num_out_tokens is required, capacity C = num_out_tokens / E, N = E*C. Differentiable in
    tokens and probs (MoeTokenPermuteWithRoutingMapGrad).
    """
    return _ENTRY["moe_token_permute_with_routing_map"](tokens, routing_map, probs, num_out_tokens,
                                                          bool(drop_and_pad))


def moe_finalize_routing_v2(expanded_x, expanded_row_idx, x1=None, x2=None, bias=None, scales=None,
                            expert_idx=None, drop_pad_mode=0):
    """Combine: out[r] = x1[r] + x2[r] + sum_k scales[r, k] * (expanded_x[row of pair (r, k)] + bias[expert]).

    Pair order p = k*R + r in modes 0/1, r*K + k in modes 2/3; modes 1/3 read expanded_x as (E, C, H) and
    skip index -1. R comes from scales, x1, x2 or expert_idx (with none of them K = 1). Differentiable in
    expanded_x, scales, bias, x1 and x2 (MoeFinalizeRoutingV2Grad; the bias gradient with torch ops).
    """
    return _ENTRY["moe_finalize_routing_v2"](expanded_x, expanded_row_idx, x1, x2, bias, scales, expert_idx,
                                               int(drop_pad_mode))


def moe_finalize_routing_v2_grad(grad_y, expanded_row_idx, expanded_x=None, scales=None, expert_idx=None,
                                 bias=None, drop_pad_mode=0, active_num=0, expert_num=0, expert_capacity=0):
    """The operator MoeFinalizeRoutingV2Grad (token-major pairs i = r*K + k; mode 0 dropless, 1 drop/pad).

    Returns (grad_expanded_x, grad_scales or None); grad_scales is computed when scales is given.
    """
    return _ENTRY["moe_finalize_routing_v2_grad"](grad_y, expanded_row_idx, expanded_x, scales, expert_idx, bias,
                                                    int(drop_pad_mode), int(active_num), int(expert_num),
                                                    int(expert_capacity))


def moe_token_permute_with_routing_map_grad(permuted_token_output_grad, sorted_indices, num_experts, tokens_num,
                                            drop_and_pad=False, permuted_probs_output_grad=None, routing_map=None):
    """The operator MoeTokenPermuteWithRoutingMapGrad.

    Returns (tokens_grad (T, H), probs_grad (T, E) or None); probs_grad is computed when
    permuted_probs_output_grad is given (dropless mode then needs routing_map).
    """
    return _ENTRY["moe_token_permute_with_routing_map_grad"](permuted_token_output_grad, sorted_indices,
                                                               int(num_experts), int(tokens_num),
                                                               bool(drop_and_pad), permuted_probs_output_grad,
                                                               routing_map)
