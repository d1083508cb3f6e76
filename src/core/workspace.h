// Lays out named, 64-byte aligned pieces of the caller's workspace, with overflow checks.
#pragma once

#include <cstdint>

namespace moegrad::core {

class WorkspaceLayout {
 public:
  static constexpr uint64_t kAlign = 64;

  // Reserves `count` elements of `elem_bytes` each; returns the piece's byte offset.
  uint64_t Add(uint64_t count, uint64_t elem_bytes) {
    uint64_t offset = size_;
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(count, elem_bytes, &bytes) ||
        __builtin_add_overflow(bytes, kAlign - 1, &bytes) ||
        __builtin_add_overflow(size_, bytes & ~(kAlign - 1), &size_)) {
      overflow_ = true;
    }
    return offset;
  }
  // Reserves n1 * n2 elements of `elem_bytes` each.
  uint64_t Add(uint64_t n1, uint64_t n2, uint64_t elem_bytes) {
    uint64_t count = 0;
    if (__builtin_mul_overflow(n1, n2, &count)) overflow_ = true;
    return Add(count, elem_bytes);
  }
  uint64_t size() const { return size_; }
  bool overflowed() const { return overflow_; }

  template <typename T>
  static T* At(void* workspace, uint64_t offset) {
    return reinterpret_cast<T*>(static_cast<char*>(workspace) + offset);
  }

 private:
  uint64_t size_ = 0;
  bool overflow_ = false;
};

}  // namespace moegrad::core
