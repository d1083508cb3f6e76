// C++ API entry of MoeTokenPermuteWithRoutingMapGrad.
#include "moegrad/ops.hpp"
#include "src/cpp/cpp_entry.h"
#include "src/ops/token_permute_with_routing_map_grad.h"

namespace moegrad {
namespace {

ops::TokenPermuteWithRoutingMapGradParams ToParams(const TokenPermuteWithRoutingMapGradArgs& a) {
  ops::TokenPermuteWithRoutingMapGradParams p;
  p.permuted_token_output_grad = &a.permuted_token_output_grad;
  p.permuted_probs_output_grad = cpp::Opt(a.permuted_probs_output_grad);
  p.sorted_indices = &a.sorted_indices;
  p.routing_map = cpp::Opt(a.routing_map);
  p.num_experts = a.num_experts;
  p.tokens_num = a.tokens_num;
  p.drop_and_pad = a.drop_and_pad;
  p.tokens_grad = &a.tokens_grad;
  p.probs_grad = cpp::Opt(a.probs_grad);
  return p;
}

}  // namespace

Status PlanTokenPermuteWithRoutingMapGrad(const TokenPermuteWithRoutingMapGradArgs& args, Plan* plan) {
  return cpp::MakePlan(ToParams(args), ops::PlanTokenPermuteWithRoutingMapGrad, plan);
}

Status TokenPermuteWithRoutingMapGrad(const TokenPermuteWithRoutingMapGradArgs& args) {
  return cpp::PlanAndRun(ToParams(args), ops::PlanTokenPermuteWithRoutingMapGrad);
}

}  // namespace moegrad
