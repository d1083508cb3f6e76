// The bad-argument table of MoeTokenUnpermuteWithRoutingMapGrad: every rule of
// docs/ops/token_unpermute_with_routing_map_grad.md in its check order, each with its status, a piece of its
// one-line message and the promise that no byte of any tensor changed, through the C++ API and the aclnn API
// (metadata errors from phase one, index data from phase two); restoreShape; the unwritten probsGradOut; the
// workspace rules.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "aclnnop/aclnn_moe_token_unpermute_with_routing_map_grad.h"
#include "moegrad/ops.hpp"
#include "tests/support/api.h"
#include "tests/support/error_table.h"
#include "tests/support/test_tensor.h"

namespace moegrad::testing {
namespace {

using Args = TokenUnpermuteWithRoutingMapGradArgs;
using UCase = Case<Args>;
enum Slot { kG, kOI, kTI, kMap, kPerm, kProbs, kPG, kPrG };
constexpr int64_t kT = 3, kH = 5, kN = 6;
constexpr DType kF32 = DType::kFloat32, kI32 = DType::kInt32, kI8 = DType::kInt8;

// Dropless: T 3, E 4, K 2 (token t routed to experts t and t + 1). Drop-and-pad: E 3, C 2, the forward's indices
// of a map routing token t to expert t. Both with probs.
UCase Base(bool dp, bool probs = true) {
  const int64_t E = dp ? 3 : 4;
  UCase c;
  std::mt19937_64 rng(5);
  c.t[kG] = TestTensor(kF32, {kT, kH});
  c.t[kG]->FillUniform(rng);
  c.t[kOI] = TestTensor(kI32, {kN});
  c.t[kTI] = TestTensor(kI32, {kN});
  const int64_t pad_token[kN] = {0, 0, 1, 1, 2, 2};   // permuteTokenId: tokens ascending
  const int64_t pad_row[kN] = {0, 3, 1, 4, 2, 5};     // and their rows e*C + c
  for (int64_t i = 0; i < kN; ++i) {
    c.t[kOI]->SetI(i, dp ? pad_row[i] : (i * 5) % kN);
    c.t[kTI]->SetI(i, dp ? pad_token[i] : i / 2);
  }
  c.t[kMap] = TestTensor(kI8, {kT, E});
  std::vector<uint8_t> routed(static_cast<size_t>(kT * E), 0);
  for (int64_t t = 0; t < kT; ++t) {
    routed[static_cast<size_t>(t * E + t)] = 1;
    if (!dp) routed[static_cast<size_t>(t * E + t + 1)] = 1;
  }
  SetRoutingMap(*c.t[kMap], routed);
  c.t[kPerm] = TestTensor(kF32, {kN, kH});
  c.t[kPerm]->FillUniform(rng);
  if (probs) {
    c.t[kProbs] = TestTensor(kF32, {kT, E});
    c.t[kProbs]->FillUniform(rng);
    c.t[kPrG] = TestTensor(kF32, {kT, E});
  }
  c.t[kPG] = TestTensor(kF32, {kN, kH});
  c.attrs = {dp};
  return c;
}

TEST(TokenUnpermuteWithRoutingMapGradErrors, ValidCallsSucceed) {
  for (bool dp : {false, true}) {
    for (bool probs : {false, true}) {
      UCase c = Base(dp, probs);
      const Outcome o = CppOutcome(c);
      EXPECT_EQ(o.code, 0) << o.message;
      UCase c2 = Base(dp, probs);
      EXPECT_EQ(AclOutcome(c2).code, 0) << AclOutcome(c2).message;
    }
  }
  // Dropless: permuteTokenId is never read, so any values (MindSpeed passes sortedIndices) will do.
  UCase c = Base(false);
  for (int64_t i = 0; i < kN; ++i) c.t[kTI]->SetI(i, -100 - i);
  EXPECT_EQ(CppOutcome(c).code, 0) << CppOutcome(c).message;
  // Drop-and-pad: the routing map is checked but never read (any counts).
  UCase d = Base(true);
  SetRoutingMap(*d.t[kMap], std::vector<uint8_t>(9, 1));
  EXPECT_EQ(CppOutcome(d).code, 0) << CppOutcome(d).message;
}

TEST(TokenUnpermuteWithRoutingMapGradErrors, EveryRuleInOrder) {
  using Row = ErrorRow<Args>;
  using C = UCase;
  auto set = [](int slot, TestTensor t) { return [slot, t](C& c) { c.t[slot] = t; }; };
  auto index = [](int slot, int64_t i, int64_t v) { return [slot, i, v](C& c) { c.t[slot]->SetI(i, v); }; };
  for (bool dp : {false, true}) {
    SCOPED_TRACE(dp ? "dropAndPad" : "dropless");
    const int64_t E = dp ? 3 : 4;
    const std::string mode = dp ? "true" : "false";
    std::vector<Row> table = {
        {"no unpermutedTokensGrad", [](C& c) { c.t[kG].reset(); }, kNullptr,
         "unpermutedTokensGrad is required but is null", 1, kAclOnly},
        {"no outIndex", [](C& c) { c.t[kOI].reset(); }, kNullptr, "outIndex is required but is null", 1, kAclOnly},
        {"no permuteTokenId", [](C& c) { c.t[kTI].reset(); }, kNullptr, "permuteTokenId is required but is null", 1,
         kAclOnly},
        {"no permutedTokensGradOut", [](C& c) { c.t[kPG].reset(); }, kNullptr,
         "permutedTokensGradOut is required but is null", 1, kAclOnly},
        {"probs without permutedTokens", [](C& c) { c.t[kPerm].reset(); }, kNullptr,
         "permutedTokensOptional (required with probsOptional) is required but is null", 1},
        {"probs without routingMap", [](C& c) { c.t[kMap].reset(); }, kNullptr,
         "routingMapOptional (required with probsOptional) is required but is null", 1},
        {"probs without probsGradOut", [](C& c) { c.t[kPrG].reset(); }, kNullptr,
         "probsGradOutOptional (required with probsOptional) is required but is null", 1},
        {"null data", [](C& c) { c.tweak = [](int i, TensorView* v) { if (i == kPerm) v->data = nullptr; }; },
         kNullptr, "permutedTokensOptional has shape (6, 5) but its data pointer is null", 1, kCppOnly},
        {"negative stride", [](C& c) { c.tweak = [](int i, TensorView* v) { if (i == kG) v->strides[1] = -1; }; },
         kInvalid, "unpermutedTokensGrad has negative stride -1 in dimension 1", 1, kCppOnly},
        {"unpermutedTokensGrad 1-D", set(kG, TestTensor(kF32, {kT * kH})), kInvalid,
         "unpermutedTokensGrad must be 2-D but has shape (15,)", 1},
        {"outIndex 2-D", set(kOI, TestTensor(kI32, {kN, 1})), kInvalid, "outIndex must be 1-D but has shape (6, 1)", 1},
        {"permuteTokenId 2-D", set(kTI, TestTensor(kI32, {kN, 1})), kInvalid,
         "permuteTokenId must be 1-D but has shape (6, 1)", 1},
        {"routingMap 1-D", set(kMap, TestTensor(kI8, {kT})), kInvalid,
         "routingMapOptional must be 2-D but has shape (3,)", 1},
        {"permutedTokens 1-D", set(kPerm, TestTensor(kF32, {kN})), kInvalid,
         "permutedTokensOptional must be 2-D but has shape (6,)", 1},
        {"probs 1-D", set(kProbs, TestTensor(kF32, {kT})), kInvalid, "probsOptional must be 2-D but has shape (3,)",
         1},
        {"permutedTokensGradOut 1-D", set(kPG, TestTensor(kF32, {kN})), kInvalid,
         "permutedTokensGradOut must be 2-D but has shape (6,)", 1},
        {"probsGradOut 1-D", set(kPrG, TestTensor(kF32, {kT})), kInvalid,
         "probsGradOutOptional must be 2-D but has shape (3,)", 1},
        {"rank before dtype", [](C& c) { c.t[kG] = TestTensor(kI32, {kT}); }, kInvalid,
         "unpermutedTokensGrad must be 2-D", 1},
        {"unpermutedTokensGrad INT32", set(kG, TestTensor(kI32, {kT, kH})), kInvalid,
         "unpermutedTokensGrad has dtype INT32 but must be FLOAT32, FLOAT16 or BFLOAT16", 1},
        {"outIndex INT64", set(kOI, TestTensor(DType::kInt64, {kN})), kInvalid,
         "outIndex has dtype INT64 but must be INT32", 1},
        {"permuteTokenId FLOAT32", set(kTI, TestTensor(kF32, {kN})), kInvalid,
         "permuteTokenId has dtype FLOAT32 but must be INT32", 1},
        {"routingMap INT32", set(kMap, TestTensor(kI32, {kT, E})), kInvalid,
         "routingMapOptional has dtype INT32 but must be INT8 or BOOL", 1},
        {"permutedTokens FLOAT16", set(kPerm, TestTensor(DType::kFloat16, {kN, kH})), kInvalid,
         "permutedTokensOptional is FLOAT16 but unpermutedTokensGrad is FLOAT32 (unpermutedTokensGrad, "
         "permutedTokensOptional and permutedTokensGradOut share a dtype)", 1},
        {"probs INT8", set(kProbs, TestTensor(kI8, {kT, E})), kInvalid,
         "probsOptional has dtype INT8 but must be FLOAT32, FLOAT16 or BFLOAT16", 1},
        {"permutedTokensGradOut BFLOAT16", set(kPG, TestTensor(DType::kBFloat16, {kN, kH})), kInvalid,
         "permutedTokensGradOut is BFLOAT16 but unpermutedTokensGrad is FLOAT32 (unpermutedTokensGrad, "
         "permutedTokensOptional and permutedTokensGradOut share a dtype)", 1},
        {"probsGradOut FLOAT16", set(kPrG, TestTensor(DType::kFloat16, {kT, E})), kInvalid,
         "probsGradOutOptional is FLOAT16 but probsOptional is FLOAT32 (probsOptional and probsGradOutOptional "
         "share a dtype)", 1},
        {"dtype before shape", [E](C& c) { c.t[kPrG] = TestTensor(DType::kFloat16, {kT, E + 1}); }, kInvalid,
         "probsGradOutOptional is FLOAT16 but probsOptional is FLOAT32", 1},
        {"permuteTokenId rows", set(kTI, TestTensor(kI32, {kN - 1})), kInvalid,
         "permuteTokenId has 5 rows but outIndex has 6", 1},
        {"permutedTokens rows", set(kPerm, TestTensor(kF32, {kN - 1, kH})), kInvalid,
         "permutedTokensOptional has 5 rows but outIndex has 6", 1},
        {"permutedTokens H", set(kPerm, TestTensor(kF32, {kN, kH - 1})), kInvalid,
         "permutedTokensOptional has 4 columns but unpermutedTokensGrad has 5", 1},
        {"routingMap rows", set(kMap, TestTensor(kI8, {kT - 1, E})), kInvalid,
         "routingMapOptional has 2 rows but unpermutedTokensGrad has 3", 1},
        {"probs rows", set(kProbs, TestTensor(kF32, {kT - 1, E})), kInvalid,
         "probsOptional has 2 rows but unpermutedTokensGrad has 3", 1},
        {"routingMap shape", set(kProbs, TestTensor(kF32, {kT, E + 2})), kInvalid,
         "routingMapOptional has shape (3, " + std::to_string(E) + ") but probsOptional has shape (3, " +
             std::to_string(E + 2) + ")", 1},
        {"permutedTokensGradOut shape", set(kPG, TestTensor(kF32, {kN, kH + 1})), kInvalid,
         "permutedTokensGradOut has shape (6, 6) but must be (6, 5)", 1},
        {"probsGradOut shape", set(kPrG, TestTensor(kF32, {kT, E + 1})), kInvalid,
         "probsGradOutOptional has shape (3, " + std::to_string(E + 1) + ") but must be (3, " + std::to_string(E) +
             ")", 1},
        {"dropless N % T", [](C& c) {
           c.attrs[0] = 0;
           c.t[kG] = TestTensor(kF32, {4, kH});
           c.t[kMap] = TestTensor(kI8, {4, 4});
           c.t[kProbs] = TestTensor(kF32, {4, 4});
           c.t[kPrG] = TestTensor(kF32, {4, 4});
         }, kInvalid, "outIndex has 6 rows, not a multiple of T = 4 (dropAndPad false: N = T*K)", 1},
        {"pad N % E", [](C& c) {
           c.attrs[0] = 1;
           c.t[kMap] = TestTensor(kI8, {kT, 4});
           c.t[kProbs] = TestTensor(kF32, {kT, 4});
           c.t[kPrG] = TestTensor(kF32, {kT, 4});
         }, kInvalid, "outIndex has 6 rows, not a multiple of E = 4 (dropAndPad true: N = E*C)", 1},
        {"pad N % E, map only", [](C& c) {
           c.attrs[0] = 1;
           c.t[kProbs].reset();
           c.t[kPrG].reset();
           c.t[kMap] = TestTensor(kI8, {kT, 5});
         }, kInvalid, "outIndex has 6 rows, not a multiple of E = 5 (dropAndPad true: N = E*C)", 1},
        {"permutedTokensGradOut on permutedTokens", [](C& c) { c.source[kPG] = kPerm; }, kInvalid,
         "permutedTokensGradOut overlaps permutedTokensOptional in memory", 1},
        {"probsGradOut on probs", [](C& c) { c.source[kPrG] = kProbs; }, kInvalid,
         "probsGradOutOptional overlaps probsOptional in memory", 1},
        {"permutedTokensGradOut stride 0",
         [](C& c) { c.tweak = [](int i, TensorView* v) { if (i == kPG) v->strides[0] = 0; }; }, kInvalid,
         "permutedTokensGradOut has elements that share memory", 1, kCppOnly},
        {"outIndex 6", index(kOI, 3, kN), kInvalid, "outIndex[3] = 6 is outside [0, 6) for dropAndPad " + mode, 2},
        {"outIndex -1", index(kOI, 5, -1), kInvalid, "outIndex[5] = -1 is outside [0, 6) for dropAndPad " + mode,
         2},
    };
    if (dp) {
      table.push_back({"permuteTokenId 3", index(kTI, 2, kT), kInvalid,
                       "permuteTokenId[2] = 3 is outside [0, 3) for dropAndPad true", 2});
      table.push_back({"permuteTokenId -2", index(kTI, 0, -2), kInvalid,
                       "permuteTokenId[0] = -2 is outside [0, 3) for dropAndPad true", 2});
      table.push_back({"outIndex before permuteTokenId", [](C& c) { c.t[kTI]->SetI(0, -2); c.t[kOI]->SetI(4, 9); },
                       kInvalid, "outIndex[4] = 9 is outside [0, 6)", 2});
    } else {
      table.push_back({"routingMap row with 3 entries", [](C& c) { SetRoutingMap(*c.t[kMap], {1, 1, 0, 0, 0, 1, 1,
                       1, 0, 0, 1, 1}); }, kInvalid,
                       "routingMapOptional row 1 has 3 routed entries but dropAndPad false needs K = N / T = 2", 2});
      table.push_back({"routingMap row with 1 entry", [](C& c) { SetRoutingMap(*c.t[kMap], {1, 1, 0, 0, 0, 1, 1,
                       0, 0, 0, 0, 1}); }, kInvalid,
                       "routingMapOptional row 2 has 1 routed entries but dropAndPad false needs K = N / T = 2", 2});
      table.push_back({"outIndex before routingMap", [](C& c) {
                         SetRoutingMap(*c.t[kMap], std::vector<uint8_t>(12, 0));
                         c.t[kOI]->SetI(1, 6);
                       }, kInvalid, "outIndex[1] = 6 is outside [0, 6)", 2});
    }
    CheckTable(table, [dp] { return Base(dp); });
  }
}

// Base(false) with WideRouting's map of 100 experts, and probs and probsGradOut to match.
UCase WideMap() {
  UCase c = Base(false);
  c.t[kMap] = TestTensor(kI8, {kT, 100});
  SetRoutingMap(*c.t[kMap], WideRouting());
  c.t[kProbs] = TestTensor(kF32, {kT, 100});
  std::mt19937_64 rng(7);
  c.t[kProbs]->FillUniform(rng);
  c.t[kPrG] = TestTensor(kF32, {kT, 100});
  return c;
}

TEST(TokenUnpermuteWithRoutingMapGradErrors, WideRoutingMapRowsAreCountedWhole) {
  CheckTable(WideRoutingMapRows<Args>(kMap, "dropAndPad"), WideMap);
}

// N past INT32 indexing: index views of 2^31 elements of stride 0 over one element, rows of zero width.
TEST(TokenUnpermuteWithRoutingMapGradErrors, RowsBeyondInt32) {
  int32_t index = 0;
  float none = 0.0f;
  const int64_t N = int64_t{1} << 31;
  Args a;
  a.unpermuted_tokens_grad = TensorView(&none, kF32, {1, 0});
  a.out_index = TensorView(&index, kI32, {N}, {0});
  a.permute_token_id = TensorView(&index, kI32, {N}, {0});
  a.permuted_tokens_grad = TensorView(&none, kF32, {N, 0});
  const Status s = TokenUnpermuteWithRoutingMapGrad(a);
  EXPECT_EQ(s.code(), StatusCode::kInvalid);
  ExpectErrorMessage(s.message(), "MoeTokenUnpermuteWithRoutingMapGrad", "N = 2147483648 rows cannot be indexed by "
                     "INT32");
}

// restoreShape through both APIs: (T, H) passes, anything else is INVALID after the divisibility rules.
TEST(TokenUnpermuteWithRoutingMapGradErrors, RestoreShape) {
  struct Shape {
    std::vector<int64_t> v;
    const char* message;  // null: valid
  };
  const Shape shapes[] = {{{3, 5}, nullptr},
                          {{3, 4}, "restoreShapeOptional is (3, 4) but unpermutedTokensGrad is (3, 5)"},
                          {{4, 5}, "restoreShapeOptional is (4, 5) but unpermutedTokensGrad is (3, 5)"},
                          {{3, 5, 1}, "restoreShapeOptional is (3, 5, 1) but unpermutedTokensGrad is (3, 5)"},
                          {{15}, "restoreShapeOptional is (15,) but unpermutedTokensGrad is (3, 5)"},
                          {{}, "restoreShapeOptional is () but unpermutedTokensGrad is (3, 5)"}};
  for (bool dp : {false, true}) {
    for (const Shape& sh : shapes) {
      SCOPED_TRACE(sh.message ? sh.message : "valid");
      UCase c = Base(dp);
      Args a = c.CppArgs();
      a.restore_shape = sh.v;
      std::vector<std::vector<uint8_t>> before;
      for (auto& t : c.t) before.push_back(t ? t->Snapshot() : std::vector<uint8_t>());
      const Status s = TokenUnpermuteWithRoutingMapGrad(a);
      if (sh.message == nullptr) {
        EXPECT_TRUE(s.ok()) << s.message();
      } else {
        EXPECT_EQ(s.code(), StatusCode::kInvalid);
        ExpectErrorMessage(s.message(), "MoeTokenUnpermuteWithRoutingMapGrad", sh.message);
        for (int i = 0; i < UCase::kSlots; ++i) {
          if (c.t[i]) {
            EXPECT_TRUE(c.t[i]->SameBytes(before[static_cast<size_t>(i)])) << i;
          }
        }
      }
      // aclnn: the same through an aclIntArray.
      UCase d = Base(dp);
      AclTensorPtr t[UCase::kSlots];
      for (int i = 0; i < UCase::kSlots; ++i) {
        if (d.t[i]) t[i].reset(AclOf(*d.t[i]));
      }
      aclIntArray* restore = aclCreateIntArray(sh.v.data(), sh.v.size());
      uint64_t ws_size = 0;
      aclOpExecutor* ex = nullptr;
      const aclnnStatus st = aclnnMoeTokenUnpermuteWithRoutingMapGradGetWorkspaceSize(
          t[kG].get(), t[kOI].get(), t[kTI].get(), t[kMap].get(), t[kPerm].get(), t[kProbs].get(), dp, restore,
          t[kPG].get(), t[kPrG].get(), &ws_size, &ex);
      aclDestroyIntArray(restore);
      if (sh.message == nullptr) {
        ASSERT_EQ(st, ACLNN_SUCCESS) << aclGetRecentErrMsg();
        std::vector<int64_t> ws(ws_size / 8 + 1);
        EXPECT_EQ(aclnnMoeTokenUnpermuteWithRoutingMapGrad(ws.data(), ws_size, ex, nullptr), ACLNN_SUCCESS);
      } else {
        EXPECT_EQ(st, kInvalid);
        EXPECT_EQ(ex, nullptr);
        ExpectErrorMessage(aclGetRecentErrMsg(), "MoeTokenUnpermuteWithRoutingMapGrad", sh.message);
      }
    }
  }
  // The divisibility rule comes first.
  UCase c = Base(false);
  c.t[kG] = TestTensor(kF32, {4, kH});
  c.t[kMap] = TestTensor(kI8, {4, 4});
  c.t[kProbs] = TestTensor(kF32, {4, 4});
  c.t[kPrG] = TestTensor(kF32, {4, 4});
  Args a = c.CppArgs();
  a.restore_shape = std::vector<int64_t>{1, 1};
  const Status s = TokenUnpermuteWithRoutingMapGrad(a);
  ExpectErrorMessage(s.message(), "MoeTokenUnpermuteWithRoutingMapGrad", "not a multiple of T = 4");
}

// Without probs probsGradOut is neither checked nor written, and may overlap anything; permutedTokens, when
// given, is checked but not read.
TEST(TokenUnpermuteWithRoutingMapGradErrors, ProbsGradOutWithoutProbsIsLeftAlone) {
  for (bool dp : {false, true}) {
    for (Api api : {Api::kCpp, Api::kCppPlan, Api::kAclnn}) {
      UCase c = Base(dp, false);
      c.t[kPrG] = TestTensor(DType::kFloat16, {7, 2});
      TestCall<Args> call;
      for (int i = 0; i < UCase::kSlots; ++i) call.tensors[static_cast<size_t>(i)] = c.t[i] ? &*c.t[i] : nullptr;
      call.attrs = c.attrs;
      const auto before = c.t[kPrG]->Snapshot();
      const Status s = call.Run(api);
      EXPECT_TRUE(s.ok()) << s.message() << " " << ApiName(api);
      EXPECT_TRUE(c.t[kPrG]->SameBytes(before));
    }
    UCase c = Base(dp, false);
    c.t[kPerm] = TestTensor(DType::kBFloat16, {kN, kH});
    EXPECT_NE(CppOutcome(c).message.find("permutedTokensOptional is BFLOAT16"), std::string::npos);
    UCase d = Base(dp, false);
    Args a = d.CppArgs();
    a.probs_grad = d.t[kG]->view();
    const auto g_before = d.t[kG]->Snapshot();
    EXPECT_TRUE(TokenUnpermuteWithRoutingMapGrad(a).ok());
    EXPECT_TRUE(d.t[kG]->SameBytes(g_before));
  }
}

// The workspace rules of phase two: too small is INVALID, null with a non-zero size is NULLPTR; nothing written.
TEST(TokenUnpermuteWithRoutingMapGradErrors, Workspace) {
  UCase c = Base(true);
  const Args a = c.CppArgs();
  Plan plan;
  ASSERT_TRUE(PlanTokenUnpermuteWithRoutingMapGrad(a, &plan).ok());
  ASSERT_GT(plan.workspace_size(), 0u);
  const auto before = c.t[kPG]->Snapshot();
  const auto probs_before = c.t[kPrG]->Snapshot();
  std::vector<char> ws(plan.workspace_size());
  Status s = plan.Run(ws.data(), plan.workspace_size() - 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalid);
  EXPECT_NE(s.message().find("MoeTokenUnpermuteWithRoutingMapGrad: workspaceSize"), std::string::npos)
      << s.message();
  s = plan.Run(nullptr, plan.workspace_size());
  EXPECT_EQ(s.code(), StatusCode::kNullptr);
  EXPECT_TRUE(c.t[kPG]->SameBytes(before));
  EXPECT_TRUE(c.t[kPrG]->SameBytes(probs_before));
}

}  // namespace
}  // namespace moegrad::testing
