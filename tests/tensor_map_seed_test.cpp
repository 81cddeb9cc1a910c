// The tensor maps kharness encodes for the shipped sm_90a seeds, for every workload of their
// operators, are the ones it encoded before the map's layout became a description over the axes
// (describe_tensor_map, which the exported FlashInfer-Bench launcher also writes as C++). The
// expected numbers come from the earlier resolver's arithmetic, kept here in a few lines: shape
// outermost first (the tensor's own or the plan's view), contiguous strides as products of the
// dimensions inside, then everything reversed for the driver; the data type from the dtype as the
// plan launcher chose it. Every argument cuTensorMapEncodeTiled takes is compared, so the map the
// GPU receives is the same byte for byte.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kharness/definition.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"
#include "kharness/tensor_map.hpp"
#include "kharness/tune.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

// cuTensorMapEncodeTiled's arguments apart from the base address (the tensor's, plus offset).
struct EncodeArgs {
  int data_type = 0, interleave = 0, swizzle = 0, l2 = 0, fill = 0;
  unsigned rank = 0;
  std::array<std::uint64_t, 5> dims{};
  std::array<std::uint64_t, 4> strides_bytes{};
  std::array<std::uint32_t, 5> box{};
  std::array<std::uint32_t, 5> element_strides{};
  std::uint64_t offset_bytes = 0;
  std::uint64_t extent_bytes = 0;
};

bool operator==(const EncodeArgs& a, const EncodeArgs& b) {
  return a.data_type == b.data_type && a.interleave == b.interleave && a.swizzle == b.swizzle &&
         a.l2 == b.l2 && a.fill == b.fill && a.rank == b.rank && a.dims == b.dims &&
         a.strides_bytes == b.strides_bytes && a.box == b.box &&
         a.element_strides == b.element_strides && a.offset_bytes == b.offset_bytes &&
         a.extent_bytes == b.extent_bytes;
}

std::string show(const EncodeArgs& a) {
  std::string s =
      "type " + std::to_string(a.data_type) + " rank " + std::to_string(a.rank) + " dims";
  for (unsigned d = 0; d < a.rank; ++d) s += " " + std::to_string(a.dims[d]);
  s += " strides";
  for (unsigned d = 0; d + 1 < a.rank; ++d) s += " " + std::to_string(a.strides_bytes[d]);
  s += " box";
  for (unsigned d = 0; d < a.rank; ++d) s += " " + std::to_string(a.box[d]);
  s += " estr";
  for (unsigned d = 0; d < a.rank; ++d) s += " " + std::to_string(a.element_strides[d]);
  return s + " swizzle " + std::to_string(a.swizzle) + " l2 " + std::to_string(a.l2) + " fill " +
         std::to_string(a.fill) + " interleave " + std::to_string(a.interleave) + " offset " +
         std::to_string(a.offset_bytes) + " extent " + std::to_string(a.extent_bytes);
}

// What the plan launcher passed the driver before: cuda.h's values of the enumerators it chose.
int previous_data_type(DType d) {
  switch (d) {
    case DType::kFloat16:
      return 6;  // CU_TENSOR_MAP_DATA_TYPE_FLOAT16
    case DType::kBFloat16:
      return 9;  // BFLOAT16
    case DType::kFloat32:
      return 7;  // FLOAT32
    case DType::kInt32:
      return 3;  // INT32
    case DType::kInt64:
      return 5;  // INT64
    case DType::kInt16:
      return 1;  // UINT16
    default:
      return 0;  // UINT8: fp8, int8, uint8, bool
  }
}

// The earlier resolver's arithmetic for a map that passes the rules (the seeds' maps do).
EncodeArgs previous_encoding(const TensorMapSpec& spec, const Definition& def,
                             const Bindings& axes) {
  EncodeArgs a;
  const TensorSpec* tensor = spec.tensor == "workspace" ? nullptr : def.find_tensor(spec.tensor);
  const DType dtype = spec.dtype ? *spec.dtype : tensor->dtype;
  const std::uint64_t elem = tma_element_bytes(dtype);
  std::vector<std::uint64_t> shape;  // outermost first
  if (spec.shape.empty()) {
    for (std::int64_t v : tensor_shape(*tensor, axes))
      shape.push_back(static_cast<std::uint64_t>(v));
  } else {
    for (const Expr& e : spec.shape) shape.push_back(static_cast<std::uint64_t>(e.eval(axes)));
  }
  const std::size_t rank = shape.size();
  std::vector<std::uint64_t> strides(rank, 1);
  if (!spec.strides.empty()) {
    for (std::size_t i = 0; i + 1 < rank; ++i)
      strides[i] = static_cast<std::uint64_t>(spec.strides[i].eval(axes));
  } else {
    for (std::size_t i = rank - 1; i-- > 0;) strides[i] = strides[i + 1] * shape[i + 1];
  }
  a.rank = static_cast<unsigned>(rank);
  a.offset_bytes = static_cast<std::uint64_t>(spec.offset_bytes.eval(axes));
  std::uint64_t extent = elem;
  for (std::size_t d = 0; d < rank; ++d) {
    const std::size_t outer = rank - 1 - d;
    a.dims[d] = shape[outer];
    if (d > 0) a.strides_bytes[d - 1] = strides[outer] * elem;
    extent += (shape[outer] - 1) * strides[outer] * elem;
    a.box[d] = static_cast<std::uint32_t>(spec.box[outer].eval(axes));
    a.element_strides[d] = spec.element_strides.empty()
                               ? 1
                               : static_cast<std::uint32_t>(spec.element_strides[outer].eval(axes));
  }
  a.extent_bytes = a.offset_bytes + extent;
  a.data_type = previous_data_type(dtype);
  a.interleave = static_cast<int>(spec.interleave);
  a.swizzle = static_cast<int>(spec.swizzle);
  a.l2 = static_cast<int>(spec.l2_promotion);
  a.fill = spec.oob_fill == TmaOobFill::kNan ? 1 : 0;
  return a;
}

// What kharness resolves now and hands the driver (device/plan_launcher.cpp reads these fields).
EncodeArgs current_encoding(const TensorMapSpec& spec, const Definition& def, const Bindings& axes,
                            std::int64_t workspace_bytes) {
  const TensorMapGeometry g = resolve_tensor_map(spec, def, axes, workspace_bytes);
  EncodeArgs a;
  a.data_type = g.encoding.data_type.value;
  a.interleave = g.encoding.interleave.value;
  a.swizzle = g.encoding.swizzle.value;
  a.l2 = g.encoding.l2_promotion.value;
  a.fill = g.encoding.oob_fill.value;
  a.rank = g.rank;
  a.dims = g.dims;
  a.strides_bytes = g.strides_bytes;
  a.box = g.box;
  a.element_strides = g.element_strides;
  a.offset_bytes = g.offset_bytes;
  a.extent_bytes = g.extent_bytes;
  return a;
}

// Every map of `s` on every workload of `op`, now and before; returns how many were compared.
// A tune configuration may give a map the rules refuse on some workload (kharness rejects that
// candidate before it runs): those are not compared.
std::size_t compare_maps(const Operator& op, const Solution& s, const std::string& what) {
  std::size_t compared = 0;
  for (const Workload& w : op.workloads) {
    const Bindings axes = w.bindings(op.definition);
    const std::int64_t ws = s.plan.workspace_bytes.eval(axes);
    for (const Launch& launch : s.plan.launches) {
      for (const TensorMapSpec& spec : launch.tensor_maps) {
        EncodeArgs now;
        try {
          now = current_encoding(spec, op.definition, axes, ws);
        } catch (const TensorMapError&) {
          continue;
        }
        const EncodeArgs before = previous_encoding(spec, op.definition, axes);
        EXPECT_EQ(now, before) << what << " " << w.uuid << " map " << spec.name << "\n now    "
                               << show(now) << "\n before " << show(before);
        ++compared;
      }
    }
  }
  return compared;
}

const char* const kSm90aOperators[] = {"gemm_fp8", "gemm_n6144_k4096", "gemm_n28672_k4096",
                                       "gemm_n4096_k14336"};

TEST(TensorMapSeeds, Sm90aSeedsEncodeTheSameMapsAsBefore) {
  const OperatorRegistry registry({{testing::source_dir() / "operators", "builtin"}});
  std::size_t compared = 0;
  for (const char* name : kSm90aOperators) {
    const Operator op = registry.load(name);
    const auto seed = seed_for(op, "sm_90a");
    ASSERT_TRUE(seed.has_value()) << name;
    ASSERT_NE(seed->filename().string().find("sm_90a"), std::string::npos) << *seed;
    ASSERT_FALSE(op.workloads.empty()) << name;
    compared += compare_maps(op, load_solution(*seed), name);
  }
  // Both seeds declare two maps (the operands) and every workload of the four operators has both.
  EXPECT_GE(compared, 4u * 2u * 10u);
}

// The tune spaces of the sm_90a seeds change the boxes with the tile: every valid configuration.
TEST(TensorMapSeeds, Sm90aTuneConfigurationsEncodeTheSameMapsAsBefore) {
  const OperatorRegistry registry({{testing::source_dir() / "operators", "builtin"}});
  for (const char* name : {"gemm_fp8", "gemm_n6144_k4096"}) {
    const Operator op = registry.load(name);
    const tune::TuneProblem problem = tune::load_tune_problem(op, *seed_for(op, "sm_90a"));
    ASSERT_GT(problem.valid.size(), 1u) << name;
    std::size_t compared = 0;
    for (const tune::Config& config : problem.valid) {
      const std::string text = tune::instantiate(
          problem.seed_text, problem.seed_path.filename().string(), problem.space, config);
      const Solution s = parse_single_file_solution(text, problem.seed_path.filename().string());
      compared +=
          compare_maps(op, s, std::string(name) + " " + tune::config_text(problem.space, config));
    }
    EXPECT_GE(compared, problem.valid.size() * op.workloads.size()) << name;
  }
}

}  // namespace
}  // namespace kharness
