// One operator call with its inputs, outputs and reference outputs: what `moegrad bench`, `moegrad check`
// and the Google Benchmark suite build, run through the C++ API, and compare with the scalar reference.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "moegrad/op_info.hpp"
#include "moegrad/ops.hpp"
#include "tools/moegrad/common/host_tensor.h"
#include "tools/moegrad/common/model_presets.h"

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
  TensorMaker(LayoutPolicy policy, uint64_t seed, SpecialValues specials = SpecialValues::kNone,
              InputValues values = InputValues::kNormal)
      : policy_(policy), specials_(specials), values_(values), rng_(seed) {}
  // Float inputs may be broadcast views; index tensors and outputs never are.
  HostTensor Input(DType dtype, std::vector<int64_t> sizes) { return Make(dtype, std::move(sizes), true); }
  // An input holding uniform values in [lo, hi) drawn from `fill_seed` (HostTensor::FillUniform), scaled as
  // the maker's InputValues say, with the maker's special values mixed in.
  HostTensor Uniform(DType dtype, std::vector<int64_t> sizes, uint64_t fill_seed, float lo = -1.0f, float hi = 1.0f) {
    HostTensor t = Input(dtype, std::move(sizes));
    t.FillUniform(fill_seed, lo, hi, values_);
    t.MixInSpecials(fill_seed, specials_);
    return t;
  }
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
  SpecialValues specials_;
  InputValues values_;
  std::mt19937_64 rng_;
};

// An output of the operator under test and what the reference says it must hold.
struct OutputPair {
  std::string name;
  HostTensor* actual = nullptr;
  HostTensor expected;            // the reference result, contiguous; unused when !written
  // Null: bit-exact. Else the allowed |actual - expected| of element i, asked only where the bits differ and
  // both are finite. Either way two NaNs match whatever their sign and payload, and an infinity matches only
  // itself.
  std::function<float(int64_t)> tolerance;
  bool written = true;            // false: an optional output the operator must leave untouched
};

class Problem {
 public:
  virtual ~Problem() = default;
  virtual const char* op_name() const = 0;
  virtual std::string mode_name() const = 0;
  virtual std::string shape_name() const = 0;
  virtual DType dtype() const = 0;         // the token group's dtype
  virtual DType weight_dtype() const = 0;  // the weight group's (scales, probs and their gradients)
  // "bf16", or "bf16+f32" for bf16 tokens with fp32 weights (PrecisionName).
  std::string precision_name() const { return PrecisionName(dtype(), weight_dtype()); }
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
  // Stores `made` in `*t` and lists it as an output; `written` false: the operator must leave it untouched.
  void AddOutput(const char* name, HostTensor* t, HostTensor made, bool written = true) {
    *t = std::move(made);
    outputs_.push_back({name, t, {}, {}, written});
  }
  // Output i as the operator under test sees it, or (reference) the tensor the reference writes.
  TensorView OutputView(size_t i, bool reference) const {
    return reference ? outputs_[i].expected.view() : outputs_[i].actual->view();
  }

  std::vector<OutputPair> outputs_;
};

// The scalar reference of one operator.
template <typename Args>
using ReferenceFn = void (*)(const Args&);

// What the problems of every operator share: the config (a ProblemConfig with Args and drop_pad()), the
// operator's name and its C++ API functions (OpInfo), the shape string, and the reference, each
// called on CallArgs.
template <typename Config>
class OpProblem : public Problem {
 public:
  using Args = typename Config::Args;
  OpProblem(const Config& c, ReferenceFn<Args> reference) : c_(c), reference_(reference) {}

  const char* op_name() const override { return OpInfo<Args>::kName; }
  std::string shape_name() const override {
    const Shape& s = c_.shape;
    return ShapeString(s.tokens, s.hidden, s.experts, s.topk, c_.drop_pad() ? s.capacity : 0);
  }
  DType dtype() const override { return c_.dtype; }
  DType weight_dtype() const override { return c_.weights(); }
  Status Plan(moegrad::Plan* plan) const override { return OpInfo<Args>::kPlan(CallArgs(false), plan); }
  Status Call() const override { return OpInfo<Args>::kRun(CallArgs(false)); }
  void RunReference() override {
    PrepareExpected();
    reference_(CallArgs(true));
  }

 protected:
  // The problem's tensors as the operator's arguments: the outputs under test, or (reference) the
  // reference's, with the optional outputs the reference must not see left out.
  virtual Args CallArgs(bool reference) const = 0;

  const Config c_;

 private:
  ReferenceFn<Args> reference_;
};

// Number of distinct values in [lo, hi) among an index tensor's elements (rows some pair reads).
uint64_t CountDistinct(const HostTensor& index, int64_t lo, int64_t hi);

// Sets element `flat` of an index tensor to `value` (an invalid one, for CorruptIndex) and returns
// "name[flat] = value" for the message.
std::string SetBadIndex(HostTensor* index, const char* name, int64_t flat, int64_t value);
// A value just outside [0, hi): hi .. hi + 2 or -1 .. -3, for CorruptIndex.
int64_t OutsideRange(int64_t hi, std::mt19937_64& rng);
// Flips one element of a routing map (routed <-> not routed), for CorruptIndex of an operator that needs a
// fixed count of routed entries, and returns "routingMap flat[i] = v (why)".
std::string FlipRoutingMapEntry(HostTensor* map, std::mt19937_64& rng, const char* why);

// expandedRowIdx, and expertIdx when `expert_idx` is not null, of the finalize operators for R = s.tokens
// rows of K = s.topk pairs. kRouted: as MoeInitRoutingV2 makes them from a random top-k routing (drop-and-pad
// when capacity > 0), pair i = r*K + k stored at (r, k), or at k*R + r when `expert_major`. kRandom: every
// value uniform in [lo, hi], every expert uniform in [0, E).
void FillFinalizeIndices(IndexData index, const Shape& s, int64_t capacity, bool expert_major, int64_t lo,
                         int64_t hi, std::mt19937_64& rng, HostTensor* row_idx, HostTensor* expert_idx);

// Redraws every entry of expertIdx uniform in [0, experts), apart from the routing (FinalizeRoutingV2Config's
// and FinalizeRoutingV2GradConfig's bias_experts).
void RedrawExperts(int64_t experts, std::mt19937_64& rng, HostTensor* expert_idx);

// A (T, E) routing map from 0/1 entries `routed`. With `any_nonzero` (INT8 maps of random index data) each
// routed entry is an arbitrary odd value in [-127, 127] instead of 1: any non-zero value means routed.
void FillRoutingMap(const std::vector<uint8_t>& routed, bool any_nonzero, std::mt19937_64& rng, HostTensor* map);

// Compares every written output with the reference (bit-exact or within its tolerance; NaN matches NaN). `sample` > 0
// compares only that many evenly spread elements per output (plus the first and last). On a mismatch
// returns false and describes the first one in `message`.
bool CompareOutputs(const Problem& p, int64_t sample, std::string* message);

// The bytes of every output of p (before a call, for VerifyRun).
std::vector<std::vector<uint8_t>> SnapshotOutputs(const Problem& p);

// Checks a call that returned `s` on p, whose outputs held `before` (SnapshotOutputs) when it started: an OK
// status, every written output equal to the reference (CompareOutputs, all elements), every unwritten output
// untouched and no byte outside an output's view changed. Runs the reference. Returns "" or what went wrong.
std::string VerifyRun(Problem& p, const Status& s, const std::vector<std::vector<uint8_t>>& before);

// "%lld"-style formatting into a std::string.
std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace moegrad::tool
