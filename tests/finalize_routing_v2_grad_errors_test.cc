// Bad arguments of MoeFinalizeRoutingV2Grad through the aclnn C API (oneDNN's expect_to_fail style): every rule
// of docs/ops/finalize_routing_v2_grad.md gives its exact status from the phase the rule belongs to, one
// message line naming the operator, the argument and the value, a null executor when phase one fails, and
// not one output byte written. The C++ API must report the same status and message.
#include <gtest/gtest.h>

#include <cctype>
#include <climits>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "moegrad/ops.hpp"
#include "moegrad/plan.hpp"
#include "tests/support/finalize_routing_v2_grad_tester.h"

namespace moegrad::testing {
namespace {

using Info = OpInfo<FinalizeRoutingV2GradArgs>;
constexpr const char* kOp = "MoeFinalizeRoutingV2Grad: ";

// Valid starting points: R = 4, H = 8, K = 2 (8 pairs), BFLOAT16, padded views.
enum class Base {
  kDropless,  // mode 0 with scales, bias (3 experts) and expertIdx; expandedRowIdx a permutation of [0, 8)
  kDropPad,   // mode 1, E = 4, C = 4 (16 rows), scales, bias and expertIdx
  kNoScales,  // mode 0, only the required tensors
};

FinalizeRoutingV2GradCase MakeBase(Base base) {
  FinalizeRoutingV2GradTester t;
  t.tokens(4).hidden(8).topk(2).experts(base == Base::kDropPad ? 4 : 3).capacity(4).layout(Layout::kPadded).seed(5);
  t.mode(base == Base::kDropPad ? 1 : 0).scales(base != Base::kNoScales).bias(base != Base::kNoScales);
  return t.Build(DType::kBFloat16);
}

TestTensor Float(std::vector<int64_t> sizes, DType dtype = DType::kBFloat16) {
  return TestTensor(dtype, std::move(sizes), Layout::kPadded, 77);
}
TestTensor Int(std::vector<int64_t> sizes, DType dtype = DType::kInt32) {
  TestTensor t(dtype, std::move(sizes), Layout::kContiguous, 78);
  for (int64_t i = 0; i < t.numel(); ++i) t.SetI(i, 0);
  return t;
}

struct BadCase {
  const char* name;
  Base base;
  std::function<void(FinalizeRoutingV2GradCase&)> mutate;
  aclnnStatus status;       // ACLNN_SUCCESS: an argument that looks odd but is valid
  bool phase_two;           // the rule is about index data
  std::string message;      // a substring of the one-line message after "MoeFinalizeRoutingV2Grad: "
  int null_data = -1;       // argument (C signature order, 0 = gradY) whose data pointer is null
};

const std::vector<BadCase>& Cases() {
  constexpr aclnnStatus kNull = ACLNN_ERR_PARAM_NULLPTR, kBad = ACLNN_ERR_PARAM_INVALID;
  using C = FinalizeRoutingV2GradCase;
  static const std::vector<BadCase> cases = {
      // --- missing tensors (161001) ---
      {"no gradY", Base::kDropless, [](C& c) { c.grad_y.reset(); }, kNull, false, "gradY is required but is null"},
      {"no expandedRowIdx", Base::kDropless, [](C& c) { c.expanded_row_idx.reset(); }, kNull, false,
       "expandedRowIdx is required but is null"},
      {"no gradExpandedXOut", Base::kDropless, [](C& c) { c.grad_expanded_x.reset(); }, kNull, false,
       "gradExpandedXOut is required but is null"},
      {"scales without expandedX", Base::kDropless, [](C& c) { c.expanded_x.reset(); }, kNull, false,
       "expandedX (required with scales) is required but is null"},
      {"scales without gradScalesOut", Base::kDropless, [](C& c) { c.grad_scales.reset(); }, kNull, false,
       "gradScalesOut (required with scales) is required but is null"},
      {"bias without scales", Base::kDropless, [](C& c) { c.scales.reset(); }, kNull, false,
       "scales (required with bias) is required but is null"},
      {"bias without expertIdx", Base::kDropless, [](C& c) { c.expert_idx.reset(); }, kNull, false,
       "expertIdx (required with bias) is required but is null"},
      {"gradY data null", Base::kDropless, [](C&) {}, kNull, false,
       "gradY has shape (4, 8) but its data pointer is null", 0},
      {"gradExpandedXOut data null", Base::kDropless, [](C&) {}, kNull, false,
       "gradExpandedXOut has shape (8, 8) but its data pointer is null", 6},
      {"bias data null", Base::kDropless, [](C&) {}, kNull, false,
       "bias has shape (3, 8) but its data pointer is null", 5},
      // --- attributes ---
      {"dropPadMode 2", Base::kDropless, [](C& c) { c.drop_pad_mode = 2; }, kBad, false,
       "dropPadMode = 2 must be 0 (dropless) or 1 (drop/pad)"},
      {"dropPadMode -1", Base::kDropless, [](C& c) { c.drop_pad_mode = -1; }, kBad, false, "dropPadMode = -1 must be"},
      {"activeNum -1", Base::kDropless, [](C& c) { c.active_num = -1; }, kBad, false, "activeNum = -1 must be >= 0"},
      {"activeNum -1 in mode 1", Base::kDropPad, [](C& c) { c.active_num = -1; }, kBad, false,
       "activeNum = -1 must be >= 0"},
      {"expertNum 0", Base::kDropPad, [](C& c) { c.expert_num = 0; }, kBad, false,
       "expertNum = 0 must be > 0 for dropPadMode 1"},
      {"expertNum -4", Base::kDropPad, [](C& c) { c.expert_num = -4; }, kBad, false, "expertNum = -4 must be > 0"},
      {"expertCapacity 0", Base::kDropPad, [](C& c) { c.expert_capacity = 0; }, kBad, false,
       "expertCapacity = 0 must be > 0 for dropPadMode 1"},
      {"expertNum * expertCapacity overflows", Base::kNoScales,
       [](C& c) { c.drop_pad_mode = 1; c.expert_num = int64_t{1} << 40; c.expert_capacity = int64_t{1} << 30; },
       kBad, false, "expertNum * expertCapacity = 1099511627776 * 1073741824 overflows"},
      // --- ranks ---
      {"gradY 3-D", Base::kDropless, [](C& c) { c.grad_y = Float({4, 8, 1}); }, kBad, false,
       "gradY must be 2-D but has shape (4, 8, 1)"},
      {"gradY 1-D", Base::kNoScales, [](C& c) { c.grad_y = Float({32}); }, kBad, false,
       "gradY must be 2-D but has shape (32,)"},
      {"expandedRowIdx 2-D", Base::kDropless, [](C& c) { c.expanded_row_idx = Int({4, 2}); }, kBad, false,
       "expandedRowIdx must be 1-D but has shape (4, 2)"},
      {"scales 1-D", Base::kDropless, [](C& c) { c.scales = Float({8}); }, kBad, false,
       "scales must be 2-D but has shape (8,)"},
      {"expertIdx 1-D", Base::kDropless, [](C& c) { c.expert_idx = Int({8}); }, kBad, false,
       "expertIdx has shape (8,) but must be (4, 2)"},
      {"bias 1-D", Base::kDropless, [](C& c) { c.bias = Float({8}); }, kBad, false,
       "bias must be 2-D but has shape (8,)"},
      {"bias 3-D", Base::kDropPad, [](C& c) { c.bias = Float({4, 1, 8}); }, kBad, false,
       "bias must be 2-D but has shape (4, 1, 8)"},
      {"expandedX 3-D in mode 0", Base::kDropless, [](C& c) { c.expanded_x = Float({8, 8, 1}); }, kBad, false,
       "expandedX has shape (8, 8, 1) but must be (8, 8)"},
      {"expandedX 2-D in mode 1", Base::kDropPad, [](C& c) { c.expanded_x = Float({16, 8}); }, kBad, false,
       "expandedX has shape (16, 8) but must be (4, 4, 8)"},
      {"gradExpandedXOut 2-D in mode 1", Base::kDropPad, [](C& c) { c.grad_expanded_x = Float({16, 8}); }, kBad, false,
       "gradExpandedXOut has shape (16, 8) but must be (4, 4, 8)"},
      {"gradScalesOut 1-D", Base::kDropless, [](C& c) { c.grad_scales = Float({8}); }, kBad, false,
       "gradScalesOut has shape (8,) but must be (4, 2)"},
      // --- lengths and shapes ---
      {"expandedRowIdx not R*K", Base::kDropless, [](C& c) { c.expanded_row_idx = Int({9}); }, kBad, false,
       "expandedRowIdx has 9 elements but must have R*K = 4 * 2"},
      {"K does not divide", Base::kNoScales, [](C& c) { c.expanded_row_idx = Int({9}); }, kBad, false,
       "expandedRowIdx has 9 elements, not a multiple of the 4 rows of gradY (R*K)"},
      {"pairs without tokens", Base::kNoScales, [](C& c) { c.grad_y = Float({0, 8}); c.expanded_row_idx = Int({3}); },
       kBad, false, "expandedRowIdx has 3 elements but gradY has 0 rows"},
      {"scales rows", Base::kDropless, [](C& c) { c.scales = Float({5, 2}); }, kBad, false,
       "scales has shape (5, 2) but must be (4, -1)"},
      {"expertIdx columns", Base::kDropless, [](C& c) { c.expert_idx = Int({4, 3}); }, kBad, false,
       "expertIdx has shape (4, 3) but must be (4, 2)"},
      {"expertIdx without bias, wrong shape", Base::kNoScales, [](C& c) { c.expert_idx = Int({2, 4}); }, kBad, false,
       "expertIdx has shape (2, 4) but must be (4, 2)"},
      {"bias columns", Base::kDropless, [](C& c) { c.bias = Float({3, 7}); }, kBad, false,
       "bias has 7 columns but gradY has H = 8"},
      {"bias rows in mode 1", Base::kDropPad, [](C& c) { c.bias = Float({3, 8}); }, kBad, false,
       "bias has 3 rows but expertNum = 4"},
      {"expandedX rows", Base::kDropless, [](C& c) { c.expanded_x = Float({7, 8}); }, kBad, false,
       "expandedX has shape (7, 8) but must be (8, 8)"},
      {"expandedX with activeNum", Base::kDropless, [](C& c) { c.active_num = 5; }, kBad, false,
       "expandedX has shape (8, 8) but must be (5, 8)"},
      {"expandedX columns", Base::kDropless, [](C& c) { c.expanded_x = Float({8, 9}); }, kBad, false,
       "expandedX has shape (8, 9) but must be (8, 8)"},
      {"expandedX in mode 1", Base::kDropPad, [](C& c) { c.expanded_x = Float({4, 3, 8}); }, kBad, false,
       "expandedX has shape (4, 3, 8) but must be (4, 4, 8)"},
      {"expandedX without scales is still checked", Base::kNoScales, [](C& c) { c.expanded_x = Float({8, 7}); }, kBad,
       false, "expandedX has shape (8, 7) but must be (8, 8)"},
      {"gradExpandedXOut rows", Base::kNoScales, [](C& c) { c.grad_expanded_x = Float({9, 8}); }, kBad, false,
       "gradExpandedXOut has shape (9, 8) but must be (8, 8)"},
      {"gradExpandedXOut in mode 1", Base::kDropPad, [](C& c) { c.grad_expanded_x = Float({4, 4, 9}); }, kBad, false,
       "gradExpandedXOut has shape (4, 4, 9) but must be (4, 4, 8)"},
      {"gradScalesOut transposed", Base::kDropless, [](C& c) { c.grad_scales = Float({2, 4}); }, kBad, false,
       "gradScalesOut has shape (2, 4) but must be (4, 2)"},
      // --- dtypes ---
      {"expandedRowIdx INT64", Base::kDropless, [](C& c) { c.expanded_row_idx = Int({8}, DType::kInt64); }, kBad, false,
       "expandedRowIdx has dtype INT64 but must be INT32"},
      {"expandedRowIdx FLOAT32", Base::kNoScales, [](C& c) { c.expanded_row_idx = Float({8}, DType::kFloat32); }, kBad,
       false, "expandedRowIdx has dtype FLOAT32 but must be INT32"},
      {"expertIdx INT64", Base::kDropless, [](C& c) { c.expert_idx = Int({4, 2}, DType::kInt64); }, kBad, false,
       "expertIdx has dtype INT64 but must be INT32"},
      {"gradY INT8", Base::kNoScales, [](C& c) { c.grad_y = Int({4, 8}, DType::kInt8); }, kBad, false,
       "gradY has dtype INT8 but must be FLOAT32, FLOAT16 or BFLOAT16"},
      {"gradY DOUBLE", Base::kNoScales, [](C& c) { c.grad_y = Float({4, 8}, DType::kFloat64); }, kBad, false,
       "gradY has dtype DOUBLE but must be FLOAT32, FLOAT16 or BFLOAT16"},
      // Two dtype groups: gradY, expandedX, bias and gradExpandedXOut (the tokens) share gradY's dtype; scales and
      // gradScalesOut (the weights) share scales', whatever the tokens' is.
      {"expandedX FLOAT32", Base::kDropless, [](C& c) { c.expanded_x = Float({8, 8}, DType::kFloat32); }, kBad, false,
       "expandedX is FLOAT32 but gradY is BFLOAT16 (gradY, expandedX, bias and gradExpandedXOut share a dtype)"},
      {"bias FLOAT16", Base::kDropPad, [](C& c) { c.bias = Float({4, 8}, DType::kFloat16); }, kBad, false,
       "bias is FLOAT16 but gradY is BFLOAT16 (gradY, expandedX, bias and gradExpandedXOut share a dtype)"},
      {"gradExpandedXOut FLOAT32", Base::kNoScales, [](C& c) { c.grad_expanded_x = Float({8, 8}, DType::kFloat32); },
       kBad, false, "gradExpandedXOut is FLOAT32 but gradY is BFLOAT16 (gradY, expandedX, bias and gradExpandedXOut"},
      {"expandedX INT8 without scales", Base::kNoScales, [](C& c) { c.expanded_x = Int({8, 8}, DType::kInt8); }, kBad,
       false, "expandedX is INT8 but gradY is BFLOAT16 (gradY, expandedX, bias and gradExpandedXOut share a dtype)"},
      {"tokens FLOAT16 but scales BFLOAT16 with a FLOAT16 bias", Base::kDropless,
       [](C& c) {
         c.grad_y = Float({4, 8}, DType::kFloat16);
         c.bias = Float({3, 8}, DType::kFloat16);
         c.grad_expanded_x = Float({8, 8}, DType::kFloat16);
       },
       kBad, false, "expandedX is BFLOAT16 but gradY is FLOAT16 (gradY, expandedX, bias and gradExpandedXOut share"},
      {"gradScalesOut FLOAT32", Base::kDropless, [](C& c) { c.grad_scales = Float({4, 2}, DType::kFloat32); }, kBad,
       false, "gradScalesOut is FLOAT32 but scales is BFLOAT16 (scales and gradScalesOut share a dtype)"},
      {"scales FLOAT16", Base::kDropless, [](C& c) { c.scales = Float({4, 2}, DType::kFloat16); }, kBad, false,
       "gradScalesOut is BFLOAT16 but scales is FLOAT16 (scales and gradScalesOut share a dtype)"},
      {"scales FLOAT32, gradScalesOut FLOAT16", Base::kDropPad,
       [](C& c) {
         c.scales = Float({4, 2}, DType::kFloat32);
         c.grad_scales = Float({4, 2}, DType::kFloat16);
       },
       kBad, false, "gradScalesOut is FLOAT16 but scales is FLOAT32 (scales and gradScalesOut share a dtype)"},
      {"scales INT32", Base::kDropless, [](C& c) { c.scales = Int({4, 2}); }, kBad, false,
       "scales has dtype INT32 but must be FLOAT32, FLOAT16 or BFLOAT16"},
      {"scales DOUBLE", Base::kDropPad, [](C& c) { c.scales = Float({4, 2}, DType::kFloat64); }, kBad, false,
       "scales has dtype DOUBLE but must be FLOAT32, FLOAT16 or BFLOAT16"},
      {"the tokens' dtype is checked before the weights'", Base::kDropless,
       [](C& c) {
         c.bias = Float({3, 8}, DType::kFloat32);
         c.grad_scales = Float({4, 2}, DType::kFloat16);
       },
       kBad, false, "bias is FLOAT32 but gradY is BFLOAT16"},
      // --- accepted: the weights in a dtype of their own (every combination is valid) ---
      {"scales and gradScalesOut FLOAT32 with BFLOAT16 tokens", Base::kDropless,
       [](C& c) {
         c.scales = Float({4, 2}, DType::kFloat32);
         c.grad_scales = Float({4, 2}, DType::kFloat32);
       },
       ACLNN_SUCCESS, false, ""},
      {"scales and gradScalesOut FLOAT16 with BFLOAT16 tokens", Base::kDropPad,
       [](C& c) {
         c.scales = Float({4, 2}, DType::kFloat16);
         c.grad_scales = Float({4, 2}, DType::kFloat16);
       },
       ACLNN_SUCCESS, false, ""},
      {"FLOAT32 tokens with BFLOAT16 scales", Base::kDropless,
       [](C& c) {
         c.grad_y = Float({4, 8}, DType::kFloat32);
         c.expanded_x = Float({8, 8}, DType::kFloat32);
         c.bias = Float({3, 8}, DType::kFloat32);
         c.grad_expanded_x = Float({8, 8}, DType::kFloat32);
       },
       ACLNN_SUCCESS, false, ""},
      // --- accepted: arguments that are not used are not held to the rules of used ones ---
      {"gradScalesOut of any shape and dtype without scales", Base::kNoScales,
       [](C& c) { c.grad_scales = Int({3}, DType::kInt64); }, ACLNN_SUCCESS, false, ""},
      {"expertIdx values without bias are not read", Base::kNoScales,
       [](C& c) { c.expert_idx = Int({4, 2}); c.expert_idx->SetI(3, -100); }, ACLNN_SUCCESS, false, ""},
      {"bias rows in mode 0 are free", Base::kDropless, [](C& c) {
         std::mt19937_64 rng(1);
         c.bias = Float({7, 8});
         c.bias->FillUniform(rng);
       },
       ACLNN_SUCCESS, false, ""},
      // --- index data, phase two (161002) ---
      {"row index R*K in mode 0", Base::kDropless, [](C& c) { c.expanded_row_idx->SetI(5, 8); }, kBad, true,
       "expandedRowIdx[5] = 8 is outside [0, 8) for dropPadMode 0"},
      {"row index -1 in mode 0", Base::kDropless, [](C& c) { c.expanded_row_idx->SetI(3, -1); }, kBad, true,
       "expandedRowIdx[3] = -1 is outside [0, 8) for dropPadMode 0"},
      {"row index past R*K with activeNum", Base::kNoScales,
       [](C& c) { c.active_num = 5; c.grad_expanded_x = Float({5, 8}); c.expanded_row_idx->SetI(7, 40); }, kBad, true,
       "expandedRowIdx[7] = 40 is outside [0, 8) for dropPadMode 0"},
      {"first bad row index is reported", Base::kNoScales,
       [](C& c) { c.expanded_row_idx->SetI(6, 100); c.expanded_row_idx->SetI(2, INT_MIN); }, kBad, true,
       "expandedRowIdx[2] = -2147483648 is outside [0, 8)"},
      {"row index -2 in mode 1", Base::kDropPad, [](C& c) { c.expanded_row_idx->SetI(0, -2); }, kBad, true,
       "expandedRowIdx[0] = -2 is outside [-1, 16) for dropPadMode 1"},
      {"row index E*C in mode 1", Base::kDropPad, [](C& c) { c.expanded_row_idx->SetI(7, 16); }, kBad, true,
       "expandedRowIdx[7] = 16 is outside [-1, 16) for dropPadMode 1"},
      {"expertIdx = bias rows", Base::kDropless, [](C& c) { c.expert_idx->SetI(4, 3); }, kBad, true,
       "expertIdx[4] = 3 is outside [0, 3), the rows of bias"},
      {"expertIdx -1", Base::kDropPad, [](C& c) { c.expert_idx->SetI(1, -1); }, kBad, true,
       "expertIdx[1] = -1 is outside [0, 4), the rows of bias"},
      {"expertIdx of a dropped pair", Base::kDropPad,
       [](C& c) { c.expanded_row_idx->SetI(6, -1); c.expert_idx->SetI(6, 4); }, kBad, true,
       "expertIdx[6] = 4 is outside [0, 4), the rows of bias"},
      {"row index checked before expertIdx", Base::kDropless,
       [](C& c) { c.expert_idx->SetI(0, 9); c.expanded_row_idx->SetI(7, 8); }, kBad, true, "expandedRowIdx[7] = 8"},
  };
  return cases;
}

class FinalizeRoutingV2GradBadArgument : public ::testing::TestWithParam<size_t> {};

TEST_P(FinalizeRoutingV2GradBadArgument, FailsCleanly) {
  const BadCase& bc = Cases()[GetParam()];
  SCOPED_TRACE(bc.name);
  FinalizeRoutingV2GradCase c = MakeBase(bc.base);
  bc.mutate(c);
  const FinalizeRoutingV2GradCase before = c;

  AclFinalizeRoutingV2GradCall call(c.Call());
  if (bc.null_data >= 0) call.Replace(bc.null_data, AclOf(**c.Tensors()[bc.null_data], /*null_data=*/true));
  uint64_t ws = 12345;
  aclOpExecutor* executor = reinterpret_cast<aclOpExecutor*>(&ws);  // any non-null value
  aclnnStatus status = call.PhaseOne(&ws, &executor);
  std::string message = aclGetRecentErrMsg();
  if (bc.phase_two || bc.status == ACLNN_SUCCESS) {
    ASSERT_EQ(status, ACLNN_SUCCESS) << message;
    ASSERT_NE(executor, nullptr);
    std::vector<int64_t> workspace((ws + 7) / 8);
    status = aclnnMoeFinalizeRoutingV2Grad(workspace.data(), ws, executor, nullptr);
    message = aclGetRecentErrMsg();
  } else {
    EXPECT_EQ(executor, nullptr) << "phase one failed but left an executor";
  }
  EXPECT_EQ(status, bc.status) << message;
  if (bc.status != ACLNN_SUCCESS) ExpectErrorMessage(message, Info::kName, bc.message);

  // Not one byte of any tensor written on an error (inputs are never written).
  const auto now = c.Tensors();
  const auto then = before.Tensors();
  const FinalizeRoutingV2GradArgs args = c.Args();
  for (size_t k = 0; k < now.size(); ++k) {
    if (!*now[k]) continue;
    const bool written_output = bc.status == ACLNN_SUCCESS && Info::kTensors[k].Written(args);
    if (!written_output) {
      EXPECT_TRUE((*now[k])->SameBytes((*then[k])->Snapshot())) << "argument " << k << " was written";
    }
  }

  // The C++ API takes the same path: same status, same message.
  if (bc.status != ACLNN_SUCCESS && c.grad_y && c.expanded_row_idx && c.grad_expanded_x && bc.null_data < 0) {
    const Status s = FinalizeRoutingV2Grad(c.Args());
    EXPECT_EQ(static_cast<aclnnStatus>(s.code()), bc.status);
    EXPECT_EQ(s.message(), message);
    EXPECT_TRUE(c.grad_expanded_x->SameBytes(before.grad_expanded_x->Snapshot()));
  }
}

INSTANTIATE_TEST_SUITE_P(Table, FinalizeRoutingV2GradBadArgument, ::testing::Range<size_t>(0, Cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string name = Cases()[info.param].name;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

std::vector<std::vector<uint8_t>> AllBytes(const FinalizeRoutingV2GradCase& c) {
  std::vector<std::vector<uint8_t>> out;
  for (const auto* t : c.Tensors()) out.push_back(*t ? (*t)->Snapshot() : std::vector<uint8_t>());
  return out;
}

// Outputs may not share memory with the inputs or with each other (an in-place gradient would read values it
// has already overwritten). Each output view is placed in another tensor's storage, which is at least as large.
TEST(FinalizeRoutingV2GradBadArgumentExtra, OverlappingOutputs) {
  const struct {
    int out, over;
    const char* message;
  } aliases[] = {{6, 2, "gradExpandedXOut overlaps expandedX in memory"},
                 {7, 3, "gradScalesOut overlaps scales in memory"},
                 {7, 0, "gradScalesOut overlaps gradY in memory"},
                 {7, 6, "gradExpandedXOut overlaps gradScalesOut in memory"}};
  for (const auto& a : aliases) {
    SCOPED_TRACE(a.message);
    FinalizeRoutingV2GradCase c = MakeBase(Base::kDropless);
    const auto before = AllBytes(c);
    AclFinalizeRoutingV2GradCall call(c.Call());
    const auto all = c.Tensors();
    call.Replace(a.out, AclOfOver(**all[a.out], **all[a.over]));
    uint64_t ws = 0;
    aclOpExecutor* executor = nullptr;
    EXPECT_EQ(call.PhaseOne(&ws, &executor), ACLNN_ERR_PARAM_INVALID);
    EXPECT_EQ(executor, nullptr);
    EXPECT_EQ(std::string(aclGetRecentErrMsg()), std::string(kOp) + a.message);
    EXPECT_EQ(AllBytes(c), before);
  }
}

// Phase two's workspace rules, and null pointers where the C API wants an object.
TEST(FinalizeRoutingV2GradBadArgumentExtra, WorkspaceAndExecutor) {
  FinalizeRoutingV2GradCase c = MakeBase(Base::kDropPad);
  const auto before = AllBytes(c);
  AclFinalizeRoutingV2GradCall call(c.Call());
  uint64_t ws = 0;
  aclOpExecutor* executor = nullptr;

  ASSERT_EQ(call.PhaseOne(&ws, &executor), ACLNN_SUCCESS) << aclGetRecentErrMsg();
  ASSERT_GT(ws, 0u);
  std::vector<int64_t> workspace((ws + 7) / 8 + 1);
  const std::string smaller = std::string(kOp) + "workspaceSize " + std::to_string(ws - 1) +
                              " is smaller than the " + std::to_string(ws) + " bytes the first phase reported";
  EXPECT_EQ(aclnnMoeFinalizeRoutingV2Grad(workspace.data(), ws - 1, executor, nullptr), ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(aclGetRecentErrMsg(), smaller);
  EXPECT_EQ(AllBytes(c), before);

  // A one-shot executor is consumed by its second phase, failed or not: plan again.
  ASSERT_EQ(call.PhaseOne(&ws, &executor), ACLNN_SUCCESS);
  EXPECT_EQ(aclnnMoeFinalizeRoutingV2Grad(nullptr, ws, executor, nullptr), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_EQ(aclGetRecentErrMsg(),
            std::string(kOp) + "workspace is null but workspaceSize is " + std::to_string(ws));
  EXPECT_EQ(AllBytes(c), before);

  EXPECT_EQ(aclnnMoeFinalizeRoutingV2Grad(workspace.data(), ws, nullptr, nullptr), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("executor is required but is null"), std::string::npos);

  executor = reinterpret_cast<aclOpExecutor*>(&ws);
  EXPECT_EQ(call.PhaseOne(nullptr, &executor), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_EQ(executor, nullptr);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("workspaceSize is required but is null"), std::string::npos);
  EXPECT_EQ(call.PhaseOne(&ws, nullptr), ACLNN_ERR_PARAM_NULLPTR);
  EXPECT_NE(std::string(aclGetRecentErrMsg()).find("executor is required but is null"), std::string::npos);
  EXPECT_EQ(AllBytes(c), before);

  // A larger workspace than asked for is fine, and the call then writes its outputs.
  ASSERT_EQ(call.PhaseOne(&ws, &executor), ACLNN_SUCCESS);
  EXPECT_EQ(aclnnMoeFinalizeRoutingV2Grad(workspace.data(), ws + 8, executor, nullptr), ACLNN_SUCCESS);
  EXPECT_NE(AllBytes(c), before);
}

// View rules that aclCreateTensor already enforces, so only the C++ API can reach them, and the workspace
// size overflow (a huge but empty drop/pad output).
TEST(FinalizeRoutingV2GradBadArgumentExtra, MalformedViewsThroughCpp) {
  const struct {
    const char* message;
    std::function<void(FinalizeRoutingV2GradArgs&)> mutate;
  } cases[] = {
      {"scales has rank 9; ranks 0..8 are supported", [](FinalizeRoutingV2GradArgs& a) { a.scales->rank = 9; }},
      {"bias has unknown dtype 5", [](FinalizeRoutingV2GradArgs& a) { a.bias->dtype = static_cast<DType>(5); }},
      {"gradY has negative size -1 in dimension 0", [](FinalizeRoutingV2GradArgs& a) { a.grad_y.sizes[0] = -1; }},
      {"gradExpandedXOut has negative stride -5 in dimension 1",
       [](FinalizeRoutingV2GradArgs& a) { a.grad_expanded_x.strides[1] = -5; }},
      {"expandedX of shape (8, 8) overflows 64-bit element offsets",
       [](FinalizeRoutingV2GradArgs& a) { a.expanded_x->strides[0] = INT64_MAX / 4; }},
      {"gradScalesOut of shape (4, 2) overflows 64-bit byte offsets",
       [](FinalizeRoutingV2GradArgs& a) { a.grad_scales->strides[0] = INT64_MAX / 4; }},
  };
  for (const auto& bc : cases) {
    SCOPED_TRACE(bc.message);
    FinalizeRoutingV2GradCase c = MakeBase(Base::kDropless);
    const auto before = AllBytes(c);
    FinalizeRoutingV2GradArgs a = c.Args();
    bc.mutate(a);
    Plan plan;
    const Status s = PlanFinalizeRoutingV2Grad(a, &plan);
    EXPECT_EQ(s.code(), StatusCode::kInvalid);
    EXPECT_EQ(s.message(), std::string(kOp) + bc.message);
    EXPECT_FALSE(plan.valid());
    EXPECT_EQ(AllBytes(c), before);
  }

  // E*C = 2^61 rows of H = 0: valid shapes, but 8 bytes per row of workspace do not fit in 64 bits.
  FinalizeRoutingV2GradArgs a;
  int32_t idx[1] = {0};
  float dummy[1] = {0};
  a.grad_y = TensorView(dummy, DType::kFloat32, {1, 0});
  a.expanded_row_idx = TensorView(idx, DType::kInt32, {1});
  a.drop_pad_mode = 1;
  a.expert_num = int64_t{1} << 31;
  a.expert_capacity = int64_t{1} << 30;
  a.grad_expanded_x = TensorView(dummy, DType::kFloat32, {int64_t{1} << 31, int64_t{1} << 30, 0});
  const Status s = FinalizeRoutingV2Grad(a);
  EXPECT_EQ(s.code(), StatusCode::kInvalid);
  EXPECT_EQ(s.message(), std::string(kOp) + "the workspace size overflows 64 bits");
}

// A bias with no rows (and a null data pointer, valid for an empty view) admits no expert: every
// expertIdx value is out of range, found in phase two before anything is written.
TEST(FinalizeRoutingV2GradBadArgumentExtra, EmptyBiasRejectsEveryExpertIdx) {
  FinalizeRoutingV2GradCase c = MakeBase(Base::kDropless);
  FinalizeRoutingV2GradArgs a = c.Args();
  a.bias = TensorView(nullptr, DType::kBFloat16, {0, 8});
  const auto before = AllBytes(c);
  Plan plan;
  ASSERT_TRUE(PlanFinalizeRoutingV2Grad(a, &plan).ok());
  const Status s = plan.Run();
  EXPECT_EQ(s.code(), StatusCode::kInvalid);
  EXPECT_NE(s.message().find("expertIdx[0] = "), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("is outside [0, 0), the rows of bias"), std::string::npos) << s.message();
  EXPECT_EQ(AllBytes(c), before);
}

}  // namespace
}  // namespace moegrad::testing
