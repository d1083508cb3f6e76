// The bad-argument table of MoeTokenUnpermuteWithRoutingMap: every rule of
// docs/ops/token_unpermute_with_routing_map.md in its check order, each with its status, a piece of its one-line
// message and the promise that no byte of any tensor changed, through the C++ API and the aclnn API (metadata
// errors from phase one, index data from phase two); an unwritten permuteProbs is neither checked nor touched;
// the null workspaceSize / executor and workspace rules.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "aclnnop/aclnn_moe_token_unpermute_with_routing_map.h"
#include "moegrad/ops.hpp"
#include "tests/support/api.h"
#include "tests/support/error_table.h"
#include "tests/support/test_tensor.h"

namespace moegrad::testing {
namespace {

using Args = TokenUnpermuteWithRoutingMapArgs;
using UnpermuteCase = Case<Args>;
enum Slot { kX, kIdx, kMap, kProbs, kOut, kOutIndex, kTokenId, kOutProbs };
constexpr int64_t kT = 3, kE = 3, kH = 2, kN = 6;  // dropless K = 2; pad C = 2
constexpr DType kF32 = DType::kFloat32, kI32 = DType::kInt32, kI8 = DType::kInt8;

// The spec's examples: dropless (map {1,0,1 | 1,1,0 | 0,1,1}) or pad (map {1,1,1 | 1,0,0 | 1,0,0}), with probs
// or (restoreShape instead) without.
UnpermuteCase Base(bool pad, bool probs = true) {
  UnpermuteCase c;
  c.t[kX] = TestTensor(kF32, {kN, kH});
  c.t[kIdx] = TestTensor(kI32, {kN});
  c.t[kMap] = TestTensor(kI8, {kT, kE});
  if (probs) c.t[kProbs] = TestTensor(kF32, {kT, kE});
  c.t[kOut] = TestTensor(kF32, {kT, kH});
  c.t[kOutIndex] = TestTensor(kI32, {kN});
  c.t[kTokenId] = TestTensor(kI32, {kN});
  if (probs) c.t[kOutProbs] = TestTensor(kF32, {kN});
  std::mt19937_64 rng(3);
  c.t[kX]->FillUniform(rng);
  if (probs) c.t[kProbs]->FillUniform(rng);
  const std::vector<int> map = pad ? std::vector<int>{1, 1, 1, 1, 0, 0, 1, 0, 0}
                                   : std::vector<int>{1, 0, 1, 1, 1, 0, 0, 1, 1};
  for (int64_t i = 0; i < kT * kE; ++i) c.t[kMap]->SetI(i, map[static_cast<size_t>(i)]);
  const std::vector<int> idx = pad ? std::vector<int>{0, 1, 0, 1, 0, 1} : std::vector<int>{0, 4, 1, 2, 3, 5};
  for (int64_t i = 0; i < kN; ++i) c.t[kIdx]->SetI(i, idx[static_cast<size_t>(i)]);
  c.attrs = {pad};
  if (!probs) c.arrays[0] = std::vector<int64_t>{kT, kH};
  return c;
}

using C = UnpermuteCase;
using Row = ErrorRow<Args>;
auto Set(int slot, TestTensor t) { return [slot, t](C& c) { c.t[slot] = t; }; }
auto Restore(std::vector<int64_t> v) { return [v](C& c) { c.arrays[0] = v; }; }

TEST(TokenUnpermuteWithRoutingMapErrors, EveryRuleInOrderDroplessWithProbs) {
  const std::vector<Row> table = {
      {"no permutedTokens", [](C& c) { c.t[kX].reset(); }, kNullptr, "permutedTokens is required but is null", 1,
       kAclOnly},
      {"no sortedIndices", [](C& c) { c.t[kIdx].reset(); }, kNullptr, "sortedIndices is required but is null", 1,
       kAclOnly},
      {"no unpermutedTokens", [](C& c) { c.t[kOut].reset(); }, kNullptr, "unpermutedTokens is required but is null",
       1, kAclOnly},
      {"no outIndex", [](C& c) { c.t[kOutIndex].reset(); }, kNullptr, "outIndex is required but is null", 1,
       kAclOnly},
      {"no permuteTokenId", [](C& c) { c.t[kTokenId].reset(); }, kNullptr, "permuteTokenId is required but is null",
       1, kAclOnly},
      {"required null before the rest", [](C& c) { c.t[kIdx].reset(); c.t[kProbs].reset(); }, kNullptr,
       "sortedIndices is required but is null", 1, kAclOnly},
      {"no probs, no restoreShape", [](C& c) { c.t[kProbs].reset(); }, kNullptr,
       "restoreShapeOptional is required when probsOptional is null", 1},
      {"no routingMap with probs", [](C& c) { c.t[kMap].reset(); }, kNullptr,
       "routingMapOptional (required with probsOptional when paddedMode is false) is required but is null", 1},
      {"no permuteProbs with probs", [](C& c) { c.t[kOutProbs].reset(); }, kNullptr,
       "permuteProbs (required with probsOptional) is required but is null", 1},
      {"null data", [](C& c) { c.tweak = [](int i, TensorView* v) { if (i == kX) v->data = nullptr; }; }, kNullptr,
       "permutedTokens has shape (6, 2) but its data pointer is null", 1, kCppOnly},
      {"negative stride", [](C& c) { c.tweak = [](int i, TensorView* v) { if (i == kOut) v->strides[1] = -1; }; },
       kInvalid, "unpermutedTokens has negative stride -1 in dimension 1", 1, kCppOnly},
      // Ranks, in the order of the tensors.
      {"permutedTokens 1-D", Set(kX, TestTensor(kF32, {kN})), kInvalid, "permutedTokens must be 2-D but has shape (6,)",
       1},
      {"sortedIndices 2-D", Set(kIdx, TestTensor(kI32, {kN, 1})), kInvalid,
       "sortedIndices must be 1-D but has shape (6, 1)", 1},
      {"routingMap 1-D", Set(kMap, TestTensor(kI8, {9})), kInvalid,
       "routingMapOptional must be 2-D but has shape (9,)", 1},
      {"probs 3-D", Set(kProbs, TestTensor(kF32, {kT, kE, 1})), kInvalid,
       "probsOptional must be 2-D but has shape (3, 3, 1)", 1},
      {"unpermutedTokens 1-D", Set(kOut, TestTensor(kF32, {kT * kH})), kInvalid,
       "unpermutedTokens must be 2-D but has shape (6,)", 1},
      {"outIndex 2-D", Set(kOutIndex, TestTensor(kI32, {kN, 1})), kInvalid, "outIndex must be 1-D but has shape (6, 1)",
       1},
      {"permuteTokenId 0-D", Set(kTokenId, TestTensor(kI32, {})), kInvalid, "permuteTokenId must be 1-D but has shape ()",
       1},
      {"permuteProbs 2-D", Set(kOutProbs, TestTensor(kF32, {kN, 1})), kInvalid,
       "permuteProbs must be 1-D but has shape (6, 1)", 1},
      {"ranks before dtypes",
       [](C& c) { c.t[kX] = TestTensor(kI32, {kN, kH}); c.t[kOutProbs] = TestTensor(kF32, {kN, 1}); }, kInvalid,
       "permuteProbs must be 1-D", 1},
      // Dtypes.
      {"permutedTokens INT32", Set(kX, TestTensor(kI32, {kN, kH})), kInvalid,
       "permutedTokens has dtype INT32 but must be FLOAT32, FLOAT16 or BFLOAT16", 1},
      {"sortedIndices INT64", Set(kIdx, TestTensor(DType::kInt64, {kN})), kInvalid,
       "sortedIndices has dtype INT64 but must be INT32", 1},
      {"routingMap INT32", Set(kMap, TestTensor(kI32, {kT, kE})), kInvalid,
       "routingMapOptional has dtype INT32 but must be INT8 or BOOL", 1},
      {"probs INT8", Set(kProbs, TestTensor(kI8, {kT, kE})), kInvalid,
       "probsOptional has dtype INT8 but must be FLOAT32, FLOAT16 or BFLOAT16", 1},
      {"unpermutedTokens FLOAT16", Set(kOut, TestTensor(DType::kFloat16, {kT, kH})), kInvalid,
       "unpermutedTokens is FLOAT16 but permutedTokens is FLOAT32 (permutedTokens and unpermutedTokens share a dtype)",
       1},
      {"outIndex FLOAT32", Set(kOutIndex, TestTensor(kF32, {kN})), kInvalid, "outIndex has dtype FLOAT32 but must be INT32",
       1},
      {"permuteTokenId INT8", Set(kTokenId, TestTensor(kI8, {kN})), kInvalid,
       "permuteTokenId has dtype INT8 but must be INT32", 1},
      {"permuteProbs FLOAT16", Set(kOutProbs, TestTensor(DType::kFloat16, {kN})), kInvalid,
       "permuteProbs is FLOAT16 but probsOptional is FLOAT32 (probsOptional and permuteProbs share a dtype)", 1},
      {"dtypes before shapes",
       [](C& c) { c.t[kX] = TestTensor(kF32, {kN - 1, kH}); c.t[kTokenId] = TestTensor(kI8, {kN}); }, kInvalid,
       "permuteTokenId has dtype INT8", 1},
      // N, H and T.
      {"permutedTokens rows", Set(kX, TestTensor(kF32, {kN - 1, kH})), kInvalid,
       "permutedTokens has 5 rows but sortedIndices has 6", 1},
      {"outIndex rows", Set(kOutIndex, TestTensor(kI32, {kN + 6})), kInvalid, "outIndex has 12 rows but sortedIndices has 6",
       1},
      {"permuteTokenId rows", Set(kTokenId, TestTensor(kI32, {kN - 2})), kInvalid,
       "permuteTokenId has 4 rows but sortedIndices has 6", 1},
      {"permuteProbs rows", Set(kOutProbs, TestTensor(kF32, {kN + 1})), kInvalid,
       "permuteProbs has 7 rows but sortedIndices has 6", 1},
      {"unpermutedTokens columns", Set(kOut, TestTensor(kF32, {kT, kH + 1})), kInvalid,
       "unpermutedTokens has 3 columns but permutedTokens has 2", 1},
      {"probs rows", Set(kProbs, TestTensor(kF32, {kT + 1, kE})), kInvalid,
       "routingMapOptional has 3 rows but probsOptional has 4", 1},
      {"unpermutedTokens rows", Set(kOut, TestTensor(kF32, {kT + 1, kH})), kInvalid,
       "unpermutedTokens has 4 rows but probsOptional has 3", 1},
      {"routingMap rows", Set(kMap, TestTensor(kI8, {kT - 1, kE})), kInvalid,
       "routingMapOptional has 2 rows but probsOptional has 3", 1},
      {"routingMap columns", Set(kMap, TestTensor(kI8, {kT, kE + 1})), kInvalid,
       "routingMapOptional has shape (3, 4) but probsOptional has shape (3, 3)", 1},
      // N = T*K.
      {"N not a multiple of T",
       [](C& c) {
         c.t[kOut] = TestTensor(kF32, {4, kH});
         c.t[kProbs] = TestTensor(kF32, {4, kE});
         c.t[kMap] = TestTensor(kI8, {4, kE});
       },
       kInvalid, "permutedTokens has 6 rows, not a multiple of T = 4 (paddedMode false: N = T*K)", 1},
      {"T = 0 with N > 0",
       [](C& c) {
         c.t[kOut] = TestTensor(kF32, {0, kH});
         c.t[kProbs] = TestTensor(kF32, {0, kE});
         c.t[kMap] = TestTensor(kI8, {0, kE});
       },
       kInvalid, "permutedTokens has 6 rows but T = 0 (paddedMode false: N = T*K)", 1},
      // restoreShape, when given, is (T, H).
      {"restoreShape (3, 3)", Restore({3, 3}), kInvalid, "restoreShapeOptional is (3, 3) but unpermutedTokens is (3, 2)",
       1},
      {"restoreShape (3,)", Restore({3}), kInvalid, "restoreShapeOptional is (3,) but unpermutedTokens is (3, 2)", 1},
      {"restoreShape ()", Restore({}), kInvalid, "restoreShapeOptional is () but unpermutedTokens is (3, 2)", 1},
      {"restoreShape (3, 2, 1)", Restore({3, 2, 1}), kInvalid,
       "restoreShapeOptional is (3, 2, 1) but unpermutedTokens is (3, 2)", 1},
      // Overlaps.
      {"unpermutedTokens on permutedTokens",
       [](C& c) {
         c.source[kOut] = kX;
         c.tweak = [](int i, TensorView* v) { if (i == kOut) *v = TensorView(v->data, kF32, {kT, kH}); };
       },
       kInvalid, "unpermutedTokens overlaps permutedTokens in memory", 1, kCppOnly},
      {"outIndex on sortedIndices", [](C& c) { c.source[kOutIndex] = kIdx; }, kInvalid,
       "outIndex overlaps sortedIndices in memory", 1},
      {"permuteTokenId on outIndex", [](C& c) { c.source[kTokenId] = kOutIndex; }, kInvalid,
       "outIndex overlaps permuteTokenId in memory", 1},
      {"permuteProbs stride 0",
       [](C& c) { c.tweak = [](int i, TensorView* v) { if (i == kOutProbs) v->strides[0] = 0; }; }, kInvalid,
       "permuteProbs has elements that share memory", 1, kCppOnly},
      // Phase two: index data, before any output byte.
      {"sortedIndices[3] = 6", [](C& c) { c.t[kIdx]->SetI(3, 6); }, kInvalid,
       "sortedIndices[3] = 6 is outside [0, 6) for paddedMode false", 2},
      {"sortedIndices[0] = -1", [](C& c) { c.t[kIdx]->SetI(0, -1); }, kInvalid,
       "sortedIndices[0] = -1 is outside [0, 6) for paddedMode false", 2},
      {"routingMap row with 3 entries", [](C& c) { c.t[kMap]->SetI(6, 1); }, kInvalid,
       "routingMapOptional row 2 has 3 routed entries but paddedMode false needs K = N / T = 2", 2},
      {"routingMap row with 1 entry", [](C& c) { c.t[kMap]->SetI(0, 0); }, kInvalid,
       "routingMapOptional row 0 has 1 routed entries but paddedMode false needs K = N / T = 2", 2},
      {"index range before the map", [](C& c) { c.t[kMap]->SetI(0, 0); c.t[kIdx]->SetI(5, 9); }, kInvalid,
       "sortedIndices[5] = 9 is outside [0, 6)", 2},
  };
  CheckTable(table, [] { return Base(false); });
}

// Base(false) with WideRouting's map of 100 experts and probs to match.
UnpermuteCase WideMap() {
  UnpermuteCase c = Base(false);
  c.t[kMap] = TestTensor(kI8, {kT, 100});
  SetRoutingMap(*c.t[kMap], WideRouting());
  c.t[kProbs] = TestTensor(kF32, {kT, 100});
  std::mt19937_64 rng(5);
  c.t[kProbs]->FillUniform(rng);
  return c;
}

TEST(TokenUnpermuteWithRoutingMapErrors, WideRoutingMapRowsAreCountedWhole) {
  CheckTable(WideRoutingMapRows<Args>(kMap, "paddedMode"), WideMap);
}

TEST(TokenUnpermuteWithRoutingMapErrors, PadAndWithoutProbs) {
  const std::vector<Row> pad = {
      {"pad: no routingMap is fine, a bad index is not",
       [](C& c) { c.t[kMap].reset(); c.t[kIdx]->SetI(2, 3); }, kInvalid,
       "sortedIndices[2] = 3 is outside [0, 3) for paddedMode true", 2},
      {"pad: N not a multiple of E",
       [](C& c) { c.t[kProbs] = TestTensor(kF32, {kT, 4}); c.t[kMap] = TestTensor(kI8, {kT, 4}); }, kInvalid,
       "permutedTokens has 6 rows, not a multiple of E = 4 (paddedMode true: N = E*C)", 1},
      {"pad: E = 0 with N > 0",
       [](C& c) { c.t[kProbs] = TestTensor(kF32, {kT, 0}); c.t[kMap] = TestTensor(kI8, {kT, 0}); }, kInvalid,
       "permutedTokens has 6 rows but E = 0 (paddedMode true: N = E*C)", 1},
      {"pad: E from routingMap without probs",
       [](C& c) {
         c.t[kProbs].reset();
         c.t[kOutProbs].reset();
         c.t[kMap] = TestTensor(kI8, {kT, 4});
         c.arrays[0] = std::vector<int64_t>{kT, kH};
       },
       kInvalid, "permutedTokens has 6 rows, not a multiple of E = 4 (paddedMode true: N = E*C)", 1},
      {"pad: a routingMap that is not read is still checked", Set(kMap, TestTensor(kI8, {kT + 1, kE})), kInvalid,
       "routingMapOptional has 4 rows but probsOptional has 3", 1},
  };
  CheckTable(pad, [] { return Base(true); });
  const std::vector<Row> without = {
      {"no probs: restoreShape mismatch", Restore({kT, kH + 1}), kInvalid,
       "restoreShapeOptional is (3, 3) but unpermutedTokens is (3, 2)", 1},
      {"no probs: N not a multiple of T", [](C& c) {
         c.t[kMap].reset();
         c.t[kOut] = TestTensor(kF32, {4, kH});
         c.arrays[0] = {{4, kH}};
       },
       kInvalid, "permutedTokens has 6 rows, not a multiple of T = 4 (paddedMode false: N = T*K)", 1},
      {"no probs: the routingMap is checked, not read", Set(kMap, TestTensor(kF32, {kT, kE})), kInvalid,
       "routingMapOptional has dtype FLOAT32 but must be INT8 or BOOL", 1},
      {"no probs: an unread routingMap's rows", Set(kMap, TestTensor(kI8, {kT + 1, kE})), kInvalid,
       "unpermutedTokens has 3 rows but routingMapOptional has 4", 1},
      {"no probs: a bad index", [](C& c) { c.t[kIdx]->SetI(4, 100); }, kInvalid,
       "sortedIndices[4] = 100 is outside [0, 6) for paddedMode false", 2},
  };
  CheckTable(without, [] { return Base(false, false); });
}

// N > 2^31 - 1 rows (views of stride 0 over one element: nothing is allocated): the C++ API's rule.
TEST(TokenUnpermuteWithRoutingMapErrors, RowsBeyondInt32) {
  const int64_t n = int64_t{1} << 31;
  C c = Base(true, false);
  c.t[kMap].reset();
  c.tweak = [n](int i, TensorView* v) {
    if (i == kX || i == kIdx || i == kOutIndex || i == kTokenId) {
      v->sizes[0] = n;
      v->strides[0] = 0;
    }
  };
  const Status s = OpInfo<Args>::kRun(c.CppArgs());
  EXPECT_EQ(static_cast<int>(s.code()), kInvalid);
  ExpectErrorMessage(s.message(), "MoeTokenUnpermuteWithRoutingMap", "N = 2147483648 rows cannot be indexed by INT32");
}

// Without probs permuteProbs may be passed (any shape or dtype): it is neither checked nor written.
TEST(TokenUnpermuteWithRoutingMapErrors, UnwrittenPermuteProbsIsIgnored) {
  for (Api api : {Api::kCpp, Api::kAclnn}) {
    C c = Base(false, false);
    c.t[kOutProbs] = TestTensor(DType::kInt64, {5, 7});
    const auto before = c.t[kOutProbs]->Snapshot();
    TestCall<Args> call;
    for (int i = 0; i < C::kSlots; ++i) call.tensors[static_cast<size_t>(i)] = c.t[i] ? &*c.t[i] : nullptr;
    call.attrs = c.attrs;
    call.arrays = c.arrays;
    const Status s = call.Run(api);
    EXPECT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(c.t[kOutProbs]->SameBytes(before));
  }
}

// workspaceSize and executor are required in phase one; phase two's workspace rules: too small is INVALID, null
// with a non-zero size NULLPTR, a null executor NULLPTR; nothing written.
TEST(TokenUnpermuteWithRoutingMapErrors, WorkspaceAndExecutor) {
  C c = Base(true);
  AclCall<Args> acl([&] {
    TestCall<Args> call;
    for (int i = 0; i < C::kSlots; ++i) call.tensors[static_cast<size_t>(i)] = c.t[i] ? &*c.t[i] : nullptr;
    call.attrs = c.attrs;
    return call;
  }());
  aclOpExecutor* ex = nullptr;
  uint64_t ws = 0;
  EXPECT_EQ(aclnnMoeTokenUnpermuteWithRoutingMapGetWorkspaceSize(acl.tensor(0), acl.tensor(1), acl.tensor(2),
                                                                 acl.tensor(3), true, nullptr, acl.tensor(4),
                                                                 acl.tensor(5), acl.tensor(6), acl.tensor(7), nullptr,
                                                                 &ex),
            kNullptr);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("workspaceSize is required but is null"), std::string::npos);
  EXPECT_EQ(aclnnMoeTokenUnpermuteWithRoutingMapGetWorkspaceSize(acl.tensor(0), acl.tensor(1), acl.tensor(2),
                                                                 acl.tensor(3), true, nullptr, acl.tensor(4),
                                                                 acl.tensor(5), acl.tensor(6), acl.tensor(7), &ws,
                                                                 nullptr),
            kNullptr);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("executor is required but is null"), std::string::npos);
  EXPECT_EQ(aclnnMoeTokenUnpermuteWithRoutingMap(nullptr, 0, nullptr, nullptr), kNullptr);

  const Args a = c.CppArgs();
  Plan plan;
  ASSERT_TRUE(PlanTokenUnpermuteWithRoutingMap(a, &plan).ok());
  ASSERT_GT(plan.workspace_size(), 0u);
  const auto before = c.t[kOut]->Snapshot();
  std::vector<char> buf(plan.workspace_size());
  Status s = plan.Run(buf.data(), plan.workspace_size() - 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalid);
  EXPECT_NE(s.message().find("MoeTokenUnpermuteWithRoutingMap: workspaceSize"), std::string::npos) << s.message();
  s = plan.Run(nullptr, plan.workspace_size());
  EXPECT_EQ(s.code(), StatusCode::kNullptr);
  EXPECT_TRUE(c.t[kOut]->SameBytes(before));
}

}  // namespace
}  // namespace moegrad::testing
