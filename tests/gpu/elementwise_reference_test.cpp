// The fused_add_rmsnorm, silu_and_mul, embedding and rope family references against plain
// double-precision host implementations on small shapes. As in reference_test.cpp, each reference
// is compiled with compile_solution and launched through its own plan with PlanLauncher on
// host-made inputs; bf16 outputs must be within one bf16 ulp of the exact value (rope: plus 1e-5
// absolute, the float32 error where x1*cos and x2*sin cancel), embedding outputs bit-exact.
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

template <typename T>
std::vector<std::uint8_t> raw_bytes(const std::vector<T>& values) {
  std::vector<std::uint8_t> out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Random bf16 values, rounded on the host so the expected values are computed from exactly what
// the device reads.
std::vector<double> bf16_values(std::size_t n, std::mt19937_64& rng, double mean, double stddev) {
  std::normal_distribution<double> normal(mean, stddev);
  std::vector<double> v(n);
  for (auto& x : v) x = normal(rng);
  return from_bf16(to_bf16(v));
}

// Counts elements of `got` farther than one bf16 ulp (plus `abs_slack`) from `expected`.
int count_bad(const std::vector<double>& expected, const std::vector<double>& got,
              double abs_slack) {
  int bad = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    // One bf16 ulp of |expected| is at most 2^-7 |expected|; 1e-30 covers exact zeros.
    const double limit = std::ldexp(std::fabs(expected[i]), -7) + abs_slack + 1e-30;
    if (!std::isfinite(got[i]) || std::fabs(got[i] - expected[i]) > limit) {
      if (++bad <= 10) {
        ADD_FAILURE() << "element " << i << ": expected " << expected[i] << ", got " << got[i]
                      << " (|diff| " << std::fabs(got[i] - expected[i]) << " > " << limit << ")";
      }
    }
  }
  return bad;
}

TEST(FusedAddRmsnormReference, MatchesDoublePrecisionWithinOneBf16Ulp) {
  SKIP_WITHOUT_GPU();
  CompiledReference ref;
  ASSERT_NO_FATAL_FAILURE(compile_reference("fused_add_rmsnorm_h4096", "fused_add_rmsnorm", &ref));
  device::Stream stream;
  constexpr int kHidden = 4096;
  constexpr double kEps = 1e-5;
  std::mt19937_64 rng(20240612);
  std::uniform_real_distribution<double> uniform(0.5, 1.5);

  for (int batch : {1, 3, 17}) {
    SCOPED_TRACE("batch_size " + std::to_string(batch));
    const std::size_t n = static_cast<std::size_t>(batch) * kHidden;
    std::vector<double> h = bf16_values(n, rng, 0.0, 1.0), r = bf16_values(n, rng, 0.0, 1.0),
                        w(kHidden);
    for (int row = 0; row < batch; ++row) {  // rows scaled by 2^(row % 7 - 3): magnitudes 1/8 to 8
      const double scale = std::ldexp(1.0, row % 7 - 3);
      for (int i = 0; i < kHidden; ++i) {
        h[row * kHidden + i] *= scale;  // exact: a power of two
        r[row * kHidden + i] *= scale;
      }
    }
    for (auto& v : w) v = uniform(rng);
    w = from_bf16(to_bf16(w));
    const auto hb = to_bf16(h), rb = to_bf16(r), wb = to_bf16(w);

    device::DeviceBuffer dh(hb.size()), dr(rb.size()), dw(wb.size()), dy(hb.size());
    dh.upload(hb.data(), hb.size());
    dr.upload(rb.data(), rb.size());
    dw.upload(wb.data(), wb.size());
    dy.fill(0xFF);  // NaN: an unwritten element fails
    device::LaunchEnv env;
    env.definition = &ref.op.definition;
    env.axes = {{"batch_size", batch}, {"hidden_size", kHidden}};
    env.tensors = {{"hidden_states", dh.ptr()},
                   {"residual", dr.ptr()},
                   {"weight", dw.ptr()},
                   {"output", dy.ptr()}};
    const device::LaunchOutcome outcome = ref.launcher->launch(env, stream.get(), true);
    ASSERT_TRUE(outcome.ok) << outcome.message;
    std::vector<std::uint8_t> yb(hb.size());
    dy.download(yb.data(), yb.size());

    std::vector<double> expected(n);
    for (int row = 0; row < batch; ++row) {
      double sum = 0;
      for (int i = 0; i < kHidden; ++i) {
        const double x = h[row * kHidden + i] + r[row * kHidden + i];
        sum += x * x;
      }
      const double inv_rms = 1.0 / std::sqrt(sum / kHidden + kEps);
      for (int i = 0; i < kHidden; ++i) {
        expected[row * kHidden + i] =
            (h[row * kHidden + i] + r[row * kHidden + i]) * inv_rms * w[i];
      }
    }
    EXPECT_EQ(count_bad(expected, from_bf16(yb), 0.0), 0)
        << "elements off by more than one bf16 ulp";
  }
}

TEST(SiluAndMulReference, MatchesDoublePrecisionWithinOneBf16Ulp) {
  SKIP_WITHOUT_GPU();
  CompiledReference ref;
  ASSERT_NO_FATAL_FAILURE(compile_reference("silu_and_mul_i14336", "silu_and_mul", &ref));
  device::Stream stream;
  constexpr int kInter = 14336;
  std::mt19937_64 rng(20240613);

  for (int tokens : {1, 2, 5}) {
    SCOPED_TRACE("num_tokens " + std::to_string(tokens));
    const std::vector<double> x =
        bf16_values(static_cast<std::size_t>(tokens) * 2 * kInter, rng, 0.0, 3.0);
    const auto xb = to_bf16(x);
    const std::size_t out_bytes = static_cast<std::size_t>(tokens) * kInter * 2;
    device::DeviceBuffer dx(xb.size()), dy(out_bytes);
    dx.upload(xb.data(), xb.size());
    dy.fill(0xFF);
    device::LaunchEnv env;
    env.definition = &ref.op.definition;
    env.axes = {
        {"num_tokens", tokens}, {"intermediate_size", kInter}, {"gate_up_size", 2 * kInter}};
    env.tensors = {{"x", dx.ptr()}, {"out", dy.ptr()}};
    const device::LaunchOutcome outcome = ref.launcher->launch(env, stream.get(), true);
    ASSERT_TRUE(outcome.ok) << outcome.message;
    std::vector<std::uint8_t> yb(out_bytes);
    dy.download(yb.data(), yb.size());

    std::vector<double> expected(static_cast<std::size_t>(tokens) * kInter);
    for (int t = 0; t < tokens; ++t) {
      for (int i = 0; i < kInter; ++i) {
        const double g = x[static_cast<std::size_t>(t) * 2 * kInter + i];
        const double u = x[static_cast<std::size_t>(t) * 2 * kInter + kInter + i];
        expected[static_cast<std::size_t>(t) * kInter + i] = g / (1.0 + std::exp(-g)) * u;
      }
    }
    EXPECT_EQ(count_bad(expected, from_bf16(yb), 0.0), 0)
        << "elements off by more than one bf16 ulp";
  }
}

TEST(EmbeddingReference, CopiesRowsBitExactly) {
  SKIP_WITHOUT_GPU();
  CompiledReference ref;
  ASSERT_NO_FATAL_FAILURE(compile_reference("embedding_v128256_h4096", "embedding", &ref));
  device::Stream stream;
  // A small table: the reference takes hidden_size as an argument and never reads vocab_size.
  constexpr int kVocab = 1000, kHidden = 4096;
  std::mt19937_64 rng(20240614);
  std::vector<std::uint16_t> table(static_cast<std::size_t>(kVocab) * kHidden);
  for (auto& v : table) v = static_cast<std::uint16_t>(rng());  // any bits, NaN patterns included
  const auto table_bytes = raw_bytes(table);
  device::DeviceBuffer dw(table_bytes.size());
  dw.upload(table_bytes.data(), table_bytes.size());

  for (int tokens : {1, 4, 33}) {
    SCOPED_TRACE("num_tokens " + std::to_string(tokens));
    std::vector<std::int32_t> ids(tokens);
    for (int t = 0; t < tokens; ++t) ids[t] = static_cast<std::int32_t>(rng() % kVocab);
    ids[0] = kVocab - 1;  // the last row
    if (tokens > 1) ids[1] = 0;
    const auto id_bytes = raw_bytes(ids);
    const std::size_t out_bytes = static_cast<std::size_t>(tokens) * kHidden * 2;
    device::DeviceBuffer di(id_bytes.size()), dy(out_bytes);
    di.upload(id_bytes.data(), id_bytes.size());
    dy.fill(0xA5);
    device::LaunchEnv env;
    env.definition = &ref.op.definition;
    env.axes = {{"num_tokens", tokens}, {"vocab_size", kVocab}, {"hidden_size", kHidden}};
    env.tensors = {{"input_ids", di.ptr()}, {"weight", dw.ptr()}, {"output", dy.ptr()}};
    const device::LaunchOutcome outcome = ref.launcher->launch(env, stream.get(), true);
    ASSERT_TRUE(outcome.ok) << outcome.message;
    std::vector<std::uint16_t> y(static_cast<std::size_t>(tokens) * kHidden);
    dy.download(y.data(), out_bytes);
    int bad = 0;
    for (int t = 0; t < tokens; ++t) {
      for (int i = 0; i < kHidden; ++i) {
        if (y[static_cast<std::size_t>(t) * kHidden + i] !=
            table[static_cast<std::size_t>(ids[t]) * kHidden + i]) {
          if (++bad <= 10) ADD_FAILURE() << "token " << t << ", element " << i << " differs";
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(RopeReference, MatchesDoublePrecisionWithinOneBf16Ulp) {
  SKIP_WITHOUT_GPU();
  CompiledReference ref;
  ASSERT_NO_FATAL_FAILURE(
      compile_reference("rope_with_cos_sin_cache_neox_style_d128_rd64", "rope", &ref));
  device::Stream stream;
  constexpr int kHead = 128, kRot = 64, kHalf = kRot / 2, kMaxSeq = 97;
  std::mt19937_64 rng(20240615);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);

  // A real cos/sin table for some rows (theta 10000) and random values for the others.
  std::vector<float> cache(static_cast<std::size_t>(kMaxSeq) * kRot);
  for (int p = 0; p < kMaxSeq; ++p) {
    for (int j = 0; j < kHalf; ++j) {
      const double angle = p * std::pow(10000.0, -2.0 * j / kRot);
      const bool real = p % 2 == 0;
      cache[p * kRot + j] = static_cast<float>(real ? std::cos(angle) : unit(rng));
      cache[p * kRot + kHalf + j] = static_cast<float>(real ? std::sin(angle) : unit(rng));
    }
  }
  const auto cache_bytes = raw_bytes(cache);
  device::DeviceBuffer dc(cache_bytes.size());
  dc.upload(cache_bytes.data(), cache_bytes.size());

  struct Shape {
    int tokens, qo_heads, kv_heads;
  };
  for (const Shape s : {Shape{1, 4, 1}, Shape{7, 32, 8}, Shape{3, 6, 2}}) {
    SCOPED_TRACE("num_tokens " + std::to_string(s.tokens) + ", heads " +
                 std::to_string(s.qo_heads) + "/" + std::to_string(s.kv_heads));
    std::vector<std::int64_t> pos(s.tokens);
    for (auto& p : pos) p = static_cast<std::int64_t>(rng() % kMaxSeq);
    pos[0] = kMaxSeq - 1;
    const std::size_t nq = static_cast<std::size_t>(s.tokens) * s.qo_heads * kHead;
    const std::size_t nk = static_cast<std::size_t>(s.tokens) * s.kv_heads * kHead;
    const std::vector<double> q = bf16_values(nq, rng, 0.0, 2.0),
                              k = bf16_values(nk, rng, 0.0, 2.0);
    const auto qb = to_bf16(q), kb = to_bf16(k), pb = raw_bytes(pos);
    device::DeviceBuffer dq(qb.size()), dk(kb.size()), dp(pb.size()), dqo(qb.size()),
        dko(kb.size());
    dq.upload(qb.data(), qb.size());
    dk.upload(kb.data(), kb.size());
    dp.upload(pb.data(), pb.size());
    dqo.fill(0xFF);
    dko.fill(0xFF);
    device::LaunchEnv env;
    env.definition = &ref.op.definition;
    env.axes = {{"num_tokens", s.tokens},     {"num_qo_heads", s.qo_heads},
                {"num_kv_heads", s.kv_heads}, {"head_size", kHead},
                {"rotary_dim", kRot},         {"max_seq_len", kMaxSeq}};
    env.tensors = {{"q", dq.ptr()},         {"k", dk.ptr()},      {"cos_sin_cache", dc.ptr()},
                   {"positions", dp.ptr()}, {"q_out", dqo.ptr()}, {"k_out", dko.ptr()}};
    const device::LaunchOutcome outcome = ref.launcher->launch(env, stream.get(), true);
    ASSERT_TRUE(outcome.ok) << outcome.message;
    std::vector<std::uint8_t> qob(qb.size()), kob(kb.size());
    dqo.download(qob.data(), qob.size());
    dko.download(kob.data(), kob.size());

    auto expect = [&](const std::vector<double>& x, int heads) {
      std::vector<double> out(x.size());
      for (int t = 0; t < s.tokens; ++t) {
        const float* cs = &cache[static_cast<std::size_t>(pos[t]) * kRot];
        for (int h = 0; h < heads; ++h) {
          const std::size_t base = (static_cast<std::size_t>(t) * heads + h) * kHead;
          for (int d = 0; d < kHead; ++d) {
            double v = x[base + d];
            if (d < kHalf) {
              v = x[base + d] * cs[d] - x[base + d + kHalf] * cs[kHalf + d];
            } else if (d < kRot) {
              v = x[base + d] * cs[d - kHalf] + x[base + d - kHalf] * cs[d];
            }
            out[base + d] = v;
          }
        }
      }
      return out;
    };
    EXPECT_EQ(count_bad(expect(q, s.qo_heads), from_bf16(qob), 1e-5), 0) << "q_out";
    EXPECT_EQ(count_bad(expect(k, s.kv_heads), from_bf16(kob), 1e-5), 0) << "k_out";
  }
}

}  // namespace
}  // namespace kharness
