// The harness kernels without a GPU: their source compiles under NVRTC for every arch kharness
// targets, the cubin cache works, and fill_random's generator checks.
#include "verify/harness_kernels.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "compile/compile_cache.hpp"
#include "kharness/error.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

using verify::HarnessImage;
using verify::HarnessKernels;
using verify::HarnessKernelsOptions;

TEST(HarnessKernels, SourceCompilesForEveryTarget) {
  for (const char* arch : {"sm_80", "sm_90a", "sm_100a"}) {
    HarnessKernelsOptions options;
    options.arch = arch;
    options.use_cache = false;
    const HarnessImage image = HarnessKernels::build(options);
    EXPECT_EQ(image.arch, arch);
    EXPECT_FALSE(image.cache_hit);
    ASSERT_FALSE(image.cubin.empty()) << arch;
    EXPECT_EQ(image.cubin.substr(0, 4),
              "\x7f"
              "ELF")
        << arch;
    for (const char* kernel : {"kh_fill_random", "kh_fill_pattern", "kh_checksum",
                               "kh_check_pattern", "kh_probability_rows"}) {
      EXPECT_NE(image.cubin.find(kernel), std::string::npos) << arch << " lacks " << kernel;
    }
    EXPECT_EQ(image.log.find("warning"), std::string::npos) << arch << ":\n" << image.log;
  }
}

TEST(HarnessKernels, CubinIsCachedPerArch) {
  testing::TempDir cache;
  HarnessKernelsOptions options;
  options.arch = "90a";  // normalised to sm_90a
  options.cache_dir = cache.path();
  const HarnessImage first = HarnessKernels::build(options);
  const HarnessImage second = HarnessKernels::build(options);
  EXPECT_EQ(first.arch, "sm_90a");
  EXPECT_TRUE(second.cache_hit);
  EXPECT_EQ(first.cubin, second.cubin);
  EXPECT_EQ(first.cache_key, second.cache_key);
  if (!first.cache_hit) {  // another test in this process may have compiled it already
    EXPECT_TRUE(std::filesystem::exists(compile_cache::entry_dir(cache.path(), first.cache_key) /
                                        "kernel.cubin"));
  }
  options.arch = "sm_80";
  EXPECT_NE(HarnessKernels::build(options).cache_key, first.cache_key);
}

TEST(HarnessKernels, UnknownArchIsAUsageError) {
  HarnessKernelsOptions options;
  options.arch = "sm_12345";
  options.use_cache = false;
  EXPECT_THROW(HarnessKernels::build(options), Error);
}

// The seal's cipher is ChaCha20: the host mirror of the kernels' block function against RFC 8439
// section 2.3.2's test vector (key 00 01 .. 1f, nonce 00 00 00 09 00 00 00 4a 00 00 00 00,
// counter 1; the serialized block 10 f1 e7 e4 ... read as little-endian words).
TEST(SealCipher, ChaCha20BlockMatchesRfc8439) {
  std::array<std::uint32_t, 8> key{};
  for (std::uint32_t i = 0; i < 8; ++i) {
    key[i] = (4 * i) | (4 * i + 1) << 8 | (4 * i + 2) << 16 | (4 * i + 3) << 24;
  }
  EXPECT_EQ(verify::chacha20_block(key, 1, {0x09000000u, 0x4a000000u, 0u}),
            (std::array<std::uint32_t, 16>{0xe4e7f110, 0x15593bd1, 0x1fdd0f50, 0xc47120a3,
                                           0xc7f4d1c7, 0x0368c033, 0x9aaa2204, 0x4e6cd4c3,
                                           0x466482d2, 0x09aa9f07, 0x05d7c214, 0xa2028bd9,
                                           0xd19c12b5, 0xb94e16de, 0xe883d0cb, 0x4e3c50a2}));
}

// The key expansion (SplitMix64's first four outputs from the process key; its first output from
// 0 is 0xe220a8397b1dcdaf) and the chunk -> (block, counter, nonce) mapping, against values
// computed with OpenSSL's ChaCha20 (Python cryptography 48: a 16-byte IV of the counter then the
// nonce, keystream of 64 zero bytes): key 0x0123456789abcdef, stream (5 << 32) | 7; chunk 2^34 + 2
// is block 2^32, whose index's high half goes into the nonce.
TEST(SealCipher, KeystreamMatchesAnIndependentChaCha20) {
  const std::uint64_t key = 0x0123456789abcdefull, stream_id = (5ull << 32) | 7;
  EXPECT_EQ(verify::seal_key(0)[0], 0x7b1dcdafu);
  EXPECT_EQ(verify::seal_key(0)[1], 0xe220a839u);
  EXPECT_EQ(verify::seal_key(key),
            (std::array<std::uint32_t, 8>{0xa48faa9d, 0x157a3807, 0x34a1d093, 0xd573529b,
                                          0x996dccbe, 0x2f90b72e, 0x4c4667ec, 0xa2d41933}));
  using Words = std::array<std::uint32_t, 4>;
  EXPECT_EQ(verify::seal_keystream(0, stream_id, key),
            (Words{0x83a81c02, 0x3aa51aac, 0x9960d4ae, 0xce7b02e5}));
  EXPECT_EQ(verify::seal_keystream(5, stream_id, key),
            (Words{0x07ffa243, 0x84c83ad5, 0xf7b17c1d, 0x5cd1a69c}));
  EXPECT_EQ(verify::seal_keystream((1ull << 34) + 2, stream_id, key),
            (Words{0xbf80f965, 0xc8e312da, 0xee7f62c0, 0xebd3bae1}));
  // Chunks 0..3 are the quarters of block 0; another stream or key is another keystream.
  EXPECT_NE(verify::seal_keystream(0, stream_id + 1, key),
            verify::seal_keystream(0, stream_id, key));
  EXPECT_NE(verify::seal_keystream(0, stream_id, key ^ 1),
            verify::seal_keystream(0, stream_id, key));
  EXPECT_NE(verify::seal_keystream(1ull << 34, stream_id, key),
            verify::seal_keystream(0, stream_id, key));
}

// The kernels that seal and unseal are built from ChaCha20 (its constants are in the source) and
// no longer from a Philox keystream.
TEST(SealCipher, KernelsUseChaCha20) {
  const std::string& source = HarnessKernels::source();
  EXPECT_NE(source.find("kh_chacha20_block"), std::string::npos);
  EXPECT_NE(source.find("0x61707865u"), std::string::npos);  // "expand 32-byte k"
  EXPECT_EQ(source.find("return philox(c, s, key)"), std::string::npos);
}

InputGenerator gen(const std::string& distribution, double a = 0.0, double b = 1.0) {
  InputGenerator g;
  g.distribution = distribution;
  if (distribution == "normal") {
    g.mean = a;
    g.std = b;
  } else {
    g.low = a;
    g.high = b;
  }
  return g;
}

void expect_refused(const InputGenerator& g, DType dtype, const std::string& what) {
  try {
    HarnessKernels::validate(g, dtype, "defs/x.json: kharness.inputs.x");
    ADD_FAILURE() << "accepted " << g.distribution << " for " << dtype_name(dtype);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_NE(e.where().find("kharness.inputs.x"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
  }
}

TEST(HarnessKernels, ValidatesGenerators) {
  EXPECT_NO_THROW(HarnessKernels::validate(gen("normal"), DType::kBFloat16, "x"));
  EXPECT_NO_THROW(HarnessKernels::validate(gen("uniform", -2, 2), DType::kFloat8E4M3, "x"));
  EXPECT_NO_THROW(HarnessKernels::validate(gen("range", 0, 0), DType::kInt32, "x"));
  EXPECT_NO_THROW(HarnessKernels::validate(gen("range", -1e30, 1e30), DType::kInt8, "x"));
  EXPECT_NO_THROW(HarnessKernels::validate(gen("range", 0, 100), DType::kFloat16, "x"));
  EXPECT_NO_THROW(HarnessKernels::validate(gen("constant"), DType::kFloat32, "x"));

  expect_refused(gen("indptr"), DType::kInt32, "correctness stage");
  expect_refused(gen("indices"), DType::kInt64, "correctness stage");
  expect_refused(gen("scale"), DType::kFloat32, "correctness stage");
  expect_refused(gen("zipf"), DType::kFloat32, "unknown distribution");
  expect_refused(gen("normal", 0, 0), DType::kFloat32, "constant");
  expect_refused(gen("normal", 0, 1e-5), DType::kFloat8E4M3, "rounds to 0");
  expect_refused(gen("normal", 0, 0.2), DType::kInt32, "rounds to 0");
  expect_refused(gen("normal", 0, 1e39), DType::kFloat32, "not finite");
  expect_refused(gen("uniform", 1, 1), DType::kFloat32, "low < high");
  expect_refused(gen("uniform", 0, 1e-6), DType::kFloat8E5M2, "rounds to 0");
  expect_refused(gen("range", 1000, 2000), DType::kInt8, "holds no int8 value");
  expect_refused(gen("range", 0.2, 0.8), DType::kInt32, "holds no");

  InputGenerator c = gen("constant");
  c.extra["value"] = "one";
  expect_refused(c, DType::kFloat32, "expected a number");
}

// The record of a device comparison (compare_sealed): what the host writes for a record under a
// key, open_compare_record reads back field for field; a byte changed anywhere, or another key,
// and it does not open. (The GPU test holds the device's records to the same encoding.)
// A point reference's failure names the element of the whole output, not of the gathered rows:
// rows {7, 2, 40} of a 16-element row, gathered element 20 is row 2 (the second drawn), column 4.
TEST(HarnessKernels, PointReferenceIndicesArePlacedInTheWholeOutput) {
  const std::vector<std::uint32_t> picked = {7, 2, 40};
  EXPECT_EQ(verify::place_in_rows(0, picked, 16), 7u * 16);
  EXPECT_EQ(verify::place_in_rows(20, picked, 16), 2u * 16 + 4);
  EXPECT_EQ(verify::place_in_rows(47, picked, 16), 40u * 16 + 15);
  EXPECT_EQ(verify::place_in_rows(48, picked, 16), 48u);  // beyond the gathered rows: as it is
  EXPECT_EQ(verify::place_in_rows(verify::CheckRecord::npos, picked, 16),
            verify::CheckRecord::npos);
  verify::CheckRecord r;
  r.first_index = 20;
  r.first_mismatch = 20;
  r.first_unwritten = 33;
  verify::place_point_record(r, picked, 16);
  EXPECT_EQ(r.first_index, 36u);
  EXPECT_EQ(r.first_mismatch, 36u);
  EXPECT_EQ(r.first_unwritten, 40u * 16 + 1);
  EXPECT_EQ(r.first_nonfinite, verify::CheckRecord::npos);  // none: still none
}

TEST(HarnessKernels, CompareRecordsOpenOnlyUntouchedAndUnderTheirKey) {
  verify::CompareRecord r;
  r.totals.elements = 1000003;
  r.totals.mismatches = 17;
  r.totals.first_bad = 12345;
  r.totals.first_bad_expected = 0x3F80;
  r.totals.first_bad_got = 0xBF80;
  r.totals.max_abs = 0.1;
  r.totals.max_rel = 3e200;
  r.totals.poison = 2;
  r.totals.first_poison = 999999;
  r.totals.nonfinite = 0;
  r.totals.first_nonfinite = -1;
  r.totals.reference_poison = 0;
  r.differing = 40;
  r.stream = 7;
  r.nonce = 123;
  const std::uint64_t key = 0x0123456789ABCDEFull;
  const std::vector<std::uint8_t> bytes = HarnessKernels::compare_record_bytes(r, key);
  ASSERT_EQ(bytes.size(), verify::kCompareRecordBytes);
  const auto back = HarnessKernels::open_compare_record(bytes.data(), key);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->totals.elements, r.totals.elements);
  EXPECT_EQ(back->totals.mismatches, 17u);
  EXPECT_EQ(back->totals.first_bad, 12345);
  EXPECT_EQ(back->totals.first_bad_expected, 0x3F80u);
  EXPECT_EQ(back->totals.first_bad_got, 0xBF80u);
  EXPECT_EQ(back->totals.max_abs, 0.1);
  EXPECT_EQ(back->totals.max_rel, 3e200);
  EXPECT_EQ(back->totals.poison, 2u);
  EXPECT_EQ(back->totals.first_poison, 999999);
  EXPECT_EQ(back->totals.first_nonfinite, -1);  // none: ~0 on the device
  EXPECT_EQ(back->differing, 40u);
  EXPECT_EQ(back->stream, 7u);
  EXPECT_EQ(back->nonce, 123u);
  EXPECT_EQ(HarnessKernels::compare_record_bytes(*back, key), bytes);
  EXPECT_FALSE(HarnessKernels::open_compare_record(bytes.data(), key ^ 1).has_value());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::vector<std::uint8_t> bad = bytes;
    bad[i] ^= 0x01;
    EXPECT_FALSE(HarnessKernels::open_compare_record(bad.data(), key).has_value()) << "byte " << i;
  }
}

}  // namespace
}  // namespace kharness
