// Knob spaces, the search and the tune provider (CPU; the compile checks of every seed's space
// are in tune_compile_test.cpp).
#include "kharness/tune.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <numeric>
#include <random>
#include <set>

#include "kharness/operators.hpp"
#include "kharness/solution.hpp"
#include "kharness/text.hpp"
#include "kharness/verdict.hpp"
#include "test_util.hpp"
#include "tune/tune_provider.hpp"

namespace kharness {
namespace {

using nlohmann::ordered_json;
using testing::expect_input_error;
using tune::Config;
using tune::Search;
using tune::TuneSpace;

TuneSpace space_of(const std::string& text) {
  return tune::parse_tune_space(ordered_json::parse(text), "t/tune.json");
}

const char* const kSmallSpace = R"json({
  "knobs": {
    "THREADS": {"values": [64, 128, 256, 512], "default": 256},
    "VEC": {"pow2": [1, 8], "default": 8},
    "UNROLL": {"range": [1, 3], "default": 1}
  },
  "constraints": ["hidden_size % (THREADS * VEC) == 0", "THREADS * VEC <= 2048 || UNROLL == 1"],
  "launches": [{"block": ["THREADS", 1, 1], "grid": ["cdiv(batch_size, UNROLL)", 1, 1]}]
})json";

const char* const kSeed = R"(/* kharness
{
  "definition": "rmsnorm_h4096",
  "launches": [
    { "kernel": "k",
      "grid": ["batch_size", 1, 1],
      "block": [256, 1, 1],
      "args": ["hidden_states", "weight", "output", "batch_size"] }
  ],
  "compile_options": ["-std=c++17", "-DVEC=2"]
}
*/
// THREADS VEC UNROLL
extern "C" __global__ void k() {}
)";

TEST(TuneSpace, ParsesValuesRangesAndPowersOfTwo) {
  TuneSpace s = space_of(kSmallSpace);
  ASSERT_EQ(s.knobs.size(), 3u);
  EXPECT_EQ(s.knobs[0].name, "THREADS");  // file order is kept
  EXPECT_EQ(s.knobs[1].values, (std::vector<std::int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(s.knobs[2].values, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(tune::config_text(s, tune::default_config(s)), "THREADS=256 VEC=8 UNROLL=1");
  EXPECT_EQ(tune::product_size(s), 48u);
  EXPECT_EQ(s.constraints.size(), 2u);
}

TEST(TuneSpace, RefusesMalformedSpacesNamingTheField) {
  expect_input_error([] { space_of(R"({"knobs": {}})"); }, "t/tune.json: knobs", "non-empty");
  expect_input_error([] { space_of(R"({"knobs": {"A": {"values": [1], "default": 1}}, "x": 1})"); },
                     "t/tune.json: x", "unknown field");
  expect_input_error([] { space_of(R"({"knobs": {"A": {"values": [1, 2], "default": 3}}})"); },
                     "knobs.A.default", "not one of");
  expect_input_error([] { space_of(R"({"knobs": {"A": {"values": [1, 1], "default": 1}}})"); },
                     "knobs.A", "twice");
  expect_input_error([] { space_of(R"({"knobs": {"2A": {"values": [1], "default": 1}}})"); },
                     "knobs.2A", "identifier");
  expect_input_error([] { space_of(R"({"knobs": {"A": {"default": 1}}})"); }, "knobs.A",
                     "exactly one of");
  expect_input_error([] { space_of(R"({"knobs": {"A": {"pow2": [3, 8], "default": 3}}})"); },
                     "knobs.A.pow2[0]", "power of two");
  expect_input_error(
      [] {
        space_of(R"({"knobs": {"A": {"values": [1], "default": 1}}, "constraints": ["A <"]})");
      },
      "constraints[0]", "expected");
  expect_input_error(
      [] {
        space_of(R"({"knobs": {"A": {"values": [1], "default": 1}},
                     "launches": [{"grd": [1, 1, 1]}]})");
      },
      "launches[0].grd", "unknown field");
  // A launch size's syntax error names tune.json, not the seed it would be written into.
  expect_input_error(
      [] {
        space_of(R"({"knobs": {"A": {"values": [1], "default": 1}},
                     "launches": [{"block": ["A +", 1, 1]}]})");
      },
      "t/tune.json: launches[0].block[0]", "expected");
  expect_input_error(
      [] {
        space_of(R"({"knobs": {"A": {"values": [1], "default": 1}}, "workspace_bytes": "cdiv(A"})");
      },
      "t/tune.json: workspace_bytes", "expected");
}

// Ranges that end at (or span) the int64 limits: the enumeration overflowed and ran until
// memory was gone (std::bad_alloc, exit 4).
TEST(TuneSpace, RangesNearTheInt64LimitsEndOrAreRefused) {
  TuneSpace pow2 =
      space_of(R"({"knobs": {"A": {"pow2": [1, 9223372036854775807], "default": 1}}})");
  EXPECT_EQ(pow2.knobs[0].values.size(), 63u);
  EXPECT_EQ(pow2.knobs[0].values.back(), std::int64_t{1} << 62);
  TuneSpace top = space_of(
      R"({"knobs": {"A": {"range": [9223372036854775800, 9223372036854775807], "step": 3,
                          "default": 9223372036854775800}}})");
  EXPECT_EQ(
      top.knobs[0].values,
      (std::vector<std::int64_t>{9223372036854775800, 9223372036854775803, 9223372036854775806}));
  expect_input_error(
      [] {
        space_of(R"({"knobs": {"A": {"range": [-9223372036854775808, 9223372036854775807],
                                     "default": 0}}})");
      },
      "knobs.A.range", "more than 4096 values");
}

TEST(TuneSpace, ValidityHoldsForEveryWorkload) {
  TuneSpace s = space_of(kSmallSpace);
  std::vector<Bindings> axes = {{{"hidden_size", 4096}, {"batch_size", 1}},
                                {{"hidden_size", 4096}, {"batch_size", 64}}};
  std::string why;
  // THREADS=512 VEC=8 is 4096: divides, but > 2048 with UNROLL 2 breaks the second constraint.
  EXPECT_TRUE(tune::is_valid(s, {3, 3, 0}, axes));
  EXPECT_FALSE(tune::is_valid(s, {3, 3, 1}, axes, &why));
  EXPECT_EQ(why, "THREADS * VEC <= 2048 || UNROLL == 1");
  // A constraint on an axis that only one workload breaks rules the configuration out.
  TuneSpace t = space_of(R"({"knobs": {"T": {"values": [1, 7], "default": 1}},
                             "constraints": ["batch_size % T == 0"]})");
  EXPECT_TRUE(tune::is_valid(t, {1}, {{{"batch_size", 7}}}));
  EXPECT_FALSE(tune::is_valid(t, {1}, {{{"batch_size", 7}}, {{"batch_size", 8}}}));
  // 4 x 4 x 3 = 48 configurations; hidden_size % (THREADS * VEC) always holds (powers of two up
  // to 4096); THREADS * VEC > 2048 (512x8) rules out UNROLL 2 and 3: 48 - 2 = 46.
  EXPECT_EQ(tune::valid_configs(s, axes).size(), 46u);
  // Division by zero makes a configuration invalid; an unknown name is an error in the file.
  TuneSpace z = space_of(R"({"knobs": {"T": {"values": [0, 2], "default": 2}},
                             "constraints": ["8 % T == 0"]})");
  EXPECT_EQ(tune::valid_configs(z, {}).size(), 1u);
  TuneSpace u = space_of(R"({"knobs": {"T": {"values": [1], "default": 1}},
                             "constraints": ["T < hiden_size"]})");
  expect_input_error(
      [&] {
        tune::valid_configs(u, {{{"hidden_size", 1}}});
      },
      "t/tune.json: constraints[0]", "hiden_size");
  EXPECT_THROW(tune::valid_configs(s, axes, 10), Error);  // too many to enumerate
}

TEST(TuneSpace, InstantiateRewritesOnlyThePlan) {
  TuneSpace s = space_of(kSmallSpace);
  std::string text = tune::instantiate(kSeed, "seed.cu", s, {1, 2, 2});  // 128, 4, 3
  Solution sol = parse_single_file_solution(text, "cand.cu");
  ASSERT_EQ(sol.plan.launches.size(), 1u);
  EXPECT_EQ(sol.plan.launches[0].block[0].text(), "128");
  EXPECT_EQ(sol.plan.launches[0].grid[0].text(), "cdiv(batch_size, 3)");
  EXPECT_EQ(sol.plan.launches[0].grid[0].eval({{"batch_size", 7}}), 3);
  // The seed's own -DVEC=2 gives way to the knob's value; other options stay.
  EXPECT_EQ(sol.plan.compile_options,
            (std::vector<std::string>{"-std=c++17", "-DTHREADS=128", "-DVEC=4", "-DUNROLL=3"}));
  EXPECT_NE(sol.description.find("THREADS=128 VEC=4 UNROLL=3"), std::string::npos);
  EXPECT_EQ(sol.plan.definition, "rmsnorm_h4096");
  std::string seed_body = std::string(kSeed).substr(std::string(kSeed).find("*/"));
  EXPECT_EQ(text.substr(text.find("*/")), seed_body);
}

Operator load_operator(const std::string& name) {
  return OperatorRegistry({{testing::source_dir() / "operators", "builtin"}}).load(name);
}

TEST(TuneProblem, ShippedSeedsHaveSpacesWhoseDefaultsAreTheSeed) {
  struct Expected {
    const char* op;
    std::size_t knobs;
    std::size_t valid;
  };
  for (const Expected& e : {Expected{"rmsnorm_h4096", 2, 19}, Expected{"gemm_n4096_k14336", 7, 0},
                            Expected{"gqa_paged_decode_h32_kv8_d128_ps1", 3, 18}}) {
    SCOPED_TRACE(e.op);
    tune::TuneProblem p = tune::load_tune_problem(load_operator(e.op));
    EXPECT_EQ(p.space.knobs.size(), e.knobs);
    if (e.valid) {
      EXPECT_EQ(p.valid.size(), e.valid);
    }
    EXPECT_GE(p.valid.size(), 18u);
    EXPECT_TRUE(std::find(p.valid.begin(), p.valid.end(), tune::default_config(p.space)) !=
                p.valid.end());
  }
  // The gemm family's seed and space serve every gemm_n*_k* definition.
  tune::TuneProblem a = tune::load_tune_problem(load_operator("gemm_n4096_k14336"));
  tune::TuneProblem b = tune::load_tune_problem(load_operator("gemm_n6144_k4096"));
  EXPECT_EQ(a.seed_path, b.seed_path);
  EXPECT_EQ(a.valid.size(), b.valid.size());
}

TEST(TuneProblem, RefusesDefaultsThatDoNotLaunchLikeTheSeed) {
  testing::TempDir dir;
  Operator op = load_operator("rmsnorm_h4096");
  std::string seed_text = read_file(op.seed->string());
  write_file_atomic((dir.path() / "seed.cu").string(), seed_text);
  write_file_atomic((dir.path() / "tune.json").string(), R"({
    "knobs": {"THREADS": {"values": [128, 256], "default": 256}},
    "launches": [{"block": ["THREADS * 2", 1, 1]}]})");
  expect_input_error([&] { tune::load_tune_problem(op, dir.path() / "seed.cu"); },
                     "launches[0].block[0]", "512 for the defaults");
  write_file_atomic((dir.path() / "tune.json").string(), R"({
    "knobs": {"NOT_IN_SEED": {"values": [1, 2], "default": 1}}})");
  expect_input_error([&] { tune::load_tune_problem(op, dir.path() / "seed.cu"); },
                     "knobs.NOT_IN_SEED", "never uses");
  write_file_atomic((dir.path() / "tune.json").string(), R"({
    "knobs": {"THREADS": {"values": [128, 256], "default": 256}},
    "constraints": ["THREADS < 200"]})");
  expect_input_error([&] { tune::load_tune_problem(op, dir.path() / "seed.cu"); }, "knobs",
                     "defaults (THREADS=256) break");
  write_file_atomic((dir.path() / "tune.json").string(), R"({
    "knobs": {"hidden_size": {"values": [1], "default": 1}}})");
  expect_input_error([&] { tune::load_tune_problem(op, dir.path() / "seed.cu"); },
                     "knobs.hidden_size", "axis");
}

// --- The search --------------------------------------------------------------------------------

// A synthetic space: `arity` values per knob, every configuration valid except those the
// `banned` predicate rules out.
struct Synthetic {
  TuneSpace space;
  std::vector<Config> valid;
};

Synthetic synthetic_space(const std::vector<std::size_t>& arity, const Config& defaults,
                          bool (*banned)(const Config&)) {
  Synthetic s;
  for (std::size_t k = 0; k < arity.size(); ++k) {
    tune::Knob knob;
    knob.name = "K" + std::to_string(k);
    for (std::size_t v = 0; v < arity[k]; ++v) knob.values.push_back(static_cast<int>(v));
    knob.default_index = defaults[k];
    s.space.knobs.push_back(knob);
  }
  Config c(arity.size(), 0);
  for (;;) {
    if (!banned(c)) s.valid.push_back(c);
    std::size_t k = arity.size();
    while (k-- > 0) {
      if (++c[k] < arity[k]) break;
      c[k] = 0;
    }
    if (k == static_cast<std::size_t>(-1)) break;
  }
  return s;
}

bool no_ban(const Config&) { return false; }
bool resource_ban(const Config& c) { return c[0] + c[1] > 5; }  // like a register budget

TEST(TuneSearch, DefaultsFirstNeverTwiceThenExhausted) {
  Synthetic s = synthetic_space({3, 2, 2}, {1, 1, 0}, no_ban);
  Search search(s.space, s.valid, {7, 0});
  std::set<std::size_t> seen;
  auto first = search.next();
  ASSERT_TRUE(first);
  EXPECT_EQ(s.valid[*first], (Config{1, 1, 0}));
  seen.insert(*first);
  search.report(*first, 1.0);
  while (auto i = search.next()) {
    EXPECT_TRUE(seen.insert(*i).second) << "proposed twice: " << *i;
    search.report(*i, (*i % 3 == 0) ? std::optional<double>() : std::optional<double>(*i * 0.1));
  }
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_TRUE(search.exhausted());
  EXPECT_FALSE(search.next());
}

std::vector<std::size_t> sequence(const Synthetic& s, std::uint64_t seed,
                                  const std::function<std::optional<double>(const Config&)>& f,
                                  std::size_t n) {
  Search search(s.space, s.valid, {seed, static_cast<std::int64_t>(n)});
  std::vector<std::size_t> out;
  while (out.size() < n) {
    auto i = search.next();
    if (!i) break;
    out.push_back(*i);
    search.report(*i, f(s.valid[*i]));
  }
  return out;
}

TEST(TuneSearch, IsDeterministicGivenItsSeed) {
  Synthetic s = synthetic_space({5, 4, 6, 3}, {2, 2, 2, 1}, resource_ban);
  auto f = [](const Config& c) -> std::optional<double> {
    return 10.0 - std::abs(static_cast<double>(c[0]) - 4) - std::abs(static_cast<double>(c[2]) - 1);
  };
  EXPECT_EQ(sequence(s, 3, f, 60), sequence(s, 3, f, 60));
  EXPECT_NE(sequence(s, 3, f, 60), sequence(s, 4, f, 60));
}

// Evaluations until the optimum is proposed, for the search and for random sampling without
// replacement, over many random objectives on a 5-knob space with a resource constraint and
// failing configurations: the objective is a weighted distance to a random optimum with a
// coupling term, plus a deterministic rough perturbation that makes local optima.
TEST(TuneSearch, FindsTheOptimumInFewerEvaluationsThanRandomSampling) {
  Synthetic s = synthetic_space({5, 4, 6, 4, 5}, {2, 2, 3, 1, 2}, resource_ban);
  ASSERT_GT(s.valid.size(), 1500u);
  std::mt19937_64 rng(2026);
  const int kInstances = 24;
  double tune_total = 0.0, random_total = 0.0;
  int tune_within_100 = 0, random_within_100 = 0;
  for (int inst = 0; inst < kInstances; ++inst) {
    Config optimum =
        s.valid[std::uniform_int_distribution<std::size_t>(0, s.valid.size() - 1)(rng)];
    std::vector<double> w(5);
    for (auto& x : w) x = std::uniform_real_distribution<double>(0.5, 3.0)(rng);
    std::uint64_t salt = rng();
    auto rough = [salt](const Config& c) {
      std::uint64_t h = salt;
      for (auto v : c) h = (h ^ v) * 0x100000001b3ULL;
      return static_cast<double>(h % 1000) / 1000.0;
    };
    auto f = [&](const Config& c) -> std::optional<double> {
      if (c == optimum) return 100.0;
      if (rough(c) < 0.08) return std::nullopt;  // 8%: does not compile or fails a workload
      double d = 0.0;
      for (std::size_t k = 0; k < 5; ++k) {
        double x = static_cast<double>(c[k]) - static_cast<double>(optimum[k]);
        d += w[k] * x * x;
      }
      d += 0.5 * (static_cast<double>(c[0]) - static_cast<double>(optimum[0])) *
           (static_cast<double>(c[3]) - static_cast<double>(optimum[3]));
      return 90.0 - d - 2.0 * rough(c);
    };
    Search search(s.space, s.valid, {static_cast<std::uint64_t>(inst), 100});
    std::size_t tune_evals = 0;
    for (;;) {
      auto i = search.next();
      ASSERT_TRUE(i) << "the search never proposed the optimum";
      ++tune_evals;
      if (s.valid[*i] == optimum) break;
      search.report(*i, f(s.valid[*i]));
    }
    std::vector<std::size_t> order(s.valid.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    auto hit = std::find_if(order.begin(), order.end(),
                            [&](std::size_t i) { return s.valid[i] == optimum; });
    std::size_t random_evals = static_cast<std::size_t>(hit - order.begin()) + 1;
    tune_total += static_cast<double>(tune_evals);
    random_total += static_cast<double>(random_evals);
    tune_within_100 += tune_evals <= 100;
    random_within_100 += random_evals <= 100;
  }
  double tune_mean = tune_total / kInstances, random_mean = random_total / kInstances;
  std::cout << "mean evaluations to the optimum: tune " << tune_mean << ", random " << random_mean
            << "; found within 100: tune " << tune_within_100 << "/" << kInstances << ", random "
            << random_within_100 << "/" << kInstances << "\n";
  EXPECT_LT(tune_mean, 0.2 * random_mean);
  EXPECT_GE(tune_within_100, kInstances * 2 / 3);
  EXPECT_LE(random_within_100, kInstances / 3);
}

// Listing a whole space (tune-space --all) costs the same per configuration however many came
// before: 19,456 configurations, each once, in seconds. Comparing every proposal with all earlier
// ones took minutes here.
TEST(TuneSearch, ListingAWholeSpaceStaysLinear) {
  Synthetic s = synthetic_space({5, 4, 16, 8, 8}, {2, 1, 0, 0, 0}, resource_ban);
  ASSERT_GT(s.valid.size(), 15000u);
  const auto start = std::chrono::steady_clock::now();
  Search search(s.space, s.valid, {1, static_cast<std::int64_t>(s.valid.size())});
  std::vector<char> seen(s.valid.size(), 0);
  std::size_t listed = 0;
  while (auto i = search.next()) {
    ASSERT_FALSE(seen[*i]) << "proposed twice: " << *i;
    seen[*i] = 1;
    ++listed;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(listed, s.valid.size());
  EXPECT_LT(seconds, 30.0) << listed << " configurations";
}

// --- The provider ------------------------------------------------------------------------------

std::string code_block(const std::string& text) {
  auto start = text.find("```cuda\n");
  auto end = text.rfind("```");
  if (start == std::string::npos || end <= start) return "";
  return text.substr(start + 8, end - start - 8);
}

TEST(TuneProvider, AnswersFromTheContextAndSteersByOutcomes) {
  tune::TuneProvider provider;
  EXPECT_EQ(provider.name(), "tune");
  EXPECT_TRUE(provider.has_more());
  llm::Request request;
  request.context = {{"operator", "rmsnorm_h4096"},
                     {"operators_dirs", {(testing::source_dir() / "operators").string()}},
                     {"budget", 8}};
  std::set<std::string> seen;
  std::size_t n = 0;
  while (provider.has_more()) {
    llm::Answer answer = provider.complete(request);
    EXPECT_EQ(answer.stop_reason, "completed");
    std::string code = code_block(answer.text);
    ASSERT_FALSE(code.empty()) << answer.text;
    Solution sol = parse_single_file_solution(code, "answer.cu");
    EXPECT_EQ(sol.plan.definition, "rmsnorm_h4096");
    EXPECT_TRUE(seen.insert(sol.description).second) << "proposed twice: " << sol.description;
    if (n == 0) {
      EXPECT_NE(sol.description.find("THREADS=256 VEC=8"), std::string::npos);
      EXPECT_EQ(sol.plan.launches[0].block[0].text(), "256");
    }
    llm::Outcome outcome;
    outcome.status = n % 4 == 3 ? "INCORRECT_NUMERICAL" : "PASSED";
    outcome.score = 1.0 + 0.01 * static_cast<double>(n);
    provider.observe(outcome);
    ++n;
  }
  EXPECT_EQ(n, 19u);  // every valid configuration once, then has_more() is false
  ASSERT_NE(provider.search(), nullptr);
  EXPECT_TRUE(provider.search()->best());
  llm::Answer done = provider.complete(request);
  EXPECT_EQ(done.stop_reason, "exhausted");
  EXPECT_TRUE(code_block(done.text).empty());
}

TEST(TuneProvider, ConstructorContextIsOverriddenByTheRequests) {
  nlohmann::json base = {{"operator", "no_such_operator"},
                         {"operators_dirs", {(testing::source_dir() / "operators").string()}},
                         {"rng_seed", -5}};
  tune::TuneProvider a(base), b(base);
  llm::Request request;
  request.context = {{"operator", "gqa_paged_decode_h32_kv8_d128_ps1"}, {"budget", 10}};
  std::vector<std::string> sa, sb;
  for (int i = 0; i < 5; ++i) {
    sa.push_back(a.complete(request).raw);
    sb.push_back(b.complete(request).raw);
    a.observe({"", "PASSED", 1.0 + i, nullptr, nullptr});
    b.observe({"", "PASSED", 1.0 + i, nullptr, nullptr});
  }
  ASSERT_NE(a.problem(), nullptr);
  EXPECT_EQ(a.problem()->operator_name, "gqa_paged_decode_h32_kv8_d128_ps1");
  EXPECT_EQ(sa, sb);  // deterministic
  EXPECT_EQ(sa[0], R"({"THREADS":128,"UNROLL":1,"VEC":8})");
}

// When the controller has evaluated the seed (c0000), the defaults are not proposed again: their
// score is the seed's, and the first answer is another configuration.
TEST(TuneProvider, AnEvaluatedSeedIsNotProposedAgain) {
  tune::TuneProvider provider;
  llm::Request request;
  request.context = {{"operator", "rmsnorm_h4096"},
                     {"operators_dirs", {(testing::source_dir() / "operators").string()}},
                     {"budget", 8},
                     {"seed_score", 3.25}};
  std::set<std::string> seen;
  while (provider.has_more()) {
    llm::Answer answer = provider.complete(request);
    Solution sol = parse_single_file_solution(code_block(answer.text), "answer.cu");
    EXPECT_EQ(sol.description.find("THREADS=256 VEC=8"), std::string::npos)
        << "the defaults (the seed) were proposed again";
    seen.insert(sol.description);
    provider.observe({"", "PASSED", 1.0, nullptr, nullptr});
  }
  EXPECT_EQ(seen.size(), 18u);  // the 19 valid configurations but the defaults
  ASSERT_TRUE(provider.search()->best());
  EXPECT_DOUBLE_EQ(provider.search()->best()->second, 3.25);  // the seed stays the best
}

// ---- dispatch by shape: buckets, composition, the provider's composed candidates ----

Operator builtin_operator(const std::string& name) {
  return OperatorRegistry({{testing::source_dir() / "operators", "builtin"}}).load(name);
}

// The workload of `op` whose batch_size is `b`.
const Workload& batch(const Operator& op, std::int64_t b) {
  for (const auto& w : op.workloads)
    if (w.axes.at("batch_size") == b) return w;
  throw std::runtime_error("no workload with batch_size " + std::to_string(b));
}

// The valid configuration with these knob values.
Config config_of(const tune::TuneProblem& p, const Bindings& values) {
  for (const Config& c : p.valid) {
    if (tune::knob_values(p.space, c) == values) return c;
  }
  throw std::runtime_error("not a valid configuration");
}

// The 16 rmsnorm workloads (batch 1 .. 16384) split as the cascade splits them: thirds by size,
// each bounded by its largest batch, each holding the cascade's representative of its third.
TEST(ShapeBuckets, FollowTheCascadesThirds) {
  Operator op = builtin_operator("rmsnorm_h4096");
  ASSERT_EQ(op.workloads.size(), 16u);
  std::vector<tune::ShapeBucket> buckets = tune::shape_buckets(op.definition, op.workloads);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].when, "batch_size <= 8");
  EXPECT_EQ(buckets[1].when, "batch_size <= 256");
  EXPECT_EQ(buckets[2].when, "");
  EXPECT_EQ(buckets[0].representatives, std::vector<std::string>{batch(op, 4).uuid});
  EXPECT_EQ(buckets[1].representatives, std::vector<std::string>{batch(op, 64).uuid});
  EXPECT_EQ(buckets[2].representatives, std::vector<std::string>{batch(op, 4096).uuid});
  // Every workload is in the first bucket whose condition holds for it, and in no other.
  std::set<std::string> all;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    for (const auto& uuid : buckets[b].workloads) {
      EXPECT_TRUE(all.insert(uuid).second) << uuid << " is in two buckets";
      const Workload& w = *std::find_if(op.workloads.begin(), op.workloads.end(),
                                        [&](const Workload& x) { return x.uuid == uuid; });
      for (std::size_t earlier = 0; earlier < b; ++earlier)
        EXPECT_EQ(Expr::parse(buckets[earlier].when).eval(w.bindings(op.definition)), 0) << uuid;
      if (!buckets[b].when.empty())
        EXPECT_EQ(Expr::parse(buckets[b].when).eval(w.bindings(op.definition)), 1) << uuid;
    }
  }
  EXPECT_EQ(all.size(), 16u);
}

TEST(ShapeBuckets, EqualSizesAreOneBucketAndFewWorkloadsOneEach) {
  Operator op = builtin_operator("rmsnorm_h4096");
  std::vector<Workload> same(6, batch(op, 8));
  for (std::size_t i = 0; i < same.size(); ++i) same[i].uuid = "w" + std::to_string(i);
  std::vector<tune::ShapeBucket> one = tune::shape_buckets(op.definition, same);
  ASSERT_EQ(one.size(), 1u);  // nothing to dispatch on
  EXPECT_EQ(one[0].when, "");
  EXPECT_EQ(one[0].workloads.size(), 6u);

  std::vector<Workload> two = {batch(op, 64), batch(op, 1)};
  std::vector<tune::ShapeBucket> split = tune::shape_buckets(op.definition, two);
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(split[0].when, "batch_size <= 1");
  EXPECT_EQ(split[0].workloads, std::vector<std::string>{batch(op, 1).uuid});
  EXPECT_EQ(split[1].workloads, std::vector<std::string>{batch(op, 64).uuid});
  EXPECT_TRUE(tune::shape_buckets(op.definition, {}).empty());

  // Ties across a third's border: batches 8, 8, 8, 8, 9, 300 make the bounds 8 and 8 (one
  // bucket), and the largest third keeps its representative.
  std::vector<Workload> ties(6, batch(op, 8));
  ties[4].axes["batch_size"] = 9;
  ties[5].axes["batch_size"] = 300;
  for (std::size_t i = 0; i < ties.size(); ++i) ties[i].uuid = "t" + std::to_string(i);
  std::vector<tune::ShapeBucket> tied = tune::shape_buckets(op.definition, ties);
  ASSERT_EQ(tied.size(), 2u);
  EXPECT_EQ(tied[0].when, "batch_size <= 8");
  EXPECT_EQ(tied[0].workloads.size(), 4u);
  EXPECT_FALSE(tied[1].representatives.empty());
}

// Two configurations of the rmsnorm seed in one source: each copy has its own knob values and
// kernel name, and the plan's variants choose between them by batch size.
TEST(Compose, OneSourceWithAVariantPerConfiguration) {
  Operator op = builtin_operator("rmsnorm_h4096");
  tune::TuneProblem p = tune::load_tune_problem(op);
  Config small = config_of(p, {{"THREADS", 128}, {"VEC", 4}});
  Config large = config_of(p, {{"THREADS", 1024}, {"VEC", 4}});
  std::string text = tune::compose(p.seed_text, p.seed_path.string(), p.space, {small, large},
                                   {"batch_size <= 64", ""});
  Solution sol = parse_single_file_solution(text, "composed.cu");
  ASSERT_TRUE(sol.plan.has_variants());
  ASSERT_EQ(sol.plan.variants.size(), 2u);
  ASSERT_TRUE(sol.plan.variants[0].when.has_value());
  EXPECT_EQ(sol.plan.variants[0].when->text(), "batch_size <= 64");
  EXPECT_FALSE(sol.plan.variants[1].when.has_value());
  EXPECT_EQ(sol.plan.variants[0].launches.at(0).kernel, "rmsnorm_kernel_v0");
  EXPECT_EQ(sol.plan.variants[1].launches.at(0).kernel, "rmsnorm_kernel_v1");
  EXPECT_EQ(sol.plan.variants[0].launches[0].block[0].text(), "128");
  EXPECT_EQ(sol.plan.variants[1].launches[0].block[0].text(), "1024");
  for (const auto& o : sol.plan.compile_options) {
    EXPECT_EQ(o.find("-DTHREADS"), std::string::npos) << o;
    EXPECT_EQ(o.find("-DVEC"), std::string::npos) << o;
  }
  Bindings b1 = batch(op, 1).bindings(op.definition);
  Bindings b128 = batch(op, 128).bindings(op.definition);
  EXPECT_EQ(sol.plan.variant_for(b1), 0u);
  EXPECT_EQ(sol.plan.variant_for(b128), 1u);
  EXPECT_NE(text.find("#define THREADS 128\n"), std::string::npos);
  EXPECT_NE(text.find("#define THREADS 1024\n"), std::string::npos);
  EXPECT_NE(text.find("#define rmsnorm_kernel rmsnorm_kernel_v1\n"), std::string::npos);
  EXPECT_NE(text.find("namespace kharness_variant_1 {"), std::string::npos);
  // The header is included once, above both copies.
  const std::size_t include = text.find("#include <cuda_bf16.h>");
  ASSERT_NE(include, std::string::npos);
  EXPECT_EQ(text.find("#include <cuda_bf16.h>", include + 1), std::string::npos);
  EXPECT_LT(include, text.find("namespace kharness_variant_0 {"));
  EXPECT_NE(sol.description.find("batch_size <= 64: THREADS=128 VEC=4"), std::string::npos)
      << sol.description;

  // The lists must match, the last condition empty.
  EXPECT_THROW(tune::compose(p.seed_text, "s.cu", p.space, {small, large}, {"batch_size <= 64"}),
               Error);
  EXPECT_THROW(tune::compose(p.seed_text, "s.cu", p.space, {small}, {"batch_size <= 64"}), Error);
}

// A fake GPU for the provider: rmsnorm latency by batch size and THREADS, fastest at 1024
// threads for batches up to 8, at 256 (the defaults) up to 256, and at 64 above; wider vectors a
// little faster (VEC = 8, 128 bits, the fastest).
double fake_latency(std::int64_t batch_size, std::int64_t threads, std::int64_t vec) {
  const std::int64_t target = batch_size <= 8 ? 1024 : batch_size <= 256 ? 256 : 64;
  const double steps = std::abs(std::log2(static_cast<double>(threads) / target));
  return (1.0 + 0.001 * static_cast<double>(batch_size)) * (1.0 + 0.2 * steps) *
         (1.0 + 0.05 * (3.0 - std::log2(static_cast<double>(vec))));
}

// The verdict of a configuration on every workload, as the pipeline writes it.
nlohmann::json fake_verdict(const Operator& op, std::int64_t threads, std::int64_t vec) {
  Verdict v;
  v.definition = op.definition.name;
  for (const auto& w : op.workloads) {
    WorkloadVerdict wv;
    wv.uuid = w.uuid;
    wv.axes = {{"batch_size", w.axes.at("batch_size")}};
    const double l = fake_latency(w.axes.at("batch_size"), threads, vec);
    wv.timing =
        timing_from_json({{"candidate", {{"median", l}, {"latency", l}, {"noise", 0.001}}}});
    v.workloads.push_back(wv);
  }
  return to_json(v);
}

struct ProviderRun {
  std::vector<nlohmann::json> dispatches;  // the composed answers' "dispatch", in order
  std::vector<std::string> composed;       // their sources
  std::map<Config, double> score;          // every configuration's measured mean speedup
  std::size_t answers = 0;
};

// Runs the tune provider on rmsnorm for `budget` answers against the fake latencies (`flat`:
// one configuration is best on every shape); composed candidates are reported as passing.
ProviderRun run_provider(int budget, bool flat) {
  Operator op = builtin_operator("rmsnorm_h4096");
  tune::TuneProvider provider;
  llm::Request request;
  nlohmann::json seed_latency = nlohmann::json::object();
  for (const auto& w : op.workloads)
    seed_latency[w.uuid] = flat ? 2.0 : fake_latency(w.axes.at("batch_size"), 256, 8);
  request.context = {{"operator", "rmsnorm_h4096"},
                     {"operators_dirs", {(testing::source_dir() / "operators").string()}},
                     {"budget", budget},
                     {"seed_score", 1.0},
                     {"seed_latency", seed_latency}};
  ProviderRun run;
  while (provider.has_more() && run.answers < static_cast<std::size_t>(budget)) {
    llm::Answer answer = provider.complete(request);
    ++run.answers;
    nlohmann::json raw = nlohmann::json::parse(answer.raw);
    if (raw.contains("dispatch")) {
      run.dispatches.push_back(raw["dispatch"]);
      run.composed.push_back(code_block(answer.text));
      provider.observe({"", "PASSED", 1.5, nullptr, nullptr});
      continue;
    }
    const std::int64_t threads = raw["THREADS"], vec = raw["VEC"];
    nlohmann::json verdict = fake_verdict(op, threads, vec);
    if (flat) {  // latency independent of the shape: the same configuration wins everywhere
      for (auto& w : verdict["workloads"]) {
        const double l = threads == 512 && vec == 8 ? 1.0 : 2.0;
        w["timing"]["candidate"]["median"] = l;
        w["timing"]["candidate"]["latency"] = l;
      }
    }
    double sum = 0;
    for (const auto& w : verdict["workloads"])
      sum += 2.0 / w["timing"]["candidate"]["median"].get<double>();
    const double score = sum / static_cast<double>(op.workloads.size());
    run.score[config_of(*provider.problem(), {{"THREADS", threads}, {"VEC", vec}})] = score;
    provider.observe({"", "PASSED", score, verdict, nullptr});
  }
  return run;
}

// Per bucket, the provider proposes the composition of each bucket's best configuration, with a
// plan whose variants carry the buckets' conditions; compositions stay within their bound. With
// a budget of 30 every one of the 19 configurations is tried, so the last composition is the
// fake's optimum.
TEST(TuneProvider, ComposesTheBestConfigurationOfEachShapeBucket) {
  ProviderRun run = run_provider(30, false);
  ASSERT_FALSE(run.dispatches.empty()) << "no composed candidate in " << run.answers;
  EXPECT_LE(run.dispatches.size(), 30u / 6 + 1);        // one per 6 answers at most, and the last
  EXPECT_EQ(run.answers, 18u + run.dispatches.size());  // every configuration but the seed's
  const nlohmann::json& last = run.dispatches.back();
  // The fake's best per bucket: THREADS 1024 (with VEC = 4: 1024 x 8 does not divide 4096),
  // 256 (the defaults) and 64.
  ASSERT_EQ(last.size(), 3u) << last.dump();
  EXPECT_EQ(last[0]["when"], "batch_size <= 8");
  EXPECT_EQ(last[1]["when"], "batch_size <= 256");
  EXPECT_EQ(last[2]["when"], "otherwise");
  EXPECT_EQ(last[0]["configuration"], nlohmann::json({{"THREADS", 1024}, {"VEC", 4}}));
  EXPECT_EQ(last[1]["configuration"], nlohmann::json({{"THREADS", 256}, {"VEC", 8}}));
  EXPECT_EQ(last[2]["configuration"], nlohmann::json({{"THREADS", 64}, {"VEC", 8}}));
  EXPECT_EQ(last[0]["workloads"].size() + last[1]["workloads"].size() + last[2]["workloads"].size(),
            16u);
  Solution sol = parse_single_file_solution(run.composed.back(), "composed.cu");
  ASSERT_EQ(sol.plan.variants.size(), 3u);
  EXPECT_EQ(sol.plan.variants[0].when->text(), "batch_size <= 8");
  EXPECT_EQ(sol.plan.variants[1].when->text(), "batch_size <= 256");
  EXPECT_FALSE(sol.plan.variants[2].when.has_value());
  EXPECT_EQ(sol.plan.variants[0].launches[0].block[0].text(), "1024");
  EXPECT_EQ(sol.plan.variants[1].launches[0].block[0].text(), "256");
  EXPECT_EQ(sol.plan.variants[2].launches[0].block[0].text(), "64");
  // No combination twice.
  std::set<std::string> seen;
  for (const auto& d : run.dispatches) EXPECT_TRUE(seen.insert(d.dump()).second) << d.dump();
}

TEST(TuneProvider, NoCompositionWhenOneConfigurationIsBestEverywhere) {
  ProviderRun run = run_provider(30, true);
  EXPECT_TRUE(run.dispatches.empty()) << run.dispatches.front().dump();
  EXPECT_EQ(run.answers, 18u);  // every valid configuration but the seed's
}

// On sm_90a the controller starts from the arch's own seed (seed.sm_90a.cu) and names it in the
// context: that seed and its knobs (tune.sm_90a.json) are tuned, so the defaults are the seed.
TEST(TuneProvider, TunesTheSeedTheControllerStartedFrom) {
  Operator op = builtin_operator("gemm_fp8");
  std::optional<std::filesystem::path> seed = seed_for(op, "sm_90a");
  ASSERT_TRUE(seed.has_value());
  ASSERT_NE(*seed, *op.seed);
  tune::TuneProvider provider;
  llm::Request request;
  request.context = {{"operator", "gemm_fp8"},
                     {"operators_dirs", {(testing::source_dir() / "operators").string()}},
                     {"budget", 4},
                     {"seed", seed->string()}};
  Solution sol = parse_single_file_solution(code_block(provider.complete(request).text), "a.cu");
  ASSERT_NE(provider.problem(), nullptr);
  EXPECT_EQ(provider.problem()->seed_path, *seed);
  EXPECT_NE(provider.problem()->space.source.find("tune.sm_90a.json"), std::string::npos)
      << provider.problem()->space.source;
  EXPECT_EQ(sol.plan.launches.at(0).kernel, "gemm_fp8_tma_wgmma_kernel");
}

TEST(TuneProvider, NeedsTheOperatorInTheContext) {
  tune::TuneProvider provider;
  llm::Request request;
  expect_input_error([&] { provider.complete(request); }, "context: operator", "missing");
}

}  // namespace
}  // namespace kharness
