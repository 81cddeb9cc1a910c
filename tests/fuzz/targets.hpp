// The bodies of the fuzz targets (tests/fuzz/fuzz_*.cpp), one function per target, shared with
// tests/fuzz_regression_test.cpp, which replays every input a target once failed on
// (tests/fixtures/fuzz/TARGET/) as a CPU test on every build.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "controller/recorder.hpp"
#include "core/json_util.hpp"
#include "fuzz_common.hpp"
#include "kharness/archive.hpp"
#include "kharness/definition.hpp"
#include "kharness/expr.hpp"
#include "kharness/family_source.hpp"
#include "kharness/file.hpp"
#include "kharness/rules.hpp"
#include "kharness/solution.hpp"
#include "kharness/text.hpp"
#include "pipeline/walk.hpp"

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

// A scratch folder of one process, emptied before each input: a tree under "sub" (what a
// submitter controls) and, beside it, a host file holding kSecret that nothing may ever read.
struct ScratchTree {
  std::filesystem::path root;
  std::filesystem::path secret;

  explicit ScratchTree(const std::string& tag) {
    root = std::filesystem::temp_directory_path() /
           ("kharness-fuzz-" + tag + "-" + std::to_string(::getpid()));
    secret = root / "host-secret.txt";
  }
  // Empties the folder and writes the host file again.
  void reset() {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
    std::filesystem::create_directories(root / "sub");
    write_file_atomic(secret.string(), std::string(kSecret) + "\n");
  }
  ~ScratchTree() {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
  ScratchTree(const ScratchTree&) = delete;  // owns the folder
  ScratchTree& operator=(const ScratchTree&) = delete;

  static constexpr const char* kSecret = "HOST_SECRET_7f3a9c";
};

// A byte reader that yields 0 once the input is spent (every input is a whole tree).
struct Bytes {
  const std::string& input;
  std::size_t at = 0;
  unsigned next() { return at < input.size() ? static_cast<unsigned char>(input[at++]) : 0U; }
  bool done() const { return at >= input.size(); }
};

// A submission read must hold none of the host file's bytes.
inline void expect_no_secret(const std::string& text, const std::string& what) {
  if (text.find(ScratchTree::kSecret) != std::string::npos)
    throw Finding(what + ": the host file's text was read through the submission");
}

inline const char* const kFamilySeed =
    "/* kharness\n{\"definition\": \"rmsnorm_h4096\", \"launches\": [{\"kernel\": \"k\","
    " \"grid\": [1, 1, 1], \"block\": [32, 1, 1], \"args\": []}]}\n*/\n";

// score's walk (pipeline::expand_solutions) over a tree the input builds: each step of the input
// makes a folder, a file or a symlink under "sub", named from a short list (.cu, .json,
// solution.json, _families, _shared, hidden names), whose link targets are other entries, ".",
// "..", the host file, "/", a missing path or a loop. Then every submission the walk lists is
// loaded as score would (load_solution). Holds the walk to: it ends, no path is listed twice, no
// listed path passes through a symlink, a listed symlink is refused, and no loaded source holds a
// byte of the host file.
inline void run_walk(const std::string& input) {
  namespace fs = std::filesystem;
  static ScratchTree tree("walk");
  tree.reset();
  static const char* const kNames[] = {"a",       "b",         "x.cu",    "y.cu",
                                       "s.json",  "_families", "_shared", "solution.json",
                                       ".hidden", "f",         "k.cuh",   "sol.cu"};
  constexpr std::size_t kNameCount = sizeof(kNames) / sizeof(kNames[0]);
  std::vector<fs::path> dirs = {tree.root / "sub"};
  std::vector<fs::path> entries;
  Bytes in{input};
  for (int step = 0; step < 48 && !in.done(); ++step) {
    const unsigned op = in.next() % 4;
    const fs::path parent = dirs[in.next() % dirs.size()];
    const fs::path path = parent / kNames[in.next() % kNameCount];
    std::error_code ec;
    if (fs::exists(fs::symlink_status(path, ec))) continue;
    if (op == 0) {
      fs::create_directory(path, ec);
      if (!ec) dirs.push_back(path);
    } else if (op == 1 || op == 2) {
      // A source that includes a _shared file, a plan, a solution.json, or text.
      static const char* const kTexts[] = {
          "#include \"../_shared/k.cuh\"\n__global__ void k() {}\n",
          "#include \"../../_shared/k.cuh\"\n#include \"k.cuh\"\n",
          "{\"name\": \"s\", \"definition\": \"rmsnorm_h4096\", \"entry\": \"x.cu\","
          " \"sources\": [\"x.cu\", \"k.cuh\", \"../a/x.cu\"], \"launches\": []}",
          "__global__ void k() {}\n", "#include \"_shared/k.cuh\"\n"};
      std::string text = kTexts[in.next() % 5];
      if (path.extension() == ".cu" && in.next() % 2) text = kFamilySeed + text;
      write_file_atomic(path.string(), text);
      entries.push_back(path);
    } else {
      // A link: to another entry, the host file, a folder above, itself, or nowhere.
      const unsigned kind = in.next() % 8;
      fs::path target;
      if (kind == 0 && !entries.empty())
        target = entries[in.next() % entries.size()];
      else if (kind == 1)
        target = tree.secret;
      else if (kind == 2)
        target = ".";
      else if (kind == 3)
        target = "..";
      else if (kind == 4)
        target = dirs[in.next() % dirs.size()];
      else if (kind == 5)
        target = path.filename();  // a loop of one
      else if (kind == 6)
        target = "/";
      else
        target = "missing";
      fs::create_symlink(target, path, ec);
      if (!ec) entries.push_back(path);
    }
  }
  pipeline::Submissions found;
  bool walked = false;
  expect_accepted_or_input_error([&] {
    found = pipeline::expand_solutions({(tree.root / "sub").string()});
    walked = true;
  });
  if (!walked) return;
  std::set<std::string> seen;
  const std::string sub = (tree.root / "sub").string() + "/";
  for (const auto& p : found.paths) {
    if (!seen.insert(p).second) throw Finding("listed twice: " + p);
    // The folder itself is one submission when it holds solution.json.
    if (p == (tree.root / "sub").string()) continue;
    if (p.compare(0, sub.size(), sub) != 0) throw Finding("listed outside the folder: " + p);
    // No folder on the way is a link; the path itself is one only if it is refused.
    fs::path so_far = tree.root / "sub";
    const fs::path rest = fs::path(p).lexically_relative(so_far);
    std::size_t left = static_cast<std::size_t>(std::distance(rest.begin(), rest.end()));
    for (const auto& part : rest) {
      so_far /= part;
      --left;
      std::error_code ec;
      if (fs::is_symlink(fs::symlink_status(so_far, ec)) && (left > 0 || !found.refused.count(p)))
        throw Finding("listed through a symlink and not refused: " + p);
    }
  }
  for (const auto& p : found.paths) {
    if (found.refused.count(p)) continue;
    expect_accepted_or_input_error([&] {
      Solution s = load_solution(p);
      for (const auto& f : s.sources) expect_no_secret(f.content, p);
    });
  }
}

// The family inliner (read_single_file_source): the input is a seed under
// _families/f/ and, after each line "---", a file of _families/_shared/ (a.cuh, b.cuh, ...).
// Beside them: _shared/env.cuh, a link to the host file; _shared/loop.cuh, a link to itself;
// _shared/up, a link to the folder above; _shared/deep/d.cuh, a real file; and a file of
// another family. Holds the inliner to: an input error or a text with no byte of the host file.
inline void run_families(const std::string& input) {
  namespace fs = std::filesystem;
  static ScratchTree tree("families");
  tree.reset();
  const fs::path families = tree.root / "sub" / "_families";
  fs::create_directories(families / "f");
  fs::create_directories(families / "other");
  fs::create_directories(families / "_shared" / "deep");
  fs::create_symlink(tree.secret, families / "_shared" / "env.cuh");
  fs::create_symlink("loop.cuh", families / "_shared" / "loop.cuh");
  fs::create_symlink("..", families / "_shared" / "up");
  write_file_atomic((families / "_shared" / "deep" / "d.cuh").string(), "#define DEEP 1\n");
  write_file_atomic((families / "other" / "x.cuh").string(), "#define OTHER 1\n");
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (parts.size() < 8) {
    const std::size_t split = input.find("\n---\n", start);
    parts.push_back(
        input.substr(start, split == std::string::npos ? std::string::npos : split - start));
    if (split == std::string::npos) break;
    start = split + 5;
  }
  // The input's own bytes never spell the host file's marker (the fuzzer learns it from the
  // check below): every 'S' becomes 's', so "HOST_SECRET" in a text came from the host file.
  for (auto& part : parts) std::replace(part.begin(), part.end(), 'S', 's');
  const fs::path seed = families / "f" / "seed.cu";
  write_file_atomic(seed.string(), parts[0]);
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::string name = std::string(1, static_cast<char>('a' + i - 1)) + ".cuh";
    write_file_atomic((families / "_shared" / name).string(), parts[i]);
  }
  expect_accepted_or_input_error([&] {
    std::string text = read_single_file_source(seed);
    expect_no_secret(text, seed.string());
  });
}

// A run folder's loader (FileRecorder: what run --resume and compare read) over run.json and a
// candidate's record.json and verdict.json as a real run writes them, with fields replaced by
// values of the wrong type or out of range: each step of the input picks a file, a field (one the
// writer uses, or a new one) and a value (null, a boolean, numbers at and beyond their ranges,
// strings, an array, an object, a path out of the folder). Holds the loader to: accepted, or one
// input error of one line that names the file and does not quote the JSON library.
inline void run_run_folder(const std::string& input) {
  namespace fs = std::filesystem;
  static ScratchTree tree("run");
  tree.reset();
  const fs::path run = tree.root / "sub" / "run";
  Verdict v;
  v.solution = "k";
  v.definition = "rmsnorm_h4096";
  v.status = Status::kPassed;
  {
    controller::FileRecorder files(run);
    files.begin({{"operator", "rmsnorm_h4096"},
                 {"budget", 3},
                 {"provider", "replay"},
                 {"seed", 7},
                 {"workers", 1},
                 {"kharness_version", "0.1"}});
    controller::CandidateRecord c;
    c.id = "c0001";
    c.status = controller::CandidateStatus::of(Status::kPassed);
    c.source = "__global__ void k() {}\n";
    c.verdict = to_json(v);
    c.parent = "";
    c.step = 1;
    files.record(c);
  }
  const fs::path files[] = {run / "run.json", run / "candidates" / "c0001" / "record.json",
                            run / "candidates" / "c0001" / "verdict.json"};
  nlohmann::json docs[3];
  for (int i = 0; i < 3; ++i) {
    docs[i] = json_util::parse_or_discarded(read_file(files[i].string()));
    if (docs[i].is_discarded()) return;  // the writer's format moved on: nothing to mutate
  }
  Bytes in{input};
  for (int step = 0; step < 16 && !in.done(); ++step) {
    nlohmann::json& doc = docs[in.next() % 3];
    std::vector<std::string> keys;
    for (auto it = doc.begin(); it != doc.end(); ++it) keys.push_back(it.key());
    keys.emplace_back("unknown_field");
    const std::string key = keys[in.next() % keys.size()];
    nlohmann::json value;
    switch (in.next() % 14) {
      case 0:
        value = nullptr;
        break;
      case 1:
        value = true;
        break;
      case 2:
        value = -1;
        break;
      case 3:
        value = 0;
        break;
      case 4:
        value = std::numeric_limits<std::int64_t>::max();
        break;
      case 5:
        value = std::numeric_limits<std::uint64_t>::max();
        break;
      case 6:
        value = 1e308;
        break;
      case 7:
        value = -0.5;
        break;
      case 8:
        value = "";
        break;
      case 9:
        value = "../../../etc/passwd";
        break;
      case 10:
        value = std::string(in.next() * 64, 'x');
        break;
      case 11:
        value = nlohmann::json::array({1, "two", nullptr});
        break;
      case 12:
        value = nlohmann::json::object({{"nested", {{"deeper", 1}}}});
        break;
      default:
        value = "\x1b]52;c;cHduZWQ=\x07";
        break;
    }
    doc[key] = value;
  }
  for (int i = 0; i < 3; ++i) write_file_atomic(files[i].string(), json_util::dump(docs[i], 2));
  expect_accepted_or_clean_input_error([&] {
    controller::FileRecorder loader(run);
    (void)json_util::dump(loader.load_run());
    for (const auto& c : loader.load_candidates()) (void)json_util::dump(controller::to_json(c));
  });
}

}  // namespace kharness::fuzz
