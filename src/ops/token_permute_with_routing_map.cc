#include "src/ops/token_permute_with_routing_map.h"

#include <algorithm>
#include <new>

#include "src/core/int_math.h"
#include "src/core/workspace.h"
#include "src/kernels/token_permute_with_routing_map.h"
#include "src/ops/checks.h"

namespace moegrad::ops {
namespace {

constexpr const char* kOp = "MoeTokenPermuteWithRoutingMap";

// Token blocks of the index computation: enough for every thread to get several, few enough that the
// per-(block, expert) counts stay a small workspace.
constexpr int64_t kMinBlockTokens = 64;
constexpr int64_t kMaxBlocks = 256;
constexpr int64_t kMaxCountEntries = int64_t{1} << 20;

class PermutePlan final : public internal::PlanBase {
 public:
  PermutePlan() : PlanBase(kOp) {}

  kernels::PermuteProblem problem;
  int64_t num_out_tokens = 0;
  uint64_t counts_at = 0, bad_at = 0, totals_at = 0, starts_at = 0, running_at = 0, src_at = 0;
  uint64_t token_offsets_at = 0, token_slots_at = 0;  // drop-and-pad only

  void SetWorkspace(const internal::WorkspaceLayout& layout) { workspace_size_ = layout.size(); }

 protected:
  Status Execute(void* workspace) const override {
    using internal::WorkspaceLayout;
    const kernels::PermuteProblem& q = problem;
    kernels::PermuteScratch s;
    s.counts = WorkspaceLayout::At<int64_t>(workspace, counts_at);
    s.bad = WorkspaceLayout::At<int64_t>(workspace, bad_at);
    s.totals = WorkspaceLayout::At<int64_t>(workspace, totals_at);
    s.starts = WorkspaceLayout::At<int64_t>(workspace, starts_at);
    s.running = WorkspaceLayout::At<int64_t>(workspace, running_at);
    s.src = WorkspaceLayout::At<int32_t>(workspace, src_at);
    if (q.drop_and_pad) {
      s.token_offsets = WorkspaceLayout::At<int64_t>(workspace, token_offsets_at);
      s.token_slots = WorkspaceLayout::At<int64_t>(workspace, token_slots_at);
    }
    // The routing map is index data: in dropless mode every row must hold exactly K entries. The count
    // pass writes only workspace, so an error leaves the outputs untouched.
    kernels::PermuteCount(q, s);
    if (!q.drop_and_pad) {
      for (int64_t b = 0; b < q.blocks; ++b) {
        if (s.bad[2 * b] < 0) continue;
        return MakeStatus(StatusCode::kInvalid,
                          "%s: routingMap row %lld has %lld routed entries but dropless mode needs exactly "
                          "K = numOutTokens / T = %lld / %lld = %lld in every row",
                          kOp, static_cast<long long>(s.bad[2 * b]), static_cast<long long>(s.bad[2 * b + 1]),
                          static_cast<long long>(num_out_tokens), static_cast<long long>(q.tokens),
                          static_cast<long long>(q.topk));
      }
    }
    kernels::PermuteIndices(q, s);
    kernels::PermuteRows(q, s);
    return Status::Ok();
  }
};

}  // namespace

Status PlanTokenPermuteWithRoutingMap(const TokenPermuteWithRoutingMapParams& p,
                                      std::unique_ptr<internal::PlanBase>* plan) {
  const ArgChecker c(kOp);
  MOEGRAD_RETURN_IF_ERROR(c.Required(p.tokens, "tokens"));
  MOEGRAD_RETURN_IF_ERROR(c.Required(p.routing_map, "routingMap"));
  MOEGRAD_RETURN_IF_ERROR(c.Required(p.permute_tokens, "permuteTokensOut"));
  MOEGRAD_RETURN_IF_ERROR(c.Required(p.sorted_indices, "sortedIndicesOut"));
  if (p.probs != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Required(p.permute_probs, "permuteProbsOut (required with probs)"));
  }
  const struct {
    const TensorView* t;
    const char* name;
  } all[] = {{p.tokens, "tokens"},
             {p.routing_map, "routingMap"},
             {p.probs, "probs"},
             {p.permute_tokens, "permuteTokensOut"},
             {p.permute_probs, "permuteProbsOut"},
             {p.sorted_indices, "sortedIndicesOut"}};
  for (const auto& a : all) {
    if (a.t != nullptr) MOEGRAD_RETURN_IF_ERROR(c.WellFormed(*a.t, a.name));
  }

  const TensorView& tokens = *p.tokens;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(tokens, "tokens", 2));
  MOEGRAD_RETURN_IF_ERROR(c.FloatDType(tokens, "tokens"));
  const int64_t T = tokens.sizes[0];
  const int64_t H = tokens.sizes[1];
  const TensorView& map = *p.routing_map;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(map, "routingMap", 2));
  MOEGRAD_RETURN_IF_ERROR(c.Shape(map, "routingMap", {T, -1}));
  if (map.dtype != DType::kInt8 && map.dtype != DType::kBool) {
    return c.Fail(StatusCode::kInvalid, "routingMap has dtype %s but must be INT8 or BOOL", DTypeName(map.dtype));
  }
  const int64_t E = map.sizes[1];
  if (p.probs != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Shape(*p.probs, "probs", {T, E}));
    MOEGRAD_RETURN_IF_ERROR(c.SameDType(*p.probs, "probs", tokens, "tokens"));
  }

  const int64_t n = p.num_out_tokens;
  const int64_t max_out = T * E;  // no overflow: WellFormed bounds routingMap's element count
  if (n < 0 || n > max_out) {
    return c.Fail(StatusCode::kInvalid, "numOutTokens = %lld is outside [0, T*E] = [0, %lld]",
                  static_cast<long long>(n), static_cast<long long>(max_out));
  }
  int64_t K = 0, C = 0;
  if (!p.drop_and_pad && T > 0) {
    if (n % T != 0) {
      return c.Fail(StatusCode::kInvalid,
                    "numOutTokens = %lld is not a multiple of T = %lld; dropless mode outputs T*K rows",
                    static_cast<long long>(n), static_cast<long long>(T));
    }
    K = n / T;
  }
  if (p.drop_and_pad && E > 0) {
    if (n % E != 0) {
      return c.Fail(StatusCode::kInvalid,
                    "numOutTokens = %lld is not a multiple of E = %lld; drop-and-pad mode outputs E*C rows",
                    static_cast<long long>(n), static_cast<long long>(E));
    }
    C = n / E;
  }
  // sortedIndices is INT32: dropless it holds rows [0, N), drop-and-pad tokens [0, T).
  const int64_t largest = p.drop_and_pad ? T - 1 : n - 1;
  if (n > 0 && largest > INT32_MAX) {
    return c.Fail(StatusCode::kInvalid, "sortedIndicesOut would hold %lld, which INT32 cannot represent",
                  static_cast<long long>(largest));
  }
  MOEGRAD_RETURN_IF_ERROR(c.Shape(*p.permute_tokens, "permuteTokensOut", {n, H}));
  MOEGRAD_RETURN_IF_ERROR(c.SameDType(*p.permute_tokens, "permuteTokensOut", tokens, "tokens"));
  if (p.probs != nullptr) {
    MOEGRAD_RETURN_IF_ERROR(c.Shape(*p.permute_probs, "permuteProbsOut", {n}));
    MOEGRAD_RETURN_IF_ERROR(c.SameDType(*p.permute_probs, "permuteProbsOut", tokens, "tokens"));
  }
  MOEGRAD_RETURN_IF_ERROR(c.Shape(*p.sorted_indices, "sortedIndicesOut", {n}));
  MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(*p.sorted_indices, "sortedIndicesOut", DType::kInt32));

  // Outputs (all[3..5]) must share no byte with an input or with each other; permuteProbsOut counts only
  // when it is written (probs given).
  for (int o = 3; o < 6; ++o) {
    if (all[o].t == nullptr || (o == 4 && p.probs == nullptr)) continue;
    MOEGRAD_RETURN_IF_ERROR(c.NoSelfOverlap(*all[o].t, all[o].name));
    for (int a = 0; a < 6; ++a) {
      if (a == o || all[a].t == nullptr || (a == 4 && p.probs == nullptr)) continue;
      MOEGRAD_RETURN_IF_ERROR(c.NoOverlap(*all[o].t, all[o].name, *all[a].t, all[a].name));
    }
  }

  auto out = std::unique_ptr<PermutePlan>(new (std::nothrow) PermutePlan);
  if (!out) return c.Fail(StatusCode::kRuntimeError, "cannot allocate the plan");
  kernels::PermuteProblem& q = out->problem;
  q.element_bytes = tokens.element_size();
  q.tokens = T;
  q.experts = E;
  q.hidden = H;
  q.out_rows = n;
  q.topk = K;
  q.capacity = C;
  q.drop_and_pad = p.drop_and_pad;
  int64_t block_tokens = std::max(kMinBlockTokens, internal::CeilDiv(T, kMaxBlocks));
  if (E > 0) {
    const int64_t max_blocks = std::max<int64_t>(1, kMaxCountEntries / E);
    block_tokens = std::max(block_tokens, internal::CeilDiv(T, max_blocks));
  }
  q.block_tokens = block_tokens;
  q.blocks = internal::CeilDiv(T, block_tokens);
  q.src_tokens = kernels::RowView::Of2D(tokens);
  q.map = static_cast<const uint8_t*>(map.data);
  q.map_row_stride = map.strides[0];
  q.map_col_stride = map.strides[1];
  if (p.probs != nullptr) {
    q.probs = static_cast<const char*>(p.probs->data);
    q.probs_row_stride = p.probs->strides[0];
    q.probs_col_stride = p.probs->strides[1];
    q.dst_probs = kernels::FlatView::Of(*p.permute_probs);
  }
  q.dst_tokens = kernels::RowView::Of2D(*p.permute_tokens);
  q.sorted_indices = kernels::FlatView::Of(*p.sorted_indices);
  out->num_out_tokens = n;

  internal::WorkspaceLayout layout;
  out->counts_at = layout.Add(static_cast<uint64_t>(q.blocks) * static_cast<uint64_t>(E), sizeof(int64_t));
  out->bad_at = layout.Add(2 * static_cast<uint64_t>(q.blocks), sizeof(int64_t));
  out->totals_at = layout.Add(static_cast<uint64_t>(E), sizeof(int64_t));
  out->starts_at = layout.Add(static_cast<uint64_t>(E) + 1, sizeof(int64_t));
  out->running_at = layout.Add(static_cast<uint64_t>(E), sizeof(int64_t));
  out->src_at = layout.Add(static_cast<uint64_t>(n), sizeof(int32_t));
  if (p.drop_and_pad) {
    out->token_offsets_at = layout.Add(static_cast<uint64_t>(T) + 1, sizeof(int64_t));
    out->token_slots_at = layout.Add(static_cast<uint64_t>(n), sizeof(int64_t));
  }
  if (layout.overflowed()) return c.Fail(StatusCode::kInvalid, "the workspace size overflows 64 bits");
  out->SetWorkspace(layout);
  *plan = std::move(out);
  return Status::Ok();
}

}  // namespace moegrad::ops
