#include "pipeline/walk.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <utility>

#include "kharness/error.hpp"

namespace kharness::pipeline {
namespace {

// A folder holding solution.json is one solution; any other folder contributes, recursively, its
// .cu files, solution folders and .json files (hidden entries such as .kharness/ are skipped).
// Symlinks are never followed: one whose name or target looks like a submission is listed as
// refused, any other is skipped. Folders are remembered by device and inode, so no folder is
// walked twice.
void collect_solutions(const std::filesystem::path& dir, Submissions& out,
                       std::set<std::pair<dev_t, ino_t>>& visited, int depth) {
  namespace fs = std::filesystem;
  struct stat st {};
  if (depth > kMaxWalkDepth || ::lstat(dir.c_str(), &st) != 0 ||
      !visited.insert({st.st_dev, st.st_ino}).second)
    return;
  std::error_code ec;
  std::vector<fs::path> entries;
  for (const auto& entry : fs::directory_iterator(dir, ec)) entries.push_back(entry.path());
  std::sort(entries.begin(), entries.end());
  for (const auto& p : entries) {
    std::string name = p.filename().string();
    if (name.empty() || name[0] == '.') continue;
    const fs::file_status own = fs::symlink_status(p, ec);
    const bool candidate_name = p.extension() == ".cu" || p.extension() == ".json";
    if (fs::is_symlink(own)) {
      if (candidate_name || fs::is_directory(p, ec)) {
        out.paths.push_back(p.string());
        out.refused[p.string()] =
            "a symlink; score does not follow links in the folders it walks (submit the file)";
      }
    } else if (fs::is_directory(own)) {
      if (fs::exists(fs::symlink_status(p / "solution.json", ec))) {
        out.paths.push_back(p.string());
      } else {
        collect_solutions(p, out, visited, depth + 1);
      }
    } else if (candidate_name) {
      out.paths.push_back(p.string());
    }
  }
}

}  // namespace

Submissions expand_solutions(const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  Submissions out;
  std::set<std::pair<dev_t, ino_t>> visited;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (!fs::exists(in, ec)) throw input_error(in, "no such file or folder");
    if (!fs::is_directory(in, ec) || fs::exists(fs::path(in) / "solution.json", ec)) {
      out.paths.push_back(in);
      continue;
    }
    const std::size_t before = out.paths.size();
    collect_solutions(in, out, visited, 0);
    if (out.paths.size() == before)
      throw input_error(in,
                        "no solutions in this folder (.cu files, solution folders or .json files)");
  }
  return out;
}

}  // namespace kharness::pipeline
