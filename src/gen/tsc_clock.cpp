#include "gen/tsc_clock.h"

#include <time.h>

namespace vl::gen {

namespace {
uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
}  // namespace

TscClock TscClock::calibrate(int ms) {
  const uint64_t n0 = mono_ns();
  const uint64_t t0 = rdtsc();
  timespec d{ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&d, nullptr);
  const uint64_t n1 = mono_ns();
  const uint64_t t1 = rdtsc();
  TscClock c;
  c.hz_ = static_cast<double>(t1 - t0) * 1e9 / static_cast<double>(n1 - n0);
  return c;
}

}  // namespace vl::gen
