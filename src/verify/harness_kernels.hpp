// Harness-internal device kernels: random inputs, poison and guard patterns, checksums, sealed
// reference copies and the comparisons against them.
//
// One CUDA C++ source (source()) compiled with NVRTC for the device's arch and loaded as a module
// in the current context. The cubin is cached in the compile cache folder under a key over the
// source, the NVRTC version, the arch and the options (so a toolkit or source change recompiles),
// and memoised per process, so after the first run constructing HarnessKernels costs a module
// load. These kernels are trusted harness code: they do not go through the solution rules of
// compile_solution().
//
// Every kernel takes 64-bit sizes and indices and loops grid-stride, so regions up to (and past)
// 2^34 bytes work and results never depend on the launch geometry. Memory-bound kernels move 16
// bytes per thread per iteration; a region needs no alignment beyond its element size.
//
// Random inputs (fill_random): element i of a fill is a pure function of (seed, stream_id, i,
// the generator, the dtype): Philox4x32-10 with key = seed and counter = (draw index, stream_id),
// one draw per group of 4 elements (two for "range"). So a fill of n elements is a prefix of a
// fill of m > n elements, and two fills with different (seed, stream_id) are independent.
//   "normal"   mean + std * z, z from Box-Muller (precise logf, sincospif) on 24-bit uniforms:
//              |z| <= 5.9
//   "uniform"  low + (high - low) * u, u in [0, 1) with 24 bits; after rounding to the dtype
//              values lie in [low, high] when low and high are representable in it
//   "range"    integers uniform in [ceil(low), floor(high)] (64-bit draw, multiply-high
//              mapping: bias below 2^-64 * span), bounds clamped to the dtype's range
//   "constant" every element = the generator's "value" (kept in InputGenerator::extra) or,
//              without one, its mean; written with fill_pattern, exactly (numeric.hpp rounding)
// Float values are computed in float and rounded to nearest even into the dtype (bf16/fp16
// intrinsics; fp8 with __nv_cvt_float2_to_fp8x2, satfinite), so they equal from_double() of the
// float value. Integer dtypes take "normal"/"uniform" values rounded to nearest even and
// saturated; bool stores (rounded value != 0), so normal(0, 1) gives about 38% false. "range"
// into a float dtype converts the integer to float first (exact below 2^24).
// Other roles ("indptr", "indices", "scale") need the tensor's axes and its neighbours: the
// correctness stage generates them on the host; validate() refuses them here.
// "normal" with std == 0 and "uniform" with low == high are refused (use "constant"), as is a
// generator whose values would all round to 0 in the dtype: inputs are never all zeros.
#pragma once

#include <cuda.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "device/driver.hpp"
#include "kharness/compile.hpp"
#include "kharness/definition.hpp"
#include "kharness/dtype.hpp"
#include "verify/compare.hpp"

namespace kharness::verify {

struct PatternCheck {
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::size_t mismatches = 0;              // bytes that differ from the pattern
  std::size_t first_mismatch_byte = npos;  // offset from the region's start of the first
  bool ok() const { return mismatches == 0; }
};

// One check of one output tensor of one iteration against its sealed reference, as the device
// recorded it (kh_check_sealed + kh_seal_record). Indices are npos where there is none.
struct CheckRecord {
  static constexpr std::uint64_t npos = ~0ull;
  std::uint64_t iteration = 0;
  std::uint64_t tensor = 0;
  std::uint64_t elements = 0;
  std::uint64_t unwritten = 0;  // elements still holding this iteration's poison
  std::uint64_t first_unwritten = npos;
  std::uint64_t nonfinite = 0;  // NaN/Inf where the reference is finite
  std::uint64_t first_nonfinite = npos;
  std::uint64_t mismatches = 0;  // abs > atol and rel > rtol (or a non-finite reference differs)
  std::uint64_t first_mismatch = npos;
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;
  std::uint64_t first_index = npos;  // the failing element the bits below belong to
  std::uint64_t expected_bits = 0;   // that element's bits (zero-extended)
  std::uint64_t got_bits = 0;
  std::uint64_t stream = 0;  // the keystream the reference was sealed with
};
inline constexpr std::size_t kCheckRecordBytes = 128;

// A point reference compares only the rows drawn for an iteration, gathered one after another:
// element `gathered` of that comparison is element place_in_rows(...) of the whole output (row
// picked[gathered / row_elements], the same column). place_point_record moves a record's indices
// (first failing element, first unwritten, non-finite, mismatch) to their places in the output.
std::uint64_t place_in_rows(std::uint64_t gathered, const std::vector<std::uint32_t>& picked,
                            std::uint64_t row_elements);
void place_point_record(CheckRecord& record, const std::vector<std::uint32_t>& picked,
                        std::uint64_t row_elements);

// One comparison of a correctness trial's output on the device (compare_sealed), as read back and
// authenticated: the totals compare_output reduces the same two tensors to (verify/compare.hpp),
// bit for bit, the number of elements whose bits differ (the determinism rerun's bitwise test),
// and what the record is bound to.
struct CompareRecord {
  ElementwiseTotals totals;
  std::uint64_t differing = 0;
  std::uint64_t stream = 0;  // the keystream the expected copy was sealed with
  std::uint64_t nonce = 0;   // the caller's number for this comparison
};
inline constexpr std::size_t kCompareRecordBytes = 144;

struct HarnessKernelsOptions {
  std::string arch;                                       // empty: the current context's device
  std::filesystem::path cache_dir = default_cache_dir();  // empty: no disk cache
  bool use_cache = true;
  std::filesystem::path cuda_include_dir;  // empty: default_cuda_include_dir()
};

// A compiled image of source() (no GPU needed).
struct HarnessImage {
  std::string arch;
  std::string cubin;
  std::string cache_key;
  std::string log;  // NVRTC's log (empty on a cache hit)
  bool cache_hit = false;
  double seconds = 0.0;
};

// The seal's keystream as the kernels compute it (kh_chacha20_block, kh_seal_key, kh_keystream in
// the source), on the host, for tests.
//   chacha20_block: RFC 8439 section 2.3's block function (20 rounds), the 16 output words.
//   seal_key: the 256-bit key expanded from the 64-bit process key.
//   seal_keystream: the 16 bytes (four little-endian words) XORed into chunk `chunk` (16 bytes at
//   offset 16 * chunk) of a copy sealed under `key` and `stream_id`.
std::array<std::uint32_t, 16> chacha20_block(const std::array<std::uint32_t, 8>& key,
                                             std::uint32_t counter,
                                             const std::array<std::uint32_t, 3>& nonce);
std::array<std::uint32_t, 8> seal_key(std::uint64_t key);
std::array<std::uint32_t, 4> seal_keystream(std::uint64_t chunk, std::uint64_t stream_id,
                                            std::uint64_t key);

class HarnessKernels {
 public:
  // Needs a current context (device::PrimaryContext); the kernels live as long as this object,
  // which must not outlive the context. Throws device::CudaError, or kharness::Error
  // (environment: no NVRTC or toolkit headers; internal: the source does not compile).
  explicit HarnessKernels(const HarnessKernelsOptions& options = {});

  HarnessKernels(const HarnessKernels&) = delete;
  HarnessKernels& operator=(const HarnessKernels&) = delete;
  HarnessKernels(HarnessKernels&&) noexcept = default;
  HarnessKernels& operator=(HarnessKernels&&) noexcept = default;

  // `count` elements of `dtype` at `p` (p aligned to the element size), drawn as described
  // above. Asynchronous on `stream`. Throws input_error for a generator validate() refuses.
  void fill_random(CUdeviceptr p, std::size_t count, DType dtype, const InputGenerator& gen,
                   std::uint64_t seed, std::uint64_t stream_id, CUstream stream) const;

  // `rows` rows of `vocab` float32 probabilities at `p` (4-byte aligned), as the host's
  // make_probability_rows(rows, vocab, std, seed) makes them, bit for bit
  // (verify/probability_rows_core.hpp): a block per row. Asynchronous on `stream`; the first call
  // for a `std` uploads its table (2^16 + 1 doubles, kept while this object lives).
  void probability_rows(CUdeviceptr p, std::uint64_t rows, std::uint64_t vocab, double std,
                        std::uint64_t seed, CUstream stream) const;

  // Repeats `element_pattern` (1, 2, 4 or 8 bytes) over `bytes` bytes at `p`; p and bytes are
  // multiples of the pattern size. Asynchronous. Used for poison, guard zones and scrubbing.
  void fill_pattern(CUdeviceptr p, std::size_t bytes,
                    const std::vector<std::uint8_t>& element_pattern, CUstream stream) const;

  // An order-independent 64-bit hash of `bytes` bytes at `p` (any alignment): the sum over the
  // region's 8-byte words w_i (a short last word zero-padded) of a per-index bijection of w_i,
  // finished with the length. Equal bytes hash equal; changing any one word (so any single bit)
  // always changes it. Synchronises `stream`.
  // Reads every byte of the region (the checksum kernel, result discarded) without waiting for it.
  // The timing stage runs it after its L2-flush write so that L2 holds clean lines: dirty ones
  // would be written back during the next timed kernel and slow it down.
  void read_through(CUdeviceptr p, std::size_t bytes, CUstream stream) const;
  // With a nonzero `key` the per-index bijections depend on it (index XOR key): a kernel that does
  // not know the key cannot change the region and keep its checksum, as it can the unkeyed one
  // (key 0, the memory rules' checksums) by adjusting a second word. The sealed copies' checksum.
  std::uint64_t checksum(CUdeviceptr p, std::size_t bytes, CUstream stream,
                         std::uint64_t key = 0) const;

  // Compares `bytes` bytes at `p` against `element_pattern` repeated (as fill_pattern writes
  // it). Synchronises `stream`.
  PatternCheck check_pattern(CUdeviceptr p, std::size_t bytes,
                             const std::vector<std::uint8_t>& element_pattern,
                             CUstream stream) const;

  // Reads whose results come back with one wait: the memory rules' guard-zone and checksum reads
  // of a trial, or of every input set after a batch of timed iterations, one stream
  // synchronisation for all of them instead of one each (on an H200 a wait costs ~30 us, and a
  // harvest of rmsnorm's three input sets made 54). Each read takes a 16-byte slot of device
  // memory; results are those of checksum() and check_pattern() above.
  class ReadBatch {
   public:
    explicit ReadBatch(const HarnessKernels& kernels) : kernels_(&kernels) {}
    // Enqueue a read; returns its slot. Asynchronous.
    std::size_t checksum(CUdeviceptr p, std::size_t bytes, CUstream stream, std::uint64_t key = 0);
    std::size_t check_pattern(CUdeviceptr p, std::size_t bytes,
                              const std::vector<std::uint8_t>& element_pattern, CUstream stream);
    // Copies every slot back and waits for `stream`; the results below are valid until clear().
    void wait(CUstream stream);
    // compare_sealed() below into the batch's memory (kCompareRecordBytes / 16 slots).
    std::size_t compare_sealed(CUdeviceptr got, CUdeviceptr sealed, std::uint64_t count,
                               DType dtype, std::uint64_t key, std::uint64_t stream_id,
                               const Tolerance& tolerance, std::uint64_t nonce, CUstream stream);
    std::uint64_t checksum_result(std::size_t slot) const;
    PatternCheck pattern_result(std::size_t slot) const;
    // open_compare_record() of the record in `slot`.
    std::optional<CompareRecord> compare_result(std::size_t slot, std::uint64_t key) const;
    // Forgets the reads (their device slots are reused by the next ones).
    void clear();

   private:
    // The first of `n` consecutive slots.
    std::size_t slot(CUstream stream, std::size_t n = 1);
    const HarnessKernels* kernels_;
    device::DeviceBuffer slots_;
    std::size_t used_ = 0;
    std::vector<std::uint64_t> bytes_;  // per slot: the region's length (checksums)
    std::vector<std::uint64_t> host_;   // two words per slot, after wait()
  };

  // Sealed references (docs/correctness.md#sealed-reference): `dst` = `src` XOR a ChaCha20
  // keystream under `key` for `stream_id` (16-byte chunks; both 16-byte aligned, readable and
  // writable up to the next 16-byte boundary). A candidate that finds `dst` cannot read the
  // reference's answers in it without the key, which only ever travels as a parameter of these
  // kernels.
  void seal(CUdeviceptr src, CUdeviceptr dst, std::size_t bytes, std::uint64_t key,
            std::uint64_t stream_id, CUstream stream) const;

  // Enqueues the elementwise check of `count` elements of `dtype` at `got` against the reference
  // sealed at `sealed` (same key and stream_id), by compare_output's rules (verify/compare.hpp)
  // with `poison_bits` (this iteration's poison element) marking unwritten elements, and writes
  // a 128-byte CheckRecord with a tag under `key` to `record` (device memory). Asynchronous;
  // calls on one HarnessKernels share its scratch, so keep them on one stream.
  void check_sealed(CUdeviceptr got, CUdeviceptr sealed, std::uint64_t count, DType dtype,
                    std::uint64_t key, std::uint64_t stream_id, std::uint64_t poison_bits,
                    double atol, double rtol, std::uint64_t iteration, std::uint64_t tensor,
                    CUdeviceptr record, CUstream stream) const;

  // A record read back from the device; nullopt when its tag does not verify under `key` (a
  // record some kernel overwrote, forged or erased).
  static std::optional<CheckRecord> open_record(const std::uint8_t* bytes, std::uint64_t key);

  // The correctness trials' comparison (docs/correctness.md#comparison), on the device: enqueues
  // the comparison of `count` elements of `dtype` at `got` against the expected copy sealed at
  // `sealed` (seal() with the same key and stream_id), by compare_output's rules
  // (verify/compare.hpp, ElementwiseTotals) with poison_element(dtype) marking unwritten elements
  // on both sides, and writes a kCompareRecordBytes record tagged under `key` (its totals, the
  // count of elements whose bits differ, stream_id and `nonce`) to `record` (device memory, 8-byte
  // aligned). `got` and `sealed` are 16-byte aligned and readable up to the next 16-byte boundary
  // (elements past `count` are not compared). Asynchronous; calls on one HarnessKernels share its
  // scratch, so keep them on one stream.
  void compare_sealed(CUdeviceptr got, CUdeviceptr sealed, std::uint64_t count, DType dtype,
                      std::uint64_t key, std::uint64_t stream_id, const Tolerance& tolerance,
                      std::uint64_t nonce, CUdeviceptr record, CUstream stream) const;
  // A compare record read back from the device; nullopt when its tag does not verify under `key`.
  static std::optional<CompareRecord> open_compare_record(const std::uint8_t* bytes,
                                                          std::uint64_t key);
  // The kCompareRecordBytes bytes the device writes for `record` under `key`: the host's twin of
  // the kernel's encoding and tag (open_compare_record's inverse; the tests hold the two together).
  static std::vector<std::uint8_t> compare_record_bytes(const CompareRecord& record,
                                                        std::uint64_t key);

  // Every `from.size()`-byte element at `p` (`bytes` bytes, aligned to the element) whose bytes
  // are `from` becomes `to`. Asynchronous. The correctness trials poison outputs as timed
  // iterations do and turn what is left of it into the fixed poison the comparators know.
  void replace_element(CUdeviceptr p, std::size_t bytes, const std::vector<std::uint8_t>& from,
                       const std::vector<std::uint8_t>& to, CUstream stream) const;

  // The point reference of timed iterations: packs rows `rows` (at most kMaxGatherRows, each
  // below the tensor's row count) of the row-major tensor at `src`, `row_bytes` bytes a row, in
  // that order at `dst`. Asynchronous.
  static constexpr std::size_t kMaxGatherRows = 256;  // KH_MAX_ROWS
  void gather_rows(CUdeviceptr src, CUdeviceptr dst, std::uint64_t row_bytes,
                   const std::vector<std::uint32_t>& rows, CUstream stream) const;

  // Writes `value` over all the shared memory of every SM (one block of the largest opt-in size
  // per SM). Asynchronous.
  void scrub_shared(std::uint32_t value, CUstream stream) const;

  // Throws input_error(where, ...) when fill_random cannot draw `gen` for `dtype` (see above).
  static void validate(const InputGenerator& gen, DType dtype, const std::string& where);

  const std::string& arch() const { return arch_; }
  bool cache_hit() const { return cache_hit_; }  // the cubin came from the disk cache

  // The CUDA C++ source of the kernels.
  static const std::string& source();
  // Compiles source() for options.arch (required; normalised), through the cache. No GPU.
  static HarnessImage build(const HarnessKernelsOptions& options);

 private:
  // Blocks of kThreads for `work_items` items, at most kBlocksPerSm a multiprocessor.
  std::uint64_t blocks_for(std::uint64_t work_items) const;
  void launch(CUfunction f, const char* name, std::uint64_t work_items, CUstream stream,
              void** params) const;
  // The checksum and pattern-check kernels writing their result to the 16 bytes at `out`.
  void enqueue_checksum(CUdeviceptr p, std::size_t bytes, CUdeviceptr out, CUstream stream,
                        std::uint64_t key = 0) const;
  void enqueue_check_pattern(CUdeviceptr p, std::size_t bytes,
                             const std::vector<std::uint8_t>& element_pattern, CUdeviceptr out,
                             CUstream stream) const;
  static std::uint64_t finish_checksum(std::uint64_t sum, std::size_t bytes);
  static PatternCheck finish_pattern(const std::uint64_t words[2]);

  std::string arch_;
  bool cache_hit_ = false;
  int sm_count_ = 1;
  std::optional<device::Module> module_;  // set by the constructor
  device::DeviceBuffer scratch_;          // 16 bytes: checksum and check_pattern results
  CUfunction fill_random_ = nullptr;
  CUfunction fill_pattern_ = nullptr;
  CUfunction checksum_ = nullptr;
  device::DeviceBuffer sink_;  // read_through's discarded result
  CUfunction check_pattern_ = nullptr;
  CUfunction seal_ = nullptr;
  CUfunction check_sealed_ = nullptr;
  CUfunction seal_record_ = nullptr;
  CUfunction scrub_shared_ = nullptr;
  CUfunction probability_rows_ = nullptr;
  CUfunction gather_rows_ = nullptr;
  CUfunction replace_element_ = nullptr;
  mutable std::map<double, device::DeviceBuffer> probability_tables_;  // by std
  int shared_optin_ = 0;           // bytes of dynamic shared memory a block may opt into
  device::DeviceBuffer partials_;  // check_sealed's per-block partial results
  CUfunction compare_sealed_ = nullptr;
  CUfunction compare_record_ = nullptr;
  device::DeviceBuffer compare_partials_;  // compare_sealed's per-block partial totals
};

// The L2 flush before every timed iteration (bench) and every profiled pass (profile), outside
// the measured span: a buffer of twice the L2's size written with a new value each time, then
// read `reads` times, so the next kernel finds none of its data in L2 and L2 holds clean lines
// (dirty ones would be written back inside the measurement: on an H200 a 20 us copy read 12%
// slow). The timing stage reads once; the profile stage twice (its dram__bytes_write counts
// what one read leaves dirty). Asynchronous on the stream.
class L2Flush {
 public:
  // `l2_bytes`: the GPU's L2 size (64 MiB assumed when 0). Needs a current context.
  L2Flush(std::size_t l2_bytes, int reads);
  void operator()(const HarnessKernels& kernels, CUstream stream);

 private:
  device::DeviceBuffer buffer_;
  int reads_;
  unsigned value_ = 0;
};

}  // namespace kharness::verify
