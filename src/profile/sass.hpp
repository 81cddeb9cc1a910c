// The SASS of a compiled module, from the toolkit's disassembler (nvdisasm, else cuobjdump -sass)
// when one is installed: the profile stage reports whether the tensor-core instructions expected
// for the arch are there.
#pragma once

#include <optional>
#include <string>

namespace kharness::profile {

// The SASS listing of a cubin, or nullopt when no disassembler is found or it fails; `tool` is
// set to the tool used ("nvdisasm 13.0 at /usr/local/cuda/bin/nvdisasm") or to why there is none.
std::optional<std::string> disassemble_cubin(const std::string& cubin, std::string* tool);

}  // namespace kharness::profile
