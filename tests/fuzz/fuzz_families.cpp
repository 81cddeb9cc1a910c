// libFuzzer entry of the families target (the body: run_families in targets.hpp).
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kharness::fuzz::run_families(kharness::fuzz::text(data, size));
  return 0;
}
