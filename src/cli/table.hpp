// Plain-text tables for terminal output: columns padded to their widest cell.
#pragma once

#include <string>
#include <vector>

namespace kharness::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.empty(); }
  std::string render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// "1.5 KiB", "128 B".
std::string human_bytes(long long bytes);

}  // namespace kharness::cli
