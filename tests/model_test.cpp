// The model loader (kharness/model.hpp): the shipped Llama model and a small fixture load and
// resolve to the shapes each phase runs at; malformed model files are one-line errors naming the
// file and the field.
#include "kharness/model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kharness/device.hpp"
#include "kharness/error.hpp"
#include "kharness/model_check.hpp"
#include "kharness/report.hpp"
#include "model/check_worker.hpp"
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

// The shipped Llama model changed by `edit`, and the error loading it gives.
template <class F>
std::string edited_llama_error(F&& edit) {
  nlohmann::ordered_json j;
  std::ifstream(find_model("llama-3.1-8b")) >> j;
  edit(j);
  fs::path file = fs::temp_directory_path() /
                  ("kharness_model_test_llama_" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << j.dump(2);
  std::string message = load_error(file);
  fs::remove(file);
  EXPECT_EQ(message.rfind(file.string() + ": ", 0), 0U) << message;
  return message;
}

// A definition's constraints over its axes hold at every phase shape.
TEST(Model, DefinitionConstraintsHoldAtEveryShape) {
  std::string message = edited_llama_error([](nlohmann::ordered_json& j) {
    j["nodes"]["attn"]["decode"]["axes"]["len_indptr"] = "batch";
  });
  EXPECT_NE(message.find(
                "nodes.attn.decode.axes: these bindings break gqa_paged_decode_h32_kv8_d128_ps1's "
                "constraint 'len_indptr == batch_size + 1' at decode batch=1 kv=1024"),
            std::string::npos)
      << message;
}

// The layer's own k and v reach its attention: both attention forms append them to the caches.
TEST(Model, LlamaAppendsItsKeysAndValuesToThePagedCache) {
  Model m = load_model(find_model("llama-3.1-8b"), registry());
  int forms = 0;
  for (const auto& n : m.nodes) {
    if (n.name != "attn") continue;
    ++forms;
    const Edge& k = n.inputs.at("k_cache");
    ASSERT_TRUE(k.append) << n.phase;
    EXPECT_EQ(k.sources.at(0).text(), "weight.k_cache");
    EXPECT_EQ(k.append->sources.at(0).text(), "rope.k_out");
    const Edge& v = n.inputs.at("v_cache");
    ASSERT_TRUE(v.append) << n.phase;
    EXPECT_EQ(v.sources.at(0).text(), "weight.v_cache");
    EXPECT_EQ(v.append->sources.at(0).text(), "qkv.C");
    EXPECT_EQ(v.append->columns, std::make_pair(std::int64_t{5120}, std::int64_t{6144}));
    EXPECT_EQ(v.append->cast, DType::kBFloat16);
  }
  EXPECT_EQ(forms, 2);
}

TEST(Model, MalformedAppendEdgesNameTheField) {
  using J = nlohmann::ordered_json;
  auto has = [](const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos;
  };
  const std::string v = "nodes.attn.decode.inputs.v_cache";
  std::string m = edited_llama_error([](J& j) {
    j["nodes"]["attn"]["decode"]["inputs"]["v_cache"]["append"]["columns"] = {5120, 6000};
  });
  EXPECT_TRUE(has(m, v + ".append: qkv.C is [1, 880], but the cache takes one row of 1024 "
                         "elements for each of the 1 new tokens at decode batch=1 kv=1024"))
      << m;
  m = edited_llama_error(
      [](J& j) { j["nodes"]["attn"]["decode"]["inputs"]["v_cache"]["append"].erase("cast"); });
  EXPECT_TRUE(has(m, v + ".append: qkv.C is float16, the cache weight.v_cache is bfloat16")) << m;
  m = edited_llama_error([](J& j) {
    j["nodes"]["attn"]["decode"]["inputs"]["k_cache"] =
        J{{"from", "rope.q_out"}, {"append", "rope.k_out"}};
  });
  EXPECT_TRUE(has(m,
                  "nodes.attn.decode.inputs.k_cache: appends to rope.q_out, but the cache "
                  "appended to is a weight"))
      << m;
  m = edited_llama_error([](J& j) { j["weights"]["k_cache"]["shared"] = true; });
  EXPECT_TRUE(has(m,
                  "nodes.attn.decode.inputs.k_cache: appends to weight.k_cache, which is shared "
                  "by every layer"))
      << m;
  m = edited_llama_error(
      [](J& j) { j["nodes"]["attn"]["decode"]["inputs"]["k_cache"]["cast"] = "bfloat16"; });
  EXPECT_TRUE(has(m,
                  "nodes.attn.decode.inputs.k_cache.append: appends to a cache given as "
                  "\"from\" alone"))
      << m;
  m = edited_llama_error([](J& j) {
    j["nodes"]["attn"]["decode"]["inputs"]["k_cache"]["append"] = J{{"float32", 1.0}};
  });
  EXPECT_TRUE(has(m,
                  "nodes.attn.decode.inputs.k_cache.append: expected the tensor whose rows "
                  "are the new tokens"))
      << m;
  // A page size the cache's definition does not have.
  m = edited_llama_error([](J& j) { j["phases"]["decode"]["page_size"] = 16; });
  EXPECT_TRUE(has(m,
                  "nodes.attn.decode.inputs.k_cache: appends to weight.k_cache [64, 1, 8, 128], "
                  "which is no paged cache [pages, page_size=16, ...] at decode batch=1 "
                  "kv=1024"))
      << m;
}

// Where each new token's row goes: token i of sequence s at position kv_len - q_len + i, in page
// kv_indices[kv_indptr[s] + position / page_size], slot position % page_size.
TEST(Model, PhaseTablesPlaceNewTokensInTheirPages) {
  PhaseShape d;
  d.phase = "decode";
  d.query_lens = {1, 1};
  d.kv_lens = {6, 3};
  d.page_size = 4;
  PhaseTables t = phase_tables(d, 11);
  EXPECT_EQ(t.qo_indptr, (std::vector<std::int32_t>{0, 1, 2}));
  EXPECT_EQ(t.kv_indptr, (std::vector<std::int32_t>{0, 2, 3}));
  EXPECT_EQ(t.positions, (std::vector<std::int64_t>{5, 2}));
  std::vector<std::int32_t> sorted = t.kv_indices;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<std::int32_t>{0, 1, 2}));  // each page once
  // Sequence 0's token at position 5 is in its second page, slot 1; sequence 1's at 2, slot 2.
  EXPECT_EQ(t.append_rows,
            (std::vector<std::int64_t>{t.kv_indices[1] * 4 + 1, t.kv_indices[2] * 4 + 2}));
  // The same seed draws the same pages (both passes of a model check share them).
  EXPECT_EQ(phase_tables(d, 11).kv_indices, t.kv_indices);

  PhaseShape p;
  p.phase = "prefill";
  p.query_lens = {3, 6};
  p.kv_lens = p.query_lens;
  p.page_size = 4;
  t = phase_tables(p, 11);
  EXPECT_EQ(t.positions, (std::vector<std::int64_t>{0, 1, 2, 0, 1, 2, 3, 4, 5}));
  const std::int64_t a = t.kv_indices[0] * 4, b = t.kv_indices[1] * 4, c = t.kv_indices[2] * 4;
  EXPECT_EQ(t.append_rows,
            (std::vector<std::int64_t>{a, a + 1, a + 2, b, b + 1, b + 2, b + 3, c, c + 1}));
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
  r = testing::kharness("model-check --model llama-3.1-8b --time --timed-passes 0");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--timed-passes"), std::string::npos) << r.out;
  // A folder that cannot exist: it would sit inside a file.
  r = testing::kharness("model-check --model llama-3.1-8b --markdown '" +
                        testing::fixture("models/tiny.json").string() + "/v.md'");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--markdown"), std::string::npos) << r.out;
}

TEST(ModelCheckCli, WithoutAGpuExitsThree) {
  if (gpu_available()) GTEST_SKIP() << "a GPU is present: tests/gpu/model_check_test.cpp runs it";
  auto r = testing::kharness("model-check --model llama-3.1-8b --phase decode --layers 4");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_EQ(r.out.rfind("kharness: error: ", 0), 0U) << r.out;
}

TEST(ModelCheckCli, WorkerLimitsAreCheckedBeforeAnythingRuns) {
  auto r = testing::kharness("model-check --model llama-3.1-8b --timeout 0");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--timeout: must be > 0 seconds"), std::string::npos) << r.out;
  r = testing::kharness("model-check --model llama-3.1-8b --launch-timeout -1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--launch-timeout: must be > 0 seconds"), std::string::npos) << r.out;
}

// ---- model-check in the worker (model/check_worker.hpp) ----

// The request the parent sends and the worker reads: every option the run depends on survives
// the trip, paths made absolute; a request that is not kharness's is an internal error.
TEST(ModelCheckWorker, TheRequestRoundTrips) {
  const Model m = load_model(find_model("llama-3.1-8b"), registry());
  CheckOptions o;
  o.phase = "prefill";
  o.layers = 3;
  o.use["rmsnorm_h4096"] = "relative/norm.cu";
  o.use["down"] = "/abs/down.cu";
  o.compile = make_compile_options("sm_90a", false);
  o.compile.cache_dir = "/tmp/kharness-cache";
  o.time = true;
  o.timed_passes = 7;
  o.timeout_seconds = 123;
  o.launch_timeout_seconds = 2.5;
  o.operators_dirs = {testing::fixture("defs")};
  const nlohmann::json j = model_check_request_json(m, o);
  EXPECT_EQ(j["task"], "model_check");
  const ModelCheckTask t = model_check_request_from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(t.model_file, fs::absolute(m.file));
  EXPECT_EQ(t.options.phase, "prefill");
  EXPECT_EQ(t.options.layers, 3);
  ASSERT_EQ(t.options.use.size(), 2U);
  EXPECT_EQ(t.options.use.at("rmsnorm_h4096"), fs::absolute("relative/norm.cu"));
  EXPECT_EQ(t.options.use.at("down"), fs::path("/abs/down.cu"));
  EXPECT_EQ(t.options.compile.arch, "sm_90a");
  EXPECT_FALSE(t.options.compile.use_cache);
  EXPECT_EQ(t.options.compile.cache_dir, fs::path("/tmp/kharness-cache"));
  EXPECT_TRUE(t.options.time);
  EXPECT_EQ(t.options.timed_passes, 7);
  EXPECT_DOUBLE_EQ(t.options.timeout_seconds, 123);
  EXPECT_DOUBLE_EQ(t.options.launch_timeout_seconds, 2.5);
  ASSERT_EQ(t.options.operators_dirs.size(), 1U);
  EXPECT_EQ(t.options.operators_dirs[0], fs::absolute(testing::fixture("defs")));
  try {
    model_check_request_from_json({{"task", "model_check"}, {"phase", 3}});
    ADD_FAILURE() << "a malformed request was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kInternal);
  }
}

// A verdict as the worker writes it, with a timed shape, a failed one and a NaN deviation.
CheckResult sample_result() {
  CheckResult r;
  r.model = "llama-3.1-8b";
  r.phase = "decode";
  r.layers = 2;
  r.solutions = {{"attn_norm", "/s/norm.cu"}, {"qkv", "reference"}};
  ShapeResult ok;
  ok.label = "decode batch=1 kv=1024";
  ok.passed = true;
  ok.layers = {{0, {0.001, 0.99999, 0.0001}}, {1, {0.002, 0.99998, -0.0002}}};
  ok.nodes = {{0, "attn_norm", "rmsnorm_h4096", {0.003, 0.9999, 0.0001}, ""}};
  std::vector<PassTiming> p = {{2.0, {{"attn_norm", 0.1}, {"qkv", 1.8}}}};
  ok.timing = summarize_timing({{"attn_norm", "rmsnorm_h4096"}, {"qkv", "gemm_n6144_k4096"}},
                               {"attn_norm"}, p, p);
  ShapeResult bad;
  bad.label = "decode batch=16 kv=1024";
  bad.layers = {{0, {INFINITY, -1, INFINITY}}};
  bad.nodes = {{0, "attn_norm", "rmsnorm_h4096", {0.1, 0.9, 0.01}, "tolerance: 12 of 4096"}};
  bad.failing_layer = 0;
  bad.failing_node = "attn_norm";
  bad.failing_definition = "rmsnorm_h4096";
  bad.reason = "node attn_norm breaks its own operator check";
  r.shapes = {ok, bad};
  r.status = Status::kIncorrectNumerical;
  return r;
}

TEST(ModelCheckWorker, TheVerdictRoundTrips) {
  const CheckResult r = sample_result();
  const nlohmann::json j = to_json(r);
  EXPECT_EQ(j["status"], "INCORRECT_NUMERICAL");
  // Through text, as the protocol line carries it: the NaN deviation comes back as infinite.
  const CheckResult back = check_result_from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(to_json(back), j);
  EXPECT_EQ(back.status, Status::kIncorrectNumerical);
  ASSERT_EQ(back.shapes.size(), 2U);
  EXPECT_TRUE(std::isinf(back.shapes[1].layers[0].hidden.max_rel_error));
  EXPECT_EQ(back.shapes[1].nodes[0].own_failure, "tolerance: 12 of 4096");
  ASSERT_TRUE(back.shapes[0].timing.has_value());
  EXPECT_EQ(back.shapes[0].timing->nodes.size(), 2U);
  try {
    check_result_from_json({{"model", "m"}, {"phase", "decode"}, {"layers", "two"}});
    ADD_FAILURE() << "a malformed verdict was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_NE(e.message().find("model-check verdict"), std::string::npos) << e.message();
  }
}

// What the parent makes of the worker's lines and its end, as `check` does: the worker's own
// verdict when it finished; a hang (its launch watchdog) or the whole limit is TIMEOUT, a crash
// RUNTIME_ERROR, each naming the shape that was running and keeping the shapes that ended.
TEST(ModelCheckWorker, AReplyBecomesTheVerdictCrashesAndHangsIncluded) {
  const CheckResult full = sample_result();
  CheckResult head = full;
  head.shapes.clear();
  CheckOptions o;
  o.launch_timeout_seconds = 3;
  o.timeout_seconds = 600;
  CheckResult base;
  base.model = "llama-3.1-8b";
  base.phase = "decode";
  base.layers = 2;
  auto reply = [&](bool finished_all) {
    worker::WorkerReply w;
    w.process.started = true;
    w.process.exit_code = 0;
    w.events.push_back({{"event", "begin"}, {"result", to_json(head)}});
    w.events.push_back({{"event", "started"}, {"shape", full.shapes[0].label}});
    w.events.push_back({{"event", "shape"}, {"result", to_json(full.shapes[0])}});
    w.events.push_back({{"event", "started"}, {"shape", full.shapes[1].label}});
    if (finished_all) {
      w.events.push_back({{"event", "shape"}, {"result", to_json(full.shapes[1])}});
      w.events.push_back({{"event", "model_check"}, {"result", to_json(full)}});
    }
    return w;
  };
  // Finished: the worker's verdict as it is.
  CheckResult r = result_from_worker(base, o, reply(true));
  EXPECT_EQ(to_json(r), to_json(full));

  // Its launch watchdog fired inside the second shape.
  worker::WorkerReply hung = reply(false);
  hung.process.exit_code = 124;
  hung.hang = nlohmann::json{{"event", "hang"},
                             {"seconds", 3.1},
                             {"limit_seconds", 3},
                             {"call", "cuStreamSynchronize"},
                             {"label", "model-check solution: launch 0 (kernel rmsnorm_kernel)"}};
  r = result_from_worker(base, o, hung);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.status, Status::kTimeout);
  EXPECT_EQ(r.error,
            "model-check solution: launch 0 (kernel rmsnorm_kernel) did not finish within 3 s "
            "(launch watchdog, waiting in cuStreamSynchronize) while shape decode batch=16 "
            "kv=1024 was running");
  EXPECT_EQ(r.solutions, full.solutions);  // from the begin line
  ASSERT_EQ(r.shapes.size(), 2U);
  EXPECT_TRUE(r.shapes[0].passed);
  EXPECT_EQ(r.shapes[1].label, "decode batch=16 kv=1024");
  EXPECT_FALSE(r.shapes[1].passed);
  EXPECT_EQ(r.shapes[1].reason, r.error);

  // Killed at the whole worker's limit.
  worker::WorkerReply late = reply(false);
  late.process.timed_out = true;
  late.process.signal = 9;
  r = result_from_worker(base, o, late);
  EXPECT_EQ(r.status, Status::kTimeout);
  EXPECT_EQ(r.error,
            "no model-check verdict within 600 s while shape decode batch=16 kv=1024 was running");

  // Crashed (a trap that took the process down) before its first line: the parent's own head.
  worker::WorkerReply crashed;
  crashed.process.started = true;
  crashed.process.signal = 11;
  r = result_from_worker(base, o, crashed);
  EXPECT_EQ(r.status, Status::kRuntimeError);
  EXPECT_EQ(r.model, "llama-3.1-8b");
  EXPECT_TRUE(r.shapes.empty());
  EXPECT_EQ(r.error.rfind("the model-check worker killed by SIGSEGV", 0), 0U) << r.error;

  // A verdict line from a worker that then did not exit cleanly is not trusted.
  worker::WorkerReply odd = reply(true);
  odd.process.exit_code = 1;
  EXPECT_EQ(result_from_worker(base, o, odd).status, Status::kRuntimeError);
}

// A model-check is a task of the one GPU worker that evaluations and profiles use (`__worker`):
// it reads the request, loads the model again (a bad model file is its error line, exit 2) and
// without a GPU answers exit 3.
TEST(ModelCheckWorker, TheWorkerServesTheModelTask) {
  if (gpu_available()) GTEST_SKIP() << "a GPU is present: tests/gpu/model_check_test.cpp runs it";
  const Model m = load_model(testing::fixture("models/tiny.json"), registry());
  CheckOptions o;
  o.layers = 1;
  nlohmann::json request = model_check_request_json(m, o);
  auto serve = [](const nlohmann::json& q) {
    return testing::run_command("echo '" + q.dump() + "' | '" + KHARNESS_BINARY +
                                "' __worker 2>/dev/null");
  };
  auto r = serve(request);
  EXPECT_EQ(r.exit_code, 3) << r.out;
  nlohmann::json line = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(line.is_discarded()) << r.out;
  EXPECT_EQ(line["event"], "error");
  EXPECT_EQ(line["code"], 3);
  request["model_file"] = "/no/such/model.json";
  r = serve(request);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  line = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(line.is_discarded()) << r.out;
  EXPECT_EQ(line["code"], 2);
}

// The arithmetic of --time on given numbers: medians, shares of the span, speedups and the 5%
// check.
TEST(ModelTiming, MediansSharesSpeedupsAndTheSumCheck) {
  const std::vector<std::pair<std::string, std::string>> nodes = {{"norm", "rmsnorm_h4096"},
                                                                  {"proj", "gemm_n4096_k4096"}};
  // Three passes each; the medians are the middle values whatever the order.
  std::vector<PassTiming> base = {{1.00e-3, {{"norm", 0.30e-3}, {"proj", 0.68e-3}}},
                                  {1.20e-3, {{"norm", 0.50e-3}, {"proj", 0.70e-3}}},
                                  {0.90e-3, {{"norm", 0.20e-3}, {"proj", 0.66e-3}}}};
  std::vector<PassTiming> sub = {{0.80e-3, {{"norm", 0.10e-3}, {"proj", 0.68e-3}}},
                                 {0.78e-3, {{"norm", 0.09e-3}, {"proj", 0.67e-3}}},
                                 {0.90e-3, {{"norm", 0.12e-3}, {"proj", 0.70e-3}}}};
  LayerTiming t = summarize_timing(nodes, {"norm"}, base, sub);
  EXPECT_EQ(t.passes, 3);
  EXPECT_DOUBLE_EQ(t.baseline_seconds, 1.00e-3);
  EXPECT_DOUBLE_EQ(t.seconds, 0.80e-3);
  EXPECT_DOUBLE_EQ(t.speedup, 1.25);
  ASSERT_EQ(t.nodes.size(), 2U);
  EXPECT_EQ(t.nodes[0].node, "norm");
  EXPECT_TRUE(t.nodes[0].substituted);
  EXPECT_FALSE(t.nodes[1].substituted);
  EXPECT_DOUBLE_EQ(t.nodes[0].baseline_seconds, 0.30e-3);
  EXPECT_DOUBLE_EQ(t.nodes[0].seconds, 0.10e-3);
  EXPECT_NEAR(t.nodes[0].speedup, 3.0, 1e-12);
  EXPECT_NEAR(t.nodes[0].baseline_share, 0.30, 1e-12);
  EXPECT_NEAR(t.nodes[0].share, 0.125, 1e-12);
  EXPECT_NEAR(t.nodes[1].share, 0.68e-3 / 0.80e-3, 1e-12);
  // 0.98 ms of 1.00 ms and 0.78 ms of 0.80 ms: both within 5%.
  EXPECT_NEAR(t.baseline_node_sum, 0.98e-3, 1e-15);
  EXPECT_NEAR(t.node_sum, 0.78e-3, 1e-15);
  EXPECT_TRUE(t.sums_match);

  // Gaps between kernels: the substituted layer's nodes cover 0.78 of a 0.90 ms span (87%).
  for (auto& p : sub) p.span_seconds = 0.90e-3;
  t = summarize_timing(nodes, {"norm"}, base, sub);
  EXPECT_FALSE(t.sums_match);
  // Just inside and just outside 5%, on either side.
  std::vector<PassTiming> one = {{1.0, {{"norm", 0.5}, {"proj", 0.449}}}};
  EXPECT_FALSE(summarize_timing(nodes, {}, one, one).sums_match);  // 94.9%
  one = {{1.0, {{"norm", 0.5}, {"proj", 0.451}}}};
  EXPECT_TRUE(summarize_timing(nodes, {}, one, one).sums_match);  // 95.1%
  one = {{1.0, {{"norm", 0.5}, {"proj", 0.549}}}};
  EXPECT_TRUE(summarize_timing(nodes, {}, one, one).sums_match);  // 104.9%
  one = {{1.0, {{"norm", 0.5}, {"proj", 0.551}}}};
  EXPECT_FALSE(summarize_timing(nodes, {}, one, one).sums_match);  // 105.1%

  EXPECT_THROW(summarize_timing(nodes, {}, {}, sub), std::invalid_argument);
  std::vector<PassTiming> missing = {{1.0, {{"norm", 0.5}}}};
  EXPECT_THROW(summarize_timing(nodes, {}, missing, missing), std::invalid_argument);
}

TEST(ModelTiming, JsonOfALayerTiming) {
  std::vector<PassTiming> p = {{2.0, {{"a", 1.0}, {"b", 0.95}}}};
  LayerTiming t = summarize_timing({{"a", "x"}, {"b", "y"}}, {"b"}, p, p);
  nlohmann::json j = to_json(t);
  EXPECT_EQ(j["passes"], 1);
  EXPECT_EQ(j["sums_match"], true);
  ASSERT_EQ(j["nodes"].size(), 2U);
  EXPECT_EQ(j["nodes"][1]["node"], "b");
  EXPECT_EQ(j["nodes"][1]["substituted"], true);
  EXPECT_DOUBLE_EQ(j["nodes"][1]["share"].get<double>(), 0.475);
}

nlohmann::json timed_verdict() {
  nlohmann::json j;
  std::ifstream(testing::fixture("models/verdict_timed.json")) >> j;
  return j;
}

// The reports of a fixed verdict: the Markdown summary names each shape's outcome and failure,
// and the timed shape's layer speedup, node table and the 5% check.
TEST(ModelReport, MarkdownOfATimedVerdict) {
  std::string md = report::model_markdown(timed_verdict(), "verdict_timed.json");
  auto has = [&md](const std::string& part) { return md.find(part) != std::string::npos; };
  EXPECT_TRUE(has("## model-check llama-3.1-8b decode: FAILED")) << md;
  EXPECT_TRUE(
      has("4 layers. Tolerance on the hidden state: max_rel_error 0.02, min cosine 0.9999, "
          "max |bias| 0.0005."))
      << md;
  EXPECT_TRUE(has("- `attn_norm` = `solutions/rmsnorm_fast.cu`")) << md;
  EXPECT_FALSE(has("`qkv` = `reference`")) << md;
  EXPECT_TRUE(has("| decode batch=16 kv=4096 | ok | 0.004 | 0.999995 | -0.00011 |  |")) << md;
  // A NaN hidden state's deviations are null in JSON: shown as inf.
  EXPECT_TRUE(
      has("| decode batch=64 kv=8192 | FAILED | inf | -1.000000 | inf | node `attn_norm` "
          "(rmsnorm_h4096) in layer 0: node attn_norm"))
      << md;
  EXPECT_TRUE(has("### Layer time: llama-3.1-8b decode batch=16 kv=4096")) << md;
  EXPECT_TRUE(
      has("Baseline layer 1.000 ms, substituted layer 0.800 ms: **1.250x** (median of 20 "
          "passes each)."))
      << md;
  EXPECT_TRUE(
      has("| attn_norm (substituted) | rmsnorm_h4096 | 0.300 ms | 0.100 ms | 3.00x | 30.0% "
          "| 12.5% |"))
      << md;
  EXPECT_TRUE(has("| qkv | gemm_n6144_k4096 | 0.400 ms | 0.400 ms | 1.00x | 40.0% | 50.0% |"))
      << md;
  EXPECT_TRUE(
      has("Node times sum to 98.0% of the baseline span and 97.5% of the substituted "
          "span: within 5%."))
      << md;
  // One table row per shape and node, no stray line breaks inside cells.
  EXPECT_EQ(std::count(md.begin(), md.end(), '|') % 2, 0);
}

TEST(ModelReport, LayerTimingsAndTheHtmlStackedBars) {
  std::vector<report::HtmlLayerTiming> layers =
      report::layer_timings(timed_verdict(), "verdict_timed.json");
  ASSERT_EQ(layers.size(), 1U);  // the failed shape was not timed
  EXPECT_EQ(layers[0].title, "llama-3.1-8b decode batch=16 kv=4096");
  EXPECT_DOUBLE_EQ(layers[0].baseline_span, 0.001);
  ASSERT_EQ(layers[0].nodes.size(), 3U);
  EXPECT_TRUE(layers[0].nodes[0].substituted);
  EXPECT_DOUBLE_EQ(layers[0].nodes[2].seconds, 0.00028);

  report::HtmlReport html;
  html.title = "model <check>";
  html.generated_at = "2026-01-01T00:00:00Z";
  html.layers = layers;
  std::string page = report::to_html(html);
  EXPECT_NE(page.find("Layer time by operator"), std::string::npos);
  EXPECT_NE(page.find("1.000 ms before, 0.800 ms after (1.250x)"), std::string::npos) << page;
  EXPECT_NE(page.find("attn_norm *"), std::string::npos);  // the substituted node in the legend
  // No archive sections in a report of model layers alone.
  EXPECT_EQ(page.find("Best per operator"), std::string::npos);
  testing::TempDir tmp;
  fs::path file = tmp.path() / "model.html";
  std::ofstream(file) << page;
  if (testing::run_command("python3 -c 'import xml.dom.minidom' 2>/dev/null").exit_code == 0) {
    // Well-formed XML; one chart; two bars of three nodes plus three legend swatches.
    auto r = testing::run_command(
        "python3 -c 'import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); "
        "print(len(d.getElementsByTagName(\"svg\")), len(d.getElementsByTagName(\"rect\")))' '" +
        file.string() + "' 2>&1");
    EXPECT_EQ(r.out, "1 9\n") << page;
  }
}

TEST(ModelReport, AMalformedVerdictNamesTheField) {
  nlohmann::json j = timed_verdict();
  j["shapes"][0]["timing"]["nodes"][1].erase("seconds");
  try {
    report::layer_timings(j, "v.json");
    ADD_FAILURE() << "read";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "v.json: shapes[0].timing.nodes[1].seconds: missing required field");
  }
  j = timed_verdict();
  j["shapes"][0]["timing"]["baseline_seconds"] = "fast";
  try {
    report::model_markdown(j, "v.json");
    ADD_FAILURE() << "read";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(),
              "v.json: shapes[0].timing.baseline_seconds: expected a number, got string");
  }
}

}  // namespace
}  // namespace kharness::model
