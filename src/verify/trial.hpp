// What the jobs of a correctness trial share (docs/correctness.md#trials): host copies in pinned
// memory, device buffers fenced by guard zones, one input set's buffers, the seconds per phase,
// and TrialContext: the definition, the comparator and tolerance in force, and the harness kernels
// with their batch of device reads. The jobs hold a TrialContext: InputSets (input_sets.hpp),
// HostJudge (host_judge.hpp), SealedJudge (sealed_judge.hpp) and SamplingSets
// (sampling_sets.hpp); the trial loop that runs them is evaluate.cpp's, and TimedOutputs
// (timed_outputs.cpp) reuses the first two for the timing stage's checked iterations.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "device/driver.hpp"
#include "device/plan_launcher.hpp"
#include "kharness/definition.hpp"
#include "kharness/operators.hpp"
#include "kharness/verify.hpp"  // CheckOptions
#include "verify/compare.hpp"
#include "verify/evaluate.hpp"  // IterationPoison
#include "verify/harness_kernels.hpp"

namespace kharness::verify {

// Guard zones before and after every buffer: large enough to catch an off-by-a-row write, and a
// multiple of 256 so the data keeps cuMemAlloc's alignment.
inline constexpr std::size_t kGuardBytes = 64 * 1024;
inline const std::vector<std::uint8_t> kGuardPattern = {0xC3};
// NaN for every float type (f32, f16, bf16, fp8) and -1 for every integer: a kernel that assumes
// a zeroed workspace fails.
inline const std::vector<std::uint8_t> kWorkspacePoison = {0xFF};

double seconds_since(std::chrono::steady_clock::time_point t);

// Host copy of a tensor, in pinned memory: outputs are hundreds of MiB, and pinned copies run at
// the bus's speed where pageable ones fault in fresh pages every trial. Reused across trials (it
// only grows), and never zero-filled: the copy overwrites it.
class HostBytes {
 public:
  HostBytes() = default;
  HostBytes(HostBytes&& o) noexcept : data_(o.data_), size_(o.size_), capacity_(o.capacity_) {
    o.data_ = nullptr;
    o.size_ = o.capacity_ = 0;
  }
  HostBytes& operator=(HostBytes&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
    return *this;
  }
  HostBytes(const HostBytes&) = delete;  // owns pinned memory
  HostBytes& operator=(const HostBytes&) = delete;
  ~HostBytes();
  void resize(std::size_t n);
  std::uint8_t* data() { return data_; }
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;
};

// Seconds per phase, summed over trials.
class PhaseClock {
 public:
  void add(const std::string& phase, std::chrono::steady_clock::time_point since) {
    seconds_[phase] += seconds_since(since);
  }
  const std::map<std::string, double>& seconds() const { return seconds_; }

 private:
  std::map<std::string, double> seconds_;
};

// A device buffer fenced by guard zones of a known pattern.
class GuardedBuffer {
 public:
  GuardedBuffer(std::string name, std::size_t bytes)
      : name_(std::move(name)), bytes_(bytes), buffer_(bytes + 2 * kGuardBytes) {}
  CUdeviceptr data() const { return buffer_.ptr() + kGuardBytes; }
  std::size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }

  void fill_guards(const HarnessKernels& k, CUstream s) const;
  // Enqueues the reads of both guard zones on `reads`; returns their slots (before, after).
  std::pair<std::size_t, std::size_t> read_guards(HarnessKernels::ReadBatch& reads,
                                                  CUstream s) const;
  // The first changed guard byte (precedence.hpp's guard_damage), from the reads of read_guards.
  std::optional<std::int64_t> guard_damage(const HarnessKernels::ReadBatch& reads,
                                           std::pair<std::size_t, std::size_t> slots) const;
  void download(HostBytes& out) const;

 private:
  std::string name_;
  std::size_t bytes_;
  device::DeviceBuffer buffer_;
};

// Everything one input set allocates, released (and scrubbed where it matters) by its destructor
// order.
struct TrialBuffers {
  std::map<std::string, std::unique_ptr<GuardedBuffer>> inputs;
  std::map<std::string, std::unique_ptr<GuardedBuffer>> outputs;
  std::unique_ptr<GuardedBuffer> workspace;
  device::LaunchEnv env;
};

// Elements of tensor `t` under `axes`.
std::uint64_t element_count(const TensorSpec& t, const Bindings& axes);
// The index of `w` among the operator's workloads (its trial seeds mix it in).
std::size_t workload_index(const Operator& op, const Workload& w);
// The poison of a candidate's launch in a correctness trial (first run, rerun, each sampling set),
// from that launch's seed: drawn as timed iterations draw theirs (iteration_poison,
// docs/correctness.md#poison-and-guards: nothing tells a trial from a timed launch).
IterationPoison trial_poison(const Definition& definition, std::uint64_t seed);

// What every job of a trial reads: the definition, the tolerance in force and its comparator
// (checked to exist: input_error otherwise, as for a sampling comparator over more than one
// output), and the harness kernels, loaded in the current context, with the batch of device reads
// the memory rules and the device comparisons share, and the seconds per phase.
struct TrialContext {
  TrialContext(const Operator& op, const CheckOptions& options);
  TrialContext(const TrialContext&) = delete;  // the jobs hold references to it
  TrialContext& operator=(const TrialContext&) = delete;

  const Operator& op;
  const Definition& def;
  const Tolerance tolerance;
  const Comparator comparator;
  const bool sampling;     // the sampling comparator: draws pooled per workload
  HarnessKernels kernels;  // harness-internal kernels, loaded in the current context
  HarnessKernels::ReadBatch reads{kernels};
  PhaseClock phases;
};

}  // namespace kharness::verify
