#include "kharness/operators.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/text.hpp"

namespace kharness {
namespace {

namespace fs = std::filesystem;

// A definition file found in a search directory, before it is parsed. `key` is the name the
// layout implies (folder name or file stem); the definition's own "name" must agree.
struct Candidate {
  std::string key;
  fs::path definition_file;
  std::string origin;
};

bool hidden(const fs::path& p) {
  auto name = p.filename().string();
  return name.empty() || name[0] == '_' || name[0] == '.';
}

std::vector<fs::path> sorted_entries(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<Candidate> discover(const SearchDir& dir) {
  std::vector<Candidate> out;
  std::error_code ec;
  if (!fs::is_directory(dir.path, ec)) return out;
  // FlashInfer-Bench layout: definitions/<op_type>/<name>.json
  fs::path defs = dir.path / "definitions";
  if (fs::is_directory(defs, ec)) {
    for (const auto& op_dir : sorted_entries(defs)) {
      if (fs::is_directory(op_dir, ec)) {
        for (const auto& file : sorted_entries(op_dir)) {
          if (file.extension() == ".json") out.push_back({file.stem().string(), file, dir.origin});
        }
      } else if (op_dir.extension() == ".json") {
        out.push_back({op_dir.stem().string(), op_dir, dir.origin});
      }
    }
  }
  for (const auto& entry : sorted_entries(dir.path)) {
    if (hidden(entry)) continue;
    if (fs::is_directory(entry, ec)) {
      if (fs::exists(entry / "definition.json", ec)) {
        out.push_back({entry.filename().string(), entry / "definition.json", dir.origin});
      }
    } else if (entry.extension() == ".json") {
      out.push_back({entry.stem().string(), entry, dir.origin});
    }
  }
  return out;
}

bool is_folder_operator(const fs::path& definition_file) {
  return definition_file.filename() == "definition.json";
}

std::optional<fs::path> existing(const fs::path& p) {
  std::error_code ec;
  if (fs::exists(p, ec)) return p;
  return std::nullopt;
}

std::optional<fs::path> workloads_for(const fs::path& def_file) {
  if (is_folder_operator(def_file)) return existing(def_file.parent_path() / "workloads.jsonl");
  fs::path parent = def_file.parent_path();
  std::string stem = def_file.stem().string();
  // FlashInfer-Bench: <root>/definitions/<op_type>/<name>.json ->
  // <root>/workloads/<op_type>/<name>.jsonl
  if (parent.parent_path().filename() == "definitions") {
    auto p = existing(parent.parent_path().parent_path() / "workloads" / parent.filename() /
                      (stem + ".jsonl"));
    if (p) return p;
  }
  if (parent.filename() == "definitions") {
    auto p = existing(parent.parent_path() / "workloads" / (stem + ".jsonl"));
    if (p) return p;
  }
  if (auto p = existing(parent / (stem + ".jsonl"))) return p;
  return existing(parent / (stem + ".workloads.jsonl"));
}

// A baseline folder is a folder solution (solution.json) or holds exactly one .cu file.
std::optional<fs::path> solution_in(const std::optional<fs::path>& p) {
  std::error_code ec;
  if (!p || !fs::is_directory(*p, ec) || fs::exists(*p / "solution.json", ec)) return p;
  std::vector<fs::path> cu;
  for (const auto& entry : sorted_entries(*p)) {
    if (entry.extension() == ".cu") cu.push_back(entry);
  }
  if (cu.size() != 1) {
    throw input_error(p->string(),
                      fmt::format("a baseline folder needs solution.json or exactly one "
                                  ".cu file; found {}",
                                  cu.size()));
  }
  return cu[0];
}

fs::path executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

}  // namespace

std::optional<fs::path> workload_input_file(const Operator& op, const std::string& path) {
  fs::path p(path);
  if (p.is_absolute()) return existing(p);
  if (!op.workloads_file) return existing(p);
  fs::path dir = op.workloads_file->parent_path();
  for (int up = 0; up <= 3; ++up, dir = dir.parent_path()) {
    if (auto found = existing(dir / p)) return found;
  }
  return std::nullopt;
}

Runnability assess(const Operator& op) {
  const Definition& d = op.definition;
  if (!op.reference) {
    return {
        false,
        d.kharness.family.empty()
            ? fmt::format(
                  "no reference: no reference.cu beside it, and no _families folder for a prefix "
                  "of its name or for its op_type '{}'",
                  d.op_type)
            : fmt::format("no reference: no _families/{}/reference.cu", d.kharness.family)};
  }
  if (op.workloads.empty()) return {false, "no workloads"};
  for (const auto& t : d.inputs) {
    if (!t.is_scalar() && !is_floating(t.dtype) && !d.kharness.inputs.count(t.name)) {
      return {
          false,
          fmt::format("integer input '{}' has no generator (its valid values depend on its role)",
                      t.name)};
    }
  }
  for (const auto& w : op.workloads) {
    for (const auto& [name, in] : w.inputs) {
      if (in.kind != WorkloadInput::Kind::kSafetensors) continue;
      if (!workload_input_file(op, in.path)) {
        return {false, fmt::format("workload {} reads '{}' from {}, which is not there", w.uuid,
                                   name, in.path)};
      }
    }
  }
  return {true, ""};
}

OperatorRegistry::OperatorRegistry(std::vector<SearchDir> search_dirs)
    : search_dirs_(std::move(search_dirs)) {}

fs::path data_dir() {
  if (const char* env = std::getenv("KHARNESS_HOME"); env && *env) return fs::path(env);
  std::error_code ec;
  fs::path installed = executable_dir() / ".." / "share" / "kharness";
  if (fs::is_directory(installed / "operators", ec)) return fs::weakly_canonical(installed, ec);
  return fs::path(KHARNESS_SOURCE_DIR);
}

fs::path OperatorRegistry::builtin_dir() { return data_dir() / "operators"; }

OperatorRegistry OperatorRegistry::from_environment(const std::vector<fs::path>& extra_dirs) {
  std::vector<SearchDir> dirs;
  for (const auto& d : extra_dirs) {
    std::error_code ec;
    if (!fs::is_directory(d, ec))
      throw input_error("--operators-dir", fmt::format("'{}' is not a folder", d.string()));
    dirs.push_back({d, "--operators-dir"});
  }
  if (const char* env = std::getenv("KHARNESS_OPERATORS"); env && *env) {
    std::string list = env;
    std::size_t start = 0;
    while (start <= list.size()) {
      std::size_t end = list.find(':', start);
      if (end == std::string::npos) end = list.size();
      std::string item = list.substr(start, end - start);
      if (!item.empty()) {
        std::error_code ec;
        if (!fs::is_directory(item, ec)) {
          throw input_error("KHARNESS_OPERATORS", fmt::format("'{}' is not a folder", item));
        }
        dirs.push_back({item, "KHARNESS_OPERATORS"});
      }
      start = end + 1;
    }
  }
  dirs.push_back({builtin_dir(), "builtin"});
  return OperatorRegistry(std::move(dirs));
}

std::vector<fs::path> OperatorRegistry::family_dirs() const {
  std::vector<fs::path> out;
  for (const auto& d : search_dirs_) out.push_back(d.path / "_families");
  return out;
}

std::vector<OperatorEntry> OperatorRegistry::list() const {
  std::vector<OperatorEntry> out;
  std::set<std::string> seen;
  for (const auto& dir : search_dirs_) {
    for (const auto& c : discover(dir)) {
      OperatorEntry entry{c.key, "", "", c.definition_file, c.origin, ""};
      try {
        Definition d = load_definition(c.definition_file);
        entry.name = d.name;
        entry.op_type = d.op_type;
        entry.description = d.description;
      } catch (const Error& e) {
        entry.error = e.message();
      }
      if (!seen.insert(entry.name).second) {
        spdlog::debug("{} is shadowed by an earlier operator of the same name",
                      c.definition_file.string());
        continue;
      }
      out.push_back(std::move(entry));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

namespace {

// seed.<arch>.cu files of a folder: {"sm_90a": ".../seed.sm_90a.cu"}, and seed.cute.<arch>.cu
// files, the CuTe variants.
void add_arch_seeds(const fs::path& dir, Operator& op) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 8 && name.rfind("seed.", 0) == 0 && it->path().extension() == ".cu") {
      std::string arch = name.substr(5, name.size() - 5 - 3);
      auto* out = &op.arch_seeds;
      if (arch.rfind("cute.", 0) == 0) {
        arch = arch.substr(5);
        out = &op.cute_seeds;
      }
      if (!arch.empty() && arch.find('.') == std::string::npos && !out->count(arch)) {
        (*out)[arch] = it->path();
      }
    }
  }
}

}  // namespace

std::optional<fs::path> seed_for(const Operator& op, const std::string& arch) {
  if (auto it = op.arch_seeds.find(arch); it != op.arch_seeds.end()) return it->second;
  return op.seed;
}

std::optional<fs::path> cute_seed_for(const Operator& op, const std::string& arch) {
  if (auto it = op.cute_seeds.find(arch); it != op.cute_seeds.end()) return it->second;
  return std::nullopt;
}

Operator OperatorRegistry::load_entry(const OperatorEntry& entry) const {
  Operator op;
  op.definition = load_definition(entry.definition_file);
  op.definition_file = entry.definition_file;
  op.origin = entry.origin;
  op.workloads_file = workloads_for(entry.definition_file);
  if (op.workloads_file) op.workloads = load_workloads(*op.workloads_file, op.definition);
  if (is_folder_operator(entry.definition_file)) {
    fs::path dir = entry.definition_file.parent_path();
    op.reference = existing(dir / "reference.cu");
    op.seed = existing(dir / "seed.cu");
    add_arch_seeds(dir, op);
    if (op.definition.kharness.baseline == "cublaslt") {
      // The built-in cuBLASLt GEMM (timed by the bench stage); no solution file.
    } else if (!op.definition.kharness.baseline.empty()) {
      fs::path baseline = dir / op.definition.kharness.baseline;
      op.baseline = existing(baseline);
      if (!op.baseline) {
        throw input_error(entry.definition_file.string() + ": kharness.baseline",
                          fmt::format("'{}' does not exist", baseline.string()));
      }
    } else {
      op.baseline = existing(dir / "baseline");
    }
    op.baseline = solution_in(op.baseline);
  }
  if (!op.reference) {
    // The family: kharness.family when given; otherwise the longest '_'-separated prefix of the
    // name that has a family folder (fused_add_rmsnorm_h4096 -> fused_add_rmsnorm, although its
    // op_type is rmsnorm), a prefix joined to the name's last part first (a variant:
    // gqa_paged_prefill_causal_h32_kv8_d128_ps1 -> gqa_paged_prefill_causal_ps1, whose page size 1
    // definitions have no kv_last_page_len input, before gqa_paged_prefill_causal), then the
    // op_type.
    std::vector<std::string> families;
    if (!op.definition.kharness.family.empty()) {
      families.push_back(op.definition.kharness.family);
    } else {
      std::string name = op.definition.name;
      const std::size_t last_cut = name.rfind('_');
      const std::string last =
          last_cut == std::string::npos ? std::string() : name.substr(last_cut);
      for (std::size_t cut = name.size(); cut != std::string::npos && cut > 0;
           cut = name.rfind('_', cut - 1)) {
        if (cut < last_cut) families.push_back(name.substr(0, cut) + last);
        families.push_back(name.substr(0, cut));
      }
      if (!op.definition.op_type.empty()) families.push_back(op.definition.op_type);
    }
    for (const auto& family : families) {
      for (const auto& dir : family_dirs()) {
        if (auto ref = existing(dir / family / "reference.cu")) {
          op.reference = ref;
          // The family found names the definition's family (skills/<family>.md, profiles), not
          // its op_type: FlashInfer-Bench's gqa_paged holds both decode and prefill.
          if (op.definition.kharness.family.empty()) op.definition.kharness.family = family;
          break;
        }
      }
      if (op.reference) break;
    }
  }
  // A family folder may also hold the defaults of its definitions (family.json) and a seed and
  // baseline shared by all of them (used where the operator folder has none of its own).
  if (op.reference && op.reference->parent_path().parent_path().filename() == "_families") {
    const fs::path family_dir = op.reference->parent_path();
    if (auto family_file = existing(family_dir / "family.json")) {
      const auto family = json_util::parse_text<nlohmann::ordered_json>(
          read_file(family_file->string()), family_file->string());
      apply_family_defaults(op.definition, family, family_file->string());
      // Shipped workloads win; a definition without any gets its family's sweep.
      if (!op.workloads_file && family.is_object() && family.contains("workloads")) {
        op.workloads = json_util::reading(family_file->string(), [&] {
          return synthesize_workloads(op.definition, family["workloads"], family_file->string());
        });
      }
    }
    // An operator folder with a seed of its own does not inherit the family's arch seeds.
    if (!op.seed) {
      op.seed = existing(family_dir / "seed.cu");
      add_arch_seeds(family_dir, op);
    }
    if (!op.baseline) op.baseline = solution_in(existing(family_dir / "baseline"));
  }
  return op;
}

Operator OperatorRegistry::load(const std::string& name_or_path) const {
  std::error_code ec;
  bool looks_like_path =
      name_or_path.find('/') != std::string::npos || fs::path(name_or_path).extension() == ".json";
  if (looks_like_path) {
    fs::path p(name_or_path);
    if (fs::is_directory(p, ec)) p /= "definition.json";
    if (!fs::exists(p, ec))
      throw input_error(name_or_path, "no such definition file or operator folder");
    return load_entry({"", "", "", p, "file", ""});
  }
  // Fast path: the layout names the operator (folder name, file stem).
  for (const auto& dir : search_dirs_) {
    for (const auto& c : discover(dir)) {
      if (c.key != name_or_path) continue;
      Operator op = load_entry({c.key, "", "", c.definition_file, c.origin, ""});
      if (op.definition.name == name_or_path) return op;
    }
  }
  std::vector<std::string> names;
  for (const auto& entry : list()) {
    if (entry.error.empty() && entry.name == name_or_path) return load_entry(entry);
    if (entry.error.empty()) names.push_back(entry.name);
  }
  auto close = close_matches(name_or_path, names, 3);
  std::string hint = close.empty() ? std::string(" (kharness operators list shows them all)")
                                   : fmt::format(" (did you mean {}?)", join(close, ", "));
  throw input_error("--operator", fmt::format("unknown operator '{}'{}", name_or_path, hint));
}

}  // namespace kharness
