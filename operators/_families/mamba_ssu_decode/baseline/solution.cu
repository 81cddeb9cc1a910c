/* kharness
{
  "launches": [
    { "kernel": "mamba_ssu_base_update",
      "grid": ["state_cache_size + batch_size", "nheads", 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["state", "x", "dt", "A", "B", "C", "D", "dt_bias", "state_batch_indices", "output",
               "new_state", "batch_size", "state_cache_size", "nheads", "head_dim", "dstate",
               "ngroups"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for every mamba_ssu_decode_* definition (semantics: the family's reference.cu,
// followed exactly): for sequence b with slot = state_batch_indices[b], head h, group
// g = h / (nheads / ngroups), row p and state column n:
//   dt_f = softplus(dt[b,h,p] + dt_bias[h,p]),
//   s = state[slot,h,p,n] * exp(A[h,p,n] * dt_f) + dt_f * x[b,h,p] * B[b,g,n]   (float32),
//   new_state[slot,h,p,n] = bf16(s), output[b,h,p] = bf16(sum_n s * C[b,g,n] + x * D[h,p]);
// every slot no sequence updates is copied; a sequence with slot < 0 outputs zeros.
// The straightforward implementation speedups are measured against, one launch that moves every
// byte of the cache once: blocks (slot, head) for slot < state_cache_size copy the slot's
// [head_dim, dstate] tile with 16-byte loads and stores unless a sequence of the batch names the
// slot (a __syncthreads_or over state_batch_indices); blocks (state_cache_size + b, head) update
// sequence b's tile: one warp per row p (8 rows in flight a block), lanes over n, 4 consecutive
// n a lane (8-byte bf16 and 16-byte float loads), the reference's float32 expression per element,
// the C dot product as a warp-shuffle sum. Slots are distinct (the generator makes them so).
#include <cuda_bf16.h>

constexpr int kWarps = 8;  // the plan's 256 threads
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float softplus_ref(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<size_t>(p) & 15) == 0;
}

__device__ __forceinline__ float bf16_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(unsigned u) { return __uint_as_float(u & 0xFFFF0000u); }
__device__ __forceinline__ unsigned bf16_pack(float lo, float hi) {
  return static_cast<unsigned>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (static_cast<unsigned>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

extern "C" __global__ void __launch_bounds__(256) mamba_ssu_base_update(
    const __nv_bfloat16* state, const __nv_bfloat16* x, const __nv_bfloat16* dt, const float* A,
    const __nv_bfloat16* B, const __nv_bfloat16* C, const __nv_bfloat16* D,
    const __nv_bfloat16* dt_bias, const int* state_batch_indices, __nv_bfloat16* output,
    __nv_bfloat16* new_state, int batch_size, int state_cache_size, int nheads, int head_dim,
    int dstate, int ngroups) {
  const int h = blockIdx.y;
  const int y = blockIdx.x;
  if (h >= nheads) return;  // the whole block
  const size_t tile = static_cast<size_t>(head_dim) * dstate;

  if (y < state_cache_size) {  // copy block for slot y, head h (uniform branch)
    int named = 0;
    for (int i = threadIdx.x; i < batch_size; i += blockDim.x)
      named |= state_batch_indices[i] == y;
    if (__syncthreads_or(named)) return;  // the updating block writes this tile
    const size_t base = (static_cast<size_t>(y) * nheads + h) * tile;
    if (tile % 8 == 0 && aligned16(state) && aligned16(new_state)) {
      const uint4* src = reinterpret_cast<const uint4*>(state + base);
      uint4* dst = reinterpret_cast<uint4*>(new_state + base);
      for (size_t i = threadIdx.x; i < tile / 8; i += blockDim.x) dst[i] = src[i];
    } else {
      for (size_t i = threadIdx.x; i < tile; i += blockDim.x) new_state[base + i] = state[base + i];
    }
    return;
  }

  const int seq = y - state_cache_size;  // update block for sequence seq, head h
  if (seq >= batch_size) return;
  const int slot = state_batch_indices[seq];
  if (slot < 0 || slot >= state_cache_size) {  // the reference's zeros (slot < 0); a slot past
    for (int p = threadIdx.x; p < head_dim; p += blockDim.x)  // the cache: zeros as well
      output[(static_cast<size_t>(seq) * nheads + h) * head_dim + p] = __float2bfloat16_rn(0.0f);
    return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = h / (nheads / ngroups);
  const __nv_bfloat16* B_row = B + (static_cast<size_t>(seq) * ngroups + g) * dstate;
  const __nv_bfloat16* C_row = C + (static_cast<size_t>(seq) * ngroups + g) * dstate;
  const bool vec = dstate % 4 == 0 && aligned16(state) && aligned16(new_state) && aligned16(A) &&
                   aligned16(B) && aligned16(C);
  for (int p = warp; p < head_dim; p += kWarps) {  // whole warps: p is uniform in a warp
    const size_t bhp = (static_cast<size_t>(seq) * nheads + h) * head_dim + p;  // [b, h, p]
    const size_t hp = static_cast<size_t>(h) * head_dim + p;                    // [h, p]
    const float xf = __bfloat162float(x[bhp]);
    const float dt_f = softplus_ref(__bfloat162float(dt[bhp]) + __bfloat162float(dt_bias[hp]));
    const size_t row = ((static_cast<size_t>(slot) * nheads + h) * head_dim + p) * dstate;
    const float* A_row = A + hp * dstate;
    float y_part = 0.0f;
    if (vec) {
      for (int n = 4 * lane; n < dstate; n += 128) {
        const uint2 st = *reinterpret_cast<const uint2*>(state + row + n);
        const float4 a4 = *reinterpret_cast<const float4*>(A_row + n);
        const uint2 b2 = *reinterpret_cast<const uint2*>(B_row + n);
        const uint2 c2 = *reinterpret_cast<const uint2*>(C_row + n);
        const float s0 = bf16_lo(st.x) * expf(a4.x * dt_f) + dt_f * xf * bf16_lo(b2.x);
        const float s1 = bf16_hi(st.x) * expf(a4.y * dt_f) + dt_f * xf * bf16_hi(b2.x);
        const float s2 = bf16_lo(st.y) * expf(a4.z * dt_f) + dt_f * xf * bf16_lo(b2.y);
        const float s3 = bf16_hi(st.y) * expf(a4.w * dt_f) + dt_f * xf * bf16_hi(b2.y);
        *reinterpret_cast<uint2*>(new_state + row + n) =
            make_uint2(bf16_pack(s0, s1), bf16_pack(s2, s3));
        y_part += s0 * bf16_lo(c2.x);
        y_part += s1 * bf16_hi(c2.x);
        y_part += s2 * bf16_lo(c2.y);
        y_part += s3 * bf16_hi(c2.y);
      }
    } else {
      for (int n = lane; n < dstate; n += 32) {
        const float s = __bfloat162float(state[row + n]) * expf(A_row[n] * dt_f) +
                        dt_f * xf * __bfloat162float(B_row[n]);
        new_state[row + n] = __float2bfloat16_rn(s);
        y_part += s * __bfloat162float(C_row[n]);
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
      y_part += __shfl_xor_sync(kFull, y_part, offset);
    if (lane == 0) output[bhp] = __float2bfloat16_rn(y_part + xf * __bfloat162float(D[hp]));
  }
}
