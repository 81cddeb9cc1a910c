// Reading JSON with errors that name the file and the field ("defs/x.json: inputs.q.dtype: ...").
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kharness/error.hpp"
#include "kharness/text.hpp"

namespace kharness::json_util {

// "string", "number", "object", ... for messages.
template <class J>
std::string type_name(const J& j) {
  if (j.is_number_integer()) return "integer";
  if (j.is_number_float()) return "number";
  return j.type_name();
}

// `where` is "file: field.path" (or just "file" at the top level).
inline std::string field(const std::string& source, const std::string& path) {
  return path.empty() ? source : source + ": " + path;
}

inline std::string join_path(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

inline std::string index_path(const std::string& path, std::size_t i) {
  return fmt::format("{}[{}]", path, i);
}

// A key given twice in one object: JSON parsers keep one of the two silently (nlohmann the last),
// so a plan with two "launches" or a definition with two "tolerance"s would run something other
// than what its author reads first. Thrown from the parser callback below.
struct DuplicateKey {
  std::string path;
};

// Parses JSON text; a syntax error names the file, line and column, a duplicate key its path.
template <class J = nlohmann::json>
J parse_text(const std::string& text, const std::string& source, int first_line = 1) {
  struct Frame {
    bool object = true;
    std::vector<std::string> keys;  // seen in this object
    std::size_t index = 0;          // next element of this array
  };
  std::vector<Frame> frames;
  auto path = [&frames](const std::string& last) {
    std::string p;
    for (std::size_t i = 0; i + 1 < frames.size(); ++i) {
      const Frame& f = frames[i];
      if (f.object) {
        p = join_path(p, f.keys.empty() ? std::string("?") : f.keys.back());
      } else {
        p = index_path(p, f.index == 0 ? 0 : f.index - 1);
      }
    }
    return join_path(p, last);
  };
  using Event = typename J::parse_event_t;
  typename J::parser_callback_t check_keys = [&](int, Event event, J& parsed) {
    auto element = [&frames] {
      if (!frames.empty() && !frames.back().object) ++frames.back().index;
    };
    switch (event) {
      case Event::object_start:
        element();
        frames.push_back({true, {}, 0});
        break;
      case Event::array_start:
        element();
        frames.push_back({false, {}, 0});
        break;
      case Event::object_end:
      case Event::array_end:
        if (!frames.empty()) frames.pop_back();
        break;
      case Event::key:
        if (!frames.empty() && frames.back().object && parsed.is_string()) {
          const std::string key = parsed.template get<std::string>();
          auto& keys = frames.back().keys;
          if (std::find(keys.begin(), keys.end(), key) != keys.end()) throw DuplicateKey{path(key)};
          keys.push_back(key);
        }
        break;
      case Event::value:
        element();
        break;
    }
    return true;
  };
  try {
    return J::parse(text, check_keys);
  } catch (const DuplicateKey& d) {
    throw input_error(field(source, d.path),
                      "given twice in one object (which one counts would be a guess)");
  } catch (const nlohmann::json::parse_error& e) {
    auto [line, column] = line_column(text, e.byte == 0 ? 0 : e.byte - 1);
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 2: ".
    auto colon = what.find(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) what = "empty, expected JSON";
    throw input_error(fmt::format("{}:{}:{}", source, line + first_line - 1, column),
                      "not valid JSON: " + what);
  }
}

template <class J>
const J& require(const J& obj, const char* key, const std::string& source,
                 const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    throw input_error(field(source, path.empty() ? std::string(key) : join_path(path, key)),
                      "missing required field");
  }
  return *it;
}

template <class J>
void expect_type(const J& j, bool ok, const char* expected, const std::string& source,
                 const std::string& path) {
  if (!ok) {
    throw input_error(field(source, path),
                      fmt::format("expected {}, got {}", expected, type_name(j)));
  }
}

template <class J>
const J& require_object(const J& j, const std::string& source, const std::string& path) {
  expect_type(j, j.is_object(), "an object", source, path);
  return j;
}

template <class J>
std::string as_string(const J& j, const std::string& source, const std::string& path) {
  expect_type(j, j.is_string(), "a string", source, path);
  return j.template get<std::string>();
}

template <class J>
std::int64_t as_int(const J& j, const std::string& source, const std::string& path) {
  // nlohmann keeps 2^63 .. 2^64-1 as unsigned; read as int64 they would wrap to negatives.
  if (j.is_number_unsigned() &&
      j.template get<std::uint64_t>() >
          static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    throw input_error(field(source, path), fmt::format("{} does not fit in a 64-bit signed integer",
                                                       j.template get<std::uint64_t>()));
  }
  if (j.is_number_float()) {
    double v = j.template get<double>();
    if (v == static_cast<double>(static_cast<std::int64_t>(v))) return static_cast<std::int64_t>(v);
  }
  expect_type(j, j.is_number_integer(), "an integer", source, path);
  return j.template get<std::int64_t>();
}

template <class J>
double as_number(const J& j, const std::string& source, const std::string& path) {
  expect_type(j, j.is_number(), "a number", source, path);
  return j.template get<double>();
}

// Optional string member; `fallback` when absent.
template <class J>
std::string string_or(const J& obj, const char* key, const std::string& fallback,
                      const std::string& source, const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  return as_string(*it, source, join_path(path, key));
}

template <class J>
void reject_unknown_keys(const J& obj, std::initializer_list<const char*> known,
                         const std::string& source, const std::string& path) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) {
      std::vector<std::string> names(known.begin(), known.end());
      auto close = close_matches(it.key(), names, 1);
      throw input_error(field(source, join_path(path, it.key())),
                        close.empty()
                            ? fmt::format("unknown field (known: {})", join(names, ", "))
                            : fmt::format("unknown field (did you mean '{}'?)", close[0]));
    }
  }
}

}  // namespace kharness::json_util
