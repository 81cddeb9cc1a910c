// Reading a solution file as kharness loads it. Families whose kernels differ in a few lines share
// the rest through operators/_families/_shared/ (operators/_families/README.md): a family's
// seed.cu, baseline or reference.cu #includes "../_shared/<group>/<file>" after its own plan and
// the #defines that pick its variant. A solution has no include paths of its own
// (docs/plans.md#forms), so the text loaded is made whole: load_solution, the seed a run starts
// from and the seed a tune instantiates all read it through read_single_file_source.
#pragma once

#include <filesystem>
#include <string>

namespace kharness {

// The text of a single-file solution as load_solution reads it: for a file under an
// operators/_families/ folder, each `#include "..."` line naming a file of that _families/_shared/
// folder replaced by the file's text (recursively), so the source is self-contained; any other
// file, and any other #include, as it is. Throws Error (exit 2) naming FILE:LINE for a missing
// shared file.
std::string read_single_file_source(const std::filesystem::path& path);

}  // namespace kharness
