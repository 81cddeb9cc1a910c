// Host-side element conversions for every DType, bit-exact with the device's conversions:
// reading outputs the device wrote, writing inputs the device reads, and the poison pattern
// that marks output elements a kernel never wrote (docs/correctness.md#poison-and-guards).
//
// Elements are little-endian bytes, as on the device and in safetensors files.
//
// Rounding (from_double): round to nearest, ties to even, straight from double (no double
// rounding through float), as CUDA's __double2half / __double2bfloat16 / __nv_cvt_double_to_fp8:
//   float32, float16, bfloat16  overflow to +-inf; NaN -> canonical NaN (f16/bf16 0x7FFF)
//   float8_e4m3fn, float8_e5m2  satfinite (__NV_SATFINITE): overflow and +-inf saturate to
//                               +-max finite (448, 57344); NaN -> 0x7F (e4m3) / 0x7E (e5m2),
//                               sign kept, as CUDA's software conversion
//   integers                    nearest integer (ties to even), saturated to the type's range;
//                               NaN -> 0
//   bool                        value != 0 (so NaN -> true), stored as 0 or 1
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kharness/dtype.hpp"

namespace kharness {

// The value of one element (`dtype_size(dtype)` bytes at `element`). Every bit pattern has a
// value: NaNs, infinities and subnormals decode as such; bool is 0 for a zero byte, else 1.
double to_double(DType dtype, const std::uint8_t* element);
// Element i of an index tensor (int64, else int32) at `base`.
std::int64_t read_index(DType dtype, const std::uint8_t* base, std::uint64_t i);

// Writes `dtype_size(dtype)` bytes at `out`: `value` rounded as described above.
void from_double(DType dtype, double value, std::uint8_t* out);

// to_double and from_double over `n` consecutive elements, with the same results. float32,
// float16 and bfloat16 take fast paths (a shift or a table to read; integer round-to-nearest-even
// on the double's bits to write, from_double itself only for zero, subnormals, overflow and NaN):
// model-check converts hundreds of millions of elements per layer.
void to_doubles(DType dtype, const std::uint8_t* elements, std::size_t n, double* out);
void from_doubles(DType dtype, const double* values, std::size_t n, std::uint8_t* out);

// True when the element is a NaN (float dtypes only; false for integers and bool).
bool is_nan_bits(DType dtype, const std::uint8_t* element);

// The poison element written over outputs and workspace before every run. Floats get a NaN
// with a payload no arithmetic produces, so an unwritten element is both recognisable and fails
// any comparison:
//   float32 0x7FA5A5A5, float16 0x7DA5, bfloat16 0x7FA5 (signalling NaNs, payload 0xA5...)
//   float8_e4m3fn 0x7F  (its only positive NaN, so it cannot be told from a written NaN)
//   float8_e5m2   0x7D  (a NaN that neither CUDA's software conversion (0x7E) nor the hardware
//                        cvt (0x7F) produces; 0x7E would be indistinguishable from a written NaN)
//   integers and bool: 0xA5 in every byte
std::vector<std::uint8_t> poison_element(DType dtype);

// The poison of one timed iteration (docs/correctness.md#poison-and-guards: it changes from
// iteration to iteration, so a kernel cannot recognise it), a pure function of a 64-bit random
// draw: for floats a NaN with a random sign and payload (never a canonical NaN that arithmetic or a
// conversion writes) in three draws of four, and in the fourth a large finite value (|x| in [16384,
// 57344], fp8 e4m3 [256, 448]), so a kernel that skips work when its output already holds finite
// numbers is caught too; integers: random bits; bool: a byte that is neither 0 nor 1.
std::vector<std::uint8_t> iteration_poison_element(DType dtype, std::uint64_t draw);

// True when the element's bytes equal poison_element(dtype).
bool is_poison(DType dtype, const std::uint8_t* element);

}  // namespace kharness
