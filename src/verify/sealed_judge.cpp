#include "verify/sealed_judge.hpp"

#include <algorithm>

#include "verify/precedence.hpp"

namespace kharness::verify {

void SealedJudge::seal_expected(const GuardedBuffer& out, std::size_t i, CUstream s) {
  seal_copy(out, sealed_expected_, i, s);
}

std::vector<std::size_t> SealedJudge::read_expected_sums(CUstream s) {
  return read_sealed(sealed_expected_, s);
}

void SealedJudge::keep_expected_sums(const std::vector<std::size_t>& slots) {
  for (std::size_t i = 0; i < slots.size(); ++i)
    sealed_expected_[i].checksum = c_.reads.checksum_result(slots[i]);
}

void SealedJudge::seal_copy(const GuardedBuffer& out, std::vector<SealedCopy>& copies,
                            std::size_t i, CUstream s) {
  if (copies.size() <= i) copies.resize(i + 1);
  SealedCopy& c = copies[i];
  c.bytes = out.bytes();
  if (c.buffer.size() < c.padded())
    c.buffer = device::DeviceBuffer(std::max<std::size_t>(16, c.padded()));
  c.stream = ++seals_;
  c_.kernels.seal(out.data(), c.buffer.ptr(), out.bytes(), key_, c.stream, s);
}

std::vector<std::size_t> SealedJudge::read_sealed(const std::vector<SealedCopy>& copies,
                                                  CUstream s) {
  std::vector<std::size_t> slots;
  for (const SealedCopy& c : copies)
    slots.push_back(c_.reads.checksum(c.buffer.ptr(), c.padded(), s, sum_key_));
  return slots;
}

std::optional<Failure> SealedJudge::sealed_failure(const std::vector<SealedCopy>& copies,
                                                   const std::vector<std::size_t>& slots,
                                                   const char* whose) const {
  std::vector<std::uint64_t> sealed, now;
  std::vector<std::string> tensors;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    sealed.push_back(copies[i].checksum);
    now.push_back(c_.reads.checksum_result(slots[i]));
    tensors.push_back(c_.def.outputs[i].name);
  }
  return sealed_copy_failure(sealed, now, tensors, whose);
}

SealedJudge::Records SealedJudge::compare_all(const TrialBuffers& b,
                                              const std::vector<SealedCopy>& copies, CUstream s) {
  Records out;
  for (std::size_t i = 0; i < c_.def.outputs.size(); ++i) {
    const TensorSpec& t = c_.def.outputs[i];
    const GuardedBuffer& got = *b.outputs.at(t.name);
    const std::uint64_t nonce = ++nonces_;
    out.emplace_back(c_.reads.compare_sealed(got.data(), copies.at(i).buffer.ptr(),
                                             got.bytes() / dtype_size(t.dtype), t.dtype, key_,
                                             copies[i].stream, c_.tolerance, nonce, s),
                     nonce);
  }
  return out;
}

std::optional<CompareRecord> SealedJudge::record_of(std::pair<std::size_t, std::uint64_t> slot,
                                                    const SealedCopy& copy, const TensorSpec& t,
                                                    std::optional<Failure>& failure) const {
  std::optional<CompareRecord> r = c_.reads.compare_result(slot.first, key_);
  if (record_is_for(r, copy.stream, slot.second, copy.bytes / dtype_size(t.dtype))) return r;
  failure = forged_record(t.name);
  return std::nullopt;
}

std::optional<Failure> SealedJudge::judge(const Records& slots,
                                          const std::vector<SealedCopy>& copies,
                                          TrialResult& trial) const {
  for (std::size_t i = 0; i < c_.def.outputs.size(); ++i) {
    const TensorSpec& t = c_.def.outputs[i];
    std::optional<Failure> forged;
    const std::optional<CompareRecord> r = record_of(slots[i], copies[i], t, forged);
    if (!r) return forged;
    const OutputCheck check = elementwise_check(t.name, t.dtype, r->totals);
    if (auto f = judge_output(t.name, check, c_.tolerance, trial)) return f;
  }
  return std::nullopt;
}

std::optional<Failure> SealedJudge::check(const TrialBuffers& b,
                                          const std::map<std::string, std::uint64_t>& checksums,
                                          bool keep_first, TrialResult& trial, CUstream s) {
  c_.reads.clear();
  const InputSets::MemoryReads memory = inputs_.read_memory(b, c_.reads, s);
  const std::vector<std::size_t> sealed = read_sealed(sealed_expected_, s);
  const Records records = compare_all(b, sealed_expected_, s);
  std::vector<std::size_t> first_sums;
  if (keep_first) {
    for (std::size_t i = 0; i < c_.def.outputs.size(); ++i)
      seal_copy(*b.outputs.at(c_.def.outputs[i].name), sealed_first_, i, s);
    first_sums = read_sealed(sealed_first_, s);
  }
  c_.reads.wait(s);
  if (auto f = InputSets::memory_failure(memory, c_.reads, checksums)) return f;
  if (auto f = sealed_failure(sealed_expected_, sealed, "the reference")) return f;
  if (auto f = judge(records, sealed_expected_, trial)) return f;
  for (std::size_t i = 0; i < first_sums.size(); ++i)
    sealed_first_[i].checksum = c_.reads.checksum_result(first_sums[i]);
  return std::nullopt;
}

std::optional<Failure> SealedJudge::rerun(const TrialBuffers& b,
                                          const std::map<std::string, std::uint64_t>& checksums,
                                          TrialResult& trial, CUstream s) {
  c_.reads.clear();
  const InputSets::MemoryReads memory = inputs_.read_memory(b, c_.reads, s);
  const std::vector<std::size_t> sealed = read_sealed(sealed_expected_, s);
  const std::vector<std::size_t> first = read_sealed(sealed_first_, s);
  const Records records = compare_all(b, sealed_first_, s);
  c_.reads.wait(s);
  if (auto f = InputSets::memory_failure(memory, c_.reads, checksums)) return on_rerun(*f);
  if (auto f = sealed_failure(sealed_expected_, sealed, "the reference")) return f;
  if (auto f = sealed_failure(sealed_first_, first, "the first run")) return f;
  std::vector<CompareRecord> against_first;
  std::vector<std::uint64_t> differing;
  std::vector<std::string> tensors;
  for (std::size_t i = 0; i < c_.def.outputs.size(); ++i) {
    std::optional<Failure> forged;
    auto r = record_of(records[i], sealed_first_[i], c_.def.outputs[i], forged);
    if (!r) return forged;
    against_first.push_back(*r);
    differing.push_back(r->differing);
    tensors.push_back(c_.def.outputs[i].name);
  }
  RerunJudges judges;
  // No candidate code has run since the copies' checksums were read.
  judges.against_reference = [&] {
    c_.reads.clear();
    const Records again = compare_all(b, sealed_expected_, s);
    c_.reads.wait(s);
    TrialResult rerun;  // the reference's comparisons of the rerun are not the trial's
    return judge(again, sealed_expected_, rerun);
  };
  judges.against_first = [&](std::size_t i) {
    const TensorSpec& t = c_.def.outputs[i];
    return output_failure(elementwise_check(t.name, t.dtype, against_first[i].totals),
                          c_.tolerance);
  };
  return judge_rerun(differing, tensors, judges, trial);
}

}  // namespace kharness::verify
