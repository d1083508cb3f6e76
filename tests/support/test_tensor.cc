#include "tests/support/test_tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "hwy/targets.h"
#include "moegrad/plan.hpp"

namespace moegrad::testing {

const char* LayoutName(Layout l) {
  switch (l) {
    case Layout::kContiguous: return "contiguous";
    case Layout::kPadded: return "padded";
    case Layout::kTransposed: return "transposed";
  }
  return "?";
}

TestTensor::TestTensor(DType dtype, std::vector<int64_t> sizes, Layout layout, uint64_t seed)
    : sizes_(std::move(sizes)) {
  const int rank = static_cast<int>(sizes_.size());
  strides_.assign(sizes_.size(), 1);
  int64_t extent = 1;  // elements the view spans past its offset
  if (layout == Layout::kTransposed && rank >= 2) {
    // Storage order: dims 0..rank-3, then the last dim, then the second-to-last.
    std::vector<int> order;
    for (int d = 0; d < rank - 2; ++d) order.push_back(d);
    order.push_back(rank - 1);
    order.push_back(rank - 2);
    int64_t stride = 1;
    for (int q = rank - 1; q >= 0; --q) {
      strides_[order[q]] = stride;
      stride *= std::max<int64_t>(sizes_[order[q]], 1);
    }
    extent = stride;
    offset_ = 3;
  } else {
    const bool padded = layout != Layout::kContiguous;
    int64_t stride = padded ? 2 : 1;  // padded: inner elements two apart, each row three elements longer
    for (int d = rank - 1; d >= 0; --d) {
      strides_[d] = stride;
      stride = stride * std::max<int64_t>(sizes_[d], 1) + (padded ? 3 : 0);
    }
    extent = stride;
    offset_ = padded ? 5 : 0;
  }
  storage_elements_ = offset_ + extent + (layout == Layout::kContiguous ? 0 : 4);
  const size_t esize = ElementSize(dtype);
  storage_.resize(static_cast<size_t>(storage_elements_) * esize);
  std::mt19937_64 rng(seed * 7919 + 13);
  for (auto& b : storage_) b = static_cast<uint8_t>(rng());
  view_.data = storage_.data() + offset_ * static_cast<int64_t>(esize);
  view_.dtype = dtype;
  view_.rank = rank;
  for (int d = 0; d < rank; ++d) {
    view_.sizes[d] = sizes_[d];
    view_.strides[d] = strides_[d];
  }
}

int64_t TestTensor::FlatOffset(int64_t flat) const {
  int64_t off = 0;
  for (int d = view_.rank - 1; d >= 0; --d) {
    const int64_t n = view_.sizes[d];
    off += (flat % n) * view_.strides[d];
    flat /= n;
  }
  return off;
}

float TestTensor::GetF(int64_t flat) const {
  TensorView one = view_;
  one.data = static_cast<char*>(view_.data) + FlatOffset(flat) * static_cast<int64_t>(view_.element_size());
  return ref::GetF(one, {});
}

void TestTensor::SetF(int64_t flat, float v) {
  TensorView one = view_;
  one.data = static_cast<char*>(view_.data) + FlatOffset(flat) * static_cast<int64_t>(view_.element_size());
  ref::SetF(one, {}, v);
}

int64_t TestTensor::GetI(int64_t flat) const {
  TensorView one = view_;
  one.data = static_cast<char*>(view_.data) + FlatOffset(flat) * static_cast<int64_t>(view_.element_size());
  return ref::GetI(one, {});
}

void TestTensor::SetI(int64_t flat, int64_t v) {
  char* p = static_cast<char*>(view_.data) + FlatOffset(flat) * static_cast<int64_t>(view_.element_size());
  switch (view_.dtype) {
    case DType::kInt32: *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v); break;
    case DType::kInt8: *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(v); break;
    case DType::kBool: case DType::kUInt8: *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(v); break;
    case DType::kInt64: *reinterpret_cast<int64_t*>(p) = v; break;
    default: break;
  }
}

void TestTensor::FillUniform(std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  const int64_t n = numel();
  for (int64_t i = 0; i < n; ++i) SetF(i, dist(rng));
}

bool TestTensor::OutsideViewUnchanged(const std::vector<uint8_t>& snapshot) const {
  const int64_t esize = static_cast<int64_t>(view_.element_size());
  std::vector<bool> in_view(static_cast<size_t>(storage_elements_), false);
  const int64_t n = numel();
  for (int64_t i = 0; i < n; ++i) in_view[static_cast<size_t>(offset_ + FlatOffset(i))] = true;
  for (int64_t e = 0; e < storage_elements_; ++e) {
    if (in_view[static_cast<size_t>(e)]) continue;
    for (int64_t b = 0; b < esize; ++b) {
      if (storage_[static_cast<size_t>(e * esize + b)] != snapshot[static_cast<size_t>(e * esize + b)]) return false;
    }
  }
  return true;
}

uint32_t ElementBits(const TestTensor& t, int64_t flat) {
  const float f = t.GetF(flat);
  switch (t.dtype()) {
    case DType::kFloat16: return F16BitsFromF32(f);
    case DType::kBFloat16: return BF16BitsFromF32(f);
    default: return F32Bits(f);
  }
}

void ExpectBitIdentical(const TestTensor& got, const TestTensor& want, const std::vector<uint8_t>& before,
                        const std::string& what, const std::string& context) {
  EXPECT_TRUE(got.OutsideViewUnchanged(before)) << what << " written outside its view" << context;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (ElementBits(got, i) != ElementBits(want, i)) {
      ADD_FAILURE() << what << "[" << i << "] = " << got.GetF(i) << " but the reference gives " << want.GetF(i)
                    << context;
      return;
    }
  }
}

void SetRoutingMap(TestTensor& map, const std::vector<uint8_t>& routed) {
  for (int64_t i = 0; i < map.numel(); ++i) {
    int64_t v = routed[static_cast<size_t>(i)];
    if (v && map.dtype() == DType::kInt8) v = (i % 4 == 1) ? -3 : (i % 4 == 2 ? 127 : 1);
    map.SetI(i, v);
  }
}

std::vector<uint8_t> RandomRouting(int64_t T, int64_t E, bool drop_and_pad, int64_t k, double density,
                                   std::mt19937_64& rng) {
  std::vector<uint8_t> routed(static_cast<size_t>(T * E), 0);
  std::vector<int64_t> order(static_cast<size_t>(E));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int64_t t = 0; t < T; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t e = 0; e < E; ++e) {
      const bool hit = drop_and_pad ? unit(rng) < density : order[static_cast<size_t>(e)] < k;
      routed[static_cast<size_t>(t * E + e)] = hit;
    }
  }
  return routed;
}

std::vector<std::string> ForEachSimdTarget(const std::function<void()>& fn) {
  std::vector<std::string> names;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    names.push_back(hwy::TargetName(target));
    fn();
  }
  hwy::SetSupportedTargetsForTest(0);
  return names;
}

std::vector<std::string> ForEachThreadCountAndSimdTarget(const std::function<void(int threads)>& fn) {
  std::vector<std::string> names;
  for (int threads : {1, 2, 3}) {
    SetNumThreads(threads);
    names = ForEachSimdTarget([&] { fn(threads); });
    EXPECT_GE(names.size(), 1u);
  }
  SetNumThreads(0);
  return names;
}

std::string DTypesName(DTypes d) {
  if (d.tokens == d.weights) return DTypeName(d.tokens);
  return std::string("tokens ") + DTypeName(d.tokens) + " weights " + DTypeName(d.weights);
}

float Epsilon(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return 1.0f / 1024;
    case DType::kBFloat16: return 1.0f / 128;
    default: return 1.0f / (1 << 23);
  }
}

}  // namespace moegrad::testing
