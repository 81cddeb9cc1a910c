#include "tune/tune_provider.hpp"

#include <fmt/format.h>

#include <chrono>

#include "core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/operators.hpp"

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

TuneProvider::TuneProvider(TuneProblem problem, SearchOptions options)
    : problem_(std::make_unique<TuneProblem>(std::move(problem))), options_(options) {
  search_ = std::make_unique<Search>(problem_->space, problem_->valid, options_);
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
  problem_ = std::make_unique<TuneProblem>(load_tune_problem(
      op, context_string(context, "seed_path"), context_string(context, "tune_file")));
  search_ = std::make_unique<Search>(problem_->space, problem_->valid, options_);
  // The controller evaluates the seed itself (its c0000); the defaults are the seed (the loader
  // checked they launch exactly as its plan), so proposing them again would spend a candidate of
  // the budget on a known result. Their score is taken as reported instead.
  if (auto it = context.find("seed_score"); it != context.end() && it->is_number()) {
    if (auto first = search_->next()) {
      const double score = it->get<double>();
      search_->report(*first, score > 0 ? std::optional<double>(score) : std::nullopt);
    }
  }
}

llm::Answer TuneProvider::complete(const llm::Request& request) {
  auto started = std::chrono::steady_clock::now();
  if (!search_) start(request.context);
  llm::Answer answer;
  auto index = search_->next();
  if (!index) {
    answer.stop_reason = "exhausted";
    answer.text = fmt::format("tune: all {} valid configurations of {} have been proposed\n",
                              search_->valid().size(), problem_->space.source);
    return answer;
  }
  pending_.push_back(*index);
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
  std::size_t index = pending_.front();
  pending_.pop_front();
  if (outcome.status == "PASSED") {
    search_->report(index, outcome.score);
  } else {
    search_->report(index, std::nullopt);
  }
}

bool TuneProvider::has_more() const { return !search_ || !search_->exhausted(); }

}  // namespace kharness::tune
