#include "util/log.h"

#include "util/clock.h"

namespace vl {

void set_log_level(const char* name) {
  spdlog::set_level(spdlog::level::from_str(name));
}

bool RateLimiter::allow(uint64_t* suppressed) {
  const uint64_t now = mono_coarse_s();
  uint64_t win = window_s_.load(std::memory_order_relaxed);
  if (win != now && window_s_.compare_exchange_strong(win, now, std::memory_order_relaxed)) {
    used_.store(0, std::memory_order_relaxed);
  }
  if (used_.fetch_add(1, std::memory_order_relaxed) < burst_) {
    *suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
    return true;
  }
  suppressed_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

}  // namespace vl
