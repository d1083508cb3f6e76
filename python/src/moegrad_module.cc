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
//
// For a framework layer that calls an operator many times on small tensors (moegrad.torch at decode sizes),
// <name>_call does the whole call in one round trip: it reads the input tensors' descriptors itself (the
// attributes data_ptr(), dtype, shape, stride() of a torch.Tensor, found through the Python C API: still no
// libtorch dependency), runs the output query, allocates the outputs through the framework's own allocator
// (the callable given to _C.bind_tensor_type), and runs. It handles only the regular case and returns None,
// having allocated and written nothing, for anything else (see CallOperator), so that the caller's own path
// raises its precise message; the library's errors it raises itself, as <name>_outputs does.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <Python.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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

// --- the one-round-trip call (<name>_call) ---------------------------------------------------------------

// What <name>_call needs to know of the framework, set once by _C.bind_tensor_type (references kept for the
// process's life: the module is never unloaded).
struct TensorType {
  PyObject* tensor_types = nullptr;  // a tuple of the exact types taken (e.g. torch.Tensor, torch.nn.Parameter)
  PyObject* strided = nullptr;       // the layout object of a strided tensor (torch.strided)
  PyObject* codes = nullptr;         // {framework dtype: moegrad dtype code}
  PyObject* dtypes = nullptr;        // {moegrad dtype code: framework dtype}
  PyObject* empty = nullptr;         // empty(sizes tuple, dtype=...) -> a new contiguous tensor
  PyObject* dtype_kwnames = nullptr;  // ("dtype",)
  PyObject* s_layout = nullptr;
  PyObject* s_is_cpu = nullptr;
  PyObject* s_dtype = nullptr;
  PyObject* s_shape = nullptr;
  PyObject* s_stride = nullptr;
  PyObject* s_data_ptr = nullptr;
  PyObject* s_is_neg = nullptr;
  PyObject* s_is_conj = nullptr;
};
TensorType g_type;

// A new reference as a py::object, or the pending Python error thrown.
py::object Own(PyObject* o) {
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(o);
}

// The int64 value of `o` when it is exactly an int (a bool is not) in range; false otherwise (no error set).
bool ExactInt64(PyObject* o, int64_t* value) {
  if (!PyLong_CheckExact(o)) return false;
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  *value = v;
  return true;
}

// Reads a sequence of exact ints (tuple, list, torch.Size) into `out`; false when `o` is anything else.
bool ReadInts(PyObject* o, int64_t* out, size_t capacity, size_t* n) {
  if (!PyTuple_Check(o) && !PyList_Check(o)) return false;
  const Py_ssize_t size = PySequence_Fast_GET_SIZE(o);
  if (static_cast<size_t>(size) > capacity) return false;
  PyObject** items = PySequence_Fast_ITEMS(o);
  for (Py_ssize_t i = 0; i < size; ++i) {
    if (!ExactInt64(items[i], &out[i])) return false;
  }
  *n = static_cast<size_t>(size);
  return true;
}

// The descriptor of tensor `t` as a view: false when `t` is not a plain strided CPU tensor of a known dtype,
// without lazy negation or conjugation, of rank <= kMaxRank (the caller's own checks then speak).
bool ReadTensor(PyObject* t, moegrad::TensorView* v) {
  bool taken = false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(g_type.tensor_types); ++i) {
    taken = taken || Py_TYPE(t) == reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(g_type.tensor_types, i));
  }
  if (!taken) return false;
  if (Own(PyObject_GetAttr(t, g_type.s_layout)).ptr() != g_type.strided) return false;
  if (Own(PyObject_GetAttr(t, g_type.s_is_cpu)).ptr() != Py_True) return false;
  const py::object dtype = Own(PyObject_GetAttr(t, g_type.s_dtype));
  PyObject* code = PyDict_GetItemWithError(g_type.codes, dtype.ptr());
  if (code == nullptr) {
    if (PyErr_Occurred()) throw py::error_already_set();
    return false;
  }
  if (Own(PyObject_CallMethodNoArgs(t, g_type.s_is_neg)).ptr() != Py_False ||
      Own(PyObject_CallMethodNoArgs(t, g_type.s_is_conj)).ptr() != Py_False) {
    return false;
  }
  size_t rank = 0, strides = 0;
  if (!ReadInts(Own(PyObject_GetAttr(t, g_type.s_shape)).ptr(), v->sizes, moegrad::TensorView::kMaxRank, &rank) ||
      !ReadInts(Own(PyObject_CallMethodNoArgs(t, g_type.s_stride)).ptr(), v->strides,
                moegrad::TensorView::kMaxRank, &strides) ||
      rank != strides) {
    return false;
  }
  const py::object ptr = Own(PyObject_CallMethodNoArgs(t, g_type.s_data_ptr));
  const unsigned long long address = PyLong_AsUnsignedLongLong(ptr.ptr());
  if (address == static_cast<unsigned long long>(-1) && PyErr_Occurred()) throw py::error_already_set();
  v->data = reinterpret_cast<void*>(static_cast<uintptr_t>(address));
  v->dtype = static_cast<moegrad::DType>(PyLong_AsLong(code));
  v->rank = static_cast<int>(rank);
  return true;
}

// A new output of `spec`'s dtype and sizes from the framework's allocator, and its view; false (no error set)
// when the allocator fails (e.g. more bytes than the machine has: the caller's own path words that).
bool Allocate(const moegrad::OutputSpec& spec, py::object* tensor, moegrad::TensorView* v) {
  py::tuple sizes(spec.rank);
  for (int d = 0; d < spec.rank; ++d) sizes[d] = py::int_(spec.sizes[d]);
  PyObject* dtype = PyDict_GetItemWithError(g_type.dtypes, py::int_(static_cast<int32_t>(spec.dtype)).ptr());
  if (dtype == nullptr) {
    if (PyErr_Occurred()) throw py::error_already_set();
    return false;
  }
  PyObject* args[] = {nullptr, sizes.ptr(), dtype};
  PyObject* t = PyObject_Vectorcall(g_type.empty, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, g_type.dtype_kwnames);
  if (t == nullptr) {
    PyErr_Clear();
    return false;
  }
  *tensor = py::reinterpret_steal<py::object>(t);
  if (!ReadTensor(t, v)) throw py::value_error("moegrad: the allocator returned a tensor moegrad cannot take");
  return true;
}

// _C.<name>_call(inputs, attrs, arrays=()): the operator of `Args` on `inputs` (its input tensors, None where
// absent, in the order of OpInfo<Args>::kTensors), `attrs` (ints; bools or 0 / 1 for boolean attributes) and
// `arrays` (its integer arrays, None where absent; empty: all absent). Returns the tuple of its outputs in
// kTensors order (None where the call writes none), or None, with nothing allocated or written, for a call it
// leaves to the caller's path: a wrong count of arguments, an absent required tensor, an argument of another
// Python type than the regular one, a tensor that is not a plain strided CPU tensor of a known dtype, a value
// out of range, or an allocation that fails. A call the library rejects raises ValueError with its message.
template <typename Args>
py::object CallOperator(const py::tuple& inputs, const py::tuple& attrs, const py::tuple& arrays) {
  using Info = moegrad::OpInfo<Args>;
  using Arrays = moegrad::IntArraysOf<Args>;
  constexpr size_t kTensors = std::size(Info::kTensors), kAttrs = std::size(Info::kAttrs);
  if (g_type.tensor_types == nullptr || attrs.size() != kAttrs ||
      (arrays.size() != 0 && arrays.size() != Arrays::size)) {
    return py::none();
  }
  Args a;
  size_t given = 0;
  for (size_t i = 0; i < kTensors; ++i) {
    const moegrad::TensorArg<Args>& arg = Info::kTensors[i];
    if (arg.role != moegrad::ArgRole::kInput) continue;
    if (given >= inputs.size()) return py::none();
    PyObject* t = inputs[given++].ptr();
    if (t == Py_None) {
      if (!arg.is_optional()) return py::none();
      arg.Set(a, nullptr);
      continue;
    }
    moegrad::TensorView v;
    if (!ReadTensor(t, &v)) return py::none();
    arg.Set(a, &v);
  }
  if (given != inputs.size()) return py::none();
  for (size_t i = 0; i < kAttrs; ++i) {
    PyObject* o = attrs[i].ptr();
    int64_t value = 0;
    if (Info::kAttrs[i].flag != nullptr && PyBool_Check(o)) {
      value = o == Py_True ? 1 : 0;
    } else if (!ExactInt64(o, &value) || (Info::kAttrs[i].flag != nullptr && value != 0 && value != 1)) {
      return py::none();
    }
    Info::kAttrs[i].Set(a, value);
  }
  std::vector<int64_t> lists[Arrays::size > 0 ? Arrays::size : 1];
  for (size_t i = 0; i < arrays.size(); ++i) {
    PyObject* o = arrays[i].ptr();
    if (o == Py_None) {
      Arrays::Get()[i].Set(a, nullptr);
      continue;
    }
    if (!PyTuple_Check(o) && !PyList_Check(o)) return py::none();
    lists[i].resize(PySequence_Fast_GET_SIZE(o));
    size_t n = 0;
    if (!ReadInts(o, lists[i].data(), lists[i].size(), &n)) return py::none();
    Arrays::Get()[i].Set(a, &lists[i]);
  }
  std::vector<moegrad::OutputSpec> specs;
  const moegrad::Status status = Info::kInfer(a, &specs);
  if (!status.ok()) throw py::value_error(status.message());
  size_t outputs = 0;
  for (const auto& arg : Info::kTensors) outputs += arg.role == moegrad::ArgRole::kOutput ? 1 : 0;
  py::tuple result(outputs);
  for (size_t i = 0; i < outputs; ++i) result[i] = py::none();
  for (const moegrad::OutputSpec& spec : specs) {
    size_t slot = 0, index = 0;
    for (size_t i = 0; i < kTensors; ++i) {
      if (Info::kTensors[i].role != moegrad::ArgRole::kOutput) continue;
      if (std::string_view(Info::kTensors[i].name) == spec.name) {
        index = i;
        break;
      }
      ++slot;
    }
    if (slot == outputs) throw py::value_error(std::string("moegrad: unknown output ") + spec.name);
    if (!spec.written) {
      Info::kTensors[index].Set(a, nullptr);
      continue;
    }
    py::object tensor;
    moegrad::TensorView v;
    if (!Allocate(spec, &tensor, &v)) return py::none();
    Info::kTensors[index].Set(a, &v);
    result[slot] = tensor;
  }
  RunReleased([&] { return Info::kRun(a); });
  return result;
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
  m.def((name + "_call").c_str(), &CallOperator<Args>, py::arg("inputs"), py::arg("attrs"),
        py::arg("arrays") = py::tuple(),
        (std::string(Info::kName) + " in one round trip on the framework's tensors (see _C.bind_tensor_type): "
         "inputs, attributes and integer arrays in the order of _C.INFO['" + name + "']; returns its outputs, or "
         "None for a call left to the caller").c_str());
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

  m.def(
      "bind_tensor_type",
      [](py::tuple tensor_types, py::object strided, py::dict codes, py::dict dtypes, py::object empty) {
        auto keep = [](const py::handle& o) { return o.inc_ref().ptr(); };
        auto name = [](const char* s) { return PyUnicode_InternFromString(s); };
        g_type.tensor_types = keep(tensor_types);
        g_type.strided = keep(strided);
        g_type.codes = keep(codes);
        g_type.dtypes = keep(dtypes);
        g_type.empty = keep(empty);
        g_type.dtype_kwnames = keep(py::make_tuple("dtype"));
        g_type.s_layout = name("layout");
        g_type.s_is_cpu = name("is_cpu");
        g_type.s_dtype = name("dtype");
        g_type.s_shape = name("shape");
        g_type.s_stride = name("stride");
        g_type.s_data_ptr = name("data_ptr");
        g_type.s_is_neg = name("is_neg");
        g_type.s_is_conj = name("is_conj");
      },
      py::arg("tensor_types"), py::arg("strided"), py::arg("codes"), py::arg("dtypes"), py::arg("empty"),
      "Sets what <name>_call takes: the exact tensor types, the strided layout, {dtype: code}, {code: dtype} and "
      "empty(sizes, dtype=...), e.g. (torch.Tensor, torch.nn.Parameter), torch.strided, ..., torch.empty");

  py::dict ops, infos;
  moegrad::ForEachOp([&](auto info) { DefineOperator(m, ops, infos, info); });
  m.attr("OPS") = ops;
  m.attr("INFO") = infos;
}
