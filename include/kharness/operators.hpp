// Finding and loading operators: built-in operators/, --operators-dir DIR (repeatable) and
// KHARNESS_OPERATORS (colon-separated). A search directory may hold kharness operator folders
// (<name>/definition.json), plain definition files (*.json), or a FlashInfer-Bench layout
// (definitions/<op_type>/<name>.json with workloads/<op_type>/<name>.jsonl).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kharness/definition.hpp"

namespace kharness {

struct Operator {
  Definition definition;
  std::vector<Workload> workloads;
  std::filesystem::path definition_file;
  std::optional<std::filesystem::path> workloads_file;
  std::optional<std::filesystem::path> reference;  // the operator's, else its family's
  std::optional<std::filesystem::path> seed;
  // Seeds for one target (seed.sm_90a.cu: TMA and wgmma), preferred over `seed` when compiling
  // for that arch; `seed` stays the portable fallback.
  std::map<std::string, std::filesystem::path> arch_seeds;
  // CuTe/CUTLASS variants of the arch seeds (seed.cute.sm_90a.cu): `run` evaluates one beside the
  // seed where a CUTLASS root is found, and starts from the faster.
  std::map<std::string, std::filesystem::path> cute_seeds;
  std::optional<std::filesystem::path> baseline;  // a solution file or folder
  std::string origin;  // "builtin", "--operators-dir", "KHARNESS_OPERATORS", "file"
};

// The seed a run or a tune for `arch` starts from: the arch's own seed when there is one, else
// the portable seed.
std::optional<std::filesystem::path> seed_for(const Operator& op, const std::string& arch);
// The CuTe variant of the seed for `arch`; none when the operator has none.
std::optional<std::filesystem::path> cute_seed_for(const Operator& op, const std::string& arch);

struct OperatorEntry {
  std::string name;
  std::string op_type;
  std::string description;
  std::filesystem::path definition_file;
  std::string origin;
  std::string error;  // set when the definition could not be read; the entry is still listed
};

struct SearchDir {
  std::filesystem::path path;
  std::string origin;
};

// Whether kharness can evaluate an operator as it is, and if not, why: it needs a reference (its
// own or its family's), workloads, a generator for every integer input (a random int tensor is no
// valid page table or index), and the files of safetensors inputs.
struct Runnability {
  bool runnable = false;
  std::string reason;  // empty when runnable
};
Runnability assess(const Operator& op);

// Where a workload's file input (safetensors) is: an absolute path as it is; a relative one is
// looked up from the workloads file's folder upwards (FlashInfer-Bench paths are relative to the
// dataset root, two folders above the .jsonl), up to three folders. nullopt when not found.
std::optional<std::filesystem::path> workload_input_file(const Operator& op,
                                                         const std::string& path);

// Where kharness's shipped data lives: operators/, configs/ (GPU datasheets, providers), skills/.
// $KHARNESS_HOME, else <binary>/../share/kharness once installed, else the source tree. The one
// lookup every stage uses.
std::filesystem::path data_dir();

class OperatorRegistry {
 public:
  explicit OperatorRegistry(std::vector<SearchDir> search_dirs);
  // --operators-dir folders first, then KHARNESS_OPERATORS, then the built-in operators.
  static OperatorRegistry from_environment(const std::vector<std::filesystem::path>& extra_dirs);
  // The shipped operators/ folder (next to the binary once installed, else the source tree).
  static std::filesystem::path builtin_dir();

  // Every operator found, by name; the first search directory wins a name clash.
  std::vector<OperatorEntry> list() const;
  // By name, or by the path of a definition file or operator folder. Throws Error (exit 2)
  // with close names suggested when there is no such operator.
  Operator load(const std::string& name_or_path) const;
  const std::vector<SearchDir>& search_dirs() const { return search_dirs_; }
  std::vector<std::filesystem::path> family_dirs() const;

 private:
  Operator load_entry(const OperatorEntry& entry) const;
  std::vector<SearchDir> search_dirs_;
};

}  // namespace kharness
