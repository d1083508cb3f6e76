#include <cstdio>

#include "moegrad/plan.hpp"

int main() {
  std::printf("moegrad %s (%s)\n", moegrad::Version(), moegrad::SimdTarget());
  return 0;
}
