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
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_moe_finalize_routing_v2.h"
#include "aclnnop/aclnn_moe_finalize_routing_v2_grad.h"
#include "aclnnop/aclnn_moe_token_permute_with_routing_map.h"
#include "aclnnop/aclnn_moe_token_permute_with_routing_map_grad.h"
#include "moegrad/ops.hpp"
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

using testing::Layout;
using testing::TestTensor;

constexpr int kThreads = 4;
constexpr int kRounds = 3;
enum Op { kFinalizeGrad, kFinalizeFwd, kPermuteFwd, kPermuteGrad, kNumOps };
enum class Api { kCpp, kAclnn };

struct AclTensorDeleter {
  void operator()(aclTensor* t) const { aclDestroyTensor(t); }
};
using AclTensorPtr = std::unique_ptr<aclTensor, AclTensorDeleter>;

AclTensorPtr Acl(TestTensor& t) {
  const int64_t storage = t.storage_elements();
  return AclTensorPtr(aclCreateTensor(t.sizes_vector().data(), t.sizes_vector().size(),
                                      static_cast<aclDataType>(t.dtype()), t.strides_vector().data(),
                                      t.offset_elements(), ACL_FORMAT_ND, &storage, 1, t.storage()));
}

// Phase one through `plan`, then phase two with a workspace from aclrtMalloc.
aclnnStatus RunAclnn(const std::function<aclnnStatus(uint64_t*, aclOpExecutor**)>& plan,
                     aclnnStatus (*run)(void*, uint64_t, aclOpExecutor*, aclrtStream)) {
  uint64_t ws_size = 0;
  aclOpExecutor* executor = nullptr;
  aclnnStatus st = plan(&ws_size, &executor);
  if (st != ACLNN_SUCCESS) return st;
  void* ws = nullptr;
  if (ws_size > 0 && aclrtMalloc(&ws, ws_size, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS) return -1;
  st = run(ws, ws_size, executor, nullptr);
  if (ws != nullptr) aclrtFree(ws);
  return st;
}

std::vector<int32_t> Permutation(int64_t n, std::mt19937_64& rng) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::shuffle(p.begin(), p.end(), rng);
  return p;
}

// One thread's tensors for all four operators: sizes, dtype and layout differ from thread to thread.
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
  }

  std::vector<TestTensor*> Outputs(int op) {
    switch (op) {
      case kFinalizeGrad: return {&fg_gx, &fg_gs};
      case kFinalizeFwd: return {&ff_out};
      case kPermuteFwd: return {&pf_out, &pf_out_probs, &pf_sorted};
      default: return {&pg_tokens_grad, &pg_probs_grad};
    }
  }

  Status Run(int op, Api api) {
    if (api == Api::kCpp) {
      switch (op) {
        case kFinalizeGrad: {
          FinalizeRoutingV2GradArgs a;
          a.grad_y = fg_grad_y;
          a.expanded_row_idx = fg_idx;
          a.expanded_x = fg_x.view();
          a.scales = fg_scales.view();
          a.expert_idx = fg_expert.view();
          a.bias = fg_bias.view();
          a.grad_expanded_x = fg_gx;
          a.grad_scales = fg_gs.view();
          return FinalizeRoutingV2Grad(a);
        }
        case kFinalizeFwd: {
          FinalizeRoutingV2Args a;
          a.expanded_x = ff_x;
          a.expanded_row_idx = ff_idx;
          a.x1 = ff_x1.view();
          a.bias = ff_bias.view();
          a.scales = ff_scales.view();
          a.expert_idx = ff_expert.view();
          a.drop_pad_mode = 2;
          a.out = ff_out;
          return FinalizeRoutingV2(a);
        }
        case kPermuteFwd: {
          TokenPermuteWithRoutingMapArgs a;
          a.tokens = pf_tokens;
          a.routing_map = pf_map;
          a.probs = pf_probs.view();
          a.num_out_tokens = R * K;
          a.permute_tokens = pf_out;
          a.permute_probs = pf_out_probs.view();
          a.sorted_indices = pf_sorted;
          return TokenPermuteWithRoutingMap(a);
        }
        default: {
          TokenPermuteWithRoutingMapGradArgs a;
          a.permuted_token_output_grad = pg_grad;
          a.permuted_probs_output_grad = pg_probs.view();
          a.sorted_indices = pg_sorted;
          a.routing_map = pg_map.view();
          a.num_experts = E;
          a.tokens_num = R;
          a.tokens_grad = pg_tokens_grad;
          a.probs_grad = pg_probs_grad.view();
          return TokenPermuteWithRoutingMapGrad(a);
        }
      }
    }
    aclnnStatus st;
    switch (op) {
      case kFinalizeGrad: {
        auto gy = Acl(fg_grad_y), idx = Acl(fg_idx), x = Acl(fg_x), sc = Acl(fg_scales), ex = Acl(fg_expert),
             b = Acl(fg_bias), gx = Acl(fg_gx), gs = Acl(fg_gs);
        st = RunAclnn(
            [&](uint64_t* w, aclOpExecutor** e) {
              return aclnnMoeFinalizeRoutingV2GradGetWorkspaceSize(gy.get(), idx.get(), x.get(), sc.get(), ex.get(),
                                                                   b.get(), 0, 0, 0, 0, gx.get(), gs.get(), w, e);
            },
            aclnnMoeFinalizeRoutingV2Grad);
        break;
      }
      case kFinalizeFwd: {
        auto x = Acl(ff_x), idx = Acl(ff_idx), x1 = Acl(ff_x1), b = Acl(ff_bias), sc = Acl(ff_scales),
             ex = Acl(ff_expert), o = Acl(ff_out);
        st = RunAclnn(
            [&](uint64_t* w, aclOpExecutor** e) {
              return aclnnMoeFinalizeRoutingV2GetWorkspaceSize(x.get(), idx.get(), x1.get(), nullptr, b.get(),
                                                               sc.get(), ex.get(), 2, o.get(), w, e);
            },
            aclnnMoeFinalizeRoutingV2);
        break;
      }
      case kPermuteFwd: {
        auto tok = Acl(pf_tokens), map = Acl(pf_map), pr = Acl(pf_probs), o = Acl(pf_out), op = Acl(pf_out_probs),
             si = Acl(pf_sorted);
        st = RunAclnn(
            [&](uint64_t* w, aclOpExecutor** e) {
              return aclnnMoeTokenPermuteWithRoutingMapGetWorkspaceSize(tok.get(), map.get(), pr.get(), R * K, false,
                                                                        o.get(), op.get(), si.get(), w, e);
            },
            aclnnMoeTokenPermuteWithRoutingMap);
        break;
      }
      default: {
        auto g = Acl(pg_grad), pr = Acl(pg_probs), si = Acl(pg_sorted), map = Acl(pg_map),
             tg = Acl(pg_tokens_grad), pgr = Acl(pg_probs_grad);
        st = RunAclnn(
            [&](uint64_t* w, aclOpExecutor** e) {
              return aclnnMoeTokenPermuteWithRoutingMapGradGetWorkspaceSize(g.get(), pr.get(), si.get(), map.get(),
                                                                            E, R, false, tg.get(), pgr.get(), w, e);
            },
            aclnnMoeTokenPermuteWithRoutingMapGrad);
        break;
      }
    }
    return st == ACLNN_SUCCESS ? Status::Ok() : Status(static_cast<StatusCode>(st), aclGetRecentErrMsg());
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
  auto gy = Acl(w.fg_grad_y), idx = Acl(w.fg_idx), x = Acl(w.fg_x), sc = Acl(w.fg_scales), ex = Acl(w.fg_expert),
       b = Acl(w.fg_bias), gx = Acl(w.fg_gx), gs = Acl(w.fg_gs);
  auto fx = Acl(w.ff_x), fidx = Acl(w.ff_idx), fx1 = Acl(w.ff_x1), fb = Acl(w.ff_bias), fsc = Acl(w.ff_scales),
       fex = Acl(w.ff_expert), fo = Acl(w.ff_out);
  auto tok = Acl(w.pf_tokens), map = Acl(w.pf_map), pr = Acl(w.pf_probs), po = Acl(w.pf_out),
       pop = Acl(w.pf_out_probs), psi = Acl(w.pf_sorted);
  auto g = Acl(w.pg_grad), gpr = Acl(w.pg_probs), gsi = Acl(w.pg_sorted), gmap = Acl(w.pg_map),
       tg = Acl(w.pg_tokens_grad), pgr = Acl(w.pg_probs_grad);
  const int64_t N = w.R * w.K;
  aclOpExecutor* executors[kNumOps] = {};
  uint64_t sizes[kNumOps] = {};
  ASSERT_EQ(aclnnMoeFinalizeRoutingV2GradGetWorkspaceSize(gy.get(), idx.get(), x.get(), sc.get(), ex.get(), b.get(),
                                                          0, 0, 0, 0, gx.get(), gs.get(), &sizes[0], &executors[0]),
            ACLNN_SUCCESS);
  ASSERT_EQ(aclnnMoeFinalizeRoutingV2GetWorkspaceSize(fx.get(), fidx.get(), fx1.get(), nullptr, fb.get(), fsc.get(),
                                                      fex.get(), 2, fo.get(), &sizes[1], &executors[1]),
            ACLNN_SUCCESS);
  ASSERT_EQ(aclnnMoeTokenPermuteWithRoutingMapGetWorkspaceSize(tok.get(), map.get(), pr.get(), N, false, po.get(),
                                                               pop.get(), psi.get(), &sizes[2], &executors[2]),
            ACLNN_SUCCESS);
  ASSERT_EQ(aclnnMoeTokenPermuteWithRoutingMapGradGetWorkspaceSize(g.get(), gpr.get(), gsi.get(), gmap.get(), w.E,
                                                                   w.R, false, tg.get(), pgr.get(), &sizes[3],
                                                                   &executors[3]),
            ACLNN_SUCCESS);
  aclnnStatus (*runs[kNumOps])(void*, uint64_t, aclOpExecutor*, aclrtStream) = {
      aclnnMoeFinalizeRoutingV2Grad, aclnnMoeFinalizeRoutingV2, aclnnMoeTokenPermuteWithRoutingMap,
      aclnnMoeTokenPermuteWithRoutingMapGrad};
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
