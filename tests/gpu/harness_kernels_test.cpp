// The harness kernels on a real GPU: random fills (statistics, determinism, independence of the
// launch geometry, agreement with the host conversions), patterns, checksums, 64-bit sizes, a
// 1 GiB timing, and the correctness trials' device comparison (CompareSealedGpuTest: the host
// comparator's totals bit for bit, for every dtype, and what writes into a sealed copy do).
// Every test skips without a GPU (except the host Philox reference's known answers).
#include "verify/harness_kernels.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "device/driver.hpp"
#include "kharness/device.hpp"
#include "kharness/numeric.hpp"
#include "verify/compare.hpp"
#include "verify/index_inputs.hpp"

namespace kharness {
namespace {

using verify::HarnessKernels;
using verify::PatternCheck;

// Host Philox4x32-10, the reference for the device's: counter (draw, stream), key seed.
std::array<std::uint32_t, 4> philox(std::array<std::uint32_t, 4> c,
                                    std::array<std::uint32_t, 2> k) {
  for (int r = 0; r < 10; ++r) {
    const std::uint64_t p0 = std::uint64_t{0xD2511F53u} * c[0];
    const std::uint64_t p1 = std::uint64_t{0xCD9E8D57u} * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<std::uint32_t>(p0)};
    k[0] += 0x9E3779B9u;
    k[1] += 0xBB67AE85u;
  }
  return c;
}

std::array<std::uint32_t, 4> draw(std::uint64_t n, std::uint64_t stream, std::uint64_t seed) {
  return philox({static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(n >> 32),
                 static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)},
                {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
}

// Element i of a "range" fill over [lo, lo + span - 1] (as kh_fill_random draws it).
std::int64_t range_value(std::uint64_t i, std::int64_t lo, std::uint64_t span, std::uint64_t seed,
                         std::uint64_t stream) {
  const auto r = draw(2 * (i / 4) + (i % 4) / 2, stream, seed);
  const std::size_t j = (i % 2) * 2;
  const std::uint64_t x = (std::uint64_t{r[j + 1]} << 32) | r[j];
  // span == 0 stands for 2^64: the draw itself.
  const auto scaled =
      span == 0 ? x : static_cast<std::uint64_t>((static_cast<unsigned __int128>(x) * span) >> 64);
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + scaled);
}

// Random123's published known answers.
TEST(HarnessKernelsGpu, HostPhiloxReferenceKnownAnswers) {
  EXPECT_EQ(philox({0, 0, 0, 0}, {0, 0}),
            (std::array<std::uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<std::uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<std::uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

InputGenerator normal(double mean, double std) {
  InputGenerator g;
  g.distribution = "normal";
  g.mean = mean;
  g.std = std;
  return g;
}

InputGenerator bounded(const char* distribution, double low, double high) {
  InputGenerator g;
  g.distribution = distribution;
  g.low = low;
  g.high = high;
  return g;
}

class HarnessKernelsGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu_available()) {
      GTEST_SKIP() << "no GPU: " << device::Driver::instance().unavailable_reason();
    }
    ctx_.emplace(0);
    stream_.emplace();
    kernels_.emplace();
  }

  CUstream stream() const { return stream_->get(); }
  const HarnessKernels& k() const { return *kernels_; }

  std::vector<std::uint8_t> download(CUdeviceptr p, std::size_t bytes) const {
    stream_->synchronize();
    std::vector<std::uint8_t> host(bytes);
    if (bytes != 0) KHARNESS_CU(device::Driver::instance(), cuMemcpyDtoH, host.data(), p, bytes);
    return host;
  }

  void upload(CUdeviceptr p, const void* src, std::size_t bytes) const {
    stream_->synchronize();
    KHARNESS_CU(device::Driver::instance(), cuMemcpyHtoD, p, src, bytes);
    // A pageable upload may still be in flight on return, and the kernels that come next run on
    // a non-blocking stream, which does not wait for the legacy stream's copy.
    KHARNESS_CU(device::Driver::instance(), cuCtxSynchronize);
  }

  void flip_bit(CUdeviceptr p, std::size_t offset, int bit) const {
    std::uint8_t b = download(p + offset, 1)[0];
    b = static_cast<std::uint8_t>(b ^ (1u << bit));
    upload(p + offset, &b, 1);
  }

  std::vector<double> values(const std::vector<std::uint8_t>& bytes, DType dtype) const {
    const std::size_t size = dtype_size(dtype);
    std::vector<double> out(bytes.size() / size);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = to_double(dtype, &bytes[i * size]);
    return out;
  }

  std::optional<device::PrimaryContext> ctx_;
  std::optional<device::Stream> stream_;
  std::optional<HarnessKernels> kernels_;
};

// The device's probability rows are the host generator's (make_probability_rows, which the CPU
// tests check) bit for bit, for any vocabulary (a multiple of the 256 lanes or not, a partial
// lane) and table. Prints the time of a set of FlashInfer-Bench's largest size.
TEST_F(HarnessKernelsGpuTest, ProbabilityRowsEqualTheHostGeneratorBitForBit) {
  struct Case {
    std::uint64_t rows, vocab;
    double std;
    std::uint64_t seed;
  };
  for (const Case& c : {Case{3, 1000, 1.5, 7}, Case{1, 262208, 1.5, 8}, Case{40, 128256, 1.5, 9},
                        Case{5, 255, 1.5, 10}, Case{2, 4096, 0.8, 11}, Case{9, 1, 1.5, 12}}) {
    const std::uint64_t n = c.rows * c.vocab;
    device::DeviceBuffer buf(n * 4);
    k().probability_rows(buf.ptr(), c.rows, c.vocab, c.std, c.seed, stream());
    const auto got = download(buf.ptr(), n * 4);
    const std::vector<float> rows = verify::make_probability_rows(c.rows, c.vocab, c.std, c.seed);
    std::vector<std::uint32_t> have(n), want(n);  // the bits
    std::memcpy(have.data(), got.data(), n * 4);
    std::memcpy(want.data(), rows.data(), n * 4);
    std::uint64_t differ = 0, first = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      if (have[i] != want[i] && differ++ == 0) first = i;
    }
    EXPECT_EQ(differ, 0u) << c.rows << " x " << c.vocab << " std " << c.std << ": first at "
                          << first;
  }
  constexpr std::uint64_t kRows = 512, kVocab = 262208;
  device::DeviceBuffer big(kRows * kVocab * 4);
  k().probability_rows(big.ptr(), kRows, kVocab, 1.5, 1, stream());  // its table uploaded
  stream_->synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) k().probability_rows(big.ptr(), kRows, kVocab, 1.5, i, stream());
  stream_->synchronize();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::cout << "probability_rows " << kRows << " x " << kVocab << ": " << ms / 10 << " ms a set\n";
}

TEST_F(HarnessKernelsGpuTest, NormalBf16Statistics) {
  constexpr std::size_t n = 1 << 20;
  device::DeviceBuffer a(2 * n), b(2 * n), c(2 * n), d(2 * n);
  k().fill_random(a.ptr(), n, DType::kBFloat16, normal(0, 1), 1234, 0, stream());
  const auto bytes = download(a.ptr(), 2 * n);
  const auto v = values(bytes, DType::kBFloat16);
  double sum = 0, sum2 = 0;
  std::size_t zeros = 0, non_finite = 0;
  for (double x : v) {
    sum += x;
    sum2 += x * x;
    zeros += x == 0.0;
    non_finite += !std::isfinite(x);
  }
  const double mean = sum / n;
  const double stddev = std::sqrt(sum2 / n - mean * mean);
  std::cout << "bf16 normal(0, 1): mean " << mean << " std " << stddev << " zeros " << zeros
            << "\n";
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(stddev, 1.0, 0.01);
  EXPECT_EQ(non_finite, 0u);
  EXPECT_LT(zeros, n / 100);
  EXPECT_GT(*std::max_element(v.begin(), v.end()), 4.0);
  EXPECT_LT(*std::min_element(v.begin(), v.end()), -4.0);

  // Deterministic for the same (seed, stream id); independent for another seed or stream id.
  k().fill_random(b.ptr(), n, DType::kBFloat16, normal(0, 1), 1234, 0, stream());
  EXPECT_EQ(download(b.ptr(), 2 * n), bytes);
  auto equal_fraction = [&](const std::vector<std::uint8_t>& other) {
    std::size_t same = 0;
    for (std::size_t i = 0; i < n; ++i) same += std::memcmp(&bytes[2 * i], &other[2 * i], 2) == 0;
    return static_cast<double>(same) / n;
  };
  k().fill_random(c.ptr(), n, DType::kBFloat16, normal(0, 1), 1235, 0, stream());
  EXPECT_LT(equal_fraction(download(c.ptr(), 2 * n)), 0.05);
  k().fill_random(d.ptr(), n, DType::kBFloat16, normal(0, 1), 1234, 1, stream());
  EXPECT_LT(equal_fraction(download(d.ptr(), 2 * n)), 0.05);

  // A shorter fill (another grid) is a prefix; so is one at an address not aligned to a group
  // of 4 elements (the scalar store path).
  device::DeviceBuffer e(2 * 1003 + 2);
  k().fill_random(e.ptr(), 1003, DType::kBFloat16, normal(0, 1), 1234, 0, stream());
  auto prefix = download(e.ptr(), 2 * 1003);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), bytes.begin()));
  k().fill_random(e.ptr() + 2, 1003, DType::kBFloat16, normal(0, 1), 1234, 0, stream());
  prefix = download(e.ptr() + 2, 2 * 1003);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), bytes.begin()));
}

// Every dtype's element is the host rounding (from_double) of the float32 fill's element: the
// float values are computed identically before the conversion. Integer dtypes (bool included)
// take the value rounded to the nearest integer first.
TEST_F(HarnessKernelsGpuTest, DTypesAgreeWithHostConversions) {
  constexpr std::size_t n = (1 << 16) + 3;  // a partial last group
  for (const InputGenerator& g : {normal(0.5, 3.0), bounded("uniform", -300, 300)}) {
    device::DeviceBuffer f32(4 * n);
    k().fill_random(f32.ptr(), n, DType::kFloat32, g, 77, 5, stream());
    const auto reference = values(download(f32.ptr(), 4 * n), DType::kFloat32);
    for (DType dtype :
         {DType::kFloat16, DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat8E5M2, DType::kInt64,
          DType::kInt32, DType::kInt16, DType::kInt8, DType::kUInt8, DType::kBool}) {
      const std::size_t size = dtype_size(dtype);
      device::DeviceBuffer out(size * n);
      k().fill_random(out.ptr(), n, dtype, g, 77, 5, stream());
      const auto got = download(out.ptr(), size * n);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        std::uint8_t want[8];
        from_double(dtype, is_floating(dtype) ? reference[i] : std::nearbyint(reference[i]), want);
        if (std::memcmp(want, &got[i * size], size) != 0 && bad++ < 5) {
          ADD_FAILURE() << g.distribution << " " << dtype_name(dtype) << " element " << i
                        << ": float " << reference[i] << " -> " << to_double(dtype, &got[i * size])
                        << ", host says " << to_double(dtype, want);
        }
      }
      EXPECT_EQ(bad, 0u) << g.distribution << " " << dtype_name(dtype);
    }
  }
}

TEST_F(HarnessKernelsGpuTest, UniformFp8E4M3StaysInBounds) {
  constexpr std::size_t n = 1 << 20;
  device::DeviceBuffer a(n);
  k().fill_random(a.ptr(), n, DType::kFloat8E4M3, bounded("uniform", -2, 2), 9, 3, stream());
  const auto v = values(download(a.ptr(), n), DType::kFloat8E4M3);
  std::set<double> distinct(v.begin(), v.end());
  double sum = 0;
  for (double x : v) {
    ASSERT_FALSE(std::isnan(x));
    ASSERT_GE(x, -2.0);
    ASSERT_LE(x, 2.0);
    sum += x;
  }
  EXPECT_GT(distinct.size(), 50u);
  EXPECT_NEAR(sum / n, 0.0, 0.02);
  EXPECT_EQ(distinct.count(-2.0) + distinct.count(2.0), 2u);  // both bounds are representable
}

TEST_F(HarnessKernelsGpuTest, RangeInt32HitsBothEndsAndMatchesTheReference) {
  constexpr std::size_t n = 1 << 20;
  device::DeviceBuffer a(4 * n);
  k().fill_random(a.ptr(), n, DType::kInt32, bounded("range", -5, 12), 42, 7, stream());
  const auto bytes = download(a.ptr(), 4 * n);
  std::vector<std::int32_t> v(n);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  std::array<std::size_t, 18> hits{};
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_GE(v[i], -5) << i;
    ASSERT_LE(v[i], 12) << i;
    ++hits[static_cast<std::size_t>(v[i] + 5)];
    if (i < 4096 || i + 4096 > n) {
      ASSERT_EQ(v[i], range_value(i, -5, 18, 42, 7)) << "element " << i;
    }
  }
  for (std::size_t h : hits) EXPECT_GT(h, n / 18 / 2);  // every value, both ends included

  // Bounds outside the dtype are clamped to it: int8 over [-1000, 1000] is [-128, 127].
  device::DeviceBuffer b(n);
  k().fill_random(b.ptr(), n, DType::kInt8, bounded("range", -1000, 1000), 1, 0, stream());
  const auto b8 = download(b.ptr(), n);
  std::set<int> seen;
  for (auto x : b8) seen.insert(static_cast<std::int8_t>(x));
  EXPECT_EQ(seen.size(), 256u);

  // The whole int64 range (span 2^64).
  device::DeviceBuffer c(8 * 1024);
  k().fill_random(c.ptr(), 1024, DType::kInt64, bounded("range", -1e30, 1e30), 3, 0, stream());
  const auto c64 = download(c.ptr(), 8 * 1024);
  std::int64_t first;
  std::memcpy(&first, c64.data(), 8);
  EXPECT_EQ(first, range_value(0, std::numeric_limits<std::int64_t>::min(), 0, 3, 0));
}

TEST_F(HarnessKernelsGpuTest, ConstantFillsExactly) {
  InputGenerator g;
  g.distribution = "constant";
  g.extra["value"] = 0.1;
  device::DeviceBuffer a(2 * 1000);
  k().fill_random(a.ptr(), 1000, DType::kBFloat16, g, 0, 0, stream());
  const auto bytes = download(a.ptr(), 2 * 1000);
  std::uint8_t want[2];
  from_double(DType::kBFloat16, 0.1, want);
  for (std::size_t i = 0; i < 1000; ++i) ASSERT_EQ(std::memcmp(&bytes[2 * i], want, 2), 0) << i;
}

TEST_F(HarnessKernelsGpuTest, PatternCheckFindsAFlippedByte) {
  constexpr std::size_t bytes = (1 << 20) + 12;
  device::DeviceBuffer a(bytes + 64);
  const auto poison = poison_element(DType::kFloat32);
  k().fill_pattern(a.ptr(), bytes, poison, stream());
  PatternCheck c = k().check_pattern(a.ptr(), bytes, poison, stream());
  EXPECT_TRUE(c.ok());
  EXPECT_EQ(c.first_mismatch_byte, PatternCheck::npos);
  const auto host = download(a.ptr(), bytes);
  for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(host[i], poison[i % 4]) << i;

  flip_bit(a.ptr(), 12345, 3);
  c = k().check_pattern(a.ptr(), bytes, poison, stream());
  EXPECT_EQ(c.mismatches, 1u);
  EXPECT_EQ(c.first_mismatch_byte, 12345u);
  flip_bit(a.ptr(), 700001, 0);
  flip_bit(a.ptr(), bytes - 1, 7);  // the tail
  c = k().check_pattern(a.ptr(), bytes, poison, stream());
  EXPECT_EQ(c.mismatches, 3u);
  EXPECT_EQ(c.first_mismatch_byte, 12345u);
  // A region that starts off a 16-byte boundary (the head path), offsets relative to it.
  c = k().check_pattern(a.ptr() + 12, bytes - 12, poison, stream());
  EXPECT_EQ(c.mismatches, 3u);
  EXPECT_EQ(c.first_mismatch_byte, 12345u - 12);
  c = k().check_pattern(a.ptr() + 12348, bytes - 12348, poison, stream());
  EXPECT_EQ(c.first_mismatch_byte, 700001u - 12348);
  // Another pattern: f32 poison A5 A5 A5 7F against int32 poison A5 A5 A5 A5.
  c = k().check_pattern(a.ptr(), 4096, poison_element(DType::kInt32), stream());
  EXPECT_EQ(c.mismatches, 4096 / 4u);
  EXPECT_EQ(c.first_mismatch_byte, 3u);

  // One-byte pattern at an odd address: head, body and tail all used.
  const std::vector<std::uint8_t> guard = {0x5A};
  k().fill_pattern(a.ptr() + 1, 1000, guard, stream());
  EXPECT_TRUE(k().check_pattern(a.ptr() + 1, 1000, guard, stream()).ok());
  flip_bit(a.ptr(), 1000, 1);  // the region's last byte
  c = k().check_pattern(a.ptr() + 1, 1000, guard, stream());
  EXPECT_EQ(c.mismatches, 1u);
  EXPECT_EQ(c.first_mismatch_byte, 999u);
  // Eight-byte pattern.
  const std::vector<std::uint8_t> wide = {1, 2, 3, 4, 5, 6, 7, 8};
  k().fill_pattern(a.ptr() + 8, 8 * 1001, wide, stream());
  const auto w = download(a.ptr() + 8, 8 * 1001);
  for (std::size_t i = 0; i < w.size(); ++i) ASSERT_EQ(w[i], wide[i % 8]) << i;
  EXPECT_TRUE(k().check_pattern(a.ptr() + 8, 8 * 1001, wide, stream()).ok());
}

TEST_F(HarnessKernelsGpuTest, ChecksumSeesEveryBit) {
  constexpr std::size_t bytes = (1 << 20) + 5;  // a partial last word
  device::DeviceBuffer a(bytes + 16), b(bytes + 16);
  k().fill_random(a.ptr(), bytes + 16, DType::kUInt8, bounded("range", 0, 255), 5, 0, stream());
  const std::uint64_t c1 = k().checksum(a.ptr(), bytes, stream());
  EXPECT_EQ(k().checksum(a.ptr(), bytes, stream()), c1);
  KHARNESS_CU(device::Driver::instance(), cuMemcpyDtoDAsync, b.ptr(), a.ptr(), bytes + 16,
              stream());
  EXPECT_EQ(k().checksum(b.ptr(), bytes, stream()), c1);
  EXPECT_NE(k().checksum(a.ptr(), bytes - 1, stream()), c1);

  for (std::size_t offset :
       {std::size_t{0}, std::size_t{8}, std::size_t{4097}, bytes / 2, bytes - 6, bytes - 1}) {
    for (int bit : {0, 7}) {
      flip_bit(a.ptr(), offset, bit);
      EXPECT_NE(k().checksum(a.ptr(), bytes, stream()), c1) << offset << " bit " << bit;
      flip_bit(a.ptr(), offset, bit);
    }
  }
  EXPECT_EQ(k().checksum(a.ptr(), bytes, stream()), c1);

  // The same bytes at another alignment hash the same (16-, 8- and 1-byte-aligned paths).
  for (std::size_t shift : {std::size_t{8}, std::size_t{3}}) {
    KHARNESS_CU(device::Driver::instance(), cuMemcpyDtoDAsync, b.ptr() + shift, a.ptr(), bytes,
                stream());
    EXPECT_EQ(k().checksum(b.ptr() + shift, bytes, stream()), c1) << "shift " << shift;
  }
  EXPECT_EQ(k().checksum(a.ptr(), 0, stream()), k().checksum(b.ptr(), 0, stream()));
}

// Regions past 2^32 bytes: 64-bit offsets everywhere.
TEST_F(HarnessKernelsGpuTest, RegionsPast4GiB) {
  const std::size_t bytes = (std::size_t{1} << 32) + (std::size_t{3} << 20) + 7;
  std::size_t free_bytes = 0, total = 0;
  KHARNESS_CU(device::Driver::instance(), cuMemGetInfo, &free_bytes, &total);
  if (free_bytes < bytes + (std::size_t{1} << 30)) GTEST_SKIP() << "not enough device memory";
  device::DeviceBuffer a(bytes);
  const std::vector<std::uint8_t> guard = {0xC3};
  k().fill_pattern(a.ptr(), bytes, guard, stream());
  EXPECT_TRUE(k().check_pattern(a.ptr(), bytes, guard, stream()).ok());
  const std::uint64_t c1 = k().checksum(a.ptr(), bytes, stream());
  const std::size_t far = (std::size_t{1} << 32) + 12345;
  flip_bit(a.ptr(), far, 4);
  const PatternCheck c = k().check_pattern(a.ptr(), bytes, guard, stream());
  EXPECT_EQ(c.mismatches, 1u);
  EXPECT_EQ(c.first_mismatch_byte, far);
  EXPECT_NE(k().checksum(a.ptr(), bytes, stream()), c1);

  // Random elements past index 2^32 follow the reference.
  k().fill_random(a.ptr(), bytes, DType::kUInt8, bounded("range", 0, 255), 11, 2, stream());
  const auto tail = download(a.ptr() + far, 64);
  for (std::size_t i = 0; i < tail.size(); ++i) {
    ASSERT_EQ(tail[i], range_value(far + i, 0, 256, 11, 2)) << far + i;
  }
}

// Timing only: printed, not asserted.
TEST_F(HarnessKernelsGpuTest, OneGiBTimings) {
  constexpr std::size_t bytes = std::size_t{1} << 30;
  device::DeviceBuffer a(bytes);
  device::Event start, stop;
  auto time = [&](const char* what, auto&& op) {
    op();  // warm-up
    start.record(stream());
    constexpr int kRepeats = 5;
    for (int i = 0; i < kRepeats; ++i) op();
    stop.record(stream());
    stop.synchronize();
    const double ms = stop.elapsed_ms_since(start) / kRepeats;
    std::cout << what << ": " << ms << " ms for 1 GiB (" << bytes / ms / 1e6 << " GB/s)\n";
  };
  time("fill_random normal bf16", [&] {
    k().fill_random(a.ptr(), bytes / 2, DType::kBFloat16, normal(0, 1), 1, 0, stream());
  });
  time("fill_random uniform f32", [&] {
    k().fill_random(a.ptr(), bytes / 4, DType::kFloat32, bounded("uniform", -1, 1), 1, 0, stream());
  });
  time("fill_random normal fp8 e4m3",
       [&] { k().fill_random(a.ptr(), bytes, DType::kFloat8E4M3, normal(0, 1), 1, 0, stream()); });
  time("fill_random range int32", [&] {
    k().fill_random(a.ptr(), bytes / 4, DType::kInt32, bounded("range", 0, 1000), 1, 0, stream());
  });
  time("fill_pattern", [&] { k().fill_pattern(a.ptr(), bytes, {0xA5, 0x7F}, stream()); });
  // These synchronise per call: the time includes a launch round trip each.
  time("check_pattern", [&] { k().check_pattern(a.ptr(), bytes, {0xA5, 0x7F}, stream()); });
  time("checksum", [&] { k().checksum(a.ptr(), bytes, stream()); });
  // The seal's ChaCha20 keystream: a seal (one block per thread) and the checks that unseal one
  // 16-byte chunk per thread (each computes the whole 64-byte block for its quarter).
  {
    device::DeviceBuffer sealed(bytes), record(verify::kCompareRecordBytes);
    const std::uint64_t key = 0x5EA1ull;
    time("seal", [&] { k().seal(a.ptr(), sealed.ptr(), bytes, key, 1, stream()); });
    time("check_sealed bf16", [&] {
      k().check_sealed(a.ptr(), sealed.ptr(), bytes / 2, DType::kBFloat16, key, 1, 0xFFFF, 1e-2,
                       1e-2, 0, 0, record.ptr(), stream());
    });
    time("compare_sealed bf16", [&] {
      k().compare_sealed(a.ptr(), sealed.ptr(), bytes / 2, DType::kBFloat16, key, 1,
                         Tolerance{1e-2, 1e-2, 1.0}, 0, record.ptr(), stream());
    });
  }
  std::cout << "harness kernels for " << k().arch() << (k().cache_hit() ? " (cached)" : "") << "\n";
}

// DeviceBuffer's host transfers are complete with respect to kernels on non-blocking streams (the
// harness's and the tests' streams): an upload or a fill is whole before the next kernel reads it,
// and a download waits for the kernels before it. Plain cuMemcpyHtoD/cuMemsetD8 are ordered on the
// legacy stream only; three GPU reference tests read half-uploaded or re-poisoned buffers that way
// when they ran in parallel. 256 MiB so that a copy still in flight would be seen.
TEST_F(HarnessKernelsGpuTest, DeviceBufferTransfersAreOrderedWithNonBlockingStreams) {
  constexpr std::size_t bytes = std::size_t{256} << 20;
  device::DeviceBuffer a(bytes);
  std::vector<std::uint8_t> host(bytes);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    for (std::size_t i = 0; i < bytes; ++i)
      host[i] = static_cast<std::uint8_t>((i * 2654435761u + round) >> 13);
    a.upload(host.data(), bytes);
    const std::uint64_t right_after = k().checksum(a.ptr(), bytes, stream());
    KHARNESS_CU(device::Driver::instance(), cuCtxSynchronize);
    EXPECT_EQ(right_after, k().checksum(a.ptr(), bytes, stream())) << "upload still in flight";

    const std::uint8_t fill = static_cast<std::uint8_t>(0xA0 + round);
    a.fill(fill);
    const PatternCheck filled = k().check_pattern(a.ptr(), bytes, {fill}, stream());
    EXPECT_TRUE(filled.ok()) << filled.mismatches << " bytes not yet filled, the first at "
                             << filled.first_mismatch_byte;

    const std::uint8_t pattern = static_cast<std::uint8_t>(0x50 + round);
    k().fill_pattern(a.ptr(), bytes, {pattern}, stream());  // asynchronous
    a.download(host.data(), bytes);
    EXPECT_EQ(std::count(host.begin(), host.end(), pattern), static_cast<std::ptrdiff_t>(bytes))
        << "download ran before the kernel that writes the buffer";
  }
}

// The device check of a timed iteration (check_sealed) against the host comparator it stands
// for (compare_output): the same counts and first indices for every dtype and kind of damage,
// the sealed copy not readable as the reference, and a record that authenticates only untouched
// and under its key.
TEST_F(HarnessKernelsGpuTest, SealedCheckAgreesWithTheHostComparator) {
  const Tolerance tol{1e-2, 1e-2, 1.0};
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kFloat8E4M3,
                      DType::kInt32, DType::kInt64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::size_t size = dtype_size(dtype);
    const std::size_t count = 100003;  // not a multiple of any chunk
    const std::size_t padded = (count * size + 15) / 16 * 16;
    device::DeviceBuffer expected(padded + 16), got(padded + 16), sealed(padded), record(128);
    k().fill_random(expected.ptr(), count, dtype,
                    is_floating(dtype) ? normal(0, 1) : bounded("range", -50, 50), 7, 1, stream());
    std::vector<std::uint8_t> e = download(expected.ptr(), count * size);
    // Damage: a run of unwritten elements (this iteration's poison), a NaN, a few far off, a
    // few within tolerance.
    std::vector<std::uint8_t> g = e;
    const auto poison = iteration_poison_element(dtype, 0x1234567);
    for (std::size_t i = 5000; i < 5010; ++i) std::memcpy(&g[i * size], poison.data(), size);
    for (std::size_t i : {77u, 90000u}) {
      const double v = to_double(dtype, &e[i * size]);
      from_double(dtype, v * 3 + 7, &g[i * size]);
    }
    // (e4m3's only NaN is the host's fixed poison: the host would count it as unwritten.)
    if (is_floating(dtype) && dtype != DType::kFloat8E4M3)
      from_double(dtype, std::nan(""), &g[123 * size]);
    from_double(dtype, to_double(dtype, &e[500 * size]) * (1 + 1e-3), &g[500 * size]);
    upload(got.ptr(), g.data(), g.size());
    const std::uint64_t key = 0xFEEDFACECAFEBEEFull;
    k().seal(expected.ptr(), sealed.ptr(), count * size, key, 9, stream());
    std::vector<std::uint8_t> sealed_bytes = download(sealed.ptr(), count * size);
    EXPECT_NE(sealed_bytes, e) << "the sealed copy holds the reference in plain";
    std::uint64_t poison_bits = 0;
    std::memcpy(&poison_bits, poison.data(), size);
    k().check_sealed(got.ptr(), sealed.ptr(), count, dtype, key, 9, poison_bits, tol.atol, tol.rtol,
                     42, 0, record.ptr(), stream());
    std::vector<std::uint8_t> raw = download(record.ptr(), 128);
    auto r = HarnessKernels::open_record(raw.data(), key);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->iteration, 42u);
    EXPECT_EQ(r->elements, count);
    EXPECT_EQ(r->stream, 9u);
    // The host comparator, with this iteration's poison as the unwritten marker.
    std::vector<std::uint8_t> g_host = g;
    const auto fixed = poison_element(dtype);
    for (std::size_t i = 0; i < count; ++i) {
      if (std::memcmp(&g[i * size], poison.data(), size) == 0)
        std::memcpy(&g_host[i * size], fixed.data(), size);
    }
    verify::OutputCheck host =
        verify::compare_output("t", dtype, e.data(), g_host.data(), count, tol, 1);
    EXPECT_EQ(r->unwritten, host.poison_left);
    EXPECT_EQ(r->first_unwritten, static_cast<std::uint64_t>(host.first_poison));
    EXPECT_EQ(r->nonfinite, host.nonfinite);
    EXPECT_EQ(r->mismatches, host.comparison.mismatches);
    EXPECT_EQ(static_cast<std::int64_t>(r->first_mismatch), host.comparison.first_bad_index);
    EXPECT_DOUBLE_EQ(r->max_abs_error, host.comparison.max_abs_error);
    EXPECT_EQ(r->first_index, 5000u);  // the first unwritten element, as output_failure orders
    std::uint64_t want_got = 0;
    std::memcpy(&want_got, poison.data(), size);
    EXPECT_EQ(r->got_bits, want_got);
    // Tampered or under another key: refused.
    EXPECT_FALSE(HarnessKernels::open_record(raw.data(), key ^ 1).has_value());
    for (std::size_t byte : {0u, 24u, 56u, 100u, 127u}) {
      std::vector<std::uint8_t> bad = raw;
      bad[byte] ^= 0x10;
      EXPECT_FALSE(HarnessKernels::open_record(bad.data(), key).has_value()) << byte;
    }
    // Every element written right: nothing counted.
    upload(got.ptr(), e.data(), e.size());
    k().check_sealed(got.ptr(), sealed.ptr(), count, dtype, key, 9, poison_bits, tol.atol, tol.rtol,
                     43, 0, record.ptr(), stream());
    raw = download(record.ptr(), 128);
    r = HarnessKernels::open_record(raw.data(), key);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->unwritten + r->nonfinite + r->mismatches, 0u);
  }
}

// ---- the correctness trials' comparison on the device (compare_sealed) -------------------------
// compare_sealed must give, for any pair of tensors, the totals the host's compare_output reduces
// them to (ElementwiseTotals, verify/compare.hpp) bit for bit: the correctness trials' verdicts
// and evidence come from it. The cases below are random data and adversarial bit patterns for
// every dtype; a failure names the case, the dtype, the tolerance and the field.

std::uint64_t bits_at(const std::vector<std::uint8_t>& v, std::size_t size, std::size_t i) {
  std::uint64_t b = 0;
  std::memcpy(&b, &v[i * size], size);
  return b;
}

void set_bits(std::vector<std::uint8_t>& v, std::size_t size, std::size_t i, std::uint64_t b) {
  std::memcpy(&v[i * size], &b, size);
}

bool same_bits(double a, double b) {
  std::uint64_t x = 0, y = 0;
  std::memcpy(&x, &a, sizeof a);
  std::memcpy(&y, &b, sizeof b);
  return x == y;
}

std::string describe(double d) {
  std::ostringstream o;
  std::uint64_t b = 0;
  std::memcpy(&b, &d, 8);
  o << std::hexfloat << d << " (bits 0x" << std::hex << b << ")";
  return o.str();
}

struct ComparisonCase {
  std::string name;
  DType dtype;
  std::vector<std::uint8_t> expected, got;
};

// Tolerances every case runs under: none (any difference in value is a mismatch), the common
// 1e-2 / 1e-2, powers of two that the tolerance-edge values below sit exactly on (with a 0.99
// matched ratio), an rtol only infinity exceeds, and an atol nothing finite exceeds.
std::vector<Tolerance> comparison_tolerances() {
  return {Tolerance{0.0, 0.0, 1.0}, Tolerance{1e-2, 1e-2, 1.0},
          Tolerance{0.0078125, 0.0078125, 0.99}, Tolerance{1e-3, 1e30, 1.0},
          Tolerance{1e300, 0.0, 1.0}};
}

// Values worth meeting on either side, as bits: zeros of both signs, the smallest and largest
// subnormals, the smallest normal, 1 and its neighbours, the tolerance edges 1 +- 2^-7 and
// 1.01, the fp8 maxima, the largest finite values, infinities, NaNs of both signs and several
// payloads, and the poison.
std::vector<std::uint64_t> special_bits(DType dtype) {
  const std::size_t size = dtype_size(dtype);
  std::vector<std::uint64_t> out;
  auto add_value = [&](double v) {
    std::uint8_t b[8] = {};
    from_double(dtype, v, b);
    std::uint64_t x = 0;
    std::memcpy(&x, b, size);
    out.push_back(x);
  };
  const double kInf = std::numeric_limits<double>::infinity();
  for (double v :
       {0.0,    -0.0,  1.0,          -1.0,          1.0078125, 0.9921875, 1.01,  2.0,
        3.0,    448.0, 57344.0,      65504.0,       1e-3,      1e30,      -1e30, 1e300,
        kInf,   -kInf, std::nan(""), -std::nan(""), 127.0,     -128.0,    255.0, 9007199254740993.0,
        -9.2e18})
    add_value(v);
  std::uint64_t poison = 0;
  std::memcpy(&poison, poison_element(dtype).data(), size);
  out.push_back(poison);
  switch (dtype) {
    case DType::kFloat32:
      for (std::uint64_t b : {0x00000001ull, 0x80000001ull, 0x007FFFFFull, 0x00800000ull,
                              0x7F7FFFFFull, 0xFF7FFFFFull, 0x3F800001ull, 0x7FC00000ull,
                              0xFFC00000ull, 0x7F800001ull, 0xFFFFFFFFull, 0x7FA5A5A4ull})
        out.push_back(b);
      break;
    case DType::kFloat16:
    case DType::kBFloat16:
      for (std::uint64_t b :
           {0x0001ull, 0x8001ull, 0x03FFull, 0x0400ull, 0x007Full, 0x0080ull, 0x7BFFull, 0x7F7Full,
            0x7C01ull, 0x7E00ull, 0xFE00ull, 0x7FC0ull, 0xFFC0ull, 0xFFFFull, 0x7DA4ull, 0x7FA4ull})
        out.push_back(b);
      break;
    case DType::kFloat8E4M3:
    case DType::kFloat8E5M2:
      for (std::uint64_t b : {0x01ull, 0x81ull, 0x07ull, 0x08ull, 0x03ull, 0x04ull, 0x7Eull,
                              0xFEull, 0x7Full, 0xFFull, 0x7Cull, 0xFCull, 0x7Dull, 0x7Bull})
        out.push_back(b);
      break;
    default:  // integers and bool: the extremes and bytes that are neither 0 nor 1
      for (std::uint64_t b : {0ull, 1ull, 2ull, 0x80ull, 0x7Full, 0xFFull, 0x7FFFull, 0x8000ull,
                              0x7FFFFFFFull, 0x80000000ull, 0x7FFFFFFFFFFFFFFFull,
                              0x8000000000000000ull, 0xFFFFFFFFFFFFFFFFull, 0x20000000000001ull})
        out.push_back(size == 8 ? b : b & ((1ull << (8 * size)) - 1));
      break;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Random values of the dtype's usual range (normal(0, 1) for floats, integers in [-100, 100] or
// bytes for bool), with one element in 50 damaged by the candidate in one of a dozen ways and
// one in 2000 unwritten by the reference.
ComparisonCase random_case(DType dtype, std::uint64_t count, std::uint64_t seed) {
  const std::size_t size = dtype_size(dtype);
  ComparisonCase c{
      "random " + std::to_string(count), dtype, std::vector<std::uint8_t>(count * size), {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> small(-100, 100);
  const bool floats = is_floating(dtype);
  for (std::uint64_t i = 0; i < count; ++i) {
    const double v = dtype == DType::kBool ? (rng() & 1) : floats ? normal(rng) : small(rng);
    from_double(dtype, v, &c.expected[i * size]);
  }
  c.got = c.expected;
  std::uint64_t poison = 0;
  std::memcpy(&poison, poison_element(dtype).data(), size);
  const double tiny = std::ldexp(1.0, -140);
  for (std::uint64_t i = 0; i < count; ++i) {
    const double e = to_double(dtype, &c.expected[i * size]);
    std::uint8_t* g = &c.got[i * size];
    const std::uint64_t r = rng();
    if (r % 2000 == 0) set_bits(c.expected, size, i, poison);
    switch (r % 50) {
      case 0:
        from_double(dtype, e * (1 + 0.004), g);
        break;  // within 1e-2, beyond 0
      case 1:
        from_double(dtype, e * 3 + 1, g);
        break;  // beyond every tolerance
      case 2:
        from_double(dtype, std::nan(""), g);
        break;
      case 3:
        from_double(dtype, INFINITY, g);
        break;
      case 4:
        from_double(dtype, -INFINITY, g);
        break;
      case 5:
        set_bits(c.got, size, i, poison);
        break;
      case 6:  // +0 expected, -0 got
        from_double(dtype, 0.0, &c.expected[i * size]);
        from_double(dtype, -0.0, g);
        break;
      case 7:  // subnormals (float32, bfloat16) or zeros
        from_double(dtype, tiny * 3, &c.expected[i * size]);
        from_double(dtype, tiny, g);
        break;
      case 8:  // the largest finite value against its negation
        from_double(dtype, 1e300, &c.expected[i * size]);
        from_double(dtype, -1e300, g);
        break;
      case 9:
        set_bits(c.got, size, i, rng());
        break;  // any bits at all
      case 10:
        from_double(dtype, e + 0.0078125, g);
        break;  // on the atol edge
      case 11:
        from_double(dtype, e * (1 + 0.0078125), g);
        break;  // near the rtol edge
      default:
        break;
    }
  }
  return c;
}

class CompareSealedGpuTest : public HarnessKernelsGpuTest {
 protected:
  // compare_sealed on `c` under `tol` against the host's comparator on the same bytes: every
  // total (doubles by their bits), the count of differing elements, the record's binding and
  // encoding (the device's bytes are compare_record_bytes' for the same record and key), and
  // the OutputCheck and the failure (kind, message, evidence) that each side's totals make.
  void expect_device_equals_host(const ComparisonCase& c, const Tolerance& tol) {
    std::ostringstream what;
    what << c.name << ", " << dtype_name(c.dtype) << ", atol " << tol.atol << " rtol " << tol.rtol
         << " ratio " << tol.required_matched_ratio;
    SCOPED_TRACE(what.str());
    const std::size_t size = dtype_size(c.dtype);
    const std::uint64_t count = c.expected.size() / size;
    const std::size_t bytes = count * size;
    const std::size_t padded = (bytes + 15) / 16 * 16;
    // Readable up to the next 16-byte boundary, as the kernels require (guard zones in a trial).
    device::DeviceBuffer e(padded + 16), g(padded + 16), sealed(std::max<std::size_t>(16, padded)),
        record(verify::kCompareRecordBytes);
    if (bytes != 0) {
      upload(e.ptr(), c.expected.data(), bytes);
      upload(g.ptr(), c.got.data(), bytes);
    }
    const std::uint64_t key = 0x5EA1ED00C0FFEE11ull ^ (count * 0x9E3779B97F4A7C15ull);
    const std::uint64_t stream_id = 1000 + count;
    const std::uint64_t nonce = 4242 + count;
    k().seal(e.ptr(), sealed.ptr(), bytes, key, stream_id, stream());
    k().compare_sealed(g.ptr(), sealed.ptr(), count, c.dtype, key, stream_id, tol, nonce,
                       record.ptr(), stream());
    const std::vector<std::uint8_t> raw = download(record.ptr(), verify::kCompareRecordBytes);
    const std::optional<verify::CompareRecord> r =
        HarnessKernels::open_compare_record(raw.data(), key);
    ASSERT_TRUE(r.has_value()) << "the device's record does not authenticate under its key";
    EXPECT_EQ(HarnessKernels::compare_record_bytes(*r, key), raw)
        << "the device encodes or tags the record differently from the host";
    EXPECT_EQ(r->stream, stream_id);
    EXPECT_EQ(r->nonce, nonce);

    const std::uint8_t* eh = c.expected.data();
    const std::uint8_t* gh = c.got.data();
    const verify::ElementwiseTotals host = verify::elementwise_totals(c.dtype, eh, gh, count, tol);
    const verify::ElementwiseTotals serial =
        verify::elementwise_totals(c.dtype, eh, gh, count, tol, 1);
    const verify::ElementwiseTotals& dev = r->totals;
    for (const verify::ElementwiseTotals* h : {&host, &serial}) {
      EXPECT_EQ(dev.elements, h->elements);
      EXPECT_EQ(dev.mismatches, h->mismatches);
      EXPECT_EQ(dev.first_bad, h->first_bad);
      EXPECT_EQ(dev.first_bad_expected, h->first_bad_expected) << "bits at first_bad";
      EXPECT_EQ(dev.first_bad_got, h->first_bad_got) << "bits at first_bad";
      EXPECT_TRUE(same_bits(dev.max_abs, h->max_abs))
          << "max_abs: device " << describe(dev.max_abs) << ", host " << describe(h->max_abs);
      EXPECT_TRUE(same_bits(dev.max_rel, h->max_rel))
          << "max_rel: device " << describe(dev.max_rel) << ", host " << describe(h->max_rel);
      EXPECT_EQ(dev.poison, h->poison);
      EXPECT_EQ(dev.first_poison, h->first_poison);
      EXPECT_EQ(dev.nonfinite, h->nonfinite);
      EXPECT_EQ(dev.first_nonfinite, h->first_nonfinite);
      EXPECT_EQ(dev.nonfinite_expected, h->nonfinite_expected) << "bits at first_nonfinite";
      EXPECT_EQ(dev.nonfinite_got, h->nonfinite_got) << "bits at first_nonfinite";
      EXPECT_EQ(dev.reference_poison, h->reference_poison);
    }
    std::uint64_t differing = 0;
    for (std::uint64_t i = 0; i < count; ++i)
      differing += std::memcmp(eh + i * size, gh + i * size, size) != 0;
    EXPECT_EQ(r->differing, differing) << "elements whose bits differ (the determinism test)";

    const verify::OutputCheck d = verify::elementwise_check("t", c.dtype, dev);
    const verify::OutputCheck h = verify::compare_output("t", c.dtype, eh, gh, count, tol);
    EXPECT_EQ(d.comparison.mismatches, h.comparison.mismatches);
    EXPECT_EQ(d.comparison.first_bad_index, h.comparison.first_bad_index);
    EXPECT_TRUE(same_bits(d.comparison.expected, h.comparison.expected));
    EXPECT_TRUE(same_bits(d.comparison.got, h.comparison.got));
    EXPECT_TRUE(same_bits(d.comparison.matched_ratio, h.comparison.matched_ratio));
    EXPECT_TRUE(same_bits(d.nonfinite_expected, h.nonfinite_expected));
    EXPECT_TRUE(same_bits(d.nonfinite_got, h.nonfinite_got));
    const auto df = verify::output_failure(d, tol);
    const auto hf = verify::output_failure(h, tol);
    ASSERT_EQ(df.has_value(), hf.has_value());
    if (df) {
      EXPECT_EQ(df->kind, hf->kind);
      EXPECT_EQ(df->message, hf->message);
      EXPECT_EQ(df->evidence.dump(), hf->evidence.dump());
    }
  }

  void expect_device_equals_host(const ComparisonCase& c) {
    for (const Tolerance& tol : comparison_tolerances()) expect_device_equals_host(c, tol);
  }
};

const std::vector<DType>& every_dtype() {
  static const std::vector<DType> all = {DType::kFloat32,    DType::kFloat16,    DType::kBFloat16,
                                         DType::kFloat8E4M3, DType::kFloat8E5M2, DType::kInt64,
                                         DType::kInt32,      DType::kInt16,      DType::kInt8,
                                         DType::kUInt8,      DType::kBool};
  return all;
}

// Random tensors with every kind of damage, of sizes around the kernel's 16-byte chunks and
// blocks: none, one element, one short of a chunk, a chunk and one, a prime, and (bf16) 3M
// elements, more than one pass of the capped grid.
TEST_F(CompareSealedGpuTest, RandomDataEqualsTheHostComparatorBitForBit) {
  std::uint64_t seed = 1;
  for (DType dtype : every_dtype()) {
    for (std::uint64_t count : {0ull, 1ull, 15ull, 17ull, 4099ull, 100003ull})
      expect_device_equals_host(random_case(dtype, count, seed++));
  }
  expect_device_equals_host(random_case(DType::kBFloat16, 3000001, seed++),
                            Tolerance{1e-2, 1e-2, 1.0});
}

// Every pair of the special values above, for every dtype.
TEST_F(CompareSealedGpuTest, SpecialValuesInEveryPairEqualTheHostComparator) {
  for (DType dtype : every_dtype()) {
    const std::size_t size = dtype_size(dtype);
    const std::vector<std::uint64_t> specials = special_bits(dtype);
    ComparisonCase c{"special pairs", dtype, {}, {}};
    c.expected.resize(specials.size() * specials.size() * size);
    c.got.resize(c.expected.size());
    std::size_t i = 0;
    for (std::uint64_t a : specials) {
      for (std::uint64_t b : specials) {
        set_bits(c.expected, size, i, a);
        set_bits(c.got, size, i, b);
        ++i;
      }
    }
    expect_device_equals_host(c);
  }
}

// Bit patterns: every (expected, got) pair of a 1-byte dtype; for 2-byte dtypes every pattern
// against itself, its last bit flipped, its sign flipped, a permutation and random bits; for
// wider ones random bits.
TEST_F(CompareSealedGpuTest, BitPatternsEqualTheHostComparator) {
  std::mt19937_64 rng(99);
  for (DType dtype : every_dtype()) {
    const std::size_t size = dtype_size(dtype);
    if (size == 1) {
      ComparisonCase c{"every pair of bytes", dtype, std::vector<std::uint8_t>(65536), {}};
      c.got.resize(65536);
      for (std::size_t i = 0; i < 65536; ++i) {
        c.expected[i] = static_cast<std::uint8_t>(i >> 8);
        c.got[i] = static_cast<std::uint8_t>(i);
      }
      expect_device_equals_host(c);
    } else if (size == 2) {
      std::vector<std::uint64_t> perm(65536);
      for (std::size_t i = 0; i < 65536; ++i) perm[i] = i;
      std::shuffle(perm.begin(), perm.end(), rng);
      const std::vector<std::pair<std::string, std::function<std::uint64_t(std::uint64_t)>>> ways =
          {{"itself", [](std::uint64_t b) { return b; }},
           {"last bit flipped", [](std::uint64_t b) { return b ^ 1; }},
           {"sign flipped", [](std::uint64_t b) { return b ^ 0x8000; }},
           {"a permutation", [&](std::uint64_t b) { return perm[b]; }},
           {"random bits", [&](std::uint64_t) { return rng() & 0xFFFF; }}};
      for (const auto& [name, way] : ways) {
        ComparisonCase c{
            "every pattern against " + name, dtype, std::vector<std::uint8_t>(2 * 65536), {}};
        c.got.resize(c.expected.size());
        for (std::uint64_t b = 0; b < 65536; ++b) {
          set_bits(c.expected, 2, b, b);
          set_bits(c.got, 2, b, way(b));
        }
        expect_device_equals_host(c);
      }
    } else {
      ComparisonCase c{"random bits", dtype, std::vector<std::uint8_t>(size * 100003), {}};
      c.got.resize(c.expected.size());
      for (std::size_t i = 0; i < 100003; ++i) {
        set_bits(c.expected, size, i, rng());
        set_bits(c.got, size, i,
                 i % 3 == 0 ? bits_at(c.expected, size, i) ^ (rng() & 0xFF) : rng());
      }
      expect_device_equals_host(c);
    }
  }
}

// Every element a mismatch; a single mismatch at the last element (of a count that leaves the
// last chunk partial); a NaN first at the last element; every element unwritten.
TEST_F(CompareSealedGpuTest, AllOrOnlyTheLastElementWrongEqualsTheHostComparator) {
  std::uint64_t seed = 500;
  for (DType dtype : every_dtype()) {
    const std::size_t size = dtype_size(dtype);
    ComparisonCase all = random_case(dtype, 4099, seed++);
    all.name = "all mismatches";
    all.got = all.expected;
    for (std::size_t i = 0; i < 4099; ++i) {
      const double e = to_double(dtype, &all.expected[i * size]);
      from_double(dtype, dtype == DType::kBool ? (e == 0 ? 1 : 0) : e * 4 + 3, &all.got[i * size]);
    }
    expect_device_equals_host(all);

    ComparisonCase last{"only the last element wrong", dtype, {}, {}};
    last.expected = random_case(dtype, 100003, seed++).expected;
    last.got = last.expected;
    const std::size_t n = 100002;
    std::uint64_t poison = 0;
    std::memcpy(&poison, poison_element(dtype).data(), size);
    for (std::size_t i = 0; i <= n; ++i) {
      if (bits_at(last.expected, size, i) == poison)
        from_double(dtype, 1.0, &last.expected[i * size]);
    }
    last.got = last.expected;
    const double e = to_double(dtype, &last.expected[n * size]);
    from_double(dtype, dtype == DType::kBool ? (e == 0 ? 1 : 0) : e * 2 + 1, &last.got[n * size]);
    expect_device_equals_host(last);
    if (is_floating(dtype) && dtype != DType::kFloat8E4M3) {  // (e4m3's NaN is the poison)
      from_double(dtype, std::nan(""), &last.got[n * size]);
      last.name = "only the last element NaN";
      expect_device_equals_host(last);
    }
    ComparisonCase unwritten = last;
    unwritten.name = "every element unwritten";
    for (std::size_t i = 0; i <= n; ++i) set_bits(unwritten.got, size, i, poison);
    expect_device_equals_host(unwritten);
  }
}

// What a candidate that finds the sealed copy of the reference's outputs (it runs after the
// reference, in the same context) can do to it. A plain copy overwritten with the candidate's
// own answer would compare equal to that answer; the sealed copy decrypts to noise and every
// element is a mismatch. Flipping chosen bits of the ciphertext flips the same bits of the
// plaintext (XOR sealing is malleable: here the signs, so a candidate that writes -reference
// matches), which is why the correctness trial also checksums every copy after sealing it and
// again after the candidate's last run, before any comparison counts, under a key: each write
// below changes the checksum (harness_memory_modified in a trial).
TEST_F(CompareSealedGpuTest, ACandidateWritingIntoTheSealedCopyCannotMakeItsAnswerMatch) {
  const DType bf16 = DType::kBFloat16;
  const std::uint64_t count = 7 * 4096;  // rmsnorm_h4096, batch 7
  const std::size_t bytes = 2 * count;
  device::DeviceBuffer expected(bytes + 16), got(bytes + 16), sealed(bytes),
      record(verify::kCompareRecordBytes);
  k().fill_random(expected.ptr(), count, bf16, normal(0, 1), 5, 0, stream());
  const std::vector<std::uint8_t> e = download(expected.ptr(), bytes);
  std::vector<std::uint8_t> answer(bytes);  // its answer: 1.0 everywhere
  for (std::size_t i = 0; i < count; ++i) from_double(bf16, 1.0, &answer[2 * i]);
  upload(got.ptr(), answer.data(), bytes);
  const std::uint64_t key = 0xA11CE5EC12E7ull, stream_id = 3, sum_key = 0x5EC2E7ull;
  const Tolerance tol{1e-2, 1e-2, 1.0};
  k().seal(expected.ptr(), sealed.ptr(), bytes, key, stream_id, stream());
  const std::uint64_t sealed_sum = k().checksum(sealed.ptr(), bytes, stream(), sum_key);
  auto compare = [&]() {
    k().compare_sealed(got.ptr(), sealed.ptr(), count, bf16, key, stream_id, tol, 1, record.ptr(),
                       stream());
    const auto raw = download(record.ptr(), verify::kCompareRecordBytes);
    auto r = HarnessKernels::open_compare_record(raw.data(), key);
    EXPECT_TRUE(r.has_value());
    return verify::elementwise_check("output", bf16, r ? r->totals : verify::ElementwiseTotals{});
  };
  // Untouched: the wrong answer is a wrong answer.
  EXPECT_TRUE(verify::output_failure(compare(), tol).has_value());
  // The control: against a plain copy holding its own answer, it would pass.
  EXPECT_FALSE(verify::output_failure(
      verify::compare_output("output", bf16, answer.data(), answer.data(), count, tol), tol));

  // 1. Its answer written over the sealed copy: decrypts to noise.
  upload(sealed.ptr(), answer.data(), bytes);
  const verify::OutputCheck overwritten = compare();
  const auto f = verify::output_failure(overwritten, tol);
  ASSERT_TRUE(f.has_value()) << "an answer written into the sealed copy matched it";
  EXPECT_GT(overwritten.comparison.mismatches + overwritten.nonfinite, count * 9 / 10)
      << f->message;
  EXPECT_NE(k().checksum(sealed.ptr(), bytes, stream(), sum_key), sealed_sum);

  // 2. The sign bits of the ciphertext flipped, and -reference as the answer: the comparison
  // alone passes (malleability); the checksum does not.
  k().seal(expected.ptr(), sealed.ptr(), bytes, key, stream_id, stream());
  ASSERT_EQ(k().checksum(sealed.ptr(), bytes, stream(), sum_key), sealed_sum);
  std::vector<std::uint8_t> flipped = download(sealed.ptr(), bytes);
  std::vector<std::uint8_t> negated = e;
  for (std::size_t i = 0; i < count; ++i) {
    flipped[2 * i + 1] ^= 0x80;
    negated[2 * i + 1] ^= 0x80;
  }
  upload(sealed.ptr(), flipped.data(), bytes);
  upload(got.ptr(), negated.data(), bytes);
  EXPECT_FALSE(verify::output_failure(compare(), tol).has_value())
      << "XOR sealing is malleable; if this changed, update the comment above";
  EXPECT_NE(k().checksum(sealed.ptr(), bytes, stream(), sum_key), sealed_sum);

  // 3. Two seals of the same outputs under two keystreams share no 16-byte chunk: one copy's
  // ciphertext tells nothing about another's.
  device::DeviceBuffer other(bytes);
  k().seal(expected.ptr(), sealed.ptr(), bytes, key, stream_id, stream());
  k().seal(expected.ptr(), other.ptr(), bytes, key, stream_id + 1, stream());
  const std::vector<std::uint8_t> a = download(sealed.ptr(), bytes);
  const std::vector<std::uint8_t> b = download(other.ptr(), bytes);
  std::size_t equal_chunks = 0;
  for (std::size_t c = 0; c < bytes / 16; ++c)
    equal_chunks += std::memcmp(&a[16 * c], &b[16 * c], 16) == 0;
  EXPECT_EQ(equal_chunks, 0u);
  EXPECT_NE(a, e) << "the sealed copy holds the reference in plain";
}

// The checksum's terms as the kernel computes them (term() of the source), and the inverse of its
// mixer: what a candidate that has read src/ can compute.
std::uint64_t fmix64(std::uint64_t k) {
  k ^= k >> 33;
  k *= 0xFF51AFD7ED558CCDull;
  k ^= k >> 33;
  k *= 0xC4CEB9FE1A85EC53ull;
  k ^= k >> 33;
  return k;
}
std::uint64_t inverse_odd(std::uint64_t a) {  // a^-1 mod 2^64 (Newton)
  std::uint64_t x = a;
  for (int i = 0; i < 6; ++i) x *= 2 - a * x;
  return x;
}
std::uint64_t unmix64(std::uint64_t k) {
  k ^= k >> 33;  // self-inverse: the shift is more than half the width
  k *= inverse_odd(0xC4CEB9FE1A85EC53ull);
  k ^= k >> 33;
  k *= inverse_odd(0xFF51AFD7ED558CCDull);
  k ^= k >> 33;
  return k;
}
std::uint64_t mask_of(std::uint64_t index) {
  return fmix64(index * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
}
std::uint64_t term_of(std::uint64_t index, std::uint64_t word) {
  return fmix64(word ^ mask_of(index));
}

// The checksum that guards a sealed copy is keyed. Unkeyed (the memory rules' checksums), a
// candidate can change a word and keep the sum by changing a second word to compensate: it knows
// every term. Under a key it cannot: the same two writes leave the unkeyed checksum as it was and
// change the keyed one.
TEST_F(CompareSealedGpuTest, ACompensatingWriteKeepsTheUnkeyedChecksumButNotTheKeyedOne) {
  constexpr std::size_t kWords = 512;
  std::mt19937_64 rng(17);
  std::vector<std::uint64_t> words(kWords);
  for (auto& w : words) w = rng();
  device::DeviceBuffer region(8 * kWords);
  upload(region.ptr(), words.data(), 8 * kWords);
  const std::uint64_t key = 0x0123456789ABCDEFull;
  const std::uint64_t unkeyed = k().checksum(region.ptr(), 8 * kWords, stream());
  const std::uint64_t keyed = k().checksum(region.ptr(), 8 * kWords, stream(), key);
  EXPECT_NE(unkeyed, keyed);
  ASSERT_EQ(unmix64(fmix64(0x1234567890ull)), 0x1234567890ull);
  // Word 3 changes; word 100 takes the value whose term makes up the difference.
  const std::size_t i = 3, j = 100;
  const std::uint64_t delta = term_of(i, words[i] ^ 1) - term_of(i, words[i]);
  words[i] ^= 1;
  words[j] = unmix64(term_of(j, words[j]) - delta) ^ mask_of(j);
  upload(region.ptr(), words.data(), 8 * kWords);
  EXPECT_EQ(k().checksum(region.ptr(), 8 * kWords, stream()), unkeyed)
      << "the compensating write did not keep the unkeyed checksum: the test's model of the "
         "kernel's terms is wrong";
  EXPECT_NE(k().checksum(region.ptr(), 8 * kWords, stream(), key), keyed);
}

// The correctness trial enqueues its comparisons on a ReadBatch beside the memory rules'
// checksums and waits once: twelve comparisons (108 slots, so the batch grows past its first 64
// in the middle) give the records direct calls give, and the checksums are checksum()'s.
TEST_F(CompareSealedGpuTest, AReadBatchCarriesComparisonsBesideChecksums) {
  const DType f32 = DType::kFloat32;
  const Tolerance tol{1e-3, 1e-3, 1.0};
  const std::uint64_t key = 0x0DDBA11ull;
  std::vector<ComparisonCase> cases;
  std::vector<device::DeviceBuffer> buffers;  // per case: expected, got, sealed
  HarnessKernels::ReadBatch batch(k());
  std::vector<std::pair<std::size_t, std::size_t>> slots;  // comparison, checksum
  for (int n = 0; n < 12; ++n) {
    cases.push_back(random_case(f32, 1000 + 97 * n, 700 + n));
    const std::size_t bytes = cases.back().expected.size();
    buffers.emplace_back(bytes + 16);
    buffers.emplace_back(bytes + 16);
    buffers.emplace_back((bytes + 15) / 16 * 16);
    device::DeviceBuffer& e = buffers[buffers.size() - 3];
    device::DeviceBuffer& g = buffers[buffers.size() - 2];
    device::DeviceBuffer& s = buffers.back();
    upload(e.ptr(), cases.back().expected.data(), bytes);
    upload(g.ptr(), cases.back().got.data(), bytes);
    k().seal(e.ptr(), s.ptr(), bytes, key, n, stream());
    const std::size_t compare =
        batch.compare_sealed(g.ptr(), s.ptr(), bytes / 4, f32, key, n, tol, 100 + n, stream());
    slots.emplace_back(compare, batch.checksum(g.ptr(), bytes, stream()));
  }
  batch.wait(stream());
  for (int n = 0; n < 12; ++n) {
    SCOPED_TRACE(n);
    const std::size_t bytes = cases[n].expected.size();
    const auto r = batch.compare_result(slots[n].first, key);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->nonce, 100u + n);
    EXPECT_EQ(r->stream, static_cast<std::uint64_t>(n));
    device::DeviceBuffer record(verify::kCompareRecordBytes);
    k().compare_sealed(buffers[3 * n + 1].ptr(), buffers[3 * n + 2].ptr(), bytes / 4, f32, key, n,
                       tol, 100 + n, record.ptr(), stream());
    EXPECT_EQ(HarnessKernels::compare_record_bytes(*r, key),
              download(record.ptr(), verify::kCompareRecordBytes));
    EXPECT_EQ(batch.checksum_result(slots[n].second),
              k().checksum(buffers[3 * n + 1].ptr(), bytes, stream()));
  }
}

// Shared memory written by one kernel is not what the next finds once it has been scrubbed.
// The device seals with the keystream of the host mirror (verify::seal_keystream, held to RFC 8439
// on the CPU): every chunk of a region that ends inside a 64-byte block, under two streams, and
// the checks unseal it back (a sealed copy of the output itself compares equal).
TEST_F(HarnessKernelsGpuTest, SealIsTheHostMirrorsChaCha20Keystream) {
  constexpr std::size_t chunks = 4 * 37 + 3, bytes = 16 * chunks;
  std::vector<std::uint8_t> plain(bytes);
  for (std::size_t i = 0; i < bytes; ++i) plain[i] = static_cast<std::uint8_t>(i * 7 + 3);
  device::DeviceBuffer src(bytes), sealed(bytes), record(verify::kCompareRecordBytes);
  upload(src.ptr(), plain.data(), bytes);
  const std::uint64_t key = 0xC4AC4A20ull << 16;
  for (const std::uint64_t stream_id : {std::uint64_t{3}, (std::uint64_t{9} << 32) | 1}) {
    k().seal(src.ptr(), sealed.ptr(), bytes, key, stream_id, stream());
    const std::vector<std::uint8_t> got = download(sealed.ptr(), bytes);
    for (std::size_t c = 0; c < chunks; ++c) {
      const std::array<std::uint32_t, 4> ks = verify::seal_keystream(c, stream_id, key);
      std::uint8_t want[16];
      std::memcpy(want, ks.data(), 16);
      for (std::size_t i = 0; i < 16; ++i) want[i] ^= plain[16 * c + i];
      ASSERT_EQ(std::memcmp(want, &got[16 * c], 16), 0) << "chunk " << c << " stream " << stream_id;
    }
    k().compare_sealed(src.ptr(), sealed.ptr(), bytes / 4, DType::kFloat32, key, stream_id,
                       Tolerance{0, 0, 1.0}, 7, record.ptr(), stream());
    const auto raw = download(record.ptr(), verify::kCompareRecordBytes);
    const auto r = HarnessKernels::open_compare_record(raw.data(), key);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->totals.mismatches, 0u);
    EXPECT_EQ(r->differing, 0u);
  }
}

TEST_F(HarnessKernelsGpuTest, ScrubSharedRuns) {
  k().scrub_shared(0xDEADBEEFu, stream());
  k().scrub_shared(0x01234567u, stream());
  stream_->synchronize();
}

}  // namespace
}  // namespace kharness
