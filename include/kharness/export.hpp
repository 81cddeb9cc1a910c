// Exchange out: a kharness solution as a FlashInfer-Bench Solution
// (docs/operators.md#flashinfer-bench) that FlashInfer-Bench 0.1.2's tvm-ffi builder compiles with
// nvcc and its runner calls in destination-passing style: the definition's inputs (tensors as
// TensorView, scalars as int64_t, double or bool) then its outputs. The host launcher is generated
// C++/CUDA from the launch plan (grid, block, dynamic shared memory with the opt-in above 48 KiB,
// clusters, programmatic dependent and cooperative launches through cudaLaunchKernelEx, TMA tensor
// maps encoded with cuTensorMapEncodeTiled from the layout kharness itself resolves
// (kharness/tensor_map.hpp), workspace, axis, scalar and literal arguments sized to the compiled
// kernel's parameters), and for a plan with variants an if / else if chain over their conditions
// that runs the first matching variant's launches, as kharness chooses them. The kernel source
// keeps the plan as its first block comment, so `kharness check` of the exported JSON reads the
// same plan back; kharness's loader leaves the generated launcher out (a solution never runs host
// code under kharness).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kharness/compile.hpp"
#include "kharness/definition.hpp"
#include "kharness/solution.hpp"

namespace kharness::exchange {

// The launcher's file name and markers (kFibLauncherFile, ...) are solution.hpp's: the loader
// recognises an exported solution by them.

struct FibExportOptions {
  std::string name;    // the Solution's name; empty: the solution's
  std::string author;  // empty: the solution's, else "kharness"
  std::string entry_symbol = "run";
  std::vector<std::string> target_hardware = {"cuda"};
  std::string arch;  // the target kharness compiled for (a note in the description)
  // The arch-specific target the kernels need ("sm_90a", "sm_100a": they do not compile for the
  // plain arch), empty when they do not. FlashInfer-Bench's builder compiles for the GPU's plain
  // arch and a Solution carries no compile flags, so the export then guards the kernel source with
  // an #error that names the runner's setting (TVM_FFI_CUDA_ARCH_LIST), and says so in a note.
  std::string arch_specific;
  // The CUTLASS release a CuTe solution compiled against (CompileResult::cutlass_*), empty for
  // any other. A Solution carries no include paths, and 800 CUTLASS headers are not carried in
  // it: the note and the description tell the runner where nvcc finds them (CPATH).
  std::string cutlass_version;
  std::string cutlass_include_dir;
};

// The TVM_FFI_CUDA_ARCH_LIST entry that makes tvm-ffi's nvcc build for an arch-specific target:
// "sm_90a" -> "9.0a", "sm_100a" -> "10.0a". Empty for anything else.
std::string tvm_ffi_arch(const std::string& arch);

struct FibExport {
  nlohmann::ordered_json solution;  // the FlashInfer-Bench Solution JSON
  std::vector<std::string> notes;   // what the user should know (one line each)
};

// `kernels` are the compiled module's kernels (their PTX parameter sizes decide how each
// argument is passed). Throws Error with exit code 1 ("cannot export ...: <reason>", one line)
// when the generated launcher cannot express the plan: a var axis no tensor's shape gives, a
// compile option nvcc's build cannot reproduce, a second translation unit, a kernel the plan
// names but the module lacks, an argument whose size does not match its parameter, a variant
// condition over a name that is no axis the tensors give (the message names variants[i].when).
FibExport export_fib_solution(const Solution& solution, const Definition& definition,
                              const std::vector<KernelInfo>& kernels,
                              const FibExportOptions& options);

// The generated launcher's source alone (what export_fib_solution puts in kFibLauncherFile).
std::string fib_launcher_source(const Solution& solution, const Definition& definition,
                                const std::vector<KernelInfo>& kernels,
                                const std::string& entry_symbol, const std::string& entry_path);

}  // namespace kharness::exchange
