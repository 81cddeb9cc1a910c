#include "verify/evaluate.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "device/driver.hpp"
#include "device/plan_launcher.hpp"
#include "device/watchdog.hpp"
#include "kharness/error.hpp"
#include "kharness/numeric.hpp"
#include "kharness/text.hpp"
#include "verify/compare.hpp"
#include "verify/harness_kernels.hpp"
#include "verify/index_inputs.hpp"
#include "verify/precedence.hpp"
#include "verify/safetensors.hpp"
#include "verify/sampling_compare.hpp"

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
// NaN for every float type (f32, f16, bf16, fp8) and -1 for every integer: a kernel that assumes
// a zeroed workspace fails.
const std::vector<std::uint8_t> kWorkspacePoison = {0xFF};

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
  const std::map<std::string, double>& seconds() const { return seconds_; }

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
  // Enqueues the reads of both guard zones on `reads`; returns their slots (before, after).
  std::pair<std::size_t, std::size_t> read_guards(HarnessKernels::ReadBatch& reads,
                                                  CUstream s) const {
    const std::size_t before = reads.check_pattern(buffer_.ptr(), kGuardBytes, kGuardPattern, s);
    return {before, reads.check_pattern(data() + bytes_, kGuardBytes, kGuardPattern, s)};
  }
  // The first changed guard byte as a signed offset from the start (negative: before it) or from
  // the end of the data; nullopt when both guards are intact. From the reads of read_guards.
  std::optional<std::int64_t> guard_damage(const HarnessKernels::ReadBatch& reads,
                                           std::pair<std::size_t, std::size_t> slots) const {
    const PatternCheck before = reads.pattern_result(slots.first);
    if (before.mismatches > 0) {
      return static_cast<std::int64_t>(before.first_mismatch_byte) -
             static_cast<std::int64_t>(kGuardBytes);
    }
    const PatternCheck after = reads.pattern_result(slots.second);
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

// KHARNESS_HOST_COMPARE=1: elementwise outputs are downloaded and compared on the host (the
// path of the other comparators) instead of on the device. The verdicts are the same; the tests
// hold the two paths together with it (tests/gpu/check_test.cpp).
bool host_compare_forced() {
  const char* v = std::getenv("KHARNESS_HOST_COMPARE");
  return v != nullptr && std::string(v) == "1";
}

Failure launch_failure(const LaunchOutcome& o, const std::string& role) {
  std::string kind =
      o.error_name == "PLAN_ERROR" ? "launch_failed" : device::failure_kind_of(o.error_name);
  if (o.error_name == "COOPERATIVE_NOT_RESIDENT") kind = "cooperative_not_resident";
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
        sampling_(op.definition.kharness.comparator == "sampling"),
        device_compare_(op.definition.kharness.comparator == "elementwise" &&
                        !host_compare_forced()),
        kernels_() {
    if (!comparator_) {
      throw input_error(
          op.definition_file.string() + ": kharness.comparator",
          fmt::format("unknown comparator '{}' (known: {})", op.definition.kharness.comparator,
                      join(comparator_names(), ", ")));
    }
    if (sampling_ && def_.outputs.size() != 1) {
      throw input_error(op.definition_file.string() + ": kharness.comparator",
                        "the sampling comparator judges one output of draws");
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
      // A lost context (fatal_) ends the verdict: nothing more can run in this process.
      if (add_workload(v, std::move(wv), fatal_)) break;
    }
    v.seconds = seconds_since(start);
    v.phases = phases_.seconds();
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
    // Which launches this workload runs; the plan rules made sure a variant can be chosen.
    const LaunchPlan& plan = candidate_.solution->plan;
    try {
      wv.variant = plan.variant_label(plan.variant_for(w.bindings(def_)));
    } catch (const ExprError&) {
      wv.variant = "none";
    }
    // Sampling: the workload's trials together draw on sampling_launches(rows) input sets (the
    // trials' own, then more in each trial), all judged as one sample at its end.
    SamplingDraws draws;
    SamplingBudget budget(
        sampling_ ? sampling_launches(element_count(def_.outputs.at(0), w.bindings(def_))) : 0,
        options_.trials);
    for (int t = 0; t < options_.trials; ++t) {
      const std::uint64_t sets = sampling_ ? budget.next_trial() : 1;
      TrialResult trial =
          run_trial(w, trial_seed(options_.seed, index, t), t == 0 && options_.determinism,
                    sampling_ ? &draws : nullptr, sets);
      if (add_trial(wv, std::move(trial))) break;  // one failing trial decides the workload
    }
    if (sampling_ && wv.status == Status::kPassed) {
      const auto t0 = std::chrono::steady_clock::now();
      const SamplingJudgement j = draws.judge();
      phases_.add("sampling_test", t0);
      if (auto f = sampling_failure(def_.outputs.at(0).name, j)) add_sampling_failure(wv, *f);
    }
    return wv;
  }

  // Inputs of one trial: generated on the device from the trial's seed, or loaded from file. When
  // `b` already holds the buffers (a timed iteration's fresh inputs,
  // docs/correctness.md#checked-iterations) they are filled again in place, every generated tensor
  // from the new seed; a tensor from a file is left as it was loaded.
  void make_inputs(const Workload& w, std::uint64_t seed, TrialBuffers& b, CUstream s) {
    b.env.definition = &def_;
    b.env.axes = w.bindings(def_);
    IndexValues index_values;  // for the roles that couple inputs (a covering indptr)
    for (std::size_t i = 0; i < def_.inputs.size(); ++i) {
      const TensorSpec& t = def_.inputs[i];
      const WorkloadInput& in = w.inputs.at(t.name);
      if (t.is_scalar()) {
        b.env.scalars[t.name] = in.value;
        continue;
      }
      std::uint64_t count = element_count(t, b.env.axes);
      std::unique_ptr<GuardedBuffer> buf;
      if (auto kept = b.inputs.find(t.name); kept != b.inputs.end()) {
        buf = std::move(kept->second);
        if (in.kind == WorkloadInput::Kind::kSafetensors) {
          b.inputs[t.name] = std::move(buf);
          continue;
        }
      } else {
        buf = std::make_unique<GuardedBuffer>(t.name, count * dtype_size(t.dtype));
        buf->fill_guards(kernels_, s);
      }
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
      } else if (gen.distribution == "probability_rows") {
        // Rows of probabilities, tens of millions of values a set: made on the device, as the
        // host's generator makes them from the seed an index role would get (bit for bit).
        const ProbabilityRowsShape shape = probability_rows_shape(t, gen, b.env.axes, count);
        kernels_.probability_rows(buf->data(), shape.rows, shape.vocab, gen.std,
                                  splitmix(seed ^ (i + 1)), s);
      } else if (is_index_role(gen.distribution)) {
        // Offsets and ids must be valid for their role: made on the host, from the same seed.
        auto bytes =
            make_index_input(t, gen, b.env.axes, count, splitmix(seed ^ (i + 1)), &index_values);
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

  // Outputs poisoned with `poison` (a candidate's: the timed iterations' distribution), or with
  // the fixed poison_element (the reference's).
  void make_outputs(TrialBuffers& b, const LaunchPlan& plan, CUstream s,
                    const IterationPoison* poison = nullptr) {
    for (std::size_t i = 0; i < def_.outputs.size(); ++i) {
      const TensorSpec& t = def_.outputs[i];
      std::uint64_t count = element_count(t, b.env.axes);
      auto buf = std::make_unique<GuardedBuffer>(t.name, count * dtype_size(t.dtype));
      buf->fill_guards(kernels_, s);
      kernels_.fill_pattern(buf->data(), buf->bytes(),
                            poison ? poison->outputs.at(i) : poison_element(t.dtype), s);
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
    for (std::size_t i = 0; i < def_.outputs.size(); ++i) {
      const TensorSpec& t = def_.outputs[i];
      kernels_.fill_pattern(b.outputs[t.name]->data(), b.outputs[t.name]->bytes(),
                            trial_poison_.outputs.at(i), s);
    }
    if (b.workspace)
      kernels_.fill_pattern(b.workspace->data(), b.workspace->bytes(), kWorkspacePoison, s);
  }

  // Runs the reference on the trial's inputs; returns its outputs on the host (into `expected`,
  // unless it is null) and hands each output's device buffer to `keep` (the timing stage seals
  // them there). Its device buffers are scrubbed (poisoned) and freed before this returns, and its
  // module unloaded.
  void run_reference(TrialBuffers& b, CUstream s, std::vector<HostBytes>* expected,
                     const std::function<void(std::size_t, const GuardedBuffer&)>& keep = {}) {
    device::ActivityPhase phase("reference");
    Module module(reference_.result->cubin);
    PlanLauncher launcher(reference_.solution->plan, reference_.result->kernels, module);
    make_outputs(b, reference_.solution->plan, s);
    LaunchOutcome o = launcher.launch(b.env, s, true);
    if (!o.ok)
      throw Error(ExitCode::kInternal, "reference",
                  fmt::format("the operator's reference failed: {}", o.message));
    for (std::size_t i = 0; i < def_.outputs.size(); ++i) {
      const GuardedBuffer& out = *b.outputs[def_.outputs[i].name];
      if (keep) keep(i, out);
      if (expected) {
        expected->resize(def_.outputs.size());
        out.download((*expected)[i]);
      }
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
  // The memory rules' reads of a trial's buffers (docs/correctness.md#poison-and-guards: guard
  // zones intact, inputs unchanged), enqueued on a ReadBatch so that one wait answers all of them.
  struct MemoryReads {
    std::vector<std::pair<const GuardedBuffer*, std::pair<std::size_t, std::size_t>>> guards;
    std::vector<std::pair<std::string, std::size_t>> inputs;  // name, checksum slot
  };
  // `inputs`: also checksum the inputs (the timing stage checks them per iteration instead).
  MemoryReads read_memory(TrialBuffers& b, HarnessKernels::ReadBatch& reads, CUstream s,
                          bool inputs = true) const {
    MemoryReads r;
    std::vector<const GuardedBuffer*> all;
    for (auto& [name, buf] : b.inputs) all.push_back(buf.get());
    for (auto& [name, buf] : b.outputs) all.push_back(buf.get());
    if (b.workspace) all.push_back(b.workspace.get());
    for (const GuardedBuffer* buf : all) r.guards.emplace_back(buf, buf->read_guards(reads, s));
    if (!inputs) return r;
    for (auto& [name, buf] : b.inputs)
      r.inputs.emplace_back(name, reads.checksum(buf->data(), buf->bytes(), s));
    return r;
  }
  // The first broken rule among `r`'s reads (after reads.wait): a guard, in buffer order, then an
  // input whose checksum is not `checksums`'.
  static std::optional<Failure> memory_failure(
      const MemoryReads& r, const HarnessKernels::ReadBatch& reads,
      const std::map<std::string, std::uint64_t>& checksums) {
    for (const auto& [buf, slots] : r.guards) {
      if (auto offset = buf->guard_damage(reads, slots)) {
        return Failure{
            "out_of_bounds_write",
            fmt::format("a write landed outside {} ({} bytes), at byte offset {} {}", buf->name(),
                        buf->bytes(), *offset, *offset < 0 ? "before its start" : "from its start"),
            {{"tensor", buf->name()}, {"bytes", buf->bytes()}, {"guard_offset", *offset}}};
      }
    }
    for (const auto& [name, slot] : r.inputs) {
      if (reads.checksum_result(slot) != checksums.at(name)) {
        return Failure{"input_modified",
                       fmt::format("the candidate changed its input '{}'", name),
                       {{"tensor", name}}};
      }
    }
    return std::nullopt;
  }
  bool check_memory(TrialBuffers& b, const std::map<std::string, std::uint64_t>& checksums,
                    TrialResult& trial, CUstream s) {
    reads_.clear();
    const MemoryReads r = read_memory(b, reads_, s);
    reads_.wait(s);
    if (auto f = memory_failure(r, reads_, checksums)) {
      trial.failure = std::move(f);
      return false;
    }
    return true;
  }

  void download_outputs(TrialBuffers& b, std::vector<HostBytes>& got) {
    got.resize(def_.outputs.size());
    for (std::size_t i = 0; i < def_.outputs.size(); ++i)
      b.outputs[def_.outputs[i].name]->download(got[i]);
  }

  // What a comparator may read: the definition, the axes and (on first use, into `inputs`) the
  // trial's inputs. With `fresh`, `inputs` may hold another input set's copies (reused for their
  // pinned memory): a name not in `fresh` is downloaded again, then added to it.
  CompareContext compare_context(TrialBuffers& b, std::map<std::string, HostBytes>& inputs,
                                 std::set<std::string>* fresh = nullptr) const {
    CompareContext context;
    context.definition = &def_;
    context.axes = b.env.axes;
    context.input = [&b, &inputs, fresh](const std::string& name) -> const std::uint8_t* {
      auto buf = b.inputs.find(name);
      if (buf == b.inputs.end()) return nullptr;
      auto it = inputs.find(name);
      if (it == inputs.end() || (fresh && !fresh->count(name))) {
        if (it == inputs.end()) it = inputs.emplace(name, HostBytes()).first;
        buf->second->download(it->second);
        if (fresh) fresh->insert(name);
      }
      return it->second.data();
    };
    return context;
  }

  // Outputs against the reference; fills `trial` (comparisons, failure) and returns false on
  // failure.
  // The sampling comparator pools the draws into `draws` (their support is checked here); without
  // it, they are held to the support only: a rerun's or a timed iteration's draws are not tested
  // for their distribution again, which would spend the false-failure budget
  // (sampling_compare.hpp). `reuse` (optional): host copies of an earlier input set's inputs, whose
  // memory is reused. `phases` (optional): the phases the time goes to, the comparators' and, for
  // the sampling comparator, the download of the inputs it reads (every one: probs, top_k, top_p),
  // done first rather than on its first read.
  struct ComparePhases {
    const char* inputs;
    const char* compare;
  };
  bool check_outputs(TrialBuffers& b, const std::vector<HostBytes>& expected,
                     const std::vector<HostBytes>& got, TrialResult& trial,
                     SamplingDraws* draws = nullptr,
                     std::map<std::string, HostBytes>* reuse = nullptr,
                     const ComparePhases* phases = nullptr) {
    std::map<std::string, HostBytes> local;  // downloaded when a comparator asks for them
    std::set<std::string> fresh;
    CompareContext context = compare_context(b, reuse ? *reuse : local, reuse ? &fresh : nullptr);
    SamplingDraws support_only;
    context.sampling_draws = draws ? draws : &support_only;
    auto t0 = std::chrono::steady_clock::now();
    if (phases && sampling_) {
      for (const auto& [name, buf] : b.inputs) context.input(name);
      phases_.add(phases->inputs, t0);
      t0 = std::chrono::steady_clock::now();
    }
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
        if (phases) phases_.add(phases->compare, t0);
        trial.failure = *f;
        return false;
      }
    }
    if (phases) phases_.add(phases->compare, t0);
    return true;
  }

  // A candidate's outputs are poisoned as timed iterations poison them
  // (docs/correctness.md#poison-and-guards: nothing tells a trial from a timed launch); after its
  // launch, what is left of that poison becomes the fixed poison_element the comparators (host and
  // device) count as unwritten.
  void draw_trial_poison(std::uint64_t seed) {
    trial_poison_ = iteration_poison(def_, splitmix(seed ^ 0x706f69736f6e0000ull));
  }
  void normalise_poison(TrialBuffers& b, CUstream s) {
    for (std::size_t i = 0; i < def_.outputs.size(); ++i) {
      const TensorSpec& t = def_.outputs[i];
      const GuardedBuffer& out = *b.outputs.at(t.name);
      kernels_.replace_element(out.data(), out.bytes(), trial_poison_.outputs.at(i),
                               poison_element(t.dtype), s);
    }
  }

  // ---- the determinism rerun, both paths --------------------------------------------------------

  // The candidate again on the trial's inputs, its outputs and workspace poisoned again and shared
  // memory scrubbed; a launch failure.
  std::optional<Failure> launch_rerun(TrialBuffers& b, PlanLauncher& launcher, std::uint64_t seed,
                                      CUstream s) {
    draw_trial_poison(seed + 1);
    repoison(b, s);
    kernels_.scrub_shared(static_cast<std::uint32_t>(splitmix(seed + 1)), s);
    LaunchOutcome o;
    {
      device::ActivityPhase launching("candidate (rerun on the same inputs)");
      o = launcher.launch(b.env, s, true);
    }
    if (!o.ok) {
      fatal_ = o.sticky;
      return launch_failure(o, "candidate (rerun)");
    }
    normalise_poison(b, s);
    return std::nullopt;
  }
  static Failure on_rerun(Failure f) {
    f.evidence["rerun"] = true;
    f.message = "on a rerun with the same inputs: " + f.message;
    return f;
  }
  // The rerun's output `t` against the first run's (as expected), within tolerance: `f` is what
  // output_failure found.
  static Failure nondeterministic(const TensorSpec& t, const Failure& f) {
    return Failure{"nondeterministic",
                   fmt::format("{}: a rerun on the same inputs differs beyond tolerance ({})",
                               t.name, f.message),
                   f.evidence};
  }

  // ---- elementwise outputs, checked on the device ----------------------------------------------
  // For the elementwise comparator no output leaves the device: the reference's outputs are
  // sealed (HarnessKernels::seal: XORed with a ChaCha20 keystream under key_) into SealedCopy
  // buffers before its own buffers are scrubbed and freed, the candidate's outputs are compared
  // against them on the device (HarnessKernels::compare_sealed: compare_output's totals, bit for
  // bit, finished on the host by elementwise_check), and for the determinism rerun the first run's
  // outputs are sealed the same way and compared with the rerun's (the same kernel: its count of
  // differing elements is the bitwise test, its totals the within-tolerance test).
  //
  // What a candidate (which runs after the reference, in the same context, and may read and write
  // any device memory it can find) cannot do to the comparison:
  // - read the answers from a copy: the copies hold ciphertext; key_ is drawn from the OS per
  //   process, never derived from the recorded seed, and reaches the device only as a parameter of
  //   the harness kernels; every seal takes its own keystream (seals_), so two copies XORed
  //   together reveal nothing either.
  // - write its own answer into a copy (a plain copy would then compare equal to anything it
  //   wrote): without the key, whatever it writes decrypts to noise, which does not match; and
  //   every copy is checksummed after it is sealed and again after the candidate's last run,
  //   before any comparison counts, under a key too (sum_key_: a write cannot be made to keep
  //   the checksum), so a write is harness_memory_modified. That also keeps XOR sealing's
  //   malleability (flipping a ciphertext bit flips the same plaintext bit) out of reach, and
  //   noise with the poison's bits in it from passing for a reference that left elements
  //   unwritten (an internal error).
  // - change or forge a comparison's result: the comparison runs after the candidate's launches
  //   have finished (the launcher synchronises each one) and nothing of the candidate runs
  //   until its record is read; every block writes its own partial (nothing left in the scratch
  //   counts), and the record carries a tag under key_ binding it to its copy's keystream and a
  //   fresh nonce: a record that does not verify is harness_memory_modified.
  // tests/fixtures/cheats/overwrites_expected.cu tries the second; tests/gpu/
  // harness_kernels_test.cpp tampers with copies and records directly.
  struct SealedCopy {
    DeviceBuffer buffer;       // reused across trials; grown when a trial needs more
    std::uint64_t stream = 0;  // its keystream
    std::uint64_t bytes = 0;   // the sealed bytes (the tensor's), padded to 16 in `buffer`
    std::uint64_t checksum = 0;
    std::size_t padded() const { return (bytes + 15) / 16 * 16; }
  };

  // Seals output `i` (`out`) into copies[i], under a keystream no other seal uses. Asynchronous.
  void seal_copy(const GuardedBuffer& out, std::vector<SealedCopy>& copies, std::size_t i,
                 CUstream s) {
    if (copies.size() <= i) copies.resize(i + 1);
    SealedCopy& c = copies[i];
    c.bytes = out.bytes();
    if (c.buffer.size() < c.padded())
      c.buffer = DeviceBuffer(std::max<std::size_t>(16, c.padded()));
    c.stream = ++seals_;
    kernels_.seal(out.data(), c.buffer.ptr(), out.bytes(), key_, c.stream, s);
  }
  // Enqueues the checksums of the copies on reads_; their slots.
  std::vector<std::size_t> read_sealed(const std::vector<SealedCopy>& copies, CUstream s) {
    std::vector<std::size_t> slots;
    for (const SealedCopy& c : copies)
      slots.push_back(reads_.checksum(c.buffer.ptr(), c.padded(), s, sum_key_));
    return slots;
  }
  // harness_memory_modified when a copy's checksum (from read_sealed, after reads_.wait) is not
  // the one it had when sealed. `what`: whose outputs the copies hold.
  std::optional<Failure> sealed_failure(const std::vector<SealedCopy>& copies,
                                        const std::vector<std::size_t>& slots,
                                        const char* what) const {
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (reads_.checksum_result(slots[i]) == copies[i].checksum) continue;
      const std::string& tensor = def_.outputs[i].name;
      return Failure{"harness_memory_modified",
                     fmt::format("a kernel wrote into the harness's sealed copy of {}'s {}: the "
                                 "comparison cannot be trusted",
                                 what, tensor),
                     {{"tensor", tensor}, {"copy", what}}};
    }
    return std::nullopt;
  }
  // Enqueues the comparison of every output against `copies` on reads_; per output its slot and
  // nonce.
  std::vector<std::pair<std::size_t, std::uint64_t>> compare_all(
      TrialBuffers& b, const std::vector<SealedCopy>& copies, CUstream s) {
    std::vector<std::pair<std::size_t, std::uint64_t>> out;
    for (std::size_t i = 0; i < def_.outputs.size(); ++i) {
      const TensorSpec& t = def_.outputs[i];
      const GuardedBuffer& got = *b.outputs.at(t.name);
      const std::uint64_t nonce = ++nonces_;
      out.emplace_back(reads_.compare_sealed(got.data(), copies.at(i).buffer.ptr(),
                                             got.bytes() / dtype_size(t.dtype), t.dtype, key_,
                                             copies[i].stream, tolerance_, nonce, s),
                       nonce);
    }
    return out;
  }
  // Output i's record from compare_all (after reads_.wait): the record, or the
  // harness_memory_modified failure of one that does not authenticate or is not the one asked for.
  std::optional<CompareRecord> record_of(std::pair<std::size_t, std::uint64_t> slot,
                                         const SealedCopy& copy, const TensorSpec& t,
                                         std::optional<Failure>& failure) const {
    std::optional<CompareRecord> r = reads_.compare_result(slot.first, key_);
    if (r && r->stream == copy.stream && r->nonce == slot.second &&
        r->totals.elements == copy.bytes / dtype_size(t.dtype)) {
      return r;
    }
    failure = Failure{"harness_memory_modified",
                      fmt::format("the record of the device comparison of {} was overwritten: a "
                                  "kernel wrote into the harness's memory",
                                  t.name),
                      {{"tensor", t.name}}};
    return std::nullopt;
  }
  // check_outputs' loop over the records of compare_all: comparisons into `trial`, a reference
  // that left elements unwritten is an internal error, the first failure returned.
  std::optional<Failure> judge(const std::vector<std::pair<std::size_t, std::uint64_t>>& slots,
                               const std::vector<SealedCopy>& copies, TrialResult& trial) const {
    for (std::size_t i = 0; i < def_.outputs.size(); ++i) {
      const TensorSpec& t = def_.outputs[i];
      std::optional<Failure> forged;
      const std::optional<CompareRecord> r = record_of(slots[i], copies[i], t, forged);
      if (!r) return forged;
      const OutputCheck check = elementwise_check(t.name, t.dtype, r->totals);
      trial.comparisons.push_back(check.comparison);
      if (check.reference_unwritten > 0) {
        throw Error(ExitCode::kInternal, "reference",
                    fmt::format("the operator's reference left {} elements of {} unwritten",
                                check.reference_unwritten, t.name));
      }
      if (auto f = output_failure(check, tolerance_)) return f;
    }
    return std::nullopt;
  }

  // The first run's outputs: the memory rules' reads, the sealed references' checksums and every
  // output's comparison, one wait; then the rules in the host path's order (memory, then each
  // output's output_failure), the sealed copies' integrity between the two. With `keep_first`
  // (a rerun follows), the outputs are also sealed into sealed_first_ and checksummed.
  std::optional<Failure> check_on_device(TrialBuffers& b,
                                         const std::map<std::string, std::uint64_t>& checksums,
                                         bool keep_first, TrialResult& trial, CUstream s) {
    reads_.clear();
    const MemoryReads memory = read_memory(b, reads_, s);
    const std::vector<std::size_t> sealed = read_sealed(sealed_expected_, s);
    const auto records = compare_all(b, sealed_expected_, s);
    std::vector<std::size_t> first_sums;
    if (keep_first) {
      for (std::size_t i = 0; i < def_.outputs.size(); ++i)
        seal_copy(*b.outputs.at(def_.outputs[i].name), sealed_first_, i, s);
      first_sums = read_sealed(sealed_first_, s);
    }
    reads_.wait(s);
    if (auto f = memory_failure(memory, reads_, checksums)) return f;
    if (auto f = sealed_failure(sealed_expected_, sealed, "the reference")) return f;
    if (auto f = judge(records, sealed_expected_, trial)) return f;
    for (std::size_t i = 0; i < first_sums.size(); ++i)
      sealed_first_[i].checksum = reads_.checksum_result(first_sums[i]);
    return std::nullopt;
  }

  // The determinism rerun: the memory rules' reads, every sealed copy's checksum and each output's
  // comparison with the first run's sealed copy, one wait. Outputs that are bitwise equal pass as
  // on the host path; from the first that differs on, the rerun is held to the reference (another
  // wait) and each differing output to the first run's within tolerance.
  std::optional<Failure> rerun_on_device(TrialBuffers& b,
                                         const std::map<std::string, std::uint64_t>& checksums,
                                         PlanLauncher& launcher, std::uint64_t seed,
                                         TrialResult& trial, CUstream s) {
    if (auto f = launch_rerun(b, launcher, seed, s)) return f;
    reads_.clear();
    const MemoryReads memory = read_memory(b, reads_, s);
    const std::vector<std::size_t> sealed = read_sealed(sealed_expected_, s);
    const std::vector<std::size_t> first = read_sealed(sealed_first_, s);
    const auto records = compare_all(b, sealed_first_, s);
    reads_.wait(s);
    if (auto f = memory_failure(memory, reads_, checksums)) return on_rerun(*f);
    if (auto f = sealed_failure(sealed_expected_, sealed, "the reference")) return f;
    if (auto f = sealed_failure(sealed_first_, first, "the first run")) return f;
    std::vector<CompareRecord> against_first;
    for (std::size_t i = 0; i < def_.outputs.size(); ++i) {
      std::optional<Failure> forged;
      auto r = record_of(records[i], sealed_first_[i], def_.outputs[i], forged);
      if (!r) return forged;
      against_first.push_back(*r);
    }
    bool held_to_reference = false;
    for (std::size_t i = 0; i < def_.outputs.size(); ++i) {
      if (against_first[i].differing == 0) continue;
      trial.bitwise_deterministic = false;
      if (!held_to_reference) {
        // Differs: the rerun must still match the reference (no candidate code has run since the
        // copies' checksums were read).
        held_to_reference = true;
        reads_.clear();
        const auto again = compare_all(b, sealed_expected_, s);
        reads_.wait(s);
        TrialResult rerun;
        if (auto f = judge(again, sealed_expected_, rerun)) return on_rerun(*f);
      }
      const TensorSpec& t = def_.outputs[i];
      const OutputCheck c = elementwise_check(t.name, t.dtype, against_first[i].totals);
      if (auto f = output_failure(c, tolerance_)) return nondeterministic(t, *f);
    }
    return std::nullopt;
  }

  // `draws`: the workload's pool of sampling draws (sampling only), `sets` the input sets this
  // trial draws on (its own, then sets - 1 more: sample_more).
  TrialResult run_trial(const Workload& w, std::uint64_t seed, bool determinism,
                        SamplingDraws* draws = nullptr, std::uint64_t sets = 1) {
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
    if (device_compare_) {
      // Its outputs stay on the device, sealed (see SealedCopy), and are compared there.
      run_reference(b, s, nullptr, [&](std::size_t i, const GuardedBuffer& out) {
        seal_copy(out, sealed_expected_, i, s);
      });
    } else {
      run_reference(b, s, &expected);
    }
    phases_.add("reference", t0);
    t0 = std::chrono::steady_clock::now();
    // The inputs' checksums (the memory rules) and the sealed copies', one wait for all of them.
    std::map<std::string, std::uint64_t> checksums;
    {
      reads_.clear();
      std::vector<std::pair<std::string, std::size_t>> input_slots;
      for (auto& [name, buf] : b.inputs)
        input_slots.emplace_back(name, reads_.checksum(buf->data(), buf->bytes(), s));
      const std::vector<std::size_t> sealed_slots =
          device_compare_ ? read_sealed(sealed_expected_, s) : std::vector<std::size_t>{};
      reads_.wait(s);
      for (const auto& [name, slot] : input_slots) checksums[name] = reads_.checksum_result(slot);
      for (std::size_t i = 0; i < sealed_slots.size(); ++i)
        sealed_expected_[i].checksum = reads_.checksum_result(sealed_slots[i]);
    }
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
      draw_trial_poison(seed);
      make_outputs(b, candidate_.solution->plan, s, &trial_poison_);
    } catch (const device::CudaError& e) {
      return fail(Failure{"launch_failed", e.what(), {{"cuda_error", e.name()}}});
    } catch (const ExprError& e) {
      return fail(Failure{"launch_failed", e.what(), {}});
    }
    phases_.add("candidate_setup", t0);
    t0 = std::chrono::steady_clock::now();
    // Nothing an earlier kernel left in shared memory reaches this one.
    kernels_.scrub_shared(static_cast<std::uint32_t>(splitmix(seed)), s);
    LaunchOutcome o = [&] {
      device::ActivityPhase launching("candidate");
      return launcher->launch(b.env, s, true);
    }();
    phases_.add("candidate_run", t0);
    if (!o.ok) {
      fatal_ = o.sticky;
      return fail(launch_failure(o, "candidate"));
    }
    normalise_poison(b, s);
    t0 = std::chrono::steady_clock::now();
    if (device_compare_) {
      auto f = check_on_device(b, checksums, determinism, trial, s);
      phases_.add("compare", t0);
      if (f) return fail(*f);
      if (determinism) {
        t0 = std::chrono::steady_clock::now();
        f = rerun_on_device(b, checksums, *launcher, seed, trial, s);
        phases_.add("determinism", t0);
        if (f) return fail(*f);
      }
      d.check(d.cuStreamSynchronize(s), "cuStreamSynchronize");
      trial.seconds = seconds_since(start);
      return trial;
    }
    if (!check_memory(b, checksums, trial, s)) return fail(*trial.failure);
    std::vector<HostBytes>& got = got_;
    download_outputs(b, got);
    phases_.add("download", t0);
    static const ComparePhases kComparePhases{"compare_inputs", "compare"};
    // A sampler's inputs (hundreds of MiB of probabilities) go to the pinned copies the sampling
    // sets reuse: pinning that much afresh every trial would cost more than the copy.
    if (!check_outputs(b, expected, got, trial, draws, sampling_ ? &sampling_inputs_ : nullptr,
                       &kComparePhases)) {
      return fail(*trial.failure);
    }
    if (determinism) {
      // The same inputs again: a correct kernel gives the same answer (within tolerance).
      t0 = std::chrono::steady_clock::now();
      if (auto f = launch_rerun(b, *launcher, seed, s)) return fail(*f);
      TrialResult rerun;
      if (!check_memory(b, checksums, rerun, s)) return fail(on_rerun(*rerun.failure));
      std::vector<HostBytes>& again = again_;
      download_outputs(b, again);
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (bitwise_differences(got[i].data(), again[i].data(), got[i].size()) == 0) continue;
        trial.bitwise_deterministic = false;
        // Differs: the rerun must still match the reference, and the first run within tolerance.
        if (!check_outputs(b, expected, again, rerun)) return fail(on_rerun(*rerun.failure));
        const TensorSpec& t = def_.outputs[i];
        std::map<std::string, HostBytes> inputs;
        CompareContext context = compare_context(b, inputs);
        SamplingDraws support_only;  // a sampler's rerun: its support (the pool has the first run)
        context.sampling_draws = &support_only;
        OutputCheck c = comparator_(t.name, t.dtype, got[i].data(), again[i].data(),
                                    got[i].size() / dtype_size(t.dtype), tolerance_, 0, context);
        if (auto f = output_failure(c, tolerance_)) return fail(nondeterministic(t, *f));
      }
      phases_.add("determinism", t0);
    }
    if (draws && sets > 1) {
      t0 = std::chrono::steady_clock::now();
      auto f = sample_more(w, seed, sets - 1, *launcher, *draws, s);
      phases_.add("sampling_sets", t0);
      if (f) return fail(*f);
    }
    d.check(d.cuStreamSynchronize(s), "cuStreamSynchronize");
    trial.seconds = seconds_since(start);
    return trial;
  }

  // A sampling trial's other input sets: the candidate, still in the trial's module (state it
  // keeps, a generator's counter, advances), on `sets` more fresh input sets, each held to the
  // memory rules and the support, its draws added to `draws`. No reference runs on them: the
  // sampling comparator reads no reference output (it computes each row's distribution from the
  // inputs). Returns the first failure. Each step is a phase ("sampling_sets.<step>"; their sum,
  // with the release of each set's buffers, is "sampling_sets").
  std::optional<Failure> sample_more(const Workload& w, std::uint64_t seed, std::uint64_t sets,
                                     PlanLauncher& launcher, SamplingDraws& draws, CUstream s) {
    const Driver& d = Driver::instance();
    static const ComparePhases kPhases{"sampling_sets.download_inputs", "sampling_sets.placement"};
    for (std::uint64_t set = 1; set <= sets; ++set) {
      const std::string which = fmt::format("sampling input set {} of the trial", set);
      auto t0 = std::chrono::steady_clock::now();
      TrialBuffers b;
      make_inputs(w, splitmix(seed ^ splitmix(0x5a3d9e1b00000000ull + set)), b, s);
      d.check(d.cuStreamSynchronize(s), "cuStreamSynchronize");
      phases_.add("sampling_sets.inputs", t0);
      t0 = std::chrono::steady_clock::now();
      std::map<std::string, std::uint64_t> checksums;
      for (auto& [name, buf] : b.inputs)
        checksums[name] = kernels_.checksum(buf->data(), buf->bytes(), s);
      phases_.add("sampling_sets.checksums", t0);
      t0 = std::chrono::steady_clock::now();
      draw_trial_poison(seed + 2 + set);
      make_outputs(b, candidate_.solution->plan, s, &trial_poison_);
      kernels_.scrub_shared(static_cast<std::uint32_t>(splitmix(seed + 2 + set)), s);
      LaunchOutcome o = [&] {
        device::ActivityPhase launching("candidate (sampling input set)");
        return launcher.launch(b.env, s, true);
      }();
      phases_.add("sampling_sets.launch", t0);
      if (!o.ok) {
        fatal_ = o.sticky;
        return launch_failure(o, "candidate (" + which + ")");
      }
      normalise_poison(b, s);
      TrialResult result;
      std::vector<HostBytes>& got = got_;
      t0 = std::chrono::steady_clock::now();
      bool ok = check_memory(b, checksums, result, s);
      phases_.add("sampling_sets.memory_check", t0);
      if (ok) {
        t0 = std::chrono::steady_clock::now();
        download_outputs(b, got);
        phases_.add("sampling_sets.download_outputs", t0);
        // `got` stands in for the reference's outputs too (their sizes; no values are read).
        ok = check_outputs(b, got, got, result, &draws, &sampling_inputs_, &kPhases);
      }
      if (!ok) {
        Failure f = *result.failure;
        f.evidence["sampling_input_set"] = set;
        f.message = "on " + which + ": " + f.message;
        return f;
      }
      t0 = std::chrono::steady_clock::now();
      b.inputs.clear();
      b.outputs.clear();
      b.workspace.reset();
      phases_.add("sampling_sets.release", t0);
    }
    d.check(d.cuStreamSynchronize(s), "cuStreamSynchronize");
    return std::nullopt;
  }

  const Operator& op_;
  const Definition& def_;
  const Compiled& reference_;
  const Compiled& candidate_;
  const CheckOptions& options_;
  Tolerance tolerance_;
  Comparator comparator_;
  bool sampling_;           // the sampling comparator: draws pooled per workload (run_workload)
  bool device_compare_;     // the elementwise comparator: outputs compared on the device
  HarnessKernels kernels_;  // harness-internal kernels, loaded in the current context
  HarnessKernels::ReadBatch reads_{kernels_};  // check_memory's and integrity()'s device reads
  std::map<std::string, std::unique_ptr<SafetensorsFile>> safetensors_;
  bool fatal_ = false;
  PhaseClock phases_;
  std::vector<HostBytes> expected_, got_, again_;  // pinned host copies, reused across trials
  IterationPoison trial_poison_;                   // the candidate's poison in this launch
  const std::uint64_t key_ = secret_key();         // seals the copies; never leaves the process
  const std::uint64_t sum_key_ = splitmix(key_ ^ 0x73756d6b6579ull);  // their checksums' key
  std::uint64_t seals_ = 0;                                 // keystreams used so far (one per seal)
  std::uint64_t nonces_ = 0;                                // comparisons enqueued so far
  std::vector<SealedCopy> sealed_expected_, sealed_first_;  // per output
  std::map<std::string, HostBytes> sampling_inputs_;  // the sampling input sets' inputs, likewise

 public:
  const PhaseClock& phases() const { return phases_; }
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

// What one timed iteration is checked against (docs/correctness.md#checked-iterations): the truth
// of its own fresh inputs, computed after its launch by the reference (all of it, or a point
// reference: rows of kharness.timed_check drawn after the launch), sealed and compared on the
// device, or downloaded and compared on the host. Inputs are checksummed under a key before and
// after every launch.
struct TimedOutputs::Impl {
  Evaluator evaluator;
  const Workload* workload = nullptr;
  std::vector<std::unique_ptr<TrialBuffers>> sets;
  std::uint64_t key = 0;
  bool on_device = false;
  int slots = 0;
  DeviceBuffer records;
  std::vector<std::uint8_t> host_records;
  // The reference, loaded once, and its outputs (full size, or the point reference's rows).
  std::unique_ptr<Module> reference_module;
  std::unique_ptr<PlanLauncher> reference;
  std::vector<DeviceBuffer> truth;     // per output: the reference's output of this iteration
  std::vector<DeviceBuffer> sealed;    // per output: `truth` sealed (device checks)
  std::vector<DeviceBuffer> got_rows;  // per output: the candidate's rows (point reference)
  std::map<std::string, DeviceBuffer> input_rows;  // per row-sliced input (point reference)
  DeviceBuffer truth_workspace;
  // The point reference: `rows` of the axis `rows_of` (of `rows_total`) per iteration.
  bool point = false;
  std::string rows_of;
  std::int64_t rows_total = 0;
  int rows = 0;
  std::uint64_t rows_checked = 0;
  std::mt19937_64 row_rng;
  // Keyed checksums of every set's inputs: the last value known for each set (by input name),
  // the reads of the current batch, and the slots a refresh() enqueued for each set.
  HarnessKernels::ReadBatch sums;
  std::vector<std::map<std::string, std::uint64_t>> known;
  std::vector<std::map<std::string, std::size_t>> before;  // slots in `sums`, this batch
  struct Pending {
    std::uint64_t iteration = 0;
    int set = 0;
    std::map<std::string, std::size_t> before, after;  // `before` empty: known[set]
    // The point reference: the rows drawn, and per output the elements of one row, so that a
    // failing element of the gathered rows is reported at its place in the whole output.
    std::vector<std::uint32_t> picked;
    std::vector<std::uint64_t> row_elements;
  };
  std::vector<Pending> pending;
  std::vector<std::string> fixed_inputs;  // inputs read from files: the same every iteration
  SamplingDraws draws;                    // every timed draw of a sampling definition
  std::uint64_t refreshes = 0;
  Stream stream;
  Impl(const Operator& op, const Compiled& reference, const Compiled& candidate,
       const CheckOptions& options)
      : evaluator(op, reference, candidate, options), sums(evaluator.kernels_) {}

  // The keystream of output `t` of input set `set`.
  static std::uint64_t stream_id(int set, std::size_t t) {
    return (static_cast<std::uint64_t>(set) << 16) | t;
  }
  std::uint64_t sum_key() const { return evaluator.sum_key_; }

  std::map<std::string, std::size_t> read_sums(int set, CUstream s) {
    std::map<std::string, std::size_t> out;
    for (auto& [name, buf] : sets.at(set)->inputs)
      out[name] = sums.checksum(buf->data(), buf->bytes(), s, sum_key());
    return out;
  }

  // `rows` distinct rows of [0, rows_total), drawn now (after the launch they check), sorted.
  std::vector<std::uint32_t> draw_rows() {
    std::set<std::uint32_t> picked;  // Floyd's sampling without replacement
    const auto n = static_cast<std::uint64_t>(rows_total);
    for (std::uint64_t j = n - static_cast<std::uint64_t>(rows); j < n; ++j) {
      const auto t = static_cast<std::uint32_t>(row_rng() % (j + 1));
      if (!picked.insert(t).second) picked.insert(static_cast<std::uint32_t>(j));
    }
    return {picked.begin(), picked.end()};
  }

  // Row bytes of tensor `t` (its dimensions after the first).
  std::uint64_t row_bytes(const TensorSpec& t, const Bindings& axes) const {
    std::uint64_t n = dtype_size(t.dtype);
    const auto shape = tensor_shape(t, axes);
    for (std::size_t i = 1; i < shape.size(); ++i) n *= static_cast<std::uint64_t>(shape[i]);
    return n;
  }

  // Runs the reference on set `set`'s current inputs (all rows, or `picked`), into `truth`.
  void run_truth(int set, const std::vector<std::uint32_t>& picked, CUstream s) {
    const Definition& def = evaluator.def_;
    const TrialBuffers& b = *sets.at(set);
    LaunchEnv env;
    env.definition = &def;
    env.axes = b.env.axes;
    env.scalars = b.env.scalars;
    env.tensors = b.env.tensors;
    if (point) {
      env.axes[rows_of] = static_cast<std::int64_t>(picked.size());
      for (const auto& t : def.inputs) {
        auto it = input_rows.find(t.name);
        if (it == input_rows.end()) continue;
        evaluator.kernels_.gather_rows(b.inputs.at(t.name)->data(), it->second.ptr(),
                                       row_bytes(t, b.env.axes), picked, s);
        env.tensors[t.name] = it->second.ptr();
      }
    }
    for (std::size_t t = 0; t < def.outputs.size(); ++t) {
      evaluator.kernels_.fill_pattern(truth[t].ptr(), truth[t].size(),
                                      poison_element(def.outputs[t].dtype), s);
      env.tensors[def.outputs[t].name] = truth[t].ptr();
    }
    env.workspace = truth_workspace.size() ? truth_workspace.ptr() : 0;
    LaunchOutcome o = reference->launch(env, s, false);
    if (!o.ok) {
      throw Error(ExitCode::kInternal, "reference",
                  fmt::format("the operator's reference failed on a timed iteration's inputs: {}",
                              o.message));
    }
  }
};

TimedOutputs::TimedOutputs(const Operator& op, const Compiled& reference, const Compiled& candidate,
                           const Workload& workload, int sets, const CheckOptions& options,
                           int batch_slots, std::uint64_t key)
    : impl_(std::make_unique<Impl>(op, reference, candidate, options)) {
  Impl& m = *impl_;
  Evaluator& ev = m.evaluator;
  const Definition& def = ev.def_;
  m.key = key;
  m.workload = &workload;
  m.row_rng.seed(splitmix(key ^ 0x726f7773ull));  // rows no kernel can predict
  // Elementwise outputs are checked on the device against sealed references; other comparators
  // (top-k sets, sampling) on the host.
  m.on_device = def.kharness.comparator == "elementwise";
  CUstream s = m.stream.get();
  for (int i = 0; i < sets; ++i) {
    auto b = std::make_unique<TrialBuffers>();
    // Seeds apart from the correctness trials' (which use trial numbers 0, 1, 2, ...); every
    // iteration then fills them again from its own seed (refresh).
    ev.make_inputs(workload, trial_seed(options.seed, ev.workload_index(workload), 1000 + i), *b,
                   s);
    ev.make_outputs(*b, candidate.solution->plan, s);
    m.sets.push_back(std::move(b));
  }
  for (const auto& t : def.inputs) {
    auto in = workload.inputs.find(t.name);
    if (!t.is_scalar() && in != workload.inputs.end() &&
        in->second.kind == WorkloadInput::Kind::kSafetensors) {
      m.fixed_inputs.push_back(t.name);
    }
  }
  // The truth: the point reference where the definition asks for it and the axis has more rows
  // than it samples, else the whole reference.
  const Bindings& axes = m.sets.at(0)->env.axes;
  Bindings truth_axes = axes;
  if (m.on_device && !def.kharness.timed_rows_of.empty()) {
    m.rows_of = def.kharness.timed_rows_of;
    m.rows_total = axes.at(m.rows_of);
    m.rows = def.kharness.timed_rows;
    m.point = m.rows_total > m.rows;
    if (m.point) truth_axes[m.rows_of] = m.rows;
  }
  if (m.point) {
    for (const auto& t : def.inputs) {
      if (t.is_scalar() || t.shape->empty() || t.shape->front() != m.rows_of) continue;
      m.input_rows.emplace(t.name,
                           DeviceBuffer((m.row_bytes(t, axes) * m.rows + 15) / 16 * 16 + 16));
    }
  }
  for (const auto& t : def.outputs) {
    const std::uint64_t bytes = element_count(t, truth_axes) * dtype_size(t.dtype);
    const std::size_t padded = static_cast<std::size_t>((bytes + 15) / 16 * 16 + 16);
    m.truth.emplace_back(padded);
    if (m.on_device) m.sealed.emplace_back(padded);
    if (m.point) m.got_rows.emplace_back(padded);
  }
  const std::int64_t ws = reference.solution->plan.workspace_bytes.eval(truth_axes);
  if (ws > 0) m.truth_workspace = DeviceBuffer(static_cast<std::size_t>(ws));
  if (!ev.sampling_) {
    m.reference_module = std::make_unique<Module>(reference.result->cubin);
    m.reference = std::make_unique<PlanLauncher>(reference.solution->plan,
                                                 reference.result->kernels, *m.reference_module);
  }
  m.slots = std::max(batch_slots, 1);
  if (m.on_device) {
    m.records =
        DeviceBuffer(kCheckRecordBytes * def.outputs.size() * static_cast<std::size_t>(m.slots));
    m.host_records.resize(m.records.size());
  }
  // What each set's inputs hold now, for checks of iterations that did not refresh them.
  std::vector<std::map<std::string, std::size_t>> first;
  for (int i = 0; i < sets; ++i) first.push_back(m.read_sums(i, s));
  m.sums.wait(s);
  for (int i = 0; i < sets; ++i) {
    std::map<std::string, std::uint64_t> values;
    for (const auto& [name, slot] : first[static_cast<std::size_t>(i)])
      values[name] = m.sums.checksum_result(slot);
    m.known.push_back(std::move(values));
  }
  m.sums.clear();
  m.before.assign(static_cast<std::size_t>(sets), {});
  m.stream.synchronize();
}

TimedOutputs::~TimedOutputs() = default;

int TimedOutputs::sets() const { return static_cast<int>(impl_->sets.size()); }

bool TimedOutputs::checked_on_device() const { return impl_->on_device; }

const device::LaunchEnv& TimedOutputs::env(int set) const { return impl_->sets.at(set)->env; }

const HarnessKernels& TimedOutputs::kernels() const { return impl_->evaluator.kernels_; }

void TimedOutputs::refresh(int set, std::uint64_t draw, CUstream stream) {
  Impl& m = *impl_;
  ++m.refreshes;
  m.evaluator.make_inputs(*m.workload, splitmix(draw ^ 0x6672657368ull), *m.sets.at(set), stream);
  m.before.at(static_cast<std::size_t>(set)) = m.read_sums(set, stream);
}

void TimedOutputs::poison(int set, const IterationPoison& poison, CUstream stream) const {
  const Evaluator& ev = impl_->evaluator;
  TrialBuffers& b = *impl_->sets.at(set);
  for (std::size_t t = 0; t < ev.def_.outputs.size(); ++t) {
    const GuardedBuffer& out = *b.outputs.at(ev.def_.outputs[t].name);
    ev.kernels_.fill_pattern(out.data(), out.bytes(), poison.outputs.at(t), stream);
  }
  if (b.workspace)
    ev.kernels_.fill_pattern(b.workspace->data(), b.workspace->bytes(), kWorkspacePoison, stream);
}

void TimedOutputs::enqueue_check(int set, std::uint64_t iteration, const IterationPoison& poison,
                                 CUstream stream) {
  Impl& m = *impl_;
  if (!m.on_device) throw Error(ExitCode::kInternal, "timing", "enqueue_check on a host check");
  if (static_cast<int>(m.pending.size()) >= m.slots)
    throw Error(ExitCode::kInternal, "timing", "more checks in flight than record slots");
  const Evaluator& ev = m.evaluator;
  const TrialBuffers& b = *m.sets.at(set);
  const Tolerance& tol = ev.tolerance_;
  const std::size_t outputs = ev.def_.outputs.size();
  const std::size_t slot = m.pending.size();
  Impl::Pending p;
  p.iteration = iteration;
  p.set = set;
  p.before = std::move(m.before.at(static_cast<std::size_t>(set)));
  m.before.at(static_cast<std::size_t>(set)).clear();
  p.after = m.read_sums(set, stream);
  // The truth of this iteration's inputs, drawn rows and all, only now: the launch is enqueued.
  const std::vector<std::uint32_t> picked = m.point ? m.draw_rows() : std::vector<std::uint32_t>{};
  m.run_truth(set, picked, stream);
  for (std::size_t t = 0; t < outputs; ++t) {
    const TensorSpec& spec = ev.def_.outputs[t];
    const GuardedBuffer& out = *b.outputs.at(spec.name);
    CUdeviceptr got = out.data();
    std::uint64_t bytes = out.bytes();
    if (m.point) {
      const std::uint64_t row = m.row_bytes(spec, b.env.axes);
      ev.kernels_.gather_rows(out.data(), m.got_rows[t].ptr(), row, picked, stream);
      got = m.got_rows[t].ptr();
      bytes = row * picked.size();
      p.row_elements.push_back(row / dtype_size(spec.dtype));
    }
    ev.kernels_.seal(m.truth[t].ptr(), m.sealed[t].ptr(), bytes, m.key, Impl::stream_id(set, t),
                     stream);
    std::uint64_t poison_bits = 0;
    std::memcpy(&poison_bits, poison.outputs.at(t).data(), poison.outputs.at(t).size());
    CUdeviceptr record = m.records.ptr() + (slot * outputs + t) * kCheckRecordBytes;
    ev.kernels_.check_sealed(got, m.sealed[t].ptr(), bytes / dtype_size(spec.dtype), spec.dtype,
                             m.key, Impl::stream_id(set, t), poison_bits, tol.atol, tol.rtol,
                             iteration, t, record, stream);
  }
  if (m.point) m.rows_checked += picked.size();
  p.picked = picked;
  m.pending.push_back(std::move(p));
}

namespace {

// The failure a device check record shows, in compare.cpp's order: output_not_written,
// nan_or_inf, tolerance (with the definition's matched ratio).
std::optional<Failure> record_failure(const CheckRecord& r, const TensorSpec& t,
                                      const Tolerance& tol) {
  const std::uint64_t bad = r.unwritten + r.nonfinite + r.mismatches;
  const double matched =
      r.elements == 0 ? 1.0 : 1.0 - static_cast<double>(bad) / static_cast<double>(r.elements);
  std::string kind;
  if (r.unwritten > 0) {
    kind = "output_not_written";
  } else if (r.nonfinite > 0) {
    kind = "nan_or_inf";
  } else if (matched < tol.required_matched_ratio) {
    kind = "tolerance";
  } else {
    return std::nullopt;
  }
  std::uint8_t e[8], g[8];
  std::memcpy(e, &r.expected_bits, 8);
  std::memcpy(g, &r.got_bits, 8);
  const double expected = to_double(t.dtype, e);
  const double got = to_double(t.dtype, g);
  nlohmann::json value_got = std::isfinite(got) ? nlohmann::json(got)
                             : std::isnan(got)  ? nlohmann::json("nan")
                                                : nlohmann::json(got > 0 ? "inf" : "-inf");
  std::string what =
      kind == "output_not_written"
          ? fmt::format("{} of {} elements still hold this iteration's poison", r.unwritten,
                        r.elements)
      : kind == "nan_or_inf"
          ? fmt::format("{} NaN/Inf elements where the reference is finite", r.nonfinite)
          : fmt::format(
                "{} of {} elements out of tolerance (atol {}, rtol {}); matched ratio "
                "{:.6f} < {}",
                r.mismatches + r.unwritten + r.nonfinite, r.elements, tol.atol, tol.rtol, matched,
                tol.required_matched_ratio);
  Failure f{kind,
            fmt::format("{}: {} (first at index {}: expected {}, got {})", t.name, what,
                        r.first_index, expected, value_got.dump()),
            {{"tensor", t.name},
             {"elements", r.elements},
             {"unwritten", r.unwritten},
             {"nonfinite", r.nonfinite},
             {"mismatches", r.mismatches},
             {"matched_ratio", matched},
             {"first_bad_index", r.first_index},
             {"expected", expected},
             {"got", value_got},
             {"max_abs_error", r.max_abs_error},
             {"max_rel_error", r.max_rel_error}}};
  return f;
}

Failure stale(const Failure& f, std::uint64_t iteration, int set) {
  Failure out{"stale_output",
              fmt::format("timed iteration {} (input set {}): {}", iteration, set, f.message),
              f.evidence};
  out.evidence["iteration"] = iteration;
  out.evidence["input_set"] = set;
  out.evidence["cause"] = f.kind;
  return out;
}

}  // namespace

std::optional<Failure> TimedOutputs::collect(CUstream stream) {
  Impl& m = *impl_;
  if (m.pending.empty()) return std::nullopt;
  const Evaluator& ev = m.evaluator;
  const std::size_t outputs = ev.def_.outputs.size();
  const Driver& d = Driver::instance();
  if (m.on_device) {
    const std::size_t bytes = m.pending.size() * outputs * kCheckRecordBytes;
    d.check(d.cuMemcpyDtoHAsync(m.host_records.data(), m.records.ptr(), bytes, stream),
            "cuMemcpyDtoHAsync");
  }
  m.sums.wait(stream);  // synchronises `stream`: the records are here too
  auto pending = std::move(m.pending);
  m.pending.clear();
  std::optional<Failure> failure;
  for (std::size_t slot = 0; slot < pending.size() && !failure; ++slot) {
    const Impl::Pending& p = pending[slot];
    // Inputs: what the refresh wrote (or what the set held) is what the launch left.
    std::map<std::string, std::uint64_t> expected = m.known.at(static_cast<std::size_t>(p.set));
    for (const auto& [name, s] : p.before) expected[name] = m.sums.checksum_result(s);
    m.known.at(static_cast<std::size_t>(p.set)) = expected;
    for (const auto& [name, s] : p.after) {
      if (m.sums.checksum_result(s) != expected.at(name)) {
        failure = Failure{"input_modified",
                          fmt::format("timed iteration {} (input set {}): the candidate changed "
                                      "its input '{}'",
                                      p.iteration, p.set, name),
                          {{"tensor", name}, {"iteration", p.iteration}, {"input_set", p.set}}};
        break;
      }
    }
    if (failure || !m.on_device) continue;
    for (std::size_t t = 0; t < outputs; ++t) {
      const std::uint8_t* raw = m.host_records.data() + (slot * outputs + t) * kCheckRecordBytes;
      std::optional<CheckRecord> r = HarnessKernels::open_record(raw, m.key);
      if (!r || r->iteration != p.iteration || r->tensor != t ||
          r->stream != Impl::stream_id(p.set, t)) {
        failure = Failure{"harness_memory_modified",
                          fmt::format("the check record of timed iteration {} ({}) was "
                                      "overwritten: a kernel wrote into the harness's memory",
                                      p.iteration, ev.def_.outputs[t].name),
                          {{"iteration", p.iteration}, {"input_set", p.set}}};
        break;
      }
      if (m.point) place_point_record(*r, p.picked, p.row_elements.at(t));
      if (auto f = record_failure(*r, ev.def_.outputs[t], ev.tolerance_)) {
        failure = stale(*f, p.iteration, p.set);
        if (m.point) {
          failure->evidence["point_reference"] = fmt::format(
              "{} of {} rows of {}, drawn after the launch", m.rows, m.rows_total, m.rows_of);
        }
        break;
      }
    }
  }
  // The batch's slots go with it. No refresh is left unchecked here (the timing loop checks every
  // iteration it refreshes before it harvests), so known[] holds every set's inputs.
  m.sums.clear();
  for (auto& b : m.before) b.clear();
  return failure;
}

std::optional<Failure> TimedOutputs::integrity(CUstream stream) {
  Impl& m = *impl_;
  Evaluator& ev = m.evaluator;
  // Every set's guard zones, one wait for all of them (inputs are checked per iteration).
  HarnessKernels::ReadBatch& reads = ev.reads_;
  reads.clear();
  std::vector<Evaluator::MemoryReads> memory;
  for (std::size_t set = 0; set < m.sets.size(); ++set)
    memory.push_back(ev.read_memory(*m.sets[set], reads, stream, false));
  reads.wait(stream);
  for (std::size_t set = 0; set < m.sets.size(); ++set) {
    if (auto f = Evaluator::memory_failure(memory[set], reads, {})) {
      f->message = fmt::format("during timing (input set {}): {}", set, f->message);
      f->evidence["input_set"] = static_cast<int>(set);
      return f;
    }
  }
  return std::nullopt;
}

std::optional<Failure> TimedOutputs::verify_on_host(int set, std::uint64_t iteration,
                                                    CUstream stream) {
  Impl& m = *impl_;
  Evaluator& ev = m.evaluator;
  TrialBuffers& b = *m.sets.at(set);
  Impl::Pending p;
  p.iteration = iteration;
  p.set = set;
  p.before = std::move(m.before.at(static_cast<std::size_t>(set)));
  m.before.at(static_cast<std::size_t>(set)).clear();
  p.after = m.read_sums(set, stream);
  m.pending.push_back(std::move(p));
  std::vector<HostBytes> expected(ev.def_.outputs.size());
  if (m.reference) {
    m.run_truth(set, {}, stream);
    Driver::instance().check(Driver::instance().cuStreamSynchronize(stream), "cuStreamSynchronize");
    for (std::size_t t = 0; t < ev.def_.outputs.size(); ++t) {
      const std::size_t bytes = b.outputs.at(ev.def_.outputs[t].name)->bytes();
      expected[t].resize(bytes);
      if (bytes) m.truth[t].download(expected[t].data(), bytes);
    }
  }
  if (auto f = collect(stream)) return f;  // the inputs' checksums (synchronises)
  std::vector<HostBytes> got;
  ev.download_outputs(b, got);
  TrialResult result;
  // A sampler's draws: their support now, their distribution with every timed draw (judge_draws);
  // `got` stands in for the reference's outputs (their sizes; no values are read).
  const bool sampling = ev.sampling_;
  if (!ev.check_outputs(b, sampling ? got : expected, got, result, sampling ? &m.draws : nullptr))
    return stale(*result.failure, iteration, set);
  return std::nullopt;
}

std::optional<Failure> TimedOutputs::judge_draws() const {
  const Impl& m = *impl_;
  if (!m.evaluator.sampling_ || m.draws.support().draws + m.draws.support().outside == 0)
    return std::nullopt;
  const SamplingJudgement j = m.draws.judge();
  if (auto f = sampling_failure(m.evaluator.def_.outputs.at(0).name, j)) {
    Failure out{"stale_output", fmt::format("the timed iterations' draws, pooled: {}", f->message),
                f->evidence};
    out.evidence["cause"] = f->kind;
    return out;
  }
  return std::nullopt;
}

TimedTruth TimedOutputs::truth() const {
  const Impl& m = *impl_;
  TimedTruth t;
  t.fresh_inputs = m.refreshes;
  t.fixed_inputs = m.fixed_inputs;
  if (m.evaluator.sampling_) {
    t.mode = "sampling";
  } else if (m.point) {
    t.mode = "point reference";
    t.rows_of = m.rows_of;
    t.rows = m.rows;
    t.rows_total = m.rows_total;
    t.rows_checked = m.rows_checked;
  } else {
    t.mode = "full reference";
  }
  return t;
}

std::optional<Failure> TimedOutputs::check_now(int set, std::uint64_t iteration,
                                               const IterationPoison& poison, CUstream stream) {
  if (checked_on_device()) {
    enqueue_check(set, iteration, poison, stream);
    if (auto f = collect(stream)) return f;
  } else {
    Driver::instance().check(Driver::instance().cuStreamSynchronize(stream), "cuStreamSynchronize");
    if (auto f = verify_on_host(set, iteration, stream)) return f;
  }
  return integrity(stream);
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
