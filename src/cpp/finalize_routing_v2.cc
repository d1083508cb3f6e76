// C++ API entry of MoeFinalizeRoutingV2.
#include "moegrad/ops.hpp"
#include "src/cpp/cpp_entry.h"
#include "src/ops/finalize_routing_v2.h"

namespace moegrad {
namespace {

ops::FinalizeRoutingV2Params ToParams(const FinalizeRoutingV2Args& a) {
  ops::FinalizeRoutingV2Params p;
  p.expanded_x = &a.expanded_x;
  p.expanded_row_idx = &a.expanded_row_idx;
  p.x1 = cpp::Opt(a.x1);
  p.x2 = cpp::Opt(a.x2);
  p.bias = cpp::Opt(a.bias);
  p.scales = cpp::Opt(a.scales);
  p.expert_idx = cpp::Opt(a.expert_idx);
  p.drop_pad_mode = a.drop_pad_mode;
  p.out = &a.out;
  return p;
}

}  // namespace

Status PlanFinalizeRoutingV2(const FinalizeRoutingV2Args& args, Plan* plan) {
  return cpp::MakePlan(ToParams(args), ops::PlanFinalizeRoutingV2, plan);
}

Status FinalizeRoutingV2(const FinalizeRoutingV2Args& args) {
  return cpp::PlanAndRun(ToParams(args), ops::PlanFinalizeRoutingV2);
}

}  // namespace moegrad
