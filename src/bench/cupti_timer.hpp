// GPU time of timed iterations from CUPTI activity records (docs/timing.md#cupti): every kernel,
// memcpy and memset that the work between begin(id) and end() produces, on any stream; an
// iteration's time is its last record's end minus its first record's start. Work outside begin/end
// (the L2 flush, the output checks) is ignored.
//
// How records are attributed: begin(id) pushes `id` as a CUPTI external correlation id (kind
// CUSTOM0) on the calling thread, so every CUDA API call made until end() yields an
// EXTERNAL_CORRELATION record {externalId = id, correlationId = the call's}; the kernel, memcpy and
// memset records carry the correlationId of the call that launched them. Records arrive on CUPTI's
// worker thread, in any order and split across buffers; they are only gathered there and joined in
// collect().
//
// Usage (one CuptiTimer per process at a time: CUPTI's activity callbacks are process-wide):
//   bench::CuptiTimer timer;                 // throws environment_error (exit 3) if CUPTI cannot
//   start for (id ...) { flush_l2(s); timer.begin(id); launch(s); timer.end(); }
//   stream.synchronize();
//   for (auto& [id, span] : timer.collect()) use(span.seconds(), span.signature);
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace kharness::bench {

// One kernel of an iteration, as CUPTI's record gives it.
struct KernelRecord {
  std::string name;  // mangled
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  // The shared-memory carveout the driver chose for the launch (bytes per SM; Nsight Compute's
  // launch__shared_mem_config_size), which bounds the blocks that shared memory lets in.
  std::uint32_t shared_memory_executed = 0;
};

struct IterationSpan {
  std::uint64_t start_ns = 0;  // first start over the iteration's records (CUPTI clock, ns)
  std::uint64_t end_ns = 0;    // last end
  int kernels = 0;
  int memcpys = 0;
  int memsets = 0;
  // The iteration's kernel names (as CUPTI gives them, mangled), sorted, joined by ','. A label
  // only: CUPTI names a kernel by its function handle, and a handle freed by a module unload and
  // reused by a later module's function keeps the old function's name (seen on CUDA 13: a
  // candidate's second kernel named after the reference, whose module had been unloaded).
  std::string signature;
  // The iteration's kernel launch shapes ("GXxGYxGZ/BXxBYxBZ"), sorted, joined by ','. Stable
  // across module reloads: what iterations of one solution must agree on.
  std::string shapes;
  std::vector<KernelRecord> kernel_records;  // in start order

  // end - start in seconds; 0 for an iteration with no GPU work.
  double seconds() const;
};

class CuptiTimer {
 public:
  static constexpr std::size_t kDefaultBufferBytes = std::size_t{8} << 20;

  // Enables CONCURRENT_KERNEL, MEMCPY, MEMSET and EXTERNAL_CORRELATION records (and DRIVER/RUNTIME,
  // whose API records the external correlation records hang on) and registers the buffer
  // callbacks; activity buffers of `buffer_bytes` are recycled through a small pool.
  // Throws kharness::environment_error (exit 3) without a driver or GPU, or with CUPTI's message
  // when CUPTI cannot start (another profiler holds it, ...); std::logic_error when another
  // CuptiTimer is alive.
  explicit CuptiTimer(std::size_t buffer_bytes = kDefaultBufferBytes);
  // Flushes, disables the activity kinds, detaches CUPTI (cuptiFinalize) and frees the buffers.
  ~CuptiTimer();
  CuptiTimer(const CuptiTimer&) = delete;
  CuptiTimer& operator=(const CuptiTimer&) = delete;
  CuptiTimer(CuptiTimer&&) = delete;
  CuptiTimer& operator=(CuptiTimer&&) = delete;

  // Attributes the CUDA work this thread issues until end() to `iteration`. Not nestable:
  // std::logic_error for begin without end (or end without begin).
  void begin(std::uint64_t iteration);
  void end();

  // Synchronises the current context (if any), flushes CUPTI's buffers (forced), and returns the
  // span of every iteration begun or seen in records since the last collect, by id (an iteration
  // that produced no GPU work has an empty span). Records outside any begin/end are ignored.
  // Throws std::runtime_error when CUPTI dropped records (buffers not delivered in time) or a
  // record of an iteration has no timestamps; the gathered records are discarded either way.
  std::map<std::uint64_t, IterationSpan> collect();
  // Forgets everything since the last collect (an iteration left open by an exception too), so
  // that a timer shared by several measurements starts each one clean.
  void discard();

 private:
  bool open_ = false;
  std::set<std::uint64_t> begun_;
};

namespace detail {

// What collect() keeps of one kernel, memcpy or memset record.
struct GpuRecord {
  enum class Kind { kKernel, kMemcpy, kMemset };
  Kind kind = Kind::kKernel;
  std::uint32_t correlation_id = 0;
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::string name;                          // kernels only
  std::uint32_t shared_memory_executed = 0;  // kernels only
  std::string shape;                         // kernels only: "GXxGYxGZ/BXxBYxBZ" (grid/block)
};

// The records gathered between two collects, joined into spans. Pure (no CUPTI): the order of
// add_* calls does not matter.
class RecordJoin {
 public:
  void add_correlation(std::uint32_t correlation_id, std::uint64_t external_id);
  void add_record(GpuRecord record);
  void add_dropped(std::size_t n) { dropped_ += n; }
  void add_unreadable() { ++unreadable_; }
  bool empty() const {
    return correlation_.empty() && records_.empty() && dropped_ == 0 && unreadable_ == 0;
  }

  // Spans of every iteration in `begun` or named by a correlation record. Throws
  // std::runtime_error for dropped or unreadable records, or a record of an iteration without
  // timestamps (start and end 0, or end before start).
  std::map<std::uint64_t, IterationSpan> join(const std::set<std::uint64_t>& begun) const;

 private:
  std::unordered_map<std::uint32_t, std::uint64_t> correlation_;  // correlationId -> iteration
  std::vector<GpuRecord> records_;
  std::size_t dropped_ = 0;
  std::size_t unreadable_ = 0;
};

}  // namespace detail
}  // namespace kharness::bench
