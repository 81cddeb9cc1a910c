// model-check in a worker process: the parent's end (check_model: the options checked, then the
// worker called and its reply turned into the verdict) and the worker's (serve_model_check).
#include "model/check_worker.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "device/gpu_lock.hpp"
#include "device/watchdog.hpp"
#include "kharness/device.hpp"
#include "kharness/error.hpp"
#include "kharness/operators.hpp"

namespace kharness::model {

namespace fs = std::filesystem;
using nlohmann::json;

json model_check_request_json(const Model& model, const CheckOptions& o) {
  json use = json::object();
  for (const auto& [op, path] : o.use) use[op] = fs::absolute(path).string();
  std::vector<std::string> dirs;
  for (const auto& d : o.operators_dirs) dirs.push_back(fs::absolute(d).string());
  return {{"task", "model_check"},
          {"model_file", fs::absolute(model.file).string()},
          {"operators_dirs", dirs},
          {"phase", o.phase},
          {"layers", o.layers},
          {"use", use},
          {"arch", o.compile.arch},
          {"use_cache", o.compile.use_cache},
          {"compile_cache_dir", o.compile.cache_dir.string()},
          {"time", o.time},
          {"timed_passes", o.timed_passes},
          {"timeout_seconds", o.timeout_seconds},
          {"launch_timeout_seconds", o.launch_timeout_seconds},
          {"verbose", spdlog::get_level() <= spdlog::level::debug}};
}

ModelCheckTask model_check_request_from_json(const json& j) {
  try {
    ModelCheckTask t;
    t.model_file = j.at("model_file").get<std::string>();
    CheckOptions& o = t.options;
    for (const auto& d : j.at("operators_dirs"))
      o.operators_dirs.emplace_back(d.get<std::string>());
    o.phase = j.at("phase").get<std::string>();
    o.layers = j.at("layers").get<int>();
    for (const auto& [op, path] : j.at("use").items()) o.use[op] = path.get<std::string>();
    o.compile =
        make_compile_options(j.at("arch").get<std::string>(), j.at("use_cache").get<bool>());
    // The parent's cache folder, whatever this process's environment would make of it.
    if (const std::string dir = j.value("compile_cache_dir", ""); !dir.empty())
      o.compile.cache_dir = dir;
    o.time = j.at("time").get<bool>();
    o.timed_passes = j.at("timed_passes").get<int>();
    o.timeout_seconds = j.at("timeout_seconds").get<double>();
    o.launch_timeout_seconds = j.at("launch_timeout_seconds").get<double>();
    return t;
  } catch (const json::exception& e) {
    throw Error(ExitCode::kInternal, "model-check worker",
                fmt::format("malformed request: {}", e.what()));
  }
}

CheckResult result_from_worker(CheckResult base, const CheckOptions& options,
                               const worker::WorkerReply& reply) {
  std::optional<CheckResult> final_result;
  std::vector<ShapeResult> shapes;
  std::string running;  // the shape in flight when the worker stopped
  for (const json& event : reply.events) {
    const std::string type = event.value("event", "");
    if (type == "begin") {
      base = check_result_from_json(event.at("result"));
    } else if (type == "started") {
      running = event.value("shape", "");
    } else if (type == "shape") {
      shapes.push_back(shape_result_from_json(event.at("result")));
      running.clear();
    } else if (type == "model_check") {
      final_result = check_result_from_json(event.at("result"));
    }
  }
  if (final_result && reply.finished()) return std::move(*final_result);
  // The worker did not finish: a hang (its launch watchdog, or the whole-worker limit) or a crash.
  const SubprocessResult& p = reply.process;
  CheckResult r = std::move(base);
  r.shapes = std::move(shapes);
  r.passed = false;
  const std::string where =
      running.empty() ? std::string() : fmt::format(" while shape {} was running", running);
  if (const std::optional<json>& hang = reply.hang) {
    const std::string label = hang->value("label", "");
    r.status = Status::kTimeout;
    r.error = fmt::format("{} did not finish within {:g} s (launch watchdog, waiting in {}){}",
                          label.empty() ? "a launch" : label,
                          hang->value("limit_seconds", options.launch_timeout_seconds),
                          hang->value("call", ""), where);
  } else if (p.timed_out) {
    r.status = Status::kTimeout;
    r.error =
        fmt::format("no model-check verdict within {:.0f} s{}", options.timeout_seconds, where);
  } else {
    r.status = Status::kRuntimeError;
    r.error = fmt::format("the model-check worker {}{}", p.describe(), where);
  }
  if (!running.empty()) {
    ShapeResult s;
    s.label = running;
    s.reason = r.error;
    r.shapes.push_back(std::move(s));
  }
  return r;
}

CheckResult check_model(const Model& model, const CheckOptions& options) {
  check_options(model, options);  // bad input is exit 2 before any process starts
  const EnvironmentReport env = probe_environment();
  if (!env.gpu_ready()) {
    throw environment_error(
        fmt::format("{}; model-check needs a GPU",
                    env.driver.available ? "no CUDA device visible" : env.driver.reason));
  }
  const worker::WorkerReply reply = worker::call_worker({"__worker", "model-check worker",
                                                         model_check_request_json(model, options),
                                                         options.timeout_seconds, options.gpu});
  if (!reply.process.stderr_data.empty())
    spdlog::debug("model-check worker stderr:\n{}", reply.process.stderr_data);
  CheckResult base;
  base.model = model.name;
  base.phase = options.phase;
  base.layers = options.layers > 0 ? options.layers : model.layers;
  base.tolerance = model.tolerance;
  return result_from_worker(std::move(base), options, reply);
}

void serve_model_check(const json& request, worker::ProtocolStream& protocol) {
  const ModelCheckTask task = model_check_request_from_json(request);
  // A launch that does not finish ends this process in seconds, with a `hang` line.
  std::unique_ptr<device::Watchdog> watchdog =
      protocol.watch_launches(task.options.launch_timeout_seconds);
  const Model model =
      load_model(task.model_file, OperatorRegistry::from_environment(task.options.operators_dirs));
  // The per-GPU lock (device/gpu_lock.hpp): exclusive when the layer is timed, as a timing is;
  // declared before the context (made inside run_model_check), released after it is gone.
  auto lock = std::make_unique<device::GpuLock>(
      device::gpu_lock_dir(), device::gpu_lock_key(),
      task.options.time ? device::GpuLock::Mode::kExclusive : device::GpuLock::Mode::kShared);
  if (!lock->held()) spdlog::warn("no GPU lock ({}): model-check unguarded", lock->problem());
  ShapeSink sink;
  sink.begin = [&](const CheckResult& head) {
    protocol.emit({{"event", "begin"}, {"result", to_json(head)}});
  };
  sink.started = [&](const std::string& label) {
    protocol.emit({{"event", "started"}, {"shape", label}});
  };
  sink.finished = [&](const ShapeResult& shape) {
    protocol.emit({{"event", "shape"}, {"result", to_json(shape)}});
  };
  const CheckResult result = run_model_check(model, task.options, sink);
  lock.reset();
  std::fflush(nullptr);  // a kernel's printf output (fd 1, sent to stderr)
  const json line = {{"event", "model_check"}, {"result", to_json(result)}};
  // Under KHARNESS_WORKER_WRAPPER (compute-sanitizer) the exit handlers run: the tool reports at
  // the normal exit. Otherwise the process ends at once, as the evaluation worker does.
  if (const char* wrapper = std::getenv("KHARNESS_WORKER_WRAPPER"); wrapper && *wrapper) {
    protocol.emit(line);
    return;
  }
  protocol.emit_and_exit(line, 0);
}

}  // namespace kharness::model
