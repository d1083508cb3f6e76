// The bad-argument tables of MoeFinalizeRoutingV2 and MoeTokenPermuteWithRoutingMap: every rule of
// docs/ops/finalize_routing_v2.md and docs/ops/token_permute_with_routing_map.md, each with its status, a piece
// of its one-line message, and the promise that no byte of any tensor changed. Each case runs through the C++
// API and the aclnn API (where the mutation is expressible there); metadata errors must come from phase one
// (leaving *executor null), index-data errors from phase two.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_finalize_routing_v2.h"
#include "aclnnop/aclnn_moe_token_permute_with_routing_map.h"
#include "moegrad/ops.hpp"
#include "tests/support/api.h"
#include "tests/support/error_table.h"
#include "tests/support/test_tensor.h"

namespace moegrad::testing {
namespace {

// `c` with its float tensors in the dtypes of their groups (OpInfo's DTypeGroup), inputs refilled.
template <typename Args>
Case<Args> WithDTypes(Case<Args> c, DTypes d) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < Case<Args>::kSlots; ++i) {
    const TensorArg<Args>& arg = OpInfo<Args>::kTensors[i];
    if (!c.t[i] || arg.group == DTypeGroup::kNone) continue;
    c.t[i] = TestTensor(arg.group == DTypeGroup::kTokens ? d.tokens : d.weights, c.t[i]->sizes_vector());
    if (arg.role == ArgRole::kInput) c.t[i]->FillUniform(rng);
  }
  return c;
}

// Every (tokens, weights) dtype combination of a valid case is valid, through both APIs.
template <typename Args, typename MakeCase>
void CheckEveryDTypeCombinationValid(MakeCase make) {
  for (const DTypes& d : kEveryDTypes) {
    SCOPED_TRACE(DTypesName(d));
    Case<Args> c = WithDTypes(make(), d);
    Outcome o = CppOutcome(c);
    EXPECT_EQ(o.code, 0) << o.message;
    o = AclOutcome(c);
    EXPECT_EQ(o.code, 0) << o.message;
  }
}

// --- MoeFinalizeRoutingV2: slots x, idx, x1, x2, bias, scales, expertIdx, out --------------------------------
using FinalizeRoutingV2Case = Case<FinalizeRoutingV2Args>;
constexpr int64_t kR = 4, kK = 2, kH = 5, kE = 3, kC = 3;

FinalizeRoutingV2Case FinalizeRoutingV2Base(int64_t mode) {
  FinalizeRoutingV2Case c;
  const bool dp = mode == 1 || mode == 3;
  const DType f = DType::kFloat32;
  c.t[0] = dp ? TestTensor(f, {kE, kC, kH}) : TestTensor(f, {kR * kK, kH});
  c.t[1] = TestTensor(DType::kInt32, {kR * kK});
  for (int64_t i = 0; i < kR * kK; ++i) c.t[1]->SetI(i, dp && i % 3 == 0 ? -1 : i);
  c.t[2] = TestTensor(f, {kR, kH});
  c.t[3] = TestTensor(f, {kR, kH});
  c.t[4] = TestTensor(f, {kE, kH});
  c.t[5] = TestTensor(f, {kR, kK});
  c.t[6] = TestTensor(DType::kInt32, {kR, kK});
  for (int64_t i = 0; i < kR * kK; ++i) c.t[6]->SetI(i, i % kE);
  c.t[7] = TestTensor(f, {kR, kH});
  std::mt19937_64 rng(3);
  for (int i : {0, 2, 3, 4, 5}) c.t[i]->FillUniform(rng);
  c.attrs = {mode};
  return c;
}

TEST(ForwardErrors, FinalizeRoutingV2) {
  using Row = ErrorRow<FinalizeRoutingV2Args>;
  using C = FinalizeRoutingV2Case;
  const DType f32 = DType::kFloat32, f16 = DType::kFloat16, i32 = DType::kInt32;
  auto set = [](int slot, TestTensor t) { return [slot, t](C& c) { c.t[slot] = t; }; };
  auto idx_value = [](int64_t i, int64_t v) { return [i, v](C& c) { c.t[1]->SetI(i, v); }; };
  for (int64_t mode : {0, 1, 2, 3}) {
    SCOPED_TRACE("dropPadMode " + std::to_string(mode));
    const bool dp = mode == 1 || mode == 3;
    const int64_t rows = dp ? kE * kC : kR * kK;
    std::vector<Row> table = {
        {"no expandedX", [](C& c) { c.t[0].reset(); }, kNullptr, "expandedX is required", 1, kAclOnly},
        {"no expandedRowIdx", [](C& c) { c.t[1].reset(); }, kNullptr, "expandedRowIdx is required", 1, kAclOnly},
        {"no out", [](C& c) { c.t[7].reset(); }, kNullptr, "out is required", 1, kAclOnly},
        {"bias without expertIdx", [](C& c) { c.t[6].reset(); }, kNullptr, "expertIdx (required with bias)", 1},
        {"dropPadMode 4", [](C& c) { c.attrs[0] = 4; }, kInvalid, "dropPadMode = 4 must be", 1},
        {"dropPadMode -1", [](C& c) { c.attrs[0] = -1; }, kInvalid, "dropPadMode = -1 must be", 1},
        {"out 3-D", set(7, TestTensor(f32, {kR, kH, 1})), kInvalid, "out must be 2-D", 1},
        {"expandedX INT32", [](C& c) { c.t[0] = TestTensor(DType::kInt32, c.t[0]->sizes_vector()); }, kInvalid,
         "expandedX has dtype INT32 but must be FLOAT32, FLOAT16 or BFLOAT16", 1},
        {"expandedRowIdx 2-D", set(1, TestTensor(i32, {kR, kK})), kInvalid, "expandedRowIdx must be 1-D", 1},
        {"expandedRowIdx INT64", set(1, TestTensor(DType::kInt64, {kR * kK})), kInvalid,
         "expandedRowIdx has dtype INT64 but must be INT32", 1},
        {"scales rows", set(5, TestTensor(f32, {kR + 1, kK})), kInvalid, "scales has shape (5, 2) but must be", 1},
        {"scales 1-D", set(5, TestTensor(f32, {kR * kK})), kInvalid, "scales must be 2-D", 1},
        {"pairs != R*K", set(5, TestTensor(f32, {kR, kK + 1})), kInvalid,
         "expandedRowIdx has 8 elements but must have R*K = 4 * 3", 1},
        {"pairs not a multiple of R",
         [](C& c) {
           c.t[5].reset(); c.t[4].reset(); c.t[1] = TestTensor(DType::kInt32, {kR * kK + 1});
         },
         kInvalid, "expandedRowIdx has 9 elements, not a multiple of the 4 rows of out", 1},
        {"R = 0 with pairs",
         [](C& c) {
           c.t[5].reset(); c.t[4].reset(); c.t[6].reset(); c.t[2].reset(); c.t[3].reset();
           c.t[7] = TestTensor(DType::kFloat32, {0, kH});
         },
         kInvalid, "expandedRowIdx has 8 elements but out has 0 rows", 1},
        {"expertIdx shape", set(6, TestTensor(i32, {kR, kK + 1})), kInvalid, "expertIdx has shape (4, 3) but must be (4, 2)", 1},
        {"expertIdx FLOAT32", set(6, TestTensor(f32, {kR, kK})), kInvalid, "expertIdx has dtype FLOAT32 but must be INT32", 1},
        {"expandedX rows", set(0, dp ? TestTensor(f32, {kE, kC, kH + 1}) : TestTensor(f32, {rows + 1, kH})), kInvalid,
         dp ? "expandedX has shape (3, 3, 6) but dropPadMode" : "expandedX has shape (9, 5) but must be (8, 5)", 1},
        {"expandedX rank", set(0, dp ? TestTensor(f32, {rows, kH}) : TestTensor(f32, {kE, kC, kH})), kInvalid,
         "expandedX has shape", 1},
        {"bias columns", set(4, TestTensor(f32, {kE, kH + 1})), kInvalid, "bias has 6 columns but out has H = 5", 1},
        {"bias 1-D", set(4, TestTensor(f32, {kE})), kInvalid, "bias must be 2-D", 1},
        {"x1 shape", set(2, TestTensor(f32, {kR, kH + 1})), kInvalid, "x1 has shape (4, 6) but must be (4, 5)", 1},
        {"x2 shape", set(3, TestTensor(f32, {kR + 1, kH})), kInvalid, "x2 has shape (5, 5) but must be (4, 5)", 1},
        // The tokens' group: expandedX, x1, x2, bias and out share expandedX's dtype; scales (the weights) has its
        // own, any float dtype.
        {"x1 dtype", set(2, TestTensor(f16, {kR, kH})), kInvalid,
         "x1 is FLOAT16 but expandedX is FLOAT32 (expandedX, x1, x2, bias and out share a dtype)", 1},
        {"x2 dtype", set(3, TestTensor(DType::kBFloat16, {kR, kH})), kInvalid,
         "x2 is BFLOAT16 but expandedX is FLOAT32 (expandedX, x1, x2, bias and out share a dtype)", 1},
        {"bias dtype", set(4, TestTensor(f16, {kE, kH})), kInvalid, "bias is FLOAT16 but expandedX is FLOAT32", 1},
        {"out dtype", set(7, TestTensor(f16, {kR, kH})), kInvalid,
         "out is FLOAT16 but expandedX is FLOAT32 (expandedX, x1, x2, bias and out share a dtype)", 1},
        {"out dtype of FLOAT16 scales",
         [](C& c) {
           c.t[5] = TestTensor(DType::kFloat16, {kR, kK});
           c.t[7] = TestTensor(DType::kFloat16, {kR, kH});
         },
         kInvalid, "out is FLOAT16 but expandedX is FLOAT32 (expandedX, x1, x2, bias and out share a dtype)", 1},
        {"scales INT32", set(5, TestTensor(i32, {kR, kK})), kInvalid,
         "scales has dtype INT32 but must be FLOAT32, FLOAT16 or BFLOAT16", 1},
        {"scales DOUBLE", set(5, TestTensor(DType::kFloat64, {kR, kK})), kInvalid,
         "scales has dtype DOUBLE but must be FLOAT32, FLOAT16 or BFLOAT16", 1},
        {"out aliases x1", [](C& c) { c.source[7] = 2; }, kInvalid, "out overlaps x1", 1},
        {"out aliases expandedX", [](C& c) { c.t[7] = c.t[2]; c.source[7] = 0;
           c.tweak = [](int i, TensorView* v) { if (i == 7) { v->sizes[0] = kR; v->sizes[1] = kH; v->rank = 2; v->strides[0] = kH; v->strides[1] = 1; } }; },
         kInvalid, "out overlaps expandedX", 1, kCppOnly},
        {"negative stride", [](C& c) { c.tweak = [](int i, TensorView* v) { if (i == 2) v->strides[1] = -1; }; },
         kInvalid, "x1 has negative stride -1 in dimension 1", 1, kCppOnly},
        {"null data", [](C& c) { c.tweak = [](int i, TensorView* v) { if (i == 5) v->data = nullptr; }; },
         kNullptr, "scales has shape (4, 2) but its data pointer is null", 1, kCppOnly},
        {"index past the rows", idx_value(3, rows), kInvalid,
         std::string("expandedRowIdx[3] = ") + std::to_string(rows) + " is outside [" + (dp ? "-1" : "0") + ", " +
             std::to_string(rows) + ") for dropPadMode " + std::to_string(mode),
         2},
        {"index -2", idx_value(7, -2), kInvalid, "expandedRowIdx[7] = -2 is outside", 2},
        {"expertIdx past bias rows", [](C& c) { c.t[6]->SetI(5, kE); }, kInvalid,
         "expertIdx[5] = 3 is outside [0, 3), the rows of bias", 2},
        {"expertIdx negative", [](C& c) { c.t[6]->SetI(0, -1); }, kInvalid, "expertIdx[0] = -1 is outside", 2},
    };
    if (dp) {
      table.push_back({"bias rows != E", set(4, TestTensor(f32, {kE + 1, kH})), kInvalid,
                       "bias has 4 rows but expandedX has E = 3 experts", 1});
    } else {
      table.push_back({"index -1 without drops", idx_value(2, -1), kInvalid, "expandedRowIdx[2] = -1 is outside [0, 8)", 2});
    }
    CheckTable(table, [mode] { return FinalizeRoutingV2Base(mode); });
  }
}

TEST(ForwardErrors, FinalizeRoutingV2ValidCallsSucceed) {
  for (int64_t mode : {0, 1, 2, 3}) {
    SCOPED_TRACE("dropPadMode " + std::to_string(mode));
    CheckEveryDTypeCombinationValid<FinalizeRoutingV2Args>([mode] { return FinalizeRoutingV2Base(mode); });
  }
}

// --- MoeTokenPermuteWithRoutingMap: slots tokens, routingMap, probs, permuteTokensOut, permuteProbsOut,
// sortedIndicesOut -------------------------------------------------------------------------------------------
using TokenPermuteWithRoutingMapCase = Case<TokenPermuteWithRoutingMapArgs>;
constexpr int64_t kT = 5, kPE = 4, kPH = 3, kPK = 2, kPC = 3;

TokenPermuteWithRoutingMapCase TokenPermuteWithRoutingMapBase(bool dp) {
  TokenPermuteWithRoutingMapCase c;
  const DType f = DType::kFloat32;
  const int64_t n = dp ? kPE * kPC : kT * kPK;
  c.t[0] = TestTensor(f, {kT, kPH});
  c.t[1] = TestTensor(DType::kInt8, {kT, kPE});
  for (int64_t t = 0; t < kT; ++t) {
    for (int64_t e = 0; e < kPE; ++e) c.t[1]->SetI(t * kPE + e, (e == t % kPE || e == (t + 1) % kPE) ? 1 : 0);
  }
  c.t[2] = TestTensor(f, {kT, kPE});
  c.t[3] = TestTensor(f, {n, kPH});
  c.t[4] = TestTensor(f, {n});
  c.t[5] = TestTensor(DType::kInt32, {n});
  std::mt19937_64 rng(5);
  c.t[0]->FillUniform(rng);
  c.t[2]->FillUniform(rng);
  c.attrs = {n, dp};
  return c;
}

TEST(ForwardErrors, TokenPermuteWithRoutingMap) {
  using Row = ErrorRow<TokenPermuteWithRoutingMapArgs>;
  using C = TokenPermuteWithRoutingMapCase;
  const DType f32 = DType::kFloat32;
  auto set = [](int slot, TestTensor t) { return [slot, t](C& c) { c.t[slot] = t; }; };
  for (bool dp : {false, true}) {
    SCOPED_TRACE(dp ? "drop-and-pad" : "dropless");
    const int64_t n = dp ? kPE * kPC : kT * kPK;
    std::vector<Row> table = {
        {"no tokens", [](C& c) { c.t[0].reset(); }, kNullptr, "tokens is required", 1, kAclOnly},
        {"no routingMap", [](C& c) { c.t[1].reset(); }, kNullptr, "routingMap is required", 1, kAclOnly},
        {"no permuteTokensOut", [](C& c) { c.t[3].reset(); }, kNullptr, "permuteTokensOut is required", 1, kAclOnly},
        {"no sortedIndicesOut", [](C& c) { c.t[5].reset(); }, kNullptr, "sortedIndicesOut is required", 1, kAclOnly},
        {"probs without permuteProbsOut", [](C& c) { c.t[4].reset(); }, kNullptr,
         "permuteProbsOut (required with probs)", 1},
        {"tokens 1-D", set(0, TestTensor(f32, {kT})), kInvalid, "tokens must be 2-D", 1},
        {"tokens INT32", set(0, TestTensor(DType::kInt32, {kT, kPH})), kInvalid, "tokens has dtype INT32 but must be", 1},
        {"routingMap rows", set(1, TestTensor(DType::kInt8, {kT + 1, kPE})), kInvalid,
         "routingMap has shape (6, 4) but must be (5, -1)", 1},
        {"routingMap 1-D", set(1, TestTensor(DType::kInt8, {kT})), kInvalid, "routingMap must be 2-D", 1},
        {"routingMap INT32", set(1, TestTensor(DType::kInt32, {kT, kPE})), kInvalid,
         "routingMap has dtype INT32 but must be INT8 or BOOL", 1},
        {"routingMap FLOAT32", set(1, TestTensor(f32, {kT, kPE})), kInvalid, "routingMap has dtype FLOAT32", 1},
        {"probs shape", set(2, TestTensor(f32, {kT, kPE + 1})), kInvalid, "probs has shape (5, 5) but must be (5, 4)", 1},
        // Two dtype groups: tokens and permuteTokensOut; probs and permuteProbsOut, whatever the tokens' dtype is.
        {"probs dtype", set(2, TestTensor(DType::kFloat16, {kT, kPE})), kInvalid,
         "permuteProbsOut is FLOAT32 but probs is FLOAT16 (probs and permuteProbsOut share a dtype)", 1},
        {"probs INT8", set(2, TestTensor(DType::kInt8, {kT, kPE})), kInvalid,
         "probs has dtype INT8 but must be FLOAT32, FLOAT16 or BFLOAT16", 1},
        {"numOutTokens -1", [](C& c) { c.attrs[0] = -1; }, kInvalid,
         "numOutTokens = -1 is outside [0, T*E] = [0, 20]", 1},
        {"numOutTokens > T*E", [](C& c) { c.attrs[0] = kT * kPE + 1; }, kInvalid, "numOutTokens = 21 is outside", 1},
        {"numOutTokens not a multiple", [](C& c) { c.attrs[0] = 7; }, kInvalid,
         dp ? "numOutTokens = 7 is not a multiple of E = 4" : "numOutTokens = 7 is not a multiple of T = 5", 1},
        {"permuteTokensOut rows", set(3, TestTensor(f32, {n + 1, kPH})), kInvalid, "permuteTokensOut has shape", 1},
        {"permuteTokensOut H", set(3, TestTensor(f32, {n, kPH + 1})), kInvalid, "permuteTokensOut has shape", 1},
        {"permuteTokensOut dtype", set(3, TestTensor(DType::kBFloat16, {n, kPH})), kInvalid,
         "permuteTokensOut is BFLOAT16 but tokens is FLOAT32 (tokens and permuteTokensOut share a dtype)", 1},
        {"permuteTokensOut dtype of BFLOAT16 probs",
         [n](C& c) {
           c.t[2] = TestTensor(DType::kBFloat16, {kT, kPE});
           c.t[3] = TestTensor(DType::kBFloat16, {n, kPH});
           c.t[4] = TestTensor(DType::kBFloat16, {n});
         },
         kInvalid, "permuteTokensOut is BFLOAT16 but tokens is FLOAT32 (tokens and permuteTokensOut share a dtype)", 1},
        {"permuteProbsOut shape", set(4, TestTensor(f32, {n, 1})), kInvalid, "permuteProbsOut has shape", 1},
        {"permuteProbsOut dtype", set(4, TestTensor(DType::kFloat16, {n})), kInvalid,
         "permuteProbsOut is FLOAT16 but probs is FLOAT32 (probs and permuteProbsOut share a dtype)", 1},
        {"permuteProbsOut dtype of BFLOAT16 tokens",
         [n](C& c) {
           c.t[0] = TestTensor(DType::kBFloat16, {kT, kPH});
           c.t[3] = TestTensor(DType::kBFloat16, {n, kPH});
           c.t[4] = TestTensor(DType::kBFloat16, {n});
         },
         kInvalid, "permuteProbsOut is BFLOAT16 but probs is FLOAT32 (probs and permuteProbsOut share a dtype)", 1},
        {"sortedIndicesOut shape", set(5, TestTensor(DType::kInt32, {n + 2})), kInvalid, "sortedIndicesOut has shape", 1},
        {"sortedIndicesOut INT64", set(5, TestTensor(DType::kInt64, {n})), kInvalid,
         "sortedIndicesOut has dtype INT64 but must be INT32", 1},
        {"permuteProbsOut aliases probs",
         [n](C& c) {
           c.source[4] = 2;
           c.tweak = [n](int i, TensorView* v) {
             if (i == 4) *v = TensorView(v->data, v->dtype, {n});
           };
         },
         kInvalid, "permuteProbsOut overlaps probs", 1, kCppOnly},
        {"negative size", [](C& c) { c.tweak = [](int i, TensorView* v) { if (i == 0) v->sizes[0] = -1; }; },
         kInvalid, "tokens has negative size -1", 1, kCppOnly},
        {"null data", [](C& c) { c.tweak = [](int i, TensorView* v) { if (i == 3) v->data = nullptr; }; },
         kNullptr, "permuteTokensOut has shape", 1, kCppOnly},
    };
    if (!dp) {
      table.push_back({"row with an extra entry", [](C& c) { c.t[1]->SetI(2 * kPE + 0, 5); },
                       kInvalid, "routingMap row 2 has 3 routed entries but dropless mode needs exactly K = numOutTokens / T = 10 / 5 = 2", 2});
      table.push_back({"row short of K", [](C& c) { c.t[1]->SetI(4 * kPE + 0, 0); }, kInvalid,
                       "routingMap row 4 has 1 routed entries", 2});
      // A map of 40 experts: read 16 bytes at a time, the last 8 one by one; row 3 has a third entry in each part.
      for (int64_t extra : {12, 37}) {
        table.push_back({"wide map, row with an extra entry",
                         [extra](C& c) {
                           constexpr int64_t kWide = 40;
                           c.t[1] = TestTensor(DType::kInt8, {kT, kWide});
                           for (int64_t t = 0; t < kT; ++t) {
                             for (int64_t e = 0; e < kWide; ++e) c.t[1]->SetI(t * kWide + e, (e == t || e == 20 + t) ? 1 : 0);
                           }
                           c.t[1]->SetI(3 * kWide + extra, 1);
                           c.t[2] = TestTensor(DType::kFloat32, {kT, kWide});
                         },
                         kInvalid,
                         "routingMap row 3 has 3 routed entries but dropless mode needs exactly K = numOutTokens / T = "
                         "10 / 5 = 2",
                         2});
      }
      table.push_back({"K = 0 but routed", [](C& c) { c.attrs[0] = 0; c.t[3] = TestTensor(DType::kFloat32, {0, kPH});
                         c.t[4] = TestTensor(DType::kFloat32, {0}); c.t[5] = TestTensor(DType::kInt32, {0}); },
                       kInvalid, "routingMap row 0 has 2 routed entries but dropless mode needs exactly K = numOutTokens / T = 0 / 5 = 0", 2});
    }
    CheckTable(table, [dp] { return TokenPermuteWithRoutingMapBase(dp); });
  }
}

TEST(ForwardErrors, TokenPermuteWithRoutingMapValidCallsSucceed) {
  for (bool dp : {false, true}) {
    SCOPED_TRACE(dp ? "drop-and-pad" : "dropless");
    CheckEveryDTypeCombinationValid<TokenPermuteWithRoutingMapArgs>([dp] { return TokenPermuteWithRoutingMapBase(dp); });
  }
}

// The workspace rules of phase two: too small is INVALID, null with a non-zero size is NULLPTR.
TEST(ForwardErrors, TokenPermuteWithRoutingMapWorkspace) {
  TokenPermuteWithRoutingMapCase c = TokenPermuteWithRoutingMapBase(false);
  const TokenPermuteWithRoutingMapArgs a = c.CppArgs();
  Plan plan;
  ASSERT_TRUE(PlanTokenPermuteWithRoutingMap(a, &plan).ok());
  ASSERT_GT(plan.workspace_size(), 0u);
  const auto before = c.t[3]->Snapshot();
  std::vector<char> ws(plan.workspace_size());
  Status s = plan.Run(ws.data(), plan.workspace_size() - 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalid);
  EXPECT_NE(s.message().find("MoeTokenPermuteWithRoutingMap: workspaceSize"), std::string::npos) << s.message();
  s = plan.Run(nullptr, plan.workspace_size());
  EXPECT_EQ(s.code(), StatusCode::kNullptr);
  EXPECT_TRUE(c.t[3]->SameBytes(before));
}

}  // namespace
}  // namespace moegrad::testing
