// The profile stage without a GPU: the diagnosis rules on counter sets, the prompt text, the JSON
// form, the occupancy calculator, the SASS scan and the CLI's error paths.
//
// The counter sets below are realistic values written by hand for an H200 (a copy kernel, a naive
// fp32 GEMM, a copy through a spilling per-thread array, ...); replace them with sets recorded by
// `kharness profile --json` on the GPU (tests/gpu/profile_test.cpp runs the same fixtures).
#include "kharness/profile.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kharness/device.hpp"
#include "profile/occupancy.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

using nlohmann::json;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

bool any_contains(const std::vector<std::string>& list, const std::string& part) {
  for (const auto& s : list)
    if (contains(s, part)) return true;
  return false;
}

KernelProfile kernel(const std::string& name, std::map<std::string, double> values) {
  KernelProfile k;
  k.kernel = name;
  k.grid = {2112, 1, 1};
  k.block = {256, 1, 1};
  for (const auto& [n, v] : values) k.metrics[n] = Metric{v, "cupti", "", ""};
  return k;
}

// copy_f32, n = 1e8, 16-byte loads: DRAM-bound. Recorded on an H200 (kharness profile, session 2;
// ncu agreed within 1.5 points on every throughput): L2 reads busier than DRAM because every DRAM
// byte passes through it, yet DRAM is the limiter.
KernelProfile copy_kernel() {
  KernelProfile k = kernel("copy_stream", {{metric::kDuration, 199072},
                                           {metric::kSmThroughput, 6.18},
                                           {metric::kMemThroughput, 83.53},
                                           {metric::kDramThroughput, 83.53},
                                           {metric::kL2Throughput, 87.59},
                                           {metric::kL1Throughput, 28.42},
                                           {metric::kDramRead, 4.00022e8},
                                           {metric::kDramWrite, 4.0002e8},
                                           {metric::kL2HitRate, 50.37},
                                           {metric::kL1HitRate, 0.0},
                                           {metric::kAchievedOccupancy, 91.38},
                                           {metric::kTheoreticalOccupancy, 100.0},
                                           {metric::kGlobalLoadEfficiency, 100.0},
                                           {metric::kTensorPipe, 0.0},
                                           {metric::kRegistersPerThread, 32}});
  k.statics.registers = 16;
  k.statics.spill_store_bytes = k.statics.spill_load_bytes = k.statics.stack_bytes = 0;
  return k;
}

// gemm_n6144_k4096, M = 256, one thread per output, fp32 FMAs from global memory: the SM's load
// path (L1) is the busy unit, the tensor pipe idle.
KernelProfile naive_gemm_kernel() {
  KernelProfile k = kernel("gemm_naive", {{metric::kDuration, 5.1e6},
                                          {metric::kSmThroughput, 71.0},
                                          {metric::kMemThroughput, 88.0},
                                          {metric::kDramThroughput, 9.5},
                                          {metric::kL2Throughput, 31.0},
                                          {metric::kL1Throughput, 88.0},
                                          {metric::kL1HitRate, 93.0},
                                          {metric::kL2HitRate, 96.0},
                                          {metric::kAchievedOccupancy, 91.0},
                                          {metric::kTheoreticalOccupancy, 100.0},
                                          {metric::kIssueActive, 68.0},
                                          {metric::kFmaPipe, 18.0},
                                          {metric::kTensorPipe, 0.0},
                                          {metric::kGlobalLoadEfficiency, 12.5}});
  k.grid = {192, 32, 1};
  k.block = {32, 8, 1};
  k.statics.registers = 32;
  k.statics.spill_store_bytes = k.statics.spill_load_bytes = 0;
  k.statics.tensor_cores = "no";
  k.statics.expected_tensor_instructions = "HGMMA/QGMMA";
  return k;
}

// copy through float v[384]: 255 registers, 2 KB of spills, one block per SM.
KernelProfile spill_kernel() {
  KernelProfile k = kernel("copy_spill", {{metric::kDuration, 410000},
                                          {metric::kSmThroughput, 21.0},
                                          {metric::kMemThroughput, 44.0},
                                          {metric::kDramThroughput, 28.0},
                                          {metric::kL2Throughput, 41.0},
                                          {metric::kL1Throughput, 44.0},
                                          {metric::kAchievedOccupancy, 12.2},
                                          {metric::kTheoreticalOccupancy, 12.5},
                                          {metric::kRegistersPerThread, 255},
                                          {metric::kOccupancyLimitRegisters, 1},
                                          {metric::kOccupancyLimitSharedMem, 32},
                                          {metric::kOccupancyLimitWarps, 8},
                                          {metric::kOccupancyLimitBlocks, 32},
                                          {metric::kLocalLoadSectors, 2.1e7},
                                          {metric::kLocalStoreSectors, 2.0e7},
                                          {metric::kGlobalLoadSectors, 1.25e6}});
  k.grid = {102, 1, 1};
  k.statics.registers = 255;
  k.statics.spill_store_bytes = 2028;
  k.statics.spill_load_bytes = 2128;
  k.statics.stack_bytes = 1976;
  k.stalls = {{"long_scoreboard", 71.0}, {"lg_throttle", 9.0}};
  return k;
}

DiagnosisContext h200(const std::string& family) {
  DiagnosisContext c;
  c.family = family;
  c.arch = "sm_90a";
  c.sm_count = 132;
  return c;
}

TEST(ProfileDiagnosis, CopyIsMemoryBoundOnDram) {
  DiagnosisContext ctx = h200("copy");
  ctx.sol_fraction = 0.83;  // 4.0 TB/s of the 4.8 TB/s datasheet
  ctx.sol_bound = "memory";
  ctx.min_bytes = 8e8;
  Diagnosis d = diagnose(copy_kernel(), ctx);
  EXPECT_EQ(d.kind, "memory_bound");
  EXPECT_EQ(d.limiter, "dram");
  EXPECT_TRUE(any_contains(d.evidence, "DRAM throughput 83.5%")) << d.summary;
  EXPECT_GE(d.evidence.size(), 3u);
  EXPECT_LE(d.evidence.size(), 4u);
  EXPECT_GE(d.directions.size(), 1u);
  EXPECT_LE(d.directions.size(), 3u);
  EXPECT_TRUE(any_contains(d.directions, "skills/profiling.md"));
  // The traffic is the minimum: no "read each byte once" direction.
  EXPECT_FALSE(any_contains(d.directions, "minimum"));
}

TEST(ProfileDiagnosis, ExcessDramTrafficIsNamed) {
  DiagnosisContext ctx = h200("rmsnorm");
  ctx.min_bytes = 2e8;  // the kernel moved 8e8
  Diagnosis d = diagnose(copy_kernel(), ctx);
  EXPECT_EQ(d.kind, "memory_bound");
  EXPECT_TRUE(any_contains(d.directions, "4.0x the definition's minimum"));
}

TEST(ProfileDiagnosis, NaiveGemmIsComputeBoundWithAnIdleTensorPipe) {
  Diagnosis d = diagnose(naive_gemm_kernel(), h200("gemm"));
  EXPECT_EQ(d.kind, "compute_bound");
  EXPECT_EQ(d.limiter, "l1");
  EXPECT_TRUE(any_contains(d.evidence, "tensor pipe 0.0%"));
  EXPECT_TRUE(any_contains(d.directions, "Use tensor cores"));
  EXPECT_TRUE(any_contains(d.directions, "skills/gemm.md"));
  EXPECT_TRUE(any_contains(d.notes, "uncoalesced"));
  EXPECT_TRUE(any_contains(d.notes, "HGMMA/QGMMA"));
}

// The driver sizes the shared-memory carveout to fit the blocks the other limits allow, so the
// shared-memory limit ties with the real limiter: shared memory is named only when strictly least.
TEST(ProfileDiagnosis, SharedMemoryIsTheLimiterOnlyWhenStrictlyLeast) {
  auto limiter_note = [](double regs, double smem, double warps) {
    KernelProfile k = spill_kernel();
    k.metrics[metric::kOccupancyLimitRegisters].value = regs;
    k.metrics[metric::kOccupancyLimitSharedMem].value = smem;
    k.metrics[metric::kOccupancyLimitWarps].value = warps;
    k.metrics[metric::kOccupancyLimitBlocks].value = 32;
    Diagnosis d = diagnose(k, h200("copy"));
    for (const auto& n : d.notes)
      if (contains(n, "limited by")) return n;
    return std::string("(no occupancy note)");
  };
  EXPECT_TRUE(contains(limiter_note(8, 2, 2), "limited by warps per block"))
      << limiter_note(8, 2, 2);
  EXPECT_TRUE(contains(limiter_note(2, 2, 8), "limited by registers")) << limiter_note(2, 2, 8);
  EXPECT_TRUE(contains(limiter_note(8, 1, 8), "limited by shared memory")) << limiter_note(8, 1, 8);
}

TEST(ProfileDiagnosis, NothingBusyWithGoodOccupancyIsLatencyBound) {
  KernelProfile k = naive_gemm_kernel();
  k.metrics[metric::kSmThroughput].value = 41.0;
  k.metrics[metric::kL1Throughput].value = 45.0;
  k.stalls = {{"long_scoreboard", 55.0}, {"wait", 10.0}};
  Diagnosis d = diagnose(k, h200("gemm"));
  EXPECT_EQ(d.kind, "latency_bound");
  EXPECT_TRUE(any_contains(d.evidence, "top stall long_scoreboard 55.0%"));
  EXPECT_TRUE(any_contains(d.directions, "keep more loads in flight"));
}

TEST(ProfileDiagnosis, SpillingKernelNamesSpillsAndOccupancy) {
  Diagnosis d = diagnose(spill_kernel(), h200("copy"));
  EXPECT_EQ(d.kind, "occupancy_limited");
  EXPECT_EQ(d.limiter, "registers");
  EXPECT_TRUE(any_contains(d.notes, "spills: 2028 B stored / 2128 B loaded"));
  EXPECT_TRUE(any_contains(d.notes, "local memory is 94% of the L1 load sectors"));
  EXPECT_TRUE(any_contains(d.notes, "theoretical 12.5%, limited by registers"));
  ASSERT_FALSE(d.directions.empty());
  EXPECT_TRUE(contains(d.directions[0], "Remove local memory"));
  EXPECT_TRUE(any_contains(d.evidence, "255 registers/thread"));
}

TEST(ProfileDiagnosis, NearSpeedOfLightIsAtTheRoofline) {
  DiagnosisContext ctx = h200("copy");
  ctx.sol_fraction = 0.93;
  Diagnosis d = diagnose(copy_kernel(), ctx);
  EXPECT_EQ(d.kind, "at_roofline");
  EXPECT_EQ(d.limiter, "dram");
  EXPECT_TRUE(any_contains(d.evidence, "93.0% of speed-of-light"));
  EXPECT_TRUE(any_contains(d.directions, "At the roofline"));
}

TEST(ProfileDiagnosis, MissingCountersAreNotZeros) {
  // Only the roll-ups: memory at 70% with DRAM and L2 unmeasured is still memory-bound.
  KernelProfile k = kernel("k", {{metric::kSmThroughput, 30.0}, {metric::kMemThroughput, 70.0}});
  k.metrics[metric::kDramThroughput] = Metric{std::nullopt, "missing", "", "not supported"};
  Diagnosis d = diagnose(k, h200("copy"));
  EXPECT_EQ(d.kind, "memory_bound");
  EXPECT_FALSE(any_contains(d.evidence, "DRAM"));
  // Nothing at all: unknown, not "latency-bound at 0%".
  Diagnosis none = diagnose(kernel("k", {}), h200("copy"));
  EXPECT_EQ(none.kind, "unknown");
}

TEST(ProfileDiagnosis, SmallGridIsNoted) {
  KernelProfile k = naive_gemm_kernel();
  k.grid = {16, 1, 1};
  k.metrics[metric::kSmThroughput].value = 8.0;
  k.metrics[metric::kL1Throughput].value = 9.0;
  Diagnosis d = diagnose(k, h200("gemm"));
  EXPECT_EQ(d.kind, "latency_bound");
  EXPECT_TRUE(any_contains(d.notes, "grid of 16 blocks leaves 116 of 132 SMs idle"));
  EXPECT_TRUE(any_contains(d.directions, "Too few blocks"));
}

// Recorded on the H200 (tests/fixtures/bench/two_kernels.cu, rmsnorm batch 1): one 256-thread
// block; 12.4% achieved occupancy is the grid's doing, not registers' (theoretical 100%).
TEST(ProfileDiagnosis, LowAchievedOccupancyOfATinyGridIsTooFewBlocks) {
  KernelProfile k = kernel("rmsnorm_kernel", {{metric::kDuration, 9060},
                                              {metric::kSmThroughput, 6.7},
                                              {metric::kMemThroughput, 0.2},
                                              {metric::kAchievedOccupancy, 12.4},
                                              {metric::kTheoreticalOccupancy, 100.0},
                                              {metric::kRegistersPerThread, 27},
                                              {metric::kOccupancyLimitRegisters, 9},
                                              {metric::kOccupancyLimitBlocks, 32}});
  k.grid = {1, 1, 1};
  k.block = {256, 1, 1};
  k.stalls = {{"long_scoreboard", 78.6}, {"wait", 5.7}};
  Diagnosis d = diagnose(k, h200("rmsnorm"));
  EXPECT_EQ(d.kind, "latency_bound");
  EXPECT_TRUE(any_contains(d.notes, "grid of 1 blocks leaves 131 of 132 SMs idle"));
  EXPECT_TRUE(any_contains(d.directions, "Too few blocks"));
  EXPECT_FALSE(any_contains(d.directions, "Fewer registers"));
  // The same kernel on a full grid with that occupancy is occupancy-limited, with no resource
  // named: none caps blocks per SM below the block limit's 100%.
  k.grid = {4096, 1, 1};
  Diagnosis full = diagnose(k, h200("rmsnorm"));
  EXPECT_EQ(full.kind, "occupancy_limited");
  EXPECT_EQ(full.limiter, "");
  EXPECT_FALSE(contains(full.summary, "limited by")) << full.summary;
}

Profile two_kernel_profile() {
  Profile p;
  p.solution = "spill";
  p.source = "tests/fixtures/profile/spill.cu";
  p.definition = "copy_f32";
  p.family = "copy";
  p.workload = "aa7138b5-3fd1-4aa6-9c75-4406ceef39b8";
  p.axes = {{"n", 10000000}};
  p.gpu = "NVIDIA H200";
  p.chip = "GH100";
  p.arch = "sm_90a";
  p.sm_count = 132;
  p.passes = 9;
  p.kernels = {copy_kernel(), spill_kernel()};
  p.kernels[1].launch = 1;
  p.kernels[1].metrics[metric::kTensorPipe] = Metric{std::nullopt, "missing", "", "not supported"};
  p.gpu_seconds = 615e-6;
  p.sol = SolSummary{80e-6, 615e-6, 0.13, "memory", 0, 8e7, ""};
  diagnose_profile(p);
  return p;
}

TEST(ProfileDiagnosis, ThePlanTakesItsLongestKernelsDiagnosis) {
  Profile p = two_kernel_profile();
  EXPECT_EQ(p.kernels[0].diagnosis.kind, "memory_bound");
  EXPECT_EQ(p.kernels[1].diagnosis.kind, "occupancy_limited");
  EXPECT_EQ(p.diagnosis.kind, "occupancy_limited");  // 410 us against 205 us
}

TEST(ProfileText, IsCompactAndSaysWhy) {
  Profile p = two_kernel_profile();
  std::string text = diagnosis_text(p);
  EXPECT_TRUE(contains(text, "13.0% of speed-of-light")) << text;
  EXPECT_TRUE(contains(text, "kernel copy_stream (launch 0")) << text;
  EXPECT_TRUE(contains(text, "memory-bound: DRAM at 83.5% of peak")) << text;
  EXPECT_TRUE(contains(text, "occupancy-limited")) << text;
  EXPECT_TRUE(contains(text, "note: spills")) << text;
  EXPECT_TRUE(contains(text, "stalls (% of active warp cycles): long_scoreboard 71.0%")) << text;
  EXPECT_LT(text.size(), 3000u) << text;  // it goes into prompts
}

TEST(ProfileJson, RoundTripKeepsMissingAsNull) {
  Profile p = two_kernel_profile();
  p.kernels[1].statics.tensor_cores = "no";
  p.kernels[1].statics.tensor_instructions = {"HMMA"};
  p.warnings = {"CUPTI dropped 1 range(s)"};
  p.kernels[1].metrics[metric::kTensorPipe].actual_name = "x";
  json j = to_json(p);
  EXPECT_EQ(j["schema"], kProfileSchema);
  EXPECT_TRUE(j["kernels"][1]["metrics"][metric::kTensorPipe]["value"].is_null());
  EXPECT_EQ(j["kernels"][1]["metrics"][metric::kTensorPipe]["source"], "missing");
  Profile back = profile_from_json(json::parse(j.dump()));
  EXPECT_EQ(to_json(back), j);
  EXPECT_FALSE(back.kernels[1].value(metric::kTensorPipe).has_value());
  EXPECT_EQ(back.kernels[1].statics.spill_store_bytes, 2028);
  EXPECT_EQ(back.kernels[0].statics.static_shared_bytes, -1);  // unknown stays unknown
  EXPECT_EQ(back.diagnosis.kind, "occupancy_limited");
  EXPECT_EQ(back.warnings, p.warnings);
  EXPECT_TRUE(contains(diagnosis_text(back), "warning: CUPTI dropped 1 range(s)"));
  ASSERT_TRUE(back.sol.has_value());
  EXPECT_DOUBLE_EQ(back.sol->fraction, 0.13);
}

TEST(ProfileJson, MalformedProfilesAreInputErrors) {
  testing::expect_input_error([] { profile_from_json(json::array()); }, "profile", "object");
  testing::expect_input_error(
      [] {
        profile_from_json({{"schema", "other/1"}, {"kernels", {}}});
      },
      "profile: schema", "kharness.profile/1");
  testing::expect_input_error(
      [] {
        profile_from_json({{"schema", kProfileSchema}, {"kernels", {{{"launch", "zero"}}}}});
      },
      "profile", "wrong type");
  // A launch index no int holds is named, not converted (the cast would be undefined behaviour).
  testing::expect_input_error(
      [] {
        profile_from_json({{"schema", kProfileSchema}, {"kernels", {{{"launch", 1e308}}}}});
      },
      "profile: launch", "whole number");
  testing::expect_input_error(
      [] {
        profile_from_json({{"schema", kProfileSchema}});
      },
      "profile: kernels", "missing");
  // The JSON library's own words ("[json.exception.type_error.302] ...") are never quoted.
  try {
    profile_from_json({{"schema", kProfileSchema}, {"kernels", {{{"launch", "zero"}}}}});
    ADD_FAILURE() << "a launch index that is a string was accepted";
  } catch (const std::exception& e) {
    EXPECT_EQ(std::string(e.what()).find("json.exception"), std::string::npos) << e.what();
  }
}

TEST(ProfileMetrics, ListCoversTheIssueAndHasTensorAlternatives) {
  const auto& names = profile_metric_names();
  for (const char* want :
       {"gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum",
        "dram__bytes_write.sum", "lts__t_sector_hit_rate.pct", "l1tex__t_sector_hit_rate.pct",
        "sm__warps_active.avg.pct_of_peak_sustained_active", "launch__occupancy_limit_registers",
        "launch__occupancy_limit_shared_mem", "launch__registers_per_thread",
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
        "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  auto alts = profile_metric_alternatives(metric::kTensorPipe);
  EXPECT_NE(std::find(alts.begin(), alts.end(),
                      "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"),
            alts.end());
  EXPECT_TRUE(profile_metric_alternatives(metric::kDuration).empty());
}

profile::OccupancyDevice h200_device() {
  profile::OccupancyDevice d;
  d.cc_major = 9;
  d.cc_minor = 0;
  d.max_threads_per_block = 1024;
  d.max_threads_per_sm = 2048;
  d.regs_per_block = 65536;
  d.regs_per_sm = 65536;
  d.shared_per_block = 48 * 1024;
  d.shared_per_sm = 233472;
  d.shared_per_block_optin = 232448;
  d.reserved_shared_per_block = 1024;
  d.sm_count = 132;
  return d;
}

TEST(ProfileOccupancy, RegistersAndSharedMemoryLimitBlocks) {
  profile::OccupancyFunction f;
  f.registers = 255;
  profile::Occupancy o = profile::compute_occupancy(h200_device(), f, 256, 0);
  ASSERT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.limit_registers, 1);
  EXPECT_EQ(o.blocks_per_sm, 1);
  EXPECT_DOUBLE_EQ(o.theoretical_percent, 12.5);

  f.registers = 32;
  o = profile::compute_occupancy(h200_device(), f, 256, 0);
  ASSERT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.limit_warps, 8);
  EXPECT_EQ(o.blocks_per_sm, 8);
  EXPECT_DOUBLE_EQ(o.theoretical_percent, 100.0);

  f.max_dynamic_shared = 200 * 1024;
  o = profile::compute_occupancy(h200_device(), f, 128, 100 * 1024);
  ASSERT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.limit_shared_mem, 2);  // 2 x (100 KiB + 1 KiB reserved) fit in 228 KiB
  EXPECT_EQ(o.blocks_per_sm, 2);
}

// The carveouts recorded on the H200 (CUPTI sharedMemoryExecuted) for the profile fixtures, and
// the limits ncu reported for them.
TEST(ProfileOccupancy, SharedMemLimitFollowsTheDriversCarveout) {
  profile::OccupancyFunction f;
  f.registers = 29;  // copy.cu: 256 threads, no shared memory, the driver chose 32 KiB
  profile::Occupancy o = profile::compute_occupancy(h200_device(), f, 256, 0, 32 * 1024);
  ASSERT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.limit_shared_mem, 32);  // 32 KiB / 1 KiB reserved, at the 32-block limit
  f.registers = 255;                  // spill.cu: one block by registers, the driver chose 8 KiB
  o = profile::compute_occupancy(h200_device(), f, 256, 0, 8 * 1024);
  ASSERT_TRUE(o.ok) << o.error;
  EXPECT_EQ(o.limit_shared_mem, 8);
  EXPECT_EQ(o.limit_registers, 1);
  // Unknown carveout: the calculator's, capped at the block limit.
  o = profile::compute_occupancy(h200_device(), f, 256, 0, 0);
  EXPECT_EQ(o.limit_shared_mem, 32);
  // With shared memory: 100 KiB of a 132 KiB carveout plus the reservation: one block.
  f.registers = 32;
  f.max_dynamic_shared = 200 * 1024;
  o = profile::compute_occupancy(h200_device(), f, 128, 100 * 1024, 132 * 1024);
  EXPECT_EQ(o.limit_shared_mem, 1);
}

TEST(ProfileSass, FindsTensorCoreInstructionsPerFunction) {
  const std::string cuobjdump =
      "\tcode for sm_90a\n"
      "\t\tFunction : gemm_wgmma\n"
      "        /*0100*/                   HGMMA.64x128x16.F32 R24, gdesc[UR4], R24 ;\n"
      "        /*0110*/                   FFMA R1, R2, R3, R4 ;\n"
      "\t\tFunction : gemm_mma\n"
      "        /*0200*/                   HMMA.16816.F32 R4, R8, R12, R4 ;\n"
      "\t\tFunction : copy\n"
      "        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;\n";
  auto fns = split_sass_by_function(cuobjdump);
  ASSERT_EQ(fns.size(), 3u);
  EXPECT_EQ(tensor_instructions_in_sass(fns["gemm_wgmma"]), std::vector<std::string>{"HGMMA"});
  EXPECT_EQ(tensor_instructions_in_sass(fns["gemm_mma"]), std::vector<std::string>{"HMMA"});
  EXPECT_TRUE(tensor_instructions_in_sass(fns["copy"]).empty());

  const std::string nvdisasm =
      "\t.section\t.text.k_fp8,\"ax\",@progbits\n"
      "\t.text.k_fp8:\n"
      "        /*0000*/                   QGMMA.64x256x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24 ;\n";
  auto n = split_sass_by_function(nvdisasm);
  ASSERT_EQ(n.count("k_fp8"), 1u);
  EXPECT_EQ(tensor_instructions_in_sass(n["k_fp8"]), std::vector<std::string>{"QGMMA"});

  EXPECT_EQ(expected_tensor_instructions("sm_90a"), "HGMMA/QGMMA");
  EXPECT_EQ(expected_tensor_instructions("sm_100a"), "UTCHMMA/UTCQMMA");
  EXPECT_EQ(expected_tensor_instructions("sm_80"), "HMMA");
}

// ---- the command line, on this machine (no GPU needed for these paths) ----

TEST(ProfileCli, NoGpuIsAnEnvironmentError) {
  if (gpu_available()) GTEST_SKIP() << "a GPU is present";
  auto r = testing::kharness("profile '" + testing::fixture("profile/copy.cu").string() + "'");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_TRUE(contains(r.out, "kharness: error:")) << r.out;
  // Unknown extra metrics do not change that: they are reported missing on a GPU.
  r = testing::kharness("profile '" + testing::fixture("profile/copy.cu").string() +
                        "' --metrics no__such_metric.sum");
  EXPECT_EQ(r.exit_code, 3) << r.out;
}

TEST(ProfileCli, BadInputIsAUsageError) {
  auto r = testing::kharness("profile /no/such/solution.cu --operator copy_f32");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  r = testing::kharness("profile '" + testing::fixture("profile/copy.cu").string() +
                        "' --workload ffffffff");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "ffffffff")) << r.out;
}

TEST(ProfileCli, ASolutionThatDoesNotCompileFails) {
  auto r = testing::kharness("profile '" + testing::fixture("bad/syntax_error_line37.cu").string() +
                             "'");
  EXPECT_EQ(r.exit_code, 1) << r.out;
}

// A profile is a task of the one GPU worker that evaluations use (`__worker`).
TEST(ProfileCli, TheWorkerAnswersOneJsonLine) {
  if (gpu_available()) GTEST_SKIP() << "a GPU is present";
  json request = {{"task", "profile"},
                  {"solution", testing::fixture("profile/spill.cu").string()},
                  {"arch", "sm_90a"},
                  {"workload", "aa7138b5-3fd1-4aa6-9c75-4406ceef39b8"}};
  auto r = testing::run_command("echo '" + request.dump() + "' | '" + KHARNESS_BINARY +
                                "' __worker 2>/dev/null");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  json line = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(line.is_discarded()) << r.out;
  EXPECT_EQ(line["event"], "error");
  EXPECT_EQ(line["code"], 3);
}

TEST(ProfileCli, IsInTheCommandTable) {
  auto r = testing::kharness("--help");
  EXPECT_TRUE(contains(r.out, "profile")) << r.out;
  EXPECT_FALSE(contains(r.out, "__worker")) << r.out;
}

}  // namespace
}  // namespace kharness
