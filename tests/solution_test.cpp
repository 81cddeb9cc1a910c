#include "kharness/solution.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "kharness/error.hpp"
#include "kharness/text.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

using testing::fixture;

using testing::expect_input_error;

std::string solution_text(const std::string& plan) {
  return "// leading line comment\n/* kharness " + plan + " */\n__global__ void k(float* x) {}\n";
}

TEST(Plan, ParsesExpressionsDefaultsAndLiterals) {
  Solution s = parse_single_file_solution(solution_text(R"J({
    "definition": "rmsnorm_h4096", "name": "fast", "author": "me",
    "launches": [{"kernel": "k", "grid": ["cdiv(batch_size, 4)", 1], "block": 256,
                  "shared_bytes": "hidden_size * 4",
                  "args": ["hidden_states", "batch_size", {"float32": 1e-5}, {"int32": -3}, "workspace"]}],
    "workspace_bytes": "batch_size * 16",
    "compile_options": ["-O3"]})J"),
                                          "fast.cu");
  EXPECT_EQ(s.name, "fast");
  EXPECT_EQ(s.author, "me");
  EXPECT_EQ(s.plan.definition, "rmsnorm_h4096");
  ASSERT_EQ(s.plan.launches.size(), 1u);
  const Launch& l = s.plan.launches[0];
  Bindings b{{"batch_size", 9}, {"hidden_size", 4096}};
  EXPECT_EQ(l.grid[0].eval(b), 3);
  EXPECT_EQ(l.grid[1].eval(b), 1);
  EXPECT_EQ(l.grid[2].eval(b), 1);     // padded
  EXPECT_EQ(l.block[0].eval(b), 256);  // a single value is [x, 1, 1]
  EXPECT_EQ(l.cluster[0].eval(b), 1);  // default
  EXPECT_EQ(l.shared_bytes.eval(b), 16384);
  EXPECT_EQ(s.plan.workspace_bytes.eval(b), 144);
  ASSERT_EQ(l.args.size(), 5u);
  EXPECT_EQ(l.args[0].name, "hidden_states");
  ASSERT_TRUE(l.args[2].literal.has_value());
  EXPECT_EQ(l.args[2].literal->dtype, DType::kFloat32);
  float eps;
  auto bytes = l.args[2].literal->encode();
  ASSERT_EQ(bytes.size(), 4u);
  std::memcpy(&eps, bytes.data(), 4);
  EXPECT_FLOAT_EQ(eps, 1e-5f);
  EXPECT_EQ(l.args[3].literal->encode(), (std::vector<std::uint8_t>{0xfd, 0xff, 0xff, 0xff}));
  EXPECT_EQ(s.plan.compile_options, std::vector<std::string>{"-O3"});
  EXPECT_EQ(s.plan_source, "fast.cu:2");
}

TEST(Plan, HalfAndBfloat16LiteralsRoundToNearestEven) {
  auto encode = [](const std::string& dtype, double v) {
    LaunchPlan p = parse_plan(
        nlohmann::json::parse(
            "{\"launches\": [{\"kernel\": \"k\", \"grid\": 1, \"block\": 1, \"args\": [{\"" +
            dtype + "\": " + std::to_string(v) + "}]}]}"),
        "p");
    auto b = p.launches[0].args[0].literal->encode();
    return static_cast<int>(b[0] | (b[1] << 8));
  };
  EXPECT_EQ(encode("float16", 1.0), 0x3c00);
  EXPECT_EQ(encode("float16", -2.0), 0xc000);
  EXPECT_EQ(encode("float16", 65504.0), 0x7bff);
  EXPECT_EQ(encode("bfloat16", 1.0), 0x3f80);
  EXPECT_EQ(encode("bfloat16", 3.0), 0x4040);
}

TEST(Plan, BadPlansNameTheField) {
  auto parse = [](const std::string& plan) {
    parse_single_file_solution(solution_text(plan), "k.cu");
  };
  expect_input_error(
      [&] { parse(R"J({"launches": [{"kernel": "k", "grd": [1], "block": [1], "args": []}]})J"); },
      "launches[0].grd", "did you mean 'grid'");
  expect_input_error(
      [&] { parse(R"J({"launches": [{"kernel": "k", "block": [1], "args": []}]})J"); },
      "launches[0].grid", "missing required field");
  expect_input_error(
      [&] {
        parse(
            R"J({"launches": [{"kernel": "k", "grid": [1, 1, 1, 1], "block": [1], "args": []}]})J");
      },
      "launches[0].grid", "1 to 3 values");
  expect_input_error(
      [&] {
        parse(R"J({"launches": [{"kernel": "k", "grid": ["cdiv(M"], "block": [1], "args": []}]})J");
      },
      "launches[0].grid[0]", "expected");
  expect_input_error(
      [&] {
        parse(R"J({"launches": [{"kernel": "k", "grid": [1.5], "block": [1], "args": []}]})J");
      },
      "launches[0].grid[0]", "expected an integer or an expression string");
  expect_input_error(
      [&] {
        parse(
            R"J({"launches": [{"kernel": "k", "grid": [1], "block": [1], "args": [{"int33": 1}]}]})J");
      },
      "launches[0].args[0].int33", "unknown dtype");
  expect_input_error(
      [&] {
        parse(
            R"J({"launches": [{"kernel": "k", "grid": [1], "block": [1], "args": [{"int8": 300}]}]})J");
      },
      "launches[0].args[0].int8", "does not fit");
  expect_input_error(
      [&] {
        parse(R"J({"launches": [{"kernel": "k", "grid": [1], "block": [1], "args": [3]}]})J");
      },
      "launches[0].args[0]",
      "a name, a typed literal like {\"int32\": 4} or {\"tensor_map\": NAME}");
  expect_input_error([&] { parse(R"J({"launches": {"kernel": "k"}})J"); }, "launches",
                     "expected an array");
  expect_input_error([&] { parse(R"J({"definition": 5, "launches": []})J"); }, "definition",
                     "expected a string");
  expect_input_error([&] { parse(R"J({})J"); }, "k.cu:2: launches", "missing required field");
}

// ---- shape dispatch: "variants" ----

constexpr const char* kLaunch =
    R"J({"kernel": "KERNEL", "grid": ["M"], "block": [128], "args": []})J";

std::string launch_of(const std::string& kernel) {
  std::string s = kLaunch;
  s.replace(s.find("KERNEL"), 6, kernel);
  return s;
}

TEST(PlanVariants, ParsesAndChoosesTheFirstVariantWhoseConditionHolds) {
  Solution s = parse_single_file_solution(solution_text(R"J({"variants": [
        {"when": "M <= 64", "launches": [)J" + launch_of("small") +
                                                        R"J(]},
        {"when": "M <= 1024 && N % 128 == 0 || min(M, N) == 7", "launches": [)J" +
                                                        launch_of("mid") + "," + launch_of("mid2") +
                                                        R"J(]},
        {"launches": [)J" + launch_of("large") + R"J(]}]})J"),
                                          "k.cu");
  const LaunchPlan& plan = s.plan;
  ASSERT_TRUE(plan.has_variants());
  EXPECT_TRUE(plan.launches.empty()) << "a dispatching plan's launches are read per workload";
  ASSERT_EQ(plan.variant_count(), 3u);
  EXPECT_EQ(plan.variants[0].when->text(), "M <= 64");
  EXPECT_FALSE(plan.variants[2].when.has_value());
  auto kernels_for = [&](std::int64_t m, std::int64_t n) {
    std::string out;
    for (const Launch& l : plan.launches_for({{"M", m}, {"N", n}})) out += l.kernel + " ";
    return out;
  };
  EXPECT_EQ(plan.variant_for({{"M", 1}, {"N", 256}}), 0u);
  EXPECT_EQ(kernels_for(64, 100), "small ");     // the first match wins: 64 also fits variant 1
  EXPECT_EQ(kernels_for(65, 256), "mid mid2 ");  // M <= 1024 and N % 128 == 0
  EXPECT_EQ(kernels_for(7, 7), "small ");        // precedence: && binds tighter than ||
  EXPECT_EQ(kernels_for(2000, 7), "mid mid2 ");  // min(2000, 7) == 7
  EXPECT_EQ(kernels_for(65, 100), "large ");     // N % 128 != 0
  EXPECT_EQ(kernels_for(4096, 4096), "large ");
  EXPECT_EQ(plan.variant_label(0), "0 (M <= 64)");
  EXPECT_EQ(plan.variant_label(2), "2 (otherwise)");
  LaunchPlan one = plan.resolved({{"M", 100}, {"N", 128}});
  EXPECT_FALSE(one.has_variants());
  ASSERT_EQ(one.launches.size(), 2u);
  EXPECT_EQ(one.launches[1].kernel, "mid2");
  // A condition that cannot be evaluated (an axis the workload lacks) is an error, not variant 0.
  EXPECT_THROW(plan.variant_for({{"N", 1}}), ExprError);
  // A plan without variants: one list, its own.
  Solution plain = parse_single_file_solution(
      solution_text(R"J({"launches": [)J" + launch_of("k") + "]}"), "k.cu");
  EXPECT_EQ(plain.plan.variant_count(), 1u);
  EXPECT_EQ(plain.plan.variant_for({}), 0u);
  EXPECT_EQ(plain.plan.launches_for({}).at(0).kernel, "k");
  EXPECT_EQ(plain.plan.variant_label(0), "");
}

TEST(PlanVariants, BadVariantsNameTheFieldAndColumn) {
  auto parse = [](const std::string& plan) {
    parse_single_file_solution(solution_text(plan), "k.cu");
  };
  const std::string l = launch_of("k");
  // Syntax errors name the field and the column of the expression.
  expect_input_error(
      [&] {
        parse(R"J({"variants": [{"when": "M <= ", "launches": [)J" + l + R"J(]}, {"launches": [)J" +
              l + "]}]}");
      },
      "variants[0].when", "column 6");
  expect_input_error(
      [&] {
        parse(R"J({"variants": [{"when": "M << 3", "launches": [)J" + l +
              R"J(]}, {"launches": [)J" + l + "]}]}");
      },
      "variants[0].when", "column 3: unexpected '<'");
  expect_input_error(
      [&] {
        parse(R"J({"variants": [{"when": "M <= 64; system(x)", "launches": [)J" + l +
              R"J(]}, {"launches": [)J" + l + "]}]}");
      },
      "variants[0].when", "unexpected ';'");
  // The last variant must be unconditional: a workload matching none would have no launches.
  expect_input_error(
      [&] {
        parse(R"J({"variants": [{"when": "M <= 64", "launches": [)J" + l +
              R"J(]}, {"when": "M > 64", "launches": [)J" + l + "]}]}");
      },
      "variants[1].when", "the last variant has no condition");
  // Only the last may be unconditional.
  expect_input_error(
      [&] {
        parse(R"J({"variants": [{"launches": [)J" + l + R"J(]}, {"launches": [)J" + l + "]}]}");
      },
      "variants[0].when", "only the last variant may have no condition");
  expect_input_error(
      [&] {
        parse(R"J({"launches": [)J" + l + R"J(], "variants": [{"launches": [)J" + l + "]}]}");
      },
      "variants", "either \"launches\" or \"variants\"");
  expect_input_error([&] { parse(R"J({"variants": []})J"); }, "variants", "no variants");
  expect_input_error([&] { parse(R"J({"variants": {"when": "M"}})J"); }, "variants",
                     "expected an array");
  expect_input_error([&] { parse(R"J({"variants": [{"when": 3, "launches": []}]})J"); },
                     "variants[0].when", "a condition string");
  expect_input_error(
      [&] { parse(R"J({"variants": [{"whn": "M < 2", "launches": []}, {"launches": []}]})J"); },
      "variants[0].whn", "did you mean 'when'");
  expect_input_error(
      [&] {
        parse(R"J({"variants": [{"when": "M < 2", "launches": [{"kernel": "k", "grid": [1],
              "block": [1], "args": [], "pdl": true}]}, {"launches": []}]})J");
      },
      "variants[0].launches[0].pdl", "launch 0 has none");
  expect_input_error([&] { parse(R"J({"variants": [{"when": "M < 2"}, {"launches": []}]})J"); },
                     "variants[0].launches", "missing required field");
}

// Integers of 2^63 and above are unsigned to the JSON parser; they must not wrap to negatives
// ("grid [18446744073709551615]" was "-1", "{int64: 2^64-1}" passed as -1).
TEST(Plan, IntegersBeyondInt64AreErrorsNotWrapped) {
  auto parse = [](const std::string& plan) {
    parse_single_file_solution(solution_text(plan), "k.cu");
  };
  expect_input_error(
      [&] {
        parse(
            R"J({"launches": [{"kernel": "k", "grid": [18446744073709551615], "block": [1],
                 "args": []}]})J");
      },
      "launches[0].grid[0]", "does not fit in a 64-bit signed integer");
  expect_input_error(
      [&] {
        parse(R"J({"launches": [{"kernel": "k", "grid": [1], "block": [1],
                 "args": [{"int64": 18446744073709551615}]}]})J");
      },
      "launches[0].args[0].int64", "does not fit");
  // 2^63 - 1 itself is a valid int64.
  LaunchPlan p = parse_single_file_solution(
                     solution_text(R"J({"launches": [{"kernel": "k", "grid": [1], "block": [1],
                                        "args": [{"int64": 9223372036854775807}]}]})J"),
                     "k.cu")
                     .plan;
  EXPECT_EQ(p.launches[0].args[0].literal->int_value, 9223372036854775807LL);
}

TEST(Plan, DeeplyNestedExpressionIsAnErrorNamingTheField) {
  std::string deep = std::string(50000, '(') + "1" + std::string(50000, ')');
  expect_input_error(
      [&] {
        parse_single_file_solution(solution_text(R"J({"launches": [{"kernel": "k", "grid": [")J" +
                                                 deep + R"J("], "block": [1], "args": []}]})J"),
                                   "k.cu");
      },
      "k.cu:2: launches[0].grid[0]", "nested more than 200 levels deep");
}

TEST(SingleFile, CommentErrors) {
  expect_input_error([] { load_solution(fixture("bad/no_kharness_comment.cu")); },
                     "no_kharness_comment.cu", "kharness");
  expect_input_error([] { load_solution(fixture("bad/empty.cu")); }, "empty.cu", "empty source");
  // The broken JSON is reported at the line of the file where the parser stopped.
  expect_input_error([] { load_solution(fixture("bad/broken_plan_json.cu")); },
                     "broken_plan_json.cu:11:", "not valid JSON");
  expect_input_error(
      [] { parse_single_file_solution("/* just a comment */\n__global__ void k() {}\n", "a.cu"); },
      "a.cu:1", "not a kharness plan");
  expect_input_error([] { parse_single_file_solution("/* kharness {\"launches\": []}\n", "a.cu"); },
                     "a.cu:1", "unterminated");
  expect_input_error(
      [] { parse_single_file_solution("/* kharness */\n__global__ void k() {}\n", "a.cu"); },
      "a.cu:1", "no JSON plan");
  expect_input_error([] { load_solution(fixture("bad/nonexistent.cu")); }, "nonexistent.cu",
                     "no such file");
  // A "/*" inside a string or a line comment does not start the plan comment.
  Solution s = parse_single_file_solution(
      "// see /* not this */\n/* kharness {\"launches\": []} */\n__device__ const char* p = "
      "\"/*\";\n",
      "b.cu");
  EXPECT_TRUE(s.plan.launches.empty());
}

TEST(Forms, SingleFileFolderAndFlashInferBenchLoadTheSamePlan) {
  Solution single = load_solution(fixture("good/rmsnorm_simple.cu"));
  EXPECT_EQ(single.form, SolutionForm::kSingleFile);
  EXPECT_EQ(single.sources.size(), 1u);
  EXPECT_EQ(single.plan.launches.at(0).kernel, "rmsnorm_kernel");

  Solution folder = load_solution(fixture("good/folder_solution"));
  EXPECT_EQ(folder.form, SolutionForm::kFolder);
  EXPECT_EQ(folder.name, "rmsnorm_folder");
  ASSERT_EQ(folder.sources.size(), 2u);
  EXPECT_EQ(folder.entry_source().path, "kernel.cu");
  EXPECT_EQ(folder.plan.definition, "rmsnorm_h4096");
  EXPECT_EQ(folder.plan.launches.at(0).args.size(), 5u);
  // Pointing at solution.json is the same as pointing at the folder.
  EXPECT_EQ(load_solution(fixture("good/folder_solution/solution.json")).name, "rmsnorm_folder");

  Solution fib = load_solution(fixture("good/fib_solution.json"));
  EXPECT_EQ(fib.form, SolutionForm::kFlashInferBench);
  EXPECT_EQ(fib.name, "rmsnorm_fib");
  EXPECT_EQ(fib.entry_source().path, "kernel.cu");
  EXPECT_EQ(fib.plan.definition, "rmsnorm_h4096");
  EXPECT_EQ(fib.plan.launches.at(0).kernel, "rmsnorm_kernel");
}

TEST(Forms, FlashInferBenchErrors) {
  testing::TempDir dir;
  auto write = [&](const std::string& text) {
    std::string path = (dir.path() / "s.json").string();
    write_file_atomic(path, text);
    return path;
  };
  expect_input_error(
      [&] {
        load_solution(
            write(R"J({"name": "t", "spec": {"language": "triton", "entry_point": "k.py::run"},
                                "sources": [{"path": "k.py", "content": "x"}]})J"));
      },
      "s.json: spec.language", "CUDA solutions");
  expect_input_error(
      [&] {
        load_solution(
            write(R"J({"name": "t", "spec": {"language": "cuda", "entry_point": "main.cu::run"},
                                "sources": [{"path": "k.cu", "content": "x"}]})J"));
      },
      "spec.entry_point", "'main.cu' is not one of the sources");
  expect_input_error(
      [&] {
        load_solution(write(R"J({"name": "t", "spec": {"language": "cuda"},
                                "sources": [{"path": "../k.cu", "content": "x"}]})J"));
      },
      "sources[0].path", "leaves the solution folder");
  expect_input_error(
      [&] {
        load_solution(write(R"J({"name": "t", "spec": {"language": "cuda"}, "sources": 3})J"));
      },
      "s.json: sources", "expected an array");
}

}  // namespace
}  // namespace kharness
