// The rules a solution obeys before anything runs (docs/pipeline.md#rules): status REJECTED, with a
// RuleViolation naming the rule, the file and the line.
//
// Source rules (check_source_rules) read each file as NVRTC does after translation phases 1-2
// (line splices; digraphs; and, in a second scan where the file has "??", trigraphs), so that no
// spelling (%:include, a backslash-newline inside "*/", a spliced identifier) shows the rules
// other tokens than the compiler. They scan with comments blanked out and, for the code checks,
// string and character literals blanked too, so a rule never fires on a comment or a message
// string. The rules are a first line, with messages a participant can act on; what a source
// can read at compile time is enforced by the compile sandbox (Landlock), not by them.
// Rule identifiers:
//   file_size, total_size  a file, or all files together, above SourceRules' limits
//   empty_source           the entry file has no code (only whitespace and comments)
//   include_path           an #include that is not a CUDA toolkit header (a file under
//                          SourceRules::system_include_dirs), a CuTe or CUTLASS header of the
//                          CUTLASS root (cute/..., cutlass/... under
//                          SourceRules::cutlass_include_dir) or one of the solution's own files
//                          (named by its path as the solution lists it); absolute paths, '..'
//                          components, computed includes (#include MACRO), #include_next and
//                          #import are refused outright. A <header> not found under the
//                          toolkit's include folders (<stdio.h>, <cstdint>, <vector>) is refused:
//                          NVRTC has no C/C++ library headers, use <cuda/std/...> instead.
//   host_code              the identifier main (any declaration: int/signed/unsigned main,
//                          int (main)(...), a macro naming it; only x.main and p->main are
//                          allowed), a __host__ function (__host__ __device__ is fine),
//                          std::thread/async/fstream, host I/O and process calls (fopen,
//                          system, popen, fork, exec*, dlopen, getenv, ...)
//   host_api               a CUDA runtime or driver API call (cudaMalloc, cudaMemcpy,
//                          cudaStreamCreate, cudaDeviceSynchronize, cudaLaunchKernel, cuMemAlloc,
//                          cuLaunchKernel, ...). Allowed: the device-side programmatic dependent
//                          launch calls cudaGridDependencySynchronize and
//                          cudaTriggerProgrammaticLaunchCompletion.
//   output_size, module_size  what the compile produced is over OutputLimits: PTX or cubin
//                          bytes, or the module's static __device__/__constant__ size (a 1 TiB
//                          array compiles, and would be asked of the driver at load)
//   host_launch            `<<<`: the harness does every launch from the plan. Device-side
//                          launches (dynamic parallelism) are refused as well: they need
//                          relocatable device code linked against cudadevrt, which NVRTC alone
//                          does not do, and launches the plan does not list would escape timing
//                          and the correctness checks.
// These checks are conservative: code in `#if 0` or `#ifndef __CUDACC_RTC__` blocks is checked
// too.
#include "kharness/rules.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <vector>

#include "compile/compile_internal.hpp"
#include "kharness/compile.hpp"
#include "kharness/text.hpp"

namespace kharness {
namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxViolationsPerFile = 20;

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) {
    s.remove_prefix(1);
  }
  while (!s.empty() && is_space(s.back())) {
    s.remove_suffix(1);
  }
  return s;
}

// The end of the preprocessing number that starts at `i` (a digit, or a '.' before a digit), as
// the compiler's lexer takes it: digits, letters, '_', '.', a sign after e/E/p/P, and a quote
// only as a digit separator, that is when a digit or a letter follows it. `0' /*'` is the number
// 0 and a character literal, not a number swallowing a comment's opening.
std::size_t pp_number_end(std::string_view src, std::size_t i) {
  const std::size_t n = src.size();
  ++i;
  while (i < n) {
    char c = src[i];
    if (is_ident_char(c) || c == '.' ||
        ((c == '+' || c == '-') && std::strchr("eEpP", src[i - 1]) != nullptr)) {
      ++i;
    } else if (c == '\'' && i + 1 < n && is_ident_char(src[i + 1])) {
      i += 2;
    } else {
      break;
    }
  }
  return i;
}

bool starts_pp_number(std::string_view src, std::size_t i) {
  const auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  return digit(src[i]) || (src[i] == '.' && i + 1 < src.size() && digit(src[i + 1]));
}

// Same length as `src`: comments become spaces (newlines kept, so offsets and line numbers
// stay); with `blank_literals`, the insides of string and character literals become spaces too.
std::string mask_source(const std::string& src, bool blank_literals) {
  std::string out = src;
  const std::size_t n = src.size();
  auto blank = [&](std::size_t from, std::size_t to) {
    for (std::size_t k = from; k < to && k < n; ++k) {
      if (out[k] != '\n') {
        out[k] = ' ';
      }
    }
  };
  std::size_t i = 0;
  while (i < n) {
    char c = src[i];
    if (c == '/' && i + 1 < n && src[i + 1] == '/') {
      std::size_t j = i + 2;
      while (j < n && src[j] != '\n') {
        // A backslash-newline continues a line comment.
        if (src[j] == '\\' && j + 1 < n && src[j + 1] == '\n') {
          ++j;
        }
        ++j;
      }
      blank(i, j);
      i = j;
    } else if (c == '/' && i + 1 < n && src[i + 1] == '*') {
      std::size_t end = src.find("*/", i + 2);
      std::size_t j = end == std::string::npos ? n : end + 2;
      blank(i, j);
      i = j;
    } else if (c == '"') {
      // Raw string literal: R"delim( ... )delim", with an optional u8/u/U/L prefix.
      std::size_t p = i;
      while (p > 0 && is_ident_char(src[p - 1])) {
        --p;
      }
      std::string_view prefix(src.data() + p, i - p);
      bool raw =
          prefix == "R" || prefix == "u8R" || prefix == "uR" || prefix == "UR" || prefix == "LR";
      if (raw) {
        std::size_t open = src.find('(', i + 1);
        if (open != std::string::npos && open - i - 1 <= 16) {
          std::string terminator = ")" + src.substr(i + 1, open - i - 1) + "\"";
          std::size_t end = src.find(terminator, open + 1);
          std::size_t j = end == std::string::npos ? n : end + terminator.size();
          if (blank_literals) {
            blank(i + 1, j - 1);
          }
          i = j;
          continue;
        }
      }
      std::size_t j = i + 1;
      while (j < n && src[j] != '"' && src[j] != '\n') {
        j += src[j] == '\\' ? 2 : 1;
      }
      if (blank_literals) {
        blank(i + 1, std::min(j, n));
      }
      i = j + 1;
    } else if (starts_pp_number(src, i)) {
      // A number whole, its digit separators (1'000'000) with it: a quote left after it
      // opens a character literal.
      i = pp_number_end(src, i);
    } else if (is_ident_start(c)) {
      // An identifier whole, so that a digit inside one (x1) does not start a number.
      while (i < n && is_ident_char(src[i])) ++i;
    } else if (c == '\'') {
      std::size_t j = i + 1;
      while (j < n && src[j] != '\'' && src[j] != '\n') {
        j += src[j] == '\\' ? 2 : 1;
      }
      if (blank_literals) {
        blank(i + 1, std::min(j, n));
      }
      i = j + 1;
    } else {
      ++i;
    }
  }
  return out;
}

// Translation phases 1-2 as a compiler applies them, so that the rules read the tokens NVRTC
// reads: trigraphs replaced (when `trigraphs`; NVRTC's C++ dialects ignore them, with a warning,
// so the rules scan both ways), and line splices (a backslash right before a newline; NVRTC does
// not splice "\ " + newline) removed. Each removed newline is put back at the end of its logical
// line, so a spliced line is reported at its first physical line and the lines after it keep
// their numbers. Then the digraphs outside comments and literals become the tokens they are
// (%:%: ##, %: #, <% {, %> }, <: [, :> ]; "<::" not followed by ':' or '>' stays "<" "::", as
// in C++11).
std::string translation_phases(const std::string& src, bool trigraphs) {
  std::string phase1;
  phase1.reserve(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    if (trigraphs && src[i] == '?' && i + 2 < src.size() && src[i + 1] == '?') {
      static constexpr std::string_view kFrom = "=/'()!<>-";
      static constexpr std::string_view kTo = "#\\^[]|{}~";
      std::size_t k = kFrom.find(src[i + 2]);
      if (k != std::string_view::npos) {
        phase1 += kTo[k];
        i += 2;
        continue;
      }
    }
    phase1 += src[i];
  }
  std::string phase2;
  phase2.reserve(phase1.size());
  int owed_newlines = 0;
  for (std::size_t i = 0; i < phase1.size(); ++i) {
    char c = phase1[i];
    if (c == '\\' && i + 1 < phase1.size() &&
        (phase1[i + 1] == '\n' ||
         (phase1[i + 1] == '\r' && i + 2 < phase1.size() && phase1[i + 2] == '\n'))) {
      i += phase1[i + 1] == '\r' ? 2 : 1;
      ++owed_newlines;
      continue;
    }
    if (c == '\n' && owed_newlines > 0) {
      phase2.append(static_cast<std::size_t>(owed_newlines), '\n');
      owed_newlines = 0;
    }
    phase2 += c;
  }
  phase2.append(static_cast<std::size_t>(owed_newlines), '\n');

  const std::string masked = mask_source(phase2, true);
  std::string out;
  out.reserve(phase2.size());
  for (std::size_t i = 0; i < phase2.size(); ++i) {
    // Only where the mask kept the text (code, not a comment or a literal's inside).
    bool code =
        masked[i] == phase2[i] && (i + 1 >= phase2.size() || masked[i + 1] == phase2[i + 1]);
    std::string_view rest(phase2.data() + i, phase2.size() - i);
    if (code) {
      if (rest.substr(0, 4) == "%:%:") {
        out += "##";
        i += 3;
        continue;
      }
      if (rest.substr(0, 2) == "%:") {
        out += '#';
        ++i;
        continue;
      }
      if (rest.substr(0, 2) == "<%") {
        out += '{';
        ++i;
        continue;
      }
      if (rest.substr(0, 2) == "%>") {
        out += '}';
        ++i;
        continue;
      }
      if (rest.substr(0, 2) == ":>") {
        out += ']';
        ++i;
        continue;
      }
      if (rest.substr(0, 2) == "<:" &&
          !(rest.substr(0, 3) == "<::" && rest.size() > 3 && rest[3] != ':' && rest[3] != '>')) {
        out += '[';
        ++i;
        continue;
      }
    }
    out += phase2[i];
  }
  return out;
}

class LineIndex {
 public:
  explicit LineIndex(const std::string& text) {
    starts_.push_back(0);
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\n') {
        starts_.push_back(i + 1);
      }
    }
  }
  int line(std::size_t offset) const {
    auto it = std::upper_bound(starts_.begin(), starts_.end(), offset);
    return static_cast<int>(it - starts_.begin());
  }

 private:
  std::vector<std::size_t> starts_;
};

// The identifier ending right before `pos` (skipping whitespace), or "".
std::string_view previous_identifier(std::string_view code, std::size_t pos) {
  std::size_t e = pos;
  while (e > 0 && is_space(code[e - 1])) {
    --e;
  }
  std::size_t b = e;
  while (b > 0 && is_ident_char(code[b - 1])) {
    --b;
  }
  return code.substr(b, e - b);
}

// The first non-space character at or after `pos`, or '\0'.
char next_char(std::string_view code, std::size_t pos) {
  while (pos < code.size() && is_space(code[pos])) {
    ++pos;
  }
  return pos < code.size() ? code[pos] : '\0';
}

// The last non-space characters before `pos` (up to two), e.g. "::" or "->".
std::string_view previous_punct(std::string_view code, std::size_t pos) {
  std::size_t e = pos;
  while (e > 0 && is_space(code[e - 1])) {
    --e;
  }
  std::size_t b = e >= 2 ? e - 2 : 0;
  return code.substr(b, e - b);
}

// Is the `__host__` at [pos, pos+8) part of a `__host__ __device__` declaration? Looks at the
// declaration head: from the previous ';', '{' or '}' to the next '(' , ';' or '{'.
bool host_device_pair(std::string_view code, std::size_t pos) {
  std::size_t begin = code.find_last_of(";{}", pos);
  begin = begin == std::string_view::npos ? 0 : begin + 1;
  std::size_t end = code.find_first_of("(;{", pos);
  if (end == std::string_view::npos) {
    end = code.size();
  }
  std::string_view head = code.substr(begin, end - begin);
  for (std::size_t at = head.find("__device__"); at != std::string_view::npos;
       at = head.find("__device__", at + 1)) {
    bool start_ok = at == 0 || !is_ident_char(head[at - 1]);
    bool end_ok = at + 10 >= head.size() || !is_ident_char(head[at + 10]);
    if (start_ok && end_ok) {
      return true;
    }
  }
  return false;
}

const std::set<std::string, std::less<>>& host_functions() {
  static const std::set<std::string, std::less<>> names = {
      "fopen",  "freopen", "fdopen",         "fclose", "fread",  "fwrite", "fputs",
      "fgets",  "fprintf", "fscanf",         "popen",  "pclose", "system", "fork",
      "vfork",  "execl",   "execlp",         "execle", "execv",  "execvp", "execve",
      "dlopen", "dlsym",   "getenv",         "setenv", "putenv", "socket", "connect",
      "mmap",   "unlink",  "pthread_create", "kill",   "raise"};
  return names;
}

const std::set<std::string, std::less<>>& host_std_names() {
  static const std::set<std::string, std::less<>> names = {
      "thread",  "jthread", "async",  "ifstream", "ofstream",
      "fstream", "filebuf", "system", "getenv",   "filesystem"};
  return names;
}

// Device-callable runtime functions a kernel may use without host code or rdc.
const std::set<std::string, std::less<>>& device_runtime_calls() {
  static const std::set<std::string, std::less<>> names = {
      "cudaGridDependencySynchronize", "cudaTriggerProgrammaticLaunchCompletion"};
  return names;
}

bool is_driver_api(std::string_view ident) {
  static const std::array<std::string_view, 16> prefixes = {
      "cuInit",   "cuMem",       "cuLaunch",  "cuModule", "cuCtx",  "cuStream",
      "cuEvent",  "cuDevice",    "cuGraph",   "cuFunc",   "cuLink", "cuLibrary",
      "cuKernel", "cuTensorMap", "cuPointer", "cuIpc"};
  for (auto p : prefixes) {
    if (ident.substr(0, p.size()) == p) {
      return true;
    }
  }
  return false;
}

struct FileScan {
  const SourceFile& file;
  std::vector<RuleViolation>& out;
  std::size_t count = 0;
  // The file is scanned in more than one translation (with and without trigraphs): a finding is
  // reported once.
  std::set<std::tuple<std::string, int, std::string>> seen;
  void add(std::string rule, std::string message, int line) {
    if (!seen.emplace(rule, line, message).second) {
      return;
    }
    if (count++ >= kMaxViolationsPerFile) {
      return;
    }
    out.push_back({std::move(rule), std::move(message), file.path, line});
  }
};

void check_code(const std::string& code, const LineIndex& lines, FileScan& scan) {
  std::string_view view(code);
  for (std::size_t at = view.find("<<<"); at != std::string_view::npos;
       at = view.find("<<<", at + 3)) {
    scan.add("host_launch",
             "kernel launch syntax '<<<': the harness launches the kernels the plan lists; "
             "a solution does not launch kernels itself (host or device side)",
             lines.line(at));
  }
  std::size_t i = 0;
  const std::size_t n = view.size();
  while (i < n) {
    char c = view[i];
    if (starts_pp_number(view, i)) {  // a number: skip it whole
      i = pp_number_end(view, i);
      continue;
    }
    if (!is_ident_start(c)) {
      ++i;
      continue;
    }
    std::size_t start = i;
    while (i < n && is_ident_char(view[i])) {
      ++i;
    }
    std::string_view ident = view.substr(start, i - start);
    char next = next_char(view, i);
    int line = lines.line(start);
    if (ident == "main") {
      // Every spelling NVRTC accepts: int/signed/unsigned/auto main(...), int (main)(...), a
      // macro naming it (#define M main). Only a member (x.main, p->main) is something else.
      std::string_view punct = previous_punct(view, start);
      bool member = (!punct.empty() && punct.back() == '.') || punct == "->";
      if (!member) {
        scan.add(
            "host_code",
            "a 'main' function: a solution is device code only; the harness runs the host side",
            line);
      }
    } else if (ident == "__host__") {
      if (!host_device_pair(view, start)) {
        scan.add("host_code",
                 "a __host__ function: a solution is device code only (__device__ and "
                 "__global__; '__host__ __device__' is allowed)",
                 line);
      }
    } else if (ident.size() > 4 && ident.substr(0, 4) == "cuda" &&
               std::isupper(static_cast<unsigned char>(ident[4])) && (next == '(' || next == '<')) {
      if (device_runtime_calls().count(ident) == 0) {
        scan.add("host_api",
                 fmt::format("CUDA runtime API call '{}': the harness allocates, copies and "
                             "launches; a solution is device code only",
                             ident),
                 line);
      }
    } else if (is_driver_api(ident) && next == '(') {
      scan.add("host_api",
               fmt::format("CUDA driver API call '{}': a solution is device code only", ident),
               line);
    } else if (host_std_names().count(ident) != 0 && previous_punct(view, start) == "::" &&
               previous_identifier(view, view.rfind("::", start)) == "std") {
      scan.add("host_code",
               fmt::format("'std::{}' is host code: a solution is device code only", ident), line);
    } else if (host_functions().count(ident) != 0 && next == '(') {
      std::string_view punct = previous_punct(view, start);
      bool member = (!punct.empty() && punct.back() == '.') || punct == "->";
      bool qualified = punct == "::" &&
                       !previous_identifier(view, view.rfind("::", start)).empty() &&
                       previous_identifier(view, view.rfind("::", start)) != "std";
      if (!member && !qualified) {
        scan.add("host_code",
                 fmt::format("call to '{}' (host I/O or process control): a solution is device "
                             "code only",
                             ident),
                 line);
      }
    }
  }
}

bool has_dotdot(std::string_view path) {
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find_first_of("/\\", start);
    if (end == std::string_view::npos) {
      end = path.size();
    }
    if (path.substr(start, end - start) == "..") {
      return true;
    }
    start = end + 1;
  }
  return false;
}

bool is_toolkit_header(const std::string& name, const std::vector<fs::path>& dirs) {
  std::error_code ec;
  for (const auto& dir : dirs) {
    if (fs::is_regular_file(dir / name, ec)) {
      return true;
    }
  }
  return false;
}

// A CuTe or CUTLASS header (cute/..., cutlass/...) is allowed from the CUTLASS root only, like a
// toolkit header; without a root the violation says how to provide one. False when `name` is not
// such a header (the caller judges it).
bool judge_cutlass_include(const std::string& name, const std::string& shown,
                           const SourceRules& rules, int line, FileScan& scan) {
  if (name.rfind("cute/", 0) != 0 && name.rfind("cutlass/", 0) != 0) return false;
  if (rules.cutlass_include_dir.empty()) {
    scan.add("include_path", fmt::format("{}: {}", shown, cutlass_missing_hint()), line);
  } else if (!is_toolkit_header(name, {rules.cutlass_include_dir})) {
    scan.add("include_path",
             fmt::format("{}: not a header of the CUTLASS release in {}", shown,
                         rules.cutlass_include_dir.string()),
             line);
  }
  return true;
}

// The file an #include (or a __has_include) names after its opening '<' or '"' (`rest` starts
// there): a toolkit header or one of the solution's own files; anything else is an include_path
// violation. `what` is how the message names the construct ("#include", "__has_include").
void judge_include(std::string_view rest, const std::string& what,
                   const std::vector<std::string>& own, const SourceRules& rules, int line,
                   FileScan& scan) {
  const char open = rest.front();
  const char close = open == '<' ? '>' : '"';
  const std::size_t end = rest.find(close, 1);
  if (end == std::string_view::npos) {
    scan.add("include_path", fmt::format("malformed {}: {}", what, rest), line);
    return;
  }
  std::string name(rest.substr(1, end - 1));
  std::string shown = what + " " + (open == '<' ? "<" + name + ">" : "\"" + name + "\"");
  if (name.empty()) {
    scan.add("include_path", "empty " + what, line);
    return;
  }
  if (name.front() == '/' || name.front() == '\\' || (name.size() > 1 && name[1] == ':')) {
    scan.add("include_path", fmt::format("{}: absolute paths are not allowed", shown), line);
    return;
  }
  if (has_dotdot(name)) {
    scan.add("include_path", fmt::format("{}: '..' path components are not allowed", shown), line);
    return;
  }
  bool is_own = std::find(own.begin(), own.end(), name) != own.end();
  if (is_own || is_toolkit_header(name, rules.system_include_dirs)) return;
  if (judge_cutlass_include(name, shown, rules, line, scan)) return;
  if (open == '<') {
    scan.add("include_path",
             fmt::format("{}: not a CUDA toolkit header (NVRTC has no C/C++ standard "
                         "library headers; use <cuda/std/...>); a solution includes only "
                         "toolkit headers and its own files",
                         shown),
             line);
  } else {
    std::string hint;
    auto close_names = close_matches(name, own, 1);
    if (!close_names.empty()) {
      hint = fmt::format(" (did you mean \"{}\"?)", close_names.front());
    }
    scan.add("include_path",
             fmt::format("{}: neither one of the solution's files ({}) nor a CUDA "
                         "toolkit header{}",
                         shown, join(own, ", "), hint),
             line);
  }
}

// __has_include(name) answers whether a file exists, anywhere the compiler can look: it is judged
// like the #include it stands for, and __has_include_next is refused like #include_next. `code`
// has comments and literals blanked (where the identifier is), `no_comments` the literals too
// (what it names).
void check_has_include(const std::string& code, const std::string& no_comments,
                       const std::vector<std::string>& own, const LineIndex& lines,
                       const SourceRules& rules, FileScan& scan) {
  static constexpr std::string_view kWord = "__has_include";
  for (std::size_t at = code.find(kWord); at != std::string::npos;
       at = code.find(kWord, at + kWord.size())) {
    if (at > 0 && is_ident_char(code[at - 1])) continue;
    std::size_t i = at + kWord.size();
    std::size_t word_end = i;
    while (word_end < code.size() && is_ident_char(code[word_end])) ++word_end;
    const std::string word = code.substr(at, word_end - at);
    const int line = lines.line(at);
    if (word == "__has_include_next") {
      scan.add("include_path",
               "__has_include_next is not allowed; use __has_include with a toolkit header or "
               "one of the solution's files",
               line);
      continue;
    }
    if (word != "__has_include") continue;
    i = word_end;
    while (i < no_comments.size() && is_space(no_comments[i])) ++i;
    if (i < no_comments.size() && no_comments[i] == '(') ++i;
    while (i < no_comments.size() && is_space(no_comments[i])) ++i;
    const char open = i < no_comments.size() ? no_comments[i] : '\0';
    if (open != '<' && open != '"') {
      scan.add("include_path",
               "__has_include of a macro (or not followed by (<...>) or (\"...\")) is not "
               "allowed: write the header name",
               line);
      continue;
    }
    const std::size_t eol = no_comments.find('\n', i);
    judge_include(std::string_view(no_comments).substr(i, eol == std::string::npos ? eol : eol - i),
                  "__has_include", own, rules, line, scan);
  }
}

void check_includes(const Solution& solution, const std::string& no_comments,
                    const std::string& code, const LineIndex& lines, const SourceRules& rules,
                    FileScan& scan) {
  std::vector<std::string> own;
  for (const auto& f : solution.sources) {
    own.push_back(f.path);
  }
  check_has_include(code, no_comments, own, lines, rules, scan);
  const std::size_t n = no_comments.size();
  std::size_t pos = 0;
  while (pos < n) {
    // One logical line: physical lines joined at backslash-newline.
    std::size_t line_start = pos;
    std::string logical;
    while (pos < n) {
      std::size_t eol = no_comments.find('\n', pos);
      if (eol == std::string::npos) {
        eol = n;
      }
      std::string_view piece(no_comments.data() + pos, eol - pos);
      if (!piece.empty() && piece.back() == '\r') {
        piece.remove_suffix(1);
      }
      pos = eol + 1;
      if (!piece.empty() && piece.back() == '\\') {
        logical.append(piece.substr(0, piece.size() - 1));
        continue;
      }
      logical.append(piece);
      break;
    }
    std::string_view text = trim(logical);
    if (text.empty() || text.front() != '#') {
      continue;
    }
    text = trim(text.substr(1));
    std::size_t word_end = 0;
    while (word_end < text.size() && is_ident_char(text[word_end])) {
      ++word_end;
    }
    std::string_view directive = text.substr(0, word_end);
    int line = lines.line(line_start);
    if (directive == "include_next" || directive == "import") {
      scan.add("include_path",
               fmt::format("#{} is not allowed; use #include with a toolkit header or one of "
                           "the solution's files",
                           directive),
               line);
      continue;
    }
    if (directive != "include") {
      continue;
    }
    std::string_view rest = trim(text.substr(word_end));
    char open = rest.empty() ? '\0' : rest.front();
    if (open != '<' && open != '"') {
      scan.add("include_path",
               "computed #include (a macro naming the file) is not allowed: write the header "
               "name as <...> or \"...\"",
               line);
      continue;
    }
    judge_include(rest, "#include", own, rules, line, scan);
  }
}

}  // namespace

std::string angle_toolkit_includes(const std::string& content,
                                   const std::vector<std::string>& own_paths) {
  const std::string masked = mask_source(content, false);
  std::string out = content;
  std::size_t pos = 0;
  while (pos < masked.size()) {
    std::size_t eol = masked.find('\n', pos);
    if (eol == std::string::npos) {
      eol = masked.size();
    }
    std::size_t i = pos;
    pos = eol + 1;
    auto skip_space = [&] {
      while (i < eol && (masked[i] == ' ' || masked[i] == '\t')) {
        ++i;
      }
    };
    skip_space();
    if (i >= eol || masked[i] != '#') {
      continue;
    }
    ++i;
    skip_space();
    if (masked.compare(i, 7, "include") != 0 || (i + 7 < eol && is_ident_char(masked[i + 7]))) {
      continue;
    }
    i += 7;
    skip_space();
    if (i >= eol || masked[i] != '"') {
      continue;
    }
    std::size_t close = masked.find('"', i + 1);
    if (close == std::string::npos || close >= eol) {
      continue;
    }
    std::string name = masked.substr(i + 1, close - i - 1);
    if (std::find(own_paths.begin(), own_paths.end(), name) != own_paths.end()) {
      continue;
    }
    out[i] = '<';
    out[close] = '>';
  }
  return out;
}

namespace {

bool blank_text(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return is_space(c); });
}

}  // namespace

std::vector<RuleViolation> check_source_rules(const Solution& solution, const SourceRules& rules) {
  std::vector<RuleViolation> out;
  if (solution.sources.empty()) {
    out.push_back({"empty_source", "the solution has no source files", "", 0});
    return out;
  }
  std::size_t total = 0;
  for (std::size_t index = 0; index < solution.sources.size(); ++index) {
    const SourceFile& file = solution.sources[index];
    total += file.content.size();
    if (file.content.size() > rules.max_file_bytes) {
      out.push_back({"file_size",
                     fmt::format("{} bytes; a source file may have at most {} bytes",
                                 file.content.size(), rules.max_file_bytes),
                     file.path, 0});
      continue;  // not scanned: bounded work for hostile input
    }
    // The rules read the file as NVRTC does after translation phases 1-2 (splices, digraphs);
    // with trigraphs too, where the file has any, since a dialect may honour them.
    std::vector<std::string> texts = {translation_phases(file.content, false)};
    if (file.content.find("??") != std::string::npos) {
      texts.push_back(translation_phases(file.content, true));
    }
    if (index == solution.entry && blank_text(mask_source(texts[0], true))) {
      out.push_back({"empty_source", "the entry source has no code (only whitespace and comments)",
                     file.path, 0});
      continue;
    }
    FileScan scan{file, out};
    for (const std::string& text : texts) {
      const std::string no_comments = mask_source(text, false);
      const std::string code = mask_source(text, true);
      LineIndex lines(text);
      check_includes(solution, no_comments, code, lines, rules, scan);
      check_code(code, lines, scan);
    }
    if (scan.count > kMaxViolationsPerFile) {
      out.push_back({"too_many_violations",
                     fmt::format("{} more rule violations in this file not listed",
                                 scan.count - kMaxViolationsPerFile),
                     file.path, 0});
    }
  }
  if (total > rules.max_total_bytes) {
    out.push_back({"total_size",
                   fmt::format("the sources have {} bytes together; at most {} are allowed", total,
                               rules.max_total_bytes),
                   "", 0});
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Plan rules. Hardware limits checked for every workload:
//   grid   x in [1, 2^31-1], y and z in [1, 65535]                        rule grid_size
//   block  x, y in [1, 1024], z in [1, 64], x*y*z <= 1024                 rule block_size
//   cluster each >= 1, x*y*z <= 16 (16 is the non-portable maximum of Hopper and Blackwell,
//          which the harness opts into; 8 is the portable size), and the grid a multiple of
//          the cluster in each dimension                                  rule cluster_size
//   shared_bytes (dynamic) in [0, 227 KiB]: 227 KiB is the opt-in maximum per block on sm_90
//          and sm_100, the largest of any target; smaller GPUs (sm_89/sm_120: 99 KiB, sm_80:
//          163 KiB) fail at launch, where the device is known                rule shared_memory
//   workspace_bytes >= 0                                                  rule workspace_size
// Expression errors: division_by_zero, expression_overflow. Each (launch, field, rule) is
// reported once, for the first workload that breaks it, with the count of the others.
namespace {

constexpr std::int64_t kMaxGrid[3] = {2147483647LL, 65535, 65535};
constexpr std::int64_t kMaxBlock[3] = {1024, 1024, 64};
constexpr std::int64_t kMaxBlockThreads = 1024;
constexpr std::int64_t kMaxClusterBlocks = 16;
constexpr std::int64_t kMaxSharedBytes = 227LL * 1024;

std::vector<std::string> axis_names(const Definition& d) {
  std::vector<std::string> names;
  for (const auto& a : d.axes) {
    names.push_back(a.name);
  }
  return names;
}

std::vector<std::string> arg_names(const Definition& d) {
  std::vector<std::string> names = axis_names(d);
  for (const auto& t : d.inputs) {
    names.push_back(t.name);
  }
  for (const auto& t : d.outputs) {
    names.push_back(t.name);
  }
  names.push_back("workspace");
  return names;
}

std::string suggestion(std::string_view name, const std::vector<std::string>& candidates) {
  auto close = close_matches(name, candidates, 1);
  return close.empty() ? std::string() : fmt::format("; did you mean '{}'?", close.front());
}

struct NamedExpr {
  std::size_t launch;  // launches.size() for plan-level fields
  std::string field;
  const Expr* expr;
};

class Reporter {
 public:
  explicit Reporter(std::vector<RuleViolation>& out) : out_(out) {}
  void add(std::size_t launch, const std::string& field, const std::string& rule,
           std::string message) {
    auto key = std::make_tuple(launch, field, rule);
    auto it = seen_.find(key);
    if (it != seen_.end()) {
      ++it->second.second;
      return;
    }
    seen_[key] = {out_.size(), 0};
    out_.push_back({rule, std::move(message), "", 0});
  }
  void finish() {
    for (const auto& [key, value] : seen_) {
      if (value.second > 0) {
        out_[value.first].message +=
            fmt::format(" (and {} more workload{})", value.second, value.second == 1 ? "" : "s");
      }
    }
  }

 private:
  std::vector<RuleViolation>& out_;
  std::map<std::tuple<std::size_t, std::string, std::string>, std::pair<std::size_t, int>> seen_;
};

std::string launch_label(const LaunchPlan& plan, std::size_t i) {
  if (i >= plan.launches.size()) {
    return "plan";
  }
  return fmt::format("launch {} ({})", i, plan.launches[i].kernel);
}

std::string workload_label(const Workload* w) {
  if (w == nullptr) {
    return "the constant axes";
  }
  std::string axes;
  for (const auto& [name, value] : w->axes) {
    axes += fmt::format("{}{}={}", axes.empty() ? "" : ", ", name, value);
  }
  return fmt::format("workload {} ({})", w->uuid, axes);
}

// Every expression of the plan, in a fixed order: per launch grid[0-2], block[0-2], cluster[0-2]
// and shared_bytes (ten per launch), then the plan's workspace_bytes last.
std::vector<NamedExpr> launch_exprs(const LaunchPlan& plan) {
  std::vector<NamedExpr> exprs;
  for (std::size_t i = 0; i < plan.launches.size(); ++i) {
    const Launch& l = plan.launches[i];
    for (int d = 0; d < 3; ++d) {
      exprs.push_back({i, fmt::format("grid[{}]", d), &l.grid[d]});
    }
    for (int d = 0; d < 3; ++d) {
      exprs.push_back({i, fmt::format("block[{}]", d), &l.block[d]});
    }
    for (int d = 0; d < 3; ++d) {
      exprs.push_back({i, fmt::format("cluster[{}]", d), &l.cluster[d]});
    }
    exprs.push_back({i, "shared_bytes", &l.shared_bytes});
  }
  exprs.push_back({plan.launches.size(), "workspace_bytes", &plan.workspace_bytes});
  return exprs;
}

// Names: expressions use axes only. Returns which expressions name nothing else (those can be
// evaluated per workload).
std::vector<bool> check_expr_names(const LaunchPlan& plan, const Definition& definition,
                                   const std::vector<NamedExpr>& exprs,
                                   const std::vector<std::string>& axes,
                                   std::vector<RuleViolation>& out) {
  std::vector<bool> resolvable(exprs.size(), true);
  for (std::size_t e = 0; e < exprs.size(); ++e) {
    for (const auto& name : exprs[e].expr->names()) {
      if (definition.find_axis(name) != nullptr) {
        continue;
      }
      resolvable[e] = false;
      std::string what = definition.find_tensor(name) != nullptr
                             ? fmt::format("'{}' is a tensor, not an axis", name)
                             : fmt::format("'{}' is not an axis of {}", name, definition.name);
      out.push_back(
          {"unknown_axis",
           fmt::format("{}: {} '{}': {} (axes: {}{})", launch_label(plan, exprs[e].launch),
                       exprs[e].field, exprs[e].expr->text(), what, join(axes, ", "),
                       suggestion(name, axes)),
           "", 0});
    }
  }
  return resolvable;
}

// Arguments: tensors, axes, scalar inputs, "workspace", or literals.
void check_arg_names(const LaunchPlan& plan, const Definition& definition,
                     const std::vector<std::string>& args, std::vector<RuleViolation>& out) {
  for (std::size_t i = 0; i < plan.launches.size(); ++i) {
    const Launch& l = plan.launches[i];
    for (std::size_t a = 0; a < l.args.size(); ++a) {
      const LaunchArg& arg = l.args[a];
      if (arg.literal || !arg.tensor_map.empty() || arg.name == "workspace") {
        continue;
      }
      if (definition.find_axis(arg.name) != nullptr ||
          definition.find_tensor(arg.name) != nullptr) {
        continue;
      }
      out.push_back({"unknown_arg",
                     fmt::format("{}: arg {} '{}' is not a tensor, axis or scalar input of {} nor "
                                 "'workspace' (names: {}{})",
                                 launch_label(plan, i), a, arg.name, definition.name,
                                 join(args, ", "), suggestion(arg.name, args)),
                     "", 0});
    }
  }
}

// Geometry for one workload (nullptr: the constant axes alone): each resolvable expression
// evaluated with its bindings, then the grid, block, cluster, shared memory, workspace and tensor
// map limits checked against the values.
void check_geometry(const LaunchPlan& plan, const Definition& definition,
                    const std::vector<NamedExpr>& exprs, const std::vector<bool>& resolvable,
                    const Workload* workload, const Bindings& bindings, Reporter& report) {
  std::vector<std::optional<std::int64_t>> values(exprs.size());
  for (std::size_t e = 0; e < exprs.size(); ++e) {
    if (!resolvable[e]) {
      continue;
    }
    bool bound = true;
    for (const auto& name : exprs[e].expr->names()) {
      bound = bound && bindings.count(name) != 0;
    }
    if (!bound) {
      continue;
    }
    try {
      values[e] = exprs[e].expr->eval(bindings);
    } catch (const ExprError& error) {
      std::string rule;
      std::string what;
      if (error.kind() == ExprError::Kind::kDivisionByZero) {
        rule = "division_by_zero";
        what = "divides by zero";
      } else if (error.kind() == ExprError::Kind::kOverflow) {
        rule = "expression_overflow";
        what = "overflows 64-bit integers";
      } else {
        continue;
      }
      report.add(
          exprs[e].launch, exprs[e].field, rule,
          fmt::format("{}: {} '{}' {} for {}", launch_label(plan, exprs[e].launch), exprs[e].field,
                      exprs[e].expr->text(), what, workload_label(workload)));
    }
  }
  auto check = [&](std::size_t e, const std::string& rule, bool ok, const std::string& limit) {
    if (!values[e] || ok) {
      return;
    }
    report.add(exprs[e].launch, exprs[e].field, rule,
               fmt::format("{}: {} '{}' = {} for {}; {}", launch_label(plan, exprs[e].launch),
                           exprs[e].field, exprs[e].expr->text(), *values[e],
                           workload_label(workload), limit));
  };
  for (std::size_t i = 0; i < plan.launches.size(); ++i) {
    const std::size_t base = i * 10;  // grid 0-2, block 3-5, cluster 6-8, shared 9
    for (int d = 0; d < 3; ++d) {
      auto g = values[base + d];
      check(base + d, "grid_size", g && *g >= 1 && *g <= kMaxGrid[d],
            fmt::format("a grid dimension must be in [1, {}]", kMaxGrid[d]));
      auto b = values[base + 3 + d];
      check(base + 3 + d, "block_size", b && *b >= 1 && *b <= kMaxBlock[d],
            fmt::format("a block dimension must be in [1, {}]", kMaxBlock[d]));
      auto c = values[base + 6 + d];
      check(base + 6 + d, "cluster_size", c && *c >= 1, "a cluster dimension must be at least 1");
      if (g && c && *g >= 1 && *c >= 1 && *g % *c != 0) {
        report.add(i, fmt::format("cluster[{}]", d), "cluster_size",
                   fmt::format("{}: grid[{}] = {} is not a multiple of cluster[{}] = {} for {}",
                               launch_label(plan, i), d, *g, d, *c, workload_label(workload)));
      }
    }
    auto product = [&](std::size_t first, std::int64_t& p) {
      p = 1;
      for (int d = 0; d < 3; ++d) {
        auto v = values[first + d];
        if (!v || *v < 1) {
          return false;
        }
        p *= *v;  // each factor is already bounded, no overflow
      }
      return true;
    };
    std::int64_t threads = 0;
    bool block_ok = true;
    for (int d = 0; d < 3; ++d) {
      auto b = values[base + 3 + d];
      block_ok = block_ok && b && *b >= 1 && *b <= kMaxBlock[d];
    }
    if (block_ok && product(base + 3, threads) && threads > kMaxBlockThreads) {
      report.add(
          i, "block", "block_size",
          fmt::format("{}: block has {} threads for {}; at most {} per block",
                      launch_label(plan, i), threads, workload_label(workload), kMaxBlockThreads));
    }
    std::int64_t blocks = 0;
    bool cluster_ok = true;
    for (int d = 0; d < 3; ++d) {
      auto c = values[base + 6 + d];
      cluster_ok = cluster_ok && c && *c >= 1 && *c <= kMaxGrid[0];
    }
    if (cluster_ok && product(base + 6, blocks) && blocks > kMaxClusterBlocks) {
      report.add(
          i, "cluster", "cluster_size",
          fmt::format("{}: cluster has {} blocks for {}; at most {} (8 is portable)",
                      launch_label(plan, i), blocks, workload_label(workload), kMaxClusterBlocks));
    }
    auto s = values[base + 9];
    check(base + 9, "shared_memory", s && *s >= 0 && *s <= kMaxSharedBytes,
          fmt::format("dynamic shared memory must be in [0, {}] bytes (227 KiB)", kMaxSharedBytes));
  }
  std::size_t ws = exprs.size() - 1;
  check(ws, "workspace_size", values[ws] && *values[ws] >= 0,
        "workspace_bytes must not be negative");
  // Tensor maps: every rule of cuTensorMapEncodeTiled, and no byte outside the map's tensor or
  // the workspace, for this workload (tensor_map.hpp).
  for (std::size_t i = 0; i < plan.launches.size(); ++i) {
    for (const TensorMapSpec& map : plan.launches[i].tensor_maps) {
      std::string field;
      std::string message;
      try {
        resolve_tensor_map(map, definition, bindings, values[ws].value_or(0));
        continue;
      } catch (const TensorMapError& e) {
        field = e.field();
        message = e.what();
      } catch (const ExprError& e) {
        field = "tensor_maps";
        message = e.what();
      }
      report.add(i, fmt::format("tensor_maps.{}.{}", map.name, field), "tensor_map",
                 fmt::format("{}: tensor map '{}' {}: {} for {}", launch_label(plan, i), map.name,
                             field, message, workload_label(workload)));
    }
  }
}

// The rules of one list of launches (a plan without variants, or one variant's), for the
// workloads that run it.
std::vector<RuleViolation> check_launch_rules(const LaunchPlan& plan, const Definition& definition,
                                              const std::vector<Workload>& workloads) {
  std::vector<RuleViolation> out;
  if (plan.launches.empty()) {
    out.push_back({"no_launches", "the plan has no launches", "", 0});
    return out;
  }
  const std::vector<std::string> axes = axis_names(definition);
  const std::vector<std::string> args = arg_names(definition);

  const std::vector<NamedExpr> exprs = launch_exprs(plan);
  const std::vector<bool> resolvable = check_expr_names(plan, definition, exprs, axes, out);
  check_arg_names(plan, definition, args, out);

  // Geometry, per workload (or for the constant axes alone when there are no workloads).
  Reporter report(out);
  std::vector<std::pair<const Workload*, Bindings>> cases;
  if (workloads.empty()) {
    Bindings constants;
    for (const auto& a : definition.axes) {
      if (a.is_const) {
        constants[a.name] = a.value;
      }
    }
    cases.emplace_back(nullptr, constants);
  } else {
    for (const auto& w : workloads) {
      cases.emplace_back(&w, w.bindings(definition));
    }
  }
  for (const auto& [workload, bindings] : cases) {
    check_geometry(plan, definition, exprs, resolvable, workload, bindings, report);
  }
  report.finish();
  return out;
}

// A dispatching plan: each condition names axes only and evaluates for every workload (the
// choice of variant is made here, at compile time, for every workload), and each variant obeys
// the launch rules for the workloads it serves; a variant that serves none of them is still
// checked against the constant axes, since a held-out shape may choose it.
std::vector<RuleViolation> check_variant_rules(const LaunchPlan& plan, const Definition& definition,
                                               const std::vector<Workload>& workloads) {
  std::vector<RuleViolation> out;
  const std::vector<std::string> axes = axis_names(definition);
  bool resolvable = true;
  for (std::size_t v = 0; v < plan.variants.size(); ++v) {
    const auto& when = plan.variants[v].when;
    if (!when) {
      continue;
    }
    for (const auto& name : when->names()) {
      if (definition.find_axis(name) != nullptr) {
        continue;
      }
      resolvable = false;
      std::string what = definition.find_tensor(name) != nullptr
                             ? fmt::format("'{}' is a tensor, not an axis", name)
                             : fmt::format("'{}' is not an axis of {}", name, definition.name);
      out.push_back({"unknown_axis",
                     fmt::format("variants[{}].when '{}': {} (axes: {}{})", v, when->text(), what,
                                 join(axes, ", "), suggestion(name, axes)),
                     "", 0});
    }
  }
  std::vector<std::vector<Workload>> served(plan.variants.size());
  if (resolvable) {
    for (const auto& w : workloads) {
      try {
        served[plan.variant_for(w.bindings(definition))].push_back(w);
      } catch (const ExprError& e) {
        out.push_back({"variant_condition",
                       fmt::format("variants: no variant can be chosen for {}: {}",
                                   workload_label(&w), e.what()),
                       "", 0});
      }
    }
  }
  for (std::size_t v = 0; v < plan.variants.size(); ++v) {
    std::string prefix =
        fmt::format("variants[{}] ({}): ", v,
                    plan.variants[v].when ? plan.variants[v].when->text() : "otherwise");
    for (RuleViolation violation :
         check_launch_rules(plan.variant_plan(v), definition, served[v])) {
      violation.message = prefix + violation.message;
      out.push_back(std::move(violation));
    }
  }
  return out;
}

}  // namespace

std::vector<RuleViolation> check_plan_rules(const LaunchPlan& plan, const Definition& definition,
                                            const std::vector<Workload>& workloads) {
  return plan.has_variants() ? check_variant_rules(plan, definition, workloads)
                             : check_launch_rules(plan, definition, workloads);
}

// ---------------------------------------------------------------------------------------------
// Kernel interface. How a plan's kernel name finds a PTX entry: see match_kernel in
// compile_internal.hpp (exact name or mangled name; then the name without template arguments;
// then the unqualified name; the latter two only when unambiguous). Parameter checks:
//   tensor, output, "workspace"  a device pointer: .u64/.s64/.b64 (8 bytes)
//   axis                         an integer parameter of 4 or 8 bytes (int32 or int64)
//   scalar input, literal        dtype_size(dtype) bytes; a floating dtype must not go to an
//                                integer PTX type (.u/.s) nor an integer dtype to a .f type;
//                                an aggregate (.b8[N], e.g. __nv_bfloat16) is checked by size
// Without a definition, named arguments cannot be resolved and only counts and literals are
// checked. Indices in messages are 0-based, as in the plan's args array.

KernelMatch match_kernel(std::string_view name, const std::vector<KernelInfo>& kernels) {
  KernelMatch match;
  auto decide = [&](auto&& pred) {
    std::vector<const KernelInfo*> found;
    for (const auto& k : kernels) {
      if (pred(k)) {
        found.push_back(&k);
      }
    }
    if (found.size() == 1) {
      match.kernel = found.front();
    }
    if (found.size() > 1) {
      match.ambiguous = found;
    }
    return !found.empty();
  };
  if (decide([&](const KernelInfo& k) { return k.name == name || k.mangled == name; })) {
    return match;
  }
  if (decide([&](const KernelInfo& k) { return plain_kernel_name(k.name) == name; })) {
    return match;
  }
  decide([&](const KernelInfo& k) {
    std::string plain = plain_kernel_name(k.name);
    // The unqualified name: after the last top-level "::".
    int depth = 0;
    std::size_t cut = 0;
    for (std::size_t i = 0; i + 1 < plain.size(); ++i) {
      if (plain[i] == '<' || plain[i] == '(') {
        ++depth;
      }
      if ((plain[i] == '>' || plain[i] == ')') && depth > 0) {
        --depth;
      }
      if (depth == 0 && plain[i] == ':' && plain[i + 1] == ':') {
        cut = i + 2;
      }
    }
    return cut > 0 && plain.substr(cut) == name;
  });
  return match;
}

namespace {

bool is_aggregate(const PtxParam& p) {
  std::size_t elem = ptx_type_size(p.type);
  return elem == 0 || p.size != elem;
}

std::string describe(const PtxParam& p) {
  if (is_aggregate(p)) {
    return fmt::format(".align {} .b8[{}] ({} bytes)", p.align, p.size, p.size);
  }
  return fmt::format(".{} ({} byte{})", p.type, p.size, p.size == 1 ? "" : "s");
}

char type_class(const PtxParam& p) {  // 'f' float, 'i' integer, 'b' untyped bits, '?' other
  if (is_aggregate(p)) {
    return '?';
  }
  if (p.type.rfind("bf", 0) == 0 || p.type.front() == 'f') {
    return 'f';
  }
  if (p.type.front() == 'u' || p.type.front() == 's') {
    return 'i';
  }
  if (p.type.front() == 'b') {
    return 'b';
  }
  return '?';
}

std::string with_article(std::string_view dtype) {
  bool vowel =
      !dtype.empty() && std::string_view("aeiou").find(dtype.front()) != std::string_view::npos;
  return fmt::format("{} {}", vowel ? "an" : "a", dtype);
}

// Why a value of `dtype` cannot be passed in `param`, or "" when it can.
std::string value_mismatch(DType dtype, const PtxParam& param) {
  if (param.size != dtype_size(dtype)) {
    return "size";
  }
  char cls = type_class(param);
  if (is_floating(dtype) && cls == 'i') {
    return "kind";
  }
  if (!is_floating(dtype) && cls == 'f') {
    return "kind";
  }
  return {};
}

}  // namespace

namespace {

std::vector<RuleViolation> check_launch_interface(const LaunchPlan& plan,
                                                  const Definition* definition,
                                                  const std::vector<KernelInfo>& kernels) {
  std::vector<RuleViolation> out;
  std::vector<std::string> names;
  names.reserve(kernels.size());
  for (const auto& k : kernels) {
    names.push_back(k.name);
  }
  std::vector<std::string> candidates = names;
  for (const auto& k : kernels) {
    std::string plain = plain_kernel_name(k.name);
    if (plain != k.name) {
      candidates.push_back(plain);
    }
  }
  for (std::size_t i = 0; i < plan.launches.size(); ++i) {
    const Launch& launch = plan.launches[i];
    KernelMatch match = match_kernel(launch.kernel, kernels);
    if (!match.ambiguous.empty()) {
      std::vector<std::string> which;
      for (const auto* k : match.ambiguous) {
        which.push_back(k->name + " = " + k->mangled);
      }
      out.push_back({"unknown_kernel",
                     fmt::format("launch {}: kernel '{}' is ambiguous; it matches {} (name one "
                                 "by its mangled name, or make it extern \"C\")",
                                 i, launch.kernel, join(which, ", ")),
                     "", 0});
      continue;
    }
    if (match.kernel == nullptr) {
      std::string hint;
      auto close = close_matches(launch.kernel, candidates, 3);
      if (!close.empty()) {
        hint = fmt::format("; did you mean '{}'?", join(close, "', '"));
      }
      out.push_back(
          {"unknown_kernel",
           fmt::format("launch {}: kernel '{}' is not in the compiled module (kernels: {}{})", i,
                       launch.kernel, names.empty() ? std::string("none") : join(names, ", "),
                       hint),
           "", 0});
      continue;
    }
    const KernelInfo& kernel = *match.kernel;
    if (kernel.params.size() != launch.args.size()) {
      std::vector<std::string> texts;
      for (const auto& a : launch.args) {
        texts.push_back(a.text());
      }
      out.push_back(
          {"param_mismatch",
           fmt::format("launch {}: {} takes {} parameter{} but the plan passes {} "
                       "arg{} ({})",
                       i, kernel.name, kernel.params.size(), kernel.params.size() == 1 ? "" : "s",
                       launch.args.size(), launch.args.size() == 1 ? "" : "s", join(texts, ", ")),
           "", 0});
      continue;
    }
    for (std::size_t a = 0; a < launch.args.size(); ++a) {
      const LaunchArg& arg = launch.args[a];
      const PtxParam& param = kernel.params[a];
      std::string what;  // the argument, described, when it does not fit
      if (!arg.tensor_map.empty()) {
        // A CUtensorMap by value: `const __grid_constant__ CUtensorMap` is .align 64 .b8[128].
        if (!is_aggregate(param) || param.size != 128 || param.align < 64) {
          what = "a tensor map (a __grid_constant__ const CUtensorMap: .align 64 .b8[128])";
        }
      } else if (arg.literal) {
        if (!value_mismatch(arg.literal->dtype, param).empty()) {
          what = fmt::format("{} literal ({} bytes)", with_article(dtype_name(arg.literal->dtype)),
                             dtype_size(arg.literal->dtype));
        }
      } else if (definition == nullptr ||
                 (arg.name != "workspace" && definition->find_axis(arg.name) == nullptr &&
                  definition->find_tensor(arg.name) == nullptr)) {
        // Without a definition names cannot be resolved; an unknown name is reported by
        // check_plan_rules.
        continue;
      } else if (arg.name == "workspace" || definition->find_output(arg.name) != nullptr ||
                 (definition->find_input(arg.name) != nullptr &&
                  !definition->find_input(arg.name)->is_scalar())) {
        bool pointer = !is_aggregate(param) && param.size == 8 &&
                       (param.type == "u64" || param.type == "s64" || param.type == "b64");
        if (!pointer) {
          what = arg.name == "workspace" ? "the workspace (a device pointer, 8 bytes)"
                                         : "a tensor (a device pointer, 8 bytes)";
        }
      } else if (definition->find_axis(arg.name) != nullptr) {
        char cls = type_class(param);
        bool ok = (cls == 'i' || cls == 'b') && (param.size == 4 || param.size == 8);
        if (!ok) {
          what = "an axis (int32/int64)";
        }
      } else {  // a scalar input
        const TensorSpec* scalar = definition->find_input(arg.name);
        if (!value_mismatch(scalar->dtype, param).empty()) {
          what = fmt::format("{} scalar input ({} bytes)", with_article(dtype_name(scalar->dtype)),
                             dtype_size(scalar->dtype));
        }
      }
      if (!what.empty()) {
        out.push_back({"param_mismatch",
                       fmt::format("launch {}: arg {} '{}' is {} but parameter {} of {} is {}", i,
                                   a, arg.text(), what, a, kernel.name, describe(param)),
                       "", 0});
      }
    }
  }
  return out;
}

}  // namespace

std::vector<RuleViolation> check_kernel_interface(const LaunchPlan& plan,
                                                  const Definition* definition,
                                                  const std::vector<KernelInfo>& kernels) {
  if (!plan.has_variants()) {
    return check_launch_interface(plan, definition, kernels);
  }
  std::vector<RuleViolation> out;
  for (std::size_t v = 0; v < plan.variants.size(); ++v) {
    for (RuleViolation violation :
         check_launch_interface(plan.variant_plan(v), definition, kernels)) {
      violation.message = fmt::format("variants[{}]: {}", v, violation.message);
      out.push_back(std::move(violation));
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Output rules: what a compile produced, by size.

namespace {

// The size of a PTX scalar type (".b8", ".u32", ".f16x2", ".bf16", ".b128"), 0 when unknown.
std::uint64_t ptx_type_bytes(std::string_view type) {
  if (type == ".pred") return 1;
  std::size_t digits = type.find_first_of("0123456789");
  if (digits == std::string_view::npos) return 0;
  std::uint64_t bits = 0;
  std::size_t i = digits;
  for (; i < type.size() && std::isdigit(static_cast<unsigned char>(type[i])); ++i) {
    bits = bits * 10 + static_cast<std::uint64_t>(type[i] - '0');
    if (bits > 1024) return 0;
  }
  std::uint64_t lanes = 1;
  if (i + 1 < type.size() && type[i] == 'x')
    lanes = std::strtoull(type.data() + i + 1, nullptr, 10);
  return std::max<std::uint64_t>(1, bits / 8) * std::max<std::uint64_t>(1, lanes);
}

std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) {
  if (a != 0 && b > UINT64_MAX / a) return UINT64_MAX;
  return a * b;
}

std::string human_bytes(std::uint64_t bytes) {
  if (bytes >= (std::uint64_t{1} << 30))
    return fmt::format("{:.3g} GiB", static_cast<double>(bytes) / (1 << 30));
  return fmt::format("{:.3g} MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

std::uint64_t ptx_static_bytes(const std::string& ptx) {
  std::uint64_t total = 0;
  std::size_t pos = 0;
  // Every .global and .const declaration, at any scope: one that inline PTX declares inside a
  // function body is static storage of the module as well (parse_ptx_state); a function's .local
  // and .shared are not, and instructions (ld.global...) are no declarations.
  while (pos < ptx.size()) {
    std::size_t eol = ptx.find('\n', pos);
    if (eol == std::string::npos) eol = ptx.size();
    std::string_view line(ptx.data() + pos, eol - pos);
    pos = eol + 1;
    // ".visible .global .align 4 .b8 name[N][M];", ".const .u32 x[4] = {...};"
    std::vector<std::string_view> words;
    for (std::size_t i = 0; i < line.size();) {
      while (i < line.size() && is_space(line[i])) ++i;
      std::size_t start = i;
      while (i < line.size() && !is_space(line[i])) ++i;
      if (i > start) words.push_back(line.substr(start, i - start));
    }
    bool space = false;
    std::uint64_t element = 0, vector = 1;
    std::size_t k = 0;
    for (; k < words.size(); ++k) {
      std::string_view w = words[k];
      if (w == ".global" || w == ".const") {
        space = true;
      } else if (w == ".v2" || w == ".v4" || w == ".v8") {
        vector = static_cast<std::uint64_t>(w[2] - '0');
      } else if (w == ".align") {
        ++k;
      } else if (w.size() > 1 && w[0] == '.' && ptx_type_bytes(w) > 0 && space) {
        element = ptx_type_bytes(w);
        ++k;
        break;
      } else if (w.empty() || w[0] != '.') {
        break;
      }
    }
    if (!space || element == 0) continue;
    std::uint64_t bytes = saturating_mul(element, vector);
    // The declarator: name followed by [N] dimensions (an empty [] has the size of its
    // initialiser, which the PTX's bytes already bound).
    std::string_view rest = line.substr(std::min(
        line.size(),
        static_cast<std::size_t>(words[k - 1].data() - line.data() + words[k - 1].size())));
    for (std::size_t open = rest.find('['); open != std::string_view::npos;
         open = rest.find('[', open + 1)) {
      if (rest.find_first_of("=;", 0) < open) break;
      std::size_t close = rest.find(']', open);
      if (close == std::string_view::npos) break;
      std::string_view n = rest.substr(open + 1, close - open - 1);
      if (n.empty()) continue;
      bytes = saturating_mul(bytes, std::strtoull(std::string(n).c_str(), nullptr, 10));
    }
    total = total > UINT64_MAX - bytes ? UINT64_MAX : total + bytes;
  }
  return total;
}

std::vector<RuleViolation> check_output_rules(const std::string& ptx, const std::string& cubin,
                                              const OutputLimits& limits) {
  std::vector<RuleViolation> out;
  if (ptx.size() > limits.max_ptx_bytes)
    out.push_back({"output_size",
                   fmt::format("the compiled PTX is {} bytes ({}); at most {} are kept", ptx.size(),
                               human_bytes(ptx.size()), human_bytes(limits.max_ptx_bytes)),
                   "", 0});
  if (cubin.size() > limits.max_cubin_bytes)
    out.push_back(
        {"output_size",
         fmt::format("the compiled cubin is {} bytes ({}); at most {} are kept", cubin.size(),
                     human_bytes(cubin.size()), human_bytes(limits.max_cubin_bytes)),
         "", 0});
  const std::uint64_t statics = ptx_static_bytes(ptx);
  if (statics > limits.max_static_bytes)
    out.push_back({"module_size",
                   fmt::format("the module's static __device__/__constant__ variables take {} "
                               "bytes ({}); at most {} are allowed",
                               statics, human_bytes(statics), human_bytes(limits.max_static_bytes)),
                   "", 0});
  return out;
}

// ---------------------------------------------------------------------------------------------
// PTX rules: what the compiled module calls, whatever spelling or macro produced it.
//   device_heap  the module declares the device heap's allocator (.extern .func malloc, free,
//                __cuda_syscall_aligned_malloc: from malloc/free, new/delete and
//                __nv_aligned_device_malloc in device code). The device heap outlives a launch
//                and a module reload, so a kernel could keep state from one checked or timed
//                run to the next that the harness cannot scrub.
std::vector<RuleViolation> check_ptx_rules(const std::string& ptx) {
  std::vector<RuleViolation> out;
  std::set<std::string> reported;
  constexpr std::string_view kExtern = ".extern .func";
  for (std::size_t at = ptx.find(kExtern); at != std::string::npos;
       at = ptx.find(kExtern, at + kExtern.size())) {
    std::size_t i = at + kExtern.size();
    auto skip_space = [&] {
      while (i < ptx.size() && is_space(ptx[i])) {
        ++i;
      }
    };
    skip_space();
    if (i < ptx.size() && ptx[i] == '(') {  // the return parameter
      std::size_t close = ptx.find(')', i);
      if (close == std::string::npos) {
        break;
      }
      i = close + 1;
      skip_space();
    }
    std::size_t start = i;
    while (i < ptx.size() && (is_ident_char(ptx[i]) || ptx[i] == '$' || ptx[i] == '.')) {
      ++i;
    }
    std::string name = ptx.substr(start, i - start);
    bool heap = name == "malloc" || name == "free" || name == "realloc" || name == "calloc" ||
                name.find("aligned_malloc") != std::string::npos;
    if (heap && reported.insert(name).second) {
      out.push_back({"device_heap",
                     fmt::format("the module calls the device heap ('{}': malloc/free, new/delete "
                                 "or __nv_aligned_device_malloc in device code); the device heap "
                                 "outlives a launch, so a kernel could carry state between runs "
                                 "that the harness cannot scrub: use the plan's workspace",
                                 name),
                     "", 0});
    }
  }
  return out;
}

}  // namespace kharness
