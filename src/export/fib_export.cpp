// kharness solution -> FlashInfer-Bench Solution JSON with a generated tvm-ffi host launcher.
// FlashInfer-Bench 0.1.2's TVMFFIBuilder writes every source into one folder, compiles each .cu
// file with nvcc (`-std=c++17 -O2`, the GPU's own arch, no extra flags) and each .cpp with c++,
// links them with libtvm_ffi and libcudart, and calls the symbol after `::` in spec.entry_point
// with the definition's inputs then outputs (destination-passing style). So the kernel source
// stays one translation unit as kharness compiles it, and the launcher is a second one that
// reaches the kernels through their host stubs: an extern "C" declaration whose assembler name is
// the kernel's PTX .entry name, which is also the name of the stub nvcc emits for it. The builder
// links libcudart and not libcuda, so the launcher reaches cuTensorMapEncodeTiled through the
// runtime's driver entry point.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>

#include "kharness/error.hpp"
#include "kharness/export.hpp"

namespace kharness::exchange {
namespace {

[[noreturn]] void refuse(const std::string& what) {
  throw Error(ExitCode::kFailed, "", "cannot export to FlashInfer-Bench: " + what);
}

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// A C++ string literal holding `s` (names and messages in the generated code).
std::string c_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      out += fmt::format("\\x{:02x}\"\"", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

const KernelInfo* find_kernel(const std::vector<KernelInfo>& kernels, const std::string& name) {
  for (const auto& k : kernels)
    if (k.name == name || k.mangled == name) return &k;
  return nullptr;
}

bool integer_ptx(const std::string& type) {
  return !type.empty() && (type[0] == 'u' || type[0] == 's' || type[0] == 'b');
}

// The plan's compile options as #define lines for the kernel source; anything else that nvcc's
// fixed command line cannot reproduce is refused.
std::vector<std::string> defines_of(const std::vector<std::string>& options) {
  std::vector<std::string> defines;
  for (const auto& o : options) {
    if (o == "-std=c++17" || o == "--std=c++17" || o == "-lineinfo" ||
        o == "--generate-line-info") {
      continue;  // what the builder does anyway, or debug information only
    }
    std::string macro;
    if (o.rfind("--define-macro=", 0) == 0) {
      macro = o.substr(15);
    } else if (o.rfind("-D", 0) == 0) {
      macro = o.substr(2);
    } else {
      refuse(
          fmt::format("compile option '{}' has no equivalent in FlashInfer-Bench's tvm-ffi "
                      "build (nvcc -std=c++17 -O2, no extra flags)",
                      o));
    }
    std::string name = macro.substr(0, macro.find('='));
    std::string value = macro.find('=') == std::string::npos ? "1" : macro.substr(name.size() + 1);
    if (!is_identifier(name) || value.find('\n') != std::string::npos)
      refuse(fmt::format("compile option '{}' is not a macro definition NAME=VALUE", o));
    defines.push_back(fmt::format("#define {} {}", name, value));
  }
  return defines;
}

// Where each var axis comes from: the first tensor (inputs, then outputs) whose shape names it.
struct AxisSource {
  std::string tensor;  // C++ parameter name
  std::size_t dim = 0;
};

struct Param {
  const TensorSpec* spec;
  std::string cpp;  // parameter name in the generated function
  bool output;
};

// The generated launcher's includes, before the kernels' host stubs.
constexpr const char* kLauncherPrelude = R"KH(#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <utility>

// The kernels' host stubs, by their PTX .entry names (defined by nvcc in the kernel source).
)KH";

// The helpers every generated launcher defines in its namespace before the entry function: error
// and CUDA checks, the plan's expression functions, tensor checks, the device guard, the
// workspace and the kernel launch.
constexpr const char* kLauncherHelpers = R"KH(using tvm::ffi::TensorView;

[[noreturn]] void fail(const std::string& what) {
  TVM_FFI_THROW(ValueError) << what;
  std::abort();  // not reached: the error is thrown as the statement above ends
}

void check_cuda(cudaError_t e, const char* kernel, const char* what) {
  if (e != cudaSuccess)
    TVM_FFI_THROW(RuntimeError) << kernel << ": " << what << ": " << cudaGetErrorName(e) << " ("
                                << cudaGetErrorString(e) << ")";
}

// cdiv, min and max of the plan's expression language (int64_t, as kharness evaluates them).
int64_t kx_cdiv(int64_t a, int64_t b) {
  if (b == 0) fail("plan expression divides by zero");
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) == (b < 0)) ? q + 1 : q;
}
int64_t kx_min(int64_t a, int64_t b) { return a < b ? a : b; }
template <typename... Rest>
int64_t kx_min(int64_t a, int64_t b, Rest... rest) {
  return kx_min(kx_min(a, b), static_cast<int64_t>(rest)...);
}
int64_t kx_max(int64_t a, int64_t b) { return a > b ? a : b; }
template <typename... Rest>
int64_t kx_max(int64_t a, int64_t b, Rest... rest) {
  return kx_max(kx_max(a, b), static_cast<int64_t>(rest)...);
}

unsigned dim(int64_t v, const char* what) {
  if (v < 0 || v > static_cast<int64_t>(std::numeric_limits<unsigned>::max()))
    fail(std::string(what) + " = " + std::to_string(v) + " is out of range");
  return static_cast<unsigned>(v);
}

template <typename T>
T narrow(int64_t v, const char* what) {
  if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max())
    fail(std::string(what) + " = " + std::to_string(v) + " does not fit its kernel parameter");
  return static_cast<T>(v);
}

// kharness passes dense row-major tensors of the definition's dtype on one CUDA device.
void check_tensor(const TensorView& t, const char* name, int ndim, int bits) {
  if (t.device().device_type != kDLCUDA) fail(std::string(name) + ": not a CUDA tensor");
  if (t.ndim() != ndim)
    fail(std::string(name) + ": " + std::to_string(t.ndim()) + " dimensions, expected " +
         std::to_string(ndim));
  if (t.dtype().bits * t.dtype().lanes != bits)
    fail(std::string(name) + ": " + std::to_string(t.dtype().bits) + "-bit elements, expected " +
         std::to_string(bits));
  if (!t.IsContiguous()) fail(std::string(name) + ": not contiguous");
}

void check_dim(const TensorView& t, const char* name, int d, int64_t expected, const char* axis) {
  if (t.size(d) != expected)
    fail(std::string(name) + ": dimension " + std::to_string(d) + " is " +
         std::to_string(t.size(d)) + ", axis " + axis + " is " + std::to_string(expected));
}

void* data(const TensorView& t) { return static_cast<char*>(t.data_ptr()) + t.byte_offset(); }

int device_of(const TensorView& t) { return t.device().device_id; }

// Makes the tensors' device current for the call and restores the caller's.
struct DeviceGuard {
  explicit DeviceGuard(int d) : device(d) {
    check_cuda(cudaGetDevice(&previous), "launcher", "cudaGetDevice");
    if (previous != device) check_cuda(cudaSetDevice(device), "launcher", "cudaSetDevice");
  }
  ~DeviceGuard() {
    if (previous != device) cudaSetDevice(previous);
  }
  DeviceGuard(const DeviceGuard&) = delete;  // restores the device once
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  int device;
  int previous = 0;
};

// The plan's workspace: one buffer per device, grown when a call needs more, kept between calls
// (its contents are undefined at every call, as under kharness, which poisons it).
void* workspace(int device, int64_t bytes) {
  static std::mutex mutex;
  static void* buffers[64] = {};
  static int64_t sizes[64] = {};
  if (bytes <= 0) return nullptr;
  if (device < 0 || device >= 64) fail("workspace: device index out of range");
  std::lock_guard<std::mutex> lock(mutex);
  if (bytes > sizes[device]) {
    if (buffers[device]) check_cuda(cudaFree(buffers[device]), "workspace", "cudaFree");
    buffers[device] = nullptr;
    sizes[device] = 0;
    check_cuda(cudaMalloc(&buffers[device], static_cast<size_t>(bytes)), "workspace",
               "cudaMalloc");
    sizes[device] = bytes;
  }
  return buffers[device];
}

int64_t tensor_bytes(const TensorView& t) {
  int64_t n = 1;
  for (int d = 0; d < t.ndim(); ++d) n *= t.size(d);
  return n * ((t.dtype().bits * t.dtype().lanes + 7) / 8);
}

// cuTensorMapEncodeTiled from the driver the runtime loaded (the launcher links only cudart).
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_tiled() {
  static std::mutex mutex;
  static EncodeTiled fn = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (fn) return fn;
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  cudaError_t e =
      cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found);
#else
  cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &found);
#endif
  check_cuda(e, "launcher", "cudaGetDriverEntryPoint(cuTensorMapEncodeTiled)");
  if (found != cudaDriverEntryPointSuccess || p == nullptr)
    fail("the driver has no cuTensorMapEncodeTiled (tensor maps need CUDA 12)");
  fn = reinterpret_cast<EncodeTiled>(p);
  return fn;
}

// One tensor map of the plan, as kharness encodes it (device/plan_launcher.cpp): the numbers are
// the plan's resolved layout, innermost dimension first; strides in elements (of dimensions 1 and
// up), made bytes here. The map may address nothing outside its tensor or the workspace
// (`region` bytes from `base`); the driver checks the rest of TMA's rules.
CUtensorMap tensor_map(const char* name, const char* kernel, CUtensorMapDataType type,
                       unsigned rank, int64_t element_bytes, void* base, int64_t offset,
                       int64_t region, std::initializer_list<int64_t> dims,
                       std::initializer_list<int64_t> strides, std::initializer_list<int64_t> box,
                       std::initializer_list<int64_t> element_strides,
                       CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                       CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill fill) {
  const std::string what = std::string(kernel) + ": tensor map " + name;
  cuuint64_t d[5] = {}, s[4] = {};
  cuuint32_t b[5] = {}, e[5] = {};
  int64_t extent = element_bytes;
  unsigned k = 0;
  for (int64_t v : dims) {
    if (v < 1 || v > (int64_t{1} << 32)) fail(what + ": dimension out of range");
    d[k++] = static_cast<cuuint64_t>(v);
  }
  k = 0;
  for (int64_t v : strides) {
    if (v < 1) fail(what + ": stride out of range");
    s[k] = static_cast<cuuint64_t>(v * element_bytes);
    extent += static_cast<int64_t>(d[k + 1] - 1) * v * element_bytes;
    ++k;
  }
  extent += static_cast<int64_t>(d[0] - 1) * element_bytes;
  k = 0;
  for (int64_t v : box) b[k++] = dim(v, "box");
  k = 0;
  for (int64_t v : element_strides) e[k++] = dim(v, "element_strides");
  if (offset < 0 || offset + extent > region)
    fail(what + " addresses " + std::to_string(offset + extent) + " bytes from its base, which holds " +
         std::to_string(region));
  char* address = static_cast<char*>(base) + offset;
  if (reinterpret_cast<uintptr_t>(address) % 16 != 0) fail(what + ": base not 16-byte aligned");
  CUtensorMap map;
  std::memset(&map, 0, sizeof map);
  CUresult r = encode_tiled()(&map, type, rank, address, d, s, b, e, interleave, swizzle, l2, fill);
  if (r != CUDA_SUCCESS)
    fail(what + ": cuTensorMapEncodeTiled failed (CUresult " + std::to_string(static_cast<int>(r)) +
         ")");
  return map;
}

// The opt-in to dynamic shared memory above 48 KiB, once per kernel, device and size: the
// attribute stays set on the function, and FlashInfer-Bench times the whole host call, so a
// driver call saved on every launch is overhead its small workloads do not measure.
void opt_into_shared(const void* fn, const char* kernel, unsigned shared_bytes) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, unsigned> opted;
  int device = 0;
  check_cuda(cudaGetDevice(&device), kernel, "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  unsigned& largest = opted[{fn, device}];
  if (shared_bytes <= largest) return;
  check_cuda(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(shared_bytes)),
             kernel, "cannot opt into the dynamic shared memory");
  largest = shared_bytes;
}

// One launch of the plan: dynamic shared memory above 48 KiB opted into, clusters (above 8 blocks
// with the non-portable opt-in), programmatic dependent launch and cooperative launches through
// cudaLaunchKernelEx's attributes.
void launch(const void* fn, const char* kernel, dim3 grid, dim3 block, dim3 cluster,
            unsigned shared_bytes, cudaStream_t stream, void** args, bool pdl, bool cooperative) {
  if (shared_bytes > 48u * 1024u) opt_into_shared(fn, kernel, shared_bytes);
  unsigned cluster_blocks = cluster.x * cluster.y * cluster.z;
  if (cluster_blocks <= 1 && !pdl && !cooperative) {
    check_cuda(cudaLaunchKernel(fn, grid, block, args, shared_bytes, stream), kernel, "launch");
    return;
  }
  if (cluster_blocks > 8)
    check_cuda(cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
               kernel, "cannot opt into a non-portable cluster size");
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attributes[3] = {};
  unsigned n = 0;
  if (cluster_blocks > 1) {
    attributes[n].id = cudaLaunchAttributeClusterDimension;
    attributes[n].val.clusterDim.x = cluster.x;
    attributes[n].val.clusterDim.y = cluster.y;
    attributes[n].val.clusterDim.z = cluster.z;
    ++n;
  }
  if (pdl) {
    attributes[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (cooperative) {
    attributes[n].id = cudaLaunchAttributeCooperative;
    attributes[n].val.cooperative = 1;
    ++n;
  }
  config.attrs = attributes;
  config.numAttrs = n;
  check_cuda(cudaLaunchKernelExC(&config, fn, args), kernel, "launch");
}

)KH";

// `text` with every line prefixed by `indent`.
std::string indented(const std::string& text, const std::string& indent) {
  std::string out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size() - 1;
    out += indent + text.substr(start, end + 1 - start);
    start = end + 1;
  }
  return out;
}

// A variant's condition as text fit for a // comment (one line).
std::string one_line(const std::string& text) {
  std::string out = text;
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  return out;
}

class LauncherWriter {
 public:
  LauncherWriter(const Solution& solution, const Definition& definition,
                 const std::vector<KernelInfo>& kernels)
      : solution_(solution), definition_(definition), kernels_(kernels) {}

  std::string write(const std::string& entry_symbol, const std::string& entry_path) {
    if (!is_identifier(entry_symbol))
      refuse(fmt::format("entry symbol '{}' is not a C identifier", entry_symbol));
    collect_params();
    collect_axes();
    std::string body = launches();
    std::string out;
    out += std::string(kFibLauncherMarker) + " (kharness export); do not edit.\n";
    out += std::string(kFibEntryPrefix) + entry_path + "\n";
    out += fmt::format(
        "// Definition {}: {}({}) launches the kharness plan of {} on the caller's stream.\n",
        definition_.name, entry_symbol, signature_names(), entry_path);
    out += kLauncherPrelude;
    out += stubs_;
    out += "\nnamespace kharness_fib {\n\n";
    out += kLauncherHelpers;
    out += fmt::format("void {}({}) {{\n", entry_symbol, signature());
    out += checks_;
    out += body;
    out += "}\n\n}  // namespace kharness_fib\n\n";
    out += fmt::format("TVM_FFI_DLL_EXPORT_TYPED_FUNC({}, kharness_fib::{});\n", entry_symbol,
                       entry_symbol);
    return out;
  }

 private:
  void collect_params() {
    for (const auto& t : definition_.inputs) params_.push_back({&t, "", false});
    for (const auto& t : definition_.outputs) params_.push_back({&t, "", true});
    for (auto& p : params_) {
      if (!is_identifier(p.spec->name))
        refuse(fmt::format("tensor name '{}' is not a C identifier", p.spec->name));
      p.cpp = (p.spec->is_scalar() ? "s_" : "t_") + p.spec->name;
      if (p.spec->is_scalar() && p.output)
        refuse(fmt::format("output '{}' is a scalar: FlashInfer-Bench passes outputs as tensors",
                           p.spec->name));
      if (p.spec->is_scalar() &&
          (p.spec->dtype == DType::kFloat8E4M3 || p.spec->dtype == DType::kFloat8E5M2)) {
        refuse(fmt::format("scalar input '{}' is {}: no host conversion is generated for it",
                           p.spec->name, dtype_name(p.spec->dtype)));
      }
    }
  }

  std::string signature_names() const {
    std::vector<std::string> names;
    for (const auto& p : params_) names.push_back(p.spec->name);
    return fmt::format("{}", fmt::join(names, ", "));
  }

  static std::string scalar_type(DType d) {
    if (is_floating(d)) return "double";
    if (d == DType::kBool) return "bool";
    return "int64_t";
  }

  std::string signature() const {
    std::vector<std::string> out;
    for (const auto& p : params_)
      out.push_back((p.spec->is_scalar() ? scalar_type(p.spec->dtype) : "TensorView") + " " +
                    p.cpp);
    return fmt::format("{}", fmt::join(out, ", "));
  }

  // Tensor checks, then every axis bound: const axes to their value, var axes to the size of the
  // first tensor dimension that names them, every other such dimension checked against it.
  void collect_axes() {
    std::map<std::string, AxisSource> var_source;
    for (const auto& p : params_) {
      if (p.spec->is_scalar()) continue;
      const auto& shape = *p.spec->shape;
      checks_ += fmt::format("  check_tensor({}, {}, {}, {});\n", p.cpp, c_string(p.spec->name),
                             shape.size(), dtype_size(p.spec->dtype) * 8);
      for (std::size_t d = 0; d < shape.size(); ++d) {
        const Axis* axis = definition_.find_axis(shape[d]);
        if (!axis)
          refuse(fmt::format("tensor '{}' has dimension '{}', which is not an axis", p.spec->name,
                             shape[d]));
        if (!axis->is_const && var_source.count(axis->name) == 0) {
          var_source[axis->name] = {p.cpp, d};
        }
      }
    }
    for (const auto& axis : definition_.axes) {
      if (!is_identifier(axis.name))
        refuse(fmt::format("axis name '{}' is not a C identifier", axis.name));
      if (axis.is_const) {
        axes_ += fmt::format("  const int64_t ax_{} = {}LL;\n", axis.name, axis.value);
      } else if (auto it = var_source.find(axis.name); it != var_source.end()) {
        axes_ += fmt::format("  const int64_t ax_{} = {}.size({});\n", axis.name, it->second.tensor,
                             it->second.dim);
      } else {
        bound_later_.insert(axis.name);
      }
    }
    checks_ += axes_;
    for (const auto& p : params_) {
      if (p.spec->is_scalar()) continue;
      const auto& shape = *p.spec->shape;
      for (std::size_t d = 0; d < shape.size(); ++d) {
        auto it = var_source.find(shape[d]);
        if (it != var_source.end() && it->second.tensor == p.cpp && it->second.dim == d) continue;
        checks_ += fmt::format("  check_dim({}, {}, {}, ax_{}, {});\n", p.cpp,
                               c_string(p.spec->name), d, shape[d], c_string(shape[d]));
      }
    }
  }

  // A name in an expression: an axis (refused when no tensor gives it).
  std::string axis_ref(const std::string& name) {
    const Axis* axis = definition_.find_axis(name);
    if (!axis) refuse(fmt::format("the plan's expression names '{}', which is not an axis", name));
    if (bound_later_.count(name))
      refuse(
          fmt::format("var axis '{}' is the size of no tensor: FlashInfer-Bench passes only "
                      "tensors and scalar inputs, so the launcher cannot know it",
                      name));
    return "ax_" + name;
  }

  // A plan expression as C++: the grammar (kharness/expr.hpp) is C's, so the text translates
  // token by token: names become the axis variables, cdiv/min/max the kx_ helpers, integers
  // int64_t literals. Arithmetic is int64_t as in kharness; the plan passed kharness's checks
  // (no overflow, no division by zero) on the definition's workloads, which FlashInfer-Bench runs.
  std::string expr(const Expr& e) {
    const std::string& t = e.text();
    std::string out = "(";
    for (std::size_t i = 0; i < t.size();) {
      char c = t[i];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        std::size_t j = i;
        while (j < t.size() && (std::isalnum(static_cast<unsigned char>(t[j])) || t[j] == '_')) ++j;
        std::string word = t.substr(i, j - i);
        std::size_t k = j;
        while (k < t.size() && std::isspace(static_cast<unsigned char>(t[k]))) ++k;
        bool call = k < t.size() && t[k] == '(';
        if (call && (word == "cdiv" || word == "min" || word == "max")) {
          out += "kx_" + word;
        } else if (call) {
          refuse(fmt::format("expression \"{}\" calls '{}'", t, word));
        } else {
          out += axis_ref(word);
        }
        i = j;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        std::size_t j = i;
        while (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j]))) ++j;
        out += "INT64_C(" + t.substr(i, j - i) + ")";
        i = j;
      } else if (std::string("+-*/%()<>=!&|, \t\n").find(c) != std::string::npos) {
        out += c;
        ++i;
      } else {
        refuse(fmt::format("expression \"{}\" has a character the launcher cannot write", t));
      }
    }
    return out + ")";
  }

  // The bytes of one kernel argument, as a local variable `a<i>`; returns the C++ statement.
  std::string argument(const Launch& launch, std::size_t i, const PtxParam& param) {
    const LaunchArg& arg = launch.args[i];
    std::string where =
        fmt::format("launch of '{}', argument {} ({})", launch.kernel, i, arg.text());
    if (arg.literal) {
      auto bytes = arg.literal->encode();
      if (bytes.size() != param.size)
        refuse(
            fmt::format("{}: {} bytes for a {}-byte parameter", where, bytes.size(), param.size));
      std::vector<std::string> hex;
      for (auto b : bytes) hex.push_back(fmt::format("0x{:02x}", b));
      return fmt::format("alignas(8) unsigned char a{}[{}] = {{{}}};  // {}", i, bytes.size(),
                         fmt::join(hex, ", "), arg.text());
    }
    if (!arg.tensor_map.empty()) return tensor_map_argument(launch, i, param, where);
    if (arg.name == "workspace") {
      if (param.size != 8) refuse(fmt::format("{}: the workspace needs an 8-byte pointer", where));
      uses_workspace_ = true;
      return fmt::format("void* a{} = ws;", i);
    }
    for (const auto& p : params_) {
      if (p.spec->name != arg.name) continue;
      if (!p.spec->is_scalar()) {
        if (param.size != 8) refuse(fmt::format("{}: a tensor needs an 8-byte pointer", where));
        return fmt::format("void* a{} = data({});", i, p.cpp);
      }
      DType d = p.spec->dtype;
      if (dtype_size(d) != param.size)
        refuse(fmt::format("{}: scalar is {} but the parameter has {} bytes", where, dtype_name(d),
                           param.size));
      switch (d) {
        case DType::kFloat32:
          return fmt::format("float a{} = static_cast<float>({});", i, p.cpp);
        case DType::kFloat16:
          return fmt::format("__half a{} = __float2half_rn(static_cast<float>({}));", i, p.cpp);
        case DType::kBFloat16:
          return fmt::format("__nv_bfloat16 a{} = __float2bfloat16_rn(static_cast<float>({}));", i,
                             p.cpp);
        case DType::kBool:
          return fmt::format("uint8_t a{} = {} ? 1 : 0;", i, p.cpp);
        case DType::kInt64:
          return fmt::format("int64_t a{} = {};", i, p.cpp);
        case DType::kInt32:
          return fmt::format("int32_t a{} = narrow<int32_t>({}, {});", i, p.cpp,
                             c_string(arg.name));
        case DType::kInt16:
          return fmt::format("int16_t a{} = narrow<int16_t>({}, {});", i, p.cpp,
                             c_string(arg.name));
        case DType::kInt8:
          return fmt::format("int8_t a{} = narrow<int8_t>({}, {});", i, p.cpp, c_string(arg.name));
        default:
          refuse(fmt::format("{}: no host conversion to {}", where, dtype_name(d)));
      }
    }
    if (definition_.find_axis(arg.name)) {
      if (!integer_ptx(param.type))
        refuse(fmt::format("{}: an axis passed to a .{} parameter", where, param.type));
      std::string ref = axis_ref(arg.name);
      if (param.size == 4)
        return fmt::format("int32_t a{} = narrow<int32_t>({}, {});", i, ref, c_string(arg.name));
      if (param.size == 8) return fmt::format("int64_t a{} = {};", i, ref);
      refuse(fmt::format("{}: an axis for a {}-byte parameter", where, param.size));
    }
    refuse(fmt::format("{}: names nothing the definition has", where));
  }

  // A tensor map argument: the map's layout (kharness/tensor_map.hpp, what kharness itself
  // resolves and encodes) written as C++ over the axes, encoded by the launcher's tensor_map()
  // over the tensor's (or the workspace's) address on every call.
  std::string tensor_map_argument(const Launch& launch, std::size_t i, const PtxParam& param,
                                  const std::string& where) {
    const LaunchArg& arg = launch.args[i];
    const TensorMapSpec* spec = launch.find_tensor_map(arg.tensor_map);
    if (!spec)
      refuse(fmt::format("{}: the launch declares no tensor map '{}'", where, arg.tensor_map));
    if (param.size != 128)
      refuse(fmt::format("{}: a tensor map needs a 128-byte CUtensorMap parameter, not {} bytes",
                         where, param.size));
    TensorMapLayout l;
    try {
      l = describe_tensor_map(*spec, definition_);
    } catch (const TensorMapError& e) {
      refuse(fmt::format("{}: tensor map '{}' {}: {}", where, spec->name, e.field(), e.what()));
    }
    std::string base, region;
    if (l.tensor == "workspace") {
      uses_workspace_ = true;
      base = "ws";
      region = "ws_bytes";
    } else {
      for (const auto& p : params_) {
        if (p.spec->name == l.tensor && !p.spec->is_scalar()) {
          base = fmt::format("data({})", p.cpp);
          region = fmt::format("tensor_bytes({})", p.cpp);
        }
      }
      if (base.empty())
        refuse(fmt::format("{}: tensor map over '{}', which is no tensor", where, l.tensor));
    }
    auto list = [&](const std::vector<Expr>& v) {
      std::vector<std::string> out;
      for (const auto& e : v) out.push_back(expr(e));
      return fmt::format("{{{}}}", fmt::join(out, ", "));
    };
    const TmaEncoding& c = l.encoding;
    return fmt::format(
        "alignas(64) CUtensorMap a{} = tensor_map(  // {}\n"
        "      {}, {}, {}, {}, {},\n"
        "      {}, {}, {},\n"
        "      {}, {}, {}, {},\n"
        "      {}, {}, {}, {});",
        i, c_string(spec->name), c_string(spec->name), c_string(launch.kernel), c.data_type.name,
        l.rank, l.element_bytes, base, expr(l.offset_bytes), region, list(l.dims), list(l.strides),
        list(l.box), list(l.element_strides), c.interleave.name, c.swizzle.name,
        c.l2_promotion.name, c.oob_fill.name);
  }

  // One list of launches as C++ blocks, each line indented by `indent`; `index` numbers the
  // launches across the plan so that every kernel gets one host stub declaration.
  std::string launch_list(const std::vector<Launch>& list, int& index, const std::string& indent) {
    std::string body;
    for (std::size_t n = 0; n < list.size(); ++n, ++index) {
      const Launch& launch = list[n];
      const KernelInfo* info = find_kernel(kernels_, launch.kernel);
      if (!info) refuse(fmt::format("kernel '{}' is not in the compiled module", launch.kernel));
      if (info->params.size() != launch.args.size())
        refuse(fmt::format("kernel '{}' takes {} parameters, the plan passes {}", launch.kernel,
                           info->params.size(), launch.args.size()));
      std::string symbol = info->mangled.empty() ? info->name : info->mangled;
      if (symbol.empty() || symbol.find_first_of(" \t\n\"\\") != std::string::npos)
        refuse(fmt::format("kernel '{}' has no linkable symbol", launch.kernel));
      if (!declared_.count(symbol)) {
        declared_[symbol] = fmt::format("kharness_stub_{}", index);
        stubs_ += fmt::format("extern \"C\" void {}(void) __asm__({});  // {}\n", declared_[symbol],
                              c_string(symbol), launch.kernel);
      }
      const std::string& stub = declared_[symbol];
      std::string block = fmt::format("{{  // launch {}: {}\n", n, launch.kernel);
      std::vector<std::string> refs;
      for (std::size_t a = 0; a < launch.args.size(); ++a) {
        block += "  " + argument(launch, a, info->params[a]) + "\n";
        refs.push_back(launch.args[a].literal ? fmt::format("a{}", a) : fmt::format("&a{}", a));
      }
      block += fmt::format("  void* args[] = {{{}}};\n",
                           refs.empty() ? "nullptr" : fmt::format("{}", fmt::join(refs, ", ")));
      auto dim3_of = [&](const std::array<Expr, 3>& d, const char* what) {
        return fmt::format("dim3(dim({}, \"{}.x\"), dim({}, \"{}.y\"), dim({}, \"{}.z\"))",
                           expr(d[0]), what, expr(d[1]), what, expr(d[2]), what);
      };
      block += fmt::format("  launch(reinterpret_cast<const void*>(&{}), {},\n", stub,
                           c_string(launch.kernel));
      block += fmt::format("         {},\n", dim3_of(launch.grid, "grid"));
      block += fmt::format("         {},\n", dim3_of(launch.block, "block"));
      block += fmt::format("         {},\n", dim3_of(launch.cluster, "cluster"));
      block += fmt::format("         dim({}, \"shared_bytes\"), stream, args, {}, {});\n",
                           expr(launch.shared_bytes), launch.pdl ? "true" : "false",
                           launch.cooperative ? "true" : "false");
      block += "}\n";
      body += indented(block, indent);
    }
    return body;
  }

  // A variant's `when` as a C++ condition. Conditions are plan expressions with comparisons and
  // && || !, which C++ reads as C does, so expr() translates them; what it cannot translate (a
  // name that is no axis, an axis no tensor gives) is refused naming the variant's field.
  std::string condition(std::size_t v) {
    const Expr& when = *solution_.plan.variants[v].when;
    try {
      return expr(when);
    } catch (const Error& e) {
      std::string why = e.what();
      why = why.substr(why.find(": ") + 2);  // without refuse()'s "cannot export ...: "
      refuse(fmt::format("variants[{}].when \"{}\": {}", v, one_line(when.text()), why));
    }
  }

  // A dispatching plan becomes an if / else if chain over its conditions, in the plan's order, so
  // that the first variant whose condition holds runs, as kharness chooses it for a workload.
  std::string variants() {
    const auto& list = solution_.plan.variants;
    std::string body = fmt::format(
        "  // The plan's {} variants: the first whose condition holds runs (the last has none).\n",
        list.size());
    int index = 0;
    for (std::size_t v = 0; v < list.size(); ++v) {
      const auto& variant = list[v];
      std::string label = variant.when ? one_line(variant.when->text()) : "otherwise";
      std::string head = v == 0 ? "  " : "  } else ";
      if (variant.when) {
        body += fmt::format("{}if ({}) {{  // variant {}: {}\n", head, condition(v), v, label);
      } else {
        body += fmt::format("{}{{  // variant {}: {}\n", head, v, label);
      }
      body += launch_list(variant.launches, index, "    ");
    }
    return body + "  }\n";
  }

  std::string launches() {
    std::string body;
    if (solution_.plan.has_variants()) {
      body = variants();
    } else {
      int index = 0;
      body = launch_list(solution_.plan.launches, index, "  ");
    }
    std::string out;
    out += "  DeviceGuard guard(device_of(" + first_tensor() + "));\n";
    out +=
        "  cudaStream_t stream = static_cast<cudaStream_t>(\n"
        "      TVMFFIEnvGetStream(kDLCUDA, guard.device));\n";
    if (uses_workspace_) {
      out += fmt::format("  const int64_t ws_bytes = {};\n", expr(solution_.plan.workspace_bytes));
      out += "  void* ws = workspace(guard.device, ws_bytes);\n";
    }
    return out + body;
  }

  std::string first_tensor() const {
    for (const auto& p : params_)
      if (!p.spec->is_scalar()) return p.cpp;
    refuse("the definition has no tensor: nothing tells the launcher its device");
  }

  const Solution& solution_;
  const Definition& definition_;
  const std::vector<KernelInfo>& kernels_;
  std::vector<Param> params_;
  std::set<std::string> bound_later_;
  std::map<std::string, std::string> declared_;  // kernel symbol -> stub name
  std::string checks_, axes_, stubs_;
  bool uses_workspace_ = false;
};

bool is_translation_unit(const std::string& path) {
  for (const char* ext : {".cu", ".cpp", ".cc", ".cxx", ".c"}) {
    std::string e = ext;
    if (path.size() >= e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0)
      return true;
  }
  return false;
}

// Stops nvcc at once, with the setting that fixes it, when the kernels are built for the plain
// arch: without it the build fails later in ptxas on the first arch-specific instruction
// ("wgmma.mma_async not supported on .target sm_90"), which does not say what to do.
std::string arch_guard(const std::string& arch_specific) {
  std::string list = tvm_ffi_arch(arch_specific);
  std::string digits = arch_specific.substr(3, arch_specific.size() - 4);
  return fmt::format(
      "#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM{}_ALL)\n"
      "#error \"these kernels need {}: build with TVM_FFI_CUDA_ARCH_LIST={} (FlashInfer-Bench "
      "compiles for the GPU's plain arch otherwise)\"\n"
      "#endif\n",
      digits, arch_specific, list);
}

// The entry source with the plan as its first block comment (kept as it is when it already has
// one), then the arch guard and the plan's macro definitions right after it.
std::string entry_with_plan(const Solution& solution, const std::vector<std::string>& defines,
                            const std::string& arch_specific) {
  const std::string& text = solution.entry_source().content;
  std::string comment_end_text = text;
  std::size_t insert_at = 0;
  std::string head;
  try {
    extract_plan_comment(text, solution.entry_source().path);
    insert_at = text.find("*/") + 2;
    if (insert_at < text.size() && text[insert_at] == '\n') ++insert_at;
  } catch (const Error&) {
    nlohmann::ordered_json plan = nlohmann::ordered_json::parse(solution.plan.raw.dump());
    std::string dumped = plan.dump(2);
    if (dumped.find("*/") != std::string::npos) refuse("the plan's text contains '*/'");
    head = "/* kharness\n" + dumped + "\n*/\n";
  }
  std::string defs;
  if (!arch_specific.empty()) {
    defs += "// kharness export: the arch-specific target these kernels need\n" +
            arch_guard(arch_specific);
  }
  if (!defines.empty()) {
    defs += "// kharness export: the plan's compile options (nvcc takes no extra flags here)\n";
    for (const auto& d : defines) defs += d + "\n";
  }
  return head + text.substr(0, insert_at) + defs + text.substr(insert_at);
}

}  // namespace

std::string tvm_ffi_arch(const std::string& arch) {
  // sm_<major><minor>a, minor one digit.
  if (arch.size() < 6 || arch.rfind("sm_", 0) != 0 || arch.back() != 'a') return "";
  std::string digits = arch.substr(3, arch.size() - 4);
  if (!std::all_of(digits.begin(), digits.end(),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
    return "";
  return fmt::format("{}.{}a", digits.substr(0, digits.size() - 1), digits.back());
}

std::string fib_launcher_source(const Solution& solution, const Definition& definition,
                                const std::vector<KernelInfo>& kernels,
                                const std::string& entry_symbol, const std::string& entry_path) {
  return LauncherWriter(solution, definition, kernels).write(entry_symbol, entry_path);
}

FibExport export_fib_solution(const Solution& solution, const Definition& definition,
                              const std::vector<KernelInfo>& kernels,
                              const FibExportOptions& options) {
  FibExport out;
  const SourceFile& entry = solution.entry_source();
  if (entry.path.size() < 3 || entry.path.compare(entry.path.size() - 3, 3, ".cu") != 0)
    refuse(
        fmt::format("the entry source '{}' must be a .cu file (FlashInfer-Bench compiles by "
                    "extension)",
                    entry.path));
  for (std::size_t i = 0; i < solution.sources.size(); ++i) {
    const auto& f = solution.sources[i];
    if (i != solution.entry && is_translation_unit(f.path))
      refuse(
          fmt::format("'{}' would be compiled as a second translation unit by "
                      "FlashInfer-Bench (every .cu/.cpp file is); name it .cuh or .h",
                      f.path));
    if (f.path == kFibLauncherFile)
      refuse(fmt::format("a source is named '{}', the generated launcher's name", f.path));
  }
  std::vector<std::string> defines = defines_of(solution.plan.compile_options);
  const std::string list = tvm_ffi_arch(options.arch_specific);
  if (!options.arch_specific.empty() && list.empty())
    refuse(fmt::format("'{}' is not an arch-specific target tvm-ffi can name (sm_<NN>a)",
                       options.arch_specific));
  std::string launcher =
      fib_launcher_source(solution, definition, kernels, options.entry_symbol, entry.path);

  nlohmann::ordered_json sources = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < solution.sources.size(); ++i) {
    const auto& f = solution.sources[i];
    sources.push_back(
        {{"path", f.path},
         {"content", i == solution.entry ? entry_with_plan(solution, defines, options.arch_specific)
                                         : f.content}});
  }
  sources.push_back({{"path", kFibLauncherFile}, {"content", launcher}});

  std::string description = solution.description;
  if (!description.empty()) description += " ";
  description += fmt::format(
      "Exported by kharness: {} is the kernel source with its launch plan; {} is the host "
      "launcher generated from that plan.",
      entry.path, kFibLauncherFile);
  if (!options.arch.empty())
    description += fmt::format(" Checked by kharness for {}.", options.arch);

  auto& j = out.solution;
  j["name"] = options.name.empty() ? solution.name : options.name;
  j["definition"] = definition.name;
  j["author"] = !options.author.empty()    ? options.author
                : !solution.author.empty() ? solution.author
                                           : std::string("kharness");
  j["spec"] = {{"language", "cuda"},
               {"target_hardware", options.target_hardware},
               {"entry_point", fmt::format("{}::{}", kFibLauncherFile, options.entry_symbol)},
               {"dependencies", nlohmann::ordered_json::array()},
               {"destination_passing_style", true},
               {"binding", "tvm-ffi"}};
  j["sources"] = sources;
  j["description"] = description;

  if (!options.cutlass_version.empty()) {
    // nvcc preprocesses with the host compiler, which reads CPATH: the one way to add an include
    // folder to FlashInfer-Bench's fixed build command.
    std::string setting = fmt::format("CPATH=\"{}\"", options.cutlass_include_dir);
    out.notes.push_back(fmt::format(
        "the kernel includes CuTe/CUTLASS {} headers, which a Solution does not carry: run "
        "FlashInfer-Bench with {} (the folder holding cute/ and cutlass/ of that release)",
        options.cutlass_version, setting));
    description += fmt::format(
        " Needs the CUTLASS {} headers: run FlashInfer-Bench with CPATH set to the folder "
        "holding cute/ and cutlass/.",
        options.cutlass_version);
    j["description"] = description;
  }
  if (!options.arch_specific.empty()) {
    std::string setting = fmt::format("TVM_FFI_CUDA_ARCH_LIST=\"{}\"", list);
    out.notes.push_back(fmt::format(
        "these kernels need {} and FlashInfer-Bench's builder compiles for the GPU's plain arch "
        "(a Solution carries no compile flags): run FlashInfer-Bench with {}",
        options.arch_specific, setting));
    j["description"] = description + fmt::format(
                                         " Needs {}: run FlashInfer-Bench with {} in its "
                                         "environment.",
                                         options.arch_specific, setting);
  }
  return out;
}

}  // namespace kharness::exchange
