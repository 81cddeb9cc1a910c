#include "core/pool.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace kharness {

void run_pool(std::size_t items, std::size_t workers,
              const std::function<void(std::size_t, std::size_t)>& fn) {
  workers = std::max<std::size_t>(1, std::min(workers, items));
  if (workers == 1) {
    for (std::size_t i = 0; i < items; ++i) fn(i, 0);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first;
  std::mutex mutex;
  auto work = [&](std::size_t worker) {
    while (!failed.load()) {
      std::size_t item = next.fetch_add(1);
      if (item >= items) return;
      try {
        fn(item, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first) first = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < workers; ++w) threads.emplace_back(work, w);
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace kharness
