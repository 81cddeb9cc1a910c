// The gdn_decode and gdn_prefill family references (Gated Delta Net, k-last state) against a
// plain double-precision host implementation of FlashInfer-Bench's recurrence. As in
// gqa_reference_test.cpp, each reference is compiled with compile_solution and launched through
// its own plan with PlanLauncher on host-made inputs with the definitions' value ranges: the
// Qwen3-Next TP4 heads (4 q/k heads, 8 value heads, head size 128) and, to check that the
// references take every size from the axes, a smaller configuration (2 q/k heads, 6 value heads,
// head size 32). Prefill cases include an empty sequence (new_state must be 0) and sequences of
// 1 and up to 40 tokens; decode checks scale 0 (meaning 1/sqrt(head_size)). Outputs must be
// within one bf16 ulp plus 1e-5 of the exact value; new_state within 1e-5 + 1e-4 relative.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
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

// n values of `dist`, rounded to bf16 (is_bf16) or float32 on the host, so the expected values
// are computed from exactly what the device reads.
template <typename Dist>
std::vector<double> values(std::size_t n, std::mt19937_64& rng, Dist dist, bool is_bf16) {
  std::vector<double> v(n);
  for (auto& x : v) x = is_bf16 ? dist(rng) : static_cast<double>(static_cast<float>(dist(rng)));
  return is_bf16 ? from_bf16(to_bf16(v)) : v;
}

std::vector<float> to_f32(const std::vector<double>& v) { return {v.begin(), v.end()}; }

struct Config {
  int q_heads, k_heads, v_heads, head_size;
};

// The host inputs of one case; q/k/v/a/b have `tokens` rows, state has `seqs` matrices.
struct Inputs {
  std::vector<double> q, k, v, state, A_log, a, dt_bias, b;
};

Inputs make_inputs(const Config& c, int tokens, int seqs, std::mt19937_64& rng) {
  using normal = std::normal_distribution<double>;
  using uniform = std::uniform_real_distribution<double>;
  const std::size_t qk = static_cast<std::size_t>(tokens) * c.q_heads * c.head_size;
  const std::size_t vn = static_cast<std::size_t>(tokens) * c.v_heads * c.head_size;
  Inputs in;
  in.q = values(qk, rng, normal(0.0, 1.0 / std::sqrt(128.0)), true);
  in.k = values(qk, rng, normal(0.0, 1.0 / std::sqrt(128.0)), true);
  in.v = values(vn, rng, normal(0.0, 1.0), true);
  in.state = values(static_cast<std::size_t>(seqs) * c.v_heads * c.head_size * c.head_size, rng,
                    normal(0.0, 0.5), false);
  in.A_log = values(c.v_heads, rng, uniform(0.0, 2.5), false);
  in.a = values(static_cast<std::size_t>(tokens) * c.v_heads, rng, normal(0.0, 1.0), true);
  in.dt_bias = values(c.v_heads, rng, uniform(-6.9, -2.3), false);
  in.b = values(static_cast<std::size_t>(tokens) * c.v_heads, rng, normal(0.0, 1.0), true);
  return in;
}

// FlashInfer-Bench's recurrence in double precision over the tokens [begin, end) of one
// sequence, for every value head. `s` is the sequence's k-last state [H][V][K], updated in place;
// `out` [tokens][H][V] receives the outputs of those tokens.
void recurrence(const Config& c, const Inputs& in, long begin, long end, double scale,
                std::vector<double>& s, std::size_t s_offset, std::vector<double>& out) {
  const int K = c.head_size;
  for (long t = begin; t < end; ++t) {
    for (int h = 0; h < c.v_heads; ++h) {
      const double* q =
          &in.q[(static_cast<std::size_t>(t) * c.q_heads + h / (c.v_heads / c.q_heads)) * K];
      const double* k =
          &in.k[(static_cast<std::size_t>(t) * c.k_heads + h / (c.v_heads / c.k_heads)) * K];
      const std::size_t th = static_cast<std::size_t>(t) * c.v_heads + h;
      const double x = in.a[th] + in.dt_bias[h];
      const double softplus = x > 20.0 ? x : std::log1p(std::exp(x));
      const double g = std::exp(-std::exp(in.A_log[h]) * softplus);
      const double beta = 1.0 / (1.0 + std::exp(-in.b[th]));
      double* m = &s[s_offset + static_cast<std::size_t>(h) * K * K];  // m[v * K + k] = S[k][v]
      for (int v = 0; v < K; ++v) {
        double old_v = 0;
        for (int kk = 0; kk < K; ++kk) old_v += k[kk] * g * m[v * K + kk];
        const double new_v = beta * in.v[th * K + v] + (1 - beta) * old_v;
        double o = 0;
        for (int kk = 0; kk < K; ++kk) {
          m[v * K + kk] = g * m[v * K + kk] - k[kk] * old_v + k[kk] * new_v;
          o += q[kk] * m[v * K + kk];
        }
        out[th * K + v] = scale * o;
      }
    }
  }
}

// Counts elements of `got` farther than `rel * |expected| + abs` from `expected`.
int count_bad(const char* what, const std::vector<double>& expected, const std::vector<double>& got,
              double rel, double abs) {
  int bad = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double limit = rel * std::fabs(expected[i]) + abs;
    if (!std::isfinite(got[i]) || std::fabs(got[i] - expected[i]) > limit) {
      if (++bad <= 10) {
        ADD_FAILURE() << what << " element " << i << ": expected " << expected[i] << ", got "
                      << got[i] << " (|diff| " << std::fabs(got[i] - expected[i]) << " > " << limit
                      << ")";
      }
    }
  }
  return bad;
}

struct Buffers {
  device::DeviceBuffer q, k, v, state, A_log, a, dt_bias, b;
};

std::unique_ptr<Buffers> upload(const Inputs& in) {
  auto bytes_of = [](const std::vector<double>& v, bool is_bf16) {
    if (is_bf16) return to_bf16(v);
    std::vector<float> f = to_f32(v);
    std::vector<std::uint8_t> out(f.size() * 4);
    std::memcpy(out.data(), f.data(), out.size());
    return out;
  };
  auto make = [&](const std::vector<double>& v, bool is_bf16) {
    auto bytes = bytes_of(v, is_bf16);
    device::DeviceBuffer d(std::max<std::size_t>(bytes.size(), 4));
    if (!bytes.empty()) d.upload(bytes.data(), bytes.size());
    return d;
  };
  return std::unique_ptr<Buffers>(new Buffers{
      make(in.q, true), make(in.k, true), make(in.v, true), make(in.state, false),
      make(in.A_log, false), make(in.a, true), make(in.dt_bias, false), make(in.b, true)});
}

void bind_inputs(const Buffers& d, device::LaunchEnv& env) {
  env.tensors = {{"q", d.q.ptr()},
                 {"k", d.k.ptr()},
                 {"v", d.v.ptr()},
                 {"state", d.state.ptr()},
                 {"A_log", d.A_log.ptr()},
                 {"a", d.a.ptr()},
                 {"dt_bias", d.dt_bias.ptr()},
                 {"b", d.b.ptr()}};
}

const Config kConfigs[] = {{4, 4, 8, 128}, {2, 2, 6, 32}};

std::string describe(const Config& c) {
  return "heads " + std::to_string(c.q_heads) + "/" + std::to_string(c.k_heads) + "/" +
         std::to_string(c.v_heads) + ", head_size " + std::to_string(c.head_size);
}

TEST(GdnDecodeReference, MatchesDoublePrecision) {
  SKIP_WITHOUT_GPU();
  CompiledReference ref;
  ASSERT_NO_FATAL_FAILURE(compile_reference("gdn_decode_qk4_v8_d128_k_last", "gdn_decode", &ref));
  device::Stream stream;
  std::mt19937_64 rng(20260521);
  for (const Config& c : kConfigs) {
    for (float scale_in : {0.08838834764831845f, 0.0f}) {
      SCOPED_TRACE(describe(c) + ", scale " + std::to_string(scale_in));
      const int batch = 5;
      const Inputs in = make_inputs(c, batch, batch, rng);
      const auto d = upload(in);
      const std::size_t out_count = static_cast<std::size_t>(batch) * c.v_heads * c.head_size;
      device::DeviceBuffer dout(out_count * 2), dstate(in.state.size() * 4);
      dout.fill(0xFF);  // NaN: an unwritten element fails
      dstate.fill(0xFF);
      device::LaunchEnv env;
      env.definition = &ref.op.definition;
      env.axes = {{"batch_size", batch},      {"seq_len", 1},
                  {"num_q_heads", c.q_heads}, {"num_k_heads", c.k_heads},
                  {"num_v_heads", c.v_heads}, {"head_size", c.head_size}};
      bind_inputs(*d, env);
      env.tensors["output"] = dout.ptr();
      env.tensors["new_state"] = dstate.ptr();
      env.scalars = {{"scale", nlohmann::json(scale_in)}};
      const device::LaunchOutcome outcome = ref.launcher->launch(env, stream.get(), true);
      ASSERT_TRUE(outcome.ok) << outcome.message;

      std::vector<std::uint8_t> ob(out_count * 2);
      dout.download(ob.data(), ob.size());
      std::vector<float> sf(in.state.size());
      dstate.download(sf.data(), sf.size() * 4);

      const double scale =
          scale_in == 0.0f ? static_cast<double>(1.0f / std::sqrt(static_cast<float>(c.head_size)))
                           : static_cast<double>(scale_in);
      std::vector<double> expected_state = in.state, expected_out(out_count);
      // Decode is the recurrence over one token per sequence: token b uses matrix b.
      const std::size_t matrix = static_cast<std::size_t>(c.v_heads) * c.head_size * c.head_size;
      for (int b = 0; b < batch; ++b) {
        recurrence(c, in, b, b + 1, scale, expected_state, b * matrix, expected_out);
      }
      EXPECT_EQ(count_bad("output", expected_out, from_bf16(ob), std::ldexp(1.0, -7), 1e-5), 0);
      EXPECT_EQ(count_bad("new_state", expected_state, {sf.begin(), sf.end()}, 1e-4, 1e-5), 0);
    }
  }
}

TEST(GdnPrefillReference, MatchesDoublePrecision) {
  SKIP_WITHOUT_GPU();
  CompiledReference ref;
  ASSERT_NO_FATAL_FAILURE(compile_reference("gdn_prefill_qk4_v8_d128_k_last", "gdn_prefill", &ref));
  device::Stream stream;
  std::mt19937_64 rng(20260522);
  // Sequence lengths per case: an empty sequence, a one-token sequence, longer ones.
  const std::vector<std::vector<long>> cases = {{17, 0, 1, 40}, {3}, {0, 25}};
  for (const Config& c : kConfigs) {
    for (const auto& lengths : cases) {
      SCOPED_TRACE(describe(c) + ", " + std::to_string(lengths.size()) + " sequences");
      const int seqs = static_cast<int>(lengths.size());
      std::vector<std::int64_t> cu(seqs + 1, 0);
      for (int n = 0; n < seqs; ++n) cu[n + 1] = cu[n] + lengths[n];
      const int tokens = static_cast<int>(cu[seqs]);
      const Inputs in = make_inputs(c, tokens, seqs, rng);
      const auto d = upload(in);
      device::DeviceBuffer dcu(cu.size() * 8);
      dcu.upload(cu.data(), cu.size() * 8);
      const std::size_t out_count = static_cast<std::size_t>(tokens) * c.v_heads * c.head_size;
      device::DeviceBuffer dout(std::max<std::size_t>(out_count * 2, 4)),
          dstate(in.state.size() * 4);
      dout.fill(0xFF);
      dstate.fill(0xFF);
      device::LaunchEnv env;
      env.definition = &ref.op.definition;
      env.axes = {{"total_seq_len", tokens},   {"num_seqs", seqs},
                  {"num_q_heads", c.q_heads},  {"num_k_heads", c.k_heads},
                  {"num_v_heads", c.v_heads},  {"head_size", c.head_size},
                  {"len_cu_seqlens", seqs + 1}};
      bind_inputs(*d, env);
      env.tensors["cu_seqlens"] = dcu.ptr();
      env.tensors["output"] = dout.ptr();
      env.tensors["new_state"] = dstate.ptr();
      const float scale_in = 0.08838834764831845f;
      env.scalars = {{"scale", nlohmann::json(scale_in)}};
      const device::LaunchOutcome outcome = ref.launcher->launch(env, stream.get(), true);
      ASSERT_TRUE(outcome.ok) << outcome.message;

      std::vector<std::uint8_t> ob(out_count * 2);
      if (out_count) dout.download(ob.data(), ob.size());
      std::vector<float> sf(in.state.size());
      dstate.download(sf.data(), sf.size() * 4);

      std::vector<double> expected_state = in.state, expected_out(out_count);
      const std::size_t matrix = static_cast<std::size_t>(c.v_heads) * c.head_size * c.head_size;
      for (int n = 0; n < seqs; ++n) {
        if (lengths[n] == 0) {  // FlashInfer-Bench: new_state stays 0 for an empty sequence
          std::fill(expected_state.begin() + n * matrix, expected_state.begin() + (n + 1) * matrix,
                    0.0);
          continue;
        }
        recurrence(c, in, cu[n], cu[n + 1], static_cast<double>(scale_in), expected_state,
                   n * matrix, expected_out);
      }
      EXPECT_EQ(count_bad("output", expected_out, from_bf16(ob), std::ldexp(1.0, -7), 1e-5), 0);
      EXPECT_EQ(count_bad("new_state", expected_state, {sf.begin(), sf.end()}, 1e-4, 1e-5), 0);
    }
  }
}

}  // namespace
}  // namespace kharness
