#include "kharness/text.hpp"

#include <gtest/gtest.h>

#include "core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/hash.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  EXPECT_EQ(sha256_hex(million),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Incremental updates agree with one update.
  EXPECT_EQ(Sha256().update("ab").update("c").hex(), sha256_hex("abc"));
  // Fields are length-prefixed.
  EXPECT_NE(Sha256().field("ab").field("c").hex(), Sha256().field("a").field("bc").hex());
}

TEST(Text, CloseMatches) {
  std::vector<std::string> names = {"rmsnorm_h4096", "rmsnorm_h7168", "gemm_n4096_k14336"};
  auto m = close_matches("rmsnorm_h4097", names);
  ASSERT_FALSE(m.empty());
  EXPECT_EQ(m[0], "rmsnorm_h4096");
  EXPECT_TRUE(close_matches("completely_different_thing", names).empty());
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

// A key given twice in one object is an input error naming its path; the same key in two
// different objects, or twice in an array of values, is fine.
TEST(JsonUtil, DuplicateKeysAreErrorsNamedByTheirPath) {
  namespace ju = json_util;
  auto where = [](const std::string& text) -> std::string {
    try {
      ju::parse_text(text, "f.json");
    } catch (const Error& e) {
      return e.message();
    }
    return "(parsed)";
  };
  EXPECT_EQ(where(R"({"a": [{"x": 1}, {"x": 2}], "b": {"x": 3}, "c": ["x", "x"]})"), "(parsed)");
  EXPECT_NE(where(R"({"a": 1, "a": 2})").find("f.json: a: given twice"), std::string::npos);
  EXPECT_NE(where(R"({"a": [{"x": 1}, {"y": 1, "y": 2}]})").find("f.json: a[1].y: given twice"),
            std::string::npos)
      << where(R"({"a": [{"x": 1}, {"y": 1, "y": 2}]})");
  EXPECT_NE(where(R"({"k": {"t": {"atol": 1, "rtol": 2, "atol": 3}}})").find("k.t.atol"),
            std::string::npos);
  EXPECT_NE(where(R"([[0, {"q": 1}], [{"z": 0, "z": 1}]])").find("[1][0].z"), std::string::npos)
      << where(R"([[0, {"q": 1}], [{"z": 0, "z": 1}]])");
  // The ordered flavour too.
  EXPECT_THROW(ju::parse_text<nlohmann::ordered_json>(R"({"a": 1, "a": 1})", "g.json"), Error);
}

// One UTF-8 check serves the CLI's error lines and the reports' XML: well-formed sequences pass,
// everything a strict decoder refuses is 0.
TEST(Text, Utf8SequenceLengthIsStrict) {
  EXPECT_EQ(utf8_sequence_length("a", 0), 1u);
  EXPECT_EQ(utf8_sequence_length("\xc3\xa9", 0), 2u);          // é
  EXPECT_EQ(utf8_sequence_length("\xe2\x82\xac", 0), 3u);      // €
  EXPECT_EQ(utf8_sequence_length("\xf0\x9f\x98\x80", 0), 4u);  // an emoji
  EXPECT_EQ(utf8_sequence_length("\x80", 0), 0u);              // stray continuation
  EXPECT_EQ(utf8_sequence_length("\xc3", 0), 0u);              // truncated
  EXPECT_EQ(utf8_sequence_length("\xc0\xaf", 0), 0u);          // overlong '/'
  EXPECT_EQ(utf8_sequence_length("\xe0\x80\xaf", 0), 0u);      // overlong, 3 bytes
  EXPECT_EQ(utf8_sequence_length("\xed\xa0\x80", 0), 0u);      // a surrogate
  EXPECT_EQ(utf8_sequence_length("\xf4\x90\x80\x80", 0), 0u);  // above U+10FFFF
  EXPECT_EQ(printable_line("k\nx\xff\xc3\xa9"), "k\\nx\\xff\xc3\xa9");
  EXPECT_EQ(printable_line(std::string("a\0b", 3)), "a\\x00b");
}

TEST(Text, LineColumn) {
  std::string text = "ab\ncd\nef";
  EXPECT_EQ(line_column(text, 0), std::make_pair(1, 1));
  EXPECT_EQ(line_column(text, 4), std::make_pair(2, 2));
  EXPECT_EQ(line_column(text, 6), std::make_pair(3, 1));
}

TEST(Text, AtomicWriteReplacesAndLeavesNoTemporaries) {
  testing::TempDir dir;
  std::string path = (dir.path() / "sub" / "f.txt").string();
  write_file_atomic(path, "one");
  write_file_atomic(path, "two");
  EXPECT_EQ(read_file(path), "two");
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "sub")) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(Text, ReadFileErrorsNameThePath) {
  try {
    read_file("/nonexistent/kharness.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_EQ(e.where(), "/nonexistent/kharness.json");
  }
}

// `kharness compile /dev/zero` read until memory ran out; a device is bad input at once.
TEST(Text, ReadFileRefusesDevices) {
  try {
    read_file("/dev/zero");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kUsage);
    EXPECT_EQ(e.where(), "/dev/zero");
    EXPECT_NE(std::string(e.what()).find("device"), std::string::npos) << e.what();
  }
}

// Integers of untrusted JSON (a run folder, a worker's verdict, a model API's usage): what a
// counter of type T holds is read, anything else throws, and the reader names the field.
TEST(JsonUtil, WholeNumbersAreReadOnlyInRange) {
  using nlohmann::json;
  const json j = {{"small", 7},           {"whole_float", 12.0}, {"huge", 1e308},
                  {"negative", -1},       {"fraction", 2.5},     {"max_u64", UINT64_MAX},
                  {"int_max", 2147483647}};
  EXPECT_EQ(json_util::whole_or(j, "small", 0), 7);
  EXPECT_EQ(json_util::whole_or(j, "whole_float", 0), 12);
  EXPECT_EQ(json_util::whole_or(j, "absent", 5), 5);
  EXPECT_EQ(json_util::whole_or(j, "int_max", 0), 2147483647);
  EXPECT_EQ(json_util::whole_or(j, "max_u64", std::uint64_t{0}), UINT64_MAX);
  EXPECT_EQ(json_util::whole_or(j, "negative", std::int64_t{0}), -1);
  EXPECT_THROW(json_util::whole_or(j, "huge", 0), nlohmann::json::out_of_range);
  EXPECT_THROW(json_util::whole_or(j, "huge", std::uint64_t{0}), nlohmann::json::out_of_range);
  EXPECT_THROW(json_util::whole_or(j, "negative", std::size_t{0}), nlohmann::json::out_of_range);
  EXPECT_THROW(json_util::whole_or(j, "fraction", 0), nlohmann::json::out_of_range);
  EXPECT_THROW(json_util::whole_or(j, "max_u64", std::int64_t{0}), nlohmann::json::out_of_range);
  const json wider = {{"v", 2147483648.0}};
  EXPECT_THROW(json_util::whole_or(wider, "v", 0), nlohmann::json::out_of_range);
  testing::expect_input_error(
      [&] {
        return json_util::reading("run/record.json",
                                  [&] { return json_util::whole_or(j, "huge", 0); });
      },
      "run/record.json: huge", "whole number");
}

}  // namespace
}  // namespace kharness
