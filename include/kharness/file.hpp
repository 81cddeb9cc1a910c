// Reading files kharness is given or finds — a submission's sources and plan, an operator folder's
// definitions and references, an archive's records — so that no such file can block, exhaust
// memory or reach outside where it belongs.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>

namespace kharness {

// The default size cap: far above any definition, source or archived cubin.
inline constexpr std::size_t kMaxInputFileBytes = std::size_t{256} << 20;

// The contents of `path`, which must be a regular file of at most `max_bytes`: opened with
// O_NONBLOCK (a FIFO cannot block the open), fstat-checked on the descriptor it reads (no race
// with a rename), read up to the cap. Throws input_error (exit 2) naming the file and why: no
// such file, a folder, a FIFO, socket or device, over the cap, unreadable.
std::string read_regular_file(const std::filesystem::path& path,
                              std::size_t max_bytes = kMaxInputFileBytes);
// The same without throwing: nullopt, and `why` when given.
std::optional<std::string> try_read_regular_file(const std::filesystem::path& path,
                                                 std::size_t max_bytes = kMaxInputFileBytes,
                                                 std::string* why = nullptr);

// Reading a path that something untrusted named (a submission's #include, an entry of a score
// folder, a file of an archive or run folder): `relative` is resolved beneath the folder `root`
// with no symlink anywhere on the way (a link inside the folder is refused too) and no "..":
// openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS where the kernel has
// it (Linux 5.6), else one openat(O_NOFOLLOW) per component. `root` itself is whoever runs
// kharness's (it may be a link). Then as read_regular_file: a regular file only, size-capped.
// Throws input_error naming root/relative and why ("is a symlink", "leads out of its folder").
std::string read_file_beneath(const std::filesystem::path& root,
                              const std::filesystem::path& relative,
                              std::size_t max_bytes = kMaxInputFileBytes);
std::optional<std::string> try_read_file_beneath(const std::filesystem::path& root,
                                                 const std::filesystem::path& relative,
                                                 std::size_t max_bytes = kMaxInputFileBytes,
                                                 std::string* why = nullptr);
// `path` whose last component is not followed (a symlink is refused): a file that a walk found,
// read without a window in which it could be swapped for a link.
std::optional<std::string> try_read_file_nofollow(const std::filesystem::path& path,
                                                  std::size_t max_bytes = kMaxInputFileBytes,
                                                  std::string* why = nullptr);

namespace file_testing {
// Tests: take the O_NOFOLLOW walk even where openat2 exists; does this kernel have openat2?
void use_component_walk(bool on);
bool kernel_has_openat2();
}  // namespace file_testing

}  // namespace kharness
