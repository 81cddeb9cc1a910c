// In-model validation of a run (`kharness run --model NAME --phase P --operator OP`,
// docs/controller.md#in-model-validation): a candidate that its kernel verdict would promote is
// promoted only when the model's layers still pass model-check with it substituted for every node
// of the operator (kharness/model_check.hpp); with --objective layer it must also speed up the
// layer. What the run keeps of each model-check is a ModelVerdict: the outcome, the layer
// speedup over the seeds' layer and the operator's share of the layer time, which the prompts
// show.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kharness/device.hpp"
#include "kharness/model.hpp"

namespace kharness::model {
struct CheckResult;
}

namespace kharness::controller {

// What decides promotion and the best kernel: the kernel's own score (the default), or, with a
// model, the layer speedup.
enum class Objective { kKernel, kLayer };
std::string_view objective_name(Objective objective);  // "kernel", "layer"
// nullopt for another name.
std::optional<Objective> parse_objective(std::string_view name);

// The model a run validates its candidates in (`--model`, `--phase`, `--model-layers`,
// `--objective`). No file: no in-model validation.
struct ModelGate {
  std::filesystem::path file;  // the model file (models/NAME.json, or a user's)
  std::string name;            // as the command line gave it (run.json keeps it)
  std::string phase = "decode";
  // Layers per model-check: a bias of 0.5% in one operator shows within 4 (the model-check GPU
  // tests), at an eighth of Llama's 32.
  int layers = 4;
  Objective objective = Objective::kKernel;
  int timed_passes = 20;  // of each layer, per shape
  double timeout = 1800;  // seconds, one model-check's worker
  bool enabled() const { return !file.empty(); }
};

// One model-check of a run: `solution` substituted for every node of the run's operator (empty:
// the seeds' layer alone, the baseline), on `gpu`; the layer always timed.
struct ModelCheckRequest {
  std::filesystem::path solution;
  std::optional<GpuInfo> gpu;
};

// What the run keeps of one model-check.
struct ModelVerdict {
  std::string model, phase;
  int layers = 0;
  bool passed = false;
  std::string status;  // "PASSED", "INCORRECT_NUMERICAL", "RUNTIME_ERROR", "TIMEOUT", ...
  std::string reason;  // why it failed, one line (the first failing shape's)
  // Over the phase's timed shapes: the mean layer speedup over the seeds' layer, and the mean of
  // its relative noise. nullopt when no shape was timed (it failed).
  std::optional<double> layer_speedup;
  double layer_noise = 0.0;
  // The operator's share of the seeds' layer time (its nodes together): the mean over the timed
  // shapes, and the least and the most of one shape.
  std::optional<double> share;
  double share_min = 0.0, share_max = 0.0;
  std::vector<std::string> nodes;  // the operator's nodes in the layer
  nlohmann::json verdict;          // the whole model-check verdict (not in to_json)
};

nlohmann::json to_json(const ModelVerdict& v);
// Throws Error (exit 2) naming `source` for a malformed one.
ModelVerdict model_verdict_from_json(const nlohmann::json& j, const std::string& source);

// The summary of a model-check for `definition` (the run's operator).
ModelVerdict model_verdict(const model::CheckResult& result, const std::string& definition);

// The nodes of `phase`'s layer that run `definition`. Throws Error (exit 2): no such phase, or the
// operator is no node of the layer (one line naming the operator, the model and its operators).
std::vector<std::string> model_nodes_of(const model::Model& model, const std::string& phase,
                                        const std::string& definition);

// "llama-3.1-8b decode, 4 layers"
std::string model_label(const ModelGate& gate);

}  // namespace kharness::controller
