#pragma once
// Logging: spdlog to stderr, and VL_LOG_RL, the rate-limited log for anything whose
// frequency a front-end controls. docs/architecture.md, "The vhost-user back-end".
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdint>

namespace vl {

/// Sets the global level from a name: trace, debug, info, warn, error, off.
void set_log_level(const char* name);

/// Per-call-site token bucket: allows `burst` messages per second.
class RateLimiter {
 public:
  explicit constexpr RateLimiter(uint32_t burst = 5) : burst_(burst) {}
  /// Returns true if the caller may log now; `*suppressed` receives the number of
  /// messages dropped since the last allowed one. Thread-safe (relaxed; approximate).
  bool allow(uint64_t* suppressed);

 private:
  uint32_t burst_;
  std::atomic<uint64_t> window_s_{0};
  std::atomic<uint32_t> used_{0};
  std::atomic<uint64_t> suppressed_{0};
};

}  // namespace vl

#define VL_LOG_RL(level, ...)                                                   \
  do {                                                                          \
    static ::vl::RateLimiter vl_rl_;                                            \
    uint64_t vl_sup_ = 0;                                                       \
    if (spdlog::should_log(level) && vl_rl_.allow(&vl_sup_)) {                  \
      if (vl_sup_) spdlog::log(level, "({} similar messages suppressed)", vl_sup_); \
      spdlog::log(level, __VA_ARGS__);                                          \
    }                                                                           \
  } while (0)
