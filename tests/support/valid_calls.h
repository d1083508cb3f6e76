// One small valid call of every operator (tensors set by their OpInfo names, attributes by theirs), for tests that
// change one thing about a call that works and expect exactly that change to fail, writing nothing.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "moegrad/op_info.hpp"
#include "tests/support/api.h"

namespace moegrad::testing {

// The tensors of one valid call, set by their OpInfo names, and its attributes.
template <typename Args>
struct ValidCall {
  std::array<std::optional<TestTensor>, kNumTensors<Args>> tensors;
  std::array<int64_t, kNumAttrs<Args>> attrs{};
  IntArrays<Args> arrays{};

  ValidCall& Tensor(const char* name, DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> ints = {}) {
    TestTensor t(dtype, std::move(sizes));
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (dtype == DType::kInt32 || dtype == DType::kInt8) t.SetI(i, ints.empty() ? 1 : ints[i]);
      else t.SetF(i, 0.25f * static_cast<float>(i % 7));
    }
    tensors.at(TensorIndex<Args>(name)) = std::move(t);
    return *this;
  }
  ValidCall& Attr(const char* name, int64_t v) {
    attrs.at(AttrIndex<Args>(name)) = v;
    return *this;
  }
  TestCall<Args> Call() {
    TestCall<Args> c;
    for (size_t i = 0; i < tensors.size(); ++i) c.tensors[i] = tensors[i] ? &*tensors[i] : nullptr;
    c.attrs = attrs;
    c.arrays = arrays;
    return c;
  }
  std::vector<std::vector<uint8_t>> Snapshot() const {
    std::vector<std::vector<uint8_t>> s;
    for (const auto& t : tensors) s.push_back(t ? t->Snapshot() : std::vector<uint8_t>());
    return s;
  }
  void ExpectUnchanged(const std::vector<std::vector<uint8_t>>& before) const {
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i]) {
        EXPECT_TRUE(tensors[i]->SameBytes(before[i])) << OpInfo<Args>::kTensors[i].name;
      }
    }
  }
};

inline constexpr DType kF32 = DType::kFloat32, kI32 = DType::kInt32;

inline ValidCall<FinalizeRoutingV2GradArgs> FinalizeRoutingV2GradCall() {  // R 2, K 2, H 4, dropless, scales
  ValidCall<FinalizeRoutingV2GradArgs> v;
  v.Tensor("gradY", kF32, {2, 4}).Tensor("expandedRowIdx", kI32, {4}, {0, 1, 2, 3}).Tensor("expandedX", kF32, {4, 4});
  v.Tensor("scales", kF32, {2, 2}).Tensor("gradExpandedXOut", kF32, {4, 4}).Tensor("gradScalesOut", kF32, {2, 2});
  return v;
}

inline ValidCall<TokenPermuteWithRoutingMapGradArgs> TokenPermuteWithRoutingMapGradCall() {  // T 2, E 2, K 2, H 4
  ValidCall<TokenPermuteWithRoutingMapGradArgs> v;
  v.Tensor("permutedTokenOutputGrad", kF32, {4, 4}).Tensor("sortedIndices", kI32, {4}, {0, 1, 2, 3});
  v.Tensor("tokensGradOut", kF32, {2, 4}).Attr("numExperts", 2).Attr("tokensNum", 2);
  return v;
}

inline ValidCall<FinalizeRoutingV2Args> FinalizeRoutingV2Call() {  // R 2, K 2, H 4, mode 2
  ValidCall<FinalizeRoutingV2Args> v;
  v.Tensor("expandedX", kF32, {4, 4}).Tensor("expandedRowIdx", kI32, {4}, {0, 1, 2, 3});
  v.Tensor("scales", kF32, {2, 2}).Tensor("out", kF32, {2, 4}).Attr("dropPadMode", 2);
  return v;
}

inline ValidCall<TokenPermuteWithRoutingMapArgs> TokenPermuteWithRoutingMapCall() {  // T 2, E 2, every token to both
  ValidCall<TokenPermuteWithRoutingMapArgs> v;
  v.Tensor("tokens", kF32, {2, 4}).Tensor("routingMap", DType::kInt8, {2, 2}).Tensor("permuteTokensOut", kF32, {4, 4});
  v.Tensor("sortedIndicesOut", kI32, {4}, {0, 0, 0, 0}).Attr("numOutTokens", 4);
  return v;
}

inline ValidCall<InitRoutingV2Args> InitRoutingV2Call() {  // N 2, K 2, H 4, E 3, dropless, activeNum 3, cumsum
  ValidCall<InitRoutingV2Args> v;
  v.Tensor("x", kF32, {2, 4}).Tensor("expertIdx", kI32, {2, 2}, {0, 2, 1, 2}).Tensor("expandedXOut", kF32, {3, 4});
  v.Tensor("expandedRowIdxOut", kI32, {4}).Tensor("expertTokensCountOrCumsumOut", kI32, {3});
  v.Attr("activeNum", 3).Attr("expertNum", 3).Attr("expertTokensCountOrCumsumFlag", 1);
  return v;
}

inline ValidCall<InitRoutingV2GradArgs> InitRoutingV2GradCall() {  // N 2, K 2, H 4, drop/pad E 2, C 3
  ValidCall<InitRoutingV2GradArgs> v;
  v.Tensor("gradExpandedX", kF32, {2, 3, 4}).Tensor("expandedRowIdx", kI32, {4}, {0, 3, -1, 4});
  v.Tensor("out", kF32, {2, 4}).Attr("topK", 2).Attr("dropPadMode", 1);
  return v;
}

inline ValidCall<TokenUnpermuteWithRoutingMapArgs> TokenUnpermuteWithRoutingMapCall() {  // T 2, E 2, K 2, H 4
  ValidCall<TokenUnpermuteWithRoutingMapArgs> v;
  v.Tensor("permutedTokens", kF32, {4, 4}).Tensor("sortedIndices", kI32, {4}, {0, 2, 1, 3});
  v.Tensor("routingMapOptional", DType::kInt8, {2, 2}).Tensor("probsOptional", kF32, {2, 2});
  v.Tensor("unpermutedTokens", kF32, {2, 4}).Tensor("outIndex", kI32, {4}).Tensor("permuteTokenId", kI32, {4});
  v.Tensor("permuteProbs", kF32, {4});
  return v;
}

inline ValidCall<TokenUnpermuteWithRoutingMapGradArgs> TokenUnpermuteWithRoutingMapGradCall() {  // T 2, E 3, K 2, H 4
  ValidCall<TokenUnpermuteWithRoutingMapGradArgs> v;
  v.Tensor("unpermutedTokensGrad", kF32, {2, 4}).Tensor("outIndex", kI32, {4}, {0, 2, 1, 3});
  v.Tensor("permuteTokenId", kI32, {4}, {0, 0, 1, 1});
  v.Tensor("routingMapOptional", DType::kInt8, {2, 3}, {1, 1, 0, 0, 1, 1});
  v.Tensor("permutedTokensOptional", kF32, {4, 4}).Tensor("probsOptional", kF32, {2, 3});
  v.Tensor("permutedTokensGradOut", kF32, {4, 4}).Tensor("probsGradOutOptional", kF32, {2, 3});
  return v;
}

}  // namespace moegrad::testing
