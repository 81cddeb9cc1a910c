// Where the CUTLASS headers come from (CuTe and CUTLASS in solutions). NVRTC compiles CuTe code
// once it is given the headers and -default-device; kharness never downloads them: the person
// running it points at a release (--cutlass, KHARNESS_CUTLASS) or installs the nvidia-cutlass
// wheel, whose headers sit in site-packages under cutlass_library/source/include.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "kharness/compile.hpp"
#include "kharness/error.hpp"
#include "kharness/file.hpp"

namespace kharness {
namespace fs = std::filesystem;

namespace {

bool holds_cutlass(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "cutlass" / "version.h", ec) &&
         fs::is_directory(dir / "cute", ec);
}

// "4.2.0" from the CUTLASS_MAJOR, CUTLASS_MINOR and CUTLASS_PATCH defines; "?" if any is missing.
std::string read_version(const fs::path& include_dir) {
  std::optional<std::string> text = try_read_regular_file(include_dir / "cutlass" / "version.h");
  if (!text) return "?";
  auto number = [&](std::string_view macro) -> std::string {
    const std::string key = "#define " + std::string(macro);
    std::size_t at = text->find(key);
    while (at != std::string::npos) {
      std::size_t i = at + key.size();
      if (i < text->size() && (*text)[i] == ' ') {  // not CUTLASS_MAJOR_SUFFIX
        while (i < text->size() && (*text)[i] == ' ') ++i;
        std::size_t end = i;
        while (end < text->size() && std::isdigit(static_cast<unsigned char>((*text)[end]))) ++end;
        if (end > i) return text->substr(i, end - i);
      }
      at = text->find(key, at + key.size());
    }
    return "";
  };
  std::string major = number("CUTLASS_MAJOR"), minor = number("CUTLASS_MINOR"),
              patch = number("CUTLASS_PATCH");
  if (major.empty() || minor.empty() || patch.empty()) return "?";
  return fmt::format("{}.{}.{}", major, minor, patch);
}

// The python3.* folders of `lib` (lib/python3.11, ...), newest name first.
std::vector<fs::path> python_dirs(const fs::path& lib) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(lib, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("python3", 0) == 0 && it->is_directory(ec)) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end(), std::greater<>());
  return out;
}

// The site-packages folders pip installs into, in the order Python would prefer them: an active
// virtual environment or conda environment, the user's site, then the system's.
std::vector<fs::path> site_packages_dirs() {
  std::vector<fs::path> prefixes;
  for (const char* env : {"VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONUSERBASE"}) {
    if (const char* v = std::getenv(env); v != nullptr && *v != '\0') prefixes.emplace_back(v);
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    prefixes.push_back(fs::path(home) / ".local");
  }
  prefixes.emplace_back("/usr/local");
  prefixes.emplace_back("/usr");
  std::vector<fs::path> out;
  for (const auto& prefix : prefixes) {
    for (const auto& py : python_dirs(prefix / "lib")) {
      out.push_back(py / "site-packages");
      out.push_back(py / "dist-packages");
    }
  }
  out.emplace_back("/usr/lib/python3/dist-packages");  // Debian's shared folder
  return out;
}

const fs::path kWheelInclude = fs::path("cutlass_library") / "source" / "include";

}  // namespace

CutlassRoot cutlass_root_at(const fs::path& dir, const std::string& what) {
  for (const fs::path& candidate : {dir, dir / "include", dir / kWheelInclude}) {
    if (holds_cutlass(candidate)) {
      std::error_code ec;
      fs::path absolute = fs::canonical(candidate, ec);
      if (ec) absolute = fs::absolute(candidate);
      return CutlassRoot{absolute, read_version(absolute), what};
    }
  }
  throw input_error(what, fmt::format("{}: no CUTLASS headers there (expected cutlass/version.h "
                                      "and cute/ in it, in its include/ or in "
                                      "cutlass_library/source/include/)",
                                      dir.string()));
}

std::optional<CutlassRoot> find_cutlass() {
  if (const char* v = std::getenv("KHARNESS_CUTLASS"); v != nullptr && *v != '\0') {
    if (std::string_view(v) == "none") return std::nullopt;
    return cutlass_root_at(v, "KHARNESS_CUTLASS");
  }
  for (const auto& site : site_packages_dirs()) {
    if (holds_cutlass(site / kWheelInclude)) {
      CutlassRoot root = cutlass_root_at(site / kWheelInclude, "nvidia-cutlass wheel");
      return root;
    }
  }
  return std::nullopt;
}

std::string cutlass_missing_hint() {
  return "CuTe and CUTLASS headers need a CUTLASS release and none was found: pass --cutlass DIR "
         "(a CUTLASS include folder or checkout), set KHARNESS_CUTLASS=DIR, or install the "
         "headers with `pip install nvidia-cutlass`";
}

std::vector<fs::path> cutlass_read_dirs(const CutlassRoot& root) {
  return {root.include_dir / "cute", root.include_dir / "cutlass"};
}

bool includes_cutlass(const Solution& solution) {
  for (const auto& file : solution.sources) {
    const std::string& text = file.content;
    std::size_t pos = 0;
    while ((pos = text.find("include", pos)) != std::string::npos) {
      std::size_t i = pos + 7;
      pos = i;
      while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
      if (i >= text.size() || (text[i] != '<' && text[i] != '"')) continue;
      std::string_view name(text.data() + i + 1, text.size() - i - 1);
      if (name.rfind("cute/", 0) == 0 || name.rfind("cutlass/", 0) == 0) return true;
    }
  }
  return false;
}

}  // namespace kharness
