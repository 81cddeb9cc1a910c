// The per-GPU lock (docs/pipeline.md#gpu-lock): a timed measurement never shares its GPU with
// another measurement, nor with a correctness check. Several workers may use one GPU (`--gpus 0,0`,
// or two kharness processes on one machine); each takes this lock on the GPU it runs on:
// - shared from before its context exists (correctness checks: any number at once),
// - exclusive from the timing phase to the end of the process, its context torn down included
//   (alone on the GPU; it waits for the checks in flight to end).
// So two processes' uses of one GPU overlap only when neither is timing. A profile (counters,
// replayed passes) takes it exclusive too.
//
// It is flock(2) on files in one folder, keyed by the GPU's UUID (`<dir>/<uuid>.lock`), so it
// holds across processes and users sharing the folder, and the kernel releases it when the holder
// dies (a worker killed by the launch watchdog or a timeout never leaves the GPU locked). The
// folder is $KHARNESS_LOCK_DIR, else `gpu-locks/` in the compile cache folder ($KHARNESS_CACHE,
// else ~/.cache/kharness): one per user by default; point every user's KHARNESS_LOCK_DIR at one
// folder (on a local file system: flock over NFS is not reliable) to share a GPU between users.
//
// A waiting exclusive holder goes first: every taker passes a second lock (`<uuid>.turnstile`)
// that a waiting exclusive taker holds until it has the GPU, so a stream of checks cannot starve
// a measurement.
#pragma once

#include <filesystem>
#include <string>

namespace kharness::device {

class GpuLock {
 public:
  enum class Mode { kShared, kExclusive };
  enum class Wait {
    kBlock,  // until held
    kTry,    // not at all: where another process holds or waits for it exclusive, busy()
  };
  // Blocks until held (kBlock). A folder or file that cannot be made is no lock at all (held()
  // false, and problem() says why): the caller records that and goes on.
  GpuLock(const std::filesystem::path& dir, const std::string& key, Mode mode,
          Wait wait = Wait::kBlock);
  ~GpuLock();
  GpuLock(const GpuLock&) = delete;  // owns the file descriptors that hold the lock
  GpuLock& operator=(const GpuLock&) = delete;

  bool held() const { return fd_ >= 0; }
  // Not held because another process holds it (or waits for it) in a conflicting mode (kTry).
  bool busy() const { return busy_; }
  const std::string& problem() const { return problem_; }
  double waited_seconds() const { return waited_; }

 private:
  int fd_ = -1;
  bool busy_ = false;
  std::string problem_;
  double waited_ = 0;
};

// $KHARNESS_LOCK_DIR, else default_cache_dir()/gpu-locks.
std::filesystem::path gpu_lock_dir();
// The key of this process's device 0 (the only GPU a pool's worker sees): its UUID, else
// "device-0".
std::string gpu_lock_key();

}  // namespace kharness::device
