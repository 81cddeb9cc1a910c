// The search over a knob space: defaults, a space-filling exploration, then hill climbing over
// neighbouring configurations from the best so far (see kharness/tune.hpp).
#include <algorithm>
#include <cstdlib>
#include <limits>

#include "kharness/tune.hpp"

namespace kharness::tune {
namespace {

constexpr std::size_t kMaxExplore = 12;
constexpr std::size_t kExplorePool = 48;  // random draws a farthest point is chosen among
// A draw's distance is to the nearest of this many latest proposals, not to all of them: every
// proposal of a search, and every one of a sample of up to 64, is covered, while listing a whole
// space stays linear in its size.
constexpr std::size_t kExploreMemory = 64;

}  // namespace

Search::Search(const TuneSpace& space, std::vector<Config> valid, SearchOptions options)
    : valid_(std::move(valid)), options_(options), rng_(options.seed) {
  proposed_flag_.assign(valid_.size(), 0);
  unproposed_.resize(valid_.size());
  slot_.resize(valid_.size());
  for (std::size_t i = 0; i < valid_.size(); ++i) unproposed_[i] = slot_[i] = i;
  for (const auto& k : space.knobs) arity_.push_back(k.values.size());
  // valid_configs lists configurations in lexicographic order: found by binary search. A map
  // of a million configurations (the product cap) took seconds and hundreds of MB.
  sorted_ = std::is_sorted(valid_.begin(), valid_.end());
  if (!sorted_) {
    for (std::size_t i = 0; i < valid_.size(); ++i) index_of_[valid_[i]] = i;
  }
  if (auto d = find(default_config(space))) {
    default_index_ = *d;
    has_default_ = true;
  }
  std::size_t planned = options.budget > 0 ? static_cast<std::size_t>(options.budget) / 4 : 8;
  explore_count_ = std::clamp<std::size_t>(planned, 1, kMaxExplore);
}

std::optional<std::size_t> Search::find(const Config& config) const {
  if (sorted_) {
    auto at = std::lower_bound(valid_.begin(), valid_.end(), config);
    if (at == valid_.end() || *at != config) return std::nullopt;
    return static_cast<std::size_t>(at - valid_.begin());
  }
  auto it = index_of_.find(config);
  if (it == index_of_.end()) return std::nullopt;
  return it->second;
}

std::size_t Search::take(std::size_t index) {
  proposed_flag_[index] = 1;
  order_.push_back(index);
  // Swap-remove from the unproposed list.
  std::size_t at = slot_[index];
  std::size_t last = unproposed_.back();
  unproposed_[at] = last;
  slot_[last] = at;
  unproposed_.pop_back();
  return index;
}

std::optional<std::size_t> Search::next() {
  if (exhausted()) return std::nullopt;
  if (has_default_ && !was_proposed(default_index_)) return take(default_index_);
  // Exploration until the planned sample is drawn (the default counts as its first point).
  if (order_.size() < explore_count_ + 1) {
    if (auto i = explore()) return take(*i);
  }
  if (auto i = local_move()) return take(*i);
  if (auto i = explore()) return take(*i);
  return std::nullopt;
}

// Farthest point (in value steps normalised by each knob's range) from the latest proposals,
// among a pool of random unproposed configurations.
std::optional<std::size_t> Search::explore() {
  std::vector<std::size_t> pool;
  if (unproposed_.empty()) return std::nullopt;
  if (unproposed_.size() <= kExplorePool) {
    pool = unproposed_;
    std::sort(pool.begin(), pool.end());  // ties go to the lowest index, whatever the list order
  } else {
    std::uniform_int_distribution<std::size_t> pick(0, unproposed_.size() - 1);
    std::set<std::size_t> seen;
    while (pool.size() < kExplorePool) {
      std::size_t i = unproposed_[pick(rng_)];
      if (seen.insert(i).second) pool.push_back(i);
    }
  }
  const std::size_t first = order_.size() > kExploreMemory ? order_.size() - kExploreMemory : 0;
  std::size_t best = pool.front();
  double best_distance = -1.0;
  for (std::size_t i : pool) {
    double nearest = std::numeric_limits<double>::infinity();
    for (std::size_t n = first; n < order_.size(); ++n) {
      const std::size_t p = order_[n];
      double d = 0.0;
      for (std::size_t k = 0; k < arity_.size(); ++k) {
        if (arity_[k] < 2) continue;
        double diff =
            std::abs(static_cast<double>(valid_[i][k]) - static_cast<double>(valid_[p][k]));
        d += diff / static_cast<double>(arity_[k] - 1);
      }
      nearest = std::min(nearest, d);
    }
    if (nearest > best_distance) {
      best_distance = nearest;
      best = i;
    }
  }
  return best;
}

// The unproposed neighbours of `center`, in the order to try them: first the move that led to
// `center` (when it improved), then single-knob steps to the nearest valid value up or down, then
// steps of two knobs at once; ties in random order.
std::vector<std::size_t> Search::neighbours(std::size_t center) const {
  const Config& c = valid_[center];
  std::vector<std::size_t> singles, pairs;
  // Single knob: walk in each direction to the first valid configuration (a constraint may rule
  // out the adjacent value).
  for (std::size_t k = 0; k < arity_.size(); ++k) {
    for (int dir : {-1, 1}) {
      Config n = c;
      for (;;) {
        if (dir < 0 && n[k] == 0) break;
        if (dir > 0 && n[k] + 1 >= arity_[k]) break;
        n[k] = dir < 0 ? n[k] - 1 : n[k] + 1;
        if (auto i = find(n)) {
          if (!was_proposed(*i)) singles.push_back(*i);
          break;
        }
      }
    }
  }
  for (std::size_t a = 0; a < arity_.size(); ++a) {
    for (std::size_t b = a + 1; b < arity_.size(); ++b) {
      for (int da : {-1, 1}) {
        for (int db : {-1, 1}) {
          if ((da < 0 && c[a] == 0) || (da > 0 && c[a] + 1 >= arity_[a])) continue;
          if ((db < 0 && c[b] == 0) || (db > 0 && c[b] + 1 >= arity_[b])) continue;
          Config n = c;
          n[a] = da < 0 ? n[a] - 1 : n[a] + 1;
          n[b] = db < 0 ? n[b] - 1 : n[b] + 1;
          if (auto i = find(n); i && !was_proposed(*i)) pairs.push_back(*i);
        }
      }
    }
  }
  // Momentum: if center was reached from `from` by a move, the same move again goes first.
  std::optional<std::size_t> repeat;
  if (auto it = reached_from_.find(center); it != reached_from_.end()) {
    const Config& from = valid_[it->second];
    Config n = c;
    bool ok = true;
    for (std::size_t k = 0; k < n.size() && ok; ++k) {
      auto step = static_cast<long long>(c[k]) - static_cast<long long>(from[k]);
      auto v = static_cast<long long>(c[k]) + step;
      ok = v >= 0 && v < static_cast<long long>(arity_[k]);
      if (ok) n[k] = static_cast<std::size_t>(v);
    }
    if (ok) {
      if (auto i = find(n); i && !was_proposed(*i)) repeat = *i;
    }
  }
  // A copy of the generator: the order is a function of the state, not of how often it is asked.
  std::mt19937_64 rng(options_.seed ^ (center * 0x9e3779b97f4a7c15ULL));
  std::shuffle(singles.begin(), singles.end(), rng);
  std::shuffle(pairs.begin(), pairs.end(), rng);
  std::vector<std::size_t> out;
  if (repeat) out.push_back(*repeat);
  for (auto* list : {&singles, &pairs}) {
    for (std::size_t i : *list) {
      if (std::find(out.begin(), out.end(), i) == out.end()) out.push_back(i);
    }
  }
  return out;
}

std::optional<std::size_t> Search::local_move() {
  // Proposals only add to what is proposed: a centre with no unproposed neighbour never gets one
  // back, so it is dropped instead of being asked again at every later step.
  for (auto it = centres_.begin(); it != centres_.end();) {
    auto moves = neighbours(it->second);
    if (moves.empty()) {
      it = centres_.erase(it);
      continue;
    }
    reached_from_.emplace(moves.front(), it->second);
    return moves.front();
  }
  return std::nullopt;
}

void Search::report(std::size_t index, std::optional<double> score) {
  if (!score) {
    reached_from_.erase(index);  // a failed move is not worth repeating
    return;
  }
  // Momentum only for moves that improved on where they came from.
  if (auto it = reached_from_.find(index); it != reached_from_.end()) {
    auto from = score_of_.find(it->second);
    if (from == score_of_.end() || *score <= from->second) reached_from_.erase(it);
  }
  scored_.emplace_back(index, *score);
  score_of_.emplace(index, *score);
  centres_.emplace(*score, index);
}

std::optional<std::pair<std::size_t, double>> Search::best() const {
  if (scored_.empty()) return std::nullopt;
  return *std::max_element(scored_.begin(), scored_.end(),
                           [](const auto& a, const auto& b) { return a.second < b.second; });
}

}  // namespace kharness::tune
