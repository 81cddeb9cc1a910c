// A pull queue over a fixed set of workers (docs/pipeline.md#pools-and-gpus): `score`, `check`,
// `validate` and `run` evaluate on one worker per entry of --gpus, each taking the next item as
// soon as it is free.
#pragma once

#include <cstddef>
#include <functional>

namespace kharness {

// Runs fn(item, worker) for every item in [0, items) on `workers` threads (worker in
// [0, workers)); a free worker takes the lowest item not yet taken. With one worker (or one item)
// everything runs on the calling thread, in order. The first exception stops the hand-out of
// further items and is rethrown once the items already taken have finished.
void run_pool(std::size_t items, std::size_t workers,
              const std::function<void(std::size_t item, std::size_t worker)>& fn);

}  // namespace kharness
