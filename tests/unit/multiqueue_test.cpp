// Multiqueue: the back-end's MQ negotiation (VIRTIO_NET_F_MQ, GET_QUEUE_NUM, vrings
// 0..2N-1, SET_VRING_ENABLE per ring, QEMU's one vhost_dev per queue pair on one socket),
// the receive-queue targets of each PMD thread, the flow hash, and the Forwarder spreading
// a port's output over its enabled receive queues (never a disabled one).
#include <gtest/gtest.h>

#include "pmd_forwarders.h"
#include <sys/eventfd.h>

#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "dp/rx_writers.h"
#include "dp/flow_hash.h"
#include "dp/forwarder.h"
#include "fake_driver.h"
#include "fake_frontend.h"
#include "port/vhost_port.h"
#include "vhost/backend.h"
#include "vhost_peer.h"

namespace vl {
namespace {

using test::FakeMemory;
using test::FakeVring;
using test::RawPeer;
using vhost::Req;
using vhost::VringAddr;
using vhost::VringState;
using virtio::bit;

using test::Frontend;
using test::FakeQuiescer;
using test::NullHost;
using test::kNum;
using test::kOffered;
using test::kOfferedProto;
const uint64_t kAcked = kOffered & ~bit(virtio::kFRingPacked);

// ---------------------------------------------------------------- back-end

class MqBackendTest : public ::testing::Test {
 protected:
  void connect(uint32_t queue_pairs, uint32_t nqp_rings) {
    fe = std::make_unique<Frontend>(nqp_rings);
    auto o = vhost::BackendOptions::defaults();
    o.queue_pairs = queue_pairs;
    be = std::make_unique<vhost::Backend>(&host, o);
    UniqueFd a, b;
    ASSERT_TRUE(test::make_socketpair(&a, &b));
    be->attach(std::move(a));
    fe->peer = std::make_unique<RawPeer>(std::move(b));
    fe->pump = [this] {
      why.clear();
      return be->on_readable(&why);
    };
  }
  NullHost host;
  std::unique_ptr<vhost::Backend> be;
  std::unique_ptr<Frontend> fe;
  std::string why;
};

TEST_F(MqBackendTest, MqOfferedAndQueueNumIsThePortsMaximum) {
  connect(4, 1);
  EXPECT_TRUE(virtio::has(fe->get_u64(Req::kGetFeatures), virtio::kNetFMq));
  EXPECT_TRUE(virtio::has(fe->get_u64(Req::kGetProtocolFeatures), vhost::kProtoMq));
  ASSERT_TRUE(fe->plain(Req::kSetProtocolFeatures, kOfferedProto));
  EXPECT_EQ(fe->get_u64(Req::kGetQueueNum), 4u);
  EXPECT_EQ(be->num_vrings(), 8u);
}

TEST_F(MqBackendTest, OneQueuePairOffersNoMq) {
  connect(1, 1);
  EXPECT_FALSE(virtio::has(fe->get_u64(Req::kGetFeatures), virtio::kNetFMq));
  ASSERT_TRUE(fe->plain(Req::kSetProtocolFeatures, kOfferedProto));
  EXPECT_EQ(fe->get_u64(Req::kGetQueueNum), 1u);
  // Vring 2 does not exist with one pair.
  EXPECT_NE(fe->acked(Req::kSetVringNum, VringState{2, 64}), std::optional<uint64_t>(0));
}

TEST_F(MqBackendTest, QueuePairsClampedToTheMaximum) {
  connect(1000, 1);
  EXPECT_EQ(be->queue_pairs(), vhost::kMaxQueuePairs);
  connect(0, 1);
  EXPECT_EQ(be->queue_pairs(), 1u);
}

TEST_F(MqBackendTest, QemuStylePerPairVhostDevsMakeEveryRingReady) {
  connect(2, 2);
  fe->start_pair(0);
  for (uint32_t i = 0; i < 2; ++i) EXPECT_TRUE(be->vring(i).ready) << be->vring(i).why_not;
  EXPECT_FALSE(be->vring(2).ready);
  // Traffic on pair 0 before pair 1 starts: its ring state must survive pair 1's
  // repeated SET_FEATURES.
  fe->rings[1]->add_tx(test::make_frame(80));
  virtio::SegmentArena arena;
  virtio::Chain ch;
  ASSERT_EQ(const_cast<vhost::Vring&>(be->vring(1)).q.pop<false>(arena, &ch), virtio::PopStatus::kOk);
  fe->start_pair(1);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(be->vring(i).ready) << i << be->vring(i).why_not;
  EXPECT_EQ(be->vring(1).q.last_avail(), 1u);  // not re-attached from scratch
  EXPECT_EQ(be->features(), kAcked);
}

TEST_F(MqBackendTest, SetVringEnablePerRing) {
  connect(2, 2);
  fe->start_pair(0);
  fe->start_pair(1);
  // ethtool -L eth0 combined 1: QEMU disables both rings of pair 1.
  ASSERT_TRUE(fe->plain(Req::kSetVringEnable, VringState{2, 0}));
  EXPECT_FALSE(be->vring(2).ready);
  EXPECT_EQ(be->vring(2).why_not, "disabled");
  EXPECT_TRUE(be->vring(3).ready);  // each ring on its own
  ASSERT_TRUE(fe->plain(Req::kSetVringEnable, VringState{3, 0}));
  EXPECT_FALSE(be->vring(3).ready);
  EXPECT_TRUE(be->vring(0).ready && be->vring(1).ready);
  // combined 2 again.
  ASSERT_TRUE(fe->plain(Req::kSetVringEnable, VringState{2, 1}));
  ASSERT_TRUE(fe->plain(Req::kSetVringEnable, VringState{3, 1}));
  EXPECT_TRUE(be->vring(2).ready && be->vring(3).ready);
  // Odd values and out-of-range indices are refused, state unchanged.
  EXPECT_NE(fe->acked(Req::kSetVringEnable, VringState{2, 2}), std::optional<uint64_t>(0));
  EXPECT_NE(fe->acked(Req::kSetVringEnable, VringState{3, 0xffffffff}), std::optional<uint64_t>(0));
  for (uint32_t idx : {4u, 5u, 15u, 16u, 0x10002u, 0x80000002u, 0xffffffffu})
    EXPECT_NE(fe->acked(Req::kSetVringEnable, VringState{idx, 1}), std::optional<uint64_t>(0)) << idx;
  // Enabling a ring that was never set up is harmless: not ready, with a reason.
  EXPECT_EQ(fe->acked(Req::kSetVringEnable, VringState{2, 1}), std::optional<uint64_t>(0));
  for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(be->vring(i).ready) << i;
}

TEST_F(MqBackendTest, HostileVringIndexAtOrAbove2NIsRefused) {
  connect(2, 2);
  fe->start_pair(0);
  const FakeVring& r = *fe->rings[0];
  for (uint32_t idx : {4u, 7u, 16u, 17u, 0x100u, 0x10004u, 0x80000000u, 0xffffffffu}) {
    EXPECT_NE(fe->acked(Req::kSetVringNum, VringState{idx, 64}), std::optional<uint64_t>(0)) << idx;
    EXPECT_NE(fe->acked(Req::kSetVringBase, VringState{idx, 0}), std::optional<uint64_t>(0)) << idx;
    EXPECT_NE(fe->acked(Req::kGetVringBase, VringState{idx, 0}), std::optional<uint64_t>(0)) << idx;
    EXPECT_NE(fe->acked(Req::kSetVringAddr,
                        VringAddr{idx, 0, r.desc_uva(), r.used_uva(), r.avail_uva(), 0}),
              std::optional<uint64_t>(0)) << idx;
  }
  for (uint64_t v : {uint64_t{4}, uint64_t{0xff}, uint64_t{1} << 32 | 2, uint64_t{1} << 63 | 1}) {
    EXPECT_NE(fe->acked(Req::kSetVringKick, v | vhost::kVringNoFd), std::optional<uint64_t>(0)) << v;
    EXPECT_NE(fe->acked(Req::kSetVringCall, v | vhost::kVringNoFd), std::optional<uint64_t>(0)) << v;
  }
  for (uint32_t i = 0; i < 2; ++i) EXPECT_TRUE(be->vring(i).ready) << be->vring(i).why_not;
}

// ---------------------------------------------------------------- targets and hash

TEST(RxTargets, EveryReadyQueueHasExactlyOneWriterAndOthersHandOffToIt) {
  for (uint32_t threads = 1; threads <= 4; ++threads) {
    for (uint32_t port = 0; port < 5; ++port) {
      for (uint32_t mask = 0; mask < 256; ++mask) {  // which of 8 receive queues are ready
        port::PortDp d;
        d.nqp = 8;
        static virtio::SplitDeviceQueue qs[8];
        for (uint32_t q = 0; q < 8; ++q) d.qp[q].rxq = (mask >> q) & 1 ? virtio::RingRef{&qs[q]} : virtio::RingRef{};
        dp::assign_rx_writers(d, threads, port);
        const uint32_t e = static_cast<uint32_t>(__builtin_popcount(mask));
        EXPECT_EQ(d.rx_ready, e);
        std::vector<int> writer(8, -1);
        std::vector<int> writers(8, 0);
        for (uint32_t t = 0; t < threads; ++t) {
          const auto& r = d.rx_for[t];
          EXPECT_EQ(r.n == 0, e == 0);
          if (r.via != port::PortDp::kDirect) continue;
          for (uint32_t i = 0; i < r.n; ++i) {
            EXPECT_TRUE((mask >> r.q[i]) & 1) << "disabled queue " << int(r.q[i]) << " targeted";
            ++writers[r.q[i]];
            writer[r.q[i]] = static_cast<int>(t);
          }
        }
        for (uint32_t q = 0; q < 8; ++q)
          EXPECT_EQ(writers[q], (mask >> q) & 1 ? 1 : 0) << "mask " << mask << " T " << threads;
        // A thread that writes none of the queues hands its frames to the writer of its one
        // target, never to itself; there are such threads exactly when e < T.
        uint32_t handing = 0;
        for (uint32_t t = 0; t < threads; ++t) {
          const auto& r = d.rx_for[t];
          if (r.via == port::PortDp::kDirect) continue;
          ++handing;
          ASSERT_EQ(r.n, 1);
          EXPECT_NE(r.via, t);
          EXPECT_EQ(writer[r.q[0]], int(r.via)) << "mask " << mask << " T " << threads;
        }
        EXPECT_EQ(handing, e && e < threads ? threads - e : 0u);
        for (uint32_t t = threads; t < port::kMaxPmdThreads; ++t) EXPECT_EQ(d.rx_for[t].n, 0);
      }
    }
  }
  // Single-queue ports spread their writers over the threads.
  for (uint32_t threads = 2; threads <= 4; ++threads) {
    std::vector<int> per(threads, 0);
    for (uint32_t port = 0; port < threads; ++port) {
      port::PortDp d;
      d.nqp = 1;
      static virtio::SplitDeviceQueue q0;
      d.qp[0].rxq = virtio::RingRef{&q0};
      dp::assign_rx_writers(d, threads, port);
      for (uint32_t t = 0; t < threads; ++t)
        if (d.rx_for[t].via == port::PortDp::kDirect) ++per[t];
    }
    for (uint32_t t = 0; t < threads; ++t) EXPECT_EQ(per[t], 1) << "T " << threads;
  }
}

std::vector<uint8_t> udp_frame(uint16_t sport, uint16_t dport, uint32_t src_ip, bool v6 = false) {
  std::vector<uint8_t> f(v6 ? 14 + 40 + 8 + 18 : 14 + 20 + 8 + 18, 0);
  const uint8_t macs[12] = {0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1};
  std::memcpy(f.data(), macs, 12);
  f[12] = v6 ? 0x86 : 0x08;
  f[13] = v6 ? 0xdd : 0x00;
  uint8_t* ip = f.data() + 14;
  uint32_t l4;
  if (v6) {
    ip[0] = 0x60;
    ip[6] = 17;
    std::memcpy(ip + 8, &src_ip, 4);
    l4 = 14 + 40;
  } else {
    ip[0] = 0x45;
    ip[9] = 17;
    std::memcpy(ip + 12, &src_ip, 4);
    ip[16] = 10;
    l4 = 14 + 20;
  }
  f[l4] = static_cast<uint8_t>(sport >> 8);
  f[l4 + 1] = static_cast<uint8_t>(sport);
  f[l4 + 2] = static_cast<uint8_t>(dport >> 8);
  f[l4 + 3] = static_cast<uint8_t>(dport);
  f[l4 + 8] = static_cast<uint8_t>(sport * 31);  // payload differs, the hash must not
  return f;
}

TEST(FlowHash, SameFlowSameHashAndFlowsSpreadOverQueues) {
  for (bool v6 : {false, true}) {
    auto a = udp_frame(1000, 53, 0x0100000a, v6);
    auto b = udp_frame(1000, 53, 0x0100000a, v6);
    b.back() = 0x77;  // payload only
    EXPECT_EQ(dp::flow_hash_bytes(a.data(), a.size()), dp::flow_hash_bytes(b.data(), b.size()));
    EXPECT_NE(dp::flow_hash_bytes(a.data(), a.size()),
              dp::flow_hash_bytes(udp_frame(1001, 53, 0x0100000a, v6).data(), a.size()));
    EXPECT_NE(dp::flow_hash_bytes(a.data(), a.size()),
              dp::flow_hash_bytes(udp_frame(1000, 53, 0x0200000a, v6).data(), a.size()));
    for (uint32_t n = 2; n <= 8; ++n) {
      std::vector<int> hits(n, 0);
      for (uint16_t p = 0; p < 800; ++p) {
        const auto f = udp_frame(static_cast<uint16_t>(1024 + p), 80, 0x0100000a, v6);
        const uint32_t q = dp::pick_queue(dp::flow_hash_bytes(f.data(), f.size()), n);
        ASSERT_LT(q, n);
        ++hits[q];
      }
      for (uint32_t q = 0; q < n; ++q) EXPECT_GT(hits[q], 800 / int(n) / 3) << "n " << n << " q " << q;
    }
  }
  // Short and odd frames do not read past their end (ASan build) and hash to something.
  uint8_t tiny[14] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x81, 0x00};
  (void)dp::flow_hash_bytes(tiny, 14);
  (void)dp::flow_hash_bytes(tiny, 3);
  // Segmented: the same hash as contiguous.
  auto f = udp_frame(4242, 4343, 0x0300000a);
  virtio::Segment segs[3] = {{f.data(), 10}, {f.data() + 10, 20}, {f.data() + 30, uint32_t(f.size() - 30)}};
  EXPECT_EQ(dp::flow_hash(segs, 3, static_cast<uint32_t>(f.size())),
            dp::flow_hash_bytes(f.data(), static_cast<uint32_t>(f.size())));
}

// ---------------------------------------------------------------- datapath


/// Port 0 (one queue pair) cross-connected to port 1 (4 queue pairs), real VhostPorts whose
/// back-ends are driven over socketpairs.
class MqDatapathTest : public ::testing::TestWithParam<uint32_t> {
 protected:
  void SetUp() override {
    q = std::make_unique<FakeQuiescer>(GetParam());
    for (uint32_t i = 0; i < 2; ++i) {
      port::PortConfig c;
      c.name = i ? "b" : "a";
      c.path = "/nonexistent";
      c.max_queues = i ? 4 : 1;
      ports[i] = std::make_unique<port::VhostPort>(i, c, q.get());
      fes[i] = std::make_unique<Frontend>(i ? 4 : 1);
      ASSERT_TRUE(test::connect_port(*ports[i], *fes[i]));
      tables.ports[i] = ports[i].get();
    }
    tables.nports = 2;
    tables.mode = dp::ForwardMode::kXconnect;
    tables.xc_peer[0] = 1;
    tables.xc_peer[1] = 0;
    tables.fdb = nullptr;
    fes[0]->start_pair(0);
    for (uint32_t qp = 0; qp < 4; ++qp) fes[1]->start_pair(qp);
  }
  void post_rx_buffers() {
    for (uint32_t qp = 0; qp < 4; ++qp)
      for (int i = 0; i < 250; ++i) fes[1]->rings[2 * qp]->add_rx({2048});
  }
  /// Sends `n` UDP flows from port a and forwards them with PMD thread `thread`'s Forwarder.
  void send_flows(dp::Forwarder& fw, uint32_t n, uint16_t first_port) {
    for (uint32_t i = 0; i < n; ++i) {
      virtio::NetHdr h{};
      const auto frame = udp_frame(static_cast<uint16_t>(first_port + i), 80, 0x0100000a);
      fes[0]->rings[1]->add_tx(test::with_net_hdr(h, 12, frame));
      if (i % 16 == 15) {
        while (fw.poll(0, 0)) {}
      }
    }
    while (fw.poll(0, 0)) {}
    fw.flush_all();
    while (fes[0]->rings[1]->next_used()) {}  // the sender takes its buffers back
  }
  uint32_t received(uint32_t qp) {
    uint32_t n = 0;
    while (fes[1]->rings[2 * qp]->next_used()) ++n;
    return n;
  }

  std::unique_ptr<FakeQuiescer> q;
  std::unique_ptr<port::VhostPort> ports[2];
  std::unique_ptr<Frontend> fes[2];
  dp::SwitchTables tables;
};

TEST_P(MqDatapathTest, OutputSpreadsOverEnabledQueuesOnlyAndNeverADisabledOne) {
  const uint32_t threads = GetParam();
  post_rx_buffers();
  // The guest runs with 3 of 4 pairs: pair 2 disabled (both rings).
  ASSERT_TRUE(fes[1]->plain(Req::kSetVringEnable, VringState{4, 0}));
  ASSERT_TRUE(fes[1]->plain(Req::kSetVringEnable, VringState{5, 0}));
  ASSERT_TRUE(ports[1]->active());
  EXPECT_EQ(ports[1]->dp().rx_ready, 3u);
  // One Forwarder per PMD thread, and the handoff rings between them (dp/handoff.h).
  test::PmdForwarders pmds;
  pmds.build(&tables, threads);
  auto& fws = pmds.fws;
  uint32_t total = 0;
  uint32_t handed = 0;
  std::vector<uint32_t> per(4, 0);
  std::vector<uint64_t> tx_before(threads, 0);
  for (uint32_t t = 0; t < threads; ++t) {
    dp::Forwarder& fw = *fws[t];
    for (uint32_t u = 0; u < threads; ++u) tx_before[u] = fws[u]->counters(1).tx_packets.load();
    uint64_t q_before[4];
    for (uint32_t qp = 0; qp < 4; ++qp) q_before[qp] = fw.queue_counters(1, qp).tx_packets.load();
    send_flows(fw, 100, static_cast<uint16_t>(2000 + 1000 * t));
    for (auto& other : fws) other->drain_handoffs();
    const auto& tg = ports[1]->dp().rx_for[t];
    for (uint32_t qp = 0; qp < 4; ++qp) {
      const uint32_t got = received(qp);
      per[qp] += got;
      total += got;
      const bool candidate = std::find(tg.q, tg.q + tg.n, qp) != tg.q + tg.n;
      if (!candidate) {
        EXPECT_EQ(got, 0u) << "thread " << t << " wrote queue " << qp;
      }
      if (tg.via == port::PortDp::kDirect) {
        EXPECT_EQ(fw.queue_counters(1, qp).tx_packets.load() - q_before[qp], got)
            << "thread " << t << " queue " << qp;
      } else if (candidate) {
        // Handed to the queue's writer, which delivered it.
        EXPECT_EQ(got, 100u);
        EXPECT_EQ(fw.queue_counters(1, qp).handoff_packets.load(), 100u);
        EXPECT_EQ(fw.queue_counters(1, qp).tx_packets.load(), 0u);
        EXPECT_EQ(fws[tg.via]->counters(1).tx_packets.load() - tx_before[tg.via], 100u);
        handed += got;
      }
    }
    if (tg.via == port::PortDp::kDirect) {
      EXPECT_EQ(fw.counters(1).tx_packets.load() - tx_before[t], 100u);
    }
    EXPECT_EQ(fw.queue_counters(0, 0).rx_packets.load(), 100u);
  }
  EXPECT_EQ(total, 100u * threads);
  EXPECT_EQ(per[2], 0u);  // disabled
  for (uint32_t qp : {0u, 1u, 3u}) EXPECT_GT(per[qp], 0u) << qp;
  // With fewer queues than threads (3 < 4) one thread handed everything off; otherwise none.
  EXPECT_EQ(handed, threads > 3 ? 100u : 0u);
  // The self-check saw no two threads inside one queue.
  for (uint32_t qp = 0; qp < 4; ++qp) EXPECT_EQ(ports[1]->rx_shared(qp).concurrent.load(), 0u);

  // Re-enable pair 2: it gets traffic again (one thread, several candidates).
  ASSERT_TRUE(fes[1]->plain(Req::kSetVringEnable, VringState{4, 1}));
  ASSERT_TRUE(fes[1]->plain(Req::kSetVringEnable, VringState{5, 1}));
  EXPECT_EQ(ports[1]->dp().rx_ready, 4u);
  if (threads == 1) {
    dp::Forwarder fw(&tables, &dp::tsc_now_ns, 0);
    send_flows(fw, 100, 7000);
    EXPECT_GT(received(2), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, MqDatapathTest, ::testing::Values(1u, 2u, 4u));

}  // namespace
}  // namespace vl
