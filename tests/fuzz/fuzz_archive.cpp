// libFuzzer entry of the archive target (the body: run_archive in targets.hpp).
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kharness::fuzz::run_archive(kharness::fuzz::text(data, size));
  return 0;
}
