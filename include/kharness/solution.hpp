// Solutions: CUDA device code plus a launch plan (docs/plans.md). Three forms load into one model:
// a .cu file whose first block comment is `/* kharness {json} */`, a folder with
// solution.json, or a FlashInfer-Bench Solution JSON.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kharness/dtype.hpp"
#include "kharness/expr.hpp"
#include "kharness/tensor_map.hpp"

namespace kharness {

struct SourceFile {
  std::string path;  // as the solution names it (relative); diagnostics use this name
  std::string content;
};

// A typed literal argument: {"int32": 4}, {"float32": 1e-5}.
struct Literal {
  DType dtype = DType::kInt32;
  double float_value = 0.0;
  std::int64_t int_value = 0;
  // The bytes passed to the kernel parameter (little endian, dtype_size bytes).
  std::vector<std::uint8_t> encode() const;
};

struct LaunchArg {
  // A name: a tensor (device pointer), an axis or a scalar input (by value), or "workspace".
  std::string name;
  std::optional<Literal> literal;  // set instead of name for a literal
  std::string tensor_map;          // set instead of name for {"tensor_map": NAME} (a CUtensorMap)
  std::string text() const;        // for messages
};

struct Launch {
  std::string kernel;
  std::array<Expr, 3> grid;
  std::array<Expr, 3> block;
  std::array<Expr, 3> cluster;
  Expr shared_bytes;
  std::vector<LaunchArg> args;
  std::vector<TensorMapSpec> tensor_maps;  // declared for this launch, named by its args
  // Programmatic dependent launch: this launch may begin while the previous launch of the plan
  // finishes (the kernel waits with cudaGridDependencySynchronize / griddepcontrol.wait).
  bool pdl = false;
  bool cooperative = false;  // a cooperative launch (grid-wide sync); the grid must be resident
  const TensorMapSpec* find_tensor_map(const std::string& name) const;
};

// One group of launches of a dispatching plan, chosen for a workload by its condition.
struct LaunchVariant {
  // A boolean expression over the definition's axes ("M <= 64"); absent on the last variant,
  // which serves every workload that no earlier condition took.
  std::optional<Expr> when;
  std::vector<Launch> launches;
};

struct LaunchPlan {
  std::string definition;  // operator name; may be empty when given on the command line
  // The launches every workload runs. Empty in a plan with variants: those launches depend on the
  // workload, and reading them goes through launches_for / resolved, so that no stage can run a
  // dispatching plan without choosing its variant first.
  std::vector<Launch> launches;
  // Shape dispatch: the first variant whose `when` holds runs (the last has no condition).
  std::vector<LaunchVariant> variants;
  Expr workspace_bytes;
  std::vector<std::string> compile_options;
  nlohmann::json raw;  // the plan as written, for archives and hashing

  bool has_variants() const { return !variants.empty(); }
  // How many launch lists the plan has: its variants, or 1.
  std::size_t variant_count() const { return variants.empty() ? 1 : variants.size(); }
  // The launches of variant `index` (of the plan itself when it has no variants).
  const std::vector<Launch>& variant_launches(std::size_t index) const;
  // The variant that serves a workload with these axes: the first whose condition holds; 0 for a
  // plan without variants. Throws ExprError (an unknown axis, a division by zero).
  std::size_t variant_for(const Bindings& axes) const;
  const std::vector<Launch>& launches_for(const Bindings& axes) const {
    return variant_launches(variant_for(axes));
  }
  // A plan without variants that runs variant `index`'s launches (itself when it has none).
  LaunchPlan variant_plan(std::size_t index) const;
  // A plan without variants that runs what this one runs for these axes (itself when it has no
  // variants), for the stages that look at one workload's launches. Throws ExprError.
  LaunchPlan resolved(const Bindings& axes) const;
  // The variant as messages and verdicts name it: "0 (M <= 64)", "2 (otherwise)"; "" for a plan
  // without variants.
  std::string variant_label(std::size_t index) const;
};

enum class SolutionForm { kSingleFile, kFolder, kFlashInferBench };

struct Solution {
  std::string name;
  std::string author;
  std::string description;
  SolutionForm form = SolutionForm::kSingleFile;
  std::filesystem::path origin;  // the file or folder it was loaded from
  std::vector<SourceFile> sources;
  std::size_t entry = 0;  // index of the translation unit NVRTC compiles
  LaunchPlan plan;
  std::string plan_source;  // where the plan was read ("k.cu:1", "dir/solution.json")

  const SourceFile& entry_source() const { return sources.at(entry); }
};

// Throws kharness::Error (exit 2) naming the file and field for malformed input.
LaunchPlan parse_plan(const nlohmann::json& json, const std::string& where);
Solution load_solution(const std::filesystem::path& path);
// The single-file form from text already in memory (model answers, tests).
Solution parse_single_file_solution(const std::string& text, const std::string& file_name);
// The kharness comment of a single-file solution: {json, line of the comment start}.
// Throws Error when the first block comment is not a kharness comment or its JSON is broken.
std::pair<nlohmann::json, int> extract_plan_comment(const std::string& text,
                                                    const std::string& file_name);

}  // namespace kharness

// What `export --fib` (kharness/export.hpp) writes and the loader reads back: the generated host
// launcher's file in the exported sources, and the marker its first line carries; the second line
// names the kernel source kharness compiles: "// kharness-entry: PATH". The loader leaves that
// file out (a solution never runs host code under kharness), so they live here, with the loader.
namespace kharness::exchange {
inline constexpr const char* kFibLauncherFile = "kharness_fib_launcher.cu";
inline constexpr const char* kFibLauncherMarker =
    "// kharness: generated FlashInfer-Bench host launcher";
inline constexpr const char* kFibEntryPrefix = "// kharness-entry: ";
}  // namespace kharness::exchange
