// The FP8 families' kernels against plain double-precision implementations on the host:
// gemm_fp8 (block-scaled GEMM of DeepSeek-V3 inference) and the DeepSeek-V3-routed fp8
// block-scale MoE (moe_fp8_block_scale_ds_routing_topk8_ng8_kg4). The reference, the seed and
// the baseline of each family are run through their own plans with PlanLauncher on small inline
// definitions (sizes not multiples of the tiles where the kernels allow it) and on the real
// shapes at a few rows. Inputs are made on the host: fp8 values with realistic scales; the
// host computes with the decoded fp8 values times their float32 scales, in double. Skips without
// a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "device/driver.hpp"
#include "device/plan_launcher.hpp"
#include "gpu_test_util.hpp"
#include "kharness/compile.hpp"
#include "kharness/definition.hpp"
#include "kharness/device.hpp"
#include "kharness/numeric.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"

namespace kharness {
namespace {

constexpr const char* kMoe = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048";

// Host bytes of one tensor, decoded on access (exact values of the stored elements).
struct HostTensor {
  DType dtype = DType::kFloat32;
  std::vector<std::uint8_t> bytes;
  double at(std::size_t i) const { return to_double(dtype, &bytes[i * dtype_size(dtype)]); }
  std::vector<double> decoded() const {
    std::vector<double> out(bytes.size() / dtype_size(dtype));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = at(i);
    return out;
  }
};

// Elements [first, first + count) drawn from `draw`, rounded to the tensor's dtype.
void fill_tensor(HostTensor* t, std::size_t first, std::size_t count,
                 const std::function<double()>& draw) {
  const std::size_t size = dtype_size(t->dtype);
  for (std::size_t i = first; i < first + count; ++i)
    from_double(t->dtype, draw(), &t->bytes[i * size]);
}

// n elements, all zero bytes (0.0 in every float dtype).
HostTensor zero_tensor(DType dtype, std::size_t n) {
  HostTensor t;
  t.dtype = dtype;
  t.bytes.assign(n * dtype_size(dtype), 0);
  return t;
}

HostTensor make_tensor(DType dtype, std::size_t n, const std::function<double()>& draw) {
  HostTensor t = zero_tensor(dtype, n);
  fill_tensor(&t, 0, n, draw);
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

// `path` with its plan's compile options replaced by `options` (a JSON array's contents), as
// the tune provider makes variants of a seed.
Solution with_compile_options(const std::filesystem::path& path, const std::string& options,
                              const std::filesystem::path& out) {
  std::ifstream in(path);
  std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = R"("compile_options": ["-std=c++17"])";
  const auto at = source.find(from);
  EXPECT_NE(at, std::string::npos) << path;
  if (at != std::string::npos)
    source.replace(at, from.size(), "\"compile_options\": [" + options + "]");
  std::ofstream(out) << source;
  return load_solution(out);
}

// ---- gemm_fp8 ----------------------------------------------------------------------------------

// Each solution (named by `roles`) against the exact product: within bf16 rounding plus `abs`.
void check_gemm_fp8(const std::vector<Solution>& solutions, const Definition& definition,
                    std::int64_t m, std::int64_t n, std::int64_t k, std::uint64_t seed,
                    const std::vector<std::string>& roles = {"reference", "seed", "baseline"},
                    double abs = 1e-4) {
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

  const auto a = in["A"].decoded(), sa = in["A_scale"].decoded();
  const auto b = in["B"].decoded(), sb = in["B_scale"].decoded();
  std::vector<double> exact(m * n);
  for (std::int64_t r = 0; r < m; ++r) {
    for (std::int64_t c = 0; c < n; ++c) {
      double sum = 0.0;
      for (std::int64_t i = 0; i < k; ++i) {
        sum += a[r * k + i] * sa[r * kb + i / 128] * b[c * k + i] * sb[(c / 128) * kb + i / 128];
      }
      exact[r * n + c] = sum;
    }
  }
  const Bindings axes = {{"M", m}, {"N", n}, {"K", k}, {"num_k_blocks", kb}, {"num_n_blocks", nb}};
  for (std::size_t s = 0; s < solutions.size(); ++s) {
    auto got = run_solution(solutions[s], definition, axes, in, {}, "C", m * n);
    expect_close(got, exact, abs, roles.at(s));
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

// The seed's tensor-core variant (GEMM_FP8_MMA=1) at its default and at other tile sizes. The
// fp8 products of a 128-wide K block are summed at the tensor core's own precision before the
// float32 promotion, so the absolute allowance is 2e-3 (|C| ~ 1; the definition allows 0.01).
TEST(GemmFp8Reference, SeedTensorCoreVariantMatchesDoublePrecision) {
  SKIP_WITHOUT_GPU();
  const Operator op = OperatorRegistry::from_environment({}).load("gemm_fp8");
  ASSERT_TRUE(op.seed.has_value());
  const auto dir = std::filesystem::temp_directory_path();
  const std::vector<Solution> variants = {
      with_compile_options(*op.seed, R"("-std=c++17", "-DGEMM_FP8_MMA=1")",
                           dir / "kharness-gemm-fp8-mma-default.cu"),
      with_compile_options(*op.seed,
                           R"("-std=c++17", "-DGEMM_FP8_MMA=1", "-DGEMM_FP8_BM=128",)"
                           R"( "-DGEMM_FP8_BN=128", "-DGEMM_FP8_BK=128")",
                           dir / "kharness-gemm-fp8-mma-128.cu"),
      with_compile_options(*op.seed,
                           R"("-std=c++17", "-DGEMM_FP8_MMA=1", "-DGEMM_FP8_BM=32",)"
                           R"( "-DGEMM_FP8_BN=64", "-DGEMM_FP8_BK=64")",
                           dir / "kharness-gemm-fp8-mma-32.cu")};
  const std::vector<std::string> roles = {"mma 64x128x32", "mma 128x128x128", "mma 32x64x64"};
  check_gemm_fp8(variants, op.definition, 1, 100, 128, 51, roles, 2e-3);
  check_gemm_fp8(variants, op.definition, 17, 200, 256, 52, roles, 2e-3);
  check_gemm_fp8(variants, op.definition, 70, 130, 384, 53, roles, 2e-3);
  check_gemm_fp8(variants, op.definition, 3, 2112, 512, 54, roles, 2e-3);
  check_gemm_fp8(variants, op.definition, 130, 7168, 2048, 55, roles, 2e-3);
}

TEST(GemmFp8Reference, RealShapesAtSmallM) {
  SKIP_WITHOUT_GPU();
  const Operator op = OperatorRegistry::from_environment({}).load("gemm_fp8");
  const auto solutions = family_solutions(op);
  ASSERT_EQ(solutions.size(), 3u);
  check_gemm_fp8(solutions, op.definition, 1, 2112, 7168, 31);   // q_a + kv_a
  check_gemm_fp8(solutions, op.definition, 2, 24576, 1536, 32);  // q_b
  check_gemm_fp8(solutions, op.definition, 5, 7168, 2048, 33);   // shared expert down
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
  int offset;  // local_expert_offset; -1: the group of token 0's first choice (never idle)
  double scaling;
  bool sparse_weights = false;  // random weights only for the experts some token selected
};

// One token's routing in double: the selected experts with their weights, and whether the choice
// is decided by a clear margin (a near-tie between the 8th and 9th expert or the 4th and 5th
// group could go either way in float32; such tokens, rare, are not compared).
struct Route {
  std::vector<std::pair<int, double>> experts;  // global id, weight
  bool clear = true;
};

std::vector<Route> moe_route(const MoeCase& c, const HostTensor& logits, const HostTensor& bias) {
  const std::int64_t E = c.E, G = E / 8;
  const double margin = 1e-5;
  std::vector<Route> routes(c.T);
  for (std::int64_t t = 0; t < c.T; ++t) {
    std::vector<double> s(E), sb(E);
    for (std::int64_t e = 0; e < E; ++e) {
      s[e] = 1.0 / (1.0 + std::exp(-logits.at(t * E + e)));
      sb[e] = s[e] + bias.at(e);
    }
    std::vector<std::pair<double, int>> groups;
    for (int g = 0; g < 8; ++g) {
      std::vector<double> v(sb.begin() + g * G, sb.begin() + (g + 1) * G);
      std::sort(v.rbegin(), v.rend());
      groups.push_back({-(v[0] + (G > 1 ? v[1] : 0.0)), g});
    }
    std::sort(groups.begin(), groups.end());
    if (groups[4].first - groups[3].first < margin) routes[t].clear = false;
    std::vector<std::pair<double, int>> cand;
    for (int r = 0; r < 4; ++r)
      for (std::int64_t e = groups[r].second * G; e < (groups[r].second + 1) * G; ++e)
        cand.push_back({-sb[e], static_cast<int>(e)});
    std::sort(cand.begin(), cand.end());
    if (cand.size() > 8 && cand[8].first - cand[7].first < margin) routes[t].clear = false;
    double s_sum = 0.0;
    for (int r = 0; r < 8; ++r) s_sum += s[cand[r].second];
    for (int r = 0; r < 8; ++r)
      routes[t].experts.push_back({cand[r].second, s[cand[r].second] / s_sum * c.scaling});
  }
  return routes;
}

// The exact output in double.
std::vector<double> moe_exact(const MoeCase& c, int offset, const std::vector<Route>& routes,
                              const std::map<std::string, HostTensor>& in) {
  const std::int64_t T = c.T, H = c.H, I = c.I;
  std::vector<double> out(T * H, 0.0);
  const HostTensor &w1 = in.at("gemm1_weights"), &s1 = in.at("gemm1_weights_scale");
  const HostTensor &w2 = in.at("gemm2_weights"), &s2 = in.at("gemm2_weights_scale");
  for (std::int64_t t = 0; t < T; ++t) {
    std::vector<double> a(H);
    for (std::int64_t h = 0; h < H; ++h)
      a[h] =
          in.at("hidden_states").at(t * H + h) * in.at("hidden_states_scale").at((h / 128) * T + t);
    for (const auto& [expert, weight] : routes[t].experts) {
      const std::int64_t le = expert - offset;
      if (le < 0 || le >= c.EL) continue;
      std::vector<double> act(I);
      for (std::int64_t i = 0; i < I; ++i) {
        double up = 0.0, gate = 0.0;
        for (std::int64_t h = 0; h < H; ++h) {
          const double su = s1.at((le * (2 * I / 128) + i / 128) * (H / 128) + h / 128);
          const double sg = s1.at((le * (2 * I / 128) + (I + i) / 128) * (H / 128) + h / 128);
          up += a[h] * w1.at((le * 2 * I + i) * H + h) * su;
          gate += a[h] * w1.at((le * 2 * I + I + i) * H + h) * sg;
        }
        act[i] = gate / (1.0 + std::exp(-gate)) * up;
      }
      for (std::int64_t h = 0; h < H; ++h) {
        double o = 0.0;
        for (std::int64_t i = 0; i < I; ++i)
          o += act[i] * w2.at((le * H + h) * I + i) *
               s2.at((le * (H / 128) + h / 128) * (I / 128) + i / 128);
        out[t * H + h] += weight * o;
      }
    }
  }
  return out;
}

void check_moe(const std::vector<Solution>& solutions, const Definition& definition,
               const MoeCase& c, std::uint64_t seed) {
  const std::int64_t T = c.T, E = c.E, EL = c.EL, H = c.H, I = c.I;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> logits(0.0, 1.0), fp8_values(0.0, 150.0);
  std::uniform_real_distribution<double> bias(-0.05, 0.05), hs(0.005, 0.015), s1(5e-5, 1.5e-4),
      s2(1e-3, 3e-3);
  // Hidden and intermediate sizes may be small here: scale the weights up so the GEMM outputs
  // keep the magnitudes of the real shapes (sqrt(7168 / H) and sqrt(2048 / I)).
  const double k1 = std::sqrt(7168.0 / H), k2 = std::sqrt(2048.0 / I);
  std::map<std::string, HostTensor> in;
  in["routing_logits"] = make_tensor(DType::kFloat32, T * E, [&] { return logits(rng); });
  in["routing_bias"] = make_tensor(DType::kBFloat16, E, [&] { return bias(rng); });
  const std::vector<Route> routes = moe_route(c, in["routing_logits"], in["routing_bias"]);
  const int offset =
      c.offset >= 0 ? c.offset : static_cast<int>(routes[0].experts[0].first / EL * EL);
  SCOPED_TRACE(definition.name + " seq_len=" + std::to_string(T) +
               " local_expert_offset=" + std::to_string(offset));
  in["hidden_states"] = make_tensor(DType::kFloat8E4M3, T * H, [&] { return fp8_values(rng); });
  in["hidden_states_scale"] = make_tensor(DType::kFloat32, (H / 128) * T, [&] { return hs(rng); });
  in["gemm1_weights_scale"] =
      make_tensor(DType::kFloat32, EL * (2 * I / 128) * (H / 128), [&] { return k1 * s1(rng); });
  in["gemm2_weights_scale"] =
      make_tensor(DType::kFloat32, EL * (H / 128) * (I / 128), [&] { return k2 * s2(rng); });
  in["gemm1_weights"] = zero_tensor(DType::kFloat8E4M3, EL * 2 * I * H);
  in["gemm2_weights"] = zero_tensor(DType::kFloat8E4M3, EL * H * I);
  std::vector<bool> used(EL, !c.sparse_weights);
  int local_selections = 0;
  for (const Route& r : routes) {
    for (const auto& [expert, weight] : r.experts) {
      if (expert < offset || expert >= offset + EL) continue;
      used[expert - offset] = true;
      ++local_selections;
    }
  }
  for (std::int64_t e = 0; e < EL; ++e) {
    if (!used[e]) continue;
    fill_tensor(&in["gemm1_weights"], e * 2 * I * H, 2 * I * H, [&] { return fp8_values(rng); });
    fill_tensor(&in["gemm2_weights"], e * H * I, H * I, [&] { return fp8_values(rng); });
  }
  EXPECT_GT(local_selections, 0) << "no token chose a local expert: a weak case";

  const std::vector<double> exact = moe_exact(c, offset, routes, in);
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
  const std::map<std::string, nlohmann::json> scalars = {{"local_expert_offset", offset},
                                                         {"routed_scaling_factor", c.scaling}};
  const char* roles[] = {"reference", "seed", "baseline"};
  for (std::size_t s = 0; s < solutions.size(); ++s) {
    auto got = run_solution(solutions[s], definition, axes, in, scalars, "output", T * H);
    if (got.empty()) continue;
    std::vector<double> g, x;
    for (std::int64_t t = 0; t < T; ++t) {
      if (!routes[t].clear) continue;
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

// The real definition (7168 x 2048, 32 of 256 experts) at a few tokens, with the rank chosen so
// that a token is routed to it; only selected experts get random weights (the rest are zeros,
// never read by a correct kernel).
TEST(MoeFp8Reference, RealDefinitionAtFewTokens) {
  SKIP_WITHOUT_GPU();
  const Operator op = OperatorRegistry::from_environment({}).load(kMoe);
  const auto solutions = family_solutions(op);
  ASSERT_EQ(solutions.size(), 3u);
  check_moe(solutions, op.definition, {3, 256, 32, 7168, 2048, -1, 2.5, true}, 41);
}

}  // namespace
}  // namespace kharness
