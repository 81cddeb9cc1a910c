#include "kharness/dtype.hpp"

#include <array>

namespace kharness {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
  bool floating;
};

constexpr std::array<DTypeInfo, 11> kDTypes = {{
    {DType::kFloat32, "float32", 4, true},
    {DType::kFloat16, "float16", 2, true},
    {DType::kBFloat16, "bfloat16", 2, true},
    {DType::kFloat8E4M3, "float8_e4m3fn", 1, true},
    {DType::kFloat8E5M2, "float8_e5m2", 1, true},
    {DType::kInt64, "int64", 8, false},
    {DType::kInt32, "int32", 4, false},
    {DType::kInt16, "int16", 2, false},
    {DType::kInt8, "int8", 1, false},
    {DType::kUInt8, "uint8", 1, false},
    {DType::kBool, "bool", 1, false},
}};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  return kDTypes[0];  // unreachable: every enumerator is in the table
}

}  // namespace

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& entry : kDTypes) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

std::string_view dtype_name(DType dtype) { return info(dtype).name; }
std::size_t dtype_size(DType dtype) { return info(dtype).size; }
bool is_floating(DType dtype) { return info(dtype).floating; }

std::string dtype_names() {
  std::string out;
  for (const auto& entry : kDTypes) {
    if (!out.empty()) out += ", ";
    out += entry.name;
  }
  return out;
}

}  // namespace kharness
