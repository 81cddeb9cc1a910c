// The compile stage: NVRTC, no GPU needed. Source rules, compile, ptxas resource usage,
// PTX kernel signatures checked against the plan, and a content-addressed compile cache.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kharness/definition.hpp"
#include "kharness/rules.hpp"
#include "kharness/solution.hpp"
#include "kharness/status.hpp"

namespace kharness {

struct PtxParam {
  std::string type;       // PTX type: "u64", "u32", "f32", "b8" (aggregates), ...
  std::size_t size = 0;   // bytes
  std::size_t align = 0;  // bytes
};

struct KernelInfo {
  std::string name;     // the name a plan uses: extern "C" name, or demangled name without args
  std::string mangled;  // the PTX .entry name
  std::vector<PtxParam> params;
  // From ptxas verbose output; -1 when not reported.
  int registers = -1;
  int barriers = -1;
  std::int64_t shared_bytes = -1;  // static shared memory
  std::int64_t const_bytes = -1;
  std::int64_t stack_bytes = -1;
  std::int64_t spill_store_bytes = -1;
  std::int64_t spill_load_bytes = -1;
};

struct Diagnostic {
  enum class Severity { kError, kWarning, kNote };
  Severity severity = Severity::kError;
  std::string file;  // the user's file name
  int line = 0;
  std::string message;
};

// How one NVRTC compile runs: in a child process (kharness re-executed as `__compile_worker`)
// with these limits, a scrubbed environment and Landlock rules that let it read the toolkit's
// headers and libraries only and write nothing (src/compile/compile_sandbox.cpp). A compile over
// a limit is COMPILE_ERROR with CompileResult::limit set, never a stall.
struct CompileLimits {
  double timeout_seconds = 60;                     // wall clock, and CPU time, of one compile
  std::uint64_t address_space_bytes = 4ULL << 30;  // RLIMIT_AS of the compiler process
  // Where Landlock is unavailable: true refuses to compile (environment error, exit 3); false
  // compiles without it (the limits, the scrubbed environment and the rules still apply).
  bool require_landlock = true;
};
// The limits every command starts from: 60 s (KHARNESS_COMPILE_TIMEOUT, seconds, which
// --compile-timeout sets), 4 GiB, and Landlock required unless KHARNESS_ALLOW_UNSANDBOXED=1
// (which --allow-unsandboxed sets).
CompileLimits default_compile_limits();

// A CUTLASS release whose CuTe and CUTLASS headers solutions may include (`#include
// <cute/tensor.hpp>`, `<cutlass/arch/barrier.h>`). It is trusted like the toolkit: the rules
// allow names under its cute/ and cutlass/ folders, the compile sandbox lets NVRTC read those two
// folders (nothing else of it), and its version is part of the compile cache key and the verdict.
struct CutlassRoot {
  std::filesystem::path include_dir;  // holds cute/ and cutlass/version.h
  std::string version;                // "4.2.0", from cutlass/version.h; "?" when unreadable
  std::string origin;                 // how it was found: "KHARNESS_CUTLASS", a wheel
};
// `dir` as a CUTLASS root: the include folder itself, a CUTLASS checkout (dir/include), or a
// Python site-packages folder or an unpacked nvidia-cutlass wheel
// (dir/cutlass_library/source/include). Throws input_error naming `what` when none of these holds
// cutlass/version.h.
CutlassRoot cutlass_root_at(const std::filesystem::path& dir, const std::string& what);
// The CUTLASS root of this process: $KHARNESS_CUTLASS (which --cutlass sets; "none" means no
// root), else the headers of an nvidia-cutlass wheel installed in a Python site-packages folder
// ($VIRTUAL_ENV, $CONDA_PREFIX, $PYTHONUSERBASE or ~/.local, /usr/local/lib, /usr/lib; pip is
// never run). nullopt when there is none. Throws Error (exit 2) when KHARNESS_CUTLASS names a
// folder without CUTLASS headers.
std::optional<CutlassRoot> find_cutlass();
// Whether a source file of the solution includes a CuTe or CUTLASS header (`#include <cute/...>`
// or `<cutlass/...>`, angled or quoted): such a solution is compiled against the CUTLASS root.
bool includes_cutlass(const Solution& solution);
// What a CuTe solution needs where no CUTLASS root is found: how to provide one, in one line.
std::string cutlass_missing_hint();
// The folders of a root NVRTC may read in the compile sandbox: its cute/ and cutlass/.
std::vector<std::filesystem::path> cutlass_read_dirs(const CutlassRoot& root);

struct CompileOptions {
  std::string arch = "sm_90a";  // normalised: "sm_90a", "sm_100a", ...
  std::vector<std::string> extra_options;
  std::filesystem::path cuda_include_dir;  // the toolkit's include/; empty: the built-in guess
  // The CUTLASS root for solutions that include CuTe or CUTLASS headers; unset: find_cutlass().
  std::optional<CutlassRoot> cutlass;
  std::filesystem::path cache_dir;  // empty: no cache
  bool use_cache = true;
  bool line_info = true;
  CompileLimits limits = default_compile_limits();
};

struct CompileResult {
  Status status = Status::kPassed;        // kPassed, kCompileError or kRejected
  std::vector<RuleViolation> violations;  // why REJECTED
  std::vector<Diagnostic> diagnostics;    // compiler errors and warnings
  std::string log;                        // NVRTC log as printed, ptxas lines included
  std::string ptx;
  std::string cubin;                // bytes
  std::vector<KernelInfo> kernels;  // every .entry of the module
  std::string arch;
  std::string nvrtc_version;
  // The CUTLASS release the solution was compiled against; empty when it includes no CuTe or
  // CUTLASS header.
  std::string cutlass_version;
  std::string cutlass_include_dir;
  std::string cache_key;
  bool cache_hit = false;
  double seconds = 0.0;
  // Set when the compile was stopped at a CompileLimits limit (status kCompileError): "time"
  // (wall clock or CPU) or "memory" (the compiler died under its address-space limit).
  std::string limit;

  bool ok() const { return status == Status::kPassed; }
  const KernelInfo* find_kernel(std::string_view name) const;
};

// Runs the source rules, NVRTC, ptxas info and the interface checks. Never throws for a bad
// solution: the result's status says what happened. `definition`/`workloads` may be null
// (compile without an operator: the plan checks that need them are skipped).
CompileResult compile_solution(const Solution& solution, const Definition* definition,
                               const std::vector<Workload>* workloads,
                               const CompileOptions& options);

// "sm_90a", "90a", "sm90a", "compute_90a" -> "sm_90a". Throws Error (exit 2) listing the
// supported targets when NVRTC cannot build for it.
std::string normalize_arch(std::string_view arch);
std::vector<std::string> supported_archs();  // what this NVRTC can target, sm_XX[a|f]
std::string nvrtc_version();
std::filesystem::path default_cuda_include_dir();
std::filesystem::path
default_cache_dir();  // $KHARNESS_CACHE, else $XDG_CACHE_HOME/kharness, else ~/.cache/kharness
// The options every command compiles with: `arch`, and the default cache unless `use_cache` is
// false.
CompileOptions make_compile_options(const std::string& arch, bool use_cache);

// The `__compile_worker` process: a compile request on stdin, restricts itself (limits, Landlock),
// runs NVRTC, the result on stdout (compile_sandbox.cpp). Returns the exit status.
int compile_worker_main();

// Parsers, exposed for tests.
std::vector<KernelInfo> parse_ptx_entries(const std::string& ptx);
// The variables a module defines that a kernel could keep state in between launches, as the PTX
// spells them (mangled); `.extern` declarations are not definitions.
struct PtxState {
  // Module scope, global state space: `__device__` and `__managed__` variables, function-local
  // statics (which the compiler hoists to module scope).
  std::vector<std::string> globals;
  // Module scope, constant state space: `__constant__` variables, which a kernel can write
  // through their generic address.
  std::vector<std::string> constants;
  // `.global` (or `.const`) declared inside a function body, by inline PTX: ptxas renames them
  // ("$__cache__31"), so the PTX name does not resolve in the loaded module.
  std::vector<std::string> function_scope;
};
PtxState parse_ptx_state(const std::string& ptx);

// A data object of a cubin (ELF) in a section the module loads into device memory it keeps:
// .nv.global (zero-initialised), .nv.global.init, .nv.constant<N> (not the per-kernel parameter
// banks .nv.constant0.<kernel>, which every launch rewrites).
struct CubinSymbol {
  std::string name;
  std::string section;
  std::uint64_t size = 0;
  std::uint64_t offset = 0;  // where the object starts in its section (the symbol's value)
};
// Every such object of the symbol table (the authoritative list: it includes what inline PTX
// declared inside function bodies, under the name ptxas gave it), or nullopt when `cubin` is not a
// 64-bit little-endian ELF image whose tables lie within it.
std::optional<std::vector<CubinSymbol>> cubin_state_symbols(std::string_view cubin);
void apply_ptxas_info(const std::string& log, std::vector<KernelInfo>& kernels);
std::vector<Diagnostic> parse_nvrtc_diagnostics(const std::string& log);

// JSON of compile results, one form for the CLI, verdicts and the compile cache. Resource counts
// ptxas did not report are null.
std::string_view severity_name(Diagnostic::Severity severity);  // "error", "warning", "note"
nlohmann::json to_json(const Diagnostic& diagnostic);
nlohmann::json to_json(const KernelInfo& kernel);
KernelInfo kernel_from_json(const nlohmann::json& json);  // throws nlohmann::json::exception
nlohmann::json to_json(const CompileResult& result);      // includes the log

}  // namespace kharness
