// The built-in offline provider (`tune`): no model, no network. It answers each request with the
// operator's parameterised seed instantiated for the next knob configuration of a Search
// (kharness/tune.hpp) and steers by the outcomes the controller reports back.
//
// It ignores the prose of a Request and reads Request::context on the first request (over the
// context given to the constructor, if any: the factory can pass ProviderOptions::context):
//   "operator"       (string, required) operator name, definition file or operator folder
//   "operators_dirs" (array of strings, optional) extra search folders (--operators-dir)
//   "seed_path"      (string, optional) the seed to tune instead of the operator's seed.cu
//   "tune_file"      (string, optional) the knob space instead of tune.json beside the seed
//   "budget"         (integer, optional) evaluations planned; sizes the exploration phase
//   "rng_seed"       (integer, optional) the search's random seed (default 0: deterministic)
//   "seed_score"     (number, optional) the seed's score when the controller evaluated it: the
//                    defaults (which are the seed) are then reported with it, not proposed
// Outcomes are matched to proposals in order (one observe per complete, as the controller
// does); an outcome with status PASSED steers by its score, any other status counts as a failed
// configuration. has_more() is false once every valid configuration has been proposed.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "kharness/tune.hpp"
#include "llm/provider.hpp"

namespace kharness::tune {

class TuneProvider : public llm::Provider {
 public:
  TuneProvider() = default;
  // `context`: defaults for the keys above; a request's context overrides them key by key.
  explicit TuneProvider(nlohmann::json context) : base_context_(std::move(context)) {}
  // With the problem already loaded (tests, the tune-space command); the context is then unused.
  TuneProvider(TuneProblem problem, SearchOptions options);

  std::string name() const override { return "tune"; }
  llm::Answer complete(const llm::Request& request) override;
  void observe(const llm::Outcome& outcome) override;
  bool has_more() const override;

  // After the first request: what is being tuned (nullptr before).
  const TuneProblem* problem() const { return problem_.get(); }
  const Search* search() const { return search_.get(); }

 private:
  void start(const nlohmann::json& context);

  std::unique_ptr<TuneProblem> problem_;
  std::unique_ptr<Search> search_;
  nlohmann::json base_context_ = nlohmann::json::object();
  SearchOptions options_;
  std::deque<std::size_t> pending_;  // proposals not yet observed, oldest first
};

}  // namespace kharness::tune
