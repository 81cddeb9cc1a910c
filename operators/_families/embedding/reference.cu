/* kharness
{
  "definition": "embedding_v128256_h4096",
  "launches": [
    { "kernel": "embedding_reference",
      "grid": ["num_tokens", 1, 1],
      "block": [256, 1, 1],
      "shared_bytes": "0",
      "args": ["input_ids", "weight", "output", "num_tokens", "hidden_size"] }
  ],
  "compile_options": ["-std=c++17"]
}
*/
// Trusted reference for every embedding_v*_h* definition (family "embedding").
//   output[t, :] = weight[input_ids[t], :]      (bit-exact copy of one bfloat16 row)
// The ids are int32 and in [0, vocab_size) by construction of the inputs. One block of 256
// threads per token copies the row element by element (2-byte values copied as raw bits, as unsigned short).

extern "C" __global__ void embedding_reference(const int* input_ids, const unsigned short* weight,
                                               unsigned short* output, int num_tokens,
                                               int hidden_size) {
  const int t = blockIdx.x;
  if (t >= num_tokens) return;
  const size_t id = static_cast<size_t>(input_ids[t]);
  const unsigned short* src = weight + id * hidden_size;
  unsigned short* dst = output + static_cast<size_t>(t) * hidden_size;
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) dst[i] = src[i];
}
