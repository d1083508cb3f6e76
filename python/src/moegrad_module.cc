// moegrad._C: the Python face of the C++ API (include/moegrad/ops.hpp), without any dependency on libtorch.
//
// Tensors arrive as (data_ptr, dtype code, sizes, strides) tuples, strides in elements, so any framework's
// strided CPU tensor is used in place: no copy, no contiguity requirement. Outputs are allocated by the
// caller. Every rule is the library's; the only checks here are those a TensorView cannot express.
//
// Each operator is one function, named after its command-line key in snake case (OpInfo<Args>::kKey), taking
// its tensors (None where absent) and its attributes as two lists in the order of OpInfo<Args> (and, for an
// operator with integer arrays, a third list of them, None where absent, in kIntArrays order), and one more,
// <name>_outputs, its output query (the outputs' shapes and dtypes, or the library's error, before the outputs
// exist); _C.OPS maps each name to the lists of tensor and attribute names, _C.INFO to its CANN name, inputs,
// outputs, required tensors, boolean attributes and integer arrays.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "moegrad/op_info.hpp"
#include "moegrad/ops.hpp"

namespace py = pybind11;

namespace {

using Desc = std::tuple<uintptr_t, int32_t, std::vector<int64_t>, std::vector<int64_t>>;
using OptDesc = std::optional<Desc>;
using OptInts = std::optional<std::vector<int64_t>>;

moegrad::TensorView ToView(const Desc& d, const char* name) {
  const auto& [ptr, dtype, sizes, strides] = d;
  if (sizes.size() != strides.size()) {
    throw py::value_error(std::string("moegrad: ") + name + " has " + std::to_string(sizes.size()) +
                          " sizes but " + std::to_string(strides.size()) + " strides");
  }
  if (sizes.size() > static_cast<size_t>(moegrad::TensorView::kMaxRank)) {
    throw py::value_error(std::string("moegrad: ") + name + " has rank " + std::to_string(sizes.size()) +
                          ", more than " + std::to_string(moegrad::TensorView::kMaxRank));
  }
  moegrad::TensorView v;
  v.data = reinterpret_cast<void*>(ptr);
  v.dtype = static_cast<moegrad::DType>(dtype);  // an unknown code is the library's WellFormed error
  v.rank = static_cast<int>(sizes.size());
  for (int i = 0; i < v.rank; ++i) {
    v.sizes[i] = sizes[i];
    v.strides[i] = strides[i];
  }
  return v;
}

std::optional<moegrad::TensorView> ToView(const OptDesc& d, const char* name) {
  if (!d) return std::nullopt;
  return ToView(*d, name);
}

// Runs `call` without the GIL (the tensors stay referenced by the Python caller meanwhile), then turns a
// failed Status into ValueError carrying the library's one-line message.
template <typename Fn>
void RunReleased(Fn&& call) {
  moegrad::Status status;
  {
    py::gil_scoped_release release;
    status = call();
  }
  if (!status.ok()) throw py::value_error(status.message());
}

// The C++ arguments of a call of the operator of `Args`: `tensors` (None where absent), `attrs` and `arrays`
// (its integer-list attributes, None where absent; an empty list of them: all absent) in the order of its
// OpInfo. A required tensor that is None fails with the library's NULLPTR message (the one aclnn gives for a
// null tensor) as ValueError; `query` (the output query) leaves the outputs out, given or not.
template <typename Args>
Args ToArgs(const std::vector<OptDesc>& tensors, const std::vector<int64_t>& attrs, const std::vector<OptInts>& arrays,
            bool query) {
  using Info = moegrad::OpInfo<Args>;
  using Arrays = moegrad::IntArraysOf<Args>;
  constexpr size_t kTensors = std::size(Info::kTensors), kAttrs = std::size(Info::kAttrs);
  if (tensors.size() != kTensors || attrs.size() != kAttrs || (!arrays.empty() && arrays.size() != Arrays::size)) {
    throw py::value_error(std::string(Info::kName) + ": takes " + std::to_string(kTensors) + " tensors, " +
                          std::to_string(kAttrs) + " attributes and " + std::to_string(Arrays::size) +
                          " integer arrays, got " + std::to_string(tensors.size()) + ", " +
                          std::to_string(attrs.size()) + " and " + std::to_string(arrays.size()));
  }
  Args a;
  for (size_t i = 0; i < kTensors; ++i) {
    const moegrad::TensorArg<Args>& arg = Info::kTensors[i];
    if (query && arg.role == moegrad::ArgRole::kOutput) continue;
    if (!tensors[i] && !arg.is_optional()) {
      throw py::value_error(std::string(Info::kName) + ": " + arg.name + " is required but is null");
    }
    const std::optional<moegrad::TensorView> v = ToView(tensors[i], arg.name);
    arg.Set(a, v ? &*v : nullptr);
  }
  for (size_t i = 0; i < kAttrs; ++i) Info::kAttrs[i].Set(a, attrs[i]);
  for (size_t i = 0; i < arrays.size(); ++i) Arrays::Get()[i].Set(a, arrays[i] ? &*arrays[i] : nullptr);
  return a;
}

// For the operator described by `info`: _C.<name>(tensors, attrs), the call, and _C.<name>_outputs(tensors,
// attrs), its output query: {output name: (dtype code, sizes), or None when the call does not write it}, or
// ValueError with the library's message. _C.OPS[name] and _C.INFO[name] describe it.
template <typename Args>
void DefineOperator(py::module_& m, py::dict& ops, py::dict& infos, moegrad::OpInfo<Args> info) {
  using Info = decltype(info);
  std::string name = Info::kKey;
  for (char& ch : name) ch = ch == '-' ? '_' : ch;
  py::list tensor_names, attr_names, inputs, outputs, required, flags, arrays;
  for (const auto& t : Info::kTensors) {
    tensor_names.append(t.name);
    (t.role == moegrad::ArgRole::kInput ? inputs : outputs).append(t.name);
    if (!t.is_optional()) required.append(t.name);
  }
  for (const auto& a : Info::kAttrs) {
    attr_names.append(a.name);
    if (a.flag != nullptr) flags.append(a.name);
  }
  using Arrays = moegrad::IntArraysOf<Args>;
  for (size_t i = 0; i < Arrays::size; ++i) arrays.append(Arrays::Get()[i].name);
  ops[py::str(name)] = py::make_tuple(tensor_names, attr_names);
  py::dict d;
  d["name"] = Info::kName;
  d["inputs"] = inputs;
  d["outputs"] = outputs;
  d["required"] = required;
  d["flags"] = flags;
  d["arrays"] = arrays;
  infos[py::str(name)] = d;
  m.def(
      name.c_str(),
      [](const std::vector<OptDesc>& tensors, const std::vector<int64_t>& attrs, const std::vector<OptInts>& arrays) {
        const Args a = ToArgs<Args>(tensors, attrs, arrays, false);
        RunReleased([&] { return Info::kRun(a); });
      },
      py::arg("tensors"), py::arg("attrs"), py::arg("arrays") = std::vector<OptInts>(),
      (std::string(Info::kName) + " through the C++ API: tensors and attributes in the order of _C.OPS['" + name +
       "']").c_str());
  m.def(
      (name + "_outputs").c_str(),
      [](const std::vector<OptDesc>& tensors, const std::vector<int64_t>& attrs, const std::vector<OptInts>& arrays) {
        const Args a = ToArgs<Args>(tensors, attrs, arrays, true);
        std::vector<moegrad::OutputSpec> specs;
        const moegrad::Status status = Info::kInfer(a, &specs);
        if (!status.ok()) throw py::value_error(status.message());
        py::dict result;
        for (const moegrad::OutputSpec& spec : specs) {
          if (!spec.written) {
            result[spec.name] = py::none();
            continue;
          }
          py::tuple sizes(spec.rank);
          for (int d = 0; d < spec.rank; ++d) sizes[d] = spec.sizes[d];
          result[spec.name] = py::make_tuple(static_cast<int32_t>(spec.dtype), sizes);
        }
        return result;
      },
      py::arg("tensors"), py::arg("attrs"), py::arg("arrays") = std::vector<OptInts>(),
      (std::string(Info::kName) + "'s output query (phase one without the outputs; their entries in tensors are "
       "ignored): {output: (dtype code, sizes) or None when not written}").c_str());
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "moegrad operators on raw strided CPU tensors (data_ptr, dtype code, sizes, strides)";

  py::dict dtypes;
  using moegrad::DType;
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kInt8, DType::kInt32, DType::kUInt8, DType::kInt16,
                  DType::kUInt16, DType::kUInt32, DType::kInt64, DType::kUInt64, DType::kFloat64, DType::kBool,
                  DType::kBFloat16}) {
    dtypes[moegrad::DTypeName(t)] = static_cast<int32_t>(t);
  }
  m.attr("DTYPES") = dtypes;

  m.def("version", &moegrad::Version);
  m.def("simd_target", &moegrad::SimdTarget);
  m.def("num_threads", &moegrad::NumThreads);
  m.def("set_num_threads", [](int n) {
    if (n < 0) throw py::value_error("moegrad: set_num_threads(" + std::to_string(n) + "): n must be >= 0");
    moegrad::SetNumThreads(n);
  }, py::arg("n"));

  py::dict ops, infos;
  moegrad::ForEachOp([&](auto info) { DefineOperator(m, ops, infos, info); });
  m.attr("OPS") = ops;
  m.attr("INFO") = infos;
}
