#pragma once
// Output batching: the flush policies of the intermediate queues (one per PMD thread and
// output port, dp/forwarder.h) and the decisions of when a queue is delivered. Times are
// arguments (ns of any monotonic clock), so tests/unit/flush_test.cpp uses a fake clock.
// Design: docs/architecture.md, "Output batching and flush".
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "util/clock.h"

namespace vl::dp {

enum class FlushKind : uint8_t { kImmediate, kRxBatch, kInterval, kBudget };

/// Largest US of interval=US and budget=US (one second).
inline constexpr uint32_t kMaxFlushUs = 1000000;

/// A flush policy; `us` is used by kInterval and kBudget only.
struct FlushPolicy {
  FlushKind kind = FlushKind::kRxBatch;
  uint32_t us = 0;

  /// One 64-bit word (for the per-port atomics the control thread writes at run time).
  uint64_t encode() const { return (uint64_t{us} << 8) | static_cast<uint8_t>(kind); }
  static FlushPolicy decode(uint64_t w) {
    return {static_cast<FlushKind>(w & 0xff), static_cast<uint32_t>(w >> 8)};
  }
  /// The policy holds frames across receive bursts (interval, budget).
  bool holds() const { return kind == FlushKind::kInterval || kind == FlushKind::kBudget; }
  bool operator==(const FlushPolicy&) const = default;
};

/// Parses "immediate", "rx-batch", "interval=US", "budget=US" (US an integer in
/// 0..kMaxFlushUs; interval=0 is accepted and behaves as rx-batch). Returns nullopt with
/// `*err` set otherwise.
std::optional<FlushPolicy> parse_flush_policy(std::string_view s, std::string* err);
/// The policy as parse_flush_policy() reads it ("interval=50").
std::string flush_policy_name(FlushPolicy p);

/// Whether a queue of `count` frames must be delivered right after a frame was added to it
/// (immediate, or a full burst of `burst` frames under any policy).
inline bool due_on_enqueue(FlushPolicy p, uint32_t count, uint32_t burst) {
  return p.kind == FlushKind::kImmediate || count >= burst;
}

/// Whether a queue must be delivered at the end of the receive burst that added to it.
/// `loaded`: the thread's bursts are at least half full (budget=US then acts as rx-batch:
/// its bursts are big already, and holding would cost more per frame than it saves).
inline bool due_at_burst_end(FlushPolicy p, bool loaded = false) {
  return !p.holds() || (p.kind == FlushKind::kInterval && p.us == 0) ||
         (p.kind == FlushKind::kBudget && loaded);
}

/// Whether a burst of `taken` frames (of at most `burst`) counts as loaded for the next.
inline bool loaded_burst(uint32_t taken, uint32_t burst) { return 2 * taken >= burst; }

/// budget=US delivers this much before the predicted last moment (ns): the delivery
/// itself, and the time off the CPU too short to be told from work (dp/off_cpu.h).
inline constexpr uint64_t kBudgetSlackNs = 1'000;

/// Whether a held queue whose oldest frame entered it at `oldest_ns` must be delivered at a
/// check at `now_ns`. `gap_ns`: the expected time until the next check (budget only).
inline bool due_at_check(FlushPolicy p, uint64_t oldest_ns, uint64_t now_ns, uint64_t gap_ns) {
  const uint64_t age = now_ns > oldest_ns ? now_ns - oldest_ns : 0;
  const uint64_t limit = uint64_t{p.us} * 1000;
  switch (p.kind) {
    case FlushKind::kImmediate:
    case FlushKind::kRxBatch: return true;
    case FlushKind::kInterval: return age >= limit;
    case FlushKind::kBudget: return age + gap_ns + kBudgetSlackNs >= limit;
  }
  return true;
}

/// Predicts the time between two deadline checks of a PMD thread: the largest of twice an
/// exponentially weighted mean (weight 1/8) of the recent gaps, the last gap, and the
/// longest gap of the last few ms (halved every ms since it was seen), so that a budget is
/// kept when most loops are short and some (a delivery, a burst) are several times longer.
/// Gaps are counted less the time the thread was kept off its CPU within them (`off_ns`:
/// dp/off_cpu.h; a budget is kept on CPU). Times in ns.
class CheckGapEstimator {
 public:
  static constexpr uint64_t kPeakHalfLifeNs = 1'000'000;
  /// Records a check at `now_ns`; `fresh`: the previous check is unrelated (the queues
  /// were empty in between), so no gap is measured.
  void check(uint64_t now_ns, bool fresh, uint64_t off_ns = 0) {
    if (!fresh && last_ns_ && now_ns > last_ns_) {
      const uint64_t raw = now_ns - last_ns_;
      const uint64_t g = raw > off_ns ? raw - off_ns : 0;
      ewma_ns_ = ewma_ns_ ? ewma_ns_ - (ewma_ns_ >> 3) + (g >> 3) : g;
      last_gap_ns_ = g;
      const uint64_t halvings = (now_ns - peak_t_) / kPeakHalfLifeNs;
      const uint64_t decayed = halvings < 64 ? peak_ns_ >> halvings : 0;
      if (g >= decayed) {
        peak_ns_ = g;
        peak_t_ = now_ns;
        peak_now_ = g;
      } else {
        peak_now_ = decayed;
      }
    }
    last_ns_ = now_ns;
  }
  uint64_t predict() const {
    uint64_t p = 2 * ewma_ns_ > last_gap_ns_ ? 2 * ewma_ns_ : last_gap_ns_;
    return p > peak_now_ ? p : peak_now_;
  }
  uint64_t last_check_ns() const { return last_ns_; }

 private:
  uint64_t last_ns_ = 0;
  uint64_t ewma_ns_ = 0;
  uint64_t last_gap_ns_ = 0;
  uint64_t peak_ns_ = 0, peak_t_ = 0, peak_now_ = 0;
};

/// Queue age (ns from the moment a frame was taken from its sender's transmit queue to the
/// start of its delivery into the output port's receive queue) of one output port as seen
/// by one PMD thread: the maximum and a log2 histogram. Single writer (the PMD thread),
/// read by the control thread with relaxed loads.
struct QueueAgeStats {
  /// Bucket b counts ages below 2^(b+8) ns (bucket 0: below 256 ns); the last bucket
  /// counts everything above the one before it.
  static constexpr uint32_t kBuckets = 24;
  static uint64_t upper_edge_ns(uint32_t b) { return uint64_t{1} << (b + 8); }
  static uint32_t bucket(uint64_t age_ns) {
    if (age_ns < 256) return 0;
    const uint32_t b = static_cast<uint32_t>(64 - __builtin_clzll(age_ns)) - 8;
    return b < kBuckets ? b : kBuckets - 1;
  }
  std::atomic<uint64_t> max_ns{0};
  std::atomic<uint64_t> hist[kBuckets] = {};
  std::atomic<uint64_t> sum_ns{0};  ///< of every frame's age (a Prometheus histogram's _sum)

  void add(uint64_t age_ns, uint64_t n = 1) {
    std::atomic<uint64_t>& h = hist[bucket(age_ns)];
    h.store(h.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    sum_ns.store(sum_ns.load(std::memory_order_relaxed) + age_ns * n, std::memory_order_relaxed);
    if (age_ns > max_ns.load(std::memory_order_relaxed))
      max_ns.store(age_ns, std::memory_order_relaxed);
  }
};

/// The clock of the intermediate queues: tsc_now_ns() and its calibrate_tsc_ns()
/// (util/clock.h), named here for the data plane and its tests.
using vl::calibrate_tsc_ns;
using vl::tsc_now_ns;

}  // namespace vl::dp
