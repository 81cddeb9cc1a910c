#include "verify/input_sets.hpp"

#include <fmt/format.h>

#include "kharness/error.hpp"
#include "kharness/expr.hpp"
#include "kharness/numeric.hpp"
#include "verify/index_inputs.hpp"
#include "verify/precedence.hpp"

namespace kharness::verify {
namespace {

using device::Driver;

InputGenerator generator_for(const Definition& d, const TensorSpec& t) {
  if (auto it = d.kharness.inputs.find(t.name); it != d.kharness.inputs.end()) return it->second;
  InputGenerator g;  // floats: standard normal; integers without a declared role: small values
  if (!is_floating(t.dtype)) {
    g.distribution = "range";
    g.low = 0;
    g.high = t.dtype == DType::kBool ? 1 : 15;
  }
  return g;
}

}  // namespace

void InputSets::make_inputs(const Workload& w, std::uint64_t seed, TrialBuffers& b, CUstream s) {
  const Definition& def = c_.def;
  b.env.definition = &def;
  b.env.axes = w.bindings(def);
  IndexValues index_values;  // for the roles that couple inputs (a covering indptr)
  for (std::size_t i = 0; i < def.inputs.size(); ++i) {
    const TensorSpec& t = def.inputs[i];
    const WorkloadInput& in = w.inputs.at(t.name);
    if (t.is_scalar()) {
      b.env.scalars[t.name] = in.value;
      continue;
    }
    std::uint64_t count = element_count(t, b.env.axes);
    std::unique_ptr<GuardedBuffer> buf;
    if (auto kept = b.inputs.find(t.name); kept != b.inputs.end()) {
      buf = std::move(kept->second);
      if (in.kind == WorkloadInput::Kind::kSafetensors) {
        b.inputs[t.name] = std::move(buf);
        continue;
      }
    } else {
      buf = std::make_unique<GuardedBuffer>(t.name, count * dtype_size(t.dtype));
      buf->fill_guards(c_.kernels, s);
    }
    InputGenerator gen = generator_for(def, t);
    // Bounds given as expressions over the axes take this workload's values.
    for (const char* key : {"low", "high"}) {
      auto it = gen.extra.find(std::string(key) + "_expr");
      if (it == gen.extra.end()) continue;
      double v = static_cast<double>(Expr::parse(it->get<std::string>()).eval(b.env.axes));
      (std::string(key) == "low" ? gen.low : gen.high) = v;
    }
    if (in.kind == WorkloadInput::Kind::kSafetensors) {
      upload_safetensors(t, in, count, *buf, s);
    } else if (gen.distribution == "probability_rows") {
      // Rows of probabilities, tens of millions of values a set: made on the device, as the
      // host's generator makes them from the seed an index role would get (bit for bit).
      const ProbabilityRowsShape shape = probability_rows_shape(t, gen, b.env.axes, count);
      c_.kernels.probability_rows(buf->data(), shape.rows, shape.vocab, gen.std,
                                  splitmix(seed ^ (i + 1)), s);
    } else if (is_index_role(gen.distribution)) {
      // Offsets and ids must be valid for their role: made on the host, from the same seed.
      auto bytes =
          make_index_input(t, gen, b.env.axes, count, splitmix(seed ^ (i + 1)), &index_values);
      const Driver& d = Driver::instance();
      // Stream-ordered after the guard fills; a pageable source is staged before the call
      // returns.
      if (!bytes.empty()) {
        d.check(d.cuMemcpyHtoDAsync(buf->data(), bytes.data(), bytes.size(), s),
                "cuMemcpyHtoDAsync");
      }
    } else {
      c_.kernels.fill_random(buf->data(), count, t.dtype, gen, seed, i, s);
    }
    b.env.tensors[t.name] = buf->data();
    b.inputs[t.name] = std::move(buf);
  }
}

void InputSets::upload_safetensors(const TensorSpec& t, const WorkloadInput& in,
                                   std::uint64_t count, GuardedBuffer& buf, CUstream s) {
  // Not found: open() names the path as written.
  std::filesystem::path path = workload_input_file(c_.op, in.path).value_or(in.path);
  auto& file = safetensors_[path.string()];
  if (!file) file = std::make_unique<SafetensorsFile>(SafetensorsFile::open(path));
  const SafetensorsTensor& tensor = file->tensor(in.tensor_key);
  if (tensor.dtype != t.dtype || tensor.element_count() != count) {
    throw input_error(fmt::format("{}: {}", path.string(), in.tensor_key),
                      fmt::format("is {} with {} elements; {} needs {} with {}",
                                  SafetensorsFile::dtype_name(tensor.dtype), tensor.element_count(),
                                  t.name, dtype_name(t.dtype), count));
  }
  const Driver& d = Driver::instance();
  d.check(d.cuMemcpyHtoDAsync(buf.data(), tensor.data, tensor.bytes, s), "cuMemcpyHtoDAsync");
}

void InputSets::make_outputs(TrialBuffers& b, const LaunchPlan& plan, CUstream s,
                             const IterationPoison* poison) const {
  const Definition& def = c_.def;
  for (std::size_t i = 0; i < def.outputs.size(); ++i) {
    const TensorSpec& t = def.outputs[i];
    std::uint64_t count = element_count(t, b.env.axes);
    auto buf = std::make_unique<GuardedBuffer>(t.name, count * dtype_size(t.dtype));
    buf->fill_guards(c_.kernels, s);
    c_.kernels.fill_pattern(buf->data(), buf->bytes(),
                            poison ? poison->outputs.at(i) : poison_element(t.dtype), s);
    b.env.tensors[t.name] = buf->data();
    b.outputs[t.name] = std::move(buf);
  }
  std::int64_t ws = plan.workspace_bytes.eval(b.env.axes);
  if (ws > 0) {
    b.workspace = std::make_unique<GuardedBuffer>("workspace", static_cast<std::size_t>(ws));
    b.workspace->fill_guards(c_.kernels, s);
    c_.kernels.fill_pattern(b.workspace->data(), b.workspace->bytes(), kWorkspacePoison, s);
    b.env.workspace = b.workspace->data();
  } else {
    b.workspace.reset();
    b.env.workspace = 0;
  }
}

void InputSets::poison(TrialBuffers& b, const IterationPoison& poison, CUstream s) const {
  for (std::size_t i = 0; i < c_.def.outputs.size(); ++i) {
    const GuardedBuffer& out = *b.outputs.at(c_.def.outputs[i].name);
    c_.kernels.fill_pattern(out.data(), out.bytes(), poison.outputs.at(i), s);
  }
  if (b.workspace)
    c_.kernels.fill_pattern(b.workspace->data(), b.workspace->bytes(), kWorkspacePoison, s);
}

void InputSets::normalise_poison(TrialBuffers& b, const IterationPoison& poison, CUstream s) const {
  for (std::size_t i = 0; i < c_.def.outputs.size(); ++i) {
    const TensorSpec& t = c_.def.outputs[i];
    const GuardedBuffer& out = *b.outputs.at(t.name);
    c_.kernels.replace_element(out.data(), out.bytes(), poison.outputs.at(i),
                               poison_element(t.dtype), s);
  }
}

void InputSets::scrub_outputs(TrialBuffers& b, CUstream s) const {
  for (const auto& t : c_.def.outputs) {
    const GuardedBuffer& out = *b.outputs.at(t.name);
    c_.kernels.fill_pattern(out.data(), out.bytes(), poison_element(t.dtype), s);
  }
  if (b.workspace)
    c_.kernels.fill_pattern(b.workspace->data(), b.workspace->bytes(), kWorkspacePoison, s);
}

InputSets::MemoryReads InputSets::read_memory(const TrialBuffers& b,
                                              HarnessKernels::ReadBatch& reads, CUstream s,
                                              bool inputs) const {
  MemoryReads r;
  std::vector<const GuardedBuffer*> all;
  for (const auto& [name, buf] : b.inputs) all.push_back(buf.get());
  for (const auto& [name, buf] : b.outputs) all.push_back(buf.get());
  if (b.workspace) all.push_back(b.workspace.get());
  for (const GuardedBuffer* buf : all) r.guards.emplace_back(buf, buf->read_guards(reads, s));
  if (inputs) r.inputs = read_checksums(b, reads, s);
  return r;
}

std::vector<std::pair<std::string, std::size_t>> InputSets::read_checksums(
    const TrialBuffers& b, HarnessKernels::ReadBatch& reads, CUstream s) {
  std::vector<std::pair<std::string, std::size_t>> slots;
  for (const auto& [name, buf] : b.inputs)
    slots.emplace_back(name, reads.checksum(buf->data(), buf->bytes(), s));
  return slots;
}

std::optional<Failure> InputSets::memory_failure(
    const MemoryReads& r, const HarnessKernels::ReadBatch& reads,
    const std::map<std::string, std::uint64_t>& checksums) {
  std::vector<GuardState> guards;
  for (const auto& [buf, slots] : r.guards)
    guards.push_back({buf->name(), buf->bytes(), buf->guard_damage(reads, slots)});
  std::vector<InputState> inputs;
  for (const auto& [name, slot] : r.inputs)
    inputs.push_back({name, reads.checksum_result(slot), checksums.at(name)});
  return verify::memory_failure(guards, inputs);
}

std::optional<Failure> InputSets::check_memory(
    const TrialBuffers& b, const std::map<std::string, std::uint64_t>& checksums, CUstream s) {
  c_.reads.clear();
  const MemoryReads r = read_memory(b, c_.reads, s);
  c_.reads.wait(s);
  return memory_failure(r, c_.reads, checksums);
}

}  // namespace kharness::verify
