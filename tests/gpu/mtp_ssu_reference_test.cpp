// The gdn_mtp (Gated Delta Net multi-token prediction) and mamba_ssu_decode (Mamba2 selective
// state update) references against plain double-precision host implementations of
// FlashInfer-Bench's reference texts, on small shapes of the test's own definitions (the same
// tensor and axis names, smaller heads). Every bf16 output within one bf16 ulp plus 1e-3 of the
// exact value; float32 states within 1e-4 relative (plus 1e-5); copied state exactly equal.
// Skips without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
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

struct Compiled {
  Operator op;
  Solution solution;
  CompileResult compiled;
  std::unique_ptr<device::PrimaryContext> context;
  std::unique_ptr<device::Module> module;
  std::unique_ptr<device::PlanLauncher> launcher;
};

void compile_from(const std::string& name, const std::string& family, const std::string& json,
                  Compiled* out) {
  const fs::path dir =
      fs::temp_directory_path() / ("kharness-" + name + "-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / (name + ".json")) << json;
  out->op = OperatorRegistry::from_environment({dir}).load(name);
  ASSERT_TRUE(out->op.reference.has_value()) << name;
  ASSERT_EQ(out->op.reference->parent_path().filename(), family);
  out->solution = load_solution(*out->op.reference);
  CompileOptions options;
  options.arch = default_arch_for_device(0);
  options.use_cache = false;
  out->compiled = compile_solution(out->solution, &out->op.definition, &out->op.workloads, options);
  ASSERT_TRUE(out->compiled.ok()) << out->compiled.log;
  out->context = std::make_unique<device::PrimaryContext>(0);
  out->module = std::make_unique<device::Module>(out->compiled.cubin);
  out->launcher = std::make_unique<device::PlanLauncher>(out->solution.plan, out->compiled.kernels,
                                                         *out->module);
}

std::vector<double> normal(std::size_t n, double mean, double std, std::mt19937_64& rng) {
  std::normal_distribution<double> d(mean, std);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<double> uniform(std::size_t n, double lo, double hi, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Device copies of host values in a dtype; `rounded` receives the values the device sees.
struct Tensors {
  std::map<std::string, std::unique_ptr<device::DeviceBuffer>> buffers;
  device::LaunchEnv env;
  void add(const std::string& name, DType dtype, std::vector<double>* values) {
    const auto bytes = encode(dtype, *values);
    *values = decode(dtype, bytes);
    add_bytes(name, bytes);
  }
  void add_bytes(const std::string& name, const std::vector<std::uint8_t>& bytes) {
    auto b = std::make_unique<device::DeviceBuffer>(std::max<std::size_t>(bytes.size(), 4));
    if (!bytes.empty()) b->upload(bytes.data(), bytes.size());
    env.tensors[name] = b->ptr();
    buffers[name] = std::move(b);
  }
  void output(const std::string& name, std::size_t bytes) {
    add_bytes(name, std::vector<std::uint8_t>(bytes, 0xFF));  // NaN / -1: unwritten fails
  }
  std::vector<double> read(const std::string& name, DType dtype, std::size_t count) {
    std::vector<std::uint8_t> bytes(count * dtype_size(dtype));
    buffers.at(name)->download(bytes.data(), bytes.size());
    return decode(dtype, bytes);
  }
};

int count_bad(const std::vector<double>& got, const std::vector<double>& want, double rel,
              double abs, const std::string& what) {
  int bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double limit = rel * std::fabs(want[i]) + abs;
    if (!std::isfinite(got[i]) || std::fabs(got[i] - want[i]) > limit) {
      if (++bad <= 10)
        ADD_FAILURE() << what << "[" << i << "]: expected " << want[i] << ", got " << got[i];
    }
  }
  return bad;
}

double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }

TEST(MtpSsuReference, GdnMtpMatchesDoublePrecision) {
  SKIP_WITHOUT_GPU();
  constexpr int kB = 3, kT = 4, kHQ = 2, kHV = 4, kD = 32, kPool = 5;
  const std::string json = R"x({"name": "gdn_mtp_qk2_v4_d32_k_last", "op_type": "gdn",
    "axes": {"batch_size": {"type": "var"}, "seq_len": {"type": "var"},
             "num_q_heads": {"type": "const", "value": 2}, "num_k_heads": {"type": "const", "value": 2},
             "num_v_heads": {"type": "const", "value": 4}, "head_size": {"type": "const", "value": 32},
             "pool_size": {"type": "var"}},
    "inputs": {"q": {"shape": ["batch_size", "seq_len", "num_q_heads", "head_size"], "dtype": "bfloat16"},
      "k": {"shape": ["batch_size", "seq_len", "num_k_heads", "head_size"], "dtype": "bfloat16"},
      "v": {"shape": ["batch_size", "seq_len", "num_v_heads", "head_size"], "dtype": "bfloat16"},
      "initial_state": {"shape": ["pool_size", "num_v_heads", "head_size", "head_size"], "dtype": "float32"},
      "initial_state_indices": {"shape": ["batch_size"], "dtype": "int32"},
      "A_log": {"shape": ["num_v_heads"], "dtype": "float32"},
      "a": {"shape": ["batch_size", "seq_len", "num_v_heads"], "dtype": "bfloat16"},
      "dt_bias": {"shape": ["num_v_heads"], "dtype": "float32"},
      "b": {"shape": ["batch_size", "seq_len", "num_v_heads"], "dtype": "bfloat16"},
      "scale": {"shape": null, "dtype": "float32"},
      "intermediate_states_buffer": {"shape": ["pool_size", "seq_len", "num_v_heads", "head_size", "head_size"], "dtype": "float32"}},
    "outputs": {"output": {"shape": ["batch_size", "seq_len", "num_v_heads", "head_size"], "dtype": "bfloat16"},
      "final_state": {"shape": ["pool_size", "num_v_heads", "head_size", "head_size"], "dtype": "float32"}}})x";
  Compiled ref;
  ASSERT_NO_FATAL_FAILURE(compile_from("gdn_mtp_qk2_v4_d32_k_last", "gdn_mtp", json, &ref));
  std::mt19937_64 rng(7);
  auto q = normal(kB * kT * kHQ * kD, 0, 0.18, rng), k = normal(kB * kT * kHQ * kD, 0, 0.18, rng);
  auto v = normal(kB * kT * kHV * kD, 0, 1, rng),
       state = normal(kPool * kHV * kD * kD, 0, 0.5, rng);
  auto A_log = uniform(kHV, 0, 2.5, rng), dt_bias = uniform(kHV, -6.9, -2.3, rng);
  auto a = normal(kB * kT * kHV, 0, 1, rng), b = normal(kB * kT * kHV, 0, 1, rng);
  auto inter = normal(static_cast<std::size_t>(kPool) * kT * kHV * kD * kD, 0, 1, rng);
  std::vector<double> slots = {3, 0, 4};
  Tensors t;
  t.add("q", DType::kBFloat16, &q);
  t.add("k", DType::kBFloat16, &k);
  t.add("v", DType::kBFloat16, &v);
  t.add("initial_state", DType::kFloat32, &state);
  t.add("initial_state_indices", DType::kInt32, &slots);
  t.add("A_log", DType::kFloat32, &A_log);
  t.add("a", DType::kBFloat16, &a);
  t.add("dt_bias", DType::kFloat32, &dt_bias);
  t.add("b", DType::kBFloat16, &b);
  t.add("intermediate_states_buffer", DType::kFloat32, &inter);
  t.output("output", kB * kT * kHV * kD * 2);
  t.output("final_state", kPool * kHV * kD * kD * 4);
  t.env.definition = &ref.op.definition;
  t.env.axes = {{"batch_size", kB},   {"seq_len", kT},   {"num_q_heads", kHQ}, {"num_k_heads", kHQ},
                {"num_v_heads", kHV}, {"head_size", kD}, {"pool_size", kPool}};
  const float scale = static_cast<float>(1.0 / std::sqrt(kD));
  t.env.scalars = {{"scale", nlohmann::json(scale)}};
  device::Stream stream;
  const device::LaunchOutcome outcome = ref.launcher->launch(t.env, stream.get(), true);
  ASSERT_TRUE(outcome.ok) << outcome.message;

  std::vector<double> want(kB * kT * kHV * kD);
  for (int s = 0; s < kB; ++s) {
    for (int h = 0; h < kHV; ++h) {
      const int qh = h / (kHV / kHQ);
      std::vector<double> S(kD * kD);  // S[k][v]
      const std::size_t base = (static_cast<std::size_t>(slots[s]) * kHV + h) * kD * kD;
      for (int vv = 0; vv < kD; ++vv)
        for (int kk = 0; kk < kD; ++kk) S[kk * kD + vv] = state[base + vv * kD + kk];
      for (int tt = 0; tt < kT; ++tt) {
        const std::size_t th = (static_cast<std::size_t>(s) * kT + tt) * kHV + h;
        const double g = std::exp(-std::exp(A_log[h]) * softplus(a[th] + dt_bias[h]));
        const double beta = 1 / (1 + std::exp(-b[th]));
        const double* kr = &k[((static_cast<std::size_t>(s) * kT + tt) * kHQ + qh) * kD];
        const double* qr = &q[((static_cast<std::size_t>(s) * kT + tt) * kHQ + qh) * kD];
        for (int vv = 0; vv < kD; ++vv) {
          double old_v = 0;
          for (int kk = 0; kk < kD; ++kk) old_v += kr[kk] * g * S[kk * kD + vv];
          const double new_v = beta * v[th * kD + vv] + (1 - beta) * old_v;
          double o = 0;
          for (int kk = 0; kk < kD; ++kk) {
            double& x = S[kk * kD + vv];
            x = g * x - kr[kk] * old_v + kr[kk] * new_v;
            o += qr[kk] * x;
          }
          want[th * kD + vv] = scale * o;
        }
      }
    }
  }
  const auto got = t.read("output", DType::kBFloat16, want.size());
  EXPECT_EQ(count_bad(got, want, 1.0 / 128, 1e-3, "output"), 0);
  const auto final_state = t.read("final_state", DType::kFloat32, state.size());
  EXPECT_EQ(final_state, state);  // the unchanged pool
  EXPECT_EQ(t.read("intermediate_states_buffer", DType::kFloat32, inter.size()), inter);
}

TEST(MtpSsuReference, MambaSelectiveStateUpdateMatchesDoublePrecision) {
  SKIP_WITHOUT_GPU();
  constexpr int kB = 3, kH = 4, kP = 16, kN = 32, kG = 2, kCache = 6;
  const std::string json = R"x({"name": "mamba_ssu_decode_h4_d16_s32_ng2", "op_type": "mamba_ssu",
    "axes": {"batch_size": {"type": "var"}, "state_cache_size": {"type": "var"},
             "nheads": {"type": "const", "value": 4}, "head_dim": {"type": "const", "value": 16},
             "dstate": {"type": "const", "value": 32}, "ngroups": {"type": "const", "value": 2}},
    "inputs": {"state": {"shape": ["state_cache_size", "nheads", "head_dim", "dstate"], "dtype": "bfloat16"},
      "x": {"shape": ["batch_size", "nheads", "head_dim"], "dtype": "bfloat16"},
      "dt": {"shape": ["batch_size", "nheads", "head_dim"], "dtype": "bfloat16"},
      "A": {"shape": ["nheads", "head_dim", "dstate"], "dtype": "float32"},
      "B": {"shape": ["batch_size", "ngroups", "dstate"], "dtype": "bfloat16"},
      "C": {"shape": ["batch_size", "ngroups", "dstate"], "dtype": "bfloat16"},
      "D": {"shape": ["nheads", "head_dim"], "dtype": "bfloat16"},
      "dt_bias": {"shape": ["nheads", "head_dim"], "dtype": "bfloat16"},
      "state_batch_indices": {"shape": ["batch_size"], "dtype": "int32"}},
    "outputs": {"output": {"shape": ["batch_size", "nheads", "head_dim"], "dtype": "bfloat16"},
      "new_state": {"shape": ["state_cache_size", "nheads", "head_dim", "dstate"], "dtype": "bfloat16"}}})x";
  Compiled ref;
  ASSERT_NO_FATAL_FAILURE(
      compile_from("mamba_ssu_decode_h4_d16_s32_ng2", "mamba_ssu_decode", json, &ref));
  std::mt19937_64 rng(11);
  auto state = normal(kCache * kH * kP * kN, 0, 1, rng), x = normal(kB * kH * kP, 0, 1, rng);
  auto dt = normal(kB * kH * kP, 0, 1, rng), A = uniform(kH * kP * kN, -16, -1, rng);
  auto B = normal(kB * kG * kN, 0, 1, rng), C = normal(kB * kG * kN, 0, 1, rng);
  auto D = uniform(kH * kP, 0.5, 1.5, rng), dt_bias = uniform(kH * kP, -6.9, -2.3, rng);
  std::vector<double> slots = {5, 1, 2};
  Tensors t;
  t.add("state", DType::kBFloat16, &state);
  t.add("x", DType::kBFloat16, &x);
  t.add("dt", DType::kBFloat16, &dt);
  t.add("A", DType::kFloat32, &A);
  t.add("B", DType::kBFloat16, &B);
  t.add("C", DType::kBFloat16, &C);
  t.add("D", DType::kBFloat16, &D);
  t.add("dt_bias", DType::kBFloat16, &dt_bias);
  t.add("state_batch_indices", DType::kInt32, &slots);
  t.output("output", kB * kH * kP * 2);
  t.output("new_state", state.size() * 2);
  t.env.definition = &ref.op.definition;
  t.env.axes = {{"batch_size", kB}, {"state_cache_size", kCache},
                {"nheads", kH},     {"head_dim", kP},
                {"dstate", kN},     {"ngroups", kG}};
  device::Stream stream;
  const device::LaunchOutcome outcome = ref.launcher->launch(t.env, stream.get(), true);
  ASSERT_TRUE(outcome.ok) << outcome.message;

  std::vector<double> want(kB * kH * kP), want_state = state;
  for (int s = 0; s < kB; ++s) {
    for (int h = 0; h < kH; ++h) {
      const int g = h / (kH / kG);
      for (int p = 0; p < kP; ++p) {
        const std::size_t bhp = (static_cast<std::size_t>(s) * kH + h) * kP + p;
        const std::size_t hp = static_cast<std::size_t>(h) * kP + p;
        const double dtf = softplus(dt[bhp] + dt_bias[hp]);
        const std::size_t row = ((static_cast<std::size_t>(slots[s]) * kH + h) * kP + p) * kN;
        double y = 0;
        for (int n = 0; n < kN; ++n) {
          const double st = state[row + n] * std::exp(A[hp * kN + n] * dtf) +
                            dtf * x[bhp] * B[(static_cast<std::size_t>(s) * kG + g) * kN + n];
          want_state[row + n] = st;
          y += st * C[(static_cast<std::size_t>(s) * kG + g) * kN + n];
        }
        want[bhp] = y + x[bhp] * D[hp];
      }
    }
  }
  const auto got = t.read("output", DType::kBFloat16, want.size());
  EXPECT_EQ(count_bad(got, want, 1.0 / 128, 1e-3, "output"), 0);
  const auto got_state = t.read("new_state", DType::kBFloat16, want_state.size());
  EXPECT_EQ(count_bad(got_state, want_state, 1.0 / 128, 1e-3, "new_state"), 0);
}

}  // namespace
}  // namespace kharness
