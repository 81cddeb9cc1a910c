/* kharness
{
  "launches": [
    { "kernel": "gdn_mtp_base_tokens",
      "grid": ["num_v_heads", "batch_size", "cdiv(head_size, 8)"],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["q", "k", "v", "initial_state", "initial_state_indices", "A_log", "a", "dt_bias",
               "b", "scale", "output", "batch_size", "seq_len", "num_q_heads", "num_k_heads",
               "num_v_heads", "head_size", "pool_size"] },
    { "kernel": "gdn_mtp_base_final_state",
      "grid": ["cdiv(pool_size * num_v_heads * head_size * head_size, 1024)", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["initial_state", "final_state", "pool_size", "num_v_heads", "head_size"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Baseline for every gdn_mtp_* definition (semantics: the family's reference.cu, followed
// exactly): per sequence b, state slot p = initial_state_indices[b] and value head h, the k-last
// state S[k][v] = initial_state[p, h, v, k] runs through the seq_len draft tokens in order,
//   g = exp(-exp(A_log[h]) * softplus(a + dt_bias[h])), beta = sigmoid(b),
//   old_v = sum_k k[k] * (g * S[k][v]), new_v = beta * v + (1 - beta) * old_v,
//   S[k][v] = g * S[k][v] - k[k] * old_v + k[k] * new_v, output = bf16(scale * sum_k q[k] S[k][v]);
// final_state is a copy of initial_state (the reference's disable_state_update), and
// intermediate_states_buffer is neither read nor written (an input).
// The straightforward implementation speedups are measured against: value rows are independent,
// so one warp owns one row v of one (sequence, head) (8 rows a block, grid (head, sequence, row
// block): 16 blocks per (sequence, head) for head_size 128, enough for batch 1); the row's
// head_size state values live in registers (lane l holds k = l + 32 j, coalesced 128-byte
// loads), both sums over k are warp-shuffle reductions, every per-element formula is the
// reference's in float32. A second launch copies the pool with 16-byte loads and stores.
// head_size <= 256 (8 values a lane), as the reference's 256-value rows.
#include <cuda_bf16.h>

constexpr int kRowsPerBlock = 8;  // warps per block: the plan's 256 threads and cdiv(head_size, 8)
constexpr int kMaxPerLane = 8;    // head_size <= 32 * 8
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float softplus_ref(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFull, v, offset);
  return v;
}

extern "C" __global__ void __launch_bounds__(256) gdn_mtp_base_tokens(
    const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
    const float* initial_state, const int* initial_state_indices, const float* A_log,
    const __nv_bfloat16* a, const float* dt_bias, const __nv_bfloat16* b, float scale,
    __nv_bfloat16* output, int batch_size, int seq_len, int num_q_heads, int num_k_heads,
    int num_v_heads, int head_size, int pool_size) {
  const int h = blockIdx.x;
  const int seq = blockIdx.y;
  const int lane = threadIdx.x & 31;
  const int vv = blockIdx.z * kRowsPerBlock + (threadIdx.x >> 5);  // this warp's value row
  // Whole warps return (no barrier in this kernel; the shuffles below see full warps).
  if (h >= num_v_heads || seq >= batch_size || vv >= head_size || head_size > 32 * kMaxPerLane)
    return;
  if (scale == 0.0f) scale = 1.0f / sqrtf(static_cast<float>(head_size));
  const int qh = h / (num_v_heads / num_q_heads);
  const int kh = h / (num_v_heads / num_k_heads);
  const int slot = initial_state_indices[seq];
  if (slot < 0 || slot >= pool_size) {  // not made by the generator; the reference would read
    for (int t = 0; t < seq_len; ++t)    // outside the pool: write zeros instead
      if (lane == 0) {
        const size_t token_head = (static_cast<size_t>(seq) * seq_len + t) * num_v_heads + h;
        output[token_head * head_size + vv] = __float2bfloat16_rn(0.0f);
      }
    return;
  }
  const float* s_row = initial_state +
                       (static_cast<size_t>(slot) * num_v_heads + h) * head_size * head_size +
                       static_cast<size_t>(vv) * head_size;  // S[:, vv], contiguous in k
  float s[kMaxPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int kk = lane + 32 * j;
    s[j] = kk < head_size ? s_row[kk] : 0.0f;
  }
  for (int t = 0; t < seq_len; ++t) {
    const size_t token = static_cast<size_t>(seq) * seq_len + t;  // [b, t]
    const size_t token_head = token * num_v_heads + h;            // [b, t, h]
    const __nv_bfloat16* q_row = q + (token * num_q_heads + qh) * head_size;
    const __nv_bfloat16* k_row = k + (token * num_k_heads + kh) * head_size;
    const float x = __bfloat162float(a[token_head]) + dt_bias[h];
    const float g = expf(-expf(A_log[h]) * softplus_ref(x));
    const float beta = 1.0f / (1.0f + expf(-__bfloat162float(b[token_head])));
    float kf[kMaxPerLane], qf[kMaxPerLane];
    float part = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int kk = lane + 32 * j;
      kf[j] = kk < head_size ? __bfloat162float(k_row[kk]) : 0.0f;
      qf[j] = kk < head_size ? __bfloat162float(q_row[kk]) : 0.0f;
      part += kf[j] * (g * s[j]);
    }
    const float old_v = warp_sum(part);
    const float new_v =
        beta * __bfloat162float(v[token_head * head_size + vv]) + (1.0f - beta) * old_v;
    float o = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      if (lane + 32 * j < head_size) {
        s[j] = g * s[j] - kf[j] * old_v + kf[j] * new_v;
        o += qf[j] * s[j];
      }
    }
    o = warp_sum(o);
    if (lane == 0) output[token_head * head_size + vv] = __float2bfloat16_rn(scale * o);
  }
}

// final_state = initial_state: thread i copies float4 i (and threads 0..2 the tail past the last
// whole float4); plain floats when a pointer is not 16-byte aligned.
extern "C" __global__ void gdn_mtp_base_final_state(const float* initial_state,
                                                    float* final_state, int pool_size,
                                                    int num_v_heads, int head_size) {
  const size_t n = static_cast<size_t>(pool_size) * num_v_heads * head_size * head_size;
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool vec =
      ((reinterpret_cast<size_t>(initial_state) | reinterpret_cast<size_t>(final_state)) & 15) == 0;
  if (vec) {
    const size_t n4 = n / 4;
    if (i < n4)
      reinterpret_cast<float4*>(final_state)[i] = reinterpret_cast<const float4*>(initial_state)[i];
    if (i < n - 4 * n4) final_state[4 * n4 + i] = initial_state[4 * n4 + i];
  } else {
    for (size_t j = 4 * i; j < 4 * i + 4 && j < n; ++j) final_state[j] = initial_state[j];
  }
}
