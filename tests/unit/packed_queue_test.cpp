// PackedDeviceQueue against a fake packed driver: wrap counters, used write-back, event
// suppression (incl. event index), indirect tables, the copy path (deliver_frame over a
// packed receive ring), SET/GET_VRING_BASE encoding, and hostile rings (virtio 1.2 §2.8;
// hostile-inputs.md items 7, 8, 10-13).
#include "virtio/packed_device_queue.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "fake_packed_driver.h"
#include "virtio/net_copy.h"

namespace vl::virtio {
namespace {

using test::ChainOpts;
using test::DescSpec;
using test::FakeMemory;
using test::FakePackedRing;
using test::gather;
using test::make_frame;
using test::with_net_hdr;

constexpr uint64_t kRegion0 = 0x100000;
constexpr uint64_t kFeatures = bit(kFVersion1) | bit(kFRingPacked) | bit(kRingFIndirectDesc);

class PackedQueueTest : public ::testing::Test {
 protected:
  void setup(uint32_t num, uint64_t features = kFeatures) {
    fm.add_region(kRegion0, 4 << 20);
    ring = std::make_unique<FakePackedRing>(fm, num, 0);
    ASSERT_TRUE(fm.build(gm));
    ring->attach(q, gm, features);
  }
  PopStatus pop_tx(Chain* c) { return q.pop<false>(*arena, c); }
  uint64_t buf(uint32_t len) { return fm.alloc(len ? len : 1, 8, 0); }
  /// Publishes and expects exactly one used descriptor for `id` with length `len`.
  void expect_used(uint16_t id, uint32_t len) {
    q.publish_used();
    auto u = ring->next_used();
    ASSERT_TRUE(u.has_value());
    EXPECT_EQ(u->id, id);
    EXPECT_EQ(u->len, len);
  }

  FakeMemory fm;
  GuestMemory gm;
  std::unique_ptr<FakePackedRing> ring;
  PackedDeviceQueue q;
  std::unique_ptr<SegmentArena> arena = std::make_unique<SegmentArena>();
};

TEST_F(PackedQueueTest, EmptyRingHasNothing) {
  setup(8);
  EXPECT_FALSE(q.has_avail());
  EXPECT_EQ(q.pending(), 0);
  Chain c{};
  EXPECT_EQ(pop_tx(&c), PopStatus::kEmpty);
  EXPECT_FALSE(q.publish_used());
}

TEST_F(PackedQueueTest, SingleDescriptorRoundTrip) {
  setup(8);
  const auto bytes = make_frame(100);
  const uint16_t id = ring->add_tx(bytes);
  ASSERT_TRUE(q.has_avail());
  Chain c{};
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  EXPECT_EQ(c.head, id);
  EXPECT_EQ(c.ring_descs, 1);
  EXPECT_EQ(c.len, 100u);
  EXPECT_EQ(gather(*arena, c.seg_begin, c.nsegs), bytes);
  EXPECT_FALSE(q.has_avail());
  // Nothing is visible to the driver before publish_used().
  q.push_used(c.head, 0, c.ring_descs);
  EXPECT_FALSE(ring->next_used().has_value());
  expect_used(id, 0);
}

// The chain's slots, not one per chain, advance both sides; the wrap counters toggle at the
// end of the ring on both sides, many laps over, with chains straddling the end.
TEST_F(PackedQueueTest, ChainsWrapAroundManyLaps) {
  setup(7);  // not a power of two: legal for packed rings
  for (int round = 0; round < 40; ++round) {
    const uint32_t ndesc = 1 + round % 3;
    std::vector<uint32_t> sizes(ndesc, 20);
    const auto bytes = make_frame(20 * ndesc, static_cast<uint8_t>(round));
    const uint16_t id = ring->add_tx(bytes, sizes);
    Chain c{};
    arena->clear();
    ASSERT_EQ(pop_tx(&c), PopStatus::kOk) << round;
    EXPECT_EQ(c.head, id);
    EXPECT_EQ(c.ring_descs, ndesc);
    EXPECT_EQ(gather(*arena, c.seg_begin, c.nsegs), bytes) << round;
    q.push_used(c.head, 0, c.ring_descs);
    expect_used(id, 0);
    EXPECT_EQ(q.last_avail(), ring->next_avail());
    EXPECT_EQ(q.avail_wrap(), ring->avail_wrap());
    EXPECT_EQ(q.used_pos(), q.last_avail());
  }
}

// A burst is published at once: several used descriptors, the driver sees all of them.
TEST_F(PackedQueueTest, BurstPublishedTogether) {
  setup(16);
  std::vector<uint16_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(ring->add_tx(make_frame(60, i), {12, 48}));
  std::vector<Chain> cs;
  while (q.has_avail()) {
    Chain c{};
    ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
    cs.push_back(c);
  }
  ASSERT_EQ(cs.size(), 5u);
  for (const Chain& c : cs) q.push_used(c.head, 0, c.ring_descs);
  q.publish_used();
  for (uint16_t id : ids) {
    auto u = ring->next_used();
    ASSERT_TRUE(u.has_value());
    EXPECT_EQ(u->id, id);
    // §2.8.1: a used descriptor has AVAIL and USED equal to the used wrap counter (1).
    EXPECT_EQ(u->flags & (kPackedDescFAvail | kPackedDescFUsed), kPackedDescFAvail | kPackedDescFUsed);
  }
  EXPECT_FALSE(ring->next_used().has_value());
}

TEST_F(PackedQueueTest, IndirectTable) {
  setup(8);
  const auto bytes = make_frame(90);
  ChainOpts o;
  o.indirect = true;
  o.indirect_misalign = 8;  // item 12: a table that is not 16-byte aligned is legal
  const uint16_t id = ring->add_tx(bytes, {10, 30, 50}, o);
  Chain c{};
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  EXPECT_EQ(c.head, id);
  EXPECT_EQ(c.ring_descs, 1);
  EXPECT_EQ(c.ndesc, 4u);
  EXPECT_EQ(gather(*arena, c.seg_begin, c.nsegs), bytes);
}

TEST_F(PackedQueueTest, IndirectWithoutTheFeatureIsDropped) {
  setup(8, kFeatures & ~bit(kRingFIndirectDesc));
  ChainOpts o;
  o.indirect = true;
  const uint16_t id = ring->add_tx(make_frame(60), {60}, o);
  Chain c{};
  EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain);
  expect_used(id, 0);
}

// DPDK's packed TX indirect tables carry WRITE on their header entry: read, not refused.
// In the ring, and on receive queues, the direction is still enforced.
TEST_F(PackedQueueTest, WritableEntryInATransmitTableIsRead) {
  setup(8);
  const auto bytes = make_frame(80);
  const uint64_t h = buf(12), f = buf(68);
  fm.write(h, bytes.data(), 12);
  fm.write(f, bytes.data() + 12, 68);
  ChainOpts o;
  o.indirect = true;
  const uint16_t id = ring->add_chain({{h, 12, kDescFWrite}, {f, 68, 0}}, o);
  Chain c{};
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  EXPECT_EQ(c.head, id);
  EXPECT_EQ(gather(*arena, c.seg_begin, c.nsegs), bytes);
  // A read-only entry in a receive table is refused.
  const uint16_t id2 = ring->add_chain({{buf(64), 64, kDescFWrite}, {buf(64), 64, 0}}, o);
  arena->clear();
  EXPECT_EQ(q.pop<true>(*arena, &c), PopStatus::kBadChain);
  q.push_used(id, 0, 1);  // after the dropped chain, which pop() returned already
  q.publish_used();
  auto u1 = ring->next_used();
  auto u2 = ring->next_used();
  ASSERT_TRUE(u1.has_value() && u2.has_value());
  EXPECT_EQ(u1->id, id2);
  EXPECT_EQ(u1->len, 0u);
  EXPECT_EQ(u2->id, id);
}

// Item 12: tables that are malformed in each way are dropped under their buffer ID, and
// the ring keeps working.
TEST_F(PackedQueueTest, MalformedIndirectTablesAreDropped) {
  setup(16);
  struct Case {
    const char* what;
    uint32_t len;
    uint16_t extra_flags;
    bool nested;
  };
  const Case cases[] = {{"length not a multiple of 16", 24, 0, false},
                        {"zero length", 0, 0, false},
                        {"longer than the queue", 16 * 17, 0, false},
                        {"indirect with NEXT", 16, kDescFNext, false},
                        {"nested indirect", 32, 0, true}};
  for (const Case& k : cases) {
    const uint64_t t = fm.alloc(16 * 17, 16, 0);
    PackedDesc e[2] = {{buf(10), 10, 0, 0}, {buf(10), 10, 0, 0}};
    if (k.nested) e[1].flags = kDescFIndirect;
    fm.write(t, e, sizeof e);
    const uint16_t slots = (k.extra_flags & kDescFNext) ? 2 : 1;
    const uint16_t pos = ring->take_slots(slots);
    const uint16_t id = static_cast<uint16_t>(100 + (&k - cases));
    if (slots == 2) ring->write_desc(pos + 1, buf(10), 10, id, ring->avail_flags());
    ring->write_desc(pos, t, k.len, id,
                     static_cast<uint16_t>(kDescFIndirect | k.extra_flags | ring->avail_flags()));
    ring->expect_chain(id, slots);
    Chain c{};
    arena->clear();
    EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain) << k.what;
    expect_used(id, 0);
  }
  // Still usable.
  const auto bytes = make_frame(70);
  const uint16_t id = ring->add_tx(bytes);
  Chain c{};
  arena->clear();
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  EXPECT_EQ(c.head, id);
}

// Items 7, 8 and direction: bad buffers drop the whole chain (all its slots), once.
TEST_F(PackedQueueTest, BadBuffersDropTheChain) {
  setup(8);
  const uint64_t good = buf(64);
  const std::vector<std::vector<DescSpec>> bad = {
      {{good, 14}, {0xdead0000000ull, 0}},              // address in no region, length 0
      {{good, 14}, {kRegion0 + (4 << 20) - 8, 64}},     // runs past the region's end
      {{good, 14, kDescFWrite}},                         // device-writable buffer on TX
  };
  for (const auto& d : bad) {
    const uint16_t id = ring->add_chain(d);
    Chain c{};
    arena->clear();
    EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain);
    expect_used(id, 0);
    EXPECT_EQ(q.last_avail(), ring->next_avail());
  }
}

// Item 10: a NEXT run over the whole ring has no end: the ring is broken, no hang.
TEST_F(PackedQueueTest, NextRunOverTheWholeRingBreaksIt) {
  setup(8);
  const uint64_t b = buf(16);
  for (uint16_t i = 0; i < 8; ++i)
    ring->write_desc(i, b, 16, i, static_cast<uint16_t>(kDescFNext | (i ? 0 : ring->avail_flags())));
  __atomic_store_n(&ring->ring()[0].flags, static_cast<uint16_t>(kDescFNext | ring->avail_flags()),
                   __ATOMIC_RELEASE);
  Chain c{};
  EXPECT_EQ(pop_tx(&c), PopStatus::kBroken);
  EXPECT_TRUE(q.broken());
}

// A driver that marks slots available again while we hold them cannot make us take more
// than the ring: the used descriptors we write always land in slots we were given.
TEST_F(PackedQueueTest, NeverMoreThanTheRingInFlight) {
  setup(4);
  const uint64_t b = buf(64);
  const auto frame = make_frame(64);
  fm.write(b, frame.data(), frame.size());
  int taken = 0;
  for (int lap = 0; lap < 3; ++lap) {
    const bool wrap = lap % 2 == 0;
    for (uint16_t i = 0; i < 4; ++i)
      ring->write_desc(i, b, 64, i, wrap ? kPackedDescFAvail : kPackedDescFUsed);
    while (q.has_avail()) {
      Chain c{};
      if (pop_tx(&c) != PopStatus::kOk) break;
      ++taken;
    }
  }
  EXPECT_EQ(taken, 4);
  EXPECT_FALSE(q.has_avail());
}

// Item 13: the flags checked are the flags used, even if the driver flips them after.
TEST_F(PackedQueueTest, DescriptorIsReadOnce) {
  setup(8);
  const uint16_t id = ring->add_tx(make_frame(60));
  Chain c{};
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  ring->ring()[0].len = 0xffffffff;  // too late: the local copy is used
  EXPECT_EQ(c.len, 60u);
  q.push_used(id, 0, c.ring_descs);
  expect_used(id, 0);
}

// ---------------------------------------------------------------- notifications

class PackedNotifyTest : public PackedQueueTest {
 protected:
  void SetUp() override { efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }
  void TearDown() override { close(efd); }
  uint64_t calls() {
    uint64_t v = 0;
    if (eventfd_read(efd, &v) != 0) return 0;
    return v;
  }
  /// One TX chain taken and returned; returns whether publish_used() signalled.
  bool round_trip() {
    const uint16_t id = ring->add_tx(make_frame(60));
    Chain c{};
    arena->clear();
    EXPECT_EQ(pop_tx(&c), PopStatus::kOk);
    q.push_used(id, 0, c.ring_descs);
    const bool s = q.publish_used();
    EXPECT_TRUE(ring->next_used().has_value());
    return s;
  }
  int efd = -1;
};

TEST_F(PackedNotifyTest, EnableAndDisable) {
  setup(8);
  q.set_call_fd(efd);
  EXPECT_TRUE(round_trip());
  EXPECT_EQ(calls(), 1u);
  ring->driver_event()->flags = kRingEventFlagsDisable;
  EXPECT_FALSE(round_trip());
  EXPECT_EQ(calls(), 0u);
  // DESC without EVENT_IDX is not a valid request: treated as ENABLE (a spare call).
  ring->driver_event()->flags = kRingEventFlagsDesc;
  EXPECT_TRUE(round_trip());
}

// §2.8.10 with EVENT_IDX: notify only when the used descriptor at off_wrap was written.
TEST_F(PackedNotifyTest, EventIndexAcrossTheWrap) {
  setup(4, kFeatures | bit(kRingFEventIdx));
  q.set_call_fd(efd);
  ring->driver_event()->flags = kRingEventFlagsDesc;
  // Ask for a call when slot 2 of the first lap (wrap 1) has been used.
  ring->driver_event()->off_wrap = 2 | 1u << 15;
  EXPECT_FALSE(round_trip());  // slot 0
  EXPECT_FALSE(round_trip());  // slot 1
  EXPECT_TRUE(round_trip());   // slot 2
  EXPECT_FALSE(round_trip());  // slot 3
  // Next lap (wrap 0), slot 1.
  ring->driver_event()->off_wrap = 1;
  EXPECT_FALSE(round_trip());  // slot 0, wrap 0
  EXPECT_TRUE(round_trip());   // slot 1, wrap 0
  EXPECT_FALSE(round_trip());
}

TEST_F(PackedNotifyTest, KicksAreSuppressedInTheDeviceArea) {
  setup(8);
  q.set_kicks(false);
  EXPECT_EQ(ring->device_event()->flags, kRingEventFlagsDisable);
  q.set_kicks(true);
  EXPECT_EQ(ring->device_event()->flags, kRingEventFlagsEnable);
}

// ---------------------------------------------------------------- vring base

TEST(PackedRingState, EncodeDecode) {
  const PackedRingState s = PackedRingState::decode(0x8003);
  EXPECT_EQ(s.avail, 3);
  EXPECT_TRUE(s.avail_wrap);
  EXPECT_EQ(s.used, 3);
  EXPECT_TRUE(s.used_wrap);
  EXPECT_EQ(s.encode(), 0x80038003u);
  EXPECT_EQ(PackedRingState::decode(5).encode(), 0x00050005u);
  EXPECT_TRUE(PackedDeviceQueue::packed_base_valid(0x8003, 4));
  EXPECT_FALSE(PackedDeviceQueue::packed_base_valid(0x8004, 4));
}

// A ring resumed from GET_VRING_BASE's value carries on where it stopped.
TEST_F(PackedQueueTest, ResumeFromVringBase) {
  setup(4);
  for (int i = 0; i < 5; ++i) {  // one lap and a bit: wrap counters 0
    const uint16_t id = ring->add_tx(make_frame(60));
    Chain c{};
    arena->clear();
    ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
    q.push_used(id, 0, 1);
    expect_used(id, 0);
  }
  const uint32_t base = q.vring_base();
  EXPECT_EQ(base, 0x00010001u);
  PackedDeviceQueue q2;
  ring->attach(q2, gm, kFeatures, base);
  const uint16_t id = ring->add_tx(make_frame(60));
  Chain c{};
  ASSERT_EQ(q2.pop<false>(*arena, &c), PopStatus::kOk);
  EXPECT_EQ(c.head, id);
  q2.push_used(id, 0, 1);
  q2.publish_used();
  auto u = ring->next_used();
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->id, id);
}

// ---------------------------------------------------------------- copy path

class PackedDeliverTest : public PackedQueueTest {
 protected:
  DeliverStatus deliver(const std::vector<uint8_t>& frame, bool mergeable) {
    Segment s{const_cast<uint8_t*>(frame.data()), static_cast<uint32_t>(frame.size())};
    return deliver_frame(q, *scratch, NetHdr{}, 12, &s, 1, static_cast<uint32_t>(frame.size()),
                         mergeable);
  }
  std::unique_ptr<SegmentArena> scratch = std::make_unique<SegmentArena>();
};

TEST_F(PackedDeliverTest, MergeableFrameOverThreeBuffers) {
  setup(8);
  std::vector<uint16_t> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(ring->add_rx({2048}));
  const auto frame = make_frame(5000);
  ASSERT_EQ(deliver(frame, true), DeliverStatus::kOk);
  q.publish_used();
  std::vector<uint8_t> got;
  uint32_t total = 0;
  for (int i = 0; i < 3; ++i) {
    auto u = ring->next_used();
    ASSERT_TRUE(u.has_value());
    EXPECT_EQ(u->id, ids[i]);
    EXPECT_TRUE(u->flags & kDescFWrite);
    auto b = ring->done_bytes(u->id, u->len);
    got.insert(got.end(), b.begin(), b.end());
    total += u->len;
  }
  EXPECT_EQ(total, 5012u);
  NetHdr h;
  std::memcpy(&h, got.data(), 12);
  EXPECT_EQ(h.num_buffers, 3);
  EXPECT_EQ(std::vector<uint8_t>(got.begin() + 12, got.end()), frame);
}

// unpop_ones(): receive buffers taken ahead for a batch and not used go back, across the
// ring's end too (the wrap counter flips back), and are taken again in the same order,
// while a used entry pushed meanwhile stays.
TEST_F(PackedDeliverTest, UnpopOnesAcrossTheRingEndKeepsPushedUsedEntries) {
  setup(4);
  for (int round = 0; round < 2; ++round) {  // move the ring to slot 2 of the first lap
    ring->add_rx({2048});
    ASSERT_EQ(deliver(make_frame(64), false), DeliverStatus::kOk);
    q.publish_used();
    ASSERT_TRUE(ring->next_used().has_value());
  }
  std::vector<uint16_t> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(ring->add_rx({2048}));  // slots 2, 3, 0, 1
  OneBuffer b[4];
  Chain ch;
  for (auto& x : b) ASSERT_EQ(q.pop_any<true>(*scratch, &ch, &x), PopStatus::kOne);
  const bool wrap_after = q.avail_wrap();
  q.push_used(b[0].head, 76, 1);  // the batch's first frame went in
  q.unpop_ones(3);                // the other three buffers were not used
  EXPECT_EQ(q.last_avail(), 3);
  EXPECT_NE(q.avail_wrap(), wrap_after);  // back across the end: the first lap's counter
  for (int i = 1; i < 4; ++i) {
    OneBuffer again;
    ASSERT_EQ(q.pop_any<true>(*scratch, &ch, &again), PopStatus::kOne);
    EXPECT_EQ(again.head, b[i].head);
    EXPECT_EQ(again.ptr, b[i].ptr);
    q.push_used(again.head, 76, 1);
  }
  q.publish_used();
  for (int i = 0; i < 4; ++i) {
    auto u = ring->next_used();
    ASSERT_TRUE(u.has_value());
    EXPECT_EQ(u->id, ids[i]);
  }
  EXPECT_FALSE(ring->next_used().has_value());
}

// Not enough buffers: nothing is consumed (restore()), and the frame goes through once
// the driver posts more.
TEST_F(PackedDeliverTest, NoBufferLeavesTheRingAsItWas) {
  setup(8);
  ring->add_rx({2048});
  const auto frame = make_frame(3000);
  EXPECT_EQ(deliver(frame, true), DeliverStatus::kNoBuffer);
  EXPECT_EQ(q.last_avail(), 0);
  EXPECT_FALSE(q.publish_used());
  EXPECT_EQ(deliver(frame, false), DeliverStatus::kTooBig);
  EXPECT_EQ(q.last_avail(), 0);
  ring->add_rx({2048});
  ASSERT_EQ(deliver(frame, true), DeliverStatus::kOk);
  q.publish_used();
  EXPECT_TRUE(ring->next_used().has_value());
  EXPECT_TRUE(ring->next_used().has_value());
}

// A malformed receive chain stops the queue (as for split rings).
TEST_F(PackedDeliverTest, BadReceiveChainBreaksTheQueue) {
  setup(8);
  ring->add_chain({{buf(100), 100, 0}});  // not device-writable
  EXPECT_EQ(deliver(make_frame(60), true), DeliverStatus::kBadRing);
  EXPECT_TRUE(q.broken());
}

}  // namespace
}  // namespace vl::virtio
