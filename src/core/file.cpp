#include "kharness/file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <system_error>

#include "kharness/error.hpp"

namespace kharness {
namespace fs = std::filesystem;

namespace {

std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

std::string mib(std::size_t bytes) {
  return fmt::format("{:.3g} MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

std::optional<std::string> try_read_regular_file(const fs::path& path, std::size_t max_bytes,
                                                 std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<std::string> {
    if (why != nullptr) *why = std::move(reason);
    return std::nullopt;
  };
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) return fail("no such file");
    if (errno == ENXIO) return fail("is a FIFO or socket, not a regular file");
    return fail(fmt::format("cannot open: {}", std::strerror(errno)));
  }
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(fmt::format("cannot stat: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) {
    std::string kind = file_kind(st.st_mode);
    return fail(kind == "not a regular file" ? kind : "is " + kind + ", not a regular file");
  }
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    return fail(fmt::format("{} bytes; at most {} are read", st.st_size, mib(max_bytes)));
  }
  // Back to blocking reads (a regular file never blocks; O_NONBLOCK only guarded the open).
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string out;
  out.resize(static_cast<std::size_t>(st.st_size));
  std::size_t have = 0;
  while (true) {
    if (have == out.size()) {
      if (out.size() >= max_bytes + 1) break;
      out.resize(std::min(max_bytes + 1, out.size() + 65536));  // the file may have grown
    }
    ssize_t n = ::read(fd, out.data() + have, out.size() - have);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(fmt::format("read failed: {}", std::strerror(errno)));
    }
    if (n == 0) break;
    have += static_cast<std::size_t>(n);
  }
  if (have > max_bytes) return fail(fmt::format("over {}; at most that is read", mib(max_bytes)));
  out.resize(have);
  return out;
}

std::string read_regular_file(const fs::path& path, std::size_t max_bytes) {
  std::string why;
  std::optional<std::string> text = try_read_regular_file(path, max_bytes, &why);
  if (!text) throw input_error(path.string(), why);
  return std::move(*text);
}

bool resolves_inside(const fs::path& path, const fs::path& dir) {
  std::error_code ec;
  fs::path root = fs::canonical(dir, ec);
  if (ec) return false;
  fs::path target = fs::canonical(path, ec);
  if (ec) return false;
  auto r = root.begin();
  auto t = target.begin();
  for (; r != root.end(); ++r, ++t) {
    if (t == target.end() || *r != *t) return false;
  }
  return true;
}

}  // namespace kharness
