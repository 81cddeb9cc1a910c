// The causal prefill families' references (GQA paged with page size 1 and > 1, GQA ragged, MLA
// paged with page size 1 and > 1, MLA ragged) against a plain double-precision causal attention
// on the host, on small shapes. Each test writes its own small definition of the family (same
// tensor and axis names as FlashInfer-Bench's, smaller heads), compiles the family reference
// found for it, launches it through its plan on host-made inputs (3 requests: an incremental
// prefill with more keys than queries, a request with no queries, a request with no keys, a pure
// prefill with as many keys as queries, single-token ones; shuffled distinct pages; partial last
// pages) and compares: every output within one bf16 ulp (plus 1e-5 absolute) of the exact value,
// every lse within 1e-4 relative (absolute below 1); rows of a request with no queries or no keys
// give output 0 and lse -inf, as FlashInfer-Bench's reference. Skips without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "device/driver.hpp"
#include "device/plan_launcher.hpp"
#include "gpu_test_util.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/numeric.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"

namespace kharness {
namespace {

using namespace reference_test;
namespace fs = std::filesystem;

// One family's layout. MLA paged: the query is q_nope (qk dims) and q_pe (kpe dims), the key
// ckv (qk) and kpe (kpe), the value is ckv itself, one cache row shared by every head.
struct Layout {
  std::string name;    // of the test's own definition
  std::string family;  // the family the registry must find for it
  enum Kind { kGqaPaged, kMlaPaged, kRagged } kind;
  bool mla_names;  // ragged: qk_dim/vo_dim axes (MLA) rather than head_dim (GQA)
  int heads, kv_heads, qk, vo, kpe, page_size;
  bool last_page_len;
};

// Query and KV lengths (tokens) of the 3 requests of each case.
struct Case {
  std::vector<int> q_len, kv_len;
};
const Case kCases[] = {
    {{5, 0, 9}, {12, 4, 9}},     // incremental, no queries, pure prefill
    {{3, 1, 7}, {0, 20, 30}},    // no keys (0 / -inf), one query, incremental
    {{1, 16, 17}, {1, 16, 40}},  // one-token, a full page, several pages
};
constexpr int kNumPages = 64;

std::string tensor(const std::string& name, const std::vector<std::string>& shape,
                   const char* dtype) {
  std::string s = "\"" + name + "\": {\"shape\": [";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", \"" : "\"") + shape[i] + "\"";
  return s + "], \"dtype\": \"" + dtype + "\"}";
}

// The test's own definition of the layout (FlashInfer-Bench's names, small sizes).
std::string definition_json(const Layout& l) {
  std::map<std::string, int> consts;
  std::vector<std::string> vars = {"len_indptr", "total_q"}, inputs, outputs;
  const char* bf16 = "bfloat16";
  const char* i32 = "int32";
  if (l.kind == Layout::kGqaPaged) {
    consts = {{"num_qo_heads", l.heads},
              {"num_kv_heads", l.kv_heads},
              {"head_dim", l.qk},
              {"page_size", l.page_size}};
    inputs = {tensor("q", {"total_q", "num_qo_heads", "head_dim"}, bf16),
              tensor("k_cache", {"num_pages", "page_size", "num_kv_heads", "head_dim"}, bf16),
              tensor("v_cache", {"num_pages", "page_size", "num_kv_heads", "head_dim"}, bf16)};
    outputs = {tensor("output", {"total_q", "num_qo_heads", "head_dim"}, bf16)};
  } else if (l.kind == Layout::kMlaPaged) {
    consts = {{"num_qo_heads", l.heads},
              {"head_dim_ckv", l.qk},
              {"head_dim_kpe", l.kpe},
              {"page_size", l.page_size}};
    inputs = {tensor("q_nope", {"total_q", "num_qo_heads", "head_dim_ckv"}, bf16),
              tensor("q_pe", {"total_q", "num_qo_heads", "head_dim_kpe"}, bf16),
              tensor("ckv_cache", {"num_pages", "page_size", "head_dim_ckv"}, bf16),
              tensor("kpe_cache", {"num_pages", "page_size", "head_dim_kpe"}, bf16)};
    outputs = {tensor("output", {"total_q", "num_qo_heads", "head_dim_ckv"}, bf16)};
  } else {
    const std::string qk = l.mla_names ? "qk_dim" : "head_dim";
    const std::string vo = l.mla_names ? "vo_dim" : "head_dim";
    consts = {{"num_qo_heads", l.heads}, {"num_kv_heads", l.kv_heads}, {qk, l.qk}};
    if (l.mla_names) consts[vo] = l.vo;
    vars.push_back("total_kv");
    inputs = {tensor("q", {"total_q", "num_qo_heads", qk}, bf16),
              tensor("k", {"total_kv", "num_kv_heads", qk}, bf16),
              tensor("v", {"total_kv", "num_kv_heads", vo}, bf16)};
    outputs = {tensor("output", {"total_q", "num_qo_heads", vo}, bf16)};
  }
  inputs.push_back(tensor("qo_indptr", {"len_indptr"}, i32));
  inputs.push_back(tensor("kv_indptr", {"len_indptr"}, i32));
  if (l.kind != Layout::kRagged) {
    vars.push_back("num_kv_indices");
    vars.push_back("num_pages");
    inputs.push_back(tensor("kv_indices", {"num_kv_indices"}, i32));
  }
  if (l.last_page_len) {
    vars.push_back("batch_size");
    inputs.push_back(tensor("kv_last_page_len", {"batch_size"}, i32));
  }
  inputs.push_back("\"sm_scale\": {\"shape\": null, \"dtype\": \"float32\"}");
  outputs.push_back(tensor("lse", {"total_q", "num_qo_heads"}, "float32"));
  std::string axes;
  for (const auto& [name, value] : consts)
    axes += "\"" + name + "\": {\"type\": \"const\", \"value\": " + std::to_string(value) + "}, ";
  for (std::size_t i = 0; i < vars.size(); ++i)
    axes += (i ? ", \"" : "\"") + vars[i] + "\": {\"type\": \"var\"}";
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
    return s;
  };
  return "{\"name\": \"" + l.name + "\", \"op_type\": \"test\", \"axes\": {" + axes +
         "}, \"inputs\": {" + join(inputs) + "}, \"outputs\": {" + join(outputs) + "}}";
}

struct Compiled {
  Operator op;
  Solution solution;
  CompileResult compiled;
  std::unique_ptr<device::PrimaryContext> context;
  std::unique_ptr<device::Module> module;
  std::unique_ptr<device::PlanLauncher> launcher;
};

void compile_family_reference(const Layout& l, const fs::path& dir, Compiled* out) {
  fs::create_directories(dir);
  std::ofstream(dir / (l.name + ".json")) << definition_json(l);
  out->op = OperatorRegistry::from_environment({dir}).load(l.name);
  ASSERT_TRUE(out->op.reference.has_value()) << l.name;
  ASSERT_EQ(out->op.reference->parent_path().filename(), l.family);
  out->solution = load_solution(*out->op.reference);
  CompileOptions options;
  options.arch = default_arch_for_device(0);
  options.use_cache = false;
  out->compiled = compile_solution(out->solution, &out->op.definition, &out->op.workloads, options);
  ASSERT_TRUE(out->compiled.ok()) << out->compiled.log;
  out->context = std::make_unique<device::PrimaryContext>(0);
  out->module = std::make_unique<device::Module>(out->compiled.cubin);
  out->launcher = std::make_unique<device::PlanLauncher>(out->solution.plan, out->compiled.kernels,
                                                         *out->module);
}

std::vector<double> random_bf16(std::size_t n, std::mt19937_64& rng,
                                std::vector<std::uint8_t>* bytes) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> v(std::max<std::size_t>(n, 1));
  for (auto& x : v) x = normal(rng);
  *bytes = to_bf16(v);
  return from_bf16(*bytes);
}

struct Buffer {
  std::unique_ptr<device::DeviceBuffer> device;
  template <class T>
  static Buffer of(const std::vector<T>& host) {
    Buffer b;
    const std::size_t bytes = std::max<std::size_t>(host.size() * sizeof(T), 4);
    b.device = std::make_unique<device::DeviceBuffer>(bytes);
    if (!host.empty()) b.device->upload(host.data(), host.size() * sizeof(T));
    return b;
  }
};

void check_layout(const Layout& l) {
  SKIP_WITHOUT_GPU();
  const fs::path dir =
      fs::temp_directory_path() / ("kharness-prefill-" + l.name + "-" + std::to_string(::getpid()));
  Compiled ref;
  ASSERT_NO_FATAL_FAILURE(compile_family_reference(l, dir, &ref));
  device::Stream stream;
  std::mt19937_64 rng(20241201);
  const bool paged = l.kind != Layout::kRagged;
  const int ps = paged ? l.page_size : 1;
  const int kv_heads = l.kind == Layout::kMlaPaged ? 1 : l.kv_heads;

  for (const Case& c : kCases) {
    const int batch = static_cast<int>(c.q_len.size());
    SCOPED_TRACE(l.name + " q " + std::to_string(c.q_len[0]) + "," + std::to_string(c.q_len[1]) +
                 "," + std::to_string(c.q_len[2]));
    std::vector<std::int32_t> qo(batch + 1, 0), kv(batch + 1, 0), last(batch, 1), indices;
    std::vector<std::vector<int>> rows_of(batch);  // cache (or k/v) row of each KV token
    std::vector<std::int32_t> pages(kNumPages);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    int next_page = 0, next_row = 0;
    for (int b = 0; b < batch; ++b) {
      qo[b + 1] = qo[b] + c.q_len[b];
      const int n = c.kv_len[b];
      if (paged) {
        const int np = (n + ps - 1) / ps;
        for (int p = 0; p < np; ++p) indices.push_back(pages.at(next_page++));
        kv[b + 1] = kv[b] + np;
        if (np > 0) last[b] = n - (np - 1) * ps;
        for (int t = 0; t < n; ++t) rows_of[b].push_back(indices[kv[b] + t / ps] * ps + t % ps);
      } else {
        kv[b + 1] = kv[b] + n;
        for (int t = 0; t < n; ++t) rows_of[b].push_back(next_row++);
      }
    }
    const int total_q = qo[batch];
    const int kv_rows = paged ? kNumPages * ps : next_row;
    std::vector<std::uint8_t> qa_b, qb_b, ka_b, kb_b, v_b;
    const std::vector<double> qa =
        random_bf16(static_cast<std::size_t>(total_q) * l.heads * l.qk, rng, &qa_b);
    const std::vector<double> ka =
        random_bf16(static_cast<std::size_t>(kv_rows) * kv_heads * l.qk, rng, &ka_b);
    std::vector<double> qb, kb, v;
    if (l.kind == Layout::kMlaPaged) {
      qb = random_bf16(static_cast<std::size_t>(total_q) * l.heads * l.kpe, rng, &qb_b);
      kb = random_bf16(static_cast<std::size_t>(kv_rows) * l.kpe, rng, &kb_b);
    } else {
      v = random_bf16(static_cast<std::size_t>(kv_rows) * kv_heads * l.vo, rng, &v_b);
    }
    const float sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(l.qk + l.kpe)));
    const double scale = sm_scale;

    std::map<std::string, Buffer> buffers;
    std::map<std::string, std::int64_t> axes_extra;
    Buffer out = Buffer::of(std::vector<std::uint16_t>(
        static_cast<std::size_t>(total_q) * l.heads * l.vo, 0xFFFF));  // NaN: unwritten fails
    Buffer lse_buf = Buffer::of(
        std::vector<std::uint32_t>(static_cast<std::size_t>(total_q) * l.heads, 0xFFFFFFFFu));
    device::LaunchEnv env;
    env.definition = &ref.op.definition;
    for (const auto& a : ref.op.definition.axes)
      if (a.is_const) env.axes[a.name] = a.value;
    env.axes["len_indptr"] = batch + 1;
    env.axes["total_q"] = total_q;
    auto add = [&](const std::string& name, Buffer b) {
      env.tensors[name] = b.device->ptr();
      buffers[name] = std::move(b);
    };
    add("qo_indptr", Buffer::of(qo));
    add("kv_indptr", Buffer::of(kv));
    if (l.kind == Layout::kGqaPaged) {
      add("q", Buffer::of(qa_b));
      add("k_cache", Buffer::of(ka_b));
      add("v_cache", Buffer::of(v_b));
    } else if (l.kind == Layout::kMlaPaged) {
      add("q_nope", Buffer::of(qa_b));
      add("q_pe", Buffer::of(qb_b));
      add("ckv_cache", Buffer::of(ka_b));
      add("kpe_cache", Buffer::of(kb_b));
    } else {
      add("q", Buffer::of(qa_b));
      add("k", Buffer::of(ka_b));
      add("v", Buffer::of(v_b));
      env.axes["total_kv"] = kv_rows;
    }
    if (paged) {
      env.axes["num_kv_indices"] = static_cast<std::int64_t>(indices.size());
      env.axes["num_pages"] = kNumPages;
      add("kv_indices", Buffer::of(indices));
    }
    if (l.last_page_len) {
      env.axes["batch_size"] = batch;
      add("kv_last_page_len", Buffer::of(last));
    }
    env.tensors["output"] = out.device->ptr();
    env.tensors["lse"] = lse_buf.device->ptr();
    env.scalars = {{"sm_scale", nlohmann::json(sm_scale)}};
    const device::LaunchOutcome outcome = ref.launcher->launch(env, stream.get(), true);
    ASSERT_TRUE(outcome.ok) << outcome.message;

    std::vector<std::uint8_t> out_bytes(static_cast<std::size_t>(total_q) * l.heads * l.vo * 2);
    out.device->download(out_bytes.data(), out_bytes.size());
    const std::vector<double> got = from_bf16(out_bytes);
    std::vector<float> got_lse(static_cast<std::size_t>(total_q) * l.heads);
    lse_buf.device->download(got_lse.data(), got_lse.size() * 4);

    int bad = 0;
    for (int b = 0; b < batch; ++b) {
      const int q_len = c.q_len[b], kv_len = c.kv_len[b];
      for (int i = 0; i < q_len; ++i) {
        const std::size_t row = static_cast<std::size_t>(qo[b] + i);
        const int visible = kv_len == 0 ? 0 : std::min(kv_len, i + (kv_len - q_len) + 1);
        for (int h = 0; h < l.heads; ++h) {
          const int kvh = l.kind == Layout::kMlaPaged ? 0 : h / (l.heads / l.kv_heads);
          const std::size_t qh = row * l.heads + h;
          std::vector<double> logits(visible), expected(l.vo, 0.0);
          for (int t = 0; t < visible; ++t) {
            const std::size_t r = static_cast<std::size_t>(rows_of[b][t]) * kv_heads + kvh;
            double dot = 0;
            for (int d = 0; d < l.qk; ++d) dot += qa[qh * l.qk + d] * ka[r * l.qk + d];
            for (int d = 0; d < l.kpe; ++d) dot += qb[qh * l.kpe + d] * kb[r * l.kpe + d];
            logits[t] = dot * scale;
          }
          double expected_lse = -std::numeric_limits<double>::infinity();
          if (visible > 0) {
            const double m = *std::max_element(logits.begin(), logits.end());
            double sum = 0;
            for (double x : logits) sum += std::exp(x - m);
            for (int t = 0; t < visible; ++t) {
              const double p = std::exp(logits[t] - m) / sum;
              const std::size_t r = static_cast<std::size_t>(rows_of[b][t]) * kv_heads + kvh;
              for (int d = 0; d < l.vo; ++d)
                expected[d] +=
                    p * (l.kind == Layout::kMlaPaged ? ka[r * l.qk + d] : v[r * l.vo + d]);
            }
            expected_lse = (m + std::log(sum)) / std::log(2.0);
          }
          for (int d = 0; d < l.vo; ++d) {
            const double e = expected[d], g = got[qh * l.vo + d];
            const double limit = std::ldexp(std::fabs(e), -7) + 1e-5;  // one bf16 ulp + small abs
            if (!std::isfinite(g) || std::fabs(g - e) > limit) {
              if (++bad <= 10)
                ADD_FAILURE() << "request " << b << ", query " << i << ", head " << h << ", dim "
                              << d << ": expected " << e << ", got " << g;
            }
          }
          const double gl = got_lse[qh];
          const bool lse_ok =
              std::isinf(expected_lse)
                  ? (std::isinf(gl) && gl < 0)
                  : (std::isfinite(gl) &&
                     std::fabs(gl - expected_lse) <= 1e-4 * std::max(1.0, std::fabs(expected_lse)));
          if (!lse_ok && ++bad <= 10)
            ADD_FAILURE() << "request " << b << ", query " << i << ", head " << h
                          << ": lse expected " << expected_lse << ", got " << gl;
        }
      }
    }
    EXPECT_EQ(bad, 0) << "outputs or lse off";
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(PrefillReference, GqaPagedPageSize1MatchesDoublePrecision) {
  check_layout({"gqa_paged_prefill_causal_h4_kv2_d64_ps1", "gqa_paged_prefill_causal_ps1",
                Layout::kGqaPaged, false, 4, 2, 64, 64, 0, 1, false});
}

TEST(PrefillReference, GqaPagedPageSize16MatchesDoublePrecision) {
  check_layout({"gqa_paged_prefill_causal_h4_kv2_d64_ps16", "gqa_paged_prefill_causal",
                Layout::kGqaPaged, false, 4, 2, 64, 64, 0, 16, true});
}

TEST(PrefillReference, GqaRaggedMatchesDoublePrecision) {
  check_layout({"gqa_ragged_prefill_causal_h4_kv2_d64", "gqa_ragged_prefill_causal",
                Layout::kRagged, false, 4, 2, 64, 64, 0, 1, false});
}

TEST(PrefillReference, MlaPagedPageSize1MatchesDoublePrecision) {
  check_layout({"mla_paged_prefill_causal_h4_ckv64_kpe16_ps1", "mla_paged_prefill_causal_ps1",
                Layout::kMlaPaged, false, 4, 1, 64, 64, 16, 1, false});
}

TEST(PrefillReference, MlaPagedPageSize16MatchesDoublePrecision) {
  check_layout({"mla_paged_prefill_causal_h4_ckv64_kpe16_ps16", "mla_paged_prefill_causal",
                Layout::kMlaPaged, false, 4, 1, 64, 64, 16, 16, true});
}

TEST(PrefillReference, MlaRaggedMatchesDoublePrecision) {
  check_layout({"mla_ragged_prefill_causal_h4_qk48_vo32", "mla_ragged_prefill_causal",
                Layout::kRagged, true, 4, 4, 48, 32, 0, 1, false});
}

}  // namespace
}  // namespace kharness
