// Models as data (models/NAME.json): one decoder layer composed from catalogue definitions, the
// shapes each phase runs it at, the weights (drawn from a seed) and the tolerance a whole model
// run is judged by. Loading checks the graph statically against the definitions, so a model file
// that cannot run is a one-line error before anything touches a GPU.
//
// A node is one operator instance: a definition name, its var axes bound to expressions over the
// phase's symbols, and one edge per definition input. An edge names where the tensor comes from:
//   "input.NAME"     a tensor that enters the layer (the hidden state, the residual),
//   "weight.NAME"    a weight of the model (its shape is the consumer's, from the definition),
//   "phase.NAME"     a tensor the phase provides (page table, positions),
//   "NODE.OUTPUT"    an output of an earlier node,
// or, as an object, a view of such a tensor the harness materialises between kernels:
//   {"from": REF, "columns": [BEGIN, END], "cast": DTYPE}  a column range of a 2-D tensor, cast,
//   {"sum": [REF, REF, ...], "cast": DTYPE}                 an elementwise sum in float32
//                                                          (terms of one shape; "cast" is
//                                                          required when their dtypes differ),
//   {"from": "weight.CACHE", "append": EDGE}               a paged KV cache with the phase's new
//                                                          tokens written into it (below),
// or a scalar literal {"float32": 0.088}. The catalogue has no cast, slice or residual-add
// operator, and an inference engine does these as views or inside fused kernels, so they are
// edges (plain copies with one rounding), not operators a solution could be substituted for.
//
// An append edge is how a layer's own keys and values reach its attention, as an inference engine
// writes them into its paged cache before attention reads it. The cache weight (shape [pages,
// page_size, ...], drawn from the seed: the history of each sequence) gets one row per new token
// of the phase, the rows of EDGE in token order (token i of sequence s, at position kv_len - q_len
// + i, goes to page kv_indices[kv_indptr[s] + position / page_size], slot position % page_size).
// In decode that is each sequence's last token; in prefill every token the attention reads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kharness/definition.hpp"
#include "kharness/dtype.hpp"
#include "kharness/expr.hpp"
#include "kharness/operators.hpp"

namespace kharness::model {

// Where an edge's tensor comes from.
struct TensorRef {
  enum class Kind { kInput, kWeight, kPhase, kNode };
  Kind kind = Kind::kInput;
  std::string name;          // the input, weight or phase tensor, or the producing node
  std::string output;        // kNode: the node's output
  std::string text() const;  // as written: "weight.w_qkv", "qkv.C"
};

struct Edge {
  std::vector<TensorRef> sources;  // one, or the terms of a sum
  bool sum = false;
  std::optional<std::pair<std::int64_t, std::int64_t>> columns;  // [begin, end) of the last dim
  std::optional<DType> cast;
  std::optional<double> scalar;  // a literal for a scalar input (then sources is empty)
  DType scalar_dtype = DType::kFloat32;
  // The rows written into the cache sources[0] names (a weight), one per new token; see above.
  std::shared_ptr<const Edge> append;
};

struct Node {
  std::string name;
  // Empty: the node runs in every phase. A node written per phase ({"decode": {...}, "prefill":
  // {...}}) is one Node a phase, with one name: attention is a different definition in each.
  std::string phase;
  std::string definition;
  // Every var axis of the definition, bound to an expression over the phase's symbols.
  std::map<std::string, Expr> axes;
  std::map<std::string, Edge> inputs;  // by the definition's input name
};

// A tensor entering the layer: its shape over the phase's symbols.
struct LayerInput {
  std::string name;
  std::vector<Expr> shape;
  DType dtype = DType::kBFloat16;
  InputGenerator generator;
};

// A weight: drawn from the model's seed; one per layer unless shared.
struct Weight {
  std::string name;
  InputGenerator generator;
  bool shared = false;  // one tensor for every layer (a rotary cache)
};

// One shape a phase runs at, with the symbols node axes are written in.
struct PhaseShape {
  std::string phase;                     // "decode" or "prefill"
  std::vector<std::int64_t> query_lens;  // per sequence: 1 each in decode
  std::vector<std::int64_t> kv_lens;     // per sequence, the new tokens included
  std::int64_t page_size = 1;
  // batch, tokens, kv_tokens, kv_pages, page_size, max_seq_len.
  Bindings symbols() const;
  std::string label() const;  // "decode batch=16 kv=4096", "prefill tokens=[100,2000]"
};

struct Phase {
  std::string name;
  std::vector<PhaseShape> shapes;
};

// What a model-level comparison of final hidden states must meet.
struct ModelTolerance {
  double max_rel_error = 0.05;  // max |got - want| / max |want| over the hidden state
  double min_cosine = 0.999;    // cosine similarity of the flattened hidden states
  // |sum(got * want) / sum(want * want) - 1|: a systematic scale error, which rounding that goes
  // both ways does not build up and a kernel biased in one direction does.
  double max_bias = 0.001;
};

struct Model {
  std::string name;
  std::string description;
  std::filesystem::path file;
  int layers = 1;
  std::uint64_t seed = 0;
  ModelTolerance tolerance;
  std::vector<LayerInput> inputs;  // inputs[0] is the hidden state a layer passes on
  std::vector<Weight> weights;
  std::vector<Node> nodes;  // in execution order
  // The layer's outputs, by the name of the input of the next layer each one becomes.
  std::map<std::string, Edge> outputs;
  std::vector<Phase> phases;
  std::map<std::string, Operator> operators;  // the definitions the nodes use, by name

  const Node* find_node(std::string_view name) const;
  const Phase* find_phase(std::string_view name) const;
  const Weight* find_weight(std::string_view name) const;
};

// The tensors a phase provides, with their dtype and shape over the phase's symbols:
// qo_indptr, kv_indptr [batch + 1] int32, kv_indices [kv_pages] int32, positions [tokens] int64.
struct PhaseTensor {
  std::string name;
  std::vector<std::string> shape;  // expressions over the symbols
  DType dtype;
};
const std::vector<PhaseTensor>& phase_tensors();

// The phase tensors' values at one shape, on the host. Sequence s holds kv_lens[s] tokens in
// pages drawn at random from the seed (a real cache is fragmented); its queries are its last
// query_lens[s] tokens, at positions kv_lens[s] - query_lens[s] .. kv_lens[s] - 1.
struct PhaseTables {
  std::vector<std::int32_t> qo_indptr;
  std::vector<std::int32_t> kv_indptr;
  std::vector<std::int32_t> kv_indices;
  std::vector<std::int64_t> positions;
  // For an append edge: the cache row (page * page_size + slot) of each new token, in token order.
  std::vector<std::int64_t> append_rows;
};
PhaseTables phase_tables(const PhaseShape& shape, std::uint64_t seed);

// A tensor's dtype and shape at one phase shape, as the static check sees it.
struct TensorType {
  DType dtype = DType::kFloat32;
  std::vector<std::int64_t> shape;
};

// The resolved type of every tensor of the layer at one phase shape, keyed by the text an edge
// uses ("input.hidden", "weight.w_qkv", "qkv.C"), and every node's bound axes.
struct LayerShapes {
  std::map<std::string, TensorType> tensors;
  std::map<std::string, Bindings> node_axes;
};
// Throws Error naming the model file and field when an edge does not fit at this shape.
LayerShapes resolve_shapes(const Model& model, const PhaseShape& shape);

// Parses and checks a model file: unknown fields, definitions and tensors; var axes bound never
// or const axes bound again; edges whose dtype or shape (at every phase shape the file lists)
// differs from what the consumer's definition declares. Throws Error (exit 2) naming the file
// and field.
Model load_model(const std::filesystem::path& file, const OperatorRegistry& registry);

// A model by name (models/NAME.json in the shipped data folder) or by the path of a file.
std::filesystem::path find_model(const std::string& name_or_path);
// Whether find_model reads `name_or_path` as a file path (it has a '/' or ends in .json) rather
// than a name from models/.
bool names_a_model_file(const std::string& name_or_path);

}  // namespace kharness::model
