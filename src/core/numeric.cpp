#include "kharness/numeric.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "elements are little-endian bytes; a big-endian host needs byte swaps here");

namespace kharness {
namespace {

// A binary floating-point format narrower than double. `finite_nan` marks the OCP "fn" formats
// (float8_e4m3fn): no infinities, the all-ones exponent holds normal numbers, and only the
// all-ones pattern is NaN.
struct Format {
  int exponent_bits;
  int mantissa_bits;
  bool finite_nan;
  bool satfinite;          // overflow saturates to the largest finite value
  std::uint32_t nan_bits;  // what a NaN converts to (before the sign)
  bool nan_keeps_sign;

  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  std::uint32_t sign_bit() const { return 1u << (exponent_bits + mantissa_bits); }
  std::uint32_t inf_bits() const { return ((1u << exponent_bits) - 1) << mantissa_bits; }
  std::uint32_t max_finite_bits() const {
    // e4m3fn: exponent 1111, mantissa 110 (1111 111 is NaN); IEEE: just below the infinity.
    return finite_nan ? inf_bits() | ((1u << mantissa_bits) - 2) : inf_bits() - 1;
  }
};

constexpr Format kHalf{5, 10, false, false, 0x7FFF, false};
constexpr Format kBFloat16{8, 7, false, false, 0x7FFF, false};
// CUDA's __nv_cvt_double_to_fp8 keeps the sign of a NaN; for a quiet NaN its e5m2 result is
// 0x7E (0x7C | the two leading payload bits 10).
constexpr Format kE4M3{4, 3, true, true, 0x7F, true};
constexpr Format kE5M2{5, 2, false, true, 0x7E, true};

double decode(const Format& f, std::uint32_t bits) {
  const bool negative = (bits & f.sign_bit()) != 0;
  const std::uint32_t exponent = (bits >> f.mantissa_bits) & ((1u << f.exponent_bits) - 1);
  const std::uint32_t mantissa = bits & ((1u << f.mantissa_bits) - 1);
  const std::uint32_t all_ones = (1u << f.exponent_bits) - 1;
  double magnitude;
  if (f.finite_nan && exponent == all_ones && mantissa == (1u << f.mantissa_bits) - 1) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (!f.finite_nan && exponent == all_ones) {
    if (mantissa != 0) {
      return std::numeric_limits<double>::quiet_NaN();
    }
    magnitude = std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {  // zero or subnormal: mantissa * 2^(emin - M)
    magnitude = std::ldexp(static_cast<double>(mantissa), 1 - f.bias() - f.mantissa_bits);
  } else {
    magnitude = std::ldexp(static_cast<double>((1u << f.mantissa_bits) | mantissa),
                           static_cast<int>(exponent) - f.bias() - f.mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

// Round to nearest, ties to even, independent of the FP environment's rounding mode.
double round_half_even(double n) {
  const double floor = std::floor(n);
  const double diff = n - floor;  // exact
  if (diff > 0.5 || (diff == 0.5 && std::fmod(floor, 2.0) != 0.0)) {
    return floor + 1.0;
  }
  return floor;
}

std::uint32_t encode(const Format& f, double value) {
  if (std::isnan(value)) {
    return f.nan_bits | (f.nan_keeps_sign && std::signbit(value) ? f.sign_bit() : 0u);
  }
  const std::uint32_t sign = std::signbit(value) ? f.sign_bit() : 0u;
  const double x = std::fabs(value);
  if (x == 0.0) {
    return sign;
  }
  std::uint64_t bits;
  if (std::isinf(x)) {
    bits = std::numeric_limits<std::uint64_t>::max();  // overflow below
  } else {
    // x = n * 2^(e - M) with n in [2^M, 2^(M+1)) for normals; e is clamped to emin, so a
    // subnormal has n < 2^M. Scaling by a power of two is exact, then n is rounded once.
    int k = 0;
    std::frexp(x, &k);  // x = m * 2^k, m in [0.5, 1)
    const int emin = 1 - f.bias();
    const int e = std::max(k - 1, emin);
    const double n = round_half_even(std::ldexp(x, f.mantissa_bits - e));
    // Biased exponent (e + bias - 1) plus n: the implicit bit of n lifts the exponent by one,
    // and a rounding carry into 2^(M+1) moves to the next binade by itself. A subnormal
    // (e == emin) gets exponent field 0 + n, and carries into the smallest normal.
    bits = (static_cast<std::uint64_t>(e + f.bias() - 1) << f.mantissa_bits) +
           static_cast<std::uint64_t>(n);
  }
  if (bits > f.max_finite_bits()) {
    bits = f.satfinite ? f.max_finite_bits() : f.inf_bits();
  }
  return static_cast<std::uint32_t>(bits) | sign;
}

template <class T>
T load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
void store(std::uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// Nearest integer (ties to even), saturated to T; NaN -> 0.
template <class T>
T saturate_integer(double value) {
  if (std::isnan(value)) {
    return 0;
  }
  const double r = round_half_even(value);
  // The bounds as doubles: min is a power of two (exact); max + 1 is one too.
  const double lo = static_cast<double>(std::numeric_limits<T>::min());
  const double hi_plus_one = static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
  if (r < lo) {
    return std::numeric_limits<T>::min();
  }
  if (r >= hi_plus_one) {
    return std::numeric_limits<T>::max();
  }
  return static_cast<T>(r);
}

}  // namespace

std::int64_t read_index(DType dtype, const std::uint8_t* base, std::uint64_t i) {
  if (dtype == DType::kInt64) {
    std::int64_t v;
    std::memcpy(&v, base + i * 8, 8);
    return v;
  }
  std::int32_t v;
  std::memcpy(&v, base + i * 4, 4);
  return v;
}

double to_double(DType dtype, const std::uint8_t* element) {
  switch (dtype) {
    case DType::kFloat32:
      return load<float>(element);
    case DType::kFloat16:
      return decode(kHalf, load<std::uint16_t>(element));
    case DType::kBFloat16:
      return decode(kBFloat16, load<std::uint16_t>(element));
    case DType::kFloat8E4M3:
      return decode(kE4M3, element[0]);
    case DType::kFloat8E5M2:
      return decode(kE5M2, element[0]);
    case DType::kInt64:
      return static_cast<double>(load<std::int64_t>(element));
    case DType::kInt32:
      return load<std::int32_t>(element);
    case DType::kInt16:
      return load<std::int16_t>(element);
    case DType::kInt8:
      return static_cast<std::int8_t>(element[0]);
    case DType::kUInt8:
      return element[0];
    case DType::kBool:
      return element[0] != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}

void from_double(DType dtype, double value, std::uint8_t* out) {
  switch (dtype) {
    case DType::kFloat32:
      store(out, static_cast<float>(value));  // IEEE conversion: nearest-even, overflow to inf
      return;
    case DType::kFloat16:
      store(out, static_cast<std::uint16_t>(encode(kHalf, value)));
      return;
    case DType::kBFloat16:
      store(out, static_cast<std::uint16_t>(encode(kBFloat16, value)));
      return;
    case DType::kFloat8E4M3:
      out[0] = static_cast<std::uint8_t>(encode(kE4M3, value));
      return;
    case DType::kFloat8E5M2:
      out[0] = static_cast<std::uint8_t>(encode(kE5M2, value));
      return;
    case DType::kInt64:
      store(out, saturate_integer<std::int64_t>(value));
      return;
    case DType::kInt32:
      store(out, saturate_integer<std::int32_t>(value));
      return;
    case DType::kInt16:
      store(out, saturate_integer<std::int16_t>(value));
      return;
    case DType::kInt8:
      store(out, saturate_integer<std::int8_t>(value));
      return;
    case DType::kUInt8:
      store(out, saturate_integer<std::uint8_t>(value));
      return;
    case DType::kBool:
      out[0] = value != 0.0 ? 1 : 0;
      return;
  }
}

namespace {

// from_double into a 16-bit IEEE format (float16, bfloat16) when `value` and its rounding are
// normal numbers of the format: the double's bits rounded to nearest even at the format's
// mantissa width (a carry into the exponent is the next binade, one into the infinity pattern
// an overflow to infinity, as from_double rounds). Anything else (zero, subnormal, too large,
// infinity, NaN) goes to from_double.
template <int ExponentBits, int MantissaBits>
std::uint16_t encode16(double value, DType dtype) {
  constexpr int kBias = (1 << (ExponentBits - 1)) - 1;
  constexpr int kShift = 52 - MantissaBits;
  constexpr std::uint64_t kInf = ((std::uint64_t{1} << ExponentBits) - 1) << MantissaBits;
  std::uint64_t bits;
  std::memcpy(&bits, &value, 8);
  const std::uint64_t magnitude = bits & ~(std::uint64_t{1} << 63);
  const int exponent = static_cast<int>(magnitude >> 52) - 1023;
  if (exponent < 1 - kBias || exponent > kBias) {
    std::uint16_t out;
    from_double(dtype, value, reinterpret_cast<std::uint8_t*>(&out));
    return out;
  }
  const std::uint64_t rounded =
      magnitude + ((std::uint64_t{1} << (kShift - 1)) - 1) + ((magnitude >> kShift) & 1);
  const std::uint64_t field = std::min(
      (rounded >> kShift) - (static_cast<std::uint64_t>(1023 - kBias) << MantissaBits), kInf);
  return static_cast<std::uint16_t>(field | ((bits >> 63) << (ExponentBits + MantissaBits)));
}

}  // namespace

void to_doubles(DType dtype, const std::uint8_t* elements, std::size_t n, double* out) {
  switch (dtype) {
    case DType::kFloat32:
      for (std::size_t i = 0; i < n; ++i) out[i] = load<float>(elements + 4 * i);
      return;
    case DType::kBFloat16:
      for (std::size_t i = 0; i < n; ++i) {
        // bfloat16 is the top half of a float32: exact, NaN stays NaN.
        const std::uint32_t word = static_cast<std::uint32_t>(load<std::uint16_t>(elements + 2 * i))
                                   << 16;
        float f;
        std::memcpy(&f, &word, 4);
        out[i] = f;
      }
      return;
    case DType::kFloat16: {
      static const std::vector<double> table = [] {
        std::vector<double> t(65536);
        for (std::uint32_t b = 0; b < 65536; ++b) t[b] = decode(kHalf, b);
        return t;
      }();
      for (std::size_t i = 0; i < n; ++i) out[i] = table[load<std::uint16_t>(elements + 2 * i)];
      return;
    }
    default: {
      const std::size_t size = dtype_size(dtype);
      for (std::size_t i = 0; i < n; ++i) out[i] = to_double(dtype, elements + i * size);
      return;
    }
  }
}

void from_doubles(DType dtype, const double* values, std::size_t n, std::uint8_t* out) {
  switch (dtype) {
    case DType::kFloat32:
      for (std::size_t i = 0; i < n; ++i) store(out + 4 * i, static_cast<float>(values[i]));
      return;
    case DType::kBFloat16:
      for (std::size_t i = 0; i < n; ++i) store(out + 2 * i, encode16<8, 7>(values[i], dtype));
      return;
    case DType::kFloat16:
      for (std::size_t i = 0; i < n; ++i) store(out + 2 * i, encode16<5, 10>(values[i], dtype));
      return;
    default: {
      const std::size_t size = dtype_size(dtype);
      for (std::size_t i = 0; i < n; ++i) from_double(dtype, values[i], out + i * size);
      return;
    }
  }
}

bool is_nan_bits(DType dtype, const std::uint8_t* element) {
  return is_floating(dtype) && std::isnan(to_double(dtype, element));
}

namespace {

// Poison as one little-endian word of the element's size (bytes beyond it unused).
std::uint64_t poison_word(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 0x7FA5A5A5u;
    case DType::kFloat16:
      return 0x7DA5u;
    case DType::kBFloat16:
      return 0x7FA5u;
    case DType::kFloat8E4M3:
      return 0x7Fu;
    case DType::kFloat8E5M2:
      return 0x7Du;
    default:  // integers and bool
      return 0xA5A5A5A5A5A5A5A5ull;
  }
}

}  // namespace

std::vector<std::uint8_t> poison_element(DType dtype) {
  std::vector<std::uint8_t> bytes(dtype_size(dtype));
  const std::uint64_t word = poison_word(dtype);
  std::memcpy(bytes.data(), &word, bytes.size());
  return bytes;
}

// Called per element over whole outputs: no allocation.
bool is_poison(DType dtype, const std::uint8_t* element) {
  const std::uint64_t word = poison_word(dtype);
  return std::memcmp(&word, element, dtype_size(dtype)) == 0;
}

}  // namespace kharness

namespace kharness {

std::vector<std::uint8_t> iteration_poison_element(DType dtype, std::uint64_t draw) {
  const std::size_t size = dtype_size(dtype);
  std::vector<std::uint8_t> bytes(size);
  const bool decoy = (draw & 3) == 0;  // one draw in four: a finite value
  const bool negative = (draw >> 2) & 1;
  const std::uint64_t bits = draw >> 3;
  std::uint64_t word = 0;
  if (is_floating(dtype) && decoy) {
    // A large finite value, far from what the operators' outputs hold (|x| >= 256 even for fp8),
    // so an element left unwritten fails the comparison without being NaN.
    const double unit = static_cast<double>(bits & 0xFFFFF) / static_cast<double>(0x100000);
    const double magnitude =
        dtype == DType::kFloat8E4M3 ? 256.0 + 192.0 * unit : 16384.0 + 40960.0 * unit;
    from_double(dtype, negative ? -magnitude : magnitude, bytes.data());
    return bytes;
  }
  switch (dtype) {
    case DType::kFloat32: {
      // A NaN with a random payload, never the canonical ones arithmetic produces.
      std::uint64_t payload = bits & 0x7FFFFF;
      if (payload == 0 || payload == 0x400000 || payload == 0x7FFFFF) payload = 0x2A5A5A;
      word = 0x7F800000u | payload | (negative ? 0x80000000u : 0u);
      break;
    }
    case DType::kFloat16: {
      std::uint64_t payload = bits & 0x3FF;
      if (payload == 0 || payload == 0x200 || payload == 0x3FF) payload = 0x1A5;
      word = 0x7C00u | payload | (negative ? 0x8000u : 0u);
      break;
    }
    case DType::kBFloat16: {
      std::uint64_t payload = bits & 0x7F;
      if (payload == 0 || payload == 0x40 || payload == 0x7F) payload = 0x25;
      word = 0x7F80u | payload | (negative ? 0x8000u : 0u);
      break;
    }
    case DType::kFloat8E4M3:
      word = negative ? 0xFFu : 0x7Fu;  // its only NaNs
      break;
    case DType::kFloat8E5M2:
      word = 0x7Du | (negative ? 0x80u : 0u);  // not a NaN the conversions produce (0x7E, 0x7F)
      break;
    case DType::kBool:
      word = 2 + (bits % 254);  // never 0 or 1
      break;
    default:  // integers: random bits
      word = draw * 0x9E3779B97F4A7C15ull;
      break;
  }
  std::memcpy(bytes.data(), &word, size);
  return bytes;
}

}  // namespace kharness
