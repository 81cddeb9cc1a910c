// The gqa_paged_decode family's reference kernel against a plain double-precision paged GQA
// decode attention on the host. Compiled with compile_solution, launched through its own plan
// with PlanLauncher on host-made inputs: batch 3, a small paged cache, host-made indptr (with a
// one-token and an empty request among the cases) and distinct shuffled page ids. Every output
// must be within one bf16 ulp (plus 1e-5 absolute) of the exact value, every lse within 1e-4
// relative (absolute below 1), and an empty request must give output 0 and lse = -inf, as in
// FlashInfer-Bench's reference. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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

constexpr int kQoHeads = 32;
constexpr int kKvHeads = 8;
constexpr int kHeadDim = 128;
constexpr int kPageSize = 1;
constexpr int kNumPages = 64;
constexpr int kBatch = 3;

TEST(GqaPagedDecodeReference, MatchesDoublePrecision) {
  SKIP_WITHOUT_GPU();
  CompiledReference ref;
  ASSERT_NO_FATAL_FAILURE(
      compile_reference("gqa_paged_decode_h32_kv8_d128_ps1", "gqa_paged_decode", &ref));
  const Operator& op = ref.op;
  const device::PlanLauncher& launcher = *ref.launcher;
  device::Stream stream;

  std::mt19937_64 rng(20240612);
  std::normal_distribution<double> normal(0.0, 1.0);
  const float sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(kHeadDim)));
  const double scale = static_cast<double>(sm_scale);  // the float32 value the kernel receives

  // Request lengths (in pages) per case: ordinary, one-token and empty requests, and random ones.
  std::uniform_int_distribution<int> length(0, 20);
  const std::vector<std::vector<int>> cases = {
      {7, 1, 19}, {0, 11, 3}, {length(rng), length(rng), length(rng)}};

  for (const auto& lengths : cases) {
    SCOPED_TRACE("lengths " + std::to_string(lengths[0]) + "," + std::to_string(lengths[1]) + "," +
                 std::to_string(lengths[2]));
    std::vector<std::int32_t> indptr(kBatch + 1, 0);
    for (int b = 0; b < kBatch; ++b) indptr[b + 1] = indptr[b] + lengths[b];
    const int total = indptr[kBatch];
    ASSERT_LE(total, kNumPages);
    std::vector<std::int32_t> pages(kNumPages);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    std::vector<std::int32_t> indices(pages.begin(), pages.begin() + total);

    const std::size_t q_count = static_cast<std::size_t>(kBatch) * kQoHeads * kHeadDim;
    const std::size_t kv_count =
        static_cast<std::size_t>(kNumPages) * kPageSize * kKvHeads * kHeadDim;
    std::vector<double> q(q_count), k(kv_count), v(kv_count);
    for (auto& x : q) x = normal(rng);
    for (auto& x : k) x = normal(rng);
    for (auto& x : v) x = normal(rng);
    const auto q_bytes = to_bf16(q), k_bytes = to_bf16(k), v_bytes = to_bf16(v);
    q = from_bf16(q_bytes);
    k = from_bf16(k_bytes);
    v = from_bf16(v_bytes);

    device::DeviceBuffer dq(q_bytes.size()), dk(k_bytes.size()), dv(v_bytes.size());
    device::DeviceBuffer dindptr(indptr.size() * 4),
        dindices(std::max<std::size_t>(indices.size(), 1) * 4);
    device::DeviceBuffer dout(q_bytes.size()),
        dlse(static_cast<std::size_t>(kBatch) * kQoHeads * 4);
    dq.upload(q_bytes.data(), q_bytes.size());
    dk.upload(k_bytes.data(), k_bytes.size());
    dv.upload(v_bytes.data(), v_bytes.size());
    dindptr.upload(indptr.data(), indptr.size() * 4);
    if (!indices.empty()) dindices.upload(indices.data(), indices.size() * 4);
    dout.fill(0xFF);  // NaN: an unwritten element fails below
    dlse.fill(0xFF);

    device::LaunchEnv env;
    env.definition = &op.definition;
    env.axes = {{"batch_size", kBatch},     {"num_qo_heads", kQoHeads}, {"num_kv_heads", kKvHeads},
                {"head_dim", kHeadDim},     {"num_pages", kNumPages},   {"page_size", kPageSize},
                {"len_indptr", kBatch + 1}, {"num_kv_indices", total}};
    env.tensors = {{"q", dq.ptr()},
                   {"k_cache", dk.ptr()},
                   {"v_cache", dv.ptr()},
                   {"kv_indptr", dindptr.ptr()},
                   {"kv_indices", dindices.ptr()},
                   {"output", dout.ptr()},
                   {"lse", dlse.ptr()}};
    env.scalars = {{"sm_scale", nlohmann::json(sm_scale)}};
    const device::LaunchOutcome outcome = launcher.launch(env, stream.get(), true);
    ASSERT_TRUE(outcome.ok) << outcome.message;

    std::vector<std::uint8_t> out_bytes(q_bytes.size());
    dout.download(out_bytes.data(), out_bytes.size());
    const std::vector<double> out = from_bf16(out_bytes);
    std::vector<float> lse(static_cast<std::size_t>(kBatch) * kQoHeads);
    dlse.download(lse.data(), lse.size() * 4);

    int bad = 0;
    for (int b = 0; b < kBatch; ++b) {
      for (int h = 0; h < kQoHeads; ++h) {
        const int kv_head = h / (kQoHeads / kKvHeads);
        const std::size_t qo = static_cast<std::size_t>(b) * kQoHeads + h;
        const double* qr = &q[qo * kHeadDim];
        std::vector<std::size_t> rows;  // token rows of k/v, in order
        for (int p = indptr[b]; p < indptr[b + 1]; ++p) {
          for (int s = 0; s < kPageSize; ++s) {
            rows.push_back(
                ((static_cast<std::size_t>(indices[p]) * kPageSize + s) * kKvHeads + kv_head) *
                kHeadDim);
          }
        }
        std::vector<double> expected(kHeadDim, 0.0);
        double expected_lse = -std::numeric_limits<double>::infinity();
        if (!rows.empty()) {
          std::vector<double> logits(rows.size());
          for (std::size_t t = 0; t < rows.size(); ++t) {
            double dot = 0;
            for (int d = 0; d < kHeadDim; ++d) dot += qr[d] * k[rows[t] + d];
            logits[t] = dot * scale;
          }
          const double m = *std::max_element(logits.begin(), logits.end());
          double sum = 0;
          for (double l : logits) sum += std::exp(l - m);
          for (std::size_t t = 0; t < rows.size(); ++t) {
            const double p = std::exp(logits[t] - m) / sum;
            for (int d = 0; d < kHeadDim; ++d) expected[d] += p * v[rows[t] + d];
          }
          expected_lse = (m + std::log(sum)) / std::log(2.0);
        }
        for (int d = 0; d < kHeadDim; ++d) {
          const double e = expected[d];
          const double got = out[qo * kHeadDim + d];
          const double limit = std::ldexp(std::fabs(e), -7) + 1e-5;  // one bf16 ulp + small abs
          if (!std::isfinite(got) || std::fabs(got - e) > limit) {
            if (++bad <= 10) {
              ADD_FAILURE() << "b " << b << ", head " << h << ", dim " << d << ": expected " << e
                            << ", got " << got << " (limit " << limit << ")";
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
          ADD_FAILURE() << "b " << b << ", head " << h << ": lse expected " << expected_lse
                        << ", got " << got_lse;
        }
      }
    }
    EXPECT_EQ(bad, 0) << "outputs or lse off";
  }
}

}  // namespace
}  // namespace kharness
