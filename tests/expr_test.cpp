#include "kharness/expr.hpp"

#include <gtest/gtest.h>

namespace kharness {
namespace {

std::int64_t eval(const std::string& text, const Bindings& b = {}) {
  return Expr::parse(text).eval(b);
}

TEST(Expr, ArithmeticWithPrecedence) {
  EXPECT_EQ(eval("1 + 2 * 3"), 7);
  EXPECT_EQ(eval("(1 + 2) * 3"), 9);
  EXPECT_EQ(eval("10 - 4 - 3"), 3);
  EXPECT_EQ(eval("100 / 10 / 5"), 2);
  EXPECT_EQ(eval("17 % 5"), 2);
  EXPECT_EQ(eval("-3 + 5"), 2);
  EXPECT_EQ(eval("7 / 2"), 3);
  EXPECT_EQ(eval("-7 / 2"), -3);  // truncation toward zero, as in C
}

TEST(Expr, FunctionsAndNames) {
  Bindings b{{"batch_size", 7}, {"hidden_size", 4096}};
  EXPECT_EQ(eval("cdiv(batch_size, 2)", b), 4);
  EXPECT_EQ(eval("cdiv(8, 2)", b), 4);
  EXPECT_EQ(eval("cdiv(0, 128)", b), 0);
  EXPECT_EQ(eval("min(batch_size, 4, 9)", b), 4);
  EXPECT_EQ(eval("max(batch_size, 4)", b), 7);
  EXPECT_EQ(eval("hidden_size / 8 * batch_size", b), 3584);
  EXPECT_EQ(eval("cdiv(hidden_size, min(256, batch_size * 32))", b), 19);
  EXPECT_EQ(Expr::parse("cdiv(M, 128) * max(N, K)").names(),
            (std::vector<std::string>{"K", "M", "N"}));
  EXPECT_TRUE(Expr::parse("2 * (3 + 4)").is_constant());
  EXPECT_EQ(Expr::constant(42).eval({}), 42);
}

TEST(Expr, SyntaxErrorsNameTheColumn) {
  auto expect_syntax = [](const std::string& text, const std::string& fragment) {
    try {
      Expr::parse(text);
      FAIL() << "parsed: " << text;
    } catch (const ExprError& e) {
      EXPECT_EQ(e.kind(), ExprError::Kind::kSyntax) << text;
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_syntax("", "empty");
  expect_syntax("1 +", "expected");
  expect_syntax("(1 + 2", "expected ')'");
  expect_syntax("2 ** 3", "unexpected '*'");
  expect_syntax("pow(2, 3)", "unknown function 'pow'");
  expect_syntax("cdiv(1)", "cdiv takes 2");
  expect_syntax("min(1)", "at least 2");
  expect_syntax("1.5 * M", "integer");
  expect_syntax("M N", "column 3");
  expect_syntax("99999999999999999999", "too large");
}

// A hostile or broken expression (a model's answer, a fuzzed plan) is a syntax error, not a stack
// overflow in the recursive parser, evaluator or destructor.
TEST(Expr, DeepNestingIsASyntaxErrorNotACrash) {
  const std::size_t n = 100000;
  for (const std::string& text :
       {std::string(n, '(') + "1" + std::string(n, ')'), std::string(n, '-') + "1",
        std::string(n, '!') + "1", "1" + std::string(n, '+') + "1",
        [&] {
          std::string chain = "1";
          for (std::size_t i = 0; i < n; ++i) chain += "+1";
          return chain;
        }(),
        [&] {
          std::string calls;
          for (std::size_t i = 0; i < n; ++i) calls += "max(1,";
          return calls + "1" + std::string(n, ')');
        }()}) {
    try {
      Expr::parse(text);
      FAIL() << "parsed " << text.size() << " characters";
    } catch (const ExprError& e) {
      EXPECT_EQ(e.kind(), ExprError::Kind::kSyntax);
      std::string what = e.what();
      EXPECT_LT(what.size(), 300u) << "the message quotes a short prefix, not the whole text";
    }
  }
  // Real formulas are far from the limit.
  EXPECT_EQ(eval("((((((((((1))))))))))+cdiv(-(-7), 2)*max(1, min(2, 3))"), 9);
}

TEST(Expr, EvaluationErrors) {
  Bindings b{{"n", 0}};
  try {
    eval("10 / n", b);
    FAIL();
  } catch (const ExprError& e) {
    EXPECT_EQ(e.kind(), ExprError::Kind::kDivisionByZero);
  }
  EXPECT_THROW(eval("10 % n", b), ExprError);
  EXPECT_THROW(eval("cdiv(10, n)", b), ExprError);
  try {
    eval("num_tokens * 2", b);
    FAIL();
  } catch (const ExprError& e) {
    EXPECT_EQ(e.kind(), ExprError::Kind::kUnknownName);
    EXPECT_NE(std::string(e.what()).find("num_tokens"), std::string::npos);
  }
  try {
    eval("4611686018427387904 * 4");
    FAIL();
  } catch (const ExprError& e) {
    EXPECT_EQ(e.kind(), ExprError::Kind::kOverflow);
  }
}

TEST(Expr, ComparisonsAndLogicWithCPrecedence) {
  Bindings b{{"BLOCK_M", 128}, {"BLOCK_N", 64}, {"THREADS", 256}, {"hidden_size", 4096}};
  EXPECT_EQ(eval("BLOCK_M * BLOCK_N / THREADS <= 64", b), 1);
  EXPECT_EQ(eval("BLOCK_M * BLOCK_N / THREADS < 32", b), 0);
  EXPECT_EQ(eval("hidden_size % (THREADS * 8) == 0", b), 1);
  EXPECT_EQ(eval("hidden_size % (THREADS * 3) != 0", b), 1);
  EXPECT_EQ(eval("3 > 2 && 2 >= 2", b), 1);
  EXPECT_EQ(eval("1 > 2 || 2 < 1"), 0);
  EXPECT_EQ(eval("!0"), 1);
  EXPECT_EQ(eval("!(3 == 3)"), 0);
  EXPECT_EQ(eval("! 5"), 0);
  // && binds tighter than ||, comparisons tighter than both, arithmetic tighter still.
  EXPECT_EQ(eval("1 || 0 && 0"), 1);
  EXPECT_EQ(eval("(1 || 0) && 0"), 0);
  EXPECT_EQ(eval("1 + 1 == 2"), 1);
  EXPECT_EQ(eval("2 < 3 == 1"), 1);  // (2 < 3) == 1, as in C
  EXPECT_EQ(eval("max(1 < 2, 0) * 7"), 7);
  // Short-circuit: the right side is not evaluated, so no division by zero.
  Bindings z{{"K", 0}};
  EXPECT_EQ(eval("K > 0 && 10 % K == 0", z), 0);
  EXPECT_EQ(eval("K == 0 || 10 % K == 0", z), 1);
  EXPECT_THROW(eval("10 % K == 0 && K > 0", z), ExprError);
  EXPECT_EQ(Expr::parse("A <= B && !C").names(), (std::vector<std::string>{"A", "B", "C"}));
}

TEST(Expr, ComparisonSyntaxErrors) {
  for (const char* text : {"1 <", "1 << 2", "1 & 2", "1 | 2", "1 = 2", "!", "1 >> 2", "1 =< 2"}) {
    EXPECT_THROW(Expr::parse(text), ExprError) << text;
  }
}

}  // namespace
}  // namespace kharness
