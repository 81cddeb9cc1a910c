// The built-in offline provider (`tune`): no model, no network. It answers each request with the
// operator's parameterised seed instantiated for the next knob configuration of a Search
// (kharness/tune.hpp) and steers by the outcomes the controller reports back.
//
// It ignores the prose of a Request and reads Request::context on the first request (over the
// context given to the constructor, if any: the factory can pass ProviderOptions::context):
//   "operator"       (string, required) operator name, definition file or operator folder
//   "operators_dirs" (array of strings, optional) extra search folders (--operators-dir)
//   "seed_path"      (string, optional) the seed to tune instead of the operator's seed.cu
//   "seed"           (string, optional) the controller's starting seed (the arch's own where
//                    there is one), tuned when "seed_path" is not given
//   "tune_file"      (string, optional) the knob space instead of tune.json beside the seed
//   "budget"         (integer, optional) evaluations planned; sizes the exploration phase
//   "rng_seed"       (integer, optional) the search's random seed (default 0: deterministic)
//   "seed_score"     (number, optional) the seed's score when the controller evaluated it: the
//                    defaults (which are the seed) are then reported with it, not proposed
//   "seed_latency"   (object, optional) uuid -> the seed's latency there, the reference that
//                    per-bucket scores are measured against (else the first latency seen)
// Outcomes are matched to proposals in order (one observe per complete, as the controller
// does); an outcome with status PASSED steers by its score, any other status counts as a failed
// configuration. has_more() is false once every valid configuration has been proposed.
//
// Dispatch by shape: when the operator's workloads fall into two or more shape buckets
// (tune::shape_buckets, the cascade's thirds), one Search per bucket runs beside the search
// over the whole score, each steered by its bucket's score (the mean over the bucket's cascade
// representatives of the reference latency over the configuration's latency), the proposals
// taken in turn and every result reported to every search. When the buckets' best
// configurations differ, the provider proposes a composed candidate (tune::compose): the best
// configuration of each bucket, chosen by the plan's variants. Compositions are the extra
// evaluations this costs, bounded: at most one per `interval` answers (a fifth of the budget,
// at least 4) and one more as the last answer of the budget or once every configuration has been
// proposed, so at most budget / interval + 1 (6 of a budget of 50); a combination is never
// proposed twice, and none without a budget.
// The composed answer's `raw` JSON names, for each variant, its condition, configuration and
// workloads ("dispatch"), which the run summary prints.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kharness/tune.hpp"
#include "llm/provider.hpp"

namespace kharness::tune {

class TuneProvider : public llm::Provider {
 public:
  TuneProvider() = default;
  // `context`: defaults for the keys above; a request's context overrides them key by key.
  explicit TuneProvider(nlohmann::json context) : base_context_(std::move(context)) {}
  // With the problem already loaded (tests, the tune-space command); the context is then unused.
  // `buckets` (tune::shape_buckets of the operator) turns on the per-bucket searches.
  TuneProvider(TuneProblem problem, SearchOptions options, std::vector<ShapeBucket> buckets = {});

  std::string name() const override { return "tune"; }
  llm::Answer complete(const llm::Request& request) override;
  void observe(const llm::Outcome& outcome) override;
  bool has_more() const override;

  // After the first request: what is being tuned (nullptr before).
  const TuneProblem* problem() const { return problem_.get(); }
  const Search* search() const { return search_.get(); }
  // The shape buckets served by the composed candidates (empty: no dispatch).
  const std::vector<ShapeBucket>& buckets() const { return buckets_; }

 private:
  // A proposal not yet observed: a configuration (index into the valid list) or a composition.
  struct Pending {
    std::optional<std::size_t> config;
  };

  void start(const nlohmann::json& context);
  void start_buckets(std::vector<ShapeBucket> buckets);
  // The next configuration to propose: the searches in turn, each skipping what is proposed.
  std::optional<std::size_t> next_config();
  // Each bucket's best configuration (index), when a composition of them is due now.
  std::optional<std::vector<std::size_t>> composition_due() const;
  llm::Answer composed_answer(const std::vector<std::size_t>& best);
  // Per-bucket scores of a verdict (nullopt where a bucket's representatives were not timed).
  std::vector<std::optional<double>> bucket_scores(const nlohmann::json& verdict);

  std::unique_ptr<TuneProblem> problem_;
  std::unique_ptr<Search> search_;
  nlohmann::json base_context_ = nlohmann::json::object();
  SearchOptions options_;
  std::deque<Pending> pending_;  // proposals not yet observed, oldest first

  std::vector<ShapeBucket> buckets_;                         // two or more, or none
  std::vector<std::unique_ptr<Search>> bucket_searches_;     // one per bucket
  std::map<std::string, double> reference_;                  // uuid -> reference latency
  std::map<std::size_t, std::vector<double>> bucket_score_;  // passed configuration -> scores
  std::set<std::vector<std::size_t>> composed_;              // combinations already proposed
  std::size_t answers_ = 0;                                  // answers given with code
  std::size_t turn_ = 0;              // whose proposal is next (0: the whole score)
  std::size_t last_composition_ = 0;  // answers_ at the last composition
};

}  // namespace kharness::tune
