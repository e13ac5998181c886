// Hostile receiving guest vs Forwarder::deliver_queue's two passes (90e9ef5, 85b7427):
// receive rings of mixed chains, split and packed, mergeable on/off, checked against a
// frame-by-frame model of deliver_frame. (A concurrent length-mutator case is left out: its
// fake driver ran out of descriptors or guest memory under load, a fixture limit.)
#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "dp/fdb.h"
#include "dp/forwarder.h"
#include "fake_any_frontend.h"
#include "fake_frontend.h"
#include "fake_packed_driver.h"
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
constexpr uint64_t kNoRegionAddr = 0x7fff0000000ull;

using HFe = test::AnyRingFrontend;
using test::frame_tagged;

enum RxKind { kOne, kMulti, kIndirect, kBadNoRegion, kBadNoWrite, kBadZeroNoRegion, kHeadOor };

struct RxPost {
  RxKind kind;
  uint16_t id;
  std::vector<uint64_t> addrs;
  std::vector<uint32_t> sizes;
  bool scribbled = false;  // written by a spread that was then un-popped (allowed)
  uint32_t total() const {
    uint32_t t = 0;
    for (auto s : sizes) t += s;
    return t;
  }
  bool bad() const { return kind >= kBadNoRegion; }
};

struct Used {
  uint16_t id;
  uint32_t len;
  bool operator==(const Used& o) const { return id == o.id && len == o.len; }
};
std::ostream& operator<<(std::ostream& os, const Used& u) { return os << "{" << u.id << "," << u.len << "}"; }

struct Model {
  std::deque<RxPost> pending;
  bool broken = false;
  bool mrg = true;
  uint64_t sent = 0, too_big = 0, nobuf = 0, ring_broken = 0, short_buf = 0;
  std::vector<Used> used;  // expected used entries, in order
  // for each delivered frame: chains (index into `consumed`) and frame bytes
  struct Deliv {
    std::vector<RxPost> chains;
    std::vector<uint32_t> lens;
    std::vector<uint8_t> frame;
  };
  std::vector<Deliv> delivered;

  void frame(const std::vector<uint8_t>& f, uint32_t max_frame) {
    if (broken) { ++ring_broken; return; }
    const uint32_t F = static_cast<uint32_t>(f.size());
    if (F > max_frame) { ++too_big; return; }
    const uint32_t T = 12 + F;
    if (pending.empty()) { ++nobuf; return; }
    const RxPost& c = pending.front();
    if (c.bad()) {
      broken = true;
      if (c.kind != kHeadOor) used.push_back({c.id, 0});
      pending.pop_front();
      ++ring_broken;
      return;
    }
    // Too short for any frame (hostile-inputs.md item 21): returned unused, frame dropped.
    if (c.total() < (mrg ? 12u : 12u + 60u)) {
      used.push_back({c.id, 0});
      pending.pop_front();
      ++short_buf;
      return;
    }
    if (c.total() >= T) {
      used.push_back({c.id, T});
      delivered.push_back({{c}, {T}, f});
      pending.pop_front();
      ++sent;
      return;
    }
    if (!mrg) { ++too_big; return; }
    // spread
    uint32_t left = T;
    size_t k = 0;
    std::vector<Used> u;
    Deliv d;
    d.frame = f;
    for (;;) {
      const RxPost& cc = pending[k];
      const uint32_t w = std::min(left, cc.total());
      u.push_back({cc.id, w});
      d.chains.push_back(cc);
      d.lens.push_back(w);
      left -= w;
      ++k;
      if (!left) break;
      if (k == pending.size()) {
        for (size_t i = 0; i < k; ++i) pending[i].scribbled = true;
        ++nobuf;
        return;
      }
      if (pending[k].bad()) {  // broken mid-spread: nothing of the frame is returned
        broken = true;
        for (size_t i = 0; i < k; ++i) pending[i].scribbled = true;
        ++ring_broken;
        return;
      }
    }
    for (auto& x : u) used.push_back(x);
    delivered.push_back(d);
    pending.erase(pending.begin(), pending.begin() + k);
    ++sent;
  }
};

class RxBatch {
 public:
  RxBatch(bool packed, bool mrg, uint32_t tx_retry_us = 0, uint64_t (*clock)() = &dp::tsc_now_ns)
      : packed_(packed) {
    model.mrg = mrg;
    q = std::make_unique<FakeQuiescer>(1);
    fdb = std::make_unique<dp::Fdb>(1024, 64, 300);
    for (uint32_t i = 0; i < 2; ++i) {
      port::PortConfig c = test::rig_port_config(i);
      c.tx_retry_us = tx_retry_us;
      ports.push_back(std::make_unique<port::VhostPort>(i, c, q.get()));
      fes.push_back(std::make_unique<HFe>(i == 1 && packed, 16u << 20));
      EXPECT_TRUE(test::connect_any(*ports[i], *fes[i]));
      fes[i]->start(i == 1 && !mrg ? bit(virtio::kNetFMrgRxbuf) : 0);
      EXPECT_TRUE(ports[i]->active());
      tables.ports[i] = ports[i].get();
    }
    tables.nports = 2;
    tables.mode = dp::ForwardMode::kXconnect;
    tables.xc_peer[0] = 1;
    tables.xc_peer[1] = 0;
    tables.fdb = fdb.get();
    tables.burst = 64;
    fw = std::make_unique<dp::Forwarder>(&tables, clock, 0);
    max_frame = ports[1]->dp().caps.max_frame;
    EXPECT_EQ(ports[1]->dp().caps.mrg_rxbuf, mrg);
  }
  test::FakeMemory& m1() { return fes[1]->fm; }
  FakeVring& stx() { return *fes[0]->split[1]; }
  FakeVring& srx() { return *fes[1]->split[0]; }
  FakePackedRing& prx() { return *fes[1]->pk[0]; }

  void post(RxKind k, std::vector<uint32_t> sizes) {
    RxPost p{k, 0, {}, sizes};
    std::vector<test::DescSpec> d;
    for (uint32_t s : sizes) {
      uint64_t a = m1().alloc(s ? s : 1, 8, 0);
      if (s) std::memset(m1().host(a, s), 0xee, s);
      uint16_t fl = virtio::kDescFWrite;
      if (k == kBadNoRegion || k == kBadZeroNoRegion) a = kNoRegionAddr;
      if (k == kBadNoWrite) fl = 0;
      p.addrs.push_back(a);
      d.push_back({a, s, fl});
    }
    test::ChainOpts o;
    o.indirect = k == kIndirect;
    if (k == kHeadOor) {
      p.id = static_cast<uint16_t>(kNum + 7);
      srx().publish(p.id);
    } else {
      p.id = packed_ ? prx().add_chain(d, o) : srx().add_chain(d, o);
    }
    model.pending.push_back(p);
    all_posted.push_back(p);
  }
  void send(uint32_t len, uint16_t flags = 0) {
    auto f = frame_tagged(len, tag_++);
    virtio::NetHdr h{};
    h.flags = static_cast<uint8_t>(flags);
    stx().add_tx(test::with_net_hdr(h, 12, f));
    model.frame(f, max_frame);
  }
  std::optional<Used> next_used() {
    if (packed_) {
      auto e = prx().next_used();
      if (!e) return std::nullopt;
      return Used{e->id, e->len};
    }
    auto e = srx().next_used();
    if (!e) return std::nullopt;
    return Used{static_cast<uint16_t>(e->id), e->len};
  }
  std::vector<uint8_t> bytes_at(const RxPost& p, uint32_t len) {
    std::vector<uint8_t> out;
    for (size_t i = 0; i < p.sizes.size() && out.size() < len; ++i) {
      const uint32_t k = std::min<uint32_t>(p.sizes[i], len - static_cast<uint32_t>(out.size()));
      const uint8_t* h = m1().host(p.addrs[i], k ? k : 1);
      out.insert(out.end(), h, h + k);
    }
    return out;
  }
  bool untouched_from(const RxPost& p, uint32_t from) {
    if (p.bad()) return true;
    uint32_t off = 0;
    for (size_t i = 0; i < p.sizes.size(); ++i) {
      const uint8_t* h = m1().host(p.addrs[i], p.sizes[i] ? p.sizes[i] : 1);
      for (uint32_t b = 0; b < p.sizes[i]; ++b, ++off)
        if (off >= from && h[b] != 0xee) return false;
    }
    return true;
  }
  uint64_t drops(port::Drop d) { return fw->counters(1).drops[static_cast<uint32_t>(d)].load(); }

  /// Polls port 0 until its ring is empty; checks everything against the model.
  void check(const std::string& what) {
    for (int i = 0; i < 8 && fw->poll(0, 0) > 0; ++i) {}
    fw->flush_all();
    std::vector<Used> got;
    while (auto u = next_used()) got.push_back(*u);
    std::vector<Used> want(model.used.begin() + used_checked, model.used.end());
    EXPECT_EQ(got, want) << what;
    used_checked = model.used.size();
    // Frame contents of the model's delivered frames.
    for (size_t i = deliv_checked; i < model.delivered.size(); ++i) {
      const auto& d = model.delivered[i];
      std::vector<uint8_t> all;
      for (size_t c = 0; c < d.chains.size(); ++c) {
        auto b = bytes_at(d.chains[c], d.lens[c]);
        all.insert(all.end(), b.begin(), b.end());
        if (!d.chains[c].scribbled) { EXPECT_TRUE(untouched_from(d.chains[c], d.lens[c])) << what << " frame " << i << " wrote past its used len"; }
      }
      ASSERT_GE(all.size(), 12u) << what;
      uint16_t nb;
      std::memcpy(&nb, all.data() + 10, 2);
      EXPECT_EQ(nb, d.chains.size()) << what << " frame " << i << " num_buffers";
      EXPECT_EQ(std::vector<uint8_t>(all.begin() + 12, all.end()), d.frame) << what << " frame " << i;
    }
    deliv_checked = model.delivered.size();
    for (const auto& p : model.pending)
      if (!p.scribbled) { EXPECT_TRUE(untouched_from(p, 0)) << what << " pending chain " << p.id << " written"; }
    EXPECT_EQ(fw->counters(1).tx_packets.load(), model.sent) << what;
    EXPECT_EQ(drops(port::Drop::kTooBig), model.too_big) << what;
    EXPECT_EQ(drops(port::Drop::kNoRxBuffer), model.nobuf) << what;
    EXPECT_EQ(drops(port::Drop::kShortRxBuffer), model.short_buf) << what;
    EXPECT_EQ(drops(port::Drop::kRingBroken) + drops(port::Drop::kNoDestination) +
                  fw->counters(0).drops[static_cast<uint32_t>(port::Drop::kNoDestination)].load(),
              model.ring_broken)
        << what;
    // Sender's chains all back.
    while (stx().next_used()) {}
  }

  bool packed_;
  Model model;
  uint32_t max_frame = 0;
  size_t used_checked = 0, deliv_checked = 0;
  uint32_t tag_ = 0;
  std::vector<RxPost> all_posted;
  std::unique_ptr<FakeQuiescer> q;
  std::unique_ptr<dp::Fdb> fdb;
  std::vector<std::unique_ptr<port::VhostPort>> ports;
  std::vector<std::unique_ptr<HFe>> fes;
  dp::SwitchTables tables;
  std::unique_ptr<dp::Forwarder> fw;
};

class RxBatchAttack : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(RxBatchAttack, TooSmallThenMultiThenBad) {
  auto [packed, mrg] = GetParam();
  RxBatch h(packed, mrg);
  for (int i = 0; i < 3; ++i) h.post(kOne, {2048});
  h.post(kOne, {40});
  h.post(kOne, {2048});
  h.post(kMulti, {30, 2000});
  h.post(kOne, {2048});
  h.post(kOne, {0});
  h.post(kOne, {11});
  h.post(kOne, {2048});
  h.post(kIndirect, {12, 2036});
  for (int i = 0; i < 4; ++i) h.post(kOne, {2048});
  for (int i = 0; i < 12; ++i) h.send(64 + i);
  h.check("round1");
  for (int i = 0; i < 6; ++i) h.post(kOne, {2048});
  for (int i = 0; i < 6; ++i) h.send(100);
  h.check("round2");
}

TEST_P(RxBatchAttack, BadChainMidBatchBreaksOnlyThatQueue) {
  auto [packed, mrg] = GetParam();
  for (RxKind bad : {kBadNoRegion, kBadNoWrite, kBadZeroNoRegion, kHeadOor}) {
    if (packed && bad == kHeadOor) continue;
    RxBatch h(packed, mrg);
    for (int i = 0; i < 5; ++i) h.post(kOne, {2048});
    h.post(bad, {100});
    for (int i = 0; i < 5; ++i) h.post(kOne, {2048});
    for (int i = 0; i < 10; ++i) h.send(64);
    h.check("bad " + std::to_string(bad));
    EXPECT_TRUE(h.model.broken);
  }
}

TEST_P(RxBatchAttack, AllTooSmallAndExactFit) {
  auto [packed, mrg] = GetParam();
  RxBatch h(packed, mrg);
  for (int i = 0; i < 32; ++i) h.post(kOne, {i % 2 ? 76u : 75u});  // 12+64 fits; 75 does not
  for (int i = 0; i < 32; ++i) h.send(64);
  h.check("exact");
}

TEST_P(RxBatchAttack, Random) {
  auto [packed, mrg] = GetParam();
  uint64_t tot_sent = 0, tot_nobuf = 0, tot_big = 0, tot_broken = 0, tot_posted = 0;
  struct P { uint64_t *a, *b, *c, *d, *e; ~P() { printf("stats: sent %lu nobuf %lu too_big %lu broken-runs %lu rx posted %lu\n", *a, *b, *c, *d, *e); } } pr{&tot_sent, &tot_nobuf, &tot_big, &tot_broken, &tot_posted};
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    std::mt19937 rng(seed);
    RxBatch h(packed, mrg);
    const uint32_t bursts[] = {1, 32, 64};
    for (int round = 0; round < 10 && !h.model.broken; ++round) {
      const uint32_t n = bursts[rng() % 3];
      const uint32_t nrx = rng() % (n + 8);
      const bool allow_bad = rng() % 6 == 0;
      const bool nasty = seed % 4 == 0;
      for (uint32_t i = 0; i < nrx; ++i) {
        uint32_t descs = 0;
        for (const auto& p : h.model.pending) descs += static_cast<uint32_t>(p.sizes.size());
        if (descs > 190) break;
        const uint32_t r = rng() % 100;
        if (r < 55) h.post(kOne, {2048});
        else if (r < 62) h.post(kOne, {(mrg || nasty) ? static_cast<uint32_t>(12 + rng() % 200) : 2048u});
        else if (r < 66) h.post(kOne, {nasty ? 0u : 2048u});
        else if (r < 70) h.post(kOne, {nasty ? static_cast<uint32_t>(rng() % 12) : 1500u});
        else if (r < 78) h.post(kMulti, {static_cast<uint32_t>(1 + rng() % 40), 2000});
        else if (r < 82) h.post(kMulti, {0, 2048});
        else if (r < 90) h.post(kIndirect, {static_cast<uint32_t>(rng() % 30), 1600});
        else if (r < 94) h.post(kIndirect, {2048});
        else if (allow_bad && r < 96) h.post(kBadNoRegion, {100});
        else if (allow_bad && r < 98) h.post(kBadNoWrite, {2048});
        else h.post(kOne, {(mrg || nasty) ? static_cast<uint32_t>(60 + rng() % 1500) : 1512u});
      }
      for (uint32_t i = 0; i < n; ++i) {
        const uint32_t r = rng() % 100;
        if (r < 70) h.send(60 + rng() % 100);
        else if (r < 85) h.send(60 + rng() % 1441);
        else if (r < 90) h.send(1600);
        else h.send(60 + rng() % 200, virtio::kNetHdrFDataValid);
      }
      h.check("seed " + std::to_string(seed) + " round " + std::to_string(round));
      if (::testing::Test::HasFailure()) return;
    }
    tot_sent += h.model.sent; tot_nobuf += h.model.nobuf; tot_big += h.model.too_big;
    tot_broken += h.model.broken; tot_posted += h.all_posted.size();
  }
}

INSTANTIATE_TEST_SUITE_P(All, RxBatchAttack,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& i) {
                           return std::string(std::get<0>(i.param) ? "Packed" : "Split") +
                                  (std::get<1>(i.param) ? "Mrg" : "NoMrg");
                         });

}  // namespace
}  // namespace vl

namespace vl {
namespace {

uint64_t g_now = 1000000;
uint64_t fake_now() { return g_now; }

class RxBatchAttack2 : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

// Bring the receive ring to `pos` by delivering frames one burst at a time.
void advance_to(RxBatch& h, uint32_t pos) {
  while (pos) {
    const uint32_t n = std::min<uint32_t>(pos, 64);
    for (uint32_t i = 0; i < n; ++i) h.post(kOne, {2048});
    for (uint32_t i = 0; i < n; ++i) h.send(64);
    h.check("advance");
    pos -= n;
  }
}

// Packed: un-pops (unpop_ones and restore) across the ring's end, at every offset.
TEST_P(RxBatchAttack2, UnpopAcrossTheRingEnd) {
  auto [packed, mrg] = GetParam();
  for (uint32_t start = kNum - 8; start < kNum + 2; ++start) {
    for (uint32_t small_at = 0; small_at < 12; ++small_at) {
      for (int variant = 0; variant < 3; ++variant) {
        RxBatch h(packed, mrg);
        advance_to(h, start);
        for (uint32_t i = 0; i < 14; ++i) {
          if (i == small_at) {
            if (variant == 0) h.post(kOne, {40});
            else if (variant == 1) h.post(kMulti, {40, 2000});
            else h.post(kIndirect, {2048});
          } else {
            h.post(kOne, {2048});
          }
        }
        for (uint32_t i = 0; i < 14; ++i) h.send(64 + i);
        h.check("start " + std::to_string(start) + " small_at " + std::to_string(small_at) +
                " variant " + std::to_string(variant));
        // And the ring still works after.
        for (uint32_t i = 0; i < 20; ++i) h.post(kOne, {2048});
        for (uint32_t i = 0; i < 20; ++i) h.send(100);
        h.check("after");
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// A whole ring of one-buffer chains popped in pass 1, the first too small: unpop_ones of
// (nearly) the whole ring.
TEST_P(RxBatchAttack2, UnpopTheWholeBurstAtTheRingEnd) {
  auto [packed, mrg] = GetParam();
  for (uint32_t start : {0u, 1u, kNum - 64, kNum - 63, kNum - 1, kNum - 32}) {
    RxBatch h(packed, mrg);
    advance_to(h, start);
    h.post(kOne, {20});
    for (uint32_t i = 1; i < 64; ++i) h.post(kOne, {2048});
    for (uint32_t i = 0; i < 64; ++i) h.send(64);
    h.check("start " + std::to_string(start));
    for (uint32_t i = 0; i < 64; ++i) h.post(kOne, {2048});
    for (uint32_t i = 0; i < 64; ++i) h.send(64);
    h.check("after " + std::to_string(start));
  }
}

// Frames held for a retry (tx_retry), the receive ring refilled later with mixed chains.
TEST_P(RxBatchAttack2, HeldFramesThenMixedRefill) {
  auto [packed, mrg] = GetParam();
  RxBatch h(packed, mrg, 1000, &fake_now);
  std::vector<std::vector<uint8_t>> sent;
  for (uint8_t i = 0; i < 3; ++i) h.post(kOne, {2048});
  for (uint32_t i = 0; i < 20; ++i) h.send(64 + i);
  // The model assumed drops for frames without buffers: recompute for holding.
  for (int i = 0; i < 3; ++i) h.fw->poll(0, 0);
  EXPECT_TRUE(h.fw->holding());
  g_now += 10000;
  h.post(kOne, {2048});
  h.post(kOne, {30});
  h.post(kMulti, {20, 2000});
  h.post(kOne, {2048});
  h.post(kIndirect, {12, 100});
  for (uint32_t i = 0; i < 20; ++i) h.post(kOne, {2048});
  h.fw->end_pass();
  h.fw->flush_all();
  // The whole 20 frames must have arrived, in order.
  Model m;
  m.mrg = mrg;
  for (auto& p : h.all_posted) m.pending.push_back(p);
  uint32_t tag = 0;
  for (uint32_t i = 0; i < 20; ++i) m.frame(frame_tagged(64 + i, tag++), h.max_frame);
  std::vector<Used> got;
  while (auto u = h.next_used()) got.push_back(*u);
  EXPECT_EQ(got, m.used);
  EXPECT_EQ(h.fw->counters(1).tx_packets.load(), m.sent);
  EXPECT_EQ(h.drops(port::Drop::kNoRxBuffer), m.nobuf);
  EXPECT_EQ(h.drops(port::Drop::kTooBig), m.too_big);
  EXPECT_FALSE(h.fw->holding());
}

// Split: the avail index jumps past the queue size mid-stream.
INSTANTIATE_TEST_SUITE_P(All, RxBatchAttack2,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& i) {
                           return std::string(std::get<0>(i.param) ? "Packed" : "Split") +
                                  (std::get<1>(i.param) ? "Mrg" : "NoMrg");
                         });

// The avail index is a split-ring field: this one runs on split rings only.
class RxBatchAttackSplit : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(RxBatchAttackSplit, AvailIndexJump) {
  auto [packed, mrg] = GetParam();
  RxBatch h(packed, mrg);
  for (uint32_t i = 0; i < 10; ++i) h.post(kOne, {2048});
  for (uint32_t i = 0; i < 10; ++i) h.send(64);
  h.check("before");
  h.srx().set_avail_idx(static_cast<uint16_t>(h.srx().avail_idx() + kNum + 1));
  for (uint32_t i = 0; i < 10; ++i) h.send(64);
  for (int i = 0; i < 3; ++i) h.fw->poll(0, 0);
  EXPECT_EQ(h.fw->counters(1).tx_packets.load(), 10u);
  EXPECT_EQ(h.drops(port::Drop::kRingBroken) + h.drops(port::Drop::kNoDestination) +
                h.fw->counters(0).drops[static_cast<uint32_t>(port::Drop::kNoDestination)].load(),
            10u);
  EXPECT_FALSE(h.next_used().has_value());
}

INSTANTIATE_TEST_SUITE_P(Split, RxBatchAttackSplit,
                         ::testing::Combine(::testing::Values(false), ::testing::Bool()),
                         [](const auto& i) {
                           return std::string(std::get<1>(i.param) ? "Mrg" : "NoMrg");
                         });

}  // namespace
}  // namespace vl
