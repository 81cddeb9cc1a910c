#include "verify/trial.hpp"

#include <fmt/format.h>

#include "kharness/error.hpp"
#include "kharness/text.hpp"
#include "verify/evaluate.hpp"  // effective_tolerance
#include "verify/precedence.hpp"

namespace kharness::verify {

using device::Driver;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

HostBytes::~HostBytes() {
  if (data_) Driver::instance().cuMemFreeHost(data_);
}

void HostBytes::resize(std::size_t n) {
  if (n > capacity_) {
    const Driver& d = Driver::instance();
    if (data_) d.cuMemFreeHost(data_);
    data_ = nullptr;
    capacity_ = 0;
    void* p = nullptr;
    d.check(d.cuMemAllocHost(&p, n), "cuMemAllocHost");
    data_ = static_cast<std::uint8_t*>(p);
    capacity_ = n;
  }
  size_ = n;
}

void GuardedBuffer::fill_guards(const HarnessKernels& k, CUstream s) const {
  k.fill_pattern(buffer_.ptr(), kGuardBytes, kGuardPattern, s);
  k.fill_pattern(data() + bytes_, kGuardBytes, kGuardPattern, s);
}

std::pair<std::size_t, std::size_t> GuardedBuffer::read_guards(HarnessKernels::ReadBatch& reads,
                                                               CUstream s) const {
  const std::size_t before = reads.check_pattern(buffer_.ptr(), kGuardBytes, kGuardPattern, s);
  return {before, reads.check_pattern(data() + bytes_, kGuardBytes, kGuardPattern, s)};
}

std::optional<std::int64_t> GuardedBuffer::guard_damage(
    const HarnessKernels::ReadBatch& reads, std::pair<std::size_t, std::size_t> slots) const {
  return verify::guard_damage(reads.pattern_result(slots.first), reads.pattern_result(slots.second),
                              bytes_, kGuardBytes);
}

void GuardedBuffer::download(HostBytes& out) const {
  out.resize(bytes_);
  if (bytes_) buffer_.download(out.data(), bytes_, kGuardBytes);
}

std::uint64_t element_count(const TensorSpec& t, const Bindings& axes) {
  std::uint64_t n = 1;
  for (auto d : tensor_shape(t, axes)) n *= static_cast<std::uint64_t>(d);
  return n;
}

std::size_t workload_index(const Operator& op, const Workload& w) {
  for (std::size_t i = 0; i < op.workloads.size(); ++i) {
    if (&op.workloads[i] == &w) return i;
  }
  return 0;
}

IterationPoison trial_poison(const Definition& definition, std::uint64_t seed) {
  return iteration_poison(definition, splitmix(seed ^ 0x706f69736f6e0000ull));
}

TrialContext::TrialContext(const Operator& op, const CheckOptions& options)
    : op(op),
      def(op.definition),
      tolerance(effective_tolerance(op.definition, options)),
      comparator(find_comparator(op.definition.kharness.comparator)),
      sampling(op.definition.kharness.comparator == "sampling") {
  if (!comparator) {
    throw input_error(
        op.definition_file.string() + ": kharness.comparator",
        fmt::format("unknown comparator '{}' (known: {})", op.definition.kharness.comparator,
                    join(comparator_names(), ", ")));
  }
  if (sampling && def.outputs.size() != 1) {
    throw input_error(op.definition_file.string() + ": kharness.comparator",
                      "the sampling comparator judges one output of draws");
  }
}

}  // namespace kharness::verify
