#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>

#include "bench/cupti_timer.hpp"
#include "device/driver.hpp"
#include "device/plan_launcher.hpp"
#include "device/watchdog.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/error.hpp"
#include "kharness/hash.hpp"
#include "kharness/model_check.hpp"
#include "kharness/numeric.hpp"
#include "kharness/solution.hpp"
#include "kharness/text.hpp"
#include "model/check_worker.hpp"
#include "verify/compare.hpp"
#include "verify/harness_kernels.hpp"

namespace kharness::model {
namespace {

namespace fs = std::filesystem;
using verify::HarnessKernels;
using verify::HarnessKernelsOptions;

// A kernel that faults or fails to launch inside a pass: the shape's one-line reason.
struct LayerFault {
  std::string what;
};

// Runs `f`; a CUDA error it throws is a LayerFault like a failed launch: an error a kernel left
// behind (a trap, an illegal address) can surface at a later call, a copy or a synchronize.
template <class F>
auto faulting(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const device::CudaError& e) {
    throw LayerFault{fmt::format("a CUDA error inside the layer: {}", e.what())};
  }
}

// One operator's solution, compiled and loaded, ready to launch through its plan.
struct Runnable {
  std::string path;  // the solution file, for the verdict
  bool is_reference = false;
  Solution solution;
  CompileResult compiled;
  std::unique_ptr<device::Module> module;
  std::unique_ptr<device::PlanLauncher> launcher;
};

// A tensor on the device with its type at the phase shape being run.
struct DeviceTensor {
  std::shared_ptr<device::DeviceBuffer> buffer;
  TensorType type;
};

// A node's inputs by the definition's input name, for every node by name.
using NodeInputs = std::map<std::string, std::map<std::string, DeviceTensor>>;

std::int64_t element_count(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::size_t byte_size(const TensorType& t) {
  return static_cast<std::size_t>(element_count(t.shape)) * dtype_size(t.dtype);
}

std::shared_ptr<device::DeviceBuffer> allocate(std::size_t bytes) {
  // A zero-sized tensor still gets a valid pointer.
  return std::make_shared<device::DeviceBuffer>(std::max<std::size_t>(bytes, 16));
}

std::vector<std::uint8_t> download_bytes(const DeviceTensor& t) {
  std::vector<std::uint8_t> bytes(byte_size(t.type));
  if (!bytes.empty()) t.buffer->download(bytes.data(), bytes.size());
  return bytes;
}

std::vector<double> download_values(const DeviceTensor& t) {
  const std::vector<std::uint8_t> bytes = download_bytes(t);
  std::vector<double> values(bytes.size() / dtype_size(t.type.dtype));
  to_doubles(t.type.dtype, bytes.data(), values.size(), values.data());
  return values;
}

DeviceTensor upload_bytes(const std::vector<std::uint8_t>& bytes, const TensorType& type) {
  DeviceTensor t{allocate(bytes.size()), type};
  if (!bytes.empty()) t.buffer->upload(bytes.data(), bytes.size());
  return t;
}

// Host passes over a layer's tensors (up to hundreds of millions of elements) in chunks of this
// many elements: small enough for the cache, large enough to be worth a thread.
constexpr std::size_t kChunk = std::size_t{1} << 16;

// f(begin, end) for consecutive chunks of [0, n), on up to 16 threads. f must write only its own
// chunk's results, so they do not depend on the threads.
template <class F>
void for_each_chunk(std::size_t n, const F& f) {
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  const std::size_t threads = std::min<std::size_t>(
      chunks, std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t c = next++; c < chunks; c = next++)
      f(c * kChunk, std::min(n, (c + 1) * kChunk));
  };
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

// Seconds since construction or the last lap(): the -v lines that say where a check's time goes.
class Stopwatch {
 public:
  double lap() {
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return seconds;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

template <class T>
DeviceTensor upload_ints(const std::vector<T>& values, DType dtype) {
  DeviceTensor t{allocate(values.size() * sizeof(T)),
                 TensorType{dtype, {static_cast<std::int64_t>(values.size())}}};
  if (!values.empty()) t.buffer->upload(values.data(), values.size() * sizeof(T));
  return t;
}

// deviation() of element pairs taken in order, a chunk at a time (the same sums in the same
// order, so the same result), for outputs too large to hold as doubles twice over.
class DeviationSum {
 public:
  void add(const double* got, const double* want, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      finite_ = finite_ && std::isfinite(got[i]);
      max_diff_ = std::max(max_diff_, std::fabs(got[i] - want[i]));
      max_want_ = std::max(max_want_, std::fabs(want[i]));
      dot_ += got[i] * want[i];
      gg_ += got[i] * got[i];
      ww_ += want[i] * want[i];
    }
  }

  Deviation result(bool same_size) const {
    Deviation d;
    if (!finite_ || !same_size) {
      // NaN or Inf where the reference is finite: as far off as can be.
      d.max_rel_error = INFINITY;
      d.cosine = -1;
      d.bias = INFINITY;
      return d;
    }
    d.max_rel_error = max_want_ > 0 ? max_diff_ / max_want_ : max_diff_;
    d.cosine = (gg_ > 0 && ww_ > 0) ? dot_ / std::sqrt(gg_ * ww_) : (gg_ == ww_ ? 1.0 : 0.0);
    d.bias = ww_ > 0 ? dot_ / ww_ - 1.0 : 0.0;
    return d;
  }

 private:
  double max_diff_ = 0, max_want_ = 0, dot_ = 0, gg_ = 0, ww_ = 0;
  bool finite_ = true;
};

// deviation() of two outputs' elements, read a chunk at a time.
Deviation deviation_of(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                       DType dtype) {
  const std::size_t size = dtype_size(dtype);
  const std::size_t n = std::min(got.size(), want.size()) / size;
  std::vector<double> g(std::min(n, kChunk)), w(std::min(n, kChunk));
  DeviationSum sum;
  for (std::size_t i = 0; i < n; i += kChunk) {
    const std::size_t len = std::min(kChunk, n - i);
    to_doubles(dtype, got.data() + i * size, len, g.data());
    to_doubles(dtype, want.data() + i * size, len, w.data());
    sum.add(g.data(), w.data(), len);
  }
  return sum.result(got.size() == want.size());
}

// A view (columns, cast, sum) of `tensors` as a new device tensor, made on the host: each
// element read exactly into a double, the sources added in order, the sum rounded once to its
// dtype.
DeviceTensor view_of(const Edge& edge, const std::map<std::string, DeviceTensor>& tensors) {
  // A source as rows of `cols` elements, of which those from column `begin` on feed the result
  // (without `columns`, one row of every element).
  struct Source {
    std::vector<std::uint8_t> bytes;
    DType dtype;
    std::int64_t cols = 0, begin = 0;
  };
  std::vector<Source> sources;
  TensorType type;
  for (const auto& ref : edge.sources) {
    const DeviceTensor& src = tensors.at(ref.text());
    Source s{download_bytes(src), src.type.dtype};
    TensorType t = src.type;
    s.cols = element_count(t.shape);
    if (edge.columns) {
      s.cols = t.shape[1];
      s.begin = edge.columns->first;
      t.shape[1] = edge.columns->second - edge.columns->first;
    }
    if (sources.empty()) type = t;
    sources.push_back(std::move(s));
  }
  if (edge.cast) type.dtype = *edge.cast;
  const std::size_t n = static_cast<std::size_t>(element_count(type.shape));
  const std::size_t width = edge.columns ? static_cast<std::size_t>(type.shape[1]) : n;
  const std::size_t out_size = dtype_size(type.dtype);
  std::vector<std::uint8_t> out(n * out_size);
  for_each_chunk(n, [&](std::size_t begin, std::size_t end) {
    std::vector<double> acc(kChunk), add(kChunk);
    // Within one row at a time: a row's columns are contiguous in every source.
    for (std::size_t i = begin; i < end;) {
      const std::size_t row = i / width, col = i % width;
      const std::size_t len = std::min(end - i, width - col);
      for (std::size_t k = 0; k < sources.size(); ++k) {
        const Source& s = sources[k];
        const std::size_t at =
            row * static_cast<std::size_t>(s.cols) + static_cast<std::size_t>(s.begin) + col;
        to_doubles(s.dtype, s.bytes.data() + at * dtype_size(s.dtype), len,
                   k == 0 ? acc.data() : add.data());
        if (k > 0)
          for (std::size_t j = 0; j < len; ++j) acc[j] += add[j];
      }
      from_doubles(type.dtype, acc.data(), len, out.data() + i * out_size);
      i += len;
    }
  });
  return upload_bytes(out, type);
}

// --use names a node or a definition of the phase; anything else is a typo.
void check_use_names(const Model& model, const Phase& phase, const CheckOptions& options) {
  std::vector<std::string> names;
  for (const auto& node : model.nodes) {
    if (!node.phase.empty() && node.phase != phase.name) continue;
    names.push_back(node.name);
    names.push_back(node.definition);
  }
  for (const auto& [name, path] : options.use) {
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;
    auto close = close_matches(name, names, 1);
    throw input_error("--use " + name,
                      close.empty()
                          ? fmt::format("no node or definition of that name in {}'s {} phase",
                                        model.name, phase.name)
                          : fmt::format("no node or definition of that name in {}'s {} phase "
                                        "(did you mean '{}'?)",
                                        model.name, phase.name, close[0]));
  }
}

// Which solution runs each node in the substituted pass: --use by node name, else by
// definition; the rest take their operator's seed for `arch`, else (empty path) the reference.
std::map<std::string, fs::path> choose_solutions(const Model& model, const Phase& phase,
                                                 const CheckOptions& options,
                                                 const std::string& arch) {
  std::map<std::string, fs::path> chosen;
  for (const auto& node : model.nodes) {
    if (!node.phase.empty() && node.phase != phase.name) continue;
    const Operator& op = model.operators.at(node.definition);
    fs::path path;
    if (auto it = options.use.find(node.name); it != options.use.end()) {
      path = it->second;
    } else if (auto d = options.use.find(node.definition); d != options.use.end()) {
      path = d->second;
    } else if (auto seed = seed_for(op, arch)) {
      path = *seed;
    }
    chosen[node.name] = path;
  }
  return chosen;
}

// model-check --time: the baseline layer and the substituted one, each node on fixed buffers,
// timed pass by pass with CUPTI.
class LayerTimer {
 public:
  LayerTimer(const Model& model, device::Stream& stream, HarnessKernels& harness,
             std::size_t l2_bytes, int timed_passes,
             const std::map<std::string, const Runnable*>& baseline,
             const std::map<std::string, const Runnable*>& candidate)
      : model_(model),
        stream_(stream),
        harness_(harness),
        l2_bytes_(l2_bytes),
        timed_passes_(timed_passes),
        baseline_(baseline),
        candidate_(candidate) {}

  // The layer end to end (timed_passes passes of the baseline layer and of the
  // substituted one, in alternating order, after one untimed pass of each): each pass starts
  // with L2 flushed, then launches every node back to back on one stream, each node its own
  // CUPTI iteration; the layer's span runs from the first node's start to the last one's end.
  // Every node runs on the first layer's inputs of the substituted pass (timing does not depend
  // on the values; the edges between nodes, host copies here, are views or fused in an engine
  // and are not timed).
  LayerTiming time(const std::vector<const Node*>& nodes, const LayerShapes& shapes,
                   const NodeInputs& inputs) {
    std::vector<TimedNode> sides[2];  // 0: baseline, 1: substituted
    std::vector<std::pair<std::string, std::string>> order;
    std::vector<std::string> substituted;
    for (const Node* node : nodes) {
      const std::map<std::string, DeviceTensor>& in = inputs.at(node->name);
      sides[0].push_back(timed_node(*node, *baseline_.at(node->name), shapes, in));
      sides[1].push_back(timed_node(*node, *candidate_.at(node->name), shapes, in));
      order.emplace_back(node->name, node->definition);
      if (baseline_.at(node->name) != candidate_.at(node->name)) substituted.push_back(node->name);
    }
    verify::L2Flush flush(l2_bytes_, 1);
    auto run_side = [&](std::vector<TimedNode>& side, bench::CuptiTimer* timer,
                        std::vector<std::uint64_t>* ids) {
      flush(harness_, stream_.get());
      for (auto& t : side) {
        if (timer) {
          ids->push_back(next_timing_id_);
          timer->begin(next_timing_id_++);
        }
        device::LaunchOutcome outcome = t.runnable->launcher->launch(t.env, stream_.get(), false);
        if (timer) timer->end();
        if (!outcome.ok)
          throw LayerFault{fmt::format("timing node {} ({}): launch {} ({}) failed: {}",
                                       t.node->name, t.node->definition, outcome.launch_index,
                                       outcome.kernel, outcome.message)};
      }
    };
    run_side(sides[0], nullptr, nullptr);  // module loads, first-touch costs
    run_side(sides[1], nullptr, nullptr);
    stream_.synchronize();

    bench::CuptiTimer timer;
    // ids[side][pass]: one CUPTI iteration per node, in execution order.
    std::vector<std::vector<std::uint64_t>> ids[2];
    for (int p = 0; p < timed_passes_; ++p) {
      for (int k = 0; k < 2; ++k) {
        int side = (p % 2 == 0) ? k : 1 - k;  // A B, B A, ...: neither always runs first
        ids[side].emplace_back();
        run_side(sides[side], &timer, &ids[side].back());
      }
    }
    stream_.synchronize();
    std::map<std::uint64_t, bench::IterationSpan> spans = timer.collect();
    std::vector<PassTiming> passes[2];
    for (int side = 0; side < 2; ++side) {
      for (const auto& pass_ids : ids[side]) {
        PassTiming pt;
        std::uint64_t first = 0, last = 0;
        for (std::size_t i = 0; i < pass_ids.size(); ++i) {
          const bench::IterationSpan& span = spans[pass_ids[i]];
          pt.node_seconds[order[i].first] = span.seconds();
          if (span.end_ns == 0) continue;  // a node with no GPU work (none in a real plan)
          if (first == 0 || span.start_ns < first) first = span.start_ns;
          last = std::max(last, span.end_ns);
        }
        pt.span_seconds = last > first ? static_cast<double>(last - first) * 1e-9 : 0.0;
        passes[side].push_back(std::move(pt));
      }
    }
    return summarize_timing(order, substituted, passes[0], passes[1]);
  }

 private:
  // One node ready to launch again and again on fixed buffers: no allocation, poison or host
  // copy between the launches of a timed pass.
  struct TimedNode {
    const Node* node = nullptr;
    const Runnable* runnable = nullptr;
    device::LaunchEnv env;
    std::vector<std::shared_ptr<device::DeviceBuffer>> owned;  // outputs and workspace
  };

  TimedNode timed_node(const Node& node, const Runnable& runnable, const LayerShapes& shapes,
                       const std::map<std::string, DeviceTensor>& inputs) {
    TimedNode t;
    t.node = &node;
    t.runnable = &runnable;
    const Definition& def = model_.operators.at(node.definition).definition;
    t.env.definition = &def;
    t.env.axes = shapes.node_axes.at(node.name);
    for (const auto& [name, edge] : node.inputs)
      if (edge.scalar) t.env.scalars[name] = *edge.scalar;
    for (const auto& [name, tensor] : inputs) t.env.tensors[name] = tensor.buffer->ptr();
    for (const auto& spec : def.outputs) {
      t.owned.push_back(allocate(byte_size(shapes.tensors.at(node.name + "." + spec.name))));
      t.env.tensors[spec.name] = t.owned.back()->ptr();
    }
    if (std::int64_t bytes = runnable.launcher->workspace_bytes(t.env.axes); bytes > 0) {
      t.owned.push_back(allocate(static_cast<std::size_t>(bytes)));
      t.env.workspace = t.owned.back()->ptr();
    }
    return t;
  }

  const Model& model_;
  device::Stream& stream_;
  HarnessKernels& harness_;
  std::size_t l2_bytes_;
  int timed_passes_;
  const std::map<std::string, const Runnable*>& baseline_;
  const std::map<std::string, const Runnable*>& candidate_;
  std::uint64_t next_timing_id_ = 1;
};

// A shape whose hidden state drifted past the tolerance: the first layer out of it, and the
// culprit, the node of that layer or before whose own deviation, in units of the tolerance, is
// largest.
void blame_drift(ShapeResult& s, const ModelTolerance& tol) {
  for (const auto& d : s.layers) {
    if (!within(d.hidden, tol)) {
      s.failing_layer = d.layer;
      break;
    }
  }
  auto score = [&tol](const Deviation& d) {
    return std::max({std::fabs(d.bias) / tol.max_bias, d.max_rel_error / tol.max_rel_error,
                     (1.0 - d.cosine) / (1.0 - tol.min_cosine)});
  };
  const NodeDeviation* worst = nullptr;
  for (const auto& n : s.nodes) {
    if (n.layer > s.failing_layer) continue;
    if (!worst || score(n.worst) > score(worst->worst)) worst = &n;
  }
  const Deviation& h = s.layers[s.failing_layer].hidden;
  std::string what = fmt::format(
      "hidden state after layer {}: max_rel_error {:.3g} (max {}), "
      "cosine {:.6f} (min {}), bias {:+.3g} (max {})",
      s.failing_layer, h.max_rel_error, tol.max_rel_error, h.cosine, tol.min_cosine, h.bias,
      tol.max_bias);
  if (worst) {
    s.failing_node = worst->node;
    s.failing_definition = worst->definition;
    s.failing_layer = worst->layer;
    s.reason = fmt::format(
        "{}; largest own deviation: node {} ({}) in layer {}, bias {:+.3g}, "
        "max_rel_error {:.3g}",
        what, worst->node, worst->definition, worst->layer, worst->worst.bias,
        worst->worst.max_rel_error);
  } else {
    s.reason = what;
  }
}

// Independent draws per tensor and layer: the first 8 bytes of a SHA-256 of the name.
std::uint64_t stream_id(const std::string& what, int layer) {
  std::string hex = sha256_hex(fmt::format("{}#{}", what, layer));
  return std::stoull(hex.substr(0, 16), nullptr, 16);
}

class LayerRunner {
 public:
  LayerRunner(const Model& model, const Phase& phase, const CheckOptions& options, std::string arch,
              std::size_t l2_bytes, const ShapeSink& sink)
      : model_(model),
        phase_(phase),
        options_(options),
        arch_(std::move(arch)),
        sink_(sink),
        l2_bytes_(l2_bytes) {}

  CheckResult run() {
    CheckResult result;
    result.model = model_.name;
    result.phase = phase_.name;
    result.layers = options_.layers > 0 ? options_.layers : model_.layers;
    result.tolerance = model_.tolerance;
    std::map<std::string, fs::path> chosen = choose_solutions(model_, phase_, options_, arch_);
    for (const auto& [node, path] : chosen)
      result.solutions[node] = path.empty() ? "reference" : path.string();
    if (sink_.begin) sink_.begin(result);

    Stopwatch watch;
    harness_ = std::make_unique<HarnessKernels>(HarnessKernelsOptions{arch_});
    try {
      for (const auto& node : phase_nodes()) {
        const Operator& op = model_.operators.at(node->definition);
        reference_[node->name] = &runnable(op, op.reference.value_or(fs::path()), true);
        const fs::path& path = chosen.at(node->name);
        candidate_[node->name] = path.empty() ? reference_[node->name] : &runnable(op, path, false);
      }
      if (options_.time) {
        // The baseline layer: what runs without --use (each operator's seed, else its reference).
        std::map<std::string, fs::path> seeds =
            choose_solutions(model_, phase_, CheckOptions{}, arch_);
        for (const Node* node : phase_nodes()) {
          const fs::path& path = seeds.at(node->name);
          baseline_[node->name] =
              path.empty() ? reference_.at(node->name)
                           : &runnable(model_.operators.at(node->definition), path, false);
        }
        timer_ = std::make_unique<LayerTimer>(model_, stream_, *harness_, l2_bytes_,
                                              options_.timed_passes, baseline_, candidate_);
      }
    } catch (const Error& e) {
      if (e.code() != ExitCode::kFailed) throw;
      result.error = e.message();
      result.status = failed_status_;
      return result;
    }
    spdlog::debug("model-check: kernels compiled and loaded in {:.3f} s", watch.lap());
    result.passed = true;
    for (const auto& shape : phase_.shapes) {
      if (sink_.started) sink_.started(shape.label());
      ShapeResult s = run_shape(shape, result.layers);
      if (sink_.finished) sink_.finished(s);
      result.passed = result.passed && s.passed;
      const bool fault = !s.reason.empty() && s.layers.empty();  // a fault, not a drift
      if (fault) {
        result.error = s.reason;
        result.status = Status::kRuntimeError;
      }
      result.shapes.push_back(std::move(s));
      if (fault) break;
    }
    if (!result.passed && result.status == Status::kPassed)
      result.status = Status::kIncorrectNumerical;
    return result;
  }

 private:
  std::vector<const Node*> phase_nodes() const {
    std::vector<const Node*> nodes;
    for (const auto& n : model_.nodes)
      if (n.phase.empty() || n.phase == phase_.name) nodes.push_back(&n);
    return nodes;
  }

  // Compiles each (operator, solution) once. A reference that does not compile is kharness's
  // fault; a substituted solution that does not is the solution's (exit 1).
  Runnable& runnable(const Operator& op, const fs::path& path, bool is_reference) {
    std::string key = op.definition.name + "\n" + path.string();
    if (auto it = runnables_.find(key); it != runnables_.end()) return *it->second;
    if (path.empty())
      throw Error(ExitCode::kInternal, op.definition.name, "has no reference to run");
    auto r = std::make_unique<Runnable>();
    r->path = path.string();
    r->is_reference = is_reference;
    r->solution = load_solution(path);
    CompileOptions copts = options_.compile;
    copts.arch = arch_;
    r->compiled = compile_solution(r->solution, &op.definition, &op.workloads, copts);
    if (!r->compiled.ok()) {
      failed_status_ = r->compiled.status;
      std::string first = r->compiled.diagnostics.empty() ? printable_line(bounded(r->compiled.log))
                                                          : r->compiled.diagnostics.front().message;
      throw Error(is_reference ? ExitCode::kInternal : ExitCode::kFailed, path.string(),
                  fmt::format("does not compile for {} ({}): {}", op.definition.name,
                              status_name(r->compiled.status), first));
    }
    try {
      r->module = std::make_unique<device::Module>(r->compiled.cubin);
      r->launcher =
          std::make_unique<device::PlanLauncher>(r->solution.plan, r->compiled.kernels, *r->module);
    } catch (const std::runtime_error& e) {
      // The plan does not fit its kernels (a parameter's size, a missing kernel).
      failed_status_ = Status::kRuntimeError;
      throw Error(is_reference ? ExitCode::kInternal : ExitCode::kFailed, path.string(),
                  fmt::format("cannot launch for {}: {}", op.definition.name,
                              printable_line(bounded(e.what()))));
    }
    Runnable& out = *r;
    runnables_.emplace(key, std::move(r));
    return out;
  }

  DeviceTensor random_tensor(const TensorType& type, const InputGenerator& gen, std::uint64_t id) {
    DeviceTensor t{allocate(byte_size(type)), type};
    harness_->fill_random(t.buffer->ptr(), static_cast<std::size_t>(element_count(type.shape)),
                          type.dtype, gen, model_.seed, id, stream_.get());
    return t;
  }

  // The page table and positions of one phase shape, on the device; the cache rows new tokens
  // are appended to stay on the host.
  void make_phase_tensors(const PhaseShape& shape) {
    PhaseTables t = phase_tables(shape, model_.seed);
    phase_tensors_["phase.qo_indptr"] = upload_ints(t.qo_indptr, DType::kInt32);
    phase_tensors_["phase.kv_indptr"] = upload_ints(t.kv_indptr, DType::kInt32);
    phase_tensors_["phase.kv_indices"] = upload_ints(t.kv_indices, DType::kInt32);
    phase_tensors_["phase.positions"] = upload_ints(t.positions, DType::kInt64);
    append_rows_ = std::move(t.append_rows);
  }

  // Layer `layer`'s weights, drawn afresh in each pass (a fill is a pure function of the seed and
  // the tensor's stream id, so both passes see the same values): one layer's weights are
  // resident at a time, not the whole model's. Shared weights are drawn once into `shared`.
  std::map<std::string, DeviceTensor> layer_weights(const LayerShapes& shapes, int layer,
                                                    std::map<std::string, DeviceTensor>& shared) {
    std::map<std::string, DeviceTensor> out;
    for (const auto& w : model_.weights) {
      const std::string key = "weight." + w.name;
      auto typed = shapes.tensors.find(key);
      if (typed == shapes.tensors.end()) continue;  // fed only by nodes of another phase
      if (w.shared) {
        if (!shared.count(key))
          shared[key] = random_tensor(typed->second, w.generator, stream_id(key, 0));
        out[key] = shared[key];
      } else {
        out[key] = random_tensor(typed->second, w.generator, stream_id(key, layer));
      }
    }
    return out;
  }

  // An edge as a device tensor: a plain reference is the tensor itself, a view (view_of) a new
  // one.
  DeviceTensor materialise(const Edge& edge, const std::map<std::string, DeviceTensor>& tensors) {
    if (edge.append) return append(edge, tensors);
    if (edge.sources.size() == 1 && !edge.sum && !edge.columns && !edge.cast)
      return tensors.at(edge.sources[0].text());
    return view_of(edge, tensors);
  }

  // Writes the new tokens' rows into the cache in place (this layer's cache of this pass, drawn
  // afresh for each), as an engine appends K and V before attention: one copy per token, since
  // the pages are scattered. Returns the cache.
  DeviceTensor append(const Edge& edge, const std::map<std::string, DeviceTensor>& tensors) {
    const DeviceTensor& cache = tensors.at(edge.sources[0].text());
    DeviceTensor rows = materialise(*edge.append, tensors);
    const std::size_t row_bytes =
        byte_size(cache.type) / static_cast<std::size_t>(cache.type.shape[0] * cache.type.shape[1]);
    std::vector<std::uint8_t> bytes(append_rows_.size() * row_bytes);
    if (bytes.size() != byte_size(rows.type))  // the loader checked this at every phase shape
      throw Error(ExitCode::kInternal, edge.sources[0].text(),
                  "appended rows do not fit the phase's new tokens");
    // The download waits for all work in the context, so the cache's random fill (a kernel on
    // the stream) has finished before the rows are copied over it.
    if (!bytes.empty()) rows.buffer->download(bytes.data(), bytes.size());
    for (std::size_t i = 0; i < append_rows_.size(); ++i)
      cache.buffer->upload(bytes.data() + i * row_bytes, row_bytes,
                           static_cast<std::size_t>(append_rows_[i]) * row_bytes);
    return cache;
  }

  // A node's tensor inputs, by the definition's input name: each edge materialised once, for
  // the node's kernel and for its reference beside it.
  std::map<std::string, DeviceTensor> node_inputs(
      const Node& node, const std::map<std::string, DeviceTensor>& tensors) {
    std::map<std::string, DeviceTensor> inputs;
    for (const auto& [name, edge] : node.inputs)
      if (!edge.scalar) inputs[name] = materialise(edge, tensors);
    return inputs;
  }

  // Runs one node with `runnable` on `inputs`; its outputs go into `outputs` under
  // "NODE.OUTPUT". Returns an empty string, or what went wrong.
  std::string launch(const Node& node, const Runnable& runnable, const LayerShapes& shapes,
                     const std::map<std::string, DeviceTensor>& inputs,
                     std::map<std::string, DeviceTensor>& outputs, int layer) {
    const Definition& def = model_.operators.at(node.definition).definition;
    device::LaunchEnv env;
    env.definition = &def;
    env.axes = shapes.node_axes.at(node.name);
    for (const auto& [name, edge] : node.inputs)
      if (edge.scalar) env.scalars[name] = *edge.scalar;
    for (const auto& [name, t] : inputs) env.tensors[name] = t.buffer->ptr();
    for (const auto& spec : def.outputs) {
      DeviceTensor t{nullptr, shapes.tensors.at(node.name + "." + spec.name)};
      t.buffer = allocate(byte_size(t.type));
      // NaN in every float dtype: memory freed by the other pass may come back at this address
      // holding its answers, and an element the kernel does not write must not pass for one.
      t.buffer->fill(0xFF);
      env.tensors[spec.name] = t.buffer->ptr();
      outputs[node.name + "." + spec.name] = t;
    }
    std::shared_ptr<device::DeviceBuffer> workspace;
    const std::string who =
        fmt::format("layer {} node {} ({}, {})", layer, node.name, node.definition,
                    runnable.is_reference ? "reference" : runnable.path);
    device::LaunchOutcome outcome;
    // What a hang names (the launch watchdog's label): the substituted kernels or a reference.
    device::ActivityPhase phase(runnable.is_reference ? "model-check reference"
                                                      : "model-check solution");
    try {
      if (std::int64_t bytes = runnable.launcher->workspace_bytes(env.axes); bytes > 0) {
        workspace = allocate(static_cast<std::size_t>(bytes));
        env.workspace = workspace->ptr();
      }
      outcome = runnable.launcher->launch(env, stream_.get(), true);
    } catch (const std::exception& e) {  // a plan expression or argument that does not fit
      return fmt::format("{}: {}", who, printable_line(bounded(e.what())));
    }
    if (!outcome.ok)
      return fmt::format("{}: launch {} ({}) failed: {}", who, outcome.launch_index, outcome.kernel,
                         outcome.message);
    return {};
  }

  // A node beside its reference on the same inputs: how far each output moved (the worst by
  // bias), and whether it still meets its operator's own tolerance and integrity rules (every
  // element written, no NaN where the reference is finite), as `check` would judge it. Operators
  // whose comparator reads more than the two outputs (sampling, top-k sets) get the deviation only.
  NodeDeviation judge_node(const Node& node, const std::map<std::string, DeviceTensor>& outputs,
                           const std::map<std::string, DeviceTensor>& truth, int layer) const {
    const Definition& def = model_.operators.at(node.definition).definition;
    NodeDeviation d{layer, node.name, node.definition, {}, {}};
    bool first = true;
    for (const auto& [name, t] : outputs) {
      std::vector<std::uint8_t> got = download_bytes(t), want = download_bytes(truth.at(name));
      Deviation one = deviation_of(got, want, t.type.dtype);
      if (first || std::fabs(one.bias) > std::fabs(d.worst.bias)) d.worst = one;
      first = false;
      if (def.kharness.comparator != "elementwise" || !d.own_failure.empty()) continue;
      verify::OutputCheck check = verify::compare_output(
          name, t.type.dtype, want.data(), got.data(),
          static_cast<std::uint64_t>(element_count(t.type.shape)), def.kharness.tolerance);
      if (auto failure = verify::output_failure(check, def.kharness.tolerance))
        d.own_failure = failure->message;
    }
    return d;
  }

  // One pass over `layers` layers: with the references, or with the substituted solutions (then
  // each non-reference node is also run by its reference on the same inputs, `deviations`).
  // Returns the hidden state after each layer; throws LayerFault when a kernel fails.
  std::vector<std::vector<double>> pass(const LayerShapes& shapes, int layers, bool substituted,
                                        std::vector<NodeDeviation>* deviations,
                                        NodeInputs* first_layer_inputs = nullptr) {
    const char* which = substituted ? "substituted" : "reference";
    Stopwatch watch;
    std::map<std::string, DeviceTensor> inputs;
    for (const auto& in : model_.inputs) {
      const TensorType& type = shapes.tensors.at("input." + in.name);
      inputs["input." + in.name] =
          random_tensor(type, in.generator, stream_id("input." + in.name, 0));
    }
    std::vector<std::vector<double>> hidden;
    std::map<std::string, DeviceTensor> shared;
    for (int l = 0; l < layers; ++l) {
      std::map<std::string, DeviceTensor> tensors = inputs;
      for (auto& [k, v] : layer_weights(shapes, l, shared)) tensors[k] = std::move(v);
      for (const auto& [k, v] : phase_tensors_) tensors[k] = v;
      stream_.synchronize();  // the fills, so that the lap below is theirs
      spdlog::debug("model-check: {} pass layer {}: weights drawn in {:.3f} s", which, l,
                    watch.lap());
      for (const Node* node : phase_nodes()) {
        const Runnable& run = substituted ? *candidate_.at(node->name) : *reference_.at(node->name);
        std::map<std::string, DeviceTensor> in = node_inputs(*node, tensors);
        if (first_layer_inputs && l == 0) (*first_layer_inputs)[node->name] = in;
        const double inputs_seconds = watch.lap();
        // Beside a node not run by its reference, the reference on the same inputs, first: what
        // the node alone changes, whatever drift its inputs carry.
        std::map<std::string, DeviceTensor> truth;
        bool shadow = substituted && !run.is_reference;
        if (shadow) {
          if (std::string fault = launch(*node, *reference_.at(node->name), shapes, in, truth, l);
              !fault.empty())
            throw LayerFault{fault};
        }
        const double shadow_seconds = watch.lap();
        std::map<std::string, DeviceTensor> outputs;
        if (std::string fault = launch(*node, run, shapes, in, outputs, l); !fault.empty())
          throw LayerFault{fault};
        const double run_seconds = watch.lap();  // launch() waits for the kernels
        if (shadow) deviations->push_back(judge_node(*node, outputs, truth, l));
        spdlog::debug("model-check: {} pass layer {} node {} ({}): inputs {:.3f} s, {} {:.3f} s{}",
                      which, l, node->name, node->definition, inputs_seconds,
                      run.is_reference ? "reference" : "solution", run_seconds,
                      shadow ? fmt::format(", reference beside it {:.3f} s, judged in {:.3f} s",
                                           shadow_seconds, watch.lap())
                             : std::string());
        for (auto& [k, v] : outputs) tensors[k] = std::move(v);
      }
      std::map<std::string, DeviceTensor> next;
      for (const auto& [name, edge] : model_.outputs) {
        next["input." + name] = materialise(edge, tensors);
      }
      inputs = std::move(next);
      hidden.push_back(download_values(inputs.at("input." + model_.inputs.front().name)));
      spdlog::debug("model-check: {} pass layer {}: outputs made and read back in {:.3f} s", which,
                    l, watch.lap());
    }
    return hidden;
  }

  ShapeResult run_shape(const PhaseShape& shape, int layers) {
    ShapeResult s;
    s.label = shape.label();
    LayerShapes shapes = resolve_shapes(model_, shape);
    make_phase_tensors(shape);
    std::vector<std::vector<double>> truth, got;
    NodeInputs timing_inputs;
    Stopwatch watch;
    try {
      truth = faulting([&] { return pass(shapes, layers, false, nullptr); });
      spdlog::debug("model-check: shape {}: reference pass in {:.3f} s", s.label, watch.lap());
      got = faulting([&] {
        return pass(shapes, layers, true, &s.nodes, options_.time ? &timing_inputs : nullptr);
      });
      spdlog::debug("model-check: shape {}: substituted pass in {:.3f} s", s.label, watch.lap());
    } catch (const LayerFault& fault) {
      s.reason = fault.what;
      return s;
    }
    for (int l = 0; l < layers; ++l) s.layers.push_back({l, deviation(got[l], truth[l])});
    // A node that breaks its own operator's rules inside the layer fails the shape whatever the
    // hidden state shows: a wrong key in a decode step is one of thousands the softmax averages.
    for (const auto& n : s.nodes) {
      if (n.own_failure.empty()) continue;
      s.failing_layer = n.layer;
      s.failing_node = n.node;
      s.failing_definition = n.definition;
      s.reason = fmt::format(
          "node {} ({}) in layer {} breaks its own operator check beside its "
          "reference: {}",
          n.node, n.definition, n.layer, n.own_failure);
      return s;
    }
    s.passed = within(s.layers.back().hidden, model_.tolerance);
    if (s.passed) {
      // Only a layer that computes the right thing is worth timing.
      if (options_.time) {
        try {
          s.timing = faulting([&] { return timer_->time(phase_nodes(), shapes, timing_inputs); });
          spdlog::debug("model-check: shape {}: layer timed in {:.3f} s", s.label, watch.lap());
        } catch (const LayerFault& fault) {
          s.passed = false;
          s.reason = fault.what;
          s.layers.clear();  // a fault, not a drift: run() stops at it
        }
      }
      return s;
    }
    blame_drift(s, model_.tolerance);
    return s;
  }

  const Model& model_;
  const Phase& phase_;
  const CheckOptions& options_;
  std::string arch_;
  const ShapeSink& sink_;
  Status failed_status_ = Status::kRuntimeError;  // of a solution that cannot run (runnable)
  device::Stream stream_;
  std::unique_ptr<HarnessKernels> harness_;
  std::map<std::string, std::unique_ptr<Runnable>> runnables_;
  std::map<std::string, const Runnable*> reference_;  // by node
  std::map<std::string, const Runnable*> candidate_;  // by node
  std::map<std::string, const Runnable*> baseline_;   // by node, with --time
  std::size_t l2_bytes_ = 0;
  std::unique_ptr<LayerTimer> timer_;  // with --time
  std::map<std::string, DeviceTensor> phase_tensors_;
  std::vector<std::int64_t> append_rows_;  // the cache row of each new token, in token order
};

}  // namespace

Deviation deviation(const std::vector<double>& got, const std::vector<double>& want) {
  DeviationSum sum;
  sum.add(got.data(), want.data(), std::min(got.size(), want.size()));
  return sum.result(got.size() == want.size());
}

bool within(const Deviation& got, const ModelTolerance& tolerance) {
  return got.max_rel_error <= tolerance.max_rel_error && got.cosine >= tolerance.min_cosine &&
         std::fabs(got.bias) <= tolerance.max_bias;
}

const Phase& check_options(const Model& model, const CheckOptions& options) {
  const Phase* phase = model.find_phase(options.phase);
  if (!phase) {
    std::vector<std::string> names;
    for (const auto& p : model.phases) names.push_back(p.name);
    throw input_error("--phase", fmt::format("{} has no phase '{}' (phases: {})", model.name,
                                             options.phase, join(names, ", ")));
  }
  if (options.layers < 0 || options.layers > model.layers)
    throw input_error("--layers", fmt::format("expected 1 to {} (the model's layers), got {}",
                                              model.layers, options.layers));
  check_use_names(model, *phase, options);
  for (const auto& [op, path] : options.use) {
    std::error_code ec;
    if (!fs::exists(path, ec))
      throw input_error("--use " + op, fmt::format("no solution '{}'", path.string()));
  }
  return *phase;
}

CheckResult run_model_check(const Model& model, const CheckOptions& options,
                            const ShapeSink& sink) {
  const Phase& phase = check_options(model, options);
  device::Driver::instance().require();
  device::PrimaryContext context(0);
  std::string arch =
      options.compile.arch.empty() ? default_arch_for_device(0) : options.compile.arch;
  int l2_bytes = 0;
  device::Driver::instance().cuDeviceGetAttribute(&l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
                                                  context.device());
  return LayerRunner(model, phase, options, arch, static_cast<std::size_t>(std::max(l2_bytes, 0)),
                     sink)
      .run();
}

}  // namespace kharness::model
