#include "verify/evaluate.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <memory>

#include "device/driver.hpp"
#include "device/plan_launcher.hpp"
#include "device/watchdog.hpp"
#include "kharness/error.hpp"
#include "kharness/numeric.hpp"
#include "kharness/text.hpp"
#include "verify/compare.hpp"
#include "verify/harness_kernels.hpp"
#include "verify/index_inputs.hpp"
#include "verify/safetensors.hpp"

namespace kharness::verify {
namespace {

using device::DeviceBuffer;
using device::Driver;
using device::LaunchEnv;
using device::LaunchOutcome;
using device::Module;
using device::PlanLauncher;
using device::Stream;

// Guard zones before and after every buffer: large enough to catch an off-by-a-row write, and a
// multiple of 256 so the data keeps cuMemAlloc's alignment.
constexpr std::size_t kGuardBytes = 64 * 1024;
const std::vector<std::uint8_t> kGuardPattern = {0xC3};
const std::vector<std::uint8_t> kWorkspacePoison = {0xA5};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Host copy of a tensor, in pinned memory: outputs are hundreds of MiB, and pinned copies run at
// the bus's speed where pageable ones fault in fresh pages every trial. Reused across trials (it
// only grows), and never zero-filled: the copy overwrites it.
class HostBytes {
 public:
  HostBytes() = default;
  HostBytes(HostBytes&& o) noexcept : data_(o.data_), size_(o.size_), capacity_(o.capacity_) {
    o.data_ = nullptr;
    o.size_ = o.capacity_ = 0;
  }
  HostBytes& operator=(HostBytes&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
    return *this;
  }
  HostBytes(const HostBytes&) = delete;  // owns pinned memory
  HostBytes& operator=(const HostBytes&) = delete;
  ~HostBytes() {
    if (data_) Driver::instance().cuMemFreeHost(data_);
  }
  void resize(std::size_t n) {
    if (n > capacity_) {
      const Driver& d = Driver::instance();
      if (data_) d.cuMemFreeHost(data_);
      data_ = nullptr;
      capacity_ = 0;
      void* p = nullptr;
      d.check(d.cuMemAllocHost(&p, n), "cuMemAllocHost");
      data_ = static_cast<std::uint8_t*>(p);
      capacity_ = n;
    }
    size_ = n;
  }
  std::uint8_t* data() { return data_; }
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;
};

// Seconds per phase, summed over trials.
class PhaseClock {
 public:
  void add(const std::string& phase, std::chrono::steady_clock::time_point since) {
    seconds_[phase] += seconds_since(since);
  }
  nlohmann::json to_json() const { return seconds_; }

 private:
  std::map<std::string, double> seconds_;
};

// A device buffer fenced by guard zones of a known pattern.
class GuardedBuffer {
 public:
  GuardedBuffer(std::string name, std::size_t bytes)
      : name_(std::move(name)), bytes_(bytes), buffer_(bytes + 2 * kGuardBytes) {}
  CUdeviceptr data() const { return buffer_.ptr() + kGuardBytes; }
  std::size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }

  void fill_guards(const HarnessKernels& k, CUstream s) const {
    k.fill_pattern(buffer_.ptr(), kGuardBytes, kGuardPattern, s);
    k.fill_pattern(data() + bytes_, kGuardBytes, kGuardPattern, s);
  }
  // The first changed guard byte as a signed offset from the start (negative: before it) or from
  // the end of the data; nullopt when both guards are intact.
  std::optional<std::int64_t> guard_damage(const HarnessKernels& k, CUstream s) const {
    auto before = k.check_pattern(buffer_.ptr(), kGuardBytes, kGuardPattern, s);
    if (before.mismatches > 0) {
      return static_cast<std::int64_t>(before.first_mismatch_byte) -
             static_cast<std::int64_t>(kGuardBytes);
    }
    auto after = k.check_pattern(data() + bytes_, kGuardBytes, kGuardPattern, s);
    if (after.mismatches > 0) return static_cast<std::int64_t>(bytes_ + after.first_mismatch_byte);
    return std::nullopt;
  }
  void download(HostBytes& out) const {
    out.resize(bytes_);
    if (bytes_) buffer_.download(out.data(), bytes_, kGuardBytes);
  }

 private:
  std::string name_;
  std::size_t bytes_;
  DeviceBuffer buffer_;
};

std::uint64_t element_count(const TensorSpec& t, const Bindings& axes) {
  std::uint64_t n = 1;
  for (auto d : tensor_shape(t, axes)) n *= static_cast<std::uint64_t>(d);
  return n;
}

InputGenerator generator_for(const Definition& d, const TensorSpec& t) {
  if (auto it = d.kharness.inputs.find(t.name); it != d.kharness.inputs.end()) return it->second;
  InputGenerator g;  // floats: standard normal; integers without a declared role: small values
  if (!is_floating(t.dtype)) {
    g.distribution = "range";
    g.low = 0;
    g.high = t.dtype == DType::kBool ? 1 : 15;
  }
  return g;
}

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

Status status_of_kind(const std::string& kind) {
  if (kind == "output_not_written" || kind == "nan_or_inf" || kind == "tolerance" ||
      kind == "nondeterministic" || kind == "input_modified" || kind == "stale_output") {
    return Status::kIncorrectNumerical;
  }
  return Status::kRuntimeError;
}

Failure launch_failure(const LaunchOutcome& o, const std::string& role) {
  std::string kind =
      o.error_name == "PLAN_ERROR" ? "launch_failed" : device::failure_kind_of(o.error_name);
  if (o.error_name == "CUDA_ERROR_INVALID_VALUE" ||
      o.error_name == "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES") {
    kind = "launch_failed";
  }
  return Failure{kind,
                 fmt::format("{}: {}", role, o.message),
                 {{"launch", o.launch_index}, {"kernel", o.kernel}, {"cuda_error", o.error_name}}};
}

// Everything one trial allocates, released (and scrubbed where it matters) by its destructor order.
struct TrialBuffers {
  std::map<std::string, std::unique_ptr<GuardedBuffer>> inputs;
  std::map<std::string, std::unique_ptr<GuardedBuffer>> outputs;
  std::unique_ptr<GuardedBuffer> workspace;
  LaunchEnv env;
};

class Evaluator {
  friend class kharness::verify::TimedOutputs;

 public:
  Evaluator(const Operator& op, const Compiled& reference, const Compiled& candidate,
            const CheckOptions& options)
      : op_(op),
        def_(op.definition),
        reference_(reference),
        candidate_(candidate),
        options_(options),
        tolerance_(effective_tolerance(op.definition, options)),
        comparator_(find_comparator(op.definition.kharness.comparator)),
        kernels_() {
    if (!comparator_) {
      throw input_error(
          op.definition_file.string() + ": kharness.comparator",
          fmt::format("unknown comparator '{}' (known: {})", op.definition.kharness.comparator,
                      join(comparator_names(), ", ")));
    }
  }

  Verdict run(const EvaluationSink& sink) {
    auto start = std::chrono::steady_clock::now();
    Verdict v;
    v.solution = candidate_.solution->name;
    v.source = candidate_.solution->origin.string();
    v.definition = def_.name;
    v.seed = options_.seed;
    auto selected = select_workloads(op_, options_);
    for (std::size_t i = 0; i < selected.size(); ++i) {
      const Workload& w = *selected[i];
      if (sink.started) sink.started(w.uuid);
      WorkloadVerdict wv = run_workload(w, workload_index(w));
      if (sink.finished) sink.finished(wv);
      bool stop = fatal_;
      if (wv.status != Status::kPassed && v.status == Status::kPassed) {
        v.status = wv.status;
        v.failure = wv.failure;
        if (v.failure) v.failure->evidence["workload"] = w.uuid;
      }
      v.workloads.push_back(std::move(wv));
      if (stop) break;  // the context is unusable: nothing more can run in this process
    }
    v.seconds = seconds_since(start);
    v.phases = phases_.to_json();
    return v;
  }

 private:
  std::size_t workload_index(const Workload& w) const {
    for (std::size_t i = 0; i < op_.workloads.size(); ++i) {
      if (&op_.workloads[i] == &w) return i;
    }
    return 0;
  }

  WorkloadVerdict run_workload(const Workload& w, std::size_t index) {
    WorkloadVerdict wv;
    wv.uuid = w.uuid;
    wv.axes = w.axes;
    for (int t = 0; t < options_.trials; ++t) {
      TrialResult trial =
          run_trial(w, trial_seed(options_.seed, index, t), t == 0 && options_.determinism);
      bool failed = trial.status != Status::kPassed;
      if (failed && wv.status == Status::kPassed) {
        wv.status = trial.status;
        wv.failure = trial.failure;
        if (wv.failure) wv.failure->evidence["seed"] = trial.seed;
      }
      wv.trials.push_back(std::move(trial));
      if (failed) break;  // one failing trial decides the workload
    }
    return wv;
  }

  // Inputs of one trial: generated on the device from the trial's seed, or loaded from file.
  void make_inputs(const Workload& w, std::uint64_t seed, TrialBuffers& b, CUstream s) {
    b.env.definition = &def_;
    b.env.axes = w.bindings(def_);
    for (std::size_t i = 0; i < def_.inputs.size(); ++i) {
      const TensorSpec& t = def_.inputs[i];
      const WorkloadInput& in = w.inputs.at(t.name);
      if (t.is_scalar()) {
        b.env.scalars[t.name] = in.value;
        continue;
      }
      std::uint64_t count = element_count(t, b.env.axes);
      auto buf = std::make_unique<GuardedBuffer>(t.name, count * dtype_size(t.dtype));
      buf->fill_guards(kernels_, s);
      InputGenerator gen = generator_for(def_, t);
      // Bounds given as expressions over the axes take this workload's values.
      for (const char* key : {"low", "high"}) {
        auto it = gen.extra.find(std::string(key) + "_expr");
        if (it == gen.extra.end()) continue;
        double v = static_cast<double>(Expr::parse(it->get<std::string>()).eval(b.env.axes));
        (std::string(key) == "low" ? gen.low : gen.high) = v;
      }
      if (in.kind == WorkloadInput::Kind::kSafetensors) {
        upload_safetensors(t, in, count, *buf, s);
      } else if (is_index_role(gen.distribution)) {
        // Offsets and ids must be valid for their role: made on the host, from the same seed.
        auto bytes = make_index_input(t, gen, b.env.axes, count, splitmix(seed ^ (i + 1)));
        const Driver& d = Driver::instance();
        // Stream-ordered after the guard fills; a pageable source is staged before the call
        // returns.
        if (!bytes.empty()) {
          d.check(d.cuMemcpyHtoDAsync(buf->data(), bytes.data(), bytes.size(), s),
                  "cuMemcpyHtoDAsync");
        }
      } else {
        kernels_.fill_random(buf->data(), count, t.dtype, gen, seed, i, s);
      }
      b.env.tensors[t.name] = buf->data();
      b.inputs[t.name] = std::move(buf);
    }
  }

  void upload_safetensors(const TensorSpec& t, const WorkloadInput& in, std::uint64_t count,
                          GuardedBuffer& buf, CUstream s) {
    // Not found: open() names the path as written.
    std::filesystem::path path = workload_input_file(op_, in.path).value_or(in.path);
    auto& file = safetensors_[path.string()];
    if (!file) file = std::make_unique<SafetensorsFile>(SafetensorsFile::open(path));
    const SafetensorsTensor& tensor = file->tensor(in.tensor_key);
    if (tensor.dtype != t.dtype || tensor.element_count() != count) {
      throw input_error(fmt::format("{}: {}", path.string(), in.tensor_key),
                        fmt::format("is {} with {} elements; {} needs {} with {}",
                                    SafetensorsFile::dtype_name(tensor.dtype),
                                    tensor.element_count(), t.name, dtype_name(t.dtype), count));
    }
    const Driver& d = Driver::instance();
    d.check(d.cuMemcpyHtoDAsync(buf.data(), tensor.data, tensor.bytes, s), "cuMemcpyHtoDAsync");
  }

  void make_outputs(TrialBuffers& b, const LaunchPlan& plan, CUstream s) {
    for (const auto& t : def_.outputs) {
      std::uint64_t count = element_count(t, b.env.axes);
      auto buf = std::make_unique<GuardedBuffer>(t.name, count * dtype_size(t.dtype));
      buf->fill_guards(kernels_, s);
      kernels_.fill_pattern(buf->data(), buf->bytes(), poison_element(t.dtype), s);
      b.env.tensors[t.name] = buf->data();
      b.outputs[t.name] = std::move(buf);
    }
    std::int64_t ws = plan.workspace_bytes.eval(b.env.axes);
    if (ws > 0) {
      b.workspace = std::make_unique<GuardedBuffer>("workspace", static_cast<std::size_t>(ws));
      b.workspace->fill_guards(kernels_, s);
      kernels_.fill_pattern(b.workspace->data(), b.workspace->bytes(), kWorkspacePoison, s);
      b.env.workspace = b.workspace->data();
    } else {
      b.workspace.reset();
      b.env.workspace = 0;
    }
  }

  void repoison(TrialBuffers& b, CUstream s) {
    for (const auto& t : def_.outputs) {
      kernels_.fill_pattern(b.outputs[t.name]->data(), b.outputs[t.name]->bytes(),
                            poison_element(t.dtype), s);
    }
    if (b.workspace)
      kernels_.fill_pattern(b.workspace->data(), b.workspace->bytes(), kWorkspacePoison, s);
  }

  // Runs the reference on the trial's inputs; returns its outputs on the host. Its device buffers
  // are scrubbed (poisoned) and freed before this returns, and its module unloaded.
  void run_reference(TrialBuffers& b, CUstream s, std::vector<HostBytes>& expected) {
    device::ActivityPhase phase("reference");
    Module module(reference_.result->cubin);
    PlanLauncher launcher(reference_.solution->plan, reference_.result->kernels, module);
    make_outputs(b, reference_.solution->plan, s);
    LaunchOutcome o = launcher.launch(b.env, s, true);
    if (!o.ok)
      throw Error(ExitCode::kInternal, "reference",
                  fmt::format("the operator's reference failed: {}", o.message));
    expected.resize(def_.outputs.size());
    for (std::size_t i = 0; i < def_.outputs.size(); ++i) {
      const TensorSpec& t = def_.outputs[i];
      b.outputs[t.name]->download(expected[i]);
    }
    // Scrub: a candidate reading stale memory must not find the reference's answers.
    for (const auto& t : def_.outputs) {
      kernels_.fill_pattern(b.outputs[t.name]->data(), b.outputs[t.name]->bytes(),
                            poison_element(t.dtype), s);
    }
    if (b.workspace)
      kernels_.fill_pattern(b.workspace->data(), b.workspace->bytes(), kWorkspacePoison, s);
    Driver::instance().check(Driver::instance().cuStreamSynchronize(s), "cuStreamSynchronize");
    b.outputs.clear();
    b.workspace.reset();
  }

  // Guards intact and inputs unchanged; fills `trial.failure` and returns false otherwise.
  bool check_memory(TrialBuffers& b, const std::map<std::string, std::uint64_t>& checksums,
                    TrialResult& trial, CUstream s) {
    std::vector<const GuardedBuffer*> all;
    for (auto& [name, buf] : b.inputs) all.push_back(buf.get());
    for (auto& [name, buf] : b.outputs) all.push_back(buf.get());
    if (b.workspace) all.push_back(b.workspace.get());
    for (const GuardedBuffer* buf : all) {
      if (auto offset = buf->guard_damage(kernels_, s)) {
        trial.failure = Failure{
            "out_of_bounds_write",
            fmt::format("a write landed outside {} ({} bytes), at byte offset {} {}", buf->name(),
                        buf->bytes(), *offset, *offset < 0 ? "before its start" : "from its start"),
            {{"tensor", buf->name()}, {"bytes", buf->bytes()}, {"guard_offset", *offset}}};
        return false;
      }
    }
    for (auto& [name, buf] : b.inputs) {
      if (kernels_.checksum(buf->data(), buf->bytes(), s) != checksums.at(name)) {
        trial.failure = Failure{"input_modified",
                                fmt::format("the candidate changed its input '{}'", name),
                                {{"tensor", name}}};
        return false;
      }
    }
    return true;
  }

  void download_outputs(TrialBuffers& b, std::vector<HostBytes>& got) {
    got.resize(def_.outputs.size());
    for (std::size_t i = 0; i < def_.outputs.size(); ++i)
      b.outputs[def_.outputs[i].name]->download(got[i]);
  }

  // What a comparator may read: the definition, the axes and (on first use, into `inputs`) the
  // trial's inputs.
  CompareContext compare_context(TrialBuffers& b, std::map<std::string, HostBytes>& inputs) const {
    CompareContext context;
    context.definition = &def_;
    context.axes = b.env.axes;
    context.input = [&b, &inputs](const std::string& name) -> const std::uint8_t* {
      auto buf = b.inputs.find(name);
      if (buf == b.inputs.end()) return nullptr;
      auto it = inputs.find(name);
      if (it == inputs.end()) {
        it = inputs.emplace(name, HostBytes()).first;
        buf->second->download(it->second);
      }
      return it->second.data();
    };
    return context;
  }

  // Outputs against the reference; fills `trial` (comparisons, failure) and returns false on
  // failure.
  bool check_outputs(TrialBuffers& b, const std::vector<HostBytes>& expected,
                     const std::vector<HostBytes>& got, TrialResult& trial) {
    std::map<std::string, HostBytes> inputs;  // downloaded when a comparator asks for them
    CompareContext context = compare_context(b, inputs);
    for (std::size_t i = 0; i < def_.outputs.size(); ++i) {
      const TensorSpec& t = def_.outputs[i];
      OutputCheck check =
          comparator_(t.name, t.dtype, expected[i].data(), got[i].data(),
                      expected[i].size() / dtype_size(t.dtype), tolerance_, 0, context);
      trial.comparisons.push_back(check.comparison);
      if (check.reference_unwritten > 0) {
        throw Error(ExitCode::kInternal, "reference",
                    fmt::format("the operator's reference left {} elements of {} unwritten",
                                check.reference_unwritten, t.name));
      }
      if (auto f = output_failure(check, tolerance_)) {
        trial.failure = *f;
        return false;
      }
    }
    return true;
  }

  TrialResult run_trial(const Workload& w, std::uint64_t seed, bool determinism) {
    auto start = std::chrono::steady_clock::now();
    TrialResult trial;
    trial.seed = seed;
    device::ActivityPhase trial_phase("correctness trial");  // harness work between the launches
    Stream stream;
    CUstream s = stream.get();
    const Driver& d = Driver::instance();
    TrialBuffers b;
    auto t0 = std::chrono::steady_clock::now();
    make_inputs(w, seed, b, s);
    d.check(d.cuStreamSynchronize(s), "cuStreamSynchronize");
    phases_.add("inputs", t0);
    t0 = std::chrono::steady_clock::now();
    std::vector<HostBytes>& expected = expected_;
    run_reference(b, s, expected);
    phases_.add("reference", t0);
    t0 = std::chrono::steady_clock::now();
    std::map<std::string, std::uint64_t> checksums;
    for (auto& [name, buf] : b.inputs)
      checksums[name] = kernels_.checksum(buf->data(), buf->bytes(), s);
    phases_.add("checksums", t0);

    auto fail = [&](Failure f) {
      trial.status = status_of_kind(f.kind);
      trial.failure = std::move(f);
      trial.seconds = seconds_since(start);
      return trial;
    };
    // A fresh module every trial: __device__ globals cannot carry results from one to the next.
    t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Module> module;
    try {
      module = std::make_unique<Module>(candidate_.result->cubin);
    } catch (const device::CudaError& e) {
      fatal_ = device::is_sticky_error(e.code());
      return fail(Failure{"module_load", e.what(), {{"cuda_error", e.name()}}});
    }
    std::unique_ptr<PlanLauncher> launcher;
    try {
      launcher = std::make_unique<PlanLauncher>(candidate_.solution->plan,
                                                candidate_.result->kernels, *module);
      make_outputs(b, candidate_.solution->plan, s);
    } catch (const device::CudaError& e) {
      return fail(Failure{"launch_failed", e.what(), {{"cuda_error", e.name()}}});
    } catch (const ExprError& e) {
      return fail(Failure{"launch_failed", e.what(), {}});
    }
    phases_.add("candidate_setup", t0);
    t0 = std::chrono::steady_clock::now();
    LaunchOutcome o = [&] {
      device::ActivityPhase launching("candidate");
      return launcher->launch(b.env, s, true);
    }();
    phases_.add("candidate_run", t0);
    if (!o.ok) {
      fatal_ = o.sticky;
      return fail(launch_failure(o, "candidate"));
    }
    t0 = std::chrono::steady_clock::now();
    if (!check_memory(b, checksums, trial, s)) return fail(*trial.failure);
    std::vector<HostBytes>& got = got_;
    download_outputs(b, got);
    phases_.add("download", t0);
    t0 = std::chrono::steady_clock::now();
    bool outputs_ok = check_outputs(b, expected, got, trial);
    phases_.add("compare", t0);
    if (!outputs_ok) return fail(*trial.failure);
    if (determinism) {
      // The same inputs again: a correct kernel gives the same answer (within tolerance).
      t0 = std::chrono::steady_clock::now();
      repoison(b, s);
      {
        device::ActivityPhase launching("candidate (rerun on the same inputs)");
        o = launcher->launch(b.env, s, true);
      }
      if (!o.ok) {
        fatal_ = o.sticky;
        return fail(launch_failure(o, "candidate (rerun)"));
      }
      TrialResult rerun;
      if (!check_memory(b, checksums, rerun, s)) {
        Failure f = *rerun.failure;
        f.evidence["rerun"] = true;
        f.message = "on a rerun with the same inputs: " + f.message;
        return fail(f);
      }
      std::vector<HostBytes>& again = again_;
      download_outputs(b, again);
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (bitwise_differences(got[i].data(), again[i].data(), got[i].size()) == 0) continue;
        trial.bitwise_deterministic = false;
        // Differs: the rerun must still match the reference, and the first run within tolerance.
        if (!check_outputs(b, expected, again, rerun)) {
          Failure f = *rerun.failure;
          f.evidence["rerun"] = true;
          f.message = "on a rerun with the same inputs: " + f.message;
          return fail(f);
        }
        const TensorSpec& t = def_.outputs[i];
        std::map<std::string, HostBytes> inputs;
        OutputCheck c = comparator_(t.name, t.dtype, got[i].data(), again[i].data(),
                                    got[i].size() / dtype_size(t.dtype), tolerance_, 0,
                                    compare_context(b, inputs));
        if (auto f = output_failure(c, tolerance_)) {
          Failure nd{"nondeterministic",
                     fmt::format("{}: a rerun on the same inputs differs beyond tolerance ({})",
                                 t.name, f->message),
                     f->evidence};
          return fail(nd);
        }
      }
      phases_.add("determinism", t0);
    }
    d.check(d.cuStreamSynchronize(s), "cuStreamSynchronize");
    trial.seconds = seconds_since(start);
    return trial;
  }

  const Operator& op_;
  const Definition& def_;
  const Compiled& reference_;
  const Compiled& candidate_;
  const CheckOptions& options_;
  Tolerance tolerance_;
  Comparator comparator_;
  HarnessKernels kernels_;  // harness-internal kernels, loaded in the current context
  std::map<std::string, std::unique_ptr<SafetensorsFile>> safetensors_;
  bool fatal_ = false;
  PhaseClock phases_;
  std::vector<HostBytes> expected_, got_, again_;  // pinned host copies, reused across trials

 public:
  const PhaseClock& phases() const { return phases_; }
};

}  // namespace

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

struct TimedOutputs::Impl {
  Evaluator evaluator;
  std::vector<std::unique_ptr<TrialBuffers>> sets;
  std::vector<std::vector<HostBytes>> expected;
  std::vector<std::map<std::string, std::uint64_t>> checksums;
  Stream stream;
  Impl(const Operator& op, const Compiled& reference, const Compiled& candidate,
       const CheckOptions& options)
      : evaluator(op, reference, candidate, options) {}
};

TimedOutputs::TimedOutputs(const Operator& op, const Compiled& reference, const Compiled& candidate,
                           const Workload& workload, int sets, const CheckOptions& options)
    : impl_(std::make_unique<Impl>(op, reference, candidate, options)) {
  Evaluator& ev = impl_->evaluator;
  CUstream s = impl_->stream.get();
  std::size_t index = ev.workload_index(workload);
  for (int i = 0; i < sets; ++i) {
    auto b = std::make_unique<TrialBuffers>();
    // Seeds apart from the correctness trials' (which use trial numbers 0, 1, 2, ...).
    ev.make_inputs(workload, trial_seed(options.seed, index, 1000 + i), *b, s);
    impl_->expected.emplace_back();
    ev.run_reference(*b, s, impl_->expected.back());
    std::map<std::string, std::uint64_t> sums;
    for (auto& [name, buf] : b->inputs)
      sums[name] = ev.kernels_.checksum(buf->data(), buf->bytes(), s);
    impl_->checksums.push_back(std::move(sums));
    ev.make_outputs(*b, candidate.solution->plan, s);
    impl_->sets.push_back(std::move(b));
  }
  impl_->stream.synchronize();
}

TimedOutputs::~TimedOutputs() = default;

int TimedOutputs::sets() const { return static_cast<int>(impl_->sets.size()); }

const device::LaunchEnv& TimedOutputs::env(int set) const { return impl_->sets.at(set)->env; }

const HarnessKernels& TimedOutputs::kernels() const { return impl_->evaluator.kernels_; }

void TimedOutputs::poison(int set, CUstream stream) const {
  impl_->evaluator.repoison(*impl_->sets.at(set), stream);
}

std::optional<Failure> TimedOutputs::verify(int set) {
  Evaluator& ev = impl_->evaluator;
  TrialBuffers& b = *impl_->sets.at(set);
  TrialResult result;
  auto stale = [&](const Failure& f) {
    Failure out{
        "stale_output",
        fmt::format("outputs of a timed iteration (input set {}) are wrong: {}", set, f.message),
        f.evidence};
    out.evidence["input_set"] = set;
    out.evidence["cause"] = f.kind;
    return out;
  };
  if (!ev.check_memory(b, impl_->checksums.at(set), result, impl_->stream.get()))
    return stale(*result.failure);
  std::vector<HostBytes> got;
  ev.download_outputs(b, got);
  if (!ev.check_outputs(b, impl_->expected.at(set), got, result)) return stale(*result.failure);
  return std::nullopt;
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
