// An empty batch (no tokens: R = 0, T = 0) with every combination of optional tensors, in every mode of every
// operator, through the C++ API (one call and plan) and aclnn: a combination the optional-argument rules allow
// succeeds and writes every non-empty output (zeros), K coming from scales, else expertIdx, else 0; one they
// forbid fails with the rule's NULLPTR status. MoeTokenPermuteWithRoutingMapGrad takes tokensNum > 0 only, so
// there every combination is INVALID naming tokensNum; MoeInitRoutingV2Grad has no optional tensors. An
// expert-parallel rank that receives no tokens runs the same code as the others.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "moegrad/op_info.hpp"
#include "tests/support/api.h"
#include "tests/support/valid_calls.h"

namespace moegrad::testing {
namespace {

constexpr Api kApis[] = {Api::kCpp, Api::kCppPlan, Api::kAclnn};

// Absent: the tensor `name` of `v` removed.
template <typename Args>
void Remove(ValidCall<Args>& v, const char* name) {
  v.tensors.at(TensorIndex<Args>(name)).reset();
}

// Runs `v` through every API. want_ok: success, every present float output all zeros afterwards (its bytes
// are set to a pattern before each run); else status `code` with a message containing `part`, nothing written.
template <typename Args>
void Expect(ValidCall<Args>& v, bool want_ok, StatusCode code, const std::string& part, const std::string& what) {
  using Info = OpInfo<Args>;
  for (const Api api : kApis) {
    SCOPED_TRACE(what + ", " + ApiName(api));
    for (size_t i = 0; i < kNumTensors<Args>; ++i) {
      if (v.tensors[i] && Info::kTensors[i].role == ArgRole::kOutput && v.tensors[i]->dtype() != DType::kInt32) {
        for (int64_t e = 0; e < v.tensors[i]->numel(); ++e) v.tensors[i]->SetF(e, 7.0f);
      }
    }
    const auto before = v.Snapshot();
    const Status s = v.Call().Run(api);
    if (want_ok) {
      ASSERT_TRUE(s.ok()) << s.message();
      for (size_t i = 0; i < kNumTensors<Args>; ++i) {
        if (!v.tensors[i] || Info::kTensors[i].role != ArgRole::kOutput) continue;
        if (v.tensors[i]->dtype() == DType::kInt32) continue;
        const Args args = v.Call().CppArgs();
        const bool written = Info::kTensors[i].Written(args);
        for (int64_t e = 0; e < v.tensors[i]->numel(); ++e) {
          if (written) {
            EXPECT_EQ(ElementBits(*v.tensors[i], e), 0u) << Info::kTensors[i].name << "[" << e << "]";
          } else {
            EXPECT_EQ(v.tensors[i]->GetF(e), 7.0f) << Info::kTensors[i].name << " is not written";
          }
        }
      }
    } else {
      EXPECT_EQ(s.code(), code) << s.message();
      if (api != Api::kAclnn) ExpectErrorMessage(s.message(), Info::kName, part);
      v.ExpectUnchanged(before);
    }
  }
}

// Bit b of `mask` says whether optional tensor b of `names` is present.
bool Has(unsigned mask, int b) { return ((mask >> b) & 1u) != 0; }

TEST(EmptyBatch, FinalizeRoutingV2GradEveryOptionalCombination) {
  const char* optional[] = {"expandedX", "scales", "expertIdx", "bias", "gradScalesOut"};
  constexpr int64_t K = 3, H = 5, E = 2, C = 2;
  int ok = 0;
  for (const int64_t mode : {0, 1}) {
    for (unsigned mask = 0; mask < 32; ++mask) {
      const bool x = Has(mask, 0), scales = Has(mask, 1), expert = Has(mask, 2), bias = Has(mask, 3);
      const bool grad_scales = Has(mask, 4);
      const std::vector<int64_t> x_shape = mode == 1 ? std::vector<int64_t>{E, C, H} : std::vector<int64_t>{0, H};
      ValidCall<FinalizeRoutingV2GradArgs> v;
      v.Tensor("gradY", kF32, {0, H}).Tensor("expandedRowIdx", kI32, {0}).Tensor("expandedX", kF32, x_shape);
      v.Tensor("scales", kF32, {0, K}).Tensor("expertIdx", kI32, {0, K}).Tensor("bias", kF32, {E, H});
      v.Tensor("gradExpandedXOut", kF32, x_shape).Tensor("gradScalesOut", kF32, {0, K});
      v.Attr("dropPadMode", mode).Attr("expertNum", mode == 1 ? E : 0).Attr("expertCapacity", mode == 1 ? C : 0);
      for (int b = 0; b < 5; ++b) {
        if (!Has(mask, b)) Remove(v, optional[b]);
      }
      std::string part;
      if (scales && !x) part = "expandedX (required with scales)";
      else if (scales && !grad_scales) part = "gradScalesOut (required with scales)";
      else if (bias && !scales) part = "scales (required with bias)";
      else if (bias && !expert) part = "expertIdx (required with bias)";
      ok += part.empty();
      Expect(v, part.empty(), StatusCode::kNullptr, part, "mode " + std::to_string(mode) + " mask " +
             std::to_string(mask));
    }
  }
  EXPECT_EQ(ok, 2 * 11);  // per mode: 8 without scales (bias then absent), 2 with scales, 1 with bias
}

TEST(EmptyBatch, FinalizeRoutingV2EveryOptionalCombination) {
  const char* optional[] = {"x1", "x2", "bias", "scales", "expertIdx"};
  constexpr int64_t K = 2, H = 4, E = 3, C = 2;
  int ok = 0;
  for (const int64_t mode : {0, 1, 2, 3}) {
    const bool drop_pad = mode == 1 || mode == 3;
    for (unsigned mask = 0; mask < 32; ++mask) {
      ValidCall<FinalizeRoutingV2Args> v;
      v.Tensor("expandedX", kF32, drop_pad ? std::vector<int64_t>{E, C, H} : std::vector<int64_t>{0, H});
      v.Tensor("expandedRowIdx", kI32, {0}).Tensor("x1", kF32, {0, H}).Tensor("x2", kF32, {0, H});
      v.Tensor("bias", kF32, {E, H}).Tensor("scales", kF32, {0, K}).Tensor("expertIdx", kI32, {0, K});
      v.Tensor("out", kF32, {0, H}).Attr("dropPadMode", mode);
      for (int b = 0; b < 5; ++b) {
        if (!Has(mask, b)) Remove(v, optional[b]);
      }
      const bool allowed = !Has(mask, 2) || Has(mask, 4);  // bias needs expertIdx
      ok += allowed;
      Expect(v, allowed, StatusCode::kNullptr, "expertIdx (required with bias)",
             "mode " + std::to_string(mode) + " mask " + std::to_string(mask));
    }
  }
  EXPECT_EQ(ok, 4 * 24);
}

// Today's regression: no scales, bias with an expertIdx of shape (0, K): K comes from expertIdx.
TEST(EmptyBatch, FinalizeRoutingV2TakesKFromExpertIdxWithoutScales) {
  for (const int64_t mode : {0, 1, 2, 3}) {
    const bool drop_pad = mode == 1 || mode == 3;
    ValidCall<FinalizeRoutingV2Args> v;
    v.Tensor("expandedX", kF32, drop_pad ? std::vector<int64_t>{2, 2, 8} : std::vector<int64_t>{0, 8});
    v.Tensor("expandedRowIdx", kI32, {0}).Tensor("bias", kF32, {2, 8}).Tensor("expertIdx", kI32, {0, 1});
    v.Tensor("out", kF32, {0, 8}).Attr("dropPadMode", mode);
    Expect(v, true, StatusCode::kOk, "", "mode " + std::to_string(mode));
    // With tokens the K of expertIdx must still match expandedRowIdx: (2, 1) with 4 pairs is rejected.
    ValidCall<FinalizeRoutingV2Args> w;
    w.Tensor("expandedX", kF32, drop_pad ? std::vector<int64_t>{2, 2, 8} : std::vector<int64_t>{4, 8});
    w.Tensor("expandedRowIdx", kI32, {4}, {0, 1, 2, 3}).Tensor("bias", kF32, {2, 8});
    w.Tensor("expertIdx", kI32, {2, 1}, {0, 1}).Tensor("out", kF32, {2, 8}).Attr("dropPadMode", mode);
    Expect(w, false, StatusCode::kInvalid, "expertIdx has shape (2, 1) but must be (2, 2)",
           "with tokens, mode " + std::to_string(mode));
  }
}

TEST(EmptyBatch, TokenPermuteWithRoutingMapEveryOptionalCombination) {
  constexpr int64_t H = 6, E = 4;
  for (const bool drop_and_pad : {false, true}) {
    for (unsigned mask = 0; mask < 4; ++mask) {
      ValidCall<TokenPermuteWithRoutingMapArgs> v;
      v.Tensor("tokens", kF32, {0, H}).Tensor("routingMap", DType::kInt8, {0, E}).Tensor("probs", kF32, {0, E});
      v.Tensor("permuteTokensOut", kF32, {0, H}).Tensor("permuteProbsOut", kF32, {0});
      v.Tensor("sortedIndicesOut", kI32, {0}).Attr("numOutTokens", 0).Attr("dropAndPad", drop_and_pad);
      if (!Has(mask, 0)) Remove(v, "probs");
      if (!Has(mask, 1)) Remove(v, "permuteProbsOut");
      const bool allowed = !Has(mask, 0) || Has(mask, 1);  // probs needs permuteProbsOut
      Expect(v, allowed, StatusCode::kNullptr, "permuteProbsOut",
             std::string(drop_and_pad ? "drop-and-pad" : "dropless") + " mask " + std::to_string(mask));
    }
  }
}

TEST(EmptyBatch, TokenPermuteWithRoutingMapGradNeedsTokens) {
  constexpr int64_t H = 6, E = 4;
  for (const bool drop_and_pad : {false, true}) {
    for (unsigned mask = 0; mask < 8; ++mask) {
      ValidCall<TokenPermuteWithRoutingMapGradArgs> v;
      v.Tensor("permutedTokenOutputGrad", kF32, {0, H}).Tensor("permutedProbsOutputGrad", kF32, {0});
      v.Tensor("sortedIndices", kI32, {0}).Tensor("routingMap", DType::kInt8, {0, E});
      v.Tensor("tokensGradOut", kF32, {0, H}).Tensor("probsGradOut", kF32, {0, E});
      v.Attr("numExperts", E).Attr("tokensNum", 0).Attr("dropAndPad", drop_and_pad);
      if (!Has(mask, 0)) Remove(v, "permutedProbsOutputGrad");
      if (!Has(mask, 1)) Remove(v, "routingMap");
      if (!Has(mask, 2)) Remove(v, "probsGradOut");
      const bool nullptr_rule = Has(mask, 0) && (!Has(mask, 2) || (!drop_and_pad && !Has(mask, 1)));
      Expect(v, false, nullptr_rule ? StatusCode::kNullptr : StatusCode::kInvalid,
             nullptr_rule ? "required with permutedProbsOutputGrad" : "tokensNum = 0 must be > 0",
             std::string(drop_and_pad ? "drop-and-pad" : "dropless") + " mask " + std::to_string(mask));
    }
  }
}

TEST(EmptyBatch, InitRoutingV2EveryOptionalCombination) {
  constexpr int64_t K = 2, H = 6, E = 3, C = 2;
  for (const int64_t mode : {0, 1}) {
    for (const int64_t flag : {0, 1, 2}) {
      for (const bool before_flag : {false, true}) {
        for (unsigned mask = 0; mask < 4; ++mask) {
          ValidCall<InitRoutingV2Args> v;
          v.Tensor("x", kF32, {0, H}).Tensor("expertIdx", kI32, {0, K}).Tensor("expandedRowIdxOut", kI32, {0});
          v.Tensor("expandedXOut", kF32, mode == 1 ? std::vector<int64_t>{E, C, H} : std::vector<int64_t>{0, H});
          v.Tensor("expertTokensCountOrCumsumOut", kI32, {E}).Tensor("expertTokensBeforeCapacityOut", kI32, {E});
          v.Attr("dropPadMode", mode).Attr("expertNum", E).Attr("expertCapacity", C).Attr("activeNum", 4);
          v.Attr("expertTokensCountOrCumsumFlag", flag).Attr("expertTokensBeforeCapacityFlag", before_flag);
          if (!Has(mask, 0)) Remove(v, "expertTokensCountOrCumsumOut");
          if (!Has(mask, 1)) Remove(v, "expertTokensBeforeCapacityOut");
          const bool needs_count = mode == 0 && flag != 0, needs_before = mode == 1 && before_flag;
          const bool allowed = (!needs_count || Has(mask, 0)) && (!needs_before || Has(mask, 1));
          const std::string what = "mode " + std::to_string(mode) + " flag " + std::to_string(flag) +
                                   (before_flag ? " before" : "") + " mask " + std::to_string(mask);
          Expect(v, allowed, StatusCode::kNullptr, needs_count ? "expertTokensCountOrCumsumOut (required with"
                                                               : "expertTokensBeforeCapacityOut (required with", what);
          // The counts it writes are all 0.
          for (const char* name : {"expertTokensCountOrCumsumOut", "expertTokensBeforeCapacityOut"}) {
            const auto& t = v.tensors.at(TensorIndex<InitRoutingV2Args>(name));
            const bool written = allowed && t && (std::string(name) == "expertTokensCountOrCumsumOut" ? needs_count
                                                                                                      : needs_before);
            for (int64_t e = 0; written && e < E; ++e) EXPECT_EQ(t->GetI(e), 0) << what << " " << name;
          }
        }
      }
    }
  }
}

// No optional tensors: an empty batch (L = 0) is valid in both modes, for any activeNum; mode 1's gradExpandedX
// keeps its E*C rows (the forward's +0 rows), which nothing reads.
TEST(EmptyBatch, InitRoutingV2GradWithoutTokens) {
  constexpr int64_t H = 6;
  for (const int64_t mode : {0, 1}) {
    for (const int64_t active : {0, 3}) {
      ValidCall<InitRoutingV2GradArgs> v;
      v.Tensor("gradExpandedX", kF32, mode == 1 ? std::vector<int64_t>{3, 2, H} : std::vector<int64_t>{0, H});
      v.Tensor("expandedRowIdx", kI32, {0}).Tensor("out", kF32, {0, H});
      v.Attr("topK", 4).Attr("dropPadMode", mode).Attr("activeNum", active);
      Expect(v, true, StatusCode::kOk, "", "mode " + std::to_string(mode) + " activeNum " + std::to_string(active));
    }
  }
}

// No tokens (T = 0, N = 0) with every combination of routingMap, probs, permuteProbs and restoreShape, in both
// modes: probs needs permuteProbs (and dropless a routingMap); without probs restoreShape is required.
TEST(EmptyBatch, TokenUnpermuteWithRoutingMapEveryOptionalCombination) {
  constexpr int64_t H = 6, E = 4;
  int ok = 0;
  for (const bool pad : {false, true}) {
    for (unsigned mask = 0; mask < 16; ++mask) {
      ValidCall<TokenUnpermuteWithRoutingMapArgs> v;
      v.Tensor("permutedTokens", kF32, {0, H}).Tensor("sortedIndices", kI32, {0});
      v.Tensor("routingMapOptional", DType::kInt8, {0, E}).Tensor("probsOptional", kF32, {0, E});
      v.Tensor("unpermutedTokens", kF32, {0, H}).Tensor("outIndex", kI32, {0}).Tensor("permuteTokenId", kI32, {0});
      v.Tensor("permuteProbs", kF32, {0}).Attr("paddedMode", pad);
      if (!Has(mask, 0)) Remove(v, "routingMapOptional");
      if (!Has(mask, 1)) Remove(v, "probsOptional");
      if (!Has(mask, 2)) Remove(v, "permuteProbs");
      if (Has(mask, 3)) v.arrays[0] = std::vector<int64_t>{0, H};
      const bool probs = Has(mask, 1);
      std::string part;
      if (!probs && !Has(mask, 3)) part = "restoreShapeOptional is required when probsOptional is null";
      else if (probs && !pad && !Has(mask, 0)) part = "routingMapOptional (required with probsOptional";
      else if (probs && !Has(mask, 2)) part = "permuteProbs (required with probsOptional)";
      ok += part.empty();
      Expect(v, part.empty(), StatusCode::kNullptr, part,
             std::string(pad ? "pad" : "dropless") + " mask " + std::to_string(mask));
    }
  }
  EXPECT_EQ(ok, 6 + 8);  // dropless: 4 without probs, 2 with them; pad: 4 and 4
}

// No tokens and no pairs (T = 0, N = 0), every combination of the optional tensors in both modes: probs needs
// routingMap, permutedTokens and probsGradOut; without probs anything goes (probsGradOut is then not written).
TEST(EmptyBatch, TokenUnpermuteWithRoutingMapGradWithoutTokens) {
  using A = TokenUnpermuteWithRoutingMapGradArgs;
  constexpr int64_t H = 6, E = 3;
  const char* optional[] = {"routingMapOptional", "permutedTokensOptional", "probsOptional", "probsGradOutOptional"};
  for (const int64_t dp : {0, 1}) {
    for (int mask = 0; mask < 16; ++mask) {
      ValidCall<A> v;
      v.Tensor("unpermutedTokensGrad", kF32, {0, H}).Tensor("outIndex", kI32, {0}).Tensor("permuteTokenId", kI32, {0});
      v.Tensor("routingMapOptional", DType::kBool, {0, E}).Tensor("permutedTokensOptional", kF32, {0, H});
      v.Tensor("probsOptional", kF32, {0, E}).Tensor("probsGradOutOptional", kF32, {0, E});
      v.Tensor("permutedTokensGradOut", kF32, {0, H}).Attr("dropAndPad", dp);
      std::string what = "dropAndPad " + std::to_string(dp);
      for (int b = 0; b < 4; ++b) {
        if (mask & (1 << b)) {
          what += std::string(" ") + optional[b];
        } else {
          Remove(v, optional[b]);
        }
      }
      const bool probs = mask & 4;
      const bool allowed = !probs || (mask & 1 && mask & 2 && mask & 8);
      Expect(v, allowed, StatusCode::kNullptr, "(required with probsOptional) is required but is null", what);
    }
  }
}

}  // namespace
}  // namespace moegrad::testing
