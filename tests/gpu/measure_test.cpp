// doctor --measure on a GPU: plausible ceilings, saved, and used by `--sol measured`.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../test_util.hpp"
#include "kharness/device.hpp"

namespace kharness {
namespace {

TEST(MeasureGpu, DoctorMeasureThenSolMeasured) {
  if (!gpu_available()) GTEST_SKIP() << "no GPU";
  auto r = testing::run_command(std::string("'") + KHARNESS_BINARY +
                                "' doctor --measure --json 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto m = nlohmann::json::parse(r.out);
  double copy = m["copy_bandwidth_bytes_per_s"].get<double>();
  std::printf("measured copy %.2f TB/s, fp16 GEMM %.0f TFLOP/s, bf16 GEMM %.0f TFLOP/s\n",
              copy / 1e12, m["gemm_flops"].value("float16", 0.0) / 1e12,
              m["gemm_flops"].value("bfloat16", 0.0) / 1e12);
  EXPECT_GT(copy, 1e12);   // any datacenter GPU of the last five years
  EXPECT_LT(copy, 10e12);  // and nothing reaches 10 TB/s yet
  if (m.contains("datasheet")) {
    EXPECT_LT(copy, 1.02 * m["datasheet"]["dram_bandwidth_bytes_per_s"].get<double>());
  }
  EXPECT_GT(m["gemm_flops"].value("float16", 0.0), 50e12) << m.dump(2);

  const std::string seed =
      "'" + (testing::source_dir() / "operators/rmsnorm_h4096/seed.cu").string() + "'";
  auto b = testing::run_command(std::string("'") + KHARNESS_BINARY + "' bench " + seed +
                                " --operator rmsnorm_h4096 --workloads 082f6370 --no-baseline"
                                " --sol measured --json 2>/dev/null");
  ASSERT_EQ(b.exit_code, 0) << b.out;
  auto v = nlohmann::json::parse(b.out);
  const auto& sol = v["workloads"][0]["timing"]["sol"];
  EXPECT_NE(sol["ceilings"].get<std::string>().find("measured"), std::string::npos) << sol.dump();
  EXPECT_GT(sol["fraction"].get<double>(), 0.0);
  EXPECT_LT(sol["fraction"].get<double>(), 1.1);
}

}  // namespace
}  // namespace kharness
