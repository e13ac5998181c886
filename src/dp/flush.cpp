#include "dp/flush.h"

#include <time.h>

#include <charconv>

#include <fmt/format.h>

namespace vl::dp {

std::optional<FlushPolicy> parse_flush_policy(std::string_view s, std::string* err) {
  if (s == "immediate") return FlushPolicy{FlushKind::kImmediate, 0};
  if (s == "rx-batch") return FlushPolicy{FlushKind::kRxBatch, 0};
  FlushKind kind;
  std::string_view num;
  if (s.starts_with("interval=")) {
    kind = FlushKind::kInterval;
    num = s.substr(9);
  } else if (s.starts_with("budget=")) {
    kind = FlushKind::kBudget;
    num = s.substr(7);
  } else {
    *err = fmt::format("flush policy '{}': expected immediate, rx-batch, interval=US or budget=US",
                       s);
    return std::nullopt;
  }
  uint64_t us = 0;
  const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), us);
  if (num.empty() || ec != std::errc{} || end != num.data() + num.size() || us > kMaxFlushUs) {
    *err = fmt::format("flush policy '{}': US must be an integer number of microseconds in 0..{}",
                       s, kMaxFlushUs);
    return std::nullopt;
  }
  if (kind == FlushKind::kBudget && us == 0) {
    *err = fmt::format("flush policy '{}': a budget must be at least 1 us (or use immediate)", s);
    return std::nullopt;
  }
  return FlushPolicy{kind, static_cast<uint32_t>(us)};
}

std::string flush_policy_name(FlushPolicy p) {
  switch (p.kind) {
    case FlushKind::kImmediate: return "immediate";
    case FlushKind::kRxBatch: return "rx-batch";
    case FlushKind::kInterval: return fmt::format("interval={}", p.us);
    case FlushKind::kBudget: return fmt::format("budget={}", p.us);
  }
  return "?";
}

namespace {
uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
// ns = base_ns + ((tsc - base_tsc) * mult) >> 32; mult 0 until calibrated.
std::atomic<uint64_t> g_mult{0};
uint64_t g_base_tsc = 0, g_base_ns = 0;
}  // namespace

uint64_t tsc_now_ns() {
  const uint64_t m = g_mult.load(std::memory_order_acquire);
  if (!m) [[unlikely]] return mono_ns();
  const uint64_t d = __builtin_ia32_rdtsc() - g_base_tsc;
  return g_base_ns + static_cast<uint64_t>((static_cast<unsigned __int128>(d) * m) >> 32);
}

void calibrate_tsc_ns() {
  if (g_mult.load(std::memory_order_acquire)) return;
  const uint64_t n0 = mono_ns(), t0 = __builtin_ia32_rdtsc();
  timespec ts{0, 10000000};
  nanosleep(&ts, nullptr);
  const uint64_t n1 = mono_ns(), t1 = __builtin_ia32_rdtsc();
  if (t1 <= t0 || n1 <= n0) return;  // keep CLOCK_MONOTONIC
  g_base_tsc = t1;
  g_base_ns = n1;
  const double ns_per_tick = static_cast<double>(n1 - n0) / static_cast<double>(t1 - t0);
  g_mult.store(static_cast<uint64_t>(ns_per_tick * 4294967296.0), std::memory_order_release);
}

}  // namespace vl::dp
