// kharness operators list|show|check
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/table.hpp"
#include "core/json_util.hpp"
#include "kharness/solution.hpp"
#include "kharness/text.hpp"

namespace kharness::cli {
namespace {

struct OperatorsArgs {
  std::vector<std::string> import_paths;  // import
  std::string into;                       // import: write runnable ones as operator folders here
  CLI::App* import = nullptr;
  bool json = false;
  bool markdown = false;           // list: the README's generated operator list
  std::string name;                // show
  std::vector<std::string> names;  // check
  std::string arch;
  bool no_cache = false;
  CLI::App* list = nullptr;
  CLI::App* show = nullptr;
  CLI::App* check = nullptr;
};

void print(const std::string& text) { std::fputs(text.c_str(), stdout); }

// Exit 2 says on stderr why, as every command's errors do: the first invalid operator (the table
// on stdout has them all), and how many more there are.
ExitCode invalid_exit(const std::vector<std::string>& errors) {
  std::string more = errors.size() > 1 ? fmt::format(" (and {} more)", errors.size() - 1) : "";
  std::fprintf(stderr, "kharness: error: %s%s\n",
               printable_line(bounded(errors.front(), 2000)).c_str(), more.c_str());
  return ExitCode::kUsage;
}

std::string shape_text(const TensorSpec& t) {
  return t.shape ? "[" + join(*t.shape, ", ") + "]" : "scalar";
}

std::string path_or_dash(const std::optional<std::filesystem::path>& p) {
  return p ? p->string() : "-";
}

std::string yes_no(bool b) { return b ? "yes" : "-"; }

// The family folder an operator's reference is in (_families/<family>), "own" for a reference
// beside its definition, "-" for none.
std::string reference_family(const Operator& op) {
  if (!op.reference) return "-";
  const auto dir = op.reference->parent_path();
  return dir.parent_path().filename() == "_families" ? dir.filename().string() : "own";
}

// The README's operator list (README.md between the operators:begin/end markers, kept current
// by scripts/update-readme-operators.sh and checked by tests/readme_operators_test.cpp): the
// shipped operators and the reference families, from operators/ itself.
ExitCode run_list_markdown() {
  namespace fs = std::filesystem;
  const fs::path builtin = OperatorRegistry::builtin_dir();
  OperatorRegistry registry({{builtin, "builtin"}});
  std::map<std::string, std::vector<std::string>> shipped_of;  // family -> shipped operators
  Table ops({"| operator", "| op_type", "| family", "| workloads", "| seed", "| baseline |"});
  std::size_t count = 0;
  for (const auto& e : registry.list()) {
    if (!e.error.empty()) throw input_error(e.definition_file.string(), e.error);
    const Operator op = registry.load(e.name);
    const std::string family = reference_family(op);
    shipped_of[family].push_back(e.name);
    ops.add({"| `" + e.name + "`", "| " + e.op_type, "| " + family,
             "| " + std::to_string(op.workloads.size()), "| " + yes_no(op.seed.has_value()),
             "| " + yes_no(op.baseline.has_value()) + " |"});
    ++count;
  }
  std::vector<std::string> families;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(builtin / "_families", ec)) {
    if (d.is_directory() && fs::exists(d.path() / "reference.cu")) {
      families.push_back(d.path().filename().string());
    }
  }
  std::sort(families.begin(), families.end());
  Table fams({"| family", "| seed", "| baseline", "| workload templates", "| shipped operators |"});
  for (const auto& f : families) {
    const fs::path dir = builtin / "_families" / f;
    bool templates = false;
    if (fs::exists(dir / "family.json")) {
      const auto j = json_util::parse_text<nlohmann::ordered_json>(
          read_file((dir / "family.json").string()), (dir / "family.json").string());
      templates = j.is_object() && j.contains("workloads");
    }
    std::vector<std::string> shipped;
    for (const auto& n : shipped_of[f]) shipped.push_back("`" + n + "`");
    fams.add({"| `" + f + "`", "| " + yes_no(fs::exists(dir / "seed.cu")),
              "| " + yes_no(fs::exists(dir / "baseline")), "| " + yes_no(templates),
              "| " + (shipped.empty() ? std::string("-") : join(shipped, ", ")) + " |"});
  }
  // Markdown tables: the header separator row goes second.
  auto markdown = [](const std::string& rendered, std::size_t columns) {
    std::istringstream lines(rendered);
    std::string out, line;
    bool first = true;
    while (std::getline(lines, line)) {
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
      if (first) {
        for (std::size_t c = 0; c < columns; ++c) out += "|---";
        out += "|\n";
        first = false;
      }
    }
    return out;
  };
  print(
      fmt::format("{} operators ship, with references from {} families "
                  "(`operators/_families/`; a family's reference serves every definition of "
                  "it, imported FlashInfer-Bench ones included).\n\n",
                  count, families.size()));
  print(markdown(ops.render(), 6));
  print("\n");
  print(markdown(fams.render(), 5));
  return ExitCode::kPassed;
}

ExitCode run_list(const OperatorsArgs& args, const GlobalOptions& global) {
  if (args.markdown) return run_list_markdown();
  auto entries = make_registry(global).list();
  if (args.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& e : entries) {
      nlohmann::json row = {{"name", e.name},
                            {"op_type", e.op_type},
                            {"description", e.description},
                            {"definition_file", e.definition_file.string()},
                            {"origin", e.origin}};
      if (!e.error.empty()) row["error"] = e.error;
      j.push_back(row);
    }
    print(json_util::dump(j, 2) + "\n");
    return ExitCode::kPassed;
  }
  Table table({"name", "op_type", "origin", "description"});
  std::vector<std::string> broken;
  for (const auto& e : entries) {
    std::string description = e.error.empty() ? e.description : "INVALID: " + e.error;
    if (description.size() > 80) description = description.substr(0, 77) + "...";
    table.add({e.name, e.op_type, e.origin, description});
    if (!e.error.empty()) broken.push_back(e.error);
  }
  print(table.render());
  print(fmt::format("{} operators\n", entries.size()));
  return broken.empty() ? ExitCode::kPassed : invalid_exit(broken);
}

ExitCode run_show(const OperatorsArgs& args, const GlobalOptions& global) {
  Operator op;
  try {
    op = make_registry(global).load(args.name);
  } catch (const Error& e) {  // the registry names --operator, which this command does not have
    if (e.where() == "--operator") throw Error(e.code(), "operators show: name", e.what());
    throw;
  }
  const Definition& d = op.definition;
  if (args.json) {
    nlohmann::json j;
    j["definition"] = nlohmann::json::parse(json_util::dump(to_json(d)));
    j["workloads"] = nlohmann::json::array();
    for (const auto& w : op.workloads) j["workloads"].push_back(to_json(w));
    j["files"] = {{"definition", op.definition_file.string()},
                  {"workloads", path_or_dash(op.workloads_file)},
                  {"reference", path_or_dash(op.reference)},
                  {"seed", path_or_dash(op.seed)},
                  {"baseline", path_or_dash(op.baseline)}};
    j["origin"] = op.origin;
    print(json_util::dump(j, 2) + "\n");
    return ExitCode::kPassed;
  }
  std::string out = fmt::format("{}  ({}, {})\n", d.name,
                                d.op_type.empty() ? "no op_type" : d.op_type, op.origin);
  if (!d.description.empty()) out += d.description + "\n";
  out += "\naxes\n";
  Table axes({"  name", "kind", "value", "description"});
  for (const auto& a : d.axes) {
    axes.add({"  " + a.name, a.is_const ? "const" : "var",
              a.is_const ? std::to_string(a.value) : "-", a.description});
  }
  out += axes.render();
  out += "\ntensors\n";
  Table tensors({"  name", "role", "shape", "dtype"});
  for (const auto& t : d.inputs)
    tensors.add({"  " + t.name, "input", shape_text(t), std::string(dtype_name(t.dtype))});
  for (const auto& t : d.outputs)
    tensors.add({"  " + t.name, "output", shape_text(t), std::string(dtype_name(t.dtype))});
  out += tensors.render();
  if (!d.constraints.empty()) out += "\nconstraints\n  " + join(d.constraints, "\n  ") + "\n";
  const auto& k = d.kharness;
  out += fmt::format("\ntolerance  atol {} rtol {} matched ratio {}{}\n", k.tolerance.atol,
                     k.tolerance.rtol, k.tolerance.required_matched_ratio,
                     k.present ? "" : " (defaults: no kharness section)");
  out += fmt::format("flops      {}\n", k.flops ? k.flops->text() : "-");
  out += fmt::format("bytes      {}\n", k.bytes ? k.bytes->text() : "-");
  out += fmt::format(
      "\nfiles\n  definition  {}\n  workloads   {}\n  reference   {}\n  seed        {}\n  baseline "
      "   {}\n",
      op.definition_file.string(), path_or_dash(op.workloads_file), path_or_dash(op.reference),
      path_or_dash(op.seed), path_or_dash(op.baseline));
  out += fmt::format("\nworkloads ({})\n", op.workloads.size());
  Table workloads({"  uuid", "axes", "flops", "bytes"});
  for (const auto& w : op.workloads) {
    std::vector<std::string> axes_text;
    for (const auto& [name, value] : w.axes) axes_text.push_back(fmt::format("{}={}", name, value));
    Bindings b = w.bindings(d);
    auto formula = [&](const std::optional<Expr>& e) -> std::string {
      if (!e) return "-";
      try {
        return std::to_string(e->eval(b));
      } catch (const ExprError& err) {
        return std::string("error: ") + err.what();
      }
    };
    workloads.add({"  " + w.uuid, join(axes_text, " "), formula(k.flops), formula(k.bytes)});
  }
  out += workloads.render();
  print(out);
  return ExitCode::kPassed;
}

// Compiles each operator's reference, seed and baseline against its definition and workloads.
ExitCode run_check(const OperatorsArgs& args, const GlobalOptions& global) {
  OperatorRegistry registry = make_registry(global);
  std::vector<std::string> names = args.names;
  if (names.empty()) {
    for (const auto& e : registry.list()) names.push_back(e.name);
  }
  std::string arch = resolve_arch(args.arch);
  // Operator folders may come from elsewhere (--operators-dir, an imported FlashInfer-Bench
  // checkout): their files compile in the file sandbox like a submission's.
  require_compile_sandbox("operators check");
  CompileOptions options = make_compile_options(arch, !args.no_cache);
  Table table({"operator", "workloads", "solution", "status", "seconds", "kernels (registers)"});
  nlohmann::json report = nlohmann::json::array();
  bool failed = false;
  std::vector<std::string> invalid;  // why each INVALID row is
  std::string details;
  for (const auto& name : names) {
    std::unique_ptr<Operator> op;
    try {
      op = std::make_unique<Operator>(registry.load(name));
    } catch (const Error& e) {
      table.add({name, "-", "-", "INVALID", "-", e.message()});
      report.push_back({{"operator", name}, {"status", "INVALID"}, {"error", e.message()}});
      invalid.push_back(e.message());
      continue;
    }
    std::vector<std::pair<std::string, std::optional<std::filesystem::path>>> roles = {
        {"reference", op->reference}, {"seed", op->seed}, {"baseline", op->baseline}};
    // The seeds for one target compile only for it: checked when that is the target.
    if (auto it = op->arch_seeds.find(arch); it != op->arch_seeds.end()) {
      roles.emplace_back("seed." + arch, it->second);
    }
    for (const auto& [role, path] : roles) {
      if (!path) {
        table.add(
            {op->definition.name, std::to_string(op->workloads.size()), role, "MISSING", "-", "-"});
        report.push_back(
            {{"operator", op->definition.name}, {"role", role}, {"status", "MISSING"}});
        if (role == "reference") failed = true;
        continue;
      }
      CompileResult r;
      try {
        Solution s = load_solution(*path);
        r = compile_solution(s, &op->definition, &op->workloads, options);
      } catch (const Error& e) {
        table.add({op->definition.name, std::to_string(op->workloads.size()), role, "INVALID", "-",
                   e.message()});
        report.push_back({{"operator", op->definition.name},
                          {"role", role},
                          {"status", "INVALID"},
                          {"error", e.message()}});
        invalid.push_back(fmt::format("{} {}: {}", op->definition.name, role, e.message()));
        continue;
      }
      std::vector<std::string> kernels;
      for (const auto& kinfo : r.kernels)
        kernels.push_back(fmt::format("{} ({})", kinfo.name, kinfo.registers));
      table.add({op->definition.name, std::to_string(op->workloads.size()), role,
                 std::string(status_name(r.status)), fmt::format("{:.3f}", r.seconds),
                 join(kernels, ", ")});
      nlohmann::json row = to_json(r);
      row.erase("log");
      row["operator"] = op->definition.name;
      row["role"] = role;
      row["path"] = path->string();
      report.push_back(row);
      if (!r.ok()) {
        failed = true;
        details += render_compile_text(
            fmt::format("{} {} ({})", op->definition.name, role, path->string()), r);
      }
    }
  }
  if (args.json) {
    print(json_util::dump(
              nlohmann::json(
                  {{"schema", "kharness.operators-check/1"}, {"arch", arch}, {"results", report}}),
              2) +
          "\n");
  } else {
    print(fmt::format("checking {} operator(s) for {}\n", names.size(), arch));
    print(table.render());
    if (!details.empty()) print("\n" + details);
  }
  if (!invalid.empty()) return invalid_exit(invalid);
  return failed ? ExitCode::kFailed : ExitCode::kPassed;
}

// Which FlashInfer-Bench definitions kharness can run as they are, and why not the others;
// with --into, the runnable ones become kharness operator folders.
ExitCode run_import(const OperatorsArgs& args, const GlobalOptions& global) {
  namespace fs = std::filesystem;
  Table table({"name", "op_type", "workloads", "runnable", "reason"});
  nlohmann::json report = nlohmann::json::array();
  std::size_t runnable = 0, total = 0;
  // Per family (the reference family found, else "op_type X" for definitions without one): how
  // many definitions, how many run, and what the rest and the family itself miss.
  struct FamilyReport {
    std::size_t definitions = 0, runnable = 0, synthesized = 0;
    bool seed = false, baseline = false, has_reference = false;
    std::map<std::string, std::size_t> missing;  // why not runnable -> how many
  };
  std::map<std::string, FamilyReport> families;
  for (const auto& path : args.import_paths) {
    std::error_code ec;
    if (!fs::exists(path, ec)) throw input_error(path, "no such file or folder");
    fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
    std::vector<SearchDir> dirs = {{dir, "import"}};
    const OperatorRegistry defaults = make_registry(global);
    for (const auto& d : defaults.search_dirs()) dirs.push_back(d);  // for the families
    OperatorRegistry registry(dirs);
    std::vector<fs::path> files;
    if (fs::is_directory(path, ec)) {
      for (const auto& e : registry.list()) {
        if (e.origin == "import") files.push_back(e.definition_file);
      }
    } else {
      files.push_back(path);
    }
    for (const auto& file : files) {
      ++total;
      std::string name = file.stem().string(), op_type = "-", workloads = "-";
      Runnability r;
      std::unique_ptr<Operator> op;
      try {
        op = std::make_unique<Operator>(registry.load(file.string()));
        name = op->definition.name;
        op_type = op->definition.op_type;
        workloads = std::to_string(op->workloads.size());
        r = assess(*op);
      } catch (const Error& e) {
        r = {false, e.message()};
      }
      const std::string family =
          op && op->reference ? reference_family(*op)
                              : "op_type " + (op ? op->definition.op_type : std::string("?"));
      FamilyReport& fr = families[family == "own" ? "own reference: " + name : family];
      ++fr.definitions;
      if (op) {
        fr.has_reference = op->reference.has_value();
        fr.seed = fr.seed || op->seed.has_value();
        fr.baseline = fr.baseline || op->baseline.has_value();
        if (!op->workloads_file && !op->workloads.empty()) ++fr.synthesized;
      }
      if (!r.runnable) {
        // The reason without the definition's particulars (input names, uuids, paths).
        std::string why = r.reason;
        if (why.rfind("no reference", 0) == 0)
          why = "no reference family";
        else if (why.rfind("integer input", 0) == 0)
          why = "an integer input has no generator";
        else if (why.rfind("workload ", 0) == 0)
          why = "safetensors inputs not in the snapshot";
        else if (!op)
          why = "definition does not load";
        ++fr.missing[why];
      }
      if (r.runnable) {
        ++fr.runnable;
        ++runnable;
        if (!args.into.empty()) {
          fs::path out = fs::path(args.into) / name;
          write_output("--into", out / "definition.json", read_file(file.string()));
          std::string lines;
          for (const auto& w : op->workloads) lines += json_util::dump(to_json(w)) + "\n";
          write_output("--into", out / "workloads.jsonl", lines);
        }
      }
      table.add({name, op_type, workloads, r.runnable ? "yes" : "no", r.reason});
      report.push_back({{"name", name},
                        {"op_type", op_type},
                        {"definition_file", file.string()},
                        {"runnable", r.runnable},
                        {"reason", r.reason}});
    }
  }
  Table per_family(
      {"family", "definitions", "runnable", "synthesized", "seed", "baseline", "missing"});
  nlohmann::json family_report = nlohmann::json::array();
  for (const auto& [family, fr] : families) {
    std::vector<std::string> missing;
    for (const auto& [why, n] : fr.missing) missing.push_back(fmt::format("{} ({})", why, n));
    if (fr.has_reference && !fr.seed) missing.push_back("seed");
    if (fr.has_reference && !fr.baseline) missing.push_back("baseline");
    per_family.add({family, std::to_string(fr.definitions), std::to_string(fr.runnable),
                    std::to_string(fr.synthesized), fr.has_reference ? yes_no(fr.seed) : "-",
                    fr.has_reference ? yes_no(fr.baseline) : "-",
                    missing.empty() ? "-" : join(missing, "; ")});
    family_report.push_back({{"family", family},
                             {"definitions", fr.definitions},
                             {"runnable", fr.runnable},
                             {"synthesized_workloads", fr.synthesized},
                             {"seed", fr.seed},
                             {"baseline", fr.baseline},
                             {"missing", missing}});
  }
  if (args.json) {
    print(json_util::dump(nlohmann::json({{"schema", "kharness.import/1"},
                                          {"definitions", report},
                                          {"families", family_report}}),
                          2) +
          "\n");
  } else {
    print(table.render());
    print(
        "\nper family (synthesized: definitions whose workloads come from the family's "
        "templates, none shipped)\n");
    print(per_family.render());
    print(fmt::format("{} of {} definitions runnable{}\n", runnable, total,
                      args.into.empty() ? "" : fmt::format("; written to {}", args.into)));
  }
  return ExitCode::kPassed;
}

}  // namespace

Runner setup_operators(CLI::App& app) {
  auto args = std::make_shared<OperatorsArgs>();
  app.require_subcommand(1);
  args->list = app.add_subcommand(
      "list", "List every operator found (built-in, --operators-dir, KHARNESS_OPERATORS)");
  args->list->add_flag("--json", args->json, "Print as JSON");
  args->list->add_flag("--markdown", args->markdown,
                       "The shipped operators and families as Markdown (README.md's list)");
  args->show = app.add_subcommand(
      "show", "Axes, tensors, workloads, tolerance and FLOP/byte formulas of one operator");
  args->show->add_option("name", args->name, "Operator name, or a definition file or folder")
      ->required();
  args->show->add_flag("--json", args->json, "Print as JSON");
  args->check = app.add_subcommand(
      "check", "Compile each operator's reference, seed and baseline (no GPU needed)");
  args->check->add_option("names", args->names, "Operators to check (default: all)");
  args->check->add_option("--arch", args->arch, "Target (default: this GPU, else sm_90a)")
      ->type_name("ARCH");
  args->check->add_flag("--json", args->json, "Print as JSON");
  args->check->add_flag("--no-cache", args->no_cache, "Bypass the compile cache");
  args->import = app.add_subcommand(
      "import", "Which FlashInfer-Bench definitions run as they are (and why not the rest)");
  args->import
      ->add_option("paths", args->import_paths,
                   "A FlashInfer-Bench checkout, a folder of definitions, or files")
      ->required();
  args->import
      ->add_option("--into", args->into,
                   "Write the runnable ones here as kharness operator folders")
      ->type_name("DIR");
  args->import->add_flag("--json", args->json, "Print as JSON");
  return [args](const GlobalOptions& global) {
    if (args->import->parsed()) return run_import(*args, global);
    if (args->list->parsed()) return run_list(*args, global);
    if (args->show->parsed()) return run_show(*args, global);
    return run_check(*args, global);
  };
}

}  // namespace kharness::cli
