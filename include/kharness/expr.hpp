// The launch-plan expression language: integers, axis names, + - * / %, parentheses,
// cdiv(a,b), min(a,b), max(a,b), and with C's precedence the comparisons == != < <= > >=, the
// logical && || ! (short-circuit) yielding 0 or 1. Used for grid/block/shared/workspace sizes,
// the FLOP and byte formulas of definitions and the validity constraints of tune knobs
// (kharness/tune.hpp). Arithmetic is 64-bit, checked for overflow;
// '/' and '%' truncate toward zero as in C.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kharness {

using Bindings = std::map<std::string, std::int64_t, std::less<>>;

class ExprError : public std::runtime_error {
 public:
  enum class Kind { kSyntax, kUnknownName, kDivisionByZero, kOverflow };
  ExprError(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

class Expr {
 public:
  struct Node;

  Expr();                                    // the constant 0
  static Expr parse(std::string_view text);  // throws ExprError(kSyntax)
  static Expr constant(std::int64_t value);

  // Throws ExprError: kUnknownName, kDivisionByZero, kOverflow.
  std::int64_t eval(const Bindings& bindings) const;
  // Every name the expression refers to, sorted, without duplicates.
  std::vector<std::string> names() const;
  const std::string& text() const { return text_; }
  bool is_constant() const;

 private:
  Expr(std::shared_ptr<const Node> root, std::string text);
  std::shared_ptr<const Node> root_;
  std::string text_;
};

}  // namespace kharness
