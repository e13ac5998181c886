// Uplink ports (port/uplink_port.h) over a fake wire: frames from one wire reach the other
// byte for byte through the forwarder, buffers go round many times, a TSO frame passes
// whole to a wire with offloads and is segmented for one without, and what the wire
// refuses or what is too big is counted.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "dp/forwarder.h"
#include "fake_frontend.h"
#include "port/uplink_port.h"
#include "fake_wire.h"
#include "ref_frames.h"
#include "wire/wire.h"

namespace vl::test {
namespace {

using ref::Bytes;

/// Uplinks on fake wires (two cross-connected by default, or bridged), one forwarder, no
/// PMD threads. `vlan(i, cfg)` may set port i's VLAN settings.
struct UplinkRig {
  FakeQuiescer quiescer{1};
  dp::Fdb fdb{1024};
  dp::SwitchTables tables;
  std::vector<FakeWire*> wire;
  std::vector<std::unique_ptr<port::UplinkPort>> up;
  std::unique_ptr<dp::Forwarder> fw;

  UplinkRig(bool offloads_a, bool offloads_b) : UplinkRig({offloads_a, offloads_b}, dp::ForwardMode::kXconnect) {}
  UplinkRig(std::vector<bool> offloads, dp::ForwardMode mode,
            const std::function<void(uint32_t, port::PortConfig&)>& vlan = {}) {
    tables.mode = mode;
    tables.fdb = &fdb;
    const uint32_t n = static_cast<uint32_t>(offloads.size());
    for (uint32_t i = 0; i < n; ++i) {
      port::PortConfig c;
      c.name = std::string(1, static_cast<char>('a' + i));
      c.type = port::PortType::kAfPacket;
      c.path = "fake0";
      if (vlan) vlan(i, c);
      dp::PortVlan& v = tables.vlan[i];
      v = dp::PortVlan::from(c.vlan, c.trunks, c.native_vlan);
      tables.vlans |= v.mode != dp::PortVlan::Mode::kAll;
      auto w = std::make_unique<FakeWire>(offloads[i]);
      wire.push_back(w.get());
      up.push_back(std::make_unique<port::UplinkPort>(i, c, std::move(w), &quiescer));
      std::string err;
      EXPECT_TRUE(up[i]->start(&err)) << err;
      tables.ports[i] = up[i].get();
      tables.xc_peer[i] = i ^ 1;
    }
    tables.nports = n;
    fw = std::make_unique<dp::Forwarder>(&tables);
  }
  /// Polls every port until no wire has anything left.
  void run() {
    for (int i = 0; i < 10000; ++i) {
      bool any = fw->holding();
      for (uint32_t p = 0; p < wire.size(); ++p) {
        any |= !wire[p]->inbox.empty();
        fw->poll(p);
      }
      fw->end_pass();
      if (!any) break;
    }
    fw->flush_all();
  }
  port::CounterSnapshot counters(uint32_t p) const {
    port::CounterSnapshot s;
    fw->counters(p).accumulate(s);
    return s;
  }
};

TEST(UplinkPort, FramesCrossByteForByteAndBuffersGoRound) {
  UplinkRig r(false, false);
  std::vector<Bytes> want;
  // Ten times the ring: every buffer of both queues is used and posted again.
  for (uint32_t i = 0; i < 2560; ++i) {
    want.push_back(eth_frame(60 + (i * 37) % 1455, static_cast<uint8_t>(i)));
    r.wire[0]->receive(want.back());
    if (i % 200 == 199) r.run();
  }
  r.run();
  ASSERT_EQ(r.wire[1]->sent.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const Bytes& got = r.wire[1]->sent[i];
    ASSERT_EQ(got.size(), wire::kHdrLen + want[i].size()) << i;
    EXPECT_EQ(Bytes(got.begin() + wire::kHdrLen, got.end()), want[i]) << i;
    // No offload asked for; num_buffers (the last two bytes) is 1 (virtio 1.2 §5.1.6.4).
    EXPECT_EQ(Bytes(got.begin(), got.begin() + wire::kLegacyHdrLen), Bytes(wire::kLegacyHdrLen, 0)) << i;
  }
  EXPECT_EQ(r.counters(0).rx_packets, want.size());
  EXPECT_EQ(r.counters(1).tx_packets, want.size());
  EXPECT_EQ(r.up[0]->queue_counters(0).wire_rx_packets, want.size());
  EXPECT_EQ(r.up[1]->queue_counters(0).wire_tx_packets, want.size());
  EXPECT_EQ(r.up[1]->queue_counters(0).bad_used, 0u);
  for (uint32_t d = 0; d < port::kNumDrops; ++d) EXPECT_EQ(r.counters(1).drops[d], 0u) << d;
}

TEST(UplinkPort, WhatTheWireRefusesIsCountedAndItsBuffersComeBack) {
  UplinkRig r(false, false);
  r.wire[1]->refuse = true;
  for (uint32_t i = 0; i < 600; ++i) r.wire[0]->receive(eth_frame(100, 1));
  r.run();
  EXPECT_EQ(r.up[1]->queue_counters(0).wire_tx_dropped, 600u);
  EXPECT_TRUE(r.wire[1]->sent.empty());
  r.wire[1]->refuse = false;
  for (uint32_t i = 0; i < 300; ++i) r.wire[0]->receive(eth_frame(100, 2));
  r.run();
  EXPECT_EQ(r.wire[1]->sent.size(), 300u);  // every receive buffer was posted again
}

TEST(UplinkPort, FramesAboveTheMtuAreTooBig) {
  UplinkRig r(false, false);
  r.wire[0]->receive(eth_frame(1500 + 14 + 4 + 1, 3));  // one byte above MTU + header + tag
  Bytes tagged = eth_frame(1500 + 14 + 4, 4);           // the largest frame, with its tag
  tagged[12] = 0x81;
  tagged[13] = 0x00;
  r.wire[0]->receive(tagged);
  r.wire[0]->receive(eth_frame(1500 + 14 + 4, 5));  // as long, untagged: above the MTU
  r.wire[0]->receive(eth_frame(1500 + 14, 6));      // the largest untagged frame
  r.run();
  EXPECT_EQ(r.wire[1]->sent.size(), 2u);
  EXPECT_EQ(r.counters(1).drops[static_cast<uint32_t>(port::Drop::kTooBig)], 1u);
  EXPECT_EQ(r.up[1]->queue_counters(0).wire_tx_too_big, 1u);
}

TEST(UplinkPort, TsoFramePassesWholeToAWireWithOffloadsAndIsSegmentedForOneWithout) {
  const ref::FrameSpec spec;
  const ref::Built tso = ref::build(spec, ref::payload_of(20000), true);
  const virtio::NetHdr h = ref::tso_hdr(false, 1448, tso.l4);
  {
    UplinkRig r(true, true);
    r.wire[0]->receive(tso.f, h);
    r.run();
    ASSERT_EQ(r.wire[1]->sent.size(), 1u);
    const Bytes& got = r.wire[1]->sent[0];
    virtio::NetHdr out;
    std::memcpy(&out, got.data(), sizeof out);
    EXPECT_EQ(out.gso_type, offload::kGsoTcpV4);
    EXPECT_EQ(out.gso_size, 1448);
    EXPECT_EQ(got.size(), wire::kHdrLen + tso.f.size());
  }
  {
    UplinkRig r(true, false);
    r.wire[0]->receive(tso.f, h);
    r.run();
    const size_t segs = (20000 + 1447) / 1448;
    ASSERT_EQ(r.wire[1]->sent.size(), segs);
    size_t payload = 0;
    for (const Bytes& s : r.wire[1]->sent) {
      EXPECT_LE(s.size(), wire::kHdrLen + 1514);
      virtio::NetHdr out;
      std::memcpy(&out, s.data(), sizeof out);
      EXPECT_EQ(out.gso_type, 0);
      EXPECT_EQ(out.flags, 0);  // checksums filled in: the wire has no offloads
      const Bytes ip(s.begin() + wire::kHdrLen + tso.l3, s.end());
      EXPECT_EQ(ref::ref_csum(Bytes(ip.begin(), ip.begin() + 20)), 0);
      payload += s.size() - wire::kHdrLen - tso.l4 - 20;
    }
    EXPECT_EQ(payload, 20000u);
  }
}

TEST(UplinkPort, StartReportsTheWireAndItsFeatures) {
  UplinkRig r(true, false);
  EXPECT_STREQ(r.up[0]->type_name(), "af-packet");
  EXPECT_STREQ(r.up[0]->state(), "connected");
  EXPECT_TRUE(virtio::has(r.up[0]->features(), virtio::kNetFHostTso4));
  EXPECT_FALSE(virtio::has(r.up[1]->features(), virtio::kNetFHostTso4));
  EXPECT_EQ(r.up[0]->max_frame(), 1518u);
  r.up[0]->stop();
  EXPECT_STREQ(r.up[0]->state(), "down");
  EXPECT_FALSE(r.up[0]->active());
}

/// A frame from `src` to `dst` (last octets of 52:54:00:00:00:xx), tagged with `vid` if
/// it is not 0, of `len` bytes before the tag.
Bytes mac_frame(uint8_t dst, uint8_t src, uint16_t vid = 0, size_t len = 100) {
  Bytes f = eth_frame(len, src);
  f[5] = dst;
  if (dst == 0xff) std::fill(f.begin(), f.begin() + 6, 0xff);
  f[11] = src;
  if (vid) f.insert(f.begin() + 12, {0x81, 0x00, static_cast<uint8_t>(vid >> 8), static_cast<uint8_t>(vid)});
  return f;
}
/// The frames a wire sent, without their headers.
std::vector<Bytes> frames_sent(FakeWire* w) {
  std::vector<Bytes> out;
  for (const Bytes& b : w->sent) out.emplace_back(b.begin() + wire::kHdrLen, b.end());
  w->sent.clear();
  return out;
}
uint64_t vlan_drops(const UplinkRig& r, uint32_t p) {
  return r.counters(p).drops[static_cast<uint32_t>(port::Drop::kVlanNotAllowed)];
}

/// a: access VLAN 10, b: access VLAN 20, t: trunk of 10 and 20, c: every VLAN (no settings).
UplinkRig vlan_rig(bool offloads = false) {
  return UplinkRig({offloads, offloads, offloads, offloads}, dp::ForwardMode::kBridge,
                   [](uint32_t i, port::PortConfig& c) {
                     if (i == 0) c.vlan = 10;
                     if (i == 1) c.vlan = 20;
                     if (i == 2) c.trunks = {10, 20};
                   });
}

TEST(UplinkVlan, AccessFramesLeaveTrunksTaggedAndStayInTheirVlan) {
  UplinkRig r = vlan_rig();
  r.wire[0]->receive(mac_frame(0xff, 1));  // a broadcast in VLAN 10
  r.run();
  EXPECT_EQ(frames_sent(r.wire[2]), std::vector<Bytes>{mac_frame(0xff, 1, 10)});
  EXPECT_TRUE(r.wire[1]->sent.empty());  // VLAN 20: nothing
  // c carries every VLAN: tagged, as it would have come from a trunk.
  EXPECT_EQ(frames_sent(r.wire[3]), std::vector<Bytes>{mac_frame(0xff, 1, 10)});
  // From the trunk, tagged 20: untagged to b only.
  r.wire[2]->receive(mac_frame(0xff, 2, 20));
  r.run();
  EXPECT_EQ(frames_sent(r.wire[1]), std::vector<Bytes>{mac_frame(0xff, 2)});
  EXPECT_EQ(frames_sent(r.wire[3]), std::vector<Bytes>{mac_frame(0xff, 2, 20)});
  EXPECT_TRUE(r.wire[0]->sent.empty());
  // A VLAN the trunk does not carry, an untagged frame on it (no native VLAN), a tagged
  // frame on an access port: each dropped and counted on its ingress port.
  r.wire[2]->receive(mac_frame(0xff, 2, 30));
  r.wire[2]->receive(mac_frame(0xff, 2));
  r.wire[0]->receive(mac_frame(0xff, 1, 10));
  r.run();
  EXPECT_EQ(vlan_drops(r, 2), 2u);
  EXPECT_EQ(vlan_drops(r, 0), 1u);
  for (FakeWire* w : r.wire) EXPECT_TRUE(w->sent.empty());
}

TEST(UplinkVlan, ATagWithoutTheEthertypeAfterItIsInNoVlan) {
  UplinkRig r = vlan_rig();
  // Broadcasts in VLAN 20 cut to 14..17 bytes (the 802.1Q TPID, part of the tag, no
  // ethertype after it), from the trunk and from the port of every VLAN, then one of 18.
  const Bytes whole = mac_frame(0xff, 2, 20, 14);  // 18 bytes: MACs, tag, ethertype
  for (uint32_t in : {2u, 3u}) {
    for (size_t n = 14; n < 18; ++n) r.wire[in]->receive(Bytes(whole.begin(), whole.begin() + n));
  }
  r.run();
  EXPECT_EQ(vlan_drops(r, 2), 4u);
  EXPECT_EQ(vlan_drops(r, 3), 4u);
  for (FakeWire* w : r.wire) EXPECT_TRUE(w->sent.empty());  // (untagged they would be 10..13 bytes)
  r.wire[2]->receive(whole);
  r.run();
  EXPECT_EQ(frames_sent(r.wire[1]), std::vector<Bytes>{mac_frame(0xff, 2, 0, 14)});
  EXPECT_EQ(frames_sent(r.wire[3]), std::vector<Bytes>{whole});
  for (const auto& u : r.up) EXPECT_EQ(u->queue_counters(0).bad_used, 0u);
}

TEST(UplinkVlan, FramesDroppedByVlanGiveTheirBuffersBackOnceAndTheOthersArriveIntact) {
  UplinkRig r = vlan_rig();
  // Bursts from the trunk where frames of a VLAN it does not carry (30) come first, then
  // broadcasts of VLAN 20, each of its own content: round after round (the port's 256
  // receive buffers go round many times), every VLAN 20 frame reaches b once, intact and
  // in order, and every buffer, the dropped frames' included, comes back exactly once.
  std::vector<Bytes> want;
  for (uint8_t round = 0; round < 40; ++round) {
    for (uint8_t i = 0; i < 32; ++i) {
      Bytes f = mac_frame(0xff, 2, i < 12 ? 30 : 20, 60 + i);
      f[20] = round;
      f[21] = i;
      r.wire[2]->receive(f);
      if (i < 12) continue;
      want.push_back(mac_frame(0xff, 2, 0, 60 + i));  // as it leaves b: untagged
      want.back()[16] = round;
      want.back()[17] = i;
    }
    r.run();
  }
  EXPECT_EQ(vlan_drops(r, 2), 40u * 12);
  const std::vector<Bytes> got = frames_sent(r.wire[1]);
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "frames to b changed, lost or repeated";
  EXPECT_TRUE(r.wire[2]->inbox.empty()) << r.wire[2]->inbox.size() << " frames found no buffer";
  for (const auto& u : r.up) EXPECT_EQ(u->queue_counters(0).bad_used, 0u);
}

TEST(UplinkVlan, PortsOfEveryVlanKeepTagsAndCarryUntaggedFramesInVlanZero) {
  UplinkRig r = vlan_rig();
  r.wire[3]->receive(mac_frame(0xff, 4, 10));  // c, tagged 10: to a (untagged), t (tagged)
  r.wire[3]->receive(mac_frame(0xff, 4));      // c, untagged: VLAN 0, which no other port carries
  r.run();
  EXPECT_EQ(frames_sent(r.wire[0]), std::vector<Bytes>{mac_frame(0xff, 4)});
  EXPECT_EQ(frames_sent(r.wire[2]), std::vector<Bytes>{mac_frame(0xff, 4, 10)});
  EXPECT_TRUE(r.wire[1]->sent.empty());
  r.wire[0]->receive(mac_frame(0xff, 1));  // a's broadcast reaches c tagged 10
  r.run();
  EXPECT_EQ(frames_sent(r.wire[3]), std::vector<Bytes>{mac_frame(0xff, 1, 10)});
}

TEST(UplinkVlan, TheMacTableIsKeyedByVlanAndMac) {
  UplinkRig r = vlan_rig();
  // The same MAC (5) on a in VLAN 10 and on b in VLAN 20.
  r.wire[0]->receive(mac_frame(0xff, 5));
  r.wire[1]->receive(mac_frame(0xff, 5));
  r.run();
  for (FakeWire* w : r.wire) w->sent.clear();
  // Unicast to 5 from the trunk, in each VLAN: to its own port only, untagged.
  r.wire[2]->receive(mac_frame(5, 9, 10));
  r.wire[2]->receive(mac_frame(5, 9, 20));
  r.run();
  EXPECT_EQ(frames_sent(r.wire[0]), std::vector<Bytes>{mac_frame(5, 9)});
  EXPECT_EQ(frames_sent(r.wire[1]), std::vector<Bytes>{mac_frame(5, 9)});
  EXPECT_TRUE(r.wire[3]->sent.empty());  // known in both VLANs: not flooded
  EXPECT_EQ(r.fdb.lookup(dp::vlan_key(dp::mac_from_bytes(mac_frame(5, 0).data() + 0), 10)), 0u);
}

TEST(UplinkVlan, AddingATagMovesTheOffloadOffsetsOfAWholeTsoFrame) {
  UplinkRig r = vlan_rig(true);
  const ref::FrameSpec spec;
  const ref::Built tso = ref::build(spec, ref::payload_of(8000), true);
  const virtio::NetHdr h = ref::tso_hdr(false, 1448, tso.l4);
  r.wire[0]->receive(tso.f, h);  // untagged TSO frame on access port a (VLAN 10)
  r.run();
  ASSERT_EQ(r.wire[2]->sent.size(), 1u);  // the trunk, whole
  const Bytes& got = r.wire[2]->sent[0];
  virtio::NetHdr out;
  std::memcpy(&out, got.data(), sizeof out);
  EXPECT_EQ(out.gso_type, offload::kGsoTcpV4);
  EXPECT_EQ(out.csum_start, h.csum_start + 4);
  EXPECT_EQ(got.size(), wire::kHdrLen + tso.f.size() + 4);
  const Bytes f(got.begin() + wire::kHdrLen, got.end());
  EXPECT_EQ(f[12], 0x81);
  EXPECT_EQ(f[15], 10);
  EXPECT_EQ(Bytes(f.begin() + 16, f.end()), Bytes(tso.f.begin() + 12, tso.f.end()));
}

// A tagged frame whose partial checksum starts before the end of its tag: taking the tag
// off (to an access port) moved csum_start 4 bytes back, wrapping to 65532, and the
// checksum was filled in from there for a port without GUEST_CSUM (an out-of-bounds read
// of 4 GiB). Refused on its way in, as bad_csum.
TEST(UplinkVlan, ATaggedFrameWhoseChecksumStartsInItsTagIsBadCsum) {
  UplinkRig r({false, false, false, true}, dp::ForwardMode::kBridge, [](uint32_t i, port::PortConfig& c) {
    if (i == 0) c.vlan = 10;
    if (i == 1) c.vlan = 20;
    if (i == 2) c.trunks = {10, 20};
  });
  for (uint16_t start = 0; start < 16; ++start) {
    virtio::NetHdr h{};
    h.flags = virtio::kNetHdrFNeedsCsum;
    h.csum_start = start;
    h.csum_offset = 0;
    r.wire[3]->receive(mac_frame(0xff, 4, 10), h);  // c (every VLAN), tagged 10
  }
  virtio::NetHdr ok{};
  ok.flags = virtio::kNetHdrFNeedsCsum;
  ok.csum_start = 16;  // from the ethertype after the tag on: still inside the frame
  ok.csum_offset = 0;
  r.wire[3]->receive(mac_frame(0xff, 4, 10), ok);
  r.run();
  EXPECT_EQ(r.counters(3).drops[static_cast<uint32_t>(port::Drop::kBadCsum)], 16u);
  ASSERT_EQ(r.wire[0]->sent.size(), 1u);  // the last one only, untagged, its checksum filled
  EXPECT_EQ(r.wire[0]->sent[0].size(), wire::kHdrLen + mac_frame(0xff, 4).size());
  EXPECT_EQ(r.wire[2]->sent.size(), 1u);
}

// ---- Port security (dp/l2_rules.h source_allowed) ----

/// Port `p` of the rig forwards only frames from source MACs 52:54:00:00:00:xx, xx in `srcs`.
void guard(UplinkRig& r, uint32_t p, std::vector<uint8_t> srcs) {
  dp::SourceGuard& g = r.tables.guard[p];
  g.n = 0;
  for (uint8_t x : srcs) g.macs[g.n++] = dp::mac_from_bytes(mac_frame(0, x).data() + 6);
  r.tables.guarded.fetch_or(uint64_t{1} << p);
}
uint64_t spoof_drops(const UplinkRig& r, uint32_t p) {
  return r.counters(p).drops[static_cast<uint32_t>(port::Drop::kSourceNotAllowed)];
}

TEST(PortSecurity, OnlyTheAllowedSourcesPassAndTheOthersTeachTheTableNothing) {
  UplinkRig r({false, false, false}, dp::ForwardMode::kBridge);
  guard(r, 0, {1, 2});
  r.wire[0]->receive(mac_frame(0xff, 1));
  r.wire[0]->receive(mac_frame(0xff, 7));  // spoofed: 7 is not a's
  r.wire[0]->receive(mac_frame(0xff, 2));
  r.run();
  EXPECT_EQ(frames_sent(r.wire[1]), (std::vector<Bytes>{mac_frame(0xff, 1), mac_frame(0xff, 2)}));
  EXPECT_EQ(frames_sent(r.wire[2]), (std::vector<Bytes>{mac_frame(0xff, 1), mac_frame(0xff, 2)}));
  EXPECT_EQ(spoof_drops(r, 0), 1u);
  EXPECT_EQ(r.fdb.lookup(dp::mac_from_bytes(mac_frame(7, 0).data())), dp::Fdb::kNoPort);
  EXPECT_EQ(r.fdb.lookup(dp::mac_from_bytes(mac_frame(1, 0).data())), 0u);
  // b, without port security, sends from 9; a's frame claiming 9 is refused: 9 stays b's.
  r.wire[1]->receive(mac_frame(0xff, 9));
  r.wire[0]->receive(mac_frame(9, 9));
  r.run();
  EXPECT_EQ(spoof_drops(r, 0), 2u);
  EXPECT_EQ(r.fdb.lookup(dp::mac_from_bytes(mac_frame(9, 0).data())), 1u);
  EXPECT_EQ(spoof_drops(r, 1), 0u);
}

TEST(PortSecurity, RefusedFramesGiveTheirBuffersBackOnceAndTheOthersArriveIntactInOrder) {
  for (bool vlans : {false, true}) {
    UplinkRig r({false, false}, dp::ForwardMode::kBridge, [&](uint32_t, port::PortConfig& c) {
      if (vlans) c.vlan = 10;
    });
    guard(r, 0, {1});
    std::vector<Bytes> want;
    for (uint8_t round = 0; round < 40; ++round) {
      for (uint8_t i = 0; i < 32; ++i) {
        Bytes f = mac_frame(0xff, i % 3 ? 1 : 5, 0, 60 + i);  // every third one spoofed
        f[20] = round;
        f[21] = i;
        r.wire[0]->receive(f);
        if (i % 3) want.push_back(f);
      }
      r.run();
    }
    EXPECT_EQ(spoof_drops(r, 0), 40u * 11) << "vlans " << vlans;
    EXPECT_TRUE(frames_sent(r.wire[1]) == want) << "frames to b changed, lost or repeated";
    EXPECT_TRUE(r.wire[0]->inbox.empty()) << r.wire[0]->inbox.size() << " frames found no buffer";
    for (const auto& u : r.up) EXPECT_EQ(u->queue_counters(0).bad_used, 0u);
  }
}

TEST(PortSecurity, CrossConnectedAndTaggedFramesAreJudgedByTheirSourceToo) {
  UplinkRig x(false, false);  // cross-connect
  guard(x, 0, {1});
  x.wire[0]->receive(mac_frame(3, 1));
  x.wire[0]->receive(mac_frame(3, 4));
  x.run();
  EXPECT_EQ(frames_sent(x.wire[1]), std::vector<Bytes>{mac_frame(3, 1)});
  EXPECT_EQ(spoof_drops(x, 0), 1u);
  UplinkRig v = vlan_rig();
  guard(v, 2, {2});  // the trunk
  v.wire[2]->receive(mac_frame(0xff, 2, 20));
  v.wire[2]->receive(mac_frame(0xff, 6, 20));
  v.wire[2]->receive(mac_frame(0xff, 6, 30));  // not carried: a VLAN drop, judged first
  v.run();
  EXPECT_EQ(frames_sent(v.wire[1]), std::vector<Bytes>{mac_frame(0xff, 2)});
  EXPECT_EQ(spoof_drops(v, 2), 1u);
  EXPECT_EQ(vlan_drops(v, 2), 1u);
}

}  // namespace
}  // namespace vl::test
