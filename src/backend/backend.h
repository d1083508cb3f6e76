// The execution seam. The operator layer (src/ops/) checks every rule and builds a device-neutral problem
// (src/backend/<op>.h); a backend runs problems of one operator on one device. Today there is one backend, the
// CPU's (src/backend/cpu/); a CUDA backend would add src/backend/cuda/ and one case to Find() below, and touch
// no operator rule.
#pragma once

#include <cstdint>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/op_backend.h"
#include "src/core/types.h"

namespace moegrad::backend {

// The backend that runs `Problem` on `device`, or null when this build has none.
template <typename Problem>
const OpBackend<Problem>* Find(core::Device device) {
  switch (device) {
    case core::Device::kHost: return cpu::For(static_cast<const Problem*>(nullptr));
  }
  return nullptr;
}

}  // namespace moegrad::backend
