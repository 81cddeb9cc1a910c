// The arithmetic of model-check --time: medians of the timed passes, each node's share of its
// layer, the layer and kernel speedups, and whether the nodes' times add up to the layer's span.
// Pure (no GPU), so it is tested on given numbers.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "bench/statistics.hpp"
#include "kharness/model_check.hpp"

namespace kharness::model {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double median_span(const std::vector<PassTiming>& passes) {
  std::vector<double> spans;
  for (const auto& p : passes) spans.push_back(p.span_seconds);
  return median(spans);
}

// SE(median) / median of the passes' spans (+inf with fewer than 5).
double span_noise(const std::vector<PassTiming>& passes) {
  std::vector<double> spans;
  for (const auto& p : passes) spans.push_back(p.span_seconds);
  std::sort(spans.begin(), spans.end());
  return bench::relative_median_noise(spans);
}

double median_node(const std::vector<PassTiming>& passes, const std::string& node) {
  std::vector<double> times;
  for (const auto& p : passes) {
    auto it = p.node_seconds.find(node);
    if (it == p.node_seconds.end())
      throw std::invalid_argument("a timed pass has no time for node " + node);
    times.push_back(it->second);
  }
  return median(times);
}

double ratio(double num, double den) { return den > 0 ? num / den : 0.0; }

}  // namespace

LayerTiming summarize_timing(const std::vector<std::pair<std::string, std::string>>& nodes,
                             const std::vector<std::string>& substituted,
                             const std::vector<PassTiming>& baseline,
                             const std::vector<PassTiming>& candidate) {
  if (baseline.empty() || candidate.empty())
    throw std::invalid_argument("no timed passes of the baseline or the substituted layer");
  LayerTiming t;
  t.passes = static_cast<int>(std::min(baseline.size(), candidate.size()));
  t.baseline_seconds = median_span(baseline);
  t.seconds = median_span(candidate);
  t.speedup = ratio(t.baseline_seconds, t.seconds);
  t.noise = std::hypot(span_noise(baseline), span_noise(candidate));
  for (const auto& [node, definition] : nodes) {
    NodeTiming n;
    n.node = node;
    n.definition = definition;
    n.substituted = std::find(substituted.begin(), substituted.end(), node) != substituted.end();
    n.baseline_seconds = median_node(baseline, node);
    n.seconds = median_node(candidate, node);
    n.speedup = ratio(n.baseline_seconds, n.seconds);
    n.baseline_share = ratio(n.baseline_seconds, t.baseline_seconds);
    n.share = ratio(n.seconds, t.seconds);
    t.baseline_node_sum += n.baseline_seconds;
    t.node_sum += n.seconds;
    t.nodes.push_back(n);
  }
  auto close = [](double sum, double span) {
    return span > 0 && std::fabs(sum - span) <= kNodeSumTolerance * span;
  };
  t.sums_match = close(t.baseline_node_sum, t.baseline_seconds) && close(t.node_sum, t.seconds);
  return t;
}

}  // namespace kharness::model
