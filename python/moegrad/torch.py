"""PyTorch functions of moegrad: MoE dispatch (permute with a routing map) and combine (finalize routing),
differentiable through moegrad's exact gradient operators (the V2 dispatch, init routing, too), plus the
gradient operators themselves.

Tensors are handed to the library in place (data pointer, sizes and strides: no copy, any strides); only the
outputs are allocated here, exactly as the library's output query (phase one without the outputs) reports
them. Every rule is the library's: a violation raises ValueError with its one-line message, before anything is
allocated. A non-tensor where a tensor goes, or a non-integer attribute, raises TypeError. The functions are
also registered as torch.ops.moegrad.<name> (see docs/python.md).
"""
import math
import operator

import torch
from torch._subclasses.fake_tensor import FakeTensor as _FakeTensor

from . import _C

__all__ = [
    "moe_token_permute_with_routing_map",
    "moe_finalize_routing_v2",
    "moe_finalize_routing_v2_grad",
    "moe_token_permute_with_routing_map_grad",
    "moe_init_routing_v2_grad",
    "moe_init_routing_v2",
    "moe_token_unpermute_with_routing_map",
    "moe_token_unpermute_with_routing_map_grad",
]

_DTYPE_NAMES = {
    torch.float32: "FLOAT32", torch.float16: "FLOAT16", torch.bfloat16: "BFLOAT16", torch.float64: "DOUBLE",
    torch.int8: "INT8", torch.uint8: "UINT8", torch.int16: "INT16", torch.int32: "INT32",
    torch.int64: "INT64", torch.bool: "BOOL",
}
_DTYPE_CODES = {t: _C.DTYPES[name] for t, name in _DTYPE_NAMES.items()}
_DTYPES = {code: t for t, code in _DTYPE_CODES.items()}
_INT64_MIN, _INT64_MAX = -2**63, 2**63 - 1
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


# --- arguments ------------------------------------------------------------------------------------------------
# Messages start with the operator's CANN name and name arguments as the library does (_C.OPS: gradY for
# grad_y), like the library's own.

def _op(key):
    return _C.INFO[key]["name"]


# Per operator, what the hot path looks up on every call: its names as sets.
_REQUIRED = {key: frozenset(info["required"]) for key, info in _C.INFO.items()}
_FLAGS = {key: frozenset(info["flags"]) for key, info in _C.INFO.items()}
_INPUTS = {key: frozenset(info["inputs"]) for key, info in _C.INFO.items()}
_ARRAYS = {key: tuple(info["arrays"]) for key, info in _C.INFO.items()}


def _type_name(value):
    t = type(value)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _tensor(key, name, t, compiling=None):
    """t, checked as tensor argument `name` of operator `key`: None (where optional) or a strided CPU tensor of a
    dtype the library knows; what a TensorView can express is the library's to check. `compiling`: whether
    torch.compile traces the call, when the caller knows it already."""
    if t is None:
        if name in _REQUIRED[key]:
            raise ValueError(f"{_op(key)}: {name} is required but is null")  # the library's NULLPTR message
        return None
    if not isinstance(t, torch.Tensor):
        what = "a torch.Tensor" if name in _REQUIRED[key] else "a torch.Tensor or None"
        raise TypeError(f"{_op(key)}: {name} must be {what}, not {_type_name(t)}")
    if t.device.type != "cpu" or t.layout != torch.strided:
        raise ValueError(f"{_op(key)}: {name} is a {t.layout} tensor on {t.device}; moegrad takes strided CPU "
                         "tensors")
    if t.dtype not in _DTYPE_CODES:
        raise ValueError(f"{_op(key)}: {name} has dtype {t.dtype}, which moegrad does not know")
    if compiling is None:
        compiling = _compiling()
    if not compiling and (t.is_neg() or t.is_conj()):  # a traced graph has no lazy views to resolve
        raise ValueError(f"{_op(key)}: {name} is a lazily negated/conjugated view; call resolve_neg() first")
    return t


def _attr(key, name, value, compiling=None):
    """value as attribute `name` of operator `key`: an int64 (anything with __index__ but a bool), or for a
    boolean attribute a bool (or 0 / 1). `compiling` as for _tensor."""
    flag = name in _FLAGS[key]
    if flag and isinstance(value, bool):
        return value
    if type(value) is int and not flag and _INT64_MIN <= value <= _INT64_MAX:  # the common case, as below
        return value
    if (_compiling() if compiling is None else compiling) or isinstance(value, torch.SymInt):
        # Traced (torch.compile): a size may be symbolic; the operator's fake kernel checks its example value.
        return value
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{_op(key)}: {name} must be {'a bool' if flag else 'an int'}, not {_type_name(value)}")
    try:
        number = operator.index(value)
    except TypeError:  # e.g. a float tensor, whose type has __index__
        raise TypeError(f"{_op(key)}: {name} must be {'a bool' if flag else 'an int'}, not {_type_name(value)} "
                        f"of dtype {getattr(value, 'dtype', '?')}") from None
    if flag:
        if number not in (0, 1):
            raise ValueError(f"{_op(key)}: {name} = {number} must be a bool (0 or 1)")
        return bool(number)
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise ValueError(f"{_op(key)}: {name} = {number} is outside the int64 range [-2**63, 2**63)")
    return number


def _check(key, inputs, attrs=(), may_be_none=()):
    """Checks `inputs` and converts `attrs` (the operator's inputs and attributes in their _C.OPS order, as
    _fast takes them; None stays None for the attributes named in may_be_none) as _tensor and _attr do: what
    must hold before torch.ops' schema parsing sees them. Returns the converted attributes, in order."""
    tensor_names, attr_names = _C.OPS[key]
    compiling = _compiling()
    for name, t in zip(tensor_names, inputs):
        _tensor(key, name, t, compiling)
    return tuple(None if v is None and n in may_be_none else _attr(key, n, v, compiling)
                 for n, v in zip(attr_names, attrs))


# A fake tensor (torch.compile, torch.library.opcheck, FakeTensorMode) has metadata and no memory: phase one's
# output query reads only sizes and strides, so it gets this aligned stand-in address.
_FAKE_DATA = 4096


def _is_fake(t):
    return isinstance(t, _FakeTensor) or (isinstance(t, torch.Tensor) and t.is_meta)


def _hint(v):
    """A size or stride as an int: a symbolic one (torch.SymInt) by its example value, without a guard."""
    if isinstance(v, torch.SymInt):
        hint = v.node.hint
        if hint is None:
            raise ValueError(f"moegrad: a size without an example value ({v}) cannot be checked")
        return int(hint)
    return int(v)


def _hints(values):
    return None if values is None else [_hint(v) for v in values]


def _symbolic(t):
    return isinstance(t, torch.Tensor) and any(isinstance(v, torch.SymInt) for v in (*t.shape, *t.stride()))


def _desc(key, name, t, fake=False, checked=False, compiling=None):
    """(data_ptr, dtype code, sizes, strides) of tensor argument `name` (checked here unless `checked`; compiling
    as for _tensor), for the extension, with the stand-in address when `fake`; None stays None."""
    if (t if checked else _tensor(key, name, t, compiling)) is None:
        return None
    if fake:
        return (_FAKE_DATA, _DTYPE_CODES[t.dtype], tuple(_hint(v) for v in t.shape),
                tuple(_hint(v) for v in t.stride()))
    return (t.data_ptr(), _DTYPE_CODES[t.dtype], t.shape, t.stride())  # sequences of ints, as the extension takes


def _empty(key, name, spec):
    """The output `name` as the output query reports it: None (not written) or (dtype code, sizes)."""
    if spec is None:
        return None
    code, sizes = spec
    dtype = _DTYPES[code]
    try:
        return torch.empty(sizes, dtype=dtype)
    except (RuntimeError, MemoryError):  # torch's allocator: a valid shape with more bytes than this machine has
        nbytes = math.prod(sizes) * torch.empty((), dtype=dtype).element_size()
        raise MemoryError(f"{_op(key)}: cannot allocate {name} of shape {tuple(sizes)} and dtype "
                          f"{_DTYPE_NAMES[dtype]} ({nbytes} bytes)") from None


def _fake_outputs(key, specs, tensors, symbolic):
    """The outputs of a call on fake tensors: empty fake tensors of the query's dtypes and sizes (in the inputs'
    symbols where those are symbolic)."""
    sizes = {n: spec[1] for n, spec in specs.items() if spec is not None}
    if symbolic is not None and any(_symbolic(t) for t in tensors.values()):
        exprs = symbolic()
        for n, want in sizes.items():
            got = tuple(_hint(v) for v in exprs[n])
            if got != tuple(want):
                raise RuntimeError(f"{_op(key)}: fake kernel: {n} would have sizes {got} but the library says "
                                   f"{tuple(want)}")
            sizes[n] = tuple(exprs[n])
    return {n: (None if spec is None else torch.empty(sizes[n], dtype=_DTYPES[spec[0]]))
            for n, spec in specs.items()}


# --- the operators on plain tensors (the CPU kernels of torch.ops.moegrad.*, and on fake tensors their fake
# kernels: _run answers those from the output query) ------------------------------------------------------

def _int_array(key, name, value):
    """value as integer-array attribute `name` of operator `key`: None, or a list of int64 (a sequence of ints,
    e.g. a tuple or torch.Size)."""
    if value is None:
        return None
    if _compiling():  # traced: sizes may be symbolic; the fake kernel checks their example values
        return list(value)
    if isinstance(value, (str, bytes, torch.Tensor)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{_op(key)}: {name} must be a sequence of ints or None, not {_type_name(value)}")
    values = []
    for v in value:
        if isinstance(v, bool) or not hasattr(type(v), "__index__"):
            raise TypeError(f"{_op(key)}: {name} must be a sequence of ints, not one holding {_type_name(v)}")
        number = _hint(v) if isinstance(v, torch.SymInt) else operator.index(v)
        if not _INT64_MIN <= number <= _INT64_MAX:
            raise ValueError(f"{_op(key)}: {name} holds {number}, outside the int64 range [-2**63, 2**63)")
        values.append(number)
    return values


def _run(key, tensors, attrs, arrays=None, symbolic=None):
    """Runs _C.<key> with `tensors` (inputs), `attrs` and `arrays` (integer arrays) by the names of the
    operator's description (_C.OPS[key], _C.INFO[key]["arrays"]: the library's OpInfo), absent tensors and
    arrays None: phase one's output query first (every rule; ValueError with the library's message), then the
    outputs it reports allocated, then the call. Returns {output name: tensor, or None where the call writes
    none}.

    On fake tensors (the fake kernel of torch.ops.moegrad.*) nothing runs: the query alone gives the outputs,
    with the same ValueError as a real call. Where an input's sizes are symbolic, `symbolic()` gives the
    outputs' sizes in the inputs' symbols ({name: sizes}), checked against the query's on the example values."""
    tensor_names, attr_names = _C.OPS[key]
    array_names, inputs = _ARRAYS[key], _INPUTS[key]
    arrays = arrays or {}
    unknown = ((tensors.keys() - inputs) | (attrs.keys() ^ set(attr_names)) | (arrays.keys() - set(array_names)))
    if unknown:
        raise TypeError(f"moegrad: {key}: unknown or missing argument {sorted(unknown)[0]}")
    # Real tensors of the regular kind (see _fast): one round trip; None where it declines (fake tensors, symbolic
    # sizes, anything irregular), which the steps below then handle or word.
    out = _CALLS[key](tuple(tensors.get(n) for n in _INPUT_NAMES[key]), tuple(attrs[n] for n in attr_names),
                      tuple(arrays.get(n) for n in array_names))
    if out is not None:
        return dict(zip(_OUTPUT_NAMES[key], out))
    compiling = _compiling()
    fake = any(_is_fake(t) for t in tensors.values())
    descs = [_desc(key, n, tensors.get(n), fake, compiling=compiling) if n in inputs else None for n in tensor_names]
    values = [_hint(_attr(key, n, attrs[n], compiling)) for n in attr_names]
    # The integer arrays are a third argument of the operators that take any.
    lists = ([_hints(_int_array(key, n, arrays.get(n))) for n in array_names],) if array_names else ()
    specs = getattr(_C, _QUERY_NAMES[key])(descs, values, *lists)
    if fake:
        return _fake_outputs(key, specs, tensors, symbolic)
    outputs = {n: _empty(key, n, spec) for n, spec in specs.items()}
    descs = [_desc(key, n, outputs[n], checked=True) if n in outputs else d for n, d in zip(tensor_names, descs)]
    getattr(_C, key)(descs, values, *lists)
    return outputs


_QUERY_NAMES = {key: key + "_outputs" for key in _C.OPS}
_INPUT_NAMES = {key: tuple(info["inputs"]) for key, info in _C.INFO.items()}
_OUTPUT_NAMES = {key: tuple(info["outputs"]) for key, info in _C.INFO.items()}


def _permute(tokens, routing_map, probs=None, num_out_tokens=None, drop_and_pad=False):
    key = "token_permute_with_routing_map"
    tensors = dict(tokens=tokens, routingMap=routing_map, probs=probs)
    if num_out_tokens is None:
        _check(key, (tokens, routing_map, probs))  # before count_nonzero reads the map (_run checks every other call)
        if drop_and_pad:
            raise ValueError(f"{_op(key)}: num_out_tokens is required with drop_and_pad")
        if _is_fake(routing_map):
            # Data-dependent: checked with no rows, then a size only the data will tell.
            _run(key, tensors, dict(numOutTokens=0, dropAndPad=False))
            n = torch.library.get_ctx().new_dynamic_size()
            h = tokens.shape[1]
            return (torch.empty((n, h), dtype=tokens.dtype), None if probs is None else
                    torch.empty((n,), dtype=probs.dtype), torch.empty((n,), dtype=torch.int32))
        num_out_tokens = int(torch.count_nonzero(routing_map))  # dropless: every routed entry is an output row
    n = num_out_tokens
    out = _run(key, tensors, dict(numOutTokens=num_out_tokens, dropAndPad=drop_and_pad),
               symbolic=lambda: dict(permuteTokensOut=(n, tokens.shape[1]), permuteProbsOut=(n,),
                                     sortedIndicesOut=(n,)))
    return out["permuteTokensOut"], out["permuteProbsOut"], out["sortedIndicesOut"]


def _permute_grad(permuted_token_output_grad, sorted_indices, num_experts, tokens_num, drop_and_pad=False,
                  permuted_probs_output_grad=None, routing_map=None):
    out = _run("token_permute_with_routing_map_grad",
               dict(permutedTokenOutputGrad=permuted_token_output_grad,
                    permutedProbsOutputGrad=permuted_probs_output_grad, sortedIndices=sorted_indices,
                    routingMap=routing_map),
               dict(numExperts=num_experts, tokensNum=tokens_num, dropAndPad=drop_and_pad),
               symbolic=lambda: dict(tokensGradOut=(tokens_num, permuted_token_output_grad.shape[1]),
                                     probsGradOut=(tokens_num, num_experts)))
    return out["tokensGradOut"], out["probsGradOut"]


def _finalize(expanded_x, expanded_row_idx, x1=None, x2=None, bias=None, scales=None, expert_idx=None,
              drop_pad_mode=0):
    return _run("finalize_routing_v2",
                dict(expandedX=expanded_x, expandedRowIdx=expanded_row_idx, x1=x1, x2=x2, bias=bias, scales=scales,
                     expertIdx=expert_idx),
                dict(dropPadMode=drop_pad_mode), symbolic=lambda: dict(out=(_finalize_rows(
                    expanded_row_idx, x1, x2, scales, expert_idx), expanded_x.shape[-1])))["out"]


def _finalize_rows(expanded_row_idx, x1, x2, scales, expert_idx):
    """MoeFinalizeRoutingV2's R: the rows of the first of scales, x1, x2, expert_idx given, else K = 1."""
    for t in (scales, x1, x2, expert_idx):
        if t is not None and t.dim() >= 1:
            return t.shape[0]
    return expanded_row_idx.shape[0]


def _finalize_grad(grad_y, expanded_row_idx, expanded_x=None, scales=None, expert_idx=None, bias=None,
                   drop_pad_mode=0, active_num=0, expert_num=0, expert_capacity=0):
    out = _run("finalize_routing_v2_grad",
               dict(gradY=grad_y, expandedRowIdx=expanded_row_idx, expandedX=expanded_x, scales=scales,
                    expertIdx=expert_idx, bias=bias),
               dict(dropPadMode=drop_pad_mode, activeNum=active_num, expertNum=expert_num,
                    expertCapacity=expert_capacity), symbolic=lambda: _finalize_grad_sizes(
                   grad_y, expanded_row_idx, scales, drop_pad_mode, active_num, expert_num, expert_capacity))
    return out["gradExpandedXOut"], out["gradScalesOut"]


def _finalize_grad_sizes(grad_y, expanded_row_idx, scales, mode, active_num, expert_num, expert_capacity):
    h, pairs = grad_y.shape[1], expanded_row_idx.shape[0]
    rows = active_num if mode == 0 and 0 < active_num < pairs else pairs
    x = (expert_num, expert_capacity, h) if mode == 1 else (rows, h)
    return dict(gradExpandedXOut=x, gradScalesOut=tuple(scales.shape) if scales is not None else None)


def _init_routing_grad(grad_expanded_x, expanded_row_idx, top_k, drop_pad_mode=0, active_num=0):
    return _run("init_routing_v2_grad", dict(gradExpandedX=grad_expanded_x, expandedRowIdx=expanded_row_idx),
                dict(topK=top_k, dropPadMode=drop_pad_mode, activeNum=active_num),
                symbolic=lambda: dict(out=(expanded_row_idx.shape[0] // top_k, grad_expanded_x.shape[-1])))["out"]


def _init_routing(x, expert_idx, active_num=0, expert_capacity=0, expert_num=0, drop_pad_mode=0,
                  expert_tokens_count_or_cumsum_flag=0, expert_tokens_before_capacity_flag=False):
    out = _run("init_routing_v2", dict(x=x, expertIdx=expert_idx),
               dict(activeNum=active_num, expertCapacity=expert_capacity, expertNum=expert_num,
                    dropPadMode=drop_pad_mode, expertTokensCountOrCumsumFlag=expert_tokens_count_or_cumsum_flag,
                    expertTokensBeforeCapacityFlag=expert_tokens_before_capacity_flag),
               symbolic=lambda: _init_routing_sizes(x, expert_idx, active_num, expert_capacity, expert_num,
                                                    drop_pad_mode))
    return (out["expandedXOut"], out["expandedRowIdxOut"], out["expertTokensCountOrCumsumOut"],
            out["expertTokensBeforeCapacityOut"])


def _init_routing_sizes(x, expert_idx, active_num, expert_capacity, expert_num, mode):
    h, pairs = x.shape[1], x.shape[0] * expert_idx.shape[1]
    rows = active_num if 0 < active_num < pairs else pairs
    return dict(expandedXOut=(expert_num, expert_capacity, h) if mode == 1 else (rows, h),
                expandedRowIdxOut=(pairs,), expertTokensCountOrCumsumOut=(expert_num,),
                expertTokensBeforeCapacityOut=(expert_num,))


def _unpermute(permuted_tokens, sorted_indices, routing_map=None, probs=None, padded_mode=False, restore_shape=None):
    out = _run("token_unpermute_with_routing_map",
               dict(permutedTokens=permuted_tokens, sortedIndices=sorted_indices, routingMapOptional=routing_map,
                    probsOptional=probs),
               dict(paddedMode=padded_mode), dict(restoreShapeOptional=restore_shape),
               symbolic=lambda: _unpermute_sizes(permuted_tokens, sorted_indices, routing_map, probs, restore_shape))
    return out["unpermutedTokens"], out["outIndex"], out["permuteTokenId"], out["permuteProbs"]


def _unpermute_sizes(permuted_tokens, sorted_indices, routing_map, probs, restore_shape):
    t_from = probs if probs is not None else routing_map
    tokens = t_from.shape[0] if t_from is not None else restore_shape[0]
    n = sorted_indices.shape[0]
    return dict(unpermutedTokens=(tokens, permuted_tokens.shape[1]), outIndex=(n,), permuteTokenId=(n,),
                permuteProbs=(n,))


def _unpermute_grad(unpermuted_tokens_grad, out_index, permute_token_id, routing_map=None, permuted_tokens=None,
                    probs=None, drop_and_pad=False, restore_shape=None):
    out = _run("token_unpermute_with_routing_map_grad",
               dict(unpermutedTokensGrad=unpermuted_tokens_grad, outIndex=out_index, permuteTokenId=permute_token_id,
                    routingMapOptional=routing_map, permutedTokensOptional=permuted_tokens, probsOptional=probs),
               dict(dropAndPad=drop_and_pad), dict(restoreShapeOptional=restore_shape),
               symbolic=lambda: dict(
                   permutedTokensGradOut=(out_index.shape[0], unpermuted_tokens_grad.shape[1]),
                   probsGradOutOptional=(unpermuted_tokens_grad.shape[0], probs.shape[1]) if probs is not None
                   else None))
    return out["permutedTokensGradOut"], out["probsGradOutOptional"]


# --- not differentiable -----------------------------------------------------------------------------------

class _NotDifferentiable(torch.autograd.Function):
    """Hands `results` on unchanged; a backward through any of them raises RuntimeError(message)."""

    @staticmethod
    def forward(ctx, message, results, *depends_on):
        ctx.message = message
        return results

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(ctx.message)


def _not_differentiable(message, results, depends_on):
    """`results` (a tuple, None entries allowed), computed without autograd from `depends_on`: as they are when
    none of those requires grad (or grad mode is off), else behind a node whose backward raises `message`, so
    that differentiating them fails with one clear line instead of silently treating them as constants."""
    needing = [t for t in depends_on if isinstance(t, torch.Tensor) and t.requires_grad]
    if not needing or not torch.is_grad_enabled():
        return results
    return _NotDifferentiable.apply(message, tuple(results), *needing)


def _double_backward_message(key, function):
    return f"{_op(key)}: the gradients of {function} are not differentiable (double backward is not supported)"


# --- autograd ---------------------------------------------------------------------------------------------
# The autograd kernels call the operators below the autograd key (the CPU kernel on real tensors, the fake one
# under torch.compile's tracing), so that they trace as the operators themselves.

def _needs_grad(*tensors):
    """Whether autograd records a call on these inputs: without that the forwards skip their
    torch.autograd.Function (and its cost) and run the operator as it is."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _below(name, *args):
    if _LIBRARY is None or _plain_eager(args):  # straight to the Python kernel (see _plain_eager)
        return _KERNELS[name][0](*args)
    with torch._C._AutoDispatchBelowAutograd():
        return getattr(torch.ops.moegrad, name)(*args)


class _PermuteFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tokens, routing_map, probs, num_out_tokens, drop_and_pad):
        permuted, permuted_probs, sorted_indices = _below("moe_token_permute_with_routing_map", tokens, routing_map,
                                                          probs, num_out_tokens, drop_and_pad)
        ctx.mark_non_differentiable(sorted_indices)
        ctx.save_for_backward(sorted_indices, routing_map if probs is not None else None)
        ctx.shape = (tokens.shape[0], routing_map.shape[1], tokens.shape[1])
        # Each gradient in its own input's dtype: bf16 tokens with fp32 probs get fp32 probability gradients.
        ctx.dtypes = (tokens.dtype, probs.dtype if probs is not None else None)
        ctx.drop_and_pad = bool(drop_and_pad)
        ctx.has_probs = probs is not None
        return permuted, permuted_probs, sorted_indices

    @staticmethod
    def backward(ctx, grad_permuted, grad_permuted_probs, _grad_sorted_indices):
        sorted_indices, routing_map = ctx.saved_tensors
        tokens_num, num_experts, hidden = ctx.shape
        tokens_dtype, probs_dtype = ctx.dtypes
        want_probs = ctx.has_probs and ctx.needs_input_grad[2]
        with torch.no_grad():
            if tokens_num == 0 or num_experts == 0:  # nothing was routed; the operator needs T, E > 0
                tokens_grad = torch.zeros((tokens_num, hidden), dtype=tokens_dtype)
                probs_grad = torch.zeros((tokens_num, num_experts), dtype=probs_dtype) if want_probs else None
            else:
                tokens_grad, probs_grad = _below(
                    "moe_token_permute_with_routing_map_grad", grad_permuted, sorted_indices, num_experts, tokens_num, ctx.drop_and_pad,
                    grad_permuted_probs if want_probs else None, routing_map if want_probs else None)
        tokens_grad, probs_grad = _not_differentiable(
            _double_backward_message("token_permute_with_routing_map_grad", "moe_token_permute_with_routing_map"),
            (tokens_grad, probs_grad), (grad_permuted, grad_permuted_probs))
        return (tokens_grad if ctx.needs_input_grad[0] else None), None, probs_grad, None, None


class _FinalizeFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, expanded_x, expanded_row_idx, x1, x2, bias, scales, expert_idx, drop_pad_mode):
        out = _below("moe_finalize_routing_v2", expanded_x, expanded_row_idx, x1, x2, bias, scales, expert_idx,
                     drop_pad_mode)
        ctx.save_for_backward(expanded_x, expanded_row_idx, bias, scales, expert_idx)
        ctx.drop_pad_mode = int(drop_pad_mode)
        return out

    @staticmethod
    def backward(ctx, grad_y):
        expanded_x, idx, bias, scales, expert_idx = ctx.saved_tensors
        need_x, _, need_x1, need_x2, need_bias, need_scales = ctx.needs_input_grad[:6]
        need_scales = need_scales and scales is not None
        with torch.no_grad():
            grad_x, grad_scales, grad_bias = _finalize_backward(grad_y, expanded_x, idx, bias, scales, expert_idx,
                                                                ctx.drop_pad_mode, need_x, need_bias, need_scales)
        grad_x, grad_scales, grad_bias = _not_differentiable(
            _double_backward_message("finalize_routing_v2_grad", "moe_finalize_routing_v2"),
            (grad_x, grad_scales, grad_bias), (grad_y, expanded_x, bias, scales))
        # x1 and x2 get grad_y itself, which stays as differentiable as it is.
        return (grad_x if need_x else None, None, grad_y if need_x1 else None, grad_y if need_x2 else None,
                grad_bias, grad_scales if need_scales else None, None, None)


def _finalize_backward(grad_y, expanded_x, idx, bias, scales, expert_idx, mode, need_x, need_bias, need_scales):
    """(grad_x, grad_scales, grad_bias) of the combine, each None where not needed, each in its input's dtype
    (scales may have a dtype of their own: the weight group's)."""
    rows, hidden = grad_y.shape
    topk = scales.shape[1] if scales is not None else (idx.numel() // rows if rows else 0)
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
            grad_x, grad_scales = _below(
                "moe_finalize_routing_v2_grad", grad_y, idx, expanded_x, scales, expert_idx if scales is not None else None,
                bias if scales is not None else None, 1 if drop_pad else 0, 0, experts, capacity)
    if need_bias:
        # Not an operator output: grad_bias[e] = sum over pairs with expert e of s * gradY[r], in fp32.
        weight = scales.float() if scales is not None else grad_y.new_ones((rows, topk), dtype=torch.float32)
        contrib = (weight.unsqueeze(-1) * grad_y.float().unsqueeze(1)).reshape(-1, hidden)
        grad_bias = torch.zeros(bias.shape, dtype=torch.float32).index_add_(
            0, expert_idx.reshape(-1).long(), contrib).to(bias.dtype)
    return grad_x, grad_scales if need_scales else None, grad_bias


def _finalize_grad_without_rows(grad_y, expanded_x, bias, scales, expert_idx):
    """Gradients when expandedX has no rows to read (R = 0, or E*C = 0): only scale * bias contributed. fp32
    arithmetic, each result rounded once to its own input's dtype, as the operator does."""
    grad_x = torch.zeros_like(expanded_x)
    if scales is None:
        return grad_x, None
    if bias is None:
        return grad_x, torch.zeros_like(scales)
    gathered = bias.float()[expert_idx.long()]  # (R, K, H)
    return grad_x, (gathered * grad_y.float().unsqueeze(1)).sum(-1).to(scales.dtype)


def _permute_autograd(tokens, routing_map, probs=None, num_out_tokens=None, drop_and_pad=False):
    if not _needs_grad(tokens, probs):
        return _below("moe_token_permute_with_routing_map", tokens, routing_map, probs, num_out_tokens, drop_and_pad)
    return _PermuteFunction.apply(tokens, routing_map, probs, num_out_tokens, drop_and_pad)


def _finalize_autograd(expanded_x, expanded_row_idx, x1=None, x2=None, bias=None, scales=None, expert_idx=None,
                       drop_pad_mode=0):
    if not _needs_grad(expanded_x, x1, x2, bias, scales):
        return _below("moe_finalize_routing_v2", expanded_x, expanded_row_idx, x1, x2, bias, scales, expert_idx,
                      drop_pad_mode)
    return _FinalizeFunction.apply(expanded_x, expanded_row_idx, x1, x2, bias, scales, expert_idx, drop_pad_mode)


def _grad_op_outputs_message(key, function):
    return f"{_op(key)}: the outputs of {function} are not differentiable"


def _finalize_grad_autograd(grad_y, expanded_row_idx, expanded_x=None, scales=None, expert_idx=None, bias=None,
                            drop_pad_mode=0, active_num=0, expert_num=0, expert_capacity=0):
    results = _below("moe_finalize_routing_v2_grad", grad_y, expanded_row_idx, expanded_x, scales, expert_idx, bias,
                     drop_pad_mode, active_num, expert_num, expert_capacity)
    return _not_differentiable(_grad_op_outputs_message("finalize_routing_v2_grad", "moe_finalize_routing_v2_grad"),
                               results, (grad_y, expanded_x, scales, bias))


class _InitRoutingFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, expert_idx, active_num, expert_capacity, expert_num, drop_pad_mode, flag, before_flag):
        expanded_x, row_idx, counts, before = _below("moe_init_routing_v2", x, expert_idx, active_num,
                                                     expert_capacity, expert_num, drop_pad_mode, flag, before_flag)
        ctx.mark_non_differentiable(*[t for t in (row_idx, counts, before) if t is not None])
        ctx.save_for_backward(row_idx)
        ctx.shape = (x.shape[0], expert_idx.shape[1], x.shape[1])
        ctx.dtype = x.dtype
        ctx.attrs = (int(drop_pad_mode), int(active_num))
        return expanded_x, row_idx, counts, before

    @staticmethod
    def backward(ctx, grad_expanded_x, *_grad_indices):
        (row_idx,) = ctx.saved_tensors
        tokens, topk, hidden = ctx.shape
        mode, active_num = ctx.attrs
        with torch.no_grad():
            if grad_expanded_x is None or topk == 0:  # no row of x was copied (K = 0): the gradient is 0
                grad_x = torch.zeros((tokens, hidden), dtype=ctx.dtype)
            else:
                grad_x = _below("moe_init_routing_v2_grad", grad_expanded_x, row_idx, topk, mode, active_num)
        (grad_x,) = _not_differentiable(_double_backward_message("init_routing_v2_grad", "moe_init_routing_v2"),
                                        (grad_x,), (grad_expanded_x,))
        return grad_x, None, None, None, None, None, None, None


def _init_routing_autograd(x, expert_idx, active_num=0, expert_capacity=0, expert_num=0, drop_pad_mode=0,
                           expert_tokens_count_or_cumsum_flag=0, expert_tokens_before_capacity_flag=False):
    if not _needs_grad(x):
        return _below("moe_init_routing_v2", x, expert_idx, active_num, expert_capacity, expert_num, drop_pad_mode,
                      expert_tokens_count_or_cumsum_flag, expert_tokens_before_capacity_flag)
    return _InitRoutingFunction.apply(x, expert_idx, active_num, expert_capacity, expert_num, drop_pad_mode,
                                      expert_tokens_count_or_cumsum_flag, expert_tokens_before_capacity_flag)


def _permute_grad_autograd(permuted_token_output_grad, sorted_indices, num_experts, tokens_num, drop_and_pad=False,
                           permuted_probs_output_grad=None, routing_map=None):
    results = _below("moe_token_permute_with_routing_map_grad", permuted_token_output_grad, sorted_indices,
                     num_experts, tokens_num, drop_and_pad, permuted_probs_output_grad, routing_map)
    return _not_differentiable(
        _grad_op_outputs_message("token_permute_with_routing_map_grad", "moe_token_permute_with_routing_map_grad"),
        results, (permuted_token_output_grad, permuted_probs_output_grad))


def _init_routing_grad_autograd(grad_expanded_x, expanded_row_idx, top_k, drop_pad_mode=0, active_num=0):
    out = _below("moe_init_routing_v2_grad", grad_expanded_x, expanded_row_idx, top_k, drop_pad_mode, active_num)
    return _not_differentiable(_grad_op_outputs_message("init_routing_v2_grad", "moe_init_routing_v2_grad"), (out,),
                               (grad_expanded_x,))[0]


class _UnpermuteFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, permuted_tokens, sorted_indices, routing_map, probs, padded_mode, restore_shape):
        out, out_index, token_id, permute_probs = _below("moe_token_unpermute_with_routing_map", permuted_tokens,
                                                         sorted_indices, routing_map, probs, padded_mode,
                                                         restore_shape)
        ctx.mark_non_differentiable(*[t for t in (out_index, token_id, permute_probs) if t is not None])
        ctx.has_probs = probs is not None
        ctx.save_for_backward(out_index, token_id, routing_map, permuted_tokens if ctx.has_probs else None, probs)
        ctx.padded_mode = bool(padded_mode)
        ctx.restore_shape = restore_shape
        return out, out_index, token_id, permute_probs

    @staticmethod
    def backward(ctx, grad_out, *_grad_indices):
        out_index, token_id, routing_map, permuted_tokens, probs = ctx.saved_tensors
        want_probs = ctx.has_probs and ctx.needs_input_grad[3]
        with torch.no_grad():
            if want_probs and routing_map is None:  # pad mode: the map is shape-checked, never read
                routing_map = torch.zeros(probs.shape, dtype=torch.bool)
            tokens_grad, probs_grad = _below(
                "moe_token_unpermute_with_routing_map_grad", grad_out, out_index, token_id, routing_map if want_probs else None,
                permuted_tokens if want_probs else None, probs if want_probs else None, ctx.padded_mode,
                ctx.restore_shape)
        tokens_grad, probs_grad = _not_differentiable(
            _double_backward_message("token_unpermute_with_routing_map_grad", "moe_token_unpermute_with_routing_map"),
            (tokens_grad, probs_grad), (grad_out, permuted_tokens, probs))
        return (tokens_grad if ctx.needs_input_grad[0] else None), None, None, probs_grad, None, None


def _unpermute_autograd(permuted_tokens, sorted_indices, routing_map=None, probs=None, padded_mode=False,
                       restore_shape=None):
    if not _needs_grad(permuted_tokens, probs):
        return _below("moe_token_unpermute_with_routing_map", permuted_tokens, sorted_indices, routing_map, probs,
                      padded_mode, restore_shape)
    return _UnpermuteFunction.apply(permuted_tokens, sorted_indices, routing_map, probs, padded_mode, restore_shape)


def _unpermute_grad_autograd(unpermuted_tokens_grad, out_index, permute_token_id, routing_map=None,
                             permuted_tokens=None, probs=None, drop_and_pad=False, restore_shape=None):
    results = _below("moe_token_unpermute_with_routing_map_grad", unpermuted_tokens_grad, out_index,
                     permute_token_id, routing_map, permuted_tokens, probs, drop_and_pad, restore_shape)
    return _not_differentiable(
        _grad_op_outputs_message("token_unpermute_with_routing_map_grad", "moe_token_unpermute_with_routing_map_grad"),
        results, (unpermuted_tokens_grad, permuted_tokens, probs))


# --- torch.ops.moegrad.* ----------------------------------------------------------------------------------

_SCHEMAS = {
    "moe_token_permute_with_routing_map":
        "(Tensor tokens, Tensor routing_map, Tensor? probs=None, SymInt? num_out_tokens=None, "
        "bool drop_and_pad=False) -> (Tensor, Tensor?, Tensor)",
    "moe_finalize_routing_v2":
        "(Tensor expanded_x, Tensor expanded_row_idx, Tensor? x1=None, Tensor? x2=None, Tensor? bias=None, "
        "Tensor? scales=None, Tensor? expert_idx=None, int drop_pad_mode=0) -> Tensor",
    "moe_finalize_routing_v2_grad":
        "(Tensor grad_y, Tensor expanded_row_idx, Tensor? expanded_x=None, Tensor? scales=None, "
        "Tensor? expert_idx=None, Tensor? bias=None, int drop_pad_mode=0, SymInt active_num=0, SymInt expert_num=0, "
        "SymInt expert_capacity=0) -> (Tensor, Tensor?)",
    "moe_token_permute_with_routing_map_grad":
        "(Tensor permuted_token_output_grad, Tensor sorted_indices, SymInt num_experts, SymInt tokens_num, "
        "bool drop_and_pad=False, Tensor? permuted_probs_output_grad=None, Tensor? routing_map=None) "
        "-> (Tensor, Tensor?)",
    "moe_init_routing_v2_grad":
        "(Tensor grad_expanded_x, Tensor expanded_row_idx, SymInt top_k, int drop_pad_mode=0, SymInt active_num=0) "
        "-> Tensor",
    "moe_init_routing_v2":
        "(Tensor x, Tensor expert_idx, SymInt active_num=0, SymInt expert_capacity=0, SymInt expert_num=0, "
        "int drop_pad_mode=0, int expert_tokens_count_or_cumsum_flag=0, bool expert_tokens_before_capacity_flag=False) "
        "-> (Tensor, Tensor, Tensor?, Tensor?)",
    "moe_token_unpermute_with_routing_map":
        "(Tensor permuted_tokens, Tensor sorted_indices, Tensor? routing_map=None, Tensor? probs=None, "
        "bool padded_mode=False, SymInt[]? restore_shape=None) -> (Tensor, Tensor, Tensor, Tensor?)",
    "moe_token_unpermute_with_routing_map_grad":
        "(Tensor unpermuted_tokens_grad, Tensor out_index, Tensor permute_token_id, Tensor? routing_map=None, "
        "Tensor? permuted_tokens=None, Tensor? probs=None, bool drop_and_pad=False, SymInt[]? restore_shape=None) "
        "-> (Tensor, Tensor?)",
}
# name -> (CPU kernel, Autograd kernel)
_KERNELS = {
    "moe_token_permute_with_routing_map": (_permute, _permute_autograd),
    "moe_finalize_routing_v2": (_finalize, _finalize_autograd),
    "moe_finalize_routing_v2_grad": (_finalize_grad, _finalize_grad_autograd),
    "moe_token_permute_with_routing_map_grad": (_permute_grad, _permute_grad_autograd),
    "moe_init_routing_v2_grad": (_init_routing_grad, _init_routing_grad_autograd),
    "moe_init_routing_v2": (_init_routing, _init_routing_autograd),
    "moe_token_unpermute_with_routing_map": (_unpermute, _unpermute_autograd),
    "moe_token_unpermute_with_routing_map_grad": (_unpermute_grad, _unpermute_grad_autograd),
}


def _register():
    """Defines torch.ops.moegrad.* with Python kernels; returns (library, None) or (None, the reason)."""
    try:
        lib = torch.library.Library("moegrad", "DEF")
        for name, schema in _SCHEMAS.items():
            lib.define(name + schema)
            cpu, autograd = _KERNELS[name]
            lib.impl(name, cpu, "CPU")
            lib.impl(name, autograd, "Autograd")
            # The CPU kernels answer fake tensors from the output query alone (_run): they are the fake kernels.
            torch.library.register_fake("moegrad::" + name, cpu, lib=lib)
        return lib, None
    except (RuntimeError, AttributeError, ValueError) as e:  # e.g. the namespace is taken already
        return None, e


_LIBRARY, REGISTRATION_ERROR = _register()
# The public functions go through the dispatcher when registration worked, otherwise straight to Python.
_ENTRY = {name: (getattr(torch.ops.moegrad, name) if _LIBRARY is not None else auto)
          for name, (cpu, auto) in _KERNELS.items()}


def _plain_eager(args):
    """Whether a call on `args` may run its kernels as plain Python functions, without torch's dispatcher: an eager
    call (not traced by torch.compile or torch.jit) of plain tensors, with no torch function or dispatch mode
    (FakeTensorMode, a TorchDispatchMode, ...), no functorch transform and no profiler active. The dispatcher
    would then call the same kernels (Autograd, then CPU) and nothing else; skipping it saves two of its Python
    round trips per call (see docs/python.md, per-call overhead). Anything else goes through torch.ops.moegrad."""
    return not (_compiling() or _torch_c._len_torch_dispatch_stack() or _torch_c._len_torch_function_stack()
                or _torch_c._has_torch_function(args) or _torch_c._are_functorch_transforms_active()
                or _torch_c._get_tracing_state() is not None or _profiler_enabled())


_torch_c = torch._C
_profiler_enabled = torch.autograd._profiler_enabled


# --- the one-round-trip path -------------------------------------------------------------------------------
# A plain eager call (_plain_eager) that autograd does not record (grad mode off, or no differentiable input
# requiring grad) is the operator alone: _C.<key>_call reads the tensors, runs the output query, allocates the
# outputs with torch.empty and runs, in one extension call (docs/python.md, per-call overhead). It takes only
# the regular case (plain strided CPU tensors of known dtypes, int attributes, bools or 0 / 1 for the boolean
# ones, integer arrays as lists or tuples of ints) and returns None for anything else, having allocated and
# written nothing; the public function then takes its full path, whose checks word the error. The library's
# own errors it raises itself, the same ValueError as the output query's.

_C.bind_tensor_type((torch.Tensor, torch.nn.Parameter), torch.strided, _DTYPE_CODES, _DTYPES, torch.empty)
_CALLS = {key: getattr(_C, key + "_call") for key in _C.OPS}
_grad_enabled = torch.is_grad_enabled


def _fast(key, inputs, attrs, arrays=(), differentiable=()):
    """The outputs of operator `key` (its _C.INFO[key] inputs, attributes and integer arrays, in that order) by
    _C.<key>_call, or None where the call takes the full path: not plain eager, recorded by autograd (grad mode
    on and one of `differentiable` requiring grad), or not the regular case."""
    if _grad_enabled():
        for t in differentiable:
            if t is not None and getattr(t, "requires_grad", False):
                return None
    if not _plain_eager(inputs):
        return None
    return _CALLS[key](inputs, attrs, arrays)


def _dispatch(name, *args):
    """The operator `name` on `args` (its schema's arguments, checked): its autograd kernel directly in plain eager
    mode, otherwise torch.ops.moegrad.<name> (_ENTRY)."""
    if _plain_eager(args):
        return _KERNELS[name][1](*args)
    return _ENTRY[name](*args)


# --- public API -------------------------------------------------------------------------------------------
# Each function first offers a plain eager call that autograd does not record to the one-round-trip path
# (_fast). Otherwise, or where that declines, it checks its arguments' Python types and converts its attributes
# (_check) before the dispatcher's schema parsing sees them; the kernel then runs the library's output query,
# allocates and calls.

def moe_token_permute_with_routing_map(tokens, routing_map, probs=None, num_out_tokens=None, drop_and_pad=False):
    """Dispatch: copies the rows of tokens (T, H) into expert-major order as routed by routing_map (T, E).

    Returns (permuted_tokens (N, H), permuted_probs (N) or None, sorted_indices (N) INT32). Dropless:
    num_out_tokens defaults to the routed entries, every token routed to the same K experts, N = T*K.
    drop_and_pad: num_out_tokens is required, capacity C = num_out_tokens / E, N = E*C. Differentiable in
    tokens and probs (MoeTokenPermuteWithRoutingMapGrad), once.
    """
    key, inputs, attrs = "token_permute_with_routing_map", (tokens, routing_map, probs), (num_out_tokens, drop_and_pad)
    if num_out_tokens is not None:
        out = _fast(key, inputs, attrs, differentiable=(tokens, probs))
        if out is not None:
            return out
    return _dispatch("moe_" + key, *inputs, *_check(key, inputs, attrs, may_be_none=("numOutTokens",)))


def moe_finalize_routing_v2(expanded_x, expanded_row_idx, x1=None, x2=None, bias=None, scales=None,
                            expert_idx=None, drop_pad_mode=0):
    """Combine: out[r] = x1[r] + x2[r] + sum_k scales[r, k] * (expanded_x[row of pair (r, k)] + bias[expert]).

    Pair order p = k*R + r in modes 0/1, r*K + k in modes 2/3; modes 1/3 read expanded_x as (E, C, H) and
    skip index -1. R comes from scales, x1, x2 or expert_idx (with none of them K = 1). Differentiable in
    expanded_x, scales, bias, x1 and x2 (MoeFinalizeRoutingV2Grad; the bias gradient with torch ops), once.
    """
    key, inputs, attrs = "finalize_routing_v2", (expanded_x, expanded_row_idx, x1, x2, bias, scales, expert_idx), \
        (drop_pad_mode,)
    out = _fast(key, inputs, attrs, differentiable=(expanded_x, x1, x2, bias, scales))
    if out is not None:
        return out[0]
    return _dispatch("moe_" + key, *inputs, *_check(key, inputs, attrs))


def moe_finalize_routing_v2_grad(grad_y, expanded_row_idx, expanded_x=None, scales=None, expert_idx=None,
                                 bias=None, drop_pad_mode=0, active_num=0, expert_num=0, expert_capacity=0):
    """The operator MoeFinalizeRoutingV2Grad (token-major pairs i = r*K + k; mode 0 dropless, 1 drop/pad).

    Returns (grad_expanded_x, grad_scales or None); grad_scales is computed when scales is given. The outputs
    are not differentiable.
    """
    key = "finalize_routing_v2_grad"
    inputs = (grad_y, expanded_row_idx, expanded_x, scales, expert_idx, bias)
    attrs = (drop_pad_mode, active_num, expert_num, expert_capacity)
    out = _fast(key, inputs, attrs, differentiable=(grad_y, expanded_x, scales, bias))
    if out is not None:
        return out
    return _dispatch("moe_" + key, *inputs, *_check(key, inputs, attrs))


def moe_token_permute_with_routing_map_grad(permuted_token_output_grad, sorted_indices, num_experts, tokens_num,
                                            drop_and_pad=False, permuted_probs_output_grad=None, routing_map=None):
    """The operator MoeTokenPermuteWithRoutingMapGrad.

    Returns (tokens_grad (T, H), probs_grad (T, E) or None); probs_grad is computed when
    permuted_probs_output_grad is given (dropless mode then needs routing_map). The outputs are not
    differentiable.
    """
    key = "token_permute_with_routing_map_grad"
    inputs = (permuted_token_output_grad, permuted_probs_output_grad, sorted_indices, routing_map)
    attrs = (num_experts, tokens_num, drop_and_pad)
    out = _fast(key, inputs, attrs, differentiable=(permuted_token_output_grad, permuted_probs_output_grad))
    if out is not None:
        return out
    # The schema's order differs from the C API's: the attributes before the optional inputs.
    return _dispatch("moe_" + key, permuted_token_output_grad, sorted_indices, *_check(key, inputs, attrs),
                     permuted_probs_output_grad, routing_map)


def moe_init_routing_v2_grad(grad_expanded_x, expanded_row_idx, top_k, drop_pad_mode=0, active_num=0):
    """The operator MoeInitRoutingV2Grad: the backward of MoeInitRoutingV2's row copy.

    out[n] = the sum, in ascending k, of grad_expanded_x's rows expanded_row_idx[n*K + k] (K = top_k), leaving
    out the pairs the forward did not materialize (mode 0: values >= active_num when 0 < active_num < L) or
    dropped (mode 1: -1). grad_expanded_x is (rows, H) in mode 0 and (E, C, H) in mode 1; returns out (L/K, H).
    The output is not differentiable.
    """
    key, inputs, attrs = "init_routing_v2_grad", (grad_expanded_x, expanded_row_idx), (top_k, drop_pad_mode, active_num)
    out = _fast(key, inputs, attrs, differentiable=(grad_expanded_x,))
    if out is not None:
        return out[0]
    return _dispatch("moe_" + key, *inputs, *_check(key, inputs, attrs))


def moe_init_routing_v2(x, expert_idx, active_num=0, expert_capacity=0, expert_num=0, drop_pad_mode=0,
                        expert_tokens_count_or_cumsum_flag=0, expert_tokens_before_capacity_flag=False):
    """The operator MoeInitRoutingV2 (V2 dispatch): the rows of x (N, H) in the order of the token-major pairs
    p = n*K + k of expert_idx (N, K) INT32 sorted by expert, ties by p.

    Returns (expanded_x, expanded_row_idx (N*K) INT32, expert_tokens_count_or_cumsum (E) INT32 or None,
    expert_tokens_before_capacity (E) INT32 or None). drop_pad_mode 0: expanded_x (A, H), A = min(active_num,
    N*K) when active_num > 0 else N*K; the cumsum (flag 1) or count (flag 2) of every expert's pairs. 1:
    expanded_x (E, C, H) with C = expert_capacity, pairs past C dropped (-1), empty rows +0; the counts before
    capacity with expert_tokens_before_capacity_flag. Differentiable in x (MoeInitRoutingV2Grad), once; the
    index and count outputs are not differentiable.
    """
    key, inputs = "init_routing_v2", (x, expert_idx)
    attrs = (active_num, expert_capacity, expert_num, drop_pad_mode, expert_tokens_count_or_cumsum_flag,
             expert_tokens_before_capacity_flag)
    out = _fast(key, inputs, attrs, differentiable=(x,))
    if out is not None:
        return out
    return _dispatch("moe_" + key, *inputs, *_check(key, inputs, attrs))


def moe_token_unpermute_with_routing_map(permuted_tokens, sorted_indices, routing_map=None, probs=None,
                                         padded_mode=False, restore_shape=None):
    """The operator MoeTokenUnpermuteWithRoutingMap (routing-map combine): the inverse of
    moe_token_permute_with_routing_map, as Megatron's unpermute.

    unpermuted[t] = the sum, in ascending contribution q, of w(q) * permuted_tokens[row(q)] over the contributions
    of token t: dropless (N = T*K) q's token is q // K, its row sorted_indices[q], its weight probs[t][the
    (q % K)-th routed expert of t] (routing_map then required, exactly K routed entries per row); padded_mode
    (N = E*C) q's token is sorted_indices[q], its row q, its weight probs[token][q // C]. Without probs every
    weight is 1 and restore_shape (T, H) is required; with it, restore_shape must match. Returns
    (unpermuted_tokens (T, H), out_index (N) INT32, permute_token_id (N) INT32, permute_probs (N) or None): the
    contributions' rows and tokens ordered by token, and each contribution's weight. Differentiable in
    permuted_tokens and probs (MoeTokenUnpermuteWithRoutingMapGrad), once; the other outputs are not.
    """
    key, inputs, attrs = "token_unpermute_with_routing_map", (permuted_tokens, sorted_indices, routing_map, probs), \
        (padded_mode,)
    out = _fast(key, inputs, attrs, (restore_shape,), differentiable=(permuted_tokens, probs))
    if out is not None:
        return out
    attrs = _check(key, inputs, attrs)
    return _dispatch("moe_" + key, *inputs, *attrs, _int_array(key, "restoreShapeOptional", restore_shape))


def moe_token_unpermute_with_routing_map_grad(unpermuted_tokens_grad, out_index, permute_token_id, routing_map=None,
                                              permuted_tokens=None, probs=None, drop_and_pad=False,
                                              restore_shape=None):
    """The operator MoeTokenUnpermuteWithRoutingMapGrad: the backward of the routing-map combine.

    Pairs i of out_index (N) INT32 / permute_token_id (N) INT32 as MoeTokenUnpermuteWithRoutingMap writes them:
    row out_index[i], token i / K (dropless, K = N / T; permute_token_id is not read) or permute_token_id[i]
    (drop_and_pad), weight probs[token][expert] (1 without probs). Returns (permuted_tokens_grad (N, H): each row
    the weighted sum of its pairs' rows of unpermuted_tokens_grad (T, H); probs_grad (T, E), the dot products
    permuted_tokens[row] . unpermuted_tokens_grad[token] summed per (token, expert), or None without probs).
    probs needs routing_map and permuted_tokens; restore_shape, when given, must be (T, H). The outputs are not
    differentiable.
    """
    key = "token_unpermute_with_routing_map_grad"
    inputs = (unpermuted_tokens_grad, out_index, permute_token_id, routing_map, permuted_tokens, probs)
    out = _fast(key, inputs, (drop_and_pad,), (restore_shape,),
                differentiable=(unpermuted_tokens_grad, permuted_tokens, probs))
    if out is not None:
        return out
    attrs = _check(key, inputs, (drop_and_pad,))
    return _dispatch("moe_" + key, *inputs, *attrs, _int_array(key, "restoreShapeOptional", restore_shape))


# --- whole pipelines (one call in, one call out) and the Megatron-core drop-in ---------------------------------

from ._pipelines import (DispatchV2Handle, PermuteHandle, moe_combine_v2, moe_dispatch_v2,  # noqa: E402
                         moe_permute, moe_unpermute)
from . import _megatron as megatron  # noqa: E402

__all__ += ["moe_permute", "moe_unpermute", "moe_dispatch_v2", "moe_combine_v2", "PermuteHandle",
            "DispatchV2Handle", "megatron"]
# `import moegrad.torch.megatron` finds the drop-in under the name its docs use.
import sys as _sys  # noqa: E402
_sys.modules[__name__ + ".megatron"] = megatron
