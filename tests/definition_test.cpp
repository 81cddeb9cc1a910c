#include "kharness/definition.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#include "kharness/error.hpp"
#include "kharness/operators.hpp"
#include "kharness/text.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

using testing::fixture;

using testing::expect_input_error;

const char* kRmsnorm = R"J({
  "name": "rms", "op_type": "rmsnorm",
  "axes": {"batch_size": {"type": "var"}, "hidden_size": {"type": "const", "value": 4096}},
  "inputs": {"hidden_states": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"},
             "weight": {"shape": ["hidden_size"], "dtype": "bfloat16"},
             "eps": {"shape": null, "dtype": "float32"}},
  "outputs": {"output": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"}},
  "kharness": {"tolerance": {"atol": 0.01, "rtol": 0.02, "required_matched_ratio": 0.99},
               "inputs": {"weight": {"distribution": "uniform", "low": 0.5, "high": 1.5}},
               "flops": "4 * batch_size * hidden_size", "bytes": "4 * batch_size * hidden_size",
               "constants": {"eps": 1e-5}}
})J";

TEST(Definition, ParsesAxesTensorsInFileOrderAndKharnessSection) {
  Definition d = parse_definition_text(kRmsnorm, "rms.json");
  EXPECT_EQ(d.name, "rms");
  ASSERT_EQ(d.axes.size(), 2u);
  EXPECT_EQ(d.axes[0].name, "batch_size");
  EXPECT_FALSE(d.axes[0].is_const);
  EXPECT_EQ(d.axes[1].value, 4096);
  ASSERT_EQ(d.inputs.size(), 3u);
  EXPECT_EQ(d.inputs[0].name, "hidden_states");  // file order, not alphabetical
  EXPECT_EQ(d.inputs[1].name, "weight");
  EXPECT_TRUE(d.inputs[2].is_scalar());
  EXPECT_EQ(d.inputs[0].dtype, DType::kBFloat16);
  EXPECT_TRUE(d.kharness.present);
  EXPECT_DOUBLE_EQ(d.kharness.tolerance.rtol, 0.02);
  EXPECT_DOUBLE_EQ(d.kharness.tolerance.required_matched_ratio, 0.99);
  EXPECT_EQ(d.kharness.inputs.at("weight").distribution, "uniform");
  EXPECT_EQ(d.kharness.flops->eval({{"batch_size", 2}, {"hidden_size", 4096}}), 32768);
  EXPECT_EQ(d.family(), "rmsnorm");
  // Round trip through the exported schema.
  Definition again = parse_definition(to_json(d), "again");
  EXPECT_EQ(again.inputs[1].name, "weight");
  EXPECT_EQ(again.kharness.bytes->text(), "4 * batch_size * hidden_size");
}

TEST(Definition, FieldErrorsNameFileAndField) {
  std::string base = kRmsnorm;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = base;
    auto pos = s.find(from);
    EXPECT_NE(pos, std::string::npos) << from;
    return s.replace(pos, from.size(), to);
  };
  expect_input_error(
      [&] { parse_definition_text(with("\"bfloat16\"}}", "\"bfloat17\"}}"), "d.json"); },
      "d.json: outputs.output.dtype", "unknown dtype 'bfloat17'");
  expect_input_error(
      [&] { parse_definition_text(with("[\"hidden_size\"]", "[\"hidden\"]"), "d.json"); },
      "inputs.weight.shape[0]", "unknown axis 'hidden'");
  expect_input_error(
      [&] { parse_definition_text(with("\"value\": 4096", "\"value\": \"4096\""), "d.json"); },
      "axes.hidden_size.value", "expected an integer, got string");
  expect_input_error(
      [&] { parse_definition_text(with("\"type\": \"var\"", "\"type\": \"variable\""), "d.json"); },
      "axes.batch_size.type", "unknown axis type");
  expect_input_error(
      [&] { parse_definition_text(with("\"rtol\": 0.02", "\"rtoll\": 0.02"), "d.json"); },
      "kharness.tolerance.rtoll", "did you mean 'rtol'");
  expect_input_error(
      [&] {
        parse_definition_text(
            with("4 * batch_size * hidden_size\", \"bytes", "4 * tokens\", \"bytes"), "d.json");
      },
      "kharness.flops", "unknown axis 'tokens'");
  expect_input_error(
      [&] {
        parse_definition_text(with("\"constants\"", "\"comparator\": 3, \"constants\""), "d.json");
      },
      "kharness.comparator", "expected a string");
  for (const char* family : {"../../etc", "a/b", ".."}) {
    expect_input_error(
        [&] {
          parse_definition_text(
              with("\"constants\"", std::string("\"family\": \"") + family + "\", \"constants\""),
              "d.json");
        },
        "d.json: kharness.family", "is not a family name");
  }
  expect_input_error(
      [&] {
        parse_definition_text(with("\"distribution\": \"uniform\", \"low\": 0.5, \"high\": 1.5",
                                   "\"distribution\": \"indices\""),
                              "d.json");
      },
      "kharness.inputs.weight", "needs \"max\"");
  expect_input_error(
      [&] {
        parse_definition_text(with("\"distribution\": \"uniform\", \"low\": 0.5, \"high\": 1.5",
                                   "\"distribution\": \"indices\", \"max\": \"pages - 1\""),
                              "d.json");
      },
      "kharness.inputs.weight.max", "unknown axis 'pages'");
  expect_input_error([&] { parse_definition_text(with("\"uniform\"", "\"gaussian\""), "d.json"); },
                     "kharness.inputs.weight.distribution", "unknown distribution");
  expect_input_error([&] { parse_definition_text(with("\"name\": \"rms\",", ""), "d.json"); },
                     "d.json: name", "missing required field");
  expect_input_error([&] { parse_definition_text("{\"name\": ", "d.json"); },
                     "d.json:1:", "not valid JSON");
  expect_input_error([&] { parse_definition_text("", "d.json"); }, "d.json", "empty");
  expect_input_error([&] { parse_definition_text("[1, 2]", "d.json"); }, "d.json",
                     "expected an object, got array");
}

TEST(Definition, MalformedFixtureFiles) {
  expect_input_error([] { load_definition(fixture("defs/not_json.json")); },
                     "not_json.json:1:", "not valid JSON");
  expect_input_error([] { load_definition(fixture("defs/wrong_type.json")); },
                     "wrong_type.json: axes", "expected an object, got array");
  expect_input_error([] { load_definition(fixture("defs/unknown_dtype.json")); },
                     "inputs.weight.dtype", "bfloat17");
  expect_input_error([] { load_definition(fixture("defs/unknown_axis_in_shape.json")); },
                     "outputs.output.shape", "unknown axis 'hidden_dim'");
  expect_input_error([] { load_definition(fixture("defs/missing_field.json")); },
                     "missing_field.json: outputs", "missing required field");
  expect_input_error([] { load_definition(fixture("defs/does_not_exist.json")); },
                     "does_not_exist.json", "no such file");
}

TEST(Workloads, ParsesPlainAndTraceLinesAndBindsAxes) {
  Definition d = parse_definition_text(kRmsnorm, "rms.json");
  auto plain = nlohmann::json::parse(
      R"J({"uuid": "u1", "axes": {"batch_size": 7}, "inputs": {"eps": {"type": "scalar", "value": 1e-5}}})J");
  Workload w = parse_workload(plain, d, "w");
  EXPECT_EQ(w.uuid, "u1");
  EXPECT_EQ(w.bindings(d).at("hidden_size"), 4096);
  EXPECT_EQ(w.bindings(d).at("batch_size"), 7);
  EXPECT_EQ(w.inputs.at("hidden_states").kind, WorkloadInput::Kind::kRandom);  // default
  EXPECT_EQ(w.inputs.at("eps").kind, WorkloadInput::Kind::kScalar);
  EXPECT_EQ(tensor_shape(d.inputs[0], w.bindings(d)), (std::vector<std::int64_t>{7, 4096}));
  auto trace = nlohmann::json::parse(
      R"J({"definition": "rms", "solution": null, "workload": {"uuid": "u2", "axes": {"batch_size": 3},
          "inputs": {"eps": {"type": "scalar", "value": 1e-6},
                     "weight": {"type": "safetensors", "path": "w.safetensors", "tensor_key": "weight"}}},
          "evaluation": null})J");
  Workload t = parse_workload(trace, d, "t");
  EXPECT_EQ(t.axes.at("batch_size"), 3);
  EXPECT_EQ(t.inputs.at("weight").tensor_key, "weight");
}

TEST(Workloads, ErrorsNameFileLineAndField) {
  Definition d = load_definition(testing::source_dir() / "operators/rmsnorm_h4096/definition.json");
  expect_input_error([&] { load_workloads(fixture("workloads/bad_line3.jsonl"), d); },
                     "bad_line3.jsonl:3:", "not valid JSON");
  expect_input_error([&] { load_workloads(fixture("workloads/missing_axis.jsonl"), d); },
                     "missing_axis.jsonl:", "missing var axis 'batch_size'");
  expect_input_error([&] { load_workloads(fixture("workloads/const_mismatch.jsonl"), d); },
                     "const_mismatch.jsonl:", "const 4096");
  Definition rms = parse_definition_text(kRmsnorm, "rms.json");
  expect_input_error(
      [&] {
        parse_workload(nlohmann::json::parse(R"J({"uuid": "x", "axes": {"batch_size": 1}})J"), rms,
                       "w:1");
      },
      "w:1: inputs", "missing scalar input 'eps'");
  expect_input_error(
      [&] {
        parse_workload(
            nlohmann::json::parse(R"J({"uuid": "x", "axes": {"batch_size": 1, "seq": 2}})J"), rms,
            "w:1");
      },
      "w:1: axes.seq", "unknown axis 'seq'");
  expect_input_error(
      [&] {
        parse_workload(nlohmann::json::parse(R"J({"uuid": " ", "axes": {"batch_size": 1}})J"), rms,
                       "w:1");
      },
      "w:1: uuid", "empty");
  expect_input_error(
      [&] {
        parse_workload(nlohmann::json::parse(R"J({"uuid": "x", "axes": {"batch_size": 1},
            "inputs": {"eps": {"type": "scalar", "value": 1}, "weight": {"type": "zeros"}}})J"),
                       rms, "w:1");
      },
      "inputs.weight.type", "unknown input type 'zeros'");
  // 2^64 - 1 is not "-1" ("must be >= 0"): it does not fit.
  expect_input_error(
      [&] {
        parse_workload(nlohmann::json::parse(
                           R"J({"uuid": "x", "axes": {"batch_size": 18446744073709551615},
            "inputs": {"eps": {"type": "scalar", "value": 1}}})J"),
                       rms, "w:1");
      },
      "w:1: axes.batch_size", "does not fit in a 64-bit signed integer");
}

TEST(Operators, BuiltinRmsnormLoadsWithItsFiles) {
  OperatorRegistry registry = OperatorRegistry::from_environment({});
  Operator op = registry.load("rmsnorm_h4096");
  const Definition& d = op.definition;
  // Names exactly as FlashInfer-Bench's rmsnorm_h4096.
  ASSERT_NE(d.find_input("hidden_states"), nullptr);
  ASSERT_NE(d.find_input("weight"), nullptr);
  ASSERT_NE(d.find_output("output"), nullptr);
  ASSERT_NE(d.find_axis("batch_size"), nullptr);
  EXPECT_FALSE(d.find_axis("batch_size")->is_const);
  EXPECT_EQ(d.find_axis("hidden_size")->value, 4096);
  EXPECT_DOUBLE_EQ(d.kharness.constants.at("eps"), 1e-5);
  EXPECT_GE(op.workloads.size(), 10u);
  ASSERT_TRUE(op.reference && op.seed && op.baseline);
  EXPECT_EQ(op.reference->filename(), "reference.cu");  // the rmsnorm family's reference
  EXPECT_EQ(op.origin, "builtin");
}

TEST(Operators, UnknownNameSuggestsCloseNames) {
  OperatorRegistry registry = OperatorRegistry::from_environment({});
  expect_input_error([&] { registry.load("rmsnorm_h4097"); }, "--operator",
                     "did you mean rmsnorm_h4096");
}

TEST(Operators, ExtraDirsPlainAndFlashInferBenchLayouts) {
  OperatorRegistry plain = OperatorRegistry::from_environment({fixture("defs/fib_plain")});
  Operator gemm = plain.load("gemm_n64_k128");
  // A plain FlashInfer-Bench definition loads as it is; the gemm family's defaults fill its
  // section.
  EXPECT_FALSE(load_definition(fixture("defs/fib_plain/gemm_n64_k128.json")).kharness.present);
  EXPECT_TRUE(gemm.definition.kharness.present);
  EXPECT_EQ(gemm.definition.kharness.flops->text(), "2 * M * N * K");
  // ... and the family's shared seed and baseline.
  ASSERT_TRUE(gemm.seed && gemm.baseline);
  EXPECT_EQ(gemm.seed->parent_path().filename(), "gemm");
  EXPECT_EQ(gemm.baseline->parent_path().parent_path().filename(), "gemm");
  EXPECT_EQ(gemm.origin, "--operators-dir");
  EXPECT_EQ(gemm.definition.inputs[0].name, "A");

  OperatorRegistry fib = OperatorRegistry::from_environment({fixture("defs/fib_layout")});
  Operator g = fib.load("gemm_n64_k128");
  ASSERT_TRUE(g.workloads_file.has_value());
  EXPECT_FALSE(g.workloads.empty());
  // Listing sees both the extra operator and the built-in ones.
  bool saw_gemm = false, saw_rms = false;
  for (const auto& e : fib.list()) {
    saw_gemm = saw_gemm || e.name == "gemm_n64_k128";
    saw_rms = saw_rms || e.name == "rmsnorm_h4096";
  }
  EXPECT_TRUE(saw_gemm && saw_rms);
  // A definition file path loads directly.
  Operator direct = plain.load(fixture("defs/fib_plain/gemm_n64_k128.json").string());
  EXPECT_EQ(direct.definition.name, "gemm_n64_k128");
}

TEST(Operators, EnvironmentVariableAddsDirs) {
  ::setenv("KHARNESS_OPERATORS", fixture("defs/fib_plain").c_str(), 1);
  OperatorRegistry registry = OperatorRegistry::from_environment({});
  ::unsetenv("KHARNESS_OPERATORS");
  EXPECT_EQ(registry.load("gemm_n64_k128").origin, "KHARNESS_OPERATORS");
  expect_input_error([] { OperatorRegistry::from_environment({"/nonexistent/dir"}); },
                     "--operators-dir", "not a folder");
}

TEST(Operators, FamilyFromTheLongestNamePrefixThenOpType) {
  testing::TempDir dir;
  namespace fs = std::filesystem;
  auto def = nlohmann::ordered_json::parse(
      read_file((testing::source_dir() / "operators/rmsnorm_h4096/definition.json").string()));
  def.erase("kharness");  // a plain FlashInfer-Bench definition: no family given
  def["name"] = "fused_add_rmsnorm_h4096";
  fs::create_directories(dir.path() / "defs");
  write_file_atomic((dir.path() / "defs/fused_add_rmsnorm_h4096.json").string(), def.dump());
  def["name"] = "rmsnorm_h1024";
  write_file_atomic((dir.path() / "defs/rmsnorm_h1024.json").string(), def.dump());
  write_file_atomic((dir.path() / "defs/_families/fused_add_rmsnorm/reference.cu").string(),
                    "// family\n");
  OperatorRegistry registry = OperatorRegistry::from_environment({dir.path() / "defs"});
  auto fused = registry.load("fused_add_rmsnorm_h4096");
  ASSERT_TRUE(fused.reference.has_value());
  EXPECT_EQ(fused.reference->parent_path().filename(), "fused_add_rmsnorm");  // not op_type rmsnorm
  auto plain = registry.load("rmsnorm_h1024");
  ASSERT_TRUE(plain.reference.has_value());
  EXPECT_EQ(plain.reference->parent_path().filename(), "rmsnorm");  // the built-in family
}

TEST(Definition, RangeBoundsMayBeAxisExpressions) {
  std::string text = kRmsnorm;
  std::string from = "\"distribution\": \"uniform\", \"low\": 0.5, \"high\": 1.5";
  text.replace(text.find(from), from.size(),
               "\"distribution\": \"range\", \"low\": 0, \"high\": \"hidden_size - 1\"");
  Definition d = parse_definition_text(text, "d.json");
  EXPECT_EQ(d.kharness.inputs.at("weight").extra.at("high_expr"), "hidden_size - 1");
  EXPECT_EQ(to_json(d)["kharness"]["inputs"]["weight"]["high"],
            "hidden_size - 1");  // exported as written
  text.replace(text.find("hidden_size - 1"), 15, "tokens - 1");
  expect_input_error([&] { parse_definition_text(text, "d.json"); }, "kharness.inputs.weight.high",
                     "unknown axis 'tokens'");
}

TEST(Definition, FamilyDefaultsFillOnlyWhatTheDefinitionLeavesUnset) {
  std::string plain = kRmsnorm;
  plain = plain.substr(0, plain.find(",\n  \"kharness\"")) +
          "\n}";  // the same definition, no kharness section
  Definition d = parse_definition_text(plain, "plain.json");
  ASSERT_FALSE(d.kharness.present);
  auto family = nlohmann::ordered_json::parse(R"J({"kharness": {
      "tolerance": {"atol": 0.5, "rtol": 0.25},
      "inputs": {"weight": {"distribution": "uniform", "low": 0.5, "high": 1.5}},
      "flops": "4 * batch_size * hidden_size"}})J");
  apply_family_defaults(d, family, "family.json");
  EXPECT_TRUE(d.kharness.present);
  EXPECT_DOUBLE_EQ(d.kharness.tolerance.atol, 0.5);
  EXPECT_EQ(d.kharness.inputs.at("weight").distribution, "uniform");
  EXPECT_EQ(d.kharness.flops->text(), "4 * batch_size * hidden_size");
  // A definition's own section wins.
  Definition own = parse_definition_text(kRmsnorm, "own.json");
  apply_family_defaults(own, family, "family.json");
  EXPECT_DOUBLE_EQ(own.kharness.tolerance.atol, 0.01);
  // Names the definition does not have are an error naming the family file.
  auto bad = nlohmann::ordered_json::parse(
      R"J({"kharness": {"inputs": {"page_table": {"distribution": "normal"}}}})J");
  expect_input_error([&] { apply_family_defaults(d, bad, "family.json"); },
                     "family.json: kharness.inputs.page_table", "unknown input");
}

// The real FlashInfer-Bench snapshot, where the checkout has it beside the repository.
TEST(Operators, ImportsEveryFlashInferBenchDefinition) {
  std::filesystem::path fib(KHARNESS_FIB_DIR);
  if (!std::filesystem::exists(fib / "definitions"))
    GTEST_SKIP() << "no FlashInfer-Bench snapshot at " << fib;
  OperatorRegistry registry({{fib, "--operators-dir"}});
  auto entries = registry.list();
  EXPECT_GE(entries.size(), 150u);
  for (const auto& e : entries) EXPECT_TRUE(e.error.empty()) << e.error;
  Operator op = registry.load("rmsnorm_h4096");
  EXPECT_GE(op.workloads.size(), 10u);
  Operator moe = registry.load("moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048");
  EXPECT_FALSE(moe.workloads.empty());
  // Imported as they are, definitions of a known family get its reference and its defaults:
  // valid page tables for paged attention, FLOP formulas for GEMMs.
  OperatorRegistry with_builtin = OperatorRegistry::from_environment({fib});
  Operator gqa = with_builtin.load("gqa_paged_decode_h32_kv8_d128_ps1");
  ASSERT_TRUE(gqa.reference.has_value());
  Operator fib_gqa = with_builtin.load(
      (fib / "definitions/gqa_paged/gqa_paged_decode_h16_kv2_d128_ps64.json").string());
  ASSERT_TRUE(fib_gqa.reference.has_value());
  EXPECT_EQ(fib_gqa.definition.kharness.inputs.at("kv_indptr").distribution, "indptr");
  Operator fib_gemm = with_builtin.load((fib / "definitions/gemm/gemm_n4096_k4096.json").string());
  ASSERT_TRUE(fib_gemm.definition.kharness.flops.has_value());
  EXPECT_EQ(fib_gemm.reference->parent_path().filename(), "gemm");
}

// kharness.timed_check: the point reference of timed iterations, checked against the
// definition; gemm families inherit theirs from family.json.
TEST(Definition, TimedCheckNamesARowAxisOfEveryOutput) {
  std::string base = kRmsnorm;
  auto with = [&](const std::string& check) {
    std::string s = base;
    const std::string from = "\"constants\"";
    return s.replace(s.find(from), from.size(), "\"timed_check\": " + check + ", " + from);
  };
  Definition d = parse_definition_text(with(R"({"rows_of": "batch_size", "rows": 64})"), "d.json");
  EXPECT_EQ(d.kharness.timed_rows_of, "batch_size");
  EXPECT_EQ(d.kharness.timed_rows, 64);
  EXPECT_EQ(
      parse_definition_text(with(R"({"rows_of": "batch_size"})"), "d.json").kharness.timed_rows,
      128);
  expect_input_error([&] { parse_definition_text(with(R"({"rows_of": "tokens"})"), "d.json"); },
                     "d.json: kharness.timed_check.rows_of", "'tokens' is not an axis");
  expect_input_error(
      [&] { parse_definition_text(with(R"({"rows_of": "hidden_size"})"), "d.json"); },
      "kharness.timed_check.rows_of", "does not have 'hidden_size' as its first dimension");
  for (const char* rows : {"0", "257", "2.5"}) {
    expect_input_error(
        [&] {
          parse_definition_text(
              with(std::string(R"({"rows_of": "batch_size", "rows": )") + rows + "}"), "d.json");
        },
        "kharness.timed_check.rows", "an integer in [1, 256]");
  }
  expect_input_error(
      [&] { parse_definition_text(with(R"({"rows_of": "batch_size", "row": 4})"), "d.json"); },
      "kharness.timed_check.row", "");
  const Operator gemm = OperatorRegistry::from_environment({}).load("gemm_n6144_k4096");
  EXPECT_EQ(gemm.definition.kharness.timed_rows_of, "M");
  EXPECT_EQ(gemm.definition.kharness.timed_rows, 128);
  const Operator rms = OperatorRegistry::from_environment({}).load("rmsnorm_h4096");
  EXPECT_TRUE(rms.definition.kharness.timed_rows_of.empty());
}

}  // namespace
}  // namespace kharness
