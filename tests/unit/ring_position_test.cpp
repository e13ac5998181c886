// Ring positions across every path that takes a ring down and brings it back
// (hostile-inputs.md item 19): SET_VRING_ENABLE 0 -> 1, GET_VRING_BASE / SET_VRING_BASE
// round trips, a new kick fd, a new memory table, SET_VRING_ADDR again; split and packed
// rings, the transmit ring of the sender and the receive ring of the receiver, a hundred
// times each so that both rings lap (and a packed ring's wrap counters flip) several times.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "xconnect_rig.h"

namespace vl {
namespace {

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

/// Takes ring i of `fe` down and back up the way `t` says; `between` runs while it is down.
template <class F>
void toggle(test::XconnectRig& h, uint32_t side, uint32_t i, Toggle t, F between) {
  test::AnyRingFrontend& fe = h.fe(side);
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
      h.ring(side, i, [&](auto& r) {
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

class RingPosition : public ::testing::TestWithParam<std::tuple<bool, Toggle>> {};

// Each round: 3 frames forwarded; a's transmit ring and b's receive ring taken down; 2
// frames sent and 3 receive buffers posted while they are down (nothing may be taken or
// written then); both brought back; everything forwarded. 100 rounds = 500 frames through
// rings of 256: both lap, a packed ring's wrap counters flip four times.
TEST_P(RingPosition, EveryFrameOnceAndIntactAcrossAHundredToggles) {
  const bool packed = std::get<0>(GetParam());
  const Toggle t = std::get<1>(GetParam());
  test::XconnectRig h(packed);
  const bool down = t == Toggle::kEnable || t == Toggle::kBaseRoundTrip;  // the ring stops
  h.post_rx(1, 64);
  for (int round = 0; round < 100; ++round) {
    const std::string what = toggle_name(t) + " round " + std::to_string(round);
    for (int k = 0; k < 3; ++k) h.send(0, 60 + (round + k) % 200);
    h.forward();
    h.receive(1, what);
    h.reclaim_tx(0);
    h.post_rx(1, 3);
    const uint32_t got_before = h.got(1);
    toggle(h, 0, vhost::kTxVring, t, [&] {
      for (int k = 0; k < 2; ++k) h.send(0, 64 + k);
      if (down) {
        EXPECT_FALSE(h.ready(0, vhost::kTxVring)) << what;
        h.forward();  // a's transmit ring is down: nothing is taken
        EXPECT_EQ(h.reclaim_tx(0), 0u) << what;
      }
      toggle(h, 1, vhost::kRxVring, t, [&] { h.post_rx(1, 2); });
    });
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_TRUE(h.ready(0, vhost::kTxVring)) << what;
    EXPECT_TRUE(h.ready(1, vhost::kRxVring)) << what;
    if (down) {
      EXPECT_EQ(h.got(1), got_before) << what;
    }
    h.forward();
    h.receive(1, what);
    h.reclaim_tx(0);
    ASSERT_EQ(h.got(1), h.sent(0)) << what << ": frames lost across the toggle";
    ASSERT_EQ(h.tx_done(0), h.sent(0)) << what << ": transmit chains not returned";
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
