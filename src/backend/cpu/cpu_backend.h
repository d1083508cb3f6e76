// The CPU backend: one OpBackend per operator (src/backend/cpu/<op>.cc), over the Highway kernels of
// src/backend/cpu/kernels/. It owns what is CPU-specific: the index validation passes, the inverse indices, the
// thread partitions and the SIMD dispatch.
#pragma once

#include "src/backend/finalize_routing_v2.h"
#include "src/backend/finalize_routing_v2_grad.h"
#include "src/backend/init_routing_v2.h"
#include "src/backend/init_routing_v2_grad.h"
#include "src/backend/op_backend.h"
#include "src/backend/token_permute_with_routing_map.h"
#include "src/backend/token_permute_with_routing_map_grad.h"
#include "src/backend/token_unpermute_with_routing_map.h"
#include "src/backend/token_unpermute_with_routing_map_grad.h"

namespace moegrad::backend::cpu {

// One line per operator; the argument only selects the overload.
const OpBackend<FinalizeRoutingV2GradProblem>* For(const FinalizeRoutingV2GradProblem*);
const OpBackend<TokenPermuteWithRoutingMapGradProblem>* For(const TokenPermuteWithRoutingMapGradProblem*);
const OpBackend<FinalizeRoutingV2Problem>* For(const FinalizeRoutingV2Problem*);
const OpBackend<TokenPermuteWithRoutingMapProblem>* For(const TokenPermuteWithRoutingMapProblem*);
const OpBackend<InitRoutingV2Problem>* For(const InitRoutingV2Problem*);
const OpBackend<InitRoutingV2GradProblem>* For(const InitRoutingV2GradProblem*);
const OpBackend<TokenUnpermuteWithRoutingMapProblem>* For(const TokenUnpermuteWithRoutingMapProblem*);
const OpBackend<TokenUnpermuteWithRoutingMapGradProblem>* For(const TokenUnpermuteWithRoutingMapGradProblem*);

// Applies MOEGRAD_MAX_SIMD (src/backend/cpu/simd_target.cc) once per process, before the first kernel call.
void LimitSimdTargets();

// The one instance of an operator's CPU backend class, which its For() returns; the first one applies
// MOEGRAD_MAX_SIMD.
template <typename Backend>
const Backend* Instance() {
  static const Backend backend = (LimitSimdTargets(), Backend());
  return &backend;
}

// n >= 1 fixes the thread count of later calls (at most core::kMaxThreads: larger values use that); n <= 0
// restores the default (MOEGRAD_NUM_THREADS, else every CPU the process may use). Threads() is the count the
// next call uses.
void SetThreads(int n);
int Threads();
// The SIMD target HWY_DYNAMIC_DISPATCH picks on this CPU, e.g. "AVX3" (at most MOEGRAD_MAX_SIMD).
const char* SimdTarget();

}  // namespace moegrad::backend::cpu
