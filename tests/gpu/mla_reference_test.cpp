// The mla_paged_decode family's reference kernel against a plain double-precision paged MLA
// decode (absorbed form: the latent is key and value, shared by every head) on the host. As in
// gqa_reference_test.cpp it is compiled with compile_solution and launched through its own plan
// with PlanLauncher on host-made inputs: batch 3 with host-made indptr (a one-page and an empty
// request among the cases) and distinct shuffled page ids, for DeepSeek-V3's TP8 dimensions (16
// heads, 512 + 64, page size 1) and, to check that every size comes from the axes, a small
// configuration (3 heads, 64 + 16, page size 4). Every output must be within one bf16 ulp (plus
// 1e-5 absolute) of the exact value, every lse within 1e-4 relative (absolute below 1), and an
// empty request must give output 0 and lse = -inf. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
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

struct Config {
  int heads, ckv, kpe, page_size, num_pages;
};

TEST(MlaPagedDecodeReference, MatchesDoublePrecision) {
  SKIP_WITHOUT_GPU();
  CompiledReference ref;
  ASSERT_NO_FATAL_FAILURE(
      compile_reference("mla_paged_decode_h16_ckv512_kpe64_ps1", "mla_paged_decode", &ref));
  const Operator& op = ref.op;
  const device::PlanLauncher& launcher = *ref.launcher;
  device::Stream stream;

  constexpr int kBatch = 3;
  std::mt19937_64 rng(20260523);
  std::normal_distribution<double> normal(0.0, 1.0);
  const float sm_scale = 0.1352337747812271f;
  const double scale = static_cast<double>(sm_scale);  // the float32 value the kernel receives
  std::uniform_int_distribution<int> length(0, 40);

  for (const Config& c : {Config{16, 512, 64, 1, 200}, Config{3, 64, 16, 4, 128}}) {
    // Request lengths (in pages): ordinary, one-page and empty requests, and random ones.
    const std::vector<std::vector<int>> cases = {
        {37, 1, 60}, {0, 23, 5}, {length(rng) % 20, length(rng) % 20, length(rng) % 20}};
    for (const auto& lengths : cases) {
      SCOPED_TRACE("heads " + std::to_string(c.heads) + ", page_size " +
                   std::to_string(c.page_size) + ", lengths " + std::to_string(lengths[0]) + "," +
                   std::to_string(lengths[1]) + "," + std::to_string(lengths[2]));
      std::vector<std::int32_t> indptr(kBatch + 1, 0);
      for (int b = 0; b < kBatch; ++b) indptr[b + 1] = indptr[b] + lengths[b];
      const int total = indptr[kBatch];
      ASSERT_LE(total, c.num_pages);
      std::vector<std::int32_t> pages(c.num_pages);
      std::iota(pages.begin(), pages.end(), 0);
      std::shuffle(pages.begin(), pages.end(), rng);
      std::vector<std::int32_t> indices(pages.begin(), pages.begin() + total);

      auto draw = [&](std::size_t n, double stddev) {
        std::vector<double> v(n);
        for (auto& x : v) x = stddev * normal(rng);
        return from_bf16(to_bf16(v));
      };
      const std::size_t rows = static_cast<std::size_t>(c.num_pages) * c.page_size;
      const std::vector<double> qn = draw(static_cast<std::size_t>(kBatch) * c.heads * c.ckv, 0.5);
      const std::vector<double> qp = draw(static_cast<std::size_t>(kBatch) * c.heads * c.kpe, 0.5);
      const std::vector<double> ckv = draw(rows * c.ckv, 1.0);
      const std::vector<double> kpe = draw(rows * c.kpe, 1.0);
      const auto qn_b = to_bf16(qn), qp_b = to_bf16(qp), ckv_b = to_bf16(ckv), kpe_b = to_bf16(kpe);

      device::DeviceBuffer dqn(qn_b.size()), dqp(qp_b.size()), dckv(ckv_b.size()),
          dkpe(kpe_b.size());
      device::DeviceBuffer dindptr(indptr.size() * 4),
          dindices(std::max<std::size_t>(indices.size(), 1) * 4);
      device::DeviceBuffer dout(qn_b.size()), dlse(static_cast<std::size_t>(kBatch) * c.heads * 4);
      dqn.upload(qn_b.data(), qn_b.size());
      dqp.upload(qp_b.data(), qp_b.size());
      dckv.upload(ckv_b.data(), ckv_b.size());
      dkpe.upload(kpe_b.data(), kpe_b.size());
      dindptr.upload(indptr.data(), indptr.size() * 4);
      if (!indices.empty()) dindices.upload(indices.data(), indices.size() * 4);
      dout.fill(0xFF);  // NaN: an unwritten element fails below
      dlse.fill(0xFF);

      device::LaunchEnv env;
      env.definition = &op.definition;
      env.axes = {{"batch_size", kBatch},     {"num_qo_heads", c.heads},
                  {"head_dim_ckv", c.ckv},    {"head_dim_kpe", c.kpe},
                  {"page_size", c.page_size}, {"num_pages", c.num_pages},
                  {"len_indptr", kBatch + 1}, {"num_kv_indices", total}};
      env.tensors = {{"q_nope", dqn.ptr()},        {"q_pe", dqp.ptr()},
                     {"ckv_cache", dckv.ptr()},    {"kpe_cache", dkpe.ptr()},
                     {"kv_indptr", dindptr.ptr()}, {"kv_indices", dindices.ptr()},
                     {"output", dout.ptr()},       {"lse", dlse.ptr()}};
      env.scalars = {{"sm_scale", nlohmann::json(sm_scale)}};
      const device::LaunchOutcome outcome = launcher.launch(env, stream.get(), true);
      ASSERT_TRUE(outcome.ok) << outcome.message;

      std::vector<std::uint8_t> out_bytes(qn_b.size());
      dout.download(out_bytes.data(), out_bytes.size());
      const std::vector<double> out = from_bf16(out_bytes);
      std::vector<float> lse(static_cast<std::size_t>(kBatch) * c.heads);
      dlse.download(lse.data(), lse.size() * 4);

      int bad = 0;
      for (int b = 0; b < kBatch; ++b) {
        std::vector<std::size_t> toks;  // cache rows of the request's tokens, in order
        for (int p = indptr[b]; p < indptr[b + 1]; ++p) {
          for (int s = 0; s < c.page_size; ++s) {
            toks.push_back(static_cast<std::size_t>(indices[p]) * c.page_size + s);
          }
        }
        for (int h = 0; h < c.heads; ++h) {
          const std::size_t bh = static_cast<std::size_t>(b) * c.heads + h;
          std::vector<double> expected(c.ckv, 0.0);
          double expected_lse = -std::numeric_limits<double>::infinity();
          if (!toks.empty()) {
            std::vector<double> logits(toks.size());
            for (std::size_t t = 0; t < toks.size(); ++t) {
              double dot = 0;
              for (int d = 0; d < c.ckv; ++d) dot += qn[bh * c.ckv + d] * ckv[toks[t] * c.ckv + d];
              for (int d = 0; d < c.kpe; ++d) dot += qp[bh * c.kpe + d] * kpe[toks[t] * c.kpe + d];
              logits[t] = dot * scale;
            }
            const double m = *std::max_element(logits.begin(), logits.end());
            double sum = 0;
            for (double l : logits) sum += std::exp(l - m);
            for (std::size_t t = 0; t < toks.size(); ++t) {
              const double p = std::exp(logits[t] - m) / sum;
              for (int d = 0; d < c.ckv; ++d) expected[d] += p * ckv[toks[t] * c.ckv + d];
            }
            expected_lse = (m + std::log(sum)) / std::log(2.0);
          }
          for (int d = 0; d < c.ckv; ++d) {
            const double e = expected[d];
            const double got = out[bh * c.ckv + d];
            const double limit = std::ldexp(std::fabs(e), -7) + 1e-5;  // one bf16 ulp + small abs
            if (!std::isfinite(got) || std::fabs(got - e) > limit) {
              if (++bad <= 10) {
                ADD_FAILURE() << "b " << b << ", head " << h << ", dim " << d << ": expected " << e
                              << ", got " << got << " (limit " << limit << ")";
              }
            }
          }
          const double got_lse = lse[bh];
          const bool lse_ok =
              std::isinf(expected_lse)
                  ? (std::isinf(got_lse) && got_lse < 0)
                  : (std::isfinite(got_lse) && std::fabs(got_lse - expected_lse) <=
                                                   1e-4 * std::max(1.0, std::fabs(expected_lse)));
          if (!lse_ok && ++bad <= 10) {
            ADD_FAILURE() << "b " << b << ", head " << h << ": lse expected " << expected_lse
                          << ", got " << got_lse;
          }
        }
      }
      EXPECT_EQ(bad, 0) << "outputs or lse off";
    }
  }
}

}  // namespace
}  // namespace kharness
