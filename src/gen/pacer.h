#pragma once
// The generator's departure schedule (gen/generator.h "Pacing"): slot k of a stream departs
// at start + k * period; a pass sends the slots due by then, at most a burst; slots more
// than the lag bound late are skipped (not offered). Times are ticks of the clock passed in
// (TSC ticks in the generator), so the decisions are tested with a fake clock
// (tests/unit/gen_pacer_test.cpp), as dp/flush.h's are. Design: docs/architecture.md.
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace vl::gen {

/// One stream's place in the schedule.
struct PaceState {
  uint64_t slot = 0;     ///< the next slot to depart (those before departed, dropped or skipped)
  uint64_t skipped = 0;  ///< slots skipped because the sender was late (not offered)
};

/// Slots a trial plans per stream at `rate_pps` for `duration_s`: rate x duration + 1 (slot 0
/// departs at the start); at rate 0 (as fast as possible) as if at 30 Mpps. Saturates at
/// 2^62 (check_trial() bounds real trials far below).
uint64_t planned_slots(double rate_pps, double duration_s);

/// The schedule of one trial (the same for every stream). Holds no per-stream state: a
/// stream's is its PaceState.
class Pacer {
 public:
  /// `rate_pps`: slots per second per stream, 0 (or not above 0): as fast as possible,
  /// `burst` slots a pass, no schedule. `tick_hz`: the clock's ticks per second (> 0).
  /// `max_lag_slots`: how many slots a stream may be behind before the older ones are
  /// skipped. The schedule starts at tick 0 until start_at().
  Pacer(double rate_pps, double tick_hz, double duration_s, uint32_t burst,
        uint32_t max_lag_slots);
  /// Starts the schedule: slot 0 departs at tick `start`, the transmission period ends
  /// duration_s later.
  void start_at(uint64_t start) {
    start_ = start;
    end_ = start + duration_;
  }

  bool paced() const { return period_ > 0; }
  double period() const { return period_; }  ///< ticks per slot; 0 when not paced
  uint64_t planned() const { return planned_; }
  uint32_t burst() const { return burst_; }
  uint64_t start() const { return start_; }
  uint64_t end() const { return end_; }  ///< start + duration: no departure from then on
  /// Departures may still be made at `now` (before the end of the transmission period).
  bool transmitting(uint64_t now) const { return now < end_; }

  /// The planned departure of slot `slot` (ticks, fractional).
  double slot_time(uint64_t slot) const {
    return static_cast<double>(start_) + static_cast<double>(slot) * period_;
  }
  /// Slots whose departure time has come by `now`: slots [0, due) (at most planned()).
  /// Not paced: planned().
  uint64_t slots_due(uint64_t now) const {
    if (!paced()) return planned_;
    if (now < start_) return 0;
    const double k = static_cast<double>(now - start_) / period_;
    return k >= planned_d_ ? planned_ : static_cast<uint64_t>(k) + 1;
  }
  /// The oldest slot still on time at `now` (slots before it are over the lag bound), at
  /// most `due`. Not paced: 0.
  uint64_t first_on_time(uint64_t now, uint64_t due) const {
    if (!paced() || now < start_) return 0;
    const double elapsed = static_cast<double>(now - start_);
    if (!(elapsed > max_lag_)) return 0;  // also a NaN bound (0 slots of an infinite period)
    const double k = std::ceil((elapsed - max_lag_) / period_);
    return std::min(due, static_cast<uint64_t>(std::min(k, planned_d_)));
  }
  /// Starts a pass of one stream at `now`: skips the slots over the lag bound (advances
  /// `st->slot`, counts them in `st->skipped`) and returns the end of the slots due. The
  /// stream may send slots [st->slot, due), at most burst() of them (frames_due()).
  uint64_t begin_pass(PaceState* st, uint64_t now) const {
    if (!paced()) return std::min(planned_, st->slot + burst_);
    const uint64_t due = slots_due(now);
    const uint64_t first = first_on_time(now, due);
    if (first > st->slot) {
      st->skipped += first - st->slot;
      st->slot = first;
    }
    return due;
  }
  /// Frames this pass sends given begin_pass()'s `due`: min(due - slot, burst).
  uint32_t frames_due(const PaceState& st, uint64_t due) const {
    return due > st.slot ? static_cast<uint32_t>(std::min<uint64_t>(due - st.slot, burst_)) : 0;
  }
  /// The first tick at which slot `st.slot` is due (start + ceil(slot x period)); not paced:
  /// start(). UINT64_MAX when every planned slot has gone or the slot falls after end().
  uint64_t next_send(const PaceState& st) const;

 private:
  double period_ = 0;   // ticks per slot
  double max_lag_ = 0;  // ticks: max_lag_slots x period
  uint64_t planned_ = 0;
  double planned_d_ = 0;  // planned_, for comparisons with slot counts in double
  uint32_t burst_ = 0;
  uint64_t duration_ = 0;  // ticks
  uint64_t start_ = 0, end_ = 0;
};

}  // namespace vl::gen
