/* kharness
{
  "launches": [
    {
      "kernel": "top_k_sampling_from_probs_reference",
      "grid": [
        "batch_size",
        1,
        1
      ],
      "block": [
        1,
        1,
        1
      ],
      "shared_bytes": "0",
      "args": [
        "probs",
        "top_k",
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
#include "../_shared/sampling/reference.cuh"

extern "C" __global__ void top_k_sampling_from_probs_reference(const float* probs, const int* top_k, long long* samples, int batch_size, int vocab_size) {
  sample_row(probs, top_k, nullptr, samples, batch_size, vocab_size, true, false, 0x6b686172ull);
}
