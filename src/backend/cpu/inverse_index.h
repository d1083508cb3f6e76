// The inverse of an index array, as a stable counting sort: for every key k in [0, keys), the positions i in
// [0, n) whose key is k, ascending, are list[offsets[k] .. offsets[k + 1]).
#pragma once

#include <cstdint>

namespace moegrad::internal {

// key_at(i) is position i's key, or a value outside [0, keys) for a position that belongs to no key (left out).
// offsets holds keys + 1 entries, list one per position kept. Returns the most positions any one key has
// (what the kernels weigh their heaviest token by when they split work).
template <typename KeyAt>
int64_t BuildInverseIndex(int64_t keys, int64_t n, const KeyAt& key_at, int64_t* offsets, int64_t* list) {
  for (int64_t k = 0; k <= keys; ++k) offsets[k] = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = key_at(i);
    if (k >= 0 && k < keys) ++offsets[k + 1];
  }
  int64_t largest = 0;
  for (int64_t k = 0; k < keys; ++k) {
    largest = offsets[k + 1] > largest ? offsets[k + 1] : largest;
    offsets[k + 1] += offsets[k];
  }
  // Fill with a moving cursor per key; afterwards offsets[k] is restored from the end of key k - 1.
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = key_at(i);
    if (k >= 0 && k < keys) list[offsets[k]++] = i;
  }
  for (int64_t k = keys; k > 0; --k) offsets[k] = offsets[k - 1];
  offsets[0] = 0;
  return largest;
}

// The key whose list holds position i of a list that BuildInverseIndex wrote (i in [0, offsets[keys])): the
// last k with offsets[k] <= i, which skips the empty keys before it. A walk over positions i, i + 1, ...
// finds the next keys with `while (offsets[k + 1] <= i) ++k;`.
inline int64_t KeyOfPosition(const int64_t* offsets, int64_t keys, int64_t i) {
  int64_t lo = 0, hi = keys;  // the first k with offsets[k + 1] > i
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (offsets[mid + 1] > i) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

}  // namespace moegrad::internal
