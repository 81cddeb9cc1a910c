// The profile stage: the harness side (compile, run the worker, static facts, speed-of-light,
// diagnosis) and the worker side (inputs from the correctness stage's evaluator, one checked
// warm-up run, then the plan under CUPTI's range profiler, user replay: once per pass, from
// poisoned outputs and a clean, cold L2).
#include "kharness/profile.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <sstream>

#include "bench/cupti_timer.hpp"
#include "bench/speed_of_light.hpp"
#include "device/driver.hpp"
#include "device/gpu_lock.hpp"
#include "device/plan_launcher.hpp"
#include "device/watchdog.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/error.hpp"
#include "kharness/operators.hpp"
#include "kharness/subprocess.hpp"
#include "profile/occupancy.hpp"
#include "profile/range_profiler.hpp"
#include "profile/sass.hpp"
#include "verify/harness_kernels.hpp"
#include "verify/load.hpp"
#include "verify/timed_outputs.hpp"
#include "worker/channel.hpp"

namespace kharness {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

using verify::Loaded;

Loaded load_and_compile(const ProfileRequest& r) {
  return verify::load_and_compile(r.solution, r.target.operator_name, r.target.operators_dirs,
                                  make_compile_options(r.target.arch, r.target.use_cache));
}

const Workload& pick_workload(const Operator& op, const std::string& want) {
  if (op.workloads.empty())
    throw input_error(op.definition.name, "the operator has no workloads to profile");
  if (want.empty()) return op.workloads.front();
  verify::CheckOptions o;
  o.workloads = {want};
  return *verify::select_workloads(op, o).front();  // throws input_error for no match
}

json request_json(const ProfileRequest& r, const std::string& workload_uuid) {
  json j = r.target.to_json();
  j.update({{"solution", std::filesystem::absolute(r.solution).string()},
            {"workload", workload_uuid},
            {"seed", r.seed},
            {"extra_metrics", r.extra_metrics},
            {"launch_timeout_seconds", r.launch_timeout_seconds},
            {"verbose", spdlog::get_level() <= spdlog::level::debug},
            {"task", "profile"}});
  return j;
}

ProfileRequest request_from_json(const json& j) {
  ProfileRequest r;
  r.solution = j.at("solution").get<std::string>();
  r.target = Target::from_json(j);
  r.workload = j.value("workload", "");
  r.seed = j.value("seed", std::uint64_t{0});
  r.extra_metrics = j.value("extra_metrics", std::vector<std::string>{});
  r.launch_timeout_seconds = j.value("launch_timeout_seconds", r.launch_timeout_seconds);
  return r;
}

std::string first_compile_problem(const CompileResult& c) {
  if (!c.violations.empty()) return c.violations[0].rule + ": " + c.violations[0].message;
  if (!c.diagnostics.empty()) return c.diagnostics[0].message;
  return c.log.substr(0, 300);
}

// Static facts of every launch's kernel: ptxas resource usage, the plan's dynamic shared memory,
// and the tensor-core instructions in the SASS.
void fill_statics(Profile& p, const Loaded& l, const Workload& w) {
  const Bindings axes = w.bindings(l.op.definition);
  std::string tool;
  std::optional<std::string> sass = profile::disassemble_cubin(l.candidate_compiled.cubin, &tool);
  std::map<std::string, std::string> by_function;
  if (sass) by_function = split_sass_by_function(*sass);
  const std::string expected = expected_tensor_instructions(l.candidate_compiled.arch);
  for (KernelProfile& k : p.kernels) {
    KernelStatic& s = k.statics;
    s.expected_tensor_instructions = expected;
    const KernelInfo* info = l.candidate_compiled.find_kernel(k.kernel);
    if (info != nullptr) {
      s.registers = info->registers;
      s.spill_store_bytes = info->spill_store_bytes;
      s.spill_load_bytes = info->spill_load_bytes;
      s.stack_bytes = info->stack_bytes;
      s.static_shared_bytes = info->shared_bytes;
    }
    if (k.launch >= 0) {
      try {
        const std::vector<Launch>& launches = l.candidate.plan.launches_for(axes);
        if (static_cast<std::size_t>(k.launch) < launches.size())
          s.dynamic_shared_bytes = launches[k.launch].shared_bytes.eval(axes);
      } catch (const std::exception& e) {
        spdlog::debug("profile: shared_bytes of launch {}: {}", k.launch, e.what());
      }
    }
    s.disassembler = tool;
    if (!sass || info == nullptr) continue;
    auto it = by_function.find(info->mangled);
    if (it == by_function.end()) {
      s.disassembler = tool + " (kernel not found in the listing)";
      continue;
    }
    s.tensor_instructions = tensor_instructions_in_sass(it->second);
    bool has_expected = false;
    for (const std::string& found : s.tensor_instructions) {
      std::istringstream names(expected);
      for (std::string e; std::getline(names, e, '/');) has_expected |= (found == e);
    }
    s.tensor_cores = has_expected ? "yes" : "no";
  }
}

void fill_sol(Profile& p, const Loaded& l, const Workload& w) {
  std::vector<bench::GpuSpec> specs;
  try {
    specs = bench::load_gpu_specs(data_dir() / "configs" / "gpus");
  } catch (const std::exception& e) {
    spdlog::debug("profile: no GPU specs: {}", e.what());
    return;
  }
  const bench::GpuSpec* spec = bench::match_gpu(specs, p.gpu);
  if (spec == nullptr || p.gpu_seconds <= 0) return;
  bench::SolEstimate e =
      bench::speed_of_light(*spec, l.op.definition, w.bindings(l.op.definition), false);
  if (e.seconds <= 0) return;
  SolSummary s;
  s.sol_seconds = e.seconds;
  s.measured_seconds = p.gpu_seconds;
  s.fraction = bench::sol_fraction(e.seconds, p.gpu_seconds);
  s.bound = e.bound;
  s.flops = e.flops;
  s.bytes = e.bytes;
  s.note = e.note;
  p.sol = s;
}

// ---- worker side ----

int device_attribute(CUdevice dev, CUdevice_attribute a) {
  const auto& cu = device::Driver::instance();
  int v = 0;
  if (cu.cuDeviceGetAttribute(&v, a, dev) != CUDA_SUCCESS) return 0;
  return v;
}

int function_attribute(CUfunction f, CUfunction_attribute a) {
  const auto& cu = device::Driver::instance();
  int v = 0;
  if (cu.cuFuncGetAttribute(&v, a, f) != CUDA_SUCCESS) return -1;
  return v;
}

profile::OccupancyDevice occupancy_device(CUdevice dev) {
  profile::OccupancyDevice d;
  d.cc_major = device_attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  d.cc_minor = device_attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  d.max_threads_per_block = device_attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  d.max_threads_per_sm = device_attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  d.regs_per_block = device_attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  d.regs_per_sm = device_attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  d.warp_size = device_attribute(dev, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  d.shared_per_block = device_attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  d.shared_per_sm = device_attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  d.shared_per_block_optin =
      device_attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  d.reserved_shared_per_block =
      device_attribute(dev, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK);
  d.sm_count = device_attribute(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  if (d.warp_size <= 0) d.warp_size = 32;
  return d;
}

bool is_launch_fact(const std::string& name) {
  return name.rfind("launch__", 0) == 0 || name == metric::kTheoreticalOccupancy;
}

// The launch facts Nsight Compute reports as launch__* metrics, from the occupancy calculator.
void add_launch_facts(KernelProfile& k, CUfunction f, const profile::OccupancyDevice& dev,
                      std::size_t dynamic_shared, std::size_t carveout_bytes) {
  profile::OccupancyFunction fn;
  fn.registers = function_attribute(f, CU_FUNC_ATTRIBUTE_NUM_REGS);
  fn.static_shared = static_cast<std::size_t>(
      std::max(0, function_attribute(f, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)));
  fn.max_dynamic_shared = static_cast<std::size_t>(
      std::max(0, function_attribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)));
  fn.max_threads_per_block = function_attribute(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  const int threads = static_cast<int>(k.block[0] * k.block[1] * k.block[2]);
  auto put = [&](const char* name, std::optional<double> v, const std::string& note) {
    Metric& m = k.metrics[name];
    if (m.value) return;  // CUPTI had it
    m.value = v;
    m.source = v ? "driver" : "missing";
    m.note = v ? "" : note;
  };
  put(metric::kRegistersPerThread,
      fn.registers >= 0 ? std::optional<double>(fn.registers) : std::nullopt,
      "cuFuncGetAttribute(NUM_REGS) failed");
  if (fn.registers < 0 || fn.max_threads_per_block < 0) return;
  put(metric::kSharedMemConfigSize,
      carveout_bytes > 0 ? std::optional<double>(static_cast<double>(carveout_bytes))
                         : std::nullopt,
      "no CUPTI activity record of the plan's launch");
  profile::Occupancy o =
      profile::compute_occupancy(dev, fn, threads, dynamic_shared, carveout_bytes);
  if (!o.ok) {
    for (const char* n : {metric::kOccupancyLimitRegisters, metric::kOccupancyLimitSharedMem,
                          metric::kOccupancyLimitWarps, metric::kOccupancyLimitBlocks,
                          metric::kTheoreticalOccupancy})
      put(n, std::nullopt, o.error);
    return;
  }
  put(metric::kOccupancyLimitRegisters, o.limit_registers, "");
  put(metric::kOccupancyLimitSharedMem, o.limit_shared_mem, "");
  put(metric::kOccupancyLimitWarps, o.limit_warps, "");
  put(metric::kOccupancyLimitBlocks, o.limit_blocks, "");
  put(metric::kTheoreticalOccupancy, o.theoretical_percent, "");
}

// The counters a profile asks CUPTI for. Which names CUPTI has: each logical metric maps to its
// supported names (itself and its alternatives); launch facts CUPTI lacks come from the driver
// (add_launch_facts). The warp stall reasons are the stall base metrics CUPTI lists.
struct MetricPlan {
  std::vector<std::string> names;  // the logical metrics, in the report's order
  std::map<std::string, std::vector<std::string>> sources;  // logical -> supported names
  std::vector<std::string> cupti_metrics;                   // every name CUPTI collects, once
  std::vector<std::string> stall_metrics;
};

MetricPlan plan_metrics(profile::CounterSession& session,
                        const std::vector<std::string>& extra_metrics) {
  MetricPlan plan;
  std::vector<std::string>& names = plan.names;
  names = profile_metric_names();
  for (const auto& extra : extra_metrics) {
    if (std::find(names.begin(), names.end(), extra) == names.end()) names.push_back(extra);
  }
  std::map<std::string, std::vector<std::string>>& sources = plan.sources;
  std::vector<std::string>& cupti_metrics = plan.cupti_metrics;
  auto want = [&](const std::string& n) {
    if (std::find(cupti_metrics.begin(), cupti_metrics.end(), n) == cupti_metrics.end())
      cupti_metrics.push_back(n);
  };
  for (const std::string& name : names) {
    std::vector<std::string> candidates = {name};
    for (auto& alt : profile_metric_alternatives(name)) candidates.push_back(alt);
    for (const std::string& c : candidates) {
      if (session.supported(c)) {
        sources[name].push_back(c);
        want(c);
      }
    }
  }
  std::vector<std::string>& stall_metrics = plan.stall_metrics;
  std::vector<std::string> stall_bases;
  try {
    stall_bases = session.base_metrics_with_prefix(metric::kStallPrefix);
  } catch (const profile::CuptiError& e) {
    spdlog::warn("profile: no warp stall reasons: {}", e.what());
  }
  for (const std::string& base : stall_bases) {
    if (base.size() >= 11 && base.compare(base.size() - 11, 11, "_not_issued") == 0) continue;
    const std::string name = base + ".sum";
    if (session.supported(name)) {
      stall_metrics.push_back(name);
      want(name);
    }
  }
  return plan;
}

// The report of the profiled launches: per launch its geometry, the counters collected (the
// largest of a metric's supported names), the driver's launch facts with the carveout the
// activity records show, and the top warp stall reasons; then what could not be measured, as
// warnings.
Profile assemble_profile(const ProfileRequest& request, const Loaded& l, const Workload& w,
                         const std::vector<Launch>& plan_launches, const MetricPlan& metrics,
                         profile::Collection& c, const std::string& chip,
                         const std::vector<bench::KernelRecord>& records, CUdevice device,
                         const device::Module& module) {
  const auto& cu = device::Driver::instance();
  const std::size_t launches = plan_launches.size();
  Profile p;
  p.solution = l.candidate.name;
  p.source = request.solution.string();
  p.definition = l.op.definition.name;
  p.family = l.op.definition.family();
  p.workload = w.uuid;
  p.axes = w.axes;
  p.chip = chip;
  p.arch = l.candidate_compiled.arch;
  p.passes = static_cast<int>(c.passes);
  p.replay = c.replay;
  if (c.replay == "kernel")
    p.warnings.push_back(
        "kernel replay (user replay refused): dram__bytes_write includes the "
        "write-back of CUPTI's memory restore");
  char name[256] = {0};
  if (cu.cuDeviceGetName(name, sizeof name, device) == CUDA_SUCCESS) p.gpu = name;
  const profile::OccupancyDevice dev = occupancy_device(device);
  p.sm_count = dev.sm_count;
  const Bindings axes = w.bindings(l.op.definition);
  for (std::size_t i = 0; i < launches; ++i) {
    const Launch& launch = plan_launches[i];
    KernelProfile k;
    k.launch = static_cast<int>(i);
    k.kernel = launch.kernel;
    std::size_t dynamic_shared = 0;
    try {
      for (int d = 0; d < 3; ++d) {
        k.grid[d] = static_cast<unsigned>(launch.grid[d].eval(axes));
        k.block[d] = static_cast<unsigned>(launch.block[d].eval(axes));
      }
      dynamic_shared = static_cast<std::size_t>(launch.shared_bytes.eval(axes));
    } catch (const std::exception& e) {
      spdlog::debug("profile: geometry of launch {}: {}", i, e.what());
    }
    const profile::RangeValues* range = i < c.ranges.size() ? &c.ranges[i] : nullptr;
    for (const std::string& n : metrics.names) {
      Metric m;
      auto s = metrics.sources.find(n);
      if (s == metrics.sources.end()) {
        m.source = "missing";
        m.note = is_launch_fact(n) ? "not a CUPTI metric here" : "not supported on " + p.chip;
      } else if (range == nullptr) {
        m.source = "missing";
        m.note = "no profiler range for this launch";
      } else {
        for (const std::string& actual : s->second) {
          auto v = range->values.find(actual);
          if (v == range->values.end()) continue;
          if (!m.value || v->second > *m.value) {
            m.value = v->second;
            m.actual_name = actual == n ? "" : actual;
          }
        }
        m.source = m.value ? "cupti" : "missing";
        if (!m.value) m.note = "CUPTI could not evaluate it";
      }
      k.metrics[n] = m;
    }
    const KernelInfo* info = l.candidate_compiled.find_kernel(launch.kernel);
    // Records pair with launches in order when each launch made one kernel, as a plan's do.
    std::size_t carveout = 0;
    if (records.size() == launches && info != nullptr && records[i].name == info->mangled)
      carveout = records[i].shared_memory_executed;
    if (info != nullptr)
      add_launch_facts(k, module.function(info->mangled), dev, dynamic_shared, carveout);
    if (range != nullptr) {
      auto active = range->values.find(metric::kWarpsActiveSum);
      if (active != range->values.end() && active->second > 0) {
        for (const std::string& sm : metrics.stall_metrics) {
          auto v = range->values.find(sm);
          if (v == range->values.end()) continue;
          std::string reason = sm.substr(std::string(metric::kStallPrefix).size());
          reason = reason.substr(0, reason.size() - 4);  // ".sum"
          if (reason == "selected") continue;            // issuing, not a stall
          k.stalls.push_back({reason, 100.0 * v->second / active->second});
        }
        std::sort(k.stalls.begin(), k.stalls.end(),
                  [](const StallReason& a, const StallReason& b) { return a.percent > b.percent; });
        if (k.stalls.size() > 5) k.stalls.resize(5);
      }
    }
    p.gpu_seconds += k.value(metric::kDuration).value_or(0.0) * 1e-9;
    p.kernels.push_back(std::move(k));
  }
  if (c.ranges.size() != launches) {
    p.warnings.push_back(
        fmt::format("{} profiler range(s) for {} launch(es); ranges matched to launches in order",
                    c.ranges.size(), launches));
  }
  if (c.dropped_ranges > 0)
    p.warnings.push_back(fmt::format("CUPTI dropped {} range(s)", c.dropped_ranges));
  if (!c.not_evaluated.empty()) {
    std::sort(c.not_evaluated.begin(), c.not_evaluated.end());
    c.not_evaluated.erase(std::unique(c.not_evaluated.begin(), c.not_evaluated.end()),
                          c.not_evaluated.end());
    std::string list;
    for (const auto& n : c.not_evaluated) list += (list.empty() ? "" : ", ") + n;
    p.warnings.push_back("CUPTI could not configure or evaluate: " + list);
  }
  for (const auto& w : p.warnings) spdlog::warn("profile: {}", w);
  return p;
}

Profile run_worker_profile(const ProfileRequest& request) {
  json phases = json::object();
  auto t = Clock::now();
  Loaded l = load_and_compile(request);
  if (!l.candidate_compiled.ok()) {
    throw Error(ExitCode::kFailed, request.solution.string(),
                "does not compile: " + first_compile_problem(l.candidate_compiled));
  }
  phases["load_compile"] = since(t);
  t = Clock::now();
  // Alone on the GPU, as a timing is (device/gpu_lock.hpp): declared before the context, released
  // after it is gone.
  device::GpuLock gpu_lock(device::gpu_lock_dir(), device::gpu_lock_key(),
                           device::GpuLock::Mode::kExclusive);
  if (!gpu_lock.held()) spdlog::warn("no GPU lock ({}): profile unguarded", gpu_lock.problem());
  phases["gpu_lock_wait"] = gpu_lock.waited_seconds();
  device::PrimaryContext context(0);
  const auto& cu = device::Driver::instance();
  phases["context"] = since(t);

  const Workload& w = pick_workload(l.op, request.workload);
  // The launches this workload runs (a dispatching plan's variant for its axes).
  const std::vector<Launch>& plan_launches =
      l.candidate.plan.launches_for(w.bindings(l.op.definition));
  verify::CheckOptions check;
  check.seed = request.seed;
  check.workloads = {w.uuid};
  t = Clock::now();
  // Inputs, the reference's outputs and the candidate's poisoned, guarded output buffers.
  verify::TimedOutputs io(l.op, {&l.reference, &l.reference_compiled},
                          {&l.candidate, &l.candidate_compiled}, w, 1, check, 1,
                          verify::secret_key());
  device::Module module(l.candidate_compiled.cubin);
  device::PlanLauncher launcher(l.candidate.plan, l.candidate_compiled.kernels, module);
  device::Stream stream;
  phases["inputs_reference"] = since(t);

  // One checked run first: a kernel that fails or is wrong is not worth profiling, and the run
  // loads the module's code so the profiled launches are not the first.
  t = Clock::now();
  const verify::IterationPoison poison = verify::iteration_poison(l.op.definition, request.seed);
  io.poison(0, poison, stream.get());
  device::LaunchOutcome o = [&] {
    device::ActivityPhase launching("candidate (profile warm-up)");
    return launcher.launch(io.env(0), stream.get(), true);
  }();
  if (!o.ok) {
    throw Error(ExitCode::kFailed, request.solution.string(),
                fmt::format("launch {} ({}) failed: {}", o.launch_index, o.kernel, o.message));
  }
  if (std::optional<Failure> f = io.check_now(0, 0, poison, stream.get())) {
    throw Error(ExitCode::kFailed, request.solution.string(),
                fmt::format("incorrect on workload {} ({}: {}); `kharness check` says more", w.uuid,
                            f->evidence.value("cause", f->kind), f->message));
  }
  phases["warmup_check"] = since(t);

  t = Clock::now();
  auto session = std::make_unique<profile::CounterSession>(context.get(), 0);
  phases["cupti_setup"] = since(t);

  const MetricPlan metrics = plan_metrics(*session, request.extra_metrics);

  // Before each replay pass, outside the profiled span: the outputs poisoned again (the plan's
  // launches overwrite them, inputs are never written: the check stage rejects kernels that do),
  // then L2 cleaned like the timing stage's flush: 2x its size written, then read (here twice),
  // so the pass starts cold and no dirty line from the poison or the flush is written back
  // inside it.
  t = Clock::now();
  int l2_bytes = 0;
  cu.cuDeviceGetAttribute(&l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, context.device());
  verify::L2Flush flush(static_cast<std::size_t>(std::max(l2_bytes, 0)), 2);
  const verify::HarnessKernels& harness = io.kernels();
  auto before_pass = [&] {
    io.poison(0, poison, stream.get());
    // Read twice (L2Flush's reads): one read left more dirty lines to be written back inside the
    // pass. Even so, on the H200 dram__bytes_write stays 0.4-1.0 MB above ncu's (--cache-control
    // all) whatever the kernel stores: a GEMM storing 12 KB counts 3.2 MB against ncu's 2.4 MB.
    // Tried without effect: no output poison, reads only, an 8x-L2 buffer, a 100 ms idle wait,
    // discarding the buffer's lines (discard.global.L2); without this flush, +4 MB. ncu's own
    // figure moves 3.5 MB with its cache control (M = 256 GEMM: 6.0 MB flushed, 9.5 MB not).
    // CUPTI 13.0's range profiler has no cache control of its own (later CUPTI docs add one).
    flush(harness, stream.get());
    cu.check(cu.cuStreamSynchronize(stream.get()), "cuStreamSynchronize");
  };
  phases["flush_setup"] = since(t);

  t = Clock::now();
  const std::size_t launches = plan_launches.size();
  profile::Collection c = session->collect(
      metrics.cupti_metrics, launches,
      [&] {
        device::ActivityPhase launching("candidate (profiler pass)");
        device::LaunchOutcome r = launcher.launch(io.env(0), stream.get(), true);
        if (!r.ok) {
          throw Error(ExitCode::kFailed, request.solution.string(),
                      fmt::format("launch {} ({}) failed under the profiler: {}", r.launch_index,
                                  r.kernel, r.message));
        }
      },
      before_pass);
  phases["counters"] = since(t);
  const std::string chip = session->chip();
  session.reset();  // CUPTI's profiler deinitialised: the activity API may attach now

  // The plan once more under CUPTI's activity API, for the shared-memory carveout the driver
  // picked per launch. Last, because the range profiler cannot start after the activity timer
  // detached CUPTI (cuptiProfilerInitialize: CUPTI_ERROR_NOT_INITIALIZED on the H200).
  t = Clock::now();
  std::vector<bench::KernelRecord> records;
  try {
    before_pass();
    bench::CuptiTimer timer;
    timer.begin(1);
    device::ActivityPhase launching("candidate (carveout run)");
    device::LaunchOutcome r = launcher.launch(io.env(0), stream.get(), true);
    timer.end();
    if (r.ok) records = timer.collect()[1].kernel_records;
  } catch (const std::exception& e) {
    spdlog::warn("profile: no CUPTI activity records of the plan (no shared-memory carveout): {}",
                 e.what());
  }
  phases["carveout"] = since(t);

  Profile p = assemble_profile(request, l, w, plan_launches, metrics, c, chip, records,
                               context.device(), module);
  p.phases = phases;
  return p;
}

}  // namespace

Profile profile_solution(const ProfileRequest& request) {
  const auto start = Clock::now();
  Loaded l = load_and_compile(request);
  if (!l.candidate_compiled.ok()) {
    throw Error(ExitCode::kFailed, request.solution.string(),
                fmt::format("{}: {}", status_name(l.candidate_compiled.status),
                            first_compile_problem(l.candidate_compiled)));
  }
  const Workload& w = pick_workload(l.op, request.workload);
  const double compile_seconds = since(start);

  EnvironmentReport env = probe_environment();
  if (!env.gpu_ready()) {
    throw environment_error(
        fmt::format("{}; profiling needs a GPU (`kharness compile` checks a solution without one)",
                    env.driver.available ? "no CUDA device visible" : env.driver.reason));
  }
  if (env.profiling.permission == ProfilingPermission::kNotPermitted) {
    throw environment_error(fmt::format("GPU performance counters are not permitted ({}): {}",
                                        env.profiling.reason, profile::kCounterPermissionFix));
  }

  const auto worker_start = Clock::now();
  const worker::WorkerReply reply =
      worker::call_worker({"__worker", "profile worker", request_json(request, w.uuid),
                           request.timeout_seconds, std::nullopt});
  const double worker_seconds = since(worker_start);
  const SubprocessResult& r = reply.process;
  if (!r.stderr_data.empty()) spdlog::debug("profile worker stderr:\n{}", r.stderr_data);

  std::optional<Profile> profile;
  for (const json& event : reply.events) {
    if (event.value("event", "") == "profile") profile = profile_from_json(event.at("profile"));
  }
  if (const std::optional<json>& hang = reply.hang) {
    const std::string label = hang->value("label", "");
    throw Error(ExitCode::kFailed, request.solution.string(),
                fmt::format("{} did not finish within {:g} s (launch watchdog, waiting in {}); "
                            "`kharness check` says more",
                            label.empty() ? "a launch" : label,
                            hang->value("limit_seconds", request.launch_timeout_seconds),
                            hang->value("call", "")));
  }
  if (!profile) {
    std::string tail = r.stderr_data.size() > 600 ? r.stderr_data.substr(r.stderr_data.size() - 600)
                                                  : r.stderr_data;
    throw Error(ExitCode::kFailed, request.solution.string(),
                fmt::format("the profile worker {} before it reported ({}); stderr: {}",
                            r.timed_out ? "timed out" : r.describe(),
                            r.timed_out ? fmt::format("limit {:.0f} s", request.timeout_seconds)
                                        : "a crash, trap or illegal address in the solution?",
                            tail));
  }
  Profile p = std::move(*profile);
  p.source = request.solution.string();
  fill_statics(p, l, w);
  fill_sol(p, l, w);
  diagnose_profile(p);
  // Loading the operator and compiling the candidate and the reference (NVRTC, or the disk cache).
  p.phases["compile"] = compile_seconds;
  p.phases["worker_process"] = worker_seconds;
  p.seconds = since(start);
  return p;
}

void serve_profile(const json& j, worker::ProtocolStream& protocol) {
  const ProfileRequest request = request_from_json(j);
  // A launch that does not finish ends this process in seconds, with a `hang` line.
  std::unique_ptr<device::Watchdog> watchdog =
      protocol.watch_launches(request.launch_timeout_seconds);
  try {
    protocol.emit({{"event", "profile"}, {"profile", to_json(run_worker_profile(request))}});
  } catch (const profile::CuptiError& e) {
    throw Error(
        ExitCode::kInternal, "CUPTI",
        fmt::format("{} (run `kharness -v profile ...` for the CUPTI call sequence)", e.what()));
  }
}

}  // namespace kharness
