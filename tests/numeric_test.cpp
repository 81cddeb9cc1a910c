// Host element conversions: known values, rounding, saturation, subnormals, NaN and poison, and
// agreement with the CUDA headers' own host implementations (the same code the device runs on
// targets without a hardware conversion).
#include "kharness/numeric.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <vector>

namespace kharness {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::uint32_t bits_of(DType dtype, double value) {
  std::uint8_t out[8] = {};
  from_double(dtype, value, out);
  std::uint32_t b = 0;
  std::memcpy(&b, out, std::min<std::size_t>(4, dtype_size(dtype)));
  return b;
}

double value_of(DType dtype, std::uint64_t bits) {
  std::uint8_t in[8];
  std::memcpy(in, &bits, sizeof in);
  return to_double(dtype, in);
}

TEST(Numeric, KnownBitPatterns) {
  EXPECT_EQ(bits_of(DType::kBFloat16, 1.0), 0x3F80u);
  EXPECT_EQ(bits_of(DType::kBFloat16, -2.0), 0xC000u);
  EXPECT_EQ(bits_of(DType::kFloat16, 1.0), 0x3C00u);
  EXPECT_EQ(bits_of(DType::kFloat16, 65504.0), 0x7BFFu);
  EXPECT_EQ(bits_of(DType::kFloat16, -0.0), 0x8000u);
  EXPECT_EQ(bits_of(DType::kFloat8E4M3, 448.0), 0x7Eu);
  EXPECT_EQ(bits_of(DType::kFloat8E4M3, 1.0), 0x38u);
  EXPECT_EQ(bits_of(DType::kFloat8E4M3, -1.0), 0xB8u);
  EXPECT_EQ(bits_of(DType::kFloat8E5M2, 57344.0), 0x7Bu);
  EXPECT_EQ(bits_of(DType::kFloat8E5M2, 1.0), 0x3Cu);
  EXPECT_EQ(bits_of(DType::kFloat32, 1.0), 0x3F800000u);

  EXPECT_EQ(value_of(DType::kBFloat16, 0x3F80), 1.0);
  EXPECT_EQ(value_of(DType::kBFloat16, 0xC000), -2.0);
  EXPECT_EQ(value_of(DType::kFloat16, 0x7BFF), 65504.0);
  EXPECT_EQ(value_of(DType::kFloat8E4M3, 0x7E), 448.0);
  EXPECT_EQ(value_of(DType::kFloat8E4M3, 0xFE), -448.0);
  EXPECT_EQ(value_of(DType::kFloat8E5M2, 0x7B), 57344.0);
  EXPECT_EQ(value_of(DType::kFloat8E5M2, 0x7C), kInf);
  EXPECT_EQ(value_of(DType::kFloat16, 0xFC00), -kInf);
}

TEST(Numeric, RoundsToNearestEven) {
  // bf16 has 7 mantissa bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(bits_of(DType::kBFloat16, 1.0 + std::ldexp(1.0, -8)), 0x3F80u);      // tie, even
  EXPECT_EQ(bits_of(DType::kBFloat16, 1.0 + 3 * std::ldexp(1.0, -8)), 0x3F82u);  // tie, up
  EXPECT_EQ(bits_of(DType::kBFloat16, 1.0 + std::ldexp(1.0, -8) + 1e-12), 0x3F81u);
  // No double rounding through float: just above a bf16 tie, below float resolution.
  EXPECT_EQ(bits_of(DType::kBFloat16, 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)), 0x3F81u);
  // e4m3 near 1: steps of 1/8.
  EXPECT_EQ(bits_of(DType::kFloat8E4M3, 1.0625), 0x38u);  // tie to even (1.0)
  EXPECT_EQ(bits_of(DType::kFloat8E4M3, 1.1875), 0x3Au);  // tie to even (1.25)
  // Rounding carries into the next binade.
  EXPECT_EQ(bits_of(DType::kFloat16, 2047.9), 0x6800u);  // 2048
}

TEST(Numeric, OverflowAndSaturation) {
  EXPECT_EQ(bits_of(DType::kFloat16, 65519.0), 0x7BFFu);
  EXPECT_EQ(bits_of(DType::kFloat16, 65520.0), 0x7C00u);  // tie rounds to inf
  EXPECT_EQ(bits_of(DType::kFloat16, -1e9), 0xFC00u);
  EXPECT_EQ(bits_of(DType::kBFloat16, 1e39), 0x7F80u);
  EXPECT_EQ(bits_of(DType::kBFloat16, kInf), 0x7F80u);
  // fp8 satfinite: overflow and infinities clamp to the largest finite value.
  EXPECT_EQ(bits_of(DType::kFloat8E4M3, 1000.0), 0x7Eu);
  EXPECT_EQ(value_of(DType::kFloat8E4M3, bits_of(DType::kFloat8E4M3, 1000.0)), 448.0);
  EXPECT_EQ(bits_of(DType::kFloat8E4M3, -1000.0), 0xFEu);
  EXPECT_EQ(bits_of(DType::kFloat8E4M3, 464.0), 0x7Eu);
  EXPECT_EQ(bits_of(DType::kFloat8E4M3, 470.0), 0x7Eu);
  EXPECT_EQ(bits_of(DType::kFloat8E4M3, kInf), 0x7Eu);
  EXPECT_EQ(bits_of(DType::kFloat8E4M3, -kInf), 0xFEu);
  EXPECT_EQ(bits_of(DType::kFloat8E5M2, 1e6), 0x7Bu);
  EXPECT_EQ(bits_of(DType::kFloat8E5M2, 61440.0), 0x7Bu);
  EXPECT_EQ(bits_of(DType::kFloat8E5M2, -kInf), 0xFBu);
}

TEST(Numeric, Subnormals) {
  EXPECT_EQ(bits_of(DType::kFloat16, std::ldexp(1.0, -24)), 0x0001u);
  EXPECT_EQ(bits_of(DType::kFloat16, std::ldexp(1.0, -25)), 0x0000u);  // tie to even 0
  EXPECT_EQ(bits_of(DType::kFloat16, std::ldexp(1.5, -25)), 0x0001u);
  EXPECT_EQ(bits_of(DType::kFloat16, std::ldexp(3.0, -25)), 0x0002u);     // tie to even 2
  EXPECT_EQ(bits_of(DType::kFloat16, std::ldexp(1023.9, -24)), 0x0400u);  // up to min normal
  EXPECT_EQ(bits_of(DType::kBFloat16, std::ldexp(1.0, -133)), 0x0001u);
  EXPECT_EQ(bits_of(DType::kFloat8E4M3, std::ldexp(1.0, -9)), 0x01u);
  EXPECT_EQ(bits_of(DType::kFloat8E4M3, std::ldexp(1.0, -6)), 0x08u);  // min normal
  EXPECT_EQ(bits_of(DType::kFloat8E4M3, std::ldexp(1.0, -10)), 0x00u);
  EXPECT_EQ(bits_of(DType::kFloat8E4M3, -std::ldexp(1.0, -11)), 0x80u);  // -0
  EXPECT_EQ(bits_of(DType::kFloat8E5M2, std::ldexp(1.0, -16)), 0x01u);
  EXPECT_EQ(value_of(DType::kFloat8E4M3, 0x01), std::ldexp(1.0, -9));
  EXPECT_EQ(value_of(DType::kFloat8E4M3, 0x07), 7 * std::ldexp(1.0, -9));
  EXPECT_EQ(value_of(DType::kFloat8E5M2, 0x03), 3 * std::ldexp(1.0, -16));
  EXPECT_EQ(value_of(DType::kFloat16, 0x8001), -std::ldexp(1.0, -24));
  EXPECT_EQ(value_of(DType::kBFloat16, 0x0001), std::ldexp(1.0, -133));
}

TEST(Numeric, NaN) {
  EXPECT_TRUE(std::isnan(value_of(DType::kFloat8E4M3, 0x7F)));
  EXPECT_TRUE(std::isnan(value_of(DType::kFloat8E4M3, 0xFF)));
  EXPECT_FALSE(std::isnan(value_of(DType::kFloat8E4M3, 0x7E)));
  EXPECT_FALSE(std::isnan(value_of(DType::kFloat8E4M3, 0x78)));  // 256: e4m3fn has no inf
  EXPECT_TRUE(std::isnan(value_of(DType::kFloat8E5M2, 0x7D)));
  EXPECT_TRUE(std::isnan(value_of(DType::kFloat16, 0x7E00)));
  EXPECT_TRUE(std::isnan(value_of(DType::kBFloat16, 0xFFC1)));
  EXPECT_EQ(bits_of(DType::kFloat8E4M3, kNaN), 0x7Fu);
  EXPECT_EQ(bits_of(DType::kFloat8E4M3, -kNaN), 0xFFu);
  EXPECT_EQ(bits_of(DType::kFloat8E5M2, kNaN), 0x7Eu);
  EXPECT_EQ(bits_of(DType::kFloat16, kNaN), 0x7FFFu);
  EXPECT_EQ(bits_of(DType::kBFloat16, kNaN), 0x7FFFu);
  EXPECT_TRUE(std::isnan(value_of(DType::kFloat32, bits_of(DType::kFloat32, kNaN))));

  std::uint8_t e[4] = {0x7F, 0, 0, 0};
  EXPECT_TRUE(is_nan_bits(DType::kFloat8E4M3, e));
  EXPECT_FALSE(is_nan_bits(DType::kUInt8, e));
  EXPECT_FALSE(is_nan_bits(DType::kInt32, e));
  e[0] = 0x7E;
  EXPECT_FALSE(is_nan_bits(DType::kFloat8E4M3, e));
}

TEST(Numeric, Integers) {
  EXPECT_EQ(bits_of(DType::kInt8, 2.5), 2u);
  EXPECT_EQ(bits_of(DType::kInt8, 3.5), 4u);
  EXPECT_EQ(bits_of(DType::kInt8, -2.5), 0xFEu);
  EXPECT_EQ(bits_of(DType::kInt8, 127.5), 0x7Fu);
  EXPECT_EQ(bits_of(DType::kInt8, -1000.0), 0x80u);
  EXPECT_EQ(bits_of(DType::kUInt8, -1.0), 0u);
  EXPECT_EQ(bits_of(DType::kUInt8, 300.0), 255u);
  EXPECT_EQ(bits_of(DType::kInt16, -32768.0), 0x8000u);
  EXPECT_EQ(bits_of(DType::kInt32, kNaN), 0u);
  EXPECT_EQ(bits_of(DType::kInt32, 3e9), 0x7FFFFFFFu);
  EXPECT_EQ(bits_of(DType::kBool, 0.0), 0u);
  EXPECT_EQ(bits_of(DType::kBool, -0.25), 1u);

  std::uint8_t out[8];
  from_double(DType::kInt64, 1e19, out);
  std::int64_t v;
  std::memcpy(&v, out, 8);
  EXPECT_EQ(v, std::numeric_limits<std::int64_t>::max());
  from_double(DType::kInt64, -1e19, out);
  std::memcpy(&v, out, 8);
  EXPECT_EQ(v, std::numeric_limits<std::int64_t>::min());
  from_double(DType::kInt64, -123456789012.0, out);
  EXPECT_EQ(to_double(DType::kInt64, out), -123456789012.0);

  EXPECT_EQ(value_of(DType::kInt8, 0xFF), -1.0);
  EXPECT_EQ(value_of(DType::kUInt8, 0xFF), 255.0);
  EXPECT_EQ(value_of(DType::kInt16, 0x8000), -32768.0);
  EXPECT_EQ(value_of(DType::kInt32, 0xFFFFFFFE), -2.0);
  EXPECT_EQ(value_of(DType::kBool, 0x02), 1.0);
}

// Every non-NaN bit pattern of the narrow formats survives to_double -> from_double (except the
// e5m2 infinities, which satfinite turns into +-57344).
TEST(Numeric, EveryPatternRoundTrips) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat8E5M2,
                      DType::kInt8, DType::kUInt8, DType::kInt16}) {
    const std::uint32_t count = dtype_size(dtype) == 1 ? 0x100u : 0x10000u;
    for (std::uint32_t b = 0; b < count; ++b) {
      const double v = value_of(dtype, b);
      if (std::isnan(v) || (std::isinf(v) && dtype == DType::kFloat8E5M2)) continue;
      ASSERT_EQ(bits_of(dtype, v), b) << dtype_name(dtype) << " 0x" << std::hex << b;
    }
  }
}

// The CUDA headers' host implementations are the reference for the device conversions.
TEST(Numeric, MatchesCudaHeaderConversions) {
  std::mt19937_64 rng(12345);
  std::vector<double> values = {0.0,     -0.0,    kInf,    -kInf, 448.0,  464.0,  480.0, 57344.0,
                                61440.0, 65504.0, 65520.0, 1e-40, -1e-40, 3.4e38, 1e300};
  for (int e = -30; e <= 20; ++e) {
    for (int k = 0; k < 200; ++k) {
      const double v = std::ldexp(std::uniform_real_distribution<double>(1.0, 2.0)(rng), e);
      values.push_back(k % 2 ? -v : v);
    }
  }
  for (int e = -140; e <= 130; e += 3) values.push_back(std::ldexp(1.0 + 1.0 / 256, e));
  // Exact ties of the 8-bit formats.
  for (int m = 0; m < 64; ++m) values.push_back(std::ldexp(2 * m + 1, -5));
  for (double v : values) {
    EXPECT_EQ(bits_of(DType::kFloat8E4M3, v), __nv_cvt_double_to_fp8(v, __NV_SATFINITE, __NV_E4M3))
        << v;
    EXPECT_EQ(bits_of(DType::kFloat8E5M2, v), __nv_cvt_double_to_fp8(v, __NV_SATFINITE, __NV_E5M2))
        << v;
    // From float too: the device converts floats with __nv_cvt_float2_to_fp8x2.
    const float f = static_cast<float>(v);
    EXPECT_EQ(bits_of(DType::kFloat8E4M3, f), __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3))
        << f;
    EXPECT_EQ(bits_of(DType::kFloat8E5M2, f), __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2))
        << f;
    EXPECT_EQ(bits_of(DType::kFloat16, f), __half_as_ushort(__float2half_rn(f))) << f;
    EXPECT_EQ(bits_of(DType::kBFloat16, f), __bfloat16_as_ushort(__float2bfloat16_rn(f))) << f;
    EXPECT_EQ(bits_of(DType::kBFloat16, v), __bfloat16_as_ushort(__double2bfloat16(v))) << v;
  }
}

std::uint64_t double_bits(double v) {
  std::uint64_t b;
  std::memcpy(&b, &v, 8);
  return b;
}

// The bulk forms give to_double's and from_double's results: every 16-bit pattern read back,
// and written from each pattern's value, the midpoints between neighbours (exact ties), values a
// hair either side of them, the subnormal and overflow edges, zeros, infinities, NaN and random
// doubles over the whole range.
TEST(Numeric, BulkConversionsMatchTheElementwiseOnes) {
  std::vector<double> values = {0.0,     -0.0,     kInf,     -kInf,   kNaN,
                                -kNaN,   65504.0,  65519.99, 65520.0, 3.3895313892515355e38,
                                3.39e38, 1e300,    -1e300,   1e-300,  5.9e-8,
                                6.1e-5,  1.17e-38, 9.2e-41};
  std::mt19937_64 rng(20240723);
  for (int k = 0; k < 200000; ++k) {
    const double v = std::ldexp(std::uniform_real_distribution<double>(1.0, 2.0)(rng),
                                std::uniform_int_distribution<int>(-150, 140)(rng));
    values.push_back(k % 2 ? -v : v);
  }
  for (DType dtype :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat8E4M3, DType::kInt8}) {
    const std::size_t size = dtype_size(dtype);
    if (size == 2) {
      std::vector<std::uint8_t> every(2 * 0x10000);
      for (std::uint32_t b = 0; b < 0x10000; ++b) std::memcpy(&every[2 * b], &b, 2);
      std::vector<double> read(0x10000);
      to_doubles(dtype, every.data(), read.size(), read.data());
      for (std::uint32_t b = 0; b < 0x10000; ++b) {
        const double want = value_of(dtype, b);
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(read[b])) << dtype_name(dtype) << " 0x" << std::hex << b;
        } else {
          ASSERT_EQ(double_bits(read[b]), double_bits(want))
              << dtype_name(dtype) << " 0x" << std::hex << b;
        }
        if (b + 1 < 0x10000 && !std::isnan(want) && (b & 0x7FFF) != 0x7FFF) {
          const double next = value_of(dtype, b + 1);
          if (std::isfinite(want) && std::isfinite(next)) {
            const double mid = want + (next - want) / 2;  // exact: a few bits past the format
            values.insert(values.end(),
                          {want, mid, std::nextafter(mid, -kInf), std::nextafter(mid, kInf)});
          }
        }
      }
    }
    std::vector<std::uint8_t> got(values.size() * size);
    from_doubles(dtype, values.data(), values.size(), got.data());
    for (std::size_t i = 0; i < values.size(); ++i) {
      std::uint8_t want[8] = {};
      from_double(dtype, values[i], want);
      ASSERT_EQ(std::memcmp(&got[i * size], want, size), 0)
          << dtype_name(dtype) << " " << values[i];
    }
    std::vector<double> back(values.size());
    to_doubles(dtype, got.data(), values.size(), back.data());
    for (std::size_t i = 0; i < values.size(); ++i) {
      const double want = to_double(dtype, &got[i * size]);
      ASSERT_TRUE(double_bits(back[i]) == double_bits(want) ||
                  (std::isnan(want) && std::isnan(back[i])))
          << dtype_name(dtype) << " " << values[i];
    }
  }
}

TEST(Numeric, Poison) {
  EXPECT_EQ(poison_element(DType::kFloat32), (std::vector<std::uint8_t>{0xA5, 0xA5, 0xA5, 0x7F}));
  EXPECT_EQ(poison_element(DType::kFloat16), (std::vector<std::uint8_t>{0xA5, 0x7D}));
  EXPECT_EQ(poison_element(DType::kBFloat16), (std::vector<std::uint8_t>{0xA5, 0x7F}));
  EXPECT_EQ(poison_element(DType::kFloat8E4M3), (std::vector<std::uint8_t>{0x7F}));
  EXPECT_EQ(poison_element(DType::kFloat8E5M2), (std::vector<std::uint8_t>{0x7D}));
  EXPECT_EQ(poison_element(DType::kInt64), std::vector<std::uint8_t>(8, 0xA5));
  EXPECT_EQ(poison_element(DType::kBool), std::vector<std::uint8_t>(1, 0xA5));

  for (DType dtype :
       {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat8E5M2,
        DType::kInt64, DType::kInt32, DType::kInt16, DType::kInt8, DType::kUInt8, DType::kBool}) {
    const auto poison = poison_element(dtype);
    ASSERT_EQ(poison.size(), dtype_size(dtype));
    EXPECT_TRUE(is_poison(dtype, poison.data())) << dtype_name(dtype);
    EXPECT_EQ(is_nan_bits(dtype, poison.data()), is_floating(dtype)) << dtype_name(dtype);
    // What a kernel writes is never poison: a converted NaN differs except for e4m3, whose
    // only positive NaN the poison is.
    std::uint8_t written[8] = {};
    from_double(dtype, kNaN, written);
    EXPECT_EQ(is_poison(dtype, written), dtype == DType::kFloat8E4M3) << dtype_name(dtype);
    from_double(dtype, 1.0, written);
    EXPECT_FALSE(is_poison(dtype, written)) << dtype_name(dtype);
    std::vector<std::uint8_t> flipped = poison;
    flipped[0] ^= 1;
    EXPECT_FALSE(is_poison(dtype, flipped.data())) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace kharness

namespace kharness {
namespace {

// Timed iterations' poison (docs/correctness.md#poison-and-guards): it changes with the draw,
// floats are NaN three times in four and a large finite value otherwise, never a NaN that
// arithmetic or a conversion writes; bool is never 0 or 1.
TEST(Numeric, IterationPoisonChangesAndIsNeverAWrittenValue) {
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat8E4M3,
                  DType::kFloat8E5M2, DType::kInt32, DType::kInt64, DType::kBool}) {
    std::set<std::vector<std::uint8_t>> seen;
    int nan = 0, finite = 0;
    for (std::uint64_t draw = 0; draw < 4000; ++draw) {
      const std::uint64_t r = draw * 0x9E3779B97F4A7C15ull + 12345;
      auto p = iteration_poison_element(d, r);
      ASSERT_EQ(p.size(), dtype_size(d));
      seen.insert(p);
      const double v = to_double(d, p.data());
      if (d == DType::kBool) {
        EXPECT_GE(p[0], 2);
        continue;
      }
      if (!is_floating(d)) continue;
      if (std::isnan(v)) {
        ++nan;
        // Not what a kernel writes for a NaN: CUDA's canonical NaNs (e4m3 has no other NaN).
        if (d == DType::kFloat8E4M3) continue;
        std::uint8_t canonical[4];
        from_double(d, std::nan(""), canonical);
        EXPECT_NE(std::vector<std::uint8_t>(canonical, canonical + p.size()), p)
            << dtype_name(d) << " " << draw;
      } else {
        ++finite;
        EXPECT_GE(std::fabs(v), d == DType::kFloat8E4M3 ? 256.0 : 16384.0) << dtype_name(d);
      }
    }
    EXPECT_GE(seen.size(), 2u) << dtype_name(d);
    if (is_floating(d)) {
      EXPECT_NEAR(nan / 4000.0, 0.75, 0.05) << dtype_name(d);
      EXPECT_NEAR(finite / 4000.0, 0.25, 0.05) << dtype_name(d);
    }
  }
  // Wide float types get many distinct patterns, so none can be recognised.
  std::set<std::vector<std::uint8_t>> bf16;
  for (std::uint64_t draw = 0; draw < 1000; ++draw)
    bf16.insert(iteration_poison_element(DType::kBFloat16, draw * 0x9E3779B97F4A7C15ull));
  EXPECT_GT(bf16.size(), 100u);
}

}  // namespace
}  // namespace kharness
