// `score` of one folder that mixes good solutions with a submission of every malformed kind
// (skips without a GPU): each submission gets its own verdict, the good ones pass, every bad one
// is rejected on its own, the exit status is 1, and no byte of the host file reaches the report.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "../test_util.hpp"
#include "gpu_test_util.hpp"
#include "kharness/text.hpp"

namespace kharness {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kSecret = "HOST-SECRET-51c9";

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary) << text;
}

TEST(UntrustedScore, OneVerdictPerSubmissionAndExitOne) {
  SKIP_WITHOUT_GPU();
  testing::TempDir tmp;
  const fs::path subs = tmp.path() / "subs";
  const fs::path host = tmp.path() / "host" / "secret.cu";
  write(host, std::string(kSecret) + "\n");
  const std::string good = read_file(testing::fixture("good/rmsnorm_simple.cu").string());

  // Good: a single file and a folder solution.
  write(subs / "good_single.cu", good);
  fs::create_directories(subs / "good_folder");
  for (const auto& e : fs::directory_iterator(testing::fixture("good/folder_solution")))
    fs::copy_file(e.path(), subs / "good_folder" / e.path().filename());
  // Links: out to a host file, to another team's file, a loop.
  fs::create_symlink(host, subs / "link_out.cu");
  fs::create_symlink(subs / "good_single.cu", subs / "link_other_team.cu");
  fs::create_symlink(".", subs / "link_loop");
  // A folder solution naming one source twice.
  write(subs / "dup_sources" / "solution.json",
        R"({"definition": "rmsnorm_h4096", "sources": ["k.cu", "./k.cu"], "launches": [
    {"kernel": "k", "grid": [1], "block": [32], "args": []}]})");
  write(subs / "dup_sources" / "k.cu", "extern \"C\" __global__ void k() {}\n");
  // Bad JSON, and a solution.json of the wrong shape.
  write(subs / "bad_json.json", "{\"name\": \"x\", \"sources\": [");
  write(subs / "wrong_types" / "solution.json", R"({"sources": 7, "launches": "none"})");
  // A forbidden include of a host file.
  write(subs / "forbidden_include.cu", good + "\n#include \"" + host.string() + "\"\n");
  // A module of 2 GiB of static storage: over the output cap.
  write(subs / "oversized_module.cu", good + "\n__device__ char kh_big[2147483648ULL];\n");
  // A family whose _shared file is a link to the host file.
  write(subs / "_families" / "f" / "seed.cu", good.substr(0, good.find("*/") + 3) +
                                                  "#include \"../_shared/a.cuh\"\n" +
                                                  good.substr(good.find("*/") + 3));
  fs::create_directories(subs / "_families" / "_shared");
  fs::create_symlink(host, subs / "_families" / "_shared" / "a.cuh");
  // Host code (main) in a kernel file.
  fs::copy_file(testing::fixture("bad/host_code.cu"), subs / "host_code.cu");

  const fs::path out = tmp.path() / "report.json";
  auto r = testing::kharness("score '" + subs.string() +
                             "' --operator rmsnorm_h4096 --no-cache "
                             "--json '" +
                             out.string() + "'");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(r.out.find(kSecret), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(out)) << r.out;
  const std::string text = read_file(out.string());
  EXPECT_EQ(text.find(kSecret), std::string::npos);
  json report = json::parse(text);
  std::map<std::string, std::string> status;  // file or folder name -> status
  for (const auto& v : report["solutions"]) {
    const fs::path source = v.value("source", "");
    std::string name = source.filename().string();
    if (name == "solution.json") name = source.parent_path().filename().string();
    EXPECT_TRUE(status.emplace(name, v.value("status", "")).second) << "two verdicts: " << name;
  }
  const std::map<std::string, std::string> expected = {{"good_single.cu", "PASSED"},
                                                       {"good_folder", "PASSED"},
                                                       {"link_out.cu", "REJECTED"},
                                                       {"link_other_team.cu", "REJECTED"},
                                                       {"link_loop", "REJECTED"},
                                                       {"dup_sources", "REJECTED"},
                                                       {"bad_json.json", "REJECTED"},
                                                       {"wrong_types", "REJECTED"},
                                                       {"forbidden_include.cu", "REJECTED"},
                                                       {"oversized_module.cu", "REJECTED"},
                                                       {"seed.cu", "REJECTED"},
                                                       {"host_code.cu", "REJECTED"}};
  EXPECT_EQ(status, expected) << report.dump(1);
}

}  // namespace
}  // namespace kharness
