// The scalar reference implementation of every operator: the formulas of the spec, one element at a
// time, fp32 arithmetic with sums in ascending order. It assumes valid arguments (the operators validate)
// and is the oracle of the tests, `moegrad check` and `moegrad bench`.
#pragma once

#include "moegrad/ops.hpp"

namespace moegrad::ref {

void FinalizeRoutingV2Grad(const FinalizeRoutingV2GradArgs& a);
void TokenPermuteWithRoutingMapGrad(const TokenPermuteWithRoutingMapGradArgs& a);
void FinalizeRoutingV2(const FinalizeRoutingV2Args& a);
void TokenPermuteWithRoutingMap(const TokenPermuteWithRoutingMapArgs& a);
void InitRoutingV2(const InitRoutingV2Args& a);
void InitRoutingV2Grad(const InitRoutingV2GradArgs& a);
void TokenUnpermuteWithRoutingMap(const TokenUnpermuteWithRoutingMapArgs& a);
void TokenUnpermuteWithRoutingMapGrad(const TokenUnpermuteWithRoutingMapGradArgs& a);

}  // namespace moegrad::ref
