// Held-out shapes (kharness/holdout.hpp): deterministic per seed, within the shipped range and the
// definition's constraints, never a shipped shape; and `--holdout` on the command line.
#include "kharness/holdout.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "kharness/operators.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

using nlohmann::json;

Operator rmsnorm() { return OperatorRegistry::from_environment({}).load("rmsnorm_h4096"); }

// Two drawn axes (a, b), one derived by a constraint (c == a + 1), two checks over axes and one
// over a tensor (left to the generators).
Operator constrained() {
  Operator op;
  op.definition = parse_definition_text(R"({
    "name": "holdout_probe", "op_type": "probe",
    "axes": {"a": {"type": "var"}, "b": {"type": "var"}, "c": {"type": "var"},
             "h": {"type": "const", "value": 64}},
    "constraints": ["c == a + 1", "b % 4 == 0", "a <= b", "x.shape[0] == a"],
    "inputs": {"x": {"shape": ["a", "h"], "dtype": "float32"},
               "y": {"shape": ["b", "c"], "dtype": "float32"},
               "scale": {"shape": null, "dtype": "float32"}},
    "outputs": {"out": {"shape": ["a", "h"], "dtype": "float32"}}
  })",
                                        "probe.json");
  for (auto [a, b] : {std::pair{2, 8}, {64, 256}, {3, 12}}) {
    json w = {{"uuid", "w" + std::to_string(a)},
              {"axes", {{"a", a}, {"b", b}, {"c", a + 1}}},
              {"inputs",
               {{"x", {{"type", "random"}}},
                {"y", {{"type", "random"}}},
                {"scale", {{"type", "scalar"}, {"value", 0.5}}}}}};
    op.workloads.push_back(parse_workload(w, op.definition, "probe.jsonl"));
  }
  return op;
}

TEST(Holdout, DeterministicPerSeed) {
  Operator op = rmsnorm();
  HoldoutDraw a = draw_holdout(op, 6, 42), b = draw_holdout(op, 6, 42), c = draw_holdout(op, 6, 43);
  ASSERT_EQ(a.workloads.size(), 6u);
  ASSERT_EQ(c.workloads.size(), 6u);
  std::vector<std::int64_t> sa, sb, sc;
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(a.workloads[i].uuid, b.workloads[i].uuid);
    sa.push_back(a.workloads[i].axes.at("batch_size"));
    sb.push_back(b.workloads[i].axes.at("batch_size"));
    sc.push_back(c.workloads[i].axes.at("batch_size"));
    EXPECT_EQ(a.workloads[i].uuid.rfind("holdout-" + std::to_string(i + 1) + "-", 0), 0u);
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(Holdout, WithinRangeNeverShipped) {
  Operator op = rmsnorm();
  std::set<std::int64_t> shipped;
  std::int64_t lo = INT64_MAX, hi = 0;
  for (const auto& w : op.workloads) {
    shipped.insert(w.axes.at("batch_size"));
    lo = std::min(lo, w.axes.at("batch_size"));
    hi = std::max(hi, w.axes.at("batch_size"));
  }
  for (std::uint64_t seed : {1ull, 2ull, 3ull, 0xdeadbeefull}) {
    HoldoutDraw d = draw_holdout(op, 20, seed);
    ASSERT_EQ(d.workloads.size(), 20u) << (d.notes.empty() ? "" : d.notes[0]);
    std::set<std::int64_t> drawn;
    for (const auto& w : d.workloads) {
      std::int64_t b = w.axes.at("batch_size");
      EXPECT_GE(b, lo);
      EXPECT_LE(b, hi);
      EXPECT_EQ(shipped.count(b), 0u) << b << " is a shipped batch size";
      EXPECT_TRUE(drawn.insert(b).second) << b << " drawn twice";
      EXPECT_EQ(w.inputs.size(), 2u);  // hidden_states and weight, random as shipped
    }
  }
}

TEST(Holdout, ConstraintsHoldAndDeriveAxes) {
  Operator op = constrained();
  HoldoutDraw d = draw_holdout(op, 10, 7);
  ASSERT_EQ(d.workloads.size(), 10u) << (d.notes.empty() ? "" : d.notes[0]);
  std::set<std::map<std::string, std::int64_t>> shipped;
  for (const auto& w : op.workloads) shipped.insert(w.axes);
  for (const auto& w : d.workloads) {
    std::int64_t a = w.axes.at("a"), b = w.axes.at("b"), c = w.axes.at("c");
    EXPECT_GE(a, 2);
    EXPECT_LE(a, 64);
    EXPECT_GE(b, 8);
    EXPECT_LE(b, 256);
    EXPECT_EQ(c, a + 1);
    EXPECT_EQ(b % 4, 0);
    EXPECT_LE(a, b);
    EXPECT_EQ(shipped.count(w.axes), 0u);
    // Scalars keep the shipped value; the workload is valid for the definition.
    EXPECT_EQ(w.inputs.at("scale").value, 0.5);
    EXPECT_NO_THROW(parse_workload(to_json(w), op.definition, "drawn"));
  }
  // The constraint over a tensor is named, not enforced.
  bool noted = false;
  for (const auto& n : d.notes) noted = noted || n.find("x.shape[0]") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(Holdout, SkipsWhatCannotBeDrawn) {
  Operator op = constrained();
  op.workloads[0].inputs["x"].kind = WorkloadInput::Kind::kSafetensors;
  op.workloads[0].inputs["x"].path = "blob.safetensors";
  HoldoutDraw d = draw_holdout(op, 3, 1);
  EXPECT_TRUE(d.workloads.empty());
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_NE(d.notes[0].find("safetensors"), std::string::npos) << d.notes[0];

  // A range with one other shape in it: only that one can be drawn, and a note says so.
  Operator narrow = rmsnorm();
  narrow.workloads.resize(2);  // batch sizes 1 and 2: nothing else in [1, 2]
  HoldoutDraw n = draw_holdout(narrow, 3, 1);
  EXPECT_TRUE(n.workloads.empty());
  ASSERT_FALSE(n.notes.empty());
  EXPECT_NE(n.notes.back().find("drew 0 of 3"), std::string::npos) << n.notes.back();
}

TEST(Holdout, SeedHashHidesTheSeed) {
  std::string h = holdout_seed_hash(1234);
  EXPECT_EQ(h.rfind("sha256:", 0), 0u);
  EXPECT_EQ(h.size(), 7u + 16u);
  EXPECT_EQ(h, holdout_seed_hash(1234));
  EXPECT_NE(h, holdout_seed_hash(1235));
}

TEST(HoldoutCli, RecordedInTheVerdictAsAHash) {
  testing::TempDir dir;
  std::string sol = testing::fixture("good/rmsnorm_simple.cu").string();
  auto r = testing::run_command("KHARNESS_HOLDOUT_SEED=8675309123456789 '" +
                                std::string(KHARNESS_BINARY) + "' --archive '" +
                                dir.path().string() + "' validate '" + sol +
                                "' --compile-only --holdout 3 --json 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  json v = json::parse(r.out);
  EXPECT_EQ(v["score"]["holdout"]["drawn"], 3);
  EXPECT_EQ(v["score"]["holdout"]["requested"], 3);
  EXPECT_EQ(v["score"]["holdout"]["seed_hash"], holdout_seed_hash(8675309123456789ull));
  EXPECT_EQ(v["score"]["holdout"]["seed_from_environment"], true);
  // The seed itself appears nowhere (a long one: four digits turned up by chance in the output's
  // hashes and timings about once in a few hundred runs).
  EXPECT_EQ(r.out.find("8675309123456789"), std::string::npos);

  auto random = testing::kharness("--archive '" + dir.path().string() + "' validate '" + sol +
                                  "' --compile-only --holdout 2");
  EXPECT_EQ(random.exit_code, 0) << random.out;
  EXPECT_NE(random.out.find("KHARNESS_HOLDOUT_SEED is not set"), std::string::npos) << random.out;

  auto bad = testing::run_command("KHARNESS_HOLDOUT_SEED=-3 '" + std::string(KHARNESS_BINARY) +
                                  "' --archive '" + dir.path().string() + "' validate '" + sol +
                                  "' --compile-only --holdout 2 2>&1");
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("KHARNESS_HOLDOUT_SEED"), std::string::npos) << bad.out;
  EXPECT_EQ(testing::kharness("validate '" + sol + "' --compile-only --holdout -1").exit_code, 2);
}

}  // namespace
}  // namespace kharness
