#include "bench/cupti_timer.hpp"

#include <cupti.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "device/driver.hpp"
#include "kharness/error.hpp"

namespace kharness::bench {

double IterationSpan::seconds() const {
  if (end_ns <= start_ns) return 0.0;
  return static_cast<double>(end_ns - start_ns) * 1e-9;
}

// ---------------------------------------------------------------------------------------------
// detail::RecordJoin

namespace detail {

void RecordJoin::add_correlation(std::uint32_t correlation_id, std::uint64_t external_id) {
  auto [it, inserted] = correlation_.emplace(correlation_id, external_id);
  if (!inserted && it->second != external_id) {
    // One API call inside nested pushes of the same kind: the innermost id wins. begin() does not
    // nest, so this is someone else's push; keep the first and say so.
    spdlog::debug("cupti: correlation {} tagged with iterations {} and {}; keeping {}",
                  correlation_id, it->second, external_id, it->second);
  }
}

void RecordJoin::add_record(GpuRecord record) { records_.push_back(std::move(record)); }

std::map<std::uint64_t, IterationSpan> RecordJoin::join(
    const std::set<std::uint64_t>& begun) const {
  if (dropped_ > 0) {
    throw std::runtime_error(
        fmt::format("CUPTI dropped {} activity record(s): its buffers were not delivered in time; "
                    "timing is incomplete",
                    dropped_));
  }
  if (unreadable_ > 0) {
    throw std::runtime_error(
        fmt::format("CUPTI returned {} activity buffer(s) with unreadable records", unreadable_));
  }
  std::map<std::uint64_t, IterationSpan> spans;
  for (std::uint64_t id : begun) spans[id];
  for (const auto& [corr, id] : correlation_) spans[id];

  std::map<std::uint64_t, std::vector<const std::string*>> names;
  std::map<std::uint64_t, std::vector<const std::string*>> shapes;
  std::size_t ignored = 0;
  for (const GpuRecord& r : records_) {
    auto c = correlation_.find(r.correlation_id);
    if (c == correlation_.end()) {
      ++ignored;  // outside every begin/end (the L2 flush, uploads, checks)
      continue;
    }
    const std::uint64_t id = c->second;
    if ((r.start_ns == 0 && r.end_ns == 0) || r.end_ns < r.start_ns) {
      throw std::runtime_error(
          fmt::format("CUPTI has no timestamps for a {} of iteration {} (start {}, end {})",
                      r.kind == GpuRecord::Kind::kKernel   ? "kernel"
                      : r.kind == GpuRecord::Kind::kMemcpy ? "memcpy"
                                                           : "memset",
                      id, r.start_ns, r.end_ns));
    }
    IterationSpan& s = spans[id];
    const bool first = s.kernels + s.memcpys + s.memsets == 0;
    s.start_ns = first ? r.start_ns : std::min(s.start_ns, r.start_ns);
    s.end_ns = first ? r.end_ns : std::max(s.end_ns, r.end_ns);
    switch (r.kind) {
      case GpuRecord::Kind::kKernel:
        ++s.kernels;
        names[id].push_back(&r.name);
        shapes[id].push_back(&r.shape);
        s.kernel_records.push_back({r.name, r.start_ns, r.end_ns, r.shared_memory_executed});
        break;
      case GpuRecord::Kind::kMemcpy:
        ++s.memcpys;
        break;
      case GpuRecord::Kind::kMemset:
        ++s.memsets;
        break;
    }
  }
  auto sorted_list = [](std::vector<const std::string*>& list) {
    std::sort(list.begin(), list.end(),
              [](const std::string* a, const std::string* b) { return *a < *b; });
    std::string joined;
    for (const std::string* n : list) {
      if (!joined.empty()) joined += ',';
      joined += *n;
    }
    return joined;
  };
  for (auto& [id, list] : names) spans[id].signature = sorted_list(list);
  for (auto& [id, list] : shapes) spans[id].shapes = sorted_list(list);
  for (auto& [id, span] : spans) {
    std::stable_sort(
        span.kernel_records.begin(), span.kernel_records.end(),
        [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; });
  }
  spdlog::debug(
      "cupti: {} iteration(s) from {} correlation and {} GPU record(s); {} record(s) outside "
      "iterations",
      spans.size(), correlation_.size(), records_.size(), ignored);
  return spans;
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Process-wide state shared with CUPTI's callbacks (which run on CUPTI's worker thread, or on the
// thread inside cuptiActivityFlushAll).

namespace {

constexpr std::size_t kRecordAlignment = 8;  // ACTIVITY_RECORD_ALIGNMENT
constexpr std::size_t kMaxPooledBuffers = 4;

struct Shared {
  std::mutex mu;
  bool active = false;  // a CuptiTimer is alive: its records land in `records`
  std::size_t buffer_bytes = CuptiTimer::kDefaultBufferBytes;
  std::vector<std::uint8_t*> pool;  // empty buffers, each buffer_bytes long
  std::size_t outstanding = 0;      // buffers CUPTI holds
  detail::RecordJoin records;
};

// Leaked on purpose: CUPTI's worker thread may still call back while static destructors run.
Shared& shared() {
  static Shared* s = new Shared;
  return *s;
}

std::string cupti_message(CUptiResult r) {
  const char* text = nullptr;
  if (cuptiGetResultString(r, &text) != CUPTI_SUCCESS || text == nullptr)
    return fmt::format("CUptiResult {}", int(r));
  return text;
}

// The kinds a timer enables, in order. DRIVER and RUNTIME: CUPTI emits an EXTERNAL_CORRELATION
// record ahead of each driver/runtime API activity record (CUPTI's own external correlation sample
// enables RUNTIME "to provide correlation ids"); we read neither.
struct KindName {
  CUpti_ActivityKind kind;
  const char* name;
};
constexpr KindName kKinds[] = {
    {CUPTI_ACTIVITY_KIND_DRIVER, "DRIVER"},
    {CUPTI_ACTIVITY_KIND_RUNTIME, "RUNTIME"},
    {CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, "EXTERNAL_CORRELATION"},
    {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL"},
    {CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY"},
    {CUPTI_ACTIVITY_KIND_MEMSET, "MEMSET"},
};

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  Shared& s = shared();
  std::lock_guard<std::mutex> lock(s.mu);
  std::uint8_t* b = nullptr;
  if (!s.pool.empty()) {
    b = s.pool.back();
    s.pool.pop_back();
  } else {
    b = static_cast<std::uint8_t*>(std::aligned_alloc(kRecordAlignment, s.buffer_bytes));
  }
  *buffer = b;
  *size = b != nullptr ? s.buffer_bytes : 0;  // no buffer: CUPTI drops records, collect() says so
  *max_records = 0;
  if (b != nullptr) ++s.outstanding;
}

// Copies what collect() needs out of one buffer. Record layouts are those of this CUPTI's headers
// (CUDA 13: Kernel10, Memcpy6, Memset4); the fields read sit in the prefix every version shares.
void read_buffer(std::uint8_t* buffer, std::size_t valid, detail::RecordJoin& out) {
  CUpti_Activity* record = nullptr;
  for (;;) {
    const CUptiResult r = cuptiActivityGetNextRecord(buffer, valid, &record);
    if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
    if (r != CUPTI_SUCCESS) {
      spdlog::debug("cupti: cuptiActivityGetNextRecord: {}", cupti_message(r));
      out.add_unreadable();
      break;
    }
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
        if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0)
          out.add_correlation(e->correlationId, e->externalId);
        break;
      }
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        detail::GpuRecord g;
        g.kind = detail::GpuRecord::Kind::kKernel;
        g.correlation_id = k->correlationId;
        g.start_ns = k->start;
        g.end_ns = k->end;
        g.name = k->name != nullptr ? k->name : "?";
        g.shared_memory_executed = k->sharedMemoryExecuted;
        g.shape = fmt::format("{}x{}x{}/{}x{}x{}", k->gridX, k->gridY, k->gridZ, k->blockX,
                              k->blockY, k->blockZ);
        out.add_record(std::move(g));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        detail::GpuRecord g;
        g.kind = detail::GpuRecord::Kind::kMemcpy;
        g.correlation_id = m->correlationId;
        g.start_ns = m->start;
        g.end_ns = m->end;
        out.add_record(std::move(g));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        detail::GpuRecord g;
        g.kind = detail::GpuRecord::Kind::kMemset;
        g.correlation_id = m->correlationId;
        g.start_ns = m->start;
        g.end_ns = m->end;
        out.add_record(std::move(g));
        break;
      }
      default:
        break;  // DRIVER / RUNTIME API records
    }
  }
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t size,
                               std::size_t valid) {
  std::size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) != CUPTI_SUCCESS) dropped = 0;
  Shared& s = shared();
  // Held while reading: a buffer is parsed in well under a millisecond, and collect() swaps the
  // records out under the same lock.
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.active) {
    if (buffer != nullptr && valid > 0) read_buffer(buffer, valid, s.records);
    if (dropped > 0) s.records.add_dropped(dropped);
  }
  if (buffer == nullptr) return;
  if (s.outstanding > 0) --s.outstanding;
  if (s.active && size == s.buffer_bytes && s.pool.size() < kMaxPooledBuffers) {
    s.pool.push_back(buffer);
  } else {
    std::free(buffer);
  }
}

void disable_kinds() {
  for (const KindName& k : kKinds) cuptiActivityDisable(k.kind);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// CuptiTimer

CuptiTimer::CuptiTimer(std::size_t buffer_bytes) {
  device::Driver::instance().require();
  Shared& s = shared();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.active) throw std::logic_error("CuptiTimer: another CuptiTimer is alive in this process");
    s.active = true;
    s.buffer_bytes = std::max<std::size_t>(
        4096, (buffer_bytes + kRecordAlignment - 1) / kRecordAlignment * kRecordAlignment);
    s.records = detail::RecordJoin();
  }
  auto fail = [&](const char* call, CUptiResult r) {
    disable_kinds();
    std::lock_guard<std::mutex> lock(s.mu);
    s.active = false;
    s.records = detail::RecordJoin();
    return environment_error(fmt::format(
        "CUPTI cannot start ({}: {}); is another profiler attached?", call, cupti_message(r)));
  };
  CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (r != CUPTI_SUCCESS) throw fail("cuptiActivityRegisterCallbacks", r);
  for (const KindName& k : kKinds) {
    r = cuptiActivityEnable(k.kind);
    if (r != CUPTI_SUCCESS) throw fail(fmt::format("cuptiActivityEnable({})", k.name).c_str(), r);
  }
  std::uint32_t version = 0;
  cuptiGetVersion(&version);
  spdlog::debug("cupti: timer started (CUPTI API {} at run time, {} built against; {} KiB buffers)",
                version, CUPTI_API_VERSION, s.buffer_bytes / 1024);
}

CuptiTimer::~CuptiTimer() {
  if (open_)
    cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, nullptr);
  Shared& s = shared();
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  disable_kinds();
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.active = false;
    s.records = detail::RecordJoin();
  }
  // Detach so later CUDA calls pay no tracing cost and another profiler may attach; CUPTI
  // re-attaches on the next timer's first call. Buffers still held are freed when returned.
  const CUptiResult r = cuptiFinalize();
  if (r != CUPTI_SUCCESS) spdlog::debug("cupti: cuptiFinalize: {}", cupti_message(r));
  std::lock_guard<std::mutex> lock(s.mu);
  for (std::uint8_t* b : s.pool) std::free(b);
  s.pool.clear();
  if (s.outstanding > 0)
    spdlog::debug("cupti: {} activity buffer(s) still held by CUPTI at teardown", s.outstanding);
}

void CuptiTimer::begin(std::uint64_t iteration) {
  if (open_) throw std::logic_error("CuptiTimer::begin: the previous iteration was not ended");
  const CUptiResult r =
      cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, iteration);
  if (r != CUPTI_SUCCESS) {
    throw std::runtime_error("cuptiActivityPushExternalCorrelationId: " + cupti_message(r));
  }
  open_ = true;
  begun_.insert(iteration);
}

void CuptiTimer::end() {
  if (!open_) throw std::logic_error("CuptiTimer::end without begin");
  open_ = false;
  const CUptiResult r =
      cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, nullptr);
  if (r != CUPTI_SUCCESS)
    throw std::runtime_error("cuptiActivityPopExternalCorrelationId: " + cupti_message(r));
}

std::map<std::uint64_t, IterationSpan> CuptiTimer::collect() {
  const auto& cu = device::Driver::instance();
  CUcontext ctx = nullptr;
  if (cu.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx != nullptr) KHARNESS_CU(cu, cuCtxSynchronize);

  // Not under the lock: the completion callback runs on this thread inside the flush.
  const CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);

  Shared& s = shared();
  detail::RecordJoin records;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    std::swap(records, s.records);
  }
  std::set<std::uint64_t> begun;
  std::swap(begun, begun_);
  if (r != CUPTI_SUCCESS) throw std::runtime_error("cuptiActivityFlushAll: " + cupti_message(r));
  if (dropped > 0) records.add_dropped(dropped);
  return records.join(begun);
}

void CuptiTimer::discard() {
  if (!open_ && begun_.empty()) return;  // the last collect took everything (the usual case)
  if (open_) end();
  const auto& cu = device::Driver::instance();
  CUcontext ctx = nullptr;
  if (cu.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx != nullptr) KHARNESS_CU(cu, cuCtxSynchronize);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  Shared& s = shared();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.records = detail::RecordJoin();
  }
  begun_.clear();
}

}  // namespace kharness::bench
