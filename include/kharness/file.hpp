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

// Does `path`, every symlink resolved, name something inside folder `dir` (also resolved)?
// False for a symlink that points out of it or a path that does not resolve.
bool resolves_inside(const std::filesystem::path& path, const std::filesystem::path& dir);

}  // namespace kharness
