// model-check: a model's layers run twice on the same weights and inputs, first with every
// operator's reference (the truth), then with chosen solutions substituted (the rest: each
// operator's shipped seed, else its reference); the final hidden states are compared under the
// model's tolerance, with the drift after every layer, and every node not run by its reference
// is also compared with its reference on the same inputs inside the layer, so a failure names
// the operator (node) and layer that moved the hidden state.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kharness/compile.hpp"
#include "kharness/model.hpp"

namespace kharness::model {

struct CheckOptions {
  std::string phase = "decode";
  int layers = 0;  // 0: the model's layer count
  // --use OP=SOLUTION: OP is a definition (every node of it) or a node name.
  std::map<std::string, std::filesystem::path> use;
  // How every solution is compiled (references included); an empty arch: the device's.
  CompileOptions compile;
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
};

struct ShapeResult {
  std::string label;  // "decode batch=16 kv=4096"
  bool passed = false;
  std::vector<LayerDrift> layers;
  std::vector<NodeDeviation> nodes;
  // When it failed: the first layer whose hidden state breaks the tolerance, and the node (of
  // that layer or an earlier one) whose own deviation is largest measured in tolerance units.
  int failing_layer = -1;
  std::string failing_node;
  std::string failing_definition;
  std::string reason;  // one line
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
};

// Whether `got` meets the tolerance (each of max_rel_error, cosine and |bias|).
bool within(const Deviation& got, const ModelTolerance& tolerance);
// The deviation of `got` from `want` (equal sizes).
Deviation deviation(const std::vector<double>& got, const std::vector<double>& want);

// Throws Error: usage (exit 2) for an unknown phase, OP or solution file; environment (exit 3)
// without a GPU.
CheckResult check_model(const Model& model, const CheckOptions& options);

nlohmann::json to_json(const CheckResult& result);

}  // namespace kharness::model
