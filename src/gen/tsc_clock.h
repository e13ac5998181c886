#pragma once
// The generator's clock: the CPU's time-stamp counter, calibrated against CLOCK_MONOTONIC.
// Resolution: one TSC tick (1/tsc_hz s, about 0.3-0.4 ns at 2.5-3 GHz); accuracy: the
// calibration's, about 0.1% over the 50 ms it measures. Requires an invariant TSC (constant
// rate, synchronised across cores), which every x86-64 server CPU of the last decade has.
#include <cstdint>

namespace vl::gen {

inline uint64_t rdtsc() { return __builtin_ia32_rdtsc(); }

class TscClock {
 public:
  /// Measures the TSC rate over `ms` milliseconds of CLOCK_MONOTONIC_RAW (tightly bracketed reads).
  static TscClock calibrate(int ms = 50);
  double hz() const { return hz_; }
  double ns_per_tick() const { return 1e9 / hz_; }
  uint64_t ticks_from_ns(double ns) const { return static_cast<uint64_t>(ns * hz_ / 1e9); }
  double ns(uint64_t ticks) const { return static_cast<double>(ticks) * 1e9 / hz_; }

 private:
  double hz_ = 1e9;
};

}  // namespace vl::gen
