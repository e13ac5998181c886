// Time off the CPU (dp/off_cpu.h): the overlap of a frame's wait with the recorded
// intervals, the totals, and the bound on a pass's work, computed by hand.
#include <gtest/gtest.h>

#include "dp/off_cpu.h"

namespace vl::dp {
namespace {

TEST(OffCpuLog, OverlapOfAWaitWithTheIntervals) {
  OffCpuLog log;
  EXPECT_EQ(log.overlap(0, 1'000'000), 0u);
  log.record(1000, 1500);  // 500 ns
  log.record(3000, 7000);  // 4000 ns
  EXPECT_EQ(log.count(), 2u);
  EXPECT_EQ(log.total_ns(), 4500u);
  EXPECT_EQ(log.max_ns(), 4000u);
  EXPECT_EQ(log.overlap(0, 10'000), 4500u);   // both wholly inside
  EXPECT_EQ(log.overlap(1200, 4000), 300u + 1000u);  // the end of one, the start of the other
  EXPECT_EQ(log.overlap(1500, 3000), 0u);     // between them
  EXPECT_EQ(log.overlap(7000, 9000), 0u);     // after the newest: one compare
  EXPECT_EQ(log.overlap(5000, 6000), 1000u);  // inside one
}

TEST(OffCpuLog, OlderThanTheRecentAreNotCounted) {
  OffCpuLog log;
  for (uint64_t i = 0; i < OffCpuLog::kRecent + 4; ++i) log.record(i * 100, i * 100 + 10);
  // Only the newest kRecent intervals are kept: the overlap is short, never long.
  EXPECT_EQ(log.overlap(0, 100'000), OffCpuLog::kRecent * 10);
  EXPECT_EQ(log.count(), OffCpuLog::kRecent + 4);
  uint64_t n = 0;
  for (const auto& h : log.lengths().hist) n += h.load();
  EXPECT_EQ(n, OffCpuLog::kRecent + 4);
}

TEST(OffCpuLog, PassWorkBound) {
  // 1 us + 0.25 us an rxq + 0.5 us a frame + 1 ns a byte + 2 us a delivered batch: two rxqs,
  // 32 frames of 1518 B taken and delivered in one batch -> 1 + 0.5 + 32 + 97.152 + 2 us.
  EXPECT_EQ(pass_work_bound_ns(PassWork{}), 1'000u);
  EXPECT_EQ(pass_work_bound_ns(PassWork{2, 64, 64 * 1518, 1}), 1'000u + 500u + 32'000u + 97'152u + 2'000u);
}

}  // namespace
}  // namespace vl::dp
