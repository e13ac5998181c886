#include "gen/latency.h"

#include <algorithm>

namespace vl::gen {

uint64_t LatencyHistogram::percentile(double q) const {
  if (!count_) return 0;
  const auto target = static_cast<uint64_t>(q * static_cast<double>(count_ - 1)) + 1;
  uint64_t acc = 0;
  for (int i = 0; i < kBuckets; ++i) {
    acc += b_[i];
    if (acc >= target) return std::min(upper_edge(i), max_);
  }
  return max_;
}

void LatencyHistogram::merge(const LatencyHistogram& o) {
  count_ += o.count_;
  sum_ += o.sum_;
  min_ = std::min(min_, o.min_);
  max_ = std::max(max_, o.max_);
  for (int i = 0; i < kBuckets; ++i) b_[i] += o.b_[i];
}

std::vector<std::pair<uint64_t, uint64_t>> LatencyHistogram::buckets() const {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (int i = 0; i < kBuckets; ++i)
    if (b_[i]) out.emplace_back(upper_edge(i), b_[i]);
  return out;
}

void SequenceTracker::reset(uint64_t expected) {
  seen_.assign(expected / 64 + 2, 0);
  unique_ = dups_ = reordered_ = max_seen_ = out_of_range_ = 0;
}

}  // namespace vl::gen
