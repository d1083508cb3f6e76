// What every fuzz target shares: decoding tensors (shape, layout, offset, dtype, aliasing) and index data from
// the input, and allocating exactly the storage each declares (so AddressSanitizer sees any access past it).
// The checks around an operator call are in fuzz_call.h.
//
// The decoders are shaped so that an exhausted input (every byte read as 0) means "the typical, valid
// choice": mutations then wander off the valid path one decision at a time.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "moegrad/tensor.hpp"
#include "src/testing/float16.h"

namespace moegrad::fuzz {

// A failed invariant: print it and abort, so libFuzzer keeps the input as a crash.
[[noreturn]] inline void Fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "fuzz invariant violated: %s %s\n", what, detail.c_str());
  std::abort();
}
#define FUZZ_CHECK(cond, ...) \
  do {                        \
    if (!(cond)) ::moegrad::fuzz::Fail(#cond, ##__VA_ARGS__); \
  } while (0)

class Input {
 public:
  Input(const uint8_t* data, size_t size) : fdp_(data, size) { rng_.seed(fdp_.ConsumeIntegral<uint32_t>()); }

  // True with probability `percent` (an exhausted input gives false).
  bool Rare(int percent) { return fdp_.ConsumeIntegralInRange<int>(0, 99) >= 100 - percent; }
  int64_t Range(int64_t lo, int64_t hi) { return fdp_.ConsumeIntegralInRange<int64_t>(lo, hi); }
  // `typical` unless the input says otherwise: then another small value, or rarely anything at all.
  int64_t Around(int64_t typical, int64_t lo, int64_t hi) {
    switch (fdp_.ConsumeIntegralInRange<int>(0, 15)) {
      case 14: return Range(lo, hi);
      case 15: return fdp_.ConsumeIntegral<int64_t>();
      default: return typical;
    }
  }
  DType FloatDType() {
    static constexpr DType kFloats[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
    if (Rare(2)) return AnyDType();
    return kFloats[Range(0, 2)];
  }
  DType AnyDType() {
    static constexpr DType kAll[] = {DType::kFloat32, DType::kFloat16, DType::kInt8,   DType::kInt32,
                                     DType::kUInt8,   DType::kInt16,   DType::kUInt16, DType::kUInt32,
                                     DType::kInt64,   DType::kUInt64,  DType::kFloat64, DType::kBool,
                                     DType::kBFloat16};
    return kAll[Range(0, 12)];
  }
  DType Or(DType usual) { return Rare(2) ? AnyDType() : usual; }
  std::mt19937_64& rng() { return rng_; }
  FuzzedDataProvider& fdp() { return fdp_; }

 private:
  FuzzedDataProvider fdp_;
  std::mt19937_64 rng_;
};

// A tensor whose storage is an allocation of exactly its declared size, or a window of another tensor's.
struct Tensor {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;         // elements from base to the view's first element
  int64_t storage_elems = 0;  // declared storage (what aclCreateTensor is told)
  std::shared_ptr<uint8_t[]> alloc;
  uint8_t* base = nullptr;
  bool aliased = false;       // lives inside another tensor's allocation
  aclTensor* acl = nullptr;

  ~Tensor() {
    if (acl != nullptr) aclDestroyTensor(acl);
  }
  size_t esize() const { return ElementSize(dtype); }
  int rank() const { return static_cast<int>(sizes.size()); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  bool empty() const { return numel() == 0; }
  int64_t size(int d) const { return sizes[static_cast<size_t>(d)]; }
  // Elements from the view's first element to flat (row-major) element i.
  int64_t ElemOffset(int64_t i) const {
    int64_t off = 0;
    for (int d = rank() - 1; d >= 0; --d) {
      off += (i % sizes[static_cast<size_t>(d)]) * strides[static_cast<size_t>(d)];
      i /= sizes[static_cast<size_t>(d)];
    }
    return off;
  }
  uint8_t* ViewData() const { return base + offset * static_cast<int64_t>(esize()); }
  // Bytes spanned by the view: [ViewData(), ViewData() + SpanBytes()).
  int64_t SpanBytes() const {
    if (empty()) return 0;
    int64_t extent = 1;
    for (int d = 0; d < rank(); ++d) extent += (sizes[static_cast<size_t>(d)] - 1) * strides[static_cast<size_t>(d)];
    return extent * static_cast<int64_t>(esize());
  }
  TensorView View() const {
    TensorView v;
    v.data = ViewData();
    v.dtype = dtype;
    v.rank = rank();
    for (int d = 0; d < rank(); ++d) {
      v.sizes[d] = sizes[static_cast<size_t>(d)];
      v.strides[d] = strides[static_cast<size_t>(d)];
    }
    return v;
  }
  // No two view elements share memory.
  bool Injective() const {
    const int64_t n = numel();
    std::vector<bool> seen(static_cast<size_t>(SpanBytes() / static_cast<int64_t>(esize()) + 1), false);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t o = ElemOffset(i);
      if (seen[static_cast<size_t>(o)]) return false;
      seen[static_cast<size_t>(o)] = true;
    }
    return true;
  }

  float GetF(int64_t i) const {
    const uint8_t* p = ViewData() + ElemOffset(i) * static_cast<int64_t>(esize());
    uint32_t u32;
    uint16_t u16;
    switch (dtype) {
      case DType::kFloat32: std::memcpy(&u32, p, 4); return F32FromBits(u32);
      case DType::kFloat16: std::memcpy(&u16, p, 2); return F32FromF16Bits(u16);
      case DType::kBFloat16: std::memcpy(&u16, p, 2); return F32FromBF16Bits(u16);
      default: return 0.0f;
    }
  }
  void SetF(int64_t i, float v) {
    uint8_t* p = ViewData() + ElemOffset(i) * static_cast<int64_t>(esize());
    const uint32_t u32 = F32Bits(v);
    uint16_t u16;
    switch (dtype) {
      case DType::kFloat32: std::memcpy(p, &u32, 4); break;
      case DType::kFloat16: u16 = F16BitsFromF32(v); std::memcpy(p, &u16, 2); break;
      case DType::kBFloat16: u16 = BF16BitsFromF32(v); std::memcpy(p, &u16, 2); break;
      default: break;
    }
  }
  // Stores the low bytes of v in an element of any dtype.
  void SetRaw(int64_t i, int64_t v) {
    std::memcpy(ViewData() + ElemOffset(i) * static_cast<int64_t>(esize()), &v, esize());
  }
  std::vector<uint8_t> Bytes() const { return std::vector<uint8_t>(base, base + storage_elems * esize()); }
  std::vector<uint8_t> SpanCopy() const { return std::vector<uint8_t>(ViewData(), ViewData() + SpanBytes()); }
};

using TensorPtr = std::unique_ptr<Tensor>;

// Strides for `sizes` in one of several layouts: contiguous, padded, dimensions permuted, a broadcast
// (stride 0) dimension, or arbitrary small strides. Returns the elements the view spans.
inline int64_t ChooseLayout(Input& in, const std::vector<int64_t>& sizes, std::vector<int64_t>* strides) {
  const int rank = static_cast<int>(sizes.size());
  strides->assign(sizes.size(), 1);
  const int kind = in.Rare(40) ? static_cast<int>(in.Range(1, 4)) : 0;
  std::vector<int> order(sizes.size());  // order[0] is the outermost dimension in memory
  for (int d = 0; d < rank; ++d) order[static_cast<size_t>(d)] = d;
  if (kind == 2 && rank >= 2) {
    for (int d = rank - 1; d > 0; --d) std::swap(order[static_cast<size_t>(d)], order[in.Range(0, d)]);
  }
  int64_t stride = kind == 1 ? in.Range(1, 3) : 1;
  for (int q = rank - 1; q >= 0; --q) {
    const int d = order[static_cast<size_t>(q)];
    (*strides)[static_cast<size_t>(d)] = stride;
    stride = stride * std::max<int64_t>(sizes[static_cast<size_t>(d)], 1) + (kind == 1 ? in.Range(0, 5) : 0);
  }
  if (kind == 3 && rank >= 1) (*strides)[in.Range(0, rank - 1)] = 0;
  if (kind == 4) {
    for (auto& s : *strides) s = in.Range(0, 9);
  }
  int64_t extent = 1;
  for (int d = 0; d < rank; ++d) {
    if (sizes[static_cast<size_t>(d)] == 0) return 0;
    extent += (sizes[static_cast<size_t>(d)] - 1) * (*strides)[static_cast<size_t>(d)];
  }
  return extent;
}

// A tensor of `sizes` with a fuzzed layout, offset and trailing slack; storage bytes are random. Returns
// null when the layout would need an absurd allocation (the harness then passes null).
inline TensorPtr MakeTensor(Input& in, DType dtype, std::vector<int64_t> sizes) {
  auto t = std::make_unique<Tensor>();
  t->dtype = dtype;
  t->sizes = std::move(sizes);
  for (int64_t s : t->sizes) {
    if (s < 0 || s > (1 << 16)) return nullptr;
  }
  const int64_t extent = ChooseLayout(in, t->sizes, &t->strides);
  t->offset = in.Rare(30) ? in.Range(1, 7) : 0;
  t->storage_elems = t->offset + extent + (in.Rare(20) ? in.Range(1, 4) : 0);
  const int64_t bytes = t->storage_elems * static_cast<int64_t>(t->esize());
  if (bytes > (int64_t{1} << 20)) return nullptr;  // keeps an input fast; big shapes are the large tests' job
  t->alloc = std::shared_ptr<uint8_t[]>(new uint8_t[static_cast<size_t>(bytes)]);
  t->base = t->alloc.get();
  for (int64_t b = 0; b < bytes; ++b) t->base[b] = static_cast<uint8_t>(in.rng()());
  return t;
}

// Moves `t`'s storage into `host`'s allocation at a fuzzed element offset, when it fits: the two views then
// overlap or sit side by side in one allocation.
inline void MaybeAlias(Input& in, Tensor* t, const Tensor* host) {
  if (t == nullptr || host == nullptr || !in.Rare(8)) return;
  const int64_t host_bytes = host->storage_elems * static_cast<int64_t>(host->esize());
  const int64_t need = t->storage_elems * static_cast<int64_t>(t->esize());
  if (need > host_bytes) return;
  const int64_t room = (host_bytes - need) / static_cast<int64_t>(t->esize());
  t->alloc = host->alloc;
  t->base = host->base + in.Range(0, room) * static_cast<int64_t>(t->esize());
  t->aliased = true;
}

inline void FillFloats(Input& in, Tensor* t) {
  if (t == nullptr) return;
  if (in.Rare(5)) return;  // keep the random bytes: NaNs, infinities, subnormals
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  const int64_t n = t->numel();
  for (int64_t i = 0; i < n; ++i) t->SetF(i, dist(in.rng()));
}

// Index data: `valid(i)` for each element, or now and then a value from the input.
template <typename Valid>
inline void FillIndices(Input& in, Tensor* t, const Valid& valid) {
  if (t == nullptr) return;
  const int64_t n = t->numel();
  const bool corrupt = in.Rare(10);
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = valid(i);
    if (corrupt && in.Rare(30)) v = in.Around(-1, -3, n + 3);
    t->SetRaw(i, v);
  }
}

// A routing map's data (row-major T x E, E > 0 columns): each token routes to the first K experts of a
// shuffled list or, when `random`, to each expert with probability 1/2; entry t*E + e gets value(routed).
template <typename Value>
inline void FillRoutingMap(Input& in, Tensor* map, int64_t E, int64_t K, bool random, const Value& value) {
  for (int64_t t = 0; t < map->numel() / std::max<int64_t>(E, 1); ++t) {
    std::vector<int64_t> order(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) order[static_cast<size_t>(e)] = e;
    std::shuffle(order.begin(), order.end(), in.rng());
    for (int64_t e = 0; e < E; ++e) {
      const bool routed = random ? (in.rng()() & 1) != 0 : order[static_cast<size_t>(e)] < K;
      map->SetRaw(t * E + e, value(routed));
    }
  }
}

// Creates the aclTensor (null stride for contiguous views now and then). A tensor we describe correctly
// must be accepted.
inline aclTensor* Acl(Input& in, Tensor* t) {
  if (t == nullptr) return nullptr;
  bool contiguous = true;
  int64_t expect = 1;
  for (int d = t->rank() - 1; d >= 0; --d) {
    contiguous = contiguous && t->strides[static_cast<size_t>(d)] == expect;
    expect *= t->sizes[static_cast<size_t>(d)];
  }
  const bool null_stride = contiguous && in.Rare(50);
  t->acl = aclCreateTensor(t->sizes.data(), t->sizes.size(), static_cast<aclDataType>(t->dtype),
                           null_stride ? nullptr : t->strides.data(), t->offset, ACL_FORMAT_ND, &t->storage_elems, 1,
                           t->base);
  if (t->acl == nullptr) Fail("aclCreateTensor rejected a valid tensor:", aclGetRecentErrMsg());
  return t->acl;
}

// Byte spans of two views intersect.
inline bool Overlap(const Tensor* a, const Tensor* b) {
  if (a == nullptr || b == nullptr || a->SpanBytes() == 0 || b->SpanBytes() == 0) return false;
  const uint8_t* a0 = a->ViewData();
  const uint8_t* b0 = b->ViewData();
  return a0 < b0 + b->SpanBytes() && b0 < a0 + a->SpanBytes();
}

// `shape`, now and then with one dimension changed or the rank changed.
inline std::vector<int64_t> Shape(Input& in, std::vector<int64_t> shape) {
  if (!in.Rare(3)) return shape;
  switch (in.Range(0, 2)) {
    case 0:
      if (!shape.empty()) {
        int64_t& d = shape[static_cast<size_t>(in.Range(0, static_cast<int64_t>(shape.size()) - 1))];
        if (in.Rare(50)) {
          d = d < INT64_MAX ? d + 1 : d;
        } else {
          d = d > 0 ? d - 1 : 0;  // no d - 1 for d = INT64_MIN (a fuzzed hidden size)
        }
      }
      break;
    case 1: shape.push_back(in.Range(0, 2)); break;
    default:
      if (!shape.empty()) shape.pop_back();
  }
  return shape;
}

// A hidden size: vector-width edges and odd tails.
inline int64_t Hidden(Input& in) {
  static constexpr int64_t kH[] = {8, 1, 3, 17, 64, 100, 0, 33};
  return in.Around(kH[in.Range(0, 7)], 0, 1031);
}

}  // namespace moegrad::fuzz
