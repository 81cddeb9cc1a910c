#include "cli/shard.hpp"

#include <fmt/format.h>

#include <cctype>

#include "kharness/error.hpp"
#include "kharness/text.hpp"

namespace kharness::cli {
namespace {

// A decimal number of at most 6 digits, or -1.
long number(const std::string& s) {
  if (s.empty() || s.size() > 6) return -1;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
  }
  return std::stol(s);
}

}  // namespace

Shard parse_shard(const std::string& text) {
  auto slash = text.find('/');
  long i = slash == std::string::npos ? -1 : number(text.substr(0, slash));
  long n = slash == std::string::npos ? -1 : number(text.substr(slash + 1));
  if (i < 0 || n < 1 || n > 100000 || i >= n)
    throw input_error("--shard", fmt::format("expected I/N with 0 <= I < N (I is 0-based, like "
                                             "SLURM_ARRAY_TASK_ID under --array=0-(N-1)), got '{}'",
                                             printable_line(bounded(text, 40))));
  return Shard{static_cast<std::size_t>(i), static_cast<std::size_t>(n)};
}

std::vector<std::size_t> shard_items(std::size_t total, const Shard& shard) {
  std::vector<std::size_t> out;
  for (std::size_t k = shard.index; k < total; k += shard.count) out.push_back(k);
  return out;
}

}  // namespace kharness::cli
