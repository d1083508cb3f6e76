#include "tools/moegrad/common/host_tensor.h"

#include <strings.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <new>

#include "src/ref/ref_util.h"

namespace moegrad::tool {

const char* LayoutName(Layout l) {
  switch (l) {
    case Layout::kContiguous: return "contiguous";
    case Layout::kPadded: return "padded";
    case Layout::kTransposed: return "transposed";
    case Layout::kBroadcast: return "broadcast";
  }
  return "?";
}

const char* ShortDTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "f32";
    case DType::kFloat16: return "f16";
    case DType::kBFloat16: return "bf16";
    default: return DTypeName(t);
  }
}

std::string PrecisionName(DType tokens, DType weights) {
  std::string name = ShortDTypeName(tokens);
  if (weights != tokens) name += std::string("+") + ShortDTypeName(weights);
  return name;
}

float UnitRoundoff(DType t) {
  switch (t) {
    case DType::kFloat16: return 1.0f / 2048.0f;
    case DType::kBFloat16: return 1.0f / 256.0f;
    default: return 1.0f / 16777216.0f;
  }
}

void HostTensor::FreeAligned::operator()(uint8_t* p) const { ::operator delete(p, std::align_val_t(64)); }

HostTensor::HostTensor(DType dtype, std::vector<int64_t> sizes, Layout layout, uint64_t seed) : layout_(layout) {
  const int rank = static_cast<int>(sizes.size());
  view_.dtype = dtype;
  view_.rank = rank;
  for (int d = 0; d < rank; ++d) view_.sizes[d] = sizes[d];
  if (layout == Layout::kBroadcast && rank == 0) layout_ = layout = Layout::kPadded;

  int64_t extent = 1;  // elements the view spans past its offset
  if (layout == Layout::kTransposed && rank >= 2) {
    // Storage order: dims 0..rank-3, then the last dim, then the second-to-last.
    std::vector<int> order;
    for (int d = 0; d < rank - 2; ++d) order.push_back(d);
    order.push_back(rank - 1);
    order.push_back(rank - 2);
    int64_t stride = 1;
    for (int q = rank - 1; q >= 0; --q) {
      view_.strides[order[q]] = stride;
      stride *= std::max<int64_t>(sizes[order[q]], 1);
    }
    extent = stride;
    offset_ = 3;
  } else {
    const bool padded = layout == Layout::kPadded || layout == Layout::kTransposed;
    int64_t stride = padded ? 2 : 1;
    for (int d = rank - 1; d >= 0; --d) {
      view_.strides[d] = stride;
      stride = stride * std::max<int64_t>(sizes[d], 1) + (padded ? 3 : 0);
    }
    extent = stride;
    if (layout == Layout::kBroadcast) {
      extent = view_.strides[0];  // one row of storage serves every row
      view_.strides[0] = 0;
    }
    offset_ = layout == Layout::kContiguous ? 0 : 5;
  }
  const int64_t slack = layout == Layout::kContiguous ? 0 : 4;
  const size_t esize = ElementSize(dtype);
  storage_bytes_ = static_cast<size_t>(offset_ + extent + slack) * esize;
  storage_.reset(static_cast<uint8_t*>(::operator new(std::max<size_t>(storage_bytes_, 1), std::align_val_t(64))));
  if (layout != Layout::kContiguous) {
    uint8_t* s = storage_.get();
    for (size_t b = 0; b < storage_bytes_; ++b) s[b] = static_cast<uint8_t>(Mix64(seed * 1000003u + b));
  }
  view_.data = storage_.get() + offset_ * static_cast<int64_t>(esize);
}

int64_t HostTensor::Offset(int64_t flat) const {
  if (layout_ == Layout::kContiguous) return flat;
  int64_t off = 0;
  for (int d = view_.rank - 1; d >= 0; --d) {
    const int64_t n = view_.sizes[d];
    off += (flat % n) * view_.strides[d];
    flat /= n;
  }
  return off;
}

char* HostTensor::ElementAt(int64_t flat) const {
  return static_cast<char*>(view_.data) + Offset(flat) * static_cast<int64_t>(view_.element_size());
}

float HostTensor::GetF(int64_t flat) const {
  TensorView one = view_;
  one.data = ElementAt(flat);
  return ref::GetF(one, {});
}

void HostTensor::SetF(int64_t flat, float v) {
  TensorView one = view_;
  one.data = ElementAt(flat);
  ref::SetF(one, {}, v);
}

int64_t HostTensor::GetI(int64_t flat) const {
  TensorView one = view_;
  one.data = ElementAt(flat);
  return ref::GetI(one, {});
}

void HostTensor::SetI(int64_t flat, int64_t v) {
  char* p = ElementAt(flat);
  switch (view_.dtype) {
    case DType::kInt32: *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v); break;
    case DType::kInt8: *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(v); break;
    case DType::kBool: case DType::kUInt8: *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(v); break;
    case DType::kInt64: *reinterpret_cast<int64_t*>(p) = v; break;
    default: break;
  }
}

uint32_t HostTensor::Bits(int64_t flat) const {
  const char* p = ElementAt(flat);
  if (view_.element_size() == 4) {
    uint32_t u;
    std::memcpy(&u, p, 4);
    return u;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

const char* InputValuesName(InputValues v) {
  switch (v) {
    case InputValues::kNormal: return "normal";
    case InputValues::kTiny: return "tiny";
    case InputValues::kMixed: return "mixed";
  }
  return "?";
}

bool ParseInputValues(const char* s, InputValues* out) {
  for (InputValues v : {InputValues::kTiny, InputValues::kNormal, InputValues::kMixed}) {
    if (strcasecmp(s, InputValuesName(v)) == 0) {
      *out = v;
      return true;
    }
  }
  return false;
}

void HostTensor::FillUniform(uint64_t seed, float lo, float hi, InputValues values) {
  const int64_t n = numel();
  const float scale = (hi - lo) * (1.0f / 16777216.0f);
  // 2^-70: |v| < 2^-70, so a product of two is below 2^-140: a subnormal of fp32 (and bf16), or zero below
  // 2^-150. The draws are multiples of 2^-24 of (hi - lo), so a scaled nonzero draw stays at or above 2^-94:
  // normal, and exact. f16 cannot hold 2^-70; its tiny values are its own subnormals (below 2^-14).
  const float tiny = std::ldexp(1.0f, view_.dtype == DType::kFloat16 ? -14 : -70);
  auto value = [&](int64_t i) {
    const uint64_t r = Mix64(seed * 0x2545f4914f6cdd1dull + static_cast<uint64_t>(i));
    const float v = lo + static_cast<float>(r >> 40) * scale;
    const bool small = values == InputValues::kTiny ||
                       (values == InputValues::kMixed && (Mix64(r ^ 0x7f4a7c159e3779b9ull) & 1) != 0);
    return small ? v * tiny : v;
  };
  if (layout_ != Layout::kContiguous) {
    for (int64_t i = 0; i < n; ++i) SetF(i, value(i));
    return;
  }
  const DType dt = view_.dtype;
  void* data = view_.data;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = value(i);
    if (dt == DType::kFloat32) static_cast<float*>(data)[i] = v;
    else if (dt == DType::kFloat16) static_cast<uint16_t*>(data)[i] = F16BitsFromF32(v);
    else static_cast<uint16_t*>(data)[i] = BF16BitsFromF32(v);
  }
}

const char* SpecialValuesName(SpecialValues s) {
  switch (s) {
    case SpecialValues::kNone: return "ordinary";
    case SpecialValues::kFinite: return "signed-zero/subnormal";
    case SpecialValues::kAll: return "inf/nan/signed-zero/subnormal";
  }
  return "?";
}

void HostTensor::MixInSpecials(uint64_t seed, SpecialValues which) {
  if (which == SpecialValues::kNone) return;
  const DType dt = view_.dtype;
  // The smallest subnormal and the largest subnormal's neighbourhood of the dtype.
  const float tiny = dt == DType::kFloat32 ? std::numeric_limits<float>::denorm_min()
                     : dt == DType::kFloat16 ? std::ldexp(1.0f, -24)
                                             : std::ldexp(1.0f, -133);
  const float min_normal = dt == DType::kFloat32 ? std::numeric_limits<float>::min()
                           : dt == DType::kFloat16 ? std::ldexp(1.0f, -14)
                                                   : std::numeric_limits<float>::min();
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float finite[] = {0.0f, -0.0f, tiny, -tiny, 0.75f * min_normal, -0.5f * min_normal};
  float payload_nan;  // a NaN with a sign and payload bits that every float dtype keeps
  const uint32_t payload_bits = 0xFFD5A000u;
  std::memcpy(&payload_nan, &payload_bits, 4);
  const float all[] = {0.0f, -0.0f, tiny, -0.5f * min_normal, inf, -inf, nan, -nan, payload_nan};
  const float* pick = which == SpecialValues::kFinite ? finite : all;
  const uint64_t count = which == SpecialValues::kFinite ? std::size(finite) : std::size(all);
  const int64_t n = numel();
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = Mix64(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i) + 0x5bd1e995u);
    if ((r & 15) == 0) SetF(i, pick[(r >> 8) % count]);
  }
}

void HostTensor::FillBytes(uint8_t byte) {
  uint8_t* s = storage_.get();
  const int64_t n = static_cast<int64_t>(storage_bytes_);
  constexpr int64_t kChunk = 1 << 20;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; b += kChunk) std::memset(s + b, byte, static_cast<size_t>(std::min(kChunk, n - b)));
}

std::vector<uint8_t> HostTensor::Snapshot() const {
  return std::vector<uint8_t>(storage_.get(), storage_.get() + storage_bytes_);
}

bool HostTensor::SameBytes(const std::vector<uint8_t>& snapshot) const {
  return snapshot.size() == storage_bytes_ && std::memcmp(snapshot.data(), storage_.get(), storage_bytes_) == 0;
}

int64_t HostTensor::OtherNaNs() const {
  const DType t = view_.dtype;
  if (t != DType::kFloat32 && t != DType::kFloat16 && t != DType::kBFloat16) return 0;
  int64_t other = 0;
  const int64_t n = numel();
  for (int64_t i = 0; i < n; ++i) {
    const char* p = ElementAt(i);
    if (t == DType::kFloat32) {
      uint32_t u;
      std::memcpy(&u, p, 4);
      other += (u & 0x7fffffffu) > 0x7f800000u && u != 0xFFC00000u;
    } else {
      uint16_t h;
      std::memcpy(&h, p, 2);
      const bool bf16 = t == DType::kBFloat16;
      other += (h & 0x7fffu) > (bf16 ? 0x7f80u : 0x7c00u) && h != (bf16 ? 0xFFC0u : 0xFE00u);
    }
  }
  return other;
}

bool HostTensor::OutsideViewUnchanged(const std::vector<uint8_t>& snapshot) const {
  const int64_t esize = static_cast<int64_t>(view_.element_size());
  const int64_t elements = static_cast<int64_t>(storage_bytes_) / esize;
  std::vector<bool> in_view(static_cast<size_t>(elements), false);
  const int64_t n = numel();
  for (int64_t i = 0; i < n; ++i) in_view[static_cast<size_t>(offset_ + Offset(i))] = true;
  const uint8_t* s = storage_.get();
  for (int64_t e = 0; e < elements; ++e) {
    if (in_view[static_cast<size_t>(e)]) continue;
    if (std::memcmp(s + e * esize, snapshot.data() + e * esize, static_cast<size_t>(esize)) != 0) return false;
  }
  return true;
}

}  // namespace moegrad::tool
