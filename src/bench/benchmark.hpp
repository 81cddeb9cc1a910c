// The timing stage, GPU side (runs in the worker): times a solution's launches per workload with
// CUPTI activity records (or CUDA events, for comparison), L2 flushed before every iteration and
// persisting L2 off; the operator's baseline is timed in the same loop, interleaved (A B, B A,
// ...), so clock drift cancels. DESIGN §6. Every iteration, timed or warmup, is a checked one
// (DESIGN §5): outside the timed span its outputs get a poison that changes every iteration and
// its workspace NaN bytes, the module's globals are reset to their loaded state, shared memory is
// overwritten, and afterwards its outputs are checked against the reference outputs of its input
// set (on the device, sealed; verify::TimedOutputs). Input sets (3 by default) are visited in a
// seeded random order; guards, inputs and sealed references are checked after every batch of a
// random length. A failure is the workload's verdict (stale_output naming the iteration).
#pragma once

#include "kharness/bench.hpp"
#include "kharness/operators.hpp"
#include "kharness/verdict.hpp"
#include "verify/evaluate.hpp"

namespace kharness::bench {

// Times every selected workload (BenchOptions: kharness/bench.hpp); fills each WorkloadVerdict's
// `timing` and the verdict's `score`.
// A stale_output (or a timing error) turns the workload and the verdict into failures.
// `baseline` may be null (no speedup then).
void benchmark(const Operator& op, const verify::Compiled& reference,
               const verify::Compiled& candidate, const verify::Compiled* baseline,
               const verify::CheckOptions& check, const BenchOptions& options, Verdict& verdict);

// The adaptive protocol's warmup rounds: `max_rounds`, or fewer when the first round took
// `first_round_seconds` and that many rounds would pass `budget_seconds`; at least one (the first,
// already run) when max_rounds > 0.
int warmup_rounds(int max_rounds, double budget_seconds, double first_round_seconds);

}  // namespace kharness::bench
