// The output query (Infer<Op>Outputs, OpInfo<Args>::kInfer): phase one without the outputs. For every operator,
// on many valid calls the shapes and dtypes it reports are exactly those phase one accepts (each size one
// larger or smaller, or another dtype, is rejected) and the outputs it says are not written are those OpInfo
// says; on bad inputs and attributes it fails with phase one's status and message; it never reads or writes
// the outputs of the arguments.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "moegrad/op_info.hpp"
#include "moegrad/ops.hpp"
#include "tests/support/api.h"
#include "tests/support/test_tensor.h"

namespace moegrad::testing {
namespace {

constexpr DType kF32 = DType::kFloat32, kF16 = DType::kFloat16, kBF16 = DType::kBFloat16, kI32 = DType::kInt32;

// One call: its tensors in OpInfo<Args>::kTensors order (absent: nullopt), by name, and its attributes.
template <typename Args>
struct Call {
  std::array<std::optional<TestTensor>, kNumTensors<Args>> t;
  std::array<int64_t, kNumAttrs<Args>> attrs{};
  IntArrays<Args> arrays{};
  std::string what;

  std::optional<TestTensor>& operator[](const char* name) {
    const size_t i = TensorIndex<Args>(name);
    EXPECT_LT(i, kNumTensors<Args>) << name;
    return t[i];
  }
  void Set(const char* name, TestTensor v) { (*this)[name] = std::move(v); }
  void Attr(const char* name, int64_t v) { attrs[AttrIndex<Args>(name)] = v; }
  // The C++ arguments; without_outputs leaves every output absent (a required one an empty view).
  Args CppArgs(bool without_outputs = false) const {
    std::array<const TensorView*, kNumTensors<Args>> views{};
    for (size_t i = 0; i < views.size(); ++i) {
      const bool output = OpInfo<Args>::kTensors[i].role == ArgRole::kOutput;
      views[i] = t[i] && !(without_outputs && output) ? &t[i]->view() : nullptr;
    }
    return MakeArgs<Args>(views.data(), attrs.data(), &arrays);
  }
};

template <typename Args>
Status Query(const Args& a, std::vector<OutputSpec>* specs) {
  return OpInfo<Args>::kInfer(a, specs);
}
template <typename Args>
Status PhaseOne(const Args& a) {
  Plan plan;
  return OpInfo<Args>::kPlan(a, &plan);
}

std::string Describe(const Status& s) { return std::to_string(static_cast<int>(s.code())) + " " + s.message(); }

std::vector<int64_t> SizesOf(const OutputSpec& s) { return std::vector<int64_t>(s.sizes, s.sizes + s.rank); }

// The query of `c` (outputs absent) against phase one with the outputs it reports: accepted as reported,
// rejected with any one size off by one (where `unique` says the size follows from the inputs) or another dtype.
// `c` gets the reported outputs.
template <typename Args>
void ExpectQueryMatchesPhaseOne(Call<Args>& c, const std::function<bool(const char*, int)>& unique) {
  SCOPED_TRACE(std::string(OpInfo<Args>::kName) + ": " + c.what);
  std::vector<OutputSpec> specs(1);  // the query replaces whatever is there
  const Args inputs = c.CppArgs(true);
  const Status q = Query(inputs, &specs);
  ASSERT_TRUE(q.ok()) << q.message();
  size_t n = 0;
  for (size_t i = 0; i < kNumTensors<Args>; ++i) {
    const TensorArg<Args>& arg = OpInfo<Args>::kTensors[i];
    if (arg.role != ArgRole::kOutput) continue;
    ASSERT_LT(n, specs.size());
    const OutputSpec& spec = specs[n++];
    EXPECT_STREQ(spec.name, arg.name);
    EXPECT_EQ(spec.written, arg.WrittenBy(inputs)) << arg.name;
    if (spec.written) {
      c.t[i] = TestTensor(spec.dtype, SizesOf(spec), Layout::kPadded, 7 + i);
    } else {
      c.t[i].reset();
    }
  }
  EXPECT_EQ(n, specs.size());
  const Status accepted = PhaseOne(c.CppArgs());
  ASSERT_TRUE(accepted.ok()) << accepted.message();
  const Status run = OpInfo<Args>::kRun(c.CppArgs());  // and the call runs (every index value is 0, or a real map)
  EXPECT_TRUE(run.ok()) << run.message();

  for (size_t i = 0; i < kNumTensors<Args>; ++i) {
    if (OpInfo<Args>::kTensors[i].role != ArgRole::kOutput || !c.t[i]) continue;
    const char* name = OpInfo<Args>::kTensors[i].name;
    const TestTensor reported = *c.t[i];
    std::vector<int64_t> sizes = reported.sizes_vector();
    for (int d = 0; d < static_cast<int>(sizes.size()); ++d) {
      if (!unique(name, d)) continue;
      for (int64_t delta : {-1, 1}) {
        std::vector<int64_t> off = sizes;
        off[static_cast<size_t>(d)] += delta;
        if (off[static_cast<size_t>(d)] < 0) continue;
        c.t[i] = TestTensor(reported.dtype(), off);
        const Status s = PhaseOne(c.CppArgs());
        EXPECT_EQ(s.code(), StatusCode::kInvalid) << name << " dimension " << d << " " << delta << ": "
                                                  << s.message();
      }
    }
    const DType other = reported.dtype() == kF32 ? kF16 : kF32;
    c.t[i] = TestTensor(other, sizes);
    EXPECT_EQ(PhaseOne(c.CppArgs()).code(), StatusCode::kInvalid) << name << " of another dtype";
    c.t[i] = reported;
  }
}

bool Always(const char*, int) { return true; }

template <typename Args>
Call<Args> Find(const std::vector<Call<Args>>& calls, const std::string& what) {
  for (const Call<Args>& c : calls) {
    if (c.what == what) return c;
  }
  ADD_FAILURE() << "no call " << what;
  return calls.front();
}

// --- valid calls -------------------------------------------------------------------------------------------

std::vector<Call<FinalizeRoutingV2GradArgs>> FinalizeRoutingV2GradCalls() {
  std::vector<Call<FinalizeRoutingV2GradArgs>> calls;
  const int64_t H = 5, E = 3, C = 2;
  for (int64_t mode : {0, 1}) {
    for (int64_t R : {0, 4}) {
      for (int64_t K : {1, 3}) {
        for (int variant = 0; variant < 4; ++variant) {  // 0 bare, 1 expandedX, 2 scales, 3 scales + bias
          // The tokens' dtype f and, with scales, the weights' w: the same, or another.
          for (const auto& [f, w] : {std::pair{kF32, kF32}, std::pair{kBF16, kBF16}, std::pair{kBF16, kF32},
                                     std::pair{kF32, kF16}}) {
            if (variant < 2 && f != w) continue;
            Call<FinalizeRoutingV2GradArgs> c;
            const int64_t active = mode == 0 && variant == 1 && R * K > 2 ? R * K - 2 : 0;
            const int64_t rows = active > 0 ? active : R * K;
            c.Set("gradY", TestTensor(f, {R, H}, Layout::kTransposed));
            c.Set("expandedRowIdx", TestTensor(kI32, {R * K}));
            for (int64_t i = 0; i < R * K; ++i) c["expandedRowIdx"]->SetI(i, 0);
            if (variant >= 1) {
              c.Set("expandedX", mode == 1 ? TestTensor(f, {E, C, H}) : TestTensor(f, {rows, H}));
            }
            if (variant >= 2) c.Set("scales", TestTensor(w, {R, K}));
            if (variant == 3) {
              c.Set("expertIdx", TestTensor(kI32, {R, K}));
              for (int64_t i = 0; i < R * K; ++i) c["expertIdx"]->SetI(i, 0);
              c.Set("bias", TestTensor(f, {E, H}));
            }
            c.attrs = {mode, active, mode == 1 ? E : 0, mode == 1 ? C : 0};
            c.what = "mode " + std::to_string(mode) + " R " + std::to_string(R) + " K " + std::to_string(K) +
                     " variant " + std::to_string(variant) + " " + DTypesName({f, w});
            calls.push_back(c);
          }
        }
      }
    }
  }
  return calls;
}

std::vector<Call<TokenPermuteWithRoutingMapGradArgs>> TokenPermuteWithRoutingMapGradCalls() {
  std::vector<Call<TokenPermuteWithRoutingMapGradArgs>> calls;
  std::mt19937_64 rng(5);
  for (bool dp : {false, true}) {
    for (int64_t T : {1, 5}) {
      for (int64_t E : {1, 4}) {
        for (int64_t k_or_c : {0, 1, 3}) {
          if (!dp && k_or_c > E) continue;
          for (int probs_dtype = 0; probs_dtype < 3; ++probs_dtype) {  // none, FLOAT16 (the tokens'), FLOAT32
            const bool probs = probs_dtype > 0;
            Call<TokenPermuteWithRoutingMapGradArgs> c;
            const int64_t N = dp ? E * k_or_c : T * k_or_c;
            const int64_t H = 6;
            c.Set("permutedTokenOutputGrad", TestTensor(kF16, {N, H}, Layout::kPadded));
            c.Set("sortedIndices", TestTensor(kI32, {N}));
            for (int64_t i = 0; i < N; ++i) c["sortedIndices"]->SetI(i, 0);
            if (probs) c.Set("permutedProbsOutputGrad", TestTensor(probs_dtype == 1 ? kF16 : kF32, {N}));
            if (probs && !dp) {
              c.Set("routingMap", TestTensor(DType::kBool, {T, E}));
              SetRoutingMap(*c["routingMap"], RandomRouting(T, E, false, k_or_c, 0, rng));
            }
            c.attrs = {E, T, dp ? 1 : 0};
            c.what = std::string(dp ? "drop-and-pad" : "dropless") + " T " + std::to_string(T) + " E " +
                     std::to_string(E) + " K/C " + std::to_string(k_or_c) + (probs ? " probs" : "") +
                     (probs_dtype == 2 ? " FLOAT32" : "");
            calls.push_back(c);
          }
        }
      }
    }
  }
  return calls;
}

// `r_from`: which of scales, x1, x2, expertIdx are given (bits 0..3), as R's source.
std::vector<Call<FinalizeRoutingV2Args>> FinalizeRoutingV2Calls() {
  std::vector<Call<FinalizeRoutingV2Args>> calls;
  const int64_t H = 3, E = 2, C = 4;
  for (int64_t mode : {0, 1, 2, 3}) {
    for (int64_t R : {0, 3}) {
      for (int r_from : {0, 1, 2, 4, 8, 15}) {
        // R = 0 with expertIdx but without scales fixes no K > 0 (K is 0 then): left out.
        if (R == 0 && (r_from & 8) && !(r_from & 1)) continue;
        const bool dp = mode == 1 || mode == 3;
        const int64_t K = r_from == 0 ? 1 : 2;  // without any (R, ...) input, K is 1
        Call<FinalizeRoutingV2Args> c;
        c.Set("expandedX", dp ? TestTensor(kF32, {E, C, H}) : TestTensor(kF32, {R * K, H}, Layout::kTransposed));
        c.Set("expandedRowIdx", TestTensor(kI32, {R * K}));
        for (int64_t i = 0; i < R * K; ++i) c["expandedRowIdx"]->SetI(i, 0);
        // scales in the rows' dtype, or (odd modes) in another.
        if (r_from & 1) c.Set("scales", TestTensor(mode % 2 == 0 ? kF32 : kBF16, {R, K}));
        if (r_from & 2) c.Set("x1", TestTensor(kF32, {R, H}));
        if (r_from & 4) c.Set("x2", TestTensor(kF32, {R, H}));
        if (r_from & 8) {
          c.Set("expertIdx", TestTensor(kI32, {R, K}));
          for (int64_t i = 0; i < R * K; ++i) c["expertIdx"]->SetI(i, 0);
          c.Set("bias", TestTensor(kF32, {E, H}));
        }
        c.attrs = {mode};
        c.what = "mode " + std::to_string(mode) + " R " + std::to_string(R) + " inputs " + std::to_string(r_from);
        calls.push_back(c);
      }
    }
  }
  return calls;
}

std::vector<Call<TokenPermuteWithRoutingMapArgs>> TokenPermuteWithRoutingMapCalls() {
  std::vector<Call<TokenPermuteWithRoutingMapArgs>> calls;
  std::mt19937_64 rng(9);
  for (bool dp : {false, true}) {
    for (int64_t T : {0, 4}) {
      for (int64_t k_or_c : {0, 2}) {
        if (dp && T == 0 && k_or_c > 0) continue;  // E*C rows, more than T*E = 0
        for (int probs_dtype = 0; probs_dtype < 3; ++probs_dtype) {  // none, BFLOAT16 (the tokens'), FLOAT32
          const bool probs = probs_dtype > 0;
          const int64_t E = 3;
          Call<TokenPermuteWithRoutingMapArgs> c;
          c.Set("tokens", TestTensor(kBF16, {T, 8}, Layout::kPadded));
          c.Set("routingMap", TestTensor(DType::kInt8, {T, E}));
          SetRoutingMap(*c["routingMap"], RandomRouting(T, E, dp, k_or_c, 0.5, rng));
          if (probs) c.Set("probs", TestTensor(probs_dtype == 1 ? kBF16 : kF32, {T, E}));
          c.attrs = {dp ? E * k_or_c : T * k_or_c, dp ? 1 : 0};
          c.what = std::string(dp ? "drop-and-pad" : "dropless") + " T " + std::to_string(T) + " K/C " +
                   std::to_string(k_or_c) + (probs ? " probs" : "") + (probs_dtype == 2 ? " FLOAT32" : "");
          calls.push_back(c);
        }
      }
    }
  }
  return calls;
}

std::vector<Call<InitRoutingV2Args>> InitRoutingV2Calls() {
  std::vector<Call<InitRoutingV2Args>> calls;
  const int64_t H = 5, C = 2;
  for (int64_t mode : {0, 1}) {
    for (int64_t N : {0, 4}) {
      for (int64_t K : {1, 3}) {
        for (int64_t flag : {0, 1, 2}) {
          for (bool before : {false, true}) {
            for (int64_t active : {0, 5}) {
              const int64_t E = mode == 0 && flag == 0 && !before ? 0 : 3;  // expertNum unused: may be 0
              Call<InitRoutingV2Args> c;
              c.Set("x", TestTensor(mode == 1 ? kF16 : kBF16, {N, H}, Layout::kPadded));
              c.Set("expertIdx", TestTensor(kI32, {N, K}, Layout::kTransposed));
              for (int64_t i = 0; i < N * K; ++i) c["expertIdx"]->SetI(i, 0);
              c.attrs = {active, mode == 1 ? C : 0, E, mode, flag, before ? 1 : 0};
              c.what = "mode " + std::to_string(mode) + " N " + std::to_string(N) + " K " + std::to_string(K) +
                       " flag " + std::to_string(flag) + (before ? " before" : "") + " activeNum " +
                       std::to_string(active);
              calls.push_back(c);
            }
          }
        }
      }
    }
  }
  return calls;
}

std::vector<Call<InitRoutingV2GradArgs>> InitRoutingV2GradCalls() {
  std::vector<Call<InitRoutingV2GradArgs>> calls;
  const int64_t H = 7, E = 3, C = 2;
  for (int64_t mode : {0, 1}) {
    for (int64_t N : {0, 4}) {
      for (int64_t K : {1, 3}) {
        for (int64_t active : {int64_t{0}, int64_t{2}, N * K, N * K + 3}) {
          for (DType f : {kF32, kF16, kBF16}) {
            Call<InitRoutingV2GradArgs> c;
            const int64_t L = N * K;
            const int64_t rows = active > 0 && active < L ? active : L;
            c.Set("gradExpandedX",
                  mode == 1 ? TestTensor(f, {E, C, H}) : TestTensor(f, {rows, H}, Layout::kTransposed));
            c.Set("expandedRowIdx", TestTensor(kI32, {L}, Layout::kPadded));
            for (int64_t i = 0; i < L; ++i) c["expandedRowIdx"]->SetI(i, 0);
            c.attrs = {K, mode, active};
            c.what = "mode " + std::to_string(mode) + " N " + std::to_string(N) + " K " + std::to_string(K) +
                     " activeNum " + std::to_string(active) + " " + DTypeName(f);
            calls.push_back(c);
          }
        }
      }
    }
  }
  return calls;
}

std::vector<Call<TokenUnpermuteWithRoutingMapGradArgs>> TokenUnpermuteWithRoutingMapGradCalls() {
  std::vector<Call<TokenUnpermuteWithRoutingMapGradArgs>> calls;
  const int64_t H = 5, E = 3, K = 2, C = 2;
  for (int64_t dp : {0, 1}) {
    for (int64_t T : {0, 4}) {
      for (int variant = 0; variant < 3; ++variant) {  // 0 bare, 1 map and permutedTokens without probs, 2 probs
        for (const auto& [f, w] : {std::pair{kF32, kF32}, std::pair{kBF16, kF32}, std::pair{kF16, kBF16}}) {
          Call<TokenUnpermuteWithRoutingMapGradArgs> c;
          const int64_t N = dp == 1 ? (T > 0 ? E * C : 0) : T * K;
          c.Set("unpermutedTokensGrad", TestTensor(f, {T, H}, Layout::kTransposed));
          c.Set("outIndex", TestTensor(kI32, {N}, Layout::kPadded));
          c.Set("permuteTokenId", TestTensor(kI32, {N}));
          for (int64_t i = 0; i < N; ++i) {
            c["outIndex"]->SetI(i, 0);
            c["permuteTokenId"]->SetI(i, 0);
          }
          if (variant >= 1) {
            TestTensor map(DType::kBool, {T, E});
            std::vector<uint8_t> routed(static_cast<size_t>(T * E), 0);
            for (int64_t t = 0; t < T; ++t) {
              routed[static_cast<size_t>(t * E + t % E)] = 1;
              routed[static_cast<size_t>(t * E + (t + 1) % E)] = 1;
            }
            SetRoutingMap(map, routed);
            c.Set("routingMapOptional", map);
            c.Set("permutedTokensOptional", TestTensor(f, {N, H}));
          }
          if (variant == 2) c.Set("probsOptional", TestTensor(w, {T, E}, Layout::kPadded));
          c.attrs = {dp};
          c.what = std::string(dp == 1 ? "pad" : "dropless") + " T " + std::to_string(T) + " variant " +
                   std::to_string(variant) + " " + DTypeName(f) + "/" + DTypeName(w);
          calls.push_back(c);
        }
      }
    }
  }
  return calls;
}

TEST(OutputQuery, FinalizeRoutingV2GradReportsWhatPhaseOneAccepts) {
  for (auto& c : FinalizeRoutingV2GradCalls()) ExpectQueryMatchesPhaseOne(c, Always);
}

TEST(OutputQuery, TokenPermuteWithRoutingMapGradReportsWhatPhaseOneAccepts) {
  for (auto& c : TokenPermuteWithRoutingMapGradCalls()) ExpectQueryMatchesPhaseOne(c, Always);
}

TEST(OutputQuery, FinalizeRoutingV2ReportsWhatPhaseOneAccepts) {
  for (auto& c : FinalizeRoutingV2Calls()) {
    // Without scales, x1, x2 and expertIdx phase one accepts any R that divides the pairs; the query takes K = 1.
    const bool r_given = c["scales"] || c["x1"] || c["x2"] || c["expertIdx"];
    ExpectQueryMatchesPhaseOne(c, [&](const char*, int d) { return d == 1 || r_given; });
  }
}

TEST(OutputQuery, FinalizeRoutingV2TakesRFromTheFirstRowsInput) {
  Call<FinalizeRoutingV2Args> c;
  c.Set("expandedX", TestTensor(kF32, {12, 5}));
  c.Set("expandedRowIdx", TestTensor(kI32, {12}));
  c.attrs = {2};
  std::vector<OutputSpec> specs;
  ASSERT_TRUE(Query(c.CppArgs(true), &specs).ok());
  EXPECT_EQ(SizesOf(specs[0]), (std::vector<int64_t>{12, 5}));  // K = 1
  c.Set("x2", TestTensor(kF32, {4, 5}));
  ASSERT_TRUE(Query(c.CppArgs(true), &specs).ok());
  EXPECT_EQ(SizesOf(specs[0]), (std::vector<int64_t>{4, 5}));
  c.Set("scales", TestTensor(kF32, {6, 2}));  // scales first: R = 6, and x2 is then the wrong shape
  const Status s = Query(c.CppArgs(true), &specs);
  EXPECT_EQ(s.message(), "MoeFinalizeRoutingV2: x2 has shape (4, 5) but must be (6, 5)");
  c.Set("out", TestTensor(kF32, {6, 5}));
  EXPECT_EQ(Describe(PhaseOne(c.CppArgs())), Describe(s));
}

// Both modes, T 0 or 4, K / C 0 or 2, probs none or in either dtype, restoreShape given or not (required
// without probs), a routing map without probs in pad mode.
std::vector<Call<TokenUnpermuteWithRoutingMapArgs>> TokenUnpermuteWithRoutingMapCalls() {
  std::vector<Call<TokenUnpermuteWithRoutingMapArgs>> calls;
  std::mt19937_64 rng(11);
  const int64_t E = 3, H = 6;
  for (bool pad : {false, true}) {
    for (int64_t T : {0, 4}) {
      for (int64_t k_or_c : {0, 2}) {
        for (int probs_dtype = 0; probs_dtype < 3; ++probs_dtype) {  // none, BFLOAT16 (the tokens'), FLOAT32
          for (bool restore : {false, true}) {
            const bool probs = probs_dtype > 0;
            if (!probs && !restore) continue;
            const int64_t N = pad ? E * k_or_c : T * k_or_c;
            if (pad && T == 0 && N > 0) continue;  // no token for a row to name
            Call<TokenUnpermuteWithRoutingMapArgs> c;
            c.Set("permutedTokens", TestTensor(kBF16, {N, H}, Layout::kPadded));
            c.Set("sortedIndices", TestTensor(kI32, {N}));
            for (int64_t i = 0; i < N; ++i) c["sortedIndices"]->SetI(i, 0);
            if (probs || pad) {
              c.Set("routingMapOptional", TestTensor(DType::kBool, {T, E}));
              SetRoutingMap(*c["routingMapOptional"], RandomRouting(T, E, pad, k_or_c, 0.5, rng));
            }
            if (probs) c.Set("probsOptional", TestTensor(probs_dtype == 1 ? kBF16 : kF32, {T, E}));
            c.attrs = {pad ? 1 : 0};
            if (restore) c.arrays[0] = std::vector<int64_t>{T, H};
            c.what = std::string(pad ? "pad" : "dropless") + " T " + std::to_string(T) + " K/C " +
                     std::to_string(k_or_c) + (probs ? " probs" : "") + (probs_dtype == 2 ? " FLOAT32" : "") +
                     (restore ? " restore" : "");
            calls.push_back(c);
          }
        }
      }
    }
  }
  return calls;
}

TEST(OutputQuery, TokenUnpermuteWithRoutingMapReportsWhatPhaseOneAccepts) {
  for (auto& c : TokenUnpermuteWithRoutingMapCalls()) ExpectQueryMatchesPhaseOne(c, Always);
}

TEST(OutputQuery, TokenPermuteWithRoutingMapReportsWhatPhaseOneAccepts) {
  for (auto& c : TokenPermuteWithRoutingMapCalls()) ExpectQueryMatchesPhaseOne(c, Always);
}

TEST(OutputQuery, InitRoutingV2ReportsWhatPhaseOneAccepts) {
  for (auto& c : InitRoutingV2Calls()) ExpectQueryMatchesPhaseOne(c, Always);
}

TEST(OutputQuery, InitRoutingV2GradReportsWhatPhaseOneAccepts) {
  for (auto& c : InitRoutingV2GradCalls()) ExpectQueryMatchesPhaseOne(c, Always);
}

TEST(OutputQuery, TokenUnpermuteWithRoutingMapGradReportsWhatPhaseOneAccepts) {
  for (auto& c : TokenUnpermuteWithRoutingMapGradCalls()) ExpectQueryMatchesPhaseOne(c, Always);
}

// --- errors ------------------------------------------------------------------------------------------------

// Each mutation of a valid call (with its outputs, as the query reported them) must fail phase one; the query
// of the same inputs must fail with the same status and message.
template <typename Args>
void ExpectSameErrors(Call<Args> base,
                      const std::vector<std::pair<const char*, std::function<void(Call<Args>&)>>>& rows) {
  ExpectQueryMatchesPhaseOne(base, Always);
  for (const auto& [name, mutate] : rows) {
    SCOPED_TRACE(std::string(OpInfo<Args>::kName) + ": " + name);
    Call<Args> c = base;
    mutate(c);
    const Status phase_one = PhaseOne(c.CppArgs());
    EXPECT_FALSE(phase_one.ok());
    std::vector<OutputSpec> specs;
    EXPECT_EQ(Describe(Query(c.CppArgs(true), &specs)), Describe(phase_one));
    EXPECT_EQ(Describe(Query(c.CppArgs(), &specs)), Describe(phase_one)) << "the outputs given";
  }
}

TEST(OutputQuery, FinalizeRoutingV2GradErrorsAreThoseOfPhaseOne) {
  using C = Call<FinalizeRoutingV2GradArgs>;
  const C base = Find(FinalizeRoutingV2GradCalls(), "mode 0 R 4 K 1 variant 3 FLOAT32");  // scales and bias
  ExpectSameErrors<FinalizeRoutingV2GradArgs>(base, {
      {"dropPadMode 2", [](C& c) { c.Attr("dropPadMode", 2); }},
      {"activeNum -1", [](C& c) { c.Attr("activeNum", -1); }},
      {"expertNum 0 in mode 1", [](C& c) { c.Attr("dropPadMode", 1); }},
      {"expertNum * expertCapacity overflows",
       [](C& c) {
         c.attrs = {1, 0, INT64_MAX / 2, 3};
         c["bias"].reset();
         c["scales"].reset();
         c["expandedX"].reset();
       }},
      {"expertNum INT64_MAX", [](C& c) { c.attrs = {1, 0, INT64_MAX, 1}; }},
      {"gradY 3-D", [](C& c) { c.Set("gradY", TestTensor(kF32, {4, 5, 1})); }},
      {"gradY INT32", [](C& c) { c.Set("gradY", TestTensor(kI32, {4, 5})); }},
      {"expandedRowIdx INT64", [](C& c) { c.Set("expandedRowIdx", TestTensor(DType::kInt64, {4})); }},
      {"expandedRowIdx 9", [](C& c) { c.Set("expandedRowIdx", TestTensor(kI32, {9})); }},
      {"scales rows", [](C& c) { c.Set("scales", TestTensor(kF32, {5, 1})); }},
      {"expertIdx shape", [](C& c) { c.Set("expertIdx", TestTensor(kI32, {4, 2})); }},
      {"bias columns", [](C& c) { c.Set("bias", TestTensor(kF32, {3, 4})); }},
      {"expandedX rows", [](C& c) { c.Set("expandedX", TestTensor(kF32, {5, 5})); }},
      {"expandedX dtype", [](C& c) { c.Set("expandedX", TestTensor(kF16, {4, 5})); }},
      {"bias dtype", [](C& c) { c.Set("bias", TestTensor(kBF16, {3, 5})); }},
      {"scales INT32", [](C& c) { c.Set("scales", TestTensor(kI32, {4, 1})); }},
      {"scales DOUBLE", [](C& c) { c.Set("scales", TestTensor(DType::kFloat64, {4, 1})); }},
      {"no expandedX with scales", [](C& c) { c["expandedX"].reset(); }},
      {"bias without expertIdx", [](C& c) { c["expertIdx"].reset(); }},
  });
}

TEST(OutputQuery, TokenPermuteWithRoutingMapGradErrorsAreThoseOfPhaseOne) {
  using C = Call<TokenPermuteWithRoutingMapGradArgs>;
  const C base = Find(TokenPermuteWithRoutingMapGradCalls(), "dropless T 5 E 4 K/C 3 probs");
  ExpectSameErrors<TokenPermuteWithRoutingMapGradArgs>(base, {
      {"numExperts 0", [](C& c) { c.Attr("numExperts", 0); }},
      {"numExperts 2^45", [](C& c) { c.Attr("numExperts", int64_t{1} << 45); }},
      {"tokensNum -1", [](C& c) { c.Attr("tokensNum", -1); }},
      {"tokensNum 2^40", [](C& c) { c.Attr("tokensNum", int64_t{1} << 40); }},
      {"tokensNum INT64_MAX", [](C& c) { c.Attr("tokensNum", INT64_MAX); }},
      {"drop-and-pad, N not E*C", [](C& c) { c.Attr("dropAndPad", 1); c.Attr("numExperts", 7); }},
      {"grad 1-D", [](C& c) { c.Set("permutedTokenOutputGrad", TestTensor(kF16, {15})); }},
      {"grad INT32", [](C& c) { c.Set("permutedTokenOutputGrad", TestTensor(kI32, {15, 6})); }},
      {"sortedIndices rows", [](C& c) { c.Set("sortedIndices", TestTensor(kI32, {14})); }},
      {"probs grad INT32", [](C& c) { c.Set("permutedProbsOutputGrad", TestTensor(kI32, {15})); }},
      {"probs grad DOUBLE", [](C& c) { c.Set("permutedProbsOutputGrad", TestTensor(DType::kFloat64, {15})); }},
      {"routingMap shape", [](C& c) { c.Set("routingMap", TestTensor(DType::kBool, {5, 3})); }},
      {"routingMap FLOAT32", [](C& c) { c.Set("routingMap", TestTensor(kF32, {5, 4})); }},
      {"no routingMap", [](C& c) { c["routingMap"].reset(); }},
  });
}

TEST(OutputQuery, FinalizeRoutingV2ErrorsAreThoseOfPhaseOne) {
  using C = Call<FinalizeRoutingV2Args>;
  // R comes from scales in the query and from out in phase one: the same, with out as the query reported it.
  const C base = Find(FinalizeRoutingV2Calls(), "mode 2 R 3 inputs 15");  // every input
  ExpectSameErrors<FinalizeRoutingV2Args>(base, {
      {"dropPadMode 4", [](C& c) { c.Attr("dropPadMode", 4); }},
      {"expandedX INT32", [](C& c) { c.Set("expandedX", TestTensor(kI32, {6, 3})); }},
      {"expandedRowIdx 2-D", [](C& c) { c.Set("expandedRowIdx", TestTensor(kI32, {3, 2})); }},
      {"pairs != R*K", [](C& c) { c.Set("expandedRowIdx", TestTensor(kI32, {7})); }},
      {"expertIdx shape", [](C& c) { c.Set("expertIdx", TestTensor(kI32, {3, 3})); }},
      {"expandedX rows", [](C& c) { c.Set("expandedX", TestTensor(kF32, {7, 3})); }},
      {"bias columns", [](C& c) { c.Set("bias", TestTensor(kF32, {2, 4})); }},
      {"x1 shape", [](C& c) { c.Set("x1", TestTensor(kF32, {3, 4})); }},
      {"x2 dtype", [](C& c) { c.Set("x2", TestTensor(kF16, {3, 3})); }},
      {"bias dtype", [](C& c) { c.Set("bias", TestTensor(kF16, {2, 3})); }},
      {"scales INT32", [](C& c) { c.Set("scales", TestTensor(kI32, {3, 2})); }},
      {"bias without expertIdx", [](C& c) { c["expertIdx"].reset(); }},
  });
}

TEST(OutputQuery, TokenPermuteWithRoutingMapErrorsAreThoseOfPhaseOne) {
  using C = Call<TokenPermuteWithRoutingMapArgs>;
  const C base = Find(TokenPermuteWithRoutingMapCalls(), "dropless T 4 K/C 2 probs");
  ExpectSameErrors<TokenPermuteWithRoutingMapArgs>(base, {
      {"numOutTokens -1", [](C& c) { c.Attr("numOutTokens", -1); }},
      {"numOutTokens 13", [](C& c) { c.Attr("numOutTokens", 13); }},
      {"numOutTokens INT64_MIN", [](C& c) { c.Attr("numOutTokens", INT64_MIN); }},
      {"numOutTokens not T*K", [](C& c) { c.Attr("numOutTokens", 7); }},
      {"drop-and-pad, not E*C", [](C& c) { c.Attr("dropAndPad", 1); c.Attr("numOutTokens", 7); }},
      {"tokens 3-D", [](C& c) { c.Set("tokens", TestTensor(kBF16, {4, 8, 1})); }},
      {"tokens INT8", [](C& c) { c.Set("tokens", TestTensor(DType::kInt8, {4, 8})); }},
      {"routingMap rows", [](C& c) { c.Set("routingMap", TestTensor(DType::kInt8, {5, 3})); }},
      {"routingMap INT32", [](C& c) { c.Set("routingMap", TestTensor(kI32, {4, 3})); }},
      {"probs shape", [](C& c) { c.Set("probs", TestTensor(kBF16, {4, 2})); }},
      {"probs INT32", [](C& c) { c.Set("probs", TestTensor(kI32, {4, 3})); }},
      {"probs BOOL", [](C& c) { c.Set("probs", TestTensor(DType::kBool, {4, 3})); }},
  });
}

TEST(OutputQuery, InitRoutingV2ErrorsAreThoseOfPhaseOne) {
  using C = Call<InitRoutingV2Args>;
  for (const int64_t mode : {0, 1}) {
    const C base = Find(InitRoutingV2Calls(), mode == 0 ? "mode 0 N 4 K 3 flag 1 activeNum 5"
                                                        : "mode 1 N 4 K 3 flag 0 before activeNum 0");
    std::vector<std::pair<const char*, std::function<void(C&)>>> rows = {
        {"dropPadMode 2", [](C& c) { c.Attr("dropPadMode", 2); }},
        {"activeNum -1", [](C& c) { c.Attr("activeNum", -1); }},
        {"expertNum -1", [](C& c) { c.Attr("expertNum", -1); }},
        {"expertCapacity -1", [](C& c) { c.Attr("expertCapacity", -1); }},
        {"flag 3", [](C& c) { c.Attr("expertTokensCountOrCumsumFlag", 3); }},
        {"expertNum 0", [](C& c) { c.Attr("expertNum", 0); }},
        {"x 1-D", [](C& c) { c.Set("x", TestTensor(kBF16, {4})); }},
        {"x INT32", [](C& c) { c.Set("x", TestTensor(kI32, {4, 5})); }},
        {"expertIdx 3-D", [](C& c) { c.Set("expertIdx", TestTensor(kI32, {4, 3, 1})); }},
        {"expertIdx INT8", [](C& c) { c.Set("expertIdx", TestTensor(DType::kInt8, {4, 3})); }},
        {"expertIdx rows", [](C& c) { c.Set("expertIdx", TestTensor(kI32, {5, 3})); }},
    };
    if (mode == 1) {
      rows.push_back({"expertCapacity 0", [](C& c) { c.Attr("expertCapacity", 0); }});
      rows.push_back({"E*C 2^31", [](C& c) { c.Attr("expertNum", 1 << 16); c.Attr("expertCapacity", 1 << 15); }});
      rows.push_back({"expertNum INT64_MAX", [](C& c) { c.Attr("expertNum", INT64_MAX); c.Attr("expertCapacity", 2); }});
    }
    ExpectSameErrors<InitRoutingV2Args>(base, rows);
  }
  // In mode 1 without the flag, and in mode 0 with flag 0, no count output is required: nothing to fail.
  std::vector<OutputSpec> specs;
  const C plain = Find(InitRoutingV2Calls(), "mode 0 N 4 K 1 flag 0 activeNum 0");
  ASSERT_TRUE(Query(plain.CppArgs(true), &specs).ok());
  EXPECT_FALSE(specs[2].written);
  EXPECT_FALSE(specs[3].written);
}

TEST(OutputQuery, InitRoutingV2GradErrorsAreThoseOfPhaseOne) {
  using C = Call<InitRoutingV2GradArgs>;
  for (const char* what : {"mode 0 N 4 K 3 activeNum 2 FLOAT32", "mode 1 N 4 K 3 activeNum 0 BFLOAT16"}) {
    const C base = Find(InitRoutingV2GradCalls(), what);
    const DType f = base.t[0]->dtype();  // gradExpandedX's
    ExpectSameErrors<InitRoutingV2GradArgs>(base, {
        {"dropPadMode 2", [](C& c) { c.Attr("dropPadMode", 2); }},
        {"dropPadMode INT64_MIN", [](C& c) { c.Attr("dropPadMode", INT64_MIN); }},
        {"activeNum -1", [](C& c) { c.Attr("activeNum", -1); }},
        {"topK 0", [](C& c) { c.Attr("topK", 0); }},
        {"topK -1", [](C& c) { c.Attr("topK", -1); }},
        {"topK 5 (not a divisor of L)", [](C& c) { c.Attr("topK", 5); }},
        {"gradExpandedX INT32", [](C& c) { c.Set("gradExpandedX", TestTensor(kI32, {2, 7})); }},
        {"gradExpandedX 1-D", [f](C& c) { c.Set("gradExpandedX", TestTensor(f, {14})); }},
        {"gradExpandedX of the other mode's rank",
         [f](C& c) { c.Set("gradExpandedX", c.attrs[1] == 1 ? TestTensor(f, {2, 7}) : TestTensor(f, {2, 1, 7})); }},
        {"expandedRowIdx INT64", [](C& c) { c.Set("expandedRowIdx", TestTensor(DType::kInt64, {12})); }},
        {"expandedRowIdx 2-D", [](C& c) { c.Set("expandedRowIdx", TestTensor(kI32, {4, 3})); }},
        {"expandedRowIdx 13", [](C& c) { c.Set("expandedRowIdx", TestTensor(kI32, {13})); }},
    });
  }
  // Mode 0's rows: activeNum and L.
  const C base = Find(InitRoutingV2GradCalls(), "mode 0 N 4 K 3 activeNum 2 FLOAT32");
  ExpectSameErrors<InitRoutingV2GradArgs>(base, {
      {"rows != activeNum", [](C& c) { c.Set("gradExpandedX", TestTensor(kF32, {3, 7})); }},
      {"rows != L", [](C& c) { c.Attr("activeNum", 0); }},
      {"rows != L, activeNum >= L", [](C& c) { c.Attr("activeNum", 12); }},
  });
}

TEST(OutputQuery, TokenUnpermuteWithRoutingMapErrorsAreThoseOfPhaseOne) {
  using C = Call<TokenUnpermuteWithRoutingMapArgs>;
  for (const char* what : {"dropless T 4 K/C 2 probs FLOAT32", "pad T 4 K/C 2 probs restore"}) {
    const C base = Find(TokenUnpermuteWithRoutingMapCalls(), what);
    ExpectSameErrors<TokenUnpermuteWithRoutingMapArgs>(base, {
        {"no probs, no restoreShape", [](C& c) { c["probsOptional"].reset(); c.arrays[0].reset(); }},
        {"permutedTokens 1-D", [](C& c) { c.Set("permutedTokens", TestTensor(kBF16, {8})); }},
        {"permutedTokens INT32", [](C& c) { c.Set("permutedTokens", TestTensor(kI32, {8, 6})); }},
        {"sortedIndices 2-D", [](C& c) { c.Set("sortedIndices", TestTensor(kI32, {8, 1})); }},
        {"sortedIndices INT64", [](C& c) { c.Set("sortedIndices", TestTensor(DType::kInt64, {8})); }},
        {"sortedIndices rows", [](C& c) { c.Set("sortedIndices", TestTensor(kI32, {7})); }},
        {"routingMap FLOAT32", [](C& c) { c.Set("routingMapOptional", TestTensor(kF32, {4, 3})); }},
        {"routingMap rows", [](C& c) { c.Set("routingMapOptional", TestTensor(DType::kBool, {5, 3})); }},
        {"probs 1-D", [](C& c) { c.Set("probsOptional", TestTensor(kF32, {12})); }},
        {"probs INT8", [](C& c) { c.Set("probsOptional", TestTensor(DType::kInt8, {4, 3})); }},
        {"probs rows", [](C& c) { c.Set("probsOptional", TestTensor(c["probsOptional"]->dtype(), {5, 3})); }},
        {"probs columns", [](C& c) { c.Set("probsOptional", TestTensor(c["probsOptional"]->dtype(), {4, 4})); }},
        {"restoreShape (4, 5)", [](C& c) { c.arrays[0] = std::vector<int64_t>{4, 5}; }},
        {"restoreShape (4,)", [](C& c) { c.arrays[0] = std::vector<int64_t>{4}; }},
        {"restoreShape (5, 6)", [](C& c) { c.arrays[0] = std::vector<int64_t>{5, 6}; }},
    });
  }
  // Without probs or a routing map T comes from restoreShape alone (phase one compares it with unpermutedTokens).
  std::vector<OutputSpec> specs;
  C c = Find(TokenUnpermuteWithRoutingMapCalls(), "dropless T 4 K/C 2 restore");
  c.arrays[0] = std::vector<int64_t>{2, 6};
  ASSERT_TRUE(Query(c.CppArgs(true), &specs).ok());
  EXPECT_EQ(SizesOf(specs[0]), (std::vector<int64_t>{2, 6}));
  EXPECT_FALSE(specs[3].written);
  c.arrays[0] = std::vector<int64_t>{-1, 6};
  EXPECT_EQ(Query(c.CppArgs(true), &specs).message(),
            "MoeTokenUnpermuteWithRoutingMap: restoreShapeOptional is (-1, 6) but must be (T, H) with T, H >= 0");
  c.arrays[0] = std::vector<int64_t>{4, 5};
  c.Set("unpermutedTokens", TestTensor(kBF16, {4, 6}));
  c.Set("outIndex", TestTensor(kI32, {8}));
  c.Set("permuteTokenId", TestTensor(kI32, {8}));
  EXPECT_EQ(Query(c.CppArgs(true), &specs).message(),
            "MoeTokenUnpermuteWithRoutingMap: restoreShapeOptional is (4, 5) but unpermutedTokens is (4, 6)");
  EXPECT_EQ(Describe(PhaseOne(c.CppArgs())), Describe(Query(c.CppArgs(true), &specs)));
}

TEST(OutputQuery, TokenUnpermuteWithRoutingMapGradErrorsAreThoseOfPhaseOne) {
  using C = Call<TokenUnpermuteWithRoutingMapGradArgs>;
  for (const char* what : {"dropless T 4 variant 2 BFLOAT16/FLOAT32", "pad T 4 variant 2 FLOAT32/FLOAT32"}) {
    const C base = Find(TokenUnpermuteWithRoutingMapGradCalls(), what);
    const DType f = base.t[0]->dtype();  // the tokens'
    ExpectSameErrors<TokenUnpermuteWithRoutingMapGradArgs>(base, {
        {"probs without permutedTokens", [](C& c) { c["permutedTokensOptional"].reset(); }},
        {"probs without routingMap", [](C& c) { c["routingMapOptional"].reset(); }},
        {"unpermutedTokensGrad 1-D", [f](C& c) { c.Set("unpermutedTokensGrad", TestTensor(f, {4})); }},
        {"outIndex 2-D", [](C& c) { c.Set("outIndex", TestTensor(kI32, {8, 1})); }},
        {"probs 3-D", [](C& c) { c.Set("probsOptional", TestTensor(kF32, {4, 3, 1})); }},
        {"unpermutedTokensGrad INT32", [](C& c) { c.Set("unpermutedTokensGrad", TestTensor(kI32, {4, 5})); }},
        {"permuteTokenId INT8", [](C& c) { c.Set("permuteTokenId", TestTensor(DType::kInt8, {8})); }},
        {"permutedTokens of another dtype", [](C& c) { c.Set("permutedTokensOptional", TestTensor(kF16, {8, 5})); }},
        {"probs INT32", [](C& c) { c.Set("probsOptional", TestTensor(kI32, {4, 3})); }},
        {"permuteTokenId rows", [](C& c) { c.Set("permuteTokenId", TestTensor(kI32, {7})); }},
        {"permutedTokens H", [f](C& c) { c.Set("permutedTokensOptional", TestTensor(f, {8, 6})); }},
        {"routingMap rows", [](C& c) { c.Set("routingMapOptional", TestTensor(DType::kBool, {5, 3})); }},
        {"probs columns", [](C& c) { c.Set("probsOptional", TestTensor(kF32, {4, 4})); }},
        {"N not T*K or E*C", [f](C& c) {
           c.Set("outIndex", TestTensor(kI32, {7}));
           c.Set("permuteTokenId", TestTensor(kI32, {7}));
           c.Set("permutedTokensGradOut", TestTensor(f, {7, 5}));
           c["permutedTokensOptional"].reset();
           c["probsOptional"].reset();
         }},
    });
  }
}

// Malformed inputs and devices: the generic checks of every tensor (Tensors) come first in both.
TEST(OutputQuery, EveryOperatorMalformedInputsAsPhaseOne) {
  ForEachOp([](auto info) {
    using Args = typename ArgsOf<decltype(info)>::type;
    SCOPED_TRACE(OpInfo<Args>::kName);
    // The default arguments: every required tensor an empty rank-0 view without data.
    std::vector<OutputSpec> specs;
    const Args empty;
    EXPECT_EQ(Describe(Query(empty, &specs)), Describe(PhaseOne(empty)));
    // A negative stride, a null data pointer and another device on the first input, with valid outputs.
    Args a = empty;
    TensorView bad(reinterpret_cast<void*>(64), DType::kFloat32, {2, 3});
    const TensorArg<Args>& first = OpInfo<Args>::kTensors[0];
    for (int variant = 0; variant < 3; ++variant) {
      TensorView v = bad;
      if (variant == 0) v.strides[1] = -1;
      if (variant == 1) v.data = nullptr;
      if (variant == 2) v.device = static_cast<Device>(7);
      first.Set(a, &v);
      TensorView second(reinterpret_cast<void*>(64), DType::kInt32, {6});
      size_t i = 1;
      while (OpInfo<Args>::kTensors[i].is_optional()) ++i;  // an optional input may require an output
      OpInfo<Args>::kTensors[i].Set(a, &second);
      const Status q = Query(a, &specs);
      EXPECT_FALSE(q.ok());
      EXPECT_EQ(Describe(q), Describe(PhaseOne(a))) << variant;
    }
  });
}

TEST(OutputQuery, OutputsPastInt64AreInvalid) {
  FinalizeRoutingV2GradArgs g;
  float data[8] = {};
  int32_t idx[8] = {};
  g.grad_y = TensorView(data, kF32, {4, 2});
  g.expanded_row_idx = TensorView(idx, kI32, {8});
  g.drop_pad_mode = 1;
  g.expert_num = int64_t{1} << 62;
  g.expert_capacity = 1;
  std::vector<OutputSpec> specs;
  Status s = InferFinalizeRoutingV2GradOutputs(g, &specs);
  EXPECT_EQ(s.code(), StatusCode::kInvalid);
  EXPECT_EQ(s.message(), "MoeFinalizeRoutingV2Grad: gradExpandedXOut of shape (4611686018427387904, 1, 2) overflows "
                         "64-bit element offsets");
  g.grad_y = TensorView(data, kF32, {4, 1});
  s = InferFinalizeRoutingV2GradOutputs(g, &specs);
  EXPECT_EQ(s.message(), "MoeFinalizeRoutingV2Grad: gradExpandedXOut of shape (4611686018427387904, 1, 1) overflows "
                         "64-bit byte offsets");
  g.expert_num = int64_t{1} << 60;  // 2^62 bytes of FLOAT32: fits, so it is reported (allocating it is the caller's)
  ASSERT_TRUE(InferFinalizeRoutingV2GradOutputs(g, &specs).ok());
  EXPECT_EQ(SizesOf(specs[0]), (std::vector<int64_t>{int64_t{1} << 60, 1, 1}));
  EXPECT_FALSE(specs[1].written);
}

TEST(OutputQuery, OutputsOfTheArgumentsAreIgnoredAndUntouched) {
  Call<TokenPermuteWithRoutingMapGradArgs> c =
      Find(TokenPermuteWithRoutingMapGradCalls(), "dropless T 5 E 4 K/C 3 probs");
  std::vector<OutputSpec> without, with;
  ASSERT_TRUE(Query(c.CppArgs(true), &without).ok());
  // Outputs of a wrong shape and dtype, and one over an input's memory: the query neither checks nor touches them.
  c.Set("tokensGradOut", TestTensor(kI32, {3, 3}));
  TokenPermuteWithRoutingMapGradArgs a = c.CppArgs();
  a.probs_grad = c["permutedProbsOutputGrad"]->view();
  const std::vector<uint8_t> tokens_before = c["tokensGradOut"]->Snapshot();
  const std::vector<uint8_t> probs_before = c["permutedProbsOutputGrad"]->Snapshot();
  ASSERT_TRUE(Query(a, &with).ok());
  ASSERT_EQ(with.size(), without.size());
  for (size_t i = 0; i < with.size(); ++i) {
    EXPECT_STREQ(with[i].name, without[i].name);
    EXPECT_EQ(with[i].written, without[i].written);
    EXPECT_EQ(with[i].dtype, without[i].dtype);
    EXPECT_EQ(SizesOf(with[i]), SizesOf(without[i]));
  }
  EXPECT_TRUE(c["tokensGradOut"]->SameBytes(tokens_before));
  EXPECT_TRUE(c["permutedProbsOutputGrad"]->SameBytes(probs_before));
  EXPECT_FALSE(PhaseOne(a).ok());  // phase one checks them
}

}  // namespace
}  // namespace moegrad::testing
