// The knob spaces of parameterised seed kernels and the search over them (the offline `tune`
// provider, docs/controller.md#providers). No model, no network: a candidate is the operator's seed
// with one value per knob substituted, as `-DNAME=value` in the plan's compile_options (the seed
// reads each knob with `#ifndef NAME / #define NAME default / #endif`) and as literals in launch
// sizes that depend on knobs. The seed itself stays a plain, valid solution (its plan holds the
// default sizes); the sizes that depend on knobs are given in tune.json ("launches",
// "workspace_bytes") as expressions over knobs and axes, and replace the seed plan's fields in
// every candidate. For the defaults they must equal the seed's own plan on every workload
// (load_tune_problem checks).
//
// The knobs of a seed live in `tune.json` beside it (the seed's folder):
//   {
//     "description": "what the knobs trade off",
//     "knobs": {                       // in search order; file order is kept
//       "THREADS": {"values": [64, 128, 256, 512], "default": 256, "description": "..."},
//       "VEC":     {"range": [1, 8], "step": 1, "default": 8},       // lo..hi inclusive
//       "STAGES":  {"pow2": [2, 8], "default": 4}                    // 2, 4, 8
//     },
//     "constraints": ["hidden_size % (THREADS * VEC) == 0", "THREADS * VEC <= 4096"],
//     "launches": [{"block": ["THREADS", 1, 1]}],  // by index: grid, block, cluster, shared_bytes
//     "workspace_bytes": "0"                          // optional
//   }
// Knobs are integers; a choice between code paths is an integer knob the seed switches on
// (e.g. "SWIZZLE": {"values": [0, 1]}). Constraints are expressions (kharness/expr.hpp, with
// comparisons and && || !) over knobs and the definition's axes; a configuration is valid when
// every constraint is non-zero for every workload's axes (a constraint that divides by zero or
// overflows counts as false). Every valid configuration must compile and be correct.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kharness/definition.hpp"
#include "kharness/expr.hpp"
#include "kharness/operators.hpp"

namespace kharness::tune {

struct Knob {
  std::string name;  // a C identifier: the macro name and the name in plan expressions
  std::vector<std::int64_t> values;  // allowed values in order: adjacent values are neighbours
  std::size_t default_index = 0;     // into values
  std::string description;
};

struct Constraint {
  Expr expr;
  std::string where;  // "tune.json: constraints[2]"
};

struct TuneSpace {
  std::string description;
  std::vector<Knob> knobs;
  std::vector<Constraint> constraints;
  // Plan fields over knobs and axes: one object per launch of the seed (grid, block, cluster,
  // shared_bytes), and workspace_bytes (null when the seed's stands).
  nlohmann::json launches = nlohmann::json::array();
  nlohmann::json workspace_bytes;
  std::string source;  // the file it was read from
};

// One value index per knob, in knob order (index into Knob::values).
using Config = std::vector<std::size_t>;

// Throws kharness::Error (exit 2) naming `source` and the field.
TuneSpace parse_tune_space(const nlohmann::ordered_json& json, const std::string& source);
TuneSpace load_tune_space(const std::filesystem::path& file);
// Where a seed's knobs are: tune.json in the seed's folder (for a folder solution, in it).
std::filesystem::path tune_file_for(const std::filesystem::path& seed);

Config default_config(const TuneSpace& space);
// Knob name -> value.
Bindings knob_values(const TuneSpace& space, const Config& config);
// "THREADS=256 VEC=8".
std::string config_text(const TuneSpace& space, const Config& config);
nlohmann::json config_json(const TuneSpace& space, const Config& config);

// Whether every constraint holds for every set of axes (an empty list: the constraints must not
// name axes). `why`, when given, receives the first failing constraint. Throws Error (exit 2)
// when a constraint names something that is neither a knob nor an axis.
bool is_valid(const TuneSpace& space, const Config& config, const std::vector<Bindings>& axes,
              std::string* why = nullptr);
// Every valid configuration, in lexicographic order of value indices. Throws Error (exit 2) when
// the full product of the knobs' values exceeds `max_product` (a space too large to enumerate),
// or when checking the constraints would take more than a few seconds (estimated before the
// first configuration, with a wall-clock limit of a few seconds behind the estimate).
std::vector<Config> valid_configs(const TuneSpace& space, const std::vector<Bindings>& axes,
                                  std::size_t max_product = 1'000'000);
std::size_t product_size(const TuneSpace& space);

// The candidate source: the seed text with its `/* kharness */` plan rewritten for `config`
// (knob names in launch expressions replaced by their values, `-DNAME=value` appended to
// compile_options, the configuration in "description"); the rest of the text is unchanged.
// Throws Error (exit 2) when the seed has no plan comment.
std::string instantiate(const std::string& seed_text, const std::string& seed_name,
                        const TuneSpace& space, const Config& config);

// Shape buckets for a dispatching composition: the workloads split as the shape cascade splits
// them (thirds by the product of their var axes), each bucket bounded above by its largest size.
// `when` is the bucket's condition over the var axes ("M <= 64", "batch_size * seq_len <= 4096";
// empty for the last bucket, which takes every larger shape). Buckets with equal bounds are one;
// a bucket that none of the cascade's representatives falls in joins the next, so that every
// bucket is measured by each evaluation, the cascade's included. Empty when there is nothing to
// split (no workloads, or no var axis that every workload gives).
struct ShapeBucket {
  std::string when;
  std::vector<std::string> workloads;        // uuids, by size
  std::vector<std::string> representatives;  // the cascade's representatives in this bucket
};
std::vector<ShapeBucket> shape_buckets(const Definition& definition,
                                       const std::vector<Workload>& workloads);

// A dispatching candidate: the seed once per configuration, in one source. Copy v has its knob
// values #defined before it, lives in namespace kharness_variant_<v> (its helpers and constants
// do not collide), and its extern "C" kernels are renamed <kernel>_v<v>; the seed's #include
// lines are hoisted above the copies. The plan's variants launch copy v when conditions[v] holds
// (the last condition must be empty: it serves every other shape), with the sizes instantiate()
// writes for configs[v]; workspace_bytes is the largest of the copies'; the knobs are no longer
// -D options. Throws Error (exit 2) for a seed without a plan, (exit 4) for mismatched lists.
std::string compose(const std::string& seed_text, const std::string& seed_name,
                    const TuneSpace& space, const std::vector<Config>& configs,
                    const std::vector<std::string>& conditions);

// An operator's seed with its knob space and the axes of its workloads.
struct TuneProblem {
  std::string operator_name;
  std::filesystem::path seed_path;
  std::string seed_text;
  TuneSpace space;
  std::vector<Bindings> axes;  // one per workload (the definition's const axes when none)
  std::vector<Config> valid;   // valid_configs(space, axes)
};

// Reads the seed (`seed` overrides the operator's) and its tune.json (`tune_file` overrides
// tune_file_for(seed)); checks that knob names are identifiers distinct from the axes, that the
// seed mentions each knob, and that the defaults are valid. Throws Error (exit 2).
TuneProblem load_tune_problem(const Operator& op, const std::filesystem::path& seed = {},
                              const std::filesystem::path& tune_file = {});

struct SearchOptions {
  std::uint64_t seed = 0;   // the whole proposal sequence is a function of this and the scores
  std::int64_t budget = 0;  // evaluations planned (sizes the exploration phase); 0: unknown
};

// The search over the valid configurations of a space:
//  1. the seed's defaults;
//  2. exploration: a space-filling sample (farthest-point over random draws, distance counted in
//     value steps per knob to the 64 latest proposals), about a quarter of the budget, at most 12;
//  3. local search: from the best configuration so far, its unvisited neighbours (one knob one
//     valid step up or down, then pairs of knobs), repeating a move that just improved first;
//     when the best has none left, the next best; when no evaluated configuration has any,
//     exploration again.
// Never proposes a configuration twice; exhausted after every valid one was proposed.
class Search {
 public:
  Search(const TuneSpace& space, std::vector<Config> valid, SearchOptions options);
  // Index into the valid list of the next proposal; nullopt when exhausted.
  std::optional<std::size_t> next();
  // The result of an earlier proposal: a score to maximise, or nullopt for a failed candidate.
  // Proposals never reported take no part in steering.
  void report(std::size_t index, std::optional<double> score);
  // A configuration another search proposed (the tune provider runs one per shape bucket): never
  // proposed by this one; its result may be reported like this search's own.
  void mark_proposed(std::size_t index) {
    if (!was_proposed(index)) take(index);
  }
  bool exhausted() const { return order_.size() >= valid_.size(); }
  std::size_t proposed() const { return order_.size(); }
  const std::vector<Config>& valid() const { return valid_; }
  // The best reported configuration (index) and its score; nullopt when none passed.
  std::optional<std::pair<std::size_t, double>> best() const;

 private:
  std::optional<std::size_t> explore();
  std::optional<std::size_t> local_move();
  std::vector<std::size_t> neighbours(std::size_t center) const;
  std::optional<std::size_t> find(const Config& config) const;
  std::size_t take(std::size_t index);

  std::vector<std::size_t> arity_;  // values per knob
  std::vector<Config> valid_;
  bool sorted_ = false;                     // valid_ in lexicographic order: binary search
  std::map<Config, std::size_t> index_of_;  // otherwise: an index
  SearchOptions options_;
  std::size_t explore_count_ = 0;
  std::size_t default_index_ = 0;
  bool has_default_ = false;
  std::mt19937_64 rng_;
  // What was proposed, kept so that every step costs the same however many came before (listing
  // every configuration of a 19,456-configuration space took minutes when each proposal compared
  // itself with all earlier ones): a flag per configuration, the proposals in order, and the
  // unproposed ones in a list with each one's place in it, for a uniform draw and O(1) removal.
  std::vector<char> proposed_flag_;
  std::vector<std::size_t> order_;
  std::vector<std::size_t> unproposed_;
  std::vector<std::size_t> slot_;                       // index -> its place in unproposed_
  std::vector<std::pair<std::size_t, double>> scored_;  // passed configurations
  std::map<std::size_t, double> score_of_;              // the same, by index
  // Passed configurations that may still have unproposed neighbours, best score first (equal
  // scores in the order they were reported); one found with none left is dropped for good.
  std::multimap<double, std::size_t, std::greater<>> centres_;
  std::map<std::size_t, std::size_t> reached_from_;  // index -> the center it was a move of
  bool was_proposed(std::size_t index) const { return proposed_flag_[index] != 0; }
};

}  // namespace kharness::tune
