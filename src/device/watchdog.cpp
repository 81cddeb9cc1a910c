#include "device/watchdog.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>

namespace kharness::device {
namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One thread's wait mark. `since_ns` 0: not waiting (the steady clock never reads 0).
struct alignas(64) Slot {
  std::atomic<bool> owned{false};
  std::atomic<std::int64_t> since_ns{0};
  std::atomic<const char*> call{nullptr};
  int depth = 0;  // touched by the owning thread only
};

std::array<Slot, kMaxWaitingThreads>& slots() {
  static std::array<Slot, kMaxWaitingThreads> all;
  return all;
}

// A thread's claim on a slot, given back when the thread ends.
struct SlotClaim {
  Slot* slot = nullptr;
  ~SlotClaim() {
    if (slot == nullptr) return;
    slot->since_ns.store(0, std::memory_order_release);
    slot->depth = 0;
    slot->owned.store(false, std::memory_order_release);
  }
};

Slot* this_thread_slot() {
  thread_local SlotClaim claim;
  if (claim.slot != nullptr) return claim.slot;
  for (Slot& s : slots()) {
    bool expected = false;
    if (s.owned.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
      claim.slot = &s;
      return &s;
    }
  }
  return nullptr;  // more threads waiting at once than slots: this one goes unwatched
}

// The activity label's parts, behind a mutex (set from the launching thread, read by the watchdog).
struct Activity {
  std::mutex mutex;
  const char* phase = nullptr;
  int launch = -1;
  std::array<char, 128> kernel{};
};

Activity& activity() {
  static Activity a;
  return a;
}

}  // namespace

WaitScope::WaitScope(const char* call) : slot_(this_thread_slot()) {
  auto* s = static_cast<Slot*>(slot_);
  if (s == nullptr || s->depth++ > 0) return;  // nested: the outer wait's clock runs on
  s->call.store(call, std::memory_order_relaxed);
  s->since_ns.store(now_ns(), std::memory_order_release);
}

WaitScope::~WaitScope() {
  auto* s = static_cast<Slot*>(slot_);
  if (s == nullptr || --s->depth > 0) return;
  s->since_ns.store(0, std::memory_order_release);
}

WaitInProgress longest_wait() {
  WaitInProgress out;
  const std::int64_t now = now_ns();
  for (const Slot& s : slots()) {
    if (!s.owned.load(std::memory_order_acquire)) continue;
    const std::int64_t since = s.since_ns.load(std::memory_order_acquire);
    if (since == 0) continue;
    const double seconds = static_cast<double>(std::max<std::int64_t>(0, now - since)) * 1e-9;
    if (!out.waiting || seconds > out.seconds) {
      out.waiting = true;
      out.seconds = seconds;
      out.call = s.call.load(std::memory_order_relaxed);
    }
  }
  return out;
}

ActivityPhase::ActivityPhase(const char* phase) {
  Activity& a = activity();
  std::lock_guard<std::mutex> lock(a.mutex);
  previous_ = a.phase;
  a.phase = phase;
  a.launch = -1;
}

ActivityPhase::~ActivityPhase() {
  Activity& a = activity();
  std::lock_guard<std::mutex> lock(a.mutex);
  a.phase = previous_;
  a.launch = -1;
}

void note_launch(int index, std::string_view kernel) {
  Activity& a = activity();
  std::lock_guard<std::mutex> lock(a.mutex);
  a.launch = index;
  const std::size_t n = std::min(kernel.size(), a.kernel.size() - 1);
  std::memcpy(a.kernel.data(), kernel.data(), n);
  a.kernel[n] = '\0';
}

std::string activity_label() {
  Activity& a = activity();
  std::lock_guard<std::mutex> lock(a.mutex);
  std::string label = a.phase != nullptr ? a.phase : "";
  if (a.launch >= 0) {
    label += fmt::format("{}launch {} (kernel {})", label.empty() ? "" : ": ", a.launch,
                         a.kernel.data());
  }
  return label;
}

nlohmann::json to_json(const Hang& h) {
  return {{"event", "hang"},
          {"seconds", h.seconds},
          {"limit_seconds", h.limit_seconds},
          {"call", h.call},
          {"label", h.label}};
}

Watchdog::Watchdog(double limit_seconds, std::function<void(const Hang&)> on_hang,
                   std::chrono::milliseconds poll)
    : limit_seconds_(limit_seconds), on_hang_(std::move(on_hang)), poll_(poll) {
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (wake_.wait_for(lock, poll_, [this] { return stop_; })) return;
    }
    const WaitInProgress w = longest_wait();
    if (!w.waiting || w.seconds <= limit_seconds_) continue;
    Hang hang;
    hang.seconds = w.seconds;
    hang.limit_seconds = limit_seconds_;
    hang.call = w.call != nullptr ? w.call : "";
    hang.label = activity_label();
    on_hang_(hang);
    return;
  }
}

}  // namespace kharness::device
