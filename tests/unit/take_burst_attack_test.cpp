// Hostile-guest tests of Forwarder::take_burst's transmit path (the two passes of bdb8cff):
// random mixes of good one-buffer chains, chains of several descriptors, indirect chains,
// buffers straddling regions, malformed chains of every kind and bad offload headers, on
// split and packed rings, at and around the burst size. Checks: every chain comes back
// exactly once, malformed ones at their pop and the others in the order taken, frames
// arrive in order, drop counters match; plus avail-index attacks and a concurrent mutator.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <chrono>
#include <cstdio>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "dp/fdb.h"
#include "dp/forwarder.h"
#include "fake_any_frontend.h"
#include "port/vhost_port.h"

namespace vl {
namespace {

using test::FakePackedRing;
using test::FakeQuiescer;
using test::FakeVring;
using test::RawPeer;
using vhost::Req;
using vhost::VringAddr;
using vhost::VringState;
using virtio::bit;

constexpr uint32_t kNum = test::kNum;
using test::kExtraGpa;
using test::kExtraSize;
constexpr uint32_t kExtraRegions = 5;  // 4 boundaries between them
constexpr uint64_t kNoRegionAddr = 0x7fff0000000ull;

uint64_t g_now = 1000000;
uint64_t fake_now() { return g_now; }

using HFrontend = test::AnyRingFrontend;
using test::frame_tagged;

enum class Cls { kFwd, kInOrderDrop, kPopBad, kOor };
enum Kind {
  kGoodOne,
  kGoodHdrSplit,
  kGoodHdrTorn,      // header across 3 descriptors (5 + 10 + rest)
  kGoodMultiZeros,   // 2..5 descriptors with zero-length ones in between
  kGoodIndirect,
  kGoodIndirect1,    // indirect table of one descriptor
  kGoodStraddle,     // one descriptor across two regions (header possibly torn)
  kGoodDataValid,    // DATA_VALID flag only: cleared, forwarded
  kShort25,          // one descriptor, 12 + 13 bytes
  kShort11,          // header shorter than 12 bytes
  kZeroLen,          // one descriptor of length 0, valid address
  kBadCsumK,         // NEEDS_CSUM past the frame
  kBadGsoK,          // unknown gso_type
  kGsoNoCsum,        // TCPV4 without NEEDS_CSUM
  kNoRegion,
  kZeroLenNoRegion,
  kWriteFlag,
  kStraddleHole,     // runs past the last region
  kIndirectBadLen,
  kIndirectNested,
  kIndirectNoRegion,
  kLoop,             // split: two descriptors pointing at each other
  kNextOor,          // split: next >= queue size
  kHeadOor,          // split: avail entry >= queue size
  kIndirectZeroLen,  // INDIRECT of length 0
  kKinds,
};

struct Posted {
  Kind kind;
  Cls cls;
  port::Drop drop;  // for kInOrderDrop
  uint16_t id;      // head (split) / buffer ID (packed)
  std::vector<uint8_t> frame;
};

class TakeBurstAttack : public ::testing::Test {
 protected:
  void start(bool packed, uint64_t drop_features = 0, uint32_t tx_retry_us = port::kDefaultTxRetryUs,
             uint64_t (*clock)() = &dp::tsc_now_ns) {
    packed_ = packed;
    // (The sender negotiates RING_PACKED only with packed rings: HFrontend::start.)
    hdr_len_ = virtio::net_hdr_len(vhost::BackendOptions::defaults().features & ~drop_features &
                                   ~(packed ? 0 : virtio::bit(virtio::kFRingPacked)));
    q = std::make_unique<FakeQuiescer>(1);
    fdb = std::make_unique<dp::Fdb>(1024, 64, 300);
    for (uint32_t i = 0; i < 2; ++i) {
      port::PortConfig c = test::rig_port_config(i);
      c.tx_retry_us = tx_retry_us;
      ports.push_back(std::make_unique<port::VhostPort>(i, c, q.get()));
      fes.push_back(std::make_unique<HFrontend>(i == 0 && packed, 4u << 20, i == 0 ? kExtraRegions : 0));
      ASSERT_TRUE(test::connect_any(*ports[i], *fes[i]));
      fes[i]->start(i == 0 ? drop_features : 0);
      ASSERT_TRUE(ports[i]->active());
      tables.ports[i] = ports[i].get();
    }
    tables.nports = 2;
    tables.mode = dp::ForwardMode::kXconnect;
    tables.xc_peer[0] = 1;
    tables.xc_peer[1] = 0;
    tables.fdb = fdb.get();
    fw = std::make_unique<dp::Forwarder>(&tables, clock, 0);
    tx_area_ = mem0().alloc(2u << 20, 64, 0);
    const uint64_t rxa = fes[1]->fm.alloc(512 * 2048, 64, 0);
    for (uint32_t i = 0; i < 512; ++i) rx_free_.push_back(rxa + 2048ull * i);
  }
  FakeVring& stx() { return *fes[0]->split[1]; }
  FakePackedRing& ptx() { return *fes[0]->pk[1]; }
  FakeVring& rx1() { return *fes[1]->split[0]; }
  test::FakeMemory& mem0() { return fes[0]->fm; }

  /// Receive buffers of port 1: 512 of 2 KiB, reused once returned.
  void post_rx(uint32_t n) {
    for (uint32_t i = 0; i < n && !rx_free_.empty() && rx1().free_descs() > 0; ++i) {
      const uint64_t a = rx_free_.back();
      rx_free_.pop_back();
      const uint16_t h = rx1().add_chain({{a, 2048, virtio::kDescFWrite}});
      rx_addr_[h] = a;
      ++rx_out_;
    }
  }
  void top_up_rx(uint32_t want) {
    if (want > 250) want = 250;
    if (rx_out_ < want) post_rx(want - rx_out_);
  }
  std::vector<std::vector<uint8_t>> received() {
    std::vector<std::vector<uint8_t>> out;
    while (auto e = rx1().next_used()) {
      --rx_out_;
      auto b = rx1().done_bytes(static_cast<uint16_t>(e->id), e->len);
      rx_free_.push_back(rx_addr_.at(static_cast<uint16_t>(e->id)));
      out.emplace_back(b.begin() + 12, b.end());
    }
    return out;
  }
  std::vector<uint16_t> returned() {
    std::vector<uint16_t> out;
    if (packed_) {
      while (auto e = ptx().next_used()) out.push_back(e->id);
    } else {
      while (auto e = stx().next_used()) out.push_back(static_cast<uint16_t>(e->id));
    }
    return out;
  }
  uint64_t drops(uint32_t p, port::Drop d) { return fw->counters(p).drops[static_cast<uint32_t>(d)].load(); }

  // ---- chain builders (port 0's transmit ring) ----
  uint16_t chain(const std::vector<test::DescSpec>& d, const test::ChainOpts& o = {}) {
    return packed_ ? ptx().add_chain(d, o) : stx().add_chain(d, o);
  }
  /// Transmit buffers: a 2 MiB area of port 0's memory, reused every round (a round's
  /// chains all come back before the next).
  uint64_t tx_alloc(uint32_t len) {
    const uint64_t a = tx_area_ + tx_cursor_;
    tx_cursor_ += (len + 15) & ~15u;
    if (tx_cursor_ > (2u << 20)) {
      ADD_FAILURE() << "tx area full";
      tx_cursor_ = 0;
    }
    return a;
  }
  uint64_t buf(const std::vector<uint8_t>& bytes, uint32_t off, uint32_t len) {
    const uint64_t a = tx_alloc(len ? len : 1);
    mem0().write(a, bytes.data() + off, len);
    return a;
  }
  uint16_t tx_sizes(const std::vector<uint8_t>& bytes, std::vector<uint32_t> sizes, bool indirect = false) {
    std::vector<test::DescSpec> d;
    uint32_t off = 0;
    for (uint32_t s : sizes) {
      d.push_back({buf(bytes, off, s), s, 0});
      off += s;
    }
    EXPECT_EQ(off, bytes.size());
    test::ChainOpts o;
    o.indirect = indirect;
    return chain(d, o);
  }
  /// The ring descriptor a chain just added starts with (to corrupt it afterwards).
  uint16_t next_pos() const { return packed_ ? fes[0]->pk[1]->next_avail() : 0; }

  bool kind_ok(Kind k) const {
    if (packed_) return k != kLoop && k != kNextOor && k != kHeadOor;
    return true;
  }
  /// Ring descriptors (split) / slots (packed) a kind takes at most.
  static uint32_t need(Kind k) {
    switch (k) {
      case kGoodMultiZeros: return 5;
      case kGoodHdrTorn: return 3;
      case kGoodHdrSplit: case kGoodDataValid: case kShort11: case kBadCsumK: case kGsoNoCsum:
      case kLoop: return 2;
      case kHeadOor: return 0;
      default: return 1;
    }
  }
  /// Whether a chain of kind `k` fits in port 0's transmit ring now (`slots`: packed slots
  /// taken this round, `n`: chains posted this round).
  bool fits(Kind k, uint32_t slots, uint32_t n) {
    if (n >= kNum) return false;
    if (packed_) return slots + need(k) <= kNum;
    return stx().free_descs() >= need(k);
  }
  /// Posts the kinds that fit, in order; returns what was posted.
  std::vector<Posted> post_all(const std::vector<Kind>& kinds, std::mt19937& rng) {
    std::vector<Posted> ps;
    uint32_t slots = 0;
    tx_cursor_ = 0;
    for (Kind k : kinds) {
      if (!fits(k, slots, static_cast<uint32_t>(ps.size()))) break;
      const uint16_t before = packed_ ? ptx().next_avail() : 0;
      ps.push_back(post(k, tag_++, rng));
      if (packed_) slots += (ptx().next_avail() + kNum - before) % kNum;
    }
    return ps;
  }

  Posted post(Kind k, uint32_t tag, std::mt19937& rng) {
    Posted p{k, Cls::kFwd, port::Drop::kCount, 0, {}};
    const uint32_t flen = 60 + rng() % 1400;
    p.frame = frame_tagged(flen, tag);
    virtio::NetHdr h{};
    auto bytes = [&] { return test::with_net_hdr(h, hdr_len_, p.frame); };
    const uint32_t total = flen + hdr_len_;
    switch (k) {
      case kGoodOne: p.id = tx_sizes(bytes(), {total}); break;
      case kGoodHdrSplit: p.id = tx_sizes(bytes(), {hdr_len_, total - hdr_len_}); break;
      case kGoodHdrTorn: p.id = tx_sizes(bytes(), {5, 10, total - 15}); break;
      case kGoodMultiZeros: {
        const uint32_t a = 1 + rng() % 40;
        p.id = tx_sizes(bytes(), {a, 0, 0, total - a, 0});
        break;
      }
      case kGoodIndirect: {
        const uint32_t a = 1 + rng() % 30;
        p.id = tx_sizes(bytes(), {a, 20, total - a - 20}, true);
        break;
      }
      case kGoodIndirect1: p.id = tx_sizes(bytes(), {total}, true); break;
      case kGoodStraddle: {
        // A boundary of its own per round (frames of a round are in flight together).
        const uint32_t j = 1 + straddles_++ % (kExtraRegions - 1);
        const uint64_t bnd = kExtraGpa + j * kExtraSize;
        const uint32_t x = 1 + rng() % (total - 1);  // bytes before the boundary
        const auto b = bytes();
        mem0().write(bnd - x, b.data(), x);
        mem0().write(bnd, b.data() + x, total - x);
        p.id = chain({{bnd - x, total, 0}});
        break;
      }
      case kGoodDataValid:
        h.flags = virtio::kNetHdrFDataValid;
        p.id = tx_sizes(bytes(), rng() % 2 ? std::vector<uint32_t>{total}
                                           : std::vector<uint32_t>{hdr_len_, total - hdr_len_});
        break;
      case kShort25:
        p.cls = Cls::kInOrderDrop;
        p.drop = port::Drop::kBadHeader;
        p.id = tx_sizes(std::vector<uint8_t>(hdr_len_ + 13, 0), {hdr_len_ + 13});
        break;
      case kShort11:
        p.cls = Cls::kInOrderDrop;
        p.drop = port::Drop::kBadHeader;
        p.id = tx_sizes(std::vector<uint8_t>(11, 0), rng() % 2 ? std::vector<uint32_t>{11}
                                                               : std::vector<uint32_t>{5, 6});
        break;
      case kZeroLen:
        p.cls = Cls::kInOrderDrop;
        p.drop = port::Drop::kBadHeader;
        p.id = chain({{tx_alloc(8), 0, 0}});
        break;
      case kBadCsumK:
        p.cls = Cls::kInOrderDrop;
        p.drop = port::Drop::kBadCsum;
        h.flags = virtio::kNetHdrFNeedsCsum;
        h.csum_start = static_cast<uint16_t>(flen - 1);
        h.csum_offset = 6;
        p.id = tx_sizes(bytes(), rng() % 2 ? std::vector<uint32_t>{total}
                                           : std::vector<uint32_t>{hdr_len_, total - hdr_len_});
        break;
      case kBadGsoK:
        p.cls = Cls::kInOrderDrop;
        p.drop = port::Drop::kBadGso;
        h.gso_type = 0x42;
        h.gso_size = 100;
        p.id = tx_sizes(bytes(), {total});
        break;
      case kGsoNoCsum:
        p.cls = Cls::kInOrderDrop;
        p.drop = port::Drop::kBadGso;
        h.gso_type = 1;  // TCPV4
        h.gso_size = 1000;
        p.id = tx_sizes(bytes(), rng() % 2 ? std::vector<uint32_t>{total}
                                           : std::vector<uint32_t>{7, total - 7});
        break;
      case kNoRegion:
        p.cls = Cls::kPopBad;
        p.id = chain({{kNoRegionAddr, 80, 0}});
        break;
      case kZeroLenNoRegion:
        p.cls = Cls::kPopBad;
        p.id = chain({{kNoRegionAddr, 0, 0}});
        break;
      case kWriteFlag:
        p.cls = Cls::kPopBad;
        p.id = chain({{buf(bytes(), 0, total), total, virtio::kDescFWrite}});
        break;
      case kStraddleHole:
        p.cls = Cls::kPopBad;
        p.id = chain({{kExtraGpa + kExtraRegions * kExtraSize - 10, 80, 0}});
        break;
      case kIndirectBadLen: {
        p.cls = Cls::kPopBad;
        const uint16_t pos = next_pos();
        p.id = tx_sizes(bytes(), {hdr_len_, total - hdr_len_}, true);
        if (packed_) ptx().ring()[pos].len = 24;
        else stx().desc()[p.id].len = 24;
        break;
      }
      case kIndirectNested: {
        p.cls = Cls::kPopBad;
        test::ChainOpts o;
        o.indirect = true;
        p.id = chain({{buf(bytes(), 0, hdr_len_), hdr_len_, 0},
                      {tx_alloc(32), 32, virtio::kDescFIndirect}},
                     o);
        break;
      }
      case kIndirectNoRegion: {
        p.cls = Cls::kPopBad;
        const uint16_t pos = next_pos();
        p.id = tx_sizes(bytes(), {total}, true);
        if (packed_) ptx().ring()[pos].addr = kNoRegionAddr;
        else stx().desc()[p.id].addr = kNoRegionAddr;
        break;
      }
      case kLoop: {  // split only
        p.cls = Cls::kPopBad;
        const auto b = bytes();
        p.id = chain({{buf(b, 0, 30), 30, 0}, {buf(b, 30, total - 30), total - 30, 0}});
        const uint16_t second = stx().desc()[p.id].next;
        stx().desc()[second].flags = virtio::kDescFNext;
        stx().desc()[second].next = p.id;
        break;
      }
      case kNextOor: {  // split only
        p.cls = Cls::kPopBad;
        p.id = tx_sizes(bytes(), {total});
        stx().desc()[p.id].flags = virtio::kDescFNext;
        stx().desc()[p.id].next = static_cast<uint16_t>(kNum + rng() % 1000);
        break;
      }
      case kHeadOor:  // split only: no chain, no used entry
        p.cls = Cls::kOor;
        p.id = static_cast<uint16_t>(kNum + rng() % 60000);
        stx().publish(p.id);
        break;
      case kIndirectZeroLen: {
        p.cls = Cls::kPopBad;
        const uint16_t pos = next_pos();
        p.id = tx_sizes(bytes(), {total}, true);
        if (packed_) ptx().ring()[pos].len = 0;
        else stx().desc()[p.id].len = 0;
        break;
      }
      default: ADD_FAILURE() << "kind " << k;
    }
    return p;
  }

  /// One round: `kinds` posted, polled until all taken, everything checked.
  void round(const std::vector<Kind>& kinds, std::mt19937& rng, const std::string& what) {
    straddles_ = 0;
    std::vector<Posted> ps = post_all(kinds, rng);
    uint32_t nfwd = 0;
    for (const auto& p : ps) nfwd += p.cls == Cls::kFwd;
    std::vector<uint16_t> got;
    std::vector<std::vector<uint8_t>> frames;
    uint64_t d0[port::kNumDrops], d1[port::kNumDrops];
    for (uint32_t i = 0; i < port::kNumDrops; ++i) {
      d0[i] = drops(0, static_cast<port::Drop>(i));
      d1[i] = drops(1, static_cast<port::Drop>(i));
    }
    const uint64_t rx0 = fw->counters(0).rx_packets.load(), tx1 = fw->counters(1).tx_packets.load();
    std::vector<uint32_t> bursts;
    uint32_t taken = 0;
    for (int guard = 0; taken < ps.size() && guard < 1000; ++guard) {
      for (auto id : returned()) got.push_back(id);
      for (auto& f : received()) frames.push_back(std::move(f));
      top_up_rx(200);
      const uint32_t r = fw->poll(0, 0);
      ASSERT_LE(r, tables.burst) << what;
      if (!r) break;
      bursts.push_back(r);
      taken += r;
    }
    fw->flush_all();
    ASSERT_EQ(taken, ps.size()) << what;
    EXPECT_EQ(fw->poll(0, 0), 0u) << what;
    // Expected used entries: per burst, the chains a pop refused, then the others in order.
    std::vector<uint16_t> want;
    std::vector<std::vector<uint8_t>> want_frames;
    size_t at = 0;
    for (uint32_t b : bursts) {
      for (size_t i = at; i < at + b; ++i)
        if (ps[i].cls == Cls::kPopBad) want.push_back(ps[i].id);
      for (size_t i = at; i < at + b; ++i) {
        if (ps[i].cls == Cls::kFwd || ps[i].cls == Cls::kInOrderDrop) want.push_back(ps[i].id);
        if (ps[i].cls == Cls::kFwd) want_frames.push_back(ps[i].frame);
      }
      at += b;
    }
    for (auto id : returned()) got.push_back(id);
    for (auto& f : received()) frames.push_back(std::move(f));
    EXPECT_EQ(got, want) << what;
    EXPECT_EQ(frames, want_frames) << what;
    uint64_t want_d0[port::kNumDrops] = {};
    for (const auto& p : ps) {
      if (p.cls == Cls::kPopBad || p.cls == Cls::kOor) ++want_d0[static_cast<uint32_t>(port::Drop::kBadDescriptor)];
      if (p.cls == Cls::kInOrderDrop) ++want_d0[static_cast<uint32_t>(p.drop)];
    }
    for (uint32_t i = 0; i < port::kNumDrops; ++i) {
      EXPECT_EQ(drops(0, static_cast<port::Drop>(i)) - d0[i], want_d0[i])
          << what << " port 0 drop " << port::drop_name(static_cast<port::Drop>(i));
      EXPECT_EQ(drops(1, static_cast<port::Drop>(i)) - d1[i], 0u)
          << what << " port 1 drop " << port::drop_name(static_cast<port::Drop>(i));
    }
    EXPECT_EQ(fw->counters(0).rx_packets.load() - rx0, ps.size()) << what;
    EXPECT_EQ(fw->counters(1).tx_packets.load() - tx1, nfwd) << what;
  }

  /// Rounds of random mixes at sizes around the burst.
  void random_rounds(uint32_t burst, uint32_t rounds, uint32_t seed) {
    tables.burst = burst;
    std::mt19937 rng(seed);
    for (uint32_t r = 0; r < rounds; ++r) {
      const uint32_t sizes[] = {1, burst - 1, burst, burst + 1, 2 * burst, 2 * burst + 1,
                                1 + static_cast<uint32_t>(rng() % (2 * burst + 3))};
      uint32_t n = sizes[rng() % 7];
      if (n == 0) n = 1;
      if (n > 120) n = 120;  // room in a 256-entry ring (chains take up to 5 descriptors)
      // Mostly good one-buffer chains, with runs of other kinds.
      const uint32_t mode = rng() % 4;
      std::vector<Kind> kinds;
      for (uint32_t i = 0; i < n; ++i) {
        Kind k;
        if (mode == 0) k = kGoodOne;
        else if (mode == 1 || rng() % 3 == 0) k = static_cast<Kind>(rng() % kKinds);
        else k = kGoodOne;
        if (k == kGoodStraddle && straddle_budget(kinds) == 0) k = kGoodOne;
        if (!kind_ok(k)) k = kGoodOne;
        kinds.push_back(k);
      }
      // Descriptors: at most 5 per chain, 3 per indirect (1 in the ring).
      round(kinds, rng,
            "burst " + std::to_string(burst) + " round " + std::to_string(r) + " n " + std::to_string(n));
      if (HasFatalFailure() || HasFailure()) {
        std::string s;
        for (Kind k : kinds) s += std::to_string(k) + " ";
        ADD_FAILURE() << "kinds: " << s;
        return;
      }
    }
  }
  static uint32_t straddle_budget(const std::vector<Kind>& ks) {
    uint32_t n = 0;
    for (Kind k : ks) n += k == kGoodStraddle;
    return n < kExtraRegions - 1 ? kExtraRegions - 1 - n : 0;
  }

  bool packed_ = false;
  uint32_t hdr_len_ = 12;
  uint32_t tag_ = 0;
  uint32_t straddles_ = 0;
  uint32_t rx_out_ = 0;
  uint64_t tx_area_ = 0;
  uint32_t tx_cursor_ = 0;
  std::vector<uint64_t> rx_free_;
  std::map<uint16_t, uint64_t> rx_addr_;
  std::unique_ptr<FakeQuiescer> q;
  std::unique_ptr<dp::Fdb> fdb;
  std::vector<std::unique_ptr<port::VhostPort>> ports;
  std::vector<std::unique_ptr<HFrontend>> fes;
  dp::SwitchTables tables;
  // Every kind once, on its own and between good one-buffer chains, at the burst edge.
  void each_kind_around_one_buffer_chains(bool packed, uint32_t seed) {
    start(packed);
    std::mt19937 rng(seed);
    for (uint32_t burst : {1u, 2u, 32u, 64u}) {
      tables.burst = burst;
      for (int k = 0; k < kKinds; ++k) {
        if (!kind_ok(static_cast<Kind>(k))) continue;
        for (uint32_t before : {0u, burst - 1, burst}) {
          std::vector<Kind> ks(before, kGoodOne);
          ks.push_back(static_cast<Kind>(k));
          for (int i = 0; i < 3; ++i) ks.push_back(kGoodOne);
          round(ks, rng, std::string(packed ? "packed" : "split") + " burst " +
                               std::to_string(burst) + " kind " + std::to_string(k) + " before " +
                               std::to_string(before));
          if (HasFailure()) return;
        }
      }
    }
  }

  std::unique_ptr<dp::Forwarder> fw;
};

TEST_F(TakeBurstAttack, SplitEachKindAroundOneBufferChains) {
  each_kind_around_one_buffer_chains(false, 1);
}

TEST_F(TakeBurstAttack, PackedEachKindAroundOneBufferChains) {
  each_kind_around_one_buffer_chains(true, 2);
}

TEST_F(TakeBurstAttack, SplitRandomMixes) {
  start(false);
  for (uint32_t burst : {1u, 7u, 32u, 64u}) {
    random_rounds(burst, 150, 100 + burst);
    if (HasFailure()) return;
  }
}

TEST_F(TakeBurstAttack, PackedRandomMixes) {
  start(true);
  for (uint32_t burst : {1u, 7u, 32u, 64u}) {
    random_rounds(burst, 150, 200 + burst);
    if (HasFailure()) return;
  }
}

// A 10-byte header (no VERSION_1, no MRG_RXBUF): every one-buffer chain takes the arena path.
TEST_F(TakeBurstAttack, SplitRandomMixesLegacyHeader) {
  start(false, bit(virtio::kFVersion1) | bit(virtio::kNetFMrgRxbuf));
  ASSERT_EQ(tables.port(0)->dp().caps.hdr_len, 10u);
  for (uint32_t burst : {1u, 32u, 64u}) {
    random_rounds(burst, 100, 300 + burst);
    if (HasFailure()) return;
  }
}

// The whole ring of one-buffer chains at once (avail index exactly a queue ahead).
TEST_F(TakeBurstAttack, SplitFullRing) {
  start(false);
  std::mt19937 rng(5);
  tables.burst = 64;
  round(std::vector<Kind>(kNum, kGoodOne), rng, "full ring of one-buffer chains");
  std::vector<Kind> ks(kNum, kGoodOne);
  for (uint32_t i = 0; i < kNum; i += 9) ks[i] = kNoRegion;
  for (uint32_t i = 4; i < kNum; i += 13) ks[i] = kShort25;
  round(ks, rng, "full ring, mixed");
}

TEST_F(TakeBurstAttack, PackedFullRing) {
  start(true);
  std::mt19937 rng(6);
  tables.burst = 64;
  round(std::vector<Kind>(kNum, kGoodOne), rng, "full ring of one-buffer chains");
  std::vector<Kind> ks(kNum, kGoodOne);
  for (uint32_t i = 0; i < kNum; i += 9) ks[i] = kNoRegion;
  for (uint32_t i = 4; i < kNum; i += 13) ks[i] = kShort25;
  round(ks, rng, "full ring, mixed");
}

// Avail index more than a queue ahead, after chains the device has already counted: the
// chains seen before the jump come back once, in order; then the queue stops.
TEST_F(TakeBurstAttack, SplitAvailIndexJumpsAfterBeingRead) {
  start(false);
  std::mt19937 rng(7);
  tables.burst = 32;
  top_up_rx(120);
  std::vector<uint16_t> heads;
  for (uint32_t i = 0; i < 100; ++i) heads.push_back(post(kGoodOne, tag_++, rng).id);
  EXPECT_EQ(fw->poll(0, 0), 32u);  // reads the index: 100
  stx().set_avail_idx(static_cast<uint16_t>(stx().avail_idx() + kNum + 1));
  EXPECT_EQ(fw->poll(0, 0), 32u);  // 68 cached
  EXPECT_EQ(fw->poll(0, 0), 32u);  // 36 cached
  EXPECT_EQ(fw->poll(0, 0), 0u);   // 4 < 32: reads the index, more than a queue ahead
  EXPECT_EQ(fw->poll(0, 0), 0u);
  fw->flush_all();
  EXPECT_EQ(returned(), std::vector<uint16_t>(heads.begin(), heads.begin() + 96));
  EXPECT_EQ(received().size(), 96u);
  EXPECT_GE(drops(0, port::Drop::kRingBroken), 1u);
}

// Avail index moved backwards (behind the device's own position): broken, nothing taken.
TEST_F(TakeBurstAttack, SplitAvailIndexBackwards) {
  start(false);
  std::mt19937 rng(8);
  tables.burst = 32;
  top_up_rx(40);
  for (uint32_t i = 0; i < 10; ++i) post(kGoodOne, tag_++, rng);
  EXPECT_EQ(fw->poll(0, 0), 10u);
  EXPECT_EQ(returned().size(), 10u);
  stx().set_avail_idx(static_cast<uint16_t>(stx().avail_idx() - 1));
  EXPECT_EQ(fw->poll(0, 0), 0u);
  EXPECT_EQ(fw->poll(0, 0), 0u);
  EXPECT_TRUE(returned().empty());
}

// The same head made available twice in one burst: both entries are taken and returned.
TEST_F(TakeBurstAttack, SplitSameHeadTwice) {
  start(false);
  std::mt19937 rng(9);
  tables.burst = 32;
  top_up_rx(40);
  const Posted p = post(kGoodOne, tag_++, rng);
  stx().publish(p.id);
  const Posted m = post(kGoodMultiZeros, tag_++, rng);
  stx().publish(m.id);
  EXPECT_EQ(fw->poll(0, 0), 4u);
  fw->flush_all();
  std::vector<uint16_t> got;
  for (uint16_t i = stx().used_idx() - 4; i != stx().used_idx(); ++i)
    got.push_back(static_cast<uint16_t>(stx().used_elem(i).id));
  EXPECT_EQ(got, (std::vector<uint16_t>{p.id, p.id, m.id, m.id}));
  EXPECT_EQ(received().size(), 4u);
}

// Packed: good one-buffer chains, then a NEXT run over the whole ring (kBroken in pass 1):
// the one-buffer chains popped before it are still forwarded and returned once.
TEST_F(TakeBurstAttack, PackedBrokenChainAfterOneBufferChains) {
  start(true);
  std::mt19937 rng(10);
  tables.burst = 32;
  top_up_rx(40);
  std::vector<uint16_t> ids;
  for (uint32_t i = 0; i < 5; ++i) ids.push_back(post(kGoodOne, tag_++, rng).id);
  // Slots 5..255 NEXT-linked, then wrapping: never ends within the free part of the ring.
  const uint64_t a = mem0().alloc(64, 8, 0);
  const uint16_t first = ptx().take_slots(static_cast<uint16_t>(kNum - 5));
  for (uint32_t i = 0; i < kNum - 5; ++i) {
    const uint16_t pos = static_cast<uint16_t>(first + i);
    ptx().write_desc(pos, a, 64, 77, 0);
  }
  // Make them all available with NEXT in the lap the driver had at `first` (wrap counter 1).
  for (uint32_t i = kNum - 5; i-- > 0;)
    __atomic_store_n(&ptx().ring()[first + i].flags,
                     static_cast<uint16_t>(virtio::kDescFNext | virtio::kPackedDescFAvail),
                     __ATOMIC_RELEASE);
  EXPECT_EQ(fw->poll(0, 0), 5u);
  fw->flush_all();
  EXPECT_EQ(returned(), ids);
  EXPECT_EQ(received().size(), 5u);
  EXPECT_EQ(fw->poll(0, 0), 0u);
  EXPECT_GE(drops(0, port::Drop::kRingBroken), 1u);
}

// Frames held past the burst (a receiver without buffers): the bookkeeping path (not lean),
// with malformed chains among them. Every chain comes back once, the in-order ones in order.

class TakeBurstAttackHeld : public TakeBurstAttack {
 public:
  void run(bool packed) {
    start(packed, 0, port::kDefaultTxRetryUs, &fake_now);
    std::mt19937 rng(packed ? 11 : 12);
    for (uint32_t burst : {7u, 32u, 64u}) {
      tables.burst = burst;
      for (int r = 0; r < 40; ++r) {
        straddles_ = 0;
        std::vector<Kind> kinds;
        uint32_t nst = 0;
        for (uint32_t i = 0, m = 1 + rng() % 100; i < m; ++i) {
          Kind k = rng() % 3 ? kGoodOne : static_cast<Kind>(rng() % kKinds);
          if (!kind_ok(k) || (k == kGoodStraddle && nst >= kExtraRegions - 1)) k = kGoodOne;
          nst += k == kGoodStraddle;
          kinds.push_back(k);
        }
        std::vector<Posted> ps = post_all(kinds, rng);
        const uint32_t n = static_cast<uint32_t>(ps.size());
        uint32_t nfwd = 0;
        for (const auto& p : ps) nfwd += p.cls == Cls::kFwd;
        const uint32_t room = nfwd ? static_cast<uint32_t>(rng() % nfwd) : 0;
        if (rx_out_ < room) post_rx(room - rx_out_);
        uint32_t taken = 0;
        std::vector<uint16_t> got;
        std::vector<std::vector<uint8_t>> frames;
        for (int guard = 0; taken < n && guard < 200; ++guard) {
          taken += fw->poll(0, 0);
          for (auto id : returned()) got.push_back(id);
          for (auto& f : received()) frames.push_back(f);
          if (guard % 3 == 2) {  // a little room now and then
            post_rx(1 + rng() % 8);
            g_now += 1000;
            fw->end_pass();
          }
        }
        ASSERT_EQ(taken, n);
        post_rx(nfwd + 4);
        g_now += 1000;
        fw->end_pass();
        fw->flush_all();
        for (auto id : returned()) got.push_back(id);
        for (auto& f : received()) frames.push_back(f);
        EXPECT_FALSE(fw->holding());
        std::vector<uint16_t> want_inorder, want_bad;
        std::vector<std::vector<uint8_t>> want_frames;
        for (const auto& p : ps) {
          if (p.cls == Cls::kFwd || p.cls == Cls::kInOrderDrop) want_inorder.push_back(p.id);
          if (p.cls == Cls::kPopBad) want_bad.push_back(p.id);
          if (p.cls == Cls::kFwd) want_frames.push_back(p.frame);
        }
        // Split the returned entries: the pop-refused ones by position.
        std::vector<uint16_t> got_inorder, got_bad;
        std::multiset<uint16_t> bad_ids(want_bad.begin(), want_bad.end());
        for (auto id : got) {
          auto it = bad_ids.find(id);
          if (it != bad_ids.end()) {
            bad_ids.erase(it);
            got_bad.push_back(id);
          } else {
            got_inorder.push_back(id);
          }
        }
        EXPECT_EQ(got_inorder, want_inorder) << "burst " << burst << " round " << r;
        EXPECT_EQ(got_bad, want_bad) << "burst " << burst << " round " << r;
        // Frames dropped for want of room count at port 1; those delivered are in order.
        const uint64_t nodrop = fw->counters(1).drops[0].load();
        (void)nodrop;
        size_t j = 0;
        for (const auto& f : frames) {
          while (j < want_frames.size() && want_frames[j] != f) ++j;
          EXPECT_LT(j, want_frames.size()) << "a frame out of order or unknown, round " << r;
          ++j;
        }
        if (HasFailure()) return;
      }
    }
  }
};

TEST_F(TakeBurstAttackHeld, Split) { run(false); }
TEST_F(TakeBurstAttackHeld, Packed) { run(true); }

// A hostile driver thread rewriting descriptors, avail entries and buffers while the
// forwarder polls (split). No crash, every used id in range, one used entry per chain taken.
TEST_F(TakeBurstAttack, SplitConcurrentMutator) {
  start(false);
  tables.burst = 32;
  FakeVring& r = stx();
  const uint64_t area = tx_area_;
  uint8_t* area_host = mem0().host(area, 1 << 20);
  std::atomic<bool> stop{false};
  virtio::VringDesc* desc = r.desc();
  virtio::VringAvail* avail = r.avail();
  virtio::VringUsed* used = r.used();
  std::thread mut([&] {
    std::mt19937 g(42);
    while (!stop.load(std::memory_order_relaxed)) {
      switch (g() % 8) {
        case 0: case 1: case 2: {
          const uint16_t i = g() % kNum;
          uint64_t addr;
          const uint32_t w = g() % 16;
          if (w == 0) addr = kNoRegionAddr + g() % 4096;
          else if (w == 1) addr = (4u << 20) - g() % 200;          // the end of region 0
          else if (w == 2) addr = kExtraGpa + kExtraSize - g() % 100;  // straddling
          else if (w == 3) addr = g() % (4u << 20);                 // anywhere, rings too
          else addr = area + g() % ((1 << 20) - 4096);
          const uint32_t len = g() % 5 == 0 ? g() % 12 : g() % 3000;
          uint16_t flags = 0;
          if (g() % 3 == 0) flags |= virtio::kDescFNext;
          if (g() % 29 == 0) flags |= virtio::kDescFWrite;
          if (g() % 11 == 0) flags |= virtio::kDescFIndirect;
          const uint16_t next = g() % 17 == 0 ? static_cast<uint16_t>(g()) : static_cast<uint16_t>(g() % kNum);
          virtio::VringDesc d{addr, len, flags, next};
          std::memcpy(&desc[i], &d, sizeof d);
          break;
        }
        case 3: case 4: {
          const uint16_t head = g() % 50 == 0 ? static_cast<uint16_t>(kNum + g() % 100) : g() % kNum;
          __atomic_store_n(&avail->ring[g() % kNum], head, __ATOMIC_RELAXED);
          break;
        }
        case 5: {
          const uint16_t u = __atomic_load_n(&used->idx, __ATOMIC_ACQUIRE);
          const uint16_t a = __atomic_load_n(&avail->idx, __ATOMIC_RELAXED);
          const uint16_t k = 1 + g() % 16;
          if (static_cast<uint16_t>(a + k - u) <= kNum)
            __atomic_store_n(&avail->idx, static_cast<uint16_t>(a + k), __ATOMIC_RELEASE);
          break;
        }
        default: {  // headers and frames under the device's feet
          const uint32_t off = g() % ((1 << 20) - 16);
          const uint32_t v = g();
          std::memcpy(area_host + off, &v, 4);
          if (g() % 4 == 0) area_host[off] = static_cast<uint8_t>(g() % 4);  // flags
        }
      }
    }
  });
  uint16_t seen = r.used_idx();
  uint64_t polled = 0, nused = 0;
  uint32_t bad_ids = 0;
  auto scan = [&] {
    const uint16_t u = r.used_idx();
    for (uint16_t i = seen; i != u; ++i)
      if (r.used_elem(i).id >= kNum) ++bad_ids;
    nused += static_cast<uint16_t>(u - seen);
    seen = u;
  };
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(6)) {
    polled += fw->poll(0, 0);
    scan();
    top_up_rx(64);
    received();
  }
  stop = true;
  mut.join();
  fw->flush_all();
  scan();
  received();
  EXPECT_EQ(bad_ids, 0u);
  const uint64_t bd = drops(0, port::Drop::kBadDescriptor);
  EXPECT_LE(nused, polled);
  // used entries = taken - out-of-range heads (each also a bad_descriptor drop)
  EXPECT_GE(nused + bd, polled);
  EXPECT_EQ(fw->counters(0).rx_packets.load(), polled);
  EXPECT_FALSE(fw->holding());
  // Every chain taken ends as a drop at port 0 or a frame at port 1 (sent or dropped there).
  uint64_t sum0 = 0, sum1 = 0;
  for (uint32_t i = 0; i < port::kNumDrops; ++i) {
    if (static_cast<port::Drop>(i) != port::Drop::kRingBroken) sum0 += drops(0, static_cast<port::Drop>(i));
    sum1 += drops(1, static_cast<port::Drop>(i));
    if (drops(1, static_cast<port::Drop>(i)))
      std::printf("port 1 drop %s: %llu\n", port::drop_name(static_cast<port::Drop>(i)),
                  (unsigned long long)drops(1, static_cast<port::Drop>(i)));
  }
  EXPECT_EQ(sum0 + sum1 + fw->counters(1).tx_packets.load(), polled);
  std::printf("mutator: polled %llu chains, %u used entries, drops bad_desc %llu bad_hdr %llu "
              "csum %llu gso %llu broken %llu; port 1 tx %llu\n",
              (unsigned long long)polled, static_cast<unsigned>(nused), (unsigned long long)bd,
              (unsigned long long)drops(0, port::Drop::kBadHeader),
              (unsigned long long)drops(0, port::Drop::kBadCsum),
              (unsigned long long)drops(0, port::Drop::kBadGso),
              (unsigned long long)drops(0, port::Drop::kRingBroken),
              (unsigned long long)fw->counters(1).tx_packets.load());
}

}  // namespace
}  // namespace vl
