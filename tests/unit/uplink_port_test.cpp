// Uplink ports (port/uplink_port.h) over a fake wire: frames from one wire reach the other
// byte for byte through the forwarder, buffers go round many times, a TSO frame passes
// whole to a wire with offloads and is segmented for one without, and what the wire
// refuses or what is too big is counted.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "dp/forwarder.h"
#include "fake_frontend.h"
#include "port/uplink_port.h"
#include "ref_frames.h"
#include "wire/wire.h"

namespace vl::test {
namespace {

using ref::Bytes;

/// A wire of in-memory frames: `inbox` is what the device receives, `sent` what it was
/// given; each frame with its 12-byte header first.
class FakeWire final : public wire::Wire {
 public:
  explicit FakeWire(bool offloads) {
    info_.offloads = offloads;
    info_.vnet_hdr = offloads;
    info_.mtu = 1500;
  }
  bool open(std::string*) override { return true; }
  void close() override {}
  const wire::WireInfo& info() const override { return info_; }
  const char* type() const override { return "af-packet"; }
  std::string target() const override { return "fake0"; }
  int rx_fd(uint32_t) const override { return -1; }
  bool link_up() const override { return true; }
  uint32_t recv(uint32_t, wire::Buf* b, uint32_t n) override {
    uint32_t got = 0;
    while (got < n && !inbox.empty()) {
      Bytes f = std::move(inbox.front());
      inbox.pop_front();
      if (f.size() > b[got].cap) continue;
      std::memcpy(b[got].p, f.data(), f.size());
      b[got++].len = static_cast<uint32_t>(f.size());
    }
    return got;
  }
  uint32_t send(uint32_t, const wire::Buf* b, uint32_t n) override {
    if (refuse) return 0;
    for (uint32_t i = 0; i < n; ++i) sent.emplace_back(b[i].p, b[i].p + b[i].len);
    return n;
  }
  /// Queues `frame` for receipt, after header `h`.
  void receive(const Bytes& frame, const virtio::NetHdr& h = {}) {
    Bytes f(wire::kHdrLen);
    std::memcpy(f.data(), &h, sizeof h);
    f.insert(f.end(), frame.begin(), frame.end());
    inbox.push_back(std::move(f));
  }
  std::deque<Bytes> inbox;
  std::vector<Bytes> sent;
  bool refuse = false;

 private:
  wire::WireInfo info_;
};

/// Two uplinks, cross-connected, one forwarder, no PMD threads.
struct UplinkRig {
  FakeQuiescer quiescer{1};
  dp::Fdb fdb{1024};
  dp::SwitchTables tables;
  FakeWire* wire[2];
  std::unique_ptr<port::UplinkPort> up[2];
  std::unique_ptr<dp::Forwarder> fw;

  UplinkRig(bool offloads_a, bool offloads_b) {
    tables.mode = dp::ForwardMode::kXconnect;
    tables.fdb = &fdb;
    const bool off[2] = {offloads_a, offloads_b};
    for (uint32_t i = 0; i < 2; ++i) {
      port::PortConfig c;
      c.name = i ? "b" : "a";
      c.type = port::PortType::kAfPacket;
      c.path = "fake0";
      auto w = std::make_unique<FakeWire>(off[i]);
      wire[i] = w.get();
      up[i] = std::make_unique<port::UplinkPort>(i, c, std::move(w), &quiescer);
      std::string err;
      EXPECT_TRUE(up[i]->start(&err)) << err;
      tables.ports[i] = up[i].get();
    }
    tables.nports = 2;
    tables.xc_peer[0] = 1;
    tables.xc_peer[1] = 0;
    fw = std::make_unique<dp::Forwarder>(&tables);
  }
  /// Polls port a until its wire has nothing left.
  void run() {
    for (int i = 0; i < 10000 && (!wire[0]->inbox.empty() || fw->holding()); ++i) {
      fw->poll(0);
      fw->end_pass();
    }
    fw->flush_all();
  }
  port::CounterSnapshot counters(uint32_t p) const {
    port::CounterSnapshot s;
    fw->counters(p).accumulate(s);
    return s;
  }
};

Bytes eth_frame(size_t len, uint8_t seed) {
  Bytes f(len);
  const uint8_t macs[12] = {0x52, 0x54, 0, 0, 0, 2, 0x52, 0x54, 0, 0, 0, 1};
  std::memcpy(f.data(), macs, 12);
  f[12] = 0x88;
  f[13] = 0xb5;  // local experimental ethertype
  for (size_t i = 14; i < len; ++i) f[i] = static_cast<uint8_t>(seed + i * 7);
  return f;
}

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
  r.wire[0]->receive(eth_frame(1500 + 14 + 4, 4));
  r.run();
  EXPECT_EQ(r.wire[1]->sent.size(), 1u);
  EXPECT_EQ(r.counters(1).drops[static_cast<uint32_t>(port::Drop::kTooBig)], 1u);
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

}  // namespace
}  // namespace vl::test
