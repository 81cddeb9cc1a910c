// model-check: a model's layers run twice on the same weights and inputs, first with every
// operator's reference (the truth), then with chosen solutions substituted (the rest: each
// operator's shipped seed, else its reference); the final hidden states are compared under the
// model's tolerance, with the drift after every layer, and every node not run by its reference
// is also compared with its reference on the same inputs inside the layer, so a failure names
// the operator (node) and layer that moved the hidden state; a node that breaks its own
// operator's tolerance or integrity rules there fails the shape by itself. With --time, each
// passing shape's layer is also timed end to end against the baseline layer (LayerTiming).
// models/README.md describes the verdict's JSON.
//
// The layers run in a worker process (`kharness __worker`, task "model_check"), as `check`'s
// trials do: a substituted kernel that crashes, traps or hangs inside the layer ends the worker,
// not kharness; the verdict says RUNTIME_ERROR or TIMEOUT (the launch watchdog's, within seconds,
// or the whole worker's --timeout) and names the shape that was running.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/model.hpp"
#include "kharness/status.hpp"

namespace kharness::model {

struct CheckOptions {
  std::string phase = "decode";
  int layers = 0;  // 0: the model's layer count
  // --use OP=SOLUTION: OP is a definition (every node of it) or a node name.
  std::map<std::string, std::filesystem::path> use;
  // How every solution is compiled (references included); an empty arch: the device's.
  CompileOptions compile;
  // Times the layer end to end at every shape that passes: timed_passes passes of the baseline
  // layer and of the substituted one, alternating (LayerTiming).
  bool time = false;
  int timed_passes = 20;
  // The worker: its wall-clock limit (compiles, every layer and the timing), the launch
  // watchdog's limit (a wait on the GPU longer than this is a hang: TIMEOUT) and its GPU (a
  // pool's; nullopt: the first visible one).
  double timeout_seconds = 1800;
  double launch_timeout_seconds = 10;
  std::optional<GpuInfo> gpu;
  // The catalogue folders the model's definitions came from (--operators-dir): the worker loads
  // the model file again with them.
  std::vector<std::filesystem::path> operators_dirs;
};

// How far one tensor is from the reference's: max |got - want| / max |want|, the cosine of the
// two flattened, and the bias sum(got * want) / sum(want * want) - 1 (a kernel off by +0.5% in
// one direction has bias 0.005; rounding that is as often up as down averages to about 0).
struct Deviation {
  double max_rel_error = 0.0;
  double cosine = 1.0;
  double bias = 0.0;
};

struct LayerDrift {
  int layer = 0;
  Deviation hidden;  // the layer's output hidden state against the reference pass's
};

// A node run by something other than its reference, against its reference on the same inputs.
struct NodeDeviation {
  int layer = 0;
  std::string node;
  std::string definition;
  Deviation worst;  // over its outputs: the largest |bias|, its max_rel_error and cosine
  // Empty when every output meets the operator's own tolerance and integrity rules beside the
  // reference's (what `check` applies); else the first broken rule, one line. Always empty for
  // operators compared by something other than elements (sampling, top-k sets).
  std::string own_failure;
};

// End-to-end timing of one layer (model-check --time): the layer's launches back to back, every
// node of one layer pass, with L2 flushed before each pass; the baseline layer (every node's
// seed, else its reference) and the substituted layer alternate pass by pass.
//
// One timed pass, as CUPTI measured it: the span of the whole layer (first kernel start to last
// kernel end) and each node's own span, by node name.
struct PassTiming {
  double span_seconds = 0.0;
  std::map<std::string, double> node_seconds;
};

struct NodeTiming {
  std::string node;
  std::string definition;
  bool substituted = false;       // run by something other than its baseline solution
  double baseline_seconds = 0.0;  // median over the baseline layer's passes
  double seconds = 0.0;           // median over the substituted layer's passes
  double speedup = 1.0;           // baseline_seconds / seconds: the kernel's own, in the layer
  double baseline_share = 0.0;    // of the baseline layer's span
  double share = 0.0;             // of the substituted layer's span
};

struct LayerTiming {
  int passes = 0;                 // timed passes of each layer
  double baseline_seconds = 0.0;  // median span of the baseline layer
  double seconds = 0.0;           // median span of the substituted layer
  double speedup = 1.0;           // baseline_seconds / seconds
  // The combined relative noise of the two medians (each SE(median) / median of its spans,
  // bench::relative_median_noise; +inf with fewer than 5 passes a side).
  double noise = 0.0;
  std::vector<NodeTiming> nodes;  // in execution order
  // The per-node medians summed, against the span: what the gaps between kernels (and the
  // medians' spread) leave out. The check holds when both are within 5% of their span.
  double baseline_node_sum = 0.0;
  double node_sum = 0.0;
  bool sums_match = false;
};

// The medians, shares, speedups and the 5% sum check of a layer's timed passes. `nodes` in
// execution order with their definitions; `substituted` names the nodes whose solution differs
// from the baseline's. Throws std::invalid_argument when either side has no passes or a pass
// lacks a node.
LayerTiming summarize_timing(const std::vector<std::pair<std::string, std::string>>& nodes,
                             const std::vector<std::string>& substituted,
                             const std::vector<PassTiming>& baseline,
                             const std::vector<PassTiming>& candidate);
// How far the node sum may stray from the span, as a fraction of the span.
constexpr double kNodeSumTolerance = 0.05;

struct ShapeResult {
  std::string label;  // "decode batch=16 kv=4096"
  bool passed = false;
  std::vector<LayerDrift> layers;
  std::vector<NodeDeviation> nodes;
  // When it failed: the first node that broke its own operator check inside the layer, else the
  // first layer whose hidden state breaks the tolerance and the node (of that layer or an earlier
  // one) whose own deviation is largest measured in tolerance units.
  int failing_layer = -1;
  std::string failing_node;
  std::string failing_definition;
  std::string reason;                 // one line
  std::optional<LayerTiming> timing;  // with --time, when the shape ran to the end
};

struct CheckResult {
  std::string model;
  std::string phase;
  int layers = 0;
  ModelTolerance tolerance;
  std::map<std::string, std::string> solutions;  // node -> solution file, or "reference"
  std::vector<ShapeResult> shapes;
  std::string error;  // a substituted solution that does not compile or faults; then !passed
  bool passed = false;
  // PASSED; INCORRECT_NUMERICAL (drift, or a node breaking its own check); COMPILE_ERROR or
  // REJECTED (a substituted solution that does not build); RUNTIME_ERROR (a launch that fails, a
  // worker that crashed); TIMEOUT (a hang, or no verdict within the worker's limit).
  Status status = Status::kPassed;
};

// Whether `got` meets the tolerance (each of max_rel_error, cosine and |bias|).
bool within(const Deviation& got, const ModelTolerance& tolerance);
// The deviation of `got` from `want` (equal sizes).
Deviation deviation(const std::vector<double>& got, const std::vector<double>& want);

// The phase `options` names, once its layers, --use names and solution files are checked.
// Throws Error (exit 2) for an unknown phase, OP or solution file, or a layer count out of range.
const Phase& check_options(const Model& model, const CheckOptions& options);

// Runs the check in a worker process. Throws Error: usage (exit 2) as check_options; environment
// (exit 3) without a GPU; internal (exit 4) for a reference that does not build or run. A
// misbehaving substituted solution is a verdict (passed false, its status), never an exception.
CheckResult check_model(const Model& model, const CheckOptions& options);

nlohmann::json to_json(const CheckResult& result);
nlohmann::json to_json(const ShapeResult& shape);
nlohmann::json to_json(const LayerTiming& timing);
// The inverses (what the worker's lines carry). Throw Error (exit 2) naming the field for a
// malformed verdict.
CheckResult check_result_from_json(const nlohmann::json& j);
ShapeResult shape_result_from_json(const nlohmann::json& j);

}  // namespace kharness::model

namespace kharness::worker {
class ProtocolStream;
}

namespace kharness::model {

// The worker's side of a model-check: `request` is what check_model sends to the evaluation
// worker (`kharness __worker`, task "model_check"). Lines out: `begin` (the verdict's head),
// `started` and `shape` per phase shape, then `model_check` (the whole verdict).
void serve_model_check(const nlohmann::json& request, worker::ProtocolStream& protocol);

}  // namespace kharness::model
