/* kharness
{
  "launches": [
    {
      "kernel": "top_k_top_p_sampling_from_probs_baseline",
      "grid": [
        "batch_size",
        1,
        1
      ],
      "block": [
        1024,
        1,
        1
      ],
      "shared_bytes": "0",
      "args": [
        "probs",
        "top_k",
        "top_p",
        "samples",
        "batch_size",
        "vocab_size"
      ]
    }
  ],
  "compile_options": [
    "-std=c++17"
  ]
}
*/
// Baseline for the top_k_top_p_sampling_from_probs_v* definitions: the straightforward, reasonably
// efficient implementation speedups are measured against.
#include "../../_shared/sampling/baseline.cuh"

extern "C" __global__ void __launch_bounds__(kThreads)
    top_k_top_p_sampling_from_probs_baseline(const float* __restrict__ probs,
        const int* __restrict__ top_k,
        const float* __restrict__ top_p,
        long long* __restrict__ samples,
        int batch_size,
        int vocab_size) {
  sample<true, true>(probs, top_k, top_p, samples, batch_size, vocab_size, 0x62617365ull);
}
