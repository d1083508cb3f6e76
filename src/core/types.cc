#include "src/core/types.h"

namespace moegrad::core {

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "FLOAT32";
    case DType::kFloat16: return "FLOAT16";
    case DType::kInt8: return "INT8";
    case DType::kInt32: return "INT32";
    case DType::kUInt8: return "UINT8";
    case DType::kInt16: return "INT16";
    case DType::kUInt16: return "UINT16";
    case DType::kUInt32: return "UINT32";
    case DType::kInt64: return "INT64";
    case DType::kUInt64: return "UINT64";
    case DType::kFloat64: return "DOUBLE";
    case DType::kBool: return "BOOL";
    case DType::kBFloat16: return "BFLOAT16";
  }
  return "UNKNOWN";
}

}  // namespace moegrad::core
