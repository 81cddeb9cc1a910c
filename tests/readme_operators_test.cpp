// README.md's operator list is generated (`kharness operators list --markdown`, written by
// scripts/update-readme-operators.sh): it must be what the shipped operators/ folder says, so a
// new operator or family, or a seed or baseline added or removed, fails here until the README
// is regenerated.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "test_util.hpp"

namespace kharness {
namespace {

TEST(ReadmeOperators, ListMatchesTheShippedOperators) {
  const std::filesystem::path root = std::filesystem::path(KHARNESS_TEST_FIXTURES) / ".." / "..";
  std::ifstream in(root / "README.md");
  ASSERT_TRUE(in) << "no README.md at " << root;
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  const std::string begin = "<!-- operators:begin", end = "<!-- operators:end -->";
  const std::size_t b = readme.find(begin), e = readme.find(end);
  ASSERT_NE(b, std::string::npos) << "README.md has no " << begin << " marker";
  ASSERT_NE(e, std::string::npos) << "README.md has no " << end << " marker";
  const std::size_t start = readme.find('\n', b) + 1;
  ASSERT_LE(start, e);
  const std::string listed = readme.substr(start, e - start);
  auto generated = testing::run_command("KHARNESS_HOME='" + root.string() + "' '" +
                                        KHARNESS_BINARY + "' operators list --markdown");
  ASSERT_EQ(generated.exit_code, 0) << generated.out;
  EXPECT_EQ(listed, generated.out)
      << "README.md's operator list is stale: run scripts/update-readme-operators.sh";
}

}  // namespace
}  // namespace kharness
