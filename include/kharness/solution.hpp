// Solutions: CUDA device code plus a launch plan (DESIGN §3). Three forms load into one model:
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

struct LaunchPlan {
  std::string definition;  // operator name; may be empty when given on the command line
  std::vector<Launch> launches;
  Expr workspace_bytes;
  std::vector<std::string> compile_options;
  nlohmann::json raw;  // the plan as written, for archives and hashing
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
