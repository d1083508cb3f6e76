"""Pure-PyTorch reference of the MoE dispatch/combine steps, written the way Megatron-LM's token dispatcher
does them (permute with a routing map via routing_map.T, index_select and masked_select; combine as an
index-based weighted sum). Differentiated with PyTorch autograd, they are the oracle of the tests."""
import torch


def permute_ref(tokens, routing_map, probs=None, num_out_tokens=None, drop_and_pad=False):
    """Returns (permuted (N, H), permuted_probs (N) or None, token_of_row (N) int64): the source token of
    every permuted row, expert-major."""
    num_tokens = tokens.shape[0]
    num_experts = routing_map.shape[1]
    if drop_and_pad:
        capacity = num_out_tokens // num_experts
        per_expert = routing_map.to(torch.int8).t().contiguous()  # (E, T)
        # Routed tokens first in ascending id, then the unrouted ones (padding), capacity of them per expert.
        token_of_row = torch.sort(per_expert, dim=1, descending=True, stable=True).indices[:, :capacity]
        permuted_probs = None
        if probs is not None:
            permuted_probs = probs.t().gather(1, token_of_row).reshape(-1)
        token_of_row = token_of_row.reshape(-1)
    else:
        # Contiguous (E, T) operands, as Megatron makes them: torch 1.13's masked_select backward scatters
        # the gradient of a non-contiguous input in storage order, not in the order it selected.
        mask = routing_map.bool().t().contiguous()
        token_of_row = torch.arange(num_tokens).unsqueeze(0).expand(num_experts, -1).masked_select(mask)
        permuted_probs = probs.t().contiguous().masked_select(mask) if probs is not None else None
    return tokens.index_select(0, token_of_row), permuted_probs, token_of_row


def expected_sorted_indices(token_of_row, drop_and_pad):
    """The operator's sortedIndices: the token-major slot -> row map (dropless), the token ids (drop/pad)."""
    if drop_and_pad:
        return token_of_row.to(torch.int32)
    return torch.sort(token_of_row, stable=True).indices.to(torch.int32)


def pair_rows(expanded_row_idx, num_tokens, topk, drop_pad_mode):
    """(R, K) row of expandedX read by pair (r, k): expert-major p = k*R + r in modes 0/1."""
    idx = expanded_row_idx.long()
    if drop_pad_mode in (0, 1):
        return idx.reshape(topk, num_tokens).t()
    return idx.reshape(num_tokens, topk)


def finalize_ref(expanded_x, expanded_row_idx, x1=None, x2=None, bias=None, scales=None, expert_idx=None,
                 drop_pad_mode=0, num_tokens=None, topk=None):
    hidden = expanded_x.shape[-1]
    if num_tokens is None:
        num_tokens = scales.shape[0]
    if topk is None:
        topk = expanded_row_idx.numel() // num_tokens
    rows = pair_rows(expanded_row_idx, num_tokens, topk, drop_pad_mode)
    flat = expanded_x.reshape(-1, hidden)
    kept = (rows >= 0).unsqueeze(-1).to(flat.dtype)
    if flat.shape[0] == 0:  # (E, 0, H): every pair dropped
        gathered = flat.new_zeros((num_tokens, topk, hidden))
    else:
        gathered = flat.index_select(0, rows.clamp(min=0).reshape(-1)).reshape(num_tokens, topk, hidden) * kept
    if bias is not None:
        gathered = gathered + bias.index_select(0, expert_idx.long().reshape(-1)).reshape(num_tokens, topk, hidden)
    if scales is not None:
        gathered = gathered * scales.unsqueeze(-1)
    out = gathered.sum(1)
    if x1 is not None:
        out = out + x1
    if x2 is not None:
        out = out + x2
    return out


def leaf64(t):
    """A float64 leaf copy of t (requires grad for floating tensors), for the reference's autograd."""
    if t is None:
        return None
    if t.is_floating_point():
        return t.detach().double().requires_grad_(True)
    return t


def tolerance(dtype):
    """(rtol, atol) for one rounding of an fp32 result to dtype, against float64."""
    return {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2 ** -8, 1e-5),
            torch.float16: (2 ** -11, 1e-5)}[dtype]


def assert_close(actual, expected, dtype, what=""):
    rtol, atol = tolerance(dtype)
    torch.testing.assert_close(actual.double(), expected.double(), rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def layer_checker(tokens_dtype):
    """check(actual, expected, what) for a whole MoE layer against its float64 autograd: one rounding of an fp32
    result (assert_close) with fp32 tokens; with bf16 tokens the experts' matmuls round to bf16 too (a few
    roundings on the way, not one), hence 2^-5."""
    if tokens_dtype == torch.bfloat16:
        return lambda a, b, what: torch.testing.assert_close(a.double(), b.double(), rtol=2 ** -5, atol=2 ** -5,
                                                             msg=lambda m: f"{what}: {m}")
    return lambda a, b, what: assert_close(a, b, torch.float32, what)


def make_view(t, layout, gen=None):
    """t's values in a tensor of the requested layout: 'contiguous', 'transposed' (column-major storage) or
    'sliced' (every other element of a wider tensor, offset by one). Always 1-D/2-D/3-D friendly."""
    if layout == "contiguous":
        return t.contiguous()
    if layout == "transposed":
        if t.dim() < 2:
            return make_view(t, "sliced")
        out = torch.empty(tuple(reversed(t.shape)), dtype=t.dtype).permute(*reversed(range(t.dim())))
    elif layout == "sliced":
        wide = torch.zeros(t.shape[:-1] + (2 * t.shape[-1] + 1,), dtype=t.dtype)
        out = wide[..., 1::2]
    else:
        raise ValueError(layout)
    out.copy_(t)
    if t.numel() > 1 and out.dim() >= 1:
        assert not out.is_contiguous()
    return out


def init_routing_ref(x, expert_idx, active_num=0, expert_capacity=0, expert_num=0, drop_pad_mode=0,
                     flag=0, before_capacity=False):
    """MoeInitRoutingV2 in plain PyTorch: the token-major pairs p = n*K + k stably sorted by expert. Returns
    (expanded_x, expanded_row_idx, count or cumsum or None, counts before capacity or None)."""
    num_tokens, topk = expert_idx.shape
    pairs = num_tokens * topk
    experts = expert_idx.reshape(-1).long()
    order = torch.sort(experts, stable=True).indices  # s: pairs by (expert, pair)
    position = torch.empty_like(order)
    position[order] = torch.arange(pairs)  # r(p)
    token = torch.arange(pairs) // max(topk, 1)
    if drop_pad_mode == 0:
        rows = min(active_num, pairs) if active_num > 0 else pairs
        expanded_x = x.index_select(0, token[order[:rows]])
        counts = None
        if flag in (1, 2):
            count = torch.bincount(experts, minlength=expert_num)
            counts = (torch.cumsum(count, 0) if flag == 1 else count).int()
        return expanded_x, position.int(), counts, None
    count = torch.bincount(experts, minlength=expert_num)
    start = torch.cumsum(count, 0) - count
    rank = position - start[experts]  # c_p
    kept = rank < expert_capacity
    row_idx = torch.where(kept, experts * expert_capacity + rank, torch.full_like(rank, -1))
    flat = torch.zeros((expert_num * expert_capacity, x.shape[1]), dtype=x.dtype)
    flat[row_idx[kept]] = x[token[kept]]
    before = count.int() if before_capacity else None
    return flat.reshape(expert_num, expert_capacity, x.shape[1]), row_idx.int(), None, before
