// Private to the compile stage: PTX helpers, how a plan's kernel name finds a PTX entry, and
// the include rewrite applied before NVRTC.
#pragma once

#include <nvrtc.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kharness/compile.hpp"

namespace kharness {

// What a compile may produce (rules.cpp): a few bytes of source must not make every candidate
// store tens of MB, nor a module ask the driver for a terabyte of static memory when it loads.
struct OutputLimits {
  std::size_t max_ptx_bytes = std::size_t{16} << 20;
  std::size_t max_cubin_bytes = std::size_t{16} << 20;
  std::uint64_t max_static_bytes = std::uint64_t{1} << 30;  // module-scope .global and .const
};
// output_size (PTX or cubin over its cap) and module_size (the static .global/.const variables
// the PTX declares, summed, over the cap), each naming the size.
std::vector<RuleViolation> check_output_rules(const std::string& ptx, const std::string& cubin,
                                              const OutputLimits& limits = {});
// The bytes of the module-scope .global and .const variables the PTX declares (saturating).
std::uint64_t ptx_static_bytes(const std::string& ptx);

// "_Z2tkILi4EEvPff" -> "tk<4>", "_ZN2ns4kernEPf" -> "ns::kern"; an extern "C" name as is.
std::string demangled_kernel_name(const std::string& mangled);
// Size in bytes of a PTX fundamental type ("u64", "f32", "b8", "f16x2"); 0 if unknown.
std::size_t ptx_type_size(std::string_view type);
// "ns::tk<4>" -> "ns::tk" (the trailing template argument list dropped).
std::string plain_kernel_name(const std::string& name);

struct KernelMatch {
  const KernelInfo* kernel = nullptr;        // set when exactly one kernel matches
  std::vector<const KernelInfo*> ambiguous;  // set when several match at the deciding step
};

// A plan names a kernel by, in order of preference:
//   1. its name (extern "C" name, or demangled name without parameters: "tk<4>", "ns::kern")
//      or its mangled PTX name;
//   2. the name without template arguments ("tk" for "tk<4>"), when only one kernel has it;
//   3. the unqualified name ("kern" for "ns::kern", "tk" for "ns::tk<4>"), when only one
//      kernel has it.
// The first step that finds anything decides: several matches there are ambiguous.
KernelMatch match_kernel(std::string_view name, const std::vector<KernelInfo>& kernels);

// The text NVRTC compiles for one solution file: `#include "X"` where X is not one of the
// solution's files (so, after the source rules, a toolkit header) becomes `#include <X>`, same
// length and same lines. NVRTC looks up "quoted" names in the folder of the program name on disk
// first (the user's path, relative to the working directory), where a stray cuda_fp16.h would
// shadow the toolkit's; <angled> names are only looked up on the include path. The solution's
// own files are in-memory NVRTC headers, which win over files on disk.
std::string angle_toolkit_includes(const std::string& content,
                                   const std::vector<std::string>& own_paths);

// One NVRTC compile: `entry_text` (named `entry_name` in diagnostics) with in-memory headers,
// and the log, PTX and cubin it produced. A failed compile is a value (result != NVRTC_SUCCESS,
// the log says why); an NVRTC that cannot work at all (no builtins library) throws
// environment_error. Shared by the compile stage and the harness's own kernels.
struct NvrtcOutput {
  nvrtcResult result = NVRTC_SUCCESS;
  std::string log;
  std::string ptx;
  std::string cubin;
};
NvrtcOutput nvrtc_compile(const std::string& entry_text, const std::string& entry_name,
                          const std::vector<std::pair<std::string, std::string>>& headers,
                          const std::vector<std::string>& options);

// nvrtc_compile in a sandboxed child process (compile_sandbox.cpp): the same output, or, when the
// child was stopped at a limit, a COMPILE_ERROR log saying which and `limit_hit` set ("time",
// "memory"). `read_dirs`: the toolkit's include folders the compiler may read. Throws
// environment_error where Landlock is required and unavailable.
NvrtcOutput sandboxed_nvrtc_compile(const std::string& entry_text, const std::string& entry_name,
                                    const std::vector<std::pair<std::string, std::string>>& headers,
                                    const std::vector<std::string>& options,
                                    const std::vector<std::filesystem::path>& read_dirs,
                                    const CompileLimits& limits, std::string& limit_hit);

}  // namespace kharness
