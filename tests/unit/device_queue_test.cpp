// SplitDeviceQueue: popping chains a (possibly hostile) driver wrote, publishing used entries
// and notifications (virtio 1.2 §2.7; hostile-inputs.md items 7, 8, 10, 11, 12, 14).
#include "virtio/split_device_queue.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "fake_driver.h"

namespace vl::virtio {
namespace {

using test::ChainOpts;
using test::DescSpec;
using test::FakeMemory;
using test::FakeVring;
using test::gather;
using test::make_frame;

constexpr uint64_t kRegion0 = 0x100000;
constexpr uint64_t kRegionSize = 1 << 20;
constexpr uint64_t kIndirect = bit(kRingFIndirectDesc);
constexpr uint64_t kEventIdx = bit(kRingFEventIdx);

class DeviceQueueTest : public ::testing::Test {
 protected:
  /// One region; the ring at its start.
  void setup(uint32_t num, uint64_t features) {
    fm.add_region(kRegion0, kRegionSize);
    finish(num, features);
  }
  void finish(uint32_t num, uint64_t features, uint16_t base = 0) {
    ring = std::make_unique<FakeVring>(fm, num, 0);
    std::string err;
    ASSERT_TRUE(fm.build(gm, &err)) << err;
    if (base) {
      ring->set_avail_idx(base);
      ring->used()->idx = base;
    }
    ring->attach(q, gm, features, base);
  }
  PopStatus pop_tx(Chain* c) { return q.pop<false>(*arena, c); }
  PopStatus pop_rx(Chain* c) { return q.pop<true>(*arena, c); }
  /// Writes a raw descriptor table at a fresh gpa (+misalign) and returns its address.
  uint64_t write_table(const std::vector<VringDesc>& t, uint64_t misalign = 0) {
    const uint64_t a = fm.alloc(16 * t.size() + misalign + 1, 16, 0) + misalign;
    fm.write(a, t.data(), 16 * t.size());
    return a;
  }
  uint64_t buf(uint32_t len) { return fm.alloc(len ? len : 1, 8, 0); }
  /// Asserts the chain at `head` was dropped: returned with len 0 once published.
  void expect_returned_empty(uint16_t head) {
    EXPECT_EQ(q.last_used(), 1);
    q.publish_used();
    ASSERT_EQ(ring->used_idx(), 1);
    EXPECT_EQ(ring->used_elem(0).id, head);
    EXPECT_EQ(ring->used_elem(0).len, 0u);
  }

  FakeMemory fm;
  GuestMemory gm;
  std::unique_ptr<FakeVring> ring;
  SplitDeviceQueue q;
  std::unique_ptr<SegmentArena> arena = std::make_unique<SegmentArena>();
};

// ---------------------------------------------------------------- valid chains

TEST_F(DeviceQueueTest, SingleDescriptor) {
  setup(256, 0);
  const auto bytes = make_frame(100);
  const uint16_t head = ring->add_tx(bytes);
  ASSERT_EQ(q.pending(), 1);
  Chain c{};
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  EXPECT_EQ(c.head, head);
  EXPECT_EQ(c.nsegs, 1u);
  EXPECT_EQ(c.len, 100u);
  EXPECT_EQ(arena->segs[c.seg_begin].ptr, fm.host(ring->chain_bufs(head)[0].gpa));
  EXPECT_EQ(gather(*arena, c.seg_begin, c.nsegs), bytes);
  EXPECT_EQ(q.pending(), 0);
  EXPECT_EQ(q.last_avail(), 1);
  EXPECT_EQ(q.last_used(), 0);  // popping returns nothing by itself
}

TEST_F(DeviceQueueTest, ManyDescriptorsIncludingEmptyOnes) {
  setup(256, 0);
  const auto bytes = make_frame(1 + 2 + 3 + 0 + 100 + 7 + 0 + 1000);
  const uint16_t head = ring->add_tx(bytes, {1, 2, 3, 0, 100, 7, 0, 1000});
  Chain c{};
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  EXPECT_EQ(c.head, head);
  EXPECT_EQ(c.nsegs, 6u);  // empty descriptors add no segment
  EXPECT_EQ(c.len, bytes.size());
  EXPECT_EQ(gather(*arena, c.seg_begin, c.nsegs), bytes);
}

TEST_F(DeviceQueueTest, SeveralChainsAppendToTheArena) {
  setup(256, 0);
  const auto a = make_frame(60, 1), b = make_frame(70, 2);
  ring->add_tx(a, {30, 30});
  ring->add_tx(b, {10, 60});
  ASSERT_EQ(q.pending(), 2);
  Chain ca{}, cb{};
  ASSERT_EQ(pop_tx(&ca), PopStatus::kOk);
  ASSERT_EQ(pop_tx(&cb), PopStatus::kOk);
  EXPECT_EQ(cb.seg_begin, ca.seg_begin + ca.nsegs);
  EXPECT_EQ(arena->used, 4u);
  EXPECT_EQ(gather(*arena, ca.seg_begin, ca.nsegs), a);
  EXPECT_EQ(gather(*arena, cb.seg_begin, cb.nsegs), b);
}

TEST_F(DeviceQueueTest, ChainOfExactlyQueueSizeDescriptors) {
  setup(8, 0);
  const auto bytes = make_frame(8 * 10);
  ring->add_tx(bytes, std::vector<uint32_t>(8, 10));
  Chain c{};
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  EXPECT_EQ(c.nsegs, 8u);
  EXPECT_EQ(gather(*arena, c.seg_begin, c.nsegs), bytes);
}

TEST_F(DeviceQueueTest, IndirectTable) {
  setup(256, kIndirect);
  const auto bytes = make_frame(500);
  const uint16_t head = ring->add_tx(bytes, {12, 88, 200, 200}, ChainOpts{.indirect = true});
  EXPECT_EQ(ring->free_descs(), 255u);  // one ring descriptor
  Chain c{};
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  EXPECT_EQ(c.head, head);
  EXPECT_EQ(c.nsegs, 4u);
  EXPECT_EQ(c.len, 500u);
  EXPECT_EQ(gather(*arena, c.seg_begin, c.nsegs), bytes);
}

TEST_F(DeviceQueueTest, IndirectTableAtUnalignedAddressIsLegal) {
  setup(256, kIndirect);
  for (uint64_t mis : {1, 2, 4, 8, 15}) {
    const auto bytes = make_frame(300, static_cast<uint8_t>(mis));
    ring->add_tx(bytes, {100, 100, 100}, ChainOpts{.indirect = true, .indirect_misalign = mis});
    arena->clear();
    Chain c{};
    ASSERT_EQ(pop_tx(&c), PopStatus::kOk) << "misaligned by " << mis;
    EXPECT_EQ(gather(*arena, c.seg_begin, c.nsegs), bytes) << "misaligned by " << mis;
  }
}

TEST_F(DeviceQueueTest, IndirectTableWithQueueSizeEntries) {
  setup(16, kIndirect);
  const auto bytes = make_frame(16 * 20);
  ring->add_tx(bytes, std::vector<uint32_t>(16, 20), ChainOpts{.indirect = true});
  Chain c{};
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  EXPECT_EQ(c.nsegs, 16u);
  EXPECT_EQ(gather(*arena, c.seg_begin, c.nsegs), bytes);
}

TEST_F(DeviceQueueTest, ReceiveChains) {
  setup(64, kIndirect);
  const uint16_t h1 = ring->add_rx({1526});
  const uint16_t h2 = ring->add_rx({12, 1514}, ChainOpts{.indirect = true});
  ASSERT_EQ(q.pending(), 2);
  Chain c{};
  ASSERT_EQ(pop_rx(&c), PopStatus::kOk);
  EXPECT_EQ(c.head, h1);
  EXPECT_EQ(c.len, 1526u);
  ASSERT_EQ(pop_rx(&c), PopStatus::kOk);
  EXPECT_EQ(c.head, h2);
  EXPECT_EQ(c.len, 1526u);
  EXPECT_EQ(c.nsegs, 2u);
  EXPECT_EQ(arena->segs[c.seg_begin].ptr, fm.host(ring->chain_bufs(h2)[0].gpa));
}

TEST_F(DeviceQueueTest, IndicesWrapAround) {
  fm.add_region(kRegion0, kRegionSize);
  finish(8, 0, /*base=*/65534);
  std::vector<uint16_t> heads;
  for (int i = 0; i < 4; ++i) heads.push_back(ring->add_tx(make_frame(20, static_cast<uint8_t>(i))));
  EXPECT_EQ(ring->avail_idx(), 2);
  ASSERT_EQ(q.pending(), 4);
  for (int i = 0; i < 4; ++i) {
    Chain c{};
    ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
    EXPECT_EQ(c.head, heads[i]);
    q.push_used(c.head, 0);
  }
  EXPECT_EQ(q.pending(), 0);
  q.publish_used();
  EXPECT_EQ(ring->used_idx(), 2);
  EXPECT_EQ(ring->used_elem(65534).id, heads[0]);
  EXPECT_EQ(ring->used_elem(1).id, heads[3]);
}

TEST_F(DeviceQueueTest, RewindUnpops) {
  setup(16, 0);
  const uint16_t h1 = ring->add_tx(make_frame(20));
  const uint16_t h2 = ring->add_tx(make_frame(30));
  Chain c{};
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  q.push_used(h1, 1);
  q.rewind(2, 1);
  EXPECT_EQ(q.pending(), 2);
  EXPECT_EQ(q.last_used(), 0);
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  EXPECT_EQ(c.head, h1);
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  EXPECT_EQ(c.head, h2);
}

TEST_F(DeviceQueueTest, HasAvailRereadsTheIndexOnlyWhenTheSeenEntriesAreUsedUp) {
  setup(16, 0);
  EXPECT_FALSE(q.has_avail());
  ring->add_tx(make_frame(20));
  ring->add_tx(make_frame(20));
  EXPECT_TRUE(q.has_avail());
  Chain c{};
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  q.rewind(1, 0);
  EXPECT_TRUE(q.has_avail());  // a rewound entry is available again
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  EXPECT_TRUE(q.has_avail());
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  EXPECT_FALSE(q.has_avail());
  ring->add_tx(make_frame(20));
  EXPECT_TRUE(q.has_avail());
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  // A jump is caught when the index is read again.
  ring->set_avail_idx(static_cast<uint16_t>(q.last_avail() + 17));
  EXPECT_FALSE(q.has_avail());
  EXPECT_TRUE(q.broken());
}

// ---------------------------------------------------------------- hostile chains

// Item 14: a garbage head index: dropped, nothing returned (the head is not ours to
// return), and the queue keeps running.
TEST_F(DeviceQueueTest, HeadOutOfRangeIsDroppedAndQueueKeepsRunning) {
  setup(16, 0);
  for (uint16_t bad : {uint16_t{16}, uint16_t{17}, uint16_t{0x8000}, uint16_t{0xffff}}) {
    ring->publish(bad);
    ASSERT_EQ(q.pending(), 1);
    Chain c{};
    EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain) << bad;
    EXPECT_EQ(q.last_used(), 0) << "nothing may be pushed for head " << bad;
    EXPECT_EQ(q.pending(), 0);
    EXPECT_FALSE(q.broken());
  }
  const auto bytes = make_frame(40);
  const uint16_t head = ring->add_tx(bytes);
  Chain c{};
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  EXPECT_EQ(c.head, head);
  EXPECT_EQ(gather(*arena, c.seg_begin, c.nsegs), bytes);
  EXPECT_FALSE(q.publish_used());
  EXPECT_EQ(ring->used_idx(), 0);
}

TEST_F(DeviceQueueTest, NextIndexOutOfRange) {
  setup(16, 0);
  uint16_t head = 0;
  for (uint16_t next : {uint16_t{16}, uint16_t{255}, uint16_t{0xffff}}) {
    ring->write_desc(head, buf(10), 10, kDescFNext, head + 1);
    ring->write_desc(head + 1, buf(10), 10, kDescFNext, next);
    ring->publish(head);
    Chain c{};
    EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain) << next;
    head += 2;
  }
  EXPECT_EQ(arena->used, 0u);
  q.publish_used();
  ASSERT_EQ(ring->used_idx(), 3);
  for (uint16_t i = 0; i < 3; ++i) {
    EXPECT_EQ(ring->used_elem(i).id, 2u * i);
    EXPECT_EQ(ring->used_elem(i).len, 0u);
  }
}

TEST_F(DeviceQueueTest, NextIndexOutOfRangeInIndirectTable) {
  setup(16, kIndirect);
  const uint64_t t = write_table({{buf(10), 10, kDescFNext, 1}, {buf(10), 10, kDescFNext, 2}});
  ring->write_desc(0, t, 32, kDescFIndirect);
  ring->publish(0);
  Chain c{};
  EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain);  // next 2 in a table of 2
  expect_returned_empty(0);
}

// Item 10: cycles of empty descriptors must not hang.
TEST_F(DeviceQueueTest, ZeroLengthCyclesTerminate) {
  setup(16, kIndirect);
  const uint64_t b = buf(1);
  // A self-loop, a 2-cycle, and a cycle back to the head after a long tail.
  ring->write_desc(0, b, 0, kDescFNext, 0);
  ring->write_desc(1, b, 0, kDescFNext, 2);
  ring->write_desc(2, b, 0, kDescFNext, 1);
  for (uint16_t i = 3; i < 16; ++i) ring->write_desc(i, b, 0, kDescFNext, i == 15 ? 3 : i + 1);
  for (uint16_t head : {uint16_t{0}, uint16_t{1}, uint16_t{3}}) ring->publish(head);
  ASSERT_EQ(q.pending(), 3);
  for (int i = 0; i < 3; ++i) {
    Chain c{};
    EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain);
  }
  EXPECT_EQ(q.last_used(), 3);
  EXPECT_EQ(q.pending(), 0);
}

TEST_F(DeviceQueueTest, ZeroLengthCycleInIndirectTableTerminates) {
  setup(16, kIndirect);
  const uint64_t b = buf(1);
  const uint64_t t = write_table({{b, 0, kDescFNext, 1}, {b, 0, kDescFNext, 2}, {b, 0, kDescFNext, 0}});
  ring->write_desc(5, t, 48, kDescFIndirect);
  ring->publish(5);
  Chain c{};
  EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain);
  expect_returned_empty(5);
}

TEST_F(DeviceQueueTest, ChainLongerThanQueueSize) {
  setup(8, 0);
  // Eight descriptors with data, the last pointing back to the first: 9+ descriptors.
  for (uint16_t i = 0; i < 8; ++i) ring->write_desc(i, buf(100), 100, kDescFNext, (i + 1) % 8);
  ring->publish(0);
  Chain c{};
  EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain);
  expect_returned_empty(0);
  EXPECT_EQ(arena->used, 0u);  // nothing of the dropped chain stays in the arena
}

// Item 12: malformed indirect tables.
TEST_F(DeviceQueueTest, IndirectLengthNotMultipleOf16OrZero) {
  setup(16, kIndirect);
  const uint64_t t = write_table({{buf(10), 10, 0, 0}, {buf(10), 10, 0, 0}});
  for (uint32_t len : {0u, 1u, 8u, 15u, 17u, 31u, 33u}) {
    ring->write_desc(0, t, len, kDescFIndirect);
    ring->publish(0);
    Chain c{};
    EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain) << "len " << len;
  }
  // The same table with a proper length is fine.
  ring->write_desc(0, t, 16, kDescFIndirect);
  ring->publish(0);
  Chain c{};
  EXPECT_EQ(pop_tx(&c), PopStatus::kOk);
}

TEST_F(DeviceQueueTest, NestedIndirectTable) {
  setup(16, kIndirect);
  const uint64_t inner = write_table({{buf(10), 10, 0, 0}});
  const uint64_t outer = write_table({{buf(10), 10, kDescFNext, 1}, {inner, 16, kDescFIndirect, 0}});
  ring->write_desc(2, outer, 32, kDescFIndirect);
  ring->publish(2);
  Chain c{};
  EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain);
  expect_returned_empty(2);
}

TEST_F(DeviceQueueTest, IndirectTableWithMoreEntriesThanQueueSize) {
  setup(8, kIndirect);
  std::vector<VringDesc> t;
  for (uint16_t i = 0; i < 9; ++i) t.push_back({buf(4), 4, static_cast<uint16_t>(i < 8 ? kDescFNext : 0), static_cast<uint16_t>(i + 1)});
  const uint64_t a = write_table(t);
  ring->write_desc(1, a, 16 * 9, kDescFIndirect);
  ring->publish(1);
  Chain c{};
  EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain);
  expect_returned_empty(1);
}

TEST_F(DeviceQueueTest, IndirectWithoutTheFeature) {
  setup(16, 0);
  ring->add_tx(make_frame(100), {50, 50}, ChainOpts{.indirect = true});
  Chain c{};
  EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain);
  expect_returned_empty(0);
}

TEST_F(DeviceQueueTest, IndirectTableNotInMemory) {
  setup(16, kIndirect);
  for (uint64_t addr : std::initializer_list<uint64_t>{0x0ull, kRegion0 + kRegionSize, kRegion0 + kRegionSize - 16, ~0ull - 15}) {
    ring->write_desc(0, addr, 32, kDescFIndirect);
    ring->publish(0);
    Chain c{};
    EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain) << std::hex << addr;
  }
}

// Item 8: an address in no region is an error whatever the length.
TEST_F(DeviceQueueTest, DescriptorAddressInNoRegion) {
  setup(16, kIndirect);
  for (uint64_t addr : std::initializer_list<uint64_t>{0x0ull, kRegion0 - 1, kRegion0 + kRegionSize, ~0ull}) {
    for (uint32_t len : {0u, 1u, 100u}) {
      // Alone, and after a good descriptor.
      ring->write_desc(0, addr, len, 0);
      ring->write_desc(1, buf(10), 10, kDescFNext, 0);
      ring->publish(0);
      ring->publish(1);
      arena->clear();
      Chain c{};
      EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain) << std::hex << addr << " len " << len;
      EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain) << std::hex << addr << " len " << len;
      // Same in an RX chain.
      ring->write_desc(2, addr, len, kDescFWrite);
      ring->publish(2);
      EXPECT_EQ(pop_rx(&c), PopStatus::kBadChain) << std::hex << addr << " len " << len;
    }
  }
  // An empty descriptor at a valid address is fine.
  ring->write_desc(0, buf(1), 0, kDescFNext, 1);
  ring->write_desc(1, buf(10), 10, 0);
  ring->publish(0);
  Chain c{};
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  EXPECT_EQ(c.len, 10u);
  EXPECT_EQ(c.nsegs, 1u);
}

// Item 7: a buffer over two regions that touch in guest-physical space but not in ours is
// translated piecewise.
TEST_F(DeviceQueueTest, BufferStraddlingContiguousRegionsGivesTwoSegments) {
  uint8_t* h0 = fm.add_region(kRegion0, 0x10000);
  uint8_t* h1 = fm.add_region(kRegion0 + 0x10000, 0x10000);
  finish(16, 0);
  ASSERT_NE(h0 + 0x10000, h1);  // separate allocations
  const uint64_t a = kRegion0 + 0x10000 - 0x100;
  for (int i = 0; i < 0x300; ++i) fm.host(a + i)[0] = static_cast<uint8_t>(i * 3);
  ring->write_desc(0, a, 0x300, 0);
  ring->publish(0);
  Chain c{};
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  ASSERT_EQ(c.nsegs, 2u);
  EXPECT_EQ(c.len, 0x300u);
  EXPECT_EQ(arena->segs[c.seg_begin].ptr, h0 + 0x10000 - 0x100);
  EXPECT_EQ(arena->segs[c.seg_begin].len, 0x100u);
  EXPECT_EQ(arena->segs[c.seg_begin + 1].ptr, h1);
  EXPECT_EQ(arena->segs[c.seg_begin + 1].len, 0x200u);
  const auto got = gather(*arena, c.seg_begin, c.nsegs);
  for (int i = 0; i < 0x300; ++i) ASSERT_EQ(got[i], static_cast<uint8_t>(i * 3)) << i;
}

TEST_F(DeviceQueueTest, BufferRunningPastTheLastRegion) {
  fm.add_region(kRegion0, 0x10000);
  fm.add_region(kRegion0 + 0x10000, 0x10000);
  finish(16, 0);
  const uint64_t end = kRegion0 + 0x20000;
  ring->write_desc(0, end - 0x100, 0x101, 0);  // one byte too many
  ring->write_desc(1, end - 0x10100, 0x10101, 0);  // over the edge, then past the end
  ring->write_desc(2, end - 1, 0xffffffff, 0);
  ring->write_desc(3, end - 0x100, 0x100, 0);  // exactly to the end: fine
  for (uint16_t h = 0; h < 4; ++h) ring->publish(h);
  Chain c{};
  EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain);
  EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain);
  EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain);
  ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  EXPECT_EQ(c.len, 0x100u);
}

TEST_F(DeviceQueueTest, BufferRunningIntoAGap) {
  fm.add_region(kRegion0, 0x10000);
  fm.add_region(kRegion0 + 0x20000, 0x10000);  // a hole between them
  finish(16, 0);
  ring->write_desc(0, kRegion0 + 0x10000 - 8, 16, 0);
  ring->publish(0);
  Chain c{};
  EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain);
  expect_returned_empty(0);
}

TEST_F(DeviceQueueTest, WrongDirection) {
  setup(16, kIndirect);
  // A device-writable buffer in a transmit chain: first, middle, or in an indirect table.
  ring->write_desc(0, buf(10), 10, kDescFWrite);
  ring->write_desc(1, buf(10), 10, kDescFNext, 2);
  ring->write_desc(2, buf(10), 10, kDescFWrite | kDescFNext, 3);
  ring->write_desc(3, buf(10), 10, 0);
  const uint64_t t = write_table({{buf(10), 10, kDescFNext, 1}, {buf(10), 10, kDescFWrite, 0}});
  ring->write_desc(4, t, 32, kDescFIndirect);
  for (uint16_t h : {0, 1, 4}) ring->publish(h);
  Chain c{};
  for (int i = 0; i < 3; ++i) EXPECT_EQ(pop_tx(&c), PopStatus::kBadChain) << i;
  // A read-only buffer in a receive chain.
  ring->write_desc(5, buf(10), 10, 0);
  ring->write_desc(6, buf(10), 10, kDescFWrite | kDescFNext, 7);
  ring->write_desc(7, buf(10), 10, 0);
  for (uint16_t h : {5, 6}) ring->publish(h);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(pop_rx(&c), PopStatus::kBadChain) << i;
  EXPECT_EQ(q.last_used(), 5);
}

// Chains too fragmented for the arena are dropped as too big.
TEST_F(DeviceQueueTest, TooManySegments) {
  setup(8192, kIndirect);
  for (uint32_t n : {SegmentArena::kMaxChainSegments, SegmentArena::kMaxChainSegments + 1}) {
    const auto bytes = make_frame(n);
    ring->add_tx(bytes, std::vector<uint32_t>(n, 1), ChainOpts{.indirect = true});
    arena->clear();
    Chain c{};
    if (n <= SegmentArena::kMaxChainSegments) {
      ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
      EXPECT_EQ(gather(*arena, c.seg_begin, c.nsegs), bytes);
    } else {
      EXPECT_EQ(pop_tx(&c), PopStatus::kTooBig);
      EXPECT_EQ(q.last_used(), 1);  // returned with len 0
    }
  }
}

// A chain whose lengths add up past 32 bits is too big, not a wrapped small one.
TEST(DeviceQueueHuge, TotalLengthOver32Bits) {
  const uint64_t size = 10ull << 30;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  {
    FakeMemory fm;
    fm.add_external_region(0, size, static_cast<uint8_t*>(p));
    FakeVring ring(fm, 16, 0);
    GuestMemory gm;
    ASSERT_TRUE(fm.build(gm));
    SplitDeviceQueue q;
    ring.attach(q, gm, 0);
    auto arena = std::make_unique<SegmentArena>();
    ring.write_desc(0, 1ull << 30, 0xffffffffu, kDescFNext, 1);
    ring.write_desc(1, 6ull << 30, 1, 0);
    ring.publish(0);
    Chain c{};
    EXPECT_EQ(q.pop<false>(*arena, &c), PopStatus::kTooBig);
    EXPECT_EQ(q.last_used(), 1);
  }
  munmap(p, size);
}

// Item 11: the avail index running more than a queue ahead breaks the ring.
TEST_F(DeviceQueueTest, AvailIndexJumpBreaksTheRing) {
  setup(16, 0);
  ring->set_avail_idx(16);
  EXPECT_EQ(q.pending(), 16);  // a full queue is fine
  EXPECT_FALSE(q.broken());
  ring->set_avail_idx(17);
  EXPECT_EQ(q.pending(), -1);
  EXPECT_TRUE(q.broken());
}

TEST_F(DeviceQueueTest, AvailIndexGoingBackwardsBreaksTheRing) {
  fm.add_region(kRegion0, kRegionSize);
  finish(16, 0, /*base=*/100);
  ring->set_avail_idx(99);
  EXPECT_EQ(q.pending(), -1);
  EXPECT_TRUE(q.broken());
}

// ---------------------------------------------------------------- used ring and notifications

class Notify : public DeviceQueueTest {
 protected:
  void SetUp() override {
    efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ASSERT_GE(efd, 0);
  }
  void TearDown() override { ::close(efd); }
  /// Reads and resets the eventfd: true if it had been signalled.
  bool signalled() {
    eventfd_t v = 0;
    if (eventfd_read(efd, &v) != 0) {
      EXPECT_EQ(errno, EAGAIN);
      return false;
    }
    return v > 0;
  }
  int efd = -1;
};

TEST_F(Notify, WithoutEventIdxFollowsNoInterruptFlag) {
  setup(16, 0);
  q.set_call_fd(efd);
  EXPECT_FALSE(q.publish_used());  // nothing pushed
  EXPECT_FALSE(signalled());
  q.push_used(3, 42);
  EXPECT_EQ(ring->used_idx(), 0);  // not visible before publish
  EXPECT_TRUE(q.publish_used());
  EXPECT_TRUE(signalled());
  EXPECT_EQ(ring->used_idx(), 1);
  EXPECT_EQ(ring->used_elem(0).id, 3u);
  EXPECT_EQ(ring->used_elem(0).len, 42u);

  ring->set_avail_flags(kAvailFNoInterrupt);
  q.push_used(4, 7);
  EXPECT_FALSE(q.publish_used());
  EXPECT_FALSE(signalled());
  EXPECT_EQ(ring->used_idx(), 2);  // published all the same
  EXPECT_EQ(ring->used_elem(1).id, 4u);

  ring->set_avail_flags(0);
  q.push_used(5, 1);
  q.push_used(6, 1);
  EXPECT_TRUE(q.publish_used());
  EXPECT_TRUE(signalled());
  EXPECT_EQ(ring->used_idx(), 4);
}

TEST_F(Notify, WithEventIdxFollowsUsedEvent) {
  setup(16, kEventIdx);
  q.set_call_fd(efd);
  ring->used_event() = 0;
  q.push_used(0, 1);
  EXPECT_TRUE(q.publish_used());  // used index 0 -> 1 crosses used_event 0
  EXPECT_TRUE(signalled());

  ring->used_event() = 5;
  q.push_used(1, 1);
  EXPECT_FALSE(q.publish_used());  // 1 -> 2
  EXPECT_FALSE(signalled());
  for (uint16_t i = 2; i < 6; ++i) q.push_used(i, 1);
  EXPECT_TRUE(q.publish_used());  // 2 -> 6 crosses 5
  EXPECT_TRUE(signalled());
  q.push_used(6, 1);
  EXPECT_FALSE(q.publish_used());  // 6 -> 7: 5 already passed
  EXPECT_FALSE(signalled());

  // With EVENT_IDX the NO_INTERRUPT flag is not what counts.
  ring->set_avail_flags(kAvailFNoInterrupt);
  ring->used_event() = 7;
  q.push_used(7, 1);
  EXPECT_TRUE(q.publish_used());
  EXPECT_TRUE(signalled());
  EXPECT_EQ(ring->used_idx(), 8);
}

TEST_F(Notify, NoCallFdNoSignal) {
  setup(16, 0);
  q.push_used(0, 1);
  EXPECT_FALSE(q.publish_used());
  EXPECT_EQ(ring->used_idx(), 1);
  EXPECT_FALSE(signalled());
}

TEST_F(Notify, SetKicksWithoutEventIdxWritesUsedFlags) {
  setup(16, 0);
  q.set_kicks(false);
  EXPECT_EQ(ring->used_flags(), kUsedFNoNotify);
  q.set_kicks(true);
  EXPECT_EQ(ring->used_flags(), 0);
  EXPECT_EQ(ring->avail_event(), 0);
}

TEST_F(Notify, SetKicksWithEventIdxWritesAvailEvent) {
  setup(16, kEventIdx);
  for (int i = 0; i < 3; ++i) ring->add_tx(make_frame(20));
  Chain c{};
  for (int i = 0; i < 3; ++i) ASSERT_EQ(pop_tx(&c), PopStatus::kOk);
  q.set_kicks(true);
  EXPECT_EQ(ring->avail_event(), 3);  // kick when entry 3 is made available
  EXPECT_EQ(ring->used_flags(), 0);
  EXPECT_TRUE(need_event(ring->avail_event(), 4, 3));  // the driver's test for the next add
  q.set_kicks(false);
  EXPECT_EQ(ring->avail_event(), 2);
  EXPECT_FALSE(need_event(ring->avail_event(), 4, 3));
  EXPECT_EQ(ring->used_flags(), 0);
}

}  // namespace
}  // namespace vl::virtio
