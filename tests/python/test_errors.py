"""Every bad argument of the public functions gives one line: the library's message as ValueError (phase one's
output query runs before any output is allocated), TypeError for a non-tensor or a non-integer attribute,
MemoryError for a valid output larger than this machine; and the gradients are not differentiable, with one
clear line."""
import pytest
import torch

import moegrad.torch as mt

_C = mt._C
_CODES = {torch.float32: "FLOAT32", torch.float16: "FLOAT16", torch.bfloat16: "BFLOAT16", torch.float64: "DOUBLE",
          torch.int8: "INT8", torch.int32: "INT32", torch.int64: "INT64", torch.bool: "BOOL"}

# The public functions, their operator (_C key, CANN name), and each Python argument's name in the library.
_FUNCTIONS = {
    "moe_token_permute_with_routing_map": ("token_permute_with_routing_map", dict(
        tokens="tokens", routing_map="routingMap", probs="probs", num_out_tokens="numOutTokens",
        drop_and_pad="dropAndPad")),
    "moe_finalize_routing_v2": ("finalize_routing_v2", dict(
        expanded_x="expandedX", expanded_row_idx="expandedRowIdx", x1="x1", x2="x2", bias="bias", scales="scales",
        expert_idx="expertIdx", drop_pad_mode="dropPadMode")),
    "moe_finalize_routing_v2_grad": ("finalize_routing_v2_grad", dict(
        grad_y="gradY", expanded_row_idx="expandedRowIdx", expanded_x="expandedX", scales="scales",
        expert_idx="expertIdx", bias="bias", drop_pad_mode="dropPadMode", active_num="activeNum",
        expert_num="expertNum", expert_capacity="expertCapacity")),
    "moe_token_permute_with_routing_map_grad": ("token_permute_with_routing_map_grad", dict(
        permuted_token_output_grad="permutedTokenOutputGrad", sorted_indices="sortedIndices",
        num_experts="numExperts", tokens_num="tokensNum", drop_and_pad="dropAndPad",
        permuted_probs_output_grad="permutedProbsOutputGrad", routing_map="routingMap")),
    "moe_init_routing_v2_grad": ("init_routing_v2_grad", dict(
        grad_expanded_x="gradExpandedX", expanded_row_idx="expandedRowIdx", top_k="topK", drop_pad_mode="dropPadMode",
        active_num="activeNum")),
    "moe_init_routing_v2": ("init_routing_v2", dict(
        x="x", expert_idx="expertIdx", active_num="activeNum", expert_capacity="expertCapacity",
        expert_num="expertNum", drop_pad_mode="dropPadMode",
        expert_tokens_count_or_cumsum_flag="expertTokensCountOrCumsumFlag",
        expert_tokens_before_capacity_flag="expertTokensBeforeCapacityFlag")),
    "moe_token_unpermute_with_routing_map": ("token_unpermute_with_routing_map", dict(
        permuted_tokens="permutedTokens", sorted_indices="sortedIndices", routing_map="routingMapOptional",
        probs="probsOptional", padded_mode="paddedMode", restore_shape="restoreShapeOptional")),
    "moe_token_unpermute_with_routing_map_grad": ("token_unpermute_with_routing_map_grad", dict(
        unpermuted_tokens_grad="unpermutedTokensGrad", out_index="outIndex", permute_token_id="permuteTokenId",
        routing_map="routingMapOptional", permuted_tokens="permutedTokensOptional", probs="probsOptional",
        drop_and_pad="dropAndPad", restore_shape="restoreShapeOptional")),
}


def _i32(*values):
    return torch.tensor(values, dtype=torch.int32)


def _base(function):
    """A valid call of `function` with every optional tensor given: {Python argument: value}."""
    if function == "moe_token_permute_with_routing_map":
        return dict(tokens=torch.randn(4, 3), routing_map=torch.tensor([[1, 0], [0, 1], [1, 0], [0, 1]]).bool(),
                    probs=torch.rand(4, 2))
    if function == "moe_finalize_routing_v2":
        return dict(expanded_x=torch.randn(8, 3), expanded_row_idx=torch.randperm(8).int(), x1=torch.randn(4, 3),
                    x2=torch.randn(4, 3), bias=torch.randn(2, 3), scales=torch.rand(4, 2),
                    expert_idx=_i32(0, 1, 1, 0, 0, 1, 1, 0).view(4, 2), drop_pad_mode=2)
    if function == "moe_finalize_routing_v2_grad":
        return dict(grad_y=torch.randn(4, 3), expanded_row_idx=torch.randperm(8).int(), expanded_x=torch.randn(8, 3),
                    scales=torch.rand(4, 2), expert_idx=_i32(0, 1, 1, 0, 0, 1, 1, 0).view(4, 2),
                    bias=torch.randn(2, 3))
    if function == "moe_init_routing_v2_grad":
        return dict(grad_expanded_x=torch.randn(8, 3), expanded_row_idx=torch.randperm(8).int(), top_k=2)
    if function == "moe_token_unpermute_with_routing_map":  # dropless, K = 2 of 2 experts
        return dict(permuted_tokens=torch.randn(8, 3), sorted_indices=torch.randperm(8).int(),
                    routing_map=torch.ones(4, 2).bool(), probs=torch.rand(4, 2))
    if function == "moe_init_routing_v2":
        return dict(x=torch.randn(4, 3), expert_idx=_i32(0, 2, 1, 2, 2, 0, 1, 1).view(4, 2), expert_num=3,
                    expert_tokens_count_or_cumsum_flag=1)
    if function == "moe_token_unpermute_with_routing_map_grad":  # T 3, E 4, K 2, H 3
        return dict(unpermuted_tokens_grad=torch.randn(3, 3), out_index=torch.randperm(6).int(),
                    permute_token_id=_i32(0, 0, 1, 1, 2, 2),
                    routing_map=torch.tensor([[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]).bool(),
                    permuted_tokens=torch.randn(6, 3), probs=torch.rand(3, 4), restore_shape=(3, 3))
    return dict(permuted_token_output_grad=torch.randn(8, 3), sorted_indices=torch.randperm(8).int(), num_experts=2,
                tokens_num=4, permuted_probs_output_grad=torch.randn(8), routing_map=torch.ones(4, 2).bool())


def _outputs(function):
    """The outputs of _base(function)'s call: {library name: tensor}."""
    return {
        "moe_token_permute_with_routing_map": dict(permuteTokensOut=torch.empty(4, 3), permuteProbsOut=torch.empty(4),
                                                   sortedIndicesOut=torch.empty(4, dtype=torch.int32)),
        "moe_finalize_routing_v2": dict(out=torch.empty(4, 3)),
        "moe_finalize_routing_v2_grad": dict(gradExpandedXOut=torch.empty(8, 3), gradScalesOut=torch.empty(4, 2)),
        "moe_token_permute_with_routing_map_grad": dict(tokensGradOut=torch.empty(4, 3), probsGradOut=torch.empty(4, 2)),
        "moe_init_routing_v2_grad": dict(out=torch.empty(4, 3)),
        "moe_init_routing_v2": dict(expandedXOut=torch.empty(8, 3), expandedRowIdxOut=torch.empty(8, dtype=torch.int32),
                                    expertTokensCountOrCumsumOut=torch.empty(3, dtype=torch.int32)),
        "moe_token_unpermute_with_routing_map": dict(unpermutedTokens=torch.empty(4, 3),
                                                     outIndex=torch.empty(8, dtype=torch.int32),
                                                     permuteTokenId=torch.empty(8, dtype=torch.int32),
                                                     permuteProbs=torch.empty(8)),
        "moe_token_unpermute_with_routing_map_grad": dict(permutedTokensGradOut=torch.empty(6, 3),
                                                          probsGradOutOptional=torch.empty(3, 4)),
    }[function]


def _direct_message(function, kwargs, outputs):
    """The message of _C.<op> (the C++ API, through the extension) for the same arguments with the given outputs."""
    key, names = _FUNCTIONS[function]
    lib = {names[k]: v for k, v in kwargs.items()}
    lib.update(outputs)
    tensor_names, attr_names = _C.OPS[key]
    descs = [None if lib.get(n) is None else (lib[n].data_ptr(), _C.DTYPES[_CODES[lib[n].dtype]], tuple(lib[n].shape),
                                              tuple(lib[n].stride())) for n in tensor_names]
    defaults = dict(numOutTokens=4, dropAndPad=0, dropPadMode=0, activeNum=0, expertNum=0, expertCapacity=0, topK=0)
    attrs = [int(lib.get(n, defaults.get(n, 0))) for n in attr_names]
    arrays = [None if lib.get(n) is None else list(lib[n]) for n in _C.INFO[key]["arrays"]]
    with pytest.raises(ValueError) as info:
        getattr(_C, key)(descs, attrs, arrays)
    return str(info.value)


class Case:
    def __init__(self, name, function, change, error, mentions, outputs=None, base=True):
        self.name, self.function, self.change, self.error = name, function, change, error
        self.mentions = mentions  # what the message must name (the argument, its value)
        self.outputs = outputs  # {library name: tensor}: correctly sized outputs for the same call through _C
        self.base = base

    def kwargs(self):
        kwargs = _base(self.function) if self.base else {}
        kwargs.update(self.change() if callable(self.change) else self.change)
        return kwargs


def _expanded(*sizes, dtype=torch.float32):
    """A tensor of any size without its memory (every stride 0): an output of the right shape for phase one."""
    return torch.empty([1] * len(sizes), dtype=dtype).expand(*sizes)


_PERMUTE, _FINALIZE = "moe_token_permute_with_routing_map", "moe_finalize_routing_v2"
_FINALIZE_GRAD, _PERMUTE_GRAD = "moe_finalize_routing_v2_grad", "moe_token_permute_with_routing_map_grad"
_INIT_GRAD = "moe_init_routing_v2_grad"
_INIT = "moe_init_routing_v2"
_UNPERMUTE = "moe_token_unpermute_with_routing_map"
_UNPERMUTE_GRAD = "moe_token_unpermute_with_routing_map_grad"

CASES = [
    # Attributes the Python layer used to size outputs with: the library's rule comes first.
    Case("tokens_num 2**40", _PERMUTE_GRAD, dict(tokens_num=2**40), ValueError,
         ["permutedTokenOutputGrad has 8 rows", "tokensNum = 1099511627776"],
         dict(tokensGradOut=_expanded(2**40, 3), probsGradOut=_expanded(2**40, 2))),
    Case("tokens_num 7 (the same rule)", _PERMUTE_GRAD, dict(tokens_num=7), ValueError, ["tokensNum = 7"],
         dict(tokensGradOut=torch.empty(7, 3), probsGradOut=torch.empty(7, 2))),
    Case("num_experts 2**45 with probs", _PERMUTE_GRAD, dict(num_experts=2**45), ValueError,
         ["routingMap", "35184372088832"], dict(tokensGradOut=torch.empty(4, 3), probsGradOut=_expanded(4, 2**45))),
    Case("num_experts 2**45 with probs, drop_and_pad", _PERMUTE_GRAD, dict(num_experts=2**45, drop_and_pad=True),
         ValueError, ["numExperts = 35184372088832"],
         dict(tokensGradOut=torch.empty(4, 3), probsGradOut=_expanded(4, 2**45))),
    Case("expert_num 2**62", _FINALIZE_GRAD,
         dict(expanded_x=None, scales=None, expert_idx=None, bias=None, drop_pad_mode=1, expert_num=2**62,
              expert_capacity=2), ValueError, ["expertNum * expertCapacity = 4611686018427387904 * 2 overflows"]),
    Case("expert_num 2**62, gradExpandedXOut past int64", _FINALIZE_GRAD,
         dict(expanded_x=None, scales=None, expert_idx=None, bias=None, drop_pad_mode=1, expert_num=2**62,
              expert_capacity=1), ValueError, ["gradExpandedXOut of shape (4611686018427387904, 1, 3) overflows"]),
    Case("expert_num 2**62 with expanded_x", _FINALIZE_GRAD,
         dict(drop_pad_mode=1, expert_num=2**62, expert_capacity=2), ValueError, ["bias has 2 rows", "expertNum"],
         dict(gradExpandedXOut=torch.empty(8, 3), gradScalesOut=torch.empty(4, 2))),
    Case("0-d expanded_x", _FINALIZE, dict(expanded_x=torch.tensor(1.0)), ValueError,
         ["expandedX must be 2-D but has shape ()"]),
    Case("0-d expanded_x, drop-pad mode", _FINALIZE, dict(expanded_x=torch.tensor(1.0), drop_pad_mode=3), ValueError,
         ["expandedX must be 3-D but has shape ()"]),
    Case("0-d expanded_x of the gradient", _FINALIZE_GRAD, dict(expanded_x=torch.tensor(1.0)), ValueError,
         ["expandedX has shape () but must be (8, 3)"], _outputs(_FINALIZE_GRAD)),
    Case("num_out_tokens 2**63", _PERMUTE, dict(num_out_tokens=2**63), ValueError,
         ["numOutTokens = 9223372036854775808 is outside the int64 range"]),
    Case("num_out_tokens -2**63 - 1", _PERMUTE, dict(num_out_tokens=-2**63 - 1), ValueError,
         ["numOutTokens = -9223372036854775809 is outside the int64 range"]),
    Case("num_out_tokens 2**62", _PERMUTE, dict(num_out_tokens=2**62), ValueError,
         ["numOutTokens = 4611686018427387904 is outside [0, T*E] = [0, 8]"],
         dict(permuteTokensOut=_expanded(2**61, 3), permuteProbsOut=_expanded(2**61),
              sortedIndicesOut=_expanded(2**61, dtype=torch.int32))),
    # Negative values.
    Case("num_out_tokens -1", _PERMUTE, dict(num_out_tokens=-1), ValueError, ["numOutTokens = -1 is outside"],
         _outputs(_PERMUTE)),
    Case("num_experts -1", _PERMUTE_GRAD, dict(num_experts=-1), ValueError, ["numExperts = -1 must be > 0"],
         _outputs(_PERMUTE_GRAD)),
    Case("tokens_num -4", _PERMUTE_GRAD, dict(tokens_num=-4), ValueError, ["tokensNum = -4 must be > 0"],
         _outputs(_PERMUTE_GRAD)),
    Case("active_num -1", _FINALIZE_GRAD, dict(active_num=-1), ValueError, ["activeNum = -1 must be >= 0"],
         _outputs(_FINALIZE_GRAD)),
    Case("expert_num -1", _FINALIZE_GRAD, dict(drop_pad_mode=1, expert_num=-1, expert_capacity=2), ValueError,
         ["expertNum = -1 must be > 0"], _outputs(_FINALIZE_GRAD)),
    Case("expert_capacity -1", _FINALIZE_GRAD, dict(drop_pad_mode=1, expert_num=2, expert_capacity=-1), ValueError,
         ["expertCapacity = -1 must be > 0"], _outputs(_FINALIZE_GRAD)),
    Case("drop_pad_mode -1", _FINALIZE, dict(drop_pad_mode=-1), ValueError, ["dropPadMode = -1"], _outputs(_FINALIZE)),
    Case("drop_pad_mode 2 of the gradient", _FINALIZE_GRAD, dict(drop_pad_mode=2), ValueError, ["dropPadMode = 2"],
         _outputs(_FINALIZE_GRAD)),
    Case("top_k 0", _INIT_GRAD, dict(top_k=0), ValueError, ["topK = 0 must be > 0"], _outputs(_INIT_GRAD)),
    Case("top_k 3 (L = 8)", _INIT_GRAD, dict(top_k=3), ValueError,
         ["expandedRowIdx has 8 elements, not a multiple of topK = 3"], _outputs(_INIT_GRAD)),
    Case("active_num -1 of the init-routing gradient", _INIT_GRAD, dict(active_num=-1), ValueError,
         ["activeNum = -1 must be >= 0"], _outputs(_INIT_GRAD)),
    Case("drop_pad_mode 2 of the init-routing gradient", _INIT_GRAD, dict(drop_pad_mode=2), ValueError,
         ["dropPadMode = 2 must be 0 (dropless) or 1 (drop/pad)"], _outputs(_INIT_GRAD)),
    Case("2-D grad_expanded_x in mode 1", _INIT_GRAD, dict(drop_pad_mode=1), ValueError,
         ["gradExpandedX must be 3-D (E, C, H) for dropPadMode 1 but has shape (8, 3)"], _outputs(_INIT_GRAD)),
    Case("grad_expanded_x rows != activeNum", _INIT_GRAD, dict(active_num=5), ValueError,
         ["gradExpandedX has 8 rows but must have 5 (activeNum 5)"], _outputs(_INIT_GRAD)),
    Case("int64 expanded_row_idx of the init-routing gradient", _INIT_GRAD, dict(expanded_row_idx=torch.arange(8)),
         ValueError, ["expandedRowIdx has dtype INT64 but must be INT32"], _outputs(_INIT_GRAD)),
    Case("expanded_row_idx value past L", _INIT_GRAD, dict(expanded_row_idx=_i32(0, 1, 2, 3, 4, 5, 6, 8)), ValueError,
         ["expandedRowIdx[7] = 8 is outside [0, 8) for dropPadMode 0"], _outputs(_INIT_GRAD)),
    # Python types of attributes.
    Case("num_experts True", _PERMUTE_GRAD, dict(num_experts=True), TypeError, ["numExperts must be an int, not bool"]),
    Case("top_k 2.0", _INIT_GRAD, dict(top_k=2.0), TypeError, ["topK must be an int, not float"]),
    Case("tokens_num 4.0", _PERMUTE_GRAD, dict(tokens_num=4.0), TypeError, ["tokensNum must be an int, not float"]),
    Case("tokens_num float tensor", _PERMUTE_GRAD, dict(tokens_num=torch.tensor(4.0)), TypeError,
         ["tokensNum must be an int, not torch.Tensor"]),
    Case("num_out_tokens '4'", _PERMUTE, dict(num_out_tokens="4"), TypeError, ["numOutTokens must be an int, not str"]),
    Case("drop_pad_mode None", _FINALIZE, dict(drop_pad_mode=None), TypeError,
         ["dropPadMode must be an int, not NoneType"]),
    Case("drop_and_pad 'yes'", _PERMUTE, dict(drop_and_pad="yes"), TypeError, ["dropAndPad must be a bool, not str"]),
    Case("drop_and_pad 2", _PERMUTE_GRAD, dict(drop_and_pad=2), ValueError, ["dropAndPad = 2 must be a bool"]),
    # Wrong dtypes and ranks.
    Case("int32 tokens", _PERMUTE, dict(tokens=torch.ones(4, 3, dtype=torch.int32)), ValueError,
         ["tokens has dtype INT32 but must be FLOAT32, FLOAT16 or BFLOAT16"], _outputs(_PERMUTE)),
    Case("float64 probs", _PERMUTE, dict(probs=torch.rand(4, 2).double()), ValueError,
         ["probs has dtype DOUBLE but must be FLOAT32, FLOAT16 or BFLOAT16"], _outputs(_PERMUTE)),
    Case("int64 sorted_indices", _PERMUTE_GRAD, dict(sorted_indices=torch.arange(8)), ValueError,
         ["sortedIndices has dtype INT64 but must be INT32"], _outputs(_PERMUTE_GRAD)),
    # The tokens share one dtype (the routing weights may have another: valid, see test_mixed_precision.py).
    Case("float16 x1 with float32 expanded_x", _FINALIZE, dict(x1=torch.randn(4, 3).half()), ValueError,
         ["x1 is FLOAT16 but expandedX is FLOAT32"], _outputs(_FINALIZE)),
    Case("float16 bias of the gradient", _FINALIZE_GRAD, dict(bias=torch.randn(2, 3).half()), ValueError,
         ["bias is FLOAT16 but gradY is FLOAT32"], _outputs(_FINALIZE_GRAD)),
    Case("bfloat16 expanded_x of the gradient", _FINALIZE_GRAD, dict(expanded_x=torch.randn(8, 3).bfloat16()),
         ValueError, ["expandedX is BFLOAT16 but gradY is FLOAT32"], _outputs(_FINALIZE_GRAD)),
    Case("complex grad_y", _FINALIZE_GRAD, dict(grad_y=torch.randn(4, 3, dtype=torch.complex64)), ValueError,
         ["gradY has dtype torch.complex64"]),
    Case("3-D grad_y", _FINALIZE_GRAD, dict(grad_y=torch.randn(4, 3, 1)), ValueError,
         ["gradY must be 2-D but has shape (4, 3, 1)"], _outputs(_FINALIZE_GRAD)),
    Case("1-D routing_map", _PERMUTE, dict(routing_map=torch.ones(4).bool()), ValueError,
         ["routingMap must be 2-D but has shape (4,)"], _outputs(_PERMUTE)),
    Case("2-D expanded_row_idx", _FINALIZE, dict(expanded_row_idx=torch.zeros(4, 2, dtype=torch.int32)), ValueError,
         ["expandedRowIdx must be 1-D but has shape (4, 2)"], _outputs(_FINALIZE)),
    Case("1-D permuted_token_output_grad", _PERMUTE_GRAD, dict(permuted_token_output_grad=torch.randn(8)),
         ValueError, ["permutedTokenOutputGrad must be 2-D but has shape (8,)"], _outputs(_PERMUTE_GRAD)),
    Case("x1 of another shape", _FINALIZE, dict(x1=torch.randn(4, 5)), ValueError,
         ["x1 has shape (4, 5) but must be (4, 3)"], _outputs(_FINALIZE)),
    Case("scales of 5 rows, out from x1's 4", _FINALIZE, dict(scales=torch.rand(5, 2)), ValueError,
         ["expandedRowIdx has 8 elements but must have R*K = 5 * 2"],
         dict(out=torch.empty(5, 3))),
    # Conditionally required inputs.
    Case("scales without expanded_x", _FINALIZE_GRAD, dict(expanded_x=None), ValueError,
         ["expandedX (required with scales) is required but is null"], _outputs(_FINALIZE_GRAD)),
    Case("probs grad without routing_map", _PERMUTE_GRAD, dict(routing_map=None), ValueError,
         ["routingMap (required with permutedProbsOutputGrad when dropAndPad is false)"], _outputs(_PERMUTE_GRAD)),
    Case("bias without expert_idx", _FINALIZE, dict(expert_idx=None), ValueError,
         ["expertIdx (required with bias) is required but is null"], _outputs(_FINALIZE)),
    Case("drop_and_pad without num_out_tokens", _PERMUTE, dict(drop_and_pad=True), ValueError,
         ["num_out_tokens is required with drop_and_pad"]),
    # MoeInitRoutingV2: attributes before shapes, the outputs from the query.
    Case("expert_tokens_count_or_cumsum_flag 3", _INIT, dict(expert_tokens_count_or_cumsum_flag=3), ValueError,
         ["expertTokensCountOrCumsumFlag = 3 must be 0 (none), 1 (cumsum) or 2 (count)"], _outputs(_INIT)),
    Case("expert_num 0 with the cumsum", _INIT, dict(expert_num=0), ValueError,
         ["expertNum = 0 must be > 0 for expertTokensCountOrCumsumFlag 1"], _outputs(_INIT)),
    Case("active_num -1", _INIT, dict(active_num=-1), ValueError, ["activeNum = -1 must be >= 0"], _outputs(_INIT)),
    Case("expert_idx of 5 rows", _INIT, dict(expert_idx=torch.zeros(5, 2, dtype=torch.int32)), ValueError,
         ["expertIdx has shape (5, 2) but x has 4 rows"], _outputs(_INIT)),
    Case("int64 expert_idx", _INIT, dict(expert_idx=torch.zeros(4, 2, dtype=torch.int64)), ValueError,
         ["expertIdx has dtype INT64 but must be INT32"], _outputs(_INIT)),
    Case("E*C past INT32", _INIT, dict(drop_pad_mode=1, expert_num=2**16, expert_capacity=2**15), ValueError,
         ["expertNum*expertCapacity = 65536*32768 rows do not fit INT32 expandedRowIdx"]),
    Case("expert_tokens_before_capacity_flag 2", _INIT, dict(expert_tokens_before_capacity_flag=2), ValueError,
         ["expertTokensBeforeCapacityFlag = 2 must be a bool"]),
    # MoeTokenUnpermuteWithRoutingMap: the optional-argument rules, restore_shape, shapes.
    Case("no probs, no restore_shape", _UNPERMUTE, dict(probs=None), ValueError,
         ["restoreShapeOptional is required when probsOptional is null"], _outputs(_UNPERMUTE)),
    Case("probs without routing_map (dropless)", _UNPERMUTE, dict(routing_map=None), ValueError,
         ["routingMapOptional (required with probsOptional when paddedMode is false) is required but is null"]),
    Case("restore_shape (4, 4)", _UNPERMUTE, dict(restore_shape=(4, 4)), ValueError,
         ["restoreShapeOptional is (4, 4) but unpermutedTokens is (4, 3)"], _outputs(_UNPERMUTE)),
    Case("restore_shape (4,)", _UNPERMUTE, dict(restore_shape=[4]), ValueError,
         ["restoreShapeOptional is (4,) but unpermutedTokens is (4, 3)"], _outputs(_UNPERMUTE)),
    Case("restore_shape a str", _UNPERMUTE, dict(restore_shape="43"), TypeError,
         ["restoreShapeOptional must be a sequence of ints or None, not str"]),
    Case("restore_shape holding a float", _UNPERMUTE, dict(restore_shape=(4, 3.0)), TypeError,
         ["restoreShapeOptional must be a sequence of ints, not one holding float"]),
    Case("restore_shape past int64", _UNPERMUTE, dict(restore_shape=(4, 2**63)), ValueError,
         ["restoreShapeOptional holds 9223372036854775808, outside the int64 range"]),
    Case("padded_mode 2", _UNPERMUTE, dict(padded_mode=2), ValueError, ["paddedMode = 2 must be a bool"]),
    Case("sorted_indices of 7", _UNPERMUTE, dict(sorted_indices=torch.randperm(7).int()), ValueError,
         ["permutedTokens has 8 rows but sortedIndices has 7"]),
    Case("probs of 5 rows", _UNPERMUTE, dict(probs=torch.rand(5, 2)), ValueError,
         ["routingMapOptional has 4 rows but probsOptional has 5"]),
    Case("8 rows, not a multiple of T = 3", _UNPERMUTE,
         dict(routing_map=torch.ones(3, 2).bool(), probs=torch.rand(3, 2)), ValueError,
         ["permutedTokens has 8 rows, not a multiple of T = 3 (paddedMode false: N = T*K)"]),
    Case("probs FLOAT64", _UNPERMUTE, dict(probs=torch.rand(4, 2, dtype=torch.float64)), ValueError,
         ["probsOptional has dtype DOUBLE but must be FLOAT32, FLOAT16 or BFLOAT16"]),
    Case("a sorted index out of range", _UNPERMUTE, dict(sorted_indices=_i32(0, 1, 2, 3, 4, 5, 6, 8)), ValueError,
         ["sortedIndices[7] = 8 is outside [0, 8) for paddedMode false"]),
    Case("a routing_map row of one entry", _UNPERMUTE, dict(routing_map=torch.tensor([[1, 1], [1, 0], [1, 1],
                                                                                       [1, 1]]).bool()),
         ValueError, ["routingMapOptional row 1 has 1 routed entries but paddedMode false needs K = N / T = 2"]),
    # MoeTokenUnpermuteWithRoutingMapGrad: restoreShape (an aclIntArray), what probs requires, dtypes, index data.
    Case("restore_shape (3, 4)", _UNPERMUTE_GRAD, dict(restore_shape=(3, 4)), ValueError,
         ["restoreShapeOptional is (3, 4) but unpermutedTokensGrad is (3, 3)"], _outputs(_UNPERMUTE_GRAD)),
    Case("restore_shape [3, 3, 1]", _UNPERMUTE_GRAD, dict(restore_shape=[3, 3, 1]), ValueError,
         ["restoreShapeOptional is (3, 3, 1) but unpermutedTokensGrad is (3, 3)"], _outputs(_UNPERMUTE_GRAD)),
    Case("restore_shape '33'", _UNPERMUTE_GRAD, dict(restore_shape="33"), TypeError,
         ["restoreShapeOptional must be a sequence of ints or None, not str"]),
    Case("restore_shape 3", _UNPERMUTE_GRAD, dict(restore_shape=3), TypeError,
         ["restoreShapeOptional must be a sequence of ints or None, not int"]),
    Case("restore_shape (3.0, 3)", _UNPERMUTE_GRAD, dict(restore_shape=(3.0, 3)), TypeError,
         ["restoreShapeOptional must be a sequence of ints, not one holding float"]),
    Case("restore_shape (2**63, 3)", _UNPERMUTE_GRAD, dict(restore_shape=(2**63, 3)), ValueError,
         ["restoreShapeOptional holds 9223372036854775808, outside the int64 range"]),
    Case("probs without permuted_tokens", _UNPERMUTE_GRAD, dict(permuted_tokens=None), ValueError,
         ["permutedTokensOptional (required with probsOptional) is required but is null"], _outputs(_UNPERMUTE_GRAD)),
    Case("probs without routing_map", _UNPERMUTE_GRAD, dict(routing_map=None), ValueError,
         ["routingMapOptional (required with probsOptional) is required but is null"], _outputs(_UNPERMUTE_GRAD)),
    Case("float16 permuted_tokens", _UNPERMUTE_GRAD, dict(permuted_tokens=torch.randn(6, 3).half()), ValueError,
         ["permutedTokensOptional is FLOAT16 but unpermutedTokensGrad is FLOAT32"], _outputs(_UNPERMUTE_GRAD)),
    Case("int64 out_index", _UNPERMUTE_GRAD, dict(out_index=torch.arange(6)), ValueError,
         ["outIndex has dtype INT64 but must be INT32"], _outputs(_UNPERMUTE_GRAD)),
    Case("out_index of 5", _UNPERMUTE_GRAD, dict(out_index=torch.randperm(5).int()), ValueError,
         ["permuteTokenId has 6 rows but outIndex has 5"], _outputs(_UNPERMUTE_GRAD)),
    Case("1-D probs", _UNPERMUTE_GRAD, dict(probs=torch.rand(12)), ValueError,
         ["probsOptional must be 2-D but has shape (12,)"], _outputs(_UNPERMUTE_GRAD)),
    Case("drop_and_pad, N % E", _UNPERMUTE_GRAD, dict(drop_and_pad=True), ValueError,
         ["outIndex has 6 rows, not a multiple of E = 4 (dropAndPad true: N = E*C)"], _outputs(_UNPERMUTE_GRAD)),
    Case("out_index value 6", _UNPERMUTE_GRAD, dict(out_index=_i32(0, 6, 1, 2, 3, 4)), ValueError,
         ["outIndex[1] = 6 is outside [0, 6) for dropAndPad false"], _outputs(_UNPERMUTE_GRAD)),
    Case("routing_map row of 3", _UNPERMUTE_GRAD,
         dict(routing_map=torch.tensor([[1, 1, 1, 0], [0, 1, 1, 0], [0, 0, 1, 1]]).bool()), ValueError,
         ["routingMapOptional row 0 has 3 routed entries but dropAndPad false needs K = N / T = 2"],
         _outputs(_UNPERMUTE_GRAD)),
    Case("drop_and_pad, permute_token_id 3", _UNPERMUTE_GRAD,
         dict(drop_and_pad=True, probs=None, routing_map=None, permute_token_id=_i32(0, 0, 1, 1, 2, 3)), ValueError,
         ["permuteTokenId[5] = 3 is outside [0, 3) for dropAndPad true"],
         dict(permutedTokensGradOut=torch.empty(6, 3))),
]

# None for every required tensor, and a non-tensor (a numpy array, a list, an int) for every tensor, of every
# function.
for _function, (_key, _names) in _FUNCTIONS.items():
    for _arg, _name in _names.items():
        if _name not in _C.INFO[_key]["inputs"]:
            continue
        if _name in _C.INFO[_key]["required"]:
            CASES.append(Case(f"{_arg} None", _function, {_arg: None}, ValueError,
                              [f"{_name} is required but is null"], _outputs(_function)))
        what = "a torch.Tensor" if _name in _C.INFO[_key]["required"] else "a torch.Tensor or None"
        for _value, _type in ((lambda v=_base(_function)[_arg]: v.numpy(), "numpy.ndarray"),
                              (lambda v=_base(_function)[_arg]: v.tolist(), "list"), (lambda: 3, "int")):
            CASES.append(Case(f"{_arg} {_type}", _function, (lambda a=_arg, v=_value: {a: v()}), TypeError,
                              [f"{_name} must be {what}, not {_type}"]))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_argument_gives_one_line(case):
    kwargs = case.kwargs()
    with pytest.raises(case.error) as info:
        getattr(mt, case.function)(**kwargs)
    assert type(info.value) is case.error
    message = str(info.value)
    op = _C.INFO[_FUNCTIONS[case.function][0]]["name"]
    assert "\n" not in message and message.startswith(op + ": "), message
    for part in case.mentions:
        assert part in message, message
    if case.outputs is not None:  # the library's message: the C++ API's for the same call with its outputs
        assert _direct_message(case.function, kwargs, case.outputs) == message


def test_the_same_errors_without_the_dispatcher(monkeypatch):
    """The fallback path (torch.ops registration unavailable) gives the same exceptions."""
    entry = {name: auto for name, (_cpu, auto) in mt._KERNELS.items()}
    monkeypatch.setattr(mt, "_ENTRY", entry)
    for case in CASES:
        with pytest.raises(case.error) as info:
            getattr(mt, case.function)(**case.kwargs())
        assert "\n" not in str(info.value), case.name
        for part in case.mentions:
            assert part in str(info.value), case.name


def test_valid_output_too_large_for_this_machine_is_a_memory_error():
    # Drop-and-pad without probs: T = 2**45 tokens of H = 8 is 1 PiB of tokensGradOut, a valid call.
    grad = torch.zeros(2, 8)
    with pytest.raises(MemoryError) as info:
        mt.moe_token_permute_with_routing_map_grad(grad, _i32(0, 1), 2, 2**45, drop_and_pad=True)
    assert str(info.value) == ("MoeTokenPermuteWithRoutingMapGrad: cannot allocate tokensGradOut of shape "
                               "(35184372088832, 8) and dtype FLOAT32 (1125899906842624 bytes)")


def test_output_query_reports_the_outputs():
    key = "finalize_routing_v2_grad"
    grad_y, idx = torch.randn(4, 3), torch.randperm(8).int()
    desc = [(t.data_ptr(), _C.DTYPES[_CODES[t.dtype]], tuple(t.shape), tuple(t.stride())) for t in (grad_y, idx)]
    names = _C.OPS[key][0]
    tensors = desc + [None] * (len(names) - 2)
    assert _C.finalize_routing_v2_grad_outputs(tensors, [1, 0, 2, 4]) == {
        "gradExpandedXOut": (_C.DTYPES["FLOAT32"], (2, 4, 3)), "gradScalesOut": None}
    with pytest.raises(ValueError, match=r"^MoeFinalizeRoutingV2Grad: expertCapacity = 0 must be > 0 for dropPadMode 1$"):
        _C.finalize_routing_v2_grad_outputs(tensors, [1, 0, 2, 0])


# --- gradients are not differentiable ---------------------------------------------------------------------

_DOUBLE = "the gradients of {} are not differentiable (double backward is not supported)"
_OUTPUTS = "the outputs of {} are not differentiable"


def _raises_one_line(fn, message):
    with pytest.raises(RuntimeError) as info:
        fn()
    assert str(info.value) == message


def test_double_backward_through_the_combine():
    x = torch.randn(8, 3, requires_grad=True)
    scales = torch.rand(4, 2, requires_grad=True)
    bias = torch.randn(2, 3, requires_grad=True)
    expert_idx = _i32(0, 1, 1, 0, 0, 1, 1, 0).view(4, 2)
    idx = torch.randperm(8).int()
    for mode in (0, 2):
        out = mt.moe_finalize_routing_v2(x, idx, bias=bias, scales=scales, expert_idx=expert_idx, drop_pad_mode=mode)
        grads = torch.autograd.grad(out.square().sum(), (x, scales, bias), create_graph=True)
        plain = torch.autograd.grad(
            mt.moe_finalize_routing_v2(x, idx, bias=bias, scales=scales, expert_idx=expert_idx,
                                       drop_pad_mode=mode).square().sum(), (x, scales, bias))
        for g, p in zip(grads, plain):  # the first derivatives are as without create_graph
            assert g.requires_grad and torch.equal(g, p)
            _raises_one_line(lambda g=g: g.sum().backward(),
                             "MoeFinalizeRoutingV2Grad: " + _DOUBLE.format("moe_finalize_routing_v2"))


def test_double_backward_through_the_dispatch():
    tokens = torch.randn(4, 3, requires_grad=True)
    probs = torch.rand(4, 2, requires_grad=True)
    rmap = torch.tensor([[1, 0], [0, 1], [1, 0], [0, 1]]).bool()
    perm, pprobs, _ = mt.moe_token_permute_with_routing_map(tokens, rmap, probs)
    v, w = torch.randn(perm.shape, requires_grad=True), torch.randn(pprobs.shape, requires_grad=True)
    grads = torch.autograd.grad((perm, pprobs), (tokens, probs), (v, w), create_graph=True)
    for g in grads:
        _raises_one_line(lambda g=g: g.sum().backward(),
                         "MoeTokenPermuteWithRoutingMapGrad: " + _DOUBLE.format("moe_token_permute_with_routing_map"))
    # The dispatch is linear: with constant grad outputs its gradients are constants, as torch's own are.
    perm, pprobs, _ = mt.moe_token_permute_with_routing_map(tokens, rmap, probs)
    grads = torch.autograd.grad((perm.sum() + pprobs.sum()), (tokens, probs), create_graph=True)
    assert not any(g.requires_grad for g in grads)


@pytest.mark.parametrize("through_ops", [True, False])
def test_gradient_operator_outputs_are_not_differentiable(monkeypatch, through_ops):
    if not through_ops:
        monkeypatch.setattr(mt, "_ENTRY", {name: auto for name, (_cpu, auto) in mt._KERNELS.items()})
    grad_y = torch.randn(4, 3, requires_grad=True)
    x = torch.randn(8, 3)
    gx, gs = mt.moe_finalize_routing_v2_grad(grad_y, torch.randperm(8).int(), expanded_x=x, scales=torch.rand(4, 2))
    for out in (gx, gs):
        _raises_one_line(lambda out=out: out.sum().backward(),
                         "MoeFinalizeRoutingV2Grad: " + _OUTPUTS.format("moe_finalize_routing_v2_grad"))
    grad = torch.randn(8, 3, requires_grad=True)
    tg, pg = mt.moe_token_permute_with_routing_map_grad(grad, torch.randperm(8).int(), 2, 4,
                                                        permuted_probs_output_grad=torch.randn(8),
                                                        routing_map=torch.ones(4, 2).bool())
    _raises_one_line(lambda: (tg.sum() + pg.sum()).backward(),
                     "MoeTokenPermuteWithRoutingMapGrad: " + _OUTPUTS.format("moe_token_permute_with_routing_map_grad"))
    grad = torch.randn(8, 3, requires_grad=True)
    out = mt.moe_init_routing_v2_grad(grad, torch.randperm(8).int(), 2)
    _raises_one_line(lambda: out.sum().backward(),
                     "MoeInitRoutingV2Grad: " + _OUTPUTS.format("moe_init_routing_v2_grad"))
    g = torch.randn(3, 3, requires_grad=True)
    pg, prg = mt.moe_token_unpermute_with_routing_map_grad(
        g, torch.randperm(6).int(), _i32(0, 0, 1, 1, 2, 2), torch.ones(3, 2).bool(), torch.randn(6, 3),
        torch.rand(3, 2))
    for out in (pg, prg):
        _raises_one_line(lambda out=out: out.sum().backward(), "MoeTokenUnpermuteWithRoutingMapGrad: " +
                         _OUTPUTS.format("moe_token_unpermute_with_routing_map_grad"))
    assert not mt.moe_init_routing_v2_grad(grad.detach(), torch.randperm(8).int(), 2).requires_grad
    # Without an input that requires grad (or without grad mode) the outputs are plain tensors.
    tg, pg = mt.moe_token_permute_with_routing_map_grad(grad.detach(), torch.randperm(8).int(), 2, 4)
    assert not tg.requires_grad and pg is None
    with torch.no_grad():
        gx, _ = mt.moe_finalize_routing_v2_grad(grad_y, torch.randperm(8).int(), expanded_x=x)
    assert not gx.requires_grad and gx.grad_fn is None


def test_torch_ops_called_directly_run_the_query():
    """torch.ops.moegrad.* called directly (their schemas parse the arguments) still query before allocating."""
    with pytest.raises(ValueError, match=r"^MoeTokenPermuteWithRoutingMapGrad: permutedTokenOutputGrad has 8 rows"):
        torch.ops.moegrad.moe_token_permute_with_routing_map_grad(torch.randn(8, 3), torch.randperm(8).int(), 2,
                                                                  2**40)


def test_misaligned_tensor_is_rejected():
    """A tensor whose data pointer is off its element size (frombuffer at a byte offset): the library's
    message, through the public function and torch.ops alike."""
    buf = bytearray(4 * 32 + 2)
    tokens = torch.frombuffer(buf, dtype=torch.float32, offset=2, count=32).view(4, 8)
    assert tokens.data_ptr() % 4 != 0
    rmap = torch.zeros(4, 3, dtype=torch.bool)
    rmap[:, :2] = True
    want = ("MoeTokenPermuteWithRoutingMap: tokens has dtype FLOAT32 but its data pointer is not aligned to its "
            "4-byte elements")
    with pytest.raises(ValueError) as e:
        mt.moe_token_permute_with_routing_map(tokens, rmap, num_out_tokens=8)
    assert str(e.value) == want
    with pytest.raises(ValueError) as e:
        torch.ops.moegrad.moe_token_permute_with_routing_map(tokens, rmap, None, 8, False)
    assert str(e.value) == want
