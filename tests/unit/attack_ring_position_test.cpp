// Attack tests (branch h-attack) on ring positions across take-down paths
// (hostile-inputs.md item 19, docs/architecture.md "Ring positions"): orders of messages
// the fix's own tests do not use. Each test states what the documentation promises; a
// failing assertion is a finding.
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

/// GET_VRING_BASE on side `fe`'s vring i (stops the ring).
uint32_t get_base(test::AnyRingFrontend& fe, uint32_t i) {
  EXPECT_TRUE(fe.peer->send_struct(Req::kGetVringBase, VringState{i, 0}));
  EXPECT_TRUE(fe.pump());
  auto rep = fe.peer->recv();
  EXPECT_TRUE(rep && rep->payload.size() == sizeof(VringState));
  if (!rep || rep->payload.size() != sizeof(VringState)) return ~0u;
  VringState st;
  std::memcpy(&st, rep->payload.data(), sizeof st);
  return st.num;
}

/// Moves side 0's transmit ring (and side 1's receive ring) `n` frames on.
void traffic(test::XconnectRig& h, uint32_t n) {
  for (uint32_t k = 0; k < n; ++k) {
    h.post_rx(1, 1);
    h.send(0, 64);
    if (k % 16 == 15) {
      h.forward();
      h.receive(1, "traffic");
      h.reclaim_tx(0);
    }
  }
  h.forward();
  h.receive(1, "traffic");
  h.reclaim_tx(0);
}

// Finding 1a. An explicit SET_VRING_BASE followed by SET_VRING_NUM of another size (the
// order "base then num"): the base the front-end gave must survive; it does when the ring
// was not running, but a running ring is reset to slot 0 / wrap 1 by SET_VRING_NUM.
TEST(AttackRingPosition, PackedExplicitBaseThenNumOfAnotherSizeKeepsTheBase) {
  for (bool disable_first : {true, false}) {
    SCOPED_TRACE(disable_first ? "ring disabled first" : "ring running");
    test::XconnectRig h(true);
    traffic(h, 5);
    test::AnyRingFrontend& fe = h.fe(0);
    const uint32_t tx = vhost::kTxVring;
    if (disable_first) {
      ASSERT_TRUE(fe.plain(Req::kSetVringEnable, VringState{tx, 0}));
    }
    const uint32_t want = (1u << 15) | 5;  // slot 5, avail wrap 1
    ASSERT_TRUE(fe.plain(Req::kSetVringBase, VringState{tx, want}));
    ASSERT_TRUE(fe.plain(Req::kSetVringNum, VringState{tx, 128}));
    const uint32_t got = get_base(fe, tx);
    EXPECT_EQ(got & 0xffff, want)
        << "GET_VRING_BASE after SET_VRING_BASE " << std::hex << want
        << " then SET_VRING_NUM 128 answered " << got;
  }
}

// Finding 1b. docs/architecture.md: "a new ring size ... start[s] a ring elsewhere" (anew).
// A packed ring that is disabled (parked at slot 200) and then given another size starts
// anew only if it happened to be attached; parked, it keeps slot 200, which is outside a
// ring of 128: the ring never starts ("ring base outside the ring") though nothing the
// front-end said put it there.
TEST(AttackRingPosition, PackedParkedRingGivenAnotherSizeStartsAnew) {
  for (bool disable_first : {false, true}) {
    SCOPED_TRACE(disable_first ? "ring disabled before SET_VRING_NUM" : "ring running");
    test::XconnectRig h(true);
    traffic(h, 200);
    test::AnyRingFrontend& fe = h.fe(0);
    const uint32_t tx = vhost::kTxVring;
    if (disable_first) {
      ASSERT_TRUE(fe.plain(Req::kSetVringEnable, VringState{tx, 0}));
    }
    ASSERT_TRUE(fe.plain(Req::kSetVringNum, VringState{tx, 128}));
    if (disable_first) {
      ASSERT_TRUE(fe.plain(Req::kSetVringEnable, VringState{tx, 1}));
    }
    const auto& v = h.port(0).backend().vring(tx);
    EXPECT_TRUE(v.ready) << "why not: " << v.why_not;
    EXPECT_EQ(v.pq.last_avail(), 0u);
    EXPECT_TRUE(v.pq.avail_wrap());
  }
}

// Finding 1c. The same for a new layout (SET_FEATURES switching split -> packed): started
// anew if attached, but a parked split ring's next avail index (100) becomes a packed
// base: slot 100 with avail wrap counter 0. The ring says ready and waits at a stale
// position with the wrong wrap counter.
TEST(AttackRingPosition, SplitToPackedSwitchWhileParkedStartsAnew) {
  for (bool disable_first : {false, true}) {
    SCOPED_TRACE(disable_first ? "ring disabled before SET_FEATURES" : "ring running");
    test::XconnectRig h(false);
    traffic(h, 100);
    test::AnyRingFrontend& fe = h.fe(0);
    const uint32_t tx = vhost::kTxVring;
    if (disable_first) {
      ASSERT_TRUE(fe.plain(Req::kSetVringEnable, VringState{tx, 0}));
    }
    const uint64_t f = h.port(0).backend().features() | virtio::bit(virtio::kFRingPacked);
    ASSERT_TRUE(fe.plain(Req::kSetFeatures, f));
    if (disable_first) {
      ASSERT_TRUE(fe.plain(Req::kSetVringEnable, VringState{tx, 1}));
    }
    const auto& v = h.port(0).backend().vring(tx);
    ASSERT_TRUE(v.packed);
    EXPECT_TRUE(v.ready) << v.why_not;
    EXPECT_EQ(v.pq.last_avail(), 0u);
    EXPECT_TRUE(v.pq.avail_wrap());
  }
}

// Observation 1d, now documented (architecture.md "Ring positions"): a split ring resumes
// at the used index in guest memory when an explicit SET_VRING_BASE differs from it
// (nothing is in flight when a ring starts; DPDK's vhost library recovers the same way
// after a reconnect). The front-end says "resume at 4"; the ring resumes at 10. A driver
// that rewrites its own used index moves only its own ring.
TEST(AttackRingPosition, SplitExplicitBaseGivesWayToTheUsedIndex) {
  test::XconnectRig h(false);
  traffic(h, 10);
  test::AnyRingFrontend& fe = h.fe(0);
  const uint32_t tx = vhost::kTxVring;
  EXPECT_EQ(get_base(fe, tx), 10u);
  ASSERT_TRUE(fe.plain(Req::kSetVringBase, VringState{tx, 4}));
  EXPECT_EQ(get_base(fe, tx), 4u);
  ASSERT_TRUE(fe.plain(Req::kSetVringBase, VringState{tx, 4}));
  ASSERT_TRUE(fe.plain(Req::kSetVringKick, uint64_t{tx}, {fe.kick[tx].get()}));
  EXPECT_EQ(h.port(0).backend().vring(tx).q.last_avail(), 10u)
      << "the ring resumed at the base the front-end gave, not at the used index";
}

// Control (expected to pass): GET_VRING_BASE on a disabled packed ring, then the odd
// order base, enable, kick: every frame once, in order, across many rounds.
TEST(AttackRingPosition, PackedGetBaseOnDisabledRingThenBaseEnableKick) {
  test::XconnectRig h(true);
  h.post_rx(1, 64);
  test::AnyRingFrontend& fe = h.fe(0);
  const uint32_t tx = vhost::kTxVring;
  for (int round = 0; round < 120; ++round) {
    for (int k = 0; k < 3; ++k) h.send(0, 60 + k);
    h.forward();
    h.receive(1, "round");
    h.reclaim_tx(0);
    h.post_rx(1, 4);  // 4 frames a round
    ASSERT_TRUE(fe.plain(Req::kSetVringEnable, VringState{tx, 0}));
    const uint32_t b = get_base(fe, tx);
    h.send(0, 70);
    ASSERT_TRUE(fe.plain(Req::kSetVringBase, VringState{tx, b}));
    ASSERT_TRUE(fe.plain(Req::kSetVringEnable, VringState{tx, 1}));
    EXPECT_FALSE(h.ready(0, tx));  // not started until the kick
    ASSERT_TRUE(fe.plain(Req::kSetVringNum, VringState{tx, test::kNum}));  // same size
    ASSERT_TRUE(fe.plain(Req::kSetVringKick, uint64_t{tx}, {fe.kick[tx].get()}));
    ASSERT_TRUE(h.ready(0, tx));
    h.forward();
    h.receive(1, "round");
    h.reclaim_tx(0);
    ASSERT_EQ(h.got(1), h.sent(0)) << "round " << round;
  }
  EXPECT_EQ(h.drops(0) + h.drops(1), 0u);
}

}  // namespace
}  // namespace vl
