// Every operator, through the aclnn API and the C++ API: each output placed on each input and on each other
// output is rejected by phase one with "<Op>: <output> overlaps <other> in memory"; each argument's element
// and byte counts are checked for 64-bit overflow; attributes at the ends of int64 get a status.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "moegrad/op_info.hpp"
#include "moegrad/ops.hpp"
#include "tests/overflow_alias_util.h"

namespace moegrad {
namespace {

using namespace moegrad::alias_testing;  // NOLINT

// Tensors 1 MiB apart: a view moved onto one tensor's data touches no other.
struct Arena {
  std::vector<uint8_t> bytes = std::vector<uint8_t>(size_t{12} << 20);
  void* Slot(int k) { return bytes.data() + (static_cast<size_t>(k) << 20); }
};

struct Named {
  std::string name;
  TensorView* view;
};

// One operator's small valid call (every optional tensor present that the call writes or reads, so every output
// given is written), its tensors by name in OpInfo's order (the order the operator checks them), and phase one
// through either API.
struct OpUnderTest {
  std::string op;
  std::vector<Named> inputs, outputs;
  std::function<Outcome()> cpp, acl;
};

template <typename Args>
OpUnderTest Describe(Args& a) {
  OpUnderTest t;
  t.op = OpInfo<Args>::kName;
  for (const TensorArg<Args>& arg : OpInfo<Args>::kTensors) {
    if (arg.Get(a) == nullptr) continue;  // an output this call does not write (MoeInitRoutingV2's other count)
    TensorView* v = arg.required != nullptr ? &(a.*arg.required) : &*(a.*arg.optional);
    (arg.role == ArgRole::kInput ? t.inputs : t.outputs).push_back({arg.name, v});
  }
  t.cpp = [&a] { return CppPlan(a); };
  t.acl = [&a] { return AclPlan(a); };
  return t;
}

// The small calls, over tensors 1 MiB apart in `arena`.
void SetSmallCall(Arena& arena, FinalizeRoutingV2GradArgs& a) {
  a.grad_y = TensorView(arena.Slot(0), DType::kFloat32, {4, 8});
  a.expanded_row_idx = TensorView(arena.Slot(1), DType::kInt32, {8});
  a.expanded_x = TensorView(arena.Slot(2), DType::kFloat32, {8, 8});
  a.scales = TensorView(arena.Slot(3), DType::kFloat32, {4, 2});
  a.expert_idx = TensorView(arena.Slot(4), DType::kInt32, {4, 2});
  a.bias = TensorView(arena.Slot(5), DType::kFloat32, {3, 8});
  a.grad_expanded_x = TensorView(arena.Slot(6), DType::kFloat32, {8, 8});
  a.grad_scales = TensorView(arena.Slot(7), DType::kFloat32, {4, 2});
}

void SetSmallCall(Arena& arena, FinalizeRoutingV2Args& a) {
  a.expanded_x = TensorView(arena.Slot(0), DType::kBFloat16, {8, 8});
  a.expanded_row_idx = TensorView(arena.Slot(1), DType::kInt32, {8});
  a.x1 = TensorView(arena.Slot(2), DType::kBFloat16, {4, 8});
  a.x2 = TensorView(arena.Slot(3), DType::kBFloat16, {4, 8});
  a.bias = TensorView(arena.Slot(4), DType::kBFloat16, {3, 8});
  a.scales = TensorView(arena.Slot(5), DType::kBFloat16, {4, 2});
  a.expert_idx = TensorView(arena.Slot(6), DType::kInt32, {4, 2});
  a.drop_pad_mode = 2;
  a.out = TensorView(arena.Slot(7), DType::kBFloat16, {4, 8});
}

void SetSmallCall(Arena& arena, TokenPermuteWithRoutingMapArgs& a) {
  a.tokens = TensorView(arena.Slot(0), DType::kFloat16, {4, 8});
  a.routing_map = TensorView(arena.Slot(1), DType::kInt8, {4, 3});
  a.probs = TensorView(arena.Slot(2), DType::kFloat16, {4, 3});
  a.num_out_tokens = 8;
  a.permute_tokens = TensorView(arena.Slot(3), DType::kFloat16, {8, 8});
  a.permute_probs = TensorView(arena.Slot(4), DType::kFloat16, {8});
  a.sorted_indices = TensorView(arena.Slot(5), DType::kInt32, {8});
}

void SetSmallCall(Arena& arena, TokenPermuteWithRoutingMapGradArgs& a) {
  a.permuted_token_output_grad = TensorView(arena.Slot(0), DType::kFloat32, {8, 8});
  a.permuted_probs_output_grad = TensorView(arena.Slot(1), DType::kFloat32, {8});
  a.sorted_indices = TensorView(arena.Slot(2), DType::kInt32, {8});
  a.routing_map = TensorView(arena.Slot(3), DType::kBool, {4, 3});
  a.num_experts = 3;
  a.tokens_num = 4;
  a.tokens_grad = TensorView(arena.Slot(4), DType::kFloat32, {4, 8});
  a.probs_grad = TensorView(arena.Slot(5), DType::kFloat32, {4, 3});
}

// Drop/pad with the counts before capacity (its other count output is written only in dropless mode).
void SetSmallCall(Arena& arena, InitRoutingV2Args& a) {
  a.x = TensorView(arena.Slot(0), DType::kBFloat16, {4, 8});
  a.expert_idx = TensorView(arena.Slot(1), DType::kInt32, {4, 2});
  a.expert_num = 3;
  a.expert_capacity = 2;
  a.drop_pad_mode = 1;
  a.expert_tokens_before_capacity_flag = true;
  a.expanded_x = TensorView(arena.Slot(2), DType::kBFloat16, {3, 2, 8});
  a.expanded_row_idx = TensorView(arena.Slot(3), DType::kInt32, {8});
  a.expert_tokens_before_capacity = TensorView(arena.Slot(4), DType::kInt32, {3});
}

void SetSmallCall(Arena& arena, InitRoutingV2GradArgs& a) {
  a.grad_expanded_x = TensorView(arena.Slot(0), DType::kFloat16, {2, 3, 8});
  a.expanded_row_idx = TensorView(arena.Slot(1), DType::kInt32, {8});
  a.top_k = 2;
  a.drop_pad_mode = 1;
  a.out = TensorView(arena.Slot(2), DType::kFloat16, {4, 8});
}

// Dropless with probs (K = 2 of 3 experts) and restoreShape.
void SetSmallCall(Arena& arena, TokenUnpermuteWithRoutingMapArgs& a) {
  a.permuted_tokens = TensorView(arena.Slot(0), DType::kBFloat16, {8, 8});
  a.sorted_indices = TensorView(arena.Slot(1), DType::kInt32, {8});
  a.routing_map = TensorView(arena.Slot(2), DType::kInt8, {4, 3});
  a.probs = TensorView(arena.Slot(3), DType::kFloat32, {4, 3});
  a.restore_shape = std::vector<int64_t>{4, 8};
  a.unpermuted_tokens = TensorView(arena.Slot(4), DType::kBFloat16, {4, 8});
  a.out_index = TensorView(arena.Slot(5), DType::kInt32, {8});
  a.permute_token_id = TensorView(arena.Slot(6), DType::kInt32, {8});
  a.permute_probs = TensorView(arena.Slot(7), DType::kFloat32, {8});
}

void SetSmallCall(Arena& arena, TokenUnpermuteWithRoutingMapGradArgs& a) {
  a.unpermuted_tokens_grad = TensorView(arena.Slot(0), DType::kBFloat16, {4, 8});
  a.out_index = TensorView(arena.Slot(1), DType::kInt32, {8});
  a.permute_token_id = TensorView(arena.Slot(2), DType::kInt32, {8});
  a.routing_map = TensorView(arena.Slot(3), DType::kInt8, {4, 3});
  a.permuted_tokens = TensorView(arena.Slot(4), DType::kBFloat16, {8, 8});
  a.probs = TensorView(arena.Slot(5), DType::kFloat32, {4, 3});
  a.permuted_tokens_grad = TensorView(arena.Slot(6), DType::kBFloat16, {8, 8});
  a.probs_grad = TensorView(arena.Slot(7), DType::kFloat32, {4, 3});
}

// Runs `check` on each operator's fresh small call.
void ForEachSmallCall(const std::function<void(OpUnderTest&)>& check) {
  Arena arena;
  ForEachOp([&](auto info) {
    typename testing::ArgsOf<decltype(info)>::type a;
    SetSmallCall(arena, a);
    OpUnderTest t = Describe(a);
    SCOPED_TRACE(t.op);
    check(t);
  });
}

TEST(EveryOperatorAlias, SmallCallsAreAccepted) {
  ForEachSmallCall([](OpUnderTest& t) {
    EXPECT_EQ(t.cpp().status, 0) << t.cpp().message;
    EXPECT_EQ(t.acl().status, 0) << t.acl().message;
  });
}

TEST(EveryOperatorAlias, EachOutputOnEachInputAndOnEachOtherOutputIsRejected) {
  ForEachSmallCall([](OpUnderTest& t) {
    for (size_t o = 0; o < t.outputs.size(); ++o) {
      std::vector<std::pair<Named, std::string>> others;  // (tensor, the message naming the pair)
      for (const Named& in : t.inputs) others.push_back({in, t.outputs[o].name + " overlaps " + in.name});
      for (size_t p = 0; p < t.outputs.size(); ++p) {
        if (p == o) continue;
        // Found while checking whichever of the two outputs comes first.
        const Named& first = t.outputs[std::min(o, p)];
        const Named& second = t.outputs[std::max(o, p)];
        others.push_back({t.outputs[p], first.name + " overlaps " + second.name});
      }
      TensorView* out = t.outputs[o].view;
      void* const own = out->data;
      for (const auto& [other, pair] : others) {
        SCOPED_TRACE(t.outputs[o].name + " on " + other.name);
        const std::string want = t.op + ": " + pair + " in memory";
        out->data = other.view->data;
        EXPECT_EQ(t.cpp().message, want);
        EXPECT_EQ(t.acl().message, want);
        out->data = static_cast<char*>(other.view->data) + other.view->element_size();  // one element in
        EXPECT_EQ(t.cpp().status, ACLNN_ERR_PARAM_INVALID);
      }
      out->data = own;
    }
  });
}

// An output whose elements share memory (a stride of 0, or a stride smaller than the span of the inner
// dimensions) would have threads racing on the same bytes: phase one rejects it through both APIs.
TEST(EveryOperatorAlias, OutputsThatOverlapThemselvesAreRejected) {
  ForEachSmallCall([](OpUnderTest& t) {
    for (const Named& out : t.outputs) {
      TensorView* v = out.view;
      for (int d = 0; d < v->rank; ++d) {
        if (v->sizes[d] < 2) continue;
        SCOPED_TRACE(out.name + " dimension " + std::to_string(d));
        const int64_t own = v->strides[d];
        for (int64_t bad : {int64_t{0}, d + 1 < v->rank && v->sizes[d + 1] > 1 ? v->strides[d + 1] : int64_t{0}}) {
          if (bad == own) continue;
          v->strides[d] = bad;
          const std::string want = t.op + ": " + out.name + " has elements that share memory";
          EXPECT_EQ(t.cpp().status, ACLNN_ERR_PARAM_INVALID);
          EXPECT_EQ(t.cpp().message.rfind(want, 0), 0u) << t.cpp().message;
          EXPECT_EQ(t.acl().message.rfind(want, 0), 0u) << t.acl().message;
        }
        v->strides[d] = own;
      }
    }
    EXPECT_EQ(t.cpp().status, 0) << t.cpp().message;
  });
}

// Phase one checks an output's dimensions by ascending stride, ties in dimension order: a column-major output
// is accepted, and of two dimensions with the same stride the later one is named, over the span of the other.
TEST(EveryOperatorAlias, OutputStridesAreCheckedInOrderTiesByDimension) {
  ForEachSmallCall([](OpUnderTest& t) {
    int checked = 0;
    for (const Named& out : t.outputs) {
      TensorView* v = out.view;
      if (v->rank < 2 || v->sizes[0] < 2 || v->sizes[1] < 2) continue;
      SCOPED_TRACE(out.name);
      const TensorView saved = *v;
      int64_t stride = 1;  // column-major: dimension 0 innermost
      for (int d = 0; d < v->rank; ++d) {
        v->strides[d] = stride;
        stride *= v->sizes[d];
      }
      EXPECT_EQ(t.cpp().status, 0) << t.cpp().message;
      EXPECT_EQ(t.acl().status, 0) << t.acl().message;
      v->strides[1] = 1;
      const std::string want = t.op + ": " + out.name +
                               " has elements that share memory (stride 1 in dimension 1 over a span of " +
                               std::to_string(v->sizes[0]) + "); an output must not overlap itself";
      EXPECT_EQ(t.cpp().status, ACLNN_ERR_PARAM_INVALID);
      EXPECT_EQ(t.cpp().message, want);
      EXPECT_EQ(t.acl().message, want);
      *v = saved;
      ++checked;
    }
    EXPECT_GT(checked, 0) << t.op << " has no output of two or more dimensions";
    EXPECT_EQ(t.cpp().status, 0) << t.cpp().message;
  });
}

// A tensor whose data pointer is off its element size (a byte offset into another allocation) is rejected by
// phase one through both APIs, naming it; one-byte elements (INT8, BOOL) are aligned anywhere.
TEST(EveryOperatorAlignment, EachArgumentMisalignedForItsElementsIsRejected) {
  ForEachSmallCall([](OpUnderTest& t) {
    std::vector<Named> all = t.inputs;
    all.insert(all.end(), t.outputs.begin(), t.outputs.end());
    for (const Named& n : all) {
      TensorView* v = n.view;
      const int64_t es = v->element_size();
      void* const own = v->data;
      for (int64_t shift = 1; shift < es; ++shift) {
        SCOPED_TRACE(n.name + " shifted by " + std::to_string(shift) + " bytes");
        v->data = static_cast<char*>(own) + shift;
        const std::string want = t.op + ": " + n.name + " has dtype " + DTypeName(v->dtype) +
                                 " but its data pointer is not aligned to its " + std::to_string(es) +
                                 "-byte elements";
        EXPECT_EQ(t.cpp().status, ACLNN_ERR_PARAM_INVALID);
        EXPECT_EQ(t.cpp().message, want);
        EXPECT_EQ(t.acl().status, ACLNN_ERR_PARAM_INVALID);
        EXPECT_EQ(t.acl().message, want);
      }
      v->data = own;
    }
    EXPECT_EQ(t.cpp().status, 0) << t.cpp().message;
  });
}

TEST(EveryOperatorOverflow, EachArgumentsElementCountIsChecked) {
  ForEachSmallCall([](OpUnderTest& t) {
    std::vector<Named> all = t.inputs;
    all.insert(all.end(), t.outputs.begin(), t.outputs.end());
    const int64_t big = int64_t{1} << 40;
    for (const Named& n : all) {
      SCOPED_TRACE(n.name);
      const TensorView saved = *n.view;
      *n.view = View2D(saved.data, saved.dtype, big, big, 1, 1);
      EXPECT_EQ(t.cpp().message, t.op + ": " + n.name + " of shape (" + std::to_string(big) + ", " +
                                     std::to_string(big) + ") overflows 64-bit element offsets");
      // Element offsets fit, bytes do not (one-byte elements cannot get there).
      if (saved.element_size() > 1) {
        *n.view = View2D(saved.data, saved.dtype, 2, 2, int64_t{1} << 62, 1);
        EXPECT_EQ(t.cpp().message, t.op + ": " + n.name + " of shape (2, 2) overflows 64-bit byte offsets");
      }
      *n.view = saved;
    }
  });
}

// Attributes at the ends of int64 with empty tensors that agree with them: phase one must answer with a
// status (never wrap a size or overflow in its own arithmetic: the sanitizer build aborts on that).
TEST(EveryOperatorOverflow, ExtremeAttributesWithEmptyTensors) {
  const int64_t kMax = INT64_MAX, kMin = INT64_MIN;
  auto expect_status = [](const Outcome& o, const char* what) {
    EXPECT_TRUE(o.status == 0 || o.status == ACLNN_ERR_PARAM_INVALID) << what << ": " << o.status << " " << o.message;
  };
  for (const int64_t v : {kMax, kMax - 1, kMin, int64_t{1} << 62, int64_t{-1}}) {
    SCOPED_TRACE(v);
    // MoeFinalizeRoutingV2Grad, mode 1 with E = v (C = 1) and mode 0 with activeNum = v.
    FinalizeRoutingV2GradArgs g = DropPadArgs(v > 0 ? v : 1, 1);
    expect_status(CppPlan(g), "finalize grad expertNum");
    g.drop_pad_mode = v;
    expect_status(CppPlan(g), "finalize grad dropPadMode");
    g = DropPadArgs(2, 2);
    g.drop_pad_mode = 0;
    g.active_num = v;
    g.grad_expanded_x = TensorView(Fake(2), DType::kBFloat16, {2, 0});
    expect_status(CppPlan(g), "finalize grad activeNum");
    expect_status(AclPlan(g), "finalize grad activeNum (aclnn)");

    // MoeFinalizeRoutingV2, drop/pad with E = v experts of capacity 1; and dropPadMode = v.
    FinalizeRoutingV2Args f;
    f.expanded_x = TensorView(Fake(0), DType::kFloat32, {v > 0 ? v : 1, 1, 0});
    f.expanded_row_idx = TensorView(Fake(1), DType::kInt32, {0});
    f.drop_pad_mode = 3;
    f.out = TensorView(Fake(2), DType::kFloat32, {0, 0});
    expect_status(CppPlan(f), "finalize experts");
    f.drop_pad_mode = v;
    expect_status(CppPlan(f), "finalize dropPadMode");

    // MoeTokenPermuteWithRoutingMap: T = v tokens of hidden size 0, no experts; numOutTokens = v.
    for (const bool dp : {false, true}) {
      TokenPermuteWithRoutingMapArgs p;
      const int64_t tokens = v > 0 ? v : 1;
      p.tokens = TensorView(Fake(0), DType::kFloat32, {tokens, 0});
      p.routing_map = TensorView(Fake(1), DType::kBool, {tokens, 0});
      p.drop_and_pad = dp;
      p.permute_tokens = TensorView(Fake(2), DType::kFloat32, {0, 0});
      p.sorted_indices = TensorView(Fake(3), DType::kInt32, {0});
      expect_status(CppPlan(p), "permute tokens");
      p.num_out_tokens = v;
      expect_status(CppPlan(p), "permute numOutTokens");
    }

    // MoeTokenPermuteWithRoutingMapGrad: tokensNum = v and numExperts = v, N = 0 rows.
    for (const bool dp : {false, true}) {
      TokenPermuteWithRoutingMapGradArgs q;
      q.permuted_token_output_grad = TensorView(Fake(0), DType::kFloat32, {0, 0});
      q.sorted_indices = TensorView(Fake(1), DType::kInt32, {0});
      q.num_experts = v;
      q.tokens_num = v;
      q.drop_and_pad = dp;
      q.tokens_grad = TensorView(Fake(2), DType::kFloat32, {v > 0 ? v : 1, 0});
      expect_status(CppPlan(q), "permute grad tokensNum");
      q.num_experts = 4;
      expect_status(CppPlan(q), "permute grad tokensNum, 4 experts");
    }

    // MoeTokenUnpermuteWithRoutingMap: restoreShape (v, 0) and (0, v) with N = 0 rows, T = v tokens of H = 0.
    for (const bool pad : {false, true}) {
      TokenUnpermuteWithRoutingMapArgs u;
      const int64_t tokens = v > 0 ? v : 1;
      u.permuted_tokens = TensorView(Fake(0), DType::kFloat32, {0, 0});
      u.sorted_indices = TensorView(Fake(1), DType::kInt32, {0});
      u.padded_mode = pad;
      u.restore_shape = std::vector<int64_t>{v, 0};
      u.unpermuted_tokens = TensorView(Fake(2), DType::kFloat32, {tokens, 0});
      u.out_index = TensorView(Fake(3), DType::kInt32, {0});
      u.permute_token_id = TensorView(Fake(4), DType::kInt32, {0});
      expect_status(CppPlan(u), "unpermute restoreShape (v, 0)");
      expect_status(AclPlan(u), "unpermute restoreShape (v, 0) (aclnn)");
      u.restore_shape = std::vector<int64_t>{0, v};
      expect_status(CppPlan(u), "unpermute restoreShape (0, v)");
    }

    // MoeInitRoutingV2Grad: topK = v, activeNum = v and dropPadMode = v with L = 0 pairs.
    for (const int64_t mode : {0, 1}) {
      InitRoutingV2GradArgs r;
      r.grad_expanded_x = mode == 1 ? TensorView(Fake(0), DType::kFloat32, {v > 0 ? v : 1, 0, 0})
                                    : TensorView(Fake(0), DType::kFloat32, {0, 0});
      r.expanded_row_idx = TensorView(Fake(1), DType::kInt32, {0});
      r.top_k = v;
      r.drop_pad_mode = mode;
      r.out = TensorView(Fake(2), DType::kFloat32, {0, 0});
      expect_status(CppPlan(r), "init-routing grad topK");
      r.top_k = 1;
      r.active_num = v;
      expect_status(CppPlan(r), "init-routing grad activeNum");
      expect_status(AclPlan(r), "init-routing grad activeNum (aclnn)");
      r.drop_pad_mode = v;
      expect_status(CppPlan(r), "init-routing grad dropPadMode");
    }

    // MoeTokenUnpermuteWithRoutingMapGrad: T = v tokens of H = 0, no pairs, a map of no experts, restoreShape
    // (v, v).
    for (const bool dp : {false, true}) {
      TokenUnpermuteWithRoutingMapGradArgs u;
      const int64_t tokens = v > 0 ? v : 1;
      u.unpermuted_tokens_grad = TensorView(Fake(0), DType::kFloat32, {tokens, 0});
      u.out_index = TensorView(Fake(1), DType::kInt32, {0});
      u.permute_token_id = TensorView(Fake(2), DType::kInt32, {0});
      u.routing_map = TensorView(Fake(3), DType::kBool, {tokens, 0});
      u.drop_and_pad = dp;
      u.restore_shape = std::vector<int64_t>{v, v};
      u.permuted_tokens_grad = TensorView(Fake(4), DType::kFloat32, {0, 0});
      expect_status(CppPlan(u), "unpermute grad restoreShape");
      expect_status(AclPlan(u), "unpermute grad tokens (aclnn)");
    }
  }
}

// MoeInitRoutingV2: expertNum, expertCapacity, activeNum, the flag and dropPadMode at the ends of int64, with
// N = 0 tokens of H = 0 (so that an output of any number of rows is empty) and the outputs they ask for.
TEST(EveryOperatorOverflow, InitRoutingV2ExtremeAttributes) {
  auto expect_status = [](const Outcome& o, const char* what) {
    EXPECT_TRUE(o.status == 0 || o.status == ACLNN_ERR_PARAM_INVALID) << what << ": " << o.status << " " << o.message;
  };
  for (const int64_t v : {INT64_MAX, INT64_MAX - 1, INT64_MIN, int64_t{1} << 62, int64_t{1} << 31, int64_t{-1}}) {
    SCOPED_TRACE(v);
    const int64_t rows = v > 0 ? v : 1;
    InitRoutingV2Args a;
    a.x = TensorView(Fake(0), DType::kFloat32, {0, 0});
    a.expert_idx = TensorView(Fake(1), DType::kInt32, {0, 3});
    a.expanded_row_idx = TensorView(Fake(2), DType::kInt32, {0});
    a.drop_pad_mode = 1;
    a.expert_num = v;
    a.expert_capacity = 1;
    a.expanded_x = TensorView(Fake(3), DType::kFloat32, {rows, 1, 0});
    expect_status(CppPlan(a), "expertNum");
    expect_status(AclPlan(a), "expertNum (aclnn)");
    a.expert_num = 1;
    a.expert_capacity = v;
    a.expanded_x = TensorView(Fake(3), DType::kFloat32, {1, rows, 0});
    expect_status(CppPlan(a), "expertCapacity");
    a.drop_pad_mode = v;
    expect_status(CppPlan(a), "dropPadMode");
    a.drop_pad_mode = 0;
    a.active_num = v;
    a.expanded_x = TensorView(Fake(3), DType::kFloat32, {0, 0});
    expect_status(CppPlan(a), "activeNum");
    a.active_num = 0;
    a.expert_tokens_count_or_cumsum_flag = v;
    expect_status(CppPlan(a), "expertTokensCountOrCumsumFlag");
    a.expert_tokens_count_or_cumsum_flag = 2;
    a.expert_num = v;
    a.expert_tokens_count_or_cumsum = TensorView(Fake(4), DType::kInt32, {0});
    expect_status(CppPlan(a), "expertNum of the counts");
  }
}

TEST(EveryOperatorOverflow, TokenPermuteWithRoutingMapGradWorkspaceOverflowIsRejected) {
  // Drop-and-pad keeps a (T + 1)-entry offset table: 2^62 tokens need 2^65 bytes.
  TokenPermuteWithRoutingMapGradArgs q;
  q.permuted_token_output_grad = TensorView(Fake(0), DType::kFloat32, {0, 0});
  q.sorted_indices = TensorView(Fake(1), DType::kInt32, {0});
  q.num_experts = 1;
  q.tokens_num = int64_t{1} << 62;
  q.drop_and_pad = true;
  q.tokens_grad = TensorView(Fake(2), DType::kFloat32, {q.tokens_num, 0});
  const Outcome o = CppPlan(q);
  EXPECT_EQ(o.status, ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(o.message, "MoeTokenPermuteWithRoutingMapGrad: the workspace size overflows 64 bits");
}

TEST(EveryOperatorOverflow, InitRoutingV2GradWorkspaceOverflowIsRejected) {
  // N + 1 offsets and L terms of 8 bytes: L = 2^61 - 1 pairs of topK 1 need about 2^65 bytes.
  const int64_t L = (int64_t{1} << 61) - 1;
  InitRoutingV2GradArgs r;
  r.grad_expanded_x = TensorView(Fake(0), DType::kFloat32, {L, 0});
  r.expanded_row_idx = TensorView(Fake(1), DType::kInt32, {L});
  r.top_k = 1;
  r.out = TensorView(Fake(2), DType::kFloat32, {L, 0});
  const Outcome o = CppPlan(r);
  EXPECT_EQ(o.status, ACLNN_ERR_PARAM_INVALID);
  EXPECT_EQ(o.message, "MoeInitRoutingV2Grad: the workspace size overflows 64 bits");
}

}  // namespace
}  // namespace moegrad
