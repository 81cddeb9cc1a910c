// Parsers for what NVRTC hands back: the PTX module (kernel entries and their parameters), the
// ptxas verbose lines of the program log (resource usage per kernel) and the compiler
// diagnostics (`file.cu(37): error: ...`).
#include <cxxabi.h>

#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "compile/compile_internal.hpp"
#include "kharness/compile.hpp"

namespace kharness {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) {
    s.remove_prefix(1);
  }
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) {
    s.remove_suffix(1);
  }
  return s;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool is_ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '.';
}

}  // namespace

std::size_t ptx_type_size(std::string_view type) {
  if (type == "pred") {
    return 1;
  }
  if (type.size() < 2) {
    return 0;
  }
  std::size_t vector = 1;
  auto x = type.find('x', 1);
  std::string_view base = type;
  if (x != std::string_view::npos) {  // f16x2, bf16x2
    vector = static_cast<std::size_t>(std::atoi(std::string(type.substr(x + 1)).c_str()));
    base = type.substr(0, x);
  }
  std::size_t digits = 0;
  while (digits < base.size() && std::isalpha(static_cast<unsigned char>(base[digits]))) {
    ++digits;
  }
  int bits = std::atoi(std::string(base.substr(digits)).c_str());
  if (bits <= 0 || bits % 8 != 0) {
    return 0;
  }
  return static_cast<std::size_t>(bits / 8) * (vector == 0 ? 1 : vector);
}

namespace {

// Strips `//` and `/* */` comments from PTX text.
std::string strip_ptx_comments(const std::string& ptx) {
  std::string out;
  out.reserve(ptx.size());
  for (std::size_t i = 0; i < ptx.size(); ++i) {
    if (ptx[i] == '/' && i + 1 < ptx.size() && ptx[i + 1] == '/') {
      while (i < ptx.size() && ptx[i] != '\n') {
        ++i;
      }
      if (i < ptx.size()) {
        out += '\n';
      }
    } else if (ptx[i] == '/' && i + 1 < ptx.size() && ptx[i + 1] == '*') {
      i += 2;
      while (i + 1 < ptx.size() && !(ptx[i] == '*' && ptx[i + 1] == '/')) {
        if (ptx[i] == '\n') {
          out += '\n';
        }
        ++i;
      }
      ++i;
    } else if (ptx[i] == '"') {  // string literals (e.g. .file names) kept verbatim
      out += ptx[i++];
      while (i < ptx.size() && ptx[i] != '"' && ptx[i] != '\n') {
        out += ptx[i++];
      }
      if (i < ptx.size()) {
        out += ptx[i];
      }
    } else {
      out += ptx[i];
    }
  }
  return out;
}

// One parameter declaration, e.g. ".param .align 8 .b8 foo_param_4[16]" or
// ".param .u64 .ptr .global .align 16 foo_param_0".
PtxParam parse_param(std::string_view decl) {
  PtxParam param;
  std::size_t explicit_align = 0;
  std::size_t count = 1;
  std::size_t pos = 0;
  std::vector<std::string_view> tokens;
  while (pos < decl.size()) {
    while (pos < decl.size() && std::isspace(static_cast<unsigned char>(decl[pos]))) {
      ++pos;
    }
    std::size_t start = pos;
    while (pos < decl.size() && !std::isspace(static_cast<unsigned char>(decl[pos]))) {
      ++pos;
    }
    if (pos > start) {
      tokens.push_back(decl.substr(start, pos - start));
    }
  }
  bool after_ptr = false;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    std::string_view t = tokens[i];
    if (t == ".param") {
      continue;
    }
    if (t == ".align" && i + 1 < tokens.size()) {
      std::size_t a = static_cast<std::size_t>(std::atoll(std::string(tokens[i + 1]).c_str()));
      if (!after_ptr) {
        explicit_align = a;  // ".ptr ... .align N" is the pointee's alignment
      }
      ++i;
      continue;
    }
    if (t == ".ptr") {
      after_ptr = true;
      continue;
    }
    if (t.front() == '.') {
      std::string_view type = t.substr(1);
      if (param.type.empty() && ptx_type_size(type) > 0) {
        param.type = std::string(type);
      }
      continue;
    }
    // The name, possibly with an array suffix.
    auto bracket = t.find('[');
    if (bracket != std::string_view::npos) {
      count = static_cast<std::size_t>(std::atoll(std::string(t.substr(bracket + 1)).c_str()));
    }
  }
  std::size_t elem = ptx_type_size(param.type);
  param.size = elem * count;
  param.align = explicit_align != 0 ? explicit_align : elem;
  return param;
}

}  // namespace

std::string demangled_kernel_name(const std::string& mangled) {
  if (!starts_with(mangled, "_Z")) {
    return mangled;
  }
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), std::free);
  if (status != 0 || !out) {
    return mangled;
  }
  std::string full = out.get();
  // Drop the parameter list: the '(' matching the final ')'.
  std::size_t end = full.size();
  if (end > 0 && full[end - 1] == ')') {
    int depth = 0;
    for (std::size_t i = end; i-- > 0;) {
      if (full[i] == ')') {
        ++depth;
      }
      if (full[i] == '(' && --depth == 0) {
        end = i;
        break;
      }
    }
  }
  std::string head = full.substr(0, end);
  // Drop a return type (template functions carry one): text before the last top-level space.
  int depth = 0;
  std::size_t cut = std::string::npos;
  for (std::size_t i = 0; i < head.size(); ++i) {
    char c = head[i];
    if (c == '<' || c == '(' || c == '[') {
      ++depth;
    }
    if ((c == '>' || c == ')' || c == ']') && depth > 0) {
      --depth;
    }
    if (c == ' ' && depth == 0) {
      cut = i;
    }
  }
  if (cut != std::string::npos) {
    head = head.substr(cut + 1);
  }
  return head;
}

std::string plain_kernel_name(const std::string& name) {
  // "ns::tk<4>" -> "ns::tk": drop a trailing template argument list.
  if (name.empty() || name.back() != '>') {
    return name;
  }
  int depth = 0;
  for (std::size_t i = name.size(); i-- > 0;) {
    if (name[i] == '>') {
      ++depth;
    }
    if (name[i] == '<' && --depth == 0) {
      return name.substr(0, i);
    }
  }
  return name;
}

std::vector<KernelInfo> parse_ptx_entries(const std::string& ptx_text) {
  std::vector<KernelInfo> kernels;
  const std::string ptx = strip_ptx_comments(ptx_text);
  std::size_t pos = 0;
  while ((pos = ptx.find(".entry", pos)) != std::string::npos) {
    // A whole-word ".entry" directive.
    bool word_start = pos == 0 || !is_ident_char(ptx[pos - 1]);
    std::size_t after = pos + 6;
    bool word_end = after < ptx.size() && std::isspace(static_cast<unsigned char>(ptx[after]));
    if (!word_start || !word_end) {
      pos = after;
      continue;
    }
    std::size_t name_start = after;
    while (name_start < ptx.size() && std::isspace(static_cast<unsigned char>(ptx[name_start]))) {
      ++name_start;
    }
    std::size_t name_end = name_start;
    while (name_end < ptx.size() && is_ident_char(ptx[name_end])) {
      ++name_end;
    }
    KernelInfo kernel;
    kernel.mangled = ptx.substr(name_start, name_end - name_start);
    kernel.name = demangled_kernel_name(kernel.mangled);
    std::size_t p = name_end;
    while (p < ptx.size() && std::isspace(static_cast<unsigned char>(ptx[p]))) {
      ++p;
    }
    if (p < ptx.size() && ptx[p] == '(') {
      std::size_t close = ptx.find(')', p);
      if (close == std::string::npos) {
        close = ptx.size();
      }
      std::string_view list(ptx.data() + p + 1, close - p - 1);
      std::size_t start = 0;
      while (start <= list.size()) {
        std::size_t comma = list.find(',', start);
        if (comma == std::string_view::npos) {
          comma = list.size();
        }
        std::string_view decl = trim(list.substr(start, comma - start));
        if (starts_with(decl, ".param")) {
          kernel.params.push_back(parse_param(decl));
        }
        start = comma + 1;
      }
      p = close;
    }
    if (!kernel.mangled.empty()) {
      kernels.push_back(std::move(kernel));
    }
    pos = p;
  }
  return kernels;
}

PtxState parse_ptx_state(const std::string& ptx_text) {
  PtxState state;
  const std::string ptx = strip_ptx_comments(ptx_text);
  // Statements end at ';' (or at an initialiser's '='), and at braces: a function body's '{', and
  // the braces inline PTX may put around its own statements. Declarations are read at every depth:
  // inline asm can declare a .global variable inside a function body.
  int depth = 0;
  std::size_t statement = 0;
  for (std::size_t i = 0; i < ptx.size(); ++i) {
    const char c = ptx[i];
    if (c == '"') {  // .file "name": skip the string
      std::size_t end = ptx.find('"', i + 1);
      i = end == std::string::npos ? ptx.size() : end;
      continue;
    }
    if (c == '{' || c == '}') {
      depth = c == '{' ? depth + 1 : (depth > 0 ? depth - 1 : 0);
      statement = i + 1;
      continue;
    }
    if (c != ';' && c != '=') continue;
    // One statement up to its ';' (or its initialiser's '='), as tokens.
    std::string_view text(ptx.data() + statement, i - statement);
    if (c == '=') {  // skip the initialiser up to the statement's ';' (braces included)
      int braces = 0;
      std::size_t j = i;
      for (; j < ptx.size(); ++j) {
        if (ptx[j] == '{') ++braces;
        if (ptx[j] == '}') --braces;
        if (ptx[j] == ';' && braces <= 0) break;
      }
      i = j;
    }
    statement = i + 1;
    std::vector<std::string_view> tokens;
    std::size_t p = 0;
    while (p < text.size()) {
      while (p < text.size() && std::isspace(static_cast<unsigned char>(text[p]))) ++p;
      std::size_t start = p;
      while (p < text.size() && !std::isspace(static_cast<unsigned char>(text[p]))) ++p;
      if (p > start) tokens.push_back(text.substr(start, p - start));
    }
    // The state space: a whole ".global" or ".const" token (instructions spell it inside theirs,
    // "ld.global.u32"); parameter lists (".param .u64 .ptr .global") and functions are not
    // variables.
    bool global = false, constant = false, external = false;
    for (auto t : tokens) {
      if (t == ".global") global = true;
      if (t == ".const") constant = true;
      if (t == ".extern") external = true;
      if (t == ".entry" || t == ".func" || t == ".param") global = constant = false;
    }
    if ((!global && !constant) || external || tokens.empty()) continue;
    std::string_view name = tokens.back();
    name = name.substr(0, name.find('['));  // "cache[1024]" -> "cache"
    if (name.empty() || name[0] == '.') continue;
    if (depth > 0) {
      state.function_scope.emplace_back(name);
    } else {
      (global ? state.globals : state.constants).emplace_back(name);
    }
  }
  return state;
}

namespace {

// The integer in front of `suffix` in `text` ("128 bytes smem" with suffix " bytes smem").
bool number_before(std::string_view text, std::string_view suffix, std::int64_t& value) {
  auto at = text.find(suffix);
  if (at == std::string_view::npos) {
    return false;
  }
  std::size_t start = at;
  while (start > 0 && std::isdigit(static_cast<unsigned char>(text[start - 1]))) {
    --start;
  }
  if (start == at) {
    return false;
  }
  value = std::atoll(std::string(text.substr(start, at - start)).c_str());
  return true;
}

std::string quoted_name(std::string_view line, std::string_view after) {
  auto at = line.find(after);
  if (at == std::string_view::npos) {
    return {};
  }
  std::string_view rest = line.substr(at + after.size());
  if (!rest.empty() && rest.front() == '\'') {
    rest.remove_prefix(1);
    auto end = rest.find('\'');
    return std::string(rest.substr(0, end));
  }
  return std::string(trim(rest));
}

}  // namespace

void apply_ptxas_info(const std::string& log, std::vector<KernelInfo>& kernels) {
  std::map<std::string, KernelInfo*, std::less<>> by_mangled;
  for (auto& k : kernels) {
    by_mangled[k.mangled] = &k;
  }
  KernelInfo* current = nullptr;
  std::size_t pos = 0;
  while (pos < log.size()) {
    std::size_t eol = log.find('\n', pos);
    if (eol == std::string::npos) {
      eol = log.size();
    }
    std::string_view line(log.data() + pos, eol - pos);
    pos = eol + 1;
    if (!starts_with(line, "ptxas")) {
      continue;
    }
    if (line.find("Compiling entry function") != std::string_view::npos) {
      auto it = by_mangled.find(quoted_name(line, "Compiling entry function "));
      current = it == by_mangled.end() ? nullptr : it->second;
    } else if (line.find("Function properties for") != std::string_view::npos) {
      // Also printed for non-inlined device functions: those are not kernels.
      auto it = by_mangled.find(quoted_name(line, "Function properties for "));
      current = it == by_mangled.end() ? nullptr : it->second;
    } else if (current != nullptr && line.find("bytes stack frame") != std::string_view::npos) {
      std::int64_t v = 0;
      if (number_before(line, " bytes stack frame", v)) {
        current->stack_bytes = v;
      }
      if (number_before(line, " bytes spill stores", v)) {
        current->spill_store_bytes = v;
      }
      if (number_before(line, " bytes spill loads", v)) {
        current->spill_load_bytes = v;
      }
    } else if (current != nullptr && line.find(": Used ") != std::string_view::npos) {
      std::int64_t v = 0;
      std::string_view rest = line.substr(line.find(": Used ") + 2);
      if (number_before(rest, " registers", v)) {
        current->registers = static_cast<int>(v);
      }
      // ptxas leaves out what is zero.
      current->barriers = number_before(rest, " barriers", v) ? static_cast<int>(v) : 0;
      current->shared_bytes = number_before(rest, " bytes smem", v) ? v : 0;
      current->const_bytes = number_before(rest, " bytes cmem[0]", v) ? v : 0;
      if (current->stack_bytes < 0) {
        current->stack_bytes = 0;
      }
      if (current->spill_store_bytes < 0) {
        current->spill_store_bytes = 0;
      }
      if (current->spill_load_bytes < 0) {
        current->spill_load_bytes = 0;
      }
    }
  }
}

std::vector<Diagnostic> parse_nvrtc_diagnostics(const std::string& log) {
  std::vector<Diagnostic> out;
  std::vector<std::string_view> lines;
  for (std::size_t pos = 0; pos < log.size();) {
    std::size_t eol = log.find('\n', pos);
    if (eol == std::string::npos) {
      eol = log.size();
    }
    std::string_view line(log.data() + pos, eol - pos);
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    lines.push_back(line);
    pos = eol + 1;
  }
  auto severity_of = [](std::string_view word, Diagnostic::Severity& s) {
    if (word == "error" || word == "catastrophic error" || word == "fatal" ||
        word == "internal error") {
      s = Diagnostic::Severity::kError;
    } else if (word == "warning") {
      s = Diagnostic::Severity::kWarning;
    } else if (word == "remark" || word == "note" || word == "info") {
      s = Diagnostic::Severity::kNote;
    } else {
      return false;
    }
    return true;
  };
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    Diagnostic d;
    bool found = false;
    // "file(37): error: message" / "file(4): warning #1105-D: message"
    auto paren = line.find("): ");
    if (paren != std::string_view::npos && !line.empty() && line.front() != ' ') {
      auto open = line.rfind('(', paren);
      if (open != std::string_view::npos && open > 0) {
        std::string_view num = line.substr(open + 1, paren - open - 1);
        bool digits = !num.empty();
        for (char c : num) {
          digits = digits && std::isdigit(static_cast<unsigned char>(c));
        }
        std::string_view rest = line.substr(paren + 3);
        auto colon = rest.find(": ");
        if (digits && colon != std::string_view::npos) {
          std::string_view word = rest.substr(0, colon);
          auto hash = word.find(" #");
          if (hash != std::string_view::npos) {
            word = word.substr(0, hash);
          }
          if (severity_of(word, d.severity)) {
            d.file = std::string(line.substr(0, open));
            d.line = std::atoi(std::string(num).c_str());
            d.message = std::string(trim(rest.substr(colon + 2)));
            found = true;
          }
        }
      }
    }
    if (!found) {
      // Tool messages without a location: "nvrtc: error: ...", "Command-line error: ...",
      // "ptxas error   : ...", "ptxas warning : ...", "ptxas fatal   : ...".
      struct Prefix {
        std::string_view text;
        Diagnostic::Severity severity;
        std::string_view tool;
      };
      static const Prefix prefixes[] = {
          {"nvrtc: error:", Diagnostic::Severity::kError, "nvrtc"},
          {"nvrtc: warning:", Diagnostic::Severity::kWarning, "nvrtc"},
          {"Command-line error:", Diagnostic::Severity::kError, "nvrtc"},
          {"ptxas error", Diagnostic::Severity::kError, "ptxas"},
          {"ptxas fatal", Diagnostic::Severity::kError, "ptxas"},
          {"ptxas warning", Diagnostic::Severity::kWarning, "ptxas"},
          {"nvlink error", Diagnostic::Severity::kError, "nvlink"},
      };
      for (const auto& p : prefixes) {
        if (starts_with(line, p.text)) {
          std::string_view rest = line.substr(p.text.size());
          auto colon = rest.find(':');
          if (p.text.back() != ':' && colon != std::string_view::npos) {
            rest = rest.substr(colon + 1);
          }
          d.severity = p.severity;
          d.message = std::string(p.tool) + ": " + std::string(trim(rest));
          found = true;
          break;
        }
      }
    }
    if (!found) {
      continue;
    }
    // Continuation lines: "          detected during instantiation of ... at line 2".
    for (std::size_t j = i + 1; j < lines.size(); ++j) {
      std::string_view next = trim(lines[j]);
      if (starts_with(next, "detected during") || starts_with(next, "instantiation of") ||
          starts_with(next, "required from")) {
        d.message += "; " + std::string(next);
      } else if (!lines[j].empty() && lines[j].front() != ' ') {
        break;
      }
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace kharness
