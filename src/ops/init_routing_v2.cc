// MoeInitRoutingV2: every rule of docs/ops/init_routing_v2.md, and the problem.
#include <cstdio>
#include <initializer_list>

#include "src/backend/init_routing_v2.h"
#include "src/ops/checks.h"
#include "src/ops/ops.h"

namespace moegrad::ops {
namespace {

bool HasShape(const TensorView& t, std::initializer_list<int64_t> want) {
  if (t.rank != static_cast<int>(want.size())) return false;
  for (int d = 0; d < t.rank; ++d) {
    if (t.sizes[d] != want.begin()[d]) return false;
  }
  return true;
}

// Each phase-one rule on one attribute: "<name> = <value> must be >= 0".
Status NonNegative(const ArgChecker& c, const char* name, int64_t v) {
  if (v < 0) return c.Fail(StatusCode::kInvalid, "%s = %lld must be >= 0", name, static_cast<long long>(v));
  return Status::Ok();
}

}  // namespace

Status Plan(const InitRoutingV2Args& a, PlanPtr* plan, std::vector<OutputSpec>* outputs) {
  using Problem = backend::InitRoutingV2Problem;
  using Info = OpInfo<InitRoutingV2Args>;
  const ArgChecker c(Problem::kName, outputs);
  const int64_t mode = a.drop_pad_mode;
  const int64_t flag = a.expert_tokens_count_or_cumsum_flag;
  const TensorView* count_out = Opt(a.expert_tokens_count_or_cumsum);
  const TensorView* before_out = Opt(a.expert_tokens_before_capacity);
  if (Info::WritesCountOrCumsum(a) && count_out == nullptr) {
    // Formatted only for the message: a call that has the output runs no printf code.
    char name[96];
    std::snprintf(name, sizeof(name),
                  "expertTokensCountOrCumsumOut (required with expertTokensCountOrCumsumFlag %lld)",
                  static_cast<long long>(flag));
    MOEGRAD_RETURN_IF_ERROR(c.OutputRequired(count_out, name));
  }
  if (Info::WritesBeforeCapacity(a)) {
    MOEGRAD_RETURN_IF_ERROR(c.OutputRequired(
        before_out, "expertTokensBeforeCapacityOut (required with expertTokensBeforeCapacityFlag true)"));
  }
  core::Device device = core::Device::kHost;
  MOEGRAD_RETURN_IF_ERROR(c.Tensors(a, &device));

  if (mode != 0 && mode != 1) {
    return c.Fail(StatusCode::kInvalid, "dropPadMode = %lld must be 0 (dropless) or 1 (drop/pad)",
                  static_cast<long long>(mode));
  }
  MOEGRAD_RETURN_IF_ERROR(NonNegative(c, "activeNum", a.active_num));
  MOEGRAD_RETURN_IF_ERROR(NonNegative(c, "expertNum", a.expert_num));
  MOEGRAD_RETURN_IF_ERROR(NonNegative(c, "expertCapacity", a.expert_capacity));
  if (flag < 0 || flag > 2) {
    return c.Fail(StatusCode::kInvalid,
                  "expertTokensCountOrCumsumFlag = %lld must be 0 (none), 1 (cumsum) or 2 (count)",
                  static_cast<long long>(flag));
  }
  const int64_t E = a.expert_num;
  const int64_t C = a.expert_capacity;
  if (mode == 1) {
    if (E == 0) return c.Fail(StatusCode::kInvalid, "expertNum = 0 must be > 0 for dropPadMode 1");
    if (C == 0) return c.Fail(StatusCode::kInvalid, "expertCapacity = 0 must be > 0 for dropPadMode 1");
  } else if (flag != 0 && E == 0) {
    return c.Fail(StatusCode::kInvalid, "expertNum = 0 must be > 0 for expertTokensCountOrCumsumFlag %lld",
                  static_cast<long long>(flag));
  }

  const TensorView& x = a.x;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(x, "x", 2));
  MOEGRAD_RETURN_IF_ERROR(c.FloatDType(x, "x"));
  const int64_t N = x.sizes[0];
  const int64_t H = x.sizes[1];
  const TensorView& idx = a.expert_idx;
  MOEGRAD_RETURN_IF_ERROR(c.Rank(idx, "expertIdx", 2));
  MOEGRAD_RETURN_IF_ERROR(c.DTypeIs(idx, "expertIdx", DType::kInt32));
  if (idx.sizes[0] != N) {
    return c.Fail(StatusCode::kInvalid, "expertIdx has shape %s but x has %lld rows", ShapeString(idx).text,
                  static_cast<long long>(N));
  }
  const int64_t K = idx.sizes[1];
  const int64_t P = N * K;  // no overflow: WellFormed bounds expertIdx's element count
  if (P > INT32_MAX) {
    return c.Fail(StatusCode::kInvalid, "N*K = %lld pairs do not fit INT32 expandedRowIdx",
                  static_cast<long long>(P));
  }
  int64_t rows = 0;  // of expandedX
  if (mode == 1) {
    if (__builtin_mul_overflow(E, C, &rows) || rows > INT32_MAX) {
      return c.Fail(StatusCode::kInvalid,
                    "expertNum*expertCapacity = %lld*%lld rows do not fit INT32 expandedRowIdx",
                    static_cast<long long>(E), static_cast<long long>(C));
    }
  } else {
    rows = a.active_num > 0 && a.active_num < P ? a.active_num : P;
  }

  // expandedXOut's shape, its message naming the attributes that fix it; then its dtype, or its report.
  const char* tokens_group = GroupNames<InitRoutingV2Args>(DTypeGroup::kTokens);
  if (mode == 0) {
    if (!c.querying() && !HasShape(a.expanded_x, {rows, H})) {
      return c.Fail(StatusCode::kInvalid, "expandedXOut has shape %s but must be %s (activeNum %lld)",
                    ShapeString(a.expanded_x).text, ShapeString({rows, H}).text,
                    static_cast<long long>(a.active_num));
    }
    MOEGRAD_RETURN_IF_ERROR(c.Output(&a.expanded_x, "expandedXOut", {rows, H}, x, "x", tokens_group));
  } else {
    if (!c.querying() && !HasShape(a.expanded_x, {E, C, H})) {
      return c.Fail(StatusCode::kInvalid,
                    "expandedXOut has shape %s but must be %s (expertNum %lld, expertCapacity %lld)",
                    ShapeString(a.expanded_x).text, ShapeString({E, C, H}).text, static_cast<long long>(E),
                    static_cast<long long>(C));
    }
    MOEGRAD_RETURN_IF_ERROR(c.Output(&a.expanded_x, "expandedXOut", {E, C, H}, x, "x", tokens_group));
  }
  MOEGRAD_RETURN_IF_ERROR(c.Output(&a.expanded_row_idx, "expandedRowIdxOut", {P}, DType::kInt32));
  const TensorView* counts = nullptr;
  if (Info::WritesCountOrCumsum(a)) {
    MOEGRAD_RETURN_IF_ERROR(c.Output(count_out, "expertTokensCountOrCumsumOut", {E}, DType::kInt32));
    counts = count_out;
  }
  if (Info::WritesBeforeCapacity(a)) {
    MOEGRAD_RETURN_IF_ERROR(c.Output(before_out, "expertTokensBeforeCapacityOut", {E}, DType::kInt32));
    counts = before_out;
  }
  if (c.querying()) return c.OutputsReported(a);
  MOEGRAD_RETURN_IF_ERROR(c.OutputsApart(a));

  Problem q;
  q.element_bytes = x.element_size();
  q.mode = mode;
  q.tokens = N;
  q.hidden = H;
  q.topk = K;
  q.pairs = P;
  q.active = mode == 0 ? rows : 0;
  q.experts = mode == 1 || flag != 0 ? E : 0;  // mode 0, flag 0: any id >= 0, expertNum unused
  q.capacity = mode == 1 ? C : 0;
  q.out_rows = rows;
  q.cumsum = mode == 0 && flag == 1;
  q.src_x = Rows2D(x);
  q.expert_idx = Flat(idx);
  q.dst_x = mode == 1 ? Rows3D(a.expanded_x) : Rows2D(a.expanded_x);
  q.row_idx = Flat(a.expanded_row_idx);
  if (counts != nullptr) q.counts = Flat(*counts);
  return MakePlan<InitRoutingV2Args>(q, device, plan);
}

}  // namespace moegrad::ops
