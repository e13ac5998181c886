#include "gen/tsc_clock.h"

#include <time.h>

#include <cstdint>

namespace vl::gen {

namespace {
uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// One (TSC, CLOCK_MONOTONIC_RAW) pair read as close together as possible: the TSC is read
// before and after the clock, and of a few tries the one with the narrowest bracket is kept
// (an interrupt or preemption between the reads would otherwise skew the rate; under load
// one preemption in a 50 ms calibration is a 10% error).
struct Pair {
  uint64_t tsc, ns;
};
Pair tight_pair() {
  Pair best{0, 0};
  uint64_t best_w = UINT64_MAX;
  for (int i = 0; i < 16; ++i) {
    const uint64_t a = rdtsc();
    const uint64_t n = mono_ns();
    const uint64_t b = rdtsc();
    if (b - a < best_w) {
      best_w = b - a;
      best = {a + (b - a) / 2, n};
    }
  }
  return best;
}
}  // namespace

TscClock TscClock::calibrate(int ms) {
  const Pair p0 = tight_pair();
  timespec d{ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&d, nullptr);
  const Pair p1 = tight_pair();
  TscClock c;
  c.hz_ = static_cast<double>(p1.tsc - p0.tsc) * 1e9 / static_cast<double>(p1.ns - p0.ns);
  return c;
}

}  // namespace vl::gen
