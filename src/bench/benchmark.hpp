// The timing stage, GPU side (runs in the worker): times a solution's launches per workload with
// CUPTI activity records (or CUDA events, for comparison), L2 flushed before every iteration and
// persisting L2 off; the operator's baseline is timed in the same loop, interleaved (A B, B A,
// ...), so clock drift cancels (docs/timing.md#interleaving). Every iteration, timed or warmup, is
// a checked one (docs/correctness.md#checked-iterations): outside the timed span its outputs get a
// poison that changes every iteration and its workspace NaN bytes, the module's globals are reset
// to their loaded state, shared memory is overwritten, and afterwards its outputs are checked
// against the reference outputs of its input set (on the device, sealed; verify::TimedOutputs).
// Input sets (3 by default) are visited in a seeded random order; guards, inputs and sealed
// references are checked after every batch of a random length. A failure is the workload's verdict
// (stale_output naming the iteration).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kharness/bench.hpp"
#include "kharness/operators.hpp"
#include "kharness/verdict.hpp"
#include "verify/timed_outputs.hpp"

namespace kharness::bench {

// Times every selected workload (BenchOptions: kharness/bench.hpp); fills each WorkloadVerdict's
// `timing` and the verdict's `score`.
// A stale_output (or a timing error) turns the workload and the verdict into failures.
// `baseline` may be null (no speedup then).
void benchmark(const Operator& op, const verify::Compiled& reference,
               const verify::Compiled& candidate, const verify::Compiled* baseline,
               const verify::CheckOptions& check, const BenchOptions& options, Verdict& verdict);

// Rounds between two harvests (reads of the check records and of CUPTI's): a random length per
// batch, so that a kernel cannot time the harness's reads, in [kMinBatch, hi], where hi is
// kFirstMaxBatch until a round's duration is known, then as many rounds as take about
// kBatchSeconds (kMinBatch to kMaxBatch). A harvest costs milliseconds of host waits and CUPTI
// flushing (about 5.7 ms on an H200 for a 2.5 us kernel, more than 10 of its rounds), so fast
// kernels get long batches and slow ones short ones (little overshoot past the stopping
// criterion). `round_seconds` <= 0: not known yet; `random`: a draw of the timing loop's seeded
// generator.
inline constexpr std::size_t kMinBatch = 4;
inline constexpr std::size_t kFirstMaxBatch = 16;
inline constexpr std::size_t kMaxBatch = 48;
inline constexpr double kBatchSeconds = 0.03;
std::size_t batch_length(double round_seconds, std::uint64_t random);

// The adaptive protocol's warmup rounds: `max_rounds`, or fewer when the first round took
// `first_round_seconds` and that many rounds would pass `budget_seconds`; at least one (the first,
// already run) when max_rounds > 0.
int warmup_rounds(int max_rounds, double budget_seconds, double first_round_seconds);

}  // namespace kharness::bench
