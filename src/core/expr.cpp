// Recursive-descent parser and tree evaluator for the launch-plan expression language.
// Precedence and associativity follow C; comparisons and logical operators yield 0 or 1.
//   expr    := or
//   or      := and ('||' and)*
//   and     := eq ('&&' eq)*
//   eq      := rel (('==' | '!=') rel)*
//   rel     := sum (('<' | '<=' | '>' | '>=') sum)*
//   sum     := term (('+' | '-') term)*
//   term    := unary (('*' | '/' | '%') unary)*
//   unary   := ('-' | '+' | '!') unary | primary
//   primary := INT | NAME | NAME '(' expr (',' expr)* ')' | '(' expr ')'
// Functions: cdiv(a,b), min(a,b,...), max(a,b,...).
#include "kharness/expr.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <set>

#include "kharness/text.hpp"

namespace kharness {

struct Expr::Node {
  enum class Kind {
    kConst,
    kName,
    kNeg,
    kNot,
    kAdd,
    kSub,
    kMul,
    kDiv,
    kMod,
    kCdiv,
    kMin,
    kMax,
    kEq,
    kNe,
    kLt,
    kLe,
    kGt,
    kGe,
    kAnd,
    kOr
  };
  Kind kind = Kind::kConst;
  int depth = 1;  // levels of nesting below and including this node
  std::int64_t value = 0;
  std::string name;
  std::vector<std::shared_ptr<const Node>> kids;
};

namespace {

using Node = Expr::Node;
using NodePtr = std::shared_ptr<const Node>;

// Parsing, evaluating and freeing a tree are recursive: a deeper expression (a model's answer of
// ten thousand '(' or "1+1+...+1") would overflow the stack. No real size formula comes close.
constexpr int kMaxDepth = 200;

// The expression as messages quote it: long ones are cut and control characters escaped (a NUL
// would end the message early), so an error stays one readable line.
std::string shown(std::string_view text) {
  constexpr std::size_t kShown = 80;
  std::string out = printable_line(text.substr(0, kShown));
  if (text.size() > kShown) out += fmt::format("... ({} characters)", text.size());
  return out;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  NodePtr parse() {
    if (text_.find_first_not_of(" \t\r\n") == std::string_view::npos) fail("empty expression");
    NodePtr root = parse_or();
    skip_space();
    if (pos_ != text_.size()) fail(fmt::format("unexpected '{}'", shown(text_.substr(pos_, 1))));
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw ExprError(ExprError::Kind::kSyntax, fmt::format("in expression \"{}\" at column {}: {}",
                                                          shown(text_), pos_ + 1, what));
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  bool accept(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  // Accepts the two-character operator `op` (as in "<=", "&&").
  bool accept2(const char* op) {
    skip_space();
    if (text_.compare(pos_, 2, op) == 0) {
      pos_ += 2;
      return true;
    }
    return false;
  }

  // Accepts `c` when the next character does not extend it into `c` followed by `not_next`
  // ('<' but not "<=", '!' but not "!=").
  bool accept_alone(char c, char not_next) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c &&
        (pos_ + 1 >= text_.size() || text_[pos_ + 1] != not_next)) {
      ++pos_;
      return true;
    }
    return false;
  }

  NodePtr make(Node::Kind kind, std::vector<NodePtr> kids) const {
    auto node = std::make_shared<Node>();
    node->kind = kind;
    for (const auto& kid : kids) node->depth = std::max(node->depth, kid->depth + 1);
    if (node->depth > kMaxDepth) fail(too_deep());
    node->kids = std::move(kids);
    return node;
  }

  static std::string too_deep() {
    return fmt::format("nested more than {} levels deep", kMaxDepth);
  }

  NodePtr parse_or() {
    NodePtr left = parse_and();
    while (accept2("||")) left = make(Node::Kind::kOr, {left, parse_and()});
    return left;
  }

  NodePtr parse_and() {
    NodePtr left = parse_eq();
    while (accept2("&&")) left = make(Node::Kind::kAnd, {left, parse_eq()});
    return left;
  }

  NodePtr parse_eq() {
    NodePtr left = parse_rel();
    for (;;) {
      if (accept2("==")) {
        left = make(Node::Kind::kEq, {left, parse_rel()});
      } else if (accept2("!=")) {
        left = make(Node::Kind::kNe, {left, parse_rel()});
      } else {
        return left;
      }
    }
  }

  NodePtr parse_rel() {
    NodePtr left = parse_sum();
    for (;;) {
      if (accept2("<=")) {
        left = make(Node::Kind::kLe, {left, parse_sum()});
      } else if (accept2(">=")) {
        left = make(Node::Kind::kGe, {left, parse_sum()});
      } else if (accept_alone('<', '<')) {
        left = make(Node::Kind::kLt, {left, parse_sum()});
      } else if (accept_alone('>', '>')) {
        left = make(Node::Kind::kGt, {left, parse_sum()});
      } else {
        return left;
      }
    }
  }

  NodePtr parse_sum() {
    NodePtr left = parse_term();
    for (;;) {
      if (accept('+')) {
        left = make(Node::Kind::kAdd, {left, parse_term()});
      } else if (accept('-')) {
        left = make(Node::Kind::kSub, {left, parse_term()});
      } else {
        return left;
      }
    }
  }

  NodePtr parse_term() {
    NodePtr left = parse_unary();
    for (;;) {
      if (accept('*')) {
        left = make(Node::Kind::kMul, {left, parse_unary()});
      } else if (accept('/')) {
        left = make(Node::Kind::kDiv, {left, parse_unary()});
      } else if (accept('%')) {
        left = make(Node::Kind::kMod, {left, parse_unary()});
      } else {
        return left;
      }
    }
  }

  // Every level of nesting ('(', a call, a unary operator) passes through here.
  NodePtr parse_unary() {
    if (++nesting_ > kMaxDepth) fail(too_deep());
    NodePtr out;
    if (accept('-')) {
      out = make(Node::Kind::kNeg, {parse_unary()});
    } else if (accept('+')) {
      out = parse_unary();
    } else if (accept_alone('!', '=')) {
      out = make(Node::Kind::kNot, {parse_unary()});
    } else {
      out = parse_primary();
    }
    --nesting_;
    return out;
  }

  NodePtr parse_primary() {
    skip_space();
    if (pos_ >= text_.size()) fail("expected a number, a name or '('");
    char c = text_[pos_];
    if (accept('(')) {
      NodePtr inner = parse_or();
      if (!accept(')')) fail("expected ')'");
      return inner;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      std::int64_t value = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        int digit = text_[pos_] - '0';
        if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10) {
          fail("integer literal too large");
        }
        value = value * 10 + digit;
        ++pos_;
      }
      if (pos_ < text_.size() &&
          (std::isalpha(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '.')) {
        fail("only integer literals are allowed");
      }
      auto node = std::make_shared<Node>();
      node->kind = Node::Kind::kConst;
      node->value = value;
      return node;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t start = pos_;
      while (pos_ < text_.size() &&
             (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
        ++pos_;
      }
      std::string name(text_.substr(start, pos_ - start));
      if (accept('(')) return parse_call(name, start);
      auto node = std::make_shared<Node>();
      node->kind = Node::Kind::kName;
      node->name = std::move(name);
      return node;
    }
    fail(fmt::format("unexpected '{}'", shown(text_.substr(pos_, 1))));
  }

  NodePtr parse_call(const std::string& name, std::size_t start) {
    Node::Kind kind;
    if (name == "cdiv") {
      kind = Node::Kind::kCdiv;
    } else if (name == "min") {
      kind = Node::Kind::kMin;
    } else if (name == "max") {
      kind = Node::Kind::kMax;
    } else {
      pos_ = start;
      fail(fmt::format("unknown function '{}' (functions: cdiv, min, max)", name));
    }
    std::vector<NodePtr> args;
    args.push_back(parse_or());
    while (accept(',')) args.push_back(parse_or());
    if (!accept(')')) fail("expected ',' or ')'");
    if (kind == Node::Kind::kCdiv && args.size() != 2) {
      fail(fmt::format("cdiv takes 2 arguments, got {}", args.size()));
    }
    if (kind != Node::Kind::kCdiv && args.size() < 2) {
      fail(fmt::format("{} takes at least 2 arguments", name));
    }
    return make(kind, std::move(args));
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  int nesting_ = 0;
};

[[noreturn]] void overflow(const std::string& text) {
  throw ExprError(ExprError::Kind::kOverflow,
                  fmt::format("in expression \"{}\": overflow", shown(text)));
}

std::int64_t eval_node(const Node& node, const Bindings& bindings, const std::string& text) {
  auto arg = [&](std::size_t i) { return eval_node(*node.kids[i], bindings, text); };
  auto divisor = [&](std::size_t i) {
    std::int64_t d = arg(i);
    if (d == 0) {
      throw ExprError(ExprError::Kind::kDivisionByZero,
                      fmt::format("in expression \"{}\": division by zero", shown(text)));
    }
    return d;
  };
  std::int64_t out = 0;
  switch (node.kind) {
    case Node::Kind::kConst:
      return node.value;
    case Node::Kind::kName: {
      auto it = bindings.find(node.name);
      if (it == bindings.end()) {
        throw ExprError(
            ExprError::Kind::kUnknownName,
            fmt::format("in expression \"{}\": unknown name '{}'", shown(text), node.name));
      }
      return it->second;
    }
    case Node::Kind::kNeg: {
      std::int64_t v = arg(0);
      if (v == std::numeric_limits<std::int64_t>::min()) overflow(text);
      return -v;
    }
    case Node::Kind::kNot:
      return arg(0) == 0 ? 1 : 0;
    case Node::Kind::kEq:
      return arg(0) == arg(1) ? 1 : 0;
    case Node::Kind::kNe:
      return arg(0) != arg(1) ? 1 : 0;
    case Node::Kind::kLt:
      return arg(0) < arg(1) ? 1 : 0;
    case Node::Kind::kLe:
      return arg(0) <= arg(1) ? 1 : 0;
    case Node::Kind::kGt:
      return arg(0) > arg(1) ? 1 : 0;
    case Node::Kind::kGe:
      return arg(0) >= arg(1) ? 1 : 0;
    case Node::Kind::kAnd:  // short-circuit, as in C: "K > 0 && N % K == 0" never divides by 0
      return arg(0) != 0 && arg(1) != 0 ? 1 : 0;
    case Node::Kind::kOr:
      return arg(0) != 0 || arg(1) != 0 ? 1 : 0;
    case Node::Kind::kAdd:
      if (__builtin_add_overflow(arg(0), arg(1), &out)) overflow(text);
      return out;
    case Node::Kind::kSub:
      if (__builtin_sub_overflow(arg(0), arg(1), &out)) overflow(text);
      return out;
    case Node::Kind::kMul:
      if (__builtin_mul_overflow(arg(0), arg(1), &out)) overflow(text);
      return out;
    case Node::Kind::kDiv: {
      std::int64_t a = arg(0), b = divisor(1);
      if (a == std::numeric_limits<std::int64_t>::min() && b == -1) overflow(text);
      return a / b;
    }
    case Node::Kind::kMod: {
      std::int64_t a = arg(0), b = divisor(1);
      if (b == -1) return 0;
      return a % b;
    }
    case Node::Kind::kCdiv: {
      std::int64_t a = arg(0), b = divisor(1);
      if (a == std::numeric_limits<std::int64_t>::min() && b == -1) overflow(text);
      // Ceiling division for any signs.
      std::int64_t q = a / b;
      if ((a % b != 0) && ((a < 0) == (b < 0))) ++q;
      return q;
    }
    case Node::Kind::kMin:
    case Node::Kind::kMax: {
      std::int64_t best = arg(0);
      for (std::size_t i = 1; i < node.kids.size(); ++i) {
        std::int64_t v = arg(i);
        best = node.kind == Node::Kind::kMin ? std::min(best, v) : std::max(best, v);
      }
      return best;
    }
  }
  return 0;
}

void collect_names(const Node& node, std::set<std::string>& out) {
  if (node.kind == Node::Kind::kName) out.insert(node.name);
  for (const auto& kid : node.kids) collect_names(*kid, out);
}

}  // namespace

Expr::Expr() : Expr(constant(0)) {}

Expr Expr::parse(std::string_view text) {
  Expr e;
  e.root_ = Parser(text).parse();
  e.text_ = std::string(text);
  return e;
}

Expr Expr::constant(std::int64_t value) {
  auto node = std::make_shared<Node>();
  node->kind = Node::Kind::kConst;
  node->value = value;
  Expr e(std::move(node), std::to_string(value));
  return e;
}

Expr::Expr(std::shared_ptr<const Node> root, std::string text)
    : root_(std::move(root)), text_(std::move(text)) {}

std::int64_t Expr::eval(const Bindings& bindings) const {
  return eval_node(*root_, bindings, text_);
}

std::vector<std::string> Expr::names() const {
  std::set<std::string> names;
  collect_names(*root_, names);
  return {names.begin(), names.end()};
}

bool Expr::is_constant() const { return names().empty(); }

}  // namespace kharness
