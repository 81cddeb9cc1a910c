// The layout rule of docs/layout.md that code review alone does not keep: data flows one way
// between the stage folders of src/. A file of folder A that includes "B/..." makes A depend on B;
// the folders' dependencies must have no cycle (verify and bench once included each other, and llm
// and tune). The test reads the sources, so a new cycle fails CI with the files that make it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace kharness {
namespace {

namespace fs = std::filesystem;

// folder -> folder it includes -> one file that does.
using Graph = std::map<std::string, std::map<std::string, std::string>>;

Graph include_graph() {
  const fs::path src = testing::source_dir() / "src";
  std::set<std::string> folders;
  for (const auto& e : fs::directory_iterator(src)) {
    if (e.is_directory()) folders.insert(e.path().filename().string());
  }
  Graph g;
  const std::regex include(R"re(^\s*#\s*include\s+"([a-z_]+)/)re");
  for (const auto& e : fs::recursive_directory_iterator(src)) {
    if (!e.is_regular_file()) continue;
    const std::string ext = e.path().extension().string();
    if (ext != ".cpp" && ext != ".hpp") continue;
    const std::string from = fs::relative(e.path(), src).begin()->string();
    if (!folders.count(from)) continue;  // main.cpp
    std::ifstream in(e.path());
    std::string line;
    std::smatch m;
    while (std::getline(in, line)) {
      if (std::regex_search(line, m, include) && folders.count(m[1]) && m[1] != from) {
        g[from].emplace(m[1], fs::relative(e.path(), src).string());
      }
    }
  }
  return g;
}

// A cycle as "a -> b (file) -> ... -> a", or "" when there is none.
std::string find_cycle(const Graph& g) {
  std::map<std::string, int> state;  // 1 on the path, 2 done
  std::vector<std::string> path;
  std::string found;
  std::function<bool(const std::string&)> visit = [&](const std::string& n) {
    state[n] = 1;
    path.push_back(n);
    if (auto it = g.find(n); it != g.end()) {
      for (const auto& [to, file] : it->second) {
        if (state[to] == 1) {
          std::string text;
          auto start = std::find(path.begin(), path.end(), to);
          for (auto p = start; p != path.end(); ++p) {
            const std::string& next = (p + 1 == path.end()) ? to : *(p + 1);
            text += *p + " -> " + next + " (" + g.at(*p).at(next) + "); ";
          }
          found = text;
          return true;
        }
        if (state[to] == 0 && visit(to)) return true;
      }
    }
    path.pop_back();
    state[n] = 2;
    return false;
  };
  for (const auto& [n, edges] : g) {
    if (state[n] == 0 && visit(n)) break;
  }
  return found;
}

TEST(Layout, StageFoldersIncludeEachOtherWithoutCycles) {
  Graph g = include_graph();
  ASSERT_FALSE(g.empty());
  EXPECT_EQ(find_cycle(g), "");
  // The evaluation worker runs verification and then timing: pipeline depends on both, and
  // neither on the other.
  EXPECT_TRUE(g["pipeline"].count("verify"));
  EXPECT_TRUE(g["pipeline"].count("bench"));
  EXPECT_FALSE(g["verify"].count("bench"));
  EXPECT_FALSE(g["llm"].count("tune"));
}

// include/kharness is the stages' public contract (the types that cross stages: requests,
// verdicts, definitions, solutions, compile results): a header there includes only other public
// headers and system ones, so no stage's internals leak through it.
TEST(Layout, PublicHeadersIncludeOnlyPublicHeaders) {
  const fs::path dir = testing::source_dir() / "include" / "kharness";
  const std::regex include(R"re(^\s*#\s*include\s+"([^"]+)")re");
  std::vector<std::string> leaks;
  int headers = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".hpp") continue;
    ++headers;
    std::ifstream in(e.path());
    std::string line;
    std::smatch m;
    while (std::getline(in, line)) {
      if (std::regex_search(line, m, include) && m[1].str().rfind("kharness/", 0) != 0)
        leaks.push_back(e.path().filename().string() + " includes " + m[1].str());
    }
  }
  EXPECT_GT(headers, 10);
  std::string text;
  for (const auto& l : leaks) text += l + "; ";
  EXPECT_TRUE(leaks.empty()) << text;
}

TEST(Layout, TheCycleFinderFindsACycle) {
  Graph g = {{"a", {{"b", "a/x.cpp"}}}, {"b", {{"c", "b/y.cpp"}}}, {"c", {{"a", "c/z.hpp"}}}};
  EXPECT_EQ(find_cycle(g), "a -> b (a/x.cpp); b -> c (b/y.cpp); c -> a (c/z.hpp); ");
  g["c"].clear();
  EXPECT_EQ(find_cycle(g), "");
}

}  // namespace
}  // namespace kharness
