// libFuzzer entry of the plan target (the body: run_plan in targets.hpp).
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kharness::fuzz::run_plan(kharness::fuzz::text(data, size));
  return 0;
}
