// Private to the compile stage: the content-addressed compile cache.
//
// Key: SHA-256 over a cache format version, the NVRTC version, the target arch, the final NVRTC
// option list (include folders included), every source with its path, which source is the
// entry, and the plan as written (its raw JSON dump). The definition and workloads are not part
// of the key: the plan and interface rules that depend on them are cheap and run again on every
// hit, so a cached entry holds only what NVRTC produced.
//
// Layout: <cache_dir>/<key[0:2]>/<key>/ with kernel.ptx, kernel.cubin (PASSED only),
// compile.log and result.json (status, diagnostics, kernels with resources and parameters, and
// SHA-256 sums of the other files). An entry is written into a temporary folder next to it and
// renamed into place, so a half-written entry is never read; an entry that does not parse or
// whose files do not match their sums is ignored (the caller recompiles and overwrites it).
// Only PASSED and COMPILE_ERROR outcomes are stored.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kharness/compile.hpp"

namespace kharness::compile_cache {

inline constexpr int kFormatVersion = 1;

struct Entry {
  Status status = Status::kPassed;  // kPassed or kCompileError
  std::string log;
  std::string ptx;
  std::string cubin;
  std::vector<Diagnostic> diagnostics;
  std::vector<KernelInfo> kernels;
};

// `cutlass_version`: the CUTLASS release a CuTe solution compiles against ("" for any other, whose
// key it leaves as it was): new headers under the same path are a new key.
std::string make_key(const Solution& solution, const std::vector<std::string>& options,
                     const std::string& arch, const std::string& nvrtc_version,
                     const std::string& cutlass_version = "");
std::filesystem::path entry_dir(const std::filesystem::path& cache_dir, const std::string& key);
// nullopt when missing or corrupt. Never throws.
std::optional<Entry> load(const std::filesystem::path& cache_dir, const std::string& key);
// false when the entry could not be written (the compile result stands). Never throws.
bool store(const std::filesystem::path& cache_dir, const std::string& key, const Entry& entry);

}  // namespace kharness::compile_cache
