#include "tune/tune_provider.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/operators.hpp"
#include "kharness/verdict.hpp"

namespace kharness::tune {
namespace {

const char* const kContextSource = "tune provider: request context";

std::string context_string(const nlohmann::json& context, const char* key) {
  auto it = context.find(key);
  if (it == context.end() || it->is_null()) return "";
  if (!it->is_string()) {
    throw input_error(fmt::format("{}: {}", kContextSource, key), "expected a string");
  }
  return it->get<std::string>();
}

}  // namespace

TuneProvider::TuneProvider(TuneProblem problem, SearchOptions options,
                           std::vector<ShapeBucket> buckets)
    : problem_(std::make_unique<TuneProblem>(std::move(problem))), options_(options) {
  search_ = std::make_unique<Search>(problem_->space, problem_->valid, options_);
  start_buckets(std::move(buckets));
}

void TuneProvider::start_buckets(std::vector<ShapeBucket> buckets) {
  if (buckets.size() < 2) return;
  buckets_ = std::move(buckets);
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    SearchOptions o = options_;
    o.seed = options_.seed + 1 + b;  // each bucket's exploration draws its own points
    bucket_searches_.push_back(std::make_unique<Search>(problem_->space, problem_->valid, o));
  }
}

std::optional<std::size_t> TuneProvider::next_config() {
  const std::size_t searches = 1 + bucket_searches_.size();
  for (std::size_t tries = 0; tries < searches; ++tries, ++turn_) {
    Search& s = turn_ % searches == 0 ? *search_ : *bucket_searches_[turn_ % searches - 1];
    if (auto index = s.next()) {
      ++turn_;
      if (&s != search_.get()) search_->mark_proposed(*index);
      for (auto& b : bucket_searches_) {
        if (b.get() != &s) b->mark_proposed(*index);
      }
      return index;
    }
  }
  return std::nullopt;
}

std::vector<std::optional<double>> TuneProvider::bucket_scores(const nlohmann::json& verdict) {
  std::map<std::string, double> latency;
  if (verdict.is_object()) {
    for (const auto& wj : verdict.value("workloads", nlohmann::json::array())) {
      try {
        WorkloadVerdict w = workload_verdict_from_json(wj);
        if (w.status != Status::kPassed || !w.timing.candidate) continue;
        double l = w.timing.candidate->latency > 0 ? w.timing.candidate->latency
                                                   : w.timing.candidate->stats.median;
        if (l > 0) latency[w.uuid] = l;
      } catch (const std::exception&) {
        // a workload record this reader does not understand: it scores nothing
      }
    }
  }
  std::vector<std::optional<double>> out;
  for (const auto& bucket : buckets_) {
    double sum = 0;
    std::size_t n = 0;
    for (const auto& uuid : bucket.representatives) {
      auto it = latency.find(uuid);
      if (it == latency.end()) continue;
      auto ref = reference_.emplace(uuid, it->second).first;  // the first seen, when no seed's
      sum += ref->second / it->second;
      ++n;
    }
    out.push_back(n == bucket.representatives.size() && n > 0
                      ? std::optional<double>(sum / static_cast<double>(n))
                      : std::nullopt);
  }
  return out;
}

std::optional<std::vector<std::size_t>> TuneProvider::composition_due() const {
  if (buckets_.size() < 2 || options_.budget <= 0) return std::nullopt;
  std::vector<std::size_t> best(buckets_.size());
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    double top = 0;
    for (const auto& [index, scores] : bucket_score_) {
      if (scores[b] > top) {
        top = scores[b];
        best[b] = index;
      }
    }
    if (top <= 0) return std::nullopt;  // a bucket without a passing configuration yet
  }
  if (std::all_of(best.begin(), best.end(), [&](std::size_t i) { return i == best[0]; }))
    return std::nullopt;  // one configuration is best everywhere: it was proposed already
  if (composed_.count(best)) return std::nullopt;
  const auto budget = static_cast<std::size_t>(options_.budget);
  const std::size_t interval = std::max<std::size_t>(4, budget / 5);
  // The last answer of the budget, or of the space: a new combination cannot wait.
  const bool last = answers_ + 1 >= budget || search_->exhausted();
  if (answers_ - last_composition_ < interval && !last) return std::nullopt;
  return best;
}

llm::Answer TuneProvider::composed_answer(const std::vector<std::size_t>& best) {
  composed_.insert(best);
  last_composition_ = answers_;
  // Neighbouring buckets served by one configuration are one variant, under the later bucket's
  // condition (the larger bound).
  std::vector<Config> configs;
  std::vector<std::string> conditions;
  nlohmann::json dispatch = nlohmann::json::array();
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const Config& config = search_->valid()[best[b]];
    if (!configs.empty() && configs.back() == config) {
      conditions.back() = buckets_[b].when;
      for (const auto& u : buckets_[b].workloads) dispatch.back()["workloads"].push_back(u);
      dispatch.back()["when"] = buckets_[b].when;
      continue;
    }
    configs.push_back(config);
    conditions.push_back(buckets_[b].when);
    dispatch.push_back({{"when", buckets_[b].when},
                        {"configuration", config_json(problem_->space, config)},
                        {"workloads", buckets_[b].workloads}});
  }
  for (auto& d : dispatch) {
    if (d["when"] == "") d["when"] = "otherwise";
  }
  std::string source = compose(problem_->seed_text, problem_->seed_path.string(), problem_->space,
                               configs, conditions);
  std::string lines;
  for (const auto& d : dispatch) {
    lines += fmt::format("  {} ({} workloads): {}\n", d["when"].get<std::string>(),
                         d["workloads"].size(), json_util::dump(d["configuration"]));
  }
  llm::Answer answer;
  answer.text = fmt::format(
      "tune: each shape bucket's best configuration, dispatched by the plan's variants:\n{}\n"
      "```cuda\n{}\n```\n",
      lines, source);
  answer.stop_reason = "completed";
  answer.raw = json_util::dump(nlohmann::json{{"dispatch", dispatch}});
  return answer;
}

void TuneProvider::start(const nlohmann::json& request_context) {
  if (!request_context.is_object()) throw input_error(kContextSource, "expected an object");
  nlohmann::json context = base_context_.is_object() ? base_context_ : nlohmann::json::object();
  for (const auto& [key, value] : request_context.items()) context[key] = value;
  std::string op_name = context_string(context, "operator");
  if (op_name.empty()) {
    throw input_error(fmt::format("{}: operator", kContextSource),
                      "missing: the tune provider needs the operator to tune");
  }
  std::vector<std::filesystem::path> dirs;
  if (auto it = context.find("operators_dirs"); it != context.end() && it->is_array()) {
    for (const auto& d : *it) {
      if (d.is_string()) dirs.emplace_back(d.get<std::string>());
    }
  }
  if (auto it = context.find("budget"); it != context.end() && it->is_number_integer()) {
    options_.budget = it->get<std::int64_t>();
  }
  if (auto it = context.find("rng_seed"); it != context.end() && it->is_number_integer()) {
    options_.seed = it->is_number_unsigned() ? it->get<std::uint64_t>()
                                             : static_cast<std::uint64_t>(it->get<std::int64_t>());
  }
  Operator op = OperatorRegistry::from_environment(dirs).load(op_name);
  // Without "seed_path", the seed the controller evaluated as its starting point ("seed": the
  // arch's own, seed.sm_90a.cu, where there is one): its defaults are that seed, as the
  // "seed_score" below assumes, and its knobs (tune.sm_90a.json) are the ones worth searching.
  std::string seed_path = context_string(context, "seed_path");
  if (seed_path.empty()) seed_path = context_string(context, "seed");
  problem_ = std::make_unique<TuneProblem>(
      load_tune_problem(op, seed_path, context_string(context, "tune_file")));
  search_ = std::make_unique<Search>(problem_->space, problem_->valid, options_);
  start_buckets(shape_buckets(op.definition, op.workloads));
  if (auto it = context.find("seed_latency"); it != context.end() && it->is_object()) {
    for (const auto& [uuid, latency] : it->items()) {
      if (latency.is_number() && latency.get<double>() > 0)
        reference_[uuid] = latency.get<double>();
    }
  }
  // The controller evaluates the seed itself (its c0000); the defaults are the seed (the loader
  // checked they launch exactly as its plan), so proposing them again would spend a candidate of
  // the budget on a known result. Their score is taken as reported instead.
  if (auto it = context.find("seed_score"); it != context.end() && it->is_number()) {
    if (auto first = search_->next()) {
      const double score = it->get<double>();
      search_->report(*first, score > 0 ? std::optional<double>(score) : std::nullopt);
      // Per bucket the seed scores 1 against its own latencies (the reference) when they are
      // known: a composition keeps the defaults where nothing beat them.
      std::vector<double> ones(buckets_.size(), 1.0);
      for (const auto& bucket : buckets_) {
        for (const auto& uuid : bucket.representatives) {
          if (!reference_.count(uuid)) ones.clear();
          if (ones.empty()) break;
        }
      }
      for (auto& b : bucket_searches_) {
        b->mark_proposed(*first);
        if (score > 0 && !ones.empty()) b->report(*first, 1.0);
      }
      if (score > 0 && !ones.empty() && !buckets_.empty()) bucket_score_[*first] = ones;
    }
  }
}

llm::Answer TuneProvider::complete(const llm::Request& request) {
  auto started = std::chrono::steady_clock::now();
  if (!search_) start(request.context);
  if (auto best = composition_due()) {
    pending_.push_back({std::nullopt});
    ++answers_;
    llm::Answer answer = composed_answer(*best);
    answer.latency_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return answer;
  }
  llm::Answer answer;
  auto index = next_config();
  if (!index) {
    answer.stop_reason = "exhausted";
    answer.text = fmt::format("tune: all {} valid configurations of {} have been proposed\n",
                              search_->valid().size(), problem_->space.source);
    return answer;
  }
  pending_.push_back({*index});
  ++answers_;
  const Config& config = search_->valid()[*index];
  std::string source =
      instantiate(problem_->seed_text, problem_->seed_path.string(), problem_->space, config);
  answer.text = fmt::format(
      "tune: configuration {} of {} valid ({} proposed): {}\n\n```cuda\n{}\n```\n", *index + 1,
      search_->valid().size(), search_->proposed(), config_text(problem_->space, config), source);
  answer.stop_reason = "completed";
  answer.raw = json_util::dump(config_json(problem_->space, config));
  answer.latency_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return answer;
}

void TuneProvider::observe(const llm::Outcome& outcome) {
  if (pending_.empty() || !search_) return;
  Pending p = pending_.front();
  pending_.pop_front();
  if (!p.config) return;  // a composition: judged by promotion, steers no search
  const std::size_t index = *p.config;
  const bool passed = outcome.status == "PASSED";
  search_->report(index, passed ? std::optional<double>(outcome.score) : std::nullopt);
  if (buckets_.empty()) return;
  std::vector<std::optional<double>> scores =
      passed ? bucket_scores(outcome.verdict) : std::vector<std::optional<double>>();
  scores.resize(buckets_.size());
  std::vector<double> known;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    bucket_searches_[b]->report(index, scores[b]);
    known.push_back(scores[b].value_or(0.0));
  }
  if (passed && std::all_of(scores.begin(), scores.end(), [](const auto& s) { return s; }))
    bucket_score_[index] = known;
}

bool TuneProvider::has_more() const {
  return !search_ || !search_->exhausted() || composition_due().has_value();
}

}  // namespace kharness::tune
