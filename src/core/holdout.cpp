// Held-out shapes (see include/kharness/holdout.hpp).
#include "kharness/holdout.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "kharness/error.hpp"
#include "kharness/hash.hpp"

namespace kharness {
namespace {

struct Constraint {
  std::string text;
  Expr expr;
  std::string derives;  // a var axis this equality defines ("axis == expr"); empty: a check
  std::optional<Expr> rhs;
};

std::string trim(const std::string& s) {
  std::size_t a = s.find_first_not_of(" \t");
  std::size_t b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// A definition constraint as an expression over axes, or nullopt when it is not one (it reads
// tensors or values). FlashInfer-Bench writes them in Python: floor division is `//`.
std::optional<Constraint> parse_constraint(const std::string& text, const Definition& def) {
  std::string c = text;
  for (std::size_t p; (p = c.find("//")) != std::string::npos;) c.replace(p, 2, "/");
  Constraint out;
  out.text = text;
  try {
    out.expr = Expr::parse(c);
  } catch (const ExprError&) {
    return std::nullopt;
  }
  for (const auto& name : out.expr.names())
    if (!def.find_axis(name)) return std::nullopt;
  std::size_t eq = c.find("==");
  if (eq != std::string::npos) {
    std::string lhs = trim(c.substr(0, eq));
    const Axis* axis = is_identifier(lhs) ? def.find_axis(lhs) : nullptr;
    if (axis && !axis->is_const) {
      try {
        Expr rhs = Expr::parse(c.substr(eq + 2));
        auto names = rhs.names();
        if (std::find(names.begin(), names.end(), lhs) == names.end()) {
          out.derives = lhs;
          out.rhs = rhs;
        }
      } catch (const ExprError&) {
        // "a == b == c" and the like: only a check
      }
    }
  }
  return out;
}

std::int64_t draw_in(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  if (lo >= hi) return lo;
  if (lo <= 0) return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  // Shapes span orders of magnitude (a batch of 1 to 16384): log-uniform covers each decade.
  double l = std::log(static_cast<double>(lo)), h = std::log(static_cast<double>(hi) + 1.0);
  double x = std::exp(std::uniform_real_distribution<double>(l, h)(rng));
  auto v = static_cast<std::int64_t>(std::floor(x));
  return std::clamp(v, lo, hi);
}

}  // namespace

std::string holdout_seed_hash(std::uint64_t seed) {
  return "sha256:" + sha256_hex(fmt::format("kharness-holdout-seed:{}", seed)).substr(0, 16);
}

HoldoutSeed holdout_seed_from_environment() {
  HoldoutSeed s;
  const char* env = std::getenv("KHARNESS_HOLDOUT_SEED");
  std::string text = env ? env : "";
  if (text.empty()) {
    std::random_device rd;
    s.value = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    return s;
  }
  if (std::isdigit(static_cast<unsigned char>(text[0]))) {
    try {
      std::size_t used = 0;
      s.value = std::stoull(text, &used, 0);
      if (used == text.size()) {
        s.from_environment = true;
        return s;
      }
    } catch (const std::exception&) {  // out of range, or no digits after 0x
    }
  }
  throw input_error("KHARNESS_HOLDOUT_SEED", "not an unsigned 64-bit integer");
}

HoldoutDraw draw_holdout(const Operator& op, int n, std::uint64_t seed) {
  HoldoutDraw out;
  const Definition& def = op.definition;
  const std::string& name = def.name;
  if (n <= 0) return out;
  if (op.workloads.empty()) {
    out.notes.push_back(fmt::format("{}: no shipped workloads to draw a range from", name));
    return out;
  }
  for (const auto& w : op.workloads) {
    for (const auto& [input, value] : w.inputs) {
      if (value.kind == WorkloadInput::Kind::kSafetensors) {
        out.notes.push_back(fmt::format(
            "{}: input '{}' is read from a file (safetensors), which a held-out shape cannot "
            "have: no held-out workloads for it",
            name, input));
        return out;
      }
    }
  }
  std::vector<const Axis*> vars;
  for (const auto& a : def.axes)
    if (!a.is_const) vars.push_back(&a);
  if (vars.empty()) {
    out.notes.push_back(fmt::format("{}: no var axis: every shape is the shipped one", name));
    return out;
  }
  std::vector<Constraint> constraints;
  std::set<std::string> derived;
  for (const auto& text : def.constraints) {
    auto c = parse_constraint(text, def);
    if (!c) {
      out.notes.push_back(
          fmt::format("{}: constraint \"{}\" reads tensors or values: left to the input generators",
                      name, text));
      continue;
    }
    if (!c->derives.empty() && !derived.insert(c->derives).second) c->derives.clear();
    constraints.push_back(std::move(*c));
  }
  // The range of each drawn axis over the shipped workloads.
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> range;
  for (const Axis* a : vars) {
    if (derived.count(a->name)) continue;
    std::int64_t lo = 0, hi = 0;
    bool first = true;
    for (const auto& w : op.workloads) {
      auto it = w.axes.find(a->name);
      if (it == w.axes.end()) continue;
      lo = first ? it->second : std::min(lo, it->second);
      hi = first ? it->second : std::max(hi, it->second);
      first = false;
    }
    range[a->name] = {lo, hi};
  }
  std::set<std::map<std::string, std::int64_t>> taken;
  for (const auto& w : op.workloads) taken.insert(w.axes);

  // The name is mixed in through SHA-256 (std::hash differs between standard libraries).
  std::mt19937_64 rng(seed ^ std::stoull(sha256_hex(name).substr(0, 16), nullptr, 16));
  const int max_attempts = 2000 * n;
  int attempts = 0, rejected_by_constraint = 0;
  while (static_cast<int>(out.workloads.size()) < n && attempts < max_attempts) {
    ++attempts;
    std::map<std::string, std::int64_t> axes;
    Bindings bindings;
    for (const auto& a : def.axes)
      if (a.is_const) bindings[a.name] = a.value;
    for (const auto& [axis, r] : range) {
      axes[axis] = draw_in(rng, r.first, r.second);
      bindings[axis] = axes[axis];
    }
    // Template: the inputs of one shipped workload (random stays random, scalars keep values).
    const Workload& tmpl =
        op.workloads[std::uniform_int_distribution<std::size_t>(0, op.workloads.size() - 1)(rng)];
    bool ok = true;
    // Derived axes, in constraint order (a later one may use an earlier one).
    for (const auto& c : constraints) {
      if (c.derives.empty()) continue;
      try {
        std::int64_t v = c.rhs->eval(bindings);
        axes[c.derives] = v;
        bindings[c.derives] = v;
      } catch (const ExprError&) {
        ok = false;
        break;
      }
    }
    for (const auto& c : constraints) {
      if (!ok) break;
      try {
        if (c.expr.eval(bindings) == 0) ok = false;
      } catch (const ExprError&) {
        ok = false;
      }
    }
    if (ok) {
      for (const auto& [axis, v] : axes)
        if (v < 0) ok = false;
    }
    if (!ok) {
      ++rejected_by_constraint;
      continue;
    }
    if (!taken.insert(axes).second) continue;  // a shipped or already drawn shape
    Workload w;
    w.axes = axes;
    w.inputs = tmpl.inputs;
    std::string tag =
        sha256_hex(fmt::format("{}:{}:{}", holdout_seed_hash(seed), name, out.workloads.size()))
            .substr(0, 8);
    w.uuid = fmt::format("holdout-{}-{}", out.workloads.size() + 1, tag);
    out.workloads.push_back(std::move(w));
  }
  if (static_cast<int>(out.workloads.size()) < n) {
    out.notes.push_back(fmt::format(
        "{}: drew {} of {} held-out shapes ({} draws; {} broke a constraint; the rest were "
        "shipped or repeated shapes: the shipped range holds few others)",
        name, out.workloads.size(), n, attempts, rejected_by_constraint));
  }
  return out;
}

}  // namespace kharness
