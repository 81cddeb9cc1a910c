#include "verify/harness_kernels.hpp"

#include <fmt/format.h>
#include <nvrtc.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "compile/compile_cache.hpp"
#include "compile/compile_internal.hpp"
#include "kharness/device.hpp"
#include "kharness/error.hpp"
#include "kharness/harness_kernels_text.hpp"
#include "kharness/hash.hpp"
#include "kharness/numeric.hpp"
#include "kharness/probability_rows_core_text.hpp"
#include "verify/index_inputs.hpp"

namespace kharness::verify {
namespace fs = std::filesystem;

namespace {

constexpr unsigned kThreads = 256;    // KH_THREADS
constexpr unsigned kBlocksPerSm = 8;  // grid cap: a full GPU of 256-thread blocks
constexpr const char* kCacheTag = "kharness-harness-kernels-v3";
// The header the kernels' source includes, and its text (the file the host compiles too).
constexpr const char* kProbabilityRowsHeader = "kharness_probability_rows_core.hpp";

enum Distribution : int { kNormal = 0, kUniform = 1, kRange = 2 };  // KH_NORMAL, ...

int kernel_dtype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 0;
    case DType::kFloat16:
      return 1;
    case DType::kBFloat16:
      return 2;
    case DType::kFloat8E4M3:
      return 3;
    case DType::kFloat8E5M2:
      return 4;
    case DType::kInt64:
      return 5;
    case DType::kInt32:
      return 6;
    case DType::kInt16:
      return 7;
    case DType::kInt8:
      return 8;
    case DType::kUInt8:
      return 9;
    case DType::kBool:
      return 10;
  }
  return 0;
}

// The integers a dtype holds, as doubles; float dtypes take "range" values through int64.
// For int64 the upper bound 2^63 stands for 2^63 - 1, which is not a double.
constexpr double kTwo63 = 9223372036854775808.0;

std::pair<double, double> integer_range(DType dtype) {
  switch (dtype) {
    case DType::kInt32:
      return {-2147483648.0, 2147483647.0};
    case DType::kInt16:
      return {-32768.0, 32767.0};
    case DType::kInt8:
      return {-128.0, 127.0};
    case DType::kUInt8:
      return {0.0, 255.0};
    case DType::kBool:
      return {0.0, 1.0};
    default:
      return {-kTwo63, kTwo63};
  }
}

// Half the smallest positive value of the dtype: anything smaller in magnitude rounds to 0.
double half_smallest(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return std::numeric_limits<float>::denorm_min() / 2;
    case DType::kFloat16:
      return std::ldexp(1.0, -25);
    case DType::kBFloat16:
      return std::ldexp(1.0, -134);
    case DType::kFloat8E4M3:
      return std::ldexp(1.0, -10);
    case DType::kFloat8E5M2:
      return std::ldexp(1.0, -17);
    default:
      return 0.5;
  }
}

// ceil(low) .. floor(high) intersected with the dtype's integers, as (lo, span); span == 0
// stands for all 2^64 int64 values.
std::pair<std::int64_t, std::uint64_t> integer_bounds(const InputGenerator& gen, DType dtype,
                                                      const std::string& where) {
  const auto [min, max] = integer_range(dtype);
  const double lo = std::max(std::ceil(gen.low), min);
  const double hi = std::min(std::floor(gen.high), max);
  if (!(lo <= hi)) {
    throw input_error(where, fmt::format("range [{}, {}] holds no {} value", gen.low, gen.high,
                                         dtype_name(dtype)));
  }
  auto to_int64 = [](double x) {
    return x >= kTwo63 ? std::numeric_limits<std::int64_t>::max() : static_cast<std::int64_t>(x);
  };
  const std::int64_t lo_i = to_int64(lo);
  const std::int64_t hi_i = to_int64(hi);
  return {lo_i, static_cast<std::uint64_t>(hi_i) - static_cast<std::uint64_t>(lo_i) + 1};
}

double constant_value(const InputGenerator& gen, const std::string& where) {
  auto it = gen.extra.find("value");
  if (it == gen.extra.end()) {
    return gen.mean;
  }
  if (!it->is_number()) {
    throw input_error(where + ".value", fmt::format("expected a number, got {}", it->dump()));
  }
  return it->get<double>();
}

bool fits_float(double v) {
  return std::isfinite(v) && std::fabs(v) <= std::numeric_limits<float>::max();
}

// 16 bytes of `element_pattern` repeated, as the two little-endian words the kernels take.
std::pair<std::uint64_t, std::uint64_t> pattern_words(const std::vector<std::uint8_t>& element,
                                                      CUdeviceptr p, std::size_t bytes,
                                                      const char* what) {
  const std::size_t n = element.size();
  if (n != 1 && n != 2 && n != 4 && n != 8) {
    throw Error(ExitCode::kInternal, what,
                fmt::format("pattern of {} bytes (expected 1, 2, 4 or 8)", n));
  }
  if (p % n != 0 || bytes % n != 0) {
    throw Error(
        ExitCode::kInternal, what,
        fmt::format("region 0x{:x} + {} is not aligned to its {}-byte pattern", p, bytes, n));
  }
  std::uint8_t block[16];
  for (std::size_t i = 0; i < 16; ++i) {
    block[i] = element[i % n];
  }
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  std::memcpy(&lo, block, 8);
  std::memcpy(&hi, block + 8, 8);
  return {lo, hi};
}

std::uint64_t fmix64(std::uint64_t k) {  // as in the kernel source
  k ^= k >> 33;
  k *= 0xFF51AFD7ED558CCDull;
  k ^= k >> 33;
  k *= 0xC4CEB9FE1A85EC53ull;
  k ^= k >> 33;
  return k;
}

// Philox4x32-10 as the kernels compute it (philox() in the source above).
std::array<std::uint32_t, 4> philox(std::uint64_t draw, std::uint64_t stream, std::uint64_t seed) {
  std::array<std::uint32_t, 4> c = {
      static_cast<std::uint32_t>(draw), static_cast<std::uint32_t>(draw >> 32),
      static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)};
  auto k0 = static_cast<std::uint32_t>(seed);
  auto k1 = static_cast<std::uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    const std::uint64_t p0 = 0xD2511F53ull * c[0];
    const std::uint64_t p1 = 0xCD9E8D57ull * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<std::uint32_t>(p0)};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

constexpr std::size_t kRecordWords = kCheckRecordBytes / 8;  // KH_RECORD_WORDS
constexpr std::size_t kRecordTag = kRecordWords - 1;         // KH_RECORD_TAG

// kh_tag() of the source above.
std::uint64_t record_tag(const std::uint64_t* w, std::uint64_t key) {
  std::uint64_t h = 0x6A09E667F3BCC908ull;
  for (std::size_t k = 0; k < kRecordTag; ++k) {
    auto r = philox(w[k] ^ h, 0x4B48544147000000ull | k, key);
    h = (static_cast<std::uint64_t>(r[1]) << 32) | r[0];
  }
  return h;
}

constexpr std::size_t kPartialBytes = 64;  // sizeof(KhPartial)
constexpr std::size_t kTotalsBytes = 80;   // sizeof(KhTotals)

// The compare record's words (KH_CMP_WORDS) and its tag (kh_tag_words() of the source above).
constexpr std::size_t kCompareWords = kCompareRecordBytes / 8;
constexpr std::size_t kCompareTag = kCompareWords - 1;
static_assert(kCompareWords == 18, "KH_CMP_WORDS");

std::uint64_t compare_tag(const std::uint64_t* w, std::uint64_t key) {
  std::uint64_t h = 0x6A09E667F3BCC908ull;
  for (std::size_t k = 0; k < kCompareTag; ++k) {
    auto r = philox(w[k] ^ h, 0x4B48434D50000000ull | k, key);
    h = (static_cast<std::uint64_t>(r[1]) << 32) | r[0];
  }
  return h;
}

// A device index (~0: none) as ElementwiseTotals keeps it (-1: none).
std::int64_t index_from_device(std::uint64_t i) {
  return i == ~0ull ? -1 : static_cast<std::int64_t>(i);
}
std::uint64_t index_to_device(std::int64_t i) {
  return i < 0 ? ~0ull : static_cast<std::uint64_t>(i);
}

std::uint64_t double_bits(double d) {
  std::uint64_t b = 0;
  std::memcpy(&b, &d, 8);
  return b;
}
double bits_double(std::uint64_t b) {
  double d = 0;
  std::memcpy(&d, &b, 8);
  return d;
}

NvrtcOutput run_nvrtc(const std::string& arch, const std::vector<std::string>& options) {
  NvrtcOutput out = nvrtc_compile(kHarnessKernelsText, "kharness_harness_kernels.cu",
                                  {{kProbabilityRowsHeader, kProbabilityRowsCoreText}}, options);
  if (out.result != NVRTC_SUCCESS || out.cubin.empty()) {
    throw Error(ExitCode::kInternal, "harness kernels",
                fmt::format("NVRTC cannot compile them for {}: {}\n{}", arch,
                            nvrtcGetErrorString(out.result), out.log));
  }
  return out;
}

}  // namespace

std::array<std::uint32_t, 16> chacha20_block(const std::array<std::uint32_t, 8>& key,
                                             std::uint32_t counter,
                                             const std::array<std::uint32_t, 3>& nonce) {
  const std::array<std::uint32_t, 16> s = {
      0x61707865u, 0x3320646eu, 0x79622d32u, 0x6b206574u, key[0],  key[1],   key[2],   key[3],
      key[4],      key[5],      key[6],      key[7],      counter, nonce[0], nonce[1], nonce[2]};
  std::array<std::uint32_t, 16> x = s;
  auto rotl = [](std::uint32_t v, int n) { return (v << n) | (v >> (32 - n)); };
  auto quarter = [&](int a, int b, int c, int d) {
    x[a] += x[b], x[d] = rotl(x[d] ^ x[a], 16);
    x[c] += x[d], x[b] = rotl(x[b] ^ x[c], 12);
    x[a] += x[b], x[d] = rotl(x[d] ^ x[a], 8);
    x[c] += x[d], x[b] = rotl(x[b] ^ x[c], 7);
  };
  for (int r = 0; r < 10; ++r) {
    quarter(0, 4, 8, 12), quarter(1, 5, 9, 13), quarter(2, 6, 10, 14), quarter(3, 7, 11, 15);
    quarter(0, 5, 10, 15), quarter(1, 6, 11, 12), quarter(2, 7, 8, 13), quarter(3, 4, 9, 14);
  }
  for (std::size_t i = 0; i < 16; ++i) x[i] += s[i];
  return x;
}

std::array<std::uint32_t, 8> seal_key(std::uint64_t key) {  // kh_seal_key
  std::array<std::uint32_t, 8> k{};
  for (std::uint64_t i = 0; i < 4; ++i) {
    std::uint64_t z = key + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    k[2 * i] = static_cast<std::uint32_t>(z);
    k[2 * i + 1] = static_cast<std::uint32_t>(z >> 32);
  }
  return k;
}

std::array<std::uint32_t, 4> seal_keystream(std::uint64_t chunk, std::uint64_t stream_id,
                                            std::uint64_t key) {  // kh_keystream
  const std::uint64_t block = chunk / 4;
  const auto x = chacha20_block(
      seal_key(key), static_cast<std::uint32_t>(block),
      {static_cast<std::uint32_t>(stream_id), static_cast<std::uint32_t>(stream_id >> 32),
       static_cast<std::uint32_t>(block >> 32)});
  const std::size_t q = 4 * (chunk % 4);
  return {x[q], x[q + 1], x[q + 2], x[q + 3]};
}

std::uint64_t place_in_rows(std::uint64_t gathered, const std::vector<std::uint32_t>& picked,
                            std::uint64_t row_elements) {
  if (gathered == CheckRecord::npos || row_elements == 0) return gathered;
  const std::uint64_t row = gathered / row_elements;
  if (row >= picked.size()) return gathered;  // not a gathered element: left as it is
  return static_cast<std::uint64_t>(picked[row]) * row_elements + gathered % row_elements;
}

void place_point_record(CheckRecord& record, const std::vector<std::uint32_t>& picked,
                        std::uint64_t row_elements) {
  for (std::uint64_t* index : {&record.first_index, &record.first_unwritten,
                               &record.first_nonfinite, &record.first_mismatch}) {
    *index = place_in_rows(*index, picked, row_elements);
  }
}

const std::string& HarnessKernels::source() {
  static const std::string text = kHarnessKernelsText;
  return text;
}

HarnessImage HarnessKernels::build(const HarnessKernelsOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (options.arch.empty()) {
    throw Error(ExitCode::kInternal, "harness kernels", "no target architecture given");
  }
  HarnessImage image;
  image.arch = normalize_arch(options.arch);
  const std::string version = nvrtc_version();
  const fs::path include_dir =
      options.cuda_include_dir.empty() ? default_cuda_include_dir() : options.cuda_include_dir;
  std::error_code ec;
  if (!fs::is_regular_file(include_dir / "cuda_fp16.h", ec)) {
    throw environment_error(
        fmt::format("no CUDA toolkit headers in {} (cuda_fp16.h not found); set CUDA_HOME",
                    include_dir.string()));
  }
  std::vector<std::string> nvrtc_options = {"--gpu-architecture=" + image.arch, "-std=c++17",
                                            "-I" + include_dir.string()};
  // CUDA 13 keeps libcu++ (<nv/target>, used by cuda_fp16.h) under include/cccl.
  if (fs::is_directory(include_dir / "cccl", ec)) {
    nvrtc_options.push_back("-I" + (include_dir / "cccl").string());
  }

  Sha256 key;
  key.field(kCacheTag).field(version).field(image.arch);
  for (const auto& o : nvrtc_options) {
    key.field(o);
  }
  key.field(kHarnessKernelsText).field(kProbabilityRowsCoreText);
  image.cache_key = key.hex();

  // Per-process memo, then the disk cache, then NVRTC.
  static std::mutex memo_mutex;
  static std::map<std::string, std::string> memo;
  const bool use_cache = options.use_cache;
  const bool use_disk = use_cache && !options.cache_dir.empty();
  auto finish = [&]() {
    image.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    spdlog::debug("harness kernels: {} for {} in {:.3f} s ({})", image.cache_key.substr(0, 12),
                  image.arch, image.seconds, image.cache_hit ? "cached" : "compiled");
    return image;
  };
  if (use_cache) {
    std::lock_guard<std::mutex> lock(memo_mutex);
    if (auto it = memo.find(image.cache_key); it != memo.end()) {
      image.cubin = it->second;
      image.cache_hit = true;
      return finish();
    }
  }
  if (use_disk) {
    if (auto entry = compile_cache::load(options.cache_dir, image.cache_key);
        entry && entry->status == Status::kPassed && !entry->cubin.empty()) {
      image.cubin = std::move(entry->cubin);
      image.cache_hit = true;
    }
  }
  if (!image.cache_hit) {
    NvrtcOutput out = run_nvrtc(image.arch, nvrtc_options);
    if (use_disk) {
      compile_cache::Entry entry;
      entry.status = Status::kPassed;
      entry.log = out.log;
      entry.ptx = std::move(out.ptx);
      entry.cubin = out.cubin;
      if (!compile_cache::store(options.cache_dir, image.cache_key, entry)) {
        spdlog::debug("harness kernels: cannot write the cache entry in {}",
                      options.cache_dir.string());
      }
    }
    image.cubin = std::move(out.cubin);
    image.log = std::move(out.log);
  }
  if (use_cache) {
    std::lock_guard<std::mutex> lock(memo_mutex);
    memo.emplace(image.cache_key, image.cubin);
  }
  return finish();
}

HarnessKernels::HarnessKernels(const HarnessKernelsOptions& options) {
  const auto& cu = device::Driver::instance();
  cu.require();
  CUdevice dev = 0;
  KHARNESS_CU(cu, cuCtxGetDevice, &dev);  // fails without a current context
  int major = 0;
  int minor = 0;
  KHARNESS_CU(cu, cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  KHARNESS_CU(cu, cuDeviceGetAttribute, &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  KHARNESS_CU(cu, cuDeviceGetAttribute, &sm_count_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  sm_count_ = std::max(sm_count_, 1);

  HarnessKernelsOptions o = options;
  if (o.arch.empty()) {
    o.arch = default_arch_for(major, minor);
  }
  HarnessImage image = build(o);
  arch_ = image.arch;
  cache_hit_ = image.cache_hit;
  module_.emplace(image.cubin);
  fill_random_ = module_->function("kh_fill_random");
  fill_pattern_ = module_->function("kh_fill_pattern");
  checksum_ = module_->function("kh_checksum");
  check_pattern_ = module_->function("kh_check_pattern");
  seal_ = module_->function("kh_seal");
  check_sealed_ = module_->function("kh_check_sealed");
  seal_record_ = module_->function("kh_seal_record");
  scrub_shared_ = module_->function("kh_scrub_shared");
  compare_sealed_ = module_->function("kh_compare_sealed");
  compare_record_ = module_->function("kh_compare_record");
  probability_rows_ = module_->function("kh_probability_rows");
  gather_rows_ = module_->function("kh_gather_rows");
  replace_element_ = module_->function("kh_replace_element");
  KHARNESS_CU(cu, cuDeviceGetAttribute, &shared_optin_,
              CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev);
  shared_optin_ &= ~3;
  if (shared_optin_ > 0) {
    KHARNESS_CU(cu, cuFuncSetAttribute, scrub_shared_,
                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_optin_);
    KHARNESS_CU(cu, cuFuncSetAttribute, scrub_shared_,
                CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100);
  }
  scratch_ = device::DeviceBuffer(16);
  sink_ = device::DeviceBuffer(16);
  partials_ = device::DeviceBuffer(kPartialBytes * sm_count_ * kBlocksPerSm);
  compare_partials_ = device::DeviceBuffer(kTotalsBytes * sm_count_ * kBlocksPerSm);
}

std::uint64_t HarnessKernels::blocks_for(std::uint64_t work_items) const {
  const std::uint64_t cap = static_cast<std::uint64_t>(sm_count_) * kBlocksPerSm;
  return std::clamp<std::uint64_t>((work_items + kThreads - 1) / kThreads, 1, cap);
}

void HarnessKernels::launch(CUfunction f, const char* name, std::uint64_t work_items,
                            CUstream stream, void** params) const {
  device::LaunchConfig config;
  config.grid = {static_cast<unsigned>(blocks_for(work_items)), 1, 1};
  config.block = {kThreads, 1, 1};
  config.stream = stream;
  device::Driver::instance().check(device::launch_kernel(f, config, params), name);
}

void HarnessKernels::validate(const InputGenerator& gen, DType dtype, const std::string& where) {
  const std::string& d = gen.distribution;
  if (d == "indptr" || d == "indices" || d == "scale" || d == "sparse_indices" ||
      d == "fp8_cache_with_scales") {
    throw input_error(where, fmt::format("distribution '{}' depends on the tensor's axes: the "
                                         "correctness stage generates it, not fill_random",
                                         d));
  }
  const double half_min = half_smallest(dtype);
  if (d == "normal") {
    if (!fits_float(gen.mean) || !fits_float(gen.std)) {
      throw input_error(where, fmt::format("normal(mean {}, std {}) is not finite in float32",
                                           gen.mean, gen.std));
    }
    if (gen.std <= 0) {
      throw input_error(where + ".std",
                        "must be > 0 (for a fixed value use distribution constant)");
    }
    if (std::fabs(gen.mean) + gen.std <= half_min) {
      throw input_error(where, fmt::format("normal(mean {}, std {}) rounds to 0 in {} almost "
                                           "everywhere; inputs must not be zeros",
                                           gen.mean, gen.std, dtype_name(dtype)));
    }
  } else if (d == "uniform") {
    if (!fits_float(gen.low) || !fits_float(gen.high) || !fits_float(gen.high - gen.low)) {
      throw input_error(
          where, fmt::format("uniform [{}, {}] is not finite in float32", gen.low, gen.high));
    }
    if (!(gen.low < gen.high)) {
      throw input_error(where, fmt::format("uniform [{}, {}] needs low < high (for a fixed value "
                                           "use distribution constant)",
                                           gen.low, gen.high));
    }
    if (std::max(std::fabs(gen.low), std::fabs(gen.high)) <= half_min) {
      throw input_error(where, fmt::format("uniform [{}, {}] rounds to 0 in {}; inputs must not "
                                           "be zeros",
                                           gen.low, gen.high, dtype_name(dtype)));
    }
  } else if (d == "range") {
    if (std::isnan(gen.low) || std::isnan(gen.high)) {
      throw input_error(where, "range bounds must be numbers");
    }
    integer_bounds(gen, dtype, where);  // throws when no value fits
  } else if (d == "constant") {
    constant_value(gen, where);  // throws for a non-number
  } else {
    throw input_error(where + ".distribution",
                      fmt::format("unknown distribution '{}' (fill_random draws normal, uniform, "
                                  "range and constant)",
                                  d));
  }
}

void HarnessKernels::fill_random(CUdeviceptr p, std::size_t count, DType dtype,
                                 const InputGenerator& gen, std::uint64_t seed,
                                 std::uint64_t stream_id, CUstream stream) const {
  const std::string where = "input generator";
  validate(gen, dtype, where);
  if (count == 0) {
    return;
  }
  const std::size_t size = dtype_size(dtype);
  if (p == 0 || p % size != 0) {
    throw Error(ExitCode::kInternal, "fill_random",
                fmt::format("pointer 0x{:x} is not aligned to {} bytes", p, size));
  }
  if (gen.distribution == "constant") {
    std::vector<std::uint8_t> element(size);
    from_double(dtype, constant_value(gen, where), element.data());
    fill_pattern(p, count * size, element, stream);
    return;
  }
  std::uint64_t n = count;
  int kdtype = kernel_dtype(dtype);
  int dist = kNormal;
  int vec = p % (4 * size) == 0 ? 1 : 0;
  float a = 0.0f;
  float b = 0.0f;
  std::int64_t lo = 0;
  std::uint64_t span = 1;
  if (gen.distribution == "normal") {
    a = static_cast<float>(gen.mean);
    b = static_cast<float>(gen.std);
  } else if (gen.distribution == "uniform") {
    dist = kUniform;
    a = static_cast<float>(gen.low);
    b = static_cast<float>(gen.high - gen.low);
  } else {
    dist = kRange;
    std::tie(lo, span) = integer_bounds(gen, dtype, where);
  }
  void* params[] = {&p, &n, &kdtype, &dist, &vec, &seed, &stream_id, &a, &b, &lo, &span};
  launch(fill_random_, "cuLaunchKernelEx(kh_fill_random)", (n + 3) / 4, stream, params);
}

void HarnessKernels::probability_rows(CUdeviceptr p, std::uint64_t rows, std::uint64_t vocab,
                                      double std, std::uint64_t seed, CUstream stream) const {
  if (rows == 0 || vocab == 0) return;
  if (p == 0 || p % 4 != 0) {
    throw Error(ExitCode::kInternal, "probability_rows",
                fmt::format("pointer 0x{:x} is not aligned to 4 bytes", p));
  }
  auto table = probability_tables_.find(std);
  if (table == probability_tables_.end()) {
    const std::vector<double> host = make_probability_table(std);
    device::DeviceBuffer buffer(host.size() * sizeof(double));
    buffer.upload(host.data(), host.size() * sizeof(double));
    table = probability_tables_.emplace(std, std::move(buffer)).first;
  }
  CUdeviceptr t = table->second.ptr();
  void* params[] = {&p, &rows, &vocab, &t, &seed};
  device::LaunchConfig config;
  const std::uint64_t cap = static_cast<std::uint64_t>(sm_count_) * kBlocksPerSm;
  config.grid = {static_cast<unsigned>(std::min(rows, cap)), 1, 1};
  config.block = {kThreads, 1, 1};
  config.stream = stream;
  device::Driver::instance().check(device::launch_kernel(probability_rows_, config, params),
                                   "cuLaunchKernelEx(kh_probability_rows)");
}

void HarnessKernels::fill_pattern(CUdeviceptr p, std::size_t bytes,
                                  const std::vector<std::uint8_t>& element_pattern,
                                  CUstream stream) const {
  auto [lo, hi] = pattern_words(element_pattern, p, bytes, "fill_pattern");
  if (bytes == 0) {
    return;
  }
  std::uint64_t n = bytes;
  void* params[] = {&p, &n, &lo, &hi};
  launch(fill_pattern_, "cuLaunchKernelEx(kh_fill_pattern)", n / 16, stream, params);
}

void HarnessKernels::read_through(CUdeviceptr p, std::size_t bytes, CUstream stream) const {
  if (bytes == 0) return;
  CUdeviceptr out = sink_.ptr();
  std::uint64_t n = bytes;
  std::uint64_t key = 0;
  void* params[] = {&p, &n, &key, &out};
  launch(checksum_, "cuLaunchKernelEx(kh_checksum)", n / 16, stream, params);
}

L2Flush::L2Flush(std::size_t l2_bytes, int reads)
    : buffer_(2 * (l2_bytes > 0 ? l2_bytes : (std::size_t{64} << 20))), reads_(reads) {}

void L2Flush::operator()(const HarnessKernels& kernels, CUstream stream) {
  const auto& cu = device::Driver::instance();
  KHARNESS_CU(cu, cuMemsetD32Async, buffer_.ptr(), ++value_, buffer_.size() / 4, stream);
  for (int i = 0; i < reads_; ++i) kernels.read_through(buffer_.ptr(), buffer_.size(), stream);
}

void HarnessKernels::enqueue_checksum(CUdeviceptr p, std::size_t bytes, CUdeviceptr out,
                                      CUstream stream, std::uint64_t key) const {
  const auto& cu = device::Driver::instance();
  KHARNESS_CU(cu, cuMemsetD8Async, out, 0, 8, stream);
  if (bytes == 0) return;
  std::uint64_t n = bytes;
  void* params[] = {&p, &n, &key, &out};
  launch(checksum_, "cuLaunchKernelEx(kh_checksum)", n / 16, stream, params);
}

std::uint64_t HarnessKernels::finish_checksum(std::uint64_t sum, std::size_t bytes) {
  // The length in the finish: a zero-padded last word must not collide with a longer region.
  return fmix64(sum ^ fmix64(bytes + 0x2545F4914F6CDD1Dull));
}

std::uint64_t HarnessKernels::checksum(CUdeviceptr p, std::size_t bytes, CUstream stream,
                                       std::uint64_t key) const {
  const auto& cu = device::Driver::instance();
  std::uint64_t sum = 0;
  if (bytes != 0) {
    enqueue_checksum(p, bytes, scratch_.ptr(), stream, key);
    KHARNESS_CU(cu, cuMemcpyDtoHAsync, &sum, scratch_.ptr(), 8, stream);
  }
  KHARNESS_CU(cu, cuStreamSynchronize, stream);
  return finish_checksum(sum, bytes);
}

void HarnessKernels::enqueue_check_pattern(CUdeviceptr p, std::size_t bytes,
                                           const std::vector<std::uint8_t>& element_pattern,
                                           CUdeviceptr out, CUstream stream) const {
  auto [lo, hi] = pattern_words(element_pattern, p, bytes, "check_pattern");
  const auto& cu = device::Driver::instance();
  KHARNESS_CU(cu, cuMemsetD32Async, out, 0u, 2, stream);               // mismatches = 0
  KHARNESS_CU(cu, cuMemsetD32Async, out + 8, 0xFFFFFFFFu, 2, stream);  // first = ~0
  if (bytes == 0) return;
  std::uint64_t n = bytes;
  void* params[] = {&p, &n, &lo, &hi, &out};
  launch(check_pattern_, "cuLaunchKernelEx(kh_check_pattern)", n / 16, stream, params);
}

PatternCheck HarnessKernels::finish_pattern(const std::uint64_t words[2]) {
  PatternCheck result;
  result.mismatches = static_cast<std::size_t>(words[0]);
  result.first_mismatch_byte =
      words[1] == ~0ull ? PatternCheck::npos : static_cast<std::size_t>(words[1]);
  return result;
}

PatternCheck HarnessKernels::check_pattern(CUdeviceptr p, std::size_t bytes,
                                           const std::vector<std::uint8_t>& element_pattern,
                                           CUstream stream) const {
  if (bytes == 0) {
    pattern_words(element_pattern, p, bytes, "check_pattern");  // the arguments' checks still
    return PatternCheck{};
  }
  const auto& cu = device::Driver::instance();
  enqueue_check_pattern(p, bytes, element_pattern, scratch_.ptr(), stream);
  std::uint64_t host[2] = {0, 0};
  KHARNESS_CU(cu, cuMemcpyDtoHAsync, host, scratch_.ptr(), sizeof host, stream);
  KHARNESS_CU(cu, cuStreamSynchronize, stream);
  return finish_pattern(host);
}

std::size_t HarnessKernels::ReadBatch::slot(CUstream stream, std::size_t n) {
  if ((used_ + n) * 16 > slots_.size()) {
    // Grown (doubled) before any read of this batch is enqueued into it: the reads enqueued so
    // far wrote into the old slots, so wait for them and carry their results over.
    const std::size_t grown = std::max<std::size_t>(64, (used_ + n) * 2);
    device::DeviceBuffer bigger(grown * 16);
    if (used_ > 0) {
      const auto& cu = device::Driver::instance();
      KHARNESS_CU(cu, cuMemcpyDtoDAsync, bigger.ptr(), slots_.ptr(), used_ * 16, stream);
      KHARNESS_CU(cu, cuStreamSynchronize, stream);
    }
    slots_ = std::move(bigger);
  }
  bytes_.resize(used_ + n, 0);
  const std::size_t first = used_;
  used_ += n;
  return first;
}

std::size_t HarnessKernels::ReadBatch::checksum(CUdeviceptr p, std::size_t bytes, CUstream stream,
                                                std::uint64_t key) {
  const std::size_t i = slot(stream);
  bytes_[i] = bytes;
  kernels_->enqueue_checksum(p, bytes, slots_.ptr() + i * 16, stream, key);
  return i;
}

std::size_t HarnessKernels::ReadBatch::check_pattern(
    CUdeviceptr p, std::size_t bytes, const std::vector<std::uint8_t>& element_pattern,
    CUstream stream) {
  const std::size_t i = slot(stream);
  kernels_->enqueue_check_pattern(p, bytes, element_pattern, slots_.ptr() + i * 16, stream);
  return i;
}

std::size_t HarnessKernels::ReadBatch::compare_sealed(CUdeviceptr got, CUdeviceptr sealed,
                                                      std::uint64_t count, DType dtype,
                                                      std::uint64_t key, std::uint64_t stream_id,
                                                      const Tolerance& tolerance,
                                                      std::uint64_t nonce, CUstream stream) {
  static_assert(kCompareRecordBytes % 16 == 0, "a record fills whole slots");
  const std::size_t i = slot(stream, kCompareRecordBytes / 16);
  kernels_->compare_sealed(got, sealed, count, dtype, key, stream_id, tolerance, nonce,
                           slots_.ptr() + i * 16, stream);
  return i;
}

std::optional<CompareRecord> HarnessKernels::ReadBatch::compare_result(std::size_t slot,
                                                                       std::uint64_t key) const {
  if (2 * slot + kCompareWords > host_.size()) {
    throw Error(ExitCode::kInternal, "compare_result", "no such record in the batch");
  }
  return open_compare_record(reinterpret_cast<const std::uint8_t*>(&host_[2 * slot]), key);
}

void HarnessKernels::ReadBatch::wait(CUstream stream) {
  const auto& cu = device::Driver::instance();
  host_.assign(2 * used_, 0);
  if (used_ > 0) KHARNESS_CU(cu, cuMemcpyDtoHAsync, host_.data(), slots_.ptr(), used_ * 16, stream);
  KHARNESS_CU(cu, cuStreamSynchronize, stream);
}

std::uint64_t HarnessKernels::ReadBatch::checksum_result(std::size_t slot) const {
  return finish_checksum(host_.at(2 * slot), bytes_.at(slot));
}

PatternCheck HarnessKernels::ReadBatch::pattern_result(std::size_t slot) const {
  return finish_pattern(&host_.at(2 * slot));
}

void HarnessKernels::ReadBatch::clear() {
  used_ = 0;
  bytes_.clear();
  host_.clear();
}

void HarnessKernels::seal(CUdeviceptr src, CUdeviceptr dst, std::size_t bytes, std::uint64_t key,
                          std::uint64_t stream_id, CUstream stream) const {
  if (bytes == 0) return;
  if (src % 16 != 0 || dst % 16 != 0) {
    throw Error(ExitCode::kInternal, "seal", "regions must be 16-byte aligned");
  }
  std::uint64_t chunks = (bytes + 15) / 16;
  void* params[] = {&src, &dst, &chunks, &stream_id, &key};
  launch(seal_, "cuLaunchKernelEx(kh_seal)", (chunks + 3) / 4, stream, params);  // one per block
}

void HarnessKernels::check_sealed(CUdeviceptr got, CUdeviceptr sealed, std::uint64_t count,
                                  DType dtype, std::uint64_t key, std::uint64_t stream_id,
                                  std::uint64_t poison_bits, double atol, double rtol,
                                  std::uint64_t iteration, std::uint64_t tensor, CUdeviceptr record,
                                  CUstream stream) const {
  if (got % 16 != 0 || sealed % 16 != 0) {
    throw Error(ExitCode::kInternal, "check_sealed", "regions must be 16-byte aligned");
  }
  int kdtype = kernel_dtype(dtype);
  int size = static_cast<int>(dtype_size(dtype));
  const std::uint64_t chunks = (count * static_cast<std::uint64_t>(size) + 15) / 16;
  int parts = static_cast<int>(blocks_for(chunks));  // the partials the record kernel sums
  CUdeviceptr partials = partials_.ptr();
  {
    void* params[] = {&got, &sealed,      &count, &kdtype, &size,    &stream_id,
                      &key, &poison_bits, &atol,  &rtol,   &partials};
    launch(check_sealed_, "cuLaunchKernelEx(kh_check_sealed)", chunks, stream, params);
  }
  void* params[] = {&partials,  &parts, &got,       &sealed, &count, &size,
                    &stream_id, &key,   &iteration, &tensor, &record};
  device::LaunchConfig config;
  config.grid = {1, 1, 1};
  config.block = {32, 1, 1};
  config.stream = stream;
  device::Driver::instance().check(device::launch_kernel(seal_record_, config, params),
                                   "cuLaunchKernelEx(kh_seal_record)");
}

void HarnessKernels::replace_element(CUdeviceptr p, std::size_t bytes,
                                     const std::vector<std::uint8_t>& from,
                                     const std::vector<std::uint8_t>& to, CUstream stream) const {
  const std::size_t size = from.size();
  if ((size != 1 && size != 2 && size != 4 && size != 8) || to.size() != size || p % size != 0 ||
      bytes % size != 0) {
    throw Error(ExitCode::kInternal, "replace_element", "bad element size or alignment");
  }
  if (bytes == 0 || from == to) return;
  std::uint64_t count = bytes / size, a = 0, b = 0;
  std::memcpy(&a, from.data(), size);
  std::memcpy(&b, to.data(), size);
  int s = static_cast<int>(size);
  void* params[] = {&p, &count, &s, &a, &b};
  launch(replace_element_, "cuLaunchKernelEx(kh_replace_element)", count, stream, params);
}

void HarnessKernels::gather_rows(CUdeviceptr src, CUdeviceptr dst, std::uint64_t row_bytes,
                                 const std::vector<std::uint32_t>& rows, CUstream stream) const {
  if (rows.size() > kMaxGatherRows) {
    throw Error(ExitCode::kInternal, "gather_rows",
                fmt::format("{} rows (at most {})", rows.size(), kMaxGatherRows));
  }
  struct {
    std::uint32_t count;
    std::uint32_t index[kMaxGatherRows];
  } packed{};
  packed.count = static_cast<std::uint32_t>(rows.size());
  std::copy(rows.begin(), rows.end(), packed.index);
  if (rows.empty() || row_bytes == 0) return;
  void* params[] = {&src, &dst, &row_bytes, &packed};
  launch(gather_rows_, "cuLaunchKernelEx(kh_gather_rows)", row_bytes * rows.size(), stream, params);
}

std::optional<CheckRecord> HarnessKernels::open_record(const std::uint8_t* bytes,
                                                       std::uint64_t key) {
  std::uint64_t w[kRecordWords];
  std::memcpy(w, bytes, sizeof w);
  if (record_tag(w, key) != w[kRecordTag]) return std::nullopt;
  CheckRecord r;
  r.iteration = w[0];
  r.tensor = w[1];
  r.elements = w[2];
  r.unwritten = w[3];
  r.first_unwritten = w[4];
  r.nonfinite = w[5];
  r.first_nonfinite = w[6];
  r.mismatches = w[7];
  r.first_mismatch = w[8];
  std::memcpy(&r.max_abs_error, &w[9], 8);
  std::memcpy(&r.max_rel_error, &w[10], 8);
  r.first_index = w[11];
  r.expected_bits = w[12];
  r.got_bits = w[13];
  r.stream = w[14];
  return r;
}

void HarnessKernels::compare_sealed(CUdeviceptr got, CUdeviceptr sealed, std::uint64_t count,
                                    DType dtype, std::uint64_t key, std::uint64_t stream_id,
                                    const Tolerance& tolerance, std::uint64_t nonce,
                                    CUdeviceptr record, CUstream stream) const {
  if (got % 16 != 0 || sealed % 16 != 0 || record % 8 != 0) {
    throw Error(ExitCode::kInternal, "compare_sealed",
                "got and sealed must be 16-byte aligned, the record 8-byte aligned");
  }
  int kdtype = kernel_dtype(dtype);
  int size = static_cast<int>(dtype_size(dtype));
  std::vector<std::uint8_t> poison_bytes = poison_element(dtype);
  std::uint64_t poison = 0;
  std::memcpy(&poison, poison_bytes.data(), poison_bytes.size());
  double atol = tolerance.atol;
  double rtol = tolerance.rtol;
  const std::uint64_t chunks = (count * static_cast<std::uint64_t>(size) + 15) / 16;
  int parts = static_cast<int>(blocks_for(chunks));  // the partials the record kernel sums
  CUdeviceptr partials = compare_partials_.ptr();
  {
    void* params[] = {&got, &sealed, &count, &kdtype, &size,    &stream_id,
                      &key, &poison, &atol,  &rtol,   &partials};
    launch(compare_sealed_, "cuLaunchKernelEx(kh_compare_sealed)", chunks, stream, params);
  }
  device::LaunchConfig config;
  config.block = {kThreads, 1, 1};
  config.stream = stream;
  void* params[] = {&partials, &parts,     &got, &sealed, &count,
                    &size,     &stream_id, &key, &nonce,  &record};
  config.grid = {1, 1, 1};
  device::Driver::instance().check(device::launch_kernel(compare_record_, config, params),
                                   "cuLaunchKernelEx(kh_compare_record)");
}

std::optional<CompareRecord> HarnessKernels::open_compare_record(const std::uint8_t* bytes,
                                                                 std::uint64_t key) {
  std::uint64_t w[kCompareWords];
  std::memcpy(w, bytes, sizeof w);
  if (compare_tag(w, key) != w[kCompareTag]) return std::nullopt;
  CompareRecord r;
  ElementwiseTotals& t = r.totals;
  t.elements = w[0];
  t.mismatches = w[1];
  t.first_bad = index_from_device(w[2]);
  t.max_abs = bits_double(w[3]);
  t.max_rel = bits_double(w[4]);
  t.poison = w[5];
  t.first_poison = index_from_device(w[6]);
  t.nonfinite = w[7];
  t.first_nonfinite = index_from_device(w[8]);
  t.reference_poison = w[9];
  r.differing = w[10];
  t.first_bad_expected = w[11];
  t.first_bad_got = w[12];
  t.nonfinite_expected = w[13];
  t.nonfinite_got = w[14];
  r.stream = w[15];
  r.nonce = w[16];
  return r;
}

std::vector<std::uint8_t> HarnessKernels::compare_record_bytes(const CompareRecord& r,
                                                               std::uint64_t key) {
  const ElementwiseTotals& t = r.totals;
  std::uint64_t w[kCompareWords] = {t.elements,
                                    t.mismatches,
                                    index_to_device(t.first_bad),
                                    double_bits(t.max_abs),
                                    double_bits(t.max_rel),
                                    t.poison,
                                    index_to_device(t.first_poison),
                                    t.nonfinite,
                                    index_to_device(t.first_nonfinite),
                                    t.reference_poison,
                                    r.differing,
                                    t.first_bad_expected,
                                    t.first_bad_got,
                                    t.nonfinite_expected,
                                    t.nonfinite_got,
                                    r.stream,
                                    r.nonce,
                                    0};
  w[kCompareTag] = compare_tag(w, key);
  std::vector<std::uint8_t> bytes(kCompareRecordBytes);
  std::memcpy(bytes.data(), w, sizeof w);
  return bytes;
}

void HarnessKernels::scrub_shared(std::uint32_t value, CUstream stream) const {
  if (shared_optin_ <= 0) return;
  std::uint64_t bytes = static_cast<std::uint64_t>(shared_optin_);
  void* params[] = {&bytes, &value};
  device::LaunchConfig config;
  config.grid = {static_cast<unsigned>(sm_count_), 1, 1};
  config.block = {kThreads, 1, 1};
  config.shared_bytes = static_cast<unsigned>(shared_optin_);
  config.stream = stream;
  device::Driver::instance().check(device::launch_kernel(scrub_shared_, config, params),
                                   "cuLaunchKernelEx(kh_scrub_shared)");
}

}  // namespace kharness::verify
