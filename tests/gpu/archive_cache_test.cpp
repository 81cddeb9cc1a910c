// The archive and the verdict cache on a GPU (skips without one): `kharness score` over good,
// wrong, crashing and hanging kernels gives one verdict per solution and exit 1; the second run is
// served from the cache in under 10% of the first run's time; the HTML report of the run has a
// roofline point for the passing kernel.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "../test_util.hpp"
#include "kharness/device.hpp"
#include "kharness/text.hpp"

namespace kharness {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(ArchiveCacheGpu, SecondScoreIsServedFromTheCache) {
  if (!gpu_available()) GTEST_SKIP() << "no GPU";
  testing::TempDir tmp;
  fs::path subs = tmp.path() / "subs";
  fs::create_directories(subs);
  // Sorted order: a good, b wrong, c crash, d hang.
  fs::copy_file(testing::fixture("check/good_simple.cu"), subs / "a_good.cu");
  fs::copy_file(testing::fixture("check/one_nan.cu"), subs / "b_nan.cu");
  fs::copy_file(testing::fixture("check/trap.cu"), subs / "c_trap.cu");
  fs::copy_file(testing::fixture("check/infinite_loop.cu"), subs / "d_hang.cu");
  fs::path arc = tmp.path() / "arc";
  auto score = [&](const std::string& json_name, double* seconds) {
    auto start = std::chrono::steady_clock::now();
    auto r = testing::kharness("--archive '" + arc.string() + "' score '" + subs.string() +
                               "' --timeout 20 --json '" + (tmp.path() / json_name).string() + "'");
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  };
  double first_s = 0, second_s = 0;
  auto first = score("1.json", &first_s);
  EXPECT_EQ(first.exit_code, 1) << first.out;
  json j1 = json::parse(read_file((tmp.path() / "1.json").string()));
  ASSERT_EQ(j1["solutions"].size(), 4u) << first.out;
  EXPECT_EQ(j1["solutions"][0]["status"], "PASSED") << first.out;
  EXPECT_EQ(j1["solutions"][1]["status"], "INCORRECT_NUMERICAL") << first.out;
  EXPECT_EQ(j1["solutions"][2]["status"], "RUNTIME_ERROR") << first.out;
  EXPECT_EQ(j1["solutions"][3]["status"], "TIMEOUT") << first.out;

  auto second = score("2.json", &second_s);
  EXPECT_EQ(second.exit_code, 1) << second.out;
  json j2 = json::parse(read_file((tmp.path() / "2.json").string()));
  ASSERT_EQ(j2["solutions"].size(), 4u);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(j2["solutions"][i]["status"], j1["solutions"][i]["status"]) << i;
  std::size_t cached = 0;
  for (std::size_t at = 0;
       (at = second.out.find("(cached: verdict of candidate", at)) != std::string::npos; ++at)
    ++cached;
  EXPECT_EQ(cached, 4u) << second.out;
  EXPECT_LT(second_s, 0.1 * first_s) << "first " << first_s << " s, second " << second_s << " s";

  fs::path html = tmp.path() / "r.html";
  auto report = testing::kharness("--archive '" + arc.string() + "' report --all --html '" +
                                  html.string() + "'");
  EXPECT_EQ(report.exit_code, 0) << report.out;
  std::string page = read_file(html.string());
  EXPECT_NE(page.find("class=\"roof\""), std::string::npos);
  EXPECT_EQ(page.find("no timed workloads with FLOP and byte counts"), std::string::npos);
}

}  // namespace
}  // namespace kharness
