// What a child process that handles untrusted input may do: Linux Landlock file-system rules,
// resource limits, and the environment it starts with. The compile stage runs NVRTC in a child
// restricted by all three (src/compile/compile_sandbox.cpp); the GPU worker gets the scrubbed
// environment. Library code never prints.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace kharness::sandbox {

// Landlock on the running kernel: its ABI version (1 for Linux 5.13, 4 adds TCP rules, 6 adds
// signal and abstract-socket scoping), or 0 and why not (an old kernel, Landlock not among the
// active LSMs, a seccomp filter refusing the system call).
struct LandlockSupport {
  int abi = 0;
  std::string reason;  // set when abi == 0
  bool available() const { return abi > 0; }
};
LandlockSupport landlock_support();  // asked once per process

// File-system access a restricted process keeps. Everything else is refused by the kernel:
// opening any other file or folder for reading, writing anywhere not listed, creating, removing
// or renaming files, TCP bind/connect (ABI 4+), signals to and abstract UNIX sockets of
// processes outside the sandbox (ABI 6+).
struct FsRules {
  std::vector<std::filesystem::path> read;   // files or folders (recursively): read and execute
  std::vector<std::filesystem::path> write;  // files or folders: also write, create, remove
};

// Restricts the calling process and every process it starts, irreversibly (no_new_privs and
// landlock_restrict_self). A path that does not exist is skipped. Returns "" on success, else
// why not (the process is then not restricted).
std::string restrict_self(const FsRules& rules);

// The files the process has mapped (its executable and shared libraries, from /proc/self/maps):
// a restricted process keeps reading them (the loader maps them again for dlopen, the unwinder
// reads them).
std::vector<std::filesystem::path> mapped_files();

struct Limits {
  double cpu_seconds = 0;                 // RLIMIT_CPU (soft; SIGXCPU, then SIGKILL 2 s later)
  std::uint64_t address_space_bytes = 0;  // RLIMIT_AS; 0: unchanged
  std::uint64_t file_size_bytes = 0;      // RLIMIT_FSIZE: no file grows (pipes are not files)
  bool no_core = true;                    // RLIMIT_CORE 0
};
// Applies `limits` to the calling process. Returns "" on success, else why not.
std::string apply_limits(const Limits& limits);

// The environment a child gets instead of kharness's own: PATH, HOME, TMPDIR, LANG, LC_ALL,
// LC_CTYPE, LD_LIBRARY_PATH, XDG_CACHE_HOME and the CUDA_*, NVIDIA_* and KHARNESS_* variables
// (what the driver, the toolkit and kharness's own settings read), minus any whose name looks
// like a secret (KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL, AUTH). API keys never reach a child.
std::vector<std::pair<std::string, std::string>> scrubbed_environment();
// Is `name` a variable scrubbed_environment() passes on?
bool passes_scrub(const std::string& name);

}  // namespace kharness::sandbox
