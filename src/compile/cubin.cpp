// The symbol table of a cubin (the ELF image NVRTC hands back): which data objects a loaded module
// keeps in device memory, under the names the driver resolves (cuModuleGetGlobal).
#include <cstdint>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kharness/compile.hpp"

namespace kharness {
namespace {

// ELF64 (System V gABI): the offsets kharness reads, little-endian.
constexpr std::size_t kEhdrSize = 64, kShdrSize = 64, kSymSize = 24;
constexpr std::uint32_t kShtSymtab = 2;
constexpr unsigned kSttObject = 1;

template <typename T>
bool read(std::string_view image, std::uint64_t offset, T& out) {
  if (offset > image.size() || image.size() - offset < sizeof(T)) return false;
  std::memcpy(&out, image.data() + offset, sizeof(T));
  return true;
}

// The NUL-terminated string at `offset` of the string table [table, table + size).
std::optional<std::string> string_at(std::string_view image, std::uint64_t table,
                                     std::uint64_t size, std::uint32_t offset) {
  if (offset >= size) return std::nullopt;
  const std::string_view strings = image.substr(table, size);
  const std::size_t end = strings.find('\0', offset);
  if (end == std::string_view::npos) return std::nullopt;
  return std::string(strings.substr(offset, end - offset));
}

struct Section {
  std::string name;
  std::uint32_t name_offset = 0;  // in the section name table
  std::uint32_t type = 0;
  std::uint64_t offset = 0, size = 0, entsize = 0;
  std::uint32_t link = 0;
};

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// Sections whose objects outlive a launch: the module's globals and its constant banks, but not
// a kernel's parameter bank (.nv.constant0.<kernel>, rewritten by every launch).
bool keeps_state(std::string_view section) {
  return section == ".nv.global" || starts_with(section, ".nv.global.") ||
         (starts_with(section, ".nv.constant") && !starts_with(section, ".nv.constant0"));
}

}  // namespace

std::optional<std::vector<CubinSymbol>> cubin_state_symbols(std::string_view cubin) {
  if (cubin.size() < kEhdrSize ||
      cubin.substr(0, 4) !=
          "\x7f"
          "ELF" ||
      cubin[4] != 2 /* ELFCLASS64 */ || cubin[5] != 1 /* little-endian */) {
    return std::nullopt;
  }
  std::uint64_t shoff = 0;
  std::uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
  if (!read(cubin, 0x28, shoff) || !read(cubin, 0x3A, shentsize) || !read(cubin, 0x3C, shnum) ||
      !read(cubin, 0x3E, shstrndx) || shentsize != kShdrSize || shstrndx >= shnum) {
    return std::nullopt;
  }
  std::vector<Section> sections(shnum);
  for (std::uint16_t i = 0; i < shnum; ++i) {
    const std::uint64_t h = shoff + std::uint64_t{i} * kShdrSize;
    Section& s = sections[i];
    if (!read(cubin, h, s.name_offset) || !read(cubin, h + 4, s.type) ||
        !read(cubin, h + 0x18, s.offset) || !read(cubin, h + 0x20, s.size) ||
        !read(cubin, h + 0x28, s.link) || !read(cubin, h + 0x38, s.entsize)) {
      return std::nullopt;
    }
  }
  const Section& names = sections[shstrndx];
  if (names.offset > cubin.size() || cubin.size() - names.offset < names.size) return std::nullopt;
  for (auto& s : sections) {
    auto n = string_at(cubin, names.offset, names.size, s.name_offset);
    if (!n) return std::nullopt;
    s.name = *n;
  }
  std::vector<CubinSymbol> out;
  std::set<std::string> seen;
  for (const auto& table : sections) {
    if (table.type != kShtSymtab) continue;
    if (table.entsize != kSymSize || table.link >= shnum || table.offset > cubin.size() ||
        cubin.size() - table.offset < table.size) {
      return std::nullopt;
    }
    const Section& strings = sections[table.link];
    if (strings.offset > cubin.size() || cubin.size() - strings.offset < strings.size) {
      return std::nullopt;
    }
    for (std::uint64_t e = table.offset; e + kSymSize <= table.offset + table.size; e += kSymSize) {
      std::uint32_t name = 0;
      std::uint8_t info = 0;
      std::uint16_t shndx = 0;
      std::uint64_t value = 0, size = 0;
      if (!read(cubin, e, name) || !read(cubin, e + 4, info) || !read(cubin, e + 6, shndx) ||
          !read(cubin, e + 8, value) || !read(cubin, e + 16, size)) {
        return std::nullopt;
      }
      // Defined objects only: an undefined one (section 0) or one in a special index
      // (>= SHN_LORESERVE) lives in no section of this image.
      if ((info & 0xF) != kSttObject || shndx == 0 || shndx >= shnum) continue;
      if (!keeps_state(sections[shndx].name)) continue;
      auto n = string_at(cubin, strings.offset, strings.size, name);
      if (!n) return std::nullopt;
      if (n->empty() || !seen.insert(*n).second) continue;
      out.push_back(CubinSymbol{*n, sections[shndx].name, size, value});
    }
  }
  return out;
}

}  // namespace kharness
