#include "bench/benchmark.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <random>

#include "bench/cupti_timer.hpp"
#include "bench/measure.hpp"
#include "bench/speed_of_light.hpp"
#include "bench/statistics.hpp"
#include "device/cublaslt.hpp"
#include "device/driver.hpp"
#include "device/module_globals.hpp"
#include "device/nvml.hpp"
#include "device/plan_launcher.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/text.hpp"
#include "verify/harness_kernels.hpp"

namespace kharness::bench {
namespace {

using device::Driver;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One timed iteration: its seconds and, from CUPTI, the kernels it ran (empty for events).
struct IterationSample {
  double seconds = 0;
  std::string names;   // CUPTI's kernel names, sorted: a label (see IterationSpan::signature)
  std::string shapes;  // the kernels' launch shapes, sorted: iterations of a solution must agree
};

// Times iterations by id: CUPTI activity spans, or CUDA events around the launches.
class IterationTimer {
 public:
  virtual ~IterationTimer() = default;
  virtual void begin(std::uint64_t id, CUstream s) = 0;
  virtual void end(std::uint64_t id, CUstream s) = 0;
  // Each iteration's sample by id.
  virtual std::map<std::uint64_t, IterationSample> collect(CUstream s) = 0;
  // Forgets what an earlier measurement left (one that ended in an exception): each workload's
  // starts clean on the benchmark's one timer.
  virtual void discard(CUstream s) = 0;
};

class CuptiIterationTimer : public IterationTimer {
 public:
  void begin(std::uint64_t id, CUstream) override { timer_.begin(id); }
  void end(std::uint64_t, CUstream) override { timer_.end(); }
  std::map<std::uint64_t, IterationSample> collect(CUstream s) override {
    Driver::instance().check(Driver::instance().cuStreamSynchronize(s), "cuStreamSynchronize");
    std::map<std::uint64_t, IterationSample> out;
    for (const auto& [id, span] : timer_.collect()) {
      if (span.kernels == 0)
        throw std::runtime_error(fmt::format("iteration {} ran no kernel", id));
      out[id] = {span.seconds(), span.signature, span.shapes};
    }
    return out;
  }
  void discard(CUstream) override { timer_.discard(); }

 private:
  CuptiTimer timer_;
};

// For comparison only: includes launch overhead and misses work on other streams.
class EventIterationTimer : public IterationTimer {
 public:
  void begin(std::uint64_t id, CUstream s) override {
    auto& pair = events_[id];
    pair.first = std::make_unique<device::Event>();
    pair.second = std::make_unique<device::Event>();
    pair.first->record(s);
  }
  void end(std::uint64_t id, CUstream s) override { events_[id].second->record(s); }
  std::map<std::uint64_t, IterationSample> collect(CUstream) override {
    std::map<std::uint64_t, IterationSample> out;
    for (auto& [id, pair] : events_) {
      pair.second->synchronize();
      out[id] = {pair.second->elapsed_ms_since(*pair.first) / 1000.0, "", ""};
    }
    events_.clear();
    return out;
  }
  void discard(CUstream) override { events_.clear(); }

 private:
  std::map<std::uint64_t, std::pair<std::unique_ptr<device::Event>, std::unique_ptr<device::Event>>>
      events_;
};

// One solution being timed: its module, launcher, input sets and samples.
struct Contender {
  std::string role;  // "candidate" or "baseline"
  const verify::Compiled* compiled = nullptr;
  std::unique_ptr<verify::TimedOutputs> timed;
  std::unique_ptr<device::Module> module;
  std::unique_ptr<device::PlanLauncher> launcher;  // a solution's plan ...
  std::unique_ptr<device::CublasLtGemm> cublaslt;  // ... or the built-in cuBLASLt baseline
  bool block_scaled = false;                       // its fp8 1x128 / 128x128 form
  std::string vendor;                              // what a built-in baseline is
  // The module's global variables, restored before every iteration; when some cannot be
  // resolved, the module is reloaded instead (reload = true).
  std::unique_ptr<device::ModuleGlobals> globals;
  std::size_t state_vars = 0;  // variables of its module's state (device::StatePlan::count)
  bool reload = false;
  std::vector<double> samples;
  std::vector<std::vector<double>> trial_samples;  // official protocol
  std::string shapes;         // the kernels' launch shapes of the first timed iteration (CUPTI)
  std::string cupti_names;    // and their names as CUPTI gave them
  int flagged = 0;            // samples taken while the SM clock was below 80% of its maximum
  std::uint64_t checked = 0;  // iterations whose outputs were checked
  bool done = false;
  std::unique_ptr<StoppingCriterion> criterion;  // adaptive protocol
  std::optional<Failure> failure;
};

// The order input sets are visited in: a fresh random permutation of the sets every cycle, never
// the same set twice in a row across cycles (docs/timing.md#interleaving: a seeded random order, no
// alternation a kernel could predict).
class InputOrder {
 public:
  InputOrder(int sets, std::uint64_t seed) : sets_(sets), rng_(seed) {}
  int next() {
    if (pos_ == order_.size()) {
      int last = order_.empty() ? -1 : order_.back();
      order_.resize(static_cast<std::size_t>(sets_));
      for (int i = 0; i < sets_; ++i) order_[static_cast<std::size_t>(i)] = i;
      std::shuffle(order_.begin(), order_.end(), rng_);
      if (sets_ > 1 && order_.front() == last) std::swap(order_.front(), order_.back());
      pos_ = 0;
    }
    return order_[pos_++];
  }

 private:
  int sets_;
  std::mt19937_64 rng_;
  std::vector<int> order_;
  std::size_t pos_ = 0;
};

// Device bytes one input set of `op` needs on `workload`: inputs, outputs twice (the candidate's
// buffer and the sealed reference), workspace, and the guard zones.
std::size_t bytes_per_set(const Operator& op, const Workload& workload, const LaunchPlan& plan) {
  const Definition& def = op.definition;
  Bindings axes = workload.bindings(def);
  auto bytes_of = [&](const TensorSpec& t) -> std::size_t {
    if (t.is_scalar()) return 0;
    std::size_t n = dtype_size(t.dtype);
    for (auto d : tensor_shape(t, axes))
      n *= static_cast<std::size_t>(std::max<std::int64_t>(d, 0));
    return n + (128u << 10);
  };
  std::size_t total = 0;
  for (const auto& t : def.inputs) total += bytes_of(t);
  for (const auto& t : def.outputs) total += 2 * bytes_of(t);
  try {
    total += static_cast<std::size_t>(std::max<std::int64_t>(plan.workspace_bytes.eval(axes), 0));
  } catch (const std::exception&) {
  }
  return total;
}

// A solution to time: its outputs over `sets` input sets (checked against the reference), its
// module and launcher, and how its module state is reset between iterations.
std::unique_ptr<Contender> make_contender(const std::string& role, const Operator& op,
                                          const verify::Compiled& reference,
                                          const verify::Compiled& solution,
                                          const verify::CheckOptions& check,
                                          const Workload& workload, int sets,
                                          StateReset state_reset) {
  auto c = std::make_unique<Contender>();
  c->role = role;
  c->compiled = &solution;
  c->timed =
      std::make_unique<verify::TimedOutputs>(op, reference, solution, workload, sets, check,
                                             static_cast<int>(kMaxBatch), verify::secret_key());
  c->module = std::make_unique<device::Module>(solution.result->cubin);
  // Its state: every object of the cubin's .nv.global* and .nv.constant* sections and the PTX's
  // definitions, restored by name; reloaded instead where one cannot be named.
  const device::StatePlan plan =
      device::plan_state_reset(solution.result->ptx, solution.result->cubin);
  c->state_vars = plan.count();
  if (plan.count() > 0 || !plan.reload_reason.empty()) {
    c->globals = std::make_unique<device::ModuleGlobals>(*c->module, plan.vars);
    c->reload = state_reset == StateReset::kReload || !plan.reload_reason.empty() ||
                !c->globals->complete();
    if (!plan.reload_reason.empty()) {
      spdlog::debug("{}: module state {}: the module is reloaded every iteration", role,
                    plan.reload_reason);
    } else if (!c->globals->complete()) {
      spdlog::debug("{}: globals not resolved ({}): the module is reloaded every iteration", role,
                    join(c->globals->missing(), ", "));
    } else {
      spdlog::debug("{}: {} globals restored every iteration by {} copies of {} bytes", role,
                    c->globals->count(), c->globals->copies(), c->globals->bytes());
    }
  }
  c->launcher = std::make_unique<device::PlanLauncher>(solution.solution->plan,
                                                       solution.result->kernels, *c->module);
  return c;
}

// The built-in vendor baseline of GEMM operators: C[M,N] = A[M,K] B[N,K]^T through cuBLASLt,
// its outputs checked like any solution's. Needs a definition of that form.
// vendor_plan: the contender's stand-in for a compiled solution, kept by the caller as long as the
// contender. Returns nullptr, with the reason in `unavailable`, when cuBLASLt cannot run the shape.
std::unique_ptr<Contender> make_cublaslt_contender(
    const Operator& op, const verify::Compiled& reference, const verify::CheckOptions& check,
    const Workload& workload, int sets, verify::Compiled& vendor_plan, std::string& unavailable) {
  const Definition& def = op.definition;
  auto named = [](const std::vector<TensorSpec>& specs, const char* name,
                  std::vector<std::string> shape) {
    auto it = std::find_if(specs.begin(), specs.end(),
                           [&](const TensorSpec& t) { return t.name == name; });
    return it != specs.end() && it->shape == shape ? &*it : nullptr;
  };
  const TensorSpec* input = named(def.inputs, "A", {"M", "K"});
  const TensorSpec* weight = named(def.inputs, "B", {"N", "K"});
  const TensorSpec* output = named(def.outputs, "C", {"M", "N"});
  // DeepSeek's block-scaled fp8 GEMM (the gemm_fp8 family): A_scale [M, num_k_blocks] and
  // B_scale [num_n_blocks, num_k_blocks] beside A and B, C bfloat16.
  const bool block_scaled =
      input && weight && output && def.inputs.size() == 4 && def.outputs.size() == 1 &&
      named(def.inputs, "A_scale", {"M", "num_k_blocks"}) &&
      named(def.inputs, "B_scale", {"num_n_blocks", "num_k_blocks"}) &&
      input->dtype == DType::kFloat8E4M3 && weight->dtype == DType::kFloat8E4M3 &&
      output->dtype == DType::kBFloat16;
  if (!block_scaled &&
      (!input || !weight || !output || def.inputs.size() != 2 || def.outputs.size() != 1 ||
       weight->dtype != input->dtype || output->dtype != input->dtype)) {
    throw Error(ExitCode::kUsage, op.definition_file.string(),
                "the cublaslt baseline needs a GEMM definition with inputs A [M, K], B [N, K] "
                "and output C [M, N] (or the block-scaled fp8 GEMM of gemm_fp8)");
  }
  Bindings axes = workload.bindings(def);
  static const Solution kNoPlan = [] {
    Solution s;
    s.name = "cublaslt";
    return s;
  }();
  static const CompileResult kNothingCompiled;
  vendor_plan = verify::Compiled{&kNoPlan, &kNothingCompiled};
  auto c = std::make_unique<Contender>();
  c->role = "baseline";
  c->compiled = &vendor_plan;
  c->timed =
      std::make_unique<verify::TimedOutputs>(op, reference, vendor_plan, workload, sets, check,
                                             static_cast<int>(kMaxBatch), verify::secret_key());
  try {
    c->cublaslt = std::make_unique<device::CublasLtGemm>(
        axes.at("M"), axes.at("N"), axes.at("K"), input->dtype,
        block_scaled ? device::CublasLtGemm::Kind::kBlockScaledFp8
                     : device::CublasLtGemm::Kind::kHalf);
  } catch (const std::runtime_error& e) {
    // The library cannot run this shape (cuBLASLt's fp8 block scales need M % 4 == 0): the
    // candidate is timed without a baseline here, and the report says why.
    unavailable = e.what();
    return nullptr;
  }
  c->block_scaled = block_scaled;
  if (block_scaled) {
    for (int set = 0; set < sets; ++set)
      c->cublaslt->prepare_activation_scales(c->timed->env(set).tensors.at("A_scale"));
  }
  c->vendor = c->cublaslt->description();
  return c;
}

class WorkloadBench {
 public:
  WorkloadBench(const Operator& op, const verify::Compiled& reference,
                const verify::Compiled& candidate, const verify::Compiled* baseline,
                const verify::CheckOptions& check, const BenchOptions& options,
                const Workload& workload, std::size_t workload_index, verify::L2Flush& flush,
                const GpuInfo* gpu, IterationTimer& timer)
      : def_(op.definition),
        options_(options),
        flush_(flush),
        gpu_(gpu),
        rng_(verify::splitmix(check.seed ^ verify::splitmix(0x7469'6d65ull + workload_index))),
        sets_(fit_input_sets(op, workload, candidate, baseline != nullptr)),
        order_(sets_, rng_()) {
    contenders_.push_back(make_contender("candidate", op, reference, candidate, check, workload,
                                         sets_, options_.state_reset));
    if (baseline && options.baseline_solution == "cublaslt") {
      if (auto c = make_cublaslt_contender(op, reference, check, workload, sets_, vendor_plan_,
                                           baseline_unavailable_))
        contenders_.push_back(std::move(c));
    } else if (baseline) {
      contenders_.push_back(make_contender("baseline", op, reference, *baseline, check, workload,
                                           sets_, options_.state_reset));
    }
    timer_ = &timer;
    for (std::size_t i = 0; i < 2 * kMaxBatch; ++i)
      events_.push_back(std::make_unique<device::Event>());
    next_batch();
  }

  TimingResult run() {
    const auto started = Clock::now();
    CUstream s = stream_.get();
    timer_->discard(s);  // nothing of an earlier workload's (one that threw) is counted here
    if (options_.protocol == Protocol::kOfficial) {
      for (int t = 0; t < options_.trials && !stopped_; ++t) {
        for (int i = 0; i < options_.warmup && !stopped_; ++i) round(s, false);
        std::map<Contender*, std::size_t> before;
        harvest(s);
        for (auto& c : contenders_) before[c.get()] = c->samples.size();
        for (int i = 0; i < options_.iterations && !stopped_; ++i) round(s, true);
        harvest(s);
        for (auto& c : contenders_) {
          c->trial_samples.emplace_back(
              c->samples.begin() + static_cast<std::ptrdiff_t>(before[c.get()]), c->samples.end());
        }
      }
    } else {
      // Up to `warmup` rounds, fewer when the first round shows that they would take longer than
      // warmup_seconds (one wait after the first round measures it).
      int rounds = options_.warmup;
      for (int i = 0; i < rounds && !stopped_; ++i) {
        round(s, false);
        if (i == 0 && options_.warmup_seconds > 0) {
          Driver::instance().check(Driver::instance().cuStreamSynchronize(s),
                                   "cuStreamSynchronize");
          rounds = warmup_rounds(options_.warmup, options_.warmup_seconds, since(started));
        }
      }
      harvest(s);
      warmup_seconds_ = since(started);
      // Stopping is a plugin (nvbench's "stdrel"): noise of the median under max_noise with at
      // least min_samples samples, or the time budget spent. Its clock starts after the warmup.
      for (auto& c : contenders_) {
        c->criterion =
            make_criterion("stdrel", {{"max_noise", options_.max_noise},
                                      {"min_samples", static_cast<double>(options_.min_samples)},
                                      {"max_seconds", options_.max_seconds}});
      }
      while (!stopped_ && std::any_of(contenders_.begin(), contenders_.end(),
                                      [](const auto& c) { return !c->done; })) {
        if (!round(s, true)) continue;  // until a batch was harvested
        for (auto& c : contenders_) c->done = c->done || c->criterion->is_finished();
      }
    }
    harvest(s);
    // A sampler's timed draws, all of them, in one distribution test (their support was checked
    // iteration by iteration).
    for (auto& c : contenders_) {
      if (!c->failure) {
        if (auto f = c->timed->judge_draws()) fail(*c, *f);
      }
    }
    TimingResult t = report();
    // Where the workload's timing time went (how fast a verdict comes): the warmup, the whole
    // loop, the harvests' host waits and reads within it, and the rounds and batches it took.
    t.phases = TimingPhases{{{"warmup_seconds", warmup_seconds_},
                             {"run_seconds", since(started)},
                             {"harvest_seconds", harvest_seconds_},
                             {"harvest_wait_seconds", harvest_wait_seconds_},
                             {"harvest_clock_seconds", harvest_clock_seconds_},
                             {"harvest_timer_seconds", harvest_timer_seconds_},
                             {"harvest_check_seconds", harvest_check_seconds_},
                             {"harvest_integrity_seconds", harvest_integrity_seconds_}},
                            harvests_,
                            rounds_};
    return t;
  }

  std::optional<Failure> failure() const {
    for (const auto& c : contenders_) {
      if (c->failure) return c->failure;
    }
    return std::nullopt;
  }

 private:
  static constexpr double kClockReadSeconds = 0.1;

  // As many input sets as asked for, fewer only when device memory cannot hold them (the report
  // says so).
  int fit_input_sets(const Operator& op, const Workload& workload,
                     const verify::Compiled& candidate, bool baseline) {
    const int asked = std::max(options_.input_sets, 1);
    std::size_t free_bytes = 0, total_bytes = 0;
    const Driver& d = Driver::instance();
    if (d.cuMemGetInfo(&free_bytes, &total_bytes) != CUDA_SUCCESS || free_bytes == 0) return asked;
    const std::size_t per =
        bytes_per_set(op, workload, candidate.solution->plan) * (baseline ? 2 : 1);
    if (per == 0) return asked;
    const std::size_t fit = free_bytes / 10 * 8 / per;
    const int sets =
        static_cast<int>(std::clamp<std::size_t>(fit, 1, static_cast<std::size_t>(asked)));
    if (sets < asked) {
      sets_note_ = fmt::format("only {} of {} input sets fit in device memory ({} MiB each)", sets,
                               asked, per >> 20);
    }
    return sets;
  }

  device::LaunchOutcome launch(Contender& c, int set, CUstream s) {
    const device::LaunchEnv& env = c.timed->env(set);
    if (c.launcher) return c.launcher->launch(env, s, false);
    device::LaunchOutcome o;
    std::string error =
        c.block_scaled
            ? c.cublaslt->run(env.tensors.at("A"), env.tensors.at("B"), env.tensors.at("C"), s,
                              env.tensors.at("A_scale"), env.tensors.at("B_scale"))
            : c.cublaslt->run(env.tensors.at("A"), env.tensors.at("B"), env.tensors.at("C"), s);
    if (!error.empty()) {
      o.ok = false;
      o.kernel = "cublasLtMatmul";
      o.message = error;
    }
    return o;
  }

  // The state of a freshly loaded module: its globals' initial bytes copied back, or (when some
  // global cannot be resolved) the module itself loaded again.
  void reset_state(Contender& c, CUstream s) {
    if (!c.globals) return;
    if (!c.reload) {
      c.globals->restore(s);
      return;
    }
    stream_.synchronize();  // the old module's launches have finished before it is unloaded
    c.launcher.reset();
    c.module = std::make_unique<device::Module>(c.compiled->result->cubin);
    c.launcher = std::make_unique<device::PlanLauncher>(c.compiled->solution->plan,
                                                        c.compiled->result->kernels, *c.module);
  }

  // The L2 flush (verify::L2Flush: written, then read once). Not inside a timed iteration, so
  // CUPTI's spans exclude it (events time the launches only).
  void flush_l2(CUstream s) { flush_(kernels_, s); }

  void fail(Contender& c, Failure f) {
    if (c.failure) return;
    f.evidence["solution"] = c.role;
    c.failure = std::move(f);
    c.done = true;
    stopped_ = true;  // a failed contender decides the workload: nothing more to time
  }

  // One checked iteration (docs/correctness.md#checked-iterations), everything but the launch
  // outside the timed span: this iteration's poison over the outputs and workspace, the module's
  // globals reset, shared memory overwritten, L2 flushed; then the launch; then the check of its
  // outputs against the sealed reference, enqueued (read at the next harvest), or on the host right
  // away.
  void iterate(Contender& c, int set, bool timed, CUstream s) {
    c.timed->refresh(set, rng_(), s);  // inputs no launch has seen, made for this one
    const verify::IterationPoison poison = verify::iteration_poison(def_, rng_());
    c.timed->poison(set, poison, s);
    reset_state(c, s);
    kernels_.scrub_shared(static_cast<std::uint32_t>(rng_()), s);
    flush_l2(s);
    std::uint64_t id = next_id_++;
    if (timed) {
      timer_->begin(id, s);
      owner_[id] = &c;
    }
    device::LaunchOutcome o = launch(c, set, s);
    if (timed) timer_->end(id, s);
    if (!o.ok) throw std::runtime_error(o.message);
    ++c.checked;
    if (c.timed->checked_on_device()) {
      c.timed->enqueue_check(set, id, poison, s);
      events_.at(in_flight_++)->record(s);
    } else {
      stream_.synchronize();
      if (auto f = c.timed->verify_on_host(set, id, s)) fail(c, *f);
    }
  }

  // One iteration of every contender still sampling, on the next input set, in alternating order
  // (A B, B A, ...). True when it ended a batch (and harvested it).
  bool round(CUstream s, bool timed) {
    const int set = order_.next();
    std::vector<Contender*> order;
    for (auto& c : contenders_) {
      if (!timed || !c->done) order.push_back(c.get());
    }
    if (rounds_++ % 2 == 1) std::reverse(order.begin(), order.end());
    for (Contender* c : order) {
      if (!stopped_) iterate(*c, set, timed, s);
    }
    if (++batch_fill_ < batch_length_ && !stopped_) return false;
    harvest(s);
    return true;
  }

  void next_batch() {
    batch_fill_ = 0;
    batch_length_ = batch_length(round_seconds_, rng_());
  }

  void harvest(CUstream s) {
    const auto started = Clock::now();
    struct Account {
      const Clock::time_point& from;
      double& total;
      ~Account() { total += since(from); }
    } account{started, harvest_seconds_};
    ++harvests_;
    // One wait per iteration, so that no single wait spans a whole batch of slow launches.
    Clock::time_point mark = started;
    for (std::size_t i = 0; i < in_flight_; ++i) events_[i]->synchronize();
    in_flight_ = 0;
    auto lap = [&mark](double& total) {
      const Clock::time_point now = Clock::now();
      total += std::chrono::duration<double>(now - mark).count();
      mark = now;
    };
    lap(harvest_wait_seconds_);
    // A round's duration, from the batch just finished (enqueue to completion, harvest excluded).
    if (rounds_ > rounds_at_harvest_ && harvests_ > 1) {
      round_seconds_ = std::chrono::duration<double>(Clock::now() - harvested_at_).count() /
                       static_cast<double>(rounds_ - rounds_at_harvest_);
    }
    next_batch();
    // The SM clock, read at most every kClockReadSeconds: an NVML read costs ~2.5 ms on an H200
    // (0.3 s of a 16-workload validate when read every harvest), and a clock that drops stays
    // down for far longer than that, so a batch is flagged by the last read within that period.
    if (gpu_ && gpu_->max_sm_clock_mhz &&
        (!clock_read_ || since(*clock_read_) >= kClockReadSeconds)) {
      clock_read_ = Clock::now();
      if (auto clocks = device::Nvml::instance().clocks(gpu_->uuid, gpu_->pci_bus_id);
          clocks && clocks->sm_mhz) {
        throttled_ = clock_throttled(*clocks->sm_mhz, *gpu_->max_sm_clock_mhz);
      }
    }
    const bool throttled = throttled_;
    lap(harvest_clock_seconds_);
    const auto spans = timer_->collect(s);
    lap(harvest_timer_seconds_);
    for (const auto& [id, sample] : spans) {
      auto it = owner_.find(id);
      if (it == owner_.end()) continue;
      Contender& c = *it->second;
      if (!sample.shapes.empty()) {
        if (c.shapes.empty()) {
          c.shapes = sample.shapes;
          c.cupti_names = sample.names;
        }
        if (sample.shapes != c.shapes) {
          throw std::runtime_error(
              fmt::format("{}: iterations ran different kernels (launch shapes '{}' then '{}')",
                          c.role, c.shapes, sample.shapes));
        }
      }
      c.samples.push_back(sample.seconds);
      if (c.criterion && !c.done) c.criterion->add_measurement(sample.seconds);
      if (throttled) ++c.flagged;
    }
    owner_.clear();
    for (auto& c : contenders_) {
      if (c->timed->checked_on_device()) {
        if (auto f = c->timed->collect(s)) fail(*c, *f);
      }
    }
    lap(harvest_check_seconds_);
    for (auto& c : contenders_) {
      if (auto f = c->timed->integrity(s)) fail(*c, *f);
    }
    lap(harvest_integrity_seconds_);
    rounds_at_harvest_ = rounds_;
    harvested_at_ = Clock::now();
  }

  TimingResult report() {
    TimingResult t;
    t.protocol = options_.protocol;
    t.timer = options_.timer;
    t.input_sets = sets_;
    t.input_sets_note = sets_note_;
    for (auto& c : contenders_) {
      ContenderTiming ct;
      ct.stats = summarize(c->samples, options_.max_noise);
      ct.latency = ct.stats.median;
      if (options_.protocol == Protocol::kOfficial) {
        ct.latency = official_latency(c->trial_samples);
        ct.official_latency = ct.latency;
      }
      if (c->criterion) ct.stop_reason = c->criterion->stop_reason();
      ct.clock_flagged_samples = c->flagged;
      if (!gpu_ || !gpu_->max_sm_clock_mhz)
        ct.clock_note = "SM clock not readable (no NVML): throttling unknown";
      // The label: the plan's kernels by name (CUPTI's names can be stale, see
      // IterationSpan::signature); a vendor baseline has no plan, so CUPTI's.
      ct.kernels = c->launcher ? c->launcher->kernel_names() : c->cupti_names;
      ct.solution = c->vendor;
      // What the timed verdict rests on (docs/correctness.md#checked-iterations): every iteration
      // checked, its state reset.
      ct.integrity = TimingIntegrity{
          c->checked, c->timed->checked_on_device() ? "device" : "host", c->state_vars,
          !c->globals ? "none needed" : (c->reload ? "module reload" : "globals restored")};
      const verify::TimedTruth truth = c->timed->truth();
      ct.integrity->fresh_inputs = truth.fresh_inputs;
      ct.integrity->truth = truth.mode;
      ct.integrity->fixed_inputs = truth.fixed_inputs;
      if (truth.mode == "point reference") {
        ct.integrity->point =
            fmt::format("{} of {} = {} rows", truth.rows, truth.rows_of, truth.rows_total);
        ct.integrity->rows_checked = truth.rows_checked;
        ct.integrity->miss_probability_1pct =
            std::pow(0.99, static_cast<double>(truth.rows_checked));
      } else if (truth.mode == "full reference") {
        ct.integrity->miss_probability_1pct = 0.0;
      }
      (c->role == "baseline" ? t.baseline : t.candidate) = std::move(ct);
    }
    t.baseline_unavailable = baseline_unavailable_;
    if (t.baseline && t.candidate && t.candidate->latency > 0)
      t.speedup = t.baseline->latency / t.candidate->latency;
    return t;
  }

  std::string baseline_unavailable_;  // why the cuBLASLt baseline does not run this workload
  const Definition& def_;
  const BenchOptions& options_;
  verify::L2Flush& flush_;
  const GpuInfo* gpu_;
  std::mt19937_64 rng_;  // poison, batch lengths, shared-memory scrub values: seeded
  std::string sets_note_;
  int sets_;
  InputOrder order_;
  std::vector<std::unique_ptr<Contender>> contenders_;
  IterationTimer* timer_ = nullptr;  // the benchmark's, shared by its workloads
  std::map<std::uint64_t, Contender*> owner_;
  std::uint64_t next_id_ = 1;
  std::uint64_t rounds_ = 0;
  double warmup_seconds_ = 0, harvest_seconds_ = 0;
  // The harvests' parts: waits on the batch's iterations, the SM clock read, the timer's records
  // (CUPTI: a context sync and a forced flush), the device check records, the integrity checks.
  double harvest_wait_seconds_ = 0, harvest_clock_seconds_ = 0, harvest_timer_seconds_ = 0;
  double harvest_check_seconds_ = 0, harvest_integrity_seconds_ = 0;
  std::optional<Clock::time_point> clock_read_;  // the last SM clock read, and what it said
  bool throttled_ = false;
  std::uint64_t harvests_ = 0;
  double round_seconds_ = 0;  // the last batch's, per round (0: not known yet)
  std::uint64_t rounds_at_harvest_ = 0;
  Clock::time_point harvested_at_;                      // when the last harvest ended
  std::vector<std::unique_ptr<device::Event>> events_;  // one per iteration of a batch
  std::size_t in_flight_ = 0;
  std::size_t batch_fill_ = 0, batch_length_ = kMinBatch;
  bool stopped_ = false;
  verify::Compiled vendor_plan_;
  device::Stream stream_;
  verify::HarnessKernels kernels_;
};

std::filesystem::path gpu_config_dir() { return data_dir() / "configs" / "gpus"; }

}  // namespace

void benchmark(const Operator& op, const verify::Compiled& reference,
               const verify::Compiled& candidate, const verify::Compiled* baseline,
               const verify::CheckOptions& check, const BenchOptions& options, Verdict& verdict) {
  const Driver& d = Driver::instance();
  // No access-policy window may keep data in L2 between iterations.
  d.cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0);
  d.cuCtxResetPersistingL2Cache();  // and nothing persisting is left from before
  EnvironmentReport env = probe_environment();
  const GpuInfo* gpu = env.gpus.empty() ? nullptr : &env.gpus[0];
  verify::L2Flush flush(
      gpu && gpu->l2_cache_bytes > 0 ? static_cast<std::size_t>(gpu->l2_cache_bytes) : 0, 1);
  std::vector<GpuSpec> specs;
  try {
    specs = load_gpu_specs(gpu_config_dir());
  } catch (const std::exception& e) {
    spdlog::debug("no GPU specs: {}", e.what());
  }
  const GpuSpec* spec = gpu ? match_gpu(specs, gpu->name) : nullptr;
  GpuSpec measured_spec;
  SolSource sol_source = SolSource::kDatasheet;
  std::string measured_at;
  if (options.sol == SolSource::kMeasured && spec) {
    auto measured = load_measured_peaks(gpu->name, env.driver.nvidia_version);
    if (!measured) {
      throw environment_error(fmt::format(
          "--sol measured: no measurements for {} (driver {}); run `kharness doctor --measure`",
          gpu->name, env.driver.nvidia_version));
    }
    measured_spec = with_measured(*spec, *measured);
    spec = &measured_spec;
    sol_source = SolSource::kMeasured;
    measured_at = measured->measured_at;
  }

  // One timer for every workload: CUPTI attaches once per benchmark, not once per workload (its
  // start and cuptiFinalize cost tens of milliseconds each; records of work outside the timed
  // iterations, such as the next workload's setup, correlate with no iteration and are ignored).
  std::unique_ptr<IterationTimer> timer;
  if (options.timer == Timer::kEvents) {
    timer = std::make_unique<EventIterationTimer>();
  } else {
    timer = std::make_unique<CuptiIterationTimer>();
  }
  std::vector<double> speedups, sol_fractions;
  auto selected = verify::select_workloads(op, check);
  for (const Workload* w : selected) {
    auto it = std::find_if(verdict.workloads.begin(), verdict.workloads.end(),
                           [&](const WorkloadVerdict& v) { return v.uuid == w->uuid; });
    if (it == verdict.workloads.end()) {
      WorkloadVerdict wv;
      wv.uuid = w->uuid;
      wv.axes = w->axes;
      verdict.workloads.push_back(wv);
      it = verdict.workloads.end() - 1;
    }
    WorkloadVerdict& wv = *it;
    if (wv.status != Status::kPassed) continue;  // failed its correctness check: nothing to time
    auto start = Clock::now();
    try {
      const std::size_t index = static_cast<std::size_t>(w - op.workloads.data());
      WorkloadBench bench(op, reference, candidate, options.baseline ? baseline : nullptr, check,
                          options, *w, index, flush, gpu, *timer);
      const double setup = since(start);  // input sets, sealed references, modules loaded
      wv.timing = bench.run();
      if (wv.timing.phases) wv.timing.phases->seconds["setup_seconds"] = setup;
      if (auto f = bench.failure()) {
        wv.status = verify::status_of_kind(f->kind);
        wv.failure = f;
      }
    } catch (const device::CudaError& e) {
      wv.status = Status::kRuntimeError;
      wv.failure = Failure{device::failure_kind_of(e.name()),
                           std::string("during timing: ") + e.what(),
                           {{"cuda_error", e.name()}}};
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      wv.status = Status::kRuntimeError;
      wv.failure = Failure{"timing_error", e.what(), {}};
    }
    wv.timing.seconds = since(start);
    if (spec && wv.timing.candidate) {
      SolEstimate sol = speed_of_light(*spec, op.definition, w->bindings(op.definition),
                                       options.sol == SolSource::kMeasured);
      if (sol.seconds > 0) {
        double latency = wv.timing.candidate->latency;
        double fraction = latency > 0 ? sol.seconds / latency : 0.0;
        wv.timing.sol =
            SolResult{sol.seconds, sol.bound, fraction, spec->match, sol_source, measured_at};
        // A workload whose timed outputs were wrong (stale_output) ran fast for a reason: its
        // fraction stays in its record but not in the verdict's mean.
        if (wv.status == Status::kPassed) sol_fractions.push_back(fraction);
      }
      flag_faster_than_light(op.definition, w->bindings(op.definition), specs, *gpu,
                             env.driver.nvidia_version, wv, verdict);
    }
    if (wv.timing.speedup) speedups.push_back(*wv.timing.speedup);
    if (wv.status != Status::kPassed && verdict.status == Status::kPassed) {
      verdict.status = wv.status;
      verdict.failure = wv.failure;
      if (verdict.failure) verdict.failure->evidence["workload"] = wv.uuid;
    }
  }
  Score score;
  if (!speedups.empty()) {
    ScoreSummary s = summarize_speedups(speedups);
    score.mean_speedup = s.mean_speedup;
    score.geomean_speedup = s.geomean_speedup;
    score.fast_p.emplace();
    for (const auto& [p, f] : s.fast_p) (*score.fast_p)[fmt::format("fast_{}", p)] = f;
  }
  if (!sol_fractions.empty()) {
    double sum = 0;
    for (double f : sol_fractions) sum += f;
    score.mean_sol_fraction = sum / static_cast<double>(sol_fractions.size());
  }
  score.workloads_timed = speedups.empty() ? sol_fractions.size() : speedups.size();
  // What the timed figures rest on (docs/correctness.md#checked-iterations), summed over the
  // workloads' timing records.
  std::uint64_t checked = 0;
  int fewest_sets = 0;
  for (const auto& wv : verdict.workloads) {
    if (!wv.timing.candidate) continue;
    if (wv.timing.candidate->integrity)
      checked += wv.timing.candidate->integrity->checked_iterations;
    const int sets = wv.timing.input_sets.value_or(0);
    if (sets > 0 && (fewest_sets == 0 || sets < fewest_sets)) fewest_sets = sets;
  }
  score.integrity = ScoreIntegrity{
      checked, true, fewest_sets,
      "every timed and warmup iteration runs on inputs generated for it alone (on the device, "
      "from its own seed, structured inputs included; inputs from files excepted and named), "
      "checksummed under a secret key before and after its launch; outputs poisoned with a "
      "pattern that changes every iteration, workspace NaN bytes, module globals reset to their "
      "loaded state, shared memory overwritten, L2 flushed; afterwards its outputs checked "
      "against the truth of its own inputs: the reference run after the launch (whole, or on "
      "rows drawn after the launch where the definition names a point reference), compared on "
      "the device into authenticated records; a sampler's timed draws pooled into one "
      "distribution test; guard zones checked after every batch; a latency below the physical "
      "lower bound is suspect"};
  verdict.score = score;
}

std::size_t batch_length(double round_seconds, std::uint64_t random) {
  std::size_t hi = kFirstMaxBatch;
  if (round_seconds > 0) {
    const double fit = kBatchSeconds / round_seconds;
    hi = fit >= static_cast<double>(kMaxBatch) ? kMaxBatch
                                               : std::max(kMinBatch, static_cast<std::size_t>(fit));
  }
  return kMinBatch + static_cast<std::size_t>(random % (hi - kMinBatch + 1));
}

int warmup_rounds(int max_rounds, double budget_seconds, double first_round_seconds) {
  if (max_rounds <= 1 || !(budget_seconds > 0)) return max_rounds;
  if (!(first_round_seconds > 0)) return max_rounds;
  const double fit = std::ceil(budget_seconds / first_round_seconds);
  return fit >= max_rounds ? max_rounds : std::max(1, static_cast<int>(fit));
}

}  // namespace kharness::bench
