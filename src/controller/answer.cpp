#include "controller/answer.hpp"

#include <fmt/format.h>

#include <vector>

#include "kharness/error.hpp"
#include "kharness/solution.hpp"

namespace kharness::controller {
namespace {

struct Block {
  std::string lang;
  std::string body;
  bool closed = false;
};

bool is_code_lang(const std::string& lang) {
  return lang == "cuda" || lang == "cu" || lang == "c++" || lang == "cpp" || lang == "c" ||
         lang == "cuh";
}

// Fenced blocks (``` at the start of a line), in order; an unclosed last block is kept open.
std::vector<Block> fenced_blocks(const std::string& text) {
  std::vector<Block> blocks;
  std::size_t pos = 0;
  Block* open = nullptr;
  while (pos <= text.size()) {
    std::size_t end = text.find('\n', pos);
    std::string line = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::size_t indent = line.find_first_not_of(" \t");
    bool fence = indent != std::string::npos && line.compare(indent, 3, "```") == 0;
    if (fence && open) {
      open->closed = true;
      open = nullptr;
    } else if (fence) {
      std::string lang = line.substr(indent + 3);
      lang.erase(0, lang.find_first_not_of(" \t"));
      lang = lang.substr(0, lang.find_first_of(" \t{"));
      for (auto& c : lang) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      blocks.push_back({lang, "", false});
      open = &blocks.back();
    } else if (open) {
      open->body += line + "\n";
    }
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return blocks;
}

}  // namespace

ExtractedCode extract_solution(const llm::Answer& answer) {
  ExtractedCode r;
  if (answer.stop_reason == "malformed_response") {
    r.status = {Outcome::kBadResponse};
    r.reason = "the provider's response could not be read (not the expected JSON)";
    return r;
  }
  if (answer.text.empty()) {
    r.status = {answer.truncated ? Outcome::kTruncated : Outcome::kNoCode};
    r.reason = answer.stop_reason.empty()
                   ? "the answer is empty"
                   : fmt::format("the answer is empty ({})", answer.stop_reason);
    return r;
  }
  std::vector<Block> code;
  for (auto& b : fenced_blocks(answer.text)) {
    if (is_code_lang(b.lang)) code.push_back(std::move(b));
  }
  if (code.empty()) {
    r.status = {answer.truncated ? Outcome::kTruncated : Outcome::kNoCode};
    r.reason = answer.truncated ? "the answer was cut by the output limit before any code block"
                                : "the answer has no ```cuda block";
    return r;
  }
  std::vector<const Block*> planned;
  for (const auto& b : code) {
    if (b.body.find("/* kharness") != std::string::npos) planned.push_back(&b);
  }
  const Block* chosen = nullptr;
  if (planned.empty()) {
    if (code.size() > 1) {
      r.status = {Outcome::kBadPlan};
      r.reason =
          fmt::format("{} code blocks and none starts with the /* kharness {{...}} */ plan comment",
                      code.size());
      return r;
    }
    chosen = &code[0];
  } else {
    chosen = planned[0];
    for (const Block* b : planned) {
      if (b->body != chosen->body) {
        r.status = {Outcome::kConflictingCode};
        r.reason = fmt::format(
            "{} different code blocks carry a /* kharness */ plan; answer with exactly one",
            planned.size());
        return r;
      }
    }
  }
  if (!chosen->closed) {
    r.status = {Outcome::kTruncated};
    r.reason = answer.truncated ? "the code block was cut by the output limit (no closing ```)"
                                : "the code block is not closed (no closing ```)";
    return r;
  }
  try {
    parse_single_file_solution(chosen->body, "candidate.cu");
  } catch (const Error& e) {
    r.status = {Outcome::kBadPlan};
    r.reason = e.message();
    return r;
  }
  r.ok = true;
  r.source = chosen->body;
  return r;
}

}  // namespace kharness::controller
