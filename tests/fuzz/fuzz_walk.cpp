// libFuzzer entry of the walk target (the body: run_walk in targets.hpp).
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kharness::fuzz::run_walk(kharness::fuzz::text(data, size));
  return 0;
}
