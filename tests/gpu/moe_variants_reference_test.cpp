// The MoE variant families' references (TensorRT-LLM fp4-named and fp8 per-tensor MoEs with
// renormalize, Llama 4 and pre-computed routing; fp8 block-scale with renormalize routing and
// with DeepSeek routing of one group) against one plain double-precision host MoE written from
// FlashInfer-Bench's reference texts, on small shapes of the test's own definitions (the same
// tensor and axis names): 5 tokens, 8 to 32 experts, hidden 256, intermediate 128. The seed of
// each family runs on the same inputs and is held to the same bound: every output within 2^-7
// relative plus 1e-3 of the largest magnitude. Skips without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "device/driver.hpp"
#include "device/plan_launcher.hpp"
#include "gpu_test_util.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/numeric.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"

namespace kharness {
namespace {

using namespace reference_test;
namespace fs = std::filesystem;

constexpr int kT = 5, kH = 256, kI = 128, kBlock = 128;

enum class Routing { kRenorm, kLlama4, kPacked, kDeepSeek1 };
enum class Numbers { kBf16F32, kFp8PerTensor, kFp8Block };

struct Variant {
  std::string name, family;
  Routing routing;
  Numbers numbers;
  int experts, local_experts, top_k;
};

// A tensor of the test's definition: name, shape (axis names), dtype.
struct Spec {
  std::string name;
  std::vector<std::string> shape;
  const char* dtype;
};

std::string definition_json(const Variant& v, const std::vector<Spec>& inputs) {
  std::map<std::string, int> consts = {{"hidden_size", kH},
                                       {"intermediate_size", kI},
                                       {"gemm1_out_size", 2 * kI},
                                       {"top_k", v.top_k}};
  if (v.numbers == Numbers::kFp8Block) {
    consts["num_hidden_blocks"] = kH / kBlock;
    consts["num_intermediate_blocks"] = kI / kBlock;
    consts["num_gemm1_out_blocks"] = 2 * kI / kBlock;
    consts["num_local_experts"] = v.local_experts;
    if (v.routing == Routing::kDeepSeek1) consts["num_experts"] = v.experts;
  } else {
    consts["num_experts"] = v.experts;
  }
  std::string axes = "\"seq_len\": {\"type\": \"var\"}";
  for (const auto& [n, value] : consts)
    axes += ", \"" + n + "\": {\"type\": \"const\", \"value\": " + std::to_string(value) + "}";
  auto tensor = [](const Spec& s) {
    std::string shape = s.shape.empty() ? "null" : "[";
    for (std::size_t i = 0; i < s.shape.size(); ++i)
      shape += (i ? ", \"" : "\"") + s.shape[i] + (i + 1 == s.shape.size() ? "\"]" : "\"");
    return "\"" + s.name + "\": {\"shape\": " + shape + ", \"dtype\": \"" + s.dtype + "\"}";
  };
  std::string in;
  for (std::size_t i = 0; i < inputs.size(); ++i) in += (i ? ", " : "") + tensor(inputs[i]);
  return "{\"name\": \"" + v.name + "\", \"op_type\": \"moe\", \"axes\": {" + axes +
         "}, \"inputs\": {" + in + "}, \"outputs\": {" +
         tensor({"output", {"seq_len", "hidden_size"}, "bfloat16"}) + "}}";
}

struct Compiled {
  CompileResult compiled;
  std::unique_ptr<device::Module> module;
  std::unique_ptr<device::PlanLauncher> launcher;
  Solution solution;
};

void compile(const Operator& op, const fs::path& file, Compiled* out) {
  out->solution = load_solution(file);
  CompileOptions options;
  options.arch = default_arch_for_device(0);
  options.use_cache = false;
  out->compiled = compile_solution(out->solution, &op.definition, &op.workloads, options);
  ASSERT_TRUE(out->compiled.ok()) << file << "\n" << out->compiled.log;
  out->module = std::make_unique<device::Module>(out->compiled.cubin);
  out->launcher = std::make_unique<device::PlanLauncher>(out->solution.plan, out->compiled.kernels,
                                                         *out->module);
}

double silu(double x) { return x / (1 + std::exp(-x)); }

void check_variant(const Variant& v) {
  SKIP_WITHOUT_GPU();
  const fs::path dir =
      fs::temp_directory_path() / ("kharness-moe-" + v.name + "-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const bool fp8 = v.numbers != Numbers::kBf16F32;
  const bool block = v.numbers == Numbers::kFp8Block;
  const int E = block ? v.local_experts : v.experts;  // experts with weights
  const char* act_dtype = fp8 ? "float8_e4m3fn" : "bfloat16";
  const char* w_dtype = fp8 ? "float8_e4m3fn" : "float32";
  const std::string experts_axis = block ? "num_local_experts" : "num_experts";
  std::vector<Spec> inputs;
  if (v.routing == Routing::kPacked) {
    inputs.push_back({"topk_ids", {"seq_len", "top_k"}, "int32"});
  } else {
    const std::string all = v.routing == Routing::kDeepSeek1 ? "num_experts" : experts_axis;
    inputs.push_back({"routing_logits",
                      {"seq_len", all},
                      v.routing == Routing::kDeepSeek1 ? "float32" : "bfloat16"});
  }
  if (v.routing == Routing::kDeepSeek1)
    inputs.push_back({"routing_bias", {"num_experts"}, "bfloat16"});
  inputs.push_back({"hidden_states", {"seq_len", "hidden_size"}, act_dtype});
  if (block) inputs.push_back({"hidden_states_scale", {"num_hidden_blocks", "seq_len"}, "float32"});
  inputs.push_back({"gemm1_weights", {experts_axis, "gemm1_out_size", "hidden_size"}, w_dtype});
  if (block) {
    inputs.push_back({"gemm1_weights_scale",
                      {experts_axis, "num_gemm1_out_blocks", "num_hidden_blocks"},
                      "float32"});
  }
  if (v.numbers == Numbers::kFp8PerTensor) {
    inputs.push_back({"output1_scales_scalar", {"num_experts"}, "float32"});
    inputs.push_back({"output1_scales_gate_scalar", {"num_experts"}, "float32"});
  }
  inputs.push_back({"gemm2_weights", {experts_axis, "hidden_size", "intermediate_size"}, w_dtype});
  if (block) {
    inputs.push_back({"gemm2_weights_scale",
                      {experts_axis, "num_hidden_blocks", "num_intermediate_blocks"},
                      "float32"});
  }
  if (v.numbers == Numbers::kFp8PerTensor)
    inputs.push_back({"output2_scales_scalar", {"num_experts"}, "float32"});
  if (v.routing == Routing::kDeepSeek1) {
    inputs.push_back({"local_expert_offset", {}, "int32"});
    inputs.push_back({"routed_scaling_factor", {}, "float32"});
  }
  std::ofstream(dir / (v.name + ".json")) << definition_json(v, inputs);
  const Operator op = OperatorRegistry::from_environment({dir}).load(v.name);
  ASSERT_TRUE(op.reference && op.seed) << v.name;
  ASSERT_EQ(op.reference->parent_path().filename(), v.family);

  // Host values, rounded to their dtypes.
  std::mt19937_64 rng(31);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto fill = [&](std::size_t n, double scale) {
    std::vector<double> x(n);
    for (auto& y : x) y = normal(rng) * scale;
    return x;
  };
  const DType act_t = fp8 ? DType::kFloat8E4M3 : DType::kBFloat16;
  const DType w_t = fp8 ? DType::kFloat8E4M3 : DType::kFloat32;
  std::map<std::string, std::vector<std::uint8_t>> bytes;
  auto keep = [&](const std::string& name, DType t, std::vector<double> x) {
    bytes[name] = encode(t, x);
    return decode(t, bytes[name]);
  };
  const double w_std = fp8 ? 1.0 : 1.0 / std::sqrt(static_cast<double>(kH));
  const std::vector<double> hidden = keep("hidden_states", act_t, fill(kT * kH, fp8 ? 2.0 : 1.0));
  const std::vector<double> w1 =
      keep("gemm1_weights", w_t, fill(std::size_t{1} * E * 2 * kI * kH, w_std));
  const std::vector<double> w2 =
      keep("gemm2_weights", w_t, fill(std::size_t{1} * E * kH * kI, w_std));
  std::vector<double> hs_scale, w1_scale, w2_scale, s1(E, 1.0), s1g(E, 1.0), s2(E, 1.0);
  if (block) {
    auto uni = [&](std::size_t n, double lo, double hi) {
      std::vector<double> x(n);
      for (auto& y : x) y = lo + (hi - lo) * unit(rng);
      return x;
    };
    hs_scale = keep("hidden_states_scale", DType::kFloat32, uni(kH / kBlock * kT, 0.01, 0.02));
    w1_scale = keep("gemm1_weights_scale", DType::kFloat32,
                    uni(std::size_t{1} * E * (2 * kI / kBlock) * (kH / kBlock), 0.01, 0.03));
    w2_scale = keep("gemm2_weights_scale", DType::kFloat32,
                    uni(std::size_t{1} * E * (kH / kBlock) * (kI / kBlock), 0.01, 0.03));
  }
  if (v.numbers == Numbers::kFp8PerTensor) {
    for (int e = 0; e < E; ++e) {
      s1[e] = 0.005 + 0.01 * unit(rng);
      s1g[e] = 0.005 + 0.01 * unit(rng);
      s2[e] = 0.01 + 0.02 * unit(rng);
    }
    s1 = keep("output1_scales_scalar", DType::kFloat32, s1);
    s1g = keep("output1_scales_gate_scalar", DType::kFloat32, s1g);
    s2 = keep("output2_scales_scalar", DType::kFloat32, s2);
  }
  // Routing: per token, (expert, weight) pairs; the weight scales the input (Llama 4) or output.
  const bool on_input =
      v.routing == Routing::kLlama4 || (v.routing == Routing::kPacked && v.top_k == 1);
  std::vector<std::vector<std::pair<int, double>>> chosen(kT);
  const int offset = v.routing == Routing::kDeepSeek1 ? v.experts - v.local_experts : 0;
  const double scaling = 2.5;
  if (v.routing == Routing::kPacked) {
    std::vector<double> packed;
    for (int t = 0; t < kT; ++t) {
      std::vector<int> ids(v.experts);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      for (int k = 0; k < v.top_k; ++k) {
        std::uint8_t b[2];
        from_double(DType::kBFloat16, 0.1 + 0.8 * unit(rng), b);
        const std::uint32_t bits = b[0] | (b[1] << 8);
        packed.push_back(static_cast<double>((static_cast<std::uint32_t>(ids[k]) << 16) | bits));
        chosen[t].push_back({ids[k], to_double(DType::kBFloat16, b)});
      }
    }
    bytes["topk_ids"] = encode(DType::kInt32, packed);
  } else {
    const int all = v.routing == Routing::kDeepSeek1 ? v.experts : E;
    const DType lt = v.routing == Routing::kDeepSeek1 ? DType::kFloat32 : DType::kBFloat16;
    const std::vector<double> logits = keep("routing_logits", lt, fill(kT * all, 1.0));
    std::vector<double> bias(all, 0.0);
    if (v.routing == Routing::kDeepSeek1)
      bias = keep("routing_bias", DType::kBFloat16, fill(all, 0.05));
    for (int t = 0; t < kT; ++t) {
      std::vector<double> s(all), key(all);
      for (int e = 0; e < all; ++e) {
        const double l = logits[t * all + e];
        s[e] = v.routing == Routing::kRenorm ? l : 1 / (1 + std::exp(-l));
        key[e] = s[e] + bias[e];
      }
      std::vector<int> order(all);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key[a] > key[b]; });
      double z = 0;
      for (int k = 0; k < v.top_k; ++k)
        z += v.routing == Routing::kRenorm ? std::exp(s[order[k]] - s[order[0]]) : s[order[k]];
      for (int k = 0; k < v.top_k; ++k) {
        const int e = order[k];
        const double w = v.routing == Routing::kRenorm      ? std::exp(s[e] - s[order[0]]) / z
                         : v.routing == Routing::kDeepSeek1 ? s[e] / z * scaling
                                                            : s[e];
        chosen[t].push_back({e, w});
      }
    }
  }
  // The expected output.
  auto a_at = [&](int t, int h) {
    return hidden[t * kH + h] * (block ? hs_scale[(h / kBlock) * kT + t] : 1.0);
  };
  auto w1_at = [&](int e, int j, int h) {
    return w1[(std::size_t{1} * e * 2 * kI + j) * kH + h] *
           (block ? w1_scale[(std::size_t{1} * e * (2 * kI / kBlock) + j / kBlock) * (kH / kBlock) +
                             h / kBlock]
                  : 1.0);
  };
  auto w2_at = [&](int e, int h, int i) {
    return w2[(std::size_t{1} * e * kH + h) * kI + i] *
           (block ? w2_scale[(std::size_t{1} * e * (kH / kBlock) + h / kBlock) * (kI / kBlock) +
                             i / kBlock]
                  : 1.0);
  };
  std::vector<double> want(kT * kH, 0.0);
  for (int t = 0; t < kT; ++t) {
    for (const auto& [global, w] : chosen[t]) {
      const int e = global - offset;
      if (e < 0 || e >= E) continue;  // not a local expert
      std::vector<double> c(kI);
      for (int i = 0; i < kI; ++i) {
        double up = 0, gate = 0;
        for (int h = 0; h < kH; ++h) {
          const double a = a_at(t, h) * (on_input ? w : 1.0);
          up += a * w1_at(e, i, h);
          gate += a * w1_at(e, kI + i, h);
        }
        c[i] = silu(gate * s1g[e]) * (up * s1[e]);
      }
      for (int h = 0; h < kH; ++h) {
        double o = 0;
        for (int i = 0; i < kI; ++i) o += c[i] * w2_at(e, h, i);
        want[t * kH + h] += o * s2[e] * (on_input ? 1.0 : w);
      }
    }
  }
  double largest = 0;
  for (double x : want) largest = std::max(largest, std::fabs(x));
  ASSERT_GT(largest, 0.0);

  device::PrimaryContext context(0);
  device::Stream stream;
  std::map<std::string, std::unique_ptr<device::DeviceBuffer>> buffers;
  device::LaunchEnv env;
  env.definition = &op.definition;
  for (const auto& a : op.definition.axes)
    if (a.is_const) env.axes[a.name] = a.value;
  env.axes["seq_len"] = kT;
  for (auto& [name, b] : bytes) {
    auto buf = std::make_unique<device::DeviceBuffer>(b.size());
    buf->upload(b.data(), b.size());
    env.tensors[name] = buf->ptr();
    buffers[name] = std::move(buf);
  }
  if (v.routing == Routing::kDeepSeek1) {
    env.scalars = {{"local_expert_offset", nlohmann::json(offset)},
                   {"routed_scaling_factor", nlohmann::json(static_cast<float>(scaling))}};
  }
  for (const fs::path& file : {*op.reference, *op.seed}) {
    SCOPED_TRACE(file.string());
    Compiled c;
    ASSERT_NO_FATAL_FAILURE(compile(op, file, &c));
    device::DeviceBuffer out(kT * kH * 2);
    out.fill(0xFF);
    std::unique_ptr<device::DeviceBuffer> workspace;
    const std::int64_t ws = c.solution.plan.workspace_bytes.eval(env.axes);
    if (ws > 0) {
      workspace = std::make_unique<device::DeviceBuffer>(static_cast<std::size_t>(ws));
      env.workspace = workspace->ptr();
    }
    env.tensors["output"] = out.ptr();
    const device::LaunchOutcome outcome = c.launcher->launch(env, stream.get(), true);
    ASSERT_TRUE(outcome.ok) << outcome.message;
    std::vector<std::uint8_t> got_bytes(kT * kH * 2);
    out.download(got_bytes.data(), got_bytes.size());
    const std::vector<double> got = from_bf16(got_bytes);
    int bad = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double limit = std::ldexp(std::fabs(want[i]), -7) + 1e-3 * largest;
      if (!std::isfinite(got[i]) || std::fabs(got[i] - want[i]) > limit) {
        if (++bad <= 10)
          ADD_FAILURE() << "output[" << i << "]: expected " << want[i] << ", got " << got[i];
      }
    }
    EXPECT_EQ(bad, 0);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(MoeVariantsReference, TrtllmFp4NamedRenormalize) {
  check_variant({"trtllm_fp4_block_scale_moe_topk2_e8_h256_i128", "trtllm_fp4_block_scale_moe",
                 Routing::kRenorm, Numbers::kBf16F32, 8, 8, 2});
}

TEST(MoeVariantsReference, TrtllmFp4NamedLlama4) {
  check_variant({"trtllm_fp4_block_scale_moe_topk1_e8_h256_i128",
                 "trtllm_fp4_block_scale_moe_topk1", Routing::kLlama4, Numbers::kBf16F32, 8, 8, 1});
}

TEST(MoeVariantsReference, TrtllmFp4NamedRouted) {
  check_variant({"trtllm_fp4_block_scale_routed_moe_topk2_e8_h256_i128",
                 "trtllm_fp4_block_scale_routed_moe", Routing::kPacked, Numbers::kBf16F32, 8, 8,
                 2});
  check_variant({"trtllm_fp4_block_scale_routed_moe_topk1_e8_h256_i128",
                 "trtllm_fp4_block_scale_routed_moe_topk1", Routing::kPacked, Numbers::kBf16F32, 8,
                 8, 1});
}

TEST(MoeVariantsReference, TrtllmFp8PerTensor) {
  check_variant({"trtllm_fp8_per_tensor_scale_moe_topk2_e8_h256_i128",
                 "trtllm_fp8_per_tensor_scale_moe", Routing::kRenorm, Numbers::kFp8PerTensor, 8, 8,
                 2});
  check_variant({"trtllm_fp8_per_tensor_scale_moe_topk1_e8_h256_i128",
                 "trtllm_fp8_per_tensor_scale_moe_topk1", Routing::kLlama4, Numbers::kFp8PerTensor,
                 8, 8, 1});
}

TEST(MoeVariantsReference, Fp8BlockScaleRenormalize) {
  check_variant({"moe_fp8_block_scale_renorm_topk8_e16_h256_i128",
                 "moe_fp8_block_scale_renorm_topk8", Routing::kRenorm, Numbers::kFp8Block, 16, 16,
                 8});
}

TEST(MoeVariantsReference, Fp8BlockScaleDeepSeekOneGroup) {
  check_variant({"moe_fp8_block_scale_ds_routing_topk8_ng1_kg1_e32_h256_i128",
                 "moe_fp8_block_scale_ds_routing_topk8_ng1_kg1", Routing::kDeepSeek1,
                 Numbers::kFp8Block, 32, 16, 8});
}

}  // namespace
}  // namespace kharness
