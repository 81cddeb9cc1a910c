// The prompt of one candidate, bounded by a token estimate (~4 characters a token). Parts, each
// with its own share of the bound: the task (definition, shapes, dtypes, tolerance, the solution
// format), the current best kernel and its per-workload numbers, the latest feedback, the profile
// diagnosis, knowledge from skills/ and a person's hints. A part under its share lends the rest
// to the parts over theirs; whatever still does not fit is cut with a visible note. With `run
// --model`, a short paragraph on the operator in the model (its share of the layer time, the
// model-check a promotion needs) goes in whole, ahead of the shares.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "controller/model_gate.hpp"
#include "kharness/operators.hpp"
#include "kharness/verdict.hpp"

namespace kharness::controller {

inline constexpr std::size_t kCharsPerToken = 4;
std::size_t estimate_tokens(const std::string& text);

// One `##` section of a skills/*.md file.
struct SkillSection {
  std::string file;     // "rmsnorm.md"
  std::string layer;    // "general", "architecture", "operator", "profiling"
  std::string heading;  // without the ##
  std::string text;     // the heading line and its body
};

// The sections of skills/ that apply to an operator on an architecture, in layer order (general
// CUDA, architecture, operator, profiling). A file applies by name: general.md / cuda.md (general),
// hopper.md for sm_90*, blackwell.md for sm_10x/sm_12x (architecture), the operator's name,
// op_type or family (operator), profiling.md (profiling). Other files are skipped.
std::vector<SkillSection> load_skills(const std::filesystem::path& dir, const Operator& op,
                                      const std::string& arch);
// The order the prompt offers them in: sections matching the diagnosis words first, then the
// layers in order; `direction` > 0 rotates the operator and architecture sections so a restart
// after a stall (optimisation dropout) leads with a different direction.
std::vector<SkillSection> order_skills(std::vector<SkillSection> sections,
                                       const std::string& diagnosis, int direction);

struct PromptParts {
  std::string task;                   // render_task
  std::string best;                   // render_best
  std::vector<std::string> feedback;  // newest first; each one candidate's render_feedback
  std::string diagnosis;              // from the profile stage; may be empty
  std::vector<SkillSection> skills;   // in preference order
  std::vector<std::string> hints;     // a person's directions (--hint)
  std::string model;                  // render_model; empty without --model
};

struct Prompt {
  std::string system;
  std::string user;
  std::size_t estimated_tokens = 0;  // of system + user
  std::vector<std::string> cuts;     // what was cut, one line each
};

// The fixed instructions: rules (device code only, what gets rejected) and the answer format.
std::string system_text();
// Definition, axes, tensors, tolerance, workload shapes and the solution format with an example.
std::string render_task(const Operator& op, const std::string& arch);
// The current best kernel: its source and, when timed, per-workload latency, speedup and % SOL.
std::string render_best(const std::string& id, const std::string& source, const Verdict* verdict);
// One candidate's outcome for the feedback part: status, the first compile errors, the failure
// evidence, timing; `note` adds the controller's own remark (not promoted, within noise, ...).
std::string render_feedback(const std::string& id, const std::string& status,
                            const std::string& reason, const Verdict* verdict,
                            const std::string& note);

// The operator in the run's model (`run --model`): its nodes, its share of the seeds' layer time
// (`baseline`: the model-check of the seeds' layer at the start of the run) and what that share
// bounds, the model-check a promotion needs, and under --objective layer the best kernel's layer
// speedup (`best_id`, `best_layer_speedup`).
std::string render_model(const ModelGate& gate, const ModelVerdict& baseline,
                         const std::string& best_id, std::optional<double> best_layer_speedup);

// Assembles the prompt within `max_tokens` (the whole prompt, system text included).
Prompt build_prompt(const PromptParts& parts, std::size_t max_tokens);

}  // namespace kharness::controller
