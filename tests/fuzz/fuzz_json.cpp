// libFuzzer entry of the json target (the body: run_json in targets.hpp).
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kharness::fuzz::run_json(kharness::fuzz::text(data, size));
  return 0;
}
