// The compile stage: source rules, NVRTC, ptxas resource usage, PTX kernel signatures checked
// against the plan, and the compile cache (compile_cache.hpp).
//
// NVRTC invocation. The entry source is the translation unit, named as the solution names the
// file, so diagnostics read `kernel.cu(37): error: ...` with the user's line numbers (the
// leading /* kharness */ comment stays in the text). The other source files are handed to NVRTC
// as headers under their relative paths; `#include "toolkit.h"` is handed over as
// `#include <toolkit.h>` (see angle_toolkit_includes). Options, in order:
//   --gpu-architecture=sm_XX[a|f]  a real target, so there is a cubin
//   -std=c++17                     unless the plan or the caller gives a -std
//   --ptxas-options=-v             resource usage lines in the program log
//   -lineinfo                      when CompileOptions::line_info
//   -I<cuda>/include [-I<cuda>/include/cccl]   NVRTC has no include path of its own; CUDA 13
//                                  keeps libcu++ (cuda/barrier, cuda/pipeline, cuda/std/...,
//                                  also needed by cooperative_groups.h) under include/cccl
//   -I<cutlass root> -default-device   only for a solution that includes CuTe or CUTLASS
//                                  headers (cutlass.cpp finds the root)
//   CompileOptions::extra_options  from the person running kharness: trusted, not checked
//   plan.compile_options           from the solution: only the allow-list below
#include <fmt/format.h>
#include <nvrtc.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compile/compile_cache.hpp"
#include "compile/compile_internal.hpp"
#include "kharness/compile.hpp"
#include "kharness/error.hpp"
#include "kharness/text.hpp"

#ifndef KHARNESS_CUDA_INCLUDE_DIR
#define KHARNESS_CUDA_INCLUDE_DIR "/usr/local/cuda/include"
#endif

namespace kharness {
namespace fs = std::filesystem;

// Where a GPU is present, NVRTC hands cubin generation for that GPU's target to the driver, whose
// JIT compute cache (~/.nv/ComputeCache) then skips ptxas on a repeat compile — and with it the
// "ptxas info" resource lines we report (seen on the H200: registers "?" for sm_90a only, on the
// second compile). kharness has its own compile cache, so the driver's is switched off for the
// process. The variable is read when the driver initialises, hence a static initialiser: it runs
// before main() and before anything can call cuInit.
namespace {
const bool kDriverJitCacheDisabled = [] {
  ::setenv("CUDA_CACHE_DISABLE", "1", 1);
  return true;
}();
}  // namespace

const KernelInfo* CompileResult::find_kernel(std::string_view name) const {
  return match_kernel(name, kernels).kernel;
}

// Targets: every real architecture nvrtcGetSupportedArchs lists as sm_XX, plus the
// architecture-specific variant sm_XXa for XX >= 90 and the family variant sm_XXf for
// XX >= 100 (what NVRTC 13 accepts; sm_89a or sm_90f are refused by NVRTC). Queried once per
// process.
std::vector<std::string> supported_archs() {
  static const std::vector<std::string> archs = [] {
    int count = 0;
    std::vector<std::string> out;
    if (nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0) {
      return out;
    }
    std::vector<int> numbers(static_cast<std::size_t>(count));
    if (nvrtcGetSupportedArchs(numbers.data()) != NVRTC_SUCCESS) {
      return out;
    }
    std::sort(numbers.begin(), numbers.end());
    for (int n : numbers) {
      out.push_back(fmt::format("sm_{}", n));
      if (n >= 90) {
        out.push_back(fmt::format("sm_{}a", n));
      }
      if (n >= 100) {
        out.push_back(fmt::format("sm_{}f", n));
      }
    }
    return out;
  }();
  return archs;
}

std::string normalize_arch(std::string_view arch) {
  std::string text;
  for (char c : arch) {
    if (!std::isspace(static_cast<unsigned char>(c))) {
      text += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  std::string_view rest = text;
  for (std::string_view prefix : {"compute_", "compute", "sm_", "sm"}) {
    if (rest.substr(0, prefix.size()) == prefix) {
      rest.remove_prefix(prefix.size());
      break;
    }
  }
  std::string normal = "sm_" + std::string(rest);
  const auto archs = supported_archs();
  if (std::find(archs.begin(), archs.end(), normal) != archs.end()) {
    return normal;
  }
  bool well_formed = !rest.empty() && std::isdigit(static_cast<unsigned char>(rest.front()));
  throw input_error("--arch",
                    fmt::format("unknown target '{}' (supported: {})",
                                well_formed ? normal : std::string(arch), join(archs, ", ")));
}

std::string nvrtc_version() {
  int major = 0;
  int minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) {
    throw environment_error("NVRTC does not report its version; is libnvrtc installed?");
  }
  return fmt::format("{}.{}", major, minor);
}

namespace {

bool has_toolkit_headers(const fs::path& dir) {
  std::error_code ec;
  return !dir.empty() && fs::is_regular_file(dir / "cuda_fp16.h", ec);
}

std::vector<fs::path> build_time_include_dirs() {
  std::vector<fs::path> dirs;
  std::string_view list = KHARNESS_CUDA_INCLUDE_DIR;  // may be a CMake list
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t end = list.find(';', start);
    if (end == std::string_view::npos) {
      end = list.size();
    }
    if (end > start) {
      dirs.emplace_back(std::string(list.substr(start, end - start)));
    }
    start = end + 1;
  }
  return dirs;
}

// The include folders NVRTC searches: the toolkit's include/ and, where present, include/cccl.
std::vector<fs::path> toolkit_include_dirs(const fs::path& include_dir) {
  std::vector<fs::path> dirs = {include_dir};
  std::error_code ec;
  if (fs::is_directory(include_dir / "cccl", ec)) {
    dirs.push_back(include_dir / "cccl");
  }
  return dirs;
}

// Allowed solution compile options (plan.compile_options), one token each (-DNAME=1, not -D NAME):
//   -D<macro>[=v] --define-macro=  -U<macro> --undefine-macro=   macros
//   -std= --std=                                                 language dialect
//   --use_fast_math -ftz= -prec-div= -prec-sqrt= -fmad=          floating-point code generation
//   --maxrregcount= -dopt= --Ofast-compile= -Ofc= --extra-device-vectorization -restrict
//   -lineinfo --generate-line-info -G --device-debug             debug information
//   -w --disable-warnings -diag-suppress= -diag-error= -diag-warn=   diagnostics
//   --device-as-default-execution-space -default-device
// (each also in its other spelling, -x / --x, where NVRTC 13 accepts both; all verified to be
// accepted by NVRTC 13.0). An allowed option with a bad value is NVRTC's to refuse: COMPILE_ERROR.
// Refused: include paths (-I, --include-path), pre-included files (-include, --pre-include),
// the target (-arch, --gpu-architecture: kharness chooses it), relocatable code (-rdc, -dc,
// -ewp: nothing links it), raw ptxas options (-Xptxas, --ptxas-options), options that write files
// (-time, --fdevice-time-trace, --pch, --create-pch, --pch-dir), and anything not listed.
const std::vector<std::string_view>& allowed_flags() {
  static const std::vector<std::string_view> flags = {"--use_fast_math",
                                                      "-use_fast_math",
                                                      "--extra-device-vectorization",
                                                      "-extra-device-vectorization",
                                                      "-restrict",
                                                      "--restrict",
                                                      "-lineinfo",
                                                      "--generate-line-info",
                                                      "-G",
                                                      "--device-debug",
                                                      "-w",
                                                      "--disable-warnings",
                                                      "--device-as-default-execution-space",
                                                      "-default-device"};
  return flags;
}

const std::vector<std::string_view>& allowed_prefixes() {
  static const std::vector<std::string_view> prefixes = {"-D",
                                                         "--define-macro=",
                                                         "-U",
                                                         "--undefine-macro=",
                                                         "-std=",
                                                         "--std=",
                                                         "-ftz=",
                                                         "--ftz=",
                                                         "-prec-div=",
                                                         "--prec-div=",
                                                         "-prec-sqrt=",
                                                         "--prec-sqrt=",
                                                         "-fmad=",
                                                         "--fmad=",
                                                         "-maxrregcount=",
                                                         "--maxrregcount=",
                                                         "-dopt=",
                                                         "--dopt=",
                                                         "--Ofast-compile=",
                                                         "-Ofc=",
                                                         "-diag-suppress=",
                                                         "--diag-suppress=",
                                                         "-diag-error=",
                                                         "--diag-error=",
                                                         "-diag-warn=",
                                                         "--diag-warn="};
  return prefixes;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// "" when `option` is allowed, else why not.
std::string refuse_option(const std::string& option) {
  struct Refused {
    std::string_view prefix;
    std::string_view why;
  };
  static const Refused refused[] = {
      {"-I", "sets an include path"},
      {"--include-path", "sets an include path"},
      {"-isystem", "sets an include path"},
      {"-include", "pre-includes a file"},
      {"--pre-include", "pre-includes a file"},
      {"-arch", "sets the target; kharness chooses it (--arch)"},
      {"--gpu-architecture", "sets the target; kharness chooses it (--arch)"},
      {"-rdc", "relocatable device code is not linked"},
      {"--relocatable-device-code", "relocatable device code is not linked"},
      {"-dc", "relocatable device code is not linked"},
      {"-ewp", "relocatable device code is not linked"},
      {"--extensible-whole-program", "relocatable device code is not linked"},
      {"-Xptxas", "raw ptxas options are not allowed (use --maxrregcount)"},
      {"--ptxas-options", "raw ptxas options are not allowed (use --maxrregcount)"},
      {"-time", "writes files"},
      {"--time", "writes files"},
      {"--fdevice-time-trace", "writes files"},
      {"-fdevice-time-trace", "writes files"},
      {"--pch", "writes files"},
      {"-pch", "writes files"},
      {"--create-pch", "writes files"},
      {"--pch-dir", "writes files"},
      {"--use-pch", "reads files"},
  };
  // Allowed first: "-D" and "-U" are prefixes, the refusals below are not reached for them.
  if (std::find(allowed_flags().begin(), allowed_flags().end(), option) != allowed_flags().end()) {
    return {};
  }
  for (auto p : allowed_prefixes()) {
    if (starts_with(option, p) && option.size() > p.size()) {
      return {};
    }
  }
  for (const auto& r : refused) {
    if (starts_with(option, r.prefix)) {
      return std::string(r.why);
    }
  }
  std::vector<std::string> allowed;
  for (auto f : allowed_flags()) {
    if (starts_with(f, "--") || f == "-G" || f == "-w") {
      allowed.emplace_back(f);
    }
  }
  for (auto p : allowed_prefixes()) {
    if (starts_with(p, "--") || p == "-D" || p == "-U") {
      allowed.push_back(std::string(p) + "...");
    }
  }
  return fmt::format("is not an allowed compile option (allowed: {})", join(allowed, " "));
}

bool gives_std(const std::vector<std::string>& options) {
  return std::any_of(options.begin(), options.end(), [](const std::string& o) {
    return starts_with(o, "-std=") || starts_with(o, "--std=") || o == "-std" || o == "--std";
  });
}

}  // namespace

NvrtcOutput nvrtc_compile(const std::string& entry_text, const std::string& entry_name,
                          const std::vector<std::pair<std::string, std::string>>& headers,
                          const std::vector<std::string>& options) {
  std::vector<const char*> header_texts;
  std::vector<const char*> header_names;
  for (const auto& [name, text] : headers) {
    header_names.push_back(name.c_str());
    header_texts.push_back(text.c_str());
  }
  nvrtcProgram program = nullptr;
  nvrtcResult created = nvrtcCreateProgram(&program, entry_text.c_str(), entry_name.c_str(),
                                           static_cast<int>(header_texts.size()),
                                           header_texts.data(), header_names.data());
  if (created != NVRTC_SUCCESS) {
    throw environment_error(
        fmt::format("NVRTC cannot create a program: {}", nvrtcGetErrorString(created)));
  }
  struct Destroy {
    nvrtcProgram* p;
    ~Destroy() { nvrtcDestroyProgram(p); }
  } destroy{&program};

  std::vector<const char*> argv;
  argv.reserve(options.size());
  for (const auto& o : options) {
    argv.push_back(o.c_str());
  }
  NvrtcOutput out;
  out.result = nvrtcCompileProgram(program, static_cast<int>(argv.size()), argv.data());
  std::size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) == NVRTC_SUCCESS && size > 1) {
    out.log.resize(size);
    nvrtcGetProgramLog(program, out.log.data());
    out.log.resize(size - 1);  // the terminating NUL
  }
  if (out.result == NVRTC_ERROR_BUILTIN_OPERATION_FAILURE) {
    throw environment_error(
        fmt::format("NVRTC failed: {} (is libnvrtc-builtins installed next to libnvrtc?)",
                    nvrtcGetErrorString(out.result)));
  }
  if (out.result != NVRTC_SUCCESS) {
    if (out.result != NVRTC_ERROR_COMPILATION) {
      if (!out.log.empty() && out.log.back() != '\n') {
        out.log += '\n';
      }
      out.log += fmt::format("nvrtc: error: {}\n", nvrtcGetErrorString(out.result));
    }
    return out;
  }
  if (nvrtcGetPTXSize(program, &size) == NVRTC_SUCCESS && size > 0) {
    out.ptx.resize(size);
    nvrtcGetPTX(program, out.ptx.data());
    while (!out.ptx.empty() && out.ptx.back() == '\0') {
      out.ptx.pop_back();
    }
  }
  nvrtcResult cubin = nvrtcGetCUBINSize(program, &size);
  if (cubin == NVRTC_SUCCESS && size > 0) {
    out.cubin.resize(size);
    cubin = nvrtcGetCUBIN(program, out.cubin.data());
  }
  if (cubin != NVRTC_SUCCESS || out.cubin.empty()) {
    out.result = cubin != NVRTC_SUCCESS ? cubin : NVRTC_ERROR_INTERNAL_ERROR;
    out.log += fmt::format("nvrtc: error: no cubin: {}\n", nvrtcGetErrorString(out.result));
  }
  return out;
}

namespace {

// The solution's entry file as the translation unit, its other files as in-memory headers; in
// the compile sandbox (compile_sandbox.cpp).
NvrtcOutput run_nvrtc(const Solution& solution, const std::vector<std::string>& options,
                      const std::vector<fs::path>& include_dirs, const CompileLimits& limits,
                      std::string& limit_hit) {
  std::vector<std::string> own;
  for (const auto& f : solution.sources) {
    own.push_back(f.path);
  }
  std::vector<std::pair<std::string, std::string>> headers;
  for (std::size_t i = 0; i < solution.sources.size(); ++i) {
    if (i != solution.entry) {
      headers.emplace_back(solution.sources[i].path,
                           angle_toolkit_includes(solution.sources[i].content, own));
    }
  }
  const SourceFile& entry = solution.entry_source();
  return sandboxed_nvrtc_compile(angle_toolkit_includes(entry.content, own), entry.path, headers,
                                 options, include_dirs, limits, limit_hit);
}

// "k.cu:1" -> {"k.cu", 1}; "dir/solution.json" -> {"dir/solution.json", 0}.
std::pair<std::string, int> split_where(const std::string& where) {
  auto colon = where.rfind(':');
  if (colon != std::string::npos && colon + 1 < where.size() &&
      std::all_of(where.begin() + static_cast<std::ptrdiff_t>(colon) + 1, where.end(),
                  [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; })) {
    return {where.substr(0, colon), std::atoi(where.c_str() + colon + 1)};
  }
  return {where, 0};
}

}  // namespace

fs::path default_cuda_include_dir() {
  // The build's toolkit first (its headers match the linked libnvrtc), then CUDA_HOME,
  // CUDA_PATH and /usr/local/cuda for a binary moved to another machine.
  std::vector<fs::path> candidates = build_time_include_dirs();
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* v = std::getenv(env); v != nullptr && *v != '\0') {
      candidates.push_back(fs::path(v) / "include");
    }
  }
  candidates.emplace_back("/usr/local/cuda/include");
  for (const auto& c : candidates) {
    if (has_toolkit_headers(c)) {
      return c;
    }
  }
  return candidates.front();
}

CompileOptions make_compile_options(const std::string& arch, bool use_cache) {
  CompileOptions options;
  options.arch = arch;
  options.use_cache = use_cache;
  options.cache_dir = default_cache_dir();
  return options;
}

fs::path default_cache_dir() {
  if (const char* v = std::getenv("KHARNESS_CACHE"); v != nullptr && *v != '\0') {
    return v;
  }
  if (const char* v = std::getenv("XDG_CACHE_HOME"); v != nullptr && *v != '\0') {
    return fs::path(v) / "kharness";
  }
  if (const char* v = std::getenv("HOME"); v != nullptr && *v != '\0') {
    return fs::path(v) / ".cache" / "kharness";
  }
  return {};
}

namespace {

// The rules a solution must meet before NVRTC sees it: its sources, its plan's compile options,
// and its plan against the definition and workloads (or, without a definition, that it launches
// something). Violations without a place of their own point at the plan.
std::vector<RuleViolation> check_solution_rules(const Solution& solution,
                                                const Definition* definition,
                                                const std::vector<Workload>* workloads,
                                                const SourceRules& source_rules) {
  std::vector<RuleViolation> violations = check_source_rules(solution, source_rules);
  auto [plan_file, plan_line] = split_where(solution.plan_source);
  for (const auto& option : solution.plan.compile_options) {
    std::string why = refuse_option(option);
    if (!why.empty()) {
      violations.push_back({"compile_option", fmt::format("compile option '{}' {}", option, why),
                            plan_file, plan_line});
    }
  }
  std::vector<RuleViolation> plan_violations;
  if (definition != nullptr) {
    static const std::vector<Workload> kNoWorkloads;
    plan_violations = check_plan_rules(solution.plan, *definition,
                                       workloads != nullptr ? *workloads : kNoWorkloads);
  } else if (solution.plan.launches.empty() && !solution.plan.has_variants()) {
    plan_violations.push_back({"no_launches", "the plan has no launches", "", 0});
  }
  for (auto& v : plan_violations) {
    if (v.file.empty()) {
      v.file = plan_file;
      v.line = plan_line;
    }
    violations.push_back(std::move(v));
  }
  return violations;
}

}  // namespace

CompileResult compile_solution(const Solution& solution, const Definition* definition,
                               const std::vector<Workload>* workloads,
                               const CompileOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  CompileResult result;
  auto finish = [&](Status status) {
    result.status = status;
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::move(result);
  };
  result.arch = normalize_arch(options.arch);  // throws Error for an unknown target
  result.nvrtc_version = nvrtc_version();

  const fs::path include_dir =
      options.cuda_include_dir.empty() ? default_cuda_include_dir() : options.cuda_include_dir;
  if (!has_toolkit_headers(include_dir)) {
    throw environment_error(fmt::format(
        "no CUDA toolkit headers in {} (cuda_fp16.h not found); set CUDA_HOME or the CUDA "
        "include folder option",
        include_dir.string()));
  }
  SourceRules source_rules;
  source_rules.system_include_dirs = toolkit_include_dirs(include_dir);
  // A solution that includes CuTe or CUTLASS headers compiles against the CUTLASS root (the rules
  // refuse such an include, saying how to provide one, where there is none).
  std::optional<CutlassRoot> cutlass;
  if (includes_cutlass(solution)) {
    cutlass = options.cutlass ? options.cutlass : find_cutlass();
    if (cutlass) {
      source_rules.cutlass_include_dir = cutlass->include_dir;
      result.cutlass_version = cutlass->version;
      result.cutlass_include_dir = cutlass->include_dir.string();
    }
  }

  // Rules first: a rejected solution never reaches NVRTC.
  result.violations = check_solution_rules(solution, definition, workloads, source_rules);
  if (!result.violations.empty()) {
    return finish(Status::kRejected);
  }
  auto [plan_file, plan_line] = split_where(solution.plan_source);

  std::vector<std::string> nvrtc_options = {"--gpu-architecture=" + result.arch};
  if (!gives_std(solution.plan.compile_options) && !gives_std(options.extra_options)) {
    nvrtc_options.emplace_back("-std=c++17");
  }
  nvrtc_options.emplace_back("--ptxas-options=-v");
  if (options.line_info) {
    nvrtc_options.emplace_back("-lineinfo");
  }
  for (const auto& dir : source_rules.system_include_dirs) {
    nvrtc_options.push_back("-I" + dir.string());
  }
  std::vector<fs::path> read_dirs = source_rules.system_include_dirs;
  if (cutlass) {
    // CUTLASS and CuTe declare many constexpr functions and lambdas without __device__, which
    // NVRTC takes for host code and refuses: -default-device makes them device code (CUTLASS
    // 4.2 under NVRTC 13.0 needs nothing else). NVRTC reads only cute/ and cutlass/ of the root.
    nvrtc_options.push_back("-I" + cutlass->include_dir.string());
    nvrtc_options.emplace_back("-default-device");
    for (auto& dir : cutlass_read_dirs(*cutlass)) read_dirs.push_back(std::move(dir));
  }
  nvrtc_options.insert(nvrtc_options.end(), options.extra_options.begin(),
                       options.extra_options.end());
  nvrtc_options.insert(nvrtc_options.end(), solution.plan.compile_options.begin(),
                       solution.plan.compile_options.end());

  // --no-cache (use_cache = false) bypasses the cache entirely: no read, no write.
  const bool use_cache = options.use_cache && !options.cache_dir.empty();
  result.cache_key = compile_cache::make_key(solution, nvrtc_options, result.arch,
                                             result.nvrtc_version, result.cutlass_version);
  std::optional<compile_cache::Entry> entry;
  if (use_cache) {
    entry = compile_cache::load(options.cache_dir, result.cache_key);
  }
  if (entry) {
    result.cache_hit = true;
    spdlog::debug("compile: cache hit {}", result.cache_key);
  } else {
    const auto nvrtc_start = std::chrono::steady_clock::now();
    std::string limit_hit;
    NvrtcOutput out = run_nvrtc(solution, nvrtc_options, read_dirs, options.limits, limit_hit);
    spdlog::debug(
        "compile: NVRTC {} for {} in {:.3f} s: {}", solution.entry_source().path, result.arch,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - nvrtc_start).count(),
        nvrtcGetErrorString(out.result));
    entry.emplace();
    entry->status = out.result == NVRTC_SUCCESS ? Status::kPassed : Status::kCompileError;
    entry->log = std::move(out.log);
    entry->diagnostics = parse_nvrtc_diagnostics(entry->log);
    if (entry->status == Status::kPassed) {
      entry->ptx = std::move(out.ptx);
      entry->cubin = std::move(out.cubin);
      entry->kernels = parse_ptx_entries(entry->ptx);
      apply_ptxas_info(entry->log, entry->kernels);
    }
    // A compile stopped at a limit is not cached: the limit, or the machine's load, may differ
    // next time.
    result.limit = limit_hit;
    // Outputs over their caps are not kept, in the cache either.
    const bool oversized = !check_output_rules(entry->ptx, entry->cubin).empty();
    if (use_cache && limit_hit.empty() && !oversized) {
      compile_cache::store(options.cache_dir, result.cache_key, *entry);
    }
  }
  result.log = std::move(entry->log);
  result.diagnostics = std::move(entry->diagnostics);
  result.ptx = std::move(entry->ptx);
  result.cubin = std::move(entry->cubin);
  result.kernels = std::move(entry->kernels);
  if (entry->status != Status::kPassed) {
    return finish(entry->status);
  }

  result.violations = check_output_rules(result.ptx, result.cubin);
  if (!result.violations.empty()) {
    // REJECTED with the sizes; the bulk itself is dropped, so that no archive stores it.
    for (auto& v : result.violations) v.file = solution.entry_source().path;
    result.ptx.clear();
    result.cubin.clear();
    result.kernels.clear();
    return finish(Status::kRejected);
  }
  result.violations = check_kernel_interface(solution.plan, definition, result.kernels);
  for (auto& v : check_ptx_rules(result.ptx)) {
    v.file = solution.entry_source().path;
    result.violations.push_back(std::move(v));
  }
  for (auto& v : result.violations) {
    if (v.file.empty()) {
      v.file = plan_file;
      v.line = plan_line;
    }
  }
  return finish(result.violations.empty() ? Status::kPassed : Status::kRejected);
}

}  // namespace kharness
