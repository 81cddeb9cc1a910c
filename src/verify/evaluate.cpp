#include "verify/evaluate.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "device/driver.hpp"
#include "device/plan_launcher.hpp"
#include "device/watchdog.hpp"
#include "kharness/error.hpp"
#include "kharness/numeric.hpp"
#include "verify/host_judge.hpp"
#include "verify/input_sets.hpp"
#include "verify/precedence.hpp"
#include "verify/sampling_compare.hpp"
#include "verify/sampling_sets.hpp"
#include "verify/sealed_judge.hpp"
#include "verify/trial.hpp"

namespace kharness::verify {
namespace {

using device::Driver;
using device::LaunchOutcome;
using device::Module;
using device::PlanLauncher;
using device::Stream;

// KHARNESS_HOST_COMPARE=1: elementwise outputs are downloaded and compared on the host (the
// path of the other comparators) instead of on the device. The verdicts are the same; the tests
// hold the two paths together with it (tests/gpu/check_test.cpp).
bool host_compare_forced() {
  const char* v = std::getenv("KHARNESS_HOST_COMPARE");
  return v != nullptr && std::string(v) == "1";
}

// The candidate's module, loaded afresh for a trial, and its launcher.
struct Candidate {
  std::unique_ptr<Module> module;
  std::unique_ptr<PlanLauncher> launcher;
};

// The correctness trial loop (docs/correctness.md#trials): every selected workload, several
// trials each, one trial a list of phases: fresh inputs, the reference (its outputs sealed on the
// device or downloaded), the inputs' checksums, the candidate's fresh module with poisoned
// outputs, its launch, then the judgement on the device (SealedJudge) or on the host (HostJudge),
// with the determinism rerun in the first trial and, for a sampler, more input sets
// (SamplingSets). Which failure a trial, a workload and the verdict report is precedence.hpp's.
class Evaluator {
 public:
  Evaluator(const Operator& op, const Compiled& reference, const Compiled& candidate,
            const CheckOptions& options)
      : op_(op),
        reference_(reference),
        candidate_(candidate),
        options_(options),
        device_compare_(op.definition.kharness.comparator == "elementwise" &&
                        !host_compare_forced()),
        context_(op, options),
        inputs_(context_),
        host_(context_),
        sealed_(context_, inputs_),
        sampling_(context_, inputs_, host_) {}

  Verdict run(const EvaluationSink& sink) {
    auto start = std::chrono::steady_clock::now();
    Verdict v;
    v.solution = candidate_.solution->name;
    v.source = candidate_.solution->origin.string();
    v.definition = context_.def.name;
    v.seed = options_.seed;
    auto selected = select_workloads(op_, options_);
    for (std::size_t i = 0; i < selected.size(); ++i) {
      const Workload& w = *selected[i];
      if (sink.started) sink.started(w.uuid);
      WorkloadVerdict wv = run_workload(w, workload_index(op_, w));
      if (sink.finished) sink.finished(wv);
      // A lost context (fatal_) ends the verdict: nothing more can run in this process.
      if (add_workload(v, std::move(wv), fatal_)) break;
    }
    v.seconds = seconds_since(start);
    v.phases = context_.phases.seconds();
    return v;
  }

 private:
  WorkloadVerdict run_workload(const Workload& w, std::size_t index) {
    const Definition& def = context_.def;
    WorkloadVerdict wv;
    wv.uuid = w.uuid;
    wv.axes = w.axes;
    // Which launches this workload runs; the plan rules made sure a variant can be chosen.
    const LaunchPlan& plan = candidate_.solution->plan;
    try {
      wv.variant = plan.variant_label(plan.variant_for(w.bindings(def)));
    } catch (const ExprError&) {
      wv.variant = "none";
    }
    // Sampling: the workload's trials together draw on sampling_launches(rows) input sets (the
    // trials' own, then more in each trial), all judged as one sample at its end.
    const bool sampling = context_.sampling;
    SamplingDraws draws;
    const std::uint64_t sampling_sets =
        sampling ? sampling_launches(element_count(def.outputs.at(0), w.bindings(def))) : 0;
    run_trials(wv, options_.trials, sampling_sets, [&](int t, std::uint64_t sets) {
      return run_trial(w, trial_seed(options_.seed, index, t), t == 0 && options_.determinism,
                       sampling ? &draws : nullptr, sets);
    });
    if (sampling) sampling_.judge(wv, draws);
    return wv;
  }

  // `draws`: the workload's pool of sampling draws (sampling only), `sets` the input sets this
  // trial draws on (its own, then sets - 1 more: SamplingSets::sample_more).
  TrialResult run_trial(const Workload& w, std::uint64_t seed, bool determinism,
                        SamplingDraws* draws, std::uint64_t sets) {
    const auto start = std::chrono::steady_clock::now();
    TrialResult trial;
    trial.seed = seed;
    device::ActivityPhase trial_phase("correctness trial");  // harness work between the launches
    Stream stream;
    TrialBuffers b;
    if (auto f = trial_phases(w, seed, determinism, draws, sets, b, trial, stream.get())) {
      trial.status = status_of_kind(f->kind);
      trial.failure = std::move(f);
    }
    trial.seconds = seconds_since(start);
    return trial;
  }

  // One trial's phases, in order; the first failure ends them.
  std::optional<Failure> trial_phases(const Workload& w, std::uint64_t seed, bool determinism,
                                      SamplingDraws* draws, std::uint64_t sets, TrialBuffers& b,
                                      TrialResult& trial, CUstream s) {
    PhaseClock& phases = context_.phases;
    const Driver& d = Driver::instance();
    auto t0 = std::chrono::steady_clock::now();
    inputs_.make_inputs(w, seed, b, s);
    d.check(d.cuStreamSynchronize(s), "cuStreamSynchronize");
    phases.add("inputs", t0);
    t0 = std::chrono::steady_clock::now();
    run_reference(b, s);
    phases.add("reference", t0);
    t0 = std::chrono::steady_clock::now();
    const std::map<std::string, std::uint64_t> checksums = checksum_inputs(b, s);
    phases.add("checksums", t0);
    Candidate candidate;
    if (auto f = load_candidate(seed, b, candidate, s)) return f;
    if (auto f = launch_candidate(b, *candidate.launcher, seed, s)) return f;
    if (device_compare_) {
      return judge_on_device(b, checksums, determinism, *candidate.launcher, seed, trial, s);
    }
    return judge_on_host(w, b, checksums, determinism, *candidate.launcher, seed, draws, sets,
                         trial, s);
  }

  // Runs the reference on the trial's inputs: its outputs sealed on the device (device
  // comparison) or downloaded into host_.expected. Its device buffers are scrubbed (poisoned) and
  // freed before this returns, and its module unloaded.
  void run_reference(TrialBuffers& b, CUstream s) {
    device::ActivityPhase phase("reference");
    Module module(reference_.result->cubin);
    PlanLauncher launcher(reference_.solution->plan, reference_.result->kernels, module);
    inputs_.make_outputs(b, reference_.solution->plan, s);
    LaunchOutcome o = launcher.launch(b.env, s, true);
    if (!o.ok)
      throw Error(ExitCode::kInternal, "reference",
                  fmt::format("the operator's reference failed: {}", o.message));
    const Definition& def = context_.def;
    for (std::size_t i = 0; i < def.outputs.size(); ++i) {
      const GuardedBuffer& out = *b.outputs.at(def.outputs[i].name);
      if (device_compare_) {
        // Its outputs stay on the device, sealed (sealed_judge.hpp), and are compared there.
        sealed_.seal_expected(out, i, s);
      } else {
        host_.expected.resize(def.outputs.size());
        out.download(host_.expected[i]);
      }
    }
    inputs_.scrub_outputs(b, s);
    Driver::instance().check(Driver::instance().cuStreamSynchronize(s), "cuStreamSynchronize");
    b.outputs.clear();
    b.workspace.reset();
  }

  // The inputs' checksums (the memory rules) and the sealed copies', one wait for all of them.
  std::map<std::string, std::uint64_t> checksum_inputs(const TrialBuffers& b, CUstream s) {
    HarnessKernels::ReadBatch& reads = context_.reads;
    reads.clear();
    const auto input_slots = InputSets::read_checksums(b, reads, s);
    const std::vector<std::size_t> sealed_slots =
        device_compare_ ? sealed_.read_expected_sums(s) : std::vector<std::size_t>{};
    reads.wait(s);
    std::map<std::string, std::uint64_t> checksums;
    for (const auto& [name, slot] : input_slots) checksums[name] = reads.checksum_result(slot);
    sealed_.keep_expected_sums(sealed_slots);
    return checksums;
  }

  // A fresh module every trial: __device__ globals cannot carry results from one to the next.
  // Its launcher, and the candidate's outputs poisoned as a timed iteration's are.
  std::optional<Failure> load_candidate(std::uint64_t seed, TrialBuffers& b, Candidate& candidate,
                                        CUstream s) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      candidate.module = std::make_unique<Module>(candidate_.result->cubin);
    } catch (const device::CudaError& e) {
      fatal_ = device::is_sticky_error(e.code());
      return Failure{"module_load", e.what(), {{"cuda_error", e.name()}}};
    }
    try {
      candidate.launcher = std::make_unique<PlanLauncher>(
          candidate_.solution->plan, candidate_.result->kernels, *candidate.module);
      poison_ = trial_poison(context_.def, seed);
      inputs_.make_outputs(b, candidate_.solution->plan, s, &poison_);
    } catch (const device::CudaError& e) {
      return Failure{"launch_failed", e.what(), {{"cuda_error", e.name()}}};
    } catch (const ExprError& e) {
      return Failure{"launch_failed", e.what(), {}};
    }
    context_.phases.add("candidate_setup", t0);
    return std::nullopt;
  }

  // The candidate's launches, shared memory scrubbed first: nothing an earlier kernel left there
  // reaches it. `role` names the launch in a failure.
  std::optional<Failure> launch(TrialBuffers& b, PlanLauncher& launcher, std::uint32_t scrub,
                                const char* phase, const char* role, CUstream s) {
    context_.kernels.scrub_shared(scrub, s);
    LaunchOutcome o;
    {
      device::ActivityPhase launching(phase);
      o = launcher.launch(b.env, s, true);
    }
    if (!o.ok) {
      fatal_ = o.sticky;
      return launch_failure(o, role);
    }
    inputs_.normalise_poison(b, poison_, s);
    return std::nullopt;
  }
  std::optional<Failure> launch_candidate(TrialBuffers& b, PlanLauncher& launcher,
                                          std::uint64_t seed, CUstream s) {
    const auto t0 = std::chrono::steady_clock::now();
    std::optional<Failure> f = launch(b, launcher, static_cast<std::uint32_t>(splitmix(seed)),
                                      "candidate", "candidate", s);
    context_.phases.add("candidate_run", t0);
    return f;
  }
  // The determinism rerun: the candidate again on the trial's inputs, its outputs and workspace
  // poisoned again and shared memory scrubbed.
  std::optional<Failure> launch_rerun(TrialBuffers& b, PlanLauncher& launcher, std::uint64_t seed,
                                      CUstream s) {
    poison_ = trial_poison(context_.def, seed + 1);
    inputs_.poison(b, poison_, s);
    return launch(b, launcher, static_cast<std::uint32_t>(splitmix(seed + 1)),
                  "candidate (rerun on the same inputs)", "candidate (rerun)", s);
  }

  // Elementwise outputs, judged on the device against the sealed reference, then the rerun.
  std::optional<Failure> judge_on_device(TrialBuffers& b,
                                         const std::map<std::string, std::uint64_t>& checksums,
                                         bool determinism, PlanLauncher& launcher,
                                         std::uint64_t seed, TrialResult& trial, CUstream s) {
    PhaseClock& phases = context_.phases;
    auto t0 = std::chrono::steady_clock::now();
    std::optional<Failure> f = sealed_.check(b, checksums, determinism, trial, s);
    phases.add("compare", t0);
    if (f) return f;
    if (determinism) {
      t0 = std::chrono::steady_clock::now();
      f = launch_rerun(b, launcher, seed, s);
      if (!f) f = sealed_.rerun(b, checksums, trial, s);
      phases.add("determinism", t0);
      if (f) return f;
    }
    Driver::instance().check(Driver::instance().cuStreamSynchronize(s), "cuStreamSynchronize");
    return std::nullopt;
  }

  // Outputs downloaded and judged on the host: the memory rules, the comparator, the rerun, and
  // a sampler's further input sets.
  std::optional<Failure> judge_on_host(const Workload& w, TrialBuffers& b,
                                       const std::map<std::string, std::uint64_t>& checksums,
                                       bool determinism, PlanLauncher& launcher, std::uint64_t seed,
                                       SamplingDraws* draws, std::uint64_t sets, TrialResult& trial,
                                       CUstream s) {
    PhaseClock& phases = context_.phases;
    auto t0 = std::chrono::steady_clock::now();
    if (auto f = inputs_.check_memory(b, checksums, s)) return f;
    host_.download_outputs(b, host_.got);
    phases.add("download", t0);
    static const HostJudge::ComparePhases kComparePhases{"compare_inputs", "compare"};
    // A sampler's inputs (hundreds of MiB of probabilities) go to the pinned copies the sampling
    // sets reuse: pinning that much afresh every trial would cost more than the copy.
    if (auto f = host_.check_outputs(b, host_.expected, host_.got, trial, draws,
                                     context_.sampling ? &host_.sampling_inputs : nullptr,
                                     &kComparePhases)) {
      return f;
    }
    if (determinism) {
      // The same inputs again: a correct kernel gives the same answer (within tolerance).
      t0 = std::chrono::steady_clock::now();
      if (auto f = launch_rerun(b, launcher, seed, s)) return f;
      if (auto f = inputs_.check_memory(b, checksums, s)) return on_rerun(*f);
      if (auto f = host_.judge_rerun(b, host_.expected, host_.got, trial)) return f;
      phases.add("determinism", t0);
    }
    if (draws && sets > 1) {
      t0 = std::chrono::steady_clock::now();
      auto f = sampling_.sample_more(w, candidate_.solution->plan, seed, sets - 1, launcher, *draws,
                                     fatal_, s);
      phases.add("sampling_sets", t0);
      if (f) return f;
    }
    Driver::instance().check(Driver::instance().cuStreamSynchronize(s), "cuStreamSynchronize");
    return std::nullopt;
  }

  const Operator& op_;
  const Compiled& reference_;
  const Compiled& candidate_;
  const CheckOptions& options_;
  const bool device_compare_;  // the elementwise comparator: outputs compared on the device
  TrialContext context_;       // the definition, comparator, harness kernels, phases
  InputSets inputs_;
  HostJudge host_;
  SealedJudge sealed_;
  SamplingSets sampling_;
  IterationPoison poison_;  // the candidate's poison in its current launch
  bool fatal_ = false;      // a launch left the context unusable
};

}  // namespace

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

Status status_of_kind(const std::string& kind) {
  if (kind == "output_not_written" || kind == "nan_or_inf" || kind == "tolerance" ||
      kind == "nondeterministic" || kind == "input_modified" || kind == "stale_output" ||
      kind == "outside_support" || kind == "distribution" || kind == "topk_padding") {
    return Status::kIncorrectNumerical;
  }
  // Refused before it ran: a cooperative grid that cannot be resident on this GPU.
  if (kind == "cooperative_not_resident") return Status::kRejected;
  return Status::kRuntimeError;
}

std::uint64_t secret_key() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

nlohmann::json CheckOptions::to_json() const {
  nlohmann::json j = {
      {"workloads", workloads}, {"trials", trials}, {"seed", seed}, {"determinism", determinism}};
  if (atol) j["atol"] = *atol;
  if (rtol) j["rtol"] = *rtol;
  if (required_matched_ratio) j["required_matched_ratio"] = *required_matched_ratio;
  return j;
}

CheckOptions CheckOptions::from_json(const nlohmann::json& j) {
  CheckOptions o;
  o.workloads = j.value("workloads", std::vector<std::string>{});
  o.trials = j.value("trials", 3);
  o.seed = j.value("seed", 0ull);
  o.determinism = j.value("determinism", true);
  if (j.contains("atol")) o.atol = j["atol"].get<double>();
  if (j.contains("rtol")) o.rtol = j["rtol"].get<double>();
  if (j.contains("required_matched_ratio"))
    o.required_matched_ratio = j["required_matched_ratio"].get<double>();
  return o;
}

Tolerance effective_tolerance(const Definition& definition, const CheckOptions& options) {
  Tolerance t = definition.kharness.tolerance;
  if (options.atol) t.atol = *options.atol;
  if (options.rtol) t.rtol = *options.rtol;
  if (options.required_matched_ratio) t.required_matched_ratio = *options.required_matched_ratio;
  return t;
}

std::vector<const Workload*> select_workloads(const Operator& op, const CheckOptions& options) {
  std::vector<const Workload*> out;
  if (options.workloads.empty()) {
    for (const auto& w : op.workloads) out.push_back(&w);
  } else {
    for (const auto& want : options.workloads) {
      std::size_t before = out.size();
      for (const auto& w : op.workloads) {
        if (w.uuid.rfind(want, 0) == 0) out.push_back(&w);
      }
      if (out.size() == before) {
        throw input_error("--workloads", fmt::format("no workload of {} starts with '{}'",
                                                     op.definition.name, want));
      }
    }
  }
  if (out.empty()) throw input_error(op.definition.name, "the operator has no workloads to check");
  return out;
}

std::uint64_t trial_seed(std::uint64_t base, std::size_t workload_index, int trial) {
  return splitmix(base ^ splitmix(static_cast<std::uint64_t>(workload_index) * 1000003ull +
                                  static_cast<std::uint64_t>(trial)));
}

IterationPoison iteration_poison(const Definition& definition, std::uint64_t draw) {
  IterationPoison p;
  for (std::size_t t = 0; t < definition.outputs.size(); ++t)
    p.outputs.push_back(iteration_poison_element(definition.outputs[t].dtype, splitmix(draw + t)));
  return p;
}

Verdict evaluate_correctness(const Operator& op, const Compiled& reference,
                             const Compiled& candidate, const CheckOptions& options,
                             const EvaluationSink& sink) {
  auto start = std::chrono::steady_clock::now();
  Evaluator evaluator(op, reference, candidate, options);  // loads the harness kernels
  double setup = seconds_since(start);
  Verdict v = evaluator.run(sink);
  v.phases["harness_kernels"] = setup;
  return v;
}

}  // namespace kharness::verify
