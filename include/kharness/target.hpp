// What every request of one invocation judges a solution against and builds it for: the
// operator, the catalogue folders it is looked up in, the NVRTC target and whether the caches
// may answer. check, score, profile and run each fill it once from the command line; the
// pipeline, the controller, the profile stage and the worker's request carry it unchanged.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kharness {

struct Target {
  std::string operator_name;  // empty: each plan's "definition"
  // Catalogue folders searched before the shipped one (--operators-dir, KHARNESS_OPERATORS).
  std::vector<std::filesystem::path> operators_dirs;
  std::string arch;       // normalised NVRTC target
  bool use_cache = true;  // the compile cache, and in the pipeline the verdict cache

  // For a request sent to another process: the folders made absolute.
  nlohmann::json to_json() const;
  // Throws nlohmann::json's errors for a wrong type (a request is kharness's own message).
  static Target from_json(const nlohmann::json& j);
};

}  // namespace kharness
