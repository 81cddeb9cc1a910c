/* kharness
{
  "launches": [
    {
      "kernel": "top_p_sampling_from_probs_seed",
      "grid": [
        "batch_size",
        1,
        1
      ],
      "block": [
        512,
        1,
        1
      ],
      "shared_bytes": "0",
      "args": [
        "probs",
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
#include "../_shared/sampling/seed.cuh"

extern "C" __global__ void __launch_bounds__(kThreads)
    top_p_sampling_from_probs_seed(const float* __restrict__ probs,
        const float* __restrict__ top_p,
        long long* __restrict__ samples,
        int batch_size,
        int vocab_size) {
  sample_row(probs, nullptr, top_p, samples, batch_size, vocab_size, false, true, 0x73656564ull);
}
