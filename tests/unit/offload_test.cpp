// Software offloads (src/offload/): checksums and TCP segmentation against known-good
// frames built independently here (every field set by hand, checksums by a plain RFC 1071
// loop over big-endian words), the check of transmitted offload metadata (hostile-inputs.md
// items 16-17), and delivery into fake receive rings with and without the receiver's
// offload features (virtio 1.2 §5.1.6).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "fake_driver.h"
#include "ref_frames.h"
#include "offload/checksum.h"
#include "offload/deliver.h"
#include "offload/soft_gso.h"

namespace vl::offload {
namespace {

using namespace vl::virtio;
using namespace vl::test::ref;

NetHdr with_mss(NetHdr h, uint16_t mss) {
  h.gso_size = mss;
  return h;
}

// ---------------------------------------------------------------- checksums

TEST(Checksum, Rfc1071KnownIpv4Header) {
  // A textbook IPv4 header whose checksum is 0xb861.
  const uint8_t h[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                         0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  uint8_t out[2];
  store_csum(out, ipv4_header_csum(h, 20));
  EXPECT_EQ(out[0], 0xb8);
  EXPECT_EQ(out[1], 0x61);
}

TEST(Checksum, OddLengthsAndAllAlignmentsMatchTheReference) {
  for (uint32_t n = 0; n < 70; ++n) {
    const Bytes b = payload_of(n, static_cast<uint8_t>(n));
    uint8_t out[2];
    store_csum(out, static_cast<uint16_t>(~csum_fold(csum_add(0, b.data(), n))));
    EXPECT_EQ(get16(Bytes(out, out + 2), 0), ref_csum(b)) << n;
  }
}

TEST(Checksum, FillTcpAndUdpOverIpv4AndIpv6) {
  for (bool ipv6 : {false, true}) {
    for (bool udp : {false, true}) {
      FrameSpec s{.ipv6 = ipv6, .udp = udp};
      if (!udp) s.tcp_options = kTcpOptions;
      const Bytes pl = payload_of(1001);  // odd length
      const Built good = build(s, pl);
      Built b = build(s, pl, /*partial=*/true);
      ASSERT_NE(b.f, good.f);
      fill_csum(b.f.data(), static_cast<uint32_t>(b.f.size()), static_cast<uint32_t>(b.l4), udp ? 6 : 16);
      EXPECT_EQ(b.f, good.f) << "ipv6=" << ipv6 << " udp=" << udp;
    }
  }
}

TEST(Checksum, UdpZeroIsSentAsAllOnes) {
  // Choose the last payload word so that the checksum computes to zero (RFC 768).
  FrameSpec s{.udp = true};
  Bytes pl = payload_of(64);
  pl[62] = pl[63] = 0;
  const Built z = build(s, pl);
  const uint16_t c = get16(z.f, z.l4 + 6);
  pl[62] = static_cast<uint8_t>(c >> 8);
  pl[63] = static_cast<uint8_t>(c);
  Built b = build(s, pl, true);
  fill_csum(b.f.data(), static_cast<uint32_t>(b.f.size()), static_cast<uint32_t>(b.l4), 6);
  EXPECT_EQ(get16(b.f, b.l4 + 6), 0xffff);
}

// ---------------------------------------------------------------- segmentation

/// Cuts `tso` by `h` with build_segment and returns the frames.
std::vector<Bytes> segment(const Bytes& tso, const NetHdr& h, bool partial, GsoPlan* plan = nullptr) {
  GsoPlan p;
  EXPECT_TRUE(parse_gso(tso.data(), static_cast<uint32_t>(tso.size()), static_cast<uint32_t>(tso.size()), h, &p));
  if (plan) *plan = p;
  std::vector<Bytes> out;
  for (uint32_t i = 0; i < p.nsegs; ++i) {
    uint8_t hdr[kMaxGsoHeaders];
    uint32_t off, n;
    build_segment(tso.data(), p, i, partial, hdr, &off, &n);
    Bytes f(hdr, hdr + p.hdrs);
    f.insert(f.end(), tso.begin() + off, tso.begin() + off + n);
    out.push_back(f);
  }
  return out;
}

/// The segments Linux's TCP segmentation produces, built field by field.
std::vector<Bytes> expected_segments(const FrameSpec& s, const Bytes& pl, uint32_t mss) {
  std::vector<Bytes> out;
  const uint32_t n = static_cast<uint32_t>((pl.size() + mss - 1) / mss);
  for (uint32_t i = 0; i < n; ++i) {
    FrameSpec t = s;
    t.seq = s.seq + i * mss;
    t.ip_id = static_cast<uint16_t>(s.ip_id + i);
    if (i + 1 < n) t.tcp_flags &= ~(0x01 | 0x08);  // FIN, PSH: last only
    if (i > 0) t.tcp_flags &= ~0x80;               // CWR: first only
    const size_t a = size_t{i} * mss, b = std::min(pl.size(), a + mss);
    out.push_back(build(t, Bytes(pl.begin() + a, pl.begin() + b)).f);
  }
  return out;
}

TEST(SoftGso, Ipv4TcpWithOptionsMssNotDividingThePayload) {
  FrameSpec s{.tcp_flags = 0x80 | 0x18 | 0x01, .tcp_options = kTcpOptions};  // CWR PSH ACK FIN
  const Bytes pl = payload_of(10000);
  const Built tso = build(s, pl, true);
  const auto got = segment(tso.f, tso_hdr(false, 1448, tso.l4, true), false);
  const auto want = expected_segments(s, pl, 1448);
  ASSERT_EQ(got.size(), 7u);  // 6 x 1448 + 1312
  ASSERT_EQ(want.size(), 7u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "segment " << i;
  EXPECT_EQ(got.back().size(), 14 + 20 + 32 + 1312u);
}

TEST(SoftGso, Ipv6TcpWithOptions) {
  FrameSpec s{.ipv6 = true, .tcp_options = kTcpOptions};
  const Bytes pl = payload_of(5000, 9);
  const Built tso = build(s, pl, true);
  const auto got = segment(tso.f, tso_hdr(true, 1428, tso.l4), false);
  const auto want = expected_segments(s, pl, 1428);
  ASSERT_EQ(got.size(), 4u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "segment " << i;
}

TEST(SoftGso, Ipv4OptionsVlanAndAFullSixtyFourKiBFrame) {
  FrameSpec s{.vlan = true, .tcp_options = kTcpOptions, .ip_options = {1, 1, 1, 0}};
  const Bytes pl = payload_of(65535 - 24 - 32 - 4);  // kMaxFrameLen with the tag
  const Built tso = build(s, pl, true);
  ASSERT_LE(tso.f.size(), kMaxFrameLen);
  const auto got = segment(tso.f, tso_hdr(false, 1448, tso.l4), false);
  const auto want = expected_segments(s, pl, 1448);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(got.size(), (pl.size() + 1447) / 1448);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "segment " << i;
}

TEST(SoftGso, PartialChecksumLeavesThePseudoHeaderSum) {
  for (bool ipv6 : {false, true}) {
    FrameSpec s{.ipv6 = ipv6, .tcp_options = kTcpOptions};
    const Bytes pl = payload_of(3001);
    const Built tso = build(s, pl, true);
    GsoPlan p;
    auto got = segment(tso.f, tso_hdr(ipv6, 1000, tso.l4), true, &p);
    const auto want = expected_segments(s, pl, 1000);
    ASSERT_EQ(got.size(), 4u);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NE(got[i], want[i]);
      // What the receiver does with NEEDS_CSUM (csum_start l4off, csum_offset 16).
      fill_csum(got[i].data(), static_cast<uint32_t>(got[i].size()), p.l4off, 16);
      EXPECT_EQ(got[i], want[i]) << "ipv6=" << ipv6 << " segment " << i;
    }
  }
}

TEST(SoftGso, MssLargerThanThePayloadIsOneSegment) {
  FrameSpec s{};
  const Bytes pl = payload_of(500);
  const Built tso = build(s, pl, true);
  const auto got = segment(tso.f, tso_hdr(false, 1448, tso.l4), false);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], build(s, pl).f);
}

// ---------------------------------------------------------------- hostile metadata

constexpr uint64_t kHostAll = bit(kNetFCsum) | bit(kNetFHostTso4) | bit(kNetFHostTso6) | bit(kNetFHostEcn);

TEST(TxCheck, AcceptsWhatTheSenderNegotiated) {
  NetHdr h = tso_hdr(false, 1448, 34, true);
  h.flags |= kNetHdrFDataValid | 0x40;
  EXPECT_EQ(check_tx_header(&h, 9000, kHostAll), TxCheck::kOk);
  EXPECT_EQ(h.flags, kNetHdrFNeedsCsum);  // DATA_VALID and unknown bits do not travel
  NetHdr plain{};
  plain.gso_size = 77;
  plain.hdr_len = 5;
  EXPECT_EQ(check_tx_header(&plain, 60, 0), TxCheck::kOk);
  EXPECT_EQ(plain.gso_size, 0);
  EXPECT_EQ(plain.hdr_len, 0);
}

TEST(TxCheck, Item16HostileHeadersAreRefused) {
  struct Case {
    const char* what;
    NetHdr h;
    uint32_t len;
    uint64_t features;
    TxCheck want;
  };
  auto with = [](NetHdr h, auto f) { f(h); return h; };
  const NetHdr t4 = tso_hdr(false, 1448, 34);
  const std::vector<Case> cases = {
      {"gso_size 0", with(t4, [](NetHdr& h) { h.gso_size = 0; }), 9000, kHostAll, TxCheck::kBadGso},
      {"csum_start past the frame", with(t4, [](NetHdr& h) { h.csum_start = 9000; }), 9000, kHostAll, TxCheck::kBadCsum},
      {"csum_offset past the frame", with(t4, [](NetHdr& h) { h.csum_start = 8990; h.csum_offset = 9; }), 9000, kHostAll, TxCheck::kBadCsum},
      {"csum field overlapping the end", with(t4, [](NetHdr& h) { h.csum_start = 0xffff; h.csum_offset = 0xffff; }), 60, kHostAll, TxCheck::kBadCsum},
      {"NEEDS_CSUM without CSUM", t4, 9000, kHostAll & ~bit(kNetFCsum), TxCheck::kBadCsum},
      {"TCPV4 without HOST_TSO4", t4, 9000, kHostAll & ~bit(kNetFHostTso4), TxCheck::kBadGso},
      {"TCPV6 without HOST_TSO6", tso_hdr(true, 1448, 54), 9000, kHostAll & ~bit(kNetFHostTso6), TxCheck::kBadGso},
      {"ECN without HOST_ECN", tso_hdr(false, 1448, 34, true), 9000, kHostAll & ~bit(kNetFHostEcn), TxCheck::kBadGso},
      {"UFO", with(t4, [](NetHdr& h) { h.gso_type = kGsoUdp; }), 9000, kHostAll, TxCheck::kBadGso},
      {"USO", with(t4, [](NetHdr& h) { h.gso_type = kGsoUdpL4; }), 9000, kHostAll, TxCheck::kBadGso},
      {"unknown gso_type", with(t4, [](NetHdr& h) { h.gso_type = 0x42; }), 9000, kHostAll, TxCheck::kBadGso},
      {"ECN bit alone", with(NetHdr{}, [](NetHdr& h) { h.gso_type = kGsoEcn; }), 9000, kHostAll, TxCheck::kBadGso},
      {"TSO without NEEDS_CSUM", with(t4, [](NetHdr& h) { h.flags = 0; }), 9000, kHostAll, TxCheck::kBadGso},
  };
  for (Case c : cases) EXPECT_EQ(check_tx_header(&c.h, c.len, c.features), c.want) << c.what;
}

TEST(SoftGso, Item16HeadersThatLieAreNotSegmented) {
  FrameSpec s{.tcp_options = kTcpOptions};
  const Built good = build(s, payload_of(3000), true);
  const NetHdr h = tso_hdr(false, 1448, good.l4);
  GsoPlan p;
  const auto len = [](const Bytes& b) { return static_cast<uint32_t>(b.size()); };
  ASSERT_TRUE(parse_gso(good.f.data(), len(good.f), len(good.f), h, &p));
  auto bad = [&](const char* what, auto mutate, NetHdr hh, uint32_t avail_cut = 0) {
    Bytes f = good.f;
    mutate(f);
    const uint32_t avail = avail_cut ? avail_cut : len(f);
    EXPECT_FALSE(parse_gso(f.data(), avail, len(f), hh, &p)) << what;
  };
  auto none = [](Bytes&) {};
  const size_t l3 = good.l3, l4 = good.l4;
  bad("IP total length past the frame", [&](Bytes& f) { put16(f, l3 + 2, 60000); }, h);
  bad("IP total length below its headers", [&](Bytes& f) { put16(f, l3 + 2, 30); }, h);
  bad("IHL below 5", [&](Bytes& f) { f[l3] = 0x44; }, h);
  bad("IHL past the headers given", [&](Bytes& f) { f[l3] = 0x4f; }, h, static_cast<uint32_t>(l3 + 40));
  bad("not TCP", [&](Bytes& f) { f[l3 + 9] = 17; }, h);
  bad("a fragment", [&](Bytes& f) { put16(f, l3 + 6, 0x2000); }, h);
  bad("IPv6 ethertype for TCPV4", [&](Bytes& f) { put16(f, 12, 0x86dd); }, h);
  bad("TCP data offset below 5", [&](Bytes& f) { f[l4 + 12] = 0x40; }, h);
  bad("TCP header past the headers given", none, h, static_cast<uint32_t>(l4 + 20));
  bad("runt", none, h, 13);
  bad("TCPV6 on an IPv4 frame", none, tso_hdr(true, 1448, l4));
  bad("gso_size 0", none, with_mss(h, 0));
  bad("too many segments", none, with_mss(h, 2));
  FrameSpec s6{.ipv6 = true};
  const Built v6 = build(s6, payload_of(3000), true);
  Bytes f6 = v6.f;
  f6[v6.l3 + 6] = 0;  // hop-by-hop extension header
  EXPECT_FALSE(parse_gso(f6.data(), len(f6), len(f6), tso_hdr(true, 1448, v6.l4), &p));
  f6 = v6.f;
  put16(f6, v6.l3 + 4, 65000);  // payload length past the frame
  EXPECT_FALSE(parse_gso(f6.data(), len(f6), len(f6), tso_hdr(true, 1448, v6.l4), &p));
}



TEST(SoftGso, Item16RandomlyCorruptedHeadersStayInBounds) {
  // Valid frames with random bytes of their headers and random gso fields: whatever
  // parse_gso accepts is cut within the frame (ASan/UBSan builds check every access).
  uint64_t x = 0x9e3779b97f4a7c15ull;
  auto rnd = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  const Built v4 = build(FrameSpec{.tcp_options = kTcpOptions}, payload_of(3000), true);
  const Built v6 = build(FrameSpec{.ipv6 = true, .vlan = true}, payload_of(2000), true);
  uint32_t accepted = 0;
  for (int it = 0; it < 20000; ++it) {
    const Built& b = (it & 1) ? v6 : v4;
    Bytes f = b.f;
    for (int k = rnd() % 4; k >= 0; --k) f[rnd() % std::min<size_t>(f.size(), 140)] = static_cast<uint8_t>(rnd());
    f.resize(f.size() - rnd() % 64);
    NetHdr h = tso_hdr((it & 1) != 0, static_cast<uint16_t>(1 + rnd() % 3000), b.l4);
    const uint32_t len = static_cast<uint32_t>(f.size());
    const uint32_t avail = std::min<uint32_t>(len, rnd() % 2 ? len : kMaxGsoHeaders);
    GsoPlan p;
    if (!parse_gso(f.data(), avail, len, h, &p)) continue;
    ++accepted;
    ASSERT_LE(p.end, len);
    ASSERT_LE(p.hdrs, p.end);
    ASSERT_LE(p.hdrs, kMaxGsoHeaders);
    ASSERT_LE(p.nsegs, kMaxGsoSegments);
    if (avail < len) continue;
    uint64_t total = 0;
    for (uint32_t i = 0; i < p.nsegs; ++i) {
      uint8_t out[kMaxGsoHeaders];
      uint32_t off, n;
      build_segment(f.data(), p, i, (it & 2) != 0, out, &off, &n);
      ASSERT_LE(uint64_t{off} + n, p.end);
      total += n;
    }
    ASSERT_EQ(total, p.end - p.hdrs);
  }
  EXPECT_GT(accepted, 200u);  // the corruption often spares the fields that matter
}

// ---------------------------------------------------------------- delivery

/// A receive ring in fake guest memory and the offload state of one PMD thread.
class OffloadDeliverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fm.add_region(0x100000, 8 << 20);
    rx = std::make_unique<test::FakeVring>(fm, 256, 0);
    ASSERT_TRUE(fm.build(gm));
    rx->attach(rxq, gm, bit(kFVersion1) | bit(kRingFIndirectDesc));
  }
  offload::RxCaps caps(uint64_t features) {
    offload::RxCaps d;
    d.features = features | bit(kFVersion1) | bit(kNetFMrgRxbuf);
    d.hdr_len = 12;
    d.mrg_rxbuf = true;
    return d;
  }
  Outcome deliver(const Bytes& f, const NetHdr& h, const offload::RxCaps& d) {
    // The sender's frame in three pieces, as a guest's scatter list would be.
    const uint32_t n = static_cast<uint32_t>(f.size());
    src = f;
    Segment s[3] = {{src.data(), 14}, {src.data() + 14, 100}, {src.data() + 114, n - 114}};
    const Outcome o = so->deliver(rxq, *scratch, h, s, 3, n, d, counters);
    rxq.publish_used();
    return o;
  }
  /// Received frames: (header, frame bytes), reassembling mergeable buffers.
  std::vector<std::pair<NetHdr, Bytes>> received() {
    std::vector<std::pair<NetHdr, Bytes>> out;
    while (auto e = rx->next_used()) {
      Bytes b = rx->done_bytes(static_cast<uint16_t>(e->id), e->len);
      NetHdr h;
      std::memcpy(&h, b.data(), 12);
      Bytes frame(b.begin() + 12, b.end());
      for (uint16_t k = 1; k < h.num_buffers; ++k) {
        auto m = rx->next_used();
        if (!m) { ADD_FAILURE() << "missing merged buffer"; break; }
        Bytes more = rx->done_bytes(static_cast<uint16_t>(m->id), m->len);
        frame.insert(frame.end(), more.begin(), more.end());
      }
      out.push_back({h, frame});
    }
    return out;
  }
  uint64_t soft(offload::Work k) const { return counters.get(k); }

  test::FakeMemory fm;
  GuestMemory gm;
  std::unique_ptr<test::FakeVring> rx;
  SplitDeviceQueue rxq;
  std::unique_ptr<SegmentArena> scratch = std::make_unique<SegmentArena>();
  std::unique_ptr<SoftOffload> so = std::make_unique<SoftOffload>();
  offload::WorkCounters counters;
  Bytes src;
};

TEST_F(OffloadDeliverTest, TsoFrameSegmentedForAReceiverWithoutOffloads) {
  for (int i = 0; i < 16; ++i) rx->add_rx({2048});
  FrameSpec s{.tcp_options = kTcpOptions};
  const Bytes pl = payload_of(7000);
  const Built tso = build(s, pl, true);
  ASSERT_EQ(deliver(tso.f, tso_hdr(false, 1448, tso.l4), caps(0)), Outcome::kOk);
  const auto got = received();
  const auto want = expected_segments(s, pl, 1448);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first.flags, 0);
    EXPECT_EQ(got[i].first.gso_type, 0);
    EXPECT_EQ(got[i].first.num_buffers, 1);
    EXPECT_EQ(got[i].second, want[i]) << i;
  }
  EXPECT_EQ(soft(offload::Work::kGsoFrames), 1u);
  EXPECT_EQ(soft(offload::Work::kGsoSegments), want.size());
}

TEST_F(OffloadDeliverTest, TsoFramePassedWholeThroughMergeableBuffers) {
  for (int i = 0; i < 40; ++i) rx->add_rx({2048});
  FrameSpec s{.ipv6 = true, .tcp_options = kTcpOptions};
  const Bytes pl = payload_of(60000);
  const Built tso = build(s, pl, true);
  const uint64_t f = bit(kNetFGuestCsum) | bit(kNetFGuestTso4) | bit(kNetFGuestTso6);
  NetHdr h = tso_hdr(true, 1428, tso.l4);
  h.hdr_len = 9;  // a hint we do not pass on: we describe the headers ourselves
  ASSERT_EQ(deliver(tso.f, h, caps(f)), Outcome::kOk);
  const auto got = received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].second, tso.f);
  EXPECT_EQ(got[0].first.flags, kNetHdrFNeedsCsum);
  EXPECT_EQ(got[0].first.gso_type, kGsoTcpV6);
  EXPECT_EQ(got[0].first.gso_size, 1428);
  EXPECT_EQ(got[0].first.hdr_len, tso.l4 + 32);
  EXPECT_EQ(got[0].first.csum_start, tso.l4);
  EXPECT_EQ(got[0].first.csum_offset, 16);
  EXPECT_GT(got[0].first.num_buffers, 29);
  EXPECT_EQ(soft(offload::Work::kGsoPassed), 1u);
  EXPECT_EQ(soft(offload::Work::kGsoFrames), 0u);
}

TEST_F(OffloadDeliverTest, EcnTsoToAReceiverWithoutGuestEcnIsSegmented) {
  for (int i = 0; i < 8; ++i) rx->add_rx({2048});
  FrameSpec s{.tcp_flags = 0x80 | 0x10};
  const Bytes pl = payload_of(3000);
  const Built tso = build(s, pl, true);
  const uint64_t f = bit(kNetFGuestCsum) | bit(kNetFGuestTso4);
  ASSERT_EQ(deliver(tso.f, tso_hdr(false, 1448, tso.l4, true), caps(f)), Outcome::kOk);
  auto got = received();
  const auto want = expected_segments(s, pl, 1448);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < got.size(); ++i) {
    // GUEST_CSUM: the segments carry NEEDS_CSUM and the pseudo-header sum.
    EXPECT_EQ(got[i].first.flags, kNetHdrFNeedsCsum);
    EXPECT_EQ(got[i].first.csum_start, tso.l4);
    EXPECT_EQ(got[i].first.csum_offset, 16);
    fill_csum(got[i].second.data(), static_cast<uint32_t>(got[i].second.size()),
              static_cast<uint32_t>(tso.l4), 16);
    EXPECT_EQ(got[i].second, want[i]) << i;
  }
}

TEST_F(OffloadDeliverTest, ChecksumFilledOrPassed) {
  for (int i = 0; i < 4; ++i) rx->add_rx({2048});
  FrameSpec s{.ipv6 = true, .udp = true};
  const Bytes pl = payload_of(333);
  const Built partial = build(s, pl, true);
  NetHdr h{};
  h.flags = kNetHdrFNeedsCsum;
  h.csum_start = static_cast<uint16_t>(partial.l4);
  h.csum_offset = 6;
  ASSERT_EQ(deliver(partial.f, h, caps(0)), Outcome::kOk);
  ASSERT_EQ(deliver(partial.f, h, caps(bit(kNetFGuestCsum))), Outcome::kOk);
  const auto got = received();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first.flags, 0);
  EXPECT_EQ(got[0].second, build(s, pl).f);  // filled in software
  EXPECT_EQ(got[1].first.flags, kNetHdrFNeedsCsum);
  EXPECT_EQ(got[1].first.csum_start, partial.l4);
  EXPECT_EQ(got[1].first.csum_offset, 6);
  EXPECT_EQ(got[1].second, partial.f);  // passed on untouched
  EXPECT_EQ(soft(offload::Work::kCsumFilled), 1u);
}

TEST_F(OffloadDeliverTest, Item16HostileTsoIsRefusedEitherWay) {
  for (int i = 0; i < 4; ++i) rx->add_rx({2048});
  FrameSpec s{};
  Built tso = build(s, payload_of(3000), true);
  put16(tso.f, tso.l3 + 2, 60000);  // IP length past the frame
  const uint64_t f = bit(kNetFGuestCsum) | bit(kNetFGuestTso4);
  EXPECT_EQ(deliver(tso.f, tso_hdr(false, 1448, tso.l4), caps(0)), Outcome::kBadGso);
  EXPECT_EQ(deliver(tso.f, tso_hdr(false, 1448, tso.l4), caps(f)), Outcome::kBadGso);
  EXPECT_TRUE(received().empty());
}

TEST_F(OffloadDeliverTest, Item16SegmentsAboveTheReceiversMtuAreTooBig) {
  for (int i = 0; i < 4; ++i) rx->add_rx({2048});
  const Built tso = build(FrameSpec{}, payload_of(5000), true);
  offload::RxCaps d = caps(0);
  d.max_frame = 1500 + 18;
  EXPECT_EQ(deliver(tso.f, tso_hdr(false, 4000, tso.l4), d), Outcome::kTooBig);
  EXPECT_EQ(deliver(tso.f, tso_hdr(false, 1460, tso.l4), d), Outcome::kOk);
  EXPECT_EQ(received().size(), 4u);
}


TEST_F(OffloadDeliverTest, Item17PassedTsoFrameEndsWhereItsIpPacketEnds) {
  // A chain far longer than the IP packet it claims to carry: only the packet is delivered.
  for (int i = 0; i < 64; ++i) rx->add_rx({2048});
  const Built tso = build(FrameSpec{}, payload_of(4000), true);
  Bytes f = tso.f;
  f.resize(f.size() + 70000, 0x5a);
  const uint64_t feats = bit(kNetFGuestCsum) | bit(kNetFGuestTso4);
  ASSERT_EQ(deliver(f, tso_hdr(false, 1448, tso.l4), caps(feats)), Outcome::kOk);
  const auto got = received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].second, tso.f);
}


// ---------------------------------------------------------------- attack (branch h-attack)
// The virtio-net header length through the software offloads (item 20) for receivers
// with the 10-byte legacy header and the 12-byte header without mergeable buffers, and a
// software-segmented TSO frame into receive buffers too short for any frame (item 21).

struct HdrCase {
  uint32_t hdr_len;
  bool mrg;
};

class AttackOffloadHdr : public OffloadDeliverTest, public ::testing::WithParamInterface<HdrCase> {
 protected:
  offload::RxCaps caps_for(uint64_t features) {
    const HdrCase c = GetParam();
    offload::RxCaps d;
    d.features = features | (c.hdr_len == 12 ? bit(kFVersion1) : 0) | (c.mrg ? bit(kNetFMrgRxbuf) : 0);
    d.hdr_len = net_hdr_len(d.features);
    EXPECT_EQ(d.hdr_len, c.hdr_len);
    d.mrg_rxbuf = c.mrg;
    return d;
  }
  std::vector<std::pair<NetHdr, Bytes>> received_hl() {
    const HdrCase c = GetParam();
    std::vector<std::pair<NetHdr, Bytes>> out;
    while (auto e = rx->next_used()) {
      Bytes b = rx->done_bytes(static_cast<uint16_t>(e->id), e->len);
      NetHdr h{};
      if (b.size() < c.hdr_len) {
        ADD_FAILURE() << "used length " << e->len << " below the header";
        continue;
      }
      std::memcpy(&h, b.data(), c.hdr_len);
      Bytes frame(b.begin() + c.hdr_len, b.end());
      const uint16_t nb = c.hdr_len == 12 ? h.num_buffers : 1;
      if (c.hdr_len == 12) {
        EXPECT_GE(nb, 1);
      }
      for (uint16_t k = 1; k < nb; ++k) {
        auto m = rx->next_used();
        if (!m) { ADD_FAILURE() << "missing merged buffer"; break; }
        Bytes more = rx->done_bytes(static_cast<uint16_t>(m->id), m->len);
        frame.insert(frame.end(), more.begin(), more.end());
      }
      out.push_back({h, frame});
    }
    return out;
  }
};

TEST_P(AttackOffloadHdr, SegmentedTsoIntactAfterTheReceiversHeader) {
  for (int i = 0; i < 16; ++i) rx->add_rx({2048});
  FrameSpec s{.tcp_options = kTcpOptions};
  const Bytes pl = payload_of(7000);
  const Built tso = build(s, pl, true);
  ASSERT_EQ(deliver(tso.f, tso_hdr(false, 1448, tso.l4), caps_for(0)), Outcome::kOk);
  const auto got = received_hl();
  const auto want = expected_segments(s, pl, 1448);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first.flags, 0);
    EXPECT_EQ(got[i].first.gso_type, 0);
    EXPECT_EQ(got[i].second, want[i]) << i;
  }
}

TEST_P(AttackOffloadHdr, PassedTsoAndPartialChecksumDescribedInTheReceiversHeader) {
  const HdrCase c = GetParam();
  for (int i = 0; i < 48; ++i) rx->add_rx({c.mrg ? 2048u : 70000u});
  FrameSpec s{.tcp_options = kTcpOptions};
  const Bytes pl = payload_of(20000);
  const Built tso = build(s, pl, true);
  const uint64_t f = bit(kNetFGuestCsum) | bit(kNetFGuestTso4);
  ASSERT_EQ(deliver(tso.f, tso_hdr(false, 1448, tso.l4), caps_for(f)), Outcome::kOk);
  FrameSpec u{.udp = true};
  const Built part = build(u, payload_of(333), true);
  NetHdr h{};
  h.flags = kNetHdrFNeedsCsum;
  h.csum_start = static_cast<uint16_t>(part.l4);
  h.csum_offset = 6;
  ASSERT_EQ(deliver(part.f, h, caps_for(0)), Outcome::kOk);
  const auto got = received_hl();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].second, tso.f);
  EXPECT_EQ(got[0].first.gso_type, kGsoTcpV4);
  EXPECT_EQ(got[0].first.gso_size, 1448);
  EXPECT_EQ(got[0].first.csum_start, tso.l4);
  EXPECT_EQ(got[1].first.flags, 0);
  EXPECT_EQ(got[1].second, build(u, payload_of(333)).f);
}

// A TSO frame segmented in software into a queue where every second buffer is too short
// for any frame: each short buffer is returned with used length 0, the frame's remaining
// segments dropped (one short_rx_buffer for the frame), nothing written into a short one.
TEST_P(AttackOffloadHdr, SegmentedTsoIntoShortBuffers) {
  const HdrCase c = GetParam();
  const uint32_t thr = c.mrg ? c.hdr_len : c.hdr_len + 14;
  std::vector<uint16_t> heads;
  for (int i = 0; i < 16; ++i) heads.push_back(rx->add_rx({i % 2 ? thr - 1 : 2048u}));
  FrameSpec s{.tcp_options = kTcpOptions};
  const Bytes pl = payload_of(7000);
  const Built tso = build(s, pl, true);
  const auto want = expected_segments(s, pl, 1448);
  uint32_t outcomes_short = 0, seg = 0;
  for (int k = 0; k < 8; ++k) {
    const Outcome o = deliver(tso.f, tso_hdr(false, 1448, tso.l4), caps_for(0));
    EXPECT_EQ(o, Outcome::kShortBuffer) << k;
    outcomes_short += o == Outcome::kShortBuffer;
  }
  EXPECT_EQ(outcomes_short, 8u);
  for (int i = 0; i < 16; ++i) {
    auto e = rx->next_used();
    ASSERT_TRUE(e) << "buffer " << i << " not returned";
    EXPECT_EQ(e->id, heads[i]);
    if (i % 2) {
      EXPECT_EQ(e->len, 0u) << i;
      Bytes b = rx->done_bytes(static_cast<uint16_t>(e->id), thr - 1);
      for (uint8_t x : b) EXPECT_EQ(x, 0xee) << "short buffer " << i << " written";
    } else {
      EXPECT_EQ(e->len, c.hdr_len + want[0].size()) << i;
      Bytes b = rx->done_bytes(static_cast<uint16_t>(e->id), e->len);
      EXPECT_EQ(Bytes(b.begin() + c.hdr_len, b.end()), want[0]) << i;
    }
    ++seg;
  }
  EXPECT_EQ(soft(offload::Work::kGsoSegments), 8u);
}

INSTANTIATE_TEST_SUITE_P(Receivers, AttackOffloadHdr,
                         ::testing::Values(HdrCase{10, false}, HdrCase{12, false},
                                           HdrCase{12, true}),
                         [](const auto& info) {
                           return "hdr" + std::to_string(info.param.hdr_len) +
                                  (info.param.mrg ? "_mrg" : "_nomrg");
                         });

}  // namespace
}  // namespace vl::offload

namespace vl::offload {
namespace {

// Which frames deliver() puts into the receive queue in one piece (a kNoBuffer outcome then
// left nothing behind, so the forwarder may keep the frame for a retry): all but those it
// segments in software.
TEST(DeliversWhole, EverythingButSoftwareSegmentation) {
  using virtio::bit;
  const uint64_t tso = bit(kNetFGuestCsum) | bit(kNetFGuestTso4) | bit(kNetFGuestTso6);
  RxCaps takes{};
  takes.features = tso | bit(kNetFGuestEcn);
  RxCaps plain{};
  EXPECT_TRUE(SoftOffload::delivers_whole(NetHdr{}, plain));
  NetHdr csum{};
  csum.flags = kNetHdrFNeedsCsum;
  EXPECT_TRUE(SoftOffload::delivers_whole(csum, plain));  // filled in, one copy
  EXPECT_TRUE(SoftOffload::delivers_whole(tso_hdr(false, 1448, 34), takes));
  EXPECT_TRUE(SoftOffload::delivers_whole(tso_hdr(true, 1428, 54), takes));
  EXPECT_FALSE(SoftOffload::delivers_whole(tso_hdr(false, 1448, 34), plain));
  RxCaps no_ecn{};
  no_ecn.features = tso;
  EXPECT_TRUE(SoftOffload::delivers_whole(tso_hdr(false, 1448, 34), no_ecn));
  EXPECT_FALSE(SoftOffload::delivers_whole(tso_hdr(false, 1448, 34, true), no_ecn));
  RxCaps only4{};
  only4.features = bit(kNetFGuestCsum) | bit(kNetFGuestTso4);
  EXPECT_FALSE(SoftOffload::delivers_whole(tso_hdr(true, 1428, 54), only4));
}

}  // namespace
}  // namespace vl::offload
