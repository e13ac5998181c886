// net_copy: taking the virtio-net header off transmit chains and delivering frames into
// receive buffers, with and without mergeable buffers (virtio 1.2 §5.1.6; hostile-inputs.md
// items 15, 17).
#include "virtio/net_copy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "fake_driver.h"

namespace vl::virtio {
namespace {

using test::ChainOpts;
using test::FakeMemory;
using test::FakeVring;
using test::gather;
using test::make_frame;
using test::with_net_hdr;

constexpr uint64_t kFeatures = bit(kFVersion1) | bit(kRingFIndirectDesc);

NetHdr sample_hdr() {
  NetHdr h{};
  h.flags = kNetHdrFNeedsCsum;
  h.gso_type = 1;
  h.hdr_len = 0x1234;
  h.gso_size = 1448;
  h.csum_start = 34;
  h.csum_offset = 16;
  h.num_buffers = 0xabcd;  // must not leak into a received header
  return h;
}

bool hdr_eq(const NetHdr& a, const NetHdr& b, uint32_t len) { return std::memcmp(&a, &b, len) == 0; }

/// Two rings in one memory: a transmit ring (we pop from it) and a receive ring.
class NetCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fm.add_region(0x100000, 4 << 20);
    tx = std::make_unique<FakeVring>(fm, 256, 0);
    rx = std::make_unique<FakeVring>(fm, 256, 0);
    ASSERT_TRUE(fm.build(gm));
    tx->attach(txq, gm, kFeatures);
    rx->attach(rxq, gm, kFeatures);
  }
  /// Pops the next transmit chain (asserting success).
  Chain pop_tx() {
    Chain c{};
    EXPECT_EQ(txq.pop<false>(*arena, &c), PopStatus::kOk);
    return c;
  }
  /// Delivers `frame` from one local segment.
  DeliverStatus deliver(const std::vector<uint8_t>& frame, bool mergeable, uint32_t hdr_len = 12,
                        NetHdr hdr = sample_hdr()) {
    Segment s{const_cast<uint8_t*>(frame.data()), static_cast<uint32_t>(frame.size())};
    return deliver_frame(rxq, *scratch, hdr, hdr_len, &s, 1, static_cast<uint32_t>(frame.size()), mergeable);
  }
  /// Publishes and takes every used entry of the receive ring.
  std::vector<VringUsedElem> take_used() {
    rxq.publish_used();
    std::vector<VringUsedElem> out;
    while (auto e = rx->next_used()) out.push_back(*e);
    return out;
  }

  FakeMemory fm;
  GuestMemory gm;
  std::unique_ptr<FakeVring> tx, rx;
  SplitDeviceQueue txq, rxq;
  std::unique_ptr<SegmentArena> arena = std::make_unique<SegmentArena>();
  std::unique_ptr<SegmentArena> scratch = std::make_unique<SegmentArena>();
};

// ---------------------------------------------------------------- split_tx_chain

TEST_F(NetCopyTest, SplitHeaderInItsOwnDescriptor) {
  const auto frame = make_frame(60);
  const auto bytes = with_net_hdr(sample_hdr(), 12, frame);
  const uint16_t head = tx->add_tx(bytes, {12, 60});
  Chain c = pop_tx();
  TxFrame f{};
  ASSERT_TRUE(split_tx_chain(*arena, c, 12, &f));
  EXPECT_TRUE(hdr_eq(f.hdr, sample_hdr(), 12));
  EXPECT_EQ(f.len, 60u);
  EXPECT_EQ(f.nsegs, 1u);
  EXPECT_EQ(f.seg_begin, c.seg_begin + 1);
  EXPECT_EQ(arena->segs[f.seg_begin].ptr, fm.host(tx->chain_bufs(head)[1].gpa));
  EXPECT_EQ(gather(*arena, f.seg_begin, f.nsegs), frame);
}

TEST_F(NetCopyTest, SplitHeaderSharingADescriptorWithTheFrame) {
  const auto frame = make_frame(100);
  const auto bytes = with_net_hdr(sample_hdr(), 12, frame);
  tx->add_tx(bytes, {50, 62});
  Chain c = pop_tx();
  TxFrame f{};
  ASSERT_TRUE(split_tx_chain(*arena, c, 12, &f));
  EXPECT_TRUE(hdr_eq(f.hdr, sample_hdr(), 12));
  EXPECT_EQ(f.len, 100u);
  EXPECT_EQ(f.nsegs, 2u);
  EXPECT_EQ(gather(*arena, f.seg_begin, f.nsegs), frame);
}

// Item 15: a header over three or more descriptors is valid.
TEST_F(NetCopyTest, SplitHeaderOverSeveralDescriptors) {
  const std::vector<std::vector<uint32_t>> layouts = {
      {4, 4, 4, 64}, {3, 5, 6, 62}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 64}, {5, 5, 66}, {11, 1, 64}};
  for (const auto& sizes : layouts) {
    const auto frame = make_frame(64, static_cast<uint8_t>(sizes.size()));
    const auto bytes = with_net_hdr(sample_hdr(), 12, frame);
    tx->add_tx(bytes, sizes);
    arena->clear();
    Chain c = pop_tx();
    TxFrame f{};
    ASSERT_TRUE(split_tx_chain(*arena, c, 12, &f)) << sizes.size();
    EXPECT_TRUE(hdr_eq(f.hdr, sample_hdr(), 12)) << sizes.size();
    EXPECT_EQ(f.len, 64u);
    EXPECT_EQ(gather(*arena, f.seg_begin, f.nsegs), frame) << sizes.size();
  }
}

TEST_F(NetCopyTest, SplitLegacyTenByteHeader) {
  const auto frame = make_frame(64);
  const auto bytes = with_net_hdr(sample_hdr(), 10, frame);
  tx->add_tx(bytes, {3, 3, 4, 64});
  Chain c = pop_tx();
  TxFrame f{};
  ASSERT_TRUE(split_tx_chain(*arena, c, 10, &f));
  EXPECT_TRUE(hdr_eq(f.hdr, sample_hdr(), 10));
  EXPECT_EQ(f.hdr.num_buffers, 0);  // not part of a 10-byte header
  EXPECT_EQ(gather(*arena, f.seg_begin, f.nsegs), frame);
}

// Item 15: header-only chains and runts are rejected.
TEST_F(NetCopyTest, SplitRejectsHeaderOnlyAndShortChains) {
  const NetHdr h = sample_hdr();
  struct Case {
    uint32_t hdr_len;
    uint32_t frame_len;
    std::vector<uint32_t> sizes;
    bool ok;
  };
  const std::vector<Case> cases = {
      {12, 0, {12}, false},       {12, 0, {4, 4, 4}, false}, {10, 0, {10}, false},
      {12, 13, {12, 13}, false},  {12, 13, {25}, false},     {10, 13, {10, 13}, false},
      {12, 14, {12, 14}, true},   {12, 14, {26}, true},      {10, 14, {5, 5, 7, 7}, true},
      {12, 0, {}, false},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    const auto frame = make_frame(k.frame_len);
    auto bytes = with_net_hdr(h, k.hdr_len, frame);
    if (k.sizes.empty()) bytes.resize(5);  // shorter than the header itself
    tx->add_tx(bytes, k.sizes.empty() ? std::vector<uint32_t>{5} : k.sizes);
    arena->clear();
    Chain c = pop_tx();
    TxFrame f{};
    EXPECT_EQ(split_tx_chain(*arena, c, k.hdr_len, &f), k.ok) << "case " << i;
    if (k.ok) {
      EXPECT_EQ(gather(*arena, f.seg_begin, f.nsegs), frame) << "case " << i;
    }
  }
}

TEST(GatherCopy, SkipsAndCopiesAcrossSegments) {
  uint8_t a[5] = {0, 1, 2, 3, 4}, b[3] = {5, 6, 7}, d[4] = {8, 9, 10, 11};
  const Segment s[3] = {{a, 5}, {b, 3}, {d, 4}};
  uint8_t out[12];
  std::memset(out, 0xff, sizeof out);
  gather_copy(out, s, 3, 4, 6);
  const uint8_t want[6] = {4, 5, 6, 7, 8, 9};
  EXPECT_EQ(std::memcmp(out, want, 6), 0);
  EXPECT_EQ(out[6], 0xff);  // nothing past len
  gather_copy(out, s, 3, 0, 12);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(out[i], i);
}

// ---------------------------------------------------------------- deliver_frame

TEST_F(NetCopyTest, NonMergeableFits) {
  const uint16_t head = rx->add_rx({1526});
  const auto frame = make_frame(1000);
  ASSERT_EQ(deliver(frame, false), DeliverStatus::kOk);
  const auto used = take_used();
  ASSERT_EQ(used.size(), 1u);
  EXPECT_EQ(used[0].id, head);
  EXPECT_EQ(used[0].len, 1012u);
  NetHdr want = sample_hdr();
  want.num_buffers = 1;
  const auto got = rx->done_bytes(head, 1526);
  EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.begin() + 1012), with_net_hdr(want, 12, frame));
  EXPECT_EQ(got[1012], 0xee);  // nothing written past the frame
}

TEST_F(NetCopyTest, NonMergeableIntoAFragmentedChain) {
  const uint16_t head = rx->add_rx({5, 7, 300, 1}, ChainOpts{.indirect = true});
  const auto frame = make_frame(300);
  ASSERT_EQ(deliver(frame, false), DeliverStatus::kOk);
  const auto used = take_used();
  ASSERT_EQ(used.size(), 1u);
  EXPECT_EQ(used[0].len, 312u);
  NetHdr want = sample_hdr();
  want.num_buffers = 1;
  EXPECT_EQ(rx->done_bytes(head, 312), with_net_hdr(want, 12, frame));
}

TEST_F(NetCopyTest, NonMergeableTooBigLeavesTheQueueAsItWas) {
  const uint16_t head = rx->add_rx({500});
  const auto big = make_frame(1000);
  EXPECT_EQ(deliver(big, false), DeliverStatus::kTooBig);
  EXPECT_EQ(rxq.pending(), 1);  // the buffer is still available
  EXPECT_EQ(rxq.last_avail(), 0);
  EXPECT_EQ(rxq.last_used(), 0);
  EXPECT_FALSE(rxq.broken());
  EXPECT_TRUE(take_used().empty());
  // The same buffer takes a frame that fits.
  const auto small = make_frame(400);
  ASSERT_EQ(deliver(small, false), DeliverStatus::kOk);
  const auto used = take_used();
  ASSERT_EQ(used.size(), 1u);
  EXPECT_EQ(used[0].id, head);
  EXPECT_EQ(used[0].len, 412u);
}

TEST_F(NetCopyTest, NoBufferConsumesNothing) {
  const auto frame = make_frame(100);
  EXPECT_EQ(deliver(frame, false), DeliverStatus::kNoBuffer);
  EXPECT_EQ(deliver(frame, true), DeliverStatus::kNoBuffer);
  EXPECT_EQ(rxq.last_avail(), 0);
  EXPECT_EQ(rxq.last_used(), 0);
  EXPECT_FALSE(rxq.broken());
}

TEST_F(NetCopyTest, MergeableAcrossSeveralSmallBuffers) {
  std::vector<uint16_t> heads;
  for (int i = 0; i < 6; ++i) heads.push_back(rx->add_rx({256}));
  const auto frame = make_frame(1000);
  ASSERT_EQ(deliver(frame, true), DeliverStatus::kOk);
  const auto used = take_used();
  ASSERT_EQ(used.size(), 4u);  // 1012 bytes in 256-byte buffers
  std::vector<uint8_t> got;
  for (size_t i = 0; i < used.size(); ++i) {
    EXPECT_EQ(used[i].id, heads[i]);
    EXPECT_EQ(used[i].len, i < 3 ? 256u : 1012u - 3 * 256u);
    const auto b = rx->done_bytes(static_cast<uint16_t>(used[i].id), used[i].len);
    got.insert(got.end(), b.begin(), b.end());
  }
  NetHdr want = sample_hdr();
  want.num_buffers = 4;
  EXPECT_EQ(got, with_net_hdr(want, 12, frame));
  EXPECT_EQ(rxq.pending(), 2);  // the rest is untouched
}

TEST_F(NetCopyTest, MergeableFitsInOneBuffer) {
  const uint16_t head = rx->add_rx({2048});
  const auto frame = make_frame(1514);
  ASSERT_EQ(deliver(frame, true), DeliverStatus::kOk);
  const auto used = take_used();
  ASSERT_EQ(used.size(), 1u);
  NetHdr want = sample_hdr();
  want.num_buffers = 1;
  EXPECT_EQ(rx->done_bytes(head, 1526), with_net_hdr(want, 12, frame));
}

// num_buffers sits at bytes 10-11 of the header: written where the first chain has them,
// also when a segment boundary falls between the two bytes.
TEST_F(NetCopyTest, MergeableNumBuffersAcrossSegmentEdges) {
  const std::vector<std::vector<uint32_t>> layouts = {
      {10, 54}, {11, 53}, {12, 52}, {13, 51}, {4, 4, 4, 52}, {3, 3, 3, 3, 52}, {1, 9, 1, 1, 52}};
  for (const auto& first : layouts) {
    const uint16_t head = rx->add_rx(first, ChainOpts{.indirect = first.size() > 2});
    rx->add_rx({64});
    rx->add_rx({64});
    const auto frame = make_frame(150, static_cast<uint8_t>(first.size() + first[0]));
    ASSERT_EQ(deliver(frame, true), DeliverStatus::kOk) << first[0];
    const auto used = take_used();
    ASSERT_EQ(used.size(), 3u) << first[0];
    EXPECT_EQ(used[0].id, head);
    std::vector<uint8_t> got;
    for (const auto& u : used) {
      const auto b = rx->done_bytes(static_cast<uint16_t>(u.id), u.len);
      got.insert(got.end(), b.begin(), b.end());
    }
    NetHdr want = sample_hdr();
    want.num_buffers = 3;
    EXPECT_EQ(got, with_net_hdr(want, 12, frame)) << "first chain of " << first.size() << " segments, "
                                                  << first[0] << " bytes first";
  }
}

// A first receive chain shorter than the header would leave num_buffers (bytes 10-11) in a
// later chain: a driver that posts it breaks virtio 1.2 §5.1.6.3.1. The chain is returned
// unused (length 0, so the queue does not stall on it), the frame is not delivered
// (kShortBuffer), and the chains after it are untouched (hostile-inputs.md item 21).
TEST_F(NetCopyTest, MergeableFirstChainShorterThanTheHeaderIsReturnedUnused) {
  for (uint32_t first_len : {0u, 1u, 4u, 10u, 11u}) {
    // A fresh receive queue each time (the last one is broken).
    FakeMemory m;
    m.add_region(0x100000, 1 << 20);
    GuestMemory g;
    FakeVring ring(m, 256, 0);
    ASSERT_TRUE(m.build(g));
    SplitDeviceQueue q;
    ring.attach(q, g, kFeatures);
    ring.add_rx({first_len});
    ring.add_rx({64});
    ring.add_rx({256});
    const auto frame = make_frame(150, static_cast<uint8_t>(first_len));
    Segment seg{const_cast<uint8_t*>(frame.data()), static_cast<uint32_t>(frame.size())};
    EXPECT_EQ(deliver_frame(q, *scratch, NetHdr{}, 12, &seg, 1, 150, true),
              DeliverStatus::kShortBuffer)
        << first_len;
    EXPECT_FALSE(q.broken()) << first_len;
    EXPECT_EQ(q.last_avail(), 1u) << first_len;  // the short chain only
    q.publish_used();
    const auto u = ring.next_used();
    ASSERT_TRUE(u.has_value()) << first_len;
    EXPECT_EQ(u->len, 0u) << first_len;
    EXPECT_FALSE(ring.next_used().has_value()) << first_len;
    // The next frame goes into the chains after it.
    EXPECT_EQ(deliver_frame(q, *scratch, NetHdr{}, 12, &seg, 1, 150, true), DeliverStatus::kOk);
  }
}

// Without mergeable buffers a chain must hold the header and a whole frame: one shorter
// than the header plus the shortest valid Ethernet frame (60 bytes) can hold no real frame
// and is returned unused; one that holds some frames but not this one stays (too big).
TEST_F(NetCopyTest, NonMergeableChainTooShortForAnyFrameIsReturnedUnused) {
  for (uint32_t hdr_len : {10u, 12u}) {
    for (uint32_t len : {0u, 9u, hdr_len, hdr_len + 14, hdr_len + 59}) {
      FakeMemory m;
      m.add_region(0x100000, 1 << 20);
      GuestMemory g;
      FakeVring ring(m, 256, 0);
      ASSERT_TRUE(m.build(g));
      SplitDeviceQueue q;
      ring.attach(q, g, kFeatures);
      ring.add_rx({len});
      ring.add_rx({2048});
      const auto frame = make_frame(60);
      Segment seg{const_cast<uint8_t*>(frame.data()), 60};
      EXPECT_EQ(deliver_frame(q, *scratch, NetHdr{}, hdr_len, &seg, 1, 60, false),
                DeliverStatus::kShortBuffer)
          << hdr_len << " " << len;
      EXPECT_EQ(deliver_frame(q, *scratch, NetHdr{}, hdr_len, &seg, 1, 60, false), DeliverStatus::kOk);
      q.publish_used();
      auto u0 = ring.next_used(), u1 = ring.next_used();
      ASSERT_TRUE(u0 && u1);
      EXPECT_EQ(u0->len, 0u);
      EXPECT_EQ(u1->len, hdr_len + 60);
      NetHdr want{};
      want.num_buffers = 1;  // (in the 12-byte header only)
      EXPECT_EQ(ring.done_bytes(static_cast<uint16_t>(u1->id), u1->len),
                with_net_hdr(want, hdr_len, frame));
    }
  }
  // hdr_len + 60 bytes holds a minimum frame: kept for one when a larger frame comes first.
  FakeMemory m;
  m.add_region(0x100000, 1 << 20);
  GuestMemory g;
  FakeVring ring(m, 256, 0);
  ASSERT_TRUE(m.build(g));
  SplitDeviceQueue q;
  ring.attach(q, g, kFeatures);
  ring.add_rx({12 + 60});
  const auto frame = make_frame(100);
  Segment seg{const_cast<uint8_t*>(frame.data()), 100};
  EXPECT_EQ(deliver_frame(q, *scratch, NetHdr{}, 12, &seg, 1, 100, false), DeliverStatus::kTooBig);
  EXPECT_EQ(q.last_avail(), 0u);
}

// A frame spread over mergeable buffers that meets a malformed chain (not device-writable)
// after two good ones: the queue stops, and nothing of the frame is published: the driver
// never sees the two written chains as a frame whose num_buffers was not set
// (hostile-inputs.md item 21).
TEST_F(NetCopyTest, MergeableSpreadBrokenMidwayPublishesNothingOfTheFrame) {
  rx->add_rx({256});
  rx->add_rx({256});
  rx->add_chain({{fm.alloc(256), 256, 0}});  // device-readable: malformed for receive
  const auto frame = make_frame(1000);
  EXPECT_EQ(deliver(frame, true), DeliverStatus::kBadRing);
  EXPECT_TRUE(rxq.broken());
  EXPECT_TRUE(take_used().empty());
  EXPECT_EQ(rx->used_idx(), 0);
}

TEST_F(NetCopyTest, MergeableNotEnoughBuffersLeavesTheQueueAsItWas) {
  rx->add_rx({256});
  rx->add_rx({256});
  const auto frame = make_frame(1000);
  EXPECT_EQ(deliver(frame, true), DeliverStatus::kNoBuffer);
  EXPECT_EQ(rxq.pending(), 2);
  EXPECT_EQ(rxq.last_used(), 0);
  EXPECT_FALSE(rxq.broken());
  EXPECT_TRUE(take_used().empty());
  EXPECT_EQ(rx->used_idx(), 0);
  // Once enough buffers are there, the frame goes through whole.
  rx->add_rx({256});
  rx->add_rx({256});
  ASSERT_EQ(deliver(frame, true), DeliverStatus::kOk);
  EXPECT_EQ(take_used().size(), 4u);
}

TEST_F(NetCopyTest, JumboFrameIntoMergeable1500ByteBuffers) {
  for (int i = 0; i < 10; ++i) rx->add_rx({1500});
  const auto frame = make_frame(9000);
  // The frame comes from a transmit chain of many small descriptors.
  const auto bytes = with_net_hdr(NetHdr{}, 12, frame);
  std::vector<uint32_t> sizes(9012 / 64, 64);
  sizes.push_back(9012 % 64);
  tx->add_tx(bytes, sizes, ChainOpts{.indirect = true});
  Chain c = pop_tx();
  TxFrame f{};
  ASSERT_TRUE(split_tx_chain(*arena, c, 12, &f));
  ASSERT_EQ(f.len, 9000u);
  ASSERT_EQ(deliver_frame(rxq, *scratch, f.hdr, 12, &arena->segs[f.seg_begin], f.nsegs, f.len, true),
            DeliverStatus::kOk);
  const auto used = take_used();
  ASSERT_EQ(used.size(), 7u);  // 9012 bytes
  std::vector<uint8_t> got;
  for (size_t i = 0; i < used.size(); ++i) {
    EXPECT_EQ(used[i].len, i < 6 ? 1500u : 9012u - 6 * 1500u);
    const auto b = rx->done_bytes(static_cast<uint16_t>(used[i].id), used[i].len);
    got.insert(got.end(), b.begin(), b.end());
  }
  NetHdr want{};
  want.num_buffers = 7;
  EXPECT_EQ(got, with_net_hdr(want, 12, frame));
}

TEST_F(NetCopyTest, JumboFrameWithoutMergeableIsTooBigFor1500ByteBuffers) {
  rx->add_rx({1500});
  EXPECT_EQ(deliver(make_frame(9000), false), DeliverStatus::kTooBig);
  EXPECT_EQ(rxq.pending(), 1);
}

TEST_F(NetCopyTest, MalformedReceiveChainBreaksTheQueue) {
  // A read-only buffer on the receive queue.
  rx->write_desc(0, fm.alloc(100), 100, 0);
  rx->publish(0);
  EXPECT_EQ(deliver(make_frame(60), false), DeliverStatus::kBadRing);
  EXPECT_TRUE(rxq.broken());
}

TEST_F(NetCopyTest, MalformedSecondMergeableChainBreaksTheQueue) {
  rx->add_rx({100});
  rx->write_desc(200, 0xdead0000, 100, kDescFWrite);  // in no region
  rx->publish(200);
  EXPECT_EQ(deliver(make_frame(150), true), DeliverStatus::kBadRing);
  EXPECT_TRUE(rxq.broken());
}

TEST_F(NetCopyTest, AvailIndexJumpIsABrokenRing) {
  rx->set_avail_idx(1000);
  EXPECT_EQ(deliver(make_frame(60), true), DeliverStatus::kBadRing);
  EXPECT_TRUE(rxq.broken());
}

TEST_F(NetCopyTest, LegacyHeaderHasNoNumBuffers) {
  const uint16_t head = rx->add_rx({200});
  const auto frame = make_frame(100);
  ASSERT_EQ(deliver(frame, false, 10), DeliverStatus::kOk);
  const auto used = take_used();
  ASSERT_EQ(used.size(), 1u);
  EXPECT_EQ(used[0].len, 110u);
  const auto got = rx->done_bytes(head, 200);
  EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.begin() + 110), with_net_hdr(sample_hdr(), 10, frame));
  EXPECT_EQ(got[110], 0xee);
}

// End to end: a frame popped off a transmit ring lands byte for byte in a receive ring.
TEST_F(NetCopyTest, TransmitToReceiveByteExact) {
  for (uint32_t len : {14u, 60u, 1514u, 4000u}) {
    const auto frame = make_frame(len, static_cast<uint8_t>(len));
    NetHdr h{};
    tx->add_tx(with_net_hdr(h, 12, frame), {7, 5, len / 2, len - len / 2});
    for (int i = 0; i < 4; ++i) rx->add_rx({1024});
    arena->clear();
    Chain c = pop_tx();
    TxFrame f{};
    ASSERT_TRUE(split_tx_chain(*arena, c, 12, &f));
    ASSERT_EQ(deliver_frame(rxq, *scratch, f.hdr, 12, &arena->segs[f.seg_begin], f.nsegs, f.len, true),
              DeliverStatus::kOk);
    std::vector<uint8_t> got;
    for (const auto& u : take_used()) {
      const auto b = rx->done_bytes(static_cast<uint16_t>(u.id), u.len);
      got.insert(got.end(), b.begin(), b.end());
    }
    ASSERT_EQ(got.size(), 12u + len);
    EXPECT_EQ(std::vector<uint8_t>(got.begin() + 12, got.end()), frame) << len;
    // Leave the receive ring empty for the next round.
    while (rxq.pending() > 0) {
      Chain rc{};
      scratch->clear();
      ASSERT_EQ(rxq.pop<true>(*scratch, &rc), PopStatus::kOk);
      rxq.push_used(rc.head, 0);
    }
    take_used();
  }
}

}  // namespace
}  // namespace vl::virtio
