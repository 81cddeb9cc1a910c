// Input sets (docs/correctness.md#fresh-inputs, docs/correctness.md#poison-and-guards): one set's
// inputs generated on the device from a seed (structured roles on the host; files read once and
// uploaded), its outputs and workspace poisoned and fenced by guard zones, and the memory rules'
// reads of them: guard zones intact, inputs unchanged. A correctness trial makes one set (and a
// sampling trial one more per sampling set); TimedOutputs keeps several and fills their inputs
// afresh before every timed iteration.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kharness/solution.hpp"
#include "verify/evaluate.hpp"  // IterationPoison
#include "verify/safetensors.hpp"
#include "verify/trial.hpp"

namespace kharness::verify {

class InputSets {
 public:
  explicit InputSets(TrialContext& context) : c_(context) {}
  InputSets(const InputSets&) = delete;  // holds the files it read
  InputSets& operator=(const InputSets&) = delete;

  // Inputs of one set: generated on the device from `seed`, or loaded from file. When `b` already
  // holds the buffers (a timed iteration's fresh inputs, docs/correctness.md#checked-iterations)
  // they are filled again in place, every generated tensor from the new seed; a tensor from a file
  // is left as it was loaded.
  void make_inputs(const Workload& w, std::uint64_t seed, TrialBuffers& b, CUstream s);
  // Outputs poisoned with `poison` (a candidate's: the timed iterations' distribution), or with
  // the fixed poison_element (the reference's); the workspace `plan` asks for, NaN bytes.
  void make_outputs(TrialBuffers& b, const LaunchPlan& plan, CUstream s,
                    const IterationPoison* poison = nullptr) const;
  // `poison` written over the outputs again, NaN bytes over the workspace.
  void poison(TrialBuffers& b, const IterationPoison& poison, CUstream s) const;
  // After a candidate's launch, what is left of `poison` becomes the fixed poison_element the
  // comparators (host and device) count as unwritten.
  void normalise_poison(TrialBuffers& b, const IterationPoison& poison, CUstream s) const;
  // The reference's outputs and workspace scrubbed: a candidate reading stale memory must not
  // find the reference's answers.
  void scrub_outputs(TrialBuffers& b, CUstream s) const;

  // The memory rules' reads of a set's buffers, enqueued on a ReadBatch so that one wait answers
  // all of them: both guard zones of every buffer (inputs, outputs, workspace) and, with
  // `inputs`, each input's checksum (the timing stage checks inputs per iteration instead).
  struct MemoryReads {
    std::vector<std::pair<const GuardedBuffer*, std::pair<std::size_t, std::size_t>>> guards;
    std::vector<std::pair<std::string, std::size_t>> inputs;  // name, checksum slot
  };
  MemoryReads read_memory(const TrialBuffers& b, HarnessKernels::ReadBatch& reads, CUstream s,
                          bool inputs = true) const;
  // Each input's checksum, enqueued on `reads`: (name, slot).
  static std::vector<std::pair<std::string, std::size_t>> read_checksums(
      const TrialBuffers& b, HarnessKernels::ReadBatch& reads, CUstream s);
  // The first broken rule among `r`'s reads (after reads.wait; precedence.hpp's memory_failure):
  // a guard, in buffer order, then an input whose checksum is not `checksums`'.
  static std::optional<Failure> memory_failure(
      const MemoryReads& r, const HarnessKernels::ReadBatch& reads,
      const std::map<std::string, std::uint64_t>& checksums);
  // read_memory and memory_failure with one wait on the context's reads.
  std::optional<Failure> check_memory(const TrialBuffers& b,
                                      const std::map<std::string, std::uint64_t>& checksums,
                                      CUstream s);

 private:
  void upload_safetensors(const TensorSpec& t, const WorkloadInput& in, std::uint64_t count,
                          GuardedBuffer& buf, CUstream s);

  TrialContext& c_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> safetensors_;
};

}  // namespace kharness::verify
