/* kharness
{
  "launches": [
    { "kernel": "softmax_reference",
      "grid": ["batch_size", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["logits", "temperature", "probs", "batch_size", "vocab_size"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Trusted reference for every softmax_v* definition (family "softmax"): the temperature-scaled
// softmax over the vocabulary that turns a decode step's logits into the probabilities that
// sampling (FlashInfer-Bench's *_sampling_from_probs definitions) consumes, as
// flashinfer.sampling.softmax(logits, temperature) computes it:
//   x[b, i] = logits[b, i] / temperature[b]                       (float32 division)
//   probs[b, i] = exp(x[b, i] - max_j x[b, j]) / sum_j exp(x[b, j] - max_j x[b, j])   (float32)
// Written to be obviously correct, not fast: one block of kThreads threads per row, every size an
// argument, three strided passes over the row (maximum, sum of exponentials, output) and fixed
// shared-memory tree reductions, so the result is deterministic.
constexpr int kThreads = 256;  // must equal the plan's block size (a power of two)

extern "C" __global__ void softmax_reference(const float* logits, const float* temperature,
                                             float* probs, int batch_size, int vocab_size) {
  __shared__ float red[kThreads];
  const int b = blockIdx.x;
  if (b >= batch_size) return;
  const float* row = logits + static_cast<size_t>(b) * vocab_size;
  float* out = probs + static_cast<size_t>(b) * vocab_size;
  const float t = temperature[b];

  // 1. Maximum of the scaled logits.
  float m = __int_as_float(0xff800000u);  // -inf
  for (int i = threadIdx.x; i < vocab_size; i += kThreads) m = fmaxf(m, row[i] / t);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + stride]);
    __syncthreads();
  }
  const float max_x = red[0];
  __syncthreads();

  // 2. Sum of exp(x - max).
  float s = 0.0f;
  for (int i = threadIdx.x; i < vocab_size; i += kThreads) s += expf(row[i] / t - max_x);
  red[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) red[threadIdx.x] += red[threadIdx.x + stride];
    __syncthreads();
  }
  const float sum = red[0];  // >= 1: the maximum term is exp(0)

  // 3. Normalised probabilities.
  for (int i = threadIdx.x; i < vocab_size; i += kThreads) out[i] = expf(row[i] / t - max_x) / sum;
}
