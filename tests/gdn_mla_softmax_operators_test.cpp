// The Gated Delta Net, MLA paged decode and softmax operators: their definitions and workloads
// load, match FlashInfer-Bench's definitions where it has the operator (names, axes, tensor names,
// shapes and dtypes), have realistic workloads whose generated index inputs are valid and whose
// FLOP and byte formulas evaluate, and `kharness operators check` compiles each one's reference,
// seed and baseline for sm_90a and sm_100a (NVRTC, no GPU needed). The references themselves are
// checked against double-precision host implementations in tests/gpu/.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "kharness/definition.hpp"
#include "kharness/operators.hpp"
#include "test_util.hpp"
#include "verify/index_inputs.hpp"

namespace kharness {
namespace {

using testing::kharness;

struct Suite {
  const char* name;
  const char* family;
  const char* fib_file;  // under ../shared/fib/definitions, or nullptr
};

const Suite kSuite[] = {
    {"gdn_decode_qk4_v8_d128_k_last", "gdn_decode", "gdn/gdn_decode_qk4_v8_d128_k_last.json"},
    {"gdn_prefill_qk4_v8_d128_k_last", "gdn_prefill", "gdn/gdn_prefill_qk4_v8_d128_k_last.json"},
    {"mla_paged_decode_h16_ckv512_kpe64_ps1", "mla_paged_decode",
     "mla_paged/mla_paged_decode_h16_ckv512_kpe64_ps1.json"},
    // No FlashInfer-Bench counterpart: its sampling definitions draw random samples (not
    // comparable element by element); this is the softmax that produces their probs input.
    {"softmax_v128256", "softmax", nullptr},
};

TEST(GdnMlaSoftmaxOperators, LoadWithRealisticWorkloadsAndValidIndexInputs) {
  OperatorRegistry registry = OperatorRegistry::from_environment({});
  for (const Suite& s : kSuite) {
    SCOPED_TRACE(s.name);
    const Operator op = registry.load(s.name);
    EXPECT_EQ(op.origin, "builtin");
    EXPECT_EQ(op.definition.family(), s.family);
    ASSERT_TRUE(op.reference && op.seed && op.baseline);
    EXPECT_EQ(op.reference->parent_path().filename(), s.family);  // the family's reference
    EXPECT_TRUE(assess(op).runnable) << assess(op).reason;
    EXPECT_GE(op.workloads.size(), 6u);
    const KharnessSpec& k = op.definition.kharness;
    ASSERT_TRUE(k.flops && k.bytes);
    EXPECT_EQ(k.tolerance.required_matched_ratio, 1.0);
    for (const Workload& w : op.workloads) {
      SCOPED_TRACE(w.uuid);
      const Bindings axes = w.bindings(op.definition);
      EXPECT_GT(k.flops->eval(axes), 0);
      EXPECT_GT(k.bytes->eval(axes), 0);
      // Index inputs are valid for their role (distinct pages that fit the cache, offsets that
      // end at the total): made exactly as the correctness stage makes them.
      for (const TensorSpec& t : op.definition.inputs) {
        if (t.is_scalar()) {  // from the workload, e.g. scale = 1/sqrt(head_size)
          EXPECT_EQ(w.inputs.at(t.name).kind, WorkloadInput::Kind::kScalar) << t.name;
          continue;
        }
        auto g = k.inputs.find(t.name);
        ASSERT_NE(g, k.inputs.end()) << t.name << " has no generator";
        if (!verify::is_index_role(g->second.distribution)) continue;
        std::uint64_t count = 1;
        for (const auto& dim : *t.shape) count *= static_cast<std::uint64_t>(axes.at(dim));
        EXPECT_NO_THROW(verify::make_index_input(t, g->second, axes, count, 7)) << t.name;
      }
    }
  }
}

TEST(GdnMlaSoftmaxOperators, MatchFlashInferBenchDefinitions) {
  std::filesystem::path fib(KHARNESS_FIB_DIR);
  if (!std::filesystem::exists(fib / "definitions"))
    GTEST_SKIP() << "no FlashInfer-Bench snapshot at " << fib;
  OperatorRegistry registry = OperatorRegistry::from_environment({});
  for (const Suite& s : kSuite) {
    if (!s.fib_file) continue;
    SCOPED_TRACE(s.name);
    const Definition ours = registry.load(s.name).definition;
    const Definition theirs = load_definition(fib / "definitions" / s.fib_file);
    EXPECT_EQ(ours.name, theirs.name);
    EXPECT_EQ(ours.op_type, theirs.op_type);
    ASSERT_EQ(ours.axes.size(), theirs.axes.size());
    for (std::size_t i = 0; i < ours.axes.size(); ++i) {
      EXPECT_EQ(ours.axes[i].name, theirs.axes[i].name);
      EXPECT_EQ(ours.axes[i].is_const, theirs.axes[i].is_const);
      EXPECT_EQ(ours.axes[i].value, theirs.axes[i].value);
    }
    auto same = [](const std::vector<TensorSpec>& a, const std::vector<TensorSpec>& b) {
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].name, b[i].name);
        EXPECT_EQ(a[i].shape, b[i].shape) << a[i].name;
        EXPECT_EQ(a[i].dtype, b[i].dtype) << a[i].name;
      }
    };
    same(ours.inputs, theirs.inputs);
    same(ours.outputs, theirs.outputs);
  }
}

TEST(GdnMlaSoftmaxOperators, ReferenceSeedAndBaselineCompileForHopperAndBlackwell) {
  for (const Suite& s : kSuite) {
    for (const char* arch : {"sm_90a", "sm_100a"}) {
      SCOPED_TRACE(std::string(s.name) + " " + arch);
      auto check = kharness(std::string("operators check ") + s.name + " --arch " + arch);
      EXPECT_EQ(check.exit_code, 0) << check.out;
      // One table row per solution: "<name>  <workloads>  <solution>  PASSED ...".
      for (const char* solution : {"reference", "seed", "baseline"}) {
        bool passed = false;
        std::istringstream lines(check.out);
        for (std::string line; std::getline(lines, line);) {
          std::istringstream words(line);
          std::string name, workloads, which, status;
          words >> name >> workloads >> which >> status;
          passed |= name == s.name && which == solution && status == "PASSED";
        }
        EXPECT_TRUE(passed) << solution << "\n" << check.out;
      }
    }
  }
}

}  // namespace
}  // namespace kharness
