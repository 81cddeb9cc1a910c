#include "device/gpu_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "device/driver.hpp"
#include "kharness/compile.hpp"

namespace kharness::device {
namespace {

// The key as a file name: letters, digits, '-' and '_' kept, anything else '_'.
std::string file_name(const std::string& key) {
  std::string out;
  for (char c : key) out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' ? c : '_';
  return out.empty() ? "gpu" : out;
}

int open_lock_file(const std::filesystem::path& path, std::string& problem) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) problem = path.string() + ": " + std::strerror(errno);
  return fd;
}

bool lock(int fd, int operation) {
  while (::flock(fd, operation) != 0) {
    if (errno != EINTR) return false;
  }
  return true;
}

}  // namespace

GpuLock::GpuLock(const std::filesystem::path& dir, const std::string& key, Mode mode, Wait wait) {
  auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string name = file_name(key);
  int turnstile = open_lock_file(dir / (name + ".turnstile"), problem_);
  if (turnstile < 0) return;
  int fd = open_lock_file(dir / (name + ".lock"), problem_);
  if (fd >= 0) {
    const int nb = wait == Wait::kTry ? LOCK_NB : 0;
    bool ok = lock(turnstile, LOCK_EX | nb) &&
              lock(fd, (mode == Mode::kExclusive ? LOCK_EX : LOCK_SH) | nb);
    if (ok) {
      fd_ = fd;
    } else {
      busy_ = nb != 0 && errno == EWOULDBLOCK;
      problem_ =
          busy_ ? "held by another process" : dir.string() + ": flock: " + std::strerror(errno);
      ::close(fd);
    }
  }
  ::close(turnstile);  // releases the turnstile
  waited_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

GpuLock::~GpuLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

std::filesystem::path gpu_lock_dir() {
  if (const char* v = std::getenv("KHARNESS_LOCK_DIR"); v != nullptr && *v != '\0') return v;
  return default_cache_dir() / "gpu-locks";
}

std::string gpu_lock_key() {
  const auto& cu = Driver::instance();
  CUdevice dev = 0;
  CUuuid uuid{};
  if (cu.available() && cu.cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
      cu.cuDeviceGetUuid(&uuid, dev) == CUDA_SUCCESS)
    return format_uuid(uuid);
  return "device-0";
}

}  // namespace kharness::device
