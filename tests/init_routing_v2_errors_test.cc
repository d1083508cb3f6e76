// The bad-argument table of MoeInitRoutingV2: every rule of docs/ops/init_routing_v2.md in its check order, each
// with its status, a piece of its one-line message and the promise that no byte of any tensor changed, through
// the C++ API and the aclnn API (metadata errors from phase one, expert ids from phase two); the optional outputs
// a call does not write are neither checked nor touched; the workspace rules.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "moegrad/ops.hpp"
#include "tests/support/api.h"
#include "tests/support/error_table.h"
#include "tests/support/test_tensor.h"

namespace moegrad::testing {
namespace {

// Slots x, expertIdx, expandedXOut, expandedRowIdxOut, expertTokensCountOrCumsumOut,
// expertTokensBeforeCapacityOut; attributes activeNum, expertCapacity, expertNum, dropPadMode,
// expertTokensCountOrCumsumFlag, expertTokensBeforeCapacityFlag.
using InitCase = Case<InitRoutingV2Args>;
enum Slot { kX, kIdx, kOut, kRowIdx, kCounts, kBefore };
enum Attr { kActive, kCapacity, kExperts, kMode, kFlag, kBeforeFlag };
constexpr int64_t kN = 4, kK = 2, kH = 3, kE = 3, kC = 2;
constexpr DType kF32 = DType::kFloat32, kI32 = DType::kInt32;

// Mode 0 with the cumsum (flag 1), or mode 1 with the counts before capacity. Pair p goes to expert p % 3.
InitCase Base(int64_t mode, int64_t tokens = kN) {
  InitCase c;
  c.t[kX] = TestTensor(kF32, {tokens, kH});
  c.t[kIdx] = TestTensor(kI32, {tokens, kK});
  for (int64_t p = 0; p < tokens * kK; ++p) c.t[kIdx]->SetI(p, p % kE);
  c.t[kOut] = mode == 1 ? TestTensor(kF32, {kE, kC, kH}) : TestTensor(kF32, {tokens * kK, kH});
  c.t[kRowIdx] = TestTensor(kI32, {tokens * kK});
  if (mode == 0) c.t[kCounts] = TestTensor(kI32, {kE});
  if (mode == 1) c.t[kBefore] = TestTensor(kI32, {kE});
  std::mt19937_64 rng(3);
  c.t[kX]->FillUniform(rng);
  c.attrs = {0, mode == 1 ? kC : 0, kE, mode, mode == 0 ? 1 : 0, mode == 1};
  return c;
}

TEST(InitRoutingV2Errors, EveryRuleInOrder) {
  using Row = ErrorRow<InitRoutingV2Args>;
  using C = InitCase;
  auto set = [](int slot, TestTensor t) { return [slot, t](C& c) { c.t[slot] = t; }; };
  auto attr = [](int a, int64_t v) { return [a, v](C& c) { c.attrs[a] = v; }; };
  auto id = [](int64_t p, int64_t v) { return [p, v](C& c) { c.t[kIdx]->SetI(p, v); }; };
  for (int64_t mode : {0, 1}) {
    SCOPED_TRACE("dropPadMode " + std::to_string(mode));
    const bool dp = mode == 1;
    const int64_t rows = dp ? kE * kC : kN * kK;
    std::vector<Row> table = {
        {"no x", [](C& c) { c.t[kX].reset(); }, kNullptr, "x is required but is null", 1, kAclOnly},
        {"no expertIdx", [](C& c) { c.t[kIdx].reset(); }, kNullptr, "expertIdx is required but is null", 1, kAclOnly},
        {"no expandedXOut", [](C& c) { c.t[kOut].reset(); }, kNullptr, "expandedXOut is required but is null", 1,
         kAclOnly},
        {"no expandedRowIdxOut", [](C& c) { c.t[kRowIdx].reset(); }, kNullptr,
         "expandedRowIdxOut is required but is null", 1, kAclOnly},
        {"negative stride", [](C& c) { c.tweak = [](int i, TensorView* v) { if (i == kX) v->strides[1] = -1; }; },
         kInvalid, "x has negative stride -1 in dimension 1", 1, kCppOnly},
        {"null data", [](C& c) { c.tweak = [](int i, TensorView* v) { if (i == kRowIdx) v->data = nullptr; }; },
         kNullptr, "expandedRowIdxOut has shape (8,) but its data pointer is null", 1, kCppOnly},
        {"dropPadMode 2", attr(kMode, 2), kInvalid, "dropPadMode = 2 must be 0 (dropless) or 1 (drop/pad)", 1},
        {"dropPadMode -1", attr(kMode, -1), kInvalid, "dropPadMode = -1 must be 0 (dropless) or 1 (drop/pad)", 1},
        {"activeNum -1", attr(kActive, -1), kInvalid, "activeNum = -1 must be >= 0", 1},
        {"expertNum -1", attr(kExperts, -1), kInvalid, "expertNum = -1 must be >= 0", 1},
        {"expertCapacity -1", attr(kCapacity, -1), kInvalid, "expertCapacity = -1 must be >= 0", 1},
        {"activeNum INT64_MIN", attr(kActive, INT64_MIN), kInvalid, "activeNum = -9223372036854775808 must be >= 0",
         1},
        {"flag 3", attr(kFlag, 3), kInvalid,
         "expertTokensCountOrCumsumFlag = 3 must be 0 (none), 1 (cumsum) or 2 (count)", 1},
        {"flag -1", attr(kFlag, -1), kInvalid, "expertTokensCountOrCumsumFlag = -1 must be 0 (none)", 1},
        {"x 1-D", set(kX, TestTensor(kF32, {kN})), kInvalid, "x must be 2-D but has shape (4,)", 1},
        {"x INT32", set(kX, TestTensor(kI32, {kN, kH})), kInvalid,
         "x has dtype INT32 but must be FLOAT32, FLOAT16 or BFLOAT16", 1},
        {"expertIdx 1-D", set(kIdx, TestTensor(kI32, {kN * kK})), kInvalid, "expertIdx must be 2-D but has shape (8,)",
         1},
        {"expertIdx INT64", set(kIdx, TestTensor(DType::kInt64, {kN, kK})), kInvalid,
         "expertIdx has dtype INT64 but must be INT32", 1},
        {"expertIdx rows", set(kIdx, TestTensor(kI32, {kN + 1, kK})), kInvalid,
         "expertIdx has shape (5, 2) but x has 4 rows", 1},
        {"2^31 pairs",
         [](C& c) {
           c.tweak = [](int i, TensorView* v) {
             if (i == kX) *v = TensorView(v->data, kF32, {65536, 0});
             if (i == kIdx) *v = TensorView(v->data, kI32, {65536, 32768});
           };
         },
         kInvalid, "N*K = 2147483648 pairs do not fit INT32 expandedRowIdx", 1, kCppOnly},
        {"expandedRowIdxOut shape", set(kRowIdx, TestTensor(kI32, {kN * kK + 1})), kInvalid,
         "expandedRowIdxOut has shape (9,) but must be (8,)", 1},
        {"expandedRowIdxOut 2-D", set(kRowIdx, TestTensor(kI32, {kN, kK})), kInvalid,
         "expandedRowIdxOut has shape (4, 2) but must be (8,)", 1},
        {"expandedRowIdxOut INT64", set(kRowIdx, TestTensor(DType::kInt64, {kN * kK})), kInvalid,
         "expandedRowIdxOut has dtype INT64 but must be INT32", 1},
        {"expandedXOut dtype",
         [](C& c) { c.t[kOut] = TestTensor(DType::kFloat16, c.t[kOut]->sizes_vector()); }, kInvalid,
         "expandedXOut is FLOAT16 but x is FLOAT32 (x and expandedXOut share a dtype)", 1},
        {"expandedRowIdxOut on expertIdx",
         [](C& c) {
           c.source[kRowIdx] = kIdx;
           c.tweak = [](int i, TensorView* v) { if (i == kRowIdx) *v = TensorView(v->data, kI32, {kN * kK}); };
         },
         kInvalid, "expandedRowIdxOut overlaps expertIdx in memory", 1, kCppOnly},
        {"expandedRowIdxOut stride 0",
         [](C& c) { c.tweak = [](int i, TensorView* v) { if (i == kRowIdx) v->strides[0] = 0; }; }, kInvalid,
         "expandedRowIdxOut has elements that share memory", 1, kCppOnly},
        // Phase two: the expert ids, the first bad one in ascending position.
        {"id past the range", id(5, 3), kInvalid,
         std::string("expertIdx[5] = 3 is outside [0, 3) for dropPadMode ") + (dp ? "1" : "0"), 2},
        {"negative id", id(0, -1), kInvalid, "expertIdx[0] = -1 is outside [0, 3) for dropPadMode", 2},
        {"first of two", [](C& c) { c.t[kIdx]->SetI(6, -5); c.t[kIdx]->SetI(3, 7); }, kInvalid,
         "expertIdx[3] = 7 is outside [0, 3)", 2},
        {"INT32_MIN", id(7, INT32_MIN), kInvalid, "expertIdx[7] = -2147483648 is outside [0, 3)", 2},
        // 1300 pairs: three blocks of the check; the later bad pair sits in an earlier-checked block too.
        {"first of two, blocks apart",
         [dp](C& c) {
           c = Base(dp ? 1 : 0, 650);
           c.t[kIdx]->SetI(1290, -1);
           c.t[kIdx]->SetI(700, 9);
         },
         kInvalid, "expertIdx[700] = 9 is outside [0, 3)", 2},
    };
    if (dp) {
      const std::vector<Row> more = {
          {"no expertTokensBeforeCapacityOut", [](C& c) { c.t[kBefore].reset(); }, kNullptr,
           "expertTokensBeforeCapacityOut (required with expertTokensBeforeCapacityFlag true) is required but is null",
           1},
          {"expertNum 0", attr(kExperts, 0), kInvalid, "expertNum = 0 must be > 0 for dropPadMode 1", 1},
          {"expertCapacity 0", attr(kCapacity, 0), kInvalid, "expertCapacity = 0 must be > 0 for dropPadMode 1", 1},
          {"E*C = 2^31", [](C& c) { c.attrs[kExperts] = 65536; c.attrs[kCapacity] = 32768; }, kInvalid,
           "expertNum*expertCapacity = 65536*32768 rows do not fit INT32 expandedRowIdx", 1},
          {"E*C past int64", [](C& c) { c.attrs[kExperts] = int64_t{1} << 62; c.attrs[kCapacity] = 4; }, kInvalid,
           "expertNum*expertCapacity = 4611686018427387904*4 rows do not fit INT32 expandedRowIdx", 1},
          {"expandedXOut capacity", set(kOut, TestTensor(kF32, {kE, kC + 1, kH})), kInvalid,
           "expandedXOut has shape (3, 3, 3) but must be (3, 2, 3) (expertNum 3, expertCapacity 2)", 1},
          {"expandedXOut 2-D", set(kOut, TestTensor(kF32, {rows, kH})), kInvalid,
           "expandedXOut has shape (6, 3) but must be (3, 2, 3) (expertNum 3, expertCapacity 2)", 1},
          {"expertTokensBeforeCapacityOut shape", set(kBefore, TestTensor(kI32, {kE - 1})), kInvalid,
           "expertTokensBeforeCapacityOut has shape (2,) but must be (3,)", 1},
          {"expertTokensBeforeCapacityOut INT64", set(kBefore, TestTensor(DType::kInt64, {kE})), kInvalid,
           "expertTokensBeforeCapacityOut has dtype INT64 but must be INT32", 1},
          {"expandedXOut on x",
           [](C& c) {
             c.source[kOut] = kX;
             c.tweak = [](int i, TensorView* v) { if (i == kOut) *v = TensorView(v->data, kF32, {kE, kC, kH}); };
           },
           kInvalid, "expandedXOut overlaps x in memory", 1, kCppOnly},
          {"expertTokensBeforeCapacityOut on expandedRowIdxOut",
           [](C& c) {
             c.source[kBefore] = kRowIdx;
             c.tweak = [](int i, TensorView* v) { if (i == kBefore) *v = TensorView(v->data, kI32, {kE}); };
           },
           kInvalid, "expandedRowIdxOut overlaps expertTokensBeforeCapacityOut in memory", 1, kCppOnly},
      };
      table.insert(table.end(), more.begin(), more.end());
    } else {
      const std::vector<Row> more = {
          {"no expertTokensCountOrCumsumOut", [](C& c) { c.t[kCounts].reset(); }, kNullptr,
           "expertTokensCountOrCumsumOut (required with expertTokensCountOrCumsumFlag 1) is required but is null", 1},
          {"no expertTokensCountOrCumsumOut, flag 2", [](C& c) { c.t[kCounts].reset(); c.attrs[kFlag] = 2; },
           kNullptr, "expertTokensCountOrCumsumOut (required with expertTokensCountOrCumsumFlag 2)", 1},
          {"expertNum 0 with counts", attr(kExperts, 0), kInvalid,
           "expertNum = 0 must be > 0 for expertTokensCountOrCumsumFlag 1", 1},
          {"expandedXOut rows", set(kOut, TestTensor(kF32, {rows + 1, kH})), kInvalid,
           "expandedXOut has shape (9, 3) but must be (8, 3) (activeNum 0)", 1},
          {"expandedXOut rows, activeNum 5", attr(kActive, 5), kInvalid,
           "expandedXOut has shape (8, 3) but must be (5, 3) (activeNum 5)", 1},
          {"expandedXOut H", set(kOut, TestTensor(kF32, {rows, kH + 1})), kInvalid,
           "expandedXOut has shape (8, 4) but must be (8, 3) (activeNum 0)", 1},
          {"expandedXOut 3-D", set(kOut, TestTensor(kF32, {kE, kC, kH})), kInvalid,
           "expandedXOut has shape (3, 2, 3) but must be (8, 3) (activeNum 0)", 1},
          {"expertTokensCountOrCumsumOut shape", set(kCounts, TestTensor(kI32, {kE + 1})), kInvalid,
           "expertTokensCountOrCumsumOut has shape (4,) but must be (3,)", 1},
          {"expertTokensCountOrCumsumOut FLOAT32", set(kCounts, TestTensor(kF32, {kE})), kInvalid,
           "expertTokensCountOrCumsumOut has dtype FLOAT32 but must be INT32", 1},
          // activeNum 4: expandedX has x's shape, so x itself passes every check but the overlap.
          {"expandedXOut is x", [](C& c) { c.attrs[kActive] = 4; c.source[kOut] = kX; }, kInvalid,
           "expandedXOut overlaps x in memory", 1},
          {"counts stride 0",
           [](C& c) { c.tweak = [](int i, TensorView* v) { if (i == kCounts) v->strides[0] = 0; }; }, kInvalid,
           "expertTokensCountOrCumsumOut has elements that share memory", 1, kCppOnly},
          {"negative id without counts", [](C& c) { c.attrs[kFlag] = 0; c.t[kIdx]->SetI(2, -7); }, kInvalid,
           "expertIdx[2] = -7 is outside [0, 2^31) for dropPadMode 0", 2},
      };
      table.insert(table.end(), more.begin(), more.end());
    }
    CheckTable(table, [mode] { return Base(mode); });
  }
}

// An optional output the call does not write is neither shape- nor dtype-checked nor written, and may overlap
// anything (CANN makes the cumsum only in mode 0 and the counts before capacity only in mode 1).
TEST(InitRoutingV2Errors, UnwrittenOptionalOutputsAreIgnored) {
  for (int64_t mode : {0, 1}) {
    for (Api api : {Api::kCpp, Api::kCppPlan, Api::kAclnn}) {
      InitCase c = Base(mode);
      TestTensor wrong(DType::kFloat16, {7, 2});
      if (mode == 0) c.t[kBefore] = wrong;
      else c.t[kCounts] = wrong;
      c.attrs[kFlag] = mode == 1 ? 2 : c.attrs[kFlag];  // the dropless flag in drop/pad mode: no count either
      c.attrs[kBeforeFlag] = 1;                          // and the drop/pad flag in dropless mode
      TestCall<InitRoutingV2Args> call;
      for (int i = 0; i < InitCase::kSlots; ++i) call.tensors[static_cast<size_t>(i)] = c.t[i] ? &*c.t[i] : nullptr;
      call.attrs = c.attrs;
      const auto before = wrong.Snapshot();
      const Status s = call.Run(api);
      EXPECT_TRUE(s.ok()) << s.message() << " mode " << mode << " " << ApiName(api);
      EXPECT_TRUE((mode == 0 ? c.t[kBefore] : c.t[kCounts])->SameBytes(before));
    }
    // Over an input, through the C++ API (aclnn tensors are views of their own storage here).
    InitCase c = Base(mode);
    InitRoutingV2Args a = c.CppArgs();
    if (mode == 0) a.expert_tokens_before_capacity = c.t[kX]->view();
    else a.expert_tokens_count_or_cumsum = c.t[kX]->view();
    const auto x_before = c.t[kX]->Snapshot();
    const Status s = InitRoutingV2(a);
    EXPECT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(c.t[kX]->SameBytes(x_before));
  }
}

// The workspace rules of phase two: too small is INVALID, null with a non-zero size is NULLPTR; nothing written.
TEST(InitRoutingV2Errors, Workspace) {
  InitCase c = Base(1);
  const InitRoutingV2Args a = c.CppArgs();
  Plan plan;
  ASSERT_TRUE(PlanInitRoutingV2(a, &plan).ok());
  ASSERT_GT(plan.workspace_size(), 0u);
  const auto before = c.t[kOut]->Snapshot();
  std::vector<char> ws(plan.workspace_size());
  Status s = plan.Run(ws.data(), plan.workspace_size() - 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalid);
  EXPECT_NE(s.message().find("MoeInitRoutingV2: workspaceSize"), std::string::npos) << s.message();
  s = plan.Run(nullptr, plan.workspace_size());
  EXPECT_EQ(s.code(), StatusCode::kNullptr);
  EXPECT_TRUE(c.t[kOut]->SameBytes(before));
}

}  // namespace
}  // namespace moegrad::testing
