// What a backend implements for one operator: the workspace a problem needs (phase one) and its execution
// (phase two).
#pragma once

#include <cstdint>

#include "src/core/types.h"

namespace moegrad::backend {

template <typename Problem>
class OpBackend {
 public:
  virtual ~OpBackend() = default;

  // Bytes of caller memory Run needs for `problem`; INVALID when that does not fit in 64 bits.
  virtual core::Status WorkspaceSize(const Problem& problem, uint64_t* bytes) const = 0;

  // Checks the index data completely, writing nothing when it fails, then writes every output. `workspace`
  // holds WorkspaceSize() bytes, 64-byte aligned. Work is submitted to `stream` (the CPU backend runs it to
  // completion before returning).
  virtual core::Status Run(const Problem& problem, void* workspace, core::Stream stream) const = 0;
};

}  // namespace moegrad::backend
