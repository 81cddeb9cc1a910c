// The diagnosis rules of skills/profiling.md, as a pure function of a kernel's counters, and the
// compact text that goes into prompts. Keep the thresholds here and the document in step.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kharness/arch.hpp"
#include "kharness/profile.hpp"
#include "kharness/text.hpp"

namespace kharness {
namespace {

// skills/profiling.md § Rules.
constexpr double kBusy = 60.0;             // % of peak: a unit this busy is the bottleneck
constexpr double kRooflineFraction = 0.9;  // of speed-of-light (datasheet peaks)
constexpr double kLowTheoretical = 50.0;   // % theoretical occupancy
constexpr double kLowAchieved = 25.0;      // % achieved occupancy
constexpr double kPoorSectorUse = 60.0;    // % of each 32-byte sector used by global loads
constexpr double kExcessTraffic = 1.5;     // DRAM bytes / the definition's minimum
constexpr double kLowTensorPipe = 10.0;
constexpr double kDramNearPeak =
    85.0;  // % DRAM throughput: little left but fewer bytes    // % tensor pipe cycles active
constexpr const char* kProfiling = "skills/profiling.md";

std::string pct(double v) { return fmt::format("{:.1f}%", v); }

std::string mb(double bytes) { return fmt::format("{:.1f} MB", bytes / 1e6); }

// Operator families whose skills file says to use tensor cores.
bool matmul_like(const std::string& family) {
  return family == "gemm" || family.find("attention") != std::string::npos ||
         family.find("gqa") != std::string::npos || family.find("mla") != std::string::npos ||
         family.find("mma") != std::string::npos || family.find("moe") != std::string::npos;
}

// The skills/ file of an operator family; empty when there is none.
std::string skills_file_for(const std::string& family) {
  static const char* const kFamilies[] = {"embedding",        "fused_add_rmsnorm", "gemm",
                                          "gqa_paged_decode", "rmsnorm",           "rope",
                                          "silu_and_mul"};
  for (const char* f : kFamilies) {
    if (family == f) return std::string("skills/") + f + ".md";
  }
  return "";
}

std::string arch_section(const std::string& arch) {
  switch (arch_family(arch)) {
    case ArchFamily::kBlackwell:
      return "Blackwell (sm_100a)";
    case ArchFamily::kHopper:
      return "Hopper (sm_90a)";
    default:
      return "Ampere-style baseline (runs everywhere)";
  }
}

struct Counters {
  std::optional<double> duration_ns, sm, mem, dram, l2, l1, occ, theo, issue, fma, tensor,
      sector_use, dram_read, dram_write, local_ld, local_st, global_ld, l2_hit, l1_hit, limit_regs,
      limit_smem, limit_warps, limit_blocks, regs;
};

Counters read(const KernelProfile& k) {
  Counters c;
  c.duration_ns = k.value(metric::kDuration);
  c.sm = k.value(metric::kSmThroughput);
  c.mem = k.value(metric::kMemThroughput);
  c.dram = k.value(metric::kDramThroughput);
  c.l2 = k.value(metric::kL2Throughput);
  c.l1 = k.value(metric::kL1Throughput);
  c.occ = k.value(metric::kAchievedOccupancy);
  c.theo = k.value(metric::kTheoreticalOccupancy);
  c.issue = k.value(metric::kIssueActive);
  c.fma = k.value(metric::kFmaPipe);
  c.tensor = k.value(metric::kTensorPipe);
  c.sector_use = k.value(metric::kGlobalLoadEfficiency);
  c.dram_read = k.value(metric::kDramRead);
  c.dram_write = k.value(metric::kDramWrite);
  c.local_ld = k.value(metric::kLocalLoadSectors);
  c.local_st = k.value(metric::kLocalStoreSectors);
  c.global_ld = k.value(metric::kGlobalLoadSectors);
  c.l2_hit = k.value(metric::kL2HitRate);
  c.l1_hit = k.value(metric::kL1HitRate);
  c.limit_regs = k.value(metric::kOccupancyLimitRegisters);
  c.limit_smem = k.value(metric::kOccupancyLimitSharedMem);
  c.limit_warps = k.value(metric::kOccupancyLimitWarps);
  c.limit_blocks = k.value(metric::kOccupancyLimitBlocks);
  c.regs = k.value(metric::kRegistersPerThread);
  return c;
}

double or0(const std::optional<double>& v) { return v.value_or(0.0); }

// The largest of the present values and its label; nullopt when none is present.
std::optional<std::pair<double, std::string>> busiest(
    std::initializer_list<std::pair<std::optional<double>, const char*>> units) {
  std::optional<std::pair<double, std::string>> best;
  for (const auto& [v, name] : units) {
    if (v && (!best || *v > best->first)) best = std::make_pair(*v, std::string(name));
  }
  return best;
}

// What limits the blocks per SM, by the launch's occupancy limits: "registers", "shared memory",
// "warps per block", "blocks per SM", or "" when unknown. Shared memory is named only when it is
// strictly the least: the driver sizes the carveout to fit the blocks the other limits allow, so
// its limit often ties with the real one.
std::string occupancy_limiter(const Counters& c) {
  std::optional<std::pair<double, std::string>> least;
  for (const auto& [v, name] :
       {std::make_pair(c.limit_regs, "registers"), std::make_pair(c.limit_warps, "warps per block"),
        std::make_pair(c.limit_blocks, "blocks per SM"),
        std::make_pair(c.limit_smem, "shared memory")}) {
    if (v && (!least || *v < least->first)) least = std::make_pair(*v, std::string(name));
  }
  return least ? least->second : "";
}

std::int64_t spill_bytes(const KernelStatic& s) {
  return std::max<std::int64_t>(0, s.spill_store_bytes) +
         std::max<std::int64_t>(0, s.spill_load_bytes);
}

void add_unique(std::vector<std::string>& list, std::string item, std::size_t max = 3) {
  if (list.size() >= max) return;
  if (std::find(list.begin(), list.end(), item) == list.end()) list.push_back(std::move(item));
}

// Notes that hold whatever the kind: spills, local memory, uncoalesced loads, tensor cores.
void add_notes(const KernelProfile& k, const Counters& c, const DiagnosisContext& ctx,
               Diagnosis& d) {
  const KernelStatic& s = k.statics;
  if (spill_bytes(s) > 0) {
    std::string traffic;
    if (c.local_ld && c.local_st && c.global_ld && (*c.global_ld + *c.local_ld) > 0) {
      traffic = fmt::format("; local memory is {:.0f}% of the L1 load sectors",
                            100.0 * *c.local_ld / (*c.global_ld + *c.local_ld));
    }
    d.notes.push_back(
        fmt::format("spills: {} B stored / {} B loaded per thread to local memory "
                    "({} registers){}",
                    std::max<std::int64_t>(0, s.spill_store_bytes),
                    std::max<std::int64_t>(0, s.spill_load_bytes), s.registers, traffic));
  } else if (s.stack_bytes > 0) {
    d.notes.push_back(fmt::format(
        "a {} B local-memory frame per thread (arrays indexed at run time live in local memory)",
        s.stack_bytes));
  }
  if (c.theo && *c.theo < kLowTheoretical) {
    std::string by = occupancy_limiter(c);
    d.notes.push_back(fmt::format("occupancy: theoretical {}{}{}", pct(*c.theo),
                                  by.empty() ? "" : ", limited by " + by,
                                  c.occ ? ", achieved " + pct(*c.occ) : ""));
  }
  if (c.sector_use && *c.sector_use < kPoorSectorUse) {
    d.notes.push_back(fmt::format("uncoalesced global loads: {} of each 32-byte sector is used",
                                  pct(*c.sector_use)));
  }
  if (matmul_like(ctx.family) && s.tensor_cores == "no") {
    d.notes.push_back(fmt::format("no tensor-core instructions ({}) in the SASS",
                                  s.expected_tensor_instructions.empty()
                                      ? std::string("MMA")
                                      : s.expected_tensor_instructions));
  }
  if (ctx.sm_count > 0) {
    const double blocks = double(k.grid[0]) * k.grid[1] * k.grid[2];
    if (blocks < ctx.sm_count) {
      d.notes.push_back(fmt::format("grid of {:.0f} blocks leaves {} of {} SMs idle", blocks,
                                    ctx.sm_count - static_cast<int>(blocks), ctx.sm_count));
    }
  }
}

std::string stall_direction(const std::string& reason) {
  if (reason == "long_scoreboard")
    return "Waiting on global/local loads: keep more loads in flight (unroll, prefetch into "
           "registers, cp.async/TMA pipelines)";
  if (reason == "barrier")
    return "Waiting at __syncthreads: fewer block-wide barriers (warp shuffles, smaller "
           "reduction trees, more independent work between barriers)";
  if (reason == "mio_throttle" || reason == "short_scoreboard")
    return "Waiting on shared memory / special functions: fewer shared-memory round trips, no "
           "bank conflicts, vectorised shared accesses";
  if (reason == "lg_throttle")
    return "Global load/store queue full: vectorise accesses (16-byte loads) so fewer "
           "instructions move the same bytes";
  if (reason == "wait" || reason == "math_pipe_throttle" || reason == "dispatch_stall")
    return "Dependent arithmetic chains: more independent work per thread (ILP), unroll";
  if (reason == "membar") return "Memory barriers: avoid __threadfence and fences inside loops";
  if (reason == "no_instruction" || reason == "branch_resolving")
    return "Instruction fetch/branches: smaller unrolled bodies, uniform branches";
  return "";
}

std::string unit_name(const std::string& u) {
  if (u == "dram") return std::string("DRAM");
  if (u == "l2") return std::string("L2");
  if (u == "l1") return std::string("L1");
  if (u == "sm") return std::string("SM");
  if (u == "memory") return std::string("memory system");
  return u;
}

std::string sol_text(const DiagnosisContext& ctx) {
  if (!ctx.sol_fraction) return "";
  return fmt::format("{} of speed-of-light{}", pct(100.0 * *ctx.sol_fraction),
                     ctx.plan_has_several_kernels ? " (whole plan)" : "");
}

// The busiest unit of a side (memory or SM) and its throughput in percent of peak.
using Busiest = std::optional<std::pair<double, std::string>>;

// The plan reaches its speed-of-light fraction: only less work helps.
void diagnose_at_roofline(Diagnosis& d, const Counters& c, const DiagnosisContext& ctx,
                          const Busiest& memory_side, const Busiest& sm_side, double mem_v,
                          double sm_v) {
  d.kind = "at_roofline";
  d.limiter = mem_v >= sm_v ? (memory_side ? memory_side->second : "dram")
                            : (sm_side ? sm_side->second : "sm");
  d.summary = fmt::format("at the roofline: {}, {}-limited", sol_text(ctx), unit_name(d.limiter));
  add_unique(d.evidence, sol_text(ctx));
  if (c.dram) add_unique(d.evidence, "DRAM throughput " + pct(*c.dram), 4);
  if (c.sm) add_unique(d.evidence, "SM throughput " + pct(*c.sm), 4);
  if (c.tensor) add_unique(d.evidence, "tensor pipe " + pct(*c.tensor), 4);
  add_unique(d.directions,
             fmt::format("Little left to gain in this kernel: only less work (fusion with its "
                         "neighbours, lower precision) makes it faster ({} § At the roofline)",
                         kProfiling));
}

// A memory unit (DRAM or L2) is the busiest: fewer bytes, or more of them in flight.
void diagnose_memory_bound(Diagnosis& d, const Counters& c, const DiagnosisContext& ctx,
                           const Busiest& memory_side, const std::string& op_skills) {
  d.kind = "memory_bound";
  d.limiter = memory_side->second;
  d.summary =
      fmt::format("memory-bound: {} at {} of peak", unit_name(d.limiter), pct(memory_side->first));
  if (c.dram) add_unique(d.evidence, "DRAM throughput " + pct(*c.dram), 4);
  if (c.l2) add_unique(d.evidence, "L2 throughput " + pct(*c.l2), 4);
  if (c.l2_hit) add_unique(d.evidence, "L2 hit rate " + pct(*c.l2_hit), 4);
  if (c.sector_use)
    add_unique(d.evidence, "global load sector use " + pct(*c.sector_use), 4);
  else if (c.sm)
    add_unique(d.evidence, "SM throughput " + pct(*c.sm), 4);
  const double moved = or0(c.dram_read) + or0(c.dram_write);
  if (ctx.min_bytes > 0 && moved > 0 && !ctx.plan_has_several_kernels) {
    const double ratio = moved / ctx.min_bytes;
    if (ratio >= kExcessTraffic) {
      add_unique(d.directions,
                 fmt::format("DRAM traffic is {:.1f}x the definition's minimum ({} of {}): "
                             "read each byte once — reuse through shared memory/L2, fuse "
                             "passes ({} § Memory-bound)",
                             ratio, mb(moved), mb(ctx.min_bytes), kProfiling));
    }
  }
  if (c.sector_use && *c.sector_use < kPoorSectorUse) {
    add_unique(d.directions,
               fmt::format("Coalesce global loads: adjacent threads should read adjacent "
                           "16-byte vectors ({} § Memory-bound)",
                           kProfiling));
  }
  if (d.limiter == "l2") {
    add_unique(d.directions,
               fmt::format("L2-bound: larger tiles in shared memory/registers so each byte "
                           "fetched from L2 is used more often ({} § Memory-bound)",
                           kProfiling));
  }
  if (c.dram && *c.dram >= kDramNearPeak) {
    add_unique(d.directions,
               fmt::format("DRAM is near its sustainable peak: only moving fewer bytes helps "
                           "(fusion with neighbouring operators, smaller dtypes) ({} § "
                           "Memory-bound)",
                           kProfiling));
  } else {
    add_unique(d.directions,
               fmt::format("Keep enough bytes in flight: 16-byte vector loads, several "
                           "independent loads per thread, cp.async/TMA on Hopper ({} § "
                           "Memory-bound)",
                           kProfiling));
  }
  if (!op_skills.empty())
    add_unique(d.directions, fmt::format("See {} § Where the time goes", op_skills));
}

// An SM unit is the busiest: tensor cores, operand reuse, fewer instructions per result.
void diagnose_compute_bound(Diagnosis& d, const Counters& c, const DiagnosisContext& ctx,
                            const Busiest& sm_side, const std::string& op_skills) {
  d.kind = "compute_bound";
  d.limiter = sm_side->second;
  d.summary =
      fmt::format("compute-bound: {} at {} of peak", unit_name(d.limiter), pct(sm_side->first));
  if (c.sm) add_unique(d.evidence, "SM throughput " + pct(*c.sm), 4);
  if (c.l1) add_unique(d.evidence, "L1 throughput " + pct(*c.l1), 4);
  if (c.tensor) add_unique(d.evidence, "tensor pipe " + pct(*c.tensor), 4);
  if (c.fma)
    add_unique(d.evidence, "FMA pipe " + pct(*c.fma), 4);
  else if (c.issue)
    add_unique(d.evidence, "issue slots busy " + pct(*c.issue), 4);
  const bool low_tensor = !c.tensor || *c.tensor < kLowTensorPipe;
  if (matmul_like(ctx.family) && low_tensor) {
    add_unique(
        d.directions,
        fmt::format("Use tensor cores: the tensor pipe is {} — {} ({} § {})",
                    c.tensor ? pct(*c.tensor) : std::string("idle or unmeasured"),
                    arch_family(ctx.arch) == ArchFamily::kHopper ? "wgmma fed by TMA"
                                                                 : "mma.sync/ldmatrix tiles",
                    op_skills.empty() ? "skills/gemm.md" : op_skills, arch_section(ctx.arch)));
  }
  if (d.limiter == "l1" || (c.l1 && c.fma && *c.l1 > *c.fma)) {
    add_unique(d.directions,
               fmt::format("Load-instruction bound (L1 {}): tile operands in shared memory and "
                           "registers so each loaded value feeds many FMAs ({} § "
                           "Compute-bound)",
                           c.l1 ? pct(*c.l1) : std::string("busy"), kProfiling));
  }
  add_unique(d.directions,
             fmt::format("Fewer instructions per result: vector loads, hoisted index math, "
                         "lower-precision math where the tolerance allows ({} § Compute-bound)",
                         kProfiling));
}

// No unit is busy: too few warps (occupancy-limited) or warps that wait (latency-bound).
void diagnose_low_activity(Diagnosis& d, const KernelProfile& k, const Counters& c,
                           const DiagnosisContext& ctx, double mem_v, double sm_v) {
  const KernelStatic& s = k.statics;
  // A grid of fewer blocks than SMs leaves warps missing however many a block could hold:
  // low achieved occupancy then says "too few blocks" (latency-bound), not "occupancy-limited".
  const bool small_grid =
      ctx.sm_count > 0 && double(k.grid[0]) * k.grid[1] * k.grid[2] < ctx.sm_count;
  const bool low_theoretical = c.theo && *c.theo < kLowTheoretical;
  const bool spills = spill_bytes(s) > 0;
  const bool low_occupancy =
      low_theoretical || (c.occ && *c.occ < kLowAchieved && !small_grid) || spills;
  if (low_occupancy) {
    d.kind = "occupancy_limited";
    // The resource that caps blocks per SM is the cause only when it caps them low.
    const std::string by = low_theoretical || spills ? occupancy_limiter(c) : "";
    d.limiter = by;
    d.summary =
        fmt::format("occupancy-limited: {} achieved occupancy{}, no unit above {:.0f}%",
                    c.occ ? pct(*c.occ) : std::string("low"),
                    by.empty() ? "" : fmt::format(" (blocks per SM limited by {})", by), kBusy);
    if (c.occ) add_unique(d.evidence, "achieved occupancy " + pct(*c.occ), 4);
    if (c.theo) add_unique(d.evidence, "theoretical occupancy " + pct(*c.theo), 4);
    if (c.regs) add_unique(d.evidence, fmt::format("{:.0f} registers/thread", *c.regs), 4);
    if (spills)
      add_unique(d.evidence, fmt::format("{} B spill stores/thread", s.spill_store_bytes), 4);
    else
      add_unique(d.evidence, fmt::format("SM {} / memory {} of peak", pct(sm_v), pct(mem_v)), 4);
    if (by == "registers") {
      add_unique(d.directions,
                 fmt::format("Fewer registers per thread: __launch_bounds__(threads, "
                             "min_blocks), fewer live values, no big per-thread arrays ({} § "
                             "Occupancy-limited)",
                             kProfiling));
    } else if (by == "shared memory") {
      add_unique(d.directions,
                 fmt::format("Less shared memory per block (smaller tiles or fewer stages) so "
                             "more blocks fit on an SM ({} § Occupancy-limited)",
                             kProfiling));
    } else {
      add_unique(d.directions,
                 fmt::format("More warps per SM: larger blocks or more blocks, and more "
                             "independent work per warp ({} § Occupancy-limited)",
                             kProfiling));
    }
  } else {
    d.kind = "latency_bound";
    d.limiter = "";
    d.summary = fmt::format(
        "latency-bound: no unit above {:.0f}% (SM {}, memory {}) with "
        "{} occupancy",
        kBusy, pct(sm_v), pct(mem_v), c.occ ? pct(*c.occ) : std::string("unknown"));
    if (c.sm) add_unique(d.evidence, "SM throughput " + pct(*c.sm), 4);
    if (c.mem) add_unique(d.evidence, "memory throughput " + pct(*c.mem), 4);
    if (c.occ) add_unique(d.evidence, "achieved occupancy " + pct(*c.occ), 4);
  }
  if (!k.stalls.empty()) {
    add_unique(d.evidence,
               fmt::format("top stall {} {}", k.stalls[0].reason, pct(k.stalls[0].percent)), 4);
    std::string dir = stall_direction(k.stalls[0].reason);
    if (!dir.empty())
      add_unique(d.directions, fmt::format("{} ({} § Latency-bound)", dir, kProfiling));
  }
  if (ctx.sm_count > 0 && double(k.grid[0]) * k.grid[1] * k.grid[2] < ctx.sm_count) {
    add_unique(d.directions,
               fmt::format("Too few blocks to fill the GPU: split the work (split-K, smaller "
                           "tiles, a cluster per row) ({} § Latency-bound)",
                           kProfiling));
  }
  if (d.directions.empty() || (d.directions.size() == 1 && spill_bytes(s) > 0)) {
    add_unique(d.directions,
               fmt::format("More independent work in flight per SM: more warps, unrolled "
                           "loops, asynchronous copies ({} § Latency-bound)",
                           kProfiling));
  }
}

}  // namespace

Diagnosis diagnose(const KernelProfile& k, const DiagnosisContext& ctx) {
  Diagnosis d;
  const Counters c = read(k);
  const KernelStatic& s = k.statics;
  // Off-SM memory (DRAM, L2); when neither is measured, the memory-throughput roll-up stands in.
  auto memory_side = busiest({{c.dram, "dram"}, {c.l2, "l2"}});
  // Every DRAM byte also passes through L2, so a streaming kernel shows L2 a little busier than
  // DRAM (H200 copy: DRAM 83%, L2 87%, hit rate 50%) although DRAM is what limits it. L2 is named
  // the limiter only when it is clearly busier than DRAM (more than 10 points).
  if (memory_side && memory_side->second == "l2" && c.dram && *c.dram >= 60.0 &&
      memory_side->first - *c.dram <= 10.0) {
    memory_side = std::make_pair(*c.dram, std::string("dram"));
  }
  if (!memory_side && c.mem) memory_side = std::make_pair(*c.mem, std::string("memory"));
  const auto sm_side = busiest({{c.sm, "sm"}, {c.l1, "l1"}});
  const std::string op_skills = skills_file_for(ctx.family);

  if (!memory_side && !sm_side) {
    d.kind = "unknown";
    d.summary = "not enough counters for a diagnosis (SM, memory and DRAM throughput missing)";
    add_notes(k, c, ctx, d);
    return d;
  }
  const double mem_v = memory_side ? memory_side->first : 0.0;
  const double sm_v = sm_side ? sm_side->first : 0.0;

  // Spills come first among the directions whatever the kind: local memory traffic competes with
  // everything else.
  if (spill_bytes(s) > 0 || s.stack_bytes > 256) {
    add_unique(d.directions,
               fmt::format("Remove local memory: keep per-thread arrays small and indexed by "
                           "compile-time constants (full unroll), cap live registers with "
                           "__launch_bounds__, or move the array to shared memory ({} § "
                           "Occupancy-limited)",
                           kProfiling));
  }

  if (ctx.sol_fraction && *ctx.sol_fraction >= kRooflineFraction && !ctx.plan_has_several_kernels) {
    diagnose_at_roofline(d, c, ctx, memory_side, sm_side, mem_v, sm_v);
  } else if (memory_side && memory_side->first >= kBusy && memory_side->first >= sm_v) {
    diagnose_memory_bound(d, c, ctx, memory_side, op_skills);
  } else if (sm_side && sm_side->first >= kBusy) {
    diagnose_compute_bound(d, c, ctx, sm_side, op_skills);
  } else {
    diagnose_low_activity(d, k, c, ctx, mem_v, sm_v);
  }
  add_notes(k, c, ctx, d);
  return d;
}

void diagnose_profile(Profile& p) {
  DiagnosisContext ctx;
  ctx.family = p.family;
  ctx.arch = p.arch;
  ctx.sm_count = p.sm_count;
  ctx.plan_has_several_kernels = p.kernels.size() > 1;
  if (p.sol && p.sol->fraction > 0) {
    ctx.sol_fraction = p.sol->fraction;
    ctx.sol_bound = p.sol->bound;
    ctx.min_bytes = p.sol->bytes;
  }
  const KernelProfile* longest = nullptr;
  for (KernelProfile& k : p.kernels) {
    k.diagnosis = diagnose(k, ctx);
    if (!longest ||
        k.value(metric::kDuration).value_or(0) > longest->value(metric::kDuration).value_or(0)) {
      longest = &k;
    }
  }
  if (longest != nullptr) p.diagnosis = longest->diagnosis;
  if (p.kernels.size() > 1 && ctx.sol_fraction && *ctx.sol_fraction >= kRooflineFraction) {
    // Several kernels: the plan as a whole is at the roofline even if no single kernel is judged.
    p.diagnosis.kind = "at_roofline";
    p.diagnosis.summary = fmt::format("at the roofline: {} of speed-of-light over the plan",
                                      pct(100.0 * *ctx.sol_fraction));
  }
}

static std::string kind_label(const std::string& kind) {
  if (kind == "memory_bound") return "memory-bound";
  if (kind == "compute_bound") return "compute-bound";
  if (kind == "latency_bound") return "latency-bound";
  if (kind == "occupancy_limited") return "occupancy-limited";
  if (kind == "at_roofline") return "at the roofline";
  return "unknown";
}

std::string diagnosis_text(const Profile& p) {
  std::string out =
      fmt::format("profile of {} on {} workload {} ({}, {}): {:.2f} us GPU time",
                  p.solution.empty() ? p.source : p.solution, p.definition, p.workload.substr(0, 8),
                  p.gpu.empty() ? "GPU" : p.gpu, p.arch, p.gpu_seconds * 1e6);
  if (p.sol && p.sol->fraction > 0)
    out += fmt::format(", {} of speed-of-light ({}-bound by the formulas)",
                       pct(100 * p.sol->fraction), p.sol->bound);
  out += "\n";
  for (const std::string& w : p.warnings) out += "warning: " + w + "\n";
  for (const KernelProfile& k : p.kernels) {
    const Diagnosis& d = k.diagnosis;
    out += fmt::format("kernel {} (launch {}, grid {}x{}x{}, block {}x{}x{}, {:.2f} us): {}\n",
                       k.kernel, k.launch, k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1],
                       k.block[2], k.value(metric::kDuration).value_or(0) / 1e3,
                       d.summary.empty() ? kind_label(d.kind) : d.summary);
    if (!d.evidence.empty()) out += "  evidence: " + join(d.evidence, "; ") + "\n";
    if (!k.stalls.empty()) {
      std::vector<std::string> top;
      for (std::size_t i = 0; i < k.stalls.size() && i < 3; ++i)
        top.push_back(fmt::format("{} {}", k.stalls[i].reason, pct(k.stalls[i].percent)));
      out += "  stalls (% of active warp cycles): " + join(top, ", ") + "\n";
    }
    for (const std::string& n : d.notes) out += "  note: " + n + "\n";
    for (const std::string& dir : d.directions) out += "  - " + dir + "\n";
  }
  return out;
}

}  // namespace kharness
