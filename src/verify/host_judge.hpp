// Output judging on the host (docs/correctness.md#comparison): the candidate's outputs downloaded
// into pinned copies and compared with the reference's by the definition's comparator (the
// top-k set and sampling comparators always; the elementwise one where KHARNESS_HOST_COMPARE=1
// forces it, or in the timing stage's host-checked iterations), and the determinism rerun's
// outputs held to the reference and to the first run (docs/correctness.md#determinism).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "verify/sampling_compare.hpp"
#include "verify/trial.hpp"

namespace kharness::verify {

class HostJudge {
 public:
  explicit HostJudge(TrialContext& context) : c_(context) {}
  HostJudge(const HostJudge&) = delete;  // owns pinned memory
  HostJudge& operator=(const HostJudge&) = delete;

  // Every output of `b`, into `got` (one copy per output).
  void download_outputs(const TrialBuffers& b, std::vector<HostBytes>& got) const;

  // What a comparator may read: the definition, the axes and (on first use, into `inputs`) the
  // set's inputs. With `fresh`, `inputs` may hold another input set's copies (reused for their
  // pinned memory): a name not in `fresh` is downloaded again, then added to it.
  CompareContext compare_context(const TrialBuffers& b, std::map<std::string, HostBytes>& inputs,
                                 std::set<std::string>* fresh = nullptr) const;

  // The phases the time of check_outputs goes to: the comparators' and, for the sampling
  // comparator, the download of the inputs it reads (every one: probs, top_k, top_p), done first
  // rather than on its first read.
  struct ComparePhases {
    const char* inputs;
    const char* compare;
  };
  // Outputs against the reference, in output order: each output's comparison goes into `trial`
  // (judge_output), and the first failure is returned. The sampling comparator pools the draws
  // into `draws` (their support is checked here); without it, they are held to the support only:
  // a rerun's or a timed iteration's draws are not tested for their distribution again, which
  // would spend the false-failure budget (sampling_compare.hpp). `reuse` (optional): host copies
  // of an earlier input set's inputs, whose memory is reused. `phases` (optional): where the time
  // goes.
  std::optional<Failure> check_outputs(const TrialBuffers& b,
                                       const std::vector<HostBytes>& expected,
                                       const std::vector<HostBytes>& got, TrialResult& trial,
                                       SamplingDraws* draws = nullptr,
                                       std::map<std::string, HostBytes>* reuse = nullptr,
                                       const ComparePhases* phases = nullptr);

  // The determinism rerun, after its launch and its memory rules: its outputs downloaded and
  // judged by judge_rerun (precedence.hpp) against `got` (the first run's) and `expected` (the
  // reference's): bitwise equal outputs pass; from the first that differs, the rerun is held to
  // the reference and each differing output to the first run within tolerance (a sampler's
  // rerun: its support only; the pool has the first run's draws).
  std::optional<Failure> judge_rerun(const TrialBuffers& b, const std::vector<HostBytes>& expected,
                                     const std::vector<HostBytes>& got, TrialResult& trial);

  // Pinned copies, reused across trials: the reference's outputs, the candidate's (a trial's and
  // each sampling set's), the rerun's, and the sampling sets' inputs (hundreds of MiB of
  // probabilities: pinning that much afresh every trial would cost more than the copy).
  std::vector<HostBytes> expected, got, again;
  std::map<std::string, HostBytes> sampling_inputs;

 private:
  TrialContext& c_;
};

}  // namespace kharness::verify
