// Flush policies of the intermediate queues (dp/flush.h), with a fake clock: parsing, the
// decisions at enqueue / end of burst / deadline checks, the check-gap estimator, the
// queue-age histogram, and a simulated PMD loop that asserts the documented bounds
// (interval=US holds a frame at most US plus one check gap; budget=US keeps US when the
// loops are steady; every policy leaves nothing queued once it flushes before sleeping).
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <random>

#include "dp/flush.h"

namespace vl::dp {
namespace {

FlushPolicy P(const char* s) {
  std::string err;
  auto p = parse_flush_policy(s, &err);
  EXPECT_TRUE(p.has_value()) << s << ": " << err;
  return p.value_or(FlushPolicy{});
}

TEST(FlushPolicy, ParsesAndNames) {
  EXPECT_EQ(P("immediate").kind, FlushKind::kImmediate);
  EXPECT_EQ(P("rx-batch").kind, FlushKind::kRxBatch);
  EXPECT_EQ(P("interval=50"), (FlushPolicy{FlushKind::kInterval, 50}));
  EXPECT_EQ(P("budget=20"), (FlushPolicy{FlushKind::kBudget, 20}));
  EXPECT_EQ(P("interval=0"), (FlushPolicy{FlushKind::kInterval, 0}));
  for (const char* s : {"immediate", "rx-batch", "interval=50", "budget=1000000"})
    EXPECT_EQ(flush_policy_name(P(s)), s);
}

TEST(FlushPolicy, RefusesMalformed) {
  std::string err;
  for (const char* s : {"", "rx_batch", "interval", "interval=", "interval=-1", "interval=1x",
                        "interval=1000001", "budget=0", "budget=abc", "interval=99999999999999999999",
                        "Immediate", "interval=5 "}) {
    err.clear();
    EXPECT_FALSE(parse_flush_policy(s, &err).has_value()) << s;
    EXPECT_FALSE(err.empty()) << s;
  }
}

TEST(FlushPolicy, EncodeRoundTrips) {
  for (const char* s : {"immediate", "rx-batch", "interval=0", "interval=1000000", "budget=7"}) {
    const FlushPolicy p = P(s);
    EXPECT_EQ(FlushPolicy::decode(p.encode()), p) << s;
  }
  // The default (what SwitchTables starts with) is rx-batch.
  EXPECT_EQ(FlushPolicy{}.kind, FlushKind::kRxBatch);
}

TEST(FlushDecisions, OnEnqueue) {
  EXPECT_TRUE(due_on_enqueue(P("immediate"), 1, 32));
  for (const char* s : {"rx-batch", "interval=50", "budget=50"}) {
    EXPECT_FALSE(due_on_enqueue(P(s), 1, 32)) << s;
    EXPECT_FALSE(due_on_enqueue(P(s), 31, 32)) << s;
    EXPECT_TRUE(due_on_enqueue(P(s), 32, 32)) << s;  // a full burst goes at once
  }
}

TEST(FlushDecisions, AtBurstEnd) {
  EXPECT_TRUE(due_at_burst_end(P("immediate")));
  EXPECT_TRUE(due_at_burst_end(P("rx-batch")));
  EXPECT_TRUE(due_at_burst_end(P("interval=0")));  // OVS's tx-flush-interval=0
  EXPECT_FALSE(due_at_burst_end(P("interval=1")));
  EXPECT_FALSE(due_at_burst_end(P("budget=1")));
  // Under load (bursts at least half full) budget=US delivers at the burst's end, as
  // rx-batch; interval=US keeps holding.
  EXPECT_TRUE(due_at_burst_end(P("budget=50"), true));
  EXPECT_FALSE(due_at_burst_end(P("interval=50"), true));
  EXPECT_TRUE(loaded_burst(16, 32));
  EXPECT_FALSE(loaded_burst(15, 32));
}

TEST(FlushDecisions, AtCheck) {
  const uint64_t t0 = 1'000'000'000;
  // interval: due once the oldest frame is US old, whatever the loop.
  EXPECT_FALSE(due_at_check(P("interval=50"), t0, t0 + 49'999, 1'000'000));
  EXPECT_TRUE(due_at_check(P("interval=50"), t0, t0 + 50'000, 0));
  // budget: due when the next check would come too late (less kBudgetSlackNs).
  EXPECT_FALSE(due_at_check(P("budget=50"), t0, t0 + 40'000, 9'999 - kBudgetSlackNs));
  EXPECT_TRUE(due_at_check(P("budget=50"), t0, t0 + 40'000, 10'000 - kBudgetSlackNs));
  EXPECT_TRUE(due_at_check(P("budget=50"), t0, t0 + 50'000, 0));
  // A clock that went backwards counts as age 0.
  EXPECT_FALSE(due_at_check(P("interval=1"), t0, t0 - 5, 0));
}

TEST(CheckGapEstimator, FollowsTheLoopAndForgetsIdlePeriods) {
  CheckGapEstimator e;
  uint64_t t = 5000;
  e.check(t, true);
  EXPECT_EQ(e.predict(), 0u);
  for (int i = 0; i < 100; ++i) e.check(t += 1000, false);
  EXPECT_NEAR(static_cast<double>(e.predict()), 2000.0, 50.0);  // 2 x the mean gap
  e.check(t += 10'000, false);  // one long gap: predicted at least that long next time
  EXPECT_GE(e.predict(), 10'000u);
  const uint64_t before = e.predict();
  e.check(t += 10'000'000, true);  // after an idle period (queues were empty): not a gap
  EXPECT_EQ(e.predict(), before);
  EXPECT_EQ(e.last_check_ns(), t);
}

TEST(CheckGapEstimator, RemembersAnOccasionalLongLoopForAFewMs) {
  // Loops of 1 us, and one of 4 us (a delivery) every 100 loops: the prediction stays at
  // least 4 us between them (the decaying peak), where twice the mean alone would be ~2 us.
  CheckGapEstimator e;
  uint64_t t = 5000;
  e.check(t, true);
  for (int i = 1; i <= 1000; ++i) {
    e.check(t += (i % 100 ? 1000 : 4000), false);
    if (i > 100) {
      EXPECT_GE(e.predict(), 3'000u) << i;  // not halved in the 0.1 ms between them
    }
  }
  // Time off the CPU within a gap does not count: a 40 us gap with 39 us off the CPU is
  // a 1 us loop.
  CheckGapEstimator f;
  f.check(t = 5000, true);
  for (int i = 0; i < 100; ++i) f.check(t += 1000, false);
  f.check(t += 40'000, false, 39'000);
  EXPECT_LE(f.predict(), 2'100u);
  // The peak is halved every ms: 3 ms of 1 us loops after one 8 us loop leave ~1 us.
  CheckGapEstimator g;
  g.check(t = 5000, true);
  g.check(t += 8000, false);
  for (int i = 0; i < 3000; ++i) g.check(t += 1000, false);
  EXPECT_LE(g.predict(), 2'100u);
}

TEST(QueueAgeStats, BucketsAndMax) {
  QueueAgeStats a;
  EXPECT_EQ(QueueAgeStats::bucket(0), 0u);
  EXPECT_EQ(QueueAgeStats::bucket(255), 0u);
  EXPECT_EQ(QueueAgeStats::bucket(256), 1u);
  EXPECT_EQ(QueueAgeStats::bucket(511), 1u);
  EXPECT_EQ(QueueAgeStats::bucket(512), 2u);
  EXPECT_EQ(QueueAgeStats::bucket(~0ull), QueueAgeStats::kBuckets - 1);
  for (uint64_t v : {100ull, 300ull, 50'000ull, 49'999ull}) {
    a.add(v);
    EXPECT_LT(v, QueueAgeStats::upper_edge_ns(QueueAgeStats::bucket(v)));
  }
  EXPECT_EQ(a.max_ns.load(), 50'000u);
  uint64_t total = 0;
  for (auto& h : a.hist) total += h.load();
  EXPECT_EQ(total, 4u);
}

// A model of one PMD thread with one output queue, on a fake clock: frames arrive at random
// times; each loop takes a random time; at the end of a loop the queue is checked as
// Forwarder::flush_due does; before sleeping (idle) everything is flushed. Returns the
// largest queue age and the largest check gap, and asserts nothing is left at the end.
struct SimResult {
  uint64_t max_age = 0;
  uint64_t max_gap = 0;
  uint64_t delivered = 0;
  uint64_t flushes = 0;
  uint64_t short_flushes = 0;  ///< of fewer frames than a full burst
};

/// The time from one arrival to the next (ns), drawn from `rng`.
using ArrivalGap = std::function<uint64_t(std::mt19937_64&)>;

SimResult simulate(FlushPolicy p, uint64_t loop_min, uint64_t loop_max, const ArrivalGap& gap,
                   bool sleeps, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> loop(loop_min, loop_max);
  const uint32_t burst = 32;
  SimResult r;
  std::deque<uint64_t> q;  // enqueue times
  CheckGapEstimator est;
  bool fresh = true;
  uint64_t now = 1'000'000, next_arrival = now, sent = 0;
  const uint64_t n_frames = 20000;
  auto flush = [&](uint64_t prev_check) {
    for (uint64_t t : q) r.max_age = std::max(r.max_age, now - t);
    if (prev_check) r.max_gap = std::max(r.max_gap, now - prev_check);
    r.delivered += q.size();
    if (q.size() < 32) ++r.short_flushes;
    q.clear();
    ++r.flushes;
  };
  while (sent < n_frames || !q.empty()) {
    // Receive burst: frames that arrived by now (at most a burst).
    const uint64_t t_burst = now;
    uint32_t got = 0;
    while (sent < n_frames && next_arrival <= now && got < burst) {
      q.push_back(t_burst);
      ++sent;
      ++got;
      next_arrival += gap(rng) + 1;
      if (due_on_enqueue(p, static_cast<uint32_t>(q.size()), burst)) flush(0);
    }
    if (got && due_at_burst_end(p) && !q.empty()) flush(0);
    now += loop(rng);
    // End of the loop: deadline check.
    if (!q.empty()) {
      const uint64_t prev = fresh ? 0 : est.last_check_ns();
      est.check(now, fresh);
      fresh = false;
      if (due_at_check(p, q.front(), now, est.predict())) flush(prev);
      if (q.empty()) fresh = true;
    } else {
      fresh = true;
    }
    if (sleeps && !got && (sent == n_frames || next_arrival > now)) {
      if (!q.empty()) flush(0);  // before sleeping
      fresh = true;
      if (sent < n_frames) now = std::max(now, next_arrival);  // woken by the next kick
    }
  }
  EXPECT_EQ(r.delivered, n_frames);
  return r;
}

/// Poisson arrivals, `mean` ns apart on average.
SimResult simulate(FlushPolicy p, uint64_t loop_min, uint64_t loop_max, uint64_t mean,
                   bool sleeps, uint32_t seed) {
  std::exponential_distribution<double> e(1.0 / static_cast<double>(mean));
  return simulate(p, loop_min, loop_max, [e](std::mt19937_64& g) mutable {
    return static_cast<uint64_t>(e(g));
  }, sleeps, seed);
}

TEST(FlushSimulation, IntervalHoldsAtMostUsPlusOneLoop) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    const SimResult r = simulate(P("interval=50"), 200, 3000, 5000, false, seed);
    EXPECT_LE(r.max_age, 50'000 + r.max_gap) << "seed " << seed;
    EXPECT_LE(r.max_gap, 3000u);
    EXPECT_GE(r.max_age, 50'000u) << "frames were held up to the interval";
    EXPECT_LT(r.flushes, r.delivered / 4) << "frames were gathered";
  }
}

TEST(FlushSimulation, BudgetKeepsItWithSteadyLoops) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    const SimResult r = simulate(P("budget=50"), 1000, 1500, 5000, false, seed);
    EXPECT_LE(r.max_age, 50'000u) << "seed " << seed;
    EXPECT_GE(r.max_age, 45'000u);
  }
}

TEST(FlushSimulation, FullBurstsGoAtOnceUnderLoad) {
  // Arrivals every 100 ns, loops of 1-2 us: queues fill a burst long before 1 ms.
  const SimResult r = simulate(P("interval=1000"), 1000, 2000, 100, false, 9);
  EXPECT_LT(r.max_age, 1'000'000u);
  EXPECT_GE(r.delivered / r.flushes, 16u);
}

TEST(FlushSimulation, EveryPolicyFlushesBeforeSleeping) {
  // With a 1 s interval and sleeps between sparse frames, nothing waits for the interval
  // (nor for the next frame): the flush before sleeping delivers each frame at the end of
  // the busy period that took it (a few loops of at most 1 us here).
  for (const char* s : {"immediate", "rx-batch", "interval=1000000", "budget=1000000"}) {
    const SimResult r = simulate(P(s), 500, 1000, 20'000, true, 3);
    EXPECT_LE(r.max_age, 100'000u) << s;
  }
  // Without the flush before sleeping the last frames would wait the whole interval.
  const SimResult r = simulate(P("interval=1000000"), 500, 1000, 20'000, false, 3);
  EXPECT_GE(r.max_age, 1'000'000u);
}

TEST(FlushSimulation, ImmediateAndRxBatchNeverHoldAcrossLoops) {
  for (const char* s : {"immediate", "rx-batch", "interval=0"}) {
    const SimResult r = simulate(P(s), 200, 3000, 500, false, 4);
    EXPECT_EQ(r.max_age, 0u) << s;  // delivered within the burst that took them
  }
}

}  // namespace
}  // namespace vl::dp

namespace vl::dp {
namespace {

// Arrival patterns for budget=US: steady (a frame every G ns), bursty (trains of K frames
// back to back, then a pause), trickle (frames further apart than the budget), each with
// loops that vary by up to 2x: no frame is held past the budget.
TEST(FlushSimulation, BudgetHeldNoFrameLongerAtAnyPattern) {
  const ArrivalGap steady = [](std::mt19937_64&) -> uint64_t { return 700; };
  const ArrivalGap trickle = [](std::mt19937_64& g) -> uint64_t { return 60'000 + g() % 40'000; };
  uint32_t n = 0;
  const ArrivalGap bursty = [&n](std::mt19937_64& g) -> uint64_t {
    return ++n % 20 ? 50 : 20'000 + g() % 60'000;  // trains of 20
  };
  const std::pair<const char*, const ArrivalGap*> patterns[] = {
      {"steady", &steady}, {"trickle", &trickle}, {"bursty", &bursty}};
  for (const auto& [name, gap] : patterns) {
    for (uint32_t us : {10u, 50u, 200u}) {
      for (uint32_t seed = 1; seed <= 3; ++seed) {
        const std::string pol = "budget=" + std::to_string(us);
        const SimResult r = simulate(P(pol.c_str()), 800, 1600, *gap, false, seed);
        EXPECT_LE(r.max_age, uint64_t{us} * 1000) << name << " " << pol << " seed " << seed;
      }
    }
  }
}

// When a full burst arrives well within the budget, the policy waits for it and delivers
// it whole: no flush of fewer frames than a burst (but the last).
TEST(FlushSimulation, BudgetDoesNotSplitFullBursts) {
  // A frame every 500 ns: 32 frames in 16 us, the budget 50 us.
  const SimResult r = simulate(P("budget=50"), 800, 1600,
                               [](std::mt19937_64&) -> uint64_t { return 500; }, false, 7);
  EXPECT_LE(r.short_flushes, 1u);
  EXPECT_GE(r.delivered / r.flushes, 31u);
  EXPECT_LE(r.max_age, 50'000u);
}

}  // namespace
}  // namespace vl::dp
