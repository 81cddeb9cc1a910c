// Reading safetensors files: workload inputs given as {"type": "safetensors", "path",
// "tensor_key"}.
//
// Format (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N,
// N bytes of JSON {"<key>": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {...}}, then the data; offsets are relative to the first byte after the
// header. `__metadata__` is ignored.
//
// The file is mapped read-only and checked whole at open(): every entry's dtype must be one
// kharness has, its offsets inside the data and end - begin == product(shape) * element size.
// Anything else throws kharness::input_error (exit 2) naming the file and the field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kharness/dtype.hpp"

namespace kharness::verify {

struct SafetensorsTensor {
  std::string key;
  DType dtype = DType::kFloat32;
  std::vector<std::int64_t> shape;     // empty for a scalar (one element)
  const std::uint8_t* data = nullptr;  // into the mapping; valid while the file is open.
                                       // Not aligned beyond what the file's offsets give.
  std::size_t bytes = 0;
  std::size_t offset = 0;  // of the first byte, from the start of the file

  std::size_t element_count() const;
};

class SafetensorsFile {
 public:
  // Throws input_error naming the file (and the entry's field) when unreadable or malformed.
  static SafetensorsFile open(const std::filesystem::path& path);

  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Tensor keys in the order of the file's header.
  const std::vector<std::string>& keys() const { return keys_; }
  bool contains(const std::string& key) const { return tensors_.count(key) != 0; }
  // Throws input_error ("file: tensor_key: no tensor 'k' (tensors: a, b)") when absent.
  const SafetensorsTensor& tensor(const std::string& key) const;

  // The safetensors dtype name of a DType ("BF16", "F8_E4M3", ...), for writers and messages.
  static const char* dtype_name(DType dtype);

 private:
  SafetensorsFile() = default;
  void unmap() noexcept;

  std::filesystem::path path_;
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  std::vector<std::string> keys_;
  std::map<std::string, SafetensorsTensor> tensors_;
};

}  // namespace kharness::verify
