// The lock-free handoff ring between PMD threads (dp/handoff.h): records in order, intact,
// never wrapping inside a record, refused when full, and safe with a producer and a consumer
// on two threads.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "dp/handoff.h"

namespace vl {
namespace {

using dp::HandoffRecord;
using dp::HandoffRing;

/// A frame of `len` bytes whose content encodes `seq` (checked by check_frame).
std::vector<uint8_t> make_frame(uint32_t seq, uint32_t len) {
  std::vector<uint8_t> f(len);
  for (uint32_t i = 0; i < len; ++i) f[i] = static_cast<uint8_t>(seq * 7 + i);
  return f;
}

bool check_frame(const uint8_t* d, uint32_t seq, uint32_t len) {
  for (uint32_t i = 0; i < len; ++i)
    if (d[i] != static_cast<uint8_t>(seq * 7 + i)) return false;
  return true;
}

bool push(HandoffRing& r, uint32_t seq, uint32_t len, uint32_t split = 0) {
  auto f = make_frame(seq, len);
  virtio::NetHdr h{};
  h.gso_size = static_cast<uint16_t>(seq);
  if (split && split < len) {  // two segments, as a frame from a chain of two buffers
    virtio::Segment s[2] = {{f.data(), split}, {f.data() + split, len - split}};
    return r.push(s, 2, len, h, 3, 1, 2, seq, seq * 10ull);
  }
  virtio::Segment s{f.data(), len};
  return r.push(&s, 1, len, h, 3, 1, 2, seq, seq * 10ull);
}

TEST(HandoffRing, RecordsArriveInOrderIntactOnlyAfterPublish) {
  HandoffRing r;
  EXPECT_FALSE(r.has_records());
  for (uint32_t i = 0; i < 10; ++i) ASSERT_TRUE(push(r, i, 60 + i * 100, i % 3 ? 17 : 0));
  EXPECT_FALSE(r.has_records()) << "visible before publish()";
  r.publish();
  EXPECT_TRUE(r.has_records());
  uint32_t next = 0;
  EXPECT_EQ(r.visit([&](const HandoffRecord& rec, const uint8_t* d) {
              EXPECT_EQ(rec.len, 60 + next * 100);
              EXPECT_EQ(rec.gen, next);
              EXPECT_EQ(rec.port, 3);
              EXPECT_EQ(rec.queue, 1);
              EXPECT_EQ(rec.src, 2);
              EXPECT_EQ(rec.t_ns, next * 10ull);
              EXPECT_EQ(rec.hdr.gso_size, next);
              EXPECT_TRUE(check_frame(d, next, rec.len)) << next;
              EXPECT_EQ(reinterpret_cast<uintptr_t>(&rec) % HandoffRing::kAlign, 0u);
              ++next;
            }),
            10u);
  EXPECT_EQ(next, 10u);
  r.release();
  EXPECT_FALSE(r.has_records());
  EXPECT_EQ(r.visit([](const HandoffRecord&, const uint8_t*) { FAIL(); }), 0u);
}

TEST(HandoffRing, FullRingRefusesUntilTheConsumerReleases) {
  HandoffRing r;
  const uint32_t len = 1518;
  uint32_t n = 0;
  while (push(r, n, len)) ++n;
  // The ring's bytes in 1600-byte records (40-byte header + 1518, rounded up to 64).
  EXPECT_EQ(n, HandoffRing::kBytes / 1600);
  r.publish();
  EXPECT_FALSE(push(r, n, len));
  // Visiting alone frees nothing; release() does.
  uint32_t seen = r.visit([](const HandoffRecord&, const uint8_t*) {});
  EXPECT_EQ(seen, n);
  EXPECT_FALSE(push(r, n, len));
  r.release();
  EXPECT_TRUE(push(r, n, len));
  // A frame larger than half the ring is never accepted.
  EXPECT_FALSE(push(r, 0, HandoffRing::kBytes / 2));
}

TEST(HandoffRing, RecordsNeverWrapAndSizesMixAcrossManyLaps) {
  HandoffRing r;
  uint32_t pushed = 0, got = 0;
  const uint32_t sizes[] = {60, 1518, 9000, 65535 + 14, 128, 4000};
  for (uint32_t round = 0; round < 2000; ++round) {
    for (uint32_t k = 0; k < 3; ++k) {
      const uint32_t len = sizes[(pushed * 5 + k) % 6];
      if (push(r, pushed, len, len > 100 ? len / 3 : 0)) ++pushed;
    }
    r.publish();
    r.visit([&](const HandoffRecord& rec, const uint8_t* d) {
      EXPECT_EQ(rec.gen, got);
      EXPECT_TRUE(check_frame(d, got, rec.len)) << got;
      ++got;
    });
    if (round % 3 == 0) r.release();  // the consumer sometimes lags a batch
  }
  r.release();
  EXPECT_EQ(got, pushed);
  EXPECT_GT(pushed, 4000u);  // several laps of the ring (about 13 KB a frame on average)
}

TEST(HandoffRing, ProducerAndConsumerThreads) {
  std::atomic<bool> sleeping{false};
  HandoffRing r(&sleeping, -1);
  constexpr uint32_t kFrames = 200000;
  std::atomic<bool> bad{false};
  std::thread consumer([&] {
    uint32_t got = 0;
    while (got < kFrames) {
      if (!r.has_records()) continue;
      r.visit([&](const HandoffRecord& rec, const uint8_t* d) {
        if (rec.gen != got || !check_frame(d, got, rec.len)) bad = true;
        ++got;
      });
      r.release();
    }
  });
  uint32_t sent = 0;
  while (sent < kFrames) {
    uint32_t batch = 0;
    while (batch < 32 && sent < kFrames && push(r, sent, 64 + (sent % 7) * 200)) {
      ++sent;
      ++batch;
    }
    r.publish();
  }
  consumer.join();
  EXPECT_FALSE(bad.load());
}

}  // namespace
}  // namespace vl
