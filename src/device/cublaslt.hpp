// cuBLASLt, loaded at run time (dlopen), as a built-in vendor baseline for GEMM operators: the
// speed a user would get by calling the library instead of writing a kernel. Loading at run time
// keeps the binary free of a link-time dependency it needs only for this.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>

#include "kharness/dtype.hpp"

namespace kharness::device {

// C[M,N] = A[M,K] @ B[N,K]^T, all row-major (nn.Linear layout), float32 accumulation, A, B and C
// of one 16-bit float type. The algorithm is cuBLASLt's first heuristic choice for the shape.
// With kBlockScaledFp8: A and B e4m3, A scaled per 1x128 block along K, B per 128x128 block, C
// bfloat16: DeepSeek's fp8 GEMM, which cuBLASLt runs natively on sm_90 since CUDA 12.9
// (VEC128_32F on its column-major B operand, BLK128x128_32F on its A operand). B_scale
// [ceil(N/128), K/128] row-major is the layout cuBLASLt reads; A_scale [M, K/128] row-major is
// not (cuBLASLt wants the 1x128 scales M-major, [K/128][M], so M a multiple of 4): each input
// set's A_scale is transposed once into a buffer of this object (prepare_activation_scales,
// before timing) and the GEMM reads that copy. Inputs never change within a set.
class CublasLtGemm {
 public:
  enum class Kind { kHalf, kBlockScaledFp8 };
  // Throws CudaError-free kharness::Error (environment) when cuBLASLt cannot be loaded, and
  // std::runtime_error when it has no algorithm for the shape (for kBlockScaledFp8 the algorithm
  // is chosen at the first run, when the scale pointers are known; a failure is run's message).
  CublasLtGemm(std::int64_t m, std::int64_t n, std::int64_t k, DType dtype,
               Kind kind = Kind::kHalf);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;  // owns cuBLASLt descriptors and a workspace
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Enqueues the GEMM on `stream`; a non-empty string describes a failure.
  std::string run(CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUstream stream,
                  CUdeviceptr a_scale = 0, CUdeviceptr b_scale = 0);

  // The M-major copy of A_scale at `a_scale` (kBlockScaledFp8), made now (synchronously).
  void prepare_activation_scales(CUdeviceptr a_scale);

  static bool available();  // the library loads
  std::string description() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kharness::device
