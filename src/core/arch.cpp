#include "kharness/arch.hpp"

namespace kharness {

ArchFamily arch_family(std::string_view arch) {
  auto starts = [&](std::string_view p) { return arch.substr(0, p.size()) == p; };
  if (starts("sm_90")) return ArchFamily::kHopper;
  if (starts("sm_10") || starts("sm_11")) return ArchFamily::kBlackwell;
  return ArchFamily::kPortable;
}

}  // namespace kharness
