// Host tensors for the moegrad tool and benchmarks: owned storage around a (possibly strided, offset) view,
// filled with a deterministic random pattern, with element access through the view and byte snapshots
// that tell which storage bytes an operator wrote.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "moegrad/tensor.hpp"

namespace moegrad::tool {

// How a tensor's view lies in its storage.
enum class Layout {
  kContiguous,  // row-major, no offset, no slack: the fast path and the benchmark layout
  kPadded,      // every stride padded (inner elements two apart, rows longer), plus an element offset
  kTransposed,  // the last two dimensions stored swapped (inner stride != 1), plus an offset
  kBroadcast,   // the first dimension has stride 0 (every row is the same storage); inputs only
};
const char* LayoutName(Layout l);

// Which non-ordinary values HostTensor::MixInSpecials writes.
enum class SpecialValues {
  kNone,
  kFinite,  // +0, -0 and subnormals of the tensor's dtype: results stay finite and exact
  kAll,     // those, +Inf, -Inf and NaNs of both signs
};
const char* SpecialValuesName(SpecialValues s);

// The magnitudes of the ordinary values HostTensor::FillUniform writes (`moegrad bench --values`).
enum class InputValues {
  kNormal,  // as drawn: |v| < 1 (training-like)
  kTiny,    // scaled by 2^-70 (fp32, bf16; f16: 2^-14, into its subnormals), so that the product of two
            // such values underflows fp32 (into its subnormals, or to zero), as tiny gradients do
  kMixed,   // each element normal or tiny at random (half each)
};
const char* InputValuesName(InputValues v);
// "tiny", "normal", "mixed" (case-insensitive); false for anything else.
bool ParseInputValues(const char* s, InputValues* out);

class HostTensor {
 public:
  HostTensor() = default;
  // Storage is uninitialised for kContiguous (benchmarks fill what they need); other layouts get random
  // slack bytes from `seed` so that writes outside the view can be detected.
  HostTensor(DType dtype, std::vector<int64_t> sizes, Layout layout = Layout::kContiguous, uint64_t seed = 0);
  HostTensor(HostTensor&&) noexcept = default;
  HostTensor& operator=(HostTensor&&) noexcept = default;
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;

  const TensorView& view() const { return view_; }
  DType dtype() const { return view_.dtype; }
  Layout layout() const { return layout_; }
  int rank() const { return view_.rank; }
  int64_t size(int d) const { return view_.sizes[d]; }
  int64_t numel() const { return view_.numel(); }
  // Bytes of the view's elements (what an operator must move at least once).
  uint64_t view_bytes() const { return static_cast<uint64_t>(numel()) * view_.element_size(); }

  // Element access by flat row-major index over the view's shape.
  float GetF(int64_t flat) const;
  void SetF(int64_t flat, float v);
  int64_t GetI(int64_t flat) const;
  void SetI(int64_t flat, int64_t v);
  // The stored bits of a float element (fp32 bits or the 16-bit pattern), for exact comparisons.
  uint32_t Bits(int64_t flat) const;

  // Uniform values in [lo, hi) rounded to the dtype, scaled as `values` says (an exact power of two, before
  // the rounding); a pure function of (seed, flat index), so parallel filling gives the same tensor for
  // every thread count.
  void FillUniform(uint64_t seed, float lo = -1.0f, float hi = 1.0f, InputValues values = InputValues::kNormal);
  // Replaces about one element in 16 with a special value of `which` (nothing for kNone); a pure function of
  // (seed, flat index) like FillUniform.
  void MixInSpecials(uint64_t seed, SpecialValues which);
  // Every byte of the storage set to `byte` (0xff makes a float tensor all NaN: unwritten elements show).
  void FillBytes(uint8_t byte);

  std::vector<uint8_t> Snapshot() const;
  bool SameBytes(const std::vector<uint8_t>& snapshot) const;
  // How many elements of the view are NaNs with other bits than the one NaN of the library's arithmetic
  // results (0xFFC00000, bf16 0xFFC0, fp16 0xFE00: docs/guarantees.md section 5); 0 for other dtypes.
  int64_t OtherNaNs() const;
  // True when no storage byte outside the view's elements differs from `snapshot`.
  bool OutsideViewUnchanged(const std::vector<uint8_t>& snapshot) const;

 private:
  struct FreeAligned {
    void operator()(uint8_t* p) const;
  };
  int64_t Offset(int64_t flat) const;  // element offset from view data
  char* ElementAt(int64_t flat) const;

  TensorView view_;
  Layout layout_ = Layout::kContiguous;
  int64_t offset_ = 0;            // view start, in elements from the storage start
  size_t storage_bytes_ = 0;
  std::unique_ptr<uint8_t, FreeAligned> storage_;
};

// A float tensor's name for tables: "f32", "f16", "bf16".
const char* ShortDTypeName(DType t);
// The precision of a call from the dtypes of its two groups (DTypeGroup in moegrad/op_info.hpp), for tables,
// JSON and --dtype: "bf16" when both are bf16, "bf16+f32" (tokens+weights) otherwise.
std::string PrecisionName(DType tokens, DType weights);
// Relative size of one rounding to `dtype` (2^-24, 2^-11, 2^-8).
float UnitRoundoff(DType t);

// SplitMix64: a counter-based generator, so value i of a stream needs no state from values < i.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace moegrad::tool
