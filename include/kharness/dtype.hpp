// Element types of operator tensors, named as in FlashInfer-Bench definitions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kharness {

enum class DType {
  kFloat32,
  kFloat16,
  kBFloat16,
  kFloat8E4M3,
  kFloat8E5M2,
  kInt64,
  kInt32,
  kInt16,
  kInt8,
  kUInt8,
  kBool,
};

std::optional<DType> parse_dtype(std::string_view name);
std::string_view dtype_name(DType dtype);
std::size_t dtype_size(DType dtype);
bool is_floating(DType dtype);
// "float32, float16, ..." for error messages.
std::string dtype_names();

}  // namespace kharness
