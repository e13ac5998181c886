#pragma once
// Every clock the program reads: CLOCK_MONOTONIC in ns/us/ms/s, the CPU's time-stamp
// counter (TscClock: one calibration against CLOCK_MONOTONIC_RAW, used by the generator,
// the VNF and the switch's output batching), and tsc_now_ns(), a TSC-based monotonic ns
// clock for the PMD threads. Design: docs/architecture.md.
#include <time.h>

#include <cstdint>

namespace vl {

/// CLOCK_MONOTONIC in ns (a vDSO call, about 20 ns).
inline uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
/// CLOCK_MONOTONIC in whole us, ms and s (truncated).
inline uint64_t mono_us() { return mono_ns() / 1000; }
inline uint64_t mono_ms() { return mono_ns() / 1000000; }
inline uint64_t mono_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec);
}
/// CLOCK_MONOTONIC_COARSE in whole s (the tick's resolution, a few ms; cheaper than mono_s()).
inline uint64_t mono_coarse_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec);
}
/// CLOCK_MONOTONIC_RAW in ns (not slewed by NTP: the reference TscClock calibrates against).
inline uint64_t mono_raw_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

/// The time-stamp counter, in ticks (not serialising; a few ns).
inline uint64_t rdtsc() { return __builtin_ia32_rdtsc(); }

/// The TSC's rate. Resolution: one tick (1/hz s, about 0.3-0.4 ns at 2.5-3 GHz); accuracy:
/// the calibration's, about 0.1% over 50 ms. Requires an invariant TSC (constant rate,
/// synchronised across cores), which every x86-64 server CPU of the last decade has.
class TscClock {
 public:
  /// Measures the TSC rate over `ms` milliseconds of CLOCK_MONOTONIC_RAW (tightly bracketed
  /// reads at both ends; sleeps for `ms`).
  static TscClock calibrate(int ms = 50);
  double hz() const { return hz_; }
  double ns_per_tick() const { return 1e9 / hz_; }
  uint64_t ticks_from_ns(double ns) const { return static_cast<uint64_t>(ns * hz_ / 1e9); }
  double ns(uint64_t ticks) const { return static_cast<double>(ticks) * 1e9 / hz_; }

 private:
  double hz_ = 1e9;
};

/// A monotonic clock in ns from the TSC: CLOCK_MONOTONIC's value at calibrate_tsc_ns() plus
/// the TSC ticks since, at the calibrated rate (before that call it reads CLOCK_MONOTONIC).
/// About 10 ns a read. The clock of the switch's intermediate queues (dp/flush.h).
uint64_t tsc_now_ns();
/// A TSC reading (rdtsc()) on tsc_now_ns()'s scale; 0 before calibrate_tsc_ns().
uint64_t tsc_to_ns(uint64_t tsc);
/// TSC ticks in one us at tsc_now_ns()'s calibration; 0 before it.
uint64_t tsc_ticks_per_us();
/// Calibrates tsc_now_ns() (TscClock::calibrate over ~10 ms; called once by the switch
/// before its PMD threads start; a later call does nothing). Keeps CLOCK_MONOTONIC when the
/// measured rate is not positive.
void calibrate_tsc_ns();

}  // namespace vl
