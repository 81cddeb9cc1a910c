#include "controller/prompt.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/json_util.hpp"
#include "kharness/arch.hpp"
#include "kharness/compile.hpp"
#include "kharness/error.hpp"
#include "kharness/text.hpp"

namespace kharness::controller {
namespace {

using nlohmann::json;

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string file_layer(const std::string& stem, const Operator& op, const std::string& arch) {
  std::string s = lower(stem);
  if (s == "general" || s == "cuda") return "general";
  // sm_120 (consumer Blackwell) has no tcgen05: it takes the portable layer, not blackwell.md.
  bool hopper = arch_family(arch) == ArchFamily::kHopper;
  bool blackwell = arch_family(arch) == ArchFamily::kBlackwell;
  if ((s == "hopper" && hopper) || (s == "blackwell" && blackwell)) return "architecture";
  // A page-size variant of a family (gqa_paged_prefill_causal_ps1, split off only because its
  // definitions have no kv_last_page_len input) shares the family's skills file.
  std::string family = lower(op.definition.family());
  if (const std::size_t cut = family.rfind("_ps");
      cut != std::string::npos && cut + 3 < family.size() &&
      family.find_first_not_of("0123456789", cut + 3) == std::string::npos) {
    if (s == family.substr(0, cut)) return "operator";
  }
  if (s == lower(op.definition.name) || s == lower(op.definition.op_type) || s == family)
    return "operator";
  if (s == "profiling") return "profiling";
  return "";
}

int layer_rank(const std::string& layer) {
  static const std::map<std::string, int> rank = {
      {"general", 0}, {"architecture", 1}, {"operator", 2}, {"profiling", 3}};
  auto it = rank.find(layer);
  return it == rank.end() ? 4 : it->second;
}

std::string cut_note(std::size_t dropped, std::size_t total, const std::string& part) {
  return fmt::format("\n[… cut: {} of {} characters of the {} did not fit the prompt bound …]\n",
                     dropped, total, part);
}

// `text` within `limit` characters, the head kept and a note naming the cut.
std::string fit(const std::string& text, std::size_t limit, const std::string& part,
                std::vector<std::string>& cuts) {
  if (text.size() <= limit) return text;
  std::string probe = cut_note(text.size(), text.size(), part);
  std::size_t keep = limit > probe.size() ? limit - probe.size() : 0;
  // Cut at a line end where there is one close by, so code is not cut mid-line.
  std::size_t nl = text.rfind('\n', keep);
  if (nl != std::string::npos && nl + 200 > keep) keep = nl + 1;
  cuts.push_back(fmt::format("{}: kept {} of {} characters", part, keep, text.size()));
  if (limit < probe.size()) return std::string();
  return text.substr(0, keep) + cut_note(text.size() - keep, text.size(), part);
}

std::string fmt_axes(const json& axes) {
  std::vector<std::string> parts;
  for (auto it = axes.begin(); it != axes.end(); ++it)
    parts.push_back(fmt::format("{}={}", it.key(), json_util::dump(it.value())));
  return join(parts, " ");
}

}  // namespace

std::size_t estimate_tokens(const std::string& text) {
  return (text.size() + kCharsPerToken - 1) / kCharsPerToken;
}

std::vector<SkillSection> load_skills(const std::filesystem::path& dir, const Operator& op,
                                      const std::string& arch) {
  namespace fs = std::filesystem;
  std::vector<SkillSection> out;
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".md") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::string layer = file_layer(f.stem().string(), op, arch);
    if (layer.empty()) continue;
    std::istringstream in(read_file(f.string()));
    std::string line;
    SkillSection current;
    auto flush = [&] {
      if (!current.heading.empty()) out.push_back(current);
    };
    while (std::getline(in, line)) {
      if (line.rfind("## ", 0) == 0) {
        flush();
        current = {f.filename().string(), layer, line.substr(3), line + "\n"};
      } else if (!current.heading.empty()) {
        current.text += line + "\n";
      }
    }
    flush();
  }
  std::stable_sort(out.begin(), out.end(), [](const SkillSection& a, const SkillSection& b) {
    return layer_rank(a.layer) < layer_rank(b.layer);
  });
  return out;
}

std::vector<SkillSection> order_skills(std::vector<SkillSection> sections,
                                       const std::string& diagnosis, int direction) {
  // Words of the diagnosis that name a bottleneck pick the sections that talk about it.
  std::set<std::string> words;
  std::string d = lower(diagnosis);
  for (const char* w : {"memory", "bandwidth", "compute", "latency", "occupancy", "register",
                        "shared", "tensor", "l2", "dram", "spill", "bank", "launch"}) {
    if (d.find(w) != std::string::npos) words.insert(w);
  }
  auto score = [&](const SkillSection& s) {
    std::string t = lower(s.text);
    int n = 0;
    for (const auto& w : words) n += t.find(w) != std::string::npos ? 1 : 0;
    return n;
  };
  if (direction > 0) {
    // Rotate the operator and architecture sections: a restart leads with another direction.
    std::vector<std::size_t> idx;
    for (std::size_t i = 0; i < sections.size(); ++i) {
      if (sections[i].layer == "operator" || sections[i].layer == "architecture") idx.push_back(i);
    }
    if (idx.size() > 1) {
      std::vector<SkillSection> picked;
      for (auto i : idx) picked.push_back(sections[i]);
      std::rotate(
          picked.begin(),
          picked.begin() + static_cast<long>(static_cast<std::size_t>(direction) % picked.size()),
          picked.end());
      // Offered first, ahead of the general layer.
      std::vector<SkillSection> rest;
      for (std::size_t i = 0; i < sections.size(); ++i) {
        if (std::find(idx.begin(), idx.end(), i) == idx.end()) rest.push_back(sections[i]);
      }
      picked.insert(picked.end(), rest.begin(), rest.end());
      sections = std::move(picked);
    }
  }
  std::stable_sort(sections.begin(), sections.end(),
                   [&](const auto& a, const auto& b) { return score(a) > score(b); });
  return sections;
}

std::string system_text() {
  return R"TXT(You are an expert CUDA performance engineer. You write one CUDA kernel solution at a time for
kharness, a harness that compiles it with NVRTC, checks it against a trusted reference on the GPU
and times it with CUPTI against the current best kernel.

Rules (a solution that breaks one is REJECTED or fails, and the attempt is wasted):
- Device code only: no host code, no main(), no cudaMalloc/cudaMemcpy, no <iostream>/<cstdio>
  file or console I/O. The harness launches your kernels as the launch plan says.
- Kernels are `extern "C" __global__`; their parameters match the plan's "args" in order, types and
  sizes (tensors are device pointers, axes and scalars are passed by value).
- Write every output element on every call; never read or write outside the buffers; never modify
  inputs; results must be deterministic. Outputs of timed runs are checked too: no caching of
  results between calls, no skipping work.
- Only headers NVRTC ships (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h, cooperative_groups.h, cuda/...),
  and CuTe/CUTLASS headers where the task says they are available.
- Accuracy: within the stated tolerance of an fp32-accumulating reference.

Answer format: a short explanation of the idea (a few sentences), then exactly ONE fenced
```cuda block holding the whole solution file. The file starts with the launch plan as a block
comment `/* kharness {JSON} */` (see the task for the plan's fields), followed by the device code.
Do not include other ```cuda blocks.
)TXT";
}

namespace {

// CuTe and CUTLASS are offered only where kharness can compile them: a CUTLASS root is found.
std::string cutlass_note() {
  std::optional<CutlassRoot> root;
  try {
    root = find_cutlass();
  } catch (const Error&) {
    return "";  // a bad KHARNESS_CUTLASS: the compile says so, the prompt offers nothing
  }
  if (!root) return "";
  return fmt::format(R"TXT(CuTe and CUTLASS {} headers are available (#include <cute/tensor.hpp>,
<cutlass/arch/barrier.h>, ...; kharness compiles such a file with -default-device, and the first
compile takes several seconds). Device code only: no make_tma_copy/make_tma_atom (host), take TMA
descriptors from the plan's tensor_maps and issue them with SM90_TMA_LOAD_2D::copy(&map, &mbar,
hint, smem_ptr, x, y); GMMA through make_tiled_mma(SM90_64xNx16_F32F16F16_SS<GMMA::Major::K,
GMMA::Major::K>{{}}) on smem layouts tiled from GMMA::Layout_K_SW128_Atom. Avoid the name `half`
(cuda_fp16.h defines it): use cutlass::half_t under another alias.
)TXT",
                     root->version);
}

}  // namespace

std::string render_task(const Operator& op, const std::string& arch) {
  const Definition& d = op.definition;
  std::string out = fmt::format("# Task: {} (op_type {}) on {}\n", d.name, d.op_type, arch);
  if (!d.description.empty()) out += d.description + "\n";
  out += "\nAxes:";
  for (const auto& a : d.axes) {
    out += a.is_const ? fmt::format(" {}={} (const)", a.name, a.value)
                      : fmt::format(" {} (varies)", a.name);
  }
  out += "\n";
  auto tensors = [&](const char* title, const std::vector<TensorSpec>& list) {
    out += title;
    for (const auto& t : list) {
      out += fmt::format("- {}: {} {}{}\n", t.name, dtype_name(t.dtype),
                         t.shape ? "[" + join(*t.shape, ", ") + "]" : std::string("scalar"),
                         t.description.empty() ? "" : " — " + t.description);
    }
  };
  tensors("Inputs:\n", d.inputs);
  tensors("Outputs:\n", d.outputs);
  for (const auto& c : d.constraints) out += "Constraint: " + c + "\n";
  for (const auto& [name, value] : d.kharness.constants)
    out += fmt::format("Constant: {} = {}\n", name, value);
  const Tolerance& t = d.kharness.tolerance;
  out += fmt::format(
      "Tolerance: an element mismatches when |got-expected| > {} and the relative error > {}; "
      "at least {} of the elements must match.\n",
      t.atol, t.rtol, t.required_matched_ratio);
  std::vector<std::string> shapes;
  for (const auto& w : op.workloads) {
    std::vector<std::string> axes;
    for (const auto& [name, value] : w.axes) axes.push_back(fmt::format("{}={}", name, value));
    shapes.push_back(join(axes, ","));
  }
  out += fmt::format("Workloads ({}; the score is the mean speedup over all): {}\n",
                     op.workloads.size(), join(shapes, "; "));
  out += fmt::format(R"TXT(
Solution format: one file; its first block comment is the launch plan:
/* kharness
{{
  "definition": "{}",
  "launches": [
    {{ "kernel": "my_kernel",
      "grid": ["cdiv(axis, 4)", 1, 1], "block": [128, 1, 1], "shared_bytes": "0",
      "args": ["input_tensor", "output_tensor", "axis", {{"float32": 1e-5}}] }}
  ],
  "compile_options": ["-std=c++17"]
}}
*/
grid/block/shared_bytes/workspace_bytes are integer expressions over the axes (+ - * / %, cdiv,
min, max). args name tensors, axes, scalar inputs, "workspace", or typed literals. Several launches
run in order on one stream; "cluster" and "workspace_bytes" are optional.
On sm_90a/sm_100a a launch may declare TMA tensor maps, passed as `const __grid_constant__
CUtensorMap` parameters: "tensor_maps": {{"a_map": {{"tensor": "A", "box": [128, 64],
"swizzle": "128B"}}}} (box outermost dimension first, at most 256 each, innermost box bytes a
multiple of 16 and within the swizzle span; optional dtype, shape, strides, offset_bytes,
element_strides, interleave, l2_promotion, oob_fill) and {{"tensor_map": "a_map"}} in args.
"pdl": true on a launch after the first lets it overlap the previous one
(cudaGridDependencySynchronize); "cooperative": true makes a grid-synchronising launch (the grid
must fit on the GPU at once).
Shape dispatch: instead of "launches", a plan may hold "variants", each a list of launches chosen
by a condition over the axes; the first whose "when" holds runs, the last has no "when":
"variants": [{{"when": "M <= 64", "launches": [...]}}, {{"when": "M <= 1024 && N % 128 == 0",
"launches": [...]}}, {{"launches": [...]}}]. Conditions use the axes, integers, + - * / %, min,
max, comparisons, && || ! and parentheses. Every variant launches kernels of the one source:
template instantiations with their own extern "C" names (extern "C" __global__ void k_small(...)
{{ body<64>(...); }}), so that a small M gets a small tile and a large M a large one. The verdict
names the variant that served each workload.
)TXT",
                     d.name);
  out += cutlass_note();
  return out;
}

std::string render_best(const std::string& id, const std::string& source, const Verdict* v) {
  std::string out = fmt::format("# Current best kernel ({})\n", id);
  if (v && !v->workloads.empty() && v->workloads[0].timing.timed()) {
    // A dispatching kernel's table says which variant ran where, so a model can tell which of
    // its variants to improve.
    const bool dispatches =
        std::any_of(v->workloads.begin(), v->workloads.end(),
                    [](const WorkloadVerdict& w) { return !w.variant.empty(); });
    out += dispatches ? "| workload | axes | variant | latency | speedup | % SOL |\n"
                        "|---|---|---|---|---|---|\n"
                      : "| workload | axes | latency | speedup | % SOL |\n|---|---|---|---|---|\n";
    for (const auto& w : v->workloads) {
      if (!w.timing.candidate) continue;
      std::string axes = fmt_axes(w.axes);
      if (dispatches) axes += " | " + (w.variant.empty() ? std::string("-") : w.variant);
      out += fmt::format("| {} | {} | {:.2f} us | {} | {} |\n", w.uuid.substr(0, 8), axes,
                         w.timing.candidate->latency * 1e6,
                         w.timing.speedup ? fmt::format("{:.3f}x", *w.timing.speedup) : "-",
                         w.timing.sol ? fmt::format("{:.1f}%", 100 * w.timing.sol->fraction) : "-");
    }
    if (v->score.mean_speedup)
      out += fmt::format("Mean speedup over the operator's baseline: {:.3f}x\n",
                         *v->score.mean_speedup);
  } else {
    out += "(not timed yet)\n";
  }
  out += "\n```cuda\n" + source + (source.empty() || source.back() == '\n' ? "" : "\n") + "```\n";
  return out;
}

std::string render_feedback(const std::string& id, const std::string& status,
                            const std::string& reason, const Verdict* v, const std::string& note) {
  std::string out = fmt::format("## {}: {}\n", id, status);
  if (!reason.empty()) out += reason + "\n";
  if (v) {
    const json& c = v->compile;
    int errors = 0;
    for (const auto& d : c.value("diagnostics", json::array())) {
      if (d.value("severity", "") != "error") continue;
      if (++errors > 5) {
        out += "(more compile errors not shown)\n";
        break;
      }
      out += fmt::format("{}:{}: error: {}\n", d.value("file", ""),
                         json_util::whole_or(d, "line", 0), d.value("message", ""));
    }
    for (const auto& viol : c.value("violations", json::array()))
      out += fmt::format("rule {}: {}\n", viol.value("rule", ""), viol.value("message", ""));
    for (const auto& k : c.value("kernels", json::array())) {
      if (!k.value("registers", json()).is_number()) continue;
      out += fmt::format(
          "kernel {}: {} registers, {} B spilled, {} B static shared\n", k.value("name", ""),
          k["registers"].get<int>(),
          k.value("spill_store_bytes", json(0)).is_number()
              ? k["spill_store_bytes"].get<long long>()
              : 0,
          k.value("shared_bytes", json(0)).is_number() ? k["shared_bytes"].get<long long>() : 0);
    }
    if (v->failure && errors == 0) {
      out += fmt::format("failure {}: {}\n", v->failure->kind, v->failure->message);
      if (!v->failure->evidence.empty()) {
        std::string ev = json_util::dump(v->failure->evidence);
        out += "evidence: " + (ev.size() > 600 ? ev.substr(0, 600) + "…" : ev) + "\n";
      }
    }
    for (const auto& w : v->workloads) {
      if (!w.timing.candidate) continue;
      out += fmt::format("  {} {}: {:.2f} us{}\n", w.uuid.substr(0, 8), fmt_axes(w.axes),
                         w.timing.candidate->latency * 1e6,
                         w.timing.speedup
                             ? fmt::format(", {:.3f}x vs the reference timing", *w.timing.speedup)
                             : "");
    }
  }
  if (!note.empty()) out += note + "\n";
  return out;
}

std::string render_model(const ModelGate& gate, const ModelVerdict& baseline,
                         const std::string& best_id, std::optional<double> best_layer_speedup) {
  std::string out = "# In the model\n";
  out += fmt::format("This operator runs as {} {} of {}'s {} layer.",
                     baseline.nodes.size() == 1 ? "node" : "nodes", join(baseline.nodes, ", "),
                     gate.name, gate.phase);
  if (baseline.share) {
    const double share = *baseline.share;
    out += fmt::format(
        " With the shipped seeds it takes {:.1f}% of the layer time ({:.1f}% to {:.1f}% by "
        "shape), so making it 2x faster saves about {:.1f}% of the layer, and no kernel of it can "
        "save more than {:.1f}%.",
        100 * share, 100 * baseline.share_min, 100 * baseline.share_max, 50 * share, 100 * share);
  }
  out += fmt::format(
      "\nA candidate is promoted only if {} with it substituted still match the reference "
      "layers (model-check: the hidden state's drift, and each node's own check inside the "
      "layer, on the layer's real inputs and strides).\n",
      gate.layers == 1 ? std::string("one layer") : fmt::format("{} layers", gate.layers));
  if (gate.objective == Objective::kLayer) {
    out += fmt::format(
        "Candidates are ranked by the layer speedup over the seeds' layer (--objective layer); "
        "the best so far, {}, gives {:.4f}x.\n",
        best_id, best_layer_speedup.value_or(1.0));
  }
  return out;
}

Prompt build_prompt(const PromptParts& parts, std::size_t max_tokens) {
  Prompt p;
  std::size_t bound = max_tokens * kCharsPerToken;
  p.system = system_text();
  if (p.system.size() > bound / 2) p.system = fit(p.system, bound / 2, "instructions", p.cuts);
  // The model paragraph goes in whole (a few hundred characters), before the shares.
  std::string model = parts.model;
  if (model.size() > bound / 8) model = fit(model, bound / 8, "model", p.cuts);
  const std::size_t fixed = p.system.size() + model.size() + 320;
  std::size_t room = bound > fixed ? bound - fixed : 0;

  std::string hints;
  if (!parts.hints.empty()) {
    hints = "# Directions from a person (follow them)\n";
    for (const auto& h : parts.hints) hints += "- " + h + "\n";
  }
  std::string feedback;
  if (!parts.feedback.empty()) {
    feedback = "# Latest candidates (newest first)\n";
    for (const auto& f : parts.feedback) feedback += f + "\n";
  }
  std::string diagnosis =
      parts.diagnosis.empty() ? "" : "# Diagnosis of the current best kernel\n" + parts.diagnosis;
  std::string skills;
  if (!parts.skills.empty()) {
    skills = "# Knowledge\n";
    for (const auto& s : parts.skills) skills += "(" + s.file + ") " + s.text + "\n";
  }
  // Shares of the room, in the order the parts claim what others leave over.
  struct Part {
    const char* name;
    const std::string* text;
    double share;
    std::size_t allowed = 0;
  };
  std::vector<Part> list = {{"current best kernel", &parts.best, 0.30},
                            {"feedback", &feedback, 0.20},
                            {"task", &parts.task, 0.15},
                            {"hints", &hints, 0.07},
                            {"diagnosis", &diagnosis, 0.08},
                            {"knowledge", &skills, 0.20}};
  std::size_t pool = 0;
  for (auto& part : list) {
    std::size_t share = static_cast<std::size_t>(part.share * static_cast<double>(room));
    part.allowed = std::min(share, part.text->size());
    pool += share - part.allowed;
  }
  for (auto& part : list) {
    std::size_t extra = std::min(pool, part.text->size() - part.allowed);
    part.allowed += extra;
    pool -= extra;
  }
  std::string task = fit(parts.task, list[2].allowed, "task", p.cuts);
  std::string best = fit(parts.best, list[0].allowed, "current best kernel", p.cuts);
  std::string fb = fit(feedback, list[1].allowed, "feedback", p.cuts);
  std::string hi = fit(hints, list[3].allowed, "hints", p.cuts);
  std::string dg = fit(diagnosis, list[4].allowed, "diagnosis", p.cuts);
  // Knowledge: whole sections, in preference order, while they fit.
  std::string kn;
  if (!skills.empty() && skills.size() <= list[5].allowed) {
    kn = skills;
  } else if (!skills.empty()) {
    std::size_t limit = list[5].allowed;
    std::string head = "# Knowledge\n";
    std::vector<std::string> dropped;
    kn = head;
    for (const auto& s : parts.skills) {
      std::string piece = "(" + s.file + ") " + s.text + "\n";
      if (kn.size() + piece.size() + 160 <= limit) {
        kn += piece;
      } else {
        dropped.push_back(s.file + ": " + s.heading);
      }
    }
    if (!dropped.empty()) {
      std::string note = fmt::format(
          "[… cut: {} knowledge sections did not fit the prompt bound …]\n", dropped.size());
      p.cuts.push_back(
          fmt::format("knowledge: {} sections left out ({})", dropped.size(), join(dropped, "; ")));
      if (kn.size() + note.size() <= limit) kn += note;
    }
    if (kn == head) kn.clear();
    if (kn.size() > limit) kn = fit(kn, limit, "knowledge", p.cuts);
  }
  std::vector<std::string> sections;
  for (const std::string* s : {&task, &model, &hi, &best, &fb, &dg, &kn}) {
    if (!s->empty()) sections.push_back(*s);
  }
  sections.push_back(
      "Write a faster correct solution than the current best kernel. Answer in the format the "
      "instructions give: a short explanation, then exactly one ```cuda block.\n");
  p.user = join(sections, "\n");
  p.estimated_tokens = estimate_tokens(p.system) + estimate_tokens(p.user);
  return p;
}

}  // namespace kharness::controller
