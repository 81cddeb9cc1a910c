// A model's answer to a candidate solution: the fenced ```cuda block that carries the
// `/* kharness {...} */` plan. What cannot become a solution is a failed candidate with a reason
// that is fed back to the model, never an exception.
#pragma once

#include <string>

#include "controller/outcome.hpp"
#include "llm/provider.hpp"

namespace kharness::controller {

struct ExtractedCode {
  bool ok = false;
  std::string source;  // the single-file solution text
  // When !ok: NO_CODE, TRUNCATED, CONFLICTING_CODE, BAD_PLAN or BAD_RESPONSE.
  CandidateStatus status;
  std::string reason;  // one line for the feedback
};

// Takes the answer's ```cuda (or ```cu, ```c++, ```cpp) blocks: the one with a kharness plan
// comment is the solution; several that differ conflict; a block cut by the output limit is
// truncated; the plan must parse (solution.cpp's single-file form).
ExtractedCode extract_solution(const llm::Answer& answer);

}  // namespace kharness::controller
