// libFuzzer entry of the rules target (the body: run_rules in targets.hpp).
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kharness::fuzz::run_rules(kharness::fuzz::text(data, size));
  return 0;
}
