// libFuzzer entry of the run_folder target (the body: run_run_folder in targets.hpp).
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kharness::fuzz::run_run_folder(kharness::fuzz::text(data, size));
  return 0;
}
