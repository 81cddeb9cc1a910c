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
class CublasLtGemm {
 public:
  // Throws CudaError-free kharness::Error (environment) when cuBLASLt cannot be loaded, and
  // std::runtime_error when it has no algorithm for the shape.
  CublasLtGemm(std::int64_t m, std::int64_t n, std::int64_t k, DType dtype);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;  // owns cuBLASLt descriptors and a workspace
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Enqueues the GEMM on `stream`; a non-empty string describes a failure.
  std::string run(CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUstream stream);

  static bool available();  // the library loads
  std::string description() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kharness::device
