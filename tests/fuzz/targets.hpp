// The bodies of the fuzz targets (tests/fuzz/fuzz_*.cpp), one function per target, shared with
// tests/fuzz_regression_test.cpp, which replays every input a target once failed on
// (tests/fixtures/fuzz/TARGET/) as a CPU test on every build.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <sstream>
#include <string>

#include "controller/recorder.hpp"
#include "core/json_util.hpp"
#include "fuzz_common.hpp"
#include "kharness/archive.hpp"
#include "kharness/definition.hpp"
#include "kharness/expr.hpp"
#include "kharness/rules.hpp"
#include "kharness/solution.hpp"
#include "kharness/text.hpp"

namespace kharness::fuzz {

// The JSON entry point (src/core/json_util.hpp): parse_text in both object orders, the lenient
// parse_or_discarded, and dump() of whatever was accepted (and of any string).
inline void run_json(const std::string& input) {
  expect_accepted_or_input_error([&] {
    auto j = json_util::parse_text<nlohmann::json>(input, "fuzz.json");
    (void)json_util::dump(j, 2);
    nlohmann::json copy = j;  // copying recurses: the depth limit keeps it bounded
    (void)(copy == j);
  });
  expect_accepted_or_input_error([&] {
    auto j = json_util::parse_text<nlohmann::ordered_json>(input, "fuzz.json", 7);
    (void)json_util::dump(j);
  });
  auto lenient = json_util::parse_or_discarded(input);
  if (!lenient.is_discarded()) (void)json_util::dump(lenient);
  (void)json_util::dump(nlohmann::json(input));
}

// A single-file solution: the plan comment (extract_plan_comment), the plan (parse_plan) and the
// expressions in it, evaluated; and the expression parser on the raw input.
inline void run_plan(const std::string& input) {
  expect_accepted_or_input_error([&] {
    Solution s = parse_single_file_solution(input, "fuzz.cu");
    Bindings b = {{"batch_size", 7}, {"hidden_size", 4096}};
    for (const auto& launch : s.plan.launches) {
      for (const auto* dim : {&launch.grid, &launch.block, &launch.cluster}) {
        for (const auto& e : *dim) {
          try {
            (void)e.eval(b);
          } catch (const ExprError&) {
          }
        }
      }
    }
    (void)json_util::dump(s.plan.raw);
  });
  try {
    Expr e = Expr::parse(input);
    (void)e.names();
    (void)e.eval({{"a", 3}, {"b", -5}, {"batch_size", 1}});
  } catch (const ExprError&) {
  }
}

inline const char* const kRmsnormDefinition = R"({
  "name": "rmsnorm_h4096", "op_type": "rmsnorm",
  "axes": {"batch_size": {"type": "var"}, "hidden_size": {"type": "const", "value": 4096}},
  "inputs": {"hidden_states": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"},
             "weight": {"shape": ["hidden_size"], "dtype": "bfloat16"}},
  "outputs": {"output": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"}},
  "kharness": {"tolerance": {"atol": 0.0078125, "rtol": 0.01},
               "flops": "4 * batch_size * hidden_size"}})";

// Definitions (parse_definition_text) and workloads (parse_workload): the input is a definition;
// after a line "---" (when present) each further line is a workload of that definition, or of
// the rmsnorm definition above when the first part is not one.
inline void run_definition(const std::string& input) {
  const auto split = input.find("\n---\n");
  static const Definition fallback = parse_definition_text(kRmsnormDefinition, "builtin.json");
  Definition definition = fallback;
  expect_accepted_or_input_error([&] {
    definition = parse_definition_text(input.substr(0, split), "definition.json");
    (void)json_util::dump(to_json(definition));
  });
  std::istringstream in(split == std::string::npos ? input : input.substr(split + 5));
  std::string line;
  int number = 0;
  while (std::getline(in, line) && number < 64) {
    ++number;
    expect_accepted_or_input_error([&] {
      auto j = json_util::parse_text<nlohmann::json>(line, "workloads.jsonl", number);
      Workload w = parse_workload(j, definition, "workloads.jsonl");
      Bindings b = w.bindings(definition);
      for (const auto& t : definition.inputs) {
        try {
          (void)tensor_shape(t, b);
        } catch (const Error&) {
        }
      }
      (void)json_util::dump(to_json(w));
    });
  }
}

// The rule scanner (check_source_rules) over a source that may hold anything, and the plan
// rules (check_plan_rules) when the source carries a plan.
inline void run_rules(const std::string& input) {
  Solution s;
  s.origin = "/nonexistent/fuzz.cu";
  s.name = "fuzz";
  s.sources.push_back({"fuzz.cu", input});
  SourceRules rules;
  rules.system_include_dirs = {"/nonexistent/include"};
  expect_accepted_or_input_error([&] { (void)check_source_rules(s, rules); });
  expect_accepted_or_input_error([&] {
    static const Definition definition = parse_definition_text(kRmsnormDefinition, "d.json");
    Solution parsed = parse_single_file_solution(input, "fuzz.cu");
    Workload w;
    w.uuid = "w";
    w.axes = {{"batch_size", 3}};
    (void)check_plan_rules(parsed.plan, definition, {w});
  });
}

// An archive with one candidate and a run folder with one, for run_archive.
struct ArchiveFixture {
  std::filesystem::path root;
  std::unique_ptr<archive::Archive> store;
  std::string id;
  std::filesystem::path candidate;
  std::filesystem::path run;

  ArchiveFixture() {
    namespace fs = std::filesystem;
    root = fs::temp_directory_path() / ("kharness-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(root);
    store = std::make_unique<archive::Archive>(root / "archive");
    std::string run_id = store->begin_run({{"command", "fuzz"}});
    archive::CandidateRecord r;
    r.name = "k";
    r.operator_name = "rmsnorm_h4096";
    r.origin = "k.cu";
    r.sources = {{"k.cu", "__global__ void k() {}\n"}};
    r.plan = {{"launches", nlohmann::json::array()}};
    r.usage = {{"input_tokens", 1}};
    r.cache_key = "fuzzkey";
    Verdict v;
    v.solution = "k";
    v.definition = "rmsnorm_h4096";
    v.status = Status::kPassed;
    r.verdict = v;
    id = store->add_candidate(run_id, r);
    candidate = store->load(id).summary.dir;
    run = root / "run";
    controller::FileRecorder files(run);
    files.begin({{"operator", "rmsnorm_h4096"}, {"budget", 3}});
    controller::CandidateRecord c;
    c.id = "c0001";
    c.status = controller::CandidateStatus::of(Status::kPassed);
    c.source = "__global__ void k() {}\n";
    c.verdict = to_json(v);
    files.record(c);
  }
  ~ArchiveFixture() {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
  ArchiveFixture(const ArchiveFixture&) = delete;  // owns the folder
  ArchiveFixture& operator=(const ArchiveFixture&) = delete;
};

// The archive loader (Archive::load, find_cached) and a run folder's loader (FileRecorder, what
// --resume reads) over files anyone may have edited. The first byte of the input picks the file
// the rest replaces: an archive candidate's record.json, verdict.json, plan.json or usage.json,
// a run's run.json, or a run candidate's record.json or verdict.json.
inline void run_archive(const std::string& input) {
  namespace fs = std::filesystem;
  static ArchiveFixture f;
  if (input.empty()) return;
  static const char* const kFiles[] = {"record.json", "verdict.json", "plan.json", "usage.json"};
  const unsigned pick = static_cast<unsigned char>(input[0]) % 7;
  fs::path file =
      pick < 4    ? f.candidate / kFiles[pick]
      : pick == 4 ? f.run / "run.json"
                  : f.run / "candidates" / "c0001" / (pick == 5 ? "record.json" : "verdict.json");
  const std::string saved = read_file(file.string());
  write_file_atomic(file.string(), input.substr(1));
  expect_accepted_or_input_error([&] {
    auto c = f.store->load(f.id);
    if (c.record.verdict) (void)json_util::dump(to_json(*c.record.verdict));
    (void)json_util::dump(c.record.usage);
    (void)f.store->find_cached("fuzzkey");
  });
  expect_accepted_or_input_error([&] {
    controller::FileRecorder files(f.run);
    (void)files.load_run();
    for (const auto& c : files.load_candidates()) (void)json_util::dump(controller::to_json(c));
  });
  write_file_atomic(file.string(), saved);
}

}  // namespace kharness::fuzz
