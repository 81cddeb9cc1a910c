/* kharness
{
  "definition": "embedding_v128256_h4096",
  "launches": [
    { "kernel": "embedding_kernel",
      "grid": ["num_tokens", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["input_ids", "weight", "output", "num_tokens"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Seed solution for embedding_v128256_h4096: a correct, reasonable starting point.
// One block of 256 threads per token; a row is 4096 bf16 = 8 KiB = 512 128-bit vectors, so each
// thread copies two 128-bit vectors (consecutive threads touch consecutive 16 B).

constexpr int kHidden = 4096;
constexpr int kThreads = 256;
constexpr int kVecsPerRow = kHidden * 2 / 16;  // 512
static_assert(kVecsPerRow % kThreads == 0, "row must split evenly");

extern "C" __global__ void __launch_bounds__(kThreads)
    embedding_kernel(const int* __restrict__ input_ids, const uint4* __restrict__ weight,
                     uint4* __restrict__ output, int num_tokens) {
  const int t = blockIdx.x;
  if (t >= num_tokens) return;
  const uint4* src = weight + static_cast<size_t>(input_ids[t]) * kVecsPerRow;
  uint4* dst = output + static_cast<size_t>(t) * kVecsPerRow;
#pragma unroll
  for (int v = 0; v < kVecsPerRow / kThreads; ++v) {
    dst[v * kThreads + threadIdx.x] = src[v * kThreads + threadIdx.x];
  }
}
