// moegrad._C: the Python face of the C++ API (include/moegrad/ops.hpp), without any dependency on libtorch.
//
// Tensors arrive as (data_ptr, dtype code, sizes, strides) tuples, strides in elements, so any framework's
// strided CPU tensor is used in place: no copy, no contiguity requirement. Outputs are allocated by the
// caller. Every rule is the library's; the only checks here are those a TensorView cannot express.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "moegrad/ops.hpp"

namespace py = pybind11;

namespace {

using Desc = std::tuple<uintptr_t, int32_t, std::vector<int64_t>, std::vector<int64_t>>;
using OptDesc = std::optional<Desc>;

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

  m.def("finalize_routing_v2_grad",
        [](const Desc& grad_y, const Desc& expanded_row_idx, const OptDesc& expanded_x, const OptDesc& scales,
           const OptDesc& expert_idx, const OptDesc& bias, int64_t drop_pad_mode, int64_t active_num,
           int64_t expert_num, int64_t expert_capacity, const Desc& grad_expanded_x,
           const OptDesc& grad_scales) {
          moegrad::FinalizeRoutingV2GradArgs a;
          a.grad_y = ToView(grad_y, "gradY");
          a.expanded_row_idx = ToView(expanded_row_idx, "expandedRowIdx");
          a.expanded_x = ToView(expanded_x, "expandedX");
          a.scales = ToView(scales, "scales");
          a.expert_idx = ToView(expert_idx, "expertIdx");
          a.bias = ToView(bias, "bias");
          a.drop_pad_mode = drop_pad_mode;
          a.active_num = active_num;
          a.expert_num = expert_num;
          a.expert_capacity = expert_capacity;
          a.grad_expanded_x = ToView(grad_expanded_x, "gradExpandedXOut");
          a.grad_scales = ToView(grad_scales, "gradScalesOut");
          RunReleased([&] { return moegrad::FinalizeRoutingV2Grad(a); });
        },
        py::arg("grad_y"), py::arg("expanded_row_idx"), py::arg("expanded_x"), py::arg("scales"),
        py::arg("expert_idx"), py::arg("bias"), py::arg("drop_pad_mode"), py::arg("active_num"),
        py::arg("expert_num"), py::arg("expert_capacity"), py::arg("grad_expanded_x"), py::arg("grad_scales"));

  m.def("token_permute_with_routing_map_grad",
        [](const Desc& permuted_token_output_grad, const OptDesc& permuted_probs_output_grad,
           const Desc& sorted_indices, const OptDesc& routing_map, int64_t num_experts, int64_t tokens_num,
           bool drop_and_pad, const Desc& tokens_grad, const OptDesc& probs_grad) {
          moegrad::TokenPermuteWithRoutingMapGradArgs a;
          a.permuted_token_output_grad = ToView(permuted_token_output_grad, "permutedTokenOutputGrad");
          a.permuted_probs_output_grad = ToView(permuted_probs_output_grad, "permutedProbsOutputGrad");
          a.sorted_indices = ToView(sorted_indices, "sortedIndices");
          a.routing_map = ToView(routing_map, "routingMap");
          a.num_experts = num_experts;
          a.tokens_num = tokens_num;
          a.drop_and_pad = drop_and_pad;
          a.tokens_grad = ToView(tokens_grad, "tokensGradOut");
          a.probs_grad = ToView(probs_grad, "probsGradOut");
          RunReleased([&] { return moegrad::TokenPermuteWithRoutingMapGrad(a); });
        },
        py::arg("permuted_token_output_grad"), py::arg("permuted_probs_output_grad"), py::arg("sorted_indices"),
        py::arg("routing_map"), py::arg("num_experts"), py::arg("tokens_num"), py::arg("drop_and_pad"),
        py::arg("tokens_grad"), py::arg("probs_grad"));

  m.def("finalize_routing_v2",
        [](const Desc& expanded_x, const Desc& expanded_row_idx, const OptDesc& x1, const OptDesc& x2,
           const OptDesc& bias, const OptDesc& scales, const OptDesc& expert_idx, int64_t drop_pad_mode,
           const Desc& out) {
          moegrad::FinalizeRoutingV2Args a;
          a.expanded_x = ToView(expanded_x, "expandedX");
          a.expanded_row_idx = ToView(expanded_row_idx, "expandedRowIdx");
          a.x1 = ToView(x1, "x1");
          a.x2 = ToView(x2, "x2");
          a.bias = ToView(bias, "bias");
          a.scales = ToView(scales, "scales");
          a.expert_idx = ToView(expert_idx, "expertIdx");
          a.drop_pad_mode = drop_pad_mode;
          a.out = ToView(out, "out");
          RunReleased([&] { return moegrad::FinalizeRoutingV2(a); });
        },
        py::arg("expanded_x"), py::arg("expanded_row_idx"), py::arg("x1"), py::arg("x2"), py::arg("bias"),
        py::arg("scales"), py::arg("expert_idx"), py::arg("drop_pad_mode"), py::arg("out"));

  m.def("token_permute_with_routing_map",
        [](const Desc& tokens, const Desc& routing_map, const OptDesc& probs, int64_t num_out_tokens,
           bool drop_and_pad, const Desc& permute_tokens, const OptDesc& permute_probs,
           const Desc& sorted_indices) {
          moegrad::TokenPermuteWithRoutingMapArgs a;
          a.tokens = ToView(tokens, "tokens");
          a.routing_map = ToView(routing_map, "routingMap");
          a.probs = ToView(probs, "probs");
          a.num_out_tokens = num_out_tokens;
          a.drop_and_pad = drop_and_pad;
          a.permute_tokens = ToView(permute_tokens, "permuteTokensOut");
          a.permute_probs = ToView(permute_probs, "permuteProbsOut");
          a.sorted_indices = ToView(sorted_indices, "sortedIndicesOut");
          RunReleased([&] { return moegrad::TokenPermuteWithRoutingMap(a); });
        },
        py::arg("tokens"), py::arg("routing_map"), py::arg("probs"), py::arg("num_out_tokens"),
        py::arg("drop_and_pad"), py::arg("permute_tokens"), py::arg("permute_probs"), py::arg("sorted_indices"));
}
