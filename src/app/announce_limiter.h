#pragma once
// SEND_RARP announcements, bounded per port. Each one makes the control thread learn a MAC
// and send a broadcast RARP on every uplink and tunnel of the guest's VLAN (app/switch.cpp
// announce); QEMU sends a few after a migration (announce-rounds, 5 by default, spread over
// about a second), but a front-end may send them in a loop (33,000 a second measured, each
// a frame on every uplink): a token bucket per port lets kBurst through at once and
// kPerSecond after that; the rest are counted and not announced (the MAC is still learned).
#include <algorithm>
#include <cstdint>

#include "port/counters.h"

namespace vl::app {

class AnnounceLimiter {
 public:
  static constexpr uint64_t kBurst = 16;
  static constexpr uint64_t kPerSecond = 8;

  /// True if port `port` may announce now (`now_ms`: a monotonic clock in ms).
  bool allow(uint32_t port, uint64_t now_ms) {
    if (port >= port::kMaxPorts) return false;
    Bucket& b = buckets_[port];
    if (!b.started) {
      b.started = true;
      b.milli = kBurst * 1000;
      b.last_ms = now_ms;
    }
    // kPerSecond tokens a second: kPerSecond thousandths of one a millisecond.
    const uint64_t dt = now_ms > b.last_ms ? now_ms - b.last_ms : 0;
    b.milli = std::min(kBurst * 1000, b.milli + std::min<uint64_t>(dt, kBurst * 1000) * kPerSecond);
    b.last_ms = now_ms;
    if (b.milli < 1000) {
      ++limited_;
      return false;
    }
    b.milli -= 1000;
    ++allowed_;
    return true;
  }
  uint64_t allowed() const { return allowed_; }
  uint64_t limited() const { return limited_; }

 private:
  struct Bucket {
    bool started = false;
    uint64_t milli = 0;  ///< tokens, in thousandths
    uint64_t last_ms = 0;
  };
  Bucket buckets_[port::kMaxPorts];
  uint64_t allowed_ = 0;
  uint64_t limited_ = 0;
};

}  // namespace vl::app
