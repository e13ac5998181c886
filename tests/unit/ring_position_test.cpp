// Ring positions across every path that takes a ring down and brings it back
// (hostile-inputs.md item 26): SET_VRING_ENABLE 0 -> 1, GET_VRING_BASE / SET_VRING_BASE
// round trips, a new kick fd, a new memory table, SET_VRING_ADDR again; split and packed
// rings, the transmit ring of the sender and the receive ring of the receiver, a hundred
// times each so that both rings lap (and a packed ring's wrap counters flip) several times.
#include <gtest/gtest.h>

#include <sys/eventfd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dp/fdb.h"
#include "dp/forwarder.h"
#include "fake_any_frontend.h"
#include "fake_frontend.h"
#include "port/vhost_port.h"

namespace vl {
namespace {

using test::frame_tagged;
using vhost::Req;
using vhost::VringState;

enum class Toggle { kEnable, kBaseRoundTrip, kKick, kMemTable, kAddr };

std::string toggle_name(Toggle t) {
  switch (t) {
    case Toggle::kEnable: return "enable";
    case Toggle::kBaseRoundTrip: return "base_round_trip";
    case Toggle::kKick: return "kick";
    case Toggle::kMemTable: return "mem_table";
    case Toggle::kAddr: return "addr";
  }
  return "?";
}

/// Port a sends to port b (cross-connect), both front-ends with split or packed rings.
class Rig {
 public:
  explicit Rig(bool packed) : packed_(packed) {
    quiescer_ = std::make_unique<test::FakeQuiescer>(1);
    fdb_ = std::make_unique<dp::Fdb>(1024, 64, 300);
    for (uint32_t i = 0; i < 2; ++i) {
      port::VhostPortConfig c;
      c.name = std::string(1, static_cast<char>('a' + i));
      c.path = "/nonexistent";
      c.max_queues = 1;
      c.mtu = 1500;
      ports_.push_back(std::make_unique<port::VhostPort>(i, c, quiescer_.get()));
      fes_.push_back(std::make_unique<test::AnyRingFrontend>(packed, 32u << 20));
      EXPECT_TRUE(test::connect_any(*ports_[i], *fes_[i]));
      fes_[i]->start(0);
      EXPECT_TRUE(ports_[i]->active());
      tables_.ports[i] = ports_[i].get();
    }
    tables_.nports = 2;
    tables_.mode = dp::ForwardMode::kXconnect;
    tables_.xc_peer[0] = 1;
    tables_.xc_peer[1] = 0;
    tables_.fdb = fdb_.get();
    tables_.burst = 32;
    fw_ = std::make_unique<dp::Forwarder>(&tables_, &dp::tsc_now_ns, 0);
  }

  test::AnyRingFrontend& a() { return *fes_[0]; }
  test::AnyRingFrontend& b() { return *fes_[1]; }
  /// Calls f(ring) with front-end fe's vring i as its own type.
  template <class F>
  void ring(test::AnyRingFrontend& fe, uint32_t i, F f) {
    if (packed_) {
      f(*fe.pk[i]);
    } else {
      f(*fe.split[i]);
    }
  }

  void send(uint32_t len) {
    auto f = frame_tagged(len, next_tag_++);
    ring(a(), vhost::kTxVring, [&](auto& r) { r.add_tx(test::with_net_hdr(virtio::NetHdr{}, 12, f)); });
    sent_.push_back(f);
  }
  void post_rx(uint32_t n) {
    ring(b(), vhost::kRxVring, [&](auto& r) {
      for (uint32_t k = 0; k < n; ++k) r.add_rx({2048});
    });
    posted_ += n;
  }
  /// Runs the datapath until a's transmit ring is empty (or nothing moves).
  void forward() {
    for (int k = 0; k < 16 && fw_->poll(0, 0) > 0; ++k) {}
    fw_->flush_all();
  }
  /// a's transmit chains returned so far.
  uint32_t reclaim_tx() {
    uint32_t n = 0;
    ring(a(), vhost::kTxVring, [&](auto& r) {
      while (r.next_used()) ++n;
    });
    tx_done_ += n;
    return n;
  }
  /// Takes b's used receive buffers, checks each against the next frame sent.
  void receive(const std::string& what) {
    ring(b(), vhost::kRxVring, [&](auto& r) {
      while (auto u = r.next_used()) {
        --posted_;
        ASSERT_LT(got_, sent_.size()) << what << ": more frames than were sent";
        const auto& want = sent_[got_];
        ASSERT_EQ(u->len, 12 + want.size()) << what << " frame " << got_;
        auto bytes = r.done_bytes(static_cast<uint16_t>(u->id), u->len);
        uint16_t nb;
        std::memcpy(&nb, bytes.data() + 10, 2);
        EXPECT_EQ(nb, 1) << what << " frame " << got_;
        EXPECT_EQ(std::vector<uint8_t>(bytes.begin() + 12, bytes.end()), want)
            << what << " frame " << got_ << " (sent in order, received out of order or corrupt)";
        ++got_;
      }
    });
  }

  /// Takes ring i of `fe` down and back up the way `t` says; `between` runs while it is down.
  template <class F>
  void toggle(test::AnyRingFrontend& fe, uint32_t i, Toggle t, F between) {
    switch (t) {
      case Toggle::kEnable:
        ASSERT_TRUE(fe.plain(Req::kSetVringEnable, VringState{i, 0}));
        between();
        ASSERT_TRUE(fe.plain(Req::kSetVringEnable, VringState{i, 1}));
        break;
      case Toggle::kBaseRoundTrip: {
        // vhost-user.rst GET_VRING_BASE stops the ring; the front-end gives the value back
        // with SET_VRING_BASE and restarts it with SET_VRING_KICK (QEMU vhost_virtqueue_stop
        // / start, as in a migration or a device stop and start).
        ASSERT_TRUE(fe.peer->send_struct(Req::kGetVringBase, VringState{i, 0}));
        ASSERT_TRUE(fe.pump());
        auto rep = fe.peer->recv();
        ASSERT_TRUE(rep && rep->payload.size() == sizeof(VringState));
        VringState st;
        std::memcpy(&st, rep->payload.data(), sizeof st);
        ASSERT_EQ(st.index, i);
        between();
        ASSERT_TRUE(fe.plain(Req::kSetVringBase, st));
        ASSERT_TRUE(fe.plain(Req::kSetVringKick, uint64_t{i}, {fe.kick[i].get()}));
        break;
      }
      case Toggle::kKick:
        between();
        ASSERT_TRUE(fe.plain(Req::kSetVringKick, uint64_t{i}, {fe.kick[i].get()}));
        break;
      case Toggle::kMemTable: {
        between();
        const auto mt = test::mem_table(fe.fm);
        ASSERT_TRUE(fe.peer->send(static_cast<uint32_t>(Req::kSetMemTable), vhost::kVersion,
                                  mt.data(), mt.size(), fe.fm.fds()));
        ASSERT_TRUE(fe.pump());
        break;
      }
      case Toggle::kAddr:
        between();
        ring(fe, i, [&](auto& r) {
          if constexpr (std::is_same_v<std::decay_t<decltype(r)>, test::FakePackedRing>) {
            ASSERT_TRUE(fe.plain(Req::kSetVringAddr, vhost::VringAddr{i, 0, r.ring_uva(), r.device_event_uva(),
                                                                      r.driver_event_uva(), 0}));
          } else {
            ASSERT_TRUE(fe.plain(Req::kSetVringAddr,
                                 vhost::VringAddr{i, 0, r.desc_uva(), r.used_uva(), r.avail_uva(), 0}));
          }
        });
        break;
    }
  }

  uint64_t drops(uint32_t port) {
    uint64_t n = 0;
    for (auto& d : fw_->counters(port).drops) n += d.load();
    return n;
  }
  bool ready(uint32_t port, uint32_t vring) {
    return ports_[port]->backend().vring(vring).ready;
  }

  size_t sent() const { return sent_.size(); }
  size_t got() const { return got_; }
  uint32_t tx_done() const { return tx_done_; }

 private:
  bool packed_;
  std::unique_ptr<test::FakeQuiescer> quiescer_;
  std::unique_ptr<dp::Fdb> fdb_;
  std::vector<std::unique_ptr<port::VhostPort>> ports_;
  std::vector<std::unique_ptr<test::AnyRingFrontend>> fes_;
  dp::SwitchTables tables_;
  std::unique_ptr<dp::Forwarder> fw_;
  std::vector<std::vector<uint8_t>> sent_;
  size_t got_ = 0;
  uint32_t posted_ = 0, tx_done_ = 0, next_tag_ = 0;
};

class RingPosition : public ::testing::TestWithParam<std::tuple<bool, Toggle>> {};

// Each round: 3 frames forwarded; a's transmit ring and b's receive ring taken down; 2
// frames sent and 3 receive buffers posted while they are down (nothing may be taken or
// written then); both brought back; everything forwarded. 100 rounds = 500 frames through
// rings of 256: both lap, a packed ring's wrap counters flip four times.
TEST_P(RingPosition, EveryFrameOnceAndIntactAcrossAHundredToggles) {
  const auto [packed, t] = GetParam();
  Rig h(packed);
  h.post_rx(64);
  for (int round = 0; round < 100; ++round) {
    const std::string what = toggle_name(t) + " round " + std::to_string(round);
    for (int k = 0; k < 3; ++k) h.send(60 + (round + k) % 200);
    h.forward();
    h.receive(what);
    h.reclaim_tx();
    h.post_rx(3);
    const size_t got_before = h.got();
    h.toggle(h.a(), vhost::kTxVring, t, [&] {
      for (int k = 0; k < 2; ++k) h.send(64 + k);
      if (t == Toggle::kEnable || t == Toggle::kBaseRoundTrip) {
        EXPECT_FALSE(h.ready(0, vhost::kTxVring)) << what;
        h.forward();  // a's transmit ring is down: nothing is taken
        EXPECT_EQ(h.reclaim_tx(), 0u) << what;
      }
      h.toggle(h.b(), vhost::kRxVring, t, [&] { h.post_rx(2); });
    });
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_TRUE(h.ready(0, vhost::kTxVring)) << what;
    EXPECT_TRUE(h.ready(1, vhost::kRxVring)) << what;
    if (t == Toggle::kEnable || t == Toggle::kBaseRoundTrip) {
      EXPECT_EQ(h.got(), got_before) << what;
    }
    h.forward();
    h.receive(what);
    h.reclaim_tx();
    ASSERT_EQ(h.got(), h.sent()) << what << ": frames lost across the toggle";
    ASSERT_EQ(h.tx_done(), h.sent()) << what << ": transmit chains not returned";
  }
  EXPECT_EQ(h.drops(0) + h.drops(1), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Rings, RingPosition,
    ::testing::Combine(::testing::Bool(),
                       ::testing::Values(Toggle::kEnable, Toggle::kBaseRoundTrip, Toggle::kKick,
                                         Toggle::kMemTable, Toggle::kAddr)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) ? "packed_" : "split_") +
             toggle_name(std::get<1>(info.param));
    });

}  // namespace
}  // namespace vl
