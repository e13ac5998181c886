// Adaptive mode's sleep decision (dp/idle_policy.h) over a simulated clock: a PMD thread's
// idle passes, sleeps and wake-ups as time stamps, no threads and no real time.
#include "dp/idle_policy.h"

#include <gtest/gtest.h>

namespace vl::dp {
namespace {

constexpr uint64_t kUs = 1000;
constexpr uint64_t kMs = 1000 * kUs;
constexpr uint64_t kPassNs = 300;  // one idle pass (poll of empty rings, a pause)

/// A simulated PMD thread: spins idle passes until the policy says sleep or work arrives.
struct Sim {
  explicit Sim(uint64_t max_spin_ns) : p(max_spin_ns) {}
  AdaptiveIdle p;
  uint64_t now = 1 * kMs;
  uint64_t sleeps = 0, caught = 0;

  /// Idle until `work_at` (work arrives then); `off_cpu` > 0: the thread loses its CPU for
  /// that long at the first idle pass at or after `off_at`.
  void idle_until(uint64_t work_at, uint64_t off_at = 0, uint64_t off_cpu = 0) {
    for (;;) {
      if (off_cpu && now >= off_at) {
        now += off_cpu;  // descheduled between two passes
        off_cpu = 0;
      }
      if (now >= work_at) {  // the pass that starts now finds the work
        p.busy(now);
        ++caught;
        return;
      }
      if (p.idle(now)) {
        const uint64_t from = now;
        now = work_at > now ? work_at : now;  // woken by the kick
        p.slept(from, now);
        ++sleeps;
        p.busy(now);
        return;
      }
      now += kPassNs;
    }
  }
  /// Work arrives every `gap` ns, `n` times; each burst takes `work_ns`.
  void periodic(uint64_t gap, int n, uint64_t work_ns = 2 * kUs) {
    for (int i = 0; i < n; ++i) {
      now += work_ns;
      idle_until(now + gap);
    }
  }
};

TEST(AdaptiveIdle, ShortGapsGrowTheWindowUntilSpinsCatchTheWork) {
  Sim s(200 * kUs);
  EXPECT_EQ(s.p.window_ns(), AdaptiveIdle::kMinSpinNs);
  s.periodic(50 * kUs, 20);  // work every 50 us: a 10 us spin misses it, 64 us catches it
  EXPECT_GE(s.p.window_ns(), 50 * kUs);
  const uint64_t sleeps = s.sleeps;
  EXPECT_LE(sleeps, 4u);  // 10 -> 20 -> 40 -> 80 us
  s.periodic(50 * kUs, 100);
  EXPECT_EQ(s.sleeps, sleeps) << "once the window covers the gap every spin catches the work";
  EXPECT_EQ(s.p.preemptions(), 0u);
}

TEST(AdaptiveIdle, WindowNeverExceedsTheMaximum) {
  Sim s(200 * kUs);
  s.periodic(150 * kUs, 50);
  EXPECT_LE(s.p.window_ns(), 200 * kUs);
  s.periodic(190 * kUs, 50);
  EXPECT_EQ(s.p.window_ns(), 200 * kUs);
}

TEST(AdaptiveIdle, LongGapsShrinkTheWindowToZero) {
  Sim s(200 * kUs);
  s.periodic(50 * kUs, 20);
  ASSERT_GT(s.p.window_ns(), 0u);
  s.periodic(5 * kMs, 20);  // nothing for much longer than the maximum: spinning is waste
  EXPECT_EQ(s.p.window_ns(), 0u);
  // With the window at 0 the first idle pass sleeps.
  const uint64_t sleeps = s.sleeps;
  s.periodic(5 * kMs, 10);
  EXPECT_EQ(s.sleeps, sleeps + 10);
}

TEST(AdaptiveIdle, ZeroMaximumAlwaysSleepsAtOnce) {
  Sim s(0);
  s.periodic(5 * kUs, 30);
  EXPECT_EQ(s.sleeps, 30u);
  EXPECT_EQ(s.p.window_ns(), 0u);
}

TEST(AdaptiveIdle, PreemptedSpinSleepsAtOnceForTheHold) {
  Sim s(200 * kUs);
  s.periodic(50 * kUs, 20);
  ASSERT_GE(s.p.window_ns(), 50 * kUs);
  // A spin loses its CPU for 3 ms (a vCPU thread took it): the thread sleeps at the next
  // pass, and every idle pass in the next kHoldNs sleeps at once.
  s.now += 2 * kUs;
  const uint64_t t = s.now;
  s.idle_until(t + 5 * kMs, t + 5 * kUs, 3 * kMs);
  EXPECT_EQ(s.p.preemptions(), 1u);
  EXPECT_EQ(s.p.effective_window(s.now), 0u);
  const uint64_t sleeps = s.sleeps;
  s.periodic(20 * kUs, 100);  // 2.2 ms of short gaps, well inside the hold
  EXPECT_EQ(s.sleeps, sleeps + 100) << "no spin while holding";
  // After the hold the thread spins again, starting from the short window.
  s.now += AdaptiveIdle::kHoldNs;
  EXPECT_EQ(s.p.effective_window(s.now), AdaptiveIdle::kMinSpinNs);
  s.periodic(20 * kUs, 10);
  EXPECT_GT(s.p.window_ns(), AdaptiveIdle::kMinSpinNs);
}

TEST(AdaptiveIdle, RepeatedPreemptionDoublesTheHoldAndACleanSpinResetsIt) {
  Sim s(200 * kUs);
  uint64_t hold = AdaptiveIdle::kHoldNs;
  for (int i = 0; i < 3; ++i) {
    s.now += AdaptiveIdle::kMaxHoldNs;  // past any hold: the next spin is a probe
    const uint64_t t = s.now;
    s.idle_until(t + 10 * kMs, t + 1 * kUs, 2 * kMs);  // the probe is preempted too
    const uint64_t seen = t + 2 * kMs;  // about when the thread saw it (back on its CPU)
    EXPECT_EQ(s.p.effective_window(seen + hold - 1 * kMs), 0u) << "hold " << i;
    EXPECT_NE(s.p.effective_window(seen + hold + 1 * kMs), 0u) << "hold " << i;
    hold *= 2;
  }
  EXPECT_EQ(s.p.preemptions(), 3u);
  // A probe that runs its course unpreempted ends the contention: the next hold is short.
  s.now += AdaptiveIdle::kMaxHoldNs;
  s.periodic(5 * kUs, 5);
  s.now += 1 * kUs;
  const uint64_t t = s.now;
  s.idle_until(t + 10 * kMs, t + 1 * kUs, 2 * kMs);
  const uint64_t seen = t + 2 * kMs;
  EXPECT_EQ(s.p.effective_window(seen + AdaptiveIdle::kHoldNs - 1 * kMs), 0u);
  EXPECT_NE(s.p.effective_window(seen + AdaptiveIdle::kHoldNs + 1 * kMs), 0u);
}

TEST(AdaptiveIdle, RunQueueWaitHoldsWithoutASpin) {
  AdaptiveIdle p(200 * kUs);
  uint64_t now = 1 * kMs;
  // First idle period: the wait seen is the baseline, the spin runs.
  ASSERT_TRUE(p.wants_wait(now));
  EXPECT_FALSE(p.idle(now, 7 * kMs));
  p.busy(now + kPassNs);
  // A few us of wait since (a wake-up on a free CPU): still spins.
  now += 100 * kUs;
  ASSERT_TRUE(p.wants_wait(now));
  EXPECT_FALSE(p.idle(now, 7 * kMs + 5 * kUs));
  EXPECT_FALSE(p.wants_wait(now + kPassNs)) << "one read per idle period";
  p.busy(now + kPassNs);
  // 2 ms waited behind another thread: sleep at once, and hold.
  now += 100 * kUs;
  EXPECT_TRUE(p.idle(now, 9 * kMs + 5 * kUs));
  EXPECT_EQ(p.preemptions(), 1u);
  p.slept(now, now + 50 * kUs);
  now += 60 * kUs;
  EXPECT_FALSE(p.wants_wait(now)) << "no read while holding";
  EXPECT_TRUE(p.idle(now, 0));
  // An unreadable wait (0 after real values) is no wait.
  now += AdaptiveIdle::kHoldNs;
  p.slept(now, now);
  EXPECT_TRUE(p.wants_wait(now));
  EXPECT_FALSE(p.idle(now, 0));
}

TEST(AdaptiveIdle, ALongBusyPassIsNotTimeOffTheCpu) {
  Sim s(200 * kUs);
  s.periodic(50 * kUs, 20);
  // busy() takes the pass's start: a 500 us burst (software GSO of large frames) ends long
  // after the previous idle pass without counting as a preemption.
  s.p.idle(s.now);
  s.now += kPassNs;
  s.p.busy(s.now);
  s.now += 500 * kUs;
  s.periodic(50 * kUs, 5);
  EXPECT_EQ(s.p.preemptions(), 0u);
}

}  // namespace
}  // namespace vl::dp
