#pragma once
// The intervals a PMD thread was kept off its CPU (by the kernel or the host), as its own
// loop sees them, and their overlap with a frame's wait (its queue age "on CPU", the figure
// a flush budget is kept on). Single writer: the PMD thread; the control thread reads the
// totals. Design: docs/architecture.md, "Output batching and flush".
#include <atomic>
#include <cstdint>

#include "dp/flush.h"

namespace vl::dp {

/// Gaps between two passes longer than this are time off the CPU (ns): the code between
/// them is a few loads and a pause.
inline constexpr uint64_t kOffCpuMinNs = 1'000;

/// The work of one pass, for its bound: rxqs polled, frames taken and delivered, their
/// bytes, and the batches delivered (each may notify its receiver: a syscall).
struct PassWork {
  uint64_t polls = 0, frames = 0, bytes = 0, batches = 0;
};

/// The most a pass doing `w` can take, generously (1 us + 0.25 us an rxq polled + 0.5 us a
/// frame + 1 ns a byte + 2 us a delivered batch, several times what each costs here even
/// with every line missing in cache): a pass that took longer was off its CPU for the
/// excess (ns).
inline uint64_t pass_work_bound_ns(const PassWork& w) {
  return kOffCpuMinNs + w.polls * 250 + w.frames * 500 + w.bytes + w.batches * 2000;
}

/// The recent intervals (ns of one monotonic clock: tsc_now_ns()) and the totals.
class OffCpuLog {
 public:
  static constexpr uint32_t kRecent = 16;

  /// Records [start_ns, end_ns), a time the thread did not run (start_ns < end_ns, and not
  /// before the last interval recorded).
  void record(uint64_t start_ns, uint64_t end_ns) {
    const uint64_t d = end_ns - start_ns;
    start_[next_ % kRecent] = start_ns;
    end_[next_ % kRecent] = end_ns;
    ++next_;
    count_.store(count_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    total_ns_.store(total_ns_.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
    if (d > max_ns_.load(std::memory_order_relaxed)) max_ns_.store(d, std::memory_order_relaxed);
    lengths_.add(d);
  }

  /// ns of [from_ns, to_ns) the recent intervals cover (0 when the newest ended before
  /// from_ns: one load and compare in the common case). Intervals older than the last
  /// kRecent are not counted (the result is then short, never long).
  uint64_t overlap(uint64_t from_ns, uint64_t to_ns) const {
    uint64_t sum = 0;
    for (uint32_t k = 0; k < kRecent && k < next_; ++k) {
      const uint32_t i = (next_ - 1 - k) % kRecent;
      if (end_[i] <= from_ns) break;  // this one and every older one ended before
      const uint64_t a = start_[i] > from_ns ? start_[i] : from_ns;
      const uint64_t b = end_[i] < to_ns ? end_[i] : to_ns;
      if (b > a) sum += b - a;
    }
    return sum;
  }

  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  uint64_t total_ns() const { return total_ns_.load(std::memory_order_relaxed); }
  uint64_t max_ns() const { return max_ns_.load(std::memory_order_relaxed); }
  /// The intervals' lengths, in QueueAgeStats's log2 buckets (for a per-trial maximum).
  const QueueAgeStats& lengths() const { return lengths_; }

 private:
  uint64_t start_[kRecent] = {};
  uint64_t end_[kRecent] = {};
  uint32_t next_ = 0;
  std::atomic<uint64_t> count_{0}, total_ns_{0}, max_ns_{0};
  QueueAgeStats lengths_;
};

}  // namespace vl::dp
