/* kharness
{
  "definition": "embedding_v128256_h4096",
  "launches": [
    { "kernel": "embedding_baseline",
      "grid": ["num_tokens", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["input_ids", "weight", "output", "num_tokens"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for embedding_v128256_h4096: the straightforward kernel. One block of 256 threads
// per token copies the looked-up row one bf16 element at a time.
#include <cuda_bf16.h>

constexpr int kHidden = 4096;

extern "C" __global__ void embedding_baseline(const int* input_ids, const __nv_bfloat16* weight,
                                              __nv_bfloat16* output, int num_tokens) {
  const int t = blockIdx.x;
  if (t >= num_tokens) return;
  const __nv_bfloat16* src = weight + static_cast<size_t>(input_ids[t]) * kHidden;
  __nv_bfloat16* dst = output + static_cast<size_t>(t) * kHidden;
  for (int i = threadIdx.x; i < kHidden; i += blockDim.x) dst[i] = src[i];
}
