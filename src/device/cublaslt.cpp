#include "device/cublaslt.hpp"

#include <cublasLt.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "device/driver.hpp"
#include "kharness/error.hpp"

namespace kharness::device {
namespace {

// The cuBLASLt entry points kharness uses, resolved once from the shared library.
struct Library {
  void* handle = nullptr;
  std::string error;
#define KH_CUBLASLT_FN(name) decltype(&::name) name = nullptr;
  KH_CUBLASLT_FN(cublasLtCreate)
  KH_CUBLASLT_FN(cublasLtDestroy)
  KH_CUBLASLT_FN(cublasLtGetVersion)
  KH_CUBLASLT_FN(cublasLtMatmul)
  KH_CUBLASLT_FN(cublasLtMatmulDescCreate)
  KH_CUBLASLT_FN(cublasLtMatmulDescDestroy)
  KH_CUBLASLT_FN(cublasLtMatmulDescSetAttribute)
  KH_CUBLASLT_FN(cublasLtMatrixLayoutCreate)
  KH_CUBLASLT_FN(cublasLtMatrixLayoutDestroy)
  KH_CUBLASLT_FN(cublasLtMatmulPreferenceCreate)
  KH_CUBLASLT_FN(cublasLtMatmulPreferenceDestroy)
  KH_CUBLASLT_FN(cublasLtMatmulPreferenceSetAttribute)
  KH_CUBLASLT_FN(cublasLtMatmulAlgoGetHeuristic)
#undef KH_CUBLASLT_FN

  static const Library& get() {
    static Library lib = load();
    return lib;
  }

 private:
  template <typename F>
  bool resolve(F& fn, const char* name) {
    fn = reinterpret_cast<F>(::dlsym(handle, name));
    if (!fn) error = fmt::format("libcublasLt has no symbol {}", name);
    return fn != nullptr;
  }

  static Library load() {
    Library lib;
    const std::string dir = KHARNESS_CUDA_LIBRARY_DIR;
    for (const std::string& name : {std::string("libcublasLt.so.13"), dir + "/libcublasLt.so.13",
                                    std::string("libcublasLt.so.12"), dir + "/libcublasLt.so",
                                    std::string("libcublasLt.so")}) {
      lib.handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib.handle) break;
    }
    if (!lib.handle) {
      lib.error = fmt::format("cannot load libcublasLt (searched the library path and {}): {}", dir,
                              ::dlerror());
      return lib;
    }
    bool ok = lib.resolve(lib.cublasLtCreate, "cublasLtCreate") &&
              lib.resolve(lib.cublasLtDestroy, "cublasLtDestroy") &&
              lib.resolve(lib.cublasLtGetVersion, "cublasLtGetVersion") &&
              lib.resolve(lib.cublasLtMatmul, "cublasLtMatmul") &&
              lib.resolve(lib.cublasLtMatmulDescCreate, "cublasLtMatmulDescCreate") &&
              lib.resolve(lib.cublasLtMatmulDescDestroy, "cublasLtMatmulDescDestroy") &&
              lib.resolve(lib.cublasLtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute") &&
              lib.resolve(lib.cublasLtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate") &&
              lib.resolve(lib.cublasLtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy") &&
              lib.resolve(lib.cublasLtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate") &&
              lib.resolve(lib.cublasLtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy") &&
              lib.resolve(lib.cublasLtMatmulPreferenceSetAttribute,
                          "cublasLtMatmulPreferenceSetAttribute") &&
              lib.resolve(lib.cublasLtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
    if (!ok) {
      ::dlclose(lib.handle);
      lib.handle = nullptr;
    }
    return lib;
  }
};

void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(
        fmt::format("{} failed (cublasStatus {})", call, static_cast<int>(status)));
}

constexpr std::size_t kWorkspaceBytes = 32u << 20;  // what cuBLAS recommends for Hopper

}  // namespace

struct CublasLtGemm::Impl {
  const Library& lib = Library::get();
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a_layout = nullptr, b_layout = nullptr, c_layout = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic{};
  std::unique_ptr<DeviceBuffer> workspace;
  std::string what;
  bool block_scaled = false;
  std::int64_t m = 0, n = 0, k = 0;
  std::map<CUdeviceptr, DeviceBuffer> m_major_scales;  // A_scale buffer -> its [K/128][M] copy

  bool set_scale_pointers(const void* weight_scale, const void* act_scale) {
    return lib.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                              &weight_scale,
                                              sizeof(weight_scale)) == CUBLAS_STATUS_SUCCESS &&
           lib.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &act_scale,
                                              sizeof(act_scale)) == CUBLAS_STATUS_SUCCESS;
  }

  std::string choose_algo() {
    int found = 0;
    cublasStatus_t st = lib.cublasLtMatmulAlgoGetHeuristic(
        handle, op, a_layout, b_layout, c_layout, c_layout, preference, 1, &heuristic, &found);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
      return fmt::format("cuBLASLt has no algorithm for M={} N={} K={}{} (cublasStatus {})", m, n,
                         k, block_scaled ? " with 1x128 / 128x128 fp8 block scales" : "",
                         static_cast<int>(st));
    }
    return {};
  }

  ~Impl() {
    if (preference) lib.cublasLtMatmulPreferenceDestroy(preference);
    if (c_layout) lib.cublasLtMatrixLayoutDestroy(c_layout);
    if (b_layout) lib.cublasLtMatrixLayoutDestroy(b_layout);
    if (a_layout) lib.cublasLtMatrixLayoutDestroy(a_layout);
    if (op) lib.cublasLtMatmulDescDestroy(op);
    if (handle) lib.cublasLtDestroy(handle);
  }
};

bool CublasLtGemm::available() { return Library::get().handle != nullptr; }

CublasLtGemm::CublasLtGemm(std::int64_t m, std::int64_t n, std::int64_t k, DType dtype, Kind kind)
    : impl_(std::make_unique<Impl>()) {
  const Library& lib = impl_->lib;
  if (!lib.handle) throw environment_error("cublaslt baseline: " + lib.error);
  cudaDataType_t type;
  cudaDataType_t out_type;
  if (kind == Kind::kBlockScaledFp8) {
    if (dtype != DType::kFloat8E4M3) {
      throw std::runtime_error(fmt::format(
          "the block-scaled cuBLASLt baseline takes float8_e4m3fn, not {}", dtype_name(dtype)));
    }
    type = CUDA_R_8F_E4M3;
    out_type = CUDA_R_16BF;
  } else if (dtype == DType::kFloat16) {
    type = out_type = CUDA_R_16F;
  } else if (dtype == DType::kBFloat16) {
    type = out_type = CUDA_R_16BF;
  } else {
    throw std::runtime_error(
        fmt::format("the cuBLASLt baseline takes float16 or bfloat16, not {}", dtype_name(dtype)));
  }
  Impl& s = *impl_;
  s.block_scaled = kind == Kind::kBlockScaledFp8;
  s.m = m;
  s.n = n;
  s.k = k;
  check(lib.cublasLtCreate(&s.handle), "cublasLtCreate");
  check(lib.cublasLtMatmulDescCreate(&s.op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
        "cublasLtMatmulDescCreate");
  // Row-major C[M,N] = A[M,K] B[N,K]^T is column-major C^T[N,M] = B^T ... : with cuBLAS's
  // column-major view, the B buffer is a K x N matrix (ld K) taken transposed, the A buffer a
  // K x M matrix (ld K) taken as is, and C an N x M matrix (ld N).
  cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  check(lib.cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSA, &transa,
                                           sizeof(transa)),
        "cublasLtMatmulDescSetAttribute(TRANSA)");
  check(lib.cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSB, &transb,
                                           sizeof(transb)),
        "cublasLtMatmulDescSetAttribute(TRANSB)");
  if (s.block_scaled) {
    // cuBLASLt's A is our B (weights, 128x128 blocks), its B our A (activations, 1x128).
    std::int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    std::int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    check(lib.cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode,
                                             sizeof(a_mode)),
          "cublasLtMatmulDescSetAttribute(A_SCALE_MODE)");
    check(lib.cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode,
                                             sizeof(b_mode)),
          "cublasLtMatmulDescSetAttribute(B_SCALE_MODE)");
  }
  auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  check(lib.cublasLtMatrixLayoutCreate(&s.a_layout, type, u(k), u(n), k), "layout(B)");
  check(lib.cublasLtMatrixLayoutCreate(&s.b_layout, type, u(k), u(m), k), "layout(A)");
  check(lib.cublasLtMatrixLayoutCreate(&s.c_layout, out_type, u(n), u(m), n), "layout(C)");
  check(lib.cublasLtMatmulPreferenceCreate(&s.preference), "cublasLtMatmulPreferenceCreate");
  std::uint64_t ws = kWorkspaceBytes;
  check(lib.cublasLtMatmulPreferenceSetAttribute(
            s.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
        "cublasLtMatmulPreferenceSetAttribute");
  s.workspace = std::make_unique<DeviceBuffer>(kWorkspaceBytes);
  // The heuristic needs the scale modes, not the scale tensors: the workspace stands in for them.
  if (s.block_scaled) {
    const void* any = reinterpret_cast<const void*>(s.workspace->ptr());
    if (!s.set_scale_pointers(any, any)) {
      throw std::runtime_error("cublasLtMatmulDescSetAttribute(scale pointers) failed");
    }
  }
  if (std::string error = s.choose_algo(); !error.empty()) throw std::runtime_error(error);
  s.what =
      fmt::format("cuBLASLt {} ({}{} M={} N={} K={}, workspace {} MiB)", lib.cublasLtGetVersion(),
                  dtype_name(dtype), s.block_scaled ? " 1x128/128x128 block-scaled" : "", m, n, k,
                  kWorkspaceBytes >> 20);
}

CublasLtGemm::~CublasLtGemm() = default;

void CublasLtGemm::prepare_activation_scales(CUdeviceptr a_scale) {
  Impl& s = *impl_;
  if (!s.block_scaled || s.m_major_scales.count(a_scale)) return;
  const std::size_t blocks = static_cast<std::size_t>(s.k / 128),
                    rows = static_cast<std::size_t>(s.m);
  std::vector<float> row_major(rows * blocks), m_major(rows * blocks);
  const Driver& d = Driver::instance();
  d.check(d.cuCtxSynchronize(), "cuCtxSynchronize");  // the inputs' upload has landed
  d.check(d.cuMemcpyDtoH(row_major.data(), a_scale, row_major.size() * sizeof(float)),
          "cuMemcpyDtoH(A_scale)");
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t b = 0; b < blocks; ++b) m_major[b * rows + r] = row_major[r * blocks + b];
  DeviceBuffer copy(m_major.size() * sizeof(float));
  copy.upload(m_major.data(), m_major.size() * sizeof(float));
  s.m_major_scales.emplace(a_scale, std::move(copy));
}

std::string CublasLtGemm::description() const { return impl_->what; }

std::string CublasLtGemm::run(CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUstream stream,
                              CUdeviceptr a_scale, CUdeviceptr b_scale) {
  Impl& s = *impl_;
  if (s.block_scaled) {
    // The scales move with the input set: the descriptor takes this call's pointers.
    auto copy = s.m_major_scales.find(a_scale);
    if (copy == s.m_major_scales.end()) {
      return "internal: the activation scales of this input set were not prepared";
    }
    if (!s.set_scale_pointers(reinterpret_cast<const void*>(b_scale),
                              reinterpret_cast<const void*>(copy->second.ptr()))) {
      return "cublasLtMatmulDescSetAttribute(scale pointers) failed";
    }
  }
  const float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t status = s.lib.cublasLtMatmul(
      s.handle, s.op, &alpha, reinterpret_cast<const void*>(b), s.a_layout,
      reinterpret_cast<const void*>(a), s.b_layout, &beta, reinterpret_cast<void*>(c), s.c_layout,
      reinterpret_cast<void*>(c), s.c_layout, &s.heuristic.algo,
      reinterpret_cast<void*>(s.workspace->ptr()), kWorkspaceBytes,
      reinterpret_cast<cudaStream_t>(stream));
  if (status != CUBLAS_STATUS_SUCCESS)
    return fmt::format("cublasLtMatmul failed (cublasStatus {})", static_cast<int>(status));
  return {};
}

}  // namespace kharness::device
