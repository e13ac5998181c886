#include "util/clock.h"

#include <atomic>
#include <cmath>

namespace vl {

namespace {
// One (TSC, clock) pair read as close together as possible: the TSC is read before and
// after the clock, and of a few tries the one with the narrowest bracket is kept (an
// interrupt or preemption between the reads would otherwise skew the rate; under load one
// preemption in a 50 ms calibration is a 10% error).
struct Pair {
  uint64_t tsc, ns;
};
template <uint64_t (*Clock)()>
Pair tight_pair() {
  Pair best{0, 0};
  uint64_t best_w = UINT64_MAX;
  for (int i = 0; i < 16; ++i) {
    const uint64_t a = rdtsc();
    const uint64_t n = Clock();
    const uint64_t b = rdtsc();
    if (b - a < best_w) {
      best_w = b - a;
      best = {a + (b - a) / 2, n};
    }
  }
  return best;
}

// tsc_now_ns(): ns = base_ns + ((tsc - base_tsc) * mult) >> 32; mult 0 until calibrated.
std::atomic<uint64_t> g_mult{0};
uint64_t g_base_tsc = 0, g_base_ns = 0;
}  // namespace

TscClock TscClock::calibrate(int ms) {
  const Pair p0 = tight_pair<mono_raw_ns>();
  timespec d{ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&d, nullptr);
  const Pair p1 = tight_pair<mono_raw_ns>();
  TscClock c;
  c.hz_ = static_cast<double>(p1.tsc - p0.tsc) * 1e9 / static_cast<double>(p1.ns - p0.ns);
  return c;
}

uint64_t tsc_now_ns() {
  const uint64_t m = g_mult.load(std::memory_order_acquire);
  if (!m) [[unlikely]] return mono_ns();
  const uint64_t d = rdtsc() - g_base_tsc;
  return g_base_ns + static_cast<uint64_t>((static_cast<unsigned __int128>(d) * m) >> 32);
}

uint64_t tsc_to_ns(uint64_t tsc) {
  const uint64_t m = g_mult.load(std::memory_order_acquire);
  if (!m || tsc < g_base_tsc) return 0;
  return g_base_ns + static_cast<uint64_t>((static_cast<unsigned __int128>(tsc - g_base_tsc) * m) >> 32);
}

uint64_t tsc_ticks_per_us() {
  const uint64_t m = g_mult.load(std::memory_order_acquire);
  return m ? (uint64_t{1000} << 32) / m : 0;
}

void calibrate_tsc_ns() {
  if (g_mult.load(std::memory_order_acquire)) return;
  const double hz = TscClock::calibrate(10).hz();
  if (!(hz > 0) || !std::isfinite(hz)) return;  // keep CLOCK_MONOTONIC
  const Pair base = tight_pair<mono_ns>();
  g_base_tsc = base.tsc;
  g_base_ns = base.ns;
  g_mult.store(static_cast<uint64_t>(1e9 / hz * 4294967296.0), std::memory_order_release);
}

}  // namespace vl
