// The hook the timing stage uses to check outputs of timed iterations (TimedOutputs), on a GPU.
#include "verify/timed_outputs.hpp"

#include <gtest/gtest.h>

#include <memory>

#include "../test_util.hpp"
#include "device/driver.hpp"
#include "device/plan_launcher.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"

namespace kharness {
namespace {

// Correct on its first launch after a module load; afterwards returns at once, leaving whatever
// the output buffer held: fast "on repeated inputs" and right only while nobody looks.
constexpr const char* kFirstLaunchOnly = R"(/* kharness
{ "definition": "rmsnorm_h4096",
  "launches": [{ "kernel": "rms", "grid": ["batch_size", 1, 1], "block": [256, 1, 1],
                 "args": ["hidden_states", "weight", "output", "batch_size"] }] }
*/
#include <cuda_bf16.h>
__device__ int launches_seen;
extern "C" __global__ void rms(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int rows) {
  __shared__ float partial[256];
  __shared__ int skip;
  if (threadIdx.x == 0) {
    skip = launches_seen > 0;
    __threadfence();
  }
  __syncthreads();
  if (skip) return;
  const int row = blockIdx.x;
  float acc = 0.f;
  for (int i = threadIdx.x; i < 4096; i += 256) {
    float v = __bfloat162float(x[(size_t)row * 4096 + i]);
    acc += v * v;
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  float inv = rsqrtf(partial[0] / 4096.f + 1e-5f);
  for (int i = threadIdx.x; i < 4096; i += 256) {
    float v = __bfloat162float(x[(size_t)row * 4096 + i]);
    y[(size_t)row * 4096 + i] = __float2bfloat16(v * inv * __bfloat162float(w[i]));
  }
  __syncthreads();
  if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) launches_seen = 1;
}
)";

class TimedOutputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu_available()) GTEST_SKIP() << "no GPU";
    context_ = std::make_unique<device::PrimaryContext>(0);
    op_ = std::make_unique<Operator>(OperatorRegistry::from_environment({}).load("rmsnorm_h4096"));
    options_.arch = default_arch_for_device();
    options_.use_cache = false;
    reference_ = load_solution(*op_->reference);
    reference_compiled_ = compile_solution(reference_, &op_->definition, &op_->workloads, options_);
    ASSERT_TRUE(reference_compiled_.ok()) << reference_compiled_.log;
  }

  const Workload& workload(std::int64_t batch) {
    for (const auto& w : op_->workloads) {
      if (w.axes.at("batch_size") == batch) return w;
    }
    throw std::runtime_error("no workload");
  }

  std::unique_ptr<device::PrimaryContext> context_;
  std::unique_ptr<Operator> op_;
  CompileOptions options_;
  Solution reference_;
  CompileResult reference_compiled_;
};

constexpr std::uint64_t kKey = 0x0123456789ABCDEFull;

TEST_F(TimedOutputsTest, CorrectKernelPassesEverySetAndUnlaunchedSetIsStale) {
  Solution seed = load_solution(*op_->seed);
  CompileResult compiled = compile_solution(seed, &op_->definition, &op_->workloads, options_);
  ASSERT_TRUE(compiled.ok()) << compiled.log;
  verify::CheckOptions check;
  check.seed = 11;
  verify::TimedOutputs timed(*op_, {&reference_, &reference_compiled_}, {&seed, &compiled},
                             workload(64), 3, check, 4, kKey);
  ASSERT_EQ(timed.sets(), 3);
  ASSERT_TRUE(timed.checked_on_device());
  device::Module module(compiled.cubin);
  device::PlanLauncher launcher(seed.plan, compiled.kernels, module);
  device::Stream stream;
  for (int set = 0; set < 3; ++set) {
    const auto poison = verify::iteration_poison(op_->definition, 100 + set);
    timed.poison(set, poison, stream.get());
    ASSERT_TRUE(launcher.launch(timed.env(set), stream.get(), true).ok);
    auto failure = timed.check_now(set, set, poison, stream.get());
    EXPECT_FALSE(failure.has_value()) << failure->message;
  }
  // Poisoned and not computed again: the check must see it, naming the iteration.
  for (std::uint64_t draw : {4u, 5u, 6u, 7u}) {  // NaN and finite poisons alike
    const auto poison = verify::iteration_poison(op_->definition, draw);
    timed.poison(1, poison, stream.get());
    auto stale = timed.check_now(1, 40 + draw, poison, stream.get());
    ASSERT_TRUE(stale.has_value()) << draw;
    EXPECT_EQ(stale->kind, "stale_output");
    EXPECT_EQ(stale->evidence["iteration"], 40 + draw);
    EXPECT_EQ(stale->evidence["input_set"], 1);
    const std::string cause = stale->evidence["cause"];
    EXPECT_TRUE(cause == "output_not_written" || cause == "tolerance") << cause;
  }
}

// As the timing loop runs it: every iteration poisoned with a fresh pattern and checked; a kernel
// correct only on a module's first launch is caught at its second iteration.
TEST_F(TimedOutputsTest, KernelFastOnlyOnRepeatsIsCaughtAtItsSecondIteration) {
  Solution cheat = parse_single_file_solution(kFirstLaunchOnly, "first_launch_only.cu");
  CompileResult compiled = compile_solution(cheat, &op_->definition, &op_->workloads, options_);
  ASSERT_TRUE(compiled.ok()) << compiled.log;
  verify::CheckOptions check;
  check.seed = 12;
  verify::TimedOutputs timed(*op_, {&reference_, &reference_compiled_}, {&cheat, &compiled},
                             workload(128), 3, check, 8, kKey);
  device::Module module(compiled.cubin);
  device::PlanLauncher launcher(cheat.plan, compiled.kernels, module);
  device::Stream stream;
  for (int iteration = 0; iteration < 6; ++iteration) {
    const int set = iteration % 3;
    const auto poison = verify::iteration_poison(op_->definition, 1000 + iteration);
    timed.poison(set, poison, stream.get());
    ASSERT_TRUE(launcher.launch(timed.env(set), stream.get(), false).ok);
    timed.enqueue_check(set, iteration, poison, stream.get());
  }
  auto f = timed.collect(stream.get());
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, "stale_output");
  EXPECT_EQ(f->evidence["iteration"], 1) << f->message;
  EXPECT_FALSE(timed.integrity(stream.get()).has_value());
}

// The point reference: gemm_fp8 at M = 512 checks 128 rows of C drawn after each
// launch, on inputs refreshed for every iteration. A kernel that skips 5% of C in every row (when
// its output does not hold the trials' fixed poison, so always here) is stale_output at its first
// iteration; the seed passes every one, and the record says what was checked.
TEST_F(TimedOutputsTest, PointReferenceCatchesSkippedTilesAndPassesTheSeed) {
  const Operator op = OperatorRegistry::from_environment({}).load("gemm_fp8");
  ASSERT_EQ(op.definition.kharness.timed_rows_of, "M");
  Solution reference = load_solution(*op.reference);
  CompileResult reference_compiled =
      compile_solution(reference, &op.definition, &op.workloads, options_);
  ASSERT_TRUE(reference_compiled.ok()) << reference_compiled.log;
  const Workload* w = nullptr;
  for (const auto& x : op.workloads) {
    if (x.axes.at("M") == 512) w = &x;
  }
  ASSERT_NE(w, nullptr);
  auto run = [&](const Solution& s, const CompileResult& c, int iterations) {
    verify::CheckOptions check;
    check.seed = 21;
    verify::TimedOutputs timed(op, {&reference, &reference_compiled}, {&s, &c}, *w, 2, check,
                               iterations, kKey);
    device::Module module(c.cubin);
    device::PlanLauncher launcher(s.plan, c.kernels, module);
    device::Stream stream;
    for (int i = 0; i < iterations; ++i) {
      const int set = i % 2;
      timed.refresh(set, 500 + i, stream.get());
      const auto poison = verify::iteration_poison(op.definition, 700 + i);
      timed.poison(set, poison, stream.get());
      EXPECT_TRUE(launcher.launch(timed.env(set), stream.get(), false).ok);
      timed.enqueue_check(set, i, poison, stream.get());
    }
    auto f = timed.collect(stream.get());
    EXPECT_EQ(timed.truth().mode, "point reference");
    EXPECT_EQ(timed.truth().fresh_inputs, static_cast<std::uint64_t>(iterations));
    EXPECT_EQ(timed.truth().rows_checked, static_cast<std::uint64_t>(128 * iterations));
    return f;
  };
  Solution seed = load_solution(*op.seed);
  CompileResult seed_compiled = compile_solution(seed, &op.definition, &op.workloads, options_);
  ASSERT_TRUE(seed_compiled.ok()) << seed_compiled.log;
  auto honest = run(seed, seed_compiled, 4);
  EXPECT_FALSE(honest.has_value()) << honest->message;
  Solution cheat = load_solution(testing::fixture("cheats/gemm_fp8_partial_when_timed.cu"));
  CompileResult cheat_compiled = compile_solution(cheat, &op.definition, &op.workloads, options_);
  ASSERT_TRUE(cheat_compiled.ok()) << cheat_compiled.log;
  auto caught = run(cheat, cheat_compiled, 4);
  ASSERT_TRUE(caught.has_value());
  EXPECT_EQ(caught->kind, "stale_output");
  EXPECT_EQ(caught->evidence["iteration"], 0) << caught->message;
  EXPECT_TRUE(caught->evidence.contains("point_reference")) << caught->evidence.dump();
}

}  // namespace
}  // namespace kharness
