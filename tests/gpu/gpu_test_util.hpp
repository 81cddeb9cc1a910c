// What the GPU tests share: SKIP_WITHOUT_GPU(); and for the reference tests
// (tests/gpu/*_reference_test.cpp) host encoding of values in a tensor dtype and a family reference
// compiled for this device, ready to launch through its own plan. A reference test then makes its
// inputs on the host, launches the reference and compares with a double-precision host
// implementation.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../test_util.hpp"
#include "device/driver.hpp"
#include "device/plan_launcher.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/numeric.hpp"
#include "kharness/operators.hpp"
#include "kharness/solution.hpp"

// The compile stage runs NVRTC in kharness re-executed as `__compile_worker`; a test binary is
// not kharness, so it names the built one (before main, whichever test runs first).
inline const bool kCompileWorkerNamed = [] {
  ::setenv("KHARNESS_COMPILE_WORKER", KHARNESS_BINARY, 0);
  return true;
}();

#define SKIP_WITHOUT_GPU()          \
  if (!::kharness::gpu_available()) \
  GTEST_SKIP() << "no GPU: " << ::kharness::device::Driver::instance().unavailable_reason()

namespace kharness::reference_test {

// `values` rounded to `dtype` (round to nearest even), as the tensor's bytes.
inline std::vector<std::uint8_t> encode(DType dtype, const std::vector<double>& values) {
  const std::size_t size = dtype_size(dtype);
  std::vector<std::uint8_t> out(values.size() * size);
  for (std::size_t i = 0; i < values.size(); ++i) from_double(dtype, values[i], &out[size * i]);
  return out;
}

inline std::vector<double> decode(DType dtype, const std::vector<std::uint8_t>& bytes) {
  const std::size_t size = dtype_size(dtype);
  std::vector<double> out(bytes.size() / size);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = to_double(dtype, &bytes[size * i]);
  return out;
}

inline std::vector<std::uint8_t> to_bf16(const std::vector<double>& values) {
  return encode(DType::kBFloat16, values);
}

inline std::vector<double> from_bf16(const std::vector<std::uint8_t>& bytes) {
  return decode(DType::kBFloat16, bytes);
}

// A family reference compiled for this device (no compile cache) and ready to launch.
struct CompiledReference {
  Operator op;
  Solution solution;
  CompileResult compiled;
  std::unique_ptr<device::PrimaryContext> context;
  std::unique_ptr<device::Module> module;
  std::unique_ptr<device::PlanLauncher> launcher;
};

// Loads operator `name` (whose definition must be of `family`), compiles its reference and loads
// it. Fails the test (fatally: wrap it in ASSERT_NO_FATAL_FAILURE) when any step does.
inline void compile_reference(const std::string& name, const std::string& family,
                              CompiledReference* out) {
  out->op = OperatorRegistry::from_environment({}).load(name);
  ASSERT_TRUE(out->op.reference.has_value()) << name;
  ASSERT_EQ(out->op.definition.family(), family);
  out->solution = load_solution(*out->op.reference);
  CompileOptions options;
  options.arch = default_arch_for_device(0);
  options.use_cache = false;
  out->compiled = compile_solution(out->solution, &out->op.definition, &out->op.workloads, options);
  ASSERT_TRUE(out->compiled.ok()) << out->compiled.log;
  out->context = std::make_unique<device::PrimaryContext>(0);
  out->module = std::make_unique<device::Module>(out->compiled.cubin);
  out->launcher = std::make_unique<device::PlanLauncher>(out->solution.plan, out->compiled.kernels,
                                                         *out->module);
}

}  // namespace kharness::reference_test

namespace kharness::gpu_test {

// This GPU compiles for sm_90a (Hopper's TMA and GMMA, the sm_90a seeds and fixtures).
inline bool on_hopper() { return default_arch_for_device(0) == "sm_90a"; }

// The built kharness run with `args` and --json: its JSON output (a test failure where there is
// none).
inline nlohmann::json kharness_json(const std::string& args) {
  auto r = testing::run_command(std::string("'") + KHARNESS_BINARY + "' " + args +
                                " --json 2>/dev/null");
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out.substr(0, 4000);
  return j;
}

// A verdict that PASSED on each of its `workloads` workloads.
inline void expect_every_workload_passes(const nlohmann::json& v, std::size_t workloads) {
  ASSERT_TRUE(v.is_object()) << v.dump().substr(0, 2000);
  EXPECT_EQ(v["status"], "PASSED") << v.dump(1).substr(0, 6000);
  EXPECT_EQ(v["workloads"].size(), workloads);
  for (const auto& w : v["workloads"]) EXPECT_EQ(w["status"], "PASSED") << w.dump();
}

}  // namespace kharness::gpu_test
