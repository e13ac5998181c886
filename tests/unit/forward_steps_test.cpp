// The steps of a busy poll (dp/forwarder.cpp): take a burst (good, malformed and oversized
// chains), classify (cross-connect, bridge learning, flooding, never back out), and end the
// burst with and without frames held past it; the sender's chains always come back in the
// order they were made available (VIRTIO_F_IN_ORDER), each exactly once.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "dp/fdb.h"
#include "dp/forwarder.h"
#include "fake_frontend.h"
#include "port/vhost_port.h"

namespace vl {
namespace {

using test::FakeQuiescer;
using test::Frontend;
using test::RawPeer;

/// A frame from MAC `src` to MAC `dst` (02:00:00:00:00:xx), `len` bytes, tagged `tag`.
std::vector<uint8_t> frame_to(uint8_t dst, uint8_t src, uint32_t len, uint8_t tag) {
  std::vector<uint8_t> f = test::make_frame(len, tag);
  const uint8_t d[6] = {0x02, 0, 0, 0, 0, dst}, s[6] = {0x02, 0, 0, 0, 0, src};
  std::memcpy(f.data(), d, 6);
  std::memcpy(f.data() + 6, s, 6);
  f[14] = tag;
  return f;
}

uint64_t g_now_ns = 1000000;  // the fake clock of the retry tests
uint64_t fake_now() { return g_now_ns; }

/// `n` ports of one queue pair each (real VhostPorts driven over socketpairs), one PMD
/// thread's Forwarder.
class ForwardSteps : public ::testing::Test {
 protected:
  void start(uint32_t n, dp::ForwardMode mode, uint32_t tx_retry_us = port::kDefaultTxRetryUs,
             uint64_t (*clock)() = &dp::tsc_now_ns) {
    q = std::make_unique<FakeQuiescer>(1);
    fdb = std::make_unique<dp::Fdb>(1024, 64, 300);
    for (uint32_t i = 0; i < n; ++i) {
      port::PortConfig c = test::rig_port_config(i);
      c.tx_retry_us = tx_retry_us;
      ports.push_back(std::make_unique<port::VhostPort>(i, c, q.get()));
      fes.push_back(std::make_unique<Frontend>(1));
      ASSERT_TRUE(test::connect_port(*ports[i], *fes[i]));
      port::VhostPort* p = ports[i].get();
      tables.ports[i] = p;
      fes[i]->start_pair(0);
      ASSERT_TRUE(p->active());
    }
    tables.nports = n;
    tables.mode = mode;
    for (uint32_t i = 0; i < n; ++i) tables.xc_peer[i] = i ^ 1;
    tables.fdb = fdb.get();
    fw = std::make_unique<dp::Forwarder>(&tables, clock, 0);
  }
  test::FakeVring& tx(uint32_t p) { return *fes[p]->rings[1]; }
  test::FakeVring& rx(uint32_t p) { return *fes[p]->rings[0]; }
  uint16_t send(uint32_t p, const std::vector<uint8_t>& f, virtio::NetHdr h = {}) {
    return tx(p).add_tx(test::with_net_hdr(h, 12, f));
  }
  void post_rx(uint32_t p, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) rx(p).add_rx({2048});
  }
  /// The frames port `p` received (virtio-net header cut off), in order.
  std::vector<std::vector<uint8_t>> received(uint32_t p) {
    std::vector<std::vector<uint8_t>> out;
    while (auto e = rx(p).next_used()) {
      auto b = rx(p).done_bytes(static_cast<uint16_t>(e->id), e->len);
      out.emplace_back(b.begin() + 12, b.end());
    }
    return out;
  }
  /// The heads port `p`'s transmit queue got back, in order.
  std::vector<uint16_t> returned(uint32_t p) {
    std::vector<uint16_t> out;
    while (auto e = tx(p).next_used()) out.push_back(static_cast<uint16_t>(e->id));
    return out;
  }
  uint64_t drops(uint32_t p, port::Drop d) {
    return fw->counters(p).drops[static_cast<uint32_t>(d)].load();
  }
  /// Bounded retry into a full receive queue (tx_retry_us, like OVS's tx-retries-max): `n`
  /// frames a -> b with room for `room`; the rest wait, and when b refills 10 us later the
  /// next pass delivers them, in order, none dropped, every chain returned in order.
  void retried_within_the_bound(uint8_t n, uint8_t room) {
    std::vector<uint16_t> heads;
    for (uint8_t i = 0; i < n; ++i) heads.push_back(send(0, frame_to(2, 1, 64, i)));
    post_rx(1, room);
    EXPECT_EQ(fw->poll(0, 0), n);
    EXPECT_EQ(received(1).size(), room);
    EXPECT_TRUE(fw->holding());  // the rest wait for receive buffers
    EXPECT_EQ(returned(0), (std::vector<uint16_t>(heads.begin(), heads.begin() + room)));
    EXPECT_GE(fw->counters(1).tx_retries.load(), n - room);  // each time a frame is kept
    g_now_ns += 10000;
    post_rx(1, n);
    fw->end_pass();
    const auto got = received(1);
    ASSERT_EQ(got.size(), n - room);
    for (uint8_t i = 0; i < n - room; ++i) EXPECT_EQ(got[i][14], room + i);
    EXPECT_EQ(returned(0), (std::vector<uint16_t>(heads.begin() + room, heads.end())));
    EXPECT_EQ(drops(1, port::Drop::kNoRxBuffer), 0u);
    EXPECT_EQ(fw->counters(1).tx_packets.load(), n);
    EXPECT_FALSE(fw->holding());
  }

  std::unique_ptr<FakeQuiescer> q;
  std::unique_ptr<dp::Fdb> fdb;
  std::vector<std::unique_ptr<port::VhostPort>> ports;
  std::vector<std::unique_ptr<Frontend>> fes;
  dp::SwitchTables tables;
  std::unique_ptr<dp::Forwarder> fw;
};

TEST_F(ForwardSteps, TakeBurstGoodBadAndOversizedChainsInOrder) {
  start(2, dp::ForwardMode::kXconnect);
  post_rx(1, 32);
  std::vector<uint16_t> heads;
  std::vector<std::vector<uint8_t>> good;
  for (uint8_t i = 0; i < 12; ++i) {
    if (i % 4 == 1) {  // a chain whose buffer is in no region: bad_descriptor
      const uint16_t h = tx(0).alloc_desc();
      tx(0).write_desc(h, 0x7fff0000000ull, 80, 0);
      tx(0).publish(h);
      heads.push_back(h);
    } else if (i % 4 == 2) {  // shorter than header + Ethernet header: bad_header
      heads.push_back(tx(0).add_tx(std::vector<uint8_t>(20, 0)));
    } else if (i == 7) {  // above b's MTU 1500 + 18, no GSO: too_big at b
      heads.push_back(send(0, frame_to(2, 1, 1600, i)));
    } else {
      good.push_back(frame_to(2, 1, 64 + i, i));
      heads.push_back(send(0, good.back()));
    }
  }
  EXPECT_EQ(fw->poll(0, 0), 12u);
  EXPECT_EQ(received(1), good);
  // Every chain comes back once: those a pop refuses as malformed at once (forwarder.h),
  // all others in the order they were made available.
  std::vector<uint16_t> want;
  for (size_t i = 0; i < heads.size(); ++i)
    if (i % 4 == 1) want.push_back(heads[i]);
  for (size_t i = 0; i < heads.size(); ++i)
    if (i % 4 != 1) want.push_back(heads[i]);
  EXPECT_EQ(returned(0), want);
  EXPECT_EQ(drops(0, port::Drop::kBadDescriptor), 3u);
  EXPECT_EQ(drops(0, port::Drop::kBadHeader), 3u);
  EXPECT_EQ(drops(1, port::Drop::kTooBig), 1u);
  EXPECT_EQ(fw->counters(0).rx_packets.load(), 12u);
  EXPECT_EQ(fw->counters(1).tx_packets.load(), good.size());
  EXPECT_EQ(fw->poll(0, 0), 0u);  // an empty poll
}

// take_burst pops the burst's one-buffer chains first (pass 1, prefetching their buffers)
// and stops at the first chain of another kind; that chain and those after it are taken one
// by one. Frames and returned chains keep the order the driver made them available.
TEST_F(ForwardSteps, TakeBurstChainsOfSeveralDescriptorsBetweenOneBufferChainsKeepTheirOrder) {
  start(2, dp::ForwardMode::kXconnect);
  post_rx(1, 32);
  std::vector<uint16_t> heads;
  std::vector<std::vector<uint8_t>> sent;
  for (uint8_t i = 0; i < 10; ++i) {
    sent.push_back(frame_to(2, 1, 64 + i, i));
    const auto bytes = test::with_net_hdr({}, 12, sent.back());
    const uint32_t len = static_cast<uint32_t>(bytes.size());
    if (i == 3) {  // header in its own descriptor
      heads.push_back(tx(0).add_tx(bytes, {12, len - 12}));
    } else if (i == 6) {  // three descriptors through an indirect table
      test::ChainOpts o;
      o.indirect = true;
      heads.push_back(tx(0).add_tx(bytes, {12, 20, len - 32}, o));
    } else {
      heads.push_back(send(0, sent.back()));
    }
  }
  EXPECT_EQ(fw->poll(0, 0), 10u);
  EXPECT_EQ(received(1), sent);
  EXPECT_EQ(returned(0), heads);
  EXPECT_EQ(fw->counters(0).rx_packets.load(), 10u);
  EXPECT_EQ(fw->counters(1).tx_packets.load(), 10u);
}

// A delivery batch takes its receive buffers first (pass 1, prefetched) while they are
// one-buffer chains and the frames plain; a receive chain of another kind, or a buffer too
// small for its frame, hands the rest of the batch to the frame-by-frame path, which must
// take the very same buffers in the same order.
std::vector<std::vector<uint8_t>> merged_frames(test::FakeVring& r) {
  std::vector<std::vector<uint8_t>> out;
  while (auto e = r.next_used()) {
    auto b = r.done_bytes(static_cast<uint16_t>(e->id), e->len);
    uint16_t nb = 1;
    std::memcpy(&nb, b.data() + 10, sizeof nb);  // num_buffers (mergeable receive buffers)
    std::vector<uint8_t> f(b.begin() + 12, b.end());
    for (uint16_t k = 1; k < nb; ++k) {
      auto e2 = r.next_used();
      if (!e2) break;
      auto b2 = r.done_bytes(static_cast<uint16_t>(e2->id), e2->len);
      f.insert(f.end(), b2.begin(), b2.end());
    }
    out.push_back(std::move(f));
  }
  return out;
}

TEST_F(ForwardSteps, DeliverBatchReceiveChainOfSeveralDescriptorsMidBatchKeepsTheOrder) {
  start(2, dp::ForwardMode::kXconnect);
  for (int i = 0; i < 3; ++i) rx(1).add_rx({2048});
  rx(1).add_rx({40, 2008});  // two descriptors: pass 1 un-pops it
  for (int i = 0; i < 4; ++i) rx(1).add_rx({2048});
  std::vector<std::vector<uint8_t>> sent;
  for (uint8_t i = 0; i < 8; ++i) {
    sent.push_back(frame_to(2, 1, 64 + i, i));
    send(0, sent.back());
  }
  EXPECT_EQ(fw->poll(0, 0), 8u);
  EXPECT_EQ(merged_frames(rx(1)), sent);
  EXPECT_EQ(fw->counters(1).tx_packets.load(), 8u);
  EXPECT_EQ(drops(1, port::Drop::kNoRxBuffer), 0u);
}

TEST_F(ForwardSteps, DeliverBatchBufferTooSmallMidBatchSpreadsThatFrameAndKeepsTheOrder) {
  start(2, dp::ForwardMode::kXconnect);
  for (int i = 0; i < 4; ++i) rx(1).add_rx({2048});
  rx(1).add_rx({40});  // one buffer, smaller than header + frame: the frame spreads (mergeable)
  for (int i = 0; i < 5; ++i) rx(1).add_rx({2048});
  std::vector<std::vector<uint8_t>> sent;
  for (uint8_t i = 0; i < 9; ++i) {
    sent.push_back(frame_to(2, 1, 64, i));
    send(0, sent.back());
  }
  EXPECT_EQ(fw->poll(0, 0), 9u);
  EXPECT_EQ(merged_frames(rx(1)), sent);
  EXPECT_EQ(fw->counters(1).tx_packets.load(), 9u);
}

TEST_F(ForwardSteps, TakeBurstStopsAtTheBurstSize) {
  start(2, dp::ForwardMode::kXconnect);
  tables.burst = 8;
  post_rx(1, 32);
  for (uint8_t i = 0; i < 20; ++i) send(0, frame_to(2, 1, 64, i));
  EXPECT_EQ(fw->poll(0, 0), 8u);
  EXPECT_EQ(fw->poll(0, 0), 8u);
  EXPECT_EQ(fw->poll(0, 0), 4u);
  const auto got = received(1);
  ASSERT_EQ(got.size(), 20u);
  for (uint8_t i = 0; i < 20; ++i) EXPECT_EQ(got[i][14], i);
}

TEST_F(ForwardSteps, ClassifyBridgeLearnsFloodsAndNeverSendsBack) {
  start(3, dp::ForwardMode::kBridge);
  for (uint32_t p = 0; p < 3; ++p) post_rx(p, 16);
  // c (MAC 3) speaks first: unknown destination, flooded to a and b; c is learned.
  send(2, frame_to(9, 3, 64, 1));
  EXPECT_EQ(fw->poll(2, 0), 1u);
  EXPECT_EQ(received(0).size(), 1u);
  EXPECT_EQ(received(1).size(), 1u);
  // a (MAC 1) to c: to c alone. A broadcast from a: to b and c. a to itself: dropped.
  send(0, frame_to(3, 1, 64, 2));
  auto bcast = frame_to(0xff, 1, 64, 3);
  std::memset(bcast.data(), 0xff, 6);
  send(0, bcast);
  send(0, frame_to(1, 1, 64, 4));
  EXPECT_EQ(fw->poll(0, 0), 3u);
  const auto at_c = received(2);
  ASSERT_EQ(at_c.size(), 2u);
  EXPECT_EQ(at_c[0][14], 2);
  EXPECT_EQ(at_c[1][14], 3);
  const auto at_b = received(1);
  ASSERT_EQ(at_b.size(), 1u);
  EXPECT_EQ(at_b[0][14], 3);
  EXPECT_TRUE(received(0).empty());
  EXPECT_EQ(drops(0, port::Drop::kNoDestination), 1u);
  EXPECT_EQ(returned(0).size(), 3u);
}

TEST_F(ForwardSteps, EndBurstWithoutHeldFramesReturnsEveryChain) {
  start(2, dp::ForwardMode::kXconnect);
  post_rx(1, 32);
  std::vector<uint16_t> heads;
  for (uint8_t i = 0; i < 32; ++i) heads.push_back(send(0, frame_to(2, 1, 64, i)));
  EXPECT_EQ(fw->poll(0, 0), 32u);
  EXPECT_FALSE(fw->holding());
  EXPECT_EQ(received(1).size(), 32u);
  EXPECT_EQ(returned(0), heads);
}

TEST_F(ForwardSteps, EndBurstWithHeldFramesKeepsInOrderAcrossBursts) {
  // Bridge a -> {b, c}: b holds its frames (interval=1 s), c takes them at the end of each
  // burst. a's chains come back in order: none past the first one still held for b.
  start(3, dp::ForwardMode::kBridge);
  for (uint32_t p = 0; p < 3; ++p) post_rx(p, 32);
  tables.set_flush(1, dp::FlushPolicy{dp::FlushKind::kInterval, 1000000});
  // Teach the bridge where MACs 2 and 3 are.
  send(1, frame_to(9, 2, 64, 0));
  send(2, frame_to(9, 3, 64, 0));
  fw->poll(1, 0);
  fw->poll(2, 0);
  fw->flush_all();
  for (uint32_t p = 0; p < 3; ++p) received(p), returned(p);
  std::vector<uint16_t> heads;
  heads.push_back(send(0, frame_to(3, 1, 64, 1)));  // to c
  heads.push_back(send(0, frame_to(2, 1, 64, 2)));  // to b: held
  heads.push_back(send(0, frame_to(3, 1, 64, 3)));  // to c
  EXPECT_EQ(fw->poll(0, 0), 3u);
  EXPECT_TRUE(fw->holding());
  EXPECT_EQ(received(2).size(), 2u);  // c's frames delivered at the end of the burst
  EXPECT_TRUE(received(1).empty());   // b's is held
  EXPECT_EQ(returned(0), std::vector<uint16_t>{heads[0]});  // the third waits for the second
  // A second burst to c while b still holds: still nothing past the held chain.
  heads.push_back(send(0, frame_to(3, 1, 64, 4)));
  EXPECT_EQ(fw->poll(0, 0), 1u);
  EXPECT_EQ(received(2).size(), 1u);
  EXPECT_TRUE(returned(0).empty());
  // Delivering b's queue returns the rest, in order.
  fw->flush_all();
  EXPECT_FALSE(fw->holding());
  EXPECT_EQ(received(1).size(), 1u);
  EXPECT_EQ(returned(0), (std::vector<uint16_t>{heads[1], heads[2], heads[3]}));
}

TEST_F(ForwardSteps, FramesWithOffloadsTakeTheCheckedPath) {
  // A frame asking for a checksum the sender may not ask for (CSUM not negotiated is not
  // the case here: csum_start past the frame) is dropped as bad_csum; a plain one passes.
  start(2, dp::ForwardMode::kXconnect);
  post_rx(1, 8);
  virtio::NetHdr bad{};
  bad.flags = virtio::kNetHdrFNeedsCsum;
  bad.csum_start = 60;
  bad.csum_offset = 6;
  send(0, frame_to(2, 1, 64, 1), bad);
  virtio::NetHdr data_valid{};
  data_valid.flags = 2;  // DATA_VALID: the device's to set; cleared, the frame passes
  send(0, frame_to(2, 1, 64, 2), data_valid);
  EXPECT_EQ(fw->poll(0, 0), 2u);
  EXPECT_EQ(drops(0, port::Drop::kBadCsum), 1u);
  const auto got = received(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0][14], 2);
}

// Bounded retry into a full receive queue (tx_retry_us, like OVS's tx-retries-max).
TEST_F(ForwardSteps, FullReceiveQueueRetriedWithinTheBound) {
  start(2, dp::ForwardMode::kXconnect, 20, &fake_now);
  retried_within_the_bound(8, 3);  // room for 3 of 8
}

TEST_F(ForwardSteps, ReceiverThatNeverRefillsCostsNoMoreThanTheBound) {
  // a -> b (b never posts a buffer) and a -> c, bridged: c gets its frames at once; a's
  // chains wait no longer than the bound (20 us); then b's frames are dropped and counted.
  start(3, dp::ForwardMode::kBridge, 20, &fake_now);
  post_rx(2, 16);
  send(1, frame_to(9, 2, 64, 0));  // the bridge learns MACs 2 (on b) and 3 (on c)
  send(2, frame_to(9, 3, 64, 0));
  fw->poll(1, 0);
  fw->poll(2, 0);
  fw->flush_all();
  for (uint32_t p = 0; p < 3; ++p) received(p), returned(p);
  const uint64_t nobuf0 = drops(1, port::Drop::kNoRxBuffer);
  std::vector<uint16_t> heads;
  for (uint8_t i = 0; i < 6; ++i) heads.push_back(send(0, frame_to(i % 2 ? 3 : 2, 1, 64, i)));
  EXPECT_EQ(fw->poll(0, 0), 6u);
  EXPECT_EQ(received(2).size(), 3u);  // c's three, at once
  EXPECT_TRUE(returned(0).empty());   // the first chain waits for b
  for (int pass = 0; pass < 5; ++pass) {  // passes within the bound: still waiting
    g_now_ns += 3000;
    fw->end_pass();
  }
  EXPECT_TRUE(returned(0).empty());
  g_now_ns += 6000;  // 21 us after the burst was taken
  fw->end_pass();
  EXPECT_EQ(drops(1, port::Drop::kNoRxBuffer) - nobuf0, 3u);
  EXPECT_EQ(returned(0), heads);
  EXPECT_FALSE(fw->holding());
  EXPECT_GE(fw->counters(1).tx_retries.load(), 3u);
}

TEST_F(ForwardSteps, NoRetryWhenTheBoundIsZero) {
  start(2, dp::ForwardMode::kXconnect, 0, &fake_now);
  for (uint8_t i = 0; i < 4; ++i) send(0, frame_to(2, 1, 64, i));
  post_rx(1, 1);
  EXPECT_EQ(fw->poll(0, 0), 4u);
  EXPECT_FALSE(fw->holding());
  EXPECT_EQ(received(1).size(), 1u);
  EXPECT_EQ(drops(1, port::Drop::kNoRxBuffer), 3u);
  EXPECT_EQ(fw->counters(1).tx_retries.load(), 0u);
  EXPECT_EQ(returned(0).size(), 4u);
}

TEST_F(ForwardSteps, FramesKeptForARetryAreDeliveredBeforeSleeping) {
  // flush_all (before a PMD thread sleeps, or stops) delivers or drops: nothing stays held.
  start(2, dp::ForwardMode::kXconnect, 1000, &fake_now);
  for (uint8_t i = 0; i < 4; ++i) send(0, frame_to(2, 1, 64, i));
  EXPECT_EQ(fw->poll(0, 0), 4u);
  EXPECT_TRUE(fw->holding());
  fw->flush_all();
  EXPECT_FALSE(fw->holding());
  EXPECT_EQ(drops(1, port::Drop::kNoRxBuffer), 4u);
  EXPECT_EQ(returned(0).size(), 4u);
}

TEST_F(ForwardSteps, KeptFramesSurviveTheNextBurstIntactAndManySegmentFramesToo) {
  start(2, dp::ForwardMode::kXconnect, 1000, &fake_now);
  // Burst 1: 4 frames of 3 segments (kept: no receive buffer); burst 2 reuses the arena.
  std::vector<std::vector<uint8_t>> want;
  for (uint8_t i = 0; i < 4; ++i) {
    want.push_back(frame_to(2, 1, 300, i));
    tx(0).add_tx(test::with_net_hdr(virtio::NetHdr{}, 12, want.back()), {100, 100, 112});
  }
  EXPECT_EQ(fw->poll(0, 0), 4u);
  EXPECT_TRUE(fw->holding());
  for (uint8_t i = 4; i < 8; ++i) {
    want.push_back(frame_to(2, 1, 300, i));
    tx(0).add_tx(test::with_net_hdr(virtio::NetHdr{}, 12, want.back()), {50, 262});
  }
  EXPECT_EQ(fw->poll(0, 0), 4u);
  post_rx(1, 16);
  g_now_ns += 1000;
  fw->end_pass();
  EXPECT_EQ(received(1), want);  // every byte, in order
  EXPECT_EQ(returned(0).size(), 8u);
  // b has 8 buffers left: used up by 8 plain frames.
  for (uint8_t i = 0; i < 8; ++i) send(0, frame_to(2, 1, 64, i));
  EXPECT_EQ(fw->poll(0, 0), 8u);
  EXPECT_EQ(received(1).size(), 8u);
  EXPECT_EQ(returned(0).size(), 8u);
  // A frame of 6 segments (more than a slot keeps inline: a TSO frame has 18 or so) finds
  // the queue full: kept too, its segments in the kept-segment store, and delivered intact
  // after the next bursts reused the arena (before, it was dropped at once).
  const uint64_t nobuf = drops(1, port::Drop::kNoRxBuffer);
  std::vector<std::vector<uint8_t>> later;
  later.push_back(frame_to(2, 1, 600, 9));
  tx(0).add_tx(test::with_net_hdr(virtio::NetHdr{}, 12, later.back()),
               {100, 100, 100, 100, 100, 112});
  EXPECT_EQ(fw->poll(0, 0), 1u);
  EXPECT_TRUE(fw->holding());
  for (uint8_t i = 10; i < 13; ++i) {  // overwrite the arena: 7 segments each
    later.push_back(frame_to(2, 1, 700, i));
    tx(0).add_tx(test::with_net_hdr(virtio::NetHdr{}, 12, later.back()),
                 {100, 100, 100, 100, 100, 100, 112});
    EXPECT_EQ(fw->poll(0, 0), 1u);
  }
  EXPECT_EQ(returned(0).size(), 0u);
  post_rx(1, 16);
  g_now_ns += 1000;
  fw->end_pass();
  EXPECT_FALSE(fw->holding());
  EXPECT_EQ(drops(1, port::Drop::kNoRxBuffer) - nobuf, 0u);
  EXPECT_EQ(received(1), later);  // every byte, in order
  EXPECT_EQ(returned(0).size(), 4u);
  // The store emptied with its last frame. 12 buffers are left: of 12 plain frames and
  // then 5 of 6 segments, the 5 wait (their segments in the store again) and are dropped
  // once past the retry bound; every chain goes back.
  for (uint8_t i = 0; i < 12; ++i) send(0, frame_to(2, 1, 64, i));
  for (uint8_t i = 0; i < 5; ++i)
    tx(0).add_tx(test::with_net_hdr(virtio::NetHdr{}, 12, frame_to(2, 1, 600, 14 + i)),
                 {100, 100, 100, 100, 100, 112});
  EXPECT_EQ(fw->poll(0, 0), 17u);
  EXPECT_TRUE(fw->holding());
  g_now_ns += 2000000;  // past tx_retry_us (1000 us here)
  fw->end_pass();
  EXPECT_FALSE(fw->holding());
  EXPECT_EQ(drops(1, port::Drop::kNoRxBuffer) - nobuf, 5u);
  EXPECT_EQ(returned(0).size(), 17u);
}

// Zero-length buffers have no segment in the arena: the inline paths must not read the
// segment an earlier chain left there (found by an attack: a SIGSEGV, or a frame written into
// another guest's buffer).
TEST_F(ForwardSteps, ZeroLengthTransmitChainIsABadHeaderNotAStaleSegment) {
  start(2, dp::ForwardMode::kXconnect, 0);
  post_rx(1, 8);
  send(0, frame_to(2, 1, 64, 1));
  EXPECT_EQ(fw->poll(0, 0), 1u);  // leaves a good segment at the start of the arena
  const uint16_t h = tx(0).alloc_desc();
  tx(0).write_desc(h, tx(0).desc_gpa(), 0, 0);  // a valid address, no bytes
  tx(0).publish(h);
  EXPECT_EQ(fw->poll(0, 0), 1u);
  EXPECT_EQ(drops(0, port::Drop::kBadHeader), 1u);
  EXPECT_EQ(received(1).size(), 1u);  // only the first frame
  EXPECT_EQ(returned(0).size(), 2u);
}

TEST_F(ForwardSteps, ZeroLengthReceiveBufferNeverGetsAFrameWrittenElsewhere) {
  start(2, dp::ForwardMode::kXconnect, 0);
  post_rx(1, 1);
  const auto first = frame_to(2, 1, 64, 1);
  send(0, first);
  EXPECT_EQ(fw->poll(0, 0), 1u);  // b's buffer is now the scratch arena's first segment
  auto e = rx(1).next_used();
  ASSERT_TRUE(e.has_value());
  const uint16_t b_head = static_cast<uint16_t>(e->id);
  // b posts one zero-length receive buffer; a sends another frame.
  const uint16_t z = rx(1).alloc_desc();
  rx(1).write_desc(z, rx(1).desc_gpa(), 0, virtio::kDescFWrite);
  rx(1).publish(z);
  send(0, frame_to(2, 1, 64, 2));
  EXPECT_EQ(fw->poll(0, 0), 1u);
  // b's earlier buffer (the guest's again) still holds the first frame, untouched.
  auto bytes = rx(1).done_bytes(b_head, 12 + 64);
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin() + 12, bytes.end()), first);
  // Nothing was delivered into the zero-length buffer: no used entry with bytes in it.
  while (auto u = rx(1).next_used()) EXPECT_EQ(u->len, 0u) << u->id;
  EXPECT_EQ(fw->counters(1).tx_packets.load(), 1u);
}

// A full burst (32 frames) for an empty output queue is delivered straight from the burst's
// list; what finds the receive queue full is kept for a retry like any other flush's.
TEST_F(ForwardSteps, FullBurstIntoAFullReceiveQueueIsRetriedNotDropped) {
  start(2, dp::ForwardMode::kXconnect, 20, &fake_now);
  ASSERT_EQ(tables.burst, 32u);
  retried_within_the_bound(32, 10);
}

// A lean burst's return list is the burst itself until a malformed frame appears; from
// then on it is kept apart. Every chain still goes back once, in the order taken.
TEST_F(ForwardSteps, FullBurstWithABadHeaderReturnsEveryChainInOrder) {
  start(2, dp::ForwardMode::kXconnect);
  post_rx(1, 64);
  std::vector<uint16_t> heads;
  std::vector<std::vector<uint8_t>> good;
  for (uint8_t i = 0; i < 32; ++i) {
    if (i == 5 || i == 20) {
      heads.push_back(tx(0).add_tx(std::vector<uint8_t>(20, 0)));  // bad_header
    } else {
      good.push_back(frame_to(2, 1, 64, i));
      heads.push_back(send(0, good.back()));
    }
  }
  EXPECT_EQ(fw->poll(0, 0), 32u);
  EXPECT_EQ(received(1), good);
  EXPECT_EQ(returned(0), heads);
  EXPECT_EQ(drops(0, port::Drop::kBadHeader), 2u);
  EXPECT_FALSE(fw->holding());
}

}  // namespace
}  // namespace vl

namespace vl {
namespace {

// A chain refused at its header (bad_header) never gets its slot's segment list set: the
// slot keeps the pointer of its previous use. If that use was a kept frame whose segments
// were in the kept-segment store, completing the refused slot counted a store user that
// was no longer there: the store emptied under a frame still kept, the next kept frame's
// segments overwrote its list, and it was delivered with the other frame's bytes (found by
// an attack: frame B came out as frame C; C could be another guest's, in memory it may
// since have unmapped).
TEST_F(ForwardSteps, RefusedChainInAReusedSlotLeavesTheKeptSegmentStoreAlone) {
  start(2, dp::ForwardMode::kXconnect, 1000, &fake_now);
  const std::vector<uint32_t> six = {100, 100, 100, 100, 100, 112};
  // A: 6 segments, no receive buffer: kept, its segments in the store.
  const auto a = frame_to(2, 1, 600, 1);
  tx(0).add_tx(test::with_net_hdr(virtio::NetHdr{}, 12, a), six);
  EXPECT_EQ(fw->poll(0, 0), 1u);
  EXPECT_TRUE(fw->holding());
  // One buffer: A delivered, its slot freed (the next one taken), the store empty.
  post_rx(1, 1);
  g_now_ns += 1000;
  fw->end_pass();
  EXPECT_FALSE(fw->holding());
  EXPECT_EQ(received(1), std::vector<std::vector<uint8_t>>{a});
  EXPECT_EQ(returned(0).size(), 1u);
  // One burst: a chain too short for a header (A's old slot), then B of 6 segments: B kept.
  tx(0).add_tx(std::vector<uint8_t>(20, 0));
  const auto b = frame_to(2, 1, 600, 2);
  tx(0).add_tx(test::with_net_hdr(virtio::NetHdr{}, 12, b), six);
  EXPECT_EQ(fw->poll(0, 0), 2u);
  EXPECT_EQ(drops(0, port::Drop::kBadHeader), 1u);
  EXPECT_TRUE(fw->holding());
  // C of 6 segments: kept behind B.
  g_now_ns += 1000;
  const auto c = frame_to(2, 1, 600, 3);
  tx(0).add_tx(test::with_net_hdr(virtio::NetHdr{}, 12, c), six);
  EXPECT_EQ(fw->poll(0, 0), 1u);
  EXPECT_TRUE(fw->holding());
  post_rx(1, 4);
  g_now_ns += 1000;
  fw->end_pass();
  EXPECT_FALSE(fw->holding());
  const auto got = received(1);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0][14], 2) << "B delivered with another frame's bytes";
  EXPECT_EQ(got[0], b);
  EXPECT_EQ(got[1], c);
  EXPECT_EQ(returned(0).size(), 3u);
  EXPECT_EQ(drops(1, port::Drop::kNoRxBuffer), 0u);
}

}  // namespace
}  // namespace vl

namespace vl {
namespace {

// One pair whose receiver never refills must not take the kept-segment store from every
// other port (found by an attack: with a bump store it kept the store full, and every other
// port's frames of more than 4 segments lost their retry). Each output holds at most a
// quarter of the blocks; a frame of more than a block's segments is not kept at all.
TEST_F(ForwardSteps, OnePairDoesNotTakeTheKeptSegmentStoreFromEveryOtherPort) {
  start(4, dp::ForwardMode::kXconnect, 1000, &fake_now);
  test::ChainOpts ind;
  ind.indirect = true;
  std::vector<uint32_t> sizes(41, 1);
  sizes[0] = 12;  // the header alone, then 40 segments of 1 byte
  for (uint32_t i = 0; i < 64; ++i) {  // a -> b (never refills): 64 frames of 40 segments
    tx(0).add_tx(test::with_net_hdr(virtio::NetHdr{}, 12, frame_to(2, 1, 40, uint8_t(i))),
                 sizes, ind);
    EXPECT_EQ(fw->poll(0, 0), 1u);
    g_now_ns += 10000;
  }
  // The first 32 are kept (b's share), the other 32 dropped at once.
  EXPECT_EQ(drops(1, port::Drop::kNoRxBuffer), 32u);
  const auto f = frame_to(4, 3, 600, 7);
  tx(2).add_tx(test::with_net_hdr(virtio::NetHdr{}, 12, f), {100, 100, 100, 100, 100, 112});
  EXPECT_EQ(fw->poll(2, 0), 1u);
  EXPECT_EQ(drops(3, port::Drop::kNoRxBuffer), 0u) << "store taken by a -> b";
  post_rx(3, 1);
  g_now_ns += 10000;
  fw->end_pass();
  EXPECT_EQ(received(3), std::vector<std::vector<uint8_t>>{f});
  // A frame of more segments than a block holds is not kept.
  std::vector<uint32_t> big(66, 1);
  big[0] = 12;
  tx(2).add_tx(test::with_net_hdr(virtio::NetHdr{}, 12, frame_to(4, 3, 65, 8)), big, ind);
  EXPECT_EQ(fw->poll(2, 0), 1u);
  EXPECT_EQ(drops(3, port::Drop::kNoRxBuffer), 1u);
}
}  // namespace
}  // namespace vl
