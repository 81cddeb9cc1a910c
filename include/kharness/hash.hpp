// SHA-256, for cache keys and content addressing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kharness {

class Sha256 {
 public:
  Sha256();
  Sha256& update(std::string_view data);
  // Length-prefixed, so that ("ab","c") and ("a","bc") hash differently.
  Sha256& field(std::string_view data);
  std::string hex();  // finishes; the object is not reused after this

 private:
  void block(const std::uint8_t* p);
  std::uint32_t h_[8];
  std::uint8_t buf_[64];
  std::size_t buf_len_ = 0;
  std::uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);

}  // namespace kharness
