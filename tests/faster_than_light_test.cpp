// Faster than light (docs/timing.md#faster-than-light): the physical lower bound of every shipped
// operator, the suspect marker through JSON, reports, exit codes and promotion. CPU only: latencies
// are injected (no cheat fixture can honestly run faster than light on a GPU without also failing
// the checks of every timed iteration, so the GPU side is the lead's device-test table).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "bench/measure.hpp"
#include "bench/speed_of_light.hpp"
#include "cli/common.hpp"
#include "controller/search.hpp"
#include "kharness/definition.hpp"
#include "kharness/error.hpp"
#include "kharness/operators.hpp"
#include "kharness/report.hpp"
#include "kharness/verdict.hpp"
#include "test_util.hpp"
#include "verify/index_inputs.hpp"

namespace kharness::bench {
namespace {

using nlohmann::json;
using testing::source_dir;

const GpuSpec& h200() {
  static const std::vector<GpuSpec> specs = load_gpu_specs(source_dir() / "configs" / "gpus");
  const GpuSpec* g = match_gpu(specs, "NVIDIA H200");
  if (!g) throw std::runtime_error("configs/gpus has no H200");
  return *g;
}

GpuInfo h200_device() {
  GpuInfo g;
  g.name = "NVIDIA H200";
  return g;  // no L2 size, bus width or clock: the datasheet's stand
}

LightCeilings h200_ceilings() { return light_ceilings(h200(), nullptr, h200_device()); }

Operator load(const std::string& name) { return OperatorRegistry::from_environment({}).load(name); }

const Workload& workload_with(const Operator& op, const std::string& axis, std::int64_t value) {
  for (const auto& w : op.workloads) {
    auto it = w.axes.find(axis);
    if (it != w.axes.end() && it->second == value) return w;
  }
  throw std::runtime_error(op.definition.name + " has no workload with " + axis);
}

constexpr double kL2 = 62914560.0;  // H200: 60 MiB

TEST(LightCeilings, TheFastestPeakAndTheHighestBandwidthWithTheirSources) {
  LightCeilings c = h200_ceilings();
  EXPECT_EQ(c.gpu, "H200");
  // Any FLOP may run at the fastest rate the GPU has (an fp16 GEMM whose tolerance admits fp8).
  EXPECT_DOUBLE_EQ(c.peak_flops, 1979e12);
  EXPECT_EQ(c.peak_source, "datasheet");
  EXPECT_DOUBLE_EQ(c.bandwidth, 4.8e12);  // the datasheet beats the spec's measured 4.0 TB/s
  EXPECT_EQ(c.bandwidth_source, "datasheet");
  EXPECT_EQ(c.l2_bytes, 62914560);

  // doctor --measure: the higher of it and the datasheet wins, each with its source.
  MeasuredPeaks m;
  m.copy_bandwidth = 5.0e12;
  m.gemm_flops = {{"float16", 700e12}, {"float8_e4m3fn", 2100e12}};
  m.measured_at = "2025-01-01T00:00:00Z";
  LightCeilings measured = light_ceilings(h200(), &m, h200_device());
  EXPECT_DOUBLE_EQ(measured.peak_flops, 2100e12);
  EXPECT_EQ(measured.peak_source, "measured 2025-01-01T00:00:00Z");
  EXPECT_DOUBLE_EQ(measured.bandwidth, 5.0e12);
  m.copy_bandwidth = 4.0e12;
  m.gemm_flops = {{"float16", 700e12}};
  LightCeilings lower = light_ceilings(h200(), &m, h200_device());
  EXPECT_DOUBLE_EQ(lower.peak_flops, 1979e12);
  EXPECT_DOUBLE_EQ(lower.bandwidth, 4.8e12);

  // The bus: 6144 bits at 3201 MHz, double data rate, is 4.92 TB/s, above the datasheet's 4.8.
  GpuInfo device = h200_device();
  device.memory_bus_width_bits = 6144;
  device.max_memory_clock_mhz = 3201;
  device.l2_cache_bytes = 64 << 20;
  LightCeilings bus = light_ceilings(h200(), nullptr, device);
  EXPECT_NEAR(bus.bandwidth, 6144 / 8.0 * 3201e6 * 2, 1);
  EXPECT_EQ(bus.bandwidth_source, "bus width x memory clock");
  EXPECT_EQ(bus.l2_bytes, 64 << 20);  // the larger L2
}

TEST(LowerBound, MinFormulasParseRoundTripAndWin) {
  const std::string text = R"J({"name": "gather", "op_type": "gather",
    "axes": {"n": {"type": "var"}},
    "inputs": {"x": {"shape": ["n"], "dtype": "float32"}},
    "outputs": {"y": {"shape": ["n"], "dtype": "float32"}},
    "kharness": {"flops": "0", "bytes": "8 * n", "min_bytes": "4 * n + 4"}})J";
  Definition d = parse_definition_text(text, "gather.json");
  ASSERT_TRUE(d.kharness.min_bytes);
  EXPECT_FALSE(d.kharness.min_flops);
  Definition again = parse_definition(to_json(d), "again");
  ASSERT_TRUE(again.kharness.min_bytes);
  EXPECT_EQ(again.kharness.min_bytes->text(), "4 * n + 4");
  // min_bytes wins: 4n + 4 bytes, of which the 4n of outputs fit in L2.
  LowerBound b = physical_lower_bound(d, {{"n", 1000}}, h200_ceilings());
  EXPECT_DOUBLE_EQ(b.formula_bytes, 4004);
  EXPECT_DOUBLE_EQ(b.dram_bytes, 4);
  EXPECT_THROW(parse_definition_text(
                   R"J({"name": "g", "op_type": "g", "axes": {"n": {"type": "var"}},
                        "inputs": {"x": {"shape": ["n"], "dtype": "float32"}},
                        "outputs": {"y": {"shape": ["n"], "dtype": "float32"}},
                        "kharness": {"min_bytes": "4 * m"}})J",
                   "bad.json"),
               Error);
}

TEST(LowerBound, GemmIsComputeAtLargeMAndReadsTheWeightsAtSmallM) {
  Operator op = load("gemm_n4096_k14336");
  Bindings large = {{"M", 8192}, {"N", 4096}, {"K", 14336}};
  LowerBound b = physical_lower_bound(op.definition, large, h200_ceilings());
  EXPECT_EQ(b.term, "compute");
  EXPECT_DOUBLE_EQ(b.flops, 2.0 * 8192 * 4096 * 14336);
  EXPECT_DOUBLE_EQ(b.seconds, b.flops / 1979e12);  // 0.49 ms; the fp16 roofline says 0.97 ms
  // Outputs: 8192 x 4096 float16 = 64 MiB, 4 MiB beyond L2.
  EXPECT_DOUBLE_EQ(b.output_bytes, 8192.0 * 4096 * 2);
  EXPECT_DOUBLE_EQ(b.dram_bytes,
                   2.0 * (8192.0 * 14336 + 4096.0 * 14336) + (8192.0 * 4096 * 2 - kL2));

  Bindings one = {{"M", 1}, {"N", 4096}, {"K", 14336}};
  LowerBound small = physical_lower_bound(op.definition, one, h200_ceilings());
  EXPECT_EQ(small.term, "memory");
  // The 8 KB output fits in L2: only the reads count.
  EXPECT_DOUBLE_EQ(small.dram_bytes, 2.0 * (14336 + 4096.0 * 14336));
  EXPECT_DOUBLE_EQ(small.seconds, small.dram_bytes / 4.8e12);
  EXPECT_EQ(small.bytes_formula, "kharness.bytes: 2 * (M * K + N * K + M * N)");
}

TEST(LowerBound, RmsnormAndCopyCountReadsAndOnlyTheWritesL2CannotHold) {
  Operator rms = load("rmsnorm_h4096");
  LowerBound b = physical_lower_bound(
      rms.definition, {{"batch_size", 16384}, {"hidden_size", 4096}}, h200_ceilings());
  const double act = 16384.0 * 4096 * 2;
  EXPECT_EQ(b.term, "memory");
  EXPECT_DOUBLE_EQ(b.dram_bytes, act + 4096 * 2 + (act - kL2));
  EXPECT_LT(b.seconds, speed_of_light(h200(), rms.definition,
                                      {{"batch_size", 16384}, {"hidden_size", 4096}}, false)
                           .seconds);

  Operator copy = load("copy_f32");
  // 10M floats: 40 MB in, 40 MB out (fits in L2). A copy timed at 20 us reads 4 TB/s "total"
  // (copy_f32's SOL fraction is above what DRAM allows), but only its 40 MB of reads bound it.
  LowerBound c = physical_lower_bound(copy.definition, {{"n", 10000000}}, h200_ceilings());
  EXPECT_DOUBLE_EQ(c.dram_bytes, 4e7);
  EXPECT_NEAR(c.seconds, 8.33e-6, 0.01e-6);
  EXPECT_FALSE(faster_than_light(20e-6, c));
  EXPECT_TRUE(faster_than_light(5e-6, c));
  LowerBound big = physical_lower_bound(copy.definition, {{"n", 100000000}}, h200_ceilings());
  EXPECT_DOUBLE_EQ(big.dram_bytes, 4e8 + (4e8 - kL2));
  EXPECT_DOUBLE_EQ(big.compute_seconds, 0.0);  // flops "0"
}

TEST(LowerBound, EmbeddingCountsItsMinBytesNotTheTable) {
  Operator op = load("embedding_v128256_h4096");
  ASSERT_TRUE(op.definition.kharness.min_bytes) << "the embedding family's min_bytes";
  Bindings axes = op.workloads.back().bindings(op.definition);
  const double t = static_cast<double>(axes.at("num_tokens"));
  LowerBound b = physical_lower_bound(op.definition, axes, h200_ceilings());
  // ids are drawn with repeats: at least half the rows are distinct, never the whole table.
  EXPECT_DOUBLE_EQ(b.formula_bytes, t * 4096 * 2 + std::min(t, 128256.0) * 4096 + t * 4);
  EXPECT_DOUBLE_EQ(b.output_bytes, t * 4096 * 2);
  EXPECT_LT(b.dram_bytes, 2 * t * 4096 * 2);
  EXPECT_NE(b.bytes_formula.find("kharness.min_bytes"), std::string::npos);
}

TEST(LowerBound, PagedAttentionReadsEachDistinctPageOnce) {
  for (const char* name :
       {"gqa_paged_decode_h32_kv8_d128_ps1", "mla_paged_decode_h16_ckv512_kpe64_ps1"}) {
    Operator op = load(name);
    for (const auto& w : op.workloads) {
      Bindings axes = w.bindings(op.definition);
      // The cache is only partly read: the formula's pages, not num_pages.
      const TensorSpec* indices = op.definition.find_input("kv_indices");
      ASSERT_TRUE(indices);
      auto bytes =
          verify::make_index_input(*indices, op.definition.kharness.inputs.at("kv_indices"), axes,
                                   axes.at("num_kv_indices"), 7);
      std::set<std::int32_t> distinct;
      for (std::size_t i = 0; i + 4 <= bytes.size(); i += 4) {
        std::int32_t v;
        std::memcpy(&v, bytes.data() + i, 4);
        distinct.insert(v);
      }
      EXPECT_EQ(static_cast<std::int64_t>(distinct.size()), axes.at("num_kv_indices"))
          << name << " " << w.uuid
          << ": the formula counts each page once, so pages must be distinct";
      LowerBound b = physical_lower_bound(op.definition, axes, h200_ceilings());
      EXPECT_GT(b.seconds, 0) << name;
      EXPECT_LE(b.dram_bytes, b.formula_bytes);
    }
  }
}

TEST(LowerBound, SparseAttentionCountsOnlyWhatTheIndicesGuarantee) {
  Operator op = load("dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64");
  const auto& gen = op.definition.kharness.inputs.at("sparse_indices");
  for (const auto& w : op.workloads) {
    Bindings axes = w.bindings(op.definition);
    const std::int64_t tokens = axes.at("num_tokens"), topk = axes.at("topk");
    auto bytes = verify::make_index_input(*op.definition.find_input("sparse_indices"), gen, axes,
                                          static_cast<std::uint64_t>(tokens * topk), 11);
    std::set<std::int32_t> rows;
    std::int64_t valid = 0, least = topk;
    for (std::int64_t t = 0; t < tokens; ++t) {
      std::int64_t n = 0;
      for (std::int64_t k = 0; k < topk; ++k) {
        std::int32_t v;
        std::memcpy(&v, bytes.data() + 4 * (t * topk + k), 4);
        if (v >= 0) {
          rows.insert(v);
          ++n;
        }
      }
      valid += n;
      least = std::min(least, n);
    }
    LowerBound b = physical_lower_bound(op.definition, axes, h200_ceilings());
    // min_flops: every valid (token, row) pair; the data had at least that many.
    EXPECT_LE(b.flops, static_cast<double>(valid) * 16 * (4 * 512 + 2 * 64)) << w.uuid;
    // min_bytes' cache term (one token's valid rows) never exceeds the distinct rows read.
    // Whole rows: the integer division is the bound's own.
    const double cache_term =
        static_cast<double>(topk - topk / 8) * (512 + 64) * 2;  // NOLINT(bugprone-integer-division)
    EXPECT_LE(cache_term, static_cast<double>(rows.size()) * (512 + 64) * 2) << w.uuid;
    EXPECT_GE(least, topk - topk / 8);
  }
}

// Every shipped operator and workload: a bound exists where formulas do, and it never exceeds the
// speed of light the seeds are scored against (so only a time above 100/0.95 = 105% of speed of
// light could be flagged), with the datasheet or with higher measured ceilings.
TEST(LowerBound, NoShippedWorkloadIsBoundAboveItsSpeedOfLight) {
  OperatorRegistry registry = OperatorRegistry::from_environment({});
  MeasuredPeaks m;
  m.copy_bandwidth = 5.2e12;
  m.gemm_flops = {{"bfloat16", 2500e12}};
  int bounded = 0;
  for (const auto& entry : registry.list()) {
    ASSERT_TRUE(entry.error.empty()) << entry.name << ": " << entry.error;
    Operator op = registry.load(entry.name);
    const KharnessSpec& k = op.definition.kharness;
    for (const auto& w : op.workloads) {
      Bindings axes = w.bindings(op.definition);
      SolEstimate sol = speed_of_light(h200(), op.definition, axes, false);
      for (const LightCeilings& c : {h200_ceilings(), light_ceilings(h200(), &m, h200_device())}) {
        LowerBound b = physical_lower_bound(op.definition, axes, c);
        EXPECT_TRUE(std::isfinite(b.seconds)) << entry.name;
        if (k.bytes || k.flops || k.min_bytes || k.min_flops) {
          EXPECT_GT(b.seconds, 0) << entry.name << " " << w.uuid << ": " << b.note;
        }
        if (sol.seconds > 0) {
          EXPECT_LE(b.seconds, sol.seconds) << entry.name << " " << w.uuid;
          // At speed of light (and 5% beyond it) a kernel is not suspect.
          EXPECT_FALSE(faster_than_light(sol.seconds / 1.05, b)) << entry.name << " " << w.uuid;
        }
        // The min formulas never claim more than the formulas do.
        if (k.min_bytes && k.bytes) {
          EXPECT_LE(k.min_bytes->eval(axes), k.bytes->eval(axes)) << entry.name;
        }
        if (k.min_flops && k.flops) {
          EXPECT_LE(k.min_flops->eval(axes), k.flops->eval(axes)) << entry.name;
        }
      }
      ++bounded;
    }
  }
  EXPECT_GT(bounded, 100);
}

TEST(FasterThanLight, BelowTheMarginIsSuspectWithItsEvidence) {
  Operator op = load("rmsnorm_h4096");
  LowerBound b = physical_lower_bound(op.definition, {{"batch_size", 16384}, {"hidden_size", 4096}},
                                      h200_ceilings());
  ASSERT_GT(b.seconds, 0);
  EXPECT_FALSE(faster_than_light(b.seconds, b));
  EXPECT_FALSE(faster_than_light(b.seconds * kFasterThanLightMargin * 1.001, b));
  EXPECT_FALSE(faster_than_light(0.0, b));  // not timed
  auto f = faster_than_light(b.seconds * 0.5, b);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, kFasterThanLight);
  EXPECT_NE(f->message.find("below the physical lower bound"), std::string::npos) << f->message;
  EXPECT_NE(f->message.find("datasheet"), std::string::npos) << f->message;
  EXPECT_DOUBLE_EQ(f->evidence["latency"].get<double>(), b.seconds * 0.5);
  EXPECT_DOUBLE_EQ(f->evidence["bound_seconds"].get<double>(), b.seconds);
  EXPECT_EQ(f->evidence["term"], "memory");
  EXPECT_DOUBLE_EQ(f->evidence["bandwidth"].get<double>(), 4.8e12);
  EXPECT_EQ(f->evidence["bandwidth_source"], "datasheet");
  EXPECT_EQ(f->evidence["peak_dtype"], "float8_e4m3fn");
}

TEST(FasterThanLight, FlagMarksTheWorkloadAndTheVerdict) {
  testing::TempDir tmp;  // no doctor --measure results from this machine
  ::setenv("KHARNESS_CACHE", tmp.path().c_str(), 1);
  Operator op = load("rmsnorm_h4096");
  const Workload& w = workload_with(op, "batch_size", 16384);
  std::vector<GpuSpec> specs = load_gpu_specs(source_dir() / "configs" / "gpus");
  for (double latency : {80e-6, 10e-6}) {
    Verdict v;
    WorkloadVerdict wv;
    wv.uuid = w.uuid;
    wv.timing = timing_from_json({{"candidate", {{"latency", latency}}}});
    flag_faster_than_light(op.definition, w.bindings(op.definition), specs, h200_device(),
                           "580.82.07", wv, v);
    ASSERT_TRUE(wv.timing.lower_bound.is_object()) << to_json(wv.timing).dump();
    EXPECT_NEAR(wv.timing.lower_bound["seconds"].get<double>(), 43.0e-6, 1e-6);
    EXPECT_EQ(wv.suspect.has_value(), latency < 40e-6);
    EXPECT_EQ(v.suspect, latency < 40e-6 ? kFasterThanLight : "");
    if (wv.suspect) EXPECT_EQ(wv.suspect->evidence["workload"], w.uuid);
  }
  // A GPU without a spec, or a workload not timed: nothing, and no throw.
  Verdict v;
  WorkloadVerdict wv;
  GpuInfo other;
  other.name = "Some GPU";
  wv.timing = timing_from_json({{"candidate", {{"latency", 1e-9}}}});
  flag_faster_than_light(op.definition, w.bindings(op.definition), specs, other, "", wv, v);
  EXPECT_FALSE(wv.suspect);
  wv.timing = timing_from_json({{"candidate", "garbage"}});
  flag_faster_than_light(op.definition, w.bindings(op.definition), specs, h200_device(), "", wv, v);
  EXPECT_FALSE(wv.suspect);
  EXPECT_TRUE(v.suspect.empty());
  ::unsetenv("KHARNESS_CACHE");
}

// A verdict that PASSED with one workload timed faster than light.
Verdict suspect_verdict(const std::string& name, double speedup) {
  Verdict v;
  v.solution = name;
  v.source = name + ".cu";
  v.definition = "rmsnorm_h4096";
  WorkloadVerdict w;
  w.uuid = "99179b18-6c1f-4261-aab0-0860eb7770a1";
  w.axes = {{"batch_size", 1}};
  w.timing = timing_from_json({{"candidate", {{"latency", 1e-7}}}, {"speedup", speedup}});
  w.suspect = Failure{kFasterThanLight,
                      "timed 0.100 us, below the physical lower bound",
                      {{"latency", 1e-7}, {"bound_seconds", 1e-6}, {"term", "memory"}}};
  v.workloads.push_back(w);
  v.suspect = kFasterThanLight;
  v.score = score_from_json({{"mean_speedup", speedup}});
  return v;
}

Verdict clean_verdict(const std::string& name, double speedup) {
  Verdict v = suspect_verdict(name, speedup);
  v.suspect.clear();
  v.workloads[0].suspect.reset();
  v.workloads[0].timing.candidate->latency = 2e-6;
  return v;
}

TEST(Suspect, SurvivesJsonRoundTrip) {
  Verdict v = suspect_verdict("cheat", 50.0);
  json j = to_json(v);
  EXPECT_EQ(j["suspect"], "faster_than_light");
  EXPECT_EQ(j["workloads"][0]["suspect"]["kind"], "faster_than_light");
  Verdict back = verdict_from_json(json::parse(j.dump()));
  EXPECT_EQ(back.suspect, kFasterThanLight);
  ASSERT_TRUE(back.workloads[0].suspect);
  EXPECT_EQ(back.workloads[0].suspect->evidence["bound_seconds"], 1e-6);
  EXPECT_TRUE(back.passed());
  EXPECT_FALSE(back.clean_pass());
  EXPECT_EQ(back.first_suspect(), &back.workloads[0]);
  // A clean verdict writes null and reads back clean; an old verdict without the key too.
  json clean = to_json(clean_verdict("honest", 1.0));
  EXPECT_TRUE(clean["suspect"].is_null());
  EXPECT_TRUE(verdict_from_json(clean).clean_pass());
  clean.erase("suspect");
  EXPECT_TRUE(verdict_from_json(clean).clean_pass());
}

TEST(Suspect, ExitsOneThoughPassed) {
  EXPECT_EQ(cli::exit_code_of({clean_verdict("a", 1.0)}), ExitCode::kPassed);
  EXPECT_EQ(cli::exit_code_of({clean_verdict("a", 1.0), suspect_verdict("b", 9.0)}),
            ExitCode::kFailed);
  EXPECT_EQ(cli::exit_code_of({suspect_verdict("b", 9.0)}), ExitCode::kFailed);
}

TEST(Suspect, ScoreRanksItBelowEveryCleanPassWithAWarning) {
  Verdict failed = clean_verdict("broken", 0.0);
  failed.status = Status::kIncorrectNumerical;
  std::vector<Verdict> verdicts = {suspect_verdict("cheat", 50.0), clean_verdict("slow", 0.8),
                                   failed, clean_verdict("fast", 1.5)};
  std::string md = report::to_markdown(verdicts);
  auto at = [&](const std::string& s) { return md.find(s); };
  ASSERT_NE(at("| 1 | fast |"), std::string::npos) << md;
  EXPECT_NE(at("| 2 | slow |"), std::string::npos) << md;
  EXPECT_NE(at("| 3 | cheat | PASSED (SUSPECT) |"), std::string::npos) << md;
  EXPECT_NE(at("| 4 | broken |"), std::string::npos) << md;
  EXPECT_NE(at("suspect: faster_than_light"), std::string::npos) << md;
  EXPECT_NE(at("**Warning:** 1 solution PASSED but was timed faster than light"), std::string::npos)
      << md;
  EXPECT_NE(at("4 solutions: 2 passed, 1 failed, 1 suspect."), std::string::npos) << md;
  // The best per workload is never the suspect, though its speedup is the highest.
  EXPECT_NE(at("| fast | 2.00 us | 1.500x |"), std::string::npos) << md;

  json j = report::to_report_json(verdicts, "2025-01-01T00:00:00Z");
  EXPECT_EQ(j["summary"]["passed"], 2);
  EXPECT_EQ(j["summary"]["suspect"], 1);
  EXPECT_EQ(j["summary"]["failed"], 1);
  EXPECT_EQ(j["solutions"][0]["suspect"], "faster_than_light");

  std::string xml = report::to_junit(verdicts, "kharness");
  EXPECT_NE(xml.find("<failure type=\"faster_than_light\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("failures=\"2\""), std::string::npos) << xml;

  report::TraceOptions options;
  options.timestamp = "2025-01-01T00:00:00Z";
  std::string traces = report::to_traces_jsonl({suspect_verdict("cheat", 50.0)}, options);
  json line = json::parse(traces.substr(0, traces.find('\n')));
  EXPECT_EQ(line["evaluation"]["status"], "RUNTIME_ERROR") << traces;
  EXPECT_EQ(line["evaluation"]["log"].get<std::string>().rfind("SUSPECT", 0), 0u) << traces;
  EXPECT_TRUE(line["evaluation"]["performance"].is_null());
}

TEST(Suspect, IsNeverPromoted) {
  EXPECT_EQ(controller::promotion_refusal(clean_verdict("honest", 1.0)), "");
  std::string why = controller::promotion_refusal(suspect_verdict("cheat", 50.0));
  EXPECT_NE(why.find("suspect (faster_than_light)"), std::string::npos) << why;
  Verdict failed = clean_verdict("broken", 0.0);
  failed.status = Status::kIncorrectNumerical;
  EXPECT_NE(controller::promotion_refusal(failed).find("does not pass"), std::string::npos);
}

}  // namespace
}  // namespace kharness::bench
