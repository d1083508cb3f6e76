// The invariants checked around one operator call through the aclnn API: a failed phase writes nothing and
// reports one line naming the operator; an accepted call has no overlapping outputs, leaves inputs and the
// bytes outside output views alone, and matches the reference; workspace and executor rules of phase two.
// OpFuzz<Args> drives all of it from the operator's OpInfo: a fuzz target only decodes shapes, attributes and
// index data.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "moegrad/op_info.hpp"
#include "tests/support/op_entry.h"

namespace moegrad::fuzz {

// Every tensor's storage as it was at some moment.
struct Snapshot {
  std::vector<std::pair<const Tensor*, std::vector<uint8_t>>> all;
  void Add(const Tensor* t) {
    if (t != nullptr) all.emplace_back(t, t->Bytes());
  }
  void ExpectUnchanged(const char* when) const {
    for (const auto& [t, bytes] : all) {
      if (t->Bytes() != bytes) Fail("a tensor was written by a failed call", when);
    }
  }
};

inline void ExpectErrorMessage(const char* op) {
  const std::string msg = aclGetRecentErrMsg();
  if (msg.rfind(op, 0) != 0 && msg.rfind("aclnn", 0) != 0) Fail("error message does not name the operator:", msg);
  if (msg.find('\n') != std::string::npos) Fail("error message is not one line:", msg);
}

// Bitwise equality of two floats of one dtype, treating every NaN as equal.
inline bool SameFloat(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return F32Bits(a) == F32Bits(b);
}

// Bytes of `t`'s storage outside its view elements are as in `before` (its Bytes() before the call).
inline bool OutsideViewUnchanged(const Tensor& t, const std::vector<uint8_t>& before) {
  const std::vector<uint8_t> now = t.Bytes();
  std::vector<bool> in_view(now.size(), false);
  const int64_t es = static_cast<int64_t>(t.esize());
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t at = (t.offset + t.ElemOffset(i)) * es;
    for (int64_t b = 0; b < es; ++b) in_view[static_cast<size_t>(at + b)] = true;
  }
  for (size_t b = 0; b < now.size(); ++b) {
    if (!in_view[b] && now[b] != before[b]) return false;
  }
  return true;
}

// A tensor of the same layout as `t` over a private copy of `bytes` (t's storage at some moment), for the
// reference to write into.
inline TensorPtr CopyOf(const Tensor& t, const std::vector<uint8_t>& bytes) {
  auto c = std::make_unique<Tensor>();
  c->dtype = t.dtype;
  c->sizes = t.sizes;
  c->strides = t.strides;
  c->offset = t.offset;
  c->storage_elems = t.storage_elems;
  c->alloc = std::shared_ptr<uint8_t[]>(new uint8_t[bytes.size() + 1]);
  c->base = c->alloc.get();
  if (!bytes.empty()) std::memcpy(c->base, bytes.data(), bytes.size());
  return c;
}

// Every view element of `got` equals `want`'s (floats bitwise, NaNs alike; other dtypes bytewise).
inline void ExpectSameElements(const Tensor& got, const Tensor& want, const char* what) {
  const bool is_float = got.dtype == DType::kFloat32 || got.dtype == DType::kFloat16 || got.dtype == DType::kBFloat16;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (is_float) {
      if (!SameFloat(got.GetF(i), want.GetF(i))) {
        Fail("result differs from the reference:", std::string(what) + "[" + std::to_string(i) + "] = " +
                                                       std::to_string(got.GetF(i)) + ", reference " +
                                                       std::to_string(want.GetF(i)));
      }
    } else {
      const int64_t es = static_cast<int64_t>(got.esize());
      if (std::memcmp(got.ViewData() + got.ElemOffset(i) * es, want.ViewData() + want.ElemOffset(i) * es,
                      static_cast<size_t>(es)) != 0) {
        Fail("result differs from the reference:", std::string(what) + "[" + std::to_string(i) + "]");
      }
    }
  }
}

// Workspaces past this are not allocated: phase one may plan them, the fuzzer does not run them.
constexpr uint64_t kMaxWorkspace = uint64_t{16} << 20;

// Phase two of a successful phase one, with the invariants of the two-phase API: a short or null workspace
// fails and writes nothing (and consumes a one-shot executor); a repeatable executor runs again to the same
// bytes. `run(workspace, size, executor)` calls the operator's second phase. `all` holds every tensor of the
// call as it was before phase one. Returns the status of the real run (or of the failed one that consumed
// the executor, with `*ran` false).
template <typename Run>
aclnnStatus PhaseTwo(Input& in, const char* op, const Run& run, uint64_t ws_size, aclOpExecutor* ex,
                     const Snapshot& all, bool* ran) {
  *ran = false;
  if (ws_size > kMaxWorkspace) {
    aclDestroyAclOpExecutor(ex);
    return ACLNN_SUCCESS;
  }
  const bool repeatable = in.Rare(15);
  if (repeatable) FUZZ_CHECK(aclSetAclOpExecutorRepeatable(ex) == ACLNN_SUCCESS);
  if (ws_size > 0 && in.Rare(5)) {
    const bool null_ws = in.Rare(50);
    std::unique_ptr<uint8_t[]> small(new uint8_t[ws_size - 1]);
    const aclnnStatus st = null_ws ? run(nullptr, ws_size, ex) : run(small.get(), ws_size - 1, ex);
    FUZZ_CHECK(st == (null_ws ? ACLNN_ERR_PARAM_NULLPTR : ACLNN_ERR_PARAM_INVALID));
    ExpectErrorMessage(op);
    all.ExpectUnchanged("a short workspace");
    if (!repeatable) return st;
  }
  std::unique_ptr<uint8_t[]> ws(ws_size > 0 ? new uint8_t[ws_size] : nullptr);
  if (ws_size > 0) std::memset(ws.get(), static_cast<int>(in.rng()() & 0xff), ws_size);  // stale bytes
  const aclnnStatus st = run(ws.get(), ws_size, ex);
  *ran = true;
  if (st != ACLNN_SUCCESS) {
    FUZZ_CHECK(st == ACLNN_ERR_PARAM_INVALID || st == ACLNN_ERR_PARAM_NULLPTR, std::to_string(st));
    ExpectErrorMessage(op);
    all.ExpectUnchanged("phase two");
  } else if (repeatable) {
    Snapshot first;
    for (const auto& entry : all.all) first.Add(entry.first);
    if (ws_size > 0) std::memset(ws.get(), static_cast<int>(in.rng()() & 0xff), ws_size);  // stale bytes
    FUZZ_CHECK(run(ws.get(), ws_size, ex) == ACLNN_SUCCESS, "a repeatable executor failed its second run");
    first.ExpectUnchanged("the second run of a repeatable executor (results differ)");
  }
  if (repeatable) FUZZ_CHECK(aclDestroyAclOpExecutor(ex) == ACLNN_SUCCESS);
  return st;
}

// The tensors of one operator call and the checks around its two phases.
class Call {
 public:
  explicit Call(const char* op) : op_(op) {}

  void Input(const Tensor* t) {
    if (t != nullptr) inputs_.push_back(t);
  }
  // `written`: the operator writes it in this configuration (else it must stay untouched).
  void Output(const Tensor* t, bool written) {
    if (t != nullptr) (written ? outputs_ : unwritten_).push_back(t);
  }
  // Records every tensor as it is now: call once the data is filled in.
  void Freeze() {
    for (const Tensor* t : inputs_) {
      all_.Add(t);
      spans_.push_back(t->SpanCopy());
    }
    for (const Tensor* t : outputs_) all_.Add(t);
    for (const Tensor* t : unwritten_) all_.Add(t);
  }
  const Snapshot& all() const { return all_; }

  // The rules of phase one's outcome; true when phase two should follow.
  bool PhaseOne(aclnnStatus st, aclOpExecutor* ex) {
    if (st != ACLNN_SUCCESS) {
      FUZZ_CHECK(ex == nullptr, "a failed phase one left an executor");
      FUZZ_CHECK(st == ACLNN_ERR_PARAM_INVALID || st == ACLNN_ERR_PARAM_NULLPTR, std::to_string(st));
      ExpectErrorMessage(op_);
      all_.ExpectUnchanged("phase one");
      return false;
    }
    FUZZ_CHECK(ex != nullptr);
    // An accepted call has no written output sharing bytes with an input or another written output.
    for (const Tensor* o : outputs_) {
      for (const Tensor* i : inputs_) FUZZ_CHECK(!Overlap(o, i), "an output overlapping an input was accepted");
      for (const Tensor* p : outputs_) FUZZ_CHECK(o == p || !Overlap(o, p), "overlapping outputs were accepted");
    }
    return true;
  }

  // After a successful phase two: inputs (their spans: an output may sit in an input's slack) and unwritten
  // outputs keep their bytes, written outputs keep the bytes outside their views.
  void CheckUntouched() const {
    for (size_t i = 0; i < inputs_.size(); ++i) FUZZ_CHECK(inputs_[i]->SpanCopy() == spans_[i], "an input was written");
    for (const Tensor* t : unwritten_) {
      bool shares = t->aliased;
      for (const Tensor* o : outputs_) shares = shares || o->aliased || Overlap(t, o);
      if (!shares) FUZZ_CHECK(t->Bytes() == Before(t), "an output that must not be written was");
    }
    if (!Comparable()) return;
    for (const Tensor* o : outputs_) FUZZ_CHECK(OutsideViewUnchanged(*o, Before(o)), "written outside its view");
  }
  // Whether outputs can be compared with the reference element by element: each in its own allocation
  // and no two view elements on the same memory.
  bool Comparable() const {
    for (const Tensor* o : outputs_) {
      if (o->aliased || !o->Injective()) return false;
    }
    return true;
  }
  // A private copy of output `t` as it was before the call, for the reference to write into.
  TensorPtr RefCopy(const Tensor* t) const { return t != nullptr ? CopyOf(*t, Before(t)) : nullptr; }

 private:
  const std::vector<uint8_t>& Before(const Tensor* t) const {
    for (const auto& entry : all_.all) {
      if (entry.first == t) return entry.second;
    }
    Fail("tensor not recorded");
  }

  const char* op_;
  std::vector<const Tensor*> inputs_, outputs_, unwritten_;
  std::vector<std::vector<uint8_t>> spans_;
  Snapshot all_;
};

// One operator's fuzzed call, its tensors and attributes named and ordered as OpInfo<Args> has them. A target
// puts the tensors it decoded (PutFloats for inputs whose elements are floats, Put for the others), sets the
// attributes, lets Vary() drop and alias them and fill the floats, fills index data, then Run()s both aclnn
// phases under the checks of Call and PhaseTwo and, when the outputs are comparable, ExpectReference()s.
template <typename Args>
class OpFuzz {
 public:
  using Info = OpInfo<Args>;
  static constexpr size_t kNumTensors = testing::kNumTensors<Args>;
  static constexpr size_t kNumInputs = testing::NumInputs<Args>();
  static_assert(testing::InputsThenOutputs<Args>(), "OpInfo lists the inputs first");
  static_assert(kNumInputs > 0 && kNumInputs < kNumTensors, "an operator has inputs and outputs");

  explicit OpFuzz(Input& in) : in_(in), call_(Info::kName) {}

  // The tensor `name` (as messages print it), null while absent.
  Tensor* Get(const char* name) const { return t_[TensorAt(name)].get(); }
  // Sets tensor `name` (null: absent); PutFloats marks an input whose elements Vary() fills with floats.
  void Put(const char* name, TensorPtr t) { t_[TensorAt(name)] = std::move(t); }
  void PutFloats(const char* name, TensorPtr t) {
    const size_t i = TensorAt(name);
    if (Info::kTensors[i].role != ArgRole::kInput) Fail("PutFloats of an output:", name);
    t_[i] = std::move(t);
    floats_[i] = true;
  }
  // Integer array i (OpInfo<Args>::kIntArrays order); nullopt: absent.
  void SetIntArray(size_t i, std::optional<std::vector<int64_t>> v) { arrays_.at(i) = std::move(v); }
  void SetAttr(const char* name, int64_t v) {
    const size_t i = testing::AttrIndex<Args>(name);
    if (i == attrs_.size()) Fail("no such attribute:", name);
    attrs_[i] = v;
  }

  // Now and then a tensor becomes a null argument and an output moves into another tensor's allocation; then
  // the float inputs get their data.
  void Vary() {
    DropSome();
    AliasOutputs();
    FillFloats();
  }

  // Both aclnn phases, every tensor an aclTensor, with the checks of Call and PhaseTwo. True when the call
  // succeeded and its outputs can be compared with the reference element by element.
  bool Run() {
    const Args views = Views();
    for (size_t i = 0; i < kNumTensors; ++i) {
      if (Info::kTensors[i].role == ArgRole::kInput) {
        call_.Input(t_[i].get());
      } else {
        call_.Output(t_[i].get(), Info::kTensors[i].Written(views));
      }
    }
    call_.Freeze();
    std::array<aclTensor*, kNumTensors> acl{};
    for (size_t i = 0; i < kNumTensors; ++i) acl[i] = Acl(in_, t_[i].get());
    uint64_t ws_size = 0;
    aclOpExecutor* executor = reinterpret_cast<aclOpExecutor*>(&ws_size);  // must be overwritten
    const aclnnStatus st = testing::AclnnPhaseOne<Args>(acl.data(), attrs_.data(), &ws_size, &executor, &arrays_);
    if (!call_.PhaseOne(st, executor)) return false;
    bool ran = false;
    const aclnnStatus run = PhaseTwo(
        in_, Info::kName,
        [](void* w, uint64_t n, aclOpExecutor* e) { return testing::OpEntry<Args>::kAclnnPhaseTwo(w, n, e, nullptr); },
        ws_size, executor, call_.all(), &ran);
    if (!ran || run != ACLNN_SUCCESS) return false;
    call_.CheckUntouched();
    return call_.Comparable();
  }

  // The reference on the same inputs, writing private copies of the written outputs (as they were before the
  // call); every written output but `skip` must then equal its copy element for element.
  void ExpectReference(const char* skip = nullptr) {
    const Args views = Views();
    std::array<TensorView, kNumTensors> v{};
    std::array<const TensorView*, kNumTensors> args{};
    for (size_t i = 0; i < kNumTensors; ++i) {
      const bool input = Info::kTensors[i].role == ArgRole::kInput;
      if (!input && Info::kTensors[i].Written(views)) want_[i] = call_.RefCopy(t_[i].get());
      const Tensor* t = input ? t_[i].get() : want_[i].get();
      if (t != nullptr) v[i] = t->View();
      args[i] = t != nullptr ? &v[i] : nullptr;
    }
    testing::OpEntry<Args>::kReference(testing::MakeArgs<Args>(args.data(), attrs_.data(), &arrays_));
    for (size_t i = kNumInputs; i < kNumTensors; ++i) {
      if (want_[i] == nullptr || (skip != nullptr && std::strcmp(skip, Info::kTensors[i].name) == 0)) continue;
      ExpectSameElements(*t_[i], *want_[i], Info::kTensors[i].name);
    }
  }
  // The reference's copy of written output `name` (after ExpectReference), null when it is not written.
  const Tensor* Want(const char* name) const { return want_[TensorAt(name)].get(); }

 private:
  static size_t TensorAt(const char* name) {
    const size_t i = testing::TensorIndex<Args>(name);
    if (i == kNumTensors) Fail("no such tensor:", name);
    return i;
  }
  // Each tensor, now and then, becomes a null argument.
  void DropSome() {
    for (TensorPtr& t : t_) {
      if (in_.Rare(2)) t.reset();
    }
  }
  // The first output, now and then, moves into an input's allocation; each later output into the first
  // output's or an input's.
  void AliasOutputs() {
    for (size_t o = kNumInputs; o < kNumTensors; ++o) {
      const Tensor* host = o > kNumInputs && in_.Rare(50) ? t_[kNumInputs].get() : RandomInput();
      MaybeAlias(in_, t_[o].get(), host);
    }
  }
  // Float data in the PutFloats inputs (see fuzz_util.h's FillFloats).
  void FillFloats() {
    for (size_t i = 0; i < kNumInputs; ++i) {
      if (floats_[i]) ::moegrad::fuzz::FillFloats(in_, t_[i].get());
    }
  }

  const Tensor* RandomInput() { return t_[static_cast<size_t>(in_.Range(0, kNumInputs - 1))].get(); }
  // The arguments with the fuzzed tensors' views (what decides which outputs are written).
  Args Views() const {
    std::array<TensorView, kNumTensors> v{};
    std::array<const TensorView*, kNumTensors> p{};
    for (size_t i = 0; i < kNumTensors; ++i) {
      if (t_[i] != nullptr) v[i] = t_[i]->View();
      p[i] = t_[i] != nullptr ? &v[i] : nullptr;
    }
    return testing::MakeArgs<Args>(p.data(), attrs_.data(), &arrays_);
  }

  Input& in_;
  Call call_;
  std::array<TensorPtr, kNumTensors> t_, want_;
  std::array<bool, kNumTensors> floats_{};
  std::array<int64_t, testing::kNumAttrs<Args>> attrs_{};
  testing::IntArrays<Args> arrays_{};
};

}  // namespace moegrad::fuzz
