// Module state on a real GPU: what plan_state_reset lists, ModuleGlobals restores — a
// `__constant__` array written through its generic address and a `__device__` counter come back
// to their loaded bytes — and a `.global` that inline PTX declares inside a function, which keeps
// state from one launch to the next, is gone after the reload its plan asks for. Also prints
// whether the driver resolves such a variable by its symbol-table name. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device/driver.hpp"
#include "device/module_globals.hpp"
#include "kharness/compile.hpp"
#include "kharness/device.hpp"
#include "kharness/solution.hpp"

namespace kharness {
namespace {

class ModuleStateGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu_available()) {
      GTEST_SKIP() << "no GPU: " << device::Driver::instance().unavailable_reason();
    }
    ctx_.emplace(0);
    stream_.emplace();
  }

  static CompileResult compile(const std::string& body) {
    const std::string text =
        R"(/* kharness {"launches":[{"kernel":"k","grid":[1],"block":[1],"args":["out"]}]} */)" +
        body;
    CompileOptions options;
    options.arch = "sm_90a";
    options.use_cache = false;
    CompileResult r =
        compile_solution(parse_single_file_solution(text, "state.cu"), nullptr, nullptr, options);
    EXPECT_TRUE(r.ok()) << r.log;
    return r;
  }

  // One launch of k(out) with one thread; returns out's first `n` words.
  std::vector<std::uint64_t> run(const device::Module& module, std::size_t n) {
    device::DeviceBuffer out(8 * n);
    out.fill(0);
    CUdeviceptr p = out.ptr();
    void* params[] = {&p};
    device::LaunchConfig config;
    config.stream = stream_->get();
    const device::Driver& d = device::Driver::instance();
    d.check(device::launch_kernel(module.function("k"), config, params), "launch k");
    stream_->synchronize();
    std::vector<std::uint64_t> host(n);
    out.download(host.data(), 8 * n);
    return host;
  }

  std::optional<device::PrimaryContext> ctx_;
  std::optional<device::Stream> stream_;
};

TEST_F(ModuleStateGpuTest, ConstantsAndGlobalsAreRestored) {
  const CompileResult r = compile(R"(
__constant__ unsigned long long cst[2] = {1, 2};
__device__ unsigned long long counter;
extern "C" __global__ void k(unsigned long long* out) {
  // A plain store through the constant bank's generic address faults on an H200 (launch failure,
  // seen on the device run), so only the counter changes here; the constant is still restored.
  out[0] = cst[0];
  out[1] = counter;
  counter += 1;
}
)");
  ASSERT_TRUE(r.ok());
  const device::StatePlan plan = device::plan_state_reset(r.ptx, r.cubin);
  ASSERT_TRUE(plan.reload_reason.empty()) << plan.reload_reason;
  device::Module module(r.cubin);
  device::ModuleGlobals globals(module, plan.vars);
  ASSERT_TRUE(globals.complete());
  EXPECT_EQ(globals.count(), 2u);
  EXPECT_EQ(run(module, 2), (std::vector<std::uint64_t>{1, 0}));
  // Without a reset, both carry the first launch's writes.
  EXPECT_EQ(run(module, 2), (std::vector<std::uint64_t>{1, 1}));
  globals.restore(stream_->get());
  EXPECT_EQ(run(module, 2), (std::vector<std::uint64_t>{1, 0}));
}

// Many variables of two sections (initialised and zero-initialised, of mixed sizes so that
// padding lies between them), as CuTe code under -default-device has by the thousand: every one
// comes back, whether the driver kept the cubin's layout in one allocation (one copy per section)
// or placed them apart (one copy each: what driver 580 did on an H100).
TEST_F(ModuleStateGpuTest, ManyGlobalsAreAllRestored) {
  std::string decls, body;
  for (int i = 0; i < 64; ++i) {
    decls += "__device__ unsigned char b" + std::to_string(i) + " = " + std::to_string(i) +
             ";\n__device__ unsigned long long z" + std::to_string(i) + ";\n";
    body += "  out[" + std::to_string(i) + "] = b" + std::to_string(i) + " + 1000 * z" +
            std::to_string(i) + ";\n  b" + std::to_string(i) + " += 1;\n  z" + std::to_string(i) +
            " += 1;\n";
  }
  const CompileResult r =
      compile(decls + "extern \"C\" __global__ void k(unsigned long long* out) {\n" + body + "}\n");
  ASSERT_TRUE(r.ok());
  const device::StatePlan plan = device::plan_state_reset(r.ptx, r.cubin);
  ASSERT_TRUE(plan.reload_reason.empty()) << plan.reload_reason;
  device::Module module(r.cubin);
  device::ModuleGlobals globals(module, plan.vars);
  ASSERT_TRUE(globals.complete());
  EXPECT_EQ(globals.count(), 128u);
  std::printf("128 globals: %zu copies of %zu bytes in all per restore\n", globals.copies(),
              globals.bytes());
  EXPECT_GE(globals.copies(), 2u);
  EXPECT_LE(globals.copies(), 128u);
  std::vector<std::uint64_t> first(64);
  for (int i = 0; i < 64; ++i) first[i] = static_cast<std::uint64_t>(i);
  EXPECT_EQ(run(module, 64), first);
  EXPECT_NE(run(module, 64), first);  // the first launch's writes stayed
  globals.restore(stream_->get());
  EXPECT_EQ(run(module, 64), first);
}

TEST_F(ModuleStateGpuTest, AFunctionScopeGlobalKeepsStateUntilTheReload) {
  const CompileResult r = compile(R"(
__device__ __noinline__ unsigned long long remember(unsigned long long v) {
  unsigned long long old;
  asm volatile(".global .align 8 .b8 cache[64];\n\t"
               "ld.global.u64 %0, [cache];\n\t"
               "st.global.u64 [cache], %1;" : "=l"(old) : "l"(v));
  return old;
}
extern "C" __global__ void k(unsigned long long* out) { out[0] = remember(42); }
)");
  ASSERT_TRUE(r.ok());
  const device::StatePlan plan = device::plan_state_reset(r.ptx, r.cubin);
  EXPECT_FALSE(plan.reload_reason.empty());
  auto module = std::make_unique<device::Module>(r.cubin);
  device::ModuleGlobals globals(*module, plan.vars);
  std::printf("function-scope .global: %zu of %zu resolved by their symbol-table names%s%s\n",
              globals.count(), plan.vars.size(), globals.complete() ? "" : "; missing: ",
              globals.complete() ? "" : globals.missing().front().c_str());
  EXPECT_EQ(run(*module, 1)[0], 0u);
  EXPECT_EQ(run(*module, 1)[0], 42u) << "the variable kept the first launch's write";
  module = std::make_unique<device::Module>(r.cubin);  // what the plan's reload does
  EXPECT_EQ(run(*module, 1)[0], 0u);
  if (globals.complete()) {  // resolved by name: restoring it would do as well
    auto again = std::make_unique<device::Module>(r.cubin);
    device::ModuleGlobals named(*again, plan.vars);
    EXPECT_EQ(run(*again, 1)[0], 0u);
    named.restore(stream_->get());
    EXPECT_EQ(run(*again, 1)[0], 0u);
  }
}

}  // namespace
}  // namespace kharness
