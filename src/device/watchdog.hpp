// A launch watchdog: a launch that never finishes is declared a hang within seconds, not when the
// whole worker's wall-clock limit runs out (docs/pipeline.md#worker).
//
// The host can only see a hang where it waits on the GPU, so every blocking driver entry point
// (cuStreamSynchronize, cuEventSynchronize, cuCtxSynchronize, the synchronous cuMemcpy*/cuMemset*,
// launches, which block when the launch queue is full, ...) is wrapped when the driver table loads
// (src/device/driver.cpp): the wrapper marks "this thread began waiting at T in CALL" and clears
// the mark when the call returns. A Watchdog thread polls the marks; a wait longer than its limit
// is a hang. An honest kernel whose launches take seconds each is never killed, because each
// launch's wait ends (and the clock restarts) when that launch finishes.
//
// What was running is an activity label: a phase ("reference", "candidate", ...) set by the stage
// that launches, and the plan launch in flight (index and kernel), noted by PlanLauncher.
//
// Nothing here needs a driver: the wrapper is a template over any function pointer, so tests wrap
// a function that sleeps (tests/watchdog_test.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>

namespace kharness::device {

// The exit status of a worker whose watchdog fired (after it wrote its `hang` line).
inline constexpr int kHangExitCode = 124;

// ---- waits ----

// Marks the calling thread as waiting on the GPU in `call` (a string literal) until destroyed.
// Nesting-safe (an inner wait does not restart the outer one's clock) and thread-safe (one mark per
// thread); costs a thread-local lookup, a clock read and two atomic stores. A thread beyond the
// first kMaxWaitingThreads that ever wait at the same time goes unwatched.
class WaitScope {
 public:
  explicit WaitScope(const char* call);
  ~WaitScope();
  WaitScope(const WaitScope&) = delete;  // marks exactly one wait
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  void* slot_;
};

inline constexpr int kMaxWaitingThreads = 64;

// The longest wait in progress, over all threads.
struct WaitInProgress {
  bool waiting = false;
  double seconds = 0;          // how long it has lasted
  const char* call = nullptr;  // "cuStreamSynchronize"
};
WaitInProgress longest_wait();

// `Watched<kName, R, A...>::call` calls `real` inside a WaitScope named kName. watch<kName>(fn)
// replaces a function pointer by its watched version (a null pointer stays null). Each (name,
// signature) pair has its own `real`, so watch a given name once per process.
template <const char* Name, typename R, typename... A>
struct Watched {
  static inline R (*real)(A...) = nullptr;
  static R call(A... args) {
    WaitScope scope(Name);
    return real(args...);
  }
};

template <const char* Name, typename R, typename... A>
void watch(R (*&fn)(A...)) {
  using W = Watched<Name, R, A...>;
  if (fn == nullptr || fn == &W::call) return;
  W::real = fn;
  fn = &W::call;
}

// ---- what was running ----

// The current activity phase, a string literal ("reference", "candidate", "timing"), until
// destroyed; then the previous phase again. Clears the noted launch both ways.
class ActivityPhase {
 public:
  explicit ActivityPhase(const char* phase);
  ~ActivityPhase();
  ActivityPhase(const ActivityPhase&) = delete;  // restores exactly once
  ActivityPhase& operator=(const ActivityPhase&) = delete;

 private:
  const char* previous_;
};

// Notes the plan launch about to run: its index and kernel (copied, truncated to 127 bytes; no
// allocation).
void note_launch(int index, std::string_view kernel);

// "candidate: launch 0 (kernel rmsnorm_kernel)", "reference", "" when nothing was set.
std::string activity_label();

// ---- the watchdog ----

struct Hang {
  double seconds = 0;        // how long the wait had lasted when it was declared a hang
  double limit_seconds = 0;  // the watchdog's limit
  std::string call;          // the blocking driver call
  std::string label;         // activity_label() at that moment
};

// {"event": "hang", "seconds", "limit_seconds", "call", "label"}: the worker protocol line.
nlohmann::json to_json(const Hang& hang);

// Polls longest_wait() every `poll` on a thread of its own; the first wait longer than
// `limit_seconds` calls `on_hang` once (on that thread) and the watchdog stops. A worker's on_hang
// reports and ends the process (_exit): the hung call never returns.
class Watchdog {
 public:
  Watchdog(double limit_seconds, std::function<void(const Hang&)> on_hang,
           std::chrono::milliseconds poll = std::chrono::milliseconds(100));
  ~Watchdog();                         // stops and joins the thread
  Watchdog(const Watchdog&) = delete;  // owns a thread
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void run();
  double limit_seconds_;
  std::function<void(const Hang&)> on_hang_;
  std::chrono::milliseconds poll_;
  std::mutex mutex_;  // guards stop_
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kharness::device
