// The rmsnorm family's reference kernel against a plain double-precision rmsnorm on the host.
// The reference is what every candidate is judged by, so it is checked on its own here: compiled
// with compile_solution, loaded and launched through its own plan with PlanLauncher, on host-made
// bf16 inputs. Every element must be within one bf16 ulp of the exact value. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
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

constexpr int kHidden = 4096;
constexpr double kEps = 1e-5;

TEST(RmsnormReference, MatchesDoublePrecisionWithinOneBf16Ulp) {
  SKIP_WITHOUT_GPU();
  CompiledReference ref;
  ASSERT_NO_FATAL_FAILURE(compile_reference("rmsnorm_h4096", "rmsnorm", &ref));
  const Operator& op = ref.op;
  const device::PlanLauncher& launcher = *ref.launcher;
  device::Stream stream;

  std::mt19937_64 rng(20240611);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.5, 1.5);

  for (int batch : {1, 3, 17}) {
    SCOPED_TRACE("batch_size " + std::to_string(batch));
    // Inputs as bf16 values (the host computes from exactly what the device reads). Row r is
    // scaled by 2^(r % 7 - 3), so magnitudes from 1/8 to 8 are covered.
    std::vector<double> x(static_cast<std::size_t>(batch) * kHidden), w(kHidden);
    for (int r = 0; r < batch; ++r) {
      const double scale = std::ldexp(1.0, r % 7 - 3);
      for (int i = 0; i < kHidden; ++i)
        x[static_cast<std::size_t>(r) * kHidden + i] = scale * normal(rng);
    }
    for (auto& v : w) v = uniform(rng);
    const auto x_bytes = to_bf16(x), w_bytes = to_bf16(w);
    x = from_bf16(x_bytes);
    w = from_bf16(w_bytes);

    device::DeviceBuffer dx(x_bytes.size()), dw(w_bytes.size()), dy(x_bytes.size());
    dx.upload(x_bytes.data(), x_bytes.size());
    dw.upload(w_bytes.data(), w_bytes.size());
    dy.fill(0xFF);  // 0xFFFF: a NaN, so an unwritten element fails below

    device::LaunchEnv env;
    env.definition = &op.definition;
    env.axes = {{"batch_size", batch}, {"hidden_size", kHidden}};
    env.tensors = {{"hidden_states", dx.ptr()}, {"weight", dw.ptr()}, {"output", dy.ptr()}};
    const device::LaunchOutcome outcome = launcher.launch(env, stream.get(), true);
    ASSERT_TRUE(outcome.ok) << outcome.message;
    std::vector<std::uint8_t> y_bytes(x_bytes.size());
    dy.download(y_bytes.data(), y_bytes.size());
    const std::vector<double> y = from_bf16(y_bytes);

    int bad = 0;
    for (int r = 0; r < batch; ++r) {
      const double* xr = &x[static_cast<std::size_t>(r) * kHidden];
      double sum = 0;
      for (int i = 0; i < kHidden; ++i) sum += xr[i] * xr[i];
      const double inv_rms = 1.0 / std::sqrt(sum / kHidden + kEps);
      for (int i = 0; i < kHidden; ++i) {
        const double expected = xr[i] * inv_rms * w[i];
        const double got = y[static_cast<std::size_t>(r) * kHidden + i];
        // One bf16 ulp of |expected| is at most 2^-7 |expected|; 1e-30 covers exact zeros.
        const double limit = std::ldexp(std::fabs(expected), -7) + 1e-30;
        if (!std::isfinite(got) || std::fabs(got - expected) > limit) {
          if (++bad <= 10) {
            ADD_FAILURE() << "row " << r << ", element " << i << ": expected " << expected
                          << ", got " << got << " (|diff| " << std::fabs(got - expected) << " > "
                          << limit << ")";
          }
        }
      }
    }
    EXPECT_EQ(bad, 0) << "elements off by more than one bf16 ulp";
  }
}

}  // namespace
}  // namespace kharness
