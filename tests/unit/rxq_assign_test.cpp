// dp::plan_rxq_assignment: --pmd-rxq-assign roundrobin and cycles (OVS pmd-rxq-assign).
#include <gtest/gtest.h>

#include <vector>

#include "dp/pmd.h"

namespace vl::dp {
namespace {

std::vector<RxqId> rxqs(int n) {
  std::vector<RxqId> v;
  for (int i = 0; i < n; ++i) v.push_back({static_cast<uint8_t>(i / 2), static_cast<uint8_t>(i % 2)});
  return v;
}

TEST(RxqAssign, RoundRobinDealsInPortQueueOrder) {
  const auto q = rxqs(5);
  const auto out = plan_rxq_assignment(RxqAssign::kRoundRobin, q, {}, 2);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], (std::vector<RxqId>{q[0], q[2], q[4]}));
  EXPECT_EQ(out[1], (std::vector<RxqId>{q[1], q[3]}));
}

TEST(RxqAssign, CyclesBalancesMeasuredLoad) {
  const auto q = rxqs(4);
  // Two heavy rxqs on port 0 would share a thread under roundrobin (q0, q2 on thread 0).
  const std::vector<uint64_t> c = {100, 10, 90, 5};
  const auto out = plan_rxq_assignment(RxqAssign::kCycles, q, c, 2);
  // Busiest first to the least loaded: 100->t0, 90->t1, 10->t1 (90 < 100), 5->t0 (100 = 100,
  // fewer rxqs).
  EXPECT_EQ(out[0], (std::vector<RxqId>{q[0], q[3]}));
  EXPECT_EQ(out[1], (std::vector<RxqId>{q[2], q[1]}));
  const auto rr = plan_rxq_assignment(RxqAssign::kRoundRobin, q, c, 2);
  EXPECT_EQ(rr[0], (std::vector<RxqId>{q[0], q[2]}));  // 190 against 15
}

TEST(RxqAssign, CyclesWithoutMeasurementsSpreadsEvenly) {
  const auto q = rxqs(6);
  const auto out = plan_rxq_assignment(RxqAssign::kCycles, q, std::vector<uint64_t>(6, 0), 3);
  for (const auto& l : out) EXPECT_EQ(l.size(), 2u);
  EXPECT_EQ(out[0][0], q[0]);  // equal loads keep (port, queue) order
  EXPECT_EQ(out[1][0], q[1]);
}

TEST(RxqAssign, EveryRxqExactlyOnce) {
  const auto q = rxqs(16);
  std::vector<uint64_t> c;
  for (int i = 0; i < 16; ++i) c.push_back(static_cast<uint64_t>((i * 7919) % 101));
  for (auto mode : {RxqAssign::kRoundRobin, RxqAssign::kCycles}) {
    for (size_t n : {1u, 2u, 3u, 5u}) {
      const auto out = plan_rxq_assignment(mode, q, c, n);
      ASSERT_EQ(out.size(), n);
      std::vector<int> seen(16, 0);
      for (const auto& l : out)
        for (const RxqId& r : l) ++seen[r.port * 2 + r.queue];
      for (int s : seen) EXPECT_EQ(s, 1);
    }
  }
}

}  // namespace
}  // namespace vl::dp
