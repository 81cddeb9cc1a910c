// model-check across the worker boundary (kharness/model_check.hpp): the request check_model
// sends to the evaluation worker (`kharness __worker`, task "model_check") and the worker reads
// back, the in-process run the worker makes of it (run_model_check, reporting each shape as it
// starts and ends), and the verdict the parent makes of the worker's reply, a crash or a hang
// included (result_from_worker).
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "kharness/model_check.hpp"
#include "worker/channel.hpp"

namespace kharness::model {

// What the run reports as it goes (each optional): the verdict's head once the solutions are
// chosen, the label of each phase shape as it starts, and each shape's result as it ends.
struct ShapeSink {
  std::function<void(const CheckResult& head)> begin;
  std::function<void(const std::string& label)> started;
  std::function<void(const ShapeResult& shape)> finished;
};

// The check in this process, on device 0 (the worker's): what serve_model_check runs. Throws as
// check_model, but a hang here is not contained (the worker's launch watchdog contains it).
CheckResult run_model_check(const Model& model, const CheckOptions& options,
                            const ShapeSink& sink = {});

// The worker's request: the model file and the catalogue folders to load it again from, and
// the options (the compile's arch, cache use and cache folder among them; not the GPU, which
// the worker is started on).
struct ModelCheckTask {
  std::filesystem::path model_file;
  CheckOptions options;
};
nlohmann::json model_check_request_json(const Model& model, const CheckOptions& options);
// Throws Error (exit 4: the request is kharness's own) for a malformed request.
ModelCheckTask model_check_request_from_json(const nlohmann::json& j);

// The verdict of a model-check worker's run: the worker's own when it finished; else `base`
// (the model, phase, layers and tolerance; the worker's `begin` line replaces it when it came)
// with the shapes that ended, the shape in flight failed, and the status of how the worker
// ended: TIMEOUT for a `hang` line (the launch watchdog) or the whole-worker limit,
// RUNTIME_ERROR for a crash.
CheckResult result_from_worker(CheckResult base, const CheckOptions& options,
                               const worker::WorkerReply& reply);

}  // namespace kharness::model
