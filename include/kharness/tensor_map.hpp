// Tensor maps in launch plans (docs/plans.md#tensor-maps): a plan declares, per launch, TMA
// descriptors over a tensor of the definition or a region of the workspace; the harness resolves
// them for each workload (this header: the numbers and every rule cuTensorMapEncodeTiled and the
// harness impose) and encodes them on the host (device/plan_launcher.cpp) into the 128-byte
// `__grid_constant__ const CUtensorMap` parameter the kernel takes.
//
// A map is written outermost dimension first, like the definition's shapes:
//   "tensor_maps": { "A_tma": { "tensor": "A", "box": [128, 64], "swizzle": "128B" } }
// over A [M, K] is a rank-2 map with dims {K, M} and box {64, 128} in the driver's order
// (innermost first). Optional fields: "dtype" (default the tensor's; required over the
// workspace), "shape" and "strides" (a view: shape outermost first, strides in elements for every
// dimension but the innermost, which is contiguous), "offset_bytes", "element_strides",
// "interleave" (none|16B|32B), "l2_promotion" (none|64B|128B|256B), "oob_fill" (zero|nan).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kharness/definition.hpp"
#include "kharness/dtype.hpp"
#include "kharness/expr.hpp"

namespace kharness {

enum class TmaSwizzle { kNone, k32B, k64B, k128B };
enum class TmaInterleave { kNone, k16B, k32B };
enum class TmaL2Promotion { kNone, k64B, k128B, k256B };
enum class TmaOobFill { kZero, kNan };

struct TensorMapSpec {
  std::string name;    // what args call it: {"tensor_map": name}
  std::string tensor;  // a tensor of the definition, or "workspace"
  std::optional<DType> dtype;
  std::vector<Expr> shape;    // outermost first; empty: the tensor's own shape
  std::vector<Expr> strides;  // elements, outermost first, rank - 1 of them; empty: contiguous
  Expr offset_bytes;          // from the tensor's (or the workspace's) base
  std::vector<Expr> box;      // outermost first, one per dimension
  std::vector<Expr> element_strides;  // outermost first; empty: all 1
  TmaSwizzle swizzle = TmaSwizzle::kNone;
  TmaInterleave interleave = TmaInterleave::kNone;
  TmaL2Promotion l2_promotion = TmaL2Promotion::kNone;
  TmaOobFill oob_fill = TmaOobFill::kZero;
  std::string where;  // "plan.json: launches[0].tensor_maps.A_tma", for messages
};

// A map that breaks a rule, with the field it breaks it in ("box[1]", "strides[0]").
class TensorMapError : public std::runtime_error {
 public:
  TensorMapError(std::string field, const std::string& message)
      : std::runtime_error(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// One enumerator of the driver's tensor-map API: its value in cuda.h and its name (core has no
// cuda.h; device/plan_launcher.cpp checks the values against it at compile time, and the exported
// FlashInfer-Bench launcher writes the names).
struct TmaEnum {
  int value = 0;
  const char* name = "";
};

// The enumerators cuTensorMapEncodeTiled takes for a map: CUtensorMapDataType,
// CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill.
struct TmaEncoding {
  TmaEnum data_type, interleave, swizzle, l2_promotion, oob_fill;
};

// A map before any workload: what cuTensorMapEncodeTiled takes, as expressions over the
// definition's axes, innermost dimension first. resolve_tensor_map evaluates it (and checks the
// rules) for kharness's own launches; the exported FlashInfer-Bench launcher (export/) writes the
// same expressions as C++, so that both encode the same map for a workload.
struct TensorMapLayout {
  std::string tensor;  // a tensor of the definition, or "workspace": the base address and region
  DType dtype = DType::kFloat16;
  std::size_t element_bytes = 0;  // tma_element_bytes(dtype)
  unsigned rank = 0;
  std::vector<Expr> dims;             // rank of them
  std::vector<Expr> strides;          // in elements, of dimensions 1..rank-1
  std::vector<Expr> box;              // rank of them
  std::vector<Expr> element_strides;  // rank of them
  Expr offset_bytes;                  // from the base of the tensor or the workspace
  TmaEncoding encoding;
};

// The map's layout over the axes. Throws TensorMapError for what needs no workload to see (a
// tensor the definition lacks, a rank outside 1..5, counts that disagree).
TensorMapLayout describe_tensor_map(const TensorMapSpec& spec, const Definition& definition);

// A map's numbers for one workload, innermost dimension first as cuTensorMapEncodeTiled takes
// them; everything in it has passed the rules.
struct TensorMapGeometry {
  DType dtype = DType::kFloat16;
  TmaEncoding encoding;
  unsigned rank = 0;
  std::array<std::uint64_t, 5> dims{};
  std::array<std::uint64_t, 4> strides_bytes{};  // of dimensions 1..rank-1
  std::array<std::uint32_t, 5> box{};
  std::array<std::uint32_t, 5> element_strides{};
  std::uint64_t offset_bytes = 0;
  std::uint64_t extent_bytes = 0;  // one past the furthest byte the map can address
};

// Parses one entry of a launch's "tensor_maps" object. Throws kharness::Error naming the field.
TensorMapSpec parse_tensor_map(const std::string& name, const nlohmann::json& j,
                               const std::string& source, const std::string& path);

// Evaluates a map for one workload and checks it against the rules of cuTensorMapEncodeTiled
// (rank 1..5, base 16-byte aligned (32 with 32-byte interleave), strides multiples of 16 bytes
// below 2^40, box 1..256 per dimension with its inner extent a multiple of 16 bytes and within
// the swizzle span, element strides 1..8, NaN fill only for floating types, 32-byte interleave
// only with the 32-byte swizzle) and against the harness's own: the map addresses nothing
// outside its tensor or the workspace. `workspace_bytes` is the plan's workspace on this
// workload. Throws TensorMapError (field, message) or ExprError from the expressions.
TensorMapGeometry resolve_tensor_map(const TensorMapSpec& spec, const Definition& definition,
                                     const Bindings& axes, std::int64_t workspace_bytes);

// The element type's encoding size for TMA (fp8 and int8 are one byte, ...); 0 when TMA has no
// type of that size.
std::size_t tma_element_bytes(DType dtype);

}  // namespace kharness
