// The reference families added for FlashInfer-Bench's catalogue: causal prefill (GQA
// paged with page size 1 and 64, GQA ragged, MLA paged ps1/ps64, MLA ragged), sampling from
// probabilities (top-k, top-p, top-k-then-top-p), the MoE variants (DeepSeek routing with one
// group, renormalize routing, TensorRT-LLM's fp4-named and fp8 per-tensor MoEs, routed or not),
// GDN multi-token prediction and Mamba2 selective state update. With the FlashInfer-Bench snapshot
// (../shared/fib; skipped without it: nothing of it is copied into the repository), one
// definition per family: it finds its family, is runnable, has workloads (shipped or synthesized,
// saying which in their provenance), its index inputs made as the correctness stage makes them
// are valid for causal prefill (offsets that end at their totals, every request's KV covering its
// queries, distinct pages in the cache), and `kharness operators check` compiles its reference,
// seed and (where the family has one) baseline with NVRTC for sm_90a (no GPU needed). The
// generators and workload synthesis these rest on are tested without the snapshot. The
// references' numerics are checked against double-precision host implementations in
// tests/gpu/prefill_reference_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kharness/definition.hpp"
#include "kharness/error.hpp"
#include "kharness/family_source.hpp"
#include "kharness/numeric.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"
#include "kharness/text.hpp"
#include "test_util.hpp"
#include "verify/index_inputs.hpp"

namespace kharness {
namespace {

using testing::kharness;

struct Family {
  const char* family;
  const char* definition;  // a FlashInfer-Bench definition of the family
  bool prefill;
  bool seed = true;
  bool baseline = false;  // the family ships a baseline, which must compile
};

const Family kFamilies[] = {
    {"gqa_paged_prefill_causal", "gqa_paged_prefill_causal_h32_kv8_d128_ps64", true, true, true},
    {"gqa_paged_prefill_causal_ps1", "gqa_paged_prefill_causal_h32_kv16_d128_ps1", true, true,
     true},
    {"gqa_ragged_prefill_causal", "gqa_ragged_prefill_causal_h32_kv16_d128", true, true, true},
    {"mla_paged_prefill_causal", "mla_paged_prefill_causal_h16_ckv512_kpe64_ps64", true, true,
     true},
    {"mla_paged_prefill_causal_ps1", "mla_paged_prefill_causal_h8_ckv512_kpe64_ps1", true, true,
     true},
    {"mla_ragged_prefill_causal", "mla_ragged_prefill_causal_h16_qk192_vo128", true, true, true},
    {"top_k_sampling_from_probs", "top_k_sampling_from_probs_v128256", false, true, true},
    {"top_p_sampling_from_probs", "top_p_sampling_from_probs_v128256", false, true, true},
    {"top_k_top_p_sampling_from_probs", "top_k_top_p_sampling_from_probs_v128256", false, true,
     true},
    {"moe_fp8_block_scale_ds_routing_topk8_ng1_kg1",
     "moe_fp8_block_scale_ds_routing_topk8_ng1_kg1_e48_h7168_i2048", false},
    {"moe_fp8_block_scale_renorm_topk8", "moe_fp8_block_scale_renorm_topk8_e128_h2048_i768", false},
    {"moe_fp8_block_scale_renorm_topk10", "moe_fp8_block_scale_renorm_topk10_e128_h2048_i512",
     false},
    {"trtllm_fp4_block_scale_moe", "trtllm_fp4_block_scale_moe_topk8_e128_h2048_i768", false, true,
     true},
    {"trtllm_fp4_block_scale_moe_topk1", "trtllm_fp4_block_scale_moe_topk1_e16_h5120_i8192", false,
     true, true},
    {"trtllm_fp4_block_scale_routed_moe", "trtllm_fp4_block_scale_routed_moe_topk8_e128_h2048_i768",
     false, true, true},
    {"trtllm_fp4_block_scale_routed_moe_topk1",
     "trtllm_fp4_block_scale_routed_moe_topk1_e16_h5120_i8192", false, true, true},
    {"trtllm_fp8_per_tensor_scale_moe", "trtllm_fp8_per_tensor_scale_moe_topk8_e128_h2048_i768",
     false, true, true},
    {"trtllm_fp8_per_tensor_scale_moe_topk1",
     "trtllm_fp8_per_tensor_scale_moe_topk1_e16_h5120_i8192", false, true, true},
    {"gdn_mtp", "gdn_mtp_qk4_v8_d128_k_last", false, true, true},
    {"mamba_ssu_decode", "mamba_ssu_decode_h64_d64_s128_ng4", false, true, true},
    {"gqa_paged_decode_ps64", "gqa_paged_decode_h32_kv8_d128_ps64", false, true, true},
    {"mla_paged_decode_ps64", "mla_paged_decode_h16_ckv512_kpe64_ps64", false, true, true},
};

std::filesystem::path fib_dir() { return std::filesystem::path(KHARNESS_FIB_DIR); }
bool have_fib() { return std::filesystem::exists(fib_dir() / "definitions"); }

std::vector<std::int64_t> as_ints(const TensorSpec& t, const std::vector<std::uint8_t>& bytes) {
  const std::size_t size = dtype_size(t.dtype);
  std::vector<std::int64_t> out(bytes.size() / size);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::int64_t>(to_double(t.dtype, &bytes[i * size]));
  return out;
}

std::int64_t axis_or(const Bindings& axes, const char* name, std::int64_t fallback) {
  auto it = axes.find(name);
  return it == axes.end() ? fallback : it->second;
}

// Every workload's index inputs, made as the correctness stage makes them (same shapes, same
// coupling order), are valid; for causal prefill (`prefill`) also for the attention they feed:
// offsets that end at their totals, every request's KV covering its queries, distinct pages.
void expect_valid_index_inputs(const Operator& op, bool prefill) {
  const KharnessSpec& k = op.definition.kharness;
  const std::size_t checked = op.workloads.size();
  for (std::size_t wi = 0; wi < checked; ++wi) {
    const Workload& w = op.workloads[wi];
    SCOPED_TRACE(w.uuid);
    const Bindings axes = w.bindings(op.definition);
    verify::IndexValues made;
    std::map<std::string, std::vector<std::int64_t>> values;
    bool safetensors = false;
    for (const TensorSpec& t : op.definition.inputs) {
      if (t.is_scalar()) continue;
      if (w.inputs.at(t.name).kind == WorkloadInput::Kind::kSafetensors) safetensors = true;
      auto g = k.inputs.find(t.name);
      if (g == k.inputs.end()) {
        EXPECT_TRUE(is_floating(t.dtype)) << t.name << ": an integer input with no generator";
        continue;
      }
      if (!verify::is_index_role(g->second.distribution) ||
          g->second.distribution == "probability_rows")
        continue;
      std::uint64_t count = 1;
      for (const auto& dim : *t.shape) count *= static_cast<std::uint64_t>(axes.at(dim));
      std::vector<std::uint8_t> bytes;
      ASSERT_NO_THROW(bytes = verify::make_index_input(t, g->second, axes, count, 7, &made))
          << t.name;
      values[t.name] = as_ints(t, bytes);
    }
    if (!prefill || safetensors) continue;
    // Causal prefill: offsets end at their totals, every request's KV covers its queries.
    const auto& qo = values.at("qo_indptr");
    const auto& kv = values.at("kv_indptr");
    ASSERT_EQ(qo.size(), kv.size());
    EXPECT_EQ(qo.front(), 0);
    EXPECT_EQ(qo.back(), axes.at("total_q"));
    const std::int64_t page_size = axis_or(axes, "page_size", 1);
    const bool paged = values.count("kv_indices") > 0;
    if (paged) EXPECT_EQ(kv.back(), axes.at("num_kv_indices"));
    for (std::size_t b = 0; b + 1 < qo.size(); ++b) {
      const std::int64_t q_len = qo[b + 1] - qo[b];
      std::int64_t kv_len = kv[b + 1] - kv[b];
      ASSERT_GE(q_len, 0);
      ASSERT_GE(kv_len, 0);
      if (paged && values.count("kv_last_page_len") && kv_len > 0) {
        const std::int64_t last = values.at("kv_last_page_len")[b];
        EXPECT_GE(last, 1);
        EXPECT_LE(last, page_size);
        kv_len = (kv_len - 1) * page_size + last;
      } else if (paged) {
        kv_len *= page_size;
      }
      EXPECT_GE(kv_len, q_len) << "request " << b << " has queries that see no key";
    }
    if (paged) {
      const auto& pages = values.at("kv_indices");
      std::set<std::int64_t> distinct(pages.begin(), pages.end());
      EXPECT_EQ(distinct.size(), pages.size());
      if (!pages.empty()) {
        EXPECT_GE(*distinct.begin(), 0);
        EXPECT_LT(*distinct.rbegin(), axes.at("num_pages"));
      }
    }
  }
}

TEST(FibFamilies, EachFindsItsFamilyWithWorkloadsAndValidIndexInputs) {
  if (!have_fib()) GTEST_SKIP() << "no FlashInfer-Bench snapshot at " << fib_dir();
  OperatorRegistry registry = OperatorRegistry::from_environment({fib_dir()});
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.definition);
    const Operator op = registry.load(f.definition);
    EXPECT_EQ(op.reference->parent_path().filename(), f.family);
    EXPECT_EQ(op.seed.has_value(), f.seed);
    if (op.seed) EXPECT_EQ(op.seed->parent_path().filename(), f.family);
    EXPECT_EQ(op.definition.family(), f.family);  // the family found names it (skills, profiles)
    const Runnability r = assess(op);
    EXPECT_TRUE(r.runnable) << r.reason;
    ASSERT_FALSE(op.workloads.empty());
    for (const Workload& w : op.workloads) {
      // Synthesized exactly when none shipped, and then it says so.
      EXPECT_EQ(w.provenance.empty(), op.workloads_file.has_value()) << w.uuid;
      if (!w.provenance.empty()) {
        EXPECT_NE(w.provenance.find("synthesized"), std::string::npos);
      }
    }
    expect_valid_index_inputs(op, f.prefill);
  }
}

// Every paged attention definition of the snapshot (GQA and MLA, decode and causal prefill, page
// sizes 1 and 64) makes its index inputs. Six GQA ps64 prefill definitions shape kv_last_page_len
// [len_indptr] (one more than the requests; the others [batch_size]): its generator refused them
// ("needs 2 + 1 offsets in its indptr and cover") before any launch.
TEST(FibFamilies, EveryPagedDefinitionMakesValidIndexInputs) {
  if (!have_fib()) GTEST_SKIP() << "no FlashInfer-Bench snapshot at " << fib_dir();
  OperatorRegistry registry = OperatorRegistry::from_environment({fib_dir()});
  int checked = 0, padded = 0;
  for (const char* folder : {"gqa_paged", "mla_paged"}) {
    for (const auto& e : std::filesystem::directory_iterator(fib_dir() / "definitions" / folder)) {
      const std::string name = e.path().stem().string();
      SCOPED_TRACE(name);
      const Operator op = registry.load(e.path().string());
      if (!assess(op).runnable) continue;  // operators import says why
      const TensorSpec* last = op.definition.find_input("kv_last_page_len");
      padded +=
          last && last->shape && last->shape->size() == 1 && last->shape->front() == "len_indptr";
      expect_valid_index_inputs(op, name.find("_prefill_causal_") != std::string::npos);
      ++checked;
    }
  }
  EXPECT_GE(checked, 30);
  EXPECT_EQ(padded, 6);
}

TEST(FibFamilies, ReferenceAndSeedCompileForHopper) {
  if (!have_fib()) GTEST_SKIP() << "no FlashInfer-Bench snapshot at " << fib_dir();
  std::string names;
  for (const Family& f : kFamilies) names += std::string(" ") + f.definition;
  auto check = kharness("--operators-dir " + fib_dir().string() + " operators check" + names +
                        " --arch sm_90a");
  // Families without a baseline yet: their baseline rows say MISSING (exit 0 then; a failed
  // compile or a missing reference exits 1).
  EXPECT_EQ(check.exit_code, 0) << check.out;
  for (const Family& f : kFamilies) {
    for (const char* solution : {"reference", "seed", "baseline"}) {
      if (!f.seed && std::string(solution) == "seed") continue;
      if (!f.baseline && std::string(solution) == "baseline") continue;
      bool passed = false;
      std::istringstream lines(check.out);
      for (std::string line; std::getline(lines, line);) {
        std::istringstream words(line);
        std::string name, workloads, which, status;
        words >> name >> workloads >> which >> status;
        passed |= name == f.definition && which == solution && status == "PASSED";
      }
      EXPECT_TRUE(passed) << f.definition << " " << solution << "\n" << check.out;
    }
  }
}

// The shipped definitions: the import makes every prefill and sampling definition runnable.
TEST(FibFamilies, ImportRunsEveryPrefillAndSamplingDefinition) {
  if (!have_fib()) GTEST_SKIP() << "no FlashInfer-Bench snapshot at " << fib_dir();
  auto import = testing::run_command(std::string("'") + KHARNESS_BINARY + "' operators import '" +
                                     fib_dir().string() + "' --json 2>/dev/null");
  ASSERT_EQ(import.exit_code, 0) << import.out;
  const auto j = nlohmann::json::parse(import.out);
  int prefill = 0, sampling = 0, missing_files = 0;
  for (const auto& d : j.at("definitions")) {
    const std::string name = d.at("name");
    const bool is_prefill = name.find("_prefill_causal_") != std::string::npos;
    const bool is_sampling = name.find("_sampling_from_probs_") != std::string::npos;
    if (!is_prefill && !is_sampling) continue;
    (is_prefill ? prefill : sampling) += 1;
    if (d.at("runnable").get<bool>()) continue;
    // Only shipped workloads that read safetensors files the snapshot does not hold may stop one.
    EXPECT_NE(d.at("reason").get<std::string>().find("which is not there"), std::string::npos)
        << name << ": " << d.at("reason");
    ++missing_files;
  }
  EXPECT_EQ(prefill, 34);  // GQA paged 20, GQA ragged 9, MLA paged 3, MLA ragged 2
  EXPECT_EQ(sampling, 21);
  EXPECT_LE(missing_files, 5);
}

// The MoE variants: every FlashInfer-Bench MoE definition finds its family (a reference and a
// seed), and all but the one whose workloads read safetensors files run.
TEST(FibFamilies, EveryMoeVariantHasAFamily) {
  if (!have_fib()) GTEST_SKIP() << "no FlashInfer-Bench snapshot at " << fib_dir();
  OperatorRegistry registry = OperatorRegistry::from_environment({fib_dir()});
  int checked = 0;
  for (const auto& e : std::filesystem::directory_iterator(fib_dir() / "definitions" / "moe")) {
    const std::string name = e.path().stem().string();
    SCOPED_TRACE(name);
    const Operator op = registry.load(e.path().string());
    ASSERT_TRUE(op.reference.has_value());
    EXPECT_TRUE(op.seed.has_value());
    const Runnability r = assess(op);
    if (op.workloads_file) continue;  // shipped workloads (safetensors the snapshot lacks)
    EXPECT_TRUE(r.runnable) << r.reason;
    EXPECT_GE(op.workloads.size(), 5u);
    ++checked;
  }
  EXPECT_EQ(checked, 18);
}

TEST(FibFamilies, PackedTopkIdsAreDistinctExpertsWithBf16Weights) {
  const TensorSpec ids{"topk_ids", std::vector<std::string>{"seq_len", "top_k"}, DType::kInt32, ""};
  InputGenerator g;
  g.distribution = "packed_topk_ids";
  g.extra["experts"] = "num_experts";
  const Bindings axes{{"seq_len", 50}, {"top_k", 8}, {"num_experts", 64}};
  for (bool sigmoid : {false, true}) {
    g.extra["sigmoid"] = sigmoid;
    const auto v = as_ints(ids, verify::make_index_input(ids, g, axes, 400, 3));
    ASSERT_EQ(v.size(), 400u);
    for (int t = 0; t < 50; ++t) {
      std::set<std::int64_t> experts;
      double sum = 0;
      for (int k = 0; k < 8; ++k) {
        const std::uint32_t packed = static_cast<std::uint32_t>(v[t * 8 + k]);
        experts.insert(packed >> 16);
        std::uint8_t bf16[2] = {static_cast<std::uint8_t>(packed & 0xFF),
                                static_cast<std::uint8_t>((packed >> 8) & 0xFF)};
        const double w = to_double(DType::kBFloat16, bf16);
        EXPECT_GT(w, 0.0);
        EXPECT_LT(w, 1.0);
        sum += w;
      }
      EXPECT_EQ(experts.size(), 8u);
      EXPECT_LT(*experts.rbegin(), 64);
      if (!sigmoid) EXPECT_NEAR(sum, 1.0, 0.03);  // softmax weights, each rounded to bf16
    }
  }
  Bindings few = axes;
  few["num_experts"] = 4;  // fewer experts than top_k
  EXPECT_THROW(verify::make_index_input(ids, g, few, 400, 3), Error);
}

// --- The generators the families rest on (no snapshot needed) ---

TEST(FibFamilies, CoveringIndptrGivesEverySegmentItsMinimum) {
  const std::vector<std::int64_t> min_len = {3, 0, 7, 1};
  for (std::uint64_t seed : {1ull, 2ull, 3ull}) {
    auto v = verify::make_covering_indptr(min_len, 40, seed);
    ASSERT_EQ(v.size(), 5u);
    EXPECT_EQ(v.front(), 0);
    EXPECT_EQ(v.back(), 40);
    for (std::size_t b = 0; b < min_len.size(); ++b) EXPECT_GE(v[b + 1] - v[b], min_len[b]);
  }
  EXPECT_EQ(verify::make_covering_indptr(min_len, 11, 5),
            (std::vector<std::int64_t>{0, 3, 3, 10, 11}));  // no slack: exactly the minimums
  EXPECT_THROW(verify::make_covering_indptr(min_len, 10, 5), std::invalid_argument);
}

TEST(FibFamilies, CoupledRolesCoverTheQueriesOfEachRequest) {
  const TensorSpec qo{"qo_indptr", std::vector<std::string>{"len_indptr"}, DType::kInt32, ""};
  const TensorSpec kv{"kv_indptr", std::vector<std::string>{"len_indptr"}, DType::kInt32, ""};
  const TensorSpec last{"kv_last_page_len", std::vector<std::string>{"batch_size"}, DType::kInt32,
                        ""};
  InputGenerator gq, gk, gl;
  gq.distribution = "indptr";
  gq.extra["total"] = "total_q";
  gk.distribution = "indptr";
  gk.extra["total"] = "num_kv_indices";
  gk.extra["cover"] = "qo_indptr";
  gk.extra["page_size"] = "page_size";
  gl.distribution = "last_page_len";
  gl.extra["indptr"] = "kv_indptr";
  gl.extra["cover"] = "qo_indptr";
  gl.extra["page_size"] = "page_size";
  const Bindings axes{{"len_indptr", 9},
                      {"batch_size", 8},
                      {"total_q", 1000},
                      {"num_kv_indices", 40},
                      {"page_size", 64}};
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    verify::IndexValues made;
    const auto q = as_ints(qo, verify::make_index_input(qo, gq, axes, 9, seed, &made));
    const auto k = as_ints(kv, verify::make_index_input(kv, gk, axes, 9, seed + 100, &made));
    const auto l = as_ints(last, verify::make_index_input(last, gl, axes, 8, seed + 200, &made));
    EXPECT_EQ(k.back(), 40);
    for (std::size_t b = 0; b < 8; ++b) {
      const std::int64_t q_len = q[b + 1] - q[b], pages = k[b + 1] - k[b];
      ASSERT_GE(pages, (q_len + 63) / 64);
      ASSERT_GE(l[b], 1);
      ASSERT_LE(l[b], 64);
      if (pages > 0) EXPECT_GE((pages - 1) * 64 + l[b], q_len) << "seed " << seed << " b " << b;
    }
  }
  // Shaped like its indptr ([len_indptr], as six FlashInfer-Bench ps64 prefill definitions have
  // it): one entry per request as above, and a valid length in the one past the last request.
  const TensorSpec padded{"kv_last_page_len", std::vector<std::string>{"len_indptr"}, DType::kInt32,
                          ""};
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    verify::IndexValues made;
    const auto q = as_ints(qo, verify::make_index_input(qo, gq, axes, 9, seed, &made));
    const auto k = as_ints(kv, verify::make_index_input(kv, gk, axes, 9, seed + 100, &made));
    const auto l =
        as_ints(padded, verify::make_index_input(padded, gl, axes, 9, seed + 200, &made));
    ASSERT_EQ(l.size(), 9u);
    for (std::size_t b = 0; b < 9; ++b) {
      ASSERT_GE(l[b], 1);
      ASSERT_LE(l[b], 64);
      const std::int64_t pages = b < 8 ? k[b + 1] - k[b] : 0;
      if (pages > 0) EXPECT_GE((pages - 1) * 64 + l[b], q[b + 1] - q[b]);
    }
    // Any other length is refused, naming the input.
    for (std::uint64_t wrong : {7u, 10u}) {
      EXPECT_THROW(verify::make_index_input(padded, gl, axes, wrong, seed, &made), Error);
    }
  }
  // A cover that was not generated before is named; too few pages for the queries too.
  verify::IndexValues none;
  EXPECT_THROW(verify::make_index_input(kv, gk, axes, 9, 1, &none), Error);
  verify::IndexValues made;
  verify::make_index_input(qo, gq, axes, 9, 1, &made);
  Bindings few = axes;
  few["num_kv_indices"] = 3;
  EXPECT_THROW(verify::make_index_input(kv, gk, few, 9, 1, &made), Error);
}

TEST(FibFamilies, ProbabilityRowsAreDistributions) {
  const auto rows = verify::make_probability_rows(4, 1000, 1.5, 3);
  ASSERT_EQ(rows.size(), 4000u);
  for (int r = 0; r < 4; ++r) {
    double sum = 0;
    for (int j = 0; j < 1000; ++j) {
      EXPECT_GT(rows[r * 1000 + j], 0.0f);
      sum += rows[r * 1000 + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-4);
  }
  EXPECT_NE(rows, verify::make_probability_rows(4, 1000, 1.5, 4));
}

// --- Workload synthesis (no snapshot needed) ---

const char* kPrefillDefinition = R"x({
  "name": "toy_prefill_h4_ps16", "op_type": "toy",
  "axes": {"page_size": {"type": "const", "value": 16}, "head_dim": {"type": "const", "value": 64},
           "batch_size": {"type": "var"}, "len_indptr": {"type": "var"},
           "total_q": {"type": "var"}, "num_pages": {"type": "var"}},
  "constraints": ["total_q >= batch_size", "total_q == qo_indptr[-1].item()"],
  "inputs": {"q": {"shape": ["total_q", "head_dim"], "dtype": "bfloat16"},
             "qo_indptr": {"shape": ["len_indptr"], "dtype": "int32"},
             "sm_scale": {"shape": null, "dtype": "float32"}},
  "outputs": {"o": {"shape": ["total_q", "head_dim"], "dtype": "bfloat16"}}
})x";

nlohmann::ordered_json templates(const std::string& text) {
  return nlohmann::ordered_json::parse(text);
}

TEST(FibFamilies, SynthesizedWorkloadsEvaluateTheirTemplates) {
  const Definition d = parse_definition_text(kPrefillDefinition, "toy.json");
  const auto t = templates(R"x([
    {"axes": {"batch_size": 2, "total_q": 100, "len_indptr": "batch_size + 1",
              "num_pages": "cdiv(total_q, page_size) + batch_size", "page_size": 999},
     "inputs": {"sm_scale": "rsqrt(head_dim)"}},
    {"axes": {"batch_size": 8, "total_q": 4, "len_indptr": "batch_size + 1", "num_pages": 1},
     "inputs": {"sm_scale": 0.5}},
    {"axes": {"batch_size": 2, "total_q": 100, "len_indptr": 3, "num_pages": 9},
     "inputs": {"sm_scale": 1}}
  ])x");
  const auto w = synthesize_workloads(d, t, "family.json");
  // The second breaks total_q >= batch_size; the third agrees with the first on every var axis.
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].axes.at("batch_size"), 2);
  EXPECT_EQ(w[0].axes.at("len_indptr"), 3);
  EXPECT_EQ(w[0].axes.at("num_pages"), 7 + 2);  // cdiv(100, 16) + 2; the const page_size wins
  EXPECT_EQ(w[0].axes.count("page_size"), 0u);
  EXPECT_DOUBLE_EQ(w[0].inputs.at("sm_scale").value.get<double>(), 0.125);
  EXPECT_EQ(w[0].inputs.at("q").kind, WorkloadInput::Kind::kRandom);
  EXPECT_NE(w[0].provenance.find("family.json workloads[0]"), std::string::npos);
  // A stable uuid: the same definition and axes give the same id, other axes another.
  EXPECT_EQ(synthesize_workloads(d, t, "family.json")[0].uuid, w[0].uuid);
  EXPECT_EQ(w[0].uuid.size(), 36u);
  auto other = t;
  other[0]["axes"]["total_q"] = 101;
  EXPECT_NE(synthesize_workloads(d, other, "family.json")[0].uuid, w[0].uuid);
  // The provenance survives the workload's JSON form.
  const Workload back = parse_workload(nlohmann::json::parse(to_json(w[0]).dump()), d, "w.jsonl");
  EXPECT_EQ(back.provenance, w[0].provenance);
}

TEST(FibFamilies, MalformedTemplatesNameTheFileAndField) {
  const Definition d = parse_definition_text(kPrefillDefinition, "toy.json");
  auto message = [&](const std::string& text) -> std::string {
    try {
      synthesize_workloads(d, templates(text), "fam/family.json");
    } catch (const Error& e) {
      return e.message();
    }
    return "no error";
  };
  const std::string no_axis =
      message(R"x([{"axes": {"batch_size": 1, "total_q": 1, "len_indptr": 2},
                   "inputs": {"sm_scale": 1}}])x");
  EXPECT_NE(no_axis.find("fam/family.json"), std::string::npos) << no_axis;
  EXPECT_NE(no_axis.find("num_pages"), std::string::npos) << no_axis;
  const std::string no_scalar =
      message(R"x([{"axes": {"batch_size": 1, "total_q": 1, "len_indptr": 2, "num_pages": 1}}])x");
  EXPECT_NE(no_scalar.find("sm_scale"), std::string::npos) << no_scalar;
  const std::string bad_expr = message(
      R"x([{"axes": {"batch_size": "2 +", "total_q": 1, "len_indptr": 2, "num_pages": 1},
           "inputs": {"sm_scale": 1}}])x");
  EXPECT_NE(bad_expr.find("workloads[0].axes.batch_size"), std::string::npos) << bad_expr;
  const std::string bad_rsqrt = message(
      R"x([{"axes": {"batch_size": 1, "total_q": 1, "len_indptr": 2, "num_pages": 1},
           "inputs": {"sm_scale": "rsqrt(head_dim - 64)"}}])x");
  EXPECT_NE(bad_rsqrt.find("sm_scale"), std::string::npos) << bad_rsqrt;
  const std::string unknown = message(R"x([{"axes": {}, "shapes": 1}])x");
  EXPECT_NE(unknown.find("shapes"), std::string::npos) << unknown;
  EXPECT_NE(message(R"x({"axes": {}})x").find("array"), std::string::npos);
}

// Families share kernel text through _families/_shared/ (operators/_families/README.md): a family
// file #includes it after its plan and its #defines, and the solution loaded has it inlined, so
// what reaches the compiler, the archive, a prompt and an export is one self-contained source.
const char* kSharedPlan = R"x(/* kharness
{ "launches": [ { "kernel": "scale_kernel", "grid": [1, 1, 1], "block": [32, 1, 1],
                  "args": ["x", "y"] } ] }
*/
)x";

struct SharedFamilies {
  testing::TempDir dir;
  std::filesystem::path families = dir.path() / "ops/_families";
  void write(const std::string& relative, const std::string& text) const {
    write_file_atomic((families / relative).string(), text);
  }
};

TEST(FibFamilies, SharedTextIsInlinedAfterTheFamilysDefines) {
  SharedFamilies f;
  f.write("_shared/scale/helpers.cuh",
          "__device__ float scaled(float v) { return v * KB_SCALE; }\n");
  f.write("_shared/scale/kernel.cuh",
          "// the shared kernel\n#include \"helpers.cuh\"\n"
          "extern \"C\" __global__ void scale_kernel(const float* x, float* y) {\n"
          "  y[threadIdx.x] = scaled(x[threadIdx.x]);\n}");  // no final newline
  f.write("double/seed.cu", std::string(kSharedPlan) +
                                "#define KB_SCALE 2.0f\n#include \"../_shared/scale/kernel.cuh\"\n"
                                "// after the include\n");
  f.write("half/baseline/solution.cu",
          std::string(kSharedPlan) +
              "#define KB_SCALE 0.5f\n  #  include \"../../_shared/scale/kernel.cuh\"\n");
  const Solution seed = load_solution(f.families / "double/seed.cu");
  const std::string& text = seed.entry_source().content;
  EXPECT_EQ(text, std::string(kSharedPlan) +
                      "#define KB_SCALE 2.0f\n// the shared kernel\n"
                      "__device__ float scaled(float v) { return v * KB_SCALE; }\n"
                      "extern \"C\" __global__ void scale_kernel(const float* x, float* y) {\n"
                      "  y[threadIdx.x] = scaled(x[threadIdx.x]);\n}\n// after the include\n");
  EXPECT_EQ(seed.plan.launches.at(0).kernel, "scale_kernel");
  EXPECT_EQ(read_single_file_source(f.families / "double/seed.cu"), text);
  const Solution half = load_solution(f.families / "half/baseline/solution.cu");
  EXPECT_NE(half.entry_source().content.find("#define KB_SCALE 0.5f\n// the shared kernel"),
            std::string::npos);
  // Both compile (NVRTC, no GPU): the inlined source has no include left to resolve.
  for (const char* file : {"double/seed.cu", "half/baseline/solution.cu"}) {
    auto r = kharness("compile '" + (f.families / file).string() + "' --arch sm_90a --no-cache");
    EXPECT_EQ(r.exit_code, 0) << file << "\n" << r.out;
  }
  // A family's seed.cu is found through the registry, and loads inlined.
  auto def = nlohmann::ordered_json::parse(
      read_file((testing::source_dir() / "operators/rmsnorm_h4096/definition.json").string()));
  def["name"] = "double_h1";
  def["kharness"]["family"] = "double";
  write_file_atomic((f.dir.path() / "ops/double_h1.json").string(), def.dump());
  f.write("double/reference.cu", std::string(kSharedPlan) +
                                     "#define KB_SCALE 2.0f\n"
                                     "#include \"../_shared/scale/kernel.cuh\"\n");
  const Operator op = OperatorRegistry({{f.dir.path() / "ops", "test"}}).load("double_h1");
  ASSERT_TRUE(op.seed && op.reference);
  EXPECT_EQ(load_solution(*op.seed).entry_source().content, text);
  EXPECT_NE(load_solution(*op.reference).entry_source().content.find("scale_kernel"),
            std::string::npos);
}

TEST(FibFamilies, OnlyFamilyFilesInlineAndOnlyFromShared) {
  SharedFamilies f;
  f.write("_shared/k.cuh", "// shared\n");
  f.write("fam/other.cuh", "// not shared\n");
  const std::string other = std::string(kSharedPlan) + "#include \"other.cuh\"\n";
  f.write("fam/seed.cu", other);
  // Not under _shared: left for the source rules (which refuse it), not inlined.
  EXPECT_EQ(load_solution(f.families / "fam/seed.cu").entry_source().content, other);
  // A solution outside _families is loaded as it is, whatever it includes.
  const std::string outside =
      std::string(kSharedPlan) + "#include \"ops/_families/_shared/k.cuh\"\n";
  write_file_atomic((f.dir.path() / "mine.cu").string(), outside);
  EXPECT_EQ(load_solution(f.dir.path() / "mine.cu").entry_source().content, outside);
}

TEST(FibFamilies, BadSharedIncludeNamesTheFileAndLine) {
  SharedFamilies f;
  f.write("fam/seed.cu", std::string(kSharedPlan) +
                             "#define KB_X 1\n"
                             "#include \"../_shared/fam/missing.cuh\"\n");
  const std::string seed = (f.families / "fam/seed.cu").string();
  testing::expect_input_error([&] { load_solution(seed); }, seed + ":6",
                              "#include \"../_shared/fam/missing.cuh\": no such file in");
  // From the command line: exit 2 and one line naming the file, the line and the include.
  auto r = kharness("compile '" + seed + "' --arch sm_90a");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_NE(r.out.find(seed + ":6"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("missing.cuh"), std::string::npos) << r.out;
  // Shared files that include each other: an error, not a loop.
  f.write("_shared/a.cuh", "#include \"b.cuh\"\n");
  f.write("_shared/b.cuh", "\n#include \"a.cuh\"\n");
  f.write("loop/seed.cu", std::string(kSharedPlan) + "#include \"../_shared/a.cuh\"\n");
  testing::expect_input_error([&] { load_solution(f.families / "loop/seed.cu"); }, "b.cuh:2",
                              "nest deeper than");
}

// The shipped families: every seed, baseline and reference loads whole (no _shared include left),
// and those that share text say so by including it. `kharness operators check` (above, with the
// snapshot) compiles them; scripts/check-family-ptx.sh shows the PTX is what the copies compiled
// to.
TEST(FibFamilies, ShippedFamilyFilesLoadSelfContained) {
  namespace fs = std::filesystem;
  int sharing = 0;
  for (const auto& dir : fs::directory_iterator(testing::source_dir() / "operators/_families")) {
    if (dir.path().filename() == "_shared" || !dir.is_directory()) continue;
    for (const char* role : {"seed.cu", "reference.cu", "baseline/solution.cu"}) {
      const fs::path file = dir.path() / role;
      if (!fs::exists(file)) continue;
      SCOPED_TRACE(file.string());
      const std::string on_disk = read_file(file.string());
      Solution s;
      ASSERT_NO_THROW(s = load_solution(file));
      const std::string& text = s.entry_source().content;
      EXPECT_EQ(text.find("#include \"../"), std::string::npos);
      if (on_disk.find("#include \"../") != std::string::npos) {
        ++sharing;
        EXPECT_GT(text.size(), on_disk.size());
      } else {
        EXPECT_EQ(text, on_disk);
      }
      EXPECT_FALSE(s.plan.launches.empty());
    }
  }
  EXPECT_GE(sharing, 60);  // families of near-copies (trtllm MoE, prefill, sampling, ...) share
}

}  // namespace
}  // namespace kharness
