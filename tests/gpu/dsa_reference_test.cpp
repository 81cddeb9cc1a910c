// The DSA families' reference kernels against plain double-precision implementations on the host,
// on small problems with the definitions' real head counts and widths. Compiled with
// compile_solution, launched through their own plans with PlanLauncher on host-made inputs.
//  - dsa_sparse_attention: 4 query tokens over a 40-page cache: a full row of 2048 distinct
//    indices, a row of 5 indices scattered among -1 padding, a row of one index, and a row of
//    only -1 (output 0, lse = -inf). Outputs within one bf16 ulp (+1e-5) of the exact value, lse
//    within 1e-4 relative (absolute below 1), base 2.
//  - dsa_topk_indexer: 4 requests (2500 tokens, exactly 2048, 100 and 0) over a 128-page fp8
//    cache in deep_gemm's layout; the selected set must be the exact top-k by double-precision
//    scores up to a 1e-5 relative tie tolerance, with min(2048, seq_len) distinct ids of the
//    request's tokens and -1 padding after them.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
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
#include "verify/index_inputs.hpp"

namespace kharness {
namespace {

using namespace reference_test;

TEST(DsaSparseAttentionReference, MatchesDoublePrecision) {
  SKIP_WITHOUT_GPU();
  constexpr int kTokens = 4, kHeads = 16, kCkv = 512, kKpe = 64, kPage = 64, kTopk = 2048;
  constexpr int kPages = 40;
  constexpr int kRows = kPages * kPage;
  CompiledReference c;
  ASSERT_NO_FATAL_FAILURE(compile_reference("dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64",
                                            "dsa_sparse_attention", &c));
  const device::PlanLauncher& launcher = *c.launcher;
  device::Stream stream;

  std::mt19937_64 rng(77);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto random_bf16 = [&](std::size_t n) {
    std::vector<double> v(n);
    for (auto& x : v) x = normal(rng);
    return encode(DType::kBFloat16, v);
  };
  const auto qn_bytes = random_bf16(std::size_t{kTokens} * kHeads * kCkv);
  const auto qp_bytes = random_bf16(std::size_t{kTokens} * kHeads * kKpe);
  const auto ckv_bytes = random_bf16(std::size_t{kRows} * kCkv);
  const auto kpe_bytes = random_bf16(std::size_t{kRows} * kKpe);
  const auto qn = decode(DType::kBFloat16, qn_bytes), qp = decode(DType::kBFloat16, qp_bytes);
  const auto ckv = decode(DType::kBFloat16, ckv_bytes), kpe = decode(DType::kBFloat16, kpe_bytes);

  std::vector<std::int32_t> indices(std::size_t{kTokens} * kTopk, -1);
  std::vector<std::int32_t> rows(kRows);
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng);
  std::copy(rows.begin(), rows.begin() + kTopk, indices.begin());          // token 0: a full row
  for (int j = 0; j < 5; ++j) indices[kTopk + 7 + 400 * j] = rows[j * 3];  // token 1: 5 scattered
  indices[2 * kTopk + kTopk - 1] = rows[11];                               // token 2: one index
  // token 3: only padding.

  const float sm_scale = static_cast<float>(1.0 / std::sqrt(192.0));
  device::DeviceBuffer dqn(qn_bytes.size()), dqp(qp_bytes.size()), dckv(ckv_bytes.size()),
      dkpe(kpe_bytes.size()), didx(indices.size() * 4), dout(qn_bytes.size()),
      dlse(std::size_t{kTokens} * kHeads * 4);
  dqn.upload(qn_bytes.data(), qn_bytes.size());
  dqp.upload(qp_bytes.data(), qp_bytes.size());
  dckv.upload(ckv_bytes.data(), ckv_bytes.size());
  dkpe.upload(kpe_bytes.data(), kpe_bytes.size());
  didx.upload(indices.data(), indices.size() * 4);
  dout.fill(0xFF);  // NaN: an unwritten element fails below
  dlse.fill(0xFF);

  device::LaunchEnv env;
  env.definition = &c.op.definition;
  env.axes = {{"num_tokens", kTokens}, {"num_qo_heads", kHeads}, {"head_dim_ckv", kCkv},
              {"head_dim_kpe", kKpe},  {"page_size", kPage},     {"topk", kTopk},
              {"num_pages", kPages}};
  env.tensors = {{"q_nope", dqn.ptr()},
                 {"q_pe", dqp.ptr()},
                 {"ckv_cache", dckv.ptr()},
                 {"kpe_cache", dkpe.ptr()},
                 {"sparse_indices", didx.ptr()},
                 {"output", dout.ptr()},
                 {"lse", dlse.ptr()}};
  env.scalars = {{"sm_scale", nlohmann::json(sm_scale)}};
  const device::LaunchOutcome outcome = launcher.launch(env, stream.get(), true);
  ASSERT_TRUE(outcome.ok) << outcome.message;

  std::vector<std::uint8_t> out_bytes(qn_bytes.size());
  dout.download(out_bytes.data(), out_bytes.size());
  const auto out = decode(DType::kBFloat16, out_bytes);
  std::vector<float> lse(std::size_t{kTokens} * kHeads);
  dlse.download(lse.data(), lse.size() * 4);

  const double scale = sm_scale;
  int bad = 0;
  for (int t = 0; t < kTokens; ++t) {
    std::vector<std::int32_t> valid;
    for (int i = 0; i < kTopk; ++i) {
      if (indices[static_cast<std::size_t>(t) * kTopk + i] != -1)
        valid.push_back(indices[t * kTopk + i]);
    }
    for (int h = 0; h < kHeads; ++h) {
      const std::size_t qo = static_cast<std::size_t>(t) * kHeads + h;
      std::vector<double> expected(kCkv, 0.0);
      double expected_lse = -std::numeric_limits<double>::infinity();
      if (!valid.empty()) {
        std::vector<double> logits(valid.size());
        for (std::size_t i = 0; i < valid.size(); ++i) {
          const std::size_t r = static_cast<std::size_t>(valid[i]);
          double dot = 0;
          for (int d = 0; d < kCkv; ++d) dot += qn[qo * kCkv + d] * ckv[r * kCkv + d];
          for (int d = 0; d < kKpe; ++d) dot += qp[qo * kKpe + d] * kpe[r * kKpe + d];
          logits[i] = dot * scale;
        }
        const double m = *std::max_element(logits.begin(), logits.end());
        double sum = 0;
        for (double l : logits) sum += std::exp(l - m);
        for (std::size_t i = 0; i < valid.size(); ++i) {
          const double p = std::exp(logits[i] - m) / sum;
          for (int d = 0; d < kCkv; ++d) expected[d] += p * ckv[std::size_t(valid[i]) * kCkv + d];
        }
        expected_lse = (m + std::log(sum)) / std::log(2.0);
      }
      for (int d = 0; d < kCkv; ++d) {
        const double e = expected[d], got = out[qo * kCkv + d];
        const double limit = std::ldexp(std::fabs(e), -7) + 1e-5;  // one bf16 ulp + small abs
        if (!std::isfinite(got) || std::fabs(got - e) > limit) {
          if (++bad <= 10) {
            ADD_FAILURE() << "token " << t << ", head " << h << ", dim " << d << ": expected " << e
                          << ", got " << got;
          }
        }
      }
      const double got_lse = lse[qo];
      const bool lse_ok =
          std::isinf(expected_lse)
              ? (std::isinf(got_lse) && got_lse < 0)
              : (std::isfinite(got_lse) && std::fabs(got_lse - expected_lse) <=
                                               1e-4 * std::max(1.0, std::fabs(expected_lse)));
      if (!lse_ok && ++bad <= 10) {
        ADD_FAILURE() << "token " << t << ", head " << h << ": lse expected " << expected_lse
                      << ", got " << got_lse;
      }
    }
  }
  EXPECT_EQ(bad, 0) << "outputs or lse off";
}

TEST(DsaTopkIndexerReference, SelectsTheExactTopKByDoublePrecisionScores) {
  SKIP_WITHOUT_GPU();
  constexpr int kBatch = 4, kHeads = 64, kDim = 128, kPage = 64, kTopk = 2048;
  constexpr int kMaxPages = 40, kPages = 4 * kMaxPages;
  CompiledReference c;
  ASSERT_NO_FATAL_FAILURE(
      compile_reference("dsa_topk_indexer_fp8_h64_d128_topk2048_ps64", "dsa_topk_indexer", &c));
  const device::PlanLauncher& launcher = *c.launcher;
  device::Stream stream;

  std::mt19937_64 rng(91);
  std::normal_distribution<double> q_dist(0.0, 64.0), w_dist(0.0, 1e-4);
  std::vector<double> qv(std::size_t{kBatch} * kHeads * kDim), wv(std::size_t{kBatch} * kHeads);
  for (auto& x : qv) x = std::clamp(q_dist(rng), -448.0, 448.0);
  for (auto& x : wv) x = w_dist(rng);
  const auto q_bytes = encode(DType::kFloat8E4M3, qv);
  const auto w_bytes = encode(DType::kFloat32, wv);
  const auto cache =
      verify::make_fp8_cache_with_scales(kPages, kPage, kDim, 100.0, 0.005, 0.012, 5);
  const std::vector<std::int32_t> seq_lens = {2500, kTopk, 100, 0};
  std::vector<std::int32_t> block_table(std::size_t{kBatch} * kMaxPages);
  {
    std::vector<std::int32_t> pages(kPages);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    std::copy(pages.begin(), pages.begin() + block_table.size(), block_table.begin());
  }

  device::DeviceBuffer dq(q_bytes.size()), dk(cache.size()), dw(w_bytes.size()),
      dlen(seq_lens.size() * 4), dtable(block_table.size() * 4),
      dout(std::size_t{kBatch} * kTopk * 4), dws(std::size_t{kBatch} * kMaxPages * kPage * 4);
  dq.upload(q_bytes.data(), q_bytes.size());
  dk.upload(cache.data(), cache.size());
  dw.upload(w_bytes.data(), w_bytes.size());
  dlen.upload(seq_lens.data(), seq_lens.size() * 4);
  dtable.upload(block_table.data(), block_table.size() * 4);
  dout.fill(0xAB);
  dws.fill(0xFF);

  device::LaunchEnv env;
  env.definition = &c.op.definition;
  env.axes = {{"batch_size", kBatch},
              {"num_index_heads", kHeads},
              {"index_head_dim", kDim},
              {"page_size", kPage},
              {"topk", kTopk},
              {"max_num_pages", kMaxPages},
              {"num_pages", kPages},
              {"kv_cache_num_heads", 1},
              {"head_dim_with_scale", 132}};
  env.tensors = {{"q_index_fp8", dq.ptr()},     {"k_index_cache_fp8", dk.ptr()},
                 {"weights", dw.ptr()},         {"seq_lens", dlen.ptr()},
                 {"block_table", dtable.ptr()}, {"topk_indices", dout.ptr()}};
  env.workspace = dws.ptr();
  const device::LaunchOutcome outcome = launcher.launch(env, stream.get(), true);
  ASSERT_TRUE(outcome.ok) << outcome.message;
  std::vector<std::int32_t> out(std::size_t{kBatch} * kTopk);
  dout.download(out.data(), out.size() * 4);

  const auto qd = decode(DType::kFloat8E4M3, q_bytes);
  for (int b = 0; b < kBatch; ++b) {
    SCOPED_TRACE("request " + std::to_string(b) + ", seq_len " + std::to_string(seq_lens[b]));
    // Exact scores of the request's tokens, by global id.
    std::map<std::int32_t, double> score;
    for (int i = 0; i < seq_lens[b]; ++i) {
      const int page = block_table[static_cast<std::size_t>(b) * kMaxPages + i / kPage],
                slot = i % kPage;
      const std::uint8_t* base = cache.data() + std::size_t(page) * kPage * (kDim + 4);
      float s;
      std::memcpy(&s, base + kPage * kDim + slot * 4, 4);
      double total = 0;
      for (int h = 0; h < kHeads; ++h) {
        double dot = 0;
        for (int d = 0; d < kDim; ++d) {
          dot += qd[(static_cast<std::size_t>(b) * kHeads + h) * kDim + d] *
                 to_double(DType::kFloat8E4M3, &base[slot * kDim + d]) * s;
        }
        total += wv[static_cast<std::size_t>(b) * kHeads + h] * std::max(dot, 0.0);
      }
      score[page * kPage + slot] = total;
    }
    const int k = std::min(kTopk, seq_lens[b]);
    std::vector<double> sorted;
    for (const auto& [id, s] : score) sorted.push_back(s);
    std::sort(sorted.rbegin(), sorted.rend());
    const double threshold = k > 0 ? sorted[k - 1] : 0.0;
    double scale = 0;
    for (double s : sorted) scale = std::max(scale, std::fabs(s));
    const double tie = 1e-5 * scale;

    std::set<std::int32_t> chosen;
    for (int j = 0; j < kTopk; ++j) {
      const std::int32_t id = out[static_cast<std::size_t>(b) * kTopk + j];
      if (j >= k) {
        EXPECT_EQ(id, -1) << "position " << j;
        continue;
      }
      ASSERT_TRUE(score.count(id))
          << "position " << j << ": " << id << " is not a token of the request";
      EXPECT_TRUE(chosen.insert(id).second) << "duplicate " << id;
      EXPECT_GE(score[id], threshold - tie) << "id " << id;
    }
    for (const auto& [id, s] : score) {
      if (!chosen.count(id)) {
        EXPECT_LE(s, threshold + tie) << "left out " << id;
      }
    }
  }
}

}  // namespace
}  // namespace kharness
