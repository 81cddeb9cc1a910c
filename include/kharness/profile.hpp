// The profile stage: hardware counters per kernel launch of a solution's plan (CUPTI range
// profiler, user replay with a clean L2 per pass, one auto range per launch), static facts per
// kernel (registers, spills, shared memory, tensor-core instructions in the SASS), and a short
// diagnosis — memory-bound, compute-bound, latency-bound, occupancy-limited or at the roofline —
// with the few metric values that show it, the fraction of speed-of-light and 1–3 directions from
// skills/ (the rules are documented in skills/profiling.md). docs/pipeline.md#profile.
//
// The counters are collected in a worker process (kharness re-executed), like `check`: a crash or
// hang of the candidate ends the worker, not the harness. The diagnosis is a pure function of a
// KernelProfile, testable without a GPU.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kharness/target.hpp"

namespace kharness {

inline constexpr const char* kProfileSchema = "kharness.profile/1";

// Metric names the profile stage asks for (CUPTI / Nsight Compute names).
namespace metric {
inline constexpr const char* kDuration = "gpu__time_duration.sum";  // ns
inline constexpr const char* kSmThroughput = "sm__throughput.avg.pct_of_peak_sustained_elapsed";
inline constexpr const char* kMemThroughput =
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed";
inline constexpr const char* kDramThroughput = "dram__throughput.avg.pct_of_peak_sustained_elapsed";
inline constexpr const char* kL2Throughput = "lts__throughput.avg.pct_of_peak_sustained_elapsed";
inline constexpr const char* kL1Throughput = "l1tex__throughput.avg.pct_of_peak_sustained_active";
inline constexpr const char* kDramRead = "dram__bytes_read.sum";    // bytes
inline constexpr const char* kDramWrite = "dram__bytes_write.sum";  // bytes
inline constexpr const char* kL2HitRate = "lts__t_sector_hit_rate.pct";
inline constexpr const char* kL1HitRate = "l1tex__t_sector_hit_rate.pct";
inline constexpr const char* kAchievedOccupancy =
    "sm__warps_active.avg.pct_of_peak_sustained_active";
inline constexpr const char* kIssueActive = "sm__inst_issued.avg.pct_of_peak_sustained_active";
inline constexpr const char* kFmaPipe =
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active";
// The tensor pipe: the first of these the device supports is reported under kTensorPipe.
inline constexpr const char* kTensorPipe =
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active";
inline constexpr const char* kGlobalLoadEfficiency =
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct";
inline constexpr const char* kLocalLoadSectors = "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum";
inline constexpr const char* kLocalStoreSectors = "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum";
inline constexpr const char* kGlobalLoadSectors = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum";
// Launch facts. Nsight Compute's launch__* metrics are not hardware counters; when CUPTI does not
// offer them they are computed from the launch (function attributes, device limits) with the
// occupancy calculator's rules, source "driver".
inline constexpr const char* kRegistersPerThread = "launch__registers_per_thread";
inline constexpr const char* kOccupancyLimitRegisters = "launch__occupancy_limit_registers";
inline constexpr const char* kOccupancyLimitSharedMem = "launch__occupancy_limit_shared_mem";
inline constexpr const char* kOccupancyLimitWarps = "launch__occupancy_limit_warps";
inline constexpr const char* kOccupancyLimitBlocks = "launch__occupancy_limit_blocks";
// The shared-memory carveout the driver chose for the launch (bytes per SM), from the CUPTI
// activity record of one more launch of the plan after the counters (source "driver": the
// driver's choice); it bounds launch__occupancy_limit_shared_mem.
inline constexpr const char* kSharedMemConfigSize = "launch__shared_mem_config_size";
inline constexpr const char* kTheoreticalOccupancy = "sm__maximum_warps_per_active_cycle_pct";
// Warp stall reasons: smsp__warps_issue_stalled_<reason>.sum over smsp__warps_active.sum.
inline constexpr const char* kWarpsActiveSum = "smsp__warps_active.sum";
inline constexpr const char* kStallPrefix = "smsp__warps_issue_stalled_";
}  // namespace metric

// The metrics of every kernel (the stall reasons come on top, as many as the device has).
const std::vector<std::string>& profile_metric_names();
// Other names of the same quantity on some GPUs: the value reported under `name` is the largest
// over the names the device supports, `name` included (the tensor pipe is
// sm__pipe_tensor_op_gmma_cycles_active for Hopper's wgmma, ..._hmma_ for mma.sync).
std::vector<std::string> profile_metric_alternatives(const std::string& name);

struct Metric {
  std::optional<double> value;  // nullopt: missing (never reported as 0)
  std::string source;           // "cupti", "driver" (computed from the launch), "missing"
  std::string actual_name;      // the name the value came from when an alternative; else empty
  std::string note;             // why missing
};

struct StallReason {
  std::string reason;    // "long_scoreboard"
  double percent = 0.0;  // of active warp cycles (Nsight Compute's ..._per_warp_active.pct)
};

struct KernelStatic {
  int registers = -1;  // per thread, from ptxas; -1 unknown
  std::int64_t spill_store_bytes = -1;
  std::int64_t spill_load_bytes = -1;
  std::int64_t stack_bytes = -1;          // local memory frame per thread
  std::int64_t static_shared_bytes = -1;  // per block
  std::int64_t dynamic_shared_bytes = 0;  // per block, from the plan
  // "yes", "no" or "unknown" (no disassembler): whether the SASS holds the tensor-core
  // instructions expected for the arch (HGMMA/QGMMA on sm_90a, HMMA otherwise, UTC*MMA on
  // sm_100a).
  std::string tensor_cores = "unknown";
  std::vector<std::string> tensor_instructions;  // mnemonics found: "HGMMA", "HMMA", ...
  std::string expected_tensor_instructions;      // "HGMMA/QGMMA", "HMMA", ...
  std::string disassembler;                      // the tool used, or why none ran
};

struct Diagnosis {
  // "memory_bound", "compute_bound", "latency_bound", "occupancy_limited", "at_roofline",
  // "unknown" (not enough counters).
  std::string kind = "unknown";
  std::string limiter;                  // the busiest unit: "dram", "l2", "l1", "sm", "" unknown
  std::string summary;                  // one line
  std::vector<std::string> evidence;    // 3–4 metric values that show the kind
  std::vector<std::string> notes;       // spills, uncoalesced loads, missing tensor cores, ...
  std::vector<std::string> directions;  // 1–3, each naming the skills/ file it comes from
};

struct KernelProfile {
  int launch = 0;  // index in the plan's launches
  std::string kernel;
  std::array<unsigned, 3> grid{1, 1, 1};
  std::array<unsigned, 3> block{1, 1, 1};
  std::map<std::string, Metric> metrics;  // by the names above
  std::vector<StallReason> stalls;        // descending; the top few
  KernelStatic statics;
  Diagnosis diagnosis;

  // The metric's value; nullopt when missing or not asked for.
  std::optional<double> value(const std::string& name) const;
};

struct SolSummary {
  double sol_seconds = 0.0;       // speed of light of one call (bench::speed_of_light)
  double measured_seconds = 0.0;  // sum of the kernels' gpu__time_duration
  double fraction = 0.0;          // sol / measured
  std::string bound;              // "memory" | "compute" | ""
  double flops = 0.0;
  double bytes = 0.0;
  std::string note;
};

struct Profile {
  std::string schema = kProfileSchema;
  std::string solution;    // name
  std::string source;      // path as given
  std::string definition;  // operator
  std::string family;      // the definition's family: "gemm", "rmsnorm", ... (skills/ file key)
  std::string workload;    // uuid
  nlohmann::json axes = nlohmann::json::object();
  std::string gpu;   // "NVIDIA H200"
  std::string chip;  // CUPTI chip name, "GH100"
  std::string arch;  // "sm_90a"
  int sm_count = 0;
  int passes = 0;      // replay passes per kernel
  std::string replay;  // "user" (kharness restores inputs and cleans L2 before each pass) or
                       // "kernel" (CUPTI's save/restore; inflates dram__bytes_write)
  std::vector<KernelProfile> kernels;
  std::optional<SolSummary> sol;
  Diagnosis diagnosis;  // of the plan: its longest kernel's, with the plan's speed-of-light
  std::vector<std::string> warnings;  // what went wrong in collection (dropped ranges, ...)
  double gpu_seconds = 0.0;           // sum of gpu__time_duration over the kernels
  double seconds = 0.0;               // wall, the whole profile command
  nlohmann::json phases = nlohmann::json::object();  // seconds per phase
};

nlohmann::json to_json(const Profile& profile);
// Throws kharness::Error (exit 2) naming the field for a malformed profile.
Profile profile_from_json(const nlohmann::json& json);

// ---- diagnosis (pure) ----

struct DiagnosisContext {
  std::string family;                     // for operator-specific directions (skills/<family>.md)
  std::string arch;                       // "sm_90a"
  std::optional<double> sol_fraction;     // of the whole plan
  std::string sol_bound;                  // "memory" | "compute"
  bool plan_has_several_kernels = false;  // the fraction is the plan's, not this kernel's
  double min_bytes = 0.0;                 // the definition's bytes formula (0: unknown)
  int sm_count = 0;                       // 0: unknown
};

// The kind, evidence, notes and directions of one kernel. Thresholds in skills/profiling.md.
Diagnosis diagnose(const KernelProfile& kernel, const DiagnosisContext& context);
// Fills every kernel's diagnosis and the profile's (the longest kernel's, carrying the plan's
// speed-of-light).
void diagnose_profile(Profile& profile);
// A compact text for prompts (about 10 lines): per kernel its kind, evidence, notes and
// directions, and the plan's speed-of-light fraction.
std::string diagnosis_text(const Profile& profile);

// ---- static facts ----

// The tensor-core instructions expected in the SASS of `arch` ("HGMMA/QGMMA" for sm_90a, ...).
std::string expected_tensor_instructions(const std::string& arch);
// Tensor-core mnemonics found in a SASS listing (nvdisasm / cuobjdump -sass output) of one
// kernel: "HGMMA", "QGMMA", "HMMA", "IMMA", "UTCHMMA", ... sorted, unique.
std::vector<std::string> tensor_instructions_in_sass(const std::string& sass);
// Splits a cuobjdump -sass / nvdisasm listing by function: mangled name -> its SASS text.
std::map<std::string, std::string> split_sass_by_function(const std::string& sass);

// ---- the stage ----

struct ProfileRequest {
  std::filesystem::path solution;
  Target target;
  std::string workload;  // uuid or prefix; empty: the operator's first workload
  double timeout_seconds = 120;
  // A launch (a wait on the GPU in the worker) that lasts longer is a hang: the worker stops in
  // seconds and profile_solution throws Error (exit 1) naming the launch. <= 0: no launch watchdog.
  double launch_timeout_seconds = 10;
  std::uint64_t seed = 0;
  std::vector<std::string> extra_metrics;  // --metrics: asked on top of the default set
};

// Compiles, then profiles in a worker process. Throws Error: bad input (2), no GPU or counters
// not permitted (3, with the fix), a solution that fails to compile or to run (1), internal (4).
Profile profile_solution(const ProfileRequest& request);

namespace worker {
class ProtocolStream;
}

// The worker's side of a profile: `request` is the JSON profile_solution sends to the evaluation
// worker (`kharness __worker`, whose request names the task "profile"); one `profile` line out.
void serve_profile(const nlohmann::json& request, worker::ProtocolStream& protocol);

}  // namespace kharness
