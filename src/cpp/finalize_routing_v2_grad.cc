// C++ API entry of MoeFinalizeRoutingV2Grad.
#include "moegrad/ops.hpp"
#include "src/cpp/cpp_entry.h"
#include "src/ops/finalize_routing_v2_grad.h"

namespace moegrad {
namespace {

ops::FinalizeRoutingV2GradParams ToParams(const FinalizeRoutingV2GradArgs& a) {
  ops::FinalizeRoutingV2GradParams p;
  p.grad_y = &a.grad_y;
  p.expanded_row_idx = &a.expanded_row_idx;
  p.expanded_x = cpp::Opt(a.expanded_x);
  p.scales = cpp::Opt(a.scales);
  p.expert_idx = cpp::Opt(a.expert_idx);
  p.bias = cpp::Opt(a.bias);
  p.drop_pad_mode = a.drop_pad_mode;
  p.active_num = a.active_num;
  p.expert_num = a.expert_num;
  p.expert_capacity = a.expert_capacity;
  p.grad_expanded_x = &a.grad_expanded_x;
  p.grad_scales = cpp::Opt(a.grad_scales);
  return p;
}

}  // namespace

Status PlanFinalizeRoutingV2Grad(const FinalizeRoutingV2GradArgs& args, Plan* plan) {
  return cpp::MakePlan(ToParams(args), ops::PlanFinalizeRoutingV2Grad, plan);
}

Status FinalizeRoutingV2Grad(const FinalizeRoutingV2GradArgs& args) {
  return cpp::PlanAndRun(ToParams(args), ops::PlanFinalizeRoutingV2Grad);
}

}  // namespace moegrad
