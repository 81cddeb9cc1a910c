// Speed of light: the least time a GPU could take for one call of a definition, from its peak
// rates (configs/gpus/*.json) and the definition's FLOP and byte formulas (kharness.flops,
// kharness.bytes). A roofline bound, not a prediction: a kernel at 100% would run every FLOP at
// the datasheet peak or move every byte at the DRAM peak. Verdicts report the fraction
// (docs/timing.md#speed-of-light).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kharness/definition.hpp"
#include "kharness/device.hpp"
#include "kharness/error.hpp"  // load_gpu_specs throws kharness::Error
#include "kharness/expr.hpp"
#include "kharness/verdict.hpp"

namespace kharness::bench {

struct MeasuredPeaks;  // bench/measure.hpp

// One GPU model, as in configs/gpus/<model>.json (schema "kharness.gpu/1"):
//   match                                 substring of the driver's device name ("NVIDIA H200")
//   arch                                  NVRTC target ("sm_90a")
//   sm_count, l2_bytes, max_sm_clock_mhz  positive integers
//   dram_bandwidth_bytes_per_s            datasheet DRAM bandwidth (> 0)
//   measured_copy_bandwidth_bytes_per_s   optional: what a device-to-device copy reaches (> 0)
//   peak_flops                            dense (no sparsity) peak per dtype name or "tf32" (> 0)
//   schema, notes                         optional strings (schema must be "kharness.gpu/1")
struct GpuSpec {
  std::string match;
  std::string arch;
  int sm_count = 0;
  std::int64_t l2_bytes = 0;
  double dram_bandwidth = 0.0;           // bytes/s
  double measured_copy_bandwidth = 0.0;  // bytes/s; 0 when the file has none
  int max_sm_clock_mhz = 0;
  std::map<std::string, double> peak_flops;  // dtype name (or "tf32") -> FLOP/s
  std::string notes;
  std::filesystem::path source;  // the file it came from
};

inline constexpr const char* kGpuSpecSchema = "kharness.gpu/1";

// Every *.json in `dir` (not recursive), in file-name order. Throws kharness::Error (exit 2)
// naming the file and the field for a missing folder, a malformed file, a missing or mistyped
// field, an unknown field, a non-positive rate, or two files with the same `match`.
std::vector<GpuSpec> load_gpu_specs(const std::filesystem::path& dir);
// One file's JSON text; `source` names it in errors.
GpuSpec parse_gpu_spec(const std::string& text, const std::string& source);

// The spec whose `match` occurs in `gpu_name` (case-sensitive substring: "H200" matches
// "NVIDIA H200"); when several do, the longest `match` wins (the most specific). nullptr if none.
const GpuSpec* match_gpu(const std::vector<GpuSpec>& specs, const std::string& gpu_name);

struct SolEstimate {
  double seconds = 0.0;          // max(compute_seconds, memory_seconds); 0 when unknown
  double compute_seconds = 0.0;  // flops / peak_flops[peak_dtype]; 0 when unknown
  double memory_seconds = 0.0;   // bytes / bandwidth; 0 when unknown
  double flops = 0.0;            // the formulas' values for these axes
  double bytes = 0.0;
  double bandwidth = 0.0;  // bytes/s used
  std::string bound;       // "compute" | "memory" | "" (unknown)
  std::string peak_dtype;  // key of peak_flops used; "" when no peak applied
  std::string note;        // why part of the estimate is missing; empty when complete
};

// The dtype whose peak bounds the definition's arithmetic: the lowest-precision floating *tensor*
// input that has a peak in `gpu`, in the order float8 (e4m3fn; e5m2 falls back to the e4m3fn
// peak, the same tensor-core rate on Hopper and Blackwell), bfloat16, float16, float32. Scalar
// inputs (eps, scales passed by value) and integer tensors (indices, int8 quantized data) are not
// considered: an fp8 GEMM with float32 scale tensors is bounded by the fp8 peak, since the
// scales are few elements and the bulk of the FLOPs runs on the fp8 tensor cores. Choosing the
// fastest applicable peak keeps speed of light a true lower bound on time. Falls back to
// "float32" when no input qualifies; "" when the GPU has no matching peak at all.
std::string compute_dtype(const GpuSpec& gpu, const Definition& definition);

// max(flops / peak, bytes / bandwidth) for one call at `axes` (every axis bound, e.g. from
// Workload::bindings). Bandwidth is the datasheet DRAM rate, or the measured copy rate when
// `use_measured_bandwidth` and the spec has one. A missing formula (or peak) leaves its term 0
// and the estimate rests on the other term alone, with `note` saying so; with neither, seconds is
// 0 and bound "" (callers treat 0 as "no speed of light"). A formula that cannot be evaluated
// (unbound axis, overflow, division by zero) is treated as missing, the note giving the error.
// Never throws.
SolEstimate speed_of_light(const GpuSpec& gpu, const Definition& definition, const Bindings& axes,
                           bool use_measured_bandwidth);

// sol_seconds / measured_seconds: 1.0 means at speed of light. 0 when either is not positive.
double sol_fraction(double sol_seconds, double measured_seconds);

// ---------------------------------------------------------------------------------------------
// Faster than light (docs/timing.md#faster-than-light): a time no honest kernel can beat. Unlike
// speed_of_light (a yardstick), every choice here errs low, so that a time below it can only be a
// broken measurement or a kernel that skips its work:
//   compute  min_flops (else flops) at the fastest rate the GPU has for any dtype (an fp16 GEMM
//            whose tolerance admits fp8 math may use it), each rate the higher of datasheet and
//            `doctor --measure`;
//   memory   the bytes that must cross DRAM: min_bytes (else bytes) minus the outputs (the formula
//            counts each input once, as read; L2 is cold), plus the outputs beyond what L2 holds
//            (writes that fit in L2 may drain after the kernel ends), at the highest of datasheet,
//            measured-copy and bus-width x memory-clock bandwidth;
//   bound    max(compute, memory); a time below kFasterThanLightMargin x bound is suspect.

// What the GPU can do at most, and where each number came from.
struct LightCeilings {
  std::string gpu;               // the spec's match ("H200")
  double peak_flops = 0.0;       // FLOP/s, the fastest of every dtype's peak
  std::string peak_dtype;        // whose it is ("float8_e4m3fn")
  std::string peak_source;       // "datasheet" | "measured <ISO time>"
  double bandwidth = 0.0;        // DRAM bytes/s
  std::string bandwidth_source;  // "datasheet" | "measured <ISO time>" | "bus width x memory clock"
  std::int64_t l2_bytes = 0;     // the larger of the spec's and the device's
};

// `measured` may be null (no `doctor --measure` for this GPU and driver); `device` supplies the
// L2 size and bus width and memory clock the driver reports (zeros where unknown).
LightCeilings light_ceilings(const GpuSpec& datasheet, const MeasuredPeaks* measured,
                             const GpuInfo& device);

struct LowerBound {
  double seconds = 0.0;  // max(compute_seconds, memory_seconds); 0: no bound
  double compute_seconds = 0.0;
  double memory_seconds = 0.0;
  double flops = 0.0;          // min_flops (else flops) at these axes
  double formula_bytes = 0.0;  // min_bytes (else bytes)
  double output_bytes = 0.0;   // the definition's outputs at these axes
  double dram_bytes = 0.0;     // what must cross DRAM: reads + outputs beyond L2
  std::string term;            // "compute" | "memory" | ""
  std::string flops_formula;   // which formulas ("kharness.min_flops: ...")
  std::string bytes_formula;
  std::string note;  // what is missing, when a term is 0
  LightCeilings ceilings;

  nlohmann::json to_json() const;
};

// Never throws: a formula that cannot be evaluated leaves its term 0 (and says so in `note`).
LowerBound physical_lower_bound(const Definition& definition, const Bindings& axes,
                                const LightCeilings& ceilings);

// A little below the bound, so that rounding in datasheets (4.8 TB/s printed, 4.9 from the bus)
// can never flag an honest kernel.
inline constexpr double kFasterThanLightMargin = 0.95;

// The suspicion (kind kFasterThanLight) when `latency_seconds` is below margin x bound.
std::optional<Failure> faster_than_light(double latency_seconds, const LowerBound& bound);

// The timing stage's one call per timed workload: the bound from the datasheet of `device` among
// `specs` and this driver's `doctor --measure` results, recorded as wv.timing.lower_bound; a
// candidate latency below it sets wv.suspect and verdict.suspect. Never throws.
void flag_faster_than_light(const Definition& definition, const Bindings& axes,
                            const std::vector<GpuSpec>& specs, const GpuInfo& device,
                            const std::string& driver, WorkloadVerdict& wv, Verdict& verdict);

}  // namespace kharness::bench
