// Core-to-core cache-line round trip: two threads pinned to CPUs A and B pass one 64-byte
// line back and forth (each waits for the other's store, then stores). On a virtual machine
// the host may run our two vCPUs on cores that share an L3 (near) or not (far); every ring
// and buffer line the switch and its traffic side share costs a transfer, so a switch's
// cycles per frame move with this figure (bench/README.md "Core placement").
//
// Run: build/bench/micro/core_to_core [A B [ROUND_TRIPS]]   (defaults 0 1 20000)
// Prints one JSON object: {"cpus": [A, B], "round_trips": N, "round_trip_cycles": C}
// (TSC cycles per round trip, the median of 5 rounds). Exit 1 if a CPU cannot be used.
#include <pthread.h>
#include <sched.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

alignas(64) std::atomic<uint64_t> g_line{0};

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

/// TSC cycles per round trip over `n` round trips between the calling thread (on `a`) and a
/// helper thread (on `b`); 0 if a CPU cannot be used.
double round_trip(int a, int b, uint64_t n) {
  g_line.store(0);
  std::atomic<bool> ok{true};
  std::thread echo([&] {
    if (!pin(b)) {
      ok = false;
      g_line.store(~uint64_t{0});
      return;
    }
    for (uint64_t i = 1; i < 2 * n; i += 2) {
      uint64_t v;
      while ((v = g_line.load(std::memory_order_acquire)) != i) {
        if (v == ~uint64_t{0}) return;  // the other side gave up
      }
      g_line.store(i + 1, std::memory_order_release);
    }
  });
  if (!pin(a)) ok = false;
  const uint64_t t0 = __rdtsc();
  for (uint64_t i = 0; i < 2 * n && ok; i += 2) {
    g_line.store(i + 1, std::memory_order_release);
    uint64_t v;
    while ((v = g_line.load(std::memory_order_acquire)) != i + 2 && v != ~uint64_t{0}) {
    }
    if (v == ~uint64_t{0}) ok = false;
  }
  const uint64_t t1 = __rdtsc();
  if (!ok) {
    g_line.store(~uint64_t{0});  // releases the helper if it waits
  }
  echo.join();
  return ok ? static_cast<double>(t1 - t0) / static_cast<double>(n) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
    std::printf("usage: core_to_core [A B [ROUND_TRIPS]]   (defaults 0 1 20000)\n"
                "Passes one cache line between CPUs A and B; prints the TSC cycles per round "
                "trip,\nthe median of 5 rounds, as JSON (bench/README.md \"Core placement\").\n");
    return 0;
  }
  const int a = argc > 1 ? std::atoi(argv[1]) : 0;
  const int b = argc > 2 ? std::atoi(argv[2]) : 1;
  const uint64_t n = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 20000;
  if (a == b || n == 0) {
    std::fprintf(stderr, "usage: core_to_core [A B [ROUND_TRIPS]] (two different CPUs)\n");
    return 2;
  }
  double r[5];
  for (double& x : r) {
    x = round_trip(a, b, n);
    if (x == 0) {
      std::fprintf(stderr, "core_to_core: cannot pin to CPU %d and %d\n", a, b);
      return 1;
    }
  }
  std::sort(r, r + 5);
  std::printf("{\"cpus\": [%d, %d], \"round_trips\": %llu, \"round_trip_cycles\": %.0f}\n", a, b,
              static_cast<unsigned long long>(n), r[2]);
  return 0;
}
