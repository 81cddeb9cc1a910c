// The model loader (kharness/model.hpp): the shipped Llama model and a small fixture load and
// resolve to the shapes each phase runs at; malformed model files are one-line errors naming the
// file and the field.
#include "kharness/model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kharness/device.hpp"
#include "kharness/error.hpp"
#include "kharness/model_check.hpp"
#include "test_util.hpp"

namespace kharness::model {
namespace {

namespace fs = std::filesystem;

const OperatorRegistry& registry() {
  static const OperatorRegistry r = OperatorRegistry::from_environment({});
  return r;
}

// The message of the Error that loading `file` throws; fails the test when it loads.
std::string load_error(const fs::path& file) {
  try {
    load_model(file, registry());
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage) << e.message();
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
    return e.message();
  }
  ADD_FAILURE() << file << " loaded";
  return {};
}

// tiny.json changed by `edit`, written to a temporary file, and the error loading it gives.
template <class F>
std::string edited_error(F&& edit) {
  nlohmann::ordered_json j;
  std::ifstream(testing::fixture("models/tiny.json")) >> j;
  edit(j);
  fs::path file =
      fs::temp_directory_path() / ("kharness_model_test_" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << j.dump(2);
  std::string message = load_error(file);
  fs::remove(file);
  // The message names the file before the field.
  EXPECT_EQ(message.rfind(file.string() + ": ", 0), 0U) << message;
  return message;
}

PhaseShape decode_shape(std::int64_t batch, std::int64_t kv) {
  PhaseShape s;
  s.phase = "decode";
  s.query_lens.assign(batch, 1);
  s.kv_lens.assign(batch, kv);
  return s;
}

TEST(Model, PhaseSymbolsOfDecodeAndRaggedPrefill) {
  Bindings d = decode_shape(16, 4096).symbols();
  EXPECT_EQ(d.at("batch"), 16);
  EXPECT_EQ(d.at("tokens"), 16);
  EXPECT_EQ(d.at("kv_tokens"), 16 * 4096);
  EXPECT_EQ(d.at("kv_pages"), 16 * 4096);
  EXPECT_EQ(d.at("max_seq_len"), 4096);

  PhaseShape p;
  p.phase = "prefill";
  p.query_lens = {100, 2000};
  p.kv_lens = {100, 2000};
  p.page_size = 16;
  Bindings b = p.symbols();
  EXPECT_EQ(b.at("batch"), 2);
  EXPECT_EQ(b.at("tokens"), 2100);
  EXPECT_EQ(b.at("kv_pages"), 7 + 125);  // pages are per sequence, rounded up
  EXPECT_EQ(b.at("max_seq_len"), 2000);
  EXPECT_EQ(p.label(), "prefill tokens=[100,2000]");
}

TEST(Model, ShippedLlamaLoadsAndBindsEveryPhaseShape) {
  Model m = load_model(find_model("llama-3.1-8b"), registry());
  EXPECT_EQ(m.name, "llama-3.1-8b");
  EXPECT_EQ(m.layers, 32);
  ASSERT_NE(m.find_phase("decode"), nullptr);
  ASSERT_NE(m.find_phase("prefill"), nullptr);
  EXPECT_EQ(m.find_phase("decode")->shapes.size(), 9U);  // 3 batch sizes x 3 KV lengths
  // Attention is one node with a definition per phase.
  std::vector<std::string> attention;
  for (const auto& n : m.nodes)
    if (n.name == "attn") attention.push_back(n.phase + ":" + n.definition);
  EXPECT_EQ(attention,
            (std::vector<std::string>{"decode:gqa_paged_decode_h32_kv8_d128_ps1",
                                      "prefill:gqa_paged_prefill_causal_h32_kv8_d128_ps1"}));

  LayerShapes d = resolve_shapes(m, decode_shape(16, 4096));
  EXPECT_EQ(d.node_axes.at("qkv").at("M"), 16);
  EXPECT_EQ(d.node_axes.at("attn").at("len_indptr"), 17);
  EXPECT_EQ(d.node_axes.at("attn").at("num_kv_indices"), 16 * 4096);
  EXPECT_EQ(d.node_axes.at("rope").at("max_seq_len"), 4096);
  // Weights take their shapes from the definitions they feed.
  EXPECT_EQ(d.tensors.at("weight.w_qkv").shape, (std::vector<std::int64_t>{6144, 4096}));
  EXPECT_EQ(d.tensors.at("weight.w_down").shape, (std::vector<std::int64_t>{4096, 14336}));
  EXPECT_EQ(d.tensors.at("weight.k_cache").shape,
            (std::vector<std::int64_t>{16 * 4096, 1, 8, 128}));
  EXPECT_EQ(d.tensors.at("weight.k_cache").dtype, DType::kBFloat16);
  EXPECT_EQ(d.tensors.at("attn.output").shape, (std::vector<std::int64_t>{16, 32, 128}));
  EXPECT_EQ(d.tensors.at("phase.positions").dtype, DType::kInt64);

  PhaseShape p;
  p.phase = "prefill";
  p.query_lens = {17, 250};
  p.kv_lens = p.query_lens;
  LayerShapes ps = resolve_shapes(m, p);
  EXPECT_EQ(ps.node_axes.at("attn").at("total_q"), 267);
  EXPECT_EQ(ps.tensors.at("phase.qo_indptr").shape, (std::vector<std::int64_t>{3}));
  EXPECT_EQ(ps.tensors.count("attn.lse"), 1U);
}

TEST(Model, FixtureLoads) {
  Model m = load_model(testing::fixture("models/tiny.json"), registry());
  EXPECT_EQ(m.nodes.size(), 2U);
  EXPECT_EQ(m.seed, 7U);
  EXPECT_EQ(m.find_phase("prefill")->shapes.front().query_lens, (std::vector<std::int64_t>{3, 5}));
  ASSERT_EQ(m.outputs.count("hidden"), 1U);
  EXPECT_TRUE(m.outputs.at("hidden").sum);
  EXPECT_EQ(m.outputs.at("hidden").cast, DType::kBFloat16);
}

TEST(Model, MalformedFixturesNameTheFileAndField) {
  struct Case {
    const char* file;
    const char* field;
    const char* what;
  };
  const Case cases[] = {
      {"unknown_definition.json", "nodes.proj.definition", "gemm_n4096_k4095"},
      {"unknown_tensor.json", "nodes.proj.inputs.A", "unknown tensor 'norm.out'"},
      {"axis_never_bound.json", "nodes.proj.axes", "var axis 'M' is never bound"},
      {"axis_bound_twice.json", "nodes.proj.axes.K", "bound twice"},
      {"dtype_mismatch.json", "nodes.proj.inputs.A",
       "dtype mismatch: norm.output is bfloat16, gemm_n4096_k4096.A is float16"},
      {"shape_mismatch.json", "nodes.proj.inputs.A", "shape mismatch at decode batch=1 kv=16"},
  };
  for (const auto& c : cases) {
    fs::path file = testing::fixture(std::string("models/") + c.file);
    std::string message = load_error(file);
    EXPECT_EQ(message.rfind(file.string() + ": " + c.field + ": ", 0), 0U) << message;
    EXPECT_NE(message.find(c.what), std::string::npos) << message;
  }
}

TEST(Model, StaticChecksOfEdgesAxesAndWeights) {
  using J = nlohmann::ordered_json;
  auto has = [](const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos;
  };
  std::string m = edited_error([](J& j) { j["nodes"]["norm"]["inputs"]["weight"] = "weight.nrm"; });
  EXPECT_TRUE(has(m, "nodes.norm.inputs.weight: unknown tensor 'weight.nrm' (no such weight)"))
      << m;
  m = edited_error([](J& j) { j["nodes"]["norm"]["inputs"]["hidden_states"] = "proj.C"; });
  EXPECT_TRUE(has(m, "unknown tensor 'proj.C' (that node runs later)")) << m;
  m = edited_error([](J& j) { j["nodes"]["proj"]["axes"]["M"] = "tokenz"; });
  EXPECT_TRUE(has(m, "nodes.proj.axes.M: 'tokenz' is no phase symbol")) << m;
  m = edited_error([](J& j) { j["nodes"]["proj"]["axes"]["Q"] = "tokens"; });
  EXPECT_TRUE(has(m, "nodes.proj.axes.Q: gemm_n4096_k4096 has no axis 'Q'")) << m;
  m = edited_error([](J& j) { j["nodes"]["proj"]["inputs"].erase("B"); });
  EXPECT_TRUE(has(m, "nodes.proj.inputs: gemm_n4096_k4096's input 'B' is fed by no edge")) << m;
  m = edited_error([](J& j) { j["nodes"]["proj"]["inputs"]["C"] = "input.hidden"; });
  EXPECT_TRUE(has(m, "nodes.proj.inputs.C: gemm_n4096_k4096 has no input 'C'")) << m;
  m = edited_error([](J& j) { j["outputs"]["hidden"].erase("cast"); });
  EXPECT_TRUE(has(m, "outputs.hidden.sum[1]: proj.C is float16, the first term bfloat16")) << m;
  m = edited_error([](J& j) { j["outputs"]["hidden"] = "proj.C"; });
  EXPECT_TRUE(has(m,
                  "outputs.hidden: proj.C is float16 [1, 4096], but input.hidden of the next "
                  "layer is bfloat16 [1, 4096]"))
      << m;
  m = edited_error([](J& j) {
    j["nodes"]["proj"]["inputs"]["A"] = J{{"from", "norm.output"}, {"columns", {0, 8192}}};
  });
  EXPECT_TRUE(has(m, "nodes.proj.inputs.A.columns: [0, 8192] is not a column range")) << m;
  m = edited_error([](J& j) { j["weights"]["unused"] = J::object(); });
  EXPECT_TRUE(has(m, "weights.unused: feeds no node input")) << m;
  m = edited_error([](J& j) { j["phases"]["train"] = J::object(); });
  EXPECT_TRUE(has(m, "phases.train: unknown phase (known: decode, prefill)")) << m;
  m = edited_error([](J& j) { j["phases"]["decode"]["batch_sizes"] = {1, 0}; });
  EXPECT_TRUE(has(m, "phases.decode.batch_sizes[1]: 0 is not a positive count")) << m;
  m = edited_error([](J& j) { j["nodes"]["proj"]["inputs"]["B"] = J{{"float32", 1.0}}; });
  EXPECT_TRUE(has(m, "nodes.proj.inputs.B: a literal, but B is a tensor")) << m;
  m = edited_error([](J& j) { j["nodez"] = J::object(); });
  EXPECT_TRUE(has(m, "nodez: unknown field (did you mean 'nodes'?)")) << m;
  m = edited_error([](J& j) {
    J form = j["nodes"]["proj"];
    j["nodes"]["proj"] = J{{"decode", form}};  // no prefill form: the output cannot be formed
  });
  EXPECT_TRUE(has(m,
                  "outputs.hidden.sum[1]: unknown tensor 'proj.C' (that node does not run in "
                  "prefill)"))
      << m;
}

// A definition's constraints over its axes hold at every phase shape.
TEST(Model, DefinitionConstraintsHoldAtEveryShape) {
  nlohmann::ordered_json j;
  std::ifstream(find_model("llama-3.1-8b")) >> j;
  j["nodes"]["attn"]["decode"]["axes"]["len_indptr"] = "batch";
  fs::path file = fs::temp_directory_path() /
                  ("kharness_model_test_llama_" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << j.dump(2);
  std::string message = load_error(file);
  fs::remove(file);
  EXPECT_NE(message.find(
                "nodes.attn.decode.axes: these bindings break gqa_paged_decode_h32_kv8_d128_ps1's "
                "constraint 'len_indptr == batch_size + 1' at decode batch=1 kv=1024"),
            std::string::npos)
      << message;
}

TEST(Model, FindModelByNameOrPath) {
  EXPECT_EQ(find_model("llama-3.1-8b").filename(), "llama-3.1-8b.json");
  fs::path tiny = testing::fixture("models/tiny.json");
  EXPECT_EQ(find_model(tiny.string()), tiny);
  try {
    find_model("llama-3.1-8c");
    ADD_FAILURE() << "found";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "--model: no model 'llama-3.1-8c' (did you mean 'llama-3.1-8b'?)");
  }
}

// The hidden-state comparison: a scale error shows as bias, rounding in both directions does not.
TEST(ModelCheckDeviation, BiasCosineAndRelativeError) {
  std::vector<double> want(1000), scaled(1000), noisy(1000);
  for (std::size_t i = 0; i < want.size(); ++i) {
    want[i] = std::sin(0.37 * static_cast<double>(i)) * 3.0;
    scaled[i] = want[i] * 1.005;
    noisy[i] = want[i] + (i % 2 == 0 ? 0.01 : -0.01);  // as often up as down
  }
  Deviation s = deviation(scaled, want);
  EXPECT_NEAR(s.bias, 0.005, 1e-12);
  EXPECT_NEAR(s.cosine, 1.0, 1e-12);  // a pure scale keeps the direction
  EXPECT_NEAR(s.max_rel_error, 0.005, 1e-9);
  Deviation n = deviation(noisy, want);
  EXPECT_LT(std::fabs(n.bias), 1e-4);
  EXPECT_NEAR(n.max_rel_error, 0.01 / 3.0, 1e-3);
  EXPECT_LT(n.cosine, 1.0);

  ModelTolerance tol;
  tol.max_rel_error = 0.02;
  tol.min_cosine = 0.9999;
  tol.max_bias = 0.0005;
  EXPECT_FALSE(within(s, tol));  // the bias alone fails it
  EXPECT_TRUE(within(n, tol));
  EXPECT_TRUE(within(deviation(want, want), tol));

  std::vector<double> bad = want;
  bad[7] = NAN;
  Deviation b = deviation(bad, want);
  EXPECT_FALSE(within(b, tol));
  EXPECT_TRUE(std::isinf(b.max_rel_error));
}

// The command: bad input is exit 2 before anything needs a GPU; without one, exit 3.
TEST(ModelCheckCli, BadInputIsExitTwoNamingTheField) {
  auto r = testing::kharness("model-check --model llama-3.1-8c");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--model: no model 'llama-3.1-8c' (did you mean 'llama-3.1-8b'?)"),
            std::string::npos)
      << r.out;
  r = testing::kharness("model-check --model llama-3.1-8b --phase train");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--phase: llama-3.1-8b has no phase 'train' (phases: decode, prefill)"),
            std::string::npos)
      << r.out;
  r = testing::kharness("model-check --model llama-3.1-8b --use rmsnorm_h4097=x.cu");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--use rmsnorm_h4097: no node or definition of that name in "
                       "llama-3.1-8b's decode phase (did you mean 'rmsnorm_h4096'?)"),
            std::string::npos)
      << r.out;
  r = testing::kharness("model-check --model llama-3.1-8b --use attn_norm=/no/such.cu");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--use attn_norm: no solution '/no/such.cu'"), std::string::npos) << r.out;
  r = testing::kharness("model-check --model '" +
                        testing::fixture("models/axis_bound_twice.json").string() + "'");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("nodes.proj.axes.K: bound twice"), std::string::npos) << r.out;
  r = testing::kharness("model-check --model llama-3.1-8b --layers 33");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--layers: expected 1 to 32"), std::string::npos) << r.out;
}

TEST(ModelCheckCli, WithoutAGpuExitsThree) {
  if (gpu_available()) GTEST_SKIP() << "a GPU is present: tests/gpu/model_check_test.cpp runs it";
  auto r = testing::kharness("model-check --model llama-3.1-8b --phase decode --layers 4");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_EQ(r.out.rfind("kharness: error: ", 0), 0U) << r.out;
}

}  // namespace
}  // namespace kharness::model
