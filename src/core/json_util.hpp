// Reading JSON with errors that name the file and the field ("defs/x.json: inputs.q.dtype: ...").
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <type_traits>
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

// How deep objects and arrays may nest in any JSON kharness reads. nlohmann parses without
// recursion, but copying, comparing and dumping a value recurse once per level: JSON nested
// 100,000 deep (a plan comment, a definition) would overflow the stack there.
constexpr int kMaxDepth = 256;

// Thrown from the parser callback below.
struct DuplicateKey {  // a key given twice in one object
  std::string path;
};
struct TooDeep {  // objects or arrays nested deeper than kMaxDepth
  std::string path;
};

// nlohmann's message without its "[json.exception.type_error.302] " prefix.
inline std::string exception_text(const nlohmann::json::exception& e) {
  std::string what = e.what();
  auto close = what.find("] ");
  return close == std::string::npos ? what : what.substr(close + 2);
}

// Parses JSON text that may come from anyone (a submission, an edited file, a model's answer):
// the one JSON entry point of kharness. A syntax error names the file, line and column; a key
// given twice, nesting deeper than kMaxDepth and a number beyond a double's range (1e400) are
// errors too. Every failure is kharness::Error (exit 2); nothing else escapes.
// A key given twice is refused because JSON parsers keep one of the two silently (nlohmann the
// last), so a plan with two "launches" would run something other than what its author reads
// first; `allow_duplicates` is for JSON that only a program wrote (an HTTP API's answer).
template <class J = nlohmann::json>
J parse_text(const std::string& text, const std::string& source, int first_line = 1,
             bool allow_duplicates = false) {
  struct Frame {
    bool object = true;
    std::set<std::string> keys;  // seen in this object (a set: an object may have 100,000)
    std::string last;            // the latest key, for paths
    std::size_t index = 0;       // next element of this array
  };
  std::vector<Frame> frames;
  auto path = [&frames](const std::string& last) {
    std::string p;
    for (std::size_t i = 0; i + 1 < frames.size(); ++i) {
      const Frame& f = frames[i];
      if (f.object) {
        p = join_path(p, f.last.empty() ? std::string("?") : f.last);
      } else {
        p = index_path(p, f.index == 0 ? 0 : f.index - 1);
      }
    }
    return join_path(p, last);
  };
  using Event = typename J::parse_event_t;
  typename J::parser_callback_t check = [&](int, Event event, J& parsed) {
    auto element = [&frames] {
      if (!frames.empty() && !frames.back().object) ++frames.back().index;
    };
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        element();
        if (frames.size() >= static_cast<std::size_t>(kMaxDepth)) {
          frames.push_back(Frame{});
          std::string where = path("");  // the container being opened, "a.b[0]."
          if (!where.empty() && where.back() == '.') where.pop_back();
          throw TooDeep{where};
        }
        frames.push_back(Frame{event == Event::object_start, {}, {}, 0});
        break;
      case Event::object_end:
      case Event::array_end:
        if (!frames.empty()) frames.pop_back();
        break;
      case Event::key:
        if (!frames.empty() && frames.back().object && parsed.is_string()) {
          Frame& f = frames.back();
          f.last = parsed.template get<std::string>();
          if (!allow_duplicates && !f.keys.insert(f.last).second) throw DuplicateKey{path(f.last)};
        }
        break;
      case Event::value:
        element();
        break;
    }
    return true;
  };
  try {
    return J::parse(text, check);
  } catch (const DuplicateKey& d) {
    throw input_error(field(source, printable_line(bounded(d.path))),
                      "given twice in one object (which one counts would be a guess)");
  } catch (const TooDeep& d) {
    std::string where = d.path.empty() ? source : field(source, bounded(d.path));
    throw input_error(printable_line(where),
                      fmt::format("not valid JSON: nested deeper than {} levels", kMaxDepth));
  } catch (const nlohmann::json::parse_error& e) {
    auto [line, column] = line_column(text, e.byte == 0 ? 0 : e.byte - 1);
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 2: ".
    auto colon = what.find(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) what = "empty, expected JSON";
    throw input_error(fmt::format("{}:{}:{}", source, line + first_line - 1, column),
                      "not valid JSON: " + printable_line(bounded(what)));
  } catch (const nlohmann::json::out_of_range& e) {
    // 406: "number overflow parsing '1e400'": the number is quoted, so find its line.
    std::string what = exception_text(e);
    std::string where = source;
    auto open = what.find('\'');
    auto close = what.rfind('\'');
    if (open != std::string::npos && close > open + 1) {
      auto at = text.find(what.substr(open + 1, close - open - 1));
      if (at != std::string::npos) {
        auto [line, column] = line_column(text, at);
        where = fmt::format("{}:{}:{}", source, line + first_line - 1, column);
      }
    }
    throw input_error(where, "not valid JSON: " + printable_line(bounded(what)) +
                                 " (beyond the range of a double)");
  } catch (const nlohmann::json::exception& e) {
    throw input_error(source, "not valid JSON: " + printable_line(bounded(exception_text(e))));
  }
}

// For JSON that is only ever read when well formed (a worker's answer, an HTTP body, a cache
// entry): the checks of parse_text, and J(value_t::discarded) instead of any error. Duplicate
// keys are allowed (the writer is a program).
template <class J = nlohmann::json>
J parse_or_discarded(const std::string& text) {
  try {
    return parse_text<J>(text, "", 1, true);
  } catch (const Error&) {
    return J(J::value_t::discarded);
  }
}

// JSON text that never throws: bytes that are not UTF-8 (a compile log, a kernel name, a model's
// answer) become U+FFFD. Every writer of JSON uses this instead of nlohmann's dump(), which throws
// type_error 316 on the first bad byte.
template <class J>
std::string dump(const J& j, int indent = -1) {
  return j.dump(indent, ' ', false, J::error_handler_t::replace);
}

// Runs `read`, a reader of JSON from `source`; a nlohmann exception it lets through (a field of a
// wrong type that no check caught: .at(), .get<>(), .value()) becomes an input error naming the
// file, not an internal error.
// The message names the missing key when the library says which ("key 'x' not found"), and never
// quotes the library's own words: they name no file or field a user can find.
template <class F>
auto reading(const std::string& source, F&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const nlohmann::json::out_of_range& e) {
    const std::string what = exception_text(e);
    const auto open = what.find("key '");
    const auto close = open == std::string::npos ? open : what.find("' not found", open + 5);
    if (close != std::string::npos) {
      throw input_error(
          field(source, printable_line(bounded(what.substr(open + 5, close - open - 5), 80))),
          "missing required field");
    }
    const auto named = what.find("field '");
    const auto end = named == std::string::npos ? named : what.find("' is not", named + 7);
    if (end != std::string::npos) {
      throw input_error(
          field(source, printable_line(bounded(what.substr(named + 7, end - named - 7), 80))),
          "not a whole number in range");
    }
    throw input_error(source, "a field is missing or out of range");
  } catch (const nlohmann::json::exception&) {
    throw input_error(source, "a field has the wrong type");
  }
}

// Checks each field of the object `j` that `reference` (what the writer writes, e.g. the JSON of a
// default record) also has against the kind of value the writer puts there: a number, a string, a
// boolean, an object or an array (a null in either is not checked). Throws input_error naming the
// file and field: a reader can then convert what is left without a type error.
template <class J>
void expect_types_like(const J& j, const J& reference, const std::string& source,
                       const std::string& path = "") {
  if (!j.is_object() || !reference.is_object()) return;
  auto kind = [](const J& v) -> const char* {
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_boolean()) return "a boolean";
    if (v.is_object()) return "an object";
    if (v.is_array()) return "an array";
    return nullptr;
  };
  for (auto it = reference.begin(); it != reference.end(); ++it) {
    auto at = j.find(it.key());
    if (at == j.end()) continue;
    const char* want = kind(it.value());
    const char* got = kind(*at);
    if (want == nullptr || got == nullptr || want == got) continue;
    throw input_error(field(source, join_path(path, it.key())),
                      fmt::format("expected {}, got {}", want, type_name(*at)));
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
    // Only a whole value inside int64's range converts (a cast of 1e40 is undefined behaviour).
    if (v >= -9223372036854775808.0 && v < 9223372036854775808.0 && v == std::trunc(v))
      return static_cast<std::int64_t>(v);
  }
  expect_type(j, j.is_number_integer(), "an integer", source, path);
  return j.template get<std::int64_t>();
}

template <class J>
double as_number(const J& j, const std::string& source, const std::string& path) {
  expect_type(j, j.is_number(), "a number", source, path);
  return j.template get<double>();
}

// A whole-number member, read where .value(key, fallback) would be: absent gives `fallback`. A
// number that T cannot hold (1e308, -1 for an unsigned count, 2.5) throws out_of_range with a
// message that names the member: nlohmann would convert it with a cast that is undefined
// behaviour. Anything else is nlohmann's own .value() (a string: its type_error).
template <class T, class J>
T whole_or(const J& obj, const char* key, T fallback) {
  static_assert(std::is_integral_v<T>, "whole_or reads integers");
  if (!obj.is_object()) return obj.value(key, fallback);
  auto it = obj.find(key);
  if (it == obj.end()) return fallback;
  if (!it->is_number()) return obj.value(key, fallback);
  bool fits = false;
  if (it->is_number_unsigned()) {
    fits = it->template get<std::uint64_t>() <=
           static_cast<std::uint64_t>(std::numeric_limits<T>::max());
  } else if (it->is_number_integer()) {
    const auto v = it->template get<std::int64_t>();
    fits =
        v < 0 ? std::is_signed_v<T> && v >= static_cast<std::int64_t>(std::numeric_limits<T>::min())
              : static_cast<std::uint64_t>(v) <=
                    static_cast<std::uint64_t>(std::numeric_limits<T>::max());
  } else {
    const double v = it->template get<double>();
    const double limit = std::ldexp(1.0, std::numeric_limits<T>::digits);
    fits = std::isfinite(v) && v == std::trunc(v) && v < limit &&
           v >= (std::is_signed_v<T> ? -limit : 0.0);
  }
  if (!fits) {
    throw nlohmann::json::out_of_range::create(
        406, fmt::format("field '{}' is not a whole number in range", key), nullptr);
  }
  return it->template get<T>();
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
