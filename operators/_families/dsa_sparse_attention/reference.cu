/* kharness
{
  "launches": [
    { "kernel": "dsa_sparse_attention_reference",
      "grid": ["num_qo_heads", "num_tokens", 1],
      "block": [128, 1, 1],
      "shared_bytes": "topk * 4",
      "args": ["q_nope", "q_pe", "ckv_cache", "kpe_cache", "sparse_indices", "sm_scale", "output",
               "lse", "num_tokens", "num_qo_heads", "head_dim_ckv", "head_dim_kpe", "topk"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Trusted reference for every dsa_sparse_attention_* definition (family "dsa_sparse_attention"),
// FlashInfer-Bench op_type "dsa_paged" (DeepSeek-V3.2 sparse MLA attention) semantics:
//   The caches are flattened to token rows: row r = page * page_size + slot of
//   ckv_cache [num_pages, page_size, head_dim_ckv] and kpe_cache [num_pages, page_size,
//   head_dim_kpe]. Query token t attends to the rows sparse_indices[t, 0 .. topk) that are not -1
//   (-1 is padding, anywhere in the row); the compressed KV row serves as both key and value.
//   logit[i] = sm_scale * (q_nope[t,h,:] . ckv[r_i,:] + q_pe[t,h,:] . kpe[r_i,:])   (float32)
//   output[t,h,:] = bf16( sum_i softmax(logit)[i] * ckv[r_i,:] )                    (one rounding)
//   lse[t,h] = log2( sum_i exp(logit[i]) ) = logsumexp(logit) / ln 2                (base 2)
//   A token whose indices are all -1 gets output 0 and lse = -inf, as in FlashInfer-Bench.
// Written to be obviously correct, not fast: one block of kThreads threads per (head, token),
// every size an argument; each logit is a serial float32 dot product by one thread, kept in
// dynamic shared memory (topk floats); fixed shared-memory tree reductions for the maximum and
// the sum, so the result is deterministic; then each thread owns output dimensions and sums over
// the valid indices in index order.
#include <cuda_bf16.h>

// -inf (NVRTC has no <cmath> INFINITY).
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

constexpr int kThreads = 128;  // must equal the plan's block size (a power of two)

extern "C" __global__ void dsa_sparse_attention_reference(
    const __nv_bfloat16* q_nope, const __nv_bfloat16* q_pe, const __nv_bfloat16* ckv_cache,
    const __nv_bfloat16* kpe_cache, const int* sparse_indices, float sm_scale,
    __nv_bfloat16* output, float* lse, int num_tokens, int num_qo_heads, int head_dim_ckv,
    int head_dim_kpe, int topk) {
  extern __shared__ float logits[];  // [topk]; -inf for padding
  __shared__ float red[kThreads];

  const int h = blockIdx.x;
  const int t = blockIdx.y;
  if (h >= num_qo_heads || t >= num_tokens) return;
  const size_t qo = static_cast<size_t>(t) * num_qo_heads + h;
  const __nv_bfloat16* qn = q_nope + qo * head_dim_ckv;
  const __nv_bfloat16* qp = q_pe + qo * head_dim_kpe;
  const int* indices = sparse_indices + static_cast<size_t>(t) * topk;
  __nv_bfloat16* out = output + qo * head_dim_ckv;

  // 1. Logits, one thread per index; count the valid ones.
  int valid = 0;
  for (int i = threadIdx.x; i < topk; i += kThreads) {
    const int r = indices[i];
    if (r == -1) {
      logits[i] = neg_inf();
      continue;
    }
    ++valid;
    const __nv_bfloat16* kc = ckv_cache + static_cast<size_t>(r) * head_dim_ckv;
    const __nv_bfloat16* kp = kpe_cache + static_cast<size_t>(r) * head_dim_kpe;
    float dot = 0.0f;
    for (int d = 0; d < head_dim_ckv; ++d) dot += __bfloat162float(qn[d]) * __bfloat162float(kc[d]);
    float dot_pe = 0.0f;
    for (int d = 0; d < head_dim_kpe; ++d)
      dot_pe += __bfloat162float(qp[d]) * __bfloat162float(kp[d]);
    logits[i] = (dot + dot_pe) * sm_scale;
  }
  red[threadIdx.x] = static_cast<float>(valid);
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) red[threadIdx.x] += red[threadIdx.x + stride];
    __syncthreads();
  }
  const bool any_valid = red[0] > 0.0f;
  __syncthreads();
  if (!any_valid) {
    for (int d = threadIdx.x; d < head_dim_ckv; d += kThreads) out[d] = __float2bfloat16_rn(0.0f);
    if (threadIdx.x == 0) lse[qo] = neg_inf();
    return;
  }

  // 2. Maximum logit.
  float m = neg_inf();
  for (int i = threadIdx.x; i < topk; i += kThreads) m = fmaxf(m, logits[i]);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + stride]);
    __syncthreads();
  }
  const float max_logit = red[0];
  __syncthreads();

  // 3. Unnormalised probabilities exp(logit - max) in place (padding: exp(-inf) = 0), and their
  // sum.
  float s = 0.0f;
  for (int i = threadIdx.x; i < topk; i += kThreads) {
    const float p = expf(logits[i] - max_logit);
    logits[i] = p;
    s += p;
  }
  red[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) red[threadIdx.x] += red[threadIdx.x + stride];
    __syncthreads();
  }
  const float sum = red[0];  // >= 1: the maximum term is exp(0)

  // 4. output[d] = sum_i p_i * ckv[r_i, d] / sum, in index order.
  for (int d = threadIdx.x; d < head_dim_ckv; d += kThreads) {
    float acc = 0.0f;
    for (int i = 0; i < topk; ++i) {
      const int r = indices[i];
      if (r == -1) continue;
      acc += logits[i] * __bfloat162float(ckv_cache[static_cast<size_t>(r) * head_dim_ckv + d]);
    }
    out[d] = __float2bfloat16_rn(acc / sum);
  }

  // 5. Base-2 log-sum-exp of the scaled logits: (max + ln(sum)) / ln(2).
  if (threadIdx.x == 0) lse[qo] = (max_logit + logf(sum)) * 1.4426950408889634f;
}
