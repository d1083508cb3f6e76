// One operator call with its inputs, outputs and reference outputs: what `moegrad bench`, `moegrad check`
// and the Google Benchmark suite build, run through the C++ API, and compare with the scalar reference.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "moegrad/ops.hpp"
#include "tools/moegrad/common/host_tensor.h"

namespace moegrad::tool {

struct Shape {
  int64_t tokens = 0;    // T (R of the finalize operators)
  int64_t hidden = 0;    // H
  int64_t experts = 0;   // E
  int64_t topk = 0;      // K
  int64_t capacity = 0;  // C of the drop-and-pad modes
};

// Where index data comes from.
enum class IndexData {
  kRouted,  // as the forward routing operators produce it from a random top-k routing
  kRandom,  // any valid values: duplicates, gaps and drops, which the gradients must handle exactly too
};

enum class LayoutPolicy {
  kContiguous,  // every tensor row-major (benchmarks)
  kStrided,     // every tensor padded, transposed or (float inputs) broadcast
  kMixed,       // each tensor at random, contiguous included
};

// Makes the tensors of one problem with layouts drawn from a policy.
class TensorMaker {
 public:
  TensorMaker(LayoutPolicy policy, uint64_t seed) : policy_(policy), rng_(seed) {}
  // Float inputs may be broadcast views; index tensors and outputs never are.
  HostTensor Input(DType dtype, std::vector<int64_t> sizes) { return Make(dtype, std::move(sizes), true); }
  HostTensor Index(DType dtype, std::vector<int64_t> sizes) { return Make(dtype, std::move(sizes), false); }
  // Outputs start as a byte pattern (contiguous) or random bytes, never as the values they must receive.
  HostTensor Output(DType dtype, std::vector<int64_t> sizes) {
    HostTensor t = Make(dtype, std::move(sizes), false);
    if (t.layout() == Layout::kContiguous) t.FillBytes(0xa5);
    return t;
  }

 private:
  HostTensor Make(DType dtype, std::vector<int64_t> sizes, bool may_broadcast);
  LayoutPolicy policy_;
  std::mt19937_64 rng_;
};

// An output of the operator under test and what the reference says it must hold.
struct OutputPair {
  std::string name;
  HostTensor* actual = nullptr;
  HostTensor expected;            // the reference result, contiguous; unused when !written
  // Null: bit-exact. Else the allowed |actual - expected| of element i, asked only where the bits differ.
  std::function<float(int64_t)> tolerance;
  bool written = true;            // false: an optional output the operator must leave untouched
};

class Problem {
 public:
  virtual ~Problem() = default;
  virtual const char* op_name() const = 0;
  virtual std::string mode_name() const = 0;
  virtual std::string shape_name() const = 0;
  virtual DType dtype() const = 0;
  // Phase one through the C++ API.
  virtual Status Plan(moegrad::Plan* plan) const = 0;
  // The one-call form (plans, allocates the workspace, runs).
  virtual Status Call() const = 0;
  // The least number of bytes any implementation must read and write (each needed element once).
  virtual uint64_t MinBytes() const = 0;
  // Runs the scalar reference into outputs()[*].expected (and sets the tolerances).
  virtual void RunReference() = 0;
  // Makes one index value invalid, so phase two must fail; false when there is none to corrupt.
  virtual bool CorruptIndex(std::mt19937_64& rng, std::string* what) = 0;

  std::vector<OutputPair>& outputs() { return outputs_; }
  const std::vector<OutputPair>& outputs() const { return outputs_; }

 protected:
  // Fresh contiguous tensors for the reference results, one per output, shaped like it.
  void PrepareExpected();

  std::vector<OutputPair> outputs_;
};

// Number of distinct values in [lo, hi) among an index tensor's elements (rows some pair reads).
uint64_t CountDistinct(const HostTensor& index, int64_t lo, int64_t hi);

// Compares every written output with the reference (bit-exact or within its tolerance). `sample` > 0
// compares only that many evenly spread elements per output (plus the first and last). On a mismatch
// returns false and describes the first one in `message`.
bool CompareOutputs(const Problem& p, int64_t sample, std::string* message);

// "%lld"-style formatting into a std::string.
std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace moegrad::tool
