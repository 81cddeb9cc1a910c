// The CUPTI timer without a GPU: constructing one must either work or fail as an environment
// error (exit 3), never crash; and the join of correlation and GPU records into iteration spans,
// which is pure, whatever order the records arrive in.
#include "bench/cupti_timer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

#include "kharness/error.hpp"

namespace kharness::bench {
namespace {

TEST(CuptiTimer, ConstructsOrThrowsEnvironmentError) {
  try {
    CuptiTimer timer;
    // A GPU (and CUPTI) is here: an iteration without GPU work is an empty span.
    timer.begin(7);
    timer.end();
    auto spans = timer.collect();
    ASSERT_EQ(spans.count(7u), 1u);
    EXPECT_EQ(spans[7].kernels, 0);
    EXPECT_EQ(spans[7].seconds(), 0.0);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kEnvironment) << e.what();
    EXPECT_FALSE(std::string(e.what()).empty());
  }
  // And again: a failed (or finished) timer leaves nothing behind that blocks the next one.
  try {
    CuptiTimer timer;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kEnvironment) << e.what();
  }
}

using detail::GpuRecord;
using detail::RecordJoin;

GpuRecord kernel(std::uint32_t corr, std::uint64_t start, std::uint64_t end, std::string name) {
  GpuRecord r;
  r.kind = GpuRecord::Kind::kKernel;
  r.correlation_id = corr;
  r.start_ns = start;
  r.end_ns = end;
  r.shape = name == "b_kernel" ? "64x1x1/256x1x1" : "1x1x1/32x1x1";
  r.name = std::move(name);
  r.shared_memory_executed = 32768;
  return r;
}

GpuRecord copy(GpuRecord::Kind kind, std::uint32_t corr, std::uint64_t start, std::uint64_t end) {
  GpuRecord r;
  r.kind = kind;
  r.correlation_id = corr;
  r.start_ns = start;
  r.end_ns = end;
  return r;
}

TEST(CuptiRecordJoin, SpansCountsAndSignatureFromAnyOrder) {
  // Iteration 1: memset (corr 10), kernel b (11), kernel a (12). Iteration 2: kernel a (20).
  // Corr 5 and 30 are the L2 flush (not correlated). Corr 13 is an API call without GPU work.
  struct Item {
    bool is_corr;
    std::uint32_t corr;
    std::uint64_t ext;
    GpuRecord rec;
  };
  std::vector<Item> items = {
      {true, 10, 1, {}},
      {true, 11, 1, {}},
      {true, 12, 1, {}},
      {true, 13, 1, {}},
      {true, 20, 2, {}},
      {false, 0, 0, copy(GpuRecord::Kind::kMemset, 5, 100, 900)},
      {false, 0, 0, copy(GpuRecord::Kind::kMemset, 10, 1000, 1100)},
      {false, 0, 0, kernel(11, 1200, 1500, "b_kernel")},
      {false, 0, 0, kernel(12, 1510, 2000, "a_kernel")},
      {false, 0, 0, copy(GpuRecord::Kind::kMemset, 30, 2100, 2900)},
      {false, 0, 0, kernel(20, 3000, 3050, "a_kernel")},
  };
  std::mt19937 rng(3);
  for (int round = 0; round < 20; ++round) {
    std::shuffle(items.begin(), items.end(), rng);
    RecordJoin join;
    for (const Item& it : items) {
      if (it.is_corr)
        join.add_correlation(it.corr, it.ext);
      else
        join.add_record(it.rec);
    }
    auto spans = join.join({1, 2, 3});
    ASSERT_EQ(spans.size(), 3u);
    EXPECT_EQ(spans[1].start_ns, 1000u);
    EXPECT_EQ(spans[1].end_ns, 2000u);
    EXPECT_EQ(spans[1].kernels, 2);
    EXPECT_EQ(spans[1].memsets, 1);
    EXPECT_EQ(spans[1].memcpys, 0);
    EXPECT_EQ(spans[1].signature, "a_kernel,b_kernel");
    EXPECT_EQ(spans[1].shapes, "1x1x1/32x1x1,64x1x1/256x1x1");
    // Kernel records in launch (start) order, whatever order the records came in.
    ASSERT_EQ(spans[1].kernel_records.size(), 2u);
    EXPECT_EQ(spans[1].kernel_records[0].name, "b_kernel");
    EXPECT_EQ(spans[1].kernel_records[0].start_ns, 1200u);
    EXPECT_EQ(spans[1].kernel_records[1].name, "a_kernel");
    EXPECT_EQ(spans[1].kernel_records[1].shared_memory_executed, 32768u);
    EXPECT_DOUBLE_EQ(spans[1].seconds(), 1000e-9);
    EXPECT_EQ(spans[2].start_ns, 3000u);
    EXPECT_EQ(spans[2].end_ns, 3050u);
    EXPECT_EQ(spans[2].kernels, 1);
    EXPECT_EQ(spans[2].memsets, 0);
    EXPECT_EQ(spans[2].signature, "a_kernel");
    EXPECT_EQ(spans[2].shapes, "1x1x1/32x1x1");
    // Begun, nothing ran.
    EXPECT_EQ(spans[3].kernels + spans[3].memcpys + spans[3].memsets, 0);
    EXPECT_EQ(spans[3].seconds(), 0.0);
    EXPECT_EQ(spans[3].signature, "");
    EXPECT_EQ(spans[3].shapes, "");
  }
}

TEST(CuptiRecordJoin, MemcpyCountsAndUncorrelatedWorkIsIgnored) {
  RecordJoin join;
  join.add_correlation(1, 42);
  join.add_record(copy(GpuRecord::Kind::kMemcpy, 1, 50, 80));
  join.add_record(kernel(2, 10, 500, "flush_like"));  // no correlation: ignored
  auto spans = join.join({});
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[42].memcpys, 1);
  EXPECT_EQ(spans[42].kernels, 0);
  EXPECT_EQ(spans[42].start_ns, 50u);
  EXPECT_EQ(spans[42].end_ns, 80u);
}

TEST(CuptiRecordJoin, DroppedOrUntimedRecordsThrow) {
  {
    RecordJoin join;
    join.add_correlation(1, 1);
    join.add_record(kernel(1, 10, 20, "k"));
    join.add_dropped(3);
    EXPECT_THROW(join.join({1}), std::runtime_error);
  }
  {
    RecordJoin join;
    join.add_correlation(1, 1);
    join.add_record(kernel(1, 0, 0, "k"));
    EXPECT_THROW(join.join({1}), std::runtime_error);
  }
  {
    RecordJoin join;
    join.add_unreadable();
    EXPECT_THROW(join.join({}), std::runtime_error);
  }
  {
    // Untimed but outside every iteration: irrelevant.
    RecordJoin join;
    join.add_record(kernel(9, 0, 0, "flush"));
    EXPECT_NO_THROW(join.join({}));
  }
}

}  // namespace
}  // namespace kharness::bench
