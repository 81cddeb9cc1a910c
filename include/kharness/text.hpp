// Small text helpers shared by loaders and the CLI.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kharness {

std::size_t edit_distance(std::string_view a, std::string_view b);
// Up to `limit` candidates close to `name` (edit distance or substring), best first.
std::vector<std::string> close_matches(std::string_view name,
                                       const std::vector<std::string>& candidates,
                                       std::size_t limit = 3);
// 1-based line and column of a byte offset.
std::pair<int, int> line_column(std::string_view text, std::size_t offset);
// read_regular_file (kharness/file.hpp): a regular file only, size-capped; throws Error (exit 2).
std::string read_file(const std::string& path);
// Writes to a temporary file in the same folder, then renames it over `path`.
void write_file_atomic(const std::string& path, std::string_view content);
std::string join(const std::vector<std::string>& parts, std::string_view sep);

// The length of the well-formed UTF-8 sequence at s[i] (1-4), or 0 when the bytes there are not
// one (a stray continuation byte, a truncated sequence, an overlong form, a surrogate, > U+10FFFF).
std::size_t utf8_sequence_length(std::string_view s, std::size_t i);
// `text` as one line of readable text, for messages that quote what a user gave (a kernel name, a
// JSON excerpt): control characters (a newline, a NUL) and bytes that are not UTF-8 become \n or
// \xHH.
std::string printable_line(std::string_view text);
// `text` cut to at most about `max_bytes` (at a character boundary) with "... (N bytes)" appended:
// what a user gave, quoted in a message (a name, a path, a JSON excerpt), has a length bound.
std::string bounded(std::string_view text, std::size_t max_bytes = 200);

}  // namespace kharness
