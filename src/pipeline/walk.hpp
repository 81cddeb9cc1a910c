// `score`'s walk of the folders it is given: which paths are submissions, and which of them are
// refused before anything reads them. The walk never follows a symlink and never enters a folder
// twice, so a tree anyone built (links to host folders, `ln -s .` loops, links to another team's
// file) ends in a bounded list.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace kharness::pipeline {

// What the walk found: the submissions, in a stable (sorted) order, and those refused before
// anything reads them (a symlink: `ln -s /host/dir` or a link to another team's file is not
// scored as the linker's), each with why.
struct Submissions {
  std::vector<std::string> paths;
  std::map<std::string, std::string> refused;
};

// Folders nested deeper than this are not walked (a bind-mount loop, a generated tree).
constexpr int kMaxWalkDepth = 64;

// Each input that is a file or a solution folder is one submission; any other folder contributes,
// recursively, its .cu files, solution folders (holding solution.json) and .json files (hidden
// entries such as .kharness/ are skipped). Symlinks inside a folder are never followed: one whose
// name or target looks like a submission is listed as refused, any other is skipped. Throws Error
// (exit 2) for an input that does not exist or a folder with no submission in it.
Submissions expand_solutions(const std::vector<std::string>& inputs);

}  // namespace kharness::pipeline
