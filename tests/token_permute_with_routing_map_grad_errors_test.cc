// Every bad argument of MoeTokenPermuteWithRoutingMapGrad, through the aclnn API and the C++ API: the exact
// status, a one-line message naming the operator and the argument, outputs untouched (every byte of their
// buffers), and a failed first phase leaving *executor null.
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_token_permute_with_routing_map_grad.h"
#include "moegrad/ops.hpp"
#include "tests/support/api.h"

namespace moegrad {
namespace {

constexpr int64_t T = 4, E = 3, H = 5, K = 2, C = 2;
constexpr size_t kWords = 512;  // every tensor's own buffer, large enough for any shape a case sets

enum Arg { kGrad, kProbsIn, kIdx, kMap, kTokensGrad, kProbsGrad, kArgs };

// A valid call over separate, generous buffers, so that a case may grow a shape, change a dtype or point one
// view into another's buffer and still describe memory this test owns.
struct Call {
  std::vector<uint64_t> buf[kArgs];
  TokenPermuteWithRoutingMapGradArgs args;
  bool null_arg[kArgs] = {};  // aclnn only: pass a null aclTensor*
  uint64_t workspace_slack = 0;   // phase two: bytes fewer than reported (when > 0)
  bool null_workspace = false;

  explicit Call(bool drop_and_pad) {
    for (auto& b : buf) b.assign(kWords, 0);
    const int64_t N = drop_and_pad ? E * C : T * K;
    float* g = F(kGrad);
    for (int64_t i = 0; i < N * H; ++i) g[i] = 0.25f * static_cast<float>(i % 9) - 1.0f;
    for (int64_t i = 0; i < N; ++i) F(kProbsIn)[i] = 0.5f + 0.125f * static_cast<float>(i);
    int32_t* idx = reinterpret_cast<int32_t*>(buf[kIdx].data());
    int8_t* map = reinterpret_cast<int8_t*>(buf[kMap].data());
    // Two experts per token (rows {0,1}, {1,2}, {0,2}, {0,1}): 8 routed entries = T*K.
    const int8_t routed[T * E] = {1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 0};
    std::memcpy(map, routed, sizeof(routed));
    for (int64_t i = 0; i < N; ++i) idx[i] = static_cast<int32_t>(drop_and_pad ? (i * 3) % T : (i * 5) % N);
    std::memset(buf[kTokensGrad].data(), 0xAB, kWords * 8);
    std::memset(buf[kProbsGrad].data(), 0xCD, kWords * 8);
    args.permuted_token_output_grad = TensorView(buf[kGrad].data(), DType::kFloat32, {N, H});
    args.permuted_probs_output_grad = TensorView(buf[kProbsIn].data(), DType::kFloat32, {N});
    args.sorted_indices = TensorView(idx, DType::kInt32, {N});
    args.routing_map = TensorView(map, DType::kInt8, {T, E});
    args.num_experts = E;
    args.tokens_num = T;
    args.drop_and_pad = drop_and_pad;
    args.tokens_grad = TensorView(buf[kTokensGrad].data(), DType::kFloat32, {T, H});
    args.probs_grad = TensorView(buf[kProbsGrad].data(), DType::kFloat32, {T, E});
  }
  float* F(Arg a) { return reinterpret_cast<float*>(buf[a].data()); }
  int32_t* Idx() { return reinterpret_cast<int32_t*>(buf[kIdx].data()); }
  int8_t* Map() { return reinterpret_cast<int8_t*>(buf[kMap].data()); }

  const TensorView* View(Arg a) const {
    switch (a) {
      case kGrad: return &args.permuted_token_output_grad;
      case kProbsIn: return args.permuted_probs_output_grad ? &*args.permuted_probs_output_grad : nullptr;
      case kIdx: return &args.sorted_indices;
      case kMap: return args.routing_map ? &*args.routing_map : nullptr;
      case kTokensGrad: return &args.tokens_grad;
      case kProbsGrad: return args.probs_grad ? &*args.probs_grad : nullptr;
      default: return nullptr;
    }
  }

  // The aclTensor of argument a: storage is the buffer the view's data lies in.
  aclTensor* Acl(Arg a) const {
    const TensorView* v = View(a);
    if (v == nullptr || null_arg[a]) return nullptr;
    const size_t esize = ElementSize(v->dtype) ? ElementSize(v->dtype) : 1;
    for (const auto& b : buf) {
      const char* begin = reinterpret_cast<const char*>(b.data());
      const char* p = static_cast<const char*>(v->data);
      if (p >= begin && p < begin + kWords * 8) {
        const int64_t storage = static_cast<int64_t>(kWords * 8 / esize);
        return aclCreateTensor(v->sizes, v->rank, static_cast<aclDataType>(v->dtype), v->strides,
                               static_cast<int64_t>((p - begin) / esize), ACL_FORMAT_ND, &storage, 1,
                               const_cast<char*>(begin));
      }
    }
    const int64_t storage = static_cast<int64_t>(kWords * 8 / esize);  // a null data pointer
    return aclCreateTensor(v->sizes, v->rank, static_cast<aclDataType>(v->dtype), v->strides, 0, ACL_FORMAT_ND,
                           &storage, 1, nullptr);
  }
};

struct Outcome {
  int status = 0;
  std::string message;
  bool executor_null_after_failure = true;
};

Outcome RunAcl(const Call& c) {
  aclTensor* t[kArgs];
  for (int a = 0; a < kArgs; ++a) t[a] = c.Acl(static_cast<Arg>(a));
  uint64_t ws_size = 0;
  aclOpExecutor* ex = reinterpret_cast<aclOpExecutor*>(uintptr_t{0x40});  // must come back null on failure
  Outcome out;
  out.status = aclnnMoeTokenPermuteWithRoutingMapGradGetWorkspaceSize(
      t[kGrad], t[kProbsIn], t[kIdx], t[kMap], c.args.num_experts, c.args.tokens_num, c.args.drop_and_pad,
      t[kTokensGrad], t[kProbsGrad], &ws_size, &ex);
  if (out.status != ACLNN_SUCCESS) {
    out.executor_null_after_failure = ex == nullptr;
  } else {
    std::vector<uint64_t> ws(ws_size / 8 + 1);
    const uint64_t bytes = ws_size >= c.workspace_slack ? ws_size - c.workspace_slack : 0;
    out.status = aclnnMoeTokenPermuteWithRoutingMapGrad(c.null_workspace ? nullptr : ws.data(), bytes, ex, nullptr);
  }
  if (out.status != ACLNN_SUCCESS) out.message = aclGetRecentErrMsg();
  for (aclTensor* x : t) {
    if (x) aclDestroyTensor(x);
  }
  return out;
}

Outcome RunCpp(const Call& c) {
  Plan plan;
  Status s = PlanTokenPermuteWithRoutingMapGrad(c.args, &plan);
  if (s.ok()) {
    std::vector<uint64_t> ws(plan.workspace_size() / 8 + 1);
    const uint64_t size = plan.workspace_size();
    const uint64_t bytes = size >= c.workspace_slack ? size - c.workspace_slack : 0;
    s = plan.Run(c.null_workspace ? nullptr : ws.data(), bytes);
  } else {
    EXPECT_FALSE(plan.valid());
  }
  return {static_cast<int>(s.code()), s.message(), true};
}

struct ErrorCase {
  const char* name;
  bool drop_and_pad;
  std::function<void(Call&)> mutate;
  int status;
  std::string message;  // a substring of the one-line message
  bool cpp = true;      // expressible through the C++ API (its required tensors are never absent)
  bool acl = true;      // expressible as an aclTensor (aclCreateTensor refuses malformed views)
};

constexpr int kNull = ACLNN_ERR_PARAM_NULLPTR;
constexpr int kBad = ACLNN_ERR_PARAM_INVALID;

std::vector<ErrorCase> Cases() {
  using V = TensorView;
  auto shape = [](V* v, std::initializer_list<int64_t> sizes) { *v = V(v->data, v->dtype, sizes); };
  return {
      // Missing tensors.
      {"null permutedTokenOutputGrad", false, [](Call& c) { c.null_arg[kGrad] = true; }, kNull,
       "permutedTokenOutputGrad is required but is null", false},
      {"null sortedIndices", true, [](Call& c) { c.null_arg[kIdx] = true; }, kNull,
       "sortedIndices is required but is null", false},
      {"null tokensGradOut", false, [](Call& c) { c.null_arg[kTokensGrad] = true; }, kNull,
       "tokensGradOut is required but is null", false},
      {"probs without probsGradOut", true, [](Call& c) { c.args.probs_grad.reset(); }, kNull,
       "probsGradOut (required with permutedProbsOutputGrad) is required but is null"},
      {"dropless probs without routingMap", false, [](Call& c) { c.args.routing_map.reset(); }, kNull,
       "routingMap (required with permutedProbsOutputGrad when dropAndPad is false) is required"},
      {"null data of permutedTokenOutputGrad", false, [](Call& c) { c.args.permuted_token_output_grad.data = nullptr; },
       kNull, "permutedTokenOutputGrad has shape (8, 5) but its data pointer is null"},
      {"null data of tokensGradOut", true, [](Call& c) { c.args.tokens_grad.data = nullptr; }, kNull,
       "tokensGradOut has shape (4, 5) but its data pointer is null"},
      // Malformed views (the aclnn API cannot even describe them).
      {"negative stride", false, [](Call& c) { c.args.permuted_token_output_grad.strides[0] = -5; }, kBad,
       "permutedTokenOutputGrad has negative stride -5 in dimension 0", true, false},
      {"negative size", false, [](Call& c) { c.args.sorted_indices.sizes[0] = -1; }, kBad,
       "sortedIndices has negative size -1 in dimension 0", true, false},
      {"unknown dtype", false, [](Call& c) { c.args.routing_map->dtype = static_cast<DType>(5); }, kBad,
       "routingMap has unknown dtype 5", true, false},
      {"rank 9", false, [](Call& c) { c.args.tokens_grad.rank = 9; }, kBad, "tokensGradOut has rank 9", true, false},
      // Attributes.
      {"numExperts 0", false, [](Call& c) { c.args.num_experts = 0; }, kBad, "numExperts = 0 must be > 0"},
      {"numExperts -3", true, [](Call& c) { c.args.num_experts = -3; }, kBad, "numExperts = -3 must be > 0"},
      {"tokensNum 0", false, [](Call& c) { c.args.tokens_num = 0; }, kBad, "tokensNum = 0 must be > 0"},
      {"tokensNum -1", true, [](Call& c) { c.args.tokens_num = -1; }, kBad, "tokensNum = -1 must be > 0"},
      // Shapes and dtypes.
      {"permutedTokenOutputGrad 1-D", false, [=](Call& c) { shape(&c.args.permuted_token_output_grad, {40}); },
       kBad, "permutedTokenOutputGrad must be 2-D but has shape (40,)"},
      {"permutedTokenOutputGrad 3-D", false,
       [=](Call& c) { shape(&c.args.permuted_token_output_grad, {8, 5, 1}); }, kBad,
       "permutedTokenOutputGrad must be 2-D but has shape (8, 5, 1)"},
      {"permutedTokenOutputGrad INT32", false, [](Call& c) { c.args.permuted_token_output_grad.dtype = DType::kInt32; },
       kBad, "permutedTokenOutputGrad has dtype INT32 but must be FLOAT32, FLOAT16 or BFLOAT16"},
      {"permutedTokenOutputGrad DOUBLE", true,
       [](Call& c) { c.args.permuted_token_output_grad.dtype = DType::kFloat64; }, kBad,
       "permutedTokenOutputGrad has dtype DOUBLE"},
      {"sortedIndices 2-D", false, [=](Call& c) { shape(&c.args.sorted_indices, {8, 1}); }, kBad,
       "sortedIndices must be 1-D but has shape (8, 1)"},
      {"sortedIndices INT64", false, [](Call& c) { c.args.sorted_indices.dtype = DType::kInt64; }, kBad,
       "sortedIndices has dtype INT64 but must be INT32"},
      {"sortedIndices too short", false, [=](Call& c) { shape(&c.args.sorted_indices, {7}); }, kBad,
       "MoeTokenPermuteWithRoutingMapGrad: sortedIndices has 7 rows but permutedTokenOutputGrad has 8"},
      {"sortedIndices too long", true, [=](Call& c) { shape(&c.args.sorted_indices, {12}); }, kBad,
       "MoeTokenPermuteWithRoutingMapGrad: sortedIndices has 12 rows but permutedTokenOutputGrad has 6"},
      {"permutedProbsOutputGrad length", false, [=](Call& c) { shape(&*c.args.permuted_probs_output_grad, {9}); },
       kBad, "permutedProbsOutputGrad has 9 rows but permutedTokenOutputGrad has 8"},
      {"permutedProbsOutputGrad 2-D", true, [=](Call& c) { shape(&*c.args.permuted_probs_output_grad, {6, 1}); },
       kBad, "permutedProbsOutputGrad must be 1-D but has shape (6, 1)"},
      // Two dtype groups: permutedTokenOutputGrad and tokensGradOut (the tokens); permutedProbsOutputGrad and
      // probsGradOut (the probs), whatever the tokens' dtype is.
      {"permutedProbsOutputGrad FLOAT16", false,
       [](Call& c) { c.args.permuted_probs_output_grad->dtype = DType::kFloat16; }, kBad,
       "probsGradOut is FLOAT32 but permutedProbsOutputGrad is FLOAT16 (permutedProbsOutputGrad and probsGradOut share "
       "a dtype)"},
      {"permutedProbsOutputGrad INT32", true,
       [](Call& c) { c.args.permuted_probs_output_grad->dtype = DType::kInt32; }, kBad,
       "permutedProbsOutputGrad has dtype INT32 but must be FLOAT32, FLOAT16 or BFLOAT16"},
      {"permutedProbsOutputGrad BOOL", false,
       [](Call& c) { c.args.permuted_probs_output_grad->dtype = DType::kBool; }, kBad,
       "permutedProbsOutputGrad has dtype BOOL but must be FLOAT32, FLOAT16 or BFLOAT16"},
      {"dropless rows not a multiple of tokensNum", false, [](Call& c) { c.args.tokens_num = 3; }, kBad,
       "permutedTokenOutputGrad has 8 rows, not a multiple of tokensNum = 3"},
      {"drop-and-pad rows not a multiple of numExperts", true, [](Call& c) { c.args.num_experts = 4; }, kBad,
       "permutedTokenOutputGrad has 6 rows, not a multiple of numExperts = 4"},
      {"routingMap columns", false, [=](Call& c) { shape(&*c.args.routing_map, {T, E + 1}); }, kBad,
       "routingMap has shape (4, 4) but must be (4, 3)"},
      {"routingMap rows (drop-and-pad, unread)", true, [=](Call& c) { shape(&*c.args.routing_map, {T + 1, E}); },
       kBad, "routingMap has shape (5, 3) but must be (4, 3)"},
      {"routingMap 1-D", false, [=](Call& c) { shape(&*c.args.routing_map, {T * E}); }, kBad,
       "routingMap has shape (12,) but must be (4, 3)"},
      {"routingMap INT32", false, [](Call& c) { c.args.routing_map->dtype = DType::kInt32; }, kBad,
       "routingMap has dtype INT32 but must be INT8 or BOOL"},
      {"routingMap FLOAT32 (no probs)", false,
       [](Call& c) { c.args.routing_map->dtype = DType::kFloat32; c.args.permuted_probs_output_grad.reset(); }, kBad,
       "routingMap has dtype FLOAT32 but must be INT8 or BOOL"},
      {"tokensGradOut rows", false, [=](Call& c) { shape(&c.args.tokens_grad, {T + 1, H}); }, kBad,
       "tokensGradOut has shape (5, 5) but must be (4, 5)"},
      {"tokensGradOut columns", true, [=](Call& c) { shape(&c.args.tokens_grad, {T, H - 1}); }, kBad,
       "tokensGradOut has shape (4, 4) but must be (4, 5)"},
      {"tokensGradOut 3-D", false, [=](Call& c) { shape(&c.args.tokens_grad, {T, H, 1}); }, kBad,
       "tokensGradOut has shape (4, 5, 1) but must be (4, 5)"},
      {"tokensGradOut BFLOAT16", true, [](Call& c) { c.args.tokens_grad.dtype = DType::kBFloat16; }, kBad,
       "tokensGradOut is BFLOAT16 but permutedTokenOutputGrad is FLOAT32 (permutedTokenOutputGrad and tokensGradOut "
       "share a dtype)"},
      {"tokensGradOut FLOAT32 with FLOAT16 tokens and probs", false,
       [](Call& c) {
         c.args.permuted_token_output_grad.dtype = DType::kFloat16;
         c.args.permuted_probs_output_grad->dtype = DType::kFloat16;
         c.args.probs_grad->dtype = DType::kFloat16;
       },
       kBad, "tokensGradOut is FLOAT32 but permutedTokenOutputGrad is FLOAT16 (permutedTokenOutputGrad and "
       "tokensGradOut share a dtype)"},
      {"probsGradOut shape", false, [=](Call& c) { shape(&*c.args.probs_grad, {T, E + 2}); }, kBad,
       "probsGradOut has shape (4, 5) but must be (4, 3)"},
      {"probsGradOut FLOAT16", true, [](Call& c) { c.args.probs_grad->dtype = DType::kFloat16; }, kBad,
       "probsGradOut is FLOAT16 but permutedProbsOutputGrad is FLOAT32 (permutedProbsOutputGrad and probsGradOut share "
       "a dtype)"},
      {"probsGradOut BFLOAT16 with BFLOAT16 tokens", false,
       [](Call& c) {
         c.args.permuted_token_output_grad.dtype = DType::kBFloat16;
         c.args.tokens_grad.dtype = DType::kBFloat16;
         c.args.probs_grad->dtype = DType::kBFloat16;
       },
       kBad, "probsGradOut is BFLOAT16 but permutedProbsOutputGrad is FLOAT32"},
      // Outputs sharing memory with inputs or each other.
      {"tokensGradOut on permutedTokenOutputGrad", false,
       [](Call& c) { c.args.tokens_grad.data = c.buf[kGrad].data(); }, kBad,
       "tokensGradOut overlaps permutedTokenOutputGrad in memory"},
      {"tokensGradOut on sortedIndices", true, [](Call& c) { c.args.tokens_grad.data = c.buf[kIdx].data(); }, kBad,
       "tokensGradOut overlaps sortedIndices in memory"},
      {"probsGradOut on routingMap", false, [](Call& c) { c.args.probs_grad->data = c.buf[kMap].data(); }, kBad,
       "probsGradOut overlaps routingMap in memory"},
      {"probsGradOut on tokensGradOut", true,
       [](Call& c) { c.args.probs_grad->data = c.F(kTokensGrad) + T * H - 1; }, kBad,
       "tokensGradOut overlaps probsGradOut in memory"},
      // Workspace.
      {"workspace size overflows", true,
       [=](Call& c) {
         c.args.tokens_num = int64_t{1} << 62;
         c.args.permuted_probs_output_grad.reset();
         c.args.routing_map.reset();
         c.args.probs_grad.reset();
         shape(&c.args.permuted_token_output_grad, {0, 0});
         shape(&c.args.sorted_indices, {0});
         shape(&c.args.tokens_grad, {int64_t{1} << 62, 0});
       },
       kBad, "the workspace size overflows 64 bits"},
      {"workspace too small", true, [](Call& c) { c.workspace_slack = 1; }, kBad,
       "is smaller than the"},
      {"workspace null", true, [](Call& c) { c.null_workspace = true; }, kNull, "workspace is null but workspaceSize"},
      // Index data (phase two), including the last element: nothing may be written before the check ends.
      {"dropless index = N", false, [](Call& c) { c.Idx()[3] = 8; }, kBad,
       "sortedIndices[3] = 8 is outside [0, 8) for dropAndPad false"},
      {"dropless index -1 (last)", false, [](Call& c) { c.Idx()[7] = -1; }, kBad,
       "sortedIndices[7] = -1 is outside [0, 8) for dropAndPad false"},
      {"drop-and-pad index = T (valid rows, not a token)", true, [](Call& c) { c.Idx()[5] = 4; }, kBad,
       "sortedIndices[5] = 4 is outside [0, 4) for dropAndPad true"},
      {"drop-and-pad index INT32_MIN", true, [](Call& c) { c.Idx()[0] = INT32_MIN; }, kBad,
       "sortedIndices[0] = -2147483648 is outside [0, 4)"},
      {"one routed entry too many", false, [](Call& c) { c.Map()[2] = 7; }, kBad,
       "routingMap has 9 routed entries but permutedProbsOutputGrad has 8"},
      {"one routed entry too few (BOOL)", false,
       [](Call& c) { c.args.routing_map->dtype = DType::kBool; c.Map()[11 - 1] = 0; }, kBad,
       "routingMap has 7 routed entries but permutedProbsOutputGrad has 8"},
  };
}

// The base calls, and the probs (with their gradient) in every dtype against the tokens' (every combination is
// valid).
TEST(TokenPermuteWithRoutingMapGradErrors, ValidCallsSucceed) {
  for (bool dp : {false, true}) {
    for (const testing::DTypes& d : testing::kEveryDTypes) {
      SCOPED_TRACE(testing::DTypesName(d) + (dp ? " drop-and-pad" : " dropless"));
      Call c(dp);
      c.args.permuted_token_output_grad.dtype = c.args.tokens_grad.dtype = d.tokens;
      c.args.permuted_probs_output_grad->dtype = c.args.probs_grad->dtype = d.weights;
      Outcome o = RunCpp(c);
      EXPECT_EQ(o.status, 0) << o.message;
      o = RunAcl(c);
      EXPECT_EQ(o.status, 0) << o.message;
    }
  }
}

TEST(TokenPermuteWithRoutingMapGradErrors, EveryBadArgument) {
  for (const ErrorCase& e : Cases()) {
    for (int api = 0; api < 2; ++api) {
      if ((api == 0 && !e.cpp) || (api == 1 && !e.acl)) continue;
      SCOPED_TRACE(std::string(e.name) + (api == 0 ? " (C++ API)" : " (aclnn API)"));
      Call c(e.drop_and_pad);
      e.mutate(c);
      const std::vector<uint64_t> tokens_before = c.buf[kTokensGrad], probs_before = c.buf[kProbsGrad];
      const Outcome o = api == 0 ? RunCpp(c) : RunAcl(c);
      EXPECT_EQ(o.status, e.status) << o.message;
      testing::ExpectErrorMessage(o.message, "MoeTokenPermuteWithRoutingMapGrad", e.message);
      EXPECT_TRUE(o.executor_null_after_failure);
      EXPECT_TRUE(c.buf[kTokensGrad] == tokens_before) << "tokensGradOut's buffer was written";
      EXPECT_TRUE(c.buf[kProbsGrad] == probs_before) << "probsGradOut's buffer was written";
    }
  }
}

// Without probs grads, probsGradOut is neither required nor written, and the routing count is not checked.
TEST(TokenPermuteWithRoutingMapGradErrors, ProbsGradOutWithoutProbsIsLeftAlone) {
  for (int api = 0; api < 2; ++api) {
    Call c(false);
    c.args.permuted_probs_output_grad.reset();
    c.Map()[2] = 1;  // 9 routed entries: fine when probs grads are absent
    const std::vector<uint64_t> probs_before = c.buf[kProbsGrad];
    const Outcome o = api == 0 ? RunCpp(c) : RunAcl(c);
    EXPECT_EQ(o.status, 0) << o.message;
    EXPECT_TRUE(c.buf[kProbsGrad] == probs_before);
    c.args.probs_grad.reset();
    c.args.routing_map.reset();
    EXPECT_EQ((api == 0 ? RunCpp(c) : RunAcl(c)).status, 0);
  }
}

}  // namespace
}  // namespace moegrad
