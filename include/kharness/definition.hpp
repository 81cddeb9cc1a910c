// Operator definitions (FlashInfer-Bench Definition schema + a "kharness" section) and
// workloads (FlashInfer-Bench Workload lines). docs/operators.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kharness/dtype.hpp"
#include "kharness/expr.hpp"

namespace kharness {

struct Axis {
  std::string name;
  bool is_const = false;
  std::int64_t value = 0;  // when is_const
  std::string description;
};

struct TensorSpec {
  std::string name;
  std::optional<std::vector<std::string>> shape;  // nullopt: a scalar input
  DType dtype = DType::kFloat32;
  std::string description;

  bool is_scalar() const { return !shape.has_value(); }
};

struct Tolerance {
  double atol = 1e-2;
  double rtol = 1e-2;
  double required_matched_ratio = 1.0;
};

// How kharness generates one input (kharness.inputs.<name>). Distributions:
// "normal" (mean, std), "uniform" (low, high), and integer roles ("range": low..high,
// plus operator-specific roles such as "indptr" / "indices" read by the correctness stage).
struct InputGenerator {
  std::string distribution = "normal";
  double mean = 0.0;
  double std = 1.0;
  double low = -1.0;
  double high = 1.0;
  nlohmann::json extra = nlohmann::json::object();  // role-specific parameters, kept verbatim
};

struct KharnessSpec {
  std::string family;  // reference family; defaults to op_type
  Tolerance tolerance;
  std::map<std::string, InputGenerator> inputs;
  std::optional<Expr> flops;  // floating-point operations of one call, over the axes
  std::optional<Expr> bytes;  // minimum DRAM bytes moved by one call, over the axes
  // What any correct kernel must do whatever the inputs' values, where flops/bytes count work
  // that depends on them (an expected routing, ids that may repeat, padding that may be skipped).
  // The faster-than-light bound rests on these (absent: on flops/bytes).
  // docs/timing.md#faster-than-light.
  std::optional<Expr> min_flops;
  std::optional<Expr> min_bytes;
  std::string baseline;  // folder of the baseline solution, relative to the operator folder
  std::map<std::string, double> constants;  // named constants of the semantics (e.g. eps)
  std::string comparator = "elementwise";  // how outputs are compared (verify/compare.hpp registry)
  // The point reference of timed iterations (docs/correctness.md#checked-iterations; "timed_check":
  // {"rows_of": AXIS, "rows": N}): where the full reference costs more than the candidate (GEMMs),
  // each timed iteration is verified on N rows of AXIS drawn after its launch. Every output, and
  // every input sliced with them, has AXIS as its first dimension, and the outputs' rows depend
  // only on those inputs' same rows. Empty: every timed iteration is checked against the full
  // reference.
  std::string timed_rows_of;
  int timed_rows = 0;
  bool present = false;  // false for a plain FlashInfer-Bench definition
};

struct Definition {
  std::string name;
  std::string op_type;
  std::string description;
  std::vector<std::string> tags;
  std::vector<Axis> axes;  // in file order
  std::vector<std::string> constraints;
  std::vector<TensorSpec> inputs;   // in file order
  std::vector<TensorSpec> outputs;  // in file order
  std::string reference_python;     // FlashInfer-Bench's PyTorch text, kept for export only
  KharnessSpec kharness;

  const Axis* find_axis(std::string_view name) const;
  const TensorSpec* find_input(std::string_view name) const;
  const TensorSpec* find_output(std::string_view name) const;
  const TensorSpec* find_tensor(std::string_view name) const;  // input or output
  std::string family() const { return kharness.family.empty() ? op_type : kharness.family; }
};

// Throws kharness::Error (exit 2) naming `source` and the offending field.
// ordered_json keeps the file order of axes, inputs and outputs (it is the call order).
Definition parse_definition(const nlohmann::ordered_json& json, const std::string& source);
Definition parse_definition_text(const std::string& text, const std::string& source);
Definition load_definition(const std::filesystem::path& file);
// A family's defaults (`_families/<family>/family.json`: {"kharness": {...}}) for what a definition
// leaves unset — tolerance when it has no kharness section, generators of inputs it does not
// describe, FLOP/byte formulas, comparator, constants — so a plain FlashInfer-Bench definition of a
// known family runs with valid index tensors and realistic ranges. Throws Error naming `source`.
void apply_family_defaults(Definition& definition, const nlohmann::ordered_json& family_json,
                           const std::string& source);

struct WorkloadInput {
  enum class Kind { kRandom, kScalar, kSafetensors };
  Kind kind = Kind::kRandom;
  nlohmann::json value;  // kScalar
  std::string path;      // kSafetensors
  std::string tensor_key;
};

struct Workload {
  std::string uuid;
  std::map<std::string, std::int64_t> axes;  // the var axes as given
  std::map<std::string, WorkloadInput> inputs;
  // Where the workload came from when it was not shipped (written as kharness.provenance), e.g.
  // "synthesized from _families/gemm/family.json workloads[2]". Empty for a shipped workload.
  std::string provenance;

  // Every axis of the definition bound to its value (const axes and this workload's var axes).
  Bindings bindings(const Definition& definition) const;
};

// One workload object (or a FlashInfer-Bench trace line holding one under "workload"),
// checked against the definition: every var axis given, const axes agree, inputs exist.
Workload parse_workload(const nlohmann::json& json, const Definition& definition,
                        const std::string& source);
// A .jsonl file; errors name the file and line.
std::vector<Workload> load_workloads(const std::filesystem::path& file,
                                     const Definition& definition);

// Workloads made for a definition that ships none, from its family's templates (family.json
// "workloads": [{"axes": {axis: int | expression over the axes bound so far}, "inputs": {scalar:
// number | "rsqrt(expression)"}}]). Axes a template gives but the definition lacks are bound for
// the expressions and left out of the workload; a template whose values break one of the
// definition's constraints that reads only axes ("len_indptr == batch_size + 1") is skipped.
// Every workload says in its provenance that it was synthesized. Throws Error naming `source`
// and the field when a template is malformed or leaves a var axis or scalar input unset.
std::vector<Workload> synthesize_workloads(const Definition& definition,
                                           const nlohmann::ordered_json& templates,
                                           const std::string& source);

// Back to the FlashInfer-Bench schema (with the "kharness" section when present).
nlohmann::ordered_json to_json(const Definition& definition);
nlohmann::json to_json(const Workload& workload);

// Shape of a tensor for a workload (empty for a scalar); throws Error if an axis is unbound.
std::vector<std::int64_t> tensor_shape(const TensorSpec& tensor, const Bindings& bindings);

}  // namespace kharness
