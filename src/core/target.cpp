#include "kharness/target.hpp"

namespace kharness {

nlohmann::json Target::to_json() const {
  std::vector<std::string> dirs;
  for (const auto& d : operators_dirs) dirs.push_back(std::filesystem::absolute(d).string());
  return {{"operator", operator_name},
          {"operators_dirs", dirs},
          {"arch", arch},
          {"use_cache", use_cache}};
}

Target Target::from_json(const nlohmann::json& j) {
  Target t;
  t.operator_name = j.value("operator", "");
  for (const auto& d : j.value("operators_dirs", std::vector<std::string>{}))
    t.operators_dirs.emplace_back(d);
  t.arch = j.at("arch").get<std::string>();
  t.use_cache = j.value("use_cache", true);
  return t;
}

}  // namespace kharness
