// kharness compare OLD NEW [--json FILE] [--fail-on-regression PCT] [--sigmas K] [--noise-limit F]
// OLD and NEW: JSON files of `score --json`, `validate --json`, `bench --json` or `check --json`
// (one verdict or an array), or the ids of two archive runs.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "core/json_util.hpp"
#include "kharness/archive.hpp"
#include "kharness/run_compare.hpp"
#include "kharness/text.hpp"

namespace kharness::cli {
namespace {

struct CompareArgs {
  std::string old_input, new_input;
  std::string json_file;
  double fail_percent = -1;
  double sigmas = 2.0;
  double noise_limit = 0.05;
};

std::vector<Verdict> verdicts_of_json(const nlohmann::json& j, const std::string& source) {
  std::vector<Verdict> out;
  const nlohmann::json* list = &j;
  if (j.is_object() && j.contains("solutions")) list = &j["solutions"];
  if (list->is_array()) {
    for (std::size_t i = 0; i < list->size(); ++i)
      out.push_back(verdict_from_json((*list)[i], fmt::format("{}: solutions[{}]", source, i)));
    return out;
  }
  if (j.is_object() && j.contains("workloads")) {
    out.push_back(verdict_from_json(j, source));
    return out;
  }
  throw input_error(source,
                    "not a kharness result: expected score JSON ({\"solutions\": [...]}), a "
                    "verdict or an array of verdicts");
}

// A file, else an archive run (id or unique prefix).
std::vector<Verdict> load_side(const std::string& input, const GlobalOptions& global) {
  std::error_code ec;
  if (std::filesystem::exists(input, ec)) {
    nlohmann::json j = json_util::parse_text<nlohmann::json>(read_file(input), input, 1);
    return verdicts_of_json(j, input);
  }
  std::filesystem::path dir =
      global.archive_dir.empty() ? archive::Archive::default_dir() : global.archive_dir;
  if (!std::filesystem::exists(dir, ec))
    throw input_error(input, "no such file, and no archive to find a run in");
  archive::Archive archive(dir);
  auto run = archive.find_run(input);
  if (!run) throw input_error(input, fmt::format("no such file, and no run in {}", dir.string()));
  std::vector<Verdict> out;
  for (const auto& c : archive.candidates(run->id)) {
    archive::StoredCandidate stored = archive.load(c.id);
    if (stored.record.verdict) out.push_back(*stored.record.verdict);
  }
  return out;
}

ExitCode run_compare(const CompareArgs& args, const GlobalOptions& global) {
  if (!(args.sigmas > 0)) throw input_error("--sigmas", "must be > 0");
  if (!(args.noise_limit > 0)) throw input_error("--noise-limit", "must be > 0");
  report::CompareOptions options;
  options.sigmas = args.sigmas;
  options.noise_limit = args.noise_limit;
  if (args.fail_percent >= 0) {
    options.fail_percent = args.fail_percent;
  } else if (args.fail_percent != -1) {
    throw input_error("--fail-on-regression", "must be >= 0 (percent)");
  }
  if (!args.json_file.empty()) check_output_file("--json", args.json_file);
  std::vector<Verdict> olds = load_side(args.old_input, global);
  std::vector<Verdict> news = load_side(args.new_input, global);
  report::CompareResult result = report::compare_verdicts(olds, news, options);
  if (!args.json_file.empty()) {
    write_output(
        "--json", args.json_file,
        json_util::dump(report::to_json(result, args.old_input, args.new_input, options), 2) +
            "\n");
  }
  std::fputs(report::to_markdown(result, args.old_input, args.new_input).c_str(), stdout);
  return result.regression ? ExitCode::kFailed : ExitCode::kPassed;
}

}  // namespace

Runner setup_compare(CLI::App& app) {
  auto args = std::make_shared<CompareArgs>();
  app.add_option("old", args->old_input,
                 "The reference: a score/validate/bench JSON file, or an archive run id")
      ->required();
  app.add_option("new", args->new_input, "The candidate run, in the same forms")->required();
  app.add_option("--json", args->json_file, "Write the comparison as JSON (kharness.compare/1)")
      ->type_name("FILE");
  app.add_option("--fail-on-regression", args->fail_percent,
                 "Exit 1 when a workload is slower by more than PCT percent beyond the noise, or "
                 "newly failed")
      ->type_name("PCT");
  app.add_option("--sigmas", args->sigmas,
                 "A change is real beyond this many combined standard errors (default 2)");
  app.add_option("--noise-limit", args->noise_limit,
                 "\"same\" needs the noise band below this relative width, else \"unclear\" "
                 "(default 0.05)");
  return [args](const GlobalOptions& global) { return run_compare(*args, global); };
}

}  // namespace kharness::cli
