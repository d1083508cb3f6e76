// Test tensors: storage with slack around a (possibly strided, offset) view, filled with a random byte
// pattern so that tests can prove which bytes an operator wrote and which it left alone.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "moegrad/tensor.hpp"
#include "src/ref/ref_util.h"

namespace moegrad::testing {

// How a test lays a view out in its storage.
enum class Layout {
  kContiguous,  // row-major, no offset
  kPadded,      // every dimension's stride padded (rows and inner elements apart), plus an element offset
  kTransposed,  // the last two dimensions stored swapped (inner stride != 1), plus an offset
};
const char* LayoutName(Layout l);

class TestTensor {
 public:
  TestTensor() = default;
  TestTensor(DType dtype, std::vector<int64_t> sizes, Layout layout = Layout::kContiguous, uint64_t seed = 1);
  // Copies own their storage: the copy's view points into the copy.
  TestTensor(const TestTensor& other) { *this = other; }
  TestTensor& operator=(const TestTensor& other) {
    if (this == &other) return *this;
    sizes_ = other.sizes_;
    strides_ = other.strides_;
    offset_ = other.offset_;
    storage_elements_ = other.storage_elements_;
    storage_ = other.storage_;
    view_ = other.view_;
    view_.data = storage_.data() + offset_ * static_cast<int64_t>(view_.element_size());
    return *this;
  }

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }  // NOLINT: a test tensor is used as its view
  DType dtype() const { return view_.dtype; }
  int64_t size(int d) const { return view_.sizes[d]; }
  int64_t numel() const { return view_.numel(); }
  int64_t storage_elements() const { return storage_elements_; }
  int64_t offset_elements() const { return offset_; }
  void* storage() { return storage_.data(); }
  const std::vector<int64_t>& strides_vector() const { return strides_; }
  const std::vector<int64_t>& sizes_vector() const { return sizes_; }

  // Element access through the view (flat row-major index over the view's shape).
  float GetF(int64_t flat) const;
  void SetF(int64_t flat, float v);
  int64_t GetI(int64_t flat) const;
  void SetI(int64_t flat, int64_t v);

  // Uniform floats in [lo, hi) (rounded to the dtype) in every view element.
  void FillUniform(std::mt19937_64& rng, float lo = -1.0f, float hi = 1.0f);

  // The whole storage (view and slack) as bytes, for "untouched" checks.
  std::vector<uint8_t> Snapshot() const { return storage_; }
  bool SameBytes(const std::vector<uint8_t>& snapshot) const { return storage_ == snapshot; }
  // True when no byte outside the view's elements differs from `snapshot`.
  bool OutsideViewUnchanged(const std::vector<uint8_t>& snapshot) const;

 private:
  int64_t FlatOffset(int64_t flat) const;  // element offset from view data of flat view index

  TensorView view_;
  std::vector<int64_t> sizes_, strides_;
  int64_t offset_ = 0;
  int64_t storage_elements_ = 0;
  std::vector<uint8_t> storage_;
};

// Bits of a float element for exact comparisons (fp32 bits, or the 16-bit pattern).
uint32_t ElementBits(const TestTensor& t, int64_t flat);

// Every view element of the float tensor `got` equal to `want`'s bit for bit (the first difference is reported
// as "<what>[i]"), and its storage outside the view as in `before`; `context` ends every message.
void ExpectBitIdentical(const TestTensor& got, const TestTensor& want, const std::vector<uint8_t>& before,
                        const std::string& what, const std::string& context);

// Writes a routing map: element i (row-major) routed where routed[i] != 0. Any non-zero byte is routed, so an
// INT8 map gets assorted non-zero values (-3, 127, 1), a BOOL map 1.
void SetRoutingMap(TestTensor& map, const std::vector<uint8_t>& routed);
// The routed entries of a T x E map (row-major, 1 = routed): with drop_and_pad each entry with probability
// `density`, else the first `k` experts of a shuffled list per token (exactly k per token).
std::vector<uint8_t> RandomRouting(int64_t T, int64_t E, bool drop_and_pad, int64_t k, double density,
                                   std::mt19937_64& rng);

// Runs fn once per SIMD target this machine supports (Highway's dispatch mocked to that target), and
// returns the names of the targets it ran.
std::vector<std::string> ForEachSimdTarget(const std::function<void()>& fn);
// fn(threads) with 1, 2 and 3 worker threads, each time on every SIMD target (at least one), then the default
// thread count again; returns the names of the targets.
std::vector<std::string> ForEachThreadCountAndSimdTarget(const std::function<void(int threads)>& fn);

// Relative tolerance of one rounding to `dtype`.
float Epsilon(DType dtype);

// The dtypes of a call's two float groups: the tokens and the routing weights (scales, probs and their
// gradients), each FLOAT32, FLOAT16 or BFLOAT16, independent of each other.
struct DTypes {
  DType tokens, weights;
};
// The nine combinations: the three equal ones first.
inline constexpr DTypes kEveryDTypes[] = {
    {DType::kFloat32, DType::kFloat32}, {DType::kFloat16, DType::kFloat16}, {DType::kBFloat16, DType::kBFloat16},
    {DType::kBFloat16, DType::kFloat32}, {DType::kFloat16, DType::kFloat32}, {DType::kFloat32, DType::kBFloat16},
    {DType::kFloat32, DType::kFloat16}, {DType::kFloat16, DType::kBFloat16}, {DType::kBFloat16, DType::kFloat16}};
// "BFLOAT16" when both groups share it, else "tokens BFLOAT16 weights FLOAT32".
std::string DTypesName(DTypes d);

}  // namespace moegrad::testing
