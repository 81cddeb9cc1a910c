// The softmax family's reference kernel (temperature-scaled softmax over the vocabulary) against
// a plain double-precision host implementation, for the Llama-3 vocabulary (128256) and, to check
// that the sizes come from the axes, a small vocabulary that is no multiple of the block size
// (1000). As in gqa_reference_test.cpp it is compiled with compile_solution and launched through
// its own plan with PlanLauncher on host-made inputs: logits ~ normal(0, 4) and temperatures 0.5,
// 1 and 1.2. Every probability must be within 5e-5 relative (plus 1e-30 absolute) of the exact
// value: the float32 error of the scaled logit, the exponential and a 128256-term sum. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "device/driver.hpp"
#include "device/plan_launcher.hpp"
#include "gpu_test_util.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"

namespace kharness {
namespace {

using namespace reference_test;

TEST(SoftmaxReference, MatchesDoublePrecision) {
  SKIP_WITHOUT_GPU();
  CompiledReference ref;
  ASSERT_NO_FATAL_FAILURE(compile_reference("softmax_v128256", "softmax", &ref));
  const Operator& op = ref.op;
  const device::PlanLauncher& launcher = *ref.launcher;
  device::Stream stream;

  std::mt19937_64 rng(20260524);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  const std::vector<float> temperature = {0.5f, 1.0f, 1.2f};
  const int batch = static_cast<int>(temperature.size());
  for (int vocab : {128256, 1000}) {
    SCOPED_TRACE("vocab_size " + std::to_string(vocab));
    const std::size_t n = static_cast<std::size_t>(batch) * vocab;
    std::vector<float> logits(n);
    for (auto& x : logits) x = normal(rng);
    device::DeviceBuffer dlogits(n * 4), dtemp(batch * 4), dprobs(n * 4);
    dlogits.upload(logits.data(), n * 4);
    dtemp.upload(temperature.data(), batch * 4);
    dprobs.fill(0xFF);  // NaN: an unwritten element fails
    device::LaunchEnv env;
    env.definition = &op.definition;
    env.axes = {{"batch_size", batch}, {"vocab_size", vocab}};
    env.tensors = {
        {"logits", dlogits.ptr()}, {"temperature", dtemp.ptr()}, {"probs", dprobs.ptr()}};
    const device::LaunchOutcome outcome = launcher.launch(env, stream.get(), true);
    ASSERT_TRUE(outcome.ok) << outcome.message;
    std::vector<float> probs(n);
    dprobs.download(probs.data(), n * 4);

    int bad = 0;
    for (int b = 0; b < batch; ++b) {
      const float* row = &logits[static_cast<std::size_t>(b) * vocab];
      const double t = temperature[b];
      double m = -INFINITY;
      for (int i = 0; i < vocab; ++i) m = std::max(m, row[i] / t);
      double sum = 0;
      for (int i = 0; i < vocab; ++i) sum += std::exp(row[i] / t - m);
      for (int i = 0; i < vocab; ++i) {
        const double e = std::exp(row[i] / t - m) / sum;
        const double got = probs[static_cast<std::size_t>(b) * vocab + i];
        const double limit = 5e-5 * e + 1e-30;
        if (!std::isfinite(got) || std::fabs(got - e) > limit) {
          if (++bad <= 10) {
            ADD_FAILURE() << "row " << b << ", token " << i << ": expected " << e << ", got " << got
                          << " (limit " << limit << ")";
          }
        }
      }
    }
    EXPECT_EQ(bad, 0) << "probabilities off";
  }
}

}  // namespace
}  // namespace kharness
