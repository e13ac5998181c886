#pragma once
// Latency statistics: exact min/max/mean and a log-linear histogram for percentiles.
// Buckets: values below 64 ns have one bucket per ns; above, each power of two is split in
// 32 equal buckets, so a percentile is off by at most 1/32 (3.1%) of its value. Covers up
// to 2^40 ns (18 minutes). Fixed size (no allocation while recording).
#include <array>
#include <cstdint>
#include <vector>

namespace vl::gen {

class LatencyHistogram {
 public:
  static constexpr int kSub = 32;
  static constexpr int kMaxExp = 40;
  static constexpr int kBuckets = 64 + (kMaxExp - 6) * kSub;

  void record(uint64_t ns) {
    ++count_;
    sum_ += ns;
    if (ns < min_) min_ = ns;
    if (ns > max_) max_ = ns;
    ++b_[bucket(ns)];
  }
  uint64_t count() const { return count_; }
  uint64_t min() const { return count_ ? min_ : 0; }
  uint64_t max() const { return max_; }
  double mean() const { return count_ ? static_cast<double>(sum_) / static_cast<double>(count_) : 0; }
  /// The value at quantile q (0..1): the upper edge of the bucket holding it, capped at max.
  uint64_t percentile(double q) const;
  void merge(const LatencyHistogram& o);
  /// Non-empty buckets as (upper edge ns, count), for plots.
  std::vector<std::pair<uint64_t, uint64_t>> buckets() const;

  static int bucket(uint64_t ns) {
    if (ns < 64) return static_cast<int>(ns);
    int e = 63 - __builtin_clzll(ns);  // 6..63
    if (e >= kMaxExp) return kBuckets - 1;
    const int sub = static_cast<int>((ns >> (e - 5)) & (kSub - 1));
    return 64 + (e - 6) * kSub + sub;
  }
  static uint64_t upper_edge(int b) {
    if (b < 64) return static_cast<uint64_t>(b);
    const int e = 6 + (b - 64) / kSub;
    const uint64_t sub = static_cast<uint64_t>((b - 64) % kSub);
    return (uint64_t{1} << e) + ((sub + 1) << (e - 5)) - 1;
  }

 private:
  uint64_t count_ = 0, sum_ = 0, min_ = UINT64_MAX, max_ = 0;
  std::array<uint64_t, kBuckets> b_{};
};

/// Per-stream receive accounting from sequence numbers: unique frames, duplicates and
/// frames that arrived after a later one (reordered). A bitmap of seen sequence numbers is
/// sized before the trial for the frames that stream will send.
class SequenceTracker {
 public:
  void reset(uint64_t expected_frames);
  /// Counts a received sequence number; true if it is the first copy.
  bool on_frame(uint64_t seq) {
    if (seq >= seen_.size() * 64) {
      ++out_of_range_;
      return false;
    }
    uint64_t& w = seen_[seq >> 6];
    const uint64_t m = uint64_t{1} << (seq & 63);
    if (w & m) {
      ++dups_;
      return false;
    }
    w |= m;
    ++unique_;
    if (seq < max_seen_ && unique_ > 1) ++reordered_;
    if (seq > max_seen_ || unique_ == 1) max_seen_ = seq;
    return true;
  }
  uint64_t unique() const { return unique_; }
  uint64_t duplicates() const { return dups_; }
  uint64_t reordered() const { return reordered_; }
  uint64_t out_of_range() const { return out_of_range_; }

 private:
  std::vector<uint64_t> seen_;
  uint64_t unique_ = 0, dups_ = 0, reordered_ = 0, max_seen_ = 0, out_of_range_ = 0;
};

}  // namespace vl::gen
