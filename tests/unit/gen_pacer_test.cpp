// The generator's departure schedule (gen/pacer.h) with a fake clock: exact due counts at
// given rates, the burst cap, the catch-up bound after a stall (slots over the lag bound
// are skipped, not sent), as fast as possible (rate 0), huge and tiny rates, next_send().
// Ticks are ns here (tick_hz 1e9) unless a test says otherwise.
#include <gtest/gtest.h>

#include <cstdint>

#include "gen/pacer.h"

namespace vl::gen {
namespace {

constexpr double kHz = 1e9;

// One stream polled at `now`: begin_pass, then send what is due (at most a burst), as
// Trial::send does when the ring has room. Returns the frames sent.
uint32_t pass(const Pacer& p, PaceState* st, uint64_t now) {
  const uint64_t due = p.begin_pass(st, now);
  const uint32_t n = p.frames_due(*st, due);
  st->slot += n;
  return n;
}

TEST(GenPacer, PlannedSlots) {
  EXPECT_EQ(planned_slots(1e6, 1.0), 1000001u);  // slot 0 at the start, slot 1e6 at the end
  EXPECT_EQ(planned_slots(10000, 0.5), 5001u);
  EXPECT_EQ(planned_slots(0, 1.0), 30000001u);   // as fast as possible: planned at 30 Mpps
  EXPECT_EQ(planned_slots(0, 2.0), 60000001u);
  EXPECT_EQ(planned_slots(1e30, 1e6), uint64_t{1} << 62);  // saturates
  EXPECT_EQ(planned_slots(-5, 1.0), 30000001u);  // not above 0: as fast as possible
}

TEST(GenPacer, ExactDueCountsAt1Mpps) {
  Pacer p(1e6, kHz, 1.0, 32, 256);  // one slot every 1000 ticks
  p.start_at(5000);
  EXPECT_TRUE(p.paced());
  EXPECT_DOUBLE_EQ(p.period(), 1000.0);
  EXPECT_EQ(p.planned(), 1000001u);
  EXPECT_EQ(p.end(), 5000u + 1000000000u);
  EXPECT_EQ(p.slots_due(0), 0u);
  EXPECT_EQ(p.slots_due(4999), 0u);
  EXPECT_EQ(p.slots_due(5000), 1u);  // slot 0 departs at the start
  EXPECT_EQ(p.slots_due(5999), 1u);
  EXPECT_EQ(p.slots_due(6000), 2u);
  EXPECT_EQ(p.slots_due(5000 + 1000 * 777), 778u);
  EXPECT_EQ(p.slots_due(5000 + 1000 * 777 - 1), 777u);
  EXPECT_EQ(p.slots_due(p.end()), p.planned());
  EXPECT_EQ(p.slots_due(UINT64_MAX), p.planned());
  EXPECT_DOUBLE_EQ(p.slot_time(3), 8000.0);
}

TEST(GenPacer, PollingEvery250TicksSendsOneFrameEveryFourthPass) {
  Pacer p(1e6, kHz, 0.001, 32, 256);
  p.start_at(0);
  PaceState st;
  uint64_t sent = 0;
  for (uint64_t now = 0; now <= 1000000; now += 250) {
    const uint32_t n = pass(p, &st, now);
    EXPECT_EQ(n, now % 1000 == 0 ? 1u : 0u) << now;
    sent += n;
  }
  EXPECT_EQ(sent, 1001u);  // slots 0..1000: the plan of 1 ms at 1 Mpps
  EXPECT_EQ(sent, p.planned());
  EXPECT_EQ(st.skipped, 0u);
  EXPECT_EQ(pass(p, &st, 2000000), 0u);  // nothing beyond the plan
}

TEST(GenPacer, ExactCountsAtOtherRates) {
  // 12.5 Mpps: 80 ticks a slot; polled every 1000 ticks: 12 or 13 a pass (12.5 on average).
  {
    Pacer p(12.5e6, kHz, 1.0, 32, 1024);
    p.start_at(100);
    PaceState st;
    uint64_t sent = 0;
    for (uint64_t now = 100; now < 100 + 1000000; now += 1000) {
      const uint32_t n = pass(p, &st, now);
      EXPECT_GE(n, now == 100 ? 1u : 12u);
      EXPECT_LE(n, 13u);
      sent += n;
    }
    EXPECT_EQ(sent, p.slots_due(100 + 999000));  // every slot due by the last pass
    EXPECT_EQ(sent, 999000u / 80 + 1);
    EXPECT_EQ(st.skipped, 0u);
  }
  // 1 pps for 10 s: 11 slots, one a second.
  {
    Pacer p(1, kHz, 10.0, 32, 256);
    p.start_at(0);
    EXPECT_EQ(p.planned(), 11u);
    EXPECT_EQ(p.slots_due(999999999), 1u);
    EXPECT_EQ(p.slots_due(1000000000), 2u);
    EXPECT_EQ(p.slots_due(10000000000ull), 11u);
  }
  // A period that is no whole number of ticks (3 Mpps: 333.3 ticks): 3e6 slots in one
  // second to within one.
  {
    Pacer p(3e6, kHz, 1.0, 32, 256);
    p.start_at(0);
    const uint64_t d = p.slots_due(999999999);
    EXPECT_GE(d, 3000000u - 1);
    EXPECT_LE(d, 3000000u + 1);
  }
}

TEST(GenPacer, BurstCapsAPassWithoutSkipping) {
  // 100 slots late, within the lag bound (256): sent a burst at a time, nothing skipped.
  Pacer p(1e6, kHz, 1.0, 32, 256);
  p.start_at(0);
  PaceState st;
  EXPECT_EQ(pass(p, &st, 0), 1u);
  const uint64_t now = 100000;  // slots 1..100 due
  EXPECT_EQ(pass(p, &st, now), 32u);
  EXPECT_EQ(pass(p, &st, now), 32u);
  EXPECT_EQ(pass(p, &st, now), 32u);
  EXPECT_EQ(pass(p, &st, now), 4u);
  EXPECT_EQ(pass(p, &st, now), 0u);
  EXPECT_EQ(st.slot, 101u);
  EXPECT_EQ(st.skipped, 0u);
}

TEST(GenPacer, CatchUpAfterAStallIsBoundedByTheLag) {
  // A 10 ms stall at 1 Mpps with a lag bound of 256 slots: at most 257 slots (those within
  // the bound, and the one due now) are still sent; the older ones are skipped.
  Pacer p(1e6, kHz, 1.0, 32, 256);
  p.start_at(0);
  PaceState st;
  EXPECT_EQ(pass(p, &st, 0), 1u);
  const uint64_t now = 10000000;
  const uint64_t due = p.begin_pass(&st, now);
  EXPECT_EQ(due, 10001u);
  // First on time: ceil((10,000,000 - 256,000) / 1000) = 9744.
  EXPECT_EQ(st.slot, 9744u);
  EXPECT_EQ(st.skipped, 9744u - 1);
  EXPECT_EQ(due - st.slot, 257u);
  // Nine passes at the same time send them (8 x 32 + 1), none is skipped again.
  uint64_t sent = 0;
  int passes = 0;
  for (; passes < 20 && st.slot < due; ++passes) sent += pass(p, &st, now);
  EXPECT_EQ(sent, 257u);
  EXPECT_EQ(passes, 9);
  EXPECT_EQ(st.skipped, 9743u);
  // Back on schedule: the next slot is due 1000 ticks later.
  EXPECT_EQ(pass(p, &st, now + 999), 0u);
  EXPECT_EQ(pass(p, &st, now + 1000), 1u);
  // Every slot of the plan is accounted for once: sent, skipped, or still to come.
  EXPECT_EQ(st.slot, 10002u);
  EXPECT_EQ(1 + 257 + 1 + st.skipped, st.slot);
}

TEST(GenPacer, CatchUpBoundHoldsForAnyStall) {
  Pacer p(1e6, kHz, 1.0, 32, 64);
  p.start_at(0);
  for (uint64_t stall : {0ull, 1ull, 63999ull, 64000ull, 64001ull, 65000ull, 123456789ull}) {
    PaceState st;
    const uint64_t due = p.begin_pass(&st, stall);
    EXPECT_LE(due - st.slot, 65u) << stall;  // lag bound + the slot due now
    EXPECT_EQ(st.slot, st.skipped) << stall;
    EXPECT_EQ(due, p.slots_due(stall)) << stall;
    EXPECT_LE(p.frames_due(st, due), 32u);
  }
}

TEST(GenPacer, AsFastAsPossible) {
  Pacer p(0, kHz, 1.0, 32, 256);
  p.start_at(1000);
  EXPECT_FALSE(p.paced());
  EXPECT_EQ(p.period(), 0.0);
  EXPECT_EQ(p.planned(), 30000001u);
  PaceState st;
  // A burst every pass, whatever the time; nothing is ever late.
  EXPECT_EQ(pass(p, &st, 1000), 32u);
  EXPECT_EQ(pass(p, &st, 1000), 32u);
  EXPECT_EQ(pass(p, &st, 999999999), 32u);
  EXPECT_EQ(st.skipped, 0u);
  EXPECT_EQ(p.first_on_time(999999999, 64), 0u);
  EXPECT_EQ(p.next_send(st), 1000u);  // at once (the ring permitting)
  // The plan's end.
  st.slot = p.planned() - 5;
  EXPECT_EQ(pass(p, &st, 2000), 5u);
  EXPECT_EQ(pass(p, &st, 2000), 0u);
  EXPECT_EQ(p.next_send(st), UINT64_MAX);
}

TEST(GenPacer, HugeRate) {
  // 1e15 pps on a 1 GHz clock: a million slots a tick. Every pass is a full burst, and
  // after a tick nearly every slot is over the lag bound: still at most lag + 1 behind.
  Pacer p(1e15, kHz, 1e-6, 32, 256);
  p.start_at(0);
  EXPECT_EQ(p.planned(), 1000000001u);
  PaceState st;
  EXPECT_EQ(pass(p, &st, 0), 1u);
  const uint64_t due = p.begin_pass(&st, 1);
  EXPECT_EQ(due, 1000001u);
  EXPECT_LE(due - st.slot, 257u);
  EXPECT_GE(due - st.slot, 256u);
  EXPECT_EQ(p.frames_due(st, due), 32u);
  EXPECT_EQ(p.slots_due(1000000), p.planned());  // capped at the plan, no overflow
  // Beyond what a double counts exactly: the plan saturates, due counts stay in range.
  Pacer q(1e30, kHz, 1.0, 32, 256);
  q.start_at(0);
  EXPECT_EQ(q.planned(), uint64_t{1} << 62);
  EXPECT_EQ(q.slots_due(UINT64_MAX), q.planned());
  PaceState s2;
  const uint64_t d2 = q.begin_pass(&s2, UINT64_MAX);
  EXPECT_EQ(d2, q.planned());
  EXPECT_LE(d2 - s2.slot, 257u);
}

TEST(GenPacer, TinyRate) {
  // 1e-12 pps: one slot at the start, the next one long after any trial.
  Pacer p(1e-12, kHz, 1.0, 32, 0);
  p.start_at(0);
  EXPECT_TRUE(p.paced());
  EXPECT_EQ(p.planned(), 1u);
  PaceState st;
  EXPECT_EQ(pass(p, &st, 0), 1u);
  EXPECT_EQ(pass(p, &st, UINT64_MAX), 0u);
  EXPECT_EQ(st.skipped, 0u);
  EXPECT_EQ(p.next_send(st), UINT64_MAX);
}

TEST(GenPacer, NextSend) {
  Pacer p(1e6, kHz, 0.01, 32, 256);
  p.start_at(5000);
  PaceState st;
  EXPECT_EQ(p.next_send(st), 5000u);
  st.slot = 3;
  EXPECT_EQ(p.next_send(st), 8000u);
  st.slot = 9999;
  EXPECT_EQ(p.next_send(st), 5000u + 9999000);
  st.slot = 10000;  // planned (10001 slots), but at the end: never departs
  EXPECT_EQ(p.next_send(st), UINT64_MAX);
  st.slot = 10001;
  EXPECT_EQ(p.next_send(st), UINT64_MAX);
  // A period of 1000/3 ticks: the slot is due from next_send() on, not a tick before.
  Pacer q(3e6, kHz, 1.0, 32, 256);
  q.start_at(700);
  for (uint64_t k : {1ull, 2ull, 3ull, 10ull, 1000ull, 123457ull}) {
    PaceState s;
    s.slot = k;
    const uint64_t t = q.next_send(s);
    EXPECT_GT(q.slots_due(t), k) << k;
    EXPECT_LE(q.slots_due(t - 1), k) << k;
  }
}

TEST(GenPacer, TransmissionPeriod) {
  Pacer p(1e6, kHz, 0.5, 32, 256);
  p.start_at(1000);
  EXPECT_EQ(p.start(), 1000u);
  EXPECT_EQ(p.end(), 1000u + 500000000);
  EXPECT_FALSE(p.transmitting(p.end()));
  EXPECT_TRUE(p.transmitting(p.end() - 1));
  EXPECT_TRUE(p.transmitting(1000));
  // A TSC-like clock: 2.5 GHz, 10 ms.
  Pacer q(1e6, 2.5e9, 0.01, 32, 256);
  q.start_at(0);
  EXPECT_EQ(q.end(), 25000000u);
  EXPECT_DOUBLE_EQ(q.period(), 2500.0);
  EXPECT_EQ(q.slots_due(25000000 - 1), 10000u);
}

}  // namespace
}  // namespace vl::gen
