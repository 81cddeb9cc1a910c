// The mamba_ssu_decode family's reference kernels, which its seed also is with the kernels renamed:
// the family's reference.cu and seed.cu define KB_KERNEL(name) (mamba_ssu_reference_<name>,
// mamba_ssu_seed_<name>), then include this text (inlined when it is loaded).
#ifndef KB_KERNEL
#error "define KB_KERNEL(name) before this text"
#endif
// For sequence b with slot = state_batch_indices[b] (skipped when < 0), head h, group g = h /
// (nheads / ngroups), row p < head_dim and state column n < dstate:
//   dt_f   = softplus(float(dt[b, h, p]) + float(dt_bias[h, p]))     (softplus(x) = x for x > 20)
//   s      = float(state[slot, h, p, n]) * exp(A[h, p, n] * dt_f) + dt_f * float(x[b, h, p]) *
//            float(B[b, g, n])                                         (float32)
//   new_state[slot, h, p, n] = bf16(s)
//   output[b, h, p] = bf16( sum_n s * float(C[b, g, n]) + float(x[b, h, p]) * float(D[h, p]) )
//   (the float s, before its rounding to bf16, as in the reference text). new_state is the
//   state with the batch's slots updated: every other slot is a copy.
// Written to be obviously correct, not fast: one thread per element copies the state, then one
// block per (head, sequence), one thread per row p, n in increasing order. Slots are distinct
// (the generator makes them so; the reference text would otherwise update a slot twice).
#include <cuda_bf16.h>

__device__ float softplus_ref(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

extern "C" __global__ void KB_KERNEL(copy_state)(const __nv_bfloat16* state,
                                                 __nv_bfloat16* new_state,
                                                 int state_cache_size, int nheads,
                                                 int head_dim, int dstate) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < static_cast<size_t>(state_cache_size) * nheads * head_dim * dstate)
    new_state[i] = state[i];
}

extern "C" __global__ void KB_KERNEL(update)(
    const __nv_bfloat16* state, const __nv_bfloat16* x, const __nv_bfloat16* dt, const float* A,
    const __nv_bfloat16* B, const __nv_bfloat16* C, const __nv_bfloat16* D,
    const __nv_bfloat16* dt_bias, const int* state_batch_indices, __nv_bfloat16* output,
    __nv_bfloat16* new_state, int batch_size, int nheads, int head_dim, int dstate, int ngroups) {
  const int h = blockIdx.x;
  const int seq = blockIdx.y;
  if (h >= nheads || seq >= batch_size) return;
  const int slot = state_batch_indices[seq];
  const int g = h / (nheads / ngroups);
  const __nv_bfloat16* B_row = B + (static_cast<size_t>(seq) * ngroups + g) * dstate;
  const __nv_bfloat16* C_row = C + (static_cast<size_t>(seq) * ngroups + g) * dstate;
  for (int p = threadIdx.x; p < head_dim; p += blockDim.x) {
    const size_t bhp = (static_cast<size_t>(seq) * nheads + h) * head_dim + p;  // [b, h, p]
    const size_t hp = static_cast<size_t>(h) * head_dim + p;                    // [h, p]
    const float xf = __bfloat162float(x[bhp]);
    if (slot < 0) {
      output[bhp] = __float2bfloat16_rn(0.0f);  // the reference text's zeros
      continue;
    }
    const float dt_f = softplus_ref(__bfloat162float(dt[bhp]) + __bfloat162float(dt_bias[hp]));
    const size_t row = ((static_cast<size_t>(slot) * nheads + h) * head_dim + p) * dstate;
    float y = 0.0f;
    for (int n = 0; n < dstate; ++n) {
      const float s = __bfloat162float(state[row + n]) * expf(A[hp * dstate + n] * dt_f) +
                      dt_f * xf * __bfloat162float(B_row[n]);
      new_state[row + n] = __float2bfloat16_rn(s);
      y += s * __bfloat162float(C_row[n]);
    }
    output[bhp] = __float2bfloat16_rn(y + xf * __bfloat162float(D[hp]));
  }
}
