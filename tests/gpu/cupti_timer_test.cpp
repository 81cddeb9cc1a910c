// The CUPTI activity timer on a real GPU, with hand-written PTX kernels that spin on %globaltimer
// for a duration passed as an argument. Every test skips without a GPU.
#include "bench/cupti_timer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <vector>

#include "device/driver.hpp"
#include "kharness/device.hpp"

namespace kharness::bench {
namespace {

// spin_a(ns) and spin_b(ns): one thread waits until %globaltimer has advanced by `ns`.
// Two entries with the same body, so a signature can tell them apart.
constexpr const char* kSpinPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry spin_a(
    .param .u64 ns
)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [ns];
    mov.u64 %rd2, %globaltimer;
A_LOOP:
    mov.u64 %rd3, %globaltimer;
    sub.s64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p1, %rd4, %rd1;
    @%p1 bra A_LOOP;
    ret;
}

.visible .entry spin_b(
    .param .u64 ns
)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [ns];
    mov.u64 %rd2, %globaltimer;
B_LOOP:
    mov.u64 %rd3, %globaltimer;
    sub.s64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p1, %rd4, %rd1;
    @%p1 bra B_LOOP;
    ret;
}
)";

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

class CuptiTimerGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu_available())
      GTEST_SKIP() << "no GPU: " << device::Driver::instance().unavailable_reason();
    context_ = std::make_unique<device::PrimaryContext>(0);
    module_ = std::make_unique<device::Module>(kSpinPtx);
    spin_a_ = module_->function("spin_a");
    spin_b_ = module_->function("spin_b");
    stream_ = std::make_unique<device::Stream>();
    // Warm up: module loading and first-launch costs stay out of every timed iteration.
    spin(spin_a_, 1000);
    spin(spin_b_, 1000);
    stream_->synchronize();
  }

  void spin(CUfunction f, std::uint64_t ns) {
    device::LaunchConfig config;
    config.stream = stream_->get();
    void* params[] = {&ns};
    device::Driver::instance().check(device::launch_kernel(f, config, params), "cuLaunchKernelEx");
  }

  CUstream s() const { return stream_->get(); }

  std::unique_ptr<device::PrimaryContext> context_;  // declared first: destroyed last
  std::unique_ptr<device::Module> module_;
  std::unique_ptr<device::Stream> stream_;
  CUfunction spin_a_ = nullptr;
  CUfunction spin_b_ = nullptr;
};

// (1) A 50 us kernel timed over 20 iterations: every span is one kernel of ~50 us, one signature.
TEST_F(CuptiTimerGpu, SpinKernelSpansAreItsDuration) {
  constexpr std::uint64_t kNs = 50'000;
  CuptiTimer timer;
  for (std::uint64_t i = 0; i < 20; ++i) {
    timer.begin(i);
    spin(spin_a_, kNs);
    timer.end();
  }
  stream_->synchronize();
  const auto spans = timer.collect();
  ASSERT_EQ(spans.size(), 20u);
  std::vector<double> us;
  for (const auto& [id, span] : spans) {
    EXPECT_EQ(span.kernels, 1) << "iteration " << id;
    EXPECT_EQ(span.memcpys, 0) << "iteration " << id;
    EXPECT_EQ(span.memsets, 0) << "iteration " << id;
    EXPECT_EQ(span.signature, "spin_a") << "iteration " << id;
    EXPECT_EQ(span.signature, spans.begin()->second.signature);
    EXPECT_EQ(span.shapes, "1x1x1/1x1x1") << "iteration " << id;  // LaunchConfig's default
    EXPECT_NEAR(span.seconds(), kNs * 1e-9, 0.05 * kNs * 1e-9) << "iteration " << id;
    us.push_back(span.seconds() * 1e6);
  }
  std::cout << "50 us spin, CUPTI span: min " << *std::min_element(us.begin(), us.end())
            << " us, median " << median(us) << " us, max "
            << *std::max_element(us.begin(), us.end()) << " us\n";
  // Nothing left over for the next collect.
  EXPECT_TRUE(timer.collect().empty());
}

TEST_F(CuptiTimerGpu, OneTimerPerProcessAndBalancedBeginEnd) {
  CuptiTimer timer;
  EXPECT_THROW({ CuptiTimer second; }, std::logic_error);
  EXPECT_THROW(timer.end(), std::logic_error);
  timer.begin(1);
  EXPECT_THROW(timer.begin(2), std::logic_error);
  timer.end();
  const auto spans = timer.collect();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans.at(1).kernels, 0);
}

// (2) Two launches in one iteration: the span covers both.
TEST_F(CuptiTimerGpu, TwoLaunchesInOneIterationShareASpan) {
  constexpr std::uint64_t kShort = 20'000, kLong = 40'000;
  CuptiTimer timer;
  for (std::uint64_t i = 0; i < 5; ++i) {
    timer.begin(100 + i);  // each kernel alone
    spin(spin_a_, kShort);
    timer.end();
    timer.begin(200 + i);
    spin(spin_b_, kLong);
    timer.end();
    timer.begin(i);  // both, back to back
    spin(spin_a_, kShort);
    spin(spin_b_, kLong);
    timer.end();
  }
  stream_->synchronize();
  const auto spans = timer.collect();
  ASSERT_EQ(spans.size(), 15u);
  std::vector<double> a, b, both;
  for (std::uint64_t i = 0; i < 5; ++i) {
    const IterationSpan& sa = spans.at(100 + i);
    const IterationSpan& sb = spans.at(200 + i);
    const IterationSpan& s2 = spans.at(i);
    EXPECT_EQ(sa.kernels, 1);
    EXPECT_EQ(sb.kernels, 1);
    EXPECT_EQ(s2.kernels, 2) << "iteration " << i;
    EXPECT_EQ(sa.signature, "spin_a");
    EXPECT_EQ(sb.signature, "spin_b");
    EXPECT_EQ(s2.signature, "spin_a,spin_b");
    EXPECT_GE(s2.seconds(), 0.99 * (kShort + kLong) * 1e-9) << "iteration " << i;
    a.push_back(sa.seconds());
    b.push_back(sb.seconds());
    both.push_back(s2.seconds());
  }
  EXPECT_GE(median(both), 0.99 * (median(a) + median(b)));
  std::cout << "20 us + 40 us: alone " << median(a) * 1e6 << " + " << median(b) * 1e6
            << " us, together " << median(both) * 1e6 << " us (medians)\n";
}

// (3) A memset and a memcpy inside begin/end count and are inside the span; the "L2 flush"
// memsets around the iteration are ignored.
TEST_F(CuptiTimerGpu, MemsetAndMemcpyInsideCountFlushOutsideIsIgnored) {
  const auto& cu = device::Driver::instance();
  int l2 = 0;
  KHARNESS_CU(cu, cuDeviceGetAttribute, &l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, context_->device());
  device::DeviceBuffer flush(std::max<std::size_t>(2 * static_cast<std::size_t>(l2), 1 << 20));
  device::DeviceBuffer small(1 << 20);
  constexpr std::size_t kCopy = 64 << 10;
  void* host = nullptr;
  KHARNESS_CU(cu, cuMemAllocHost, &host, kCopy);
  std::fill_n(static_cast<unsigned char*>(host), kCopy, 3);

  {
    CuptiTimer timer;
    for (std::uint64_t i = 0; i < 5; ++i) {
      KHARNESS_CU(cu, cuMemsetD8Async, flush.ptr(), static_cast<unsigned char>(i), flush.size(),
                  s());
      timer.begin(i);
      KHARNESS_CU(cu, cuMemsetD8Async, small.ptr(), 1, small.size(), s());
      KHARNESS_CU(cu, cuMemcpyHtoDAsync, small.ptr(), host, kCopy, s());
      spin(spin_a_, 10'000);
      timer.end();
      KHARNESS_CU(cu, cuMemsetD8Async, flush.ptr(), 7, flush.size(), s());
    }
    timer.begin(100);  // the flush alone, as its own iteration
    KHARNESS_CU(cu, cuMemsetD8Async, flush.ptr(), 9, flush.size(), s());
    timer.end();
    stream_->synchronize();
    const auto spans = timer.collect();
    ASSERT_EQ(spans.size(), 6u);
    for (std::uint64_t i = 0; i < 5; ++i) {
      const IterationSpan& span = spans.at(i);
      EXPECT_EQ(span.memsets, 1) << "iteration " << i;
      EXPECT_EQ(span.memcpys, 1) << "iteration " << i;
      EXPECT_EQ(span.kernels, 1) << "iteration " << i;
      EXPECT_EQ(span.signature, "spin_a");
      EXPECT_GE(span.seconds(), 0.99 * 10'000e-9) << "iteration " << i;
    }
    const IterationSpan& f = spans.at(100);
    EXPECT_EQ(f.memsets, 1);
    EXPECT_EQ(f.kernels, 0);
    EXPECT_GT(f.seconds(), 0.0);
    std::cout << "memset+memcpy+10 us spin: " << spans.at(0).seconds() * 1e6 << " us; L2 flush of "
              << flush.size() / (1 << 20) << " MiB alone: " << f.seconds() * 1e6 << " us\n";
  }
  cu.cuMemFreeHost(host);
}

// (4) CUDA events around a 2 us kernel measure more than CUPTI's span of it (launch overhead).
TEST_F(CuptiTimerGpu, EventTimeExceedsCuptiSpanOnAShortKernel) {
  constexpr int kIterations = 50;
  std::vector<std::unique_ptr<device::Event>> starts, stops;
  CuptiTimer timer;
  for (int i = 0; i < kIterations; ++i) {
    starts.push_back(std::make_unique<device::Event>());
    stops.push_back(std::make_unique<device::Event>());
    starts.back()->record(s());
    timer.begin(static_cast<std::uint64_t>(i));
    spin(spin_a_, 2'000);
    timer.end();
    stops.back()->record(s());
  }
  stream_->synchronize();
  const auto spans = timer.collect();
  ASSERT_EQ(spans.size(), static_cast<std::size_t>(kIterations));
  std::vector<double> cupti, events;
  for (int i = 0; i < kIterations; ++i) {
    EXPECT_EQ(spans.at(static_cast<std::uint64_t>(i)).kernels, 1);
    cupti.push_back(spans.at(static_cast<std::uint64_t>(i)).seconds());
    events.push_back(stops[i]->elapsed_ms_since(*starts[i]) * 1e-3);
  }
  std::cout << "2 us spin, median over " << kIterations << ": CUDA events " << median(events) * 1e6
            << " us, CUPTI span " << median(cupti) * 1e6 << " us\n";
  EXPECT_GT(median(events), median(cupti));
  EXPECT_GE(median(cupti), 0.9 * 2'000e-9);
}

// Records of many iterations split across many small buffers still join.
TEST_F(CuptiTimerGpu, SmallBuffersSplitRecordsAcrossBuffers) {
  constexpr int kIterations = 400;
  const auto& cu = device::Driver::instance();
  device::DeviceBuffer flush(1 << 20);
  CuptiTimer timer(32 << 10);
  for (int i = 0; i < kIterations; ++i) {
    KHARNESS_CU(cu, cuMemsetD8Async, flush.ptr(), 0, flush.size(), s());
    timer.begin(static_cast<std::uint64_t>(i));
    spin(i % 2 == 0 ? spin_a_ : spin_b_, 2'000);
    timer.end();
  }
  stream_->synchronize();
  const auto spans = timer.collect();
  ASSERT_EQ(spans.size(), static_cast<std::size_t>(kIterations));
  for (const auto& [id, span] : spans) {
    EXPECT_EQ(span.kernels, 1) << "iteration " << id;
    EXPECT_EQ(span.memsets, 0) << "iteration " << id;
    EXPECT_EQ(span.signature, id % 2 == 0 ? "spin_a" : "spin_b") << "iteration " << id;
    EXPECT_GT(span.seconds(), 0.0) << "iteration " << id;
  }
}

}  // namespace
}  // namespace kharness::bench
