#include "verify/host_judge.hpp"

#include "verify/precedence.hpp"

namespace kharness::verify {

void HostJudge::download_outputs(const TrialBuffers& b, std::vector<HostBytes>& got) const {
  got.resize(c_.def.outputs.size());
  for (std::size_t i = 0; i < c_.def.outputs.size(); ++i)
    b.outputs.at(c_.def.outputs[i].name)->download(got[i]);
}

CompareContext HostJudge::compare_context(const TrialBuffers& b,
                                          std::map<std::string, HostBytes>& inputs,
                                          std::set<std::string>* fresh) const {
  CompareContext context;
  context.definition = &c_.def;
  context.axes = b.env.axes;
  context.input = [&b, &inputs, fresh](const std::string& name) -> const std::uint8_t* {
    auto buf = b.inputs.find(name);
    if (buf == b.inputs.end()) return nullptr;
    auto it = inputs.find(name);
    if (it == inputs.end() || (fresh && !fresh->count(name))) {
      if (it == inputs.end()) it = inputs.emplace(name, HostBytes()).first;
      buf->second->download(it->second);
      if (fresh) fresh->insert(name);
    }
    return it->second.data();
  };
  return context;
}

std::optional<Failure> HostJudge::check_outputs(const TrialBuffers& b,
                                                const std::vector<HostBytes>& expected,
                                                const std::vector<HostBytes>& got,
                                                TrialResult& trial, SamplingDraws* draws,
                                                std::map<std::string, HostBytes>* reuse,
                                                const ComparePhases* phases) {
  std::map<std::string, HostBytes> local;  // downloaded when a comparator asks for them
  std::set<std::string> fresh;
  CompareContext context = compare_context(b, reuse ? *reuse : local, reuse ? &fresh : nullptr);
  SamplingDraws support_only;
  context.sampling_draws = draws ? draws : &support_only;
  auto t0 = std::chrono::steady_clock::now();
  if (phases && c_.sampling) {
    for (const auto& [name, buf] : b.inputs) context.input(name);
    c_.phases.add(phases->inputs, t0);
    t0 = std::chrono::steady_clock::now();
  }
  for (std::size_t i = 0; i < c_.def.outputs.size(); ++i) {
    const TensorSpec& t = c_.def.outputs[i];
    const OutputCheck check =
        c_.comparator(t.name, t.dtype, expected[i].data(), got[i].data(),
                      expected[i].size() / dtype_size(t.dtype), c_.tolerance, 0, context);
    if (auto f = judge_output(t.name, check, c_.tolerance, trial)) {
      if (phases) c_.phases.add(phases->compare, t0);
      return f;
    }
  }
  if (phases) c_.phases.add(phases->compare, t0);
  return std::nullopt;
}

std::optional<Failure> HostJudge::judge_rerun(const TrialBuffers& b,
                                              const std::vector<HostBytes>& expected,
                                              const std::vector<HostBytes>& got,
                                              TrialResult& trial) {
  download_outputs(b, again);
  std::vector<std::uint64_t> differing;
  std::vector<std::string> tensors;
  for (std::size_t i = 0; i < got.size(); ++i) {
    differing.push_back(bitwise_differences(got[i].data(), again[i].data(), got[i].size()));
    tensors.push_back(c_.def.outputs[i].name);
  }
  RerunJudges judges;
  judges.against_reference = [&] {
    TrialResult rerun;  // the reference's comparisons of the rerun are not the trial's
    return check_outputs(b, expected, again, rerun);
  };
  judges.against_first = [&](std::size_t i) -> std::optional<Failure> {
    const TensorSpec& t = c_.def.outputs[i];
    std::map<std::string, HostBytes> inputs;
    CompareContext context = compare_context(b, inputs);
    SamplingDraws support_only;  // a sampler's rerun: its support (the pool has the first run)
    context.sampling_draws = &support_only;
    const OutputCheck c =
        c_.comparator(t.name, t.dtype, got[i].data(), again[i].data(),
                      got[i].size() / dtype_size(t.dtype), c_.tolerance, 0, context);
    return output_failure(c, c_.tolerance);
  };
  return verify::judge_rerun(differing, tensors, judges, trial);
}

}  // namespace kharness::verify
