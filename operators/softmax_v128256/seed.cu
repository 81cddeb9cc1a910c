/* kharness
{
  "definition": "softmax_v128256",
  "launches": [
    { "kernel": "softmax_kernel",
      "grid": ["batch_size", 1, 1],
      "block": [1024, 1, 1],
      "shared_bytes": "0",
      "args": ["logits", "temperature", "probs", "batch_size"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Seed solution for softmax_v128256: a correct, reasonable starting point. One block of 1024
// threads per row; the row (128256 floats = 32064 float4) is read twice: first an online
// (running max, rescaled sum) pass with 128-bit loads, merged over the warp with shuffles and over
// the block through shared memory, then a pass that writes exp(x - max) * (1 / sum) with 128-bit
// stores. Exponentials in base 2 with log2(e) / temperature folded into one multiplier.
constexpr int kVocab = 128256;
constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kVec4 = kVocab / 4;
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

// Merges (m, s) into (m0, s0): sums of 2^(y - m) over two sets, re-based to the larger max.
__device__ __forceinline__ void merge(float& m0, float& s0, float m, float s) {
  const float mm = fmaxf(m0, m);
  if (mm == neg_inf()) return;  // both empty
  s0 = s0 * exp2f(m0 - mm) + s * exp2f(m - mm);
  m0 = mm;
}

extern "C" __global__ void __launch_bounds__(kThreads)
    softmax_kernel(const float* __restrict__ logits, const float* __restrict__ temperature,
                   float* __restrict__ probs, int batch_size) {
  __shared__ float s_m[kWarps], s_s[kWarps];
  __shared__ float s_final[2];
  const int b = blockIdx.x;
  if (b >= batch_size) return;
  const float4* row = reinterpret_cast<const float4*>(logits + static_cast<size_t>(b) * kVocab);
  float4* out = reinterpret_cast<float4*>(probs + static_cast<size_t>(b) * kVocab);
  // y = x * log2(e) = logits / temperature * log2(e), so exp(x - max x) = 2^(y - max y).
  const float mul = kLog2e / temperature[b];

  float m = neg_inf(), s = 0.0f;
  for (int i = threadIdx.x; i < kVec4; i += kThreads) {
    const float4 v = row[i];
    const float y0 = v.x * mul, y1 = v.y * mul, y2 = v.z * mul, y3 = v.w * mul;
    const float mm = fmaxf(fmaxf(m, fmaxf(y0, y1)), fmaxf(y2, y3));
    s = s * exp2f(m - mm) + exp2f(y0 - mm) + exp2f(y1 - mm) + exp2f(y2 - mm) + exp2f(y3 - mm);
    m = mm;
  }
  for (int off = 16; off > 0; off /= 2) {
    const float om = __shfl_xor_sync(0xffffffffu, m, off);
    const float os = __shfl_xor_sync(0xffffffffu, s, off);
    merge(m, s, om, os);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    s_m[warp] = m;
    s_s[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    m = s_m[lane];  // kWarps == 32
    s = s_s[lane];
    for (int off = 16; off > 0; off /= 2) {
      const float om = __shfl_xor_sync(0xffffffffu, m, off);
      const float os = __shfl_xor_sync(0xffffffffu, s, off);
      merge(m, s, om, os);
    }
    if (lane == 0) {
      s_final[0] = m;
      s_final[1] = 1.0f / s;
    }
  }
  __syncthreads();
  const float max_y = s_final[0], inv = s_final[1];
  for (int i = threadIdx.x; i < kVec4; i += kThreads) {
    const float4 v = row[i];
    float4 p;
    p.x = exp2f(v.x * mul - max_y) * inv;
    p.y = exp2f(v.y * mul - max_y) * inv;
    p.z = exp2f(v.z * mul - max_y) * inv;
    p.w = exp2f(v.w * mul - max_y) * inv;
    out[i] = p;
  }
}
