// The FP8 families' kernels against plain double-precision implementations on the host:
// gemm_fp8 (block-scaled GEMM of DeepSeek-V3 inference) and the DeepSeek-V3-routed fp8
// block-scale MoE (moe_fp8_block_scale_ds_routing_topk8_ng8_kg4). The reference, the seed and
// the baseline of each family are run through their own plans with PlanLauncher on small inline
// definitions (sizes not multiples of the tiles where the kernels allow it) and on the real
// gemm_fp8 shapes at small M. Inputs are made on the host: fp8 values with realistic scales; the
// host computes with the decoded fp8 values times their float32 scales, in double. Skips without
// a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "device/driver.hpp"
#include "device/plan_launcher.hpp"
#include "kharness/compile.hpp"
#include "kharness/definition.hpp"
#include "kharness/device.hpp"
#include "kharness/numeric.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"

namespace kharness {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!gpu_available())    \
  GTEST_SKIP() << "no GPU: " << device::Driver::instance().unavailable_reason()

constexpr const char* kMoe = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048";

// Host values of one tensor: the element bytes and their exact decoded values.
struct HostTensor {
  DType dtype = DType::kFloat32;
  std::vector<std::uint8_t> bytes;
  std::vector<double> values;
};

HostTensor make_tensor(DType dtype, std::size_t n, const std::function<double()>& draw) {
  HostTensor t;
  t.dtype = dtype;
  const std::size_t size = dtype_size(dtype);
  t.bytes.resize(n * size);
  t.values.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    from_double(dtype, draw(), &t.bytes[i * size]);
    t.values[i] = to_double(dtype, &t.bytes[i * size]);
  }
  return t;
}

// Compiles `solution` for `definition`, uploads the inputs, poisons output and workspace
// (0xFF: a NaN in bf16 and float32), launches the plan and returns the output's values.
std::vector<double> run_solution(const Solution& solution, const Definition& definition,
                                 const Bindings& axes, const std::map<std::string, HostTensor>& in,
                                 const std::map<std::string, nlohmann::json>& scalars,
                                 const std::string& output, std::size_t output_count) {
  CompileOptions options;
  options.arch = default_arch_for_device(0);
  options.use_cache = false;
  const CompileResult compiled = compile_solution(solution, &definition, nullptr, options);
  EXPECT_TRUE(compiled.ok()) << compiled.log;
  if (!compiled.ok()) return {};

  device::PrimaryContext context(0);
  device::Module module(compiled.cubin);
  device::PlanLauncher launcher(solution.plan, compiled.kernels, module);
  device::Stream stream;

  device::LaunchEnv env;
  env.definition = &definition;
  env.axes = axes;
  env.scalars = scalars;
  std::vector<device::DeviceBuffer> buffers;
  buffers.reserve(in.size() + 2);
  for (const auto& [name, t] : in) {
    buffers.emplace_back(t.bytes.size());
    buffers.back().upload(t.bytes.data(), t.bytes.size());
    env.tensors[name] = buffers.back().ptr();
  }
  const DType out_dtype = definition.find_output(output)->dtype;
  const std::size_t out_bytes = output_count * dtype_size(out_dtype);
  buffers.emplace_back(out_bytes);
  buffers.back().fill(0xFF);
  env.tensors[output] = buffers.back().ptr();
  const std::int64_t ws = launcher.workspace_bytes(axes);
  if (ws > 0) {
    buffers.emplace_back(static_cast<std::size_t>(ws));
    buffers.back().fill(0xFF);
    env.workspace = buffers.back().ptr();
  }
  const device::LaunchOutcome outcome = launcher.launch(env, stream.get(), true);
  EXPECT_TRUE(outcome.ok) << outcome.message;
  if (!outcome.ok) return {};
  std::vector<std::uint8_t> bytes(out_bytes);
  buffers[in.size()].download(bytes.data(), bytes.size());
  std::vector<double> out(output_count);
  for (std::size_t i = 0; i < output_count; ++i)
    out[i] = to_double(out_dtype, &bytes[i * dtype_size(out_dtype)]);
  return out;
}

// Every element within one bf16 rounding (2^-8 relative) of the exact value, plus `abs`.
void expect_close(const std::vector<double>& got, const std::vector<double>& exact, double abs,
                  const std::string& what) {
  ASSERT_EQ(got.size(), exact.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double limit = std::ldexp(std::fabs(exact[i]), -8) + abs;
    if (!std::isfinite(got[i]) || std::fabs(got[i] - exact[i]) > limit) {
      if (++bad <= 10) {
        ADD_FAILURE() << what << ": element " << i << ": expected " << exact[i] << ", got "
                      << got[i] << " (limit " << limit << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0) << what << ": elements off by more than bf16 rounding";
}

std::vector<Solution> family_solutions(const Operator& op) {
  std::vector<Solution> out;
  for (const auto& path : {op.reference, op.seed, op.baseline}) {
    EXPECT_TRUE(path.has_value());
    if (path) out.push_back(load_solution(*path));
  }
  return out;
}

// ---- gemm_fp8 ----------------------------------------------------------------------------------

void check_gemm_fp8(const std::vector<Solution>& solutions, const Definition& definition,
                    std::int64_t m, std::int64_t n, std::int64_t k, std::uint64_t seed) {
  SCOPED_TRACE("gemm_fp8 M=" + std::to_string(m) + " N=" + std::to_string(n) +
               " K=" + std::to_string(k));
  const std::int64_t kb = k / 128, nb = (n + 127) / 128;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> fp8_values(0.0, 150.0);
  std::uniform_real_distribution<double> a_scales(0.005, 0.015), b_scales(2e-5, 8e-5);
  std::map<std::string, HostTensor> in;
  in["A"] = make_tensor(DType::kFloat8E4M3, m * k, [&] { return fp8_values(rng); });
  in["A_scale"] = make_tensor(DType::kFloat32, m * kb, [&] { return a_scales(rng); });
  in["B"] = make_tensor(DType::kFloat8E4M3, n * k, [&] { return fp8_values(rng); });
  in["B_scale"] = make_tensor(DType::kFloat32, nb * kb, [&] { return b_scales(rng); });

  std::vector<double> exact(m * n);
  for (std::int64_t r = 0; r < m; ++r) {
    for (std::int64_t c = 0; c < n; ++c) {
      double sum = 0.0;
      for (std::int64_t i = 0; i < k; ++i) {
        sum += in["A"].values[r * k + i] * in["A_scale"].values[r * kb + i / 128] *
               in["B"].values[c * k + i] * in["B_scale"].values[(c / 128) * kb + i / 128];
      }
      exact[r * n + c] = sum;
    }
  }
  const Bindings axes = {{"M", m}, {"N", n}, {"K", k}, {"num_k_blocks", kb}, {"num_n_blocks", nb}};
  const char* roles[] = {"reference", "seed", "baseline"};
  for (std::size_t s = 0; s < solutions.size(); ++s) {
    auto got = run_solution(solutions[s], definition, axes, in, {}, "C", m * n);
    // float32 accumulation of K terms of size ~0.01: far below 1e-4 absolute.
    expect_close(got, exact, 1e-4, roles[s]);
  }
}

TEST(GemmFp8Reference, SeedAndBaselineMatchDoublePrecision) {
  SKIP_WITHOUT_GPU();
  const Operator op = OperatorRegistry::from_environment({}).load("gemm_fp8");
  ASSERT_EQ(op.definition.family(), "gemm_fp8");
  const auto solutions = family_solutions(op);
  ASSERT_EQ(solutions.size(), 3u);
  // N not a multiple of 16, 64 or 128 (a partial last weight block), M odd, K one to three blocks.
  check_gemm_fp8(solutions, op.definition, 1, 100, 128, 11);
  check_gemm_fp8(solutions, op.definition, 17, 200, 256, 12);
  check_gemm_fp8(solutions, op.definition, 70, 130, 384, 13);
  check_gemm_fp8(solutions, op.definition, 3, 2112, 512, 14);  // the fused q_a/kv_a N
}

// ---- MoE ---------------------------------------------------------------------------------------

// A small definition of the family: 32 experts in 8 groups of 4, 8 local (two groups), hidden
// 256, intermediate 128 (the seed's K slices need multiples of 128).
std::string small_moe_json() {
  return R"({"name": "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e8_h256_i128", "op_type": "moe",
    "axes": {"seq_len": {"type": "var"},
             "num_experts": {"type": "const", "value": 32},
             "num_local_experts": {"type": "const", "value": 8},
             "hidden_size": {"type": "const", "value": 256},
             "intermediate_size": {"type": "const", "value": 128},
             "gemm1_out_size": {"type": "const", "value": 256},
             "num_hidden_blocks": {"type": "const", "value": 2},
             "num_intermediate_blocks": {"type": "const", "value": 1},
             "num_gemm1_out_blocks": {"type": "const", "value": 2}},
    "inputs": {
      "routing_logits": {"shape": ["seq_len", "num_experts"], "dtype": "float32"},
      "routing_bias": {"shape": ["num_experts"], "dtype": "bfloat16"},
      "hidden_states": {"shape": ["seq_len", "hidden_size"], "dtype": "float8_e4m3fn"},
      "hidden_states_scale": {"shape": ["num_hidden_blocks", "seq_len"], "dtype": "float32"},
      "gemm1_weights": {"shape": ["num_local_experts", "gemm1_out_size", "hidden_size"],
                        "dtype": "float8_e4m3fn"},
      "gemm1_weights_scale": {"shape": ["num_local_experts", "num_gemm1_out_blocks",
                                        "num_hidden_blocks"], "dtype": "float32"},
      "gemm2_weights": {"shape": ["num_local_experts", "hidden_size", "intermediate_size"],
                        "dtype": "float8_e4m3fn"},
      "gemm2_weights_scale": {"shape": ["num_local_experts", "num_hidden_blocks",
                                        "num_intermediate_blocks"], "dtype": "float32"},
      "local_expert_offset": {"shape": null, "dtype": "int32"},
      "routed_scaling_factor": {"shape": null, "dtype": "float32"}},
    "outputs": {"output": {"shape": ["seq_len", "hidden_size"], "dtype": "bfloat16"}},
    "reference": "",
    "kharness": {"family": "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4"}})";
}

struct MoeCase {
  std::int64_t T, E, EL, H, I;
  int offset;
  double scaling;
};

// The exact output in double, and per token whether its routing is decided by a clear margin
// (a near-tie between the 8th and 9th expert or the 4th and 5th group could go either way in
// float32; such tokens, rare, are not compared).
void moe_exact(const MoeCase& c, std::map<std::string, HostTensor>& in, std::vector<double>* out,
               std::vector<bool>* clear) {
  const std::int64_t T = c.T, E = c.E, H = c.H, I = c.I, G = E / 8;
  out->assign(T * H, 0.0);
  clear->assign(T, true);
  auto a = [&](std::int64_t t, std::int64_t h) {
    return in["hidden_states"].values[t * H + h] *
           in["hidden_states_scale"].values[(h / 128) * T + t];
  };
  auto w1 = [&](std::int64_t e, std::int64_t j, std::int64_t h) {
    return in["gemm1_weights"].values[(e * 2 * I + j) * H + h] *
           in["gemm1_weights_scale"].values[(e * (2 * I / 128) + j / 128) * (H / 128) + h / 128];
  };
  auto w2 = [&](std::int64_t e, std::int64_t h, std::int64_t i) {
    return in["gemm2_weights"].values[(e * H + h) * I + i] *
           in["gemm2_weights_scale"].values[(e * (H / 128) + h / 128) * (I / 128) + i / 128];
  };
  const double margin = 1e-5;
  for (std::int64_t t = 0; t < T; ++t) {
    std::vector<double> s(E), sb(E);
    for (std::int64_t e = 0; e < E; ++e) {
      s[e] = 1.0 / (1.0 + std::exp(-in["routing_logits"].values[t * E + e]));
      sb[e] = s[e] + in["routing_bias"].values[e];
    }
    std::vector<std::pair<double, int>> groups;
    for (int g = 0; g < 8; ++g) {
      std::vector<double> v(sb.begin() + g * G, sb.begin() + (g + 1) * G);
      std::sort(v.rbegin(), v.rend());
      groups.push_back({-(v[0] + (G > 1 ? v[1] : 0.0)), g});
    }
    std::sort(groups.begin(), groups.end());
    if (-groups[3].first - -groups[4].first < margin) (*clear)[t] = false;
    std::vector<std::pair<double, int>> cand;
    for (int r = 0; r < 4; ++r)
      for (std::int64_t e = groups[r].second * G; e < (groups[r].second + 1) * G; ++e)
        cand.push_back({-sb[e], static_cast<int>(e)});
    std::sort(cand.begin(), cand.end());
    if (cand.size() > 8 && -cand[7].first - -cand[8].first < margin) (*clear)[t] = false;
    double s_sum = 0.0;
    for (int r = 0; r < 8; ++r) s_sum += s[cand[r].second];
    for (int r = 0; r < 8; ++r) {
      const int le = cand[r].second - c.offset;
      if (le < 0 || le >= c.EL) continue;
      const double weight = s[cand[r].second] / s_sum * c.scaling;
      std::vector<double> act(I);
      for (std::int64_t i = 0; i < I; ++i) {
        double up = 0.0, gate = 0.0;
        for (std::int64_t h = 0; h < H; ++h) {
          up += a(t, h) * w1(le, i, h);
          gate += a(t, h) * w1(le, I + i, h);
        }
        act[i] = gate / (1.0 + std::exp(-gate)) * up;
      }
      for (std::int64_t h = 0; h < H; ++h) {
        double o = 0.0;
        for (std::int64_t i = 0; i < I; ++i) o += act[i] * w2(le, h, i);
        (*out)[t * H + h] += weight * o;
      }
    }
  }
}

void check_moe(const std::vector<Solution>& solutions, const Definition& definition,
               const MoeCase& c, std::uint64_t seed) {
  SCOPED_TRACE(definition.name + " seq_len=" + std::to_string(c.T) +
               " local_expert_offset=" + std::to_string(c.offset));
  const std::int64_t T = c.T, E = c.E, EL = c.EL, H = c.H, I = c.I;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> logits(0.0, 1.0), fp8_values(0.0, 150.0);
  std::uniform_real_distribution<double> bias(-0.05, 0.05), hs(0.005, 0.015), s1(5e-5, 1.5e-4),
      s2(1e-3, 3e-3);
  // Hidden and intermediate sizes are small here: scale the weights up so the GEMM outputs keep
  // the magnitudes of the real shapes (sqrt(7168 / H) and sqrt(2048 / I)).
  const double k1 = std::sqrt(7168.0 / H), k2 = std::sqrt(2048.0 / I);
  std::map<std::string, HostTensor> in;
  in["routing_logits"] = make_tensor(DType::kFloat32, T * E, [&] { return logits(rng); });
  in["routing_bias"] = make_tensor(DType::kBFloat16, E, [&] { return bias(rng); });
  in["hidden_states"] = make_tensor(DType::kFloat8E4M3, T * H, [&] { return fp8_values(rng); });
  in["hidden_states_scale"] = make_tensor(DType::kFloat32, (H / 128) * T, [&] { return hs(rng); });
  in["gemm1_weights"] =
      make_tensor(DType::kFloat8E4M3, EL * 2 * I * H, [&] { return fp8_values(rng); });
  in["gemm1_weights_scale"] =
      make_tensor(DType::kFloat32, EL * (2 * I / 128) * (H / 128), [&] { return k1 * s1(rng); });
  in["gemm2_weights"] =
      make_tensor(DType::kFloat8E4M3, EL * H * I, [&] { return fp8_values(rng); });
  in["gemm2_weights_scale"] =
      make_tensor(DType::kFloat32, EL * (H / 128) * (I / 128), [&] { return k2 * s2(rng); });

  std::vector<double> exact;
  std::vector<bool> clear;
  moe_exact(c, in, &exact, &clear);
  double max_abs = 0.0;
  for (double v : exact) max_abs = std::max(max_abs, std::fabs(v));

  const Bindings axes = {{"seq_len", T},
                         {"num_experts", E},
                         {"num_local_experts", EL},
                         {"hidden_size", H},
                         {"intermediate_size", I},
                         {"gemm1_out_size", 2 * I},
                         {"num_hidden_blocks", H / 128},
                         {"num_intermediate_blocks", I / 128},
                         {"num_gemm1_out_blocks", 2 * I / 128}};
  const std::map<std::string, nlohmann::json> scalars = {{"local_expert_offset", c.offset},
                                                         {"routed_scaling_factor", c.scaling}};
  const char* roles[] = {"reference", "seed", "baseline"};
  for (std::size_t s = 0; s < solutions.size(); ++s) {
    auto got = run_solution(solutions[s], definition, axes, in, scalars, "output", T * H);
    if (got.empty()) continue;
    std::vector<double> g, x;
    for (std::int64_t t = 0; t < T; ++t) {
      if (!clear[t]) continue;
      g.insert(g.end(), got.begin() + t * H, got.begin() + (t + 1) * H);
      x.insert(x.end(), exact.begin() + t * H, exact.begin() + (t + 1) * H);
    }
    // float32 through two GEMMs and SwiGLU: relative error ~1e-6 of the largest terms.
    expect_close(g, x, 1e-5 * max_abs + 1e-6, roles[s]);
  }
}

TEST(MoeFp8Reference, SmallShapesMatchDoublePrecision) {
  SKIP_WITHOUT_GPU();
  const Operator op = OperatorRegistry::from_environment({}).load(kMoe);
  ASSERT_EQ(op.definition.family(), "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4");
  const auto solutions = family_solutions(op);
  ASSERT_EQ(solutions.size(), 3u);
  const Definition small = parse_definition_text(small_moe_json(), "small moe");
  // Offsets 8, 0 and 24: the local experts are groups 2-3, 0-1 and 6-7 of the 8.
  check_moe(solutions, small, {1, 32, 8, 256, 128, 8, 2.5}, 21);
  check_moe(solutions, small, {5, 32, 8, 256, 128, 0, 2.5}, 22);
  check_moe(solutions, small, {70, 32, 8, 256, 128, 24, 1.0}, 23);
}

}  // namespace
}  // namespace kharness
