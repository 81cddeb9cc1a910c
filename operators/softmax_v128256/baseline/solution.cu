/* kharness
{
  "definition": "softmax_v128256",
  "launches": [
    { "kernel": "softmax_baseline",
      "grid": ["batch_size", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["logits", "temperature", "probs", "batch_size"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for softmax_v128256: the straightforward hand-written kernel speedups are measured
// against. One block of 256 threads per row, three passes over the row with scalar loads
// (maximum, sum of exponentials, output), warp-shuffle plus shared-memory reductions.
constexpr int kVocab = 128256;
constexpr int kThreads = 256;

__device__ float block_reduce(float v, bool is_max) {
  __shared__ float part[kThreads / 32];
  for (int off = 16; off > 0; off /= 2) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  float r = part[0];
  for (int w = 1; w < kThreads / 32; ++w) r = is_max ? fmaxf(r, part[w]) : r + part[w];
  __syncthreads();  // part is reused by the next call
  return r;
}

extern "C" __global__ void softmax_baseline(const float* logits, const float* temperature,
                                            float* probs, int batch_size) {
  const int b = blockIdx.x;
  if (b >= batch_size) return;
  const float* row = logits + static_cast<size_t>(b) * kVocab;
  float* out = probs + static_cast<size_t>(b) * kVocab;
  const float inv_t = 1.0f / temperature[b];
  float m = __int_as_float(0xff800000u);
  for (int i = threadIdx.x; i < kVocab; i += kThreads) m = fmaxf(m, row[i] * inv_t);
  m = block_reduce(m, true);
  float s = 0.0f;
  for (int i = threadIdx.x; i < kVocab; i += kThreads) s += expf(row[i] * inv_t - m);
  const float inv_s = 1.0f / block_reduce(s, false);
  for (int i = threadIdx.x; i < kVocab; i += kThreads) out[i] = expf(row[i] * inv_t - m) * inv_s;
}
