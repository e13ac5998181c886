// The frame trace (dp/trace.h) pinned to the forwarder: every case is traced first (the
// trace must change nothing: MAC table and counters as they were), then sent for real
// through a Forwarder with the same tables, and the ports that received the frame (as it
// left each: tags added or removed), the drops by reason and port, and the packet counters
// must be what the trace said. Bridge (learned, unknown, broadcast, multicast, back to the
// ingress port, a frame to its own source, too big, short, a port that is not active),
// cross-connect, and VLANs (access, trunk, native VLAN, a tag that makes a frame too big).
// Also the hex parser's hostile input and the header parse.
#include "dp/trace.h"

#include <gtest/gtest.h>

#include "pmd_forwarders.h"

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dp/fdb.h"
#include "dp/forwarder.h"
#include "dp/handoff.h"
#include "fake_frontend.h"
#include "port/vhost_port.h"

namespace vl {
namespace {

using port::Drop;
using test::FakeQuiescer;
using test::Frontend;

std::vector<uint8_t> mac(uint8_t last) { return {0x02, 0, 0, 0, 0, last}; }
const std::vector<uint8_t> kBcast(6, 0xff);
const std::vector<uint8_t> kMcast = {0x01, 0x00, 0x5e, 0x00, 0x00, 0x01};

/// A frame dst, src, [802.1Q tag of `vid`], ethertype 0x88b5, `len` bytes in all.
std::vector<uint8_t> frame(const std::vector<uint8_t>& dst, const std::vector<uint8_t>& src,
                           uint32_t len = 64, int vid = -1) {
  std::vector<uint8_t> f(dst);
  f.insert(f.end(), src.begin(), src.end());
  if (vid >= 0) f.insert(f.end(), {0x81, 0x00, static_cast<uint8_t>(vid >> 8), static_cast<uint8_t>(vid)});
  f.insert(f.end(), {0x88, 0xb5});
  for (uint32_t i = static_cast<uint32_t>(f.size()); i < len; ++i) f.push_back(static_cast<uint8_t>(i));
  f.resize(len);
  return f;
}

/// `f` as it leaves a port that adds (+1, VLAN `vid`) or removes (-1) its tag.
std::vector<uint8_t> edited(std::vector<uint8_t> f, int edit, uint16_t vid) {
  if (edit > 0) f.insert(f.begin() + 12, {0x81, 0x00, static_cast<uint8_t>(vid >> 8), static_cast<uint8_t>(vid)});
  if (edit < 0) f.erase(f.begin() + 12, f.begin() + 16);
  return f;
}

/// `n` ports (VhostPorts over socketpairs, MTU 1500: largest frame 1518) and the Forwarder
/// of each of `threads` PMD threads (thread 0 polls; with more, a port whose receive queue
/// another thread writes gets its frames through a handoff ring); port i is active unless
/// listed in `idle` (its front-end never starts).
class Trace : public ::testing::Test {
 protected:
  void start(uint32_t n, dp::ForwardMode mode, std::set<uint32_t> idle = {}, uint32_t threads = 1) {
    q = std::make_unique<FakeQuiescer>(threads);
    tables.pmd_threads = threads;
    fdb = std::make_unique<dp::Fdb>(1024, 64, 300);
    for (uint32_t i = 0; i < n; ++i) {
      ports.push_back(std::make_unique<port::VhostPort>(i, test::rig_port_config(i), q.get()));
      fes.push_back(std::make_unique<Frontend>(1));
      tables.ports[i] = ports[i].get();
      if (idle.count(i)) continue;
      ASSERT_TRUE(test::connect_port(*ports[i], *fes[i]));
      fes[i]->start_pair(0);
      ASSERT_TRUE(ports[i]->active());
      for (uint32_t k = 0; k < 64; ++k) fes[i]->rings[0]->add_rx({2048});
    }
    tables.nports = n;
    tables.mode = mode;
    for (uint32_t i = 0; i < n; ++i) tables.xc_peer[i] = i ^ 1;
    tables.fdb = fdb.get();
    tables.now_s = 100;
    fdb->set_vlans(tables.vlans);
    pmds.build(&tables, threads);
    fw = fws[0].get();
  }
  /// Access port of `vlan`, or a trunk of `trunks` with `native`.
  void vlan(uint32_t p, uint16_t access, std::vector<uint16_t> trunks = {}, uint16_t native = 0) {
    tables.vlans = true;
    fdb->set_vlans(true);
    tables.vlan[p] = dp::PortVlan::from(access, trunks, native);
  }

  struct Seen {
    std::vector<port::CounterSnapshot> counters;
    std::set<std::pair<uint64_t, uint32_t>> fdb;
  };
  Seen seen() {
    Seen s;
    for (uint32_t p = 0; p < ports.size(); ++p) {
      s.counters.emplace_back();
      for (const auto& f : fws) f->counters(p).accumulate(s.counters.back());
    }
    for (const auto& e : fdb->entries(tables.now_s.load())) s.fdb.insert({e.mac, e.port});
    return s;
  }
  void expect_same(const Seen& a, const Seen& b, const std::string& what) {
    EXPECT_EQ(a.fdb, b.fdb) << what << ": the MAC table changed";
    for (uint32_t p = 0; p < a.counters.size(); ++p) {
      EXPECT_EQ(a.counters[p].rx_packets, b.counters[p].rx_packets) << what << " port " << p;
      EXPECT_EQ(a.counters[p].tx_packets, b.counters[p].tx_packets) << what << " port " << p;
      for (uint32_t d = 0; d < port::kNumDrops; ++d)
        EXPECT_EQ(a.counters[p].drops[d], b.counters[p].drops[d]) << what << " port " << p << " " << d;
    }
  }
  std::vector<std::vector<uint8_t>> received(uint32_t p) {
    std::vector<std::vector<uint8_t>> out;
    if (!ports[p]->active()) return out;
    while (auto e = fes[p]->rings[0]->next_used()) {
      auto b = fes[p]->rings[0]->done_bytes(static_cast<uint16_t>(e->id), e->len);
      out.emplace_back(b.begin() + 12, b.end());
    }
    return out;
  }
  /// Sends `f` from port `in` for real and returns what happened.
  void send(uint32_t in, const std::vector<uint8_t>& f) {
    fes[in]->rings[1]->add_tx(test::with_net_hdr(virtio::NetHdr{}, 12, f));
    EXPECT_EQ(fw->poll(in, 0), 1u);
    fw->flush_all();
    for (const auto& f : fws) f->drain_handoffs();
    while (fes[in]->rings[1]->next_used()) {
    }
  }

  /// The case: traced (nothing changes), then sent; the outcome is the trace's.
  dp::TraceResult pinned(uint32_t in, const std::vector<uint8_t>& f, const std::string& what) {
    const Seen before = seen();
    const auto n = static_cast<uint32_t>(f.size());
    const dp::TraceResult r = dp::trace_frame(tables, in, f.data(), n, n, 0);
    expect_same(before, seen(), what + " (the trace)");
    send(in, f);
    const Seen after = seen();
    std::vector<port::CounterSnapshot> want = before.counters;
    want[in].rx_packets += 1;
    if (r.drop != Drop::kCount) want[in].drops[static_cast<uint32_t>(r.drop)] += 1;
    std::set<uint32_t> delivered;
    for (const dp::TraceOut& x : r.out) {
      if (x.drop != Drop::kCount) {
        want[x.drop_port].drops[static_cast<uint32_t>(x.drop)] += 1;
        continue;
      }
      want[x.port].tx_packets += 1;
      delivered.insert(x.port);
      const auto got = received(x.port);
      const uint16_t vid = static_cast<uint16_t>(r.vlan);
      EXPECT_EQ(got, std::vector<std::vector<uint8_t>>{edited(f, x.tag_edit, vid)})
          << what << ": port " << x.port << " did not get the frame as the trace said";
      EXPECT_EQ(x.len, edited(f, x.tag_edit, vid).size()) << what;
    }
    for (uint32_t p = 0; p < ports.size(); ++p) {
      if (!delivered.count(p)) {
        EXPECT_TRUE(received(p).empty()) << what << ": port " << p << " got it";
      }
      EXPECT_EQ(after.counters[p].rx_packets, want[p].rx_packets) << what << " port " << p;
      EXPECT_EQ(after.counters[p].tx_packets, want[p].tx_packets) << what << " port " << p;
      for (uint32_t d = 0; d < port::kNumDrops; ++d)
        EXPECT_EQ(after.counters[p].drops[d], want[p].drops[d])
            << what << ": port " << p << " drop " << port::drop_name(static_cast<Drop>(d));
    }
    return r;
  }
  std::vector<uint32_t> outs(const dp::TraceResult& r) {
    std::vector<uint32_t> v;
    for (const auto& x : r.out) v.push_back(x.port);
    return v;
  }

  std::unique_ptr<FakeQuiescer> q;
  std::unique_ptr<dp::Fdb> fdb;
  std::vector<std::unique_ptr<port::VhostPort>> ports;
  std::vector<std::unique_ptr<Frontend>> fes;
  dp::SwitchTables tables;
  test::PmdForwarders pmds;  // (tests/unit/pmd_forwarders.h)
  std::vector<std::unique_ptr<dp::Forwarder>>& fws = pmds.fws;
  dp::Forwarder* fw = nullptr;
};

TEST_F(Trace, BridgeFloodsLearnsAndNeverSendsBack) {
  start(4, dp::ForwardMode::kBridge, {3});  // port d is not active: never flooded to
  auto r = pinned(0, frame(kBcast, mac(1)), "broadcast");
  EXPECT_EQ(r.why, dp::TraceWhy::kBroadcast);
  EXPECT_TRUE(r.flooded);
  EXPECT_EQ(outs(r), (std::vector<uint32_t>{1, 2}));
  EXPECT_TRUE(r.learnable);
  EXPECT_FALSE(r.src_known);  // not in the table before the frame itself taught it
  r = pinned(1, frame(mac(9), mac(2)), "unknown unicast");
  EXPECT_EQ(r.why, dp::TraceWhy::kUnknown);
  EXPECT_EQ(outs(r), (std::vector<uint32_t>{0, 2}));
  r = pinned(2, frame(mac(1), mac(3)), "learned unicast");
  EXPECT_EQ(r.why, dp::TraceWhy::kLearned);
  EXPECT_TRUE(r.dst_known);
  EXPECT_EQ(r.dst_entry.port, 0u);
  EXPECT_EQ(outs(r), (std::vector<uint32_t>{0}));
  r = pinned(0, frame(kMcast, mac(1)), "multicast");
  EXPECT_EQ(r.why, dp::TraceWhy::kMulticast);
  EXPECT_TRUE(r.src_known);  // a refresh
  EXPECT_EQ(r.src_entry.port, 0u);
  r = pinned(1, frame(mac(1), mac(2), 1600), "too big for the learned port");
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0].drop, Drop::kTooBig);
  EXPECT_EQ(r.out[0].drop_port, 0u);
  EXPECT_EQ(r.out[0].max_frame, 1518u);
  r = pinned(0, frame(kBcast, mac(1), 1518), "the largest frame, flooded");
  EXPECT_EQ(outs(r), (std::vector<uint32_t>{1, 2}));
  r = pinned(0, frame(kBcast, mac(1), 1519), "one byte too many, flooded");
  EXPECT_EQ(r.out.size(), 2u);
  for (const auto& x : r.out) EXPECT_EQ(x.drop, Drop::kTooBig);
  // Back to the ingress port: mac(3) sits on c; a frame from c to it is dropped.
  r = pinned(2, frame(mac(3), mac(7)), "learned on its ingress port");
  EXPECT_EQ(r.why, dp::TraceWhy::kBackToIngress);
  EXPECT_EQ(r.drop, Drop::kNoDestination);
  r = pinned(1, frame(mac(5), mac(5)), "to its own source");
  EXPECT_EQ(r.why, dp::TraceWhy::kBackToIngress);
  EXPECT_TRUE(r.to_own_source);
  r = pinned(0, frame(mac(1), {0, 0, 0, 0, 0, 0}), "a zero source is not learned");
  EXPECT_FALSE(r.learnable);
  r = pinned(1, std::vector<uint8_t>(13, 0xff), "shorter than an Ethernet header");
  EXPECT_EQ(r.why, dp::TraceWhy::kShort);
  EXPECT_EQ(r.drop, Drop::kBadHeader);
  // A MAC on the port that is not active: unicast to it goes nowhere (no_destination).
  fdb->learn(dp::mac_from_bytes(mac(4).data()), 3, 100);
  r = pinned(0, frame(mac(4), mac(1)), "learned on a port that is not active");
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0].drop, Drop::kNoDestination);
  EXPECT_EQ(r.out[0].drop_port, 0u);
}

TEST_F(Trace, NothingToFloodTo) {
  start(2, dp::ForwardMode::kBridge, {1});
  const auto r = pinned(0, frame(kBcast, mac(1)), "broadcast, alone");
  EXPECT_TRUE(r.flooded);
  EXPECT_TRUE(r.out.empty());
  EXPECT_EQ(r.drop, Drop::kNoDestination);
}

TEST_F(Trace, CrossConnect) {
  start(3, dp::ForwardMode::kXconnect);
  tables.xc_peer[2] = dp::SwitchTables::kNoPeer;
  auto r = pinned(0, frame(mac(9), mac(1)), "to the peer");
  EXPECT_EQ(r.why, dp::TraceWhy::kXconnect);
  EXPECT_EQ(outs(r), (std::vector<uint32_t>{1}));
  EXPECT_FALSE(r.bridged);
  r = pinned(1, frame(kBcast, mac(2), 2000), "too big for the peer");
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0].drop, Drop::kTooBig);
  r = pinned(2, frame(kBcast, mac(3)), "no peer");
  EXPECT_EQ(r.why, dp::TraceWhy::kNoPeer);
  EXPECT_EQ(r.drop, Drop::kNoDestination);
}

TEST_F(Trace, VlansAccessTrunkNative) {
  start(4, dp::ForwardMode::kBridge);
  vlan(0, 10);                // a: access 10
  vlan(1, 0, {10, 20});       // b: trunk 10, 20, no native VLAN
  vlan(2, 20);                // c: access 20
  vlan(3, 0, {10, 20}, 20);   // d: trunk 10, 20, native 20
  auto r = pinned(0, frame(kBcast, mac(1)), "untagged on an access port");
  EXPECT_EQ(r.vlan, 10);
  EXPECT_EQ(outs(r), (std::vector<uint32_t>{1, 3}));
  for (const auto& x : r.out) EXPECT_EQ(x.tag_edit, 1);  // tagged on both trunks
  r = pinned(0, frame(kBcast, mac(1), 64, 10), "tagged on an access port");
  EXPECT_EQ(r.why, dp::TraceWhy::kVlanIngress);
  EXPECT_EQ(r.drop, Drop::kVlanNotAllowed);
  r = pinned(1, frame(kBcast, mac(2), 64, 20), "VLAN 20 from a trunk");
  EXPECT_EQ(outs(r), (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(r.out[0].tag_edit, -1);  // c: access, untagged
  EXPECT_EQ(r.out[1].tag_edit, -1);  // d: 20 is its native VLAN
  r = pinned(1, frame(kBcast, mac(2)), "untagged on a trunk without a native VLAN");
  EXPECT_EQ(r.drop, Drop::kVlanNotAllowed);
  r = pinned(3, frame(kBcast, mac(4)), "untagged on a trunk: its native VLAN");
  EXPECT_EQ(r.vlan, 20);
  EXPECT_EQ(outs(r), (std::vector<uint32_t>{1, 2}));
  r = pinned(1, frame(kBcast, mac(2), 64, 30), "a VLAN the trunk does not carry");
  EXPECT_EQ(r.drop, Drop::kVlanNotAllowed);
  r = pinned(1, frame(kBcast, mac(2), 17, 10), "the 802.1Q type without room for a tag");
  EXPECT_EQ(r.why, dp::TraceWhy::kShortTag);
  EXPECT_EQ(r.drop, Drop::kVlanNotAllowed);
  // (VLAN, MAC) keys: mac(2) learned in VLAN 20 on b is unknown in VLAN 10.
  r = pinned(2, frame(mac(2), mac(3)), "learned in the frame's VLAN");
  EXPECT_EQ(r.why, dp::TraceWhy::kLearned);
  EXPECT_EQ(outs(r), (std::vector<uint32_t>{1}));
  EXPECT_EQ(r.out[0].tag_edit, 1);
  r = pinned(0, frame(mac(2), mac(1)), "learned in another VLAN only");
  EXPECT_EQ(r.why, dp::TraceWhy::kUnknown);
  // A tag added on the way out makes a 1516-byte frame 1520: above b's 1518.
  r = pinned(0, frame(mac(2), mac(1), 1516), "too big once tagged");
  EXPECT_EQ(outs(r), (std::vector<uint32_t>{1, 3}));
  for (const auto& x : r.out) {
    EXPECT_EQ(x.len, 1520u);
    EXPECT_EQ(x.drop, Drop::kTooBig);
  }
  // And one that loses its tag fits: 1522 bytes on a trunk, 1518 on the access port.
  r = pinned(1, frame(mac(3), mac(2), 1522, 20), "fits once untagged");
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0].len, 1518u);
  EXPECT_EQ(r.out[0].drop, Drop::kCount);
}

// Two PMD threads, single-queue ports: thread 0 writes some ports' receive queues and hands
// the frames for the others to thread 1 (dp/handoff.h); a frame too big for its receiver
// is dropped before the copy into the ring.
TEST_F(Trace, HandedToTheWriterThread) {
  start(3, dp::ForwardMode::kBridge, {}, 2);
  auto r = pinned(0, frame(kBcast, mac(1)), "broadcast over two threads");
  ASSERT_EQ(outs(r), (std::vector<uint32_t>{1, 2}));
  uint32_t handed = 0;
  for (const auto& x : r.out) {
    const auto& tg = ports[x.port]->dp().rx_for[0];
    EXPECT_EQ(x.handoff, tg.via == port::PortDp::kDirect ? -1 : static_cast<int>(tg.via));
    handed += x.handoff >= 0;
  }
  EXPECT_GE(handed, 1u);
  r = pinned(0, frame(kBcast, mac(1), 1600), "too big, over two threads");
  for (const auto& x : r.out) EXPECT_EQ(x.drop, Drop::kTooBig);
}

TEST(TraceHex, HostileTextIsRefused) {
  std::vector<uint8_t> b;
  std::string err;
  EXPECT_TRUE(dp::parse_frame_hex("ff:ff-ff.ff ff\tffAbcD", &b, &err)) << err;
  EXPECT_EQ(b, (std::vector<uint8_t>{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xab, 0xcd}));
  EXPECT_EQ(dp::frame_hex(b.data(), b.size()), "ffffffffffffabcd");
  for (const std::string bad : {"", ":::", "f", "fff", "0x00", "zz", "f f", "ff\n", "ff\xc3\xa9"}) {
    EXPECT_FALSE(dp::parse_frame_hex(bad, &b, &err)) << bad;
    EXPECT_FALSE(err.empty()) << bad;
  }
  EXPECT_FALSE(dp::parse_frame_hex(std::string_view("ff\0ff", 5), &b, &err));
  const std::string max(2 * virtio::kMaxFrameLen, 'a');
  EXPECT_TRUE(dp::parse_frame_hex(max, &b, &err));
  EXPECT_EQ(b.size(), virtio::kMaxFrameLen);
  EXPECT_FALSE(dp::parse_frame_hex(max + "aa", &b, &err));
  EXPECT_NE(err.find("largest frame"), std::string::npos);
}

TEST(TraceHeaders, EthernetTagIpAndPorts) {
  // 802.1Q VLAN 5 priority 3, IPv4 UDP 10.0.0.1:1234 -> 10.0.0.2:53.
  std::vector<uint8_t> f = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x81, 0x00, 0x60, 0x05, 0x08, 0x00,
                            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
                            0x04, 0xd2, 0x00, 0x35, 0, 8, 0, 0};
  auto h = dp::parse_headers(f.data(), static_cast<uint32_t>(f.size()), static_cast<uint32_t>(f.size()));
  EXPECT_TRUE(h.eth && h.tagged && h.tag_whole);
  EXPECT_EQ(h.vid, 5);
  EXPECT_EQ(h.pcp, 3);
  EXPECT_EQ(h.ethertype, 0x0800);
  EXPECT_EQ(h.ip, 4);
  EXPECT_EQ(h.l4, 17);
  EXPECT_TRUE(h.ports);
  EXPECT_EQ(h.sport, 1234);
  EXPECT_EQ(h.dport, 53);
  // Cut inside the IPv4 header: the Ethernet part only; cut inside the tag: tagged, no tag.
  h = dp::parse_headers(f.data(), 30, 100);
  EXPECT_EQ(h.ip, 0);
  EXPECT_EQ(h.len, 100u);
  h = dp::parse_headers(f.data(), 16, 16);
  EXPECT_TRUE(h.tagged);
  EXPECT_FALSE(h.tag_whole);
  // An IPv4 fragment after the first has no ports.
  f[18 + 6] = 0x00;
  f[18 + 7] = 0x10;
  h = dp::parse_headers(f.data(), static_cast<uint32_t>(f.size()), static_cast<uint32_t>(f.size()));
  EXPECT_TRUE(h.fragment);
  EXPECT_FALSE(h.ports);
}

}  // namespace
}  // namespace vl
