// doctor --measure's stored ceilings: JSON round trip, substitution into a GPU spec, and the
// command's behaviour without a GPU.
#include "bench/measure.hpp"

#include <gtest/gtest.h>

#include "kharness/device.hpp"
#include "test_util.hpp"

namespace kharness::bench {
namespace {

MeasuredPeaks sample() {
  MeasuredPeaks m;
  m.gpu = "NVIDIA H200";
  m.driver = "580.159.04";
  m.copy_bandwidth = 3.98e12;
  m.gemm_flops = {{"float16", 7.1e14}, {"bfloat16", 6.9e14}};
  m.notes = {{"gemm float8_e4m3fn", "not measured"}};
  m.measured_at = "2026-11-30T04:00:00Z";
  return m;
}

TEST(MeasuredPeaks, JsonRoundTrip) {
  MeasuredPeaks m = sample();
  MeasuredPeaks back = measured_peaks_from_json(to_json(m));
  EXPECT_EQ(back.gpu, m.gpu);
  EXPECT_EQ(back.driver, m.driver);
  EXPECT_DOUBLE_EQ(back.copy_bandwidth, m.copy_bandwidth);
  EXPECT_EQ(back.gemm_flops, m.gemm_flops);
  EXPECT_EQ(back.notes, m.notes);
  EXPECT_EQ(back.measured_at, m.measured_at);
  EXPECT_EQ(to_json(m)["schema"], "kharness.measured/1");
}

TEST(MeasuredPeaks, ReplaceTheDatasheetCeilingsThatWereMeasured) {
  GpuSpec spec;
  spec.dram_bandwidth = 4.8e12;
  spec.peak_flops = {{"float16", 989e12}, {"float8_e4m3fn", 1979e12}};
  GpuSpec s = with_measured(spec, sample());
  EXPECT_DOUBLE_EQ(s.measured_copy_bandwidth, 3.98e12);
  EXPECT_DOUBLE_EQ(s.dram_bandwidth, 4.8e12);  // the datasheet figure stays for reference
  EXPECT_DOUBLE_EQ(s.peak_flops.at("float16"), 7.1e14);
  EXPECT_DOUBLE_EQ(s.peak_flops.at("bfloat16"), 6.9e14);
  EXPECT_DOUBLE_EQ(s.peak_flops.at("float8_e4m3fn"), 1979e12);  // not measured: unchanged
}

TEST(MeasuredPeaks, SavedAndLoadedPerGpuAndDriver) {
  testing::TempDir dir;
  ::setenv("KHARNESS_CACHE", dir.path().c_str(), 1);
  MeasuredPeaks m = sample();
  save_measured_peaks(m);
  auto back = load_measured_peaks(m.gpu, m.driver);
  ASSERT_TRUE(back);
  EXPECT_DOUBLE_EQ(back->copy_bandwidth, m.copy_bandwidth);
  EXPECT_FALSE(load_measured_peaks(m.gpu, "590.00"));  // another driver: measure again
  EXPECT_EQ(measured_peaks_file(m.gpu, m.driver).parent_path(), dir.path() / "measured");
  ::unsetenv("KHARNESS_CACHE");
}

TEST(MeasuredPeaks, DoctorMeasureWithoutAGpuIsAnEnvironmentError) {
  if (gpu_available()) GTEST_SKIP() << "a GPU is present";
  auto r = testing::kharness("doctor --measure");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("measuring needs a GPU"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kharness::bench
