// Thread safety: concurrent calls of every operator on different tensors from different threads give
// exactly the results of the same calls made one after another; one repeatable executor may run from two
// threads at once, each with its own workspace; error messages are per thread.
//
// The library's own worker threads come from MOEGRAD_NUM_THREADS (this test never changes it), so the CI's
// ThreadSanitizer run sets it to 1: libgomp is not instrumented, and its parallel regions would only produce
// false reports. The std::threads below still call the library concurrently.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_finalize_routing_v2_grad.h"
#include "moegrad/ops.hpp"
#include "tests/support/api.h"
#include "tests/support/test_tensor.h"

#if defined(__SANITIZE_THREAD__)
#define MOEGRAD_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MOEGRAD_TSAN 1
#endif
#endif
#ifdef MOEGRAD_TSAN
extern "C" void AnnotateBenignRaceSized(const char* file, int line, const volatile void* mem, size_t size,
                                        const char* description);
#endif

namespace moegrad {
namespace {

using testing::AclCall;
using testing::Api;
using testing::Layout;
using testing::OpEntry;
using testing::TestCall;
using testing::TestTensor;

constexpr int kThreads = 4;
constexpr int kRounds = 3;
enum Op { kFinalizeRoutingV2Grad, kFinalizeRoutingV2, kTokenPermuteWithRoutingMap, kTokenPermuteWithRoutingMapGrad,
          kInitRoutingV2, kInitRoutingV2Grad, kTokenUnpermuteWithRoutingMap, kTokenUnpermuteWithRoutingMapGrad,
          kNumOps };

std::vector<int32_t> Permutation(int64_t n, std::mt19937_64& rng) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::shuffle(p.begin(), p.end(), rng);
  return p;
}

// One thread's tensors for every operator: sizes, dtype and layout differ from thread to thread.
struct Workload {
  int64_t R, K, H, E;
  DType dt;
  Layout layout;
  // MoeFinalizeRoutingV2Grad, dropPadMode 0, with scales and bias.
  TestTensor fg_grad_y, fg_idx, fg_x, fg_scales, fg_expert, fg_bias, fg_gx, fg_gs;
  // MoeFinalizeRoutingV2, dropPadMode 2, with x1, bias and scales.
  TestTensor ff_x, ff_idx, ff_x1, ff_bias, ff_scales, ff_expert, ff_out;
  // MoeTokenPermuteWithRoutingMap, dropless with probs (T = R tokens, N = R*K).
  TestTensor pf_tokens, pf_map, pf_probs, pf_out, pf_out_probs, pf_sorted;
  // MoeTokenPermuteWithRoutingMapGrad, dropless with probs.
  TestTensor pg_grad, pg_probs, pg_sorted, pg_map, pg_tokens_grad, pg_probs_grad;
  // MoeInitRoutingV2: dropless with activeNum and the cumsum (even seeds), or drop/pad with the counts before
  // capacity (odd seeds).
  TestTensor ir_x, ir_idx, ir_out, ir_row_idx, ir_counts;
  // MoeInitRoutingV2Grad, dropPadMode 0 with activeNum R*K - R/2 (the pairs reading rows past it skipped).
  TestTensor ig_grad, ig_idx, ig_out;
  // MoeTokenUnpermuteWithRoutingMap: dropless with probs (even seeds), or pad without probs (odd seeds).
  TestTensor uf_x, uf_idx, uf_map, uf_probs, uf_out, uf_out_index, uf_token_id, uf_out_probs;
  // MoeTokenUnpermuteWithRoutingMapGrad, dropless with probs (the permute's map), MindSpeed's sortedIndices as
  // both index inputs.
  TestTensor ug_grad, ug_idx, ug_perm, ug_probs, ug_perm_grad, ug_probs_grad;
  // The calls over those tensors (which they point to: a Workload stays where it was made).
  TestCall<FinalizeRoutingV2GradArgs> finalize_routing_v2_grad;
  TestCall<FinalizeRoutingV2Args> finalize_routing_v2;
  TestCall<TokenPermuteWithRoutingMapArgs> token_permute_with_routing_map;
  TestCall<TokenPermuteWithRoutingMapGradArgs> token_permute_with_routing_map_grad;
  TestCall<InitRoutingV2Args> init_routing_v2;
  TestCall<InitRoutingV2GradArgs> init_routing_v2_grad;
  TestCall<TokenUnpermuteWithRoutingMapArgs> token_unpermute_with_routing_map;
  TestCall<TokenUnpermuteWithRoutingMapGradArgs> token_unpermute_with_routing_map_grad;

  explicit Workload(int seed)
      : R(80 + 24 * seed), K(1 + seed % 4), H(384 + 40 * seed + seed % 3), E(8 + 4 * seed),
        dt(seed % 3 == 0 ? DType::kFloat32 : seed % 3 == 1 ? DType::kBFloat16 : DType::kFloat16),
        layout(seed % 2 == 0 ? Layout::kContiguous : Layout::kPadded) {
    std::mt19937_64 rng(1234 + seed);
    uint64_t s = 100 * seed;
    auto f = [&](std::vector<int64_t> sizes) {
      TestTensor t(dt, sizes, layout, ++s);
      t.FillUniform(rng);
      return t;
    };
    auto out = [&](DType d, std::vector<int64_t> sizes) { return TestTensor(d, sizes, layout, ++s); };
    auto i32 = [&](std::vector<int64_t> sizes, const std::vector<int32_t>& values) {
      TestTensor t(DType::kInt32, sizes, layout, ++s);
      for (size_t i = 0; i < values.size(); ++i) t.SetI(static_cast<int64_t>(i), values[i]);
      return t;
    };
    std::vector<int32_t> experts(static_cast<size_t>(R * K));
    for (auto& e : experts) e = static_cast<int32_t>(rng() % static_cast<uint64_t>(E));
    // Exactly K routed experts per token: the first K of a shuffled expert list.
    TestTensor map(DType::kInt8, {R, E}, layout, ++s);
    for (int64_t t = 0; t < R; ++t) {
      const std::vector<int32_t> order = Permutation(E, rng);
      for (int64_t e = 0; e < E; ++e) map.SetI(t * E + order[static_cast<size_t>(e)], e < K ? 1 : 0);
    }

    fg_grad_y = f({R, H});
    fg_idx = i32({R * K}, Permutation(R * K, rng));
    fg_x = f({R * K, H});
    fg_scales = f({R, K});
    fg_expert = i32({R, K}, experts);
    fg_bias = f({E, H});
    fg_gx = out(dt, {R * K, H});
    fg_gs = out(dt, {R, K});

    ff_x = f({R * K, H});
    ff_idx = i32({R * K}, Permutation(R * K, rng));
    ff_x1 = f({R, H});
    ff_bias = f({E, H});
    ff_scales = f({R, K});
    ff_expert = i32({R, K}, experts);
    ff_out = out(dt, {R, H});

    pf_tokens = f({R, H});
    pf_map = map;
    pf_probs = f({R, E});
    pf_out = out(dt, {R * K, H});
    pf_out_probs = out(dt, {R * K});
    pf_sorted = out(DType::kInt32, {R * K});

    pg_grad = f({R * K, H});
    pg_probs = f({R * K});
    pg_sorted = i32({R * K}, Permutation(R * K, rng));
    pg_map = map;
    pg_tokens_grad = out(dt, {R, H});
    pg_probs_grad = out(dt, {R, E});

    ig_grad = f({R * K - R / 2, H});
    ig_idx = i32({R * K}, Permutation(R * K, rng));
    ig_out = out(dt, {R, H});

    finalize_routing_v2_grad.tensors = {&fg_grad_y, &fg_idx, &fg_x, &fg_scales, &fg_expert, &fg_bias, &fg_gx, &fg_gs};
    finalize_routing_v2.tensors = {&ff_x, &ff_idx, &ff_x1, nullptr, &ff_bias, &ff_scales, &ff_expert, &ff_out};
    finalize_routing_v2.attrs = {2};  // dropPadMode
    token_permute_with_routing_map.tensors = {&pf_tokens, &pf_map, &pf_probs, &pf_out, &pf_out_probs, &pf_sorted};
    token_permute_with_routing_map.attrs = {R * K, false};  // numOutTokens, dropAndPad
    token_permute_with_routing_map_grad.tensors = {&pg_grad,   &pg_probs,       &pg_sorted,
                                                   &pg_map,    &pg_tokens_grad, &pg_probs_grad};
    token_permute_with_routing_map_grad.attrs = {E, R, false};  // numExperts, tokensNum, dropAndPad

    const bool drop_pad = seed % 2 == 1;
    const int64_t capacity = R * K / E, active = R * K - 3;
    ir_x = f({R, H});
    ir_idx = i32({R, K}, experts);
    ir_out = drop_pad ? out(dt, {E, capacity, H}) : out(dt, {active, H});
    ir_row_idx = out(DType::kInt32, {R * K});
    ir_counts = out(DType::kInt32, {E});
    init_routing_v2.tensors = {&ir_x, &ir_idx, &ir_out, &ir_row_idx, drop_pad ? nullptr : &ir_counts,
                               drop_pad ? &ir_counts : nullptr};
    // activeNum, expertCapacity, expertNum, dropPadMode, expertTokensCountOrCumsumFlag, before-capacity flag
    init_routing_v2.attrs = {active, drop_pad ? capacity : 0, E, drop_pad ? 1 : 0, 1, drop_pad};
    init_routing_v2_grad.tensors = {&ig_grad, &ig_idx, &ig_out};
    init_routing_v2_grad.attrs = {K, 0, R * K - R / 2};  // topK, dropPadMode, activeNum

    // Pad: E experts of capacity K, each row a random token.
    std::vector<int32_t> tokens(static_cast<size_t>(E * K));
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(R));
    uf_x = f({drop_pad ? E * K : R * K, H});
    uf_idx = drop_pad ? i32({E * K}, tokens) : i32({R * K}, Permutation(R * K, rng));
    uf_map = map;
    uf_probs = f({R, E});
    uf_out = out(dt, {R, H});
    uf_out_index = out(DType::kInt32, {drop_pad ? E * K : R * K});
    uf_token_id = out(DType::kInt32, {drop_pad ? E * K : R * K});
    uf_out_probs = out(dt, {R * K});
    token_unpermute_with_routing_map.tensors = {&uf_x,   &uf_idx,       &uf_map,      drop_pad ? nullptr : &uf_probs,
                                                &uf_out, &uf_out_index, &uf_token_id, drop_pad ? nullptr : &uf_out_probs};
    token_unpermute_with_routing_map.attrs = {drop_pad};  // paddedMode
    if (drop_pad) token_unpermute_with_routing_map.arrays[0] = std::vector<int64_t>{R, H};  // restoreShape

    ug_grad = f({R, H});
    ug_idx = i32({R * K}, Permutation(R * K, rng));
    ug_perm = f({R * K, H});
    ug_probs = f({R, E});
    ug_perm_grad = out(dt, {R * K, H});
    ug_probs_grad = out(dt, {R, E});
    token_unpermute_with_routing_map_grad.tensors = {&ug_grad,  &ug_idx,   &ug_idx,       &pg_map,
                                                     &ug_perm,  &ug_probs, &ug_perm_grad, &ug_probs_grad};
    token_unpermute_with_routing_map_grad.attrs = {false};  // dropAndPad
  }
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;

  // fn(call of operator op).
  template <typename Fn>
  auto With(int op, const Fn& fn) {
    switch (op) {
      case kFinalizeRoutingV2Grad: return fn(finalize_routing_v2_grad);
      case kFinalizeRoutingV2: return fn(finalize_routing_v2);
      case kTokenPermuteWithRoutingMap: return fn(token_permute_with_routing_map);
      case kTokenPermuteWithRoutingMapGrad: return fn(token_permute_with_routing_map_grad);
      case kInitRoutingV2Grad: return fn(init_routing_v2_grad);
      case kTokenUnpermuteWithRoutingMap: return fn(token_unpermute_with_routing_map);
      case kTokenUnpermuteWithRoutingMapGrad: return fn(token_unpermute_with_routing_map_grad);
      default: return fn(init_routing_v2);
    }
  }

  std::vector<TestTensor*> Outputs(int op) {
    return With(op, [](const auto& call) { return call.Outputs(); });
  }
  Status Run(int op, Api api) {
    return With(op, [api](const auto& call) { return call.Run(api); });
  }

  // Every output's whole storage (view and slack), operator by operator.
  std::vector<std::vector<uint8_t>> Snapshot() {
    std::vector<std::vector<uint8_t>> all;
    for (int op = 0; op < kNumOps; ++op) {
      for (TestTensor* t : Outputs(op)) all.push_back(t->Snapshot());
    }
    return all;
  }
  // New values in every output element (the slack around a view keeps its bytes: nothing may write there).
  void Scramble(uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (int op = 0; op < kNumOps; ++op) {
      for (TestTensor* t : Outputs(op)) {
        for (int64_t i = 0; i < t->numel(); ++i) {
          if (t->dtype() == DType::kInt32) {
            t->SetI(i, static_cast<int32_t>(rng()));
          } else {
            t->SetF(i, static_cast<float>(static_cast<int32_t>(rng() % 2001) - 1000));
          }
        }
      }
    }
  }
};

TEST(Concurrency, FourThreadsEveryOperatorMatchSequentialBitForBit) {
  std::vector<std::unique_ptr<Workload>> work;
  std::vector<std::vector<std::vector<uint8_t>>> expected;
  for (int t = 0; t < kThreads; ++t) {
    work.push_back(std::make_unique<Workload>(t));
    for (int op = 0; op < kNumOps; ++op) ASSERT_TRUE(work[t]->Run(op, Api::kCpp).ok()) << "op " << op;
    expected.push_back(work[t]->Snapshot());
  }
  for (int round = 0; round < kRounds; ++round) {
    for (int t = 0; t < kThreads; ++t) work[t]->Scramble(round * 10 + t);
    std::vector<std::string> failures(kThreads);
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();  // start together
        // Each thread walks the operators in its own order, through alternating APIs.
        for (int i = 0; i < kNumOps; ++i) {
          const int op = (i + t) % kNumOps;
          const Api api = (round + t + i) % 2 == 0 ? Api::kCpp : Api::kAclnn;
          const Status s = work[t]->Run(op, api);
          if (!s.ok()) failures[t] += "op " + std::to_string(op) + ": " + s.message() + "\n";
        }
      });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) {
      EXPECT_EQ(failures[t], "") << "thread " << t;
      const auto got = work[t]->Snapshot();
      for (size_t o = 0; o < got.size(); ++o) {
        EXPECT_TRUE(got[o] == expected[t][o]) << "round " << round << " thread " << t << " output " << o
                                              << " differs from the sequential run";
      }
    }
  }
}

TEST(Concurrency, RepeatableExecutorFromTwoThreadsWithOwnWorkspaces) {
  Workload w(1);
  for (int op = 0; op < kNumOps; ++op) ASSERT_TRUE(w.Run(op, Api::kCpp).ok());
  const auto expected = w.Snapshot();
  w.Scramble(77);
#ifdef MOEGRAD_TSAN
  // Both runs write the same output bytes with the same values; only races elsewhere (the executor, the
  // plan, a shared workspace) are this test's business.
  for (int op = 0; op < kNumOps; ++op) {
    for (TestTensor* t : w.Outputs(op)) {
      AnnotateBenignRaceSized(__FILE__, __LINE__, t->storage(),
                              static_cast<size_t>(t->storage_elements()) * ElementSize(t->dtype()),
                              "identical output bytes of one executor run twice at once");
    }
  }
#endif
  // Every operator planned once through aclnn, its executor made repeatable.
  aclOpExecutor* executors[kNumOps] = {};
  uint64_t sizes[kNumOps] = {};
  aclnnStatus (*runs[kNumOps])(void*, uint64_t, aclOpExecutor*, aclrtStream) = {};
  std::shared_ptr<void> acl_tensors[kNumOps];
  for (int op = 0; op < kNumOps; ++op) {
    w.With(op, [&](const auto& call) {
      using Args = typename std::decay_t<decltype(call)>::OpArgs;
      auto acl = std::make_shared<AclCall<Args>>(call);
      ASSERT_EQ(acl->PhaseOne(&sizes[op], &executors[op]), ACLNN_SUCCESS) << aclGetRecentErrMsg();
      runs[op] = OpEntry<Args>::kAclnnPhaseTwo;
      acl_tensors[op] = acl;
    });
  }
  ASSERT_FALSE(HasFatalFailure());
  for (aclOpExecutor* e : executors) ASSERT_EQ(aclSetAclOpExecutorRepeatable(e), ACLNN_SUCCESS);

  std::atomic<int> failures{0};
  auto worker = [&](int id) {
    std::vector<void*> ws(kNumOps, nullptr);
    for (int op = 0; op < kNumOps; ++op) {
      if (sizes[op] > 0 && aclrtMalloc(&ws[op], sizes[op], ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS) ++failures;
    }
    for (int round = 0; round < kRounds; ++round) {
      for (int i = 0; i < kNumOps; ++i) {
        const int op = (i + id) % kNumOps;
        if (runs[op](ws[op], sizes[op], executors[op], nullptr) != ACLNN_SUCCESS) ++failures;
      }
    }
    for (void* p : ws) {
      if (p != nullptr) aclrtFree(p);
    }
  };
  std::thread a(worker, 0), c(worker, 1);
  a.join();
  c.join();
  EXPECT_EQ(failures.load(), 0);
  const auto got = w.Snapshot();
  for (size_t o = 0; o < got.size(); ++o) EXPECT_TRUE(got[o] == expected[o]) << "output " << o;
  for (aclOpExecutor* e : executors) EXPECT_EQ(aclDestroyAclOpExecutor(e), ACLNN_SUCCESS);
}

TEST(Concurrency, ErrorMessagesArePerThread) {
  std::atomic<int> mismatches{0};
  std::atomic<int> ready{0};
  // Each thread makes a different mistake (the mode value names the thread) and must read back its own line.
  auto worker = [&](int id) {
    std::vector<float> grad_y(8);
    std::vector<int32_t> idx(4);
    std::vector<float> grad_x(16);
    const int64_t gy_dims[] = {2, 4}, idx_dims[] = {4}, gx_dims[] = {4, 4};
    aclTensor* gy = aclCreateTensor(gy_dims, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, gy_dims, 2, grad_y.data());
    aclTensor* ix = aclCreateTensor(idx_dims, 1, ACL_INT32, nullptr, 0, ACL_FORMAT_ND, idx_dims, 1, idx.data());
    aclTensor* gx = aclCreateTensor(gx_dims, 2, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, gx_dims, 2, grad_x.data());
    const int64_t mode = 10 + id;
    const std::string want = "MoeFinalizeRoutingV2Grad: dropPadMode = " + std::to_string(mode) +
                             " must be 0 (dropless) or 1 (drop/pad)";
    ready.fetch_add(1);
    while (ready.load() < kThreads) std::this_thread::yield();
    for (int i = 0; i < 200; ++i) {
      uint64_t ws = 0;
      aclOpExecutor* ex = nullptr;
      const aclnnStatus st = aclnnMoeFinalizeRoutingV2GradGetWorkspaceSize(gy, ix, nullptr, nullptr, nullptr, nullptr,
                                                                           mode, 0, 0, 0, gx, nullptr, &ws, &ex);
      if (st != ACLNN_ERR_PARAM_INVALID || ex != nullptr || want != aclGetRecentErrMsg()) ++mismatches;
    }
    aclDestroyTensor(gy);
    aclDestroyTensor(ix);
    aclDestroyTensor(gx);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace moegrad
