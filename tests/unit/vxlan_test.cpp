// VXLAN tunnel ports (port/vxlan_wire.h) over a fake underlay: a frame from a local port is
// encapsulated to the remote its MAC was learned behind (else to every remote) with the
// outer headers RFC 7348 §5 asks for; a packet from a remote is decapsulated, checked and
// learned from; ARP for the local address is answered and a remote's ARP resolves it; a
// local sender's TSO train passes whole; and each malformed or foreign packet is counted
// under its reason, never delivered.
#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <memory>
#include <string>
#include <vector>

#include "app/config.h"
#include "dp/forwarder.h"
#include "fake_frontend.h"
#include "fake_wire.h"
#include "port/uplink_port.h"
#include "port/vxlan_wire.h"
#include "ref_frames.h"
#include "wire/arp.h"

namespace vl::test {
namespace {

using ref::get16;
using ref::put16;

uint32_t ip4(const char* s) {
  in_addr a{};
  inet_pton(AF_INET, s, &a);
  uint32_t v;
  std::memcpy(&v, &a, 4);
  return v;
}

const uint8_t kRemoteMac[2][6] = {{0x02, 0, 0, 0, 0, 0x11}, {0x02, 0, 0, 0, 0, 0x12}};
constexpr uint32_t kVni = 0x123456;

/// Port 0: the underlay (a fake wire with offloads), 1: the tunnel (local 10.0.0.1, VNI 0x123456,
/// remotes 10.0.0.2 and 10.0.0.3), 2: a local end point (a fake wire with offloads).
struct VxlanRig {
  FakeQuiescer quiescer{1};
  dp::Fdb fdb{1024};
  dp::SwitchTables tables;
  FakeWire* under = nullptr;
  FakeWire* local = nullptr;
  port::VxlanWire* vx = nullptr;
  std::vector<std::unique_ptr<port::UplinkPort>> up;
  std::unique_ptr<dp::Forwarder> fw;

  explicit VxlanRig(const std::string& extra = "") {
    tables.mode = dp::ForwardMode::kBridge;
    tables.fdb = &fdb;
    std::string err;
    auto add = [&](const std::string& spec, std::unique_ptr<wire::Wire> w) {
      auto c = app::parse_port_spec(spec, &err);
      EXPECT_TRUE(c) << err;
      const uint32_t i = static_cast<uint32_t>(up.size());
      if (!w) w = port::make_wire(*c);
      up.push_back(std::make_unique<port::UplinkPort>(i, *c, std::move(w), &quiescer));
      tables.ports[i] = up.back().get();
    };
    auto u = std::make_unique<FakeWire>(true);  // a packet socket with its virtio-net header
    under = u.get();
    add("up=af-packet:fake0", std::move(u));
    add("vx=vxlan:uplink=up,local=10.0.0.1,vni=1193046,remote=10.0.0.2+10.0.0.3" + extra, nullptr);
    auto l = std::make_unique<FakeWire>(true);
    local = l.get();
    add("ep=af-packet:fake1", std::move(l));
    tables.nports = 3;
    up[0]->attach_tunnel(up[1].get());
    tables.underlays = 1;
    vx = const_cast<port::VxlanWire*>(up[1]->vxlan());
    for (const int i : {0, 2, 1}) EXPECT_TRUE(up[i]->start(&err)) << err;
    fw = std::make_unique<dp::Forwarder>(&tables);
  }
  void run() {
    for (int i = 0; i < 1000; ++i) {
      bool any = fw->holding() || !under->inbox.empty() || !local->inbox.empty();
      for (uint32_t p = 0; p < 3; ++p) fw->poll(p);
      fw->end_pass();
      if (!any && i > 2) break;
    }
    fw->flush_all();
  }
  uint64_t dev(const std::string& name) const {
    wire::DeviceCounters c;
    vx->counters(&c);
    for (const auto& [k, v] : c)
      if (k == name) return v;
    ADD_FAILURE() << "no counter " << name;
    return 0;
  }
  /// The remotes answer ARP: their next hops resolve.
  void resolve() {
    for (int r = 0; r < 2; ++r) {
      wire::ArpView a;
      a.op = wire::kArpReply;
      std::memcpy(a.sha, kRemoteMac[r], 6);
      a.spa = ip4(r ? "10.0.0.3" : "10.0.0.2");
      std::memcpy(a.tha, vx->mac(), 6);
      a.tpa = ip4("10.0.0.1");
      Bytes f(wire::kArpFrameLen);
      wire::write_arp(f.data(), vx->mac(), a);
      under->receive(f);
    }
    run();
  }
};

/// A VXLAN packet from remote `src` (RFC 7348 §5) around `inner`, outer UDP checksum 0.
Bytes vxlan_packet(const Bytes& inner, const char* src, uint32_t vni = kVni, const uint8_t* dst_mac = nullptr) {
  Bytes f(50 + inner.size());
  if (dst_mac) std::memcpy(f.data(), dst_mac, 6);
  std::memcpy(f.data() + 6, kRemoteMac[0], 6);
  put16(f, 12, 0x0800);
  f[14] = 0x45;
  put16(f, 16, static_cast<uint32_t>(20 + 8 + 8 + inner.size()));
  f[22] = 64;
  f[23] = 17;
  const uint32_t s = ip4(src), d = ip4("10.0.0.1");
  std::memcpy(&f[26], &s, 4);
  std::memcpy(&f[30], &d, 4);
  put16(f, 24, ref::ref_csum(Bytes(f.begin() + 14, f.begin() + 34)));
  put16(f, 34, 50000);
  put16(f, 36, 4789);
  put16(f, 38, static_cast<uint32_t>(16 + inner.size()));
  f[42] = 0x08;
  f[46] = static_cast<uint8_t>(vni >> 16);
  f[47] = static_cast<uint8_t>(vni >> 8);
  f[48] = static_cast<uint8_t>(vni);
  std::copy(inner.begin(), inner.end(), f.begin() + 50);
  return f;
}

/// eth_frame with source MAC `src_last` as its last byte.
Bytes station_frame(size_t len, uint8_t src_last, uint8_t dst_last) {
  Bytes f = eth_frame(len, src_last);
  f[5] = dst_last;
  f[11] = src_last;
  return f;
}

TEST(Vxlan, ParsesItsArgumentAndRefusesWhatIsMissingOrWrong) {
  port::VxlanSettings s;
  std::string err;
  ASSERT_TRUE(port::parse_vxlan_arg("uplink=up,local=10.0.0.1,vni=42,remote=10.0.0.2+10.0.0.3,"
                                    "dst_port=8472,gateway_mac=02:00:00:00:00:99",
                                    &s, &err)) << err;
  EXPECT_EQ(s.uplink, "up");
  EXPECT_EQ(s.vni, 42u);
  EXPECT_EQ(s.remotes.size(), 2u);
  EXPECT_EQ(s.dst_port, 8472);
  EXPECT_TRUE(s.has_gateway_mac);
  for (const char* bad : {"", "uplink=up,local=10.0.0.1,vni=42", "uplink=up,local=10.0.0.1,remote=10.0.0.2",
                          "uplink=up,local=10.0.0.1,vni=16777216,remote=10.0.0.2",
                          "uplink=up,local=10.0.0.300,vni=1,remote=10.0.0.2",
                          "uplink=up,local=10.0.0.1,vni=1,remote=10.0.0.1",
                          "uplink=up,local=10.0.0.1,vni=1,remote=10.0.0.2,mac=01:00:00:00:00:01",
                          "uplink=up,local=10.0.0.1,vni=1,remote=10.0.0.2,colour=blue",
                          "uplink=up,local=10.0.0.1,vni=-1,remote=10.0.0.2",
                          "uplink=up,local=10.0.0.1,vni=1,remote=224.0.0.5",
                          "uplink=up,local=10.0.0.1,vni=1,remote=0.0.0.0",
                          "uplink=up,local=255.255.255.255,vni=1,remote=10.0.0.2",
                          "uplink=up,local=10.0.0.1,vni=1,remote=10.0.0.2,gateway_mac=ff:ff:ff:ff:ff:ff"}) {
    EXPECT_FALSE(port::parse_vxlan_arg(bad, &s, &err)) << bad;
  }
}

TEST(Vxlan, OpensWithAGratuitousArpAndAsksForEachRemote) {
  VxlanRig r;
  ASSERT_EQ(r.under->control.size(), 3u);
  wire::ArpView a;
  ASSERT_TRUE(wire::parse_arp(r.under->control[0].data(), 60, &a));
  EXPECT_EQ(a.spa, ip4("10.0.0.1"));
  EXPECT_EQ(a.tpa, ip4("10.0.0.1"));  // gratuitous
  ASSERT_TRUE(wire::parse_arp(r.under->control[2].data(), 60, &a));
  EXPECT_EQ(a.op, wire::kArpRequest);
  EXPECT_EQ(a.tpa, ip4("10.0.0.3"));
  EXPECT_EQ(std::memcmp(a.sha, r.vx->mac(), 6), 0);
  EXPECT_FALSE(r.vx->remotes()[0].resolved);
  // Unresolved next hops: a frame for the tunnel is not sent, and says why.
  r.local->receive(station_frame(100, 1, 0xff));
  r.run();
  EXPECT_TRUE(r.under->sent.empty());
  EXPECT_EQ(r.dev("no_neighbor"), 2u);
}

TEST(Vxlan, EncapsulatesToEveryRemoteThenToTheOneAMacWasLearnedBehind) {
  VxlanRig r;
  r.resolve();
  ASSERT_TRUE(r.vx->remotes()[1].resolved);
  const Bytes inner = station_frame(200, 1, 9);  // to an unknown MAC: flooded
  r.local->receive(inner);
  r.run();
  ASSERT_EQ(r.under->sent.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    const Bytes& p = r.under->sent[k];
    ASSERT_EQ(p.size(), wire::kHdrLen + 50 + inner.size());
    const Bytes f(p.begin() + wire::kHdrLen, p.end());
    EXPECT_EQ(std::memcmp(f.data(), kRemoteMac[k], 6), 0);
    EXPECT_EQ(std::memcmp(f.data() + 6, r.vx->mac(), 6), 0);
    EXPECT_EQ(get16(f, 12), 0x0800);
    EXPECT_EQ(f[14], 0x45);
    EXPECT_EQ(get16(f, 16), 36 + inner.size());
    EXPECT_EQ(get16(f, 20), 0x4000);  // DF
    EXPECT_EQ(f[23], 17);
    EXPECT_EQ(ref::ref_csum(Bytes(f.begin() + 14, f.begin() + 34)), 0);
    uint32_t dst;
    std::memcpy(&dst, &f[30], 4);
    EXPECT_EQ(dst, ip4(k ? "10.0.0.3" : "10.0.0.2"));
    EXPECT_GE(get16(f, 34), 49152);  // source port from the inner flow hash
    EXPECT_EQ(get16(f, 36), 4789);
    EXPECT_EQ(get16(f, 38), 16 + inner.size());
    EXPECT_EQ(get16(f, 40), 0);  // no UDP checksum
    EXPECT_EQ(f[42], 0x08);
    EXPECT_EQ(uint32_t{f[46]} << 16 | f[47] << 8 | f[48], kVni);
    EXPECT_EQ(Bytes(f.begin() + 50, f.end()), inner);
  }
  EXPECT_EQ(r.dev("flooded"), 1u);
  // Station 9 answers from behind 10.0.0.3: learned there, by the switch and the VTEP.
  r.under->receive(vxlan_packet(station_frame(120, 9, 1), "10.0.0.3", kVni, r.vx->mac()));
  r.run();
  ASSERT_EQ(r.local->sent.size(), 1u);
  EXPECT_EQ(Bytes(r.local->sent[0].begin() + wire::kHdrLen, r.local->sent[0].end()),
            station_frame(120, 9, 1));
  EXPECT_EQ(r.dev("decap_packets"), 1u);
  r.under->sent.clear();
  r.local->receive(station_frame(300, 1, 9));
  r.run();
  ASSERT_EQ(r.under->sent.size(), 1u);
  uint32_t dst;
  std::memcpy(&dst, &r.under->sent[0][wire::kHdrLen + 30], 4);
  EXPECT_EQ(dst, ip4("10.0.0.3"));
  EXPECT_EQ(r.dev("learned_macs"), 1u);
  // Many stations behind the remotes: the table holds most of them (4 probes per MAC).
  for (uint32_t k = 0; k < 2000; ++k) {
    Bytes f = station_frame(80, 1, 1);
    f[0] = 0xff;  // broadcast, from station k
    f[8] = static_cast<uint8_t>(k >> 8);
    f[9] = static_cast<uint8_t>(k);
    r.under->receive(vxlan_packet(f, k & 1 ? "10.0.0.3" : "10.0.0.2", kVni, r.vx->mac()));
  }
  r.run();
  EXPECT_GT(r.dev("learned_macs"), 1900u);
}

TEST(Vxlan, AnswersArpForItsAddressOnlyAndAtABoundedRate) {
  VxlanRig r;
  r.under->control.clear();
  wire::ArpView q;
  q.op = wire::kArpRequest;
  const uint8_t asker[6] = {0x02, 0, 0, 0, 0, 0x42};
  std::memcpy(q.sha, asker, 6);
  q.spa = ip4("10.0.0.9");
  q.tpa = ip4("10.0.0.1");
  Bytes f(wire::kArpFrameLen);
  const uint8_t bc[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  wire::write_arp(f.data(), bc, q);
  r.under->receive(f);
  q.tpa = ip4("10.0.0.7");  // someone else's address: not answered, not switched
  wire::write_arp(f.data(), bc, q);
  r.under->receive(f);
  r.run();
  ASSERT_EQ(r.under->control.size(), 1u);
  wire::ArpView a;
  ASSERT_TRUE(wire::parse_arp(r.under->control[0].data(), 60, &a));
  EXPECT_EQ(a.op, wire::kArpReply);
  EXPECT_EQ(a.spa, ip4("10.0.0.1"));
  EXPECT_EQ(a.tpa, ip4("10.0.0.9"));
  EXPECT_EQ(std::memcmp(a.tha, asker, 6), 0);
  EXPECT_EQ(std::memcmp(r.under->control[0].data(), asker, 6), 0);
  EXPECT_TRUE(r.local->sent.empty());  // an underlay switches nothing
  // Other opcodes for the local address are taken and counted; a remote claiming the
  // all-zero MAC resolves nothing.
  q.op = 3;
  q.tpa = ip4("10.0.0.1");
  wire::write_arp(f.data(), bc, q);
  r.under->receive(f);
  q.op = wire::kArpReply;
  std::memset(q.sha, 0, 6);
  q.spa = ip4("10.0.0.2");
  wire::write_arp(f.data(), bc, q);
  r.under->receive(f);
  r.run();
  EXPECT_EQ(r.dev("arp_ignored"), 1u);
  EXPECT_FALSE(r.vx->remotes()[0].resolved);
  std::memcpy(q.sha, asker, 6);
  q.spa = ip4("10.0.0.9");
  q.op = wire::kArpRequest;
  EXPECT_EQ(r.up[0]->queue_counters(0).not_for_vtep, 1u);
  // A flood of requests: at most kArpRepliesPerSec answered in a second.
  q.tpa = ip4("10.0.0.1");
  wire::write_arp(f.data(), bc, q);
  for (int i = 0; i < 300; ++i) r.under->receive(f);
  r.run();
  EXPECT_LE(r.under->control.size(), 2 * port::VxlanWire::kArpRepliesPerSec);
  EXPECT_GT(r.dev("arp_rate_limited"), 0u);
}

TEST(Vxlan, DropsEveryMalformedOrForeignPacketUnderItsReason) {
  VxlanRig r;
  r.resolve();
  const Bytes inner = station_frame(100, 9, 1);
  const Bytes good = vxlan_packet(inner, "10.0.0.2");
  struct Case {
    const char* counter;
    std::function<void(Bytes&)> spoil;
  };
  const std::vector<Case> cases = {
      {"bad_outer_ip", [](Bytes& p) { p[24] ^= 1; }},                       // IPv4 checksum
      {"bad_outer_ip", [](Bytes& p) { put16(p, 16, 2000); }},               // longer than the frame
      {"bad_outer_ip", [](Bytes& p) { p[14] = 0x65; }},                     // version 6
      {"bad_outer_ip", [](Bytes& p) { p[14] = 0x44; }},                     // IHL 16 bytes
      {"fragment", [](Bytes& p) { put16(p, 20, 0x2000); put16(p, 24, 0); put16(p, 24, ref::ref_csum(Bytes(p.begin() + 14, p.begin() + 34))); }},
      {"bad_udp", [](Bytes& p) { put16(p, 38, get16(p, 38) - 1); }},        // UDP length
      {"bad_udp", [](Bytes& p) { put16(p, 40, 0x1234); }},                  // a wrong UDP checksum
      {"not_vxlan", [](Bytes& p) { put16(p, 36, 4790); }},
      {"bad_vxlan", [](Bytes& p) { p[42] = 0; }},                           // I flag clear
      {"wrong_vni", [](Bytes& p) { p[48] ^= 1; }},
      {"unknown_vtep", [](Bytes& p) { p[29] = 99; put16(p, 24, 0); put16(p, 24, ref::ref_csum(Bytes(p.begin() + 14, p.begin() + 34))); }},
  };
  for (const Case& c : cases) {
    Bytes p = good;
    c.spoil(p);
    const uint64_t before = r.dev(c.counter);
    r.under->receive(p);
    r.run();
    EXPECT_EQ(r.dev(c.counter), before + 1) << c.counter;
  }
  // Runts: an outer frame cut anywhere, and an inner frame shorter than an Ethernet header.
  for (size_t cut : {0, 10, 20, 33, 40, 49, 55}) r.under->receive(Bytes(good.begin(), good.begin() + cut));
  r.under->receive(vxlan_packet(Bytes(10, 0xab), "10.0.0.2"));
  r.run();
  EXPECT_EQ(r.local->sent.size(), 0u);
  EXPECT_EQ(r.dev("decap_packets"), 0u);
  EXPECT_GE(r.dev("bad_vxlan"), 2u);
  // Outer IP options are no fault: IHL 6 with its option word, checksum right.
  Bytes o = good;
  o.insert(o.begin() + 34, {1, 1, 1, 0});
  o[14] = 0x46;
  put16(o, 16, get16(o, 16) + 4);
  put16(o, 24, 0);
  put16(o, 24, ref::ref_csum(Bytes(o.begin() + 14, o.begin() + 38)));
  r.under->receive(o);
  r.run();
  EXPECT_EQ(r.dev("decap_packets"), 1u);
  ASSERT_EQ(r.local->sent.size(), 1u);
  EXPECT_EQ(Bytes(r.local->sent[0].begin() + wire::kHdrLen, r.local->sent[0].end()), inner);
}

TEST(Vxlan, PassesALocalSendersTsoTrainWholeAndTooBigFramesNever) {
  VxlanRig r;
  r.resolve();
  const ref::Built tso = ref::build(ref::FrameSpec{}, ref::payload_of(8000), true);
  Bytes outer = vxlan_packet(tso.f, "10.0.0.2");
  virtio::NetHdr h = ref::tso_hdr(false, 1400, tso.l4);
  h.csum_start = static_cast<uint16_t>(h.csum_start + 50);
  h.hdr_len = static_cast<uint16_t>(h.hdr_len + 50);
  r.under->receive(outer, h);
  r.run();
  ASSERT_EQ(r.local->sent.size(), 1u);  // the end point has offloads: the train whole
  virtio::NetHdr got;
  std::memcpy(&got, r.local->sent[0].data(), sizeof got);
  EXPECT_EQ(got.gso_type, offload::kGsoTcpV4);
  EXPECT_EQ(got.gso_size, 1400);
  EXPECT_EQ(got.csum_start, h.csum_start - 50);
  EXPECT_EQ(r.local->sent[0].size(), wire::kHdrLen + tso.f.size());
  // A train without a partial inner checksum is refused.
  h.flags = 0;
  r.under->receive(outer, h);
  r.run();
  EXPECT_EQ(r.dev("outer_gso"), 1u);
  // Toward the tunnel the frame must fit the underlay's MTU with 50 bytes of headers.
  r.under->sent.clear();
  r.local->receive(station_frame(1500 - 36, 1, 0xff));
  r.local->receive(station_frame(1500 - 35, 1, 0xff));
  r.run();
  EXPECT_EQ(r.under->sent.size(), 2u);  // the first, to both remotes
  port::CounterSnapshot s;  // counted on the port it was for
  r.fw->counters(1).accumulate(s);
  EXPECT_EQ(s.drops[static_cast<uint32_t>(port::Drop::kTooBig)], 1u);
}

TEST(Vxlan, SendControlEncapsulatesToEveryRemote) {
  VxlanRig r;
  r.resolve();
  r.under->control.clear();
  uint8_t f[64];
  const uint8_t mac[6] = {0x52, 0x54, 0, 0, 0, 0x77};
  const uint32_t len = wire::write_rarp_announce(f, mac, 0);
  ASSERT_TRUE(r.up[1]->send_control(f, len));
  ASSERT_EQ(r.under->control.size(), 2u);
  for (const Bytes& p : r.under->control) {
    ASSERT_EQ(p.size(), 50 + len);
    EXPECT_EQ(get16(p, 50 + 12), wire::kEtherRarp);
    EXPECT_EQ(std::memcmp(&p[50 + 6], mac, 6), 0);
  }
}

}  // namespace
}  // namespace vl::test
