// The safetensors reader, on files written byte by byte here.
#include "verify/safetensors.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kharness/error.hpp"
#include "test_util.hpp"

namespace kharness {
namespace {

using verify::SafetensorsFile;

// 8-byte little-endian header length, the header text, then the data bytes.
std::string safetensors_bytes(const std::string& header, const std::string& data,
                              std::uint64_t header_length_override = ~0ull) {
  const std::uint64_t n = header_length_override != ~0ull ? header_length_override : header.size();
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  std::filesystem::path write(const std::string& name, const std::string& bytes) {
    auto path = dir_.path() / name;
    std::ofstream(path, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  // Opening `bytes` fails with input_error whose location names the file and `field`, and whose
  // message contains `what`.
  void expect_malformed(const std::string& bytes, const std::string& field,
                        const std::string& what) {
    const auto path = write("bad.safetensors", bytes);
    try {
      SafetensorsFile::open(path);
      ADD_FAILURE() << "no error for field " << field;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      EXPECT_NE(e.where().find(path.string()), std::string::npos) << e.message();
      EXPECT_NE(e.where().find(field), std::string::npos) << e.message();
      EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
    }
  }

  testing::TempDir dir_;
};

TEST_F(SafetensorsTest, ReadsTensorsBackInHeaderOrder) {
  // "w": BF16 [2, 3] = 12 bytes at [0, 12); "idx": I32 [2] at [12, 20); "s": U8 scalar at
  // [20, 21); "e": F8_E4M3 [0, 4] (empty) at [21, 21); "m": BOOL [3] at [21, 24).
  std::string header = R"({"__metadata__":{"format":"pt"},)"
                       R"("w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
                       R"("idx":{"dtype":"I32","shape":[2],"data_offsets":[12,20]},)"
                       R"("s":{"dtype":"U8","shape":[],"data_offsets":[20,21]},)"
                       R"("e":{"dtype":"F8_E4M3","shape":[0,4],"data_offsets":[21,21]},)"
                       R"("m":{"dtype":"BOOL","shape":[3],"data_offsets":[21,24]}})";
  while ((8 + header.size()) % 8 != 0) header += ' ';  // writers pad with spaces
  std::string data;
  const std::uint16_t w[6] = {0x3F80, 0xC000, 0x0000, 0x8000, 0x7F80, 0x3E80};
  data.append(reinterpret_cast<const char*>(w), sizeof w);
  const std::int32_t idx[2] = {7, -3};
  data.append(reinterpret_cast<const char*>(idx), sizeof idx);
  data += '\x2A';
  data += std::string("\x01\x00\x01", 3);
  const auto path = write("good.safetensors", safetensors_bytes(header, data));

  SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.keys(), (std::vector<std::string>{"w", "idx", "s", "e", "m"}));
  EXPECT_TRUE(file.contains("idx"));
  EXPECT_FALSE(file.contains("__metadata__"));

  const auto& tw = file.tensor("w");
  EXPECT_EQ(tw.dtype, DType::kBFloat16);
  EXPECT_EQ(tw.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(tw.element_count(), 6u);
  EXPECT_EQ(tw.bytes, 12u);
  EXPECT_EQ(tw.offset, 8 + header.size());
  EXPECT_EQ(std::memcmp(tw.data, w, sizeof w), 0);

  const auto& ti = file.tensor("idx");
  EXPECT_EQ(ti.dtype, DType::kInt32);
  std::int32_t back[2];
  std::memcpy(back, ti.data, sizeof back);
  EXPECT_EQ(back[0], 7);
  EXPECT_EQ(back[1], -3);

  const auto& ts = file.tensor("s");
  EXPECT_TRUE(ts.shape.empty());
  EXPECT_EQ(ts.element_count(), 1u);
  EXPECT_EQ(ts.data[0], 0x2A);

  EXPECT_EQ(file.tensor("e").bytes, 0u);
  EXPECT_EQ(file.tensor("e").element_count(), 0u);
  EXPECT_EQ(file.tensor("e").dtype, DType::kFloat8E4M3);
  EXPECT_EQ(file.tensor("m").dtype, DType::kBool);
  EXPECT_EQ(file.tensor("m").data[2], 1);

  // Moving keeps the mapping (and the data pointers) alive.
  SafetensorsFile moved = std::move(file);
  EXPECT_EQ(std::memcmp(moved.tensor("w").data, w, sizeof w), 0);

  try {
    moved.tensor("wx");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("no tensor 'wx'"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("'w'"), std::string::npos) << e.message();
    EXPECT_NE(e.where().find("good.safetensors"), std::string::npos) << e.message();
  }
}

TEST_F(SafetensorsTest, EveryDTypeName) {
  const char* names[] = {"F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I64",
                         "I32", "I16", "I8",   "U8",      "BOOL"};
  const DType dtypes[] = {DType::kFloat32,    DType::kFloat16, DType::kBFloat16, DType::kFloat8E4M3,
                          DType::kFloat8E5M2, DType::kInt64,   DType::kInt32,    DType::kInt16,
                          DType::kInt8,       DType::kUInt8,   DType::kBool};
  for (std::size_t i = 0; i < std::size(names); ++i) {
    const std::size_t size = dtype_size(dtypes[i]);
    const std::string header = std::string(R"({"t":{"dtype":")") + names[i] +
                               R"(","shape":[3],"data_offsets":[0,)" + std::to_string(3 * size) +
                               "]}}";
    const auto path = write("t.safetensors", safetensors_bytes(header, std::string(3 * size, 'x')));
    auto file = SafetensorsFile::open(path);
    EXPECT_EQ(file.tensor("t").dtype, dtypes[i]) << names[i];
    EXPECT_STREQ(SafetensorsFile::dtype_name(dtypes[i]), names[i]);
  }
}

TEST_F(SafetensorsTest, EmptyHeaderObjectHasNoTensors) {
  const auto path = write("empty.safetensors", safetensors_bytes("{}", ""));
  auto file = SafetensorsFile::open(path);
  EXPECT_TRUE(file.keys().empty());
  EXPECT_THROW(file.tensor("x"), Error);
}

TEST_F(SafetensorsTest, MalformedFiles) {
  const std::string ok_entry = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string data(8, '\0');
  auto with = [&](const std::string& entry) {
    return safetensors_bytes(R"({"x":)" + entry + "}", data);
  };

  expect_malformed(std::string("\x05\x00\x00", 3), "", "too short");
  expect_malformed(safetensors_bytes(R"({"x":1})", "", 1000), "header length",
                   "larger than the file");
  expect_malformed(safetensors_bytes("{\"x\": [1,", data), "header", "not valid JSON");
  expect_malformed(safetensors_bytes("", data), "header", "not valid JSON");
  expect_malformed(safetensors_bytes("[1, 2]", data), "header", "expected a JSON object");
  expect_malformed(with("42"), "x", "expected an object");
  expect_malformed(with(R"({"shape":[2],"data_offsets":[0,8]})"), "x.dtype", "missing");
  expect_malformed(with(R"({"dtype":7,"shape":[2],"data_offsets":[0,8]})"), "x.dtype",
                   "expected a string");
  expect_malformed(with(R"({"dtype":"Q9","shape":[2],"data_offsets":[0,8]})"), "x.dtype",
                   "unknown dtype 'Q9'");
  expect_malformed(with(R"({"dtype":"F64","shape":[1],"data_offsets":[0,8]})"), "x.dtype",
                   "unsupported dtype 'F64'");
  expect_malformed(with(R"({"dtype":"F32","data_offsets":[0,8]})"), "x.shape", "missing");
  expect_malformed(with(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), "x.shape[0]",
                   ">= 0");
  expect_malformed(with(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,8]})"), "x.shape[0]",
                   "non-negative integer");
  expect_malformed(with(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"),
                   "x.shape", "overflows");
  expect_malformed(with(R"({"dtype":"F32","shape":[2]})"), "x.data_offsets", "missing");
  expect_malformed(with(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"), "x.data_offsets",
                   "expected [begin, end]");
  expect_malformed(with(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"), "x.data_offsets",
                   "after end");
  expect_malformed(with(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"), "x.data_offsets",
                   "out of range");
  expect_malformed(with(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), "x.data_offsets",
                   "needs 12");
  expect_malformed(with(R"({"dtype":"BF16","shape":[2],"data_offsets":[0,8]})"), "x.data_offsets",
                   "needs 4");

  // The well-formed variant of the same file opens.
  EXPECT_NO_THROW(SafetensorsFile::open(write("ok.safetensors", with(ok_entry))));
}

TEST_F(SafetensorsTest, MissingFile) {
  try {
    SafetensorsFile::open(dir_.path() / "nope.safetensors");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("nope.safetensors"), std::string::npos);
    EXPECT_NE(e.message().find("cannot open"), std::string::npos) << e.message();
  }
  EXPECT_THROW(SafetensorsFile::open(dir_.path()), Error);  // a folder
}

}  // namespace
}  // namespace kharness
