// Tensor maps, PDL and cooperative launches in plans (docs/plans.md#tensor-maps): parsing, the
// rules of cuTensorMapEncodeTiled checked per workload on the CPU, the parameter check against the
// compiled kernel, and a real NVRTC compile of a kernel that takes a __grid_constant__ map.
#include "kharness/tensor_map.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kharness/compile.hpp"
#include "kharness/definition.hpp"
#include "kharness/error.hpp"
#include "kharness/rules.hpp"
#include "kharness/solution.hpp"

namespace kharness {
namespace {

// A GEMM-shaped definition: A [M, K] fp16, B [N, K] fp16, C [M, N] fp16, and an odd-K tensor.
Definition gemm_definition() {
  return parse_definition(nlohmann::ordered_json::parse(R"~({
    "name": "gemm_test", "op_type": "gemm",
    "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 256},
             "K": {"type": "const", "value": 512}, "J": {"type": "const", "value": 100}},
    "inputs": {"A": {"shape": ["M", "K"], "dtype": "float16"},
               "B": {"shape": ["N", "K"], "dtype": "float16"},
               "Q": {"shape": ["M", "J"], "dtype": "float16"},
               "S": {"shape": ["M", "K"], "dtype": "float8_e4m3fn"}},
    "outputs": {"C": {"shape": ["M", "N"], "dtype": "float16"}}
  })~"),
                          "gemm_test");
}

std::vector<Workload> workloads(const Definition& d, const std::vector<int>& ms) {
  std::vector<Workload> out;
  for (int m : ms) {
    out.push_back(parse_workload(
        nlohmann::json{{"uuid", "wl-" + std::to_string(m)}, {"axes", {{"M", m}}}, {"inputs", {}}},
        d, "test"));
  }
  return out;
}

// One launch whose first argument is the map `maps` declares as "tm".
LaunchPlan map_plan(const std::string& map, const std::string& extra = "") {
  return parse_plan(nlohmann::json::parse(R"~({"launches":[{"kernel":"k","grid":[1],"block":[128],
      "tensor_maps": {"tm": )~" + map + R"~(}, "args":[{"tensor_map":"tm"},"C"])~" +
                                          extra + "}]" + R"~(, "workspace_bytes": "M * 1024"})~"),
                    "plan.json");
}

std::vector<RuleViolation> rules(const std::string& map, const std::vector<int>& ms = {1, 256}) {
  auto d = gemm_definition();
  return check_plan_rules(map_plan(map), d, workloads(d, ms));
}

std::string messages(const std::vector<RuleViolation>& v) {
  std::string out;
  for (const auto& r : v) out += r.rule + ": " + r.message + "\n";
  return out;
}

TEST(TensorMapPlan, GoodMapsPass) {
  EXPECT_TRUE(rules(R"({"tensor": "A", "box": [128, 64], "swizzle": "128B"})").empty());
  EXPECT_TRUE(rules(R"({"tensor": "B", "box": ["N / 2", 32], "swizzle": "64B",
                        "l2_promotion": "256B", "oob_fill": "nan"})")
                  .empty());
  EXPECT_TRUE(rules(R"({"tensor": "S", "box": [64, 128], "swizzle": "128B"})").empty());
  // A 3-D view of A ([M, K/64, 64]) and a map over a workspace region.
  EXPECT_TRUE(
      rules(R"({"tensor": "A", "shape": ["M", "K / 64", 64], "box": [64, 1, 64]})").empty());
  EXPECT_TRUE(rules(R"({"tensor": "workspace", "dtype": "float32", "shape": ["M", 128],
                        "offset_bytes": "M * 512", "box": [16, 32]})")
                  .empty());
}

TEST(TensorMapPlan, ParsedGeometryIsInnermostFirst) {
  auto d = gemm_definition();
  auto p = map_plan(R"({"tensor": "A", "box": [128, 64], "swizzle": "128B"})");
  ASSERT_EQ(p.launches[0].tensor_maps.size(), 1u);
  auto g = resolve_tensor_map(p.launches[0].tensor_maps[0], d,
                              {{"M", 300}, {"N", 256}, {"K", 512}, {"J", 100}}, 0);
  EXPECT_EQ(g.rank, 2u);
  EXPECT_EQ(g.dims[0], 512u);  // K
  EXPECT_EQ(g.dims[1], 300u);  // M
  EXPECT_EQ(g.strides_bytes[0], 1024u);
  EXPECT_EQ(g.box[0], 64u);
  EXPECT_EQ(g.box[1], 128u);
  EXPECT_EQ(g.element_strides[0], 1u);
  EXPECT_EQ(g.extent_bytes, 300u * 512u * 2u);
}

// The layout over the axes (what the exported FlashInfer-Bench launcher writes as C++) is what
// resolve_tensor_map evaluates: the same numbers for every workload, for a tensor's own shape, a
// strided view and a workspace region, with the driver's enumerators.
TEST(TensorMapPlan, LayoutIsWhatResolveEvaluates) {
  auto d = gemm_definition();
  const char* maps[] = {
      R"({"tensor": "S", "box": [64, 128], "swizzle": "128B", "l2_promotion": "256B"})",
      R"({"tensor": "A", "shape": ["M", "K / 64", 64], "strides": ["K", 64], "box": [64, 1, 64],
          "oob_fill": "nan"})",
      R"({"tensor": "workspace", "dtype": "float32", "shape": ["M", 128],
          "offset_bytes": "M * 512", "box": [16, 32], "element_strides": [1, 2]})"};
  for (const char* map : maps) {
    const LaunchPlan plan = map_plan(map);
    const TensorMapSpec& spec = plan.launches[0].tensor_maps[0];
    TensorMapLayout l = describe_tensor_map(spec, d);
    for (int m : {1, 77, 4096}) {
      Bindings axes = {{"M", m}, {"N", 256}, {"K", 512}, {"J", 100}};
      TensorMapGeometry g = resolve_tensor_map(spec, d, axes, std::int64_t{m} * 1024);
      ASSERT_EQ(l.rank, g.rank) << map;
      EXPECT_EQ(l.dtype, g.dtype);
      EXPECT_EQ(l.encoding.data_type.value, g.encoding.data_type.value);
      EXPECT_EQ(static_cast<std::uint64_t>(l.offset_bytes.eval(axes)), g.offset_bytes) << map;
      ASSERT_EQ(l.strides.size() + 1, l.rank);
      for (unsigned i = 0; i < l.rank; ++i) {
        EXPECT_EQ(static_cast<std::uint64_t>(l.dims[i].eval(axes)), g.dims[i]) << map << " " << i;
        EXPECT_EQ(static_cast<std::uint32_t>(l.box[i].eval(axes)), g.box[i]) << map;
        EXPECT_EQ(static_cast<std::uint32_t>(l.element_strides[i].eval(axes)), g.element_strides[i])
            << map;
        if (i > 0) {
          EXPECT_EQ(static_cast<std::uint64_t>(l.strides[i - 1].eval(axes)) * l.element_bytes,
                    g.strides_bytes[i - 1])
              << map << " " << i;
        }
      }
    }
  }
  TensorMapLayout fp8 = describe_tensor_map(map_plan(maps[0]).launches[0].tensor_maps[0], d);
  EXPECT_STREQ(fp8.encoding.data_type.name, "CU_TENSOR_MAP_DATA_TYPE_UINT8");
  EXPECT_STREQ(fp8.encoding.swizzle.name, "CU_TENSOR_MAP_SWIZZLE_128B");
  EXPECT_EQ(fp8.encoding.swizzle.value, 3);
  EXPECT_STREQ(fp8.encoding.l2_promotion.name, "CU_TENSOR_MAP_L2_PROMOTION_L2_256B");
  EXPECT_EQ(fp8.dims[0].text(), "K");
  EXPECT_EQ(fp8.dims[1].text(), "M");
  EXPECT_EQ(fp8.strides[0].text(), "K");
  TensorMapLayout nan = describe_tensor_map(map_plan(maps[1]).launches[0].tensor_maps[0], d);
  EXPECT_STREQ(nan.encoding.oob_fill.name, "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA");
  EXPECT_STREQ(nan.encoding.data_type.name, "CU_TENSOR_MAP_DATA_TYPE_FLOAT16");
}

// Each bad map is refused on the CPU with the field named, before anything runs.
TEST(TensorMapPlan, BadMapsAreRefusedWithTheField) {
  struct Case {
    const char* map;
    const char* field;
    const char* says;
  };
  const Case cases[] = {
      {R"({"tensor": "A", "box": [512, 64]})", "box[0]", "above 256"},
      {R"({"tensor": "A", "box": [128, 128], "swizzle": "128B"})", "swizzle",
       "wider than the 128-byte swizzle span (64 elements of 2 bytes"},
      {R"({"tensor": "S", "box": [64, 256], "swizzle": "128B"})", "swizzle",
       "(128 elements of 1 byte at most)"},
      {R"({"tensor": "S", "box": [512, 64]})", "box[0]", "above 256"},
      {R"({"tensor": "A", "box": [128, 4]})", "box[1]", "multiple of 16"},
      {R"({"tensor": "Q", "box": [64, 8]})", "shape", "stride of 200 bytes"},
      {R"({"tensor": "A", "offset_bytes": 8, "box": [64, 64]})", "offset_bytes", "16-byte aligned"},
      {R"({"tensor": "A", "offset_bytes": 1024, "box": [64, 64]})", "offset_bytes",
       "may not reach outside its tensor"},
      {R"({"tensor": "A", "shape": ["M", "2 * K"], "box": [64, 64]})", "shape",
       "may not reach outside its tensor"},
      {R"({"tensor": "A", "shape": ["M", 64], "strides": ["K + 8"], "box": [64, 64]})", "shape",
       "may not reach outside"},
      {R"({"tensor": "workspace", "dtype": "float16", "shape": ["M", 1024], "box": [8, 64]})",
       "shape", "may not reach outside"},
      {R"({"tensor": "S", "box": [64, 64], "oob_fill": "nan"})", "oob_fill", "floating type"},
      {R"({"tensor": "D", "box": [64, 64]})", "tensor", "not a tensor of gemm_test"},
      {R"({"tensor": "A", "box": ["L", 64]})", "tensor_maps", "L"},
      {R"({"tensor": "A", "shape": ["M", "K"], "box": [64, 64], "element_strides": [1, 9]})",
       "element_strides[1]", "above 8"},
  };
  for (const auto& c : cases) {
    auto v = rules(c.map);
    ASSERT_FALSE(v.empty()) << c.map;
    EXPECT_EQ(v[0].rule, "tensor_map") << c.map;
    EXPECT_NE(v[0].message.find(std::string("tensor map 'tm' ") + c.field + ":"), std::string::npos)
        << messages(v);
    EXPECT_NE(v[0].message.find(c.says), std::string::npos) << messages(v);
    EXPECT_NE(v[0].message.find("launch 0 (k)"), std::string::npos) << messages(v);
  }
}

// A map whose extent wraps 64 bits would pass the bounds rule with a small wrapped extent:
// dimension 0 of 2^28 + 1 rows 2^36 bytes apart spans exactly 2^64 bytes, which wraps to 0, and
// the remaining 128 bytes fit in A. The arithmetic is checked and the map refused.
TEST(TensorMapPlan, ExtentThatOverflowsIsRefused) {
  auto v = rules(R"({"tensor": "A", "shape": [268435457, 64], "strides": [34359738368],
                     "box": [64, 64]})");
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v[0].rule, "tensor_map");
  EXPECT_NE(v[0].message.find("tensor map 'tm' shape[0]:"), std::string::npos) << messages(v);
  EXPECT_NE(v[0].message.find("the extent of dimension 0"), std::string::npos) << messages(v);
  EXPECT_NE(v[0].message.find("does not fit 64 bits"), std::string::npos) << messages(v);
  // The implicit strides of a huge shape: 2^32 x 2^32 elements of 2 bytes overflow too.
  v = rules(R"({"tensor": "A", "shape": [4294967296, 4294967296, 4294967296],
                "box": [1, 1, 64]})");
  ASSERT_FALSE(v.empty());
  EXPECT_NE(v[0].message.find("does not fit 64 bits"), std::string::npos) << messages(v);
  EXPECT_NE(v[0].message.find("tensor map 'tm' shape"), std::string::npos) << messages(v);
  // The same geometry at an honest size passes the arithmetic and meets the bounds rule.
  v = rules(R"({"tensor": "A", "shape": [3, 64], "strides": [34359738368], "box": [64, 64]})");
  ASSERT_FALSE(v.empty());
  EXPECT_NE(v[0].message.find("may not reach outside"), std::string::npos) << messages(v);
}

TEST(TensorMapPlan, ParseErrorsNameTheField) {
  auto fails = [](const std::string& plan_text, const std::string& field) {
    try {
      parse_plan(nlohmann::json::parse(plan_text), "plan.json");
      ADD_FAILURE() << "accepted: " << plan_text;
    } catch (const Error& e) {
      EXPECT_NE(e.message().find(field), std::string::npos) << e.message();
    }
  };
  const std::string head = R"({"launches":[{"kernel":"k","grid":[1],"block":[32],)";
  fails(head + R"("tensor_maps":{"tm":{"tensor":"A","box":[64],"swizzle":"256B"}},
        "args":[{"tensor_map":"tm"}]}]})",
        "plan.json: launches[0].tensor_maps.tm.swizzle");
  fails(head + R"("tensor_maps":{"tm":{"tensor":"A"}},"args":[]}]})",
        "launches[0].tensor_maps.tm.box");
  fails(head + R"("tensor_maps":{"tm":{"tensor":"A","box":[64],"swizle":"128B"}},"args":[]}]})",
        "launches[0].tensor_maps.tm");
  fails(head + R"("args":[{"tensor_map":"nope"}]}]})", "launches[0].args[0].tensor_map");
  fails(head + R"("tensor_maps":{"tm":{"tensor":"A","box":[64, 64],"strides":[1, 2]}},
        "args":[]}]})",
        "launches[0].tensor_maps.tm.strides");
  fails(head + R"("pdl": true, "args":[]}]})", "launches[0].pdl");
  fails(head + R"("cooperative": 1, "args":[]}]})", "launches[0].cooperative");
}

TEST(TensorMapPlan, PdlAndCooperativeParse) {
  auto p = parse_plan(nlohmann::json::parse(R"({"launches":[
      {"kernel":"a","grid":[1],"block":[32],"cooperative":true,"args":[]},
      {"kernel":"b","grid":[1],"block":[32],"pdl":true,"args":[]}]})"),
                      "plan.json");
  EXPECT_TRUE(p.launches[0].cooperative);
  EXPECT_FALSE(p.launches[0].pdl);
  EXPECT_TRUE(p.launches[1].pdl);
  EXPECT_FALSE(p.launches[1].cooperative);
}

// The map argument must meet a `const __grid_constant__ CUtensorMap` parameter.
TEST(TensorMapPlan, ParameterMustBeA128ByteAlignedMap) {
  auto d = gemm_definition();
  auto p = map_plan(R"({"tensor": "A", "box": [128, 64]})");
  KernelInfo good{"k", "k", {{"b8", 128, 64}, {"u64", 8, 8}}};
  EXPECT_TRUE(check_kernel_interface(p, &d, {good}).empty());
  KernelInfo pointer{"k", "k", {{"u64", 8, 8}, {"u64", 8, 8}}};
  auto v = check_kernel_interface(p, &d, {pointer});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rule, "param_mismatch");
  EXPECT_NE(v[0].message.find("arg 0 '{tensor_map: tm}' is a tensor map"), std::string::npos)
      << v[0].message;
  KernelInfo unaligned{"k", "k", {{"b8", 128, 8}, {"u64", 8, 8}}};
  EXPECT_EQ(check_kernel_interface(p, &d, {unaligned}).size(), 1u);
  // A tensor passed where the kernel takes a map is refused too.
  auto wrong = parse_plan(nlohmann::json::parse(R"({"launches":[{"kernel":"k","grid":[1],
      "block":[32],"args":["A","C"]}]})"),
                          "plan.json");
  EXPECT_EQ(check_kernel_interface(wrong, &d, {good}).size(), 1u);
}

// NVRTC compiles a kernel that takes CUtensorMap maps by __grid_constant__ value; its PTX
// parameters are what the interface check expects.
TEST(TensorMapPlan, CompiledGridConstantMapMatches) {
  const std::string source = R"(/* kharness
{"launches":[{"kernel":"tma_copy","grid":[1],"block":[128],
  "tensor_maps":{"a_map":{"tensor":"A","box":[64,64],"swizzle":"128B"}},
  "args":[{"tensor_map":"a_map"},"C","M"]}]}
*/
struct alignas(64) CUtensorMap {  // cuda.h's, which NVRTC cannot include
  unsigned long long opaque[16];
};
#include <cuda_fp16.h>
extern "C" __global__ void tma_copy(const __grid_constant__ CUtensorMap a_map, __half* C, int M) {
  if (threadIdx.x == 0 && M < 0) asm volatile("prefetch.tensormap [%0];" :: "l"(&a_map));
}
)";
  Solution s = parse_single_file_solution(source, "tma.cu");
  CompileOptions options;
  options.arch = "sm_90a";
  options.use_cache = false;
  auto d = gemm_definition();
  auto w = workloads(d, {64});
  CompileResult r = compile_solution(s, &d, &w, options);
  ASSERT_EQ(r.status, Status::kPassed) << r.log;
  ASSERT_EQ(r.kernels.size(), 1u);
  ASSERT_EQ(r.kernels[0].params.size(), 3u);
  EXPECT_EQ(r.kernels[0].params[0].size, 128u);
  EXPECT_GE(r.kernels[0].params[0].align, 64u);
}

}  // namespace
}  // namespace kharness
