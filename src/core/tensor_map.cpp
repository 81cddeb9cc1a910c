#include "kharness/tensor_map.hpp"

#include <fmt/format.h>

#include <array>
#include <string>
#include <string_view>

#include "core/json_util.hpp"
#include "kharness/error.hpp"

namespace kharness {
namespace {

namespace ju = json_util;
using nlohmann::json;

constexpr std::uint64_t kMaxStrideBytes = std::uint64_t{1} << 40;
constexpr std::uint64_t kMaxDim = std::uint64_t{1} << 32;

std::vector<Expr> parse_expr_list(const json& obj, const char* key, const std::string& source,
                                  const std::string& path) {
  std::vector<Expr> out;
  auto it = obj.find(key);
  if (it == obj.end()) return out;
  std::string p = ju::join_path(path, key);
  ju::expect_type(*it, it->is_array() && !it->empty() && it->size() <= 5,
                  "an array of 1 to 5 integers or expressions", source, p);
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& e = (*it)[i];
    std::string ep = ju::index_path(p, i);
    if (e.is_number_integer()) {
      out.push_back(Expr::constant(ju::as_int(e, source, ep)));
      continue;
    }
    ju::expect_type(e, e.is_string(), "an integer or an expression string", source, ep);
    try {
      out.push_back(Expr::parse(e.get<std::string>()));
    } catch (const ExprError& error) {
      throw input_error(ju::field(source, ep), error.what());
    }
  }
  return out;
}

template <typename Enum, std::size_t N>
Enum parse_choice(const json& obj, const char* key, Enum fallback,
                  const std::array<std::pair<const char*, Enum>, N>& choices,
                  const std::string& source, const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end()) return fallback;
  std::string p = ju::join_path(path, key);
  std::string value = ju::as_string(*it, source, p);
  std::string names;
  for (const auto& [name, e] : choices) {
    if (value == name) return e;
    names += names.empty() ? name : fmt::format(", {}", name);
  }
  throw input_error(ju::field(source, p), fmt::format("'{}' is not one of: {}", value, names));
}

std::uint64_t eval_positive(const Expr& e, const Bindings& axes, const std::string& field) {
  std::int64_t v = e.eval(axes);
  if (v <= 0) throw TensorMapError(field, fmt::format("'{}' = {} is not positive", e.text(), v));
  return static_cast<std::uint64_t>(v);
}

// a * b and a + b, or a TensorMapError naming `field` when the result does not fit 64 bits: a
// wrapped extent would be small, and a map that addresses far outside its tensor would pass the
// bounds rule below.
std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const std::string& field,
                          std::string_view what) {
  std::uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw TensorMapError(field, fmt::format("{} ({} x {}) does not fit 64 bits", what, a, b));
  }
  return r;
}
std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const std::string& field,
                          std::string_view what) {
  std::uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    throw TensorMapError(field, fmt::format("{} ({} + {}) does not fit 64 bits", what, a, b));
  }
  return r;
}

unsigned swizzle_bytes(TmaSwizzle s) {
  switch (s) {
    case TmaSwizzle::k32B:
      return 32;
    case TmaSwizzle::k64B:
      return 64;
    case TmaSwizzle::k128B:
      return 128;
    default:
      return 0;
  }
}

// The driver's enumerators for a map, in cuda.h's order (device/plan_launcher.cpp checks them).
// fp8, int8, uint8 and bool travel as bytes, int16 as 16-bit words: TMA copies, it never converts.
TmaEncoding tma_encoding(const TensorMapSpec& spec, DType dtype) {
  TmaEncoding e;
  switch (dtype) {
    case DType::kFloat16:
      e.data_type = {6, "CU_TENSOR_MAP_DATA_TYPE_FLOAT16"};
      break;
    case DType::kBFloat16:
      e.data_type = {9, "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16"};
      break;
    case DType::kFloat32:
      e.data_type = {7, "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"};
      break;
    case DType::kInt32:
      e.data_type = {3, "CU_TENSOR_MAP_DATA_TYPE_INT32"};
      break;
    case DType::kInt64:
      e.data_type = {5, "CU_TENSOR_MAP_DATA_TYPE_INT64"};
      break;
    case DType::kInt16:
      e.data_type = {1, "CU_TENSOR_MAP_DATA_TYPE_UINT16"};
      break;
    default:
      e.data_type = {0, "CU_TENSOR_MAP_DATA_TYPE_UINT8"};
      break;
  }
  static constexpr std::array<TmaEnum, 3> kInterleave = {{{0, "CU_TENSOR_MAP_INTERLEAVE_NONE"},
                                                          {1, "CU_TENSOR_MAP_INTERLEAVE_16B"},
                                                          {2, "CU_TENSOR_MAP_INTERLEAVE_32B"}}};
  static constexpr std::array<TmaEnum, 4> kSwizzle = {{{0, "CU_TENSOR_MAP_SWIZZLE_NONE"},
                                                       {1, "CU_TENSOR_MAP_SWIZZLE_32B"},
                                                       {2, "CU_TENSOR_MAP_SWIZZLE_64B"},
                                                       {3, "CU_TENSOR_MAP_SWIZZLE_128B"}}};
  static constexpr std::array<TmaEnum, 4> kL2 = {{{0, "CU_TENSOR_MAP_L2_PROMOTION_NONE"},
                                                  {1, "CU_TENSOR_MAP_L2_PROMOTION_L2_64B"},
                                                  {2, "CU_TENSOR_MAP_L2_PROMOTION_L2_128B"},
                                                  {3, "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"}}};
  // The enums of tensor_map.hpp list their choices in the driver's order.
  e.interleave = kInterleave.at(static_cast<std::size_t>(spec.interleave));
  e.swizzle = kSwizzle.at(static_cast<std::size_t>(spec.swizzle));
  e.l2_promotion = kL2.at(static_cast<std::size_t>(spec.l2_promotion));
  e.oob_fill = spec.oob_fill == TmaOobFill::kNan
                   ? TmaEnum{1, "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA"}
                   : TmaEnum{0, "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"};
  return e;
}

}  // namespace

std::size_t tma_element_bytes(DType dtype) {
  switch (dtype) {
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2:
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool:
      return 1;
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt16:
      return 2;
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
  }
  return 0;
}

TensorMapSpec parse_tensor_map(const std::string& name, const json& j, const std::string& source,
                               const std::string& path) {
  ju::require_object(j, source, path);
  ju::reject_unknown_keys(j,
                          {"tensor", "dtype", "shape", "strides", "offset_bytes", "box",
                           "element_strides", "swizzle", "interleave", "l2_promotion", "oob_fill"},
                          source, path);
  TensorMapSpec spec;
  spec.name = name;
  spec.where = ju::field(source, path);
  spec.tensor = ju::as_string(ju::require(j, "tensor", source, path), source, path + ".tensor");
  if (spec.tensor.empty()) throw input_error(ju::field(source, path + ".tensor"), "empty name");
  if (auto it = j.find("dtype"); it != j.end()) {
    std::string d = ju::as_string(*it, source, path + ".dtype");
    spec.dtype = parse_dtype(d);
    if (!spec.dtype || tma_element_bytes(*spec.dtype) == 0) {
      throw input_error(
          ju::field(source, path + ".dtype"),
          fmt::format("'{}' is not a dtype TMA can load (one of: {})", d, dtype_names()));
    }
  }
  spec.shape = parse_expr_list(j, "shape", source, path);
  spec.strides = parse_expr_list(j, "strides", source, path);
  spec.box = parse_expr_list(j, "box", source, path);
  if (spec.box.empty())
    throw input_error(ju::field(source, path + ".box"), "missing required field");
  spec.element_strides = parse_expr_list(j, "element_strides", source, path);
  if (auto it = j.find("offset_bytes"); it != j.end()) {
    std::string p = path + ".offset_bytes";
    if (it->is_number_integer()) {
      spec.offset_bytes = Expr::constant(ju::as_int(*it, source, p));
    } else {
      ju::expect_type(*it, it->is_string(), "an integer or an expression string", source, p);
      try {
        spec.offset_bytes = Expr::parse(it->get<std::string>());
      } catch (const ExprError& error) {
        throw input_error(ju::field(source, p), error.what());
      }
    }
  }
  spec.swizzle = parse_choice<TmaSwizzle, 4>(j, "swizzle", TmaSwizzle::kNone,
                                             {{{"none", TmaSwizzle::kNone},
                                               {"32B", TmaSwizzle::k32B},
                                               {"64B", TmaSwizzle::k64B},
                                               {"128B", TmaSwizzle::k128B}}},
                                             source, path);
  spec.interleave = parse_choice<TmaInterleave, 3>(j, "interleave", TmaInterleave::kNone,
                                                   {{{"none", TmaInterleave::kNone},
                                                     {"16B", TmaInterleave::k16B},
                                                     {"32B", TmaInterleave::k32B}}},
                                                   source, path);
  spec.l2_promotion = parse_choice<TmaL2Promotion, 4>(j, "l2_promotion", TmaL2Promotion::kNone,
                                                      {{{"none", TmaL2Promotion::kNone},
                                                        {"64B", TmaL2Promotion::k64B},
                                                        {"128B", TmaL2Promotion::k128B},
                                                        {"256B", TmaL2Promotion::k256B}}},
                                                      source, path);
  spec.oob_fill = parse_choice<TmaOobFill, 2>(
      j, "oob_fill", TmaOobFill::kZero, {{{"zero", TmaOobFill::kZero}, {"nan", TmaOobFill::kNan}}},
      source, path);
  // Ranks that can be checked without a definition.
  std::size_t rank = spec.box.size();
  if (!spec.shape.empty() && spec.shape.size() != rank) {
    throw input_error(ju::field(source, path + ".box"),
                      fmt::format("has {} dimensions but shape has {}", rank, spec.shape.size()));
  }
  if (!spec.strides.empty() && spec.strides.size() + 1 != rank) {
    throw input_error(ju::field(source, path + ".strides"),
                      fmt::format("a rank-{} map takes {} strides (every dimension but the "
                                  "innermost, which is contiguous), got {}",
                                  rank, rank - 1, spec.strides.size()));
  }
  if (!spec.element_strides.empty() && spec.element_strides.size() != rank) {
    throw input_error(ju::field(source, path + ".element_strides"),
                      fmt::format("takes {} values (one per dimension), got {}", rank,
                                  spec.element_strides.size()));
  }
  if (spec.interleave != TmaInterleave::kNone && rank < 3) {
    throw input_error(ju::field(source, path + ".interleave"),
                      "an interleaved map has rank 3 or more");
  }
  if (spec.interleave == TmaInterleave::k32B && spec.swizzle != TmaSwizzle::k32B) {
    throw input_error(ju::field(source, path + ".swizzle"),
                      "a 32-byte interleaved map needs the 32B swizzle");
  }
  return spec;
}

TensorMapLayout describe_tensor_map(const TensorMapSpec& spec, const Definition& definition) {
  TensorMapLayout l;
  l.tensor = spec.tensor;
  const bool over_workspace = spec.tensor == "workspace";
  const TensorSpec* tensor = over_workspace ? nullptr : definition.find_tensor(spec.tensor);
  if (!over_workspace && (tensor == nullptr || tensor->is_scalar())) {
    throw TensorMapError("tensor", fmt::format("'{}' is not a tensor of {} nor 'workspace'",
                                               spec.tensor, definition.name));
  }
  if (spec.dtype) {
    l.dtype = *spec.dtype;
  } else if (tensor) {
    l.dtype = tensor->dtype;
  } else {
    throw TensorMapError("dtype", "a map over the workspace names its dtype");
  }
  l.element_bytes = tma_element_bytes(l.dtype);
  if (l.element_bytes == 0) {
    throw TensorMapError("dtype",
                         fmt::format("TMA has no element type for {}", dtype_name(l.dtype)));
  }
  // The shape, outermost first: the tensor's own axes, or the view the plan writes.
  std::vector<Expr> shape = spec.shape;
  if (shape.empty()) {
    if (!tensor) throw TensorMapError("shape", "a map over the workspace names its shape");
    for (const std::string& axis : *tensor->shape) shape.push_back(Expr::parse(axis));
  }
  const std::size_t rank = shape.size();
  if (rank == 0 || rank > 5) {
    throw TensorMapError("shape", fmt::format("a tensor map has rank 1 to 5, this one {}", rank));
  }
  if (spec.box.size() != rank) {
    throw TensorMapError("box", fmt::format("has {} dimensions; the map over '{}' has {}",
                                            spec.box.size(), spec.tensor, rank));
  }
  if (!spec.strides.empty() && spec.strides.size() + 1 != rank) {
    throw TensorMapError("strides", fmt::format("a rank-{} map takes {} strides", rank, rank - 1));
  }
  l.rank = static_cast<unsigned>(rank);
  // Strides in elements, outermost first; a contiguous one is the product of the dimensions
  // inside it.
  std::vector<Expr> strides = spec.strides;
  if (strides.empty() && rank > 1) {
    strides.resize(rank - 1);
    strides[rank - 2] = shape[rank - 1];
    for (std::size_t i = rank - 2; i-- > 0;) {
      strides[i] =
          Expr::parse(fmt::format("({}) * ({})", strides[i + 1].text(), shape[i + 1].text()));
    }
  }
  for (std::size_t d = 0; d < rank; ++d) {
    const std::size_t outer = rank - 1 - d;  // index in the written (outermost-first) order
    l.dims.push_back(shape[outer]);
    if (d > 0) l.strides.push_back(strides[outer]);
    l.box.push_back(spec.box[outer]);
    l.element_strides.push_back(spec.element_strides.empty() ? Expr::constant(1)
                                                             : spec.element_strides[outer]);
  }
  l.offset_bytes = spec.offset_bytes;
  l.encoding = tma_encoding(spec, l.dtype);
  return l;
}

TensorMapGeometry resolve_tensor_map(const TensorMapSpec& spec, const Definition& definition,
                                     const Bindings& axes, std::int64_t workspace_bytes) {
  const TensorMapLayout l = describe_tensor_map(spec, definition);
  TensorMapGeometry g;
  g.dtype = l.dtype;
  g.encoding = l.encoding;
  g.rank = l.rank;
  const std::size_t elem = l.element_bytes;
  const std::size_t rank = l.rank;
  // The region the map may address: the whole tensor, or the plan's workspace.
  std::uint64_t region = 0;
  if (const TensorSpec* tensor = definition.find_tensor(spec.tensor);
      tensor && spec.tensor != "workspace") {
    std::uint64_t n = 1;
    for (std::int64_t v : tensor_shape(*tensor, axes))
      n = checked_mul(n, static_cast<std::uint64_t>(v), "tensor", "its size");
    region = checked_mul(n, dtype_size(tensor->dtype), "tensor", "its size in bytes");
  } else {
    region = workspace_bytes > 0 ? static_cast<std::uint64_t>(workspace_bytes) : 0;
  }
  std::int64_t offset = l.offset_bytes.eval(axes);
  if (offset < 0) throw TensorMapError("offset_bytes", fmt::format("{} is negative", offset));
  g.offset_bytes = static_cast<std::uint64_t>(offset);
  const std::uint64_t base_align = spec.interleave == TmaInterleave::k32B ? 32 : 16;
  if (g.offset_bytes % base_align != 0) {
    throw TensorMapError("offset_bytes",
                         fmt::format("the map's base is {} bytes past an aligned allocation; TMA "
                                     "needs a {}-byte aligned base",
                                     g.offset_bytes, base_align));
  }
  // Dimensions and strides, innermost first for the driver.
  std::uint64_t extent = elem;  // one past the last byte: sum of (dim - 1) * stride + element
  for (std::size_t d = 0; d < rank; ++d) {
    const std::size_t outer = rank - 1 - d;  // index in the written (outermost-first) order
    const std::string dim_field =
        spec.shape.empty() ? std::string("tensor") : fmt::format("shape[{}]", outer);
    const std::uint64_t dim = eval_positive(l.dims[d], axes, dim_field);
    if (dim > kMaxDim) throw TensorMapError(dim_field, fmt::format("{} is above 2^32", dim));
    g.dims[d] = dim;
    const std::string stride_field =
        spec.strides.empty() ? "shape" : fmt::format("strides[{}]", outer);
    const std::string stride_what = fmt::format("the stride of dimension {}", outer);
    std::uint64_t stride_bytes = elem;
    if (d > 0) {
      std::uint64_t stride = 0;
      try {
        stride = eval_positive(l.strides[d - 1], axes, stride_field);
      } catch (const ExprError& e) {
        if (e.kind() != ExprError::Kind::kOverflow) throw;
        throw TensorMapError(stride_field, fmt::format("{} does not fit 64 bits", stride_what));
      }
      stride_bytes = checked_mul(stride, elem, stride_field, stride_what);
      if (stride_bytes % 16 != 0 || stride_bytes >= kMaxStrideBytes) {
        throw TensorMapError(
            stride_field,
            fmt::format("dimension {} has a stride of {} bytes; TMA needs a multiple of 16 "
                        "below 2^40 (pad the rows or use another layout)",
                        outer, stride_bytes));
      }
      g.strides_bytes[d - 1] = stride_bytes;
    }
    // Checked: dimensions below 2^32 times strides below 2^40 reach 2^72.
    const std::string what = fmt::format("the extent of dimension {}", outer);
    extent =
        checked_add(extent, checked_mul(dim - 1, stride_bytes, dim_field, what), dim_field, what);
  }
  g.extent_bytes = checked_add(g.offset_bytes, extent, "offset_bytes", "the map's last byte");
  if (g.extent_bytes > region) {
    throw TensorMapError(
        spec.shape.empty() && spec.strides.empty() ? "offset_bytes" : "shape",
        fmt::format("addresses {} bytes from the base of '{}', which holds {}: a map may not "
                    "reach outside its tensor or the workspace",
                    g.extent_bytes, spec.tensor, region));
  }
  const unsigned swizzle = swizzle_bytes(spec.swizzle);
  for (std::size_t d = 0; d < rank; ++d) {
    std::size_t outer = rank - 1 - d;
    std::string field = fmt::format("box[{}]", outer);
    std::uint64_t b = eval_positive(l.box[d], axes, field);
    if (b > 256) throw TensorMapError(field, fmt::format("{} is above 256, TMA's largest box", b));
    g.box[d] = static_cast<std::uint32_t>(b);
    std::string efield = fmt::format("element_strides[{}]", outer);
    std::uint64_t es = eval_positive(l.element_strides[d], axes, efield);
    if (es > 8) throw TensorMapError(efield, fmt::format("{} is above 8", es));
    g.element_strides[d] = static_cast<std::uint32_t>(es);
  }
  if (spec.interleave == TmaInterleave::kNone) {
    std::uint64_t inner = std::uint64_t{g.box[0]} * elem;
    std::string field = fmt::format("box[{}]", rank - 1);
    if (inner % 16 != 0) {
      throw TensorMapError(field, fmt::format("the innermost box is {} bytes; TMA needs a "
                                              "multiple of 16",
                                              inner));
    }
    if (swizzle != 0 && inner > swizzle) {
      throw TensorMapError(
          "swizzle", fmt::format("the innermost box is {} bytes, wider than the {}-byte swizzle "
                                 "span ({} elements of {} byte{} at most)",
                                 inner, swizzle, swizzle / elem, elem, elem == 1 ? "" : "s"));
    }
  }
  // fp8 travels as bytes (CU_TENSOR_MAP_DATA_TYPE_UINT8): no NaN of its own.
  if (spec.oob_fill == TmaOobFill::kNan && (!is_floating(g.dtype) || elem < 2)) {
    throw TensorMapError(
        "oob_fill", fmt::format("NaN fill needs a floating type, not {}", dtype_name(g.dtype)));
  }
  return g;
}

}  // namespace kharness
