// kharness harness kernels: random inputs, byte patterns, checksums and the sealed comparison.
// Harness code, embedded in the binary at build time (CMakeLists.txt, kharness_embed_text) and
// compiled by NVRTC at run time (harness_kernels.cpp); not subject to the solution rules. The
// codes (KH_*) are shared with kernel_dtype() and the distribution codes of harness_kernels.cpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#define KH_F32 0
#define KH_F16 1
#define KH_BF16 2
#define KH_E4M3 3
#define KH_E5M2 4
#define KH_I64 5
#define KH_I32 6
#define KH_I16 7
#define KH_I8 8
#define KH_U8 9
#define KH_BOOL 10

#define KH_NORMAL 0
#define KH_UNIFORM 1
#define KH_RANGE 2

#define KH_THREADS 256

__device__ __forceinline__ u64 global_thread() {
  return (u64)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ u64 grid_threads() { return (u64)gridDim.x * blockDim.x; }

// ---- random numbers --------------------------------------------------------------------------

// Philox4x32-10 (Salmon et al., SC'11; Random123's philox4x32_R(10, ctr, key)) with
// counter = (draw, stream) and key = seed.
__device__ __forceinline__ uint4 philox(u64 draw, u64 stream, u64 seed) {
  uint4 c = make_uint4((u32)draw, (u32)(draw >> 32), (u32)stream, (u32)(stream >> 32));
  u32 k0 = (u32)seed;
  u32 k1 = (u32)(seed >> 32);
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const u32 hi0 = __umulhi(0xD2511F53u, c.x);
    const u32 lo0 = 0xD2511F53u * c.x;
    const u32 hi1 = __umulhi(0xCD9E8D57u, c.z);
    const u32 lo1 = 0xCD9E8D57u * c.z;
    c = make_uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// The top 24 bits as a float in [0, 1) (exact: 24 bits fit a float's significand).
__device__ __forceinline__ float unit(u32 x) {
  return __uint2float_rn(x >> 8) * 5.9604644775390625e-08f;
}

// Two normals from two uniforms (Box-Muller). u1 in (0, 1] keeps logf finite.
__device__ __forceinline__ void box_muller(u32 x, u32 y, float mean, float stddev, float* z0,
                                           float* z1) {
  const float u1 = __uint2float_rn((x >> 8) + 1u) * 5.9604644775390625e-08f;
  const float r = sqrtf(-2.0f * logf(u1));
  float s, c;
  sincospif(2.0f * unit(y), &s, &c);
  *z0 = fmaf(stddev, r * c, mean);
  *z1 = fmaf(stddev, r * s, mean);
}

// lo + (the 64-bit draw scaled into [0, span)); span == 0 stands for 2^64.
__device__ __forceinline__ i64 in_range(u32 a, u32 b, i64 lo, u64 span) {
  const u64 r = ((u64)b << 32) | a;
  return (i64)((u64)lo + (span != 0 ? __umul64hi(r, span) : r));
}

__device__ __forceinline__ i64 clamp64(i64 v, i64 lo, i64 hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

template <typename T>
struct alignas(4 * sizeof(T)) Pack4 {
  T v[4];
};

// Elements first..first+3 (those below count); one vector store when `vec` (the base is
// aligned to 4 elements) and the group is whole.
template <typename T>
__device__ __forceinline__ void store4(u8* base, u64 first, u64 count, bool vec, T a, T b, T c,
                                       T d) {
  T* out = reinterpret_cast<T*>(base) + first;
  if (vec && first + 4 <= count) {
    Pack4<T> pack;
    pack.v[0] = a;
    pack.v[1] = b;
    pack.v[2] = c;
    pack.v[3] = d;
    *reinterpret_cast<Pack4<T>*>(out) = pack;
    return;
  }
  const u64 n = count - first;
  out[0] = a;
  if (n > 1) out[1] = b;
  if (n > 2) out[2] = c;
  if (n > 3) out[3] = d;
}

template <__nv_fp8_interpretation_t kKind>
__device__ __forceinline__ void store_fp8(u8* p, u64 first, u64 count, bool vec, const float* f) {
  const u16 x01 = __nv_cvt_float2_to_fp8x2(make_float2(f[0], f[1]), __NV_SATFINITE, kKind);
  const u16 x23 = __nv_cvt_float2_to_fp8x2(make_float2(f[2], f[3]), __NV_SATFINITE, kKind);
  store4<u8>(p, first, count, vec, (u8)x01, (u8)(x01 >> 8), (u8)x23, (u8)(x23 >> 8));
}

// Element i comes from Philox draw i / 4 ("range": draws 2 * (i / 4) and the next), so the
// values do not depend on the launch geometry.
//   normal:  a = mean, b = std      uniform: a = low, b = high - low
//   range:   [lo, lo + span - 1]    (span == 0: all 2^64 values)
extern "C" __global__ void __launch_bounds__(KH_THREADS)
    kh_fill_random(u8* p, u64 count, int dtype, int dist, int vec, u64 seed, u64 stream, float a,
                   float b, i64 lo, u64 span) {
  const u64 groups = (count + 3) / 4;
  const bool int_dtype = dtype >= KH_I64;
  for (u64 g = global_thread(); g < groups; g += grid_threads()) {
    float f[4];
    i64 q[4];
    if (dist == KH_RANGE) {
      const uint4 r0 = philox(2 * g, stream, seed);
      const uint4 r1 = philox(2 * g + 1, stream, seed);
      q[0] = in_range(r0.x, r0.y, lo, span);
      q[1] = in_range(r0.z, r0.w, lo, span);
      q[2] = in_range(r1.x, r1.y, lo, span);
      q[3] = in_range(r1.z, r1.w, lo, span);
      if (!int_dtype) {
#pragma unroll
        for (int k = 0; k < 4; ++k) f[k] = __ll2float_rn(q[k]);
      }
    } else {
      const uint4 r = philox(g, stream, seed);
      if (dist == KH_UNIFORM) {
        f[0] = fmaf(b, unit(r.x), a);
        f[1] = fmaf(b, unit(r.y), a);
        f[2] = fmaf(b, unit(r.z), a);
        f[3] = fmaf(b, unit(r.w), a);
      } else {
        box_muller(r.x, r.y, a, b, &f[0], &f[1]);
        box_muller(r.z, r.w, a, b, &f[2], &f[3]);
      }
      if (int_dtype) {
#pragma unroll
        for (int k = 0; k < 4; ++k) q[k] = __float2ll_rn(f[k]);  // saturates; NaN -> 0
      }
    }
    const u64 first = 4 * g;
    switch (dtype) {
      case KH_F32:
        store4<u32>(p, first, count, vec, __float_as_uint(f[0]), __float_as_uint(f[1]),
                    __float_as_uint(f[2]), __float_as_uint(f[3]));
        break;
      case KH_F16:
        store4<u16>(p, first, count, vec, __half_as_ushort(__float2half_rn(f[0])),
                    __half_as_ushort(__float2half_rn(f[1])),
                    __half_as_ushort(__float2half_rn(f[2])),
                    __half_as_ushort(__float2half_rn(f[3])));
        break;
      case KH_BF16:
        store4<u16>(p, first, count, vec, __bfloat16_as_ushort(__float2bfloat16_rn(f[0])),
                    __bfloat16_as_ushort(__float2bfloat16_rn(f[1])),
                    __bfloat16_as_ushort(__float2bfloat16_rn(f[2])),
                    __bfloat16_as_ushort(__float2bfloat16_rn(f[3])));
        break;
      case KH_E4M3:
        store_fp8<__NV_E4M3>(p, first, count, vec, f);
        break;
      case KH_E5M2:
        store_fp8<__NV_E5M2>(p, first, count, vec, f);
        break;
      case KH_I64:
        store4<u64>(p, first, count, vec, (u64)q[0], (u64)q[1], (u64)q[2], (u64)q[3]);
        break;
      case KH_I32:
        store4<u32>(p, first, count, vec, (u32)clamp64(q[0], -2147483648LL, 2147483647LL),
                    (u32)clamp64(q[1], -2147483648LL, 2147483647LL),
                    (u32)clamp64(q[2], -2147483648LL, 2147483647LL),
                    (u32)clamp64(q[3], -2147483648LL, 2147483647LL));
        break;
      case KH_I16:
        store4<u16>(p, first, count, vec, (u16)clamp64(q[0], -32768, 32767),
                    (u16)clamp64(q[1], -32768, 32767), (u16)clamp64(q[2], -32768, 32767),
                    (u16)clamp64(q[3], -32768, 32767));
        break;
      case KH_I8:
        store4<u8>(p, first, count, vec, (u8)clamp64(q[0], -128, 127), (u8)clamp64(q[1], -128, 127),
                   (u8)clamp64(q[2], -128, 127), (u8)clamp64(q[3], -128, 127));
        break;
      case KH_U8:
        store4<u8>(p, first, count, vec, (u8)clamp64(q[0], 0, 255), (u8)clamp64(q[1], 0, 255),
                   (u8)clamp64(q[2], 0, 255), (u8)clamp64(q[3], 0, 255));
        break;
      case KH_BOOL:
        store4<u8>(p, first, count, vec, (u8)(q[0] != 0), (u8)(q[1] != 0), (u8)(q[2] != 0),
                   (u8)(q[3] != 0));
        break;
    }
  }
}

// ---- probability rows ------------------------------------------------------------------------
// The "probability_rows" generator (verify/probability_rows_core.hpp, given to NVRTC as a header:
// the host compiles the same text), every operation rounded as on the host.
#define KH_HD __device__ __forceinline__
#define KH_FMA __fma_rn
#define KH_DIV __ddiv_rn
#define KH_TO_FLOAT __double2float_rn
#include "kharness_probability_rows_core.hpp"

static_assert(KH_THREADS == probability_rows_core::kLanes, "a thread per lane of a row's sum");

// `rows` rows of `vocab` values at `out`: a block per row (grid-stride over the rows), thread t
// lane t of the row's sum, then the row's values, coalesced.
extern "C" __global__ void __launch_bounds__(KH_THREADS)
    kh_probability_rows(float* out, u64 rows, u64 vocab, const double* __restrict__ table,
                        u64 seed) {
  namespace pr = probability_rows_core;
  __shared__ double lanes[KH_THREADS];
  const int t = threadIdx.x;
  for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const u64 key = pr::row_key(seed, r);
    lanes[t] = pr::lane_sum(table, key, vocab, t);
    __syncthreads();
    for (int h = KH_THREADS / 2; h > 0; h /= 2) {
      pr::tree_step(lanes, h, t);
      __syncthreads();
    }
    const double sum = lanes[0];
    float* row = out + r * vocab;
    for (u64 j = t; j < vocab; j += KH_THREADS) row[j] = pr::value(pr::weight(table, key, j), sum);
    __syncthreads();  // every thread has read lanes[0] before the next row writes lanes
  }
}

// ---- byte patterns ---------------------------------------------------------------------------
// A pattern is 16 bytes (the element pattern repeated) in two words, byte k of the pattern at
// region offset o with k = o % 16. A region is split into head bytes (up to the first 16-byte
// boundary), a 16-byte-aligned body and tail bytes, so any alignment works.

__device__ __forceinline__ u32 pattern_byte(u64 lo, u64 hi, u64 offset) {
  const u32 k = (u32)(offset & 15);
  return (u32)((k < 8 ? lo >> (8 * k) : hi >> (8 * (k - 8))) & 0xFF);
}

// The 16 pattern bytes from region offset `start` on.
__device__ __forceinline__ uint4 pattern_vector(u64 lo, u64 hi, u64 start) {
  u32 w[4] = {0, 0, 0, 0};
#pragma unroll
  for (int j = 0; j < 16; ++j) w[j / 4] |= pattern_byte(lo, hi, start + j) << (8 * (j % 4));
  return make_uint4(w[0], w[1], w[2], w[3]);
}

struct Split {
  u64 head;        // bytes before the first 16-byte boundary
  u64 vectors;     // 16-byte words after them
  u64 tail_start;  // offset of the bytes after the last whole word
};

__device__ __forceinline__ Split split16(const u8* p, u64 bytes) {
  u64 head = (16 - ((u64)p & 15)) & 15;
  if (head > bytes) head = bytes;
  const u64 vectors = (bytes - head) / 16;
  Split s = {head, vectors, head + 16 * vectors};
  return s;
}

extern "C" __global__ void __launch_bounds__(KH_THREADS)
    kh_fill_pattern(u8* p, u64 bytes, u64 lo, u64 hi) {
  const Split s = split16(p, bytes);
  const u64 t = global_thread();
  if (t < s.head) p[t] = (u8)pattern_byte(lo, hi, t);
  if (t < bytes - s.tail_start) p[s.tail_start + t] = (u8)pattern_byte(lo, hi, s.tail_start + t);
  const uint4 v = pattern_vector(lo, hi, s.head);
  uint4* body = reinterpret_cast<uint4*>(p + s.head);
  for (u64 i = t; i < s.vectors; i += grid_threads()) body[i] = v;
}

__device__ __forceinline__ u64 warp_sum(u64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, o);
  return v;
}

__device__ __forceinline__ u64 warp_min(u64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const u64 other = __shfl_down_sync(0xFFFFFFFFu, v, o);
    v = other < v ? other : v;
  }
  return v;
}

// out[0] += bytes that differ from the pattern; out[1] = min(out[1], offset of the first).
extern "C" __global__ void __launch_bounds__(KH_THREADS)
    kh_check_pattern(const u8* p, u64 bytes, u64 lo, u64 hi, u64* out) {
  const Split s = split16(p, bytes);
  const u64 t = global_thread();
  u64 mismatches = 0;
  u64 first = ~0ull;
  if (t < s.head && p[t] != pattern_byte(lo, hi, t)) {
    mismatches += 1;
    first = t;
  }
  if (t < bytes - s.tail_start) {
    const u64 o = s.tail_start + t;
    if (p[o] != pattern_byte(lo, hi, o)) {
      mismatches += 1;
      first = first < o ? first : o;
    }
  }
  const uint4 v = pattern_vector(lo, hi, s.head);
  const uint4* body = reinterpret_cast<const uint4*>(p + s.head);
  for (u64 i = t; i < s.vectors; i += grid_threads()) {
    const uint4 x = body[i];
    const u32 got[4] = {x.x, x.y, x.z, x.w};
    const u32 want[4] = {v.x, v.y, v.z, v.w};
    if (((x.x ^ v.x) | (x.y ^ v.y) | (x.z ^ v.z) | (x.w ^ v.w)) == 0) continue;
#pragma unroll
    for (int j = 3; j >= 0; --j) {  // downwards: the lowest differing byte is set last
      const u32 diff = got[j] ^ want[j];
      if (diff != 0) {
        mismatches += __popc(__vcmpne4(got[j], want[j])) / 8;
        const u64 o = s.head + 16 * i + 4 * j + ((__ffs(diff) - 1) >> 3);  // little-endian
        first = first < o ? first : o;
      }
    }
  }
  mismatches = warp_sum(mismatches);
  first = warp_min(first);
  if ((threadIdx.x & 31) == 0) {
    if (mismatches != 0) atomicAdd(&out[0], mismatches);
    if (first != ~0ull) atomicMin(&out[1], first);
  }
}

// ---- checksum --------------------------------------------------------------------------------

// MurmurHash3's 64-bit finaliser: a bijection of 64-bit words.
__device__ __forceinline__ u64 fmix64(u64 k) {
  k ^= k >> 33;
  k *= 0xFF51AFD7ED558CCDull;
  k ^= k >> 33;
  k *= 0xC4CEB9FE1A85EC53ull;
  k ^= k >> 33;
  return k;
}

// For a fixed index, a bijection of the word: two regions that differ in one word always
// differ in that word's term, hence in the sum.
__device__ __forceinline__ u64 term(u64 index, u64 word) {
  return fmix64(word ^ fmix64(index * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull));
}

// *out += sum over the region's 8-byte words (the last one zero-padded) of term(i ^ key, word):
// key 0 for the memory rules' checksums; a secret key makes the per-index bijections unknown to
// a kernel without it, which then cannot change the region and keep the sum (sealed copies).
extern "C" __global__ void __launch_bounds__(KH_THREADS)
    kh_checksum(const u8* p, u64 bytes, u64 key, u64* out) {
  const u64 words = bytes / 8;
  const u64 t = global_thread();
  const u64 step = grid_threads();
  u64 sum = 0;
  if (((u64)p & 15) == 0) {
    const uint4* v = reinterpret_cast<const uint4*>(p);
    const u64 pairs = words / 2;
    for (u64 i = t; i < pairs; i += step) {
      const uint4 x = v[i];
      sum += term((2 * i) ^ key, ((u64)x.y << 32) | x.x) +
             term((2 * i + 1) ^ key, ((u64)x.w << 32) | x.z);
    }
    if (t == 0 && (words & 1)) {
      sum += term((words - 1) ^ key, reinterpret_cast<const u64*>(p)[words - 1]);
    }
  } else if (((u64)p & 7) == 0) {
    const u64* w = reinterpret_cast<const u64*>(p);
    for (u64 i = t; i < words; i += step) sum += term(i ^ key, w[i]);
  } else {  // unaligned: assemble words from bytes
    for (u64 i = t; i < words; i += step) {
      u64 w = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) w |= (u64)p[8 * i + j] << (8 * j);
      sum += term(i ^ key, w);
    }
  }
  if (t == 0 && (bytes & 7) != 0) {
    u64 w = 0;
    for (u64 j = 8 * words; j < bytes; ++j) w |= (u64)p[j] << (8 * (j - 8 * words));
    sum += term(words ^ key, w);
  }
  sum = warp_sum(sum);
  if ((threadIdx.x & 31) == 0 && sum != 0) atomicAdd(out, sum);
}

// ---- sealed references and checked iterations (docs/correctness.md#checked-iterations) -------
// The reference's outputs stay on the device during timing, but only sealed: XORed with a
// ChaCha20 keystream under a key the host draws per process and passes only as a kernel parameter,
// so a candidate that finds the buffer cannot read the answers in it. Each check writes a record
// authenticated by a tag under the same key: a candidate cannot forge or erase a failed check.
//
// ChaCha20 is RFC 8439's block function (20 rounds), not a counter-based RNG: Philox is built to
// look random, not to hide its key from someone holding known plaintext (a candidate knows the
// poison and can guess outputs), while ChaCha20 is a vetted stream cipher. Its 256-bit key is
// expanded from the 64-bit process key (kh_seal_key; the key's entropy stays 64 bits), the nonce is
// the stream id and the high half of the block index, the counter the low half: one keystream per
// seal, never reused. The host mirror (seal_keystream() in harness_kernels.hpp) is held to RFC
// 8439's test vector and to these kernels by the tests.

__device__ __forceinline__ void kh_quarter_round(u32& a, u32& b, u32& c, u32& d) {
  a += b;
  d ^= a;
  d = __funnelshift_l(d, d, 16);
  c += d;
  b ^= c;
  b = __funnelshift_l(b, b, 12);
  a += b;
  d ^= a;
  d = __funnelshift_l(d, d, 8);
  c += d;
  b ^= c;
  b = __funnelshift_l(b, b, 7);
}

// RFC 8439 section 2.3: the state (constants, key, counter, nonce) after 10 double rounds, plus
// the state.
__device__ __forceinline__ void kh_chacha20_block(const u32* key, u32 counter, u32 n0, u32 n1,
                                                  u32 n2, u32* x) {
  const u32 s[16] = {0x61707865u, 0x3320646eu, 0x79622d32u, 0x6b206574u, key[0], key[1],
                     key[2],      key[3],      key[4],      key[5],      key[6], key[7],
                     counter,     n0,          n1,          n2};
#pragma unroll
  for (int i = 0; i < 16; ++i) x[i] = s[i];
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    kh_quarter_round(x[0], x[4], x[8], x[12]);
    kh_quarter_round(x[1], x[5], x[9], x[13]);
    kh_quarter_round(x[2], x[6], x[10], x[14]);
    kh_quarter_round(x[3], x[7], x[11], x[15]);
    kh_quarter_round(x[0], x[5], x[10], x[15]);
    kh_quarter_round(x[1], x[6], x[11], x[12]);
    kh_quarter_round(x[2], x[7], x[8], x[13]);
    kh_quarter_round(x[3], x[4], x[9], x[14]);
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) x[i] += s[i];
}

// The seal's 256-bit ChaCha20 key from the 64-bit process key: four SplitMix64 outputs seeded
// with it, low word first. A fixed, public expansion, cheap enough to run wherever a kernel
// receives the key (a ChaCha20 block would double the cost of every unsealed chunk): the
// key's secrecy rests on its 64 random bits, which any public expansion keeps and none adds to.
__device__ __forceinline__ void kh_seal_key(u64 key, u32* k) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    u64 z = key + (u64)(i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    k[2 * i] = (u32)z;
    k[2 * i + 1] = (u32)(z >> 32);
  }
}

// The keystream of 64-byte block `b` of stream `s` under the expanded key `k`: four 16-byte chunks.
__device__ __forceinline__ void kh_keystream_block(u64 b, u64 s, const u32* k, uint4* out) {
  u32 x[16];
  kh_chacha20_block(k, (u32)b, (u32)s, (u32)(s >> 32), (u32)(b >> 32), x);
  out[0] = make_uint4(x[0], x[1], x[2], x[3]);
  out[1] = make_uint4(x[4], x[5], x[6], x[7]);
  out[2] = make_uint4(x[8], x[9], x[10], x[11]);
  out[3] = make_uint4(x[12], x[13], x[14], x[15]);
}

// The keystream of 16-byte chunk `c` of stream `s` (one stream per input set and tensor): quarter
// c % 4 of block c / 4. A caller that walks whole blocks should use kh_keystream_block instead
// (this computes the whole block for a quarter of it).
__device__ __forceinline__ uint4 kh_keystream(u64 c, u64 s, u64 key) {
  u32 k[8];
  kh_seal_key(key, k);
  uint4 b[4];
  kh_keystream_block(c >> 2, s, k, b);
  const u32 q = (u32)c & 3u;  // selects, not an indexed load: b stays in registers
  return q == 0 ? b[0] : (q == 1 ? b[1] : (q == 2 ? b[2] : b[3]));
}

// Thread t seals block t of the grid's stride: the four chunks of a ChaCha20 block together.
extern "C" __global__ void __launch_bounds__(KH_THREADS)
    kh_seal(const uint4* src, uint4* dst, u64 chunks, u64 stream, u64 key) {
  u32 k[8];
  kh_seal_key(key, k);
  const u64 blocks = (chunks + 3) / 4;
  for (u64 b = global_thread(); b < blocks; b += grid_threads()) {
    uint4 ks[4];
    kh_keystream_block(b, stream, k, ks);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const u64 c = 4 * b + q;
      if (c >= chunks) break;
      const uint4 v = src[c];
      dst[c] = make_uint4(v.x ^ ks[q].x, v.y ^ ks[q].y, v.z ^ ks[q].z, v.w ^ ks[q].w);
    }
  }
}

// The value of an element's bits, as the host's to_double (kharness/numeric.hpp) computes it.
__device__ __forceinline__ double kh_value(int dtype, u64 b) {
  switch (dtype) {
    case KH_F32:
      return (double)__uint_as_float((u32)b);
    case KH_F16:
      return (double)__half2float(__ushort_as_half((u16)b));
    case KH_BF16:
      return (double)__bfloat162float(__ushort_as_bfloat16((u16)b));
    case KH_E4M3: {
      __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3);
      return (double)__half2float(__half(h));
    }
    case KH_E5M2: {
      __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E5M2);
      return (double)__half2float(__half(h));
    }
    case KH_I64:
      return (double)(i64)b;
    case KH_I32:
      return (double)(int)(u32)b;
    case KH_I16:
      return (double)(short)(u16)b;
    case KH_I8:
      return (double)(signed char)(u8)b;
    case KH_U8:
      return (double)(u8)b;
    default:
      return (u8)b != 0 ? 1.0 : 0.0;  // KH_BOOL
  }
}

__device__ __forceinline__ bool kh_is_float(int dtype) { return dtype <= KH_E5M2; }

// One block's share of a check; every block of the grid writes its slot, so nothing a candidate
// left in the slots survives into the result.
struct KhPartial {
  u64 unwritten, first_unwritten, nonfinite, first_nonfinite, mismatches, first_mismatch;
  double max_abs, max_rel;
};

// The 128-byte record of one check of one output tensor (KhRecord on the host side).
#define KH_RECORD_WORDS 16
#define KH_RECORD_TAG 15

__device__ __forceinline__ void kh_element(int dtype, double e, double g, bool g_poison, u64 i,
                                           double atol, double rtol, KhPartial& p) {
  if (g_poison) {
    ++p.unwritten;
    if (i < p.first_unwritten) p.first_unwritten = i;
    return;
  }
  const bool floats = kh_is_float(dtype);
  if (floats && !isfinite(e)) {
    const bool same = (isnan(e) && isnan(g)) || (isinf(e) && g == e);
    if (!same) {
      ++p.mismatches;
      if (i < p.first_mismatch) p.first_mismatch = i;
    }
    return;
  }
  if (floats && !isfinite(g)) {
    ++p.nonfinite;
    if (i < p.first_nonfinite) p.first_nonfinite = i;
    return;
  }
  const double abs_err = fabs(g - e);
  if (abs_err == 0) return;
  const double rel_err = e == 0 ? __longlong_as_double(0x7FF0000000000000LL) : abs_err / fabs(e);
  p.max_abs = fmax(p.max_abs, abs_err);
  if (isfinite(rel_err)) p.max_rel = fmax(p.max_rel, rel_err);
  if (abs_err > atol && rel_err > rtol) {
    ++p.mismatches;
    if (i < p.first_mismatch) p.first_mismatch = i;
  }
}

__device__ __forceinline__ u64 kh_bits_at(uint4 v, int size, int j) {
  const u64 lo = ((u64)v.y << 32) | v.x;
  const u64 hi = ((u64)v.w << 32) | v.z;
  const int byte = j * size;
  const u64 word = byte < 8 ? lo : hi;
  if (size == 8) return word;
  return (word >> (8 * (byte & 7))) & ((1ull << (8 * size)) - 1);
}

// Elementwise check of `count` elements of `got` against the sealed reference, by the rules of
// the host's compare_output (verify/compare.cpp): the poison of this iteration left = unwritten;
// NaN/Inf where the reference is finite; abs > atol and rel > rtol = mismatch. Both buffers are
// 16-byte aligned and readable up to the next 16-byte boundary (guard zone, padding).
extern "C" __global__ void __launch_bounds__(KH_THREADS)
    kh_check_sealed(const uint4* got, const uint4* sealed, u64 count, int dtype, int size,
                    u64 stream, u64 key, u64 poison, double atol, double rtol,
                    KhPartial* partials) {
  KhPartial p = {0, ~0ull, 0, ~0ull, 0, ~0ull, 0.0, 0.0};
  const u64 per = 16 / size;
  const u64 chunks = (count + per - 1) / per;
  for (u64 c = global_thread(); c < chunks; c += grid_threads()) {
    const uint4 k = kh_keystream(c, stream, key);
    const uint4 s = sealed[c];
    const uint4 ev = make_uint4(s.x ^ k.x, s.y ^ k.y, s.z ^ k.z, s.w ^ k.w);
    const uint4 gv = got[c];
    const bool same = ev.x == gv.x && ev.y == gv.y && ev.z == gv.z && ev.w == gv.w;
    for (int j = 0; j < (int)per; ++j) {
      const u64 i = c * per + j;
      if (i >= count) break;
      const u64 gb = kh_bits_at(gv, size, j);
      if (same && gb != poison) continue;  // identical and written
      const u64 eb = kh_bits_at(ev, size, j);
      if (eb == gb && gb != poison) continue;
      kh_element(dtype, kh_value(dtype, eb), kh_value(dtype, gb), gb == poison, i, atol, rtol, p);
    }
  }
  __shared__ KhPartial s[KH_THREADS];
  s[threadIdx.x] = p;
  __syncthreads();
  for (int o = KH_THREADS / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) {
      KhPartial& a = s[threadIdx.x];
      const KhPartial& b = s[threadIdx.x + o];
      a.unwritten += b.unwritten;
      a.first_unwritten = min(a.first_unwritten, b.first_unwritten);
      a.nonfinite += b.nonfinite;
      a.first_nonfinite = min(a.first_nonfinite, b.first_nonfinite);
      a.mismatches += b.mismatches;
      a.first_mismatch = min(a.first_mismatch, b.first_mismatch);
      a.max_abs = fmax(a.max_abs, b.max_abs);
      a.max_rel = fmax(a.max_rel, b.max_rel);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = s[0];
}

// The record's tag: a Philox-based MAC of its other words under the key (domain-separated from
// the compare records' tags by the counter's high word).
__device__ __forceinline__ u64 kh_tag(const u64* w, u64 key) {
  u64 h = 0x6A09E667F3BCC908ull;
  for (int k = 0; k < KH_RECORD_TAG; ++k) {
    const uint4 r = philox(w[k] ^ h, 0x4B48544147000000ull | (u64)k, key);
    h = ((u64)r.y << 32) | r.x;
  }
  return h;
}

// One thread: folds the check's partials into a record with the evidence of the first failing
// element (in the order output_not_written, nan_or_inf, tolerance) and seals it with a tag.
extern "C" __global__ void kh_seal_record(const KhPartial* partials, int parts, const uint4* got,
                                          const uint4* sealed, u64 count, int size, u64 stream,
                                          u64 key, u64 iteration, u64 tensor, u64* record) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  KhPartial a = {0, ~0ull, 0, ~0ull, 0, ~0ull, 0.0, 0.0};
  for (int b = 0; b < parts; ++b) {
    const KhPartial p = partials[b];
    a.unwritten += p.unwritten;
    a.first_unwritten = min(a.first_unwritten, p.first_unwritten);
    a.nonfinite += p.nonfinite;
    a.first_nonfinite = min(a.first_nonfinite, p.first_nonfinite);
    a.mismatches += p.mismatches;
    a.first_mismatch = min(a.first_mismatch, p.first_mismatch);
    a.max_abs = fmax(a.max_abs, p.max_abs);
    a.max_rel = fmax(a.max_rel, p.max_rel);
  }
  const u64 first =
      a.unwritten ? a.first_unwritten : (a.nonfinite ? a.first_nonfinite : a.first_mismatch);
  u64 eb = 0, gb = 0;
  if (first < count) {
    const u64 per = 16 / size;
    const u64 c = first / per;
    const int j = (int)(first % per);
    const uint4 k = kh_keystream(c, stream, key);
    const uint4 s = sealed[c];
    eb = kh_bits_at(make_uint4(s.x ^ k.x, s.y ^ k.y, s.z ^ k.z, s.w ^ k.w), size, j);
    gb = kh_bits_at(got[c], size, j);
  }
  u64 w[KH_RECORD_WORDS];
  w[0] = iteration;
  w[1] = tensor;
  w[2] = count;
  w[3] = a.unwritten;
  w[4] = a.first_unwritten;
  w[5] = a.nonfinite;
  w[6] = a.first_nonfinite;
  w[7] = a.mismatches;
  w[8] = a.first_mismatch;
  w[9] = (u64)__double_as_longlong(a.max_abs);
  w[10] = (u64)__double_as_longlong(a.max_rel);
  w[11] = first;
  w[12] = eb;
  w[13] = gb;
  w[14] = stream;
  w[KH_RECORD_TAG] = kh_tag(w, key);
  for (int k = 0; k < KH_RECORD_WORDS; ++k) record[k] = w[k];
}

// ---- the correctness trials' comparison (docs/correctness.md#comparison), on the device ---------
// compare_output's totals (verify/compare.hpp, ElementwiseTotals) of a candidate's output against a
// sealed expected copy (the reference's outputs, or the first run's outputs for the determinism
// rerun), bit for bit: the same per-element rules in the same order, the same double arithmetic
// (one subtraction and one division, rounded to nearest: __dsub_rn, __ddiv_rn; nothing for the
// compiler to contract into an FMA), the lowest index of each kind (min over the partials), the
// largest errors (fmax of non-negative, non-NaN doubles: exact) and the bits at the first indices
// read after the reduction. Only a record of a few words leaves the device.

struct KhTotals {
  u64 mismatches, first_bad, poison, first_poison, nonfinite, first_nonfinite, reference_poison,
      differing;
  double max_abs, max_rel;
};

__device__ __forceinline__ KhTotals kh_totals_zero() {
  KhTotals t = {0, ~0ull, 0, ~0ull, 0, ~0ull, 0, 0, 0.0, 0.0};
  return t;
}

__device__ __forceinline__ void kh_totals_add(KhTotals& a, const KhTotals& b) {
  a.mismatches += b.mismatches;
  a.first_bad = min(a.first_bad, b.first_bad);
  a.poison += b.poison;
  a.first_poison = min(a.first_poison, b.first_poison);
  a.nonfinite += b.nonfinite;
  a.first_nonfinite = min(a.first_nonfinite, b.first_nonfinite);
  a.reference_poison += b.reference_poison;
  a.differing += b.differing;
  a.max_abs = fmax(a.max_abs, b.max_abs);
  a.max_rel = fmax(a.max_rel, b.max_rel);
}

// One element, by compare_one's rules (verify/compare.cpp); `poison` is poison_element(dtype)'s
// bits, for expected and got alike.
__device__ __forceinline__ void kh_compare_element(int dtype, u64 eb, u64 gb, u64 poison, u64 i,
                                                   double atol, double rtol, KhTotals& t) {
  if (eb != gb) {
    ++t.differing;
  } else if (eb != poison) {
    return;  // identical and written
  }
  if (eb == poison) {
    ++t.reference_poison;
    return;
  }
  if (gb == poison) {
    ++t.poison;
    t.first_poison = min(t.first_poison, i);
    return;
  }
  const double e = kh_value(dtype, eb);
  const double g = kh_value(dtype, gb);
  if (!isfinite(e)) {  // integers are always finite
    const bool same = (isnan(e) && isnan(g)) || (isinf(e) && g == e);
    if (!same) {
      ++t.mismatches;
      t.first_bad = min(t.first_bad, i);
    }
    return;
  }
  if (!isfinite(g)) {
    ++t.nonfinite;
    t.first_nonfinite = min(t.first_nonfinite, i);
    return;
  }
  const double abs_err = fabs(__dsub_rn(g, e));
  if (abs_err == 0.0) return;
  const double rel_err =
      e == 0.0 ? __longlong_as_double(0x7FF0000000000000LL) : __ddiv_rn(abs_err, fabs(e));
  t.max_abs = fmax(t.max_abs, abs_err);
  if (isfinite(rel_err)) t.max_rel = fmax(t.max_rel, rel_err);
  if (abs_err > atol && rel_err > rtol) {
    ++t.mismatches;
    t.first_bad = min(t.first_bad, i);
  }
}

// The unsealed 16-byte chunk `c` of a sealed copy.
__device__ __forceinline__ uint4 kh_unseal(const uint4* sealed, u64 c, u64 stream, u64 key) {
  const uint4 k = kh_keystream(c, stream, key);
  const uint4 s = sealed[c];
  return make_uint4(s.x ^ k.x, s.y ^ k.y, s.z ^ k.z, s.w ^ k.w);
}

// Every block writes its partial totals (so nothing left in `partials` survives into the result).
// Both buffers are 16-byte aligned and readable up to the next 16-byte boundary.
extern "C" __global__ void __launch_bounds__(KH_THREADS)
    kh_compare_sealed(const uint4* got, const uint4* sealed, u64 count, int dtype, int size,
                      u64 stream, u64 key, u64 poison, double atol, double rtol,
                      KhTotals* partials) {
  KhTotals t = kh_totals_zero();
  const u64 per = 16 / size;
  const u64 chunks = (count + per - 1) / per;
  for (u64 c = global_thread(); c < chunks; c += grid_threads()) {
    const uint4 ev = kh_unseal(sealed, c, stream, key);
    const uint4 gv = got[c];
    const bool same = ev.x == gv.x && ev.y == gv.y && ev.z == gv.z && ev.w == gv.w;
    for (int j = 0; j < (int)per; ++j) {
      const u64 i = c * per + j;
      if (i >= count) break;
      const u64 gb = kh_bits_at(gv, size, j);
      if (same && gb != poison) continue;  // identical and written
      kh_compare_element(dtype, kh_bits_at(ev, size, j), gb, poison, i, atol, rtol, t);
    }
  }
  __shared__ KhTotals s[KH_THREADS];
  s[threadIdx.x] = t;
  __syncthreads();
  for (int o = KH_THREADS / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) kh_totals_add(s[threadIdx.x], s[threadIdx.x + o]);
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = s[0];
}

// The compare record (CompareRecord on the host side): KH_CMP_WORDS words, the last a tag.
#define KH_CMP_WORDS 18
#define KH_CMP_TAG 17

// A Philox-based MAC of the first n words under the key, domain-separated from the timed checks'
// tags (kh_tag) by the counter's high word.
__device__ __forceinline__ u64 kh_tag_words(const u64* w, int n, u64 key) {
  u64 h = 0x6A09E667F3BCC908ull;
  for (int k = 0; k < n; ++k) {
    const uint4 r = philox(w[k] ^ h, 0x4B48434D50000000ull | (u64)k, key);
    h = ((u64)r.y << 32) | r.x;
  }
  return h;
}

__device__ __forceinline__ u64 kh_bits_of(const uint4* got, const uint4* sealed, u64 index,
                                          int size, u64 stream, u64 key, u64* expected) {
  const u64 per = 16 / size;
  const u64 c = index / per;
  const int j = (int)(index % per);
  *expected = kh_bits_at(kh_unseal(sealed, c, stream, key), size, j);
  return kh_bits_at(got[c], size, j);
}

// One block: folds the partials of kh_compare_sealed, reads the elements at the first mismatch and
// the first non-finite element, and writes the tagged record.
extern "C" __global__ void __launch_bounds__(KH_THREADS)
    kh_compare_record(const KhTotals* partials, int parts, const uint4* got, const uint4* sealed,
                      u64 count, int size, u64 stream, u64 key, u64 nonce, u64* record) {
  KhTotals t = kh_totals_zero();
  for (int b = threadIdx.x; b < parts; b += KH_THREADS) kh_totals_add(t, partials[b]);
  __shared__ KhTotals s[KH_THREADS];
  s[threadIdx.x] = t;
  __syncthreads();
  for (int o = KH_THREADS / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) kh_totals_add(s[threadIdx.x], s[threadIdx.x + o]);
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  const KhTotals a = s[0];
  u64 w[KH_CMP_WORDS];
  w[0] = count;
  w[1] = a.mismatches;
  w[2] = a.first_bad;
  w[3] = (u64)__double_as_longlong(a.max_abs);
  w[4] = (u64)__double_as_longlong(a.max_rel);
  w[5] = a.poison;
  w[6] = a.first_poison;
  w[7] = a.nonfinite;
  w[8] = a.first_nonfinite;
  w[9] = a.reference_poison;
  w[10] = a.differing;
  w[11] = 0;  // expected and got bits at first_bad
  w[12] = 0;
  if (a.first_bad < count) w[12] = kh_bits_of(got, sealed, a.first_bad, size, stream, key, &w[11]);
  w[13] = 0;  // at first_nonfinite
  w[14] = 0;
  if (a.first_nonfinite < count)
    w[14] = kh_bits_of(got, sealed, a.first_nonfinite, size, stream, key, &w[13]);
  w[15] = stream;
  w[16] = nonce;
  w[KH_CMP_TAG] = kh_tag_words(w, KH_CMP_TAG, key);
  for (int k = 0; k < KH_CMP_WORDS; ++k) record[k] = w[k];
}

// The correctness trials' poison, made to look like the timed iterations'
// (docs/correctness.md#poison-and-guards): every
// element of `size` bytes (1, 2, 4 or 8; p aligned to it) at `p` whose bits equal `from` is set to
// `to` (the fixed poison the comparators look for), after the candidate ran.
extern "C" __global__ void __launch_bounds__(KH_THREADS)
    kh_replace_element(unsigned char* p, u64 count, int size, u64 from, u64 to) {
  for (u64 i = global_thread(); i < count; i += grid_threads()) {
    if (size == 1) {
      if (p[i] == (unsigned char)from) p[i] = (unsigned char)to;
    } else if (size == 2) {
      unsigned short* q = reinterpret_cast<unsigned short*>(p);
      if (q[i] == (unsigned short)from) q[i] = (unsigned short)to;
    } else if (size == 4) {
      u32* q = reinterpret_cast<u32*>(p);
      if (q[i] == (u32)from) q[i] = (u32)to;
    } else {
      u64* q = reinterpret_cast<u64*>(p);
      if (q[i] == from) q[i] = to;
    }
  }
}

// The timed iterations' point reference (docs/correctness.md#checked-iterations): rows
// `rows.index[0..rows.count)` of a row-major tensor of `row_bytes`-byte rows at `src`, packed in
// that order at `dst`. A grid-stride byte copy: the rows are few (a point reference samples at most
// KH_MAX_ROWS of them).
#define KH_MAX_ROWS 256
struct KhRows {
  u32 count;
  u32 index[KH_MAX_ROWS];
};
extern "C" __global__ void __launch_bounds__(KH_THREADS)
    kh_gather_rows(const unsigned char* src, unsigned char* dst, u64 row_bytes, KhRows rows) {
  const u64 total = row_bytes * rows.count;
  for (u64 i = global_thread(); i < total; i += grid_threads()) {
    const u64 r = i / row_bytes;
    dst[i] = src[(u64)rows.index[r] * row_bytes + (i - r * row_bytes)];
  }
}

// Overwrites every byte of shared memory on every SM (one block of `bytes` dynamic shared
// memory per SM, at least), so nothing a kernel leaves in shared memory reaches the next one.
extern "C" __global__ void __launch_bounds__(KH_THREADS) kh_scrub_shared(u64 bytes, u32 value) {
  extern __shared__ u32 smem[];
  volatile u32* v = smem;  // volatile: stores nothing reads back must still happen
  for (u64 i = threadIdx.x; i < bytes / 4; i += blockDim.x) v[i] = value;
}
