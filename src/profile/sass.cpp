#include "profile/sass.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "kharness/arch.hpp"
#include "kharness/profile.hpp"
#include "kharness/subprocess.hpp"

namespace kharness {

std::string expected_tensor_instructions(const std::string& arch) {
  // sm_90a: warpgroup MMAs (wgmma) are HGMMA (fp16/bf16/tf32), QGMMA (fp8), IGMMA (int8).
  if (arch == "sm_90a") return "HGMMA/QGMMA";
  // sm_100a/sm_103a/sm_110a: tcgen05.mma (UTCHMMA, UTCQMMA, UTCIMMA, UTCOMMA).
  if (arch_family(arch) == ArchFamily::kBlackwell) return "UTCHMMA/UTCQMMA";
  return "HMMA";
}

std::vector<std::string> tensor_instructions_in_sass(const std::string& sass) {
  // Tensor-core mnemonics all end in MMA: HMMA, IMMA, DMMA, BMMA, QMMA, OMMA, HGMMA, QGMMA,
  // IGMMA, BGMMA, UTCHMMA, UTCQMMA, ... (FFMA/DFMA end in FMA and do not match).
  static const std::regex mnemonic(R"(\b([A-Z]*MMA)(\.[A-Z0-9_.]+)?\b)");
  std::set<std::string> found;
  for (auto it = std::sregex_iterator(sass.begin(), sass.end(), mnemonic);
       it != std::sregex_iterator(); ++it) {
    found.insert((*it)[1].str());
  }
  return {found.begin(), found.end()};
}

std::map<std::string, std::string> split_sass_by_function(const std::string& sass) {
  // cuobjdump -sass: "\t\tFunction : name"; nvdisasm: ".text.name:" labels (and
  // "//---- .text.name ----" banners).
  static const std::regex cuobjdump_fn(R"(^\s*Function\s*:\s*(\S+))");
  static const std::regex nvdisasm_fn(R"(^\s*(?://-+\s*)?\.text\.([^\s:]+)\s*:?)");
  std::map<std::string, std::string> out;
  std::istringstream in(sass);
  std::string line, current;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, cuobjdump_fn) || std::regex_search(line, m, nvdisasm_fn)) {
      current = m[1].str();
      out[current];
      continue;
    }
    if (!current.empty()) out[current] += line + "\n";
  }
  return out;
}

namespace profile {
namespace {

std::optional<std::filesystem::path> find_tool(const std::string& name) {
  std::vector<std::filesystem::path> candidates;
#ifdef KHARNESS_CUDA_LIBRARY_DIR
  candidates.push_back(std::filesystem::path(KHARNESS_CUDA_LIBRARY_DIR).parent_path() / "bin" /
                       name);
#endif
  if (const char* home = std::getenv("CUDA_HOME"); home && *home)
    candidates.push_back(std::filesystem::path(home) / "bin" / name);
  candidates.push_back(std::filesystem::path("/usr/local/cuda/bin") / name);
  if (const char* path = std::getenv("PATH")) {
    std::istringstream dirs(path);
    for (std::string dir; std::getline(dirs, dir, ':');) {
      if (!dir.empty()) candidates.push_back(std::filesystem::path(dir) / name);
    }
  }
  for (const auto& c : candidates) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(c, ec) && ::access(c.c_str(), X_OK) == 0) return c;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> disassemble_cubin(const std::string& cubin, std::string* tool) {
  std::optional<std::filesystem::path> nvdisasm = find_tool("nvdisasm");
  std::optional<std::filesystem::path> cuobjdump = find_tool("cuobjdump");
  if (!nvdisasm && !cuobjdump) {
    if (tool) *tool = "no nvdisasm or cuobjdump in the toolkit or on PATH";
    return std::nullopt;
  }
  std::error_code ec;
  auto dir = std::filesystem::temp_directory_path(ec);
  if (ec) dir = "/tmp";
  const auto file = dir / fmt::format("kharness-profile-{}.cubin", ::getpid());
  {
    std::ofstream out(file, std::ios::binary);
    out.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
    if (!out) {
      if (tool) *tool = "cannot write a temporary cubin in " + dir.string();
      return std::nullopt;
    }
  }
  std::optional<std::string> sass;
  std::string why;
  for (const auto& [exe, args] : {std::make_pair(nvdisasm, std::vector<std::string>{}),
                                  std::make_pair(cuobjdump, std::vector<std::string>{"-sass"})}) {
    if (!exe) continue;
    SubprocessOptions o;
    o.argv = {exe->string()};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.argv.push_back(file.string());
    o.timeout_seconds = 30;
    SubprocessResult r = run_subprocess(o);
    if (r.started && !r.timed_out && r.exit_code == 0 && !r.stdout_data.empty()) {
      sass = std::move(r.stdout_data);
      why = exe->string();
      break;
    }
    why = fmt::format("{} {}: {}", exe->string(), r.describe(), r.stderr_data.substr(0, 200));
    spdlog::debug("profile: disassembler failed: {}", why);
  }
  std::filesystem::remove(file, ec);
  if (tool) *tool = why;
  return sass;
}

}  // namespace profile
}  // namespace kharness
