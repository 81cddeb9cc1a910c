// Output judging on the device, for the elementwise comparator (docs/correctness.md#comparison,
// docs/correctness.md#sealed-reference): no output leaves the device. The reference's outputs are
// sealed (HarnessKernels::seal: XORed with a ChaCha20 keystream under key_) into SealedCopy
// buffers before its own buffers are scrubbed and freed, the candidate's outputs are compared
// against them on the device (HarnessKernels::compare_sealed: compare_output's totals, bit for
// bit, finished on the host by elementwise_check), and for the determinism rerun the first run's
// outputs are sealed the same way and compared with the rerun's (the same kernel: its count of
// differing elements is the bitwise test, its totals the within-tolerance test).
//
// What a candidate (which runs after the reference, in the same context, and may read and write
// any device memory it can find) cannot do to the comparison:
// - read the answers from a copy: the copies hold ciphertext; key_ is drawn from the OS per
//   process, never derived from the recorded seed, and reaches the device only as a parameter of
//   the harness kernels; every seal takes its own keystream (seals_), so two copies XORed
//   together reveal nothing either.
// - write its own answer into a copy (a plain copy would then compare equal to anything it
//   wrote): without the key, whatever it writes decrypts to noise, which does not match; and
//   every copy is checksummed after it is sealed and again after the candidate's last run,
//   before any comparison counts, under a key too (sum_key_: a write cannot be made to keep
//   the checksum), so a write is harness_memory_modified. That also keeps XOR sealing's
//   malleability (flipping a ciphertext bit flips the same plaintext bit) out of reach, and
//   noise with the poison's bits in it from passing for a reference that left elements
//   unwritten (an internal error).
// - change or forge a comparison's result: the comparison runs after the candidate's launches
//   have finished (the launcher synchronises each one) and nothing of the candidate runs
//   until its record is read; every block writes its own partial (nothing left in the scratch
//   counts), and the record carries a tag under key_ binding it to its copy's keystream and a
//   fresh nonce: a record that does not verify is harness_memory_modified.
// tests/fixtures/cheats/overwrites_expected.cu tries the second; tests/gpu/
// harness_kernels_test.cpp tampers with copies and records directly.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "verify/evaluate.hpp"  // secret_key, splitmix
#include "verify/input_sets.hpp"
#include "verify/trial.hpp"

namespace kharness::verify {

class SealedJudge {
 public:
  // `inputs`: the memory rules, whose reads share each check's one wait.
  SealedJudge(TrialContext& context, const InputSets& inputs) : c_(context), inputs_(inputs) {}
  SealedJudge(const SealedJudge&) = delete;  // owns device buffers
  SealedJudge& operator=(const SealedJudge&) = delete;

  // Seals the reference's output `i` (`out`) into its sealed copy. Asynchronous.
  void seal_expected(const GuardedBuffer& out, std::size_t i, CUstream s);
  // Enqueues the keyed checksums of the reference's sealed copies on the context's reads (the
  // trial's checksums, one wait with the inputs'); after the wait, keep_expected_sums records
  // them as the copies' sealed state.
  std::vector<std::size_t> read_expected_sums(CUstream s);
  void keep_expected_sums(const std::vector<std::size_t>& slots);

  // The first run's outputs: the memory rules' reads, the sealed references' checksums and every
  // output's comparison, one wait; then the rules in the host path's order (memory, then each
  // output's output_failure), the sealed copies' integrity between the two. With `keep_first`
  // (a rerun follows), the outputs are also sealed into sealed_first_ and checksummed.
  std::optional<Failure> check(const TrialBuffers& b,
                               const std::map<std::string, std::uint64_t>& checksums,
                               bool keep_first, TrialResult& trial, CUstream s);

  // The determinism rerun, after its launch: the memory rules' reads, every sealed copy's
  // checksum and each output's comparison with the first run's sealed copy, one wait; then
  // judge_rerun (precedence.hpp): bitwise equal outputs pass; from the first that differs on, the
  // rerun is held to the reference (another wait) and each differing output to the first run's
  // within tolerance.
  std::optional<Failure> rerun(const TrialBuffers& b,
                               const std::map<std::string, std::uint64_t>& checksums,
                               TrialResult& trial, CUstream s);

 private:
  struct SealedCopy {
    device::DeviceBuffer buffer;  // reused across trials; grown when a trial needs more
    std::uint64_t stream = 0;     // its keystream
    std::uint64_t bytes = 0;      // the sealed bytes (the tensor's), padded to 16 in `buffer`
    std::uint64_t checksum = 0;
    std::size_t padded() const { return (bytes + 15) / 16 * 16; }
  };
  // Per output: the record's slot in the context's reads and the comparison's nonce.
  using Records = std::vector<std::pair<std::size_t, std::uint64_t>>;

  // Seals output `i` (`out`) into copies[i], under a keystream no other seal uses. Asynchronous.
  void seal_copy(const GuardedBuffer& out, std::vector<SealedCopy>& copies, std::size_t i,
                 CUstream s);
  // Enqueues the checksums of the copies on the context's reads; their slots.
  std::vector<std::size_t> read_sealed(const std::vector<SealedCopy>& copies, CUstream s);
  // harness_memory_modified when a copy's checksum (from read_sealed, after the wait) is not the
  // one it had when sealed. `whose`: whose outputs the copies hold.
  std::optional<Failure> sealed_failure(const std::vector<SealedCopy>& copies,
                                        const std::vector<std::size_t>& slots,
                                        const char* whose) const;
  // Enqueues the comparison of every output against `copies` on the context's reads.
  Records compare_all(const TrialBuffers& b, const std::vector<SealedCopy>& copies, CUstream s);
  // Output `t`'s record (after the wait): the record, or nullopt with `failure` set to the
  // harness_memory_modified of one that is not the one asked for (record_is_for).
  std::optional<CompareRecord> record_of(std::pair<std::size_t, std::uint64_t> slot,
                                         const SealedCopy& copy, const TensorSpec& t,
                                         std::optional<Failure>& failure) const;
  // check's loop over the records of compare_all: each output judged (judge_output) into
  // `trial`, the first failure returned.
  std::optional<Failure> judge(const Records& slots, const std::vector<SealedCopy>& copies,
                               TrialResult& trial) const;

  TrialContext& c_;
  const InputSets& inputs_;
  const std::uint64_t key_ = secret_key();  // seals the copies; never leaves the process
  const std::uint64_t sum_key_ = splitmix(key_ ^ 0x73756d6b6579ull);  // their checksums' key
  std::uint64_t seals_ = 0;                                 // keystreams used so far (one per seal)
  std::uint64_t nonces_ = 0;                                // comparisons enqueued so far
  std::vector<SealedCopy> sealed_expected_, sealed_first_;  // per output
};

}  // namespace kharness::verify
