#include "verify/sampling_sets.hpp"

#include <fmt/format.h>

#include <chrono>
#include <map>
#include <string>

#include "device/driver.hpp"
#include "device/watchdog.hpp"
#include "verify/precedence.hpp"

namespace kharness::verify {

std::optional<Failure> SamplingSets::sample_more(const Workload& w, const LaunchPlan& plan,
                                                 std::uint64_t seed, std::uint64_t sets,
                                                 device::PlanLauncher& launcher,
                                                 SamplingDraws& draws, bool& context_lost,
                                                 CUstream s) {
  const device::Driver& d = device::Driver::instance();
  static const HostJudge::ComparePhases kPhases{"sampling_sets.download_inputs",
                                                "sampling_sets.placement"};
  PhaseClock& phases = c_.phases;
  for (std::uint64_t set = 1; set <= sets; ++set) {
    const std::string which = fmt::format("sampling input set {} of the trial", set);
    auto t0 = std::chrono::steady_clock::now();
    TrialBuffers b;
    inputs_.make_inputs(w, splitmix(seed ^ splitmix(0x5a3d9e1b00000000ull + set)), b, s);
    d.check(d.cuStreamSynchronize(s), "cuStreamSynchronize");
    phases.add("sampling_sets.inputs", t0);
    t0 = std::chrono::steady_clock::now();
    std::map<std::string, std::uint64_t> checksums;
    for (auto& [name, buf] : b.inputs)
      checksums[name] = c_.kernels.checksum(buf->data(), buf->bytes(), s);
    phases.add("sampling_sets.checksums", t0);
    t0 = std::chrono::steady_clock::now();
    const IterationPoison poison = trial_poison(c_.def, seed + 2 + set);
    inputs_.make_outputs(b, plan, s, &poison);
    c_.kernels.scrub_shared(static_cast<std::uint32_t>(splitmix(seed + 2 + set)), s);
    device::LaunchOutcome o = [&] {
      device::ActivityPhase launching("candidate (sampling input set)");
      return launcher.launch(b.env, s, true);
    }();
    phases.add("sampling_sets.launch", t0);
    if (!o.ok) {
      context_lost = o.sticky;
      return launch_failure(o, "candidate (" + which + ")");
    }
    inputs_.normalise_poison(b, poison, s);
    TrialResult result;
    t0 = std::chrono::steady_clock::now();
    std::optional<Failure> failure = inputs_.check_memory(b, checksums, s);
    phases.add("sampling_sets.memory_check", t0);
    if (!failure) {
      t0 = std::chrono::steady_clock::now();
      host_.download_outputs(b, host_.got);
      phases.add("sampling_sets.download_outputs", t0);
      // `got` stands in for the reference's outputs too (their sizes; no values are read).
      failure = host_.check_outputs(b, host_.got, host_.got, result, &draws, &host_.sampling_inputs,
                                    &kPhases);
    }
    if (failure) {
      failure->evidence["sampling_input_set"] = set;
      failure->message = "on " + which + ": " + failure->message;
      return failure;
    }
    t0 = std::chrono::steady_clock::now();
    b.inputs.clear();
    b.outputs.clear();
    b.workspace.reset();
    phases.add("sampling_sets.release", t0);
  }
  d.check(d.cuStreamSynchronize(s), "cuStreamSynchronize");
  return std::nullopt;
}

void SamplingSets::judge(WorkloadVerdict& workload, const SamplingDraws& draws) {
  if (workload.status != Status::kPassed) return;
  const auto t0 = std::chrono::steady_clock::now();
  const SamplingJudgement j = draws.judge();
  c_.phases.add("sampling_test", t0);
  if (auto f = sampling_failure(c_.def.outputs.at(0).name, j)) add_sampling_failure(workload, *f);
}

}  // namespace kharness::verify
