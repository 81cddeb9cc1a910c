// The timing stage's checked iterations (docs/correctness.md#checked-iterations): TimedOutputs
// keeps several input sets (InputSets) whose inputs every timed iteration fills afresh, and checks
// each iteration's outputs against the truth of its own inputs, on the device into authenticated
// records or on the host (HostJudge).
#include "verify/timed_outputs.hpp"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "device/driver.hpp"
#include "device/plan_launcher.hpp"
#include "kharness/error.hpp"
#include "kharness/numeric.hpp"
#include "verify/evaluate.hpp"
#include "verify/harness_kernels.hpp"
#include "verify/host_judge.hpp"
#include "verify/input_sets.hpp"
#include "verify/precedence.hpp"
#include "verify/sampling_compare.hpp"
#include "verify/trial.hpp"

namespace kharness::verify {

using device::DeviceBuffer;
using device::Driver;
using device::LaunchEnv;
using device::LaunchOutcome;
using device::Module;
using device::PlanLauncher;
using device::Stream;

// What one timed iteration is checked against (docs/correctness.md#checked-iterations): the truth
// of its own fresh inputs, computed after its launch by the reference (all of it, or a point
// reference: rows of kharness.timed_check drawn after the launch), sealed and compared on the
// device, or downloaded and compared on the host. Inputs are checksummed under a key before and
// after every launch.
struct TimedOutputs::Impl {
  TrialContext context;
  InputSets inputs{context};
  HostJudge host{context};
  // The inputs' checksums' key: drawn from the OS, like the seals' key the caller gives.
  const std::uint64_t input_sum_key = splitmix(secret_key() ^ 0x73756d6b6579ull);
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
  Impl(const Operator& op, const CheckOptions& options)
      : context(op, options), sums(context.kernels) {}

  std::uint64_t sum_key() const { return input_sum_key; }

  // The checksums read into `slots` (after sums.wait), by input name.
  std::map<std::string, std::uint64_t> sums_of(const std::map<std::string, std::size_t>& slots) {
    std::map<std::string, std::uint64_t> out;
    for (const auto& [name, slot] : slots) out[name] = sums.checksum_result(slot);
    return out;
  }

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
    const Definition& def = context.def;
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
        context.kernels.gather_rows(b.inputs.at(t.name)->data(), it->second.ptr(),
                                    row_bytes(t, b.env.axes), picked, s);
        env.tensors[t.name] = it->second.ptr();
      }
    }
    for (std::size_t t = 0; t < def.outputs.size(); ++t) {
      context.kernels.fill_pattern(truth[t].ptr(), truth[t].size(),
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
    : impl_(std::make_unique<Impl>(op, options)) {
  Impl& m = *impl_;
  const Definition& def = m.context.def;
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
    m.inputs.make_inputs(workload, trial_seed(options.seed, workload_index(op, workload), 1000 + i),
                         *b, s);
    m.inputs.make_outputs(*b, candidate.solution->plan, s);
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
  if (!m.context.sampling) {
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

const HarnessKernels& TimedOutputs::kernels() const { return impl_->context.kernels; }

void TimedOutputs::refresh(int set, std::uint64_t draw, CUstream stream) {
  Impl& m = *impl_;
  ++m.refreshes;
  m.inputs.make_inputs(*m.workload, splitmix(draw ^ 0x6672657368ull), *m.sets.at(set), stream);
  m.before.at(static_cast<std::size_t>(set)) = m.read_sums(set, stream);
}

void TimedOutputs::poison(int set, const IterationPoison& poison, CUstream stream) const {
  impl_->inputs.poison(*impl_->sets.at(set), poison, stream);
}

void TimedOutputs::enqueue_check(int set, std::uint64_t iteration, const IterationPoison& poison,
                                 CUstream stream) {
  Impl& m = *impl_;
  if (!m.on_device) throw Error(ExitCode::kInternal, "timing", "enqueue_check on a host check");
  if (static_cast<int>(m.pending.size()) >= m.slots)
    throw Error(ExitCode::kInternal, "timing", "more checks in flight than record slots");
  const TrialContext& c = m.context;
  const TrialBuffers& b = *m.sets.at(set);
  const Tolerance& tol = c.tolerance;
  const std::size_t outputs = c.def.outputs.size();
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
    const TensorSpec& spec = c.def.outputs[t];
    const GuardedBuffer& out = *b.outputs.at(spec.name);
    CUdeviceptr got = out.data();
    std::uint64_t bytes = out.bytes();
    if (m.point) {
      const std::uint64_t row = m.row_bytes(spec, b.env.axes);
      c.kernels.gather_rows(out.data(), m.got_rows[t].ptr(), row, picked, stream);
      got = m.got_rows[t].ptr();
      bytes = row * picked.size();
      p.row_elements.push_back(row / dtype_size(spec.dtype));
    }
    c.kernels.seal(m.truth[t].ptr(), m.sealed[t].ptr(), bytes, m.key, timed_stream_id(set, t),
                   stream);
    std::uint64_t poison_bits = 0;
    std::memcpy(&poison_bits, poison.outputs.at(t).data(), poison.outputs.at(t).size());
    CUdeviceptr record = m.records.ptr() + (slot * outputs + t) * kCheckRecordBytes;
    c.kernels.check_sealed(got, m.sealed[t].ptr(), bytes / dtype_size(spec.dtype), spec.dtype,
                           m.key, timed_stream_id(set, t), poison_bits, tol.atol, tol.rtol,
                           iteration, t, record, stream);
  }
  if (m.point) m.rows_checked += picked.size();
  p.picked = picked;
  m.pending.push_back(std::move(p));
}

std::optional<Failure> TimedOutputs::collect(CUstream stream) {
  Impl& m = *impl_;
  if (m.pending.empty()) return std::nullopt;
  const TrialContext& c = m.context;
  const std::size_t outputs = c.def.outputs.size();
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
    if (auto name = changed_input(m.known.at(static_cast<std::size_t>(p.set)), m.sums_of(p.before),
                                  m.sums_of(p.after))) {
      failure = Failure{"input_modified",
                        fmt::format("timed iteration {} (input set {}): the candidate changed "
                                    "its input '{}'",
                                    p.iteration, p.set, *name),
                        {{"tensor", *name}, {"iteration", p.iteration}, {"input_set", p.set}}};
      break;
    }
    if (!m.on_device) continue;
    for (std::size_t t = 0; t < outputs; ++t) {
      const std::uint8_t* raw = m.host_records.data() + (slot * outputs + t) * kCheckRecordBytes;
      std::optional<CheckRecord> r = HarnessKernels::open_record(raw, m.key);
      if (!check_record_is_for(r, p.iteration, t, timed_stream_id(p.set, t))) {
        failure = Failure{"harness_memory_modified",
                          fmt::format("the check record of timed iteration {} ({}) was "
                                      "overwritten: a kernel wrote into the harness's memory",
                                      p.iteration, c.def.outputs[t].name),
                          {{"iteration", p.iteration}, {"input_set", p.set}}};
        break;
      }
      if (m.point) place_point_record(*r, p.picked, p.row_elements.at(t));
      if (auto f = record_failure(*r, c.def.outputs[t], c.tolerance)) {
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
  TrialContext& c = m.context;
  // Every set's guard zones, one wait for all of them (inputs are checked per iteration).
  HarnessKernels::ReadBatch& reads = c.reads;
  reads.clear();
  std::vector<InputSets::MemoryReads> memory;
  for (std::size_t set = 0; set < m.sets.size(); ++set)
    memory.push_back(m.inputs.read_memory(*m.sets[set], reads, stream, false));
  reads.wait(stream);
  for (std::size_t set = 0; set < m.sets.size(); ++set) {
    if (auto f = InputSets::memory_failure(memory[set], reads, {})) {
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
  TrialContext& c = m.context;
  TrialBuffers& b = *m.sets.at(set);
  Impl::Pending p;
  p.iteration = iteration;
  p.set = set;
  p.before = std::move(m.before.at(static_cast<std::size_t>(set)));
  m.before.at(static_cast<std::size_t>(set)).clear();
  p.after = m.read_sums(set, stream);
  m.pending.push_back(std::move(p));
  std::vector<HostBytes> expected(c.def.outputs.size());
  if (m.reference) {
    m.run_truth(set, {}, stream);
    Driver::instance().check(Driver::instance().cuStreamSynchronize(stream), "cuStreamSynchronize");
    for (std::size_t t = 0; t < c.def.outputs.size(); ++t) {
      const std::size_t bytes = b.outputs.at(c.def.outputs[t].name)->bytes();
      expected[t].resize(bytes);
      if (bytes) m.truth[t].download(expected[t].data(), bytes);
    }
  }
  if (auto f = collect(stream)) return f;  // the inputs' checksums (synchronises)
  std::vector<HostBytes> got;
  m.host.download_outputs(b, got);
  TrialResult result;
  // A sampler's draws: their support now, their distribution with every timed draw (judge_draws);
  // `got` stands in for the reference's outputs (their sizes; no values are read).
  const bool sampling = c.sampling;
  if (auto f = m.host.check_outputs(b, sampling ? got : expected, got, result,
                                    sampling ? &m.draws : nullptr)) {
    return stale(*f, iteration, set);
  }
  return std::nullopt;
}

std::optional<Failure> TimedOutputs::judge_draws() const {
  const Impl& m = *impl_;
  if (!m.context.sampling || m.draws.support().draws + m.draws.support().outside == 0)
    return std::nullopt;
  const SamplingJudgement j = m.draws.judge();
  if (auto f = sampling_failure(m.context.def.outputs.at(0).name, j)) {
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
  if (m.context.sampling) {
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

}  // namespace kharness::verify
