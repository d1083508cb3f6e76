// C++ API entry of MoeTokenPermuteWithRoutingMap.
#include "moegrad/ops.hpp"
#include "src/cpp/cpp_entry.h"
#include "src/ops/token_permute_with_routing_map.h"

namespace moegrad {
namespace {

ops::TokenPermuteWithRoutingMapParams ToParams(const TokenPermuteWithRoutingMapArgs& a) {
  ops::TokenPermuteWithRoutingMapParams p;
  p.tokens = &a.tokens;
  p.routing_map = &a.routing_map;
  p.probs = cpp::Opt(a.probs);
  p.num_out_tokens = a.num_out_tokens;
  p.drop_and_pad = a.drop_and_pad;
  p.permute_tokens = &a.permute_tokens;
  p.permute_probs = cpp::Opt(a.permute_probs);
  p.sorted_indices = &a.sorted_indices;
  return p;
}

}  // namespace

Status PlanTokenPermuteWithRoutingMap(const TokenPermuteWithRoutingMapArgs& args, Plan* plan) {
  return cpp::MakePlan(ToParams(args), ops::PlanTokenPermuteWithRoutingMap, plan);
}

Status TokenPermuteWithRoutingMap(const TokenPermuteWithRoutingMapArgs& args) {
  return cpp::PlanAndRun(ToParams(args), ops::PlanTokenPermuteWithRoutingMap);
}

}  // namespace moegrad
