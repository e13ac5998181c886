// The generator's latency statistics (gen/latency.h LatencyHistogram), in ns: bucket edges
// (one per ns below 64, then 32 per power of two up to 2^40), percentiles (upper edge of
// the bucket, capped at the maximum), exact min / max / mean, merge and the non-empty
// buckets the JSON carries.
#include <gtest/gtest.h>

#include <cstdint>

#include "gen/latency.h"

namespace vl::gen {
namespace {

using H = LatencyHistogram;

TEST(GenLatency, BucketsBelow64AreOneNsWide) {
  for (uint64_t ns = 0; ns < 64; ++ns) {
    EXPECT_EQ(H::bucket(ns), static_cast<int>(ns));
    EXPECT_EQ(H::upper_edge(static_cast<int>(ns)), ns);
  }
}

TEST(GenLatency, BucketEdgesAbove64) {
  // 64..127: 32 buckets of 2 ns; 128..255: of 4 ns; 1024..2047: of 32 ns.
  EXPECT_EQ(H::bucket(64), 64);
  EXPECT_EQ(H::bucket(65), 64);
  EXPECT_EQ(H::upper_edge(64), 65u);
  EXPECT_EQ(H::bucket(66), 65);
  EXPECT_EQ(H::bucket(127), 95);
  EXPECT_EQ(H::upper_edge(95), 127u);
  EXPECT_EQ(H::bucket(128), 96);
  EXPECT_EQ(H::upper_edge(96), 131u);
  EXPECT_EQ(H::bucket(131), 96);
  EXPECT_EQ(H::bucket(132), 97);
  EXPECT_EQ(H::bucket(1024), 64 + 4 * 32);
  EXPECT_EQ(H::upper_edge(64 + 4 * 32), 1024u + 31);
  EXPECT_EQ(H::bucket(1055), 64 + 4 * 32);
  EXPECT_EQ(H::bucket(1056), 64 + 4 * 32 + 1);
  // The last bucket: up to 2^40 - 1 ns; anything longer lands there too.
  EXPECT_EQ(H::upper_edge(H::kBuckets - 1), (uint64_t{1} << 40) - 1);
  EXPECT_EQ(H::bucket((uint64_t{1} << 40) - 1), H::kBuckets - 1);
  EXPECT_EQ(H::bucket(uint64_t{1} << 40), H::kBuckets - 1);
  EXPECT_EQ(H::bucket(UINT64_MAX), H::kBuckets - 1);
}

TEST(GenLatency, EveryValueIsInItsBucket) {
  // Each value is at most its bucket's upper edge and above the previous bucket's, and a
  // bucket is at most 1/32 of its values wide.
  auto check = [](uint64_t ns) {
    const int b = H::bucket(ns);
    ASSERT_GE(b, 0);
    ASSERT_LT(b, H::kBuckets);
    EXPECT_LE(ns, H::upper_edge(b)) << ns;
    if (b > 0) {
      EXPECT_GT(ns, H::upper_edge(b - 1)) << ns;
    }
    if (ns >= 64) {
      EXPECT_LE(H::upper_edge(b) - ns, ns / 32) << ns;
    }
  };
  for (uint64_t ns = 0; ns < 70000; ++ns) check(ns);
  for (int e = 6; e < 40; ++e) {
    const uint64_t p = uint64_t{1} << e;
    for (uint64_t d : {p - 1, p, p + 1, p + p / 2, 2 * p - 1}) check(d);
  }
}

TEST(GenLatency, EmptyIsAllZero) {
  H h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.mean(), 0.0);
  EXPECT_EQ(h.percentile(0.5), 0u);
  EXPECT_EQ(h.percentile(0.99), 0u);
  EXPECT_TRUE(h.buckets().empty());
}

TEST(GenLatency, MinMaxMean) {
  H h;
  for (uint64_t ns : {700, 300, 1000, 500}) h.record(ns);
  EXPECT_EQ(h.count(), 4u);
  EXPECT_EQ(h.min(), 300u);
  EXPECT_EQ(h.max(), 1000u);
  EXPECT_DOUBLE_EQ(h.mean(), 625.0);
  H one;
  one.record(0);
  EXPECT_EQ(one.min(), 0u);
  EXPECT_EQ(one.max(), 0u);
  EXPECT_EQ(one.percentile(1.0), 0u);
}

TEST(GenLatency, PercentilesOf1To100) {
  // The value at quantile q is sample number floor(q x (count - 1)) + 1 in order; the
  // result is its bucket's upper edge, at most the maximum.
  H h;
  for (uint64_t ns = 1; ns <= 100; ++ns) h.record(ns);
  EXPECT_EQ(h.percentile(0.0), 1u);
  EXPECT_EQ(h.percentile(0.5), 50u);   // sample 50: exact below 64
  EXPECT_EQ(h.percentile(0.63), 63u);  // sample 63
  EXPECT_EQ(h.percentile(0.64), 65u);  // sample 64: bucket 64..65
  EXPECT_EQ(h.percentile(0.99), 99u);  // sample 99: bucket 98..99
  EXPECT_EQ(h.percentile(0.999), 99u);
  EXPECT_EQ(h.percentile(1.0), 100u);  // bucket 100..101, capped at the maximum
  EXPECT_DOUBLE_EQ(h.mean(), 50.5);
  EXPECT_EQ(h.min(), 1u);
  EXPECT_EQ(h.max(), 100u);
}

TEST(GenLatency, TailPercentiles) {
  // 989 frames at 1000 ns, 10 at 50 us, one at 2 ms: p99 is sample 990, p99.9 sample 999.
  H h;
  for (int i = 0; i < 989; ++i) h.record(1000);
  for (int i = 0; i < 10; ++i) h.record(50000);
  h.record(2000000);
  EXPECT_EQ(h.percentile(0.5), H::upper_edge(H::bucket(1000)));
  EXPECT_EQ(H::upper_edge(H::bucket(1000)), 1007u);  // 992..1007: 16 ns buckets
  EXPECT_EQ(H::upper_edge(H::bucket(50000)), 50175u);  // 49152..50175: 1024 ns buckets
  EXPECT_EQ(h.percentile(0.989), 1007u);  // sample 989
  EXPECT_EQ(h.percentile(0.99), 50175u);
  EXPECT_EQ(h.percentile(0.999), 50175u);
  EXPECT_EQ(h.percentile(1.0), 2000000u);  // capped at the maximum
  EXPECT_EQ(h.max(), 2000000u);
  EXPECT_DOUBLE_EQ(h.mean(), (989 * 1000.0 + 10 * 50000.0 + 2000000.0) / 1000);
}

TEST(GenLatency, BeyondTheRangeReportsTheLastEdge) {
  H h;
  h.record(uint64_t{1} << 41);
  EXPECT_EQ(h.max(), uint64_t{1} << 41);  // exact
  EXPECT_EQ(h.percentile(0.5), (uint64_t{1} << 40) - 1);  // the histogram's last edge
}

TEST(GenLatency, BucketsListTheNonEmptyOnes) {
  H h;
  h.record(5);
  h.record(5);
  h.record(64);
  h.record(65);
  h.record(1000);
  const auto b = h.buckets();
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], (std::pair<uint64_t, uint64_t>{5, 2}));
  EXPECT_EQ(b[1], (std::pair<uint64_t, uint64_t>{65, 2}));
  EXPECT_EQ(b[2], (std::pair<uint64_t, uint64_t>{1007, 1}));
  uint64_t n = 0;
  for (const auto& [edge, c] : b) n += c;
  EXPECT_EQ(n, h.count());
}

TEST(GenLatency, Merge) {
  H a, b, empty;
  a.record(100);
  a.record(300);
  b.record(50);
  b.record(10000);
  a.merge(b);
  EXPECT_EQ(a.count(), 4u);
  EXPECT_EQ(a.min(), 50u);
  EXPECT_EQ(a.max(), 10000u);
  EXPECT_DOUBLE_EQ(a.mean(), (100 + 300 + 50 + 10000) / 4.0);
  a.merge(empty);  // an empty one changes nothing (its min is not 0)
  EXPECT_EQ(a.count(), 4u);
  EXPECT_EQ(a.min(), 50u);
  empty.merge(b);
  EXPECT_EQ(empty.min(), 50u);
  EXPECT_EQ(empty.max(), 10000u);
  EXPECT_EQ(empty.percentile(1.0), 10000u);
}

}  // namespace
}  // namespace vl::gen
