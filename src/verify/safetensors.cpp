#include "verify/safetensors.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/json_util.hpp"
#include "kharness/error.hpp"
#include "kharness/text.hpp"

namespace kharness::verify {
namespace {

struct NameDType {
  const char* name;
  DType dtype;
};

constexpr NameDType kDTypes[] = {
    {"F32", DType::kFloat32},        {"F16", DType::kFloat16},        {"BF16", DType::kBFloat16},
    {"F8_E4M3", DType::kFloat8E4M3}, {"F8_E5M2", DType::kFloat8E5M2}, {"I64", DType::kInt64},
    {"I32", DType::kInt32},          {"I16", DType::kInt16},          {"I8", DType::kInt8},
    {"U8", DType::kUInt8},           {"BOOL", DType::kBool},
};

// safetensors dtypes kharness has no DType for: named, so the message says "not supported"
// rather than "unknown".
constexpr const char* kUnsupported[] = {"F64", "U16",         "U32",        "U64",
                                        "C64", "F8_E8M0",     "F6_E2M3",    "F6_E3M2",
                                        "F4",  "F8_E4M3FNUZ", "F8_E5M2FNUZ"};

std::string supported_names() {
  std::vector<std::string> names;
  for (const auto& d : kDTypes) {
    names.emplace_back(d.name);
  }
  return join(names, ", ");
}

std::string where(const std::filesystem::path& path, const std::string& field) {
  return field.empty() ? path.string() : path.string() + ": " + field;
}

// A JSON value as a non-negative integer that fits std::uint64_t, or throws.
std::uint64_t as_size(const nlohmann::ordered_json& j, const std::filesystem::path& path,
                      const std::string& field) {
  if (j.is_number_unsigned()) {
    return j.get<std::uint64_t>();
  }
  if (j.is_number_integer()) {
    throw input_error(where(path, field),
                      fmt::format("must be >= 0, got {}", j.get<std::int64_t>()));
  }
  throw input_error(where(path, field),
                    fmt::format("expected a non-negative integer, got {}", json_util::dump(j)));
}

// One tensor's entry of the header: its dtype, shape and data offsets, checked against the data
// section (data_size bytes from data_start in the mapped file at bytes).
SafetensorsTensor read_tensor_entry(const std::filesystem::path& path, const std::string& key,
                                    const nlohmann::ordered_json& entry, const std::uint8_t* bytes,
                                    std::uint64_t data_start, std::uint64_t data_size) {
  if (!entry.is_object()) {
    throw input_error(where(path, key),
                      fmt::format("expected an object with dtype, shape and data_offsets, got {}",
                                  entry.type_name()));
  }
  SafetensorsTensor t;
  t.key = key;

  // dtype
  auto dt = entry.find("dtype");
  if (dt == entry.end()) {
    throw input_error(where(path, key + ".dtype"), "missing required field");
  }
  if (!dt->is_string()) {
    throw input_error(where(path, key + ".dtype"),
                      fmt::format("expected a string, got {}", dt->type_name()));
  }
  const std::string dtype_text = dt->get<std::string>();
  bool found = false;
  for (const auto& d : kDTypes) {
    if (dtype_text == d.name) {
      t.dtype = d.dtype;
      found = true;
    }
  }
  if (!found) {
    bool known = false;
    for (const char* u : kUnsupported) {
      known = known || dtype_text == u;
    }
    throw input_error(
        where(path, key + ".dtype"),
        fmt::format("{} dtype '{}' (kharness tensors are {})", known ? "unsupported" : "unknown",
                    dtype_text, supported_names()));
  }

  // shape; the element count is checked for overflow as it is built
  auto sh = entry.find("shape");
  if (sh == entry.end()) {
    throw input_error(where(path, key + ".shape"), "missing required field");
  }
  if (!sh->is_array()) {
    throw input_error(where(path, key + ".shape"),
                      fmt::format("expected an array, got {}", sh->type_name()));
  }
  std::uint64_t count = 1;
  bool overflow = false;
  for (std::size_t i = 0; i < sh->size(); ++i) {
    const std::string field = fmt::format("{}.shape[{}]", key, i);
    const std::uint64_t d = as_size((*sh)[i], path, field);
    if (d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      throw input_error(where(path, field), fmt::format("{} is too large", d));
    }
    t.shape.push_back(static_cast<std::int64_t>(d));
    if (d != 0 && count > std::numeric_limits<std::uint64_t>::max() / d) {
      overflow = true;
    }
    count *= d;
  }
  const std::uint64_t size = dtype_size(t.dtype);
  if (overflow || count > std::numeric_limits<std::uint64_t>::max() / size) {
    throw input_error(where(path, key + ".shape"), "element count overflows");
  }

  // data_offsets
  auto off = entry.find("data_offsets");
  if (off == entry.end()) {
    throw input_error(where(path, key + ".data_offsets"), "missing required field");
  }
  if (!off->is_array() || off->size() != 2) {
    throw input_error(where(path, key + ".data_offsets"),
                      fmt::format("expected [begin, end], got {}", off->dump()));
  }
  const std::uint64_t begin = as_size((*off)[0], path, key + ".data_offsets[0]");
  const std::uint64_t end = as_size((*off)[1], path, key + ".data_offsets[1]");
  if (begin > end) {
    throw input_error(where(path, key + ".data_offsets"),
                      fmt::format("begin {} is after end {}", begin, end));
  }
  if (end > data_size) {
    throw input_error(where(path, key + ".data_offsets"),
                      fmt::format("[{}, {}] is out of range: the data section has {} bytes", begin,
                                  end, data_size));
  }
  if (end - begin != count * size) {
    throw input_error(
        where(path, key + ".data_offsets"),
        fmt::format("[{}, {}] holds {} bytes, but shape [{}] of {} needs {} ({} elements of {} "
                    "bytes)",
                    begin, end, end - begin, fmt::join(t.shape, ", "), dtype_text, count * size,
                    count, size));
  }
  t.offset = static_cast<std::size_t>(data_start + begin);
  t.bytes = static_cast<std::size_t>(end - begin);
  t.data = bytes + t.offset;
  return t;
}

}  // namespace

std::size_t SafetensorsTensor::element_count() const {
  std::size_t n = 1;
  for (auto d : shape) {
    n *= static_cast<std::size_t>(d);
  }
  return n;
}

const char* SafetensorsFile::dtype_name(DType dtype) {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) {
      return d.name;
    }
  }
  return "?";
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile file;
  file.path_ = path;

  // O_NONBLOCK: a FIFO in place of the file must not block the open (fstat refuses it below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    throw input_error(path.string(), fmt::format("cannot open: {}", std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw input_error(path.string(), fmt::format("cannot stat: {}", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw input_error(path.string(), "not a regular file");
  }
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    throw input_error(path.string(),
                      fmt::format("{} bytes is too short for a safetensors file (an 8-byte header "
                                  "length comes first)",
                                  file_size));
  }
  void* map = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file
  if (map == MAP_FAILED) {
    throw input_error(path.string(), fmt::format("cannot map: {}", std::strerror(map_errno)));
  }
  file.map_ = map;
  file.map_size_ = file_size;
  const auto* bytes = static_cast<const std::uint8_t*>(map);

  std::uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) {
    header_size = (header_size << 8) | bytes[i];  // little-endian
  }
  if (header_size > file_size - 8) {
    throw input_error(where(path, "header length"),
                      fmt::format("{} is larger than the file allows ({} bytes after the length)",
                                  header_size, file_size - 8));
  }
  const std::uint64_t data_start = 8 + header_size;
  const std::uint64_t data_size = file_size - data_start;
  const std::string header_text(reinterpret_cast<const char*>(bytes + 8), header_size);

  nlohmann::ordered_json header;
  header = json_util::parse_text<nlohmann::ordered_json>(header_text, where(path, "header"));
  if (!header.is_object()) {
    throw input_error(where(path, "header"),
                      fmt::format("expected a JSON object, got {}", header.type_name()));
  }

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    if (key == "__metadata__") {
      continue;
    }
    SafetensorsTensor t = read_tensor_entry(path, key, it.value(), bytes, data_start, data_size);
    file.keys_.push_back(key);
    file.tensors_.emplace(key, std::move(t));
  }
  spdlog::debug("safetensors: {}: {} tensors, {} header bytes, {} data bytes", path.string(),
                file.keys_.size(), header_size, data_size);
  return file;
}

const SafetensorsTensor& SafetensorsFile::tensor(const std::string& key) const {
  auto it = tensors_.find(key);
  if (it == tensors_.end()) {
    auto close = close_matches(key, keys_, 3);
    throw input_error(
        where(path_, "tensor_key"),
        close.empty()
            ? fmt::format("no tensor '{}' (tensors: {})", key,
                          keys_.empty() ? std::string("none") : join(keys_, ", "))
            : fmt::format("no tensor '{}' (did you mean '{}'?)", key, join(close, "', '")));
  }
  return it->second;
}

void SafetensorsFile::unmap() noexcept {
  if (map_ != nullptr) {
    ::munmap(map_, map_size_);
  }
  map_ = nullptr;
  map_size_ = 0;
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)),
      keys_(std::move(other.keys_)),
      tensors_(std::move(other.tensors_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    keys_ = std::move(other.keys_);
    tensors_ = std::move(other.tensors_);
  }
  return *this;
}

}  // namespace kharness::verify
