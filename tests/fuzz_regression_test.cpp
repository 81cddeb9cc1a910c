// Every input a fuzz target (tests/fuzz) once failed on, and the hand-written probes of untrusted
// input, replayed through the same target bodies on every build: tests/fixtures/fuzz/TARGET/FILE.
// A replay passes when the input is accepted or refused with an input error (exit 2).
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>

#include "fuzz/targets.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

namespace fs = std::filesystem;

TEST(FuzzRegression, EveryRecordedInputIsAcceptedOrAnInputError) {
  const std::map<std::string, std::function<void(const std::string&)>> targets = {
      {"json", fuzz::run_json},
      {"plan", fuzz::run_plan},
      {"definition", fuzz::run_definition},
      {"rules", fuzz::run_rules},
      {"archive", fuzz::run_archive},
      {"walk", fuzz::run_walk},
      {"families", fuzz::run_families},
      {"run_folder", fuzz::run_run_folder}};
  int replayed = 0;
  for (const auto& [name, run] : targets) {
    fs::path dir = testing::fixture("fuzz/" + name);
    ASSERT_TRUE(fs::is_directory(dir)) << dir;
    for (const auto& entry : fs::directory_iterator(dir)) {
      SCOPED_TRACE(entry.path().string());
      std::string input = read_file(entry.path().string());
      EXPECT_NO_THROW(run(input));
      ++replayed;
    }
  }
  EXPECT_GT(replayed, 5);
}

}  // namespace
}  // namespace kharness
