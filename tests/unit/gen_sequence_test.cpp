// Per-stream receive accounting of the generator (gen/latency.h SequenceTracker): frames in
// order, lost (offered - unique, as GenResult reports it), reordered, duplicated, and
// sequence numbers beyond the stream's bitmap (out of range). Exact counters only.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "gen/latency.h"

namespace vl::gen {
namespace {

struct Counts {
  uint64_t unique, dups, reordered, out_of_range;
  bool operator==(const Counts&) const = default;
};
Counts counts(const SequenceTracker& t) {
  return {t.unique(), t.duplicates(), t.reordered(), t.out_of_range()};
}
std::ostream& operator<<(std::ostream& o, const Counts& c) {
  return o << "unique " << c.unique << " dups " << c.dups << " reordered " << c.reordered
           << " out_of_range " << c.out_of_range;
}

// Feeds `seqs`; returns how many on_frame() calls said "first copy".
uint64_t feed(SequenceTracker* t, const std::vector<uint64_t>& seqs) {
  uint64_t first = 0;
  for (uint64_t s : seqs) first += t->on_frame(s);
  return first;
}

TEST(GenSequence, InOrder) {
  SequenceTracker t;
  t.reset(1000);
  std::vector<uint64_t> seqs;
  for (uint64_t i = 0; i < 1000; ++i) seqs.push_back(i);
  EXPECT_EQ(feed(&t, seqs), 1000u);
  EXPECT_EQ(counts(t), (Counts{1000, 0, 0, 0}));
}

TEST(GenSequence, LostFramesAreTheUnseenOnes) {
  SequenceTracker t;
  t.reset(100);
  std::vector<uint64_t> seqs;
  for (uint64_t i = 0; i < 100; ++i)
    if (i % 10 != 3) seqs.push_back(i);  // 10 lost: 3, 13, ..., 93
  feed(&t, seqs);
  EXPECT_EQ(counts(t), (Counts{90, 0, 0, 0}));  // a gap is not a reordering
  const uint64_t offered = 100;
  EXPECT_EQ(offered - t.unique(), 10u);  // GenResult's `lost`
}

TEST(GenSequence, LostTail) {
  SequenceTracker t;
  t.reset(64);
  feed(&t, {0, 1, 2, 3});
  EXPECT_EQ(counts(t), (Counts{4, 0, 0, 0}));
}

TEST(GenSequence, Reordered) {
  SequenceTracker t;
  t.reset(100);
  // 2 arrives after 3, 5 and 6 after 7: three frames behind a later one.
  EXPECT_EQ(feed(&t, {0, 1, 3, 2, 4, 7, 5, 6, 8}), 9u);
  EXPECT_EQ(counts(t), (Counts{9, 0, 3, 0}));
}

TEST(GenSequence, ReorderedFirstFrame) {
  SequenceTracker t;
  t.reset(100);
  feed(&t, {5, 0, 1, 6});  // 0 and 1 after 5
  EXPECT_EQ(counts(t), (Counts{4, 0, 2, 0}));
}

TEST(GenSequence, FirstFrameIsSeqZeroAfterALaterOne) {
  // The first frame sets the high mark even when it is 0.
  SequenceTracker t;
  t.reset(100);
  feed(&t, {0, 2, 1});
  EXPECT_EQ(counts(t), (Counts{3, 0, 1, 0}));
}

TEST(GenSequence, Duplicates) {
  SequenceTracker t;
  t.reset(100);
  EXPECT_TRUE(t.on_frame(0));
  EXPECT_TRUE(t.on_frame(1));
  EXPECT_FALSE(t.on_frame(1));  // a second copy: not counted again, no latency sample
  EXPECT_FALSE(t.on_frame(0));  // an old duplicate is a duplicate, not a reordering
  EXPECT_TRUE(t.on_frame(2));
  EXPECT_FALSE(t.on_frame(2));
  EXPECT_FALSE(t.on_frame(2));
  EXPECT_EQ(counts(t), (Counts{3, 4, 0, 0}));
}

TEST(GenSequence, DuplicateOfAReorderedFrame) {
  SequenceTracker t;
  t.reset(100);
  feed(&t, {0, 2, 1, 1});
  EXPECT_EQ(counts(t), (Counts{3, 1, 1, 0}));
}

TEST(GenSequence, BitmapWordEdges) {
  SequenceTracker t;
  t.reset(200);
  feed(&t, {63, 64, 127, 128, 0});
  EXPECT_EQ(counts(t), (Counts{5, 0, 1, 0}));
  EXPECT_FALSE(t.on_frame(64));
  EXPECT_FALSE(t.on_frame(63));
  EXPECT_EQ(t.duplicates(), 2u);
}

TEST(GenSequence, OutOfRange) {
  // reset(n) keeps n / 64 + 2 words: 100 -> 3 words, sequence numbers 0..191.
  SequenceTracker t;
  t.reset(100);
  EXPECT_TRUE(t.on_frame(191));
  EXPECT_FALSE(t.on_frame(192));
  EXPECT_FALSE(t.on_frame(UINT64_MAX));  // e.g. a corrupted trailer
  EXPECT_EQ(counts(t), (Counts{1, 0, 0, 2}));
}

TEST(GenSequence, ResetStartsOver) {
  SequenceTracker t;
  t.reset(100);
  feed(&t, {0, 2, 1, 1, 500});
  EXPECT_EQ(counts(t), (Counts{3, 1, 1, 1}));
  t.reset(100);
  EXPECT_EQ(counts(t), (Counts{0, 0, 0, 0}));
  EXPECT_TRUE(t.on_frame(1));  // not a duplicate of the previous trial's 1
  EXPECT_TRUE(t.on_frame(0));  // reordered relative to this trial's 1 only
  EXPECT_EQ(counts(t), (Counts{2, 0, 1, 0}));
}

TEST(GenSequence, Empty) {
  SequenceTracker t;
  t.reset(0);  // two words still: 0..127
  EXPECT_EQ(counts(t), (Counts{0, 0, 0, 0}));
  EXPECT_TRUE(t.on_frame(127));
  EXPECT_FALSE(t.on_frame(128));
  EXPECT_EQ(counts(t), (Counts{1, 0, 0, 1}));
}

}  // namespace
}  // namespace vl::gen
