// libFuzzer entry of the definition target (the body: run_definition in targets.hpp).
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kharness::fuzz::run_definition(kharness::fuzz::text(data, size));
  return 0;
}
