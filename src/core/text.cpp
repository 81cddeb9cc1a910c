#include "kharness/text.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "kharness/error.hpp"
#include "kharness/file.hpp"
#include "kharness/sanitize.hpp"

namespace kharness {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> close_matches(std::string_view name,
                                       const std::vector<std::string>& candidates,
                                       std::size_t limit) {
  std::vector<std::pair<std::size_t, std::string>> scored;
  for (const auto& candidate : candidates) {
    std::size_t d = edit_distance(name, candidate);
    bool contains = !name.empty() && (candidate.find(name) != std::string::npos ||
                                      name.find(candidate) != std::string_view::npos);
    std::size_t allowed = std::max<std::size_t>(2, std::max(name.size(), candidate.size()) / 3);
    if (contains) d = std::min<std::size_t>(d, 1);
    if (d <= allowed) scored.emplace_back(d, candidate);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (const auto& [d, candidate] : scored) {
    if (out.size() == limit) break;
    out.push_back(candidate);
  }
  return out;
}

std::pair<int, int> line_column(std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  int line = 1, column = 1;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

std::string read_file(const std::string& path) { return read_regular_file(path); }

void write_file_atomic(const std::string& path, std::string_view content) {
  std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string tmp = fmt::format("{}.tmp.{}.{:x}", path, getpid(), rng());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw std::runtime_error(fmt::format("{}: cannot write: {}", tmp, std::strerror(errno)));
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw std::runtime_error(fmt::format("{}: write failed", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error(fmt::format("{}: rename failed: {}", path, std::strerror(err)));
  }
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  const std::size_t len = c < 0x80           ? 1
                          : (c >> 5) == 0x6  ? 2
                          : (c >> 4) == 0xE  ? 3
                          : (c >> 3) == 0x1E ? 4
                                             : 0;
  if (len == 0 || i + len > s.size()) return 0;
  if ((len == 2 && c < 0xC2) || (len == 4 && c > 0xF4)) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  if (len == 3) {  // no overlong forms, no surrogates
    const unsigned char c1 = byte(i + 1);
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0)) return 0;
  }
  if (len == 4) {
    const unsigned char c1 = byte(i + 1);
    if ((c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90)) return 0;
  }
  return len;
}

namespace {

// Is the well-formed UTF-8 sequence at s[i] (length n) a character a terminal acts on rather than
// shows: a C1 control (U+0080-U+009F: CSI, OSC as one character) or a bidirectional override or
// isolate (U+202A-U+202E, U+2066-U+2069: text that reads other than it runs)?
bool invisible_control(std::string_view s, std::size_t i, std::size_t n) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  if (n == 2) return b(0) == 0xC2 && b(1) >= 0x80 && b(1) <= 0x9F;
  if (n == 3 && b(0) == 0xE2) {
    return (b(1) == 0x80 && b(2) >= 0xAA && b(2) <= 0xAE) ||
           (b(1) == 0x81 && b(2) >= 0xA6 && b(2) <= 0xA9);
  }
  return false;
}

std::string visible(std::string_view text, bool keep_lines) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const std::size_t n = utf8_sequence_length(text, i);
    if (keep_lines && (c == '\n' || c == '\t')) {
      out += static_cast<char>(c);
      ++i;
    } else if (n == 0 || c < 0x20 || c == 0x7f) {
      out += c == '\n' ? std::string("\\n") : fmt::format("\\x{:02x}", c);
      ++i;
    } else if (invisible_control(text, i, n)) {
      for (std::size_t k = 0; k < n; ++k)
        out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[i + k]));
      i += n;
    } else {
      out.append(text, i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace

std::string printable_line(std::string_view text) { return visible(text, false); }

std::string printable_text(std::string_view text) { return visible(text, true); }

std::string spreadsheet_safe(std::string_view text) {
  std::string out = printable_line(text);
  if (!out.empty() && std::string_view("=+-@\t\r").find(out.front()) != std::string_view::npos) {
    // A number stays a number: "-1.5" is not a formula.
    char* end = nullptr;
    const std::string copy = out;
    std::strtod(copy.c_str(), &end);
    const bool number =
        out.front() != '=' && out.front() != '@' && end == copy.c_str() + copy.size();
    if (!number) out.insert(0, 1, '\'');
  }
  return out;
}

std::string bounded(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  std::size_t cut = max_bytes;
  // Back to the start of a character: never split a UTF-8 sequence.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return fmt::format("{}... ({} bytes)", text.substr(0, cut), text.size());
}

}  // namespace kharness
