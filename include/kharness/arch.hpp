// Which generation of tensor cores a compile target has: the one answer the prompt's skills
// layers, the profile's diagnosis and the SASS check give to "what is this arch".
#pragma once

#include <string_view>

namespace kharness {

enum class ArchFamily {
  kPortable,   // mma.sync / ldmatrix: Ampere, Ada, and the consumer Blackwell parts (sm_120)
  kHopper,     // wgmma + TMA + clusters: sm_90 (wgmma itself needs sm_90a)
  kBlackwell,  // tcgen05 + tensor memory: sm_100a, sm_103a, sm_110a
};

// From a normalised target ("sm_90a", "sm_100a", "sm_120"); anything unknown is kPortable.
ArchFamily arch_family(std::string_view arch);

}  // namespace kharness
