// vhost::Backend: a vhost-user back-end driven over a socketpair by raw messages, as QEMU
// would send them and as a hostile front-end might (hostile-inputs.md items 1-6, 9).
#include "vhost/backend.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "fake_driver.h"
#include "fake_packed_driver.h"
#include "vhost_peer.h"

namespace vl::vhost {
namespace {

using test::count_open_fds;
using test::FakeMemory;
using test::FakeVring;
using test::RawPeer;
using virtio::bit;

/// Counts datapath pauses; checks they nest properly.
class CountingHost : public DeviceHost {
 public:
  void pause_datapath() override {
    ++pauses;
    if (++depth != 1) nested = true;
  }
  void resume_datapath() override {
    ++resumes;
    if (--depth != 0) nested = true;
  }
  int pauses = 0, resumes = 0, depth = 0;
  bool nested = false;
};

constexpr uint32_t kNum = 256;
constexpr uint32_t kAck = kVersion | kFlagNeedReply;
const uint64_t kOffered = BackendOptions::defaults().features;
const uint64_t kOfferedProto = BackendOptions::defaults().protocol_features;
/// What a split-ring driver (QEMU's default) acks: everything but RING_PACKED.
const uint64_t kAcked = kOffered & ~bit(virtio::kFRingPacked);

/// A SET_MEM_TABLE payload.
std::vector<uint8_t> mem_table(const std::vector<MemRegion>& regions, std::optional<uint32_t> n = {}) {
  std::vector<uint8_t> p(sizeof(MemTableHeader) + regions.size() * sizeof(MemRegion));
  const MemTableHeader h{n.value_or(static_cast<uint32_t>(regions.size())), 0};
  std::memcpy(p.data(), &h, sizeof h);
  if (!regions.empty()) std::memcpy(p.data() + sizeof h, regions.data(), regions.size() * sizeof(MemRegion));
  return p;
}

class BackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fm.add_memfd_region(0x0, 1 << 20);
    fm.add_memfd_region(0x100000, 1 << 20, {}, 0x3000);
    rings[0] = std::make_unique<FakeVring>(fm, kNum, 0);
    rings[1] = std::make_unique<FakeVring>(fm, kNum, 0);
    for (auto& e : kick) e.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    for (auto& e : call) e.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    reconnect();
  }
  /// A new back-end on a new socketpair (the memory and rings stay).
  void reconnect() {
    peer.reset();
    be.reset();
    UniqueFd a, b;
    ASSERT_TRUE(test::make_socketpair(&a, &b));
    be = std::make_unique<Backend>(&host, BackendOptions::defaults());
    be->attach(std::move(a));
    peer = std::make_unique<RawPeer>(std::move(b));
  }
  void TearDown() override {
    EXPECT_FALSE(host.nested);
    EXPECT_EQ(host.pauses, host.resumes);
  }

  /// Lets the back-end handle what was sent. False when it dropped the connection.
  bool pump() {
    why.clear();
    return be->on_readable(&why);
  }
  /// Sends a message with NEED_REPLY and returns the REPLY_ACK value (nullopt: no reply or
  /// the connection failed).
  std::optional<uint64_t> acked(Req r, const void* p, size_t len, std::vector<int> fds = {},
                                std::optional<uint32_t> size = {}) {
    EXPECT_TRUE(peer->send(static_cast<uint32_t>(r), kAck, p, len, std::move(fds), size));
    if (!pump()) return std::nullopt;
    auto rep = peer->recv();
    if (!rep) return std::nullopt;
    EXPECT_EQ(rep->hdr.request, static_cast<uint32_t>(r));
    EXPECT_EQ(rep->hdr.flags, kVersion | kFlagReply);
    EXPECT_EQ(rep->hdr.size, 8u);
    return rep->u64();
  }
  template <typename T>
  std::optional<uint64_t> acked(Req r, const T& v, std::vector<int> fds = {}) {
    return acked(r, &v, sizeof v, std::move(fds));
  }
  /// Sends a message without NEED_REPLY; true if the connection survived it.
  template <typename T>
  bool plain(Req r, const T& v, std::vector<int> fds = {}) {
    EXPECT_TRUE(peer->send(static_cast<uint32_t>(r), kVersion, &v, sizeof v, std::move(fds)));
    return pump();
  }
  uint64_t get_u64(Req r) {
    EXPECT_TRUE(peer->send_empty(r));
    EXPECT_TRUE(pump()) << why;
    auto rep = peer->recv();
    EXPECT_TRUE(rep.has_value());
    if (!rep) return ~0ull;
    EXPECT_EQ(rep->hdr.request, static_cast<uint32_t>(r));
    EXPECT_EQ(rep->hdr.flags, kVersion | kFlagReply);
    return rep->u64();
  }
  std::vector<MemRegion> regions() const {
    std::vector<MemRegion> r;
    for (const auto& d : fm.descs()) r.push_back({d.guest_phys_addr, d.memory_size, d.userspace_addr, d.mmap_offset});
    return r;
  }
  VringAddr addr_of(uint32_t i) const {
    return VringAddr{i, 0, rings[i]->desc_uva(), rings[i]->used_uva(), rings[i]->avail_uva(), 0};
  }

  /// QEMU's order: features, protocol features, owner, memory table, then each vring.
  void negotiate(bool proto = true, bool enable = true, bool kick_nofd = false) {
    ASSERT_EQ(get_u64(Req::kGetFeatures), kOffered);
    if (proto) {
      ASSERT_EQ(get_u64(Req::kGetProtocolFeatures), kOfferedProto);
      ASSERT_TRUE(plain(Req::kSetProtocolFeatures, kOfferedProto)) << why;
      ASSERT_EQ(get_u64(Req::kGetQueueNum), kMaxQueuePairs);
    }
    ASSERT_TRUE(peer->send_empty(Req::kSetOwner));
    ASSERT_TRUE(pump()) << why;
    const uint64_t f = proto ? kAcked : (kAcked & ~bit(virtio::kFProtocolFeatures));
    if (proto) {
      ASSERT_EQ(acked(Req::kSetFeatures, f), 0u) << why;
      const auto mt = mem_table(regions());
      ASSERT_EQ(acked(Req::kSetMemTable, mt.data(), mt.size(), fm.fds()), 0u) << why;
    } else {
      ASSERT_TRUE(plain(Req::kSetFeatures, f)) << why;
      const auto mt = mem_table(regions());
      ASSERT_TRUE(peer->send(static_cast<uint32_t>(Req::kSetMemTable), kVersion, mt.data(), mt.size(), fm.fds()));
      ASSERT_TRUE(pump()) << why;
    }
    for (uint32_t i = 0; i < kNumVrings; ++i) {
      ASSERT_TRUE(plain(Req::kSetVringNum, VringState{i, kNum})) << why;
      ASSERT_TRUE(plain(Req::kSetVringBase, VringState{i, 0})) << why;
      ASSERT_TRUE(plain(Req::kSetVringAddr, addr_of(i))) << why;
      if (kick_nofd) {
        ASSERT_TRUE(plain(Req::kSetVringKick, uint64_t{i} | kVringNoFd)) << why;
      } else {
        ASSERT_TRUE(plain(Req::kSetVringKick, uint64_t{i}, {kick[i].get()})) << why;
      }
      ASSERT_TRUE(plain(Req::kSetVringCall, uint64_t{i}, {call[i].get()})) << why;
    }
    if (proto && enable) {
      for (uint32_t i = 0; i < kNumVrings; ++i)
        ASSERT_TRUE(plain(Req::kSetVringEnable, VringState{i, 1})) << why;
    }
  }

  CountingHost host;
  FakeMemory fm;
  std::unique_ptr<FakeVring> rings[kNumVrings];
  UniqueFd kick[kNumVrings], call[kNumVrings];
  std::unique_ptr<Backend> be;
  std::unique_ptr<RawPeer> peer;
  std::string why;
};

// ---------------------------------------------------------------- normal operation

TEST_F(BackendTest, GetFeaturesReplies) {
  ASSERT_TRUE(peer->send_empty(Req::kGetFeatures));
  ASSERT_TRUE(pump()) << why;
  auto rep = peer->recv();
  ASSERT_TRUE(rep.has_value());
  EXPECT_EQ(rep->hdr.request, static_cast<uint32_t>(Req::kGetFeatures));
  EXPECT_EQ(rep->hdr.flags, kVersion | kFlagReply);
  ASSERT_EQ(rep->hdr.size, 8u);
  EXPECT_EQ(rep->u64(), kOffered);
  EXPECT_TRUE(virtio::has(rep->u64(), virtio::kFVersion1));
  EXPECT_TRUE(virtio::has(rep->u64(), virtio::kFProtocolFeatures));
  EXPECT_TRUE(peer->nothing_to_read());
  EXPECT_EQ(be->messages(), 1u);
}

TEST_F(BackendTest, QemuLikeNegotiationMakesBothVringsReady) {
  negotiate();
  EXPECT_EQ(be->features(), kAcked);
  EXPECT_EQ(be->protocol_features(), kOfferedProto);
  ASSERT_NE(be->memory(), nullptr);
  EXPECT_EQ(be->memory()->region_count(), 2u);
  for (uint32_t i = 0; i < kNumVrings; ++i) {
    const Vring& v = be->vring(i);
    EXPECT_TRUE(v.ready) << i << ": " << v.why_not;
    EXPECT_TRUE(v.why_not.empty());
    EXPECT_TRUE(v.q.attached());
    EXPECT_EQ(v.q.size(), kNum);
    EXPECT_TRUE(v.kick.valid());
    EXPECT_TRUE(v.call.valid());
  }
  EXPECT_GT(host.pauses, 0);
  EXPECT_TRUE(peer->nothing_to_read());  // no stray replies

  // The back-end's mapping of the ring is the driver's: a transmitted chain shows up.
  const auto frame = test::make_frame(200);
  rings[kTxVring]->add_tx(frame, {20, 180});
  auto& txq = be->vring(kTxVring).q;
  ASSERT_EQ(txq.pending(), 1);
  auto arena = std::make_unique<virtio::SegmentArena>();
  virtio::Chain c{};
  ASSERT_EQ(txq.pop<false>(*arena, &c), virtio::PopStatus::kOk);
  EXPECT_EQ(test::gather(*arena, c.seg_begin, c.nsegs), frame);
  // ...and a used entry reaches the driver, with a signal on the call eventfd.
  txq.push_used(c.head, 0);
  EXPECT_TRUE(txq.publish_used());
  EXPECT_EQ(rings[kTxVring]->used_idx(), 1);
  eventfd_t n = 0;
  EXPECT_EQ(eventfd_read(call[kTxVring].get(), &n), 0);
  EXPECT_EQ(n, 1u);
}

TEST_F(BackendTest, GetVringBaseReturnsLastAvailIndexAndStopsTheRing) {
  negotiate();
  for (int i = 0; i < 3; ++i) rings[kTxVring]->add_tx(test::make_frame(60));
  auto& txq = be->vring(kTxVring).q;
  auto arena = std::make_unique<virtio::SegmentArena>();
  for (int i = 0; i < 3; ++i) {
    virtio::Chain c{};
    ASSERT_EQ(txq.pop<false>(*arena, &c), virtio::PopStatus::kOk);
    txq.push_used(c.head, 0);
  }
  txq.publish_used();
  ASSERT_TRUE(peer->send_struct(Req::kGetVringBase, VringState{kTxVring, 0}));
  ASSERT_TRUE(pump()) << why;
  auto rep = peer->recv();
  ASSERT_TRUE(rep.has_value());
  EXPECT_EQ(rep->hdr.request, static_cast<uint32_t>(Req::kGetVringBase));
  EXPECT_EQ(rep->hdr.flags, kVersion | kFlagReply);
  ASSERT_EQ(rep->hdr.size, sizeof(VringState));
  VringState s;
  std::memcpy(&s, rep->payload.data(), sizeof s);
  EXPECT_EQ(s.index, kTxVring);
  EXPECT_EQ(s.num, 3u);
  const Vring& v = be->vring(kTxVring);
  EXPECT_FALSE(v.ready);
  EXPECT_FALSE(v.started);
  EXPECT_FALSE(v.kick.valid());
  EXPECT_FALSE(v.q.attached());
  EXPECT_EQ(v.why_not, "not started");
  EXPECT_TRUE(be->vring(kRxVring).ready);  // the other ring runs on

  // Restarting at that base resumes where it stopped.
  ASSERT_TRUE(plain(Req::kSetVringBase, VringState{kTxVring, 3})) << why;
  ASSERT_TRUE(plain(Req::kSetVringKick, uint64_t{kTxVring}, {kick[kTxVring].get()})) << why;
  EXPECT_TRUE(be->vring(kTxVring).ready) << be->vring(kTxVring).why_not;
  EXPECT_EQ(be->vring(kTxVring).q.last_avail(), 3);
  EXPECT_EQ(be->vring(kTxVring).q.pending(), 0);
}

TEST_F(BackendTest, GetVringBaseOfAnUnstartedRingReturnsItsBase) {
  ASSERT_TRUE(plain(Req::kSetVringBase, VringState{0, 77})) << why;
  ASSERT_TRUE(peer->send_struct(Req::kGetVringBase, VringState{0, 0}));
  ASSERT_TRUE(pump()) << why;
  auto rep = peer->recv();
  ASSERT_TRUE(rep.has_value());
  VringState s{};
  ASSERT_EQ(rep->payload.size(), sizeof s);
  std::memcpy(&s, rep->payload.data(), sizeof s);
  EXPECT_EQ(s.num, 77u);
}

TEST_F(BackendTest, ReplyAckOnlyWhenNegotiatedAndAsked) {
  ASSERT_TRUE(plain(Req::kSetProtocolFeatures, bit(kProtoMq)));
  // REPLY_ACK not negotiated: NEED_REPLY gets no reply.
  ASSERT_TRUE(peer->send_u64(Req::kSetFeatures, kOffered, kAck));
  ASSERT_TRUE(pump()) << why;
  EXPECT_TRUE(peer->nothing_to_read());
  ASSERT_TRUE(plain(Req::kSetProtocolFeatures, bit(kProtoMq) | bit(kProtoReplyAck)));
  EXPECT_TRUE(peer->nothing_to_read());
  EXPECT_EQ(acked(Req::kSetFeatures, kOffered), 0u);
  ASSERT_TRUE(plain(Req::kSetFeatures, kOffered));  // no NEED_REPLY: no reply
  EXPECT_TRUE(peer->nothing_to_read());
}

TEST_F(BackendTest, MtuAndRarp) {
  ASSERT_TRUE(plain(Req::kSetProtocolFeatures, kOfferedProto));
  EXPECT_EQ(acked(Req::kNetSetMtu, uint64_t{9000}), 0u);
  EXPECT_EQ(be->mtu(), 9000u);
  EXPECT_NE(acked(Req::kNetSetMtu, uint64_t{67}), 0u);
  EXPECT_NE(acked(Req::kNetSetMtu, uint64_t{65536}), 0u);
  EXPECT_NE(acked(Req::kNetSetMtu, ~0ull), 0u);
  EXPECT_EQ(be->mtu(), 9000u);
  const uint8_t mac[8] = {0x02, 1, 2, 3, 4, 5, 0xff, 0xff};
  EXPECT_EQ(acked(Req::kSendRarp, mac, 8), 0u);
  ASSERT_TRUE(be->has_rarp_mac());
  EXPECT_EQ(std::memcmp(be->rarp_mac(), mac, 6), 0);
}

// Item 6: the initial ring state follows VHOST_USER_F_PROTOCOL_FEATURES.
TEST_F(BackendTest, WithProtocolFeaturesRingsStartDisabled) {
  negotiate(/*proto=*/true, /*enable=*/false);
  for (uint32_t i = 0; i < kNumVrings; ++i) {
    EXPECT_FALSE(be->vring(i).ready);
    EXPECT_EQ(be->vring(i).why_not, "disabled");
    EXPECT_FALSE(be->vring(i).q.attached());
  }
  // Only queue 0 enabled: only queue 0 runs.
  EXPECT_EQ(acked(Req::kSetVringEnable, VringState{0, 1}), 0u);
  EXPECT_TRUE(be->vring(0).ready) << be->vring(0).why_not;
  EXPECT_FALSE(be->vring(1).ready);
  EXPECT_EQ(acked(Req::kSetVringEnable, VringState{1, 1}), 0u);
  EXPECT_TRUE(be->vring(1).ready);
  EXPECT_EQ(acked(Req::kSetVringEnable, VringState{0, 0}), 0u);
  EXPECT_FALSE(be->vring(0).ready);
  EXPECT_EQ(be->vring(0).why_not, "disabled");
  EXPECT_NE(acked(Req::kSetVringEnable, VringState{1, 2}), 0u);
  EXPECT_TRUE(be->vring(1).ready);
}

TEST_F(BackendTest, WithoutProtocolFeaturesRingsStartEnabled) {
  negotiate(/*proto=*/false);
  for (uint32_t i = 0; i < kNumVrings; ++i) {
    EXPECT_TRUE(be->vring(i).ready) << be->vring(i).why_not;
    EXPECT_FALSE(be->vring(i).enabled);
  }
}

TEST_F(BackendTest, DisconnectReleasesEverything) {
  const int base = count_open_fds();
  negotiate();
  // The back-end holds 2 kick + 2 call fds and the 2 memory regions' fds (kept so that a
  // direct link can hand them on, docs/direct-link.md).
  EXPECT_EQ(count_open_fds(), base + 4 + 2);
  be->disconnect();
  EXPECT_FALSE(be->connected());
  EXPECT_EQ(be->memory(), nullptr);
  EXPECT_FALSE(be->vring(0).ready);
  EXPECT_EQ(be->features(), 0u);
  EXPECT_EQ(count_open_fds(), base - 1);  // and its end of the socket
  EXPECT_TRUE(peer->peer_closed());
}

// ---------------------------------------------------------------- hostile messages

// Item 1: vring indices are checked on all their bits.
TEST_F(BackendTest, VringIndexOutOfRangeIsRefused) {
  negotiate();
  const VringAddr good_addr = addr_of(1);
  // kMaxVrings: the first index past the last queue pair offered.
  for (uint32_t idx : {kMaxVrings, kMaxVrings + 1, 0x10001u, 0x10000u, 0x80000000u, 0xffffffffu}) {
    EXPECT_NE(acked(Req::kSetVringNum, VringState{idx, 64}), 0u) << idx;
    EXPECT_NE(acked(Req::kSetVringBase, VringState{idx, 0}), 0u) << idx;
    EXPECT_NE(acked(Req::kSetVringEnable, VringState{idx, 0}), 0u) << idx;
    EXPECT_NE(acked(Req::kGetVringBase, VringState{idx, 0}), 0u) << idx;
    VringAddr a = good_addr;
    a.index = idx;
    EXPECT_NE(acked(Req::kSetVringAddr, a), 0u) << idx;
  }
  for (uint64_t v : std::initializer_list<uint64_t>{uint64_t{kMaxVrings}, 0xffull, 0x10001ull, 0x100000000ull, 0x1ull << 63}) {
    EXPECT_NE(acked(Req::kSetVringKick, v | kVringNoFd), 0u) << v;
    EXPECT_NE(acked(Req::kSetVringCall, v | kVringNoFd), 0u) << v;
    EXPECT_NE(acked(Req::kSetVringErr, v | kVringNoFd), 0u) << v;
  }
  for (uint32_t i = 0; i < kNumVrings; ++i) {
    EXPECT_TRUE(be->vring(i).ready) << be->vring(i).why_not;
    EXPECT_EQ(be->vring(i).num, kNum);
    EXPECT_TRUE(be->vring(i).kick.valid());
    EXPECT_TRUE(be->vring(i).call.valid());
  }
}

TEST_F(BackendTest, VringIndexOutOfRangeWithoutReplyAckClosesTheConnection) {
  for (uint32_t idx : {kMaxVrings, 0x10001u}) {
    reconnect();
    EXPECT_FALSE(plain(Req::kSetVringNum, VringState{idx, 64})) << idx;
    EXPECT_FALSE(why.empty());
  }
}

// A packed ring's size (any) kept when SET_FEATURES drops RING_PACKED: the split ring of
// that size would break the power-of-two contract (virtio 1.2 §2.7), so it does not start.
TEST_F(BackendTest, SplitRingWithAPackedSizeDoesNotStart) {
  ASSERT_TRUE(plain(Req::kSetProtocolFeatures, kOfferedProto));
  ASSERT_EQ(acked(Req::kSetFeatures, kAcked | bit(virtio::kFRingPacked)), 0u) << why;
  ASSERT_EQ(acked(Req::kSetVringNum, VringState{0, 3}), 0u) << why;
  ASSERT_EQ(acked(Req::kSetFeatures, kAcked), 0u) << why;
  const auto mt = mem_table(regions());
  ASSERT_EQ(acked(Req::kSetMemTable, mt.data(), mt.size(), fm.fds()), 0u) << why;
  ASSERT_TRUE(plain(Req::kSetVringBase, VringState{0, 0})) << why;
  ASSERT_TRUE(plain(Req::kSetVringAddr, addr_of(0))) << why;
  ASSERT_TRUE(plain(Req::kSetVringKick, uint64_t{0}, {kick[0].get()})) << why;
  ASSERT_TRUE(plain(Req::kSetVringCall, uint64_t{0}, {call[0].get()})) << why;
  ASSERT_TRUE(plain(Req::kSetVringEnable, VringState{0, 1})) << why;
  EXPECT_EQ(be->vring(0).num, 3u);
  EXPECT_FALSE(be->vring(0).ready);
  EXPECT_EQ(be->vring(0).why_not, "split ring size not a power of two");
}

// Item 2.
TEST_F(BackendTest, SetVringNumChecksTheQueueSize) {
  ASSERT_TRUE(plain(Req::kSetProtocolFeatures, kOfferedProto));
  for (uint32_t n : {0u, 3u, 6u, 255u, 32769u, 49152u, 65536u, 0x80000000u, 0xffffffffu})
    EXPECT_NE(acked(Req::kSetVringNum, VringState{0, n}), 0u) << n;
  EXPECT_EQ(be->vring(0).num, 0u);
  for (uint32_t n : {1u, 2u, 256u, 32768u}) {
    EXPECT_EQ(acked(Req::kSetVringNum, VringState{0, n}), 0u) << n;
    EXPECT_EQ(be->vring(0).num, n);
  }
  EXPECT_NE(acked(Req::kSetVringBase, VringState{0, 0x10000}), 0u);
}

// Item 3: a bad memory table is refused as a whole: old table kept, every fd closed.
TEST_F(BackendTest, BadMemoryTablesAreRefusedKeepingTheOldOne) {
  negotiate();
  const virtio::GuestMemory* old = be->memory();
  ASSERT_NE(old, nullptr);
  const auto good = regions();

  struct Case {
    const char* name;
    std::vector<MemRegion> regions;
    std::optional<uint32_t> n;  // nregions field when it lies
    int nfds;
  };
  std::vector<MemRegion> nine;
  for (uint64_t i = 0; i < 9; ++i) nine.push_back({i << 20, 4096, 0x500000000ull + (i << 20), 0});
  std::vector<MemRegion> eight(nine.begin(), nine.begin() + 8);
  const std::vector<Case> cases = {
      {"9 regions", nine, {}, 8},
      {"0 regions", {}, {}, 0},
      {"size overflows gpa", {{0x1000, ~0ull - 0x800, 0x10000, 0}}, {}, 1},
      {"size overflows when page-rounded", {{0x0, ~0ull - 0x800, 0x0, 0}}, {}, 1},
      {"offset overflows", {{0x0, 0x1000, 0x10000, ~0ull - 0x100}}, {}, 1},
      {"huge size (past the fd)", {{0x0, 1ull << 40, 0x10000, 0}}, {}, 1},
      {"gpa overlap", {good[0], {0x80000, 0x1000, 0x900000000ull, 0}}, {}, 2},
      {"uva overlap", {good[0], {0x10000000, 0x1000, good[0].userspace_addr + 0x1000, 0}}, {}, 2},
      {"fewer fds than regions", good, {}, 1},
      {"more fds than regions", {good[0]}, {}, 2},
      {"nregions 2 with one region's payload", {good[0]}, 2u, 2},
      {"nregions 1 with two regions' payload", good, 1u, 1},
      {"8 regions, 7 fds", eight, {}, 7},
  };
  for (const Case& k : cases) {
    const int base = count_open_fds();
    {
      std::vector<UniqueFd> owned;
      std::vector<int> fds;
      for (int i = 0; i < k.nfds; ++i) {
        owned.emplace_back(dup(fm.fds()[i % 2]));
        fds.push_back(owned.back().get());
      }
      const auto p = mem_table(k.regions, k.n);
      const auto r = acked(Req::kSetMemTable, p.data(), p.size(), fds);
      ASSERT_TRUE(r.has_value()) << k.name << ": " << why;
      EXPECT_NE(*r, 0u) << k.name;
    }
    EXPECT_EQ(count_open_fds(), base) << k.name << ": received fds must be closed";
    EXPECT_EQ(be->memory(), old) << k.name;
    EXPECT_EQ(be->memory()->region_count(), 2u) << k.name;
    EXPECT_TRUE(be->vring(0).ready) << k.name;
    EXPECT_TRUE(be->vring(1).ready) << k.name;
  }
  // The rings still work on the old table.
  rings[kTxVring]->add_tx(test::make_frame(60));
  EXPECT_EQ(be->vring(kTxVring).q.pending(), 1);
}

TEST_F(BackendTest, ShortMemoryTablePayloads) {
  ASSERT_TRUE(plain(Req::kSetProtocolFeatures, kOfferedProto));
  const int base = count_open_fds();
  const auto good = mem_table(regions());
  for (size_t len : {size_t{0}, size_t{4}, size_t{8}, size_t{39}, good.size() - 1, good.size() + 1}) {
    {
      UniqueFd a(dup(fm.fds()[0])), b(dup(fm.fds()[1]));
      std::vector<uint8_t> p = good;
      p.resize(len);
      const auto r = acked(Req::kSetMemTable, p.data(), p.size(), {a.get(), b.get()});
      ASSERT_TRUE(r.has_value()) << len << ": " << why;
      EXPECT_NE(*r, 0u) << len;
    }
    EXPECT_EQ(be->memory(), nullptr) << len;
    EXPECT_EQ(count_open_fds(), base) << len;
  }
  // A full 8-slot payload with 2 regions is accepted (QEMU sends the whole array).
  std::vector<uint8_t> full = good;
  full.resize(sizeof(MemTableHeader) + 8 * sizeof(MemRegion));
  EXPECT_EQ(acked(Req::kSetMemTable, full.data(), full.size(), fm.fds()), 0u) << why;
  ASSERT_NE(be->memory(), nullptr);
  EXPECT_EQ(be->memory()->region_count(), 2u);
}

TEST_F(BackendTest, NewMemoryTableRebindsReadyRings) {
  negotiate();
  const virtio::GuestMemory* old = be->memory();
  const auto mt = mem_table(regions());
  EXPECT_EQ(acked(Req::kSetMemTable, mt.data(), mt.size(), fm.fds()), 0u);
  EXPECT_NE(be->memory(), old);
  for (uint32_t i = 0; i < kNumVrings; ++i) EXPECT_TRUE(be->vring(i).ready) << be->vring(i).why_not;
  rings[kTxVring]->add_tx(test::make_frame(60));
  EXPECT_EQ(be->vring(kTxVring).q.pending(), 1);
}

// Item 4: framing.
TEST_F(BackendTest, HeaderShorterThan12BytesThenClose) {
  const MsgHeader h{1, kVersion, 0};
  ASSERT_TRUE(peer->send_bytes(&h, 7));
  EXPECT_TRUE(pump());  // waiting for the rest
  peer->close();
  EXPECT_FALSE(pump());
  EXPECT_NE(why.find("middle"), std::string::npos) << why;
  EXPECT_EQ(be->messages(), 0u);
}

TEST_F(BackendTest, PayloadSizeOverTheLimitIsAConnectionError) {
  ASSERT_TRUE(plain(Req::kSetProtocolFeatures, kOfferedProto));
  for (uint32_t size : {kMaxPayload + 1, 0x10000u, 0xffffffffu}) {
    reconnect();
    ASSERT_TRUE(plain(Req::kSetProtocolFeatures, kOfferedProto));
    const MsgHeader h{static_cast<uint32_t>(Req::kSetFeatures), kAck, size};
    ASSERT_TRUE(peer->send_bytes(&h, sizeof h));
    EXPECT_FALSE(pump()) << size;
    EXPECT_TRUE(peer->nothing_to_read());
  }
}

TEST_F(BackendTest, WrongPayloadSizeGetsAnErrorReplyWithReplyAck) {
  ASSERT_TRUE(plain(Req::kSetProtocolFeatures, kOfferedProto));
  const uint8_t junk[64] = {};
  struct Case {
    Req r;
    size_t len;
  };
  const Case cases[] = {{Req::kSetFeatures, 4},   {Req::kSetFeatures, 16},     {Req::kSetVringNum, 4},
                        {Req::kSetVringNum, 12},  {Req::kSetVringAddr, 8},     {Req::kSetVringAddr, 48},
                        {Req::kSetVringKick, 0},  {Req::kSetVringCall, 4},     {Req::kGetVringBase, 0},
                        {Req::kSetOwner, 8},      {Req::kGetFeatures, 8},      {Req::kSendRarp, 6},
                        {Req::kNetSetMtu, 2},     {Req::kSetVringEnable, 16},  {Req::kSetProtocolFeatures, 0}};
  for (const Case& k : cases) {
    const auto r = acked(k.r, junk, k.len);
    ASSERT_TRUE(r.has_value()) << req_name(static_cast<uint32_t>(k.r)) << " " << k.len << ": " << why;
    EXPECT_NE(*r, 0u) << req_name(static_cast<uint32_t>(k.r)) << " " << k.len;
    // The stream is still in step: the next request is answered correctly.
    EXPECT_EQ(get_u64(Req::kGetFeatures), kOffered);
  }
  EXPECT_EQ(be->features(), 0u);
  EXPECT_EQ(be->vring(0).num, 0u);
}

TEST_F(BackendTest, WrongPayloadSizeWithoutReplyAckClosesTheConnection) {
  const uint8_t junk[16] = {};
  EXPECT_TRUE(peer->send(static_cast<uint32_t>(Req::kSetFeatures), kVersion, junk, 4));
  EXPECT_FALSE(pump());
  reconnect();
  EXPECT_TRUE(peer->send(static_cast<uint32_t>(Req::kSetFeatures), kVersion, junk, 16));
  EXPECT_FALSE(pump());
  // REPLY_ACK negotiated but not asked for: closed too.
  reconnect();
  ASSERT_TRUE(plain(Req::kSetProtocolFeatures, kOfferedProto));
  EXPECT_TRUE(peer->send(static_cast<uint32_t>(Req::kSetVringNum), kVersion, junk, 12));
  EXPECT_FALSE(pump());
}

TEST_F(BackendTest, UnknownRequests) {
  ASSERT_TRUE(plain(Req::kSetProtocolFeatures, kOfferedProto));
  for (uint32_t req : {0xffffffffu, 0u, 1000u, static_cast<uint32_t>(Req::kSetLogBase),
                       static_cast<uint32_t>(Req::kIotlbMsg), static_cast<uint32_t>(Req::kAddMemReg)}) {
    const uint64_t zero = 0;
    const auto r = acked(static_cast<Req>(req), &zero, 8);
    ASSERT_TRUE(r.has_value()) << req << ": " << why;
    EXPECT_NE(*r, 0u) << req;
  }
  EXPECT_EQ(get_u64(Req::kGetFeatures), kOffered);
  // Without REPLY_ACK: the connection closes.
  reconnect();
  ASSERT_TRUE(peer->send(0xffffffffu, kVersion, nullptr, 0));
  EXPECT_FALSE(pump());
  EXPECT_NE(why.find("refused"), std::string::npos) << why;
}

TEST_F(BackendTest, BadHeaderFlags) {
  ASSERT_TRUE(plain(Req::kSetProtocolFeatures, kOfferedProto));
  for (uint32_t flags : {0u | kFlagNeedReply, 2u | kFlagNeedReply, 3u | kFlagNeedReply,
                         kAck | kFlagReply}) {
    const uint64_t v = kOffered;
    ASSERT_TRUE(peer->send(static_cast<uint32_t>(Req::kSetFeatures), flags, &v, 8));
    ASSERT_TRUE(pump()) << flags << ": " << why;
    auto rep = peer->recv();
    ASSERT_TRUE(rep.has_value()) << flags;
    EXPECT_NE(rep->u64(), 0u) << flags;
  }
  EXPECT_EQ(be->features(), 0u);
}

TEST_F(BackendTest, FdsOnMessagesThatTakeNoneAreRefusedAndClosed) {
  ASSERT_TRUE(plain(Req::kSetProtocolFeatures, kOfferedProto));
  const int base = count_open_fds();
  {
    UniqueFd e(eventfd(0, EFD_CLOEXEC));
    EXPECT_NE(acked(Req::kSetFeatures, kOffered, {e.get()}), 0u);
    EXPECT_NE(acked(Req::kSetVringNum, VringState{0, 64}, {e.get()}), 0u);
    UniqueFd e2(eventfd(0, EFD_CLOEXEC));
    EXPECT_NE(acked(Req::kSetVringCall, uint64_t{0}, {e.get(), e2.get()}), 0u);
  }
  EXPECT_EQ(count_open_fds(), base);
  EXPECT_EQ(be->features(), 0u);
  EXPECT_FALSE(be->vring(0).call.valid());
}

// VIRTIO_F_RING_PACKED over vhost-user: a ring size that is not a power of two (virtio 1.2
// §2.8), SET_VRING_ADDR's three addresses as ring / driver area / device area, SET and
// GET_VRING_BASE with the wrap counters (vhost-user.rst "Vring descriptor indices for packed
// virtqueues"), and a base outside the ring keeping the ring stopped.
TEST_F(BackendTest, PackedRingNegotiationAndVringBase) {
  constexpr uint32_t kPackedNum = 100;
  std::unique_ptr<test::FakePackedRing> pr[kNumVrings];
  for (auto& r : pr) r = std::make_unique<test::FakePackedRing>(fm, kPackedNum, 0);
  ASSERT_TRUE(plain(Req::kSetProtocolFeatures, kOfferedProto));
  ASSERT_EQ(acked(Req::kSetFeatures, kOffered), 0u) << why;
  ASSERT_TRUE(virtio::has(be->features(), virtio::kFRingPacked));
  const auto mt = mem_table(regions());
  ASSERT_EQ(acked(Req::kSetMemTable, mt.data(), mt.size(), fm.fds()), 0u) << why;
  for (uint32_t i = 0; i < kNumVrings; ++i) {
    ASSERT_EQ(acked(Req::kSetVringNum, VringState{i, kPackedNum}), 0u) << why;
    ASSERT_EQ(acked(Req::kSetVringBase, VringState{i, virtio::kPackedInitialBase}), 0u) << why;
    const VringAddr a{i, 0, pr[i]->ring_uva(), pr[i]->device_event_uva(), pr[i]->driver_event_uva(), 0};
    ASSERT_EQ(acked(Req::kSetVringAddr, a), 0u) << why;
    ASSERT_EQ(acked(Req::kSetVringKick, uint64_t{i}, {kick[i].get()}), 0u) << why;
    ASSERT_EQ(acked(Req::kSetVringCall, uint64_t{i}, {call[i].get()}), 0u) << why;
    ASSERT_EQ(acked(Req::kSetVringEnable, VringState{i, 1}), 0u) << why;
  }
  for (uint32_t i = 0; i < kNumVrings; ++i) {
    const Vring& v = be->vring(i);
    EXPECT_TRUE(v.ready) << v.why_not;
    EXPECT_TRUE(v.packed);
    EXPECT_TRUE(v.pq.attached());
    EXPECT_FALSE(v.q.attached());
    EXPECT_EQ(v.pq.size(), kPackedNum);
  }
  // The back-end's mapping is the driver's ring: a chain shows up, its used descriptor too.
  auto arena = std::make_unique<virtio::SegmentArena>();
  auto& txq = be->vring(kTxVring).pq;
  const uint16_t id = pr[kTxVring]->add_tx(test::make_frame(80));
  virtio::Chain c{};
  ASSERT_EQ(txq.pop<false>(*arena, &c), virtio::PopStatus::kOk);
  txq.push_used(c.head, 0, c.ring_descs);
  txq.publish_used();
  auto u = pr[kTxVring]->next_used();
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->id, id);

  // GET_VRING_BASE stops the ring and reports slot 1, wrap counters 1, both sides.
  const VringState get{kTxVring, 0};
  ASSERT_TRUE(peer->send(static_cast<uint32_t>(Req::kGetVringBase), kVersion, &get, sizeof get));
  ASSERT_TRUE(pump()) << why;
  auto rep = peer->recv();
  ASSERT_TRUE(rep.has_value());
  EXPECT_EQ(rep->u64() >> 32, 0x80018001u);
  EXPECT_FALSE(be->vring(kTxVring).ready);

  // Restarted at a slot outside the ring: it does not start.
  ASSERT_EQ(acked(Req::kSetVringBase, VringState{kTxVring, 0x8000 | kPackedNum}), 0u) << why;
  ASSERT_EQ(acked(Req::kSetVringKick, uint64_t{kTxVring}, {kick[kTxVring].get()}), 0u) << why;
  EXPECT_FALSE(be->vring(kTxVring).ready);
  EXPECT_EQ(be->vring(kTxVring).why_not, "ring base outside the ring");
  // ...and at the reported position it does, carrying on where it stopped.
  ASSERT_EQ(acked(Req::kSetVringBase, VringState{kTxVring, 0x8001}), 0u) << why;
  ASSERT_EQ(acked(Req::kSetVringKick, uint64_t{kTxVring}, {kick[kTxVring].get()}), 0u) << why;
  ASSERT_TRUE(be->vring(kTxVring).ready) << be->vring(kTxVring).why_not;
  const uint16_t id2 = pr[kTxVring]->add_tx(test::make_frame(80));
  ASSERT_EQ(be->vring(kTxVring).pq.pop<false>(*arena, &c), virtio::PopStatus::kOk);
  EXPECT_EQ(c.head, id2);
}

// A split ring's size must be a power of two; a packed ring's need not be.
TEST_F(BackendTest, QueueSizeRulesFollowTheRingLayout) {
  ASSERT_TRUE(plain(Req::kSetProtocolFeatures, kOfferedProto));
  ASSERT_EQ(acked(Req::kSetFeatures, kAcked), 0u) << why;
  EXPECT_NE(acked(Req::kSetVringNum, VringState{0, 100}), 0u);
  ASSERT_EQ(acked(Req::kSetFeatures, kOffered), 0u) << why;
  EXPECT_EQ(acked(Req::kSetVringNum, VringState{0, 100}), 0u);
  EXPECT_NE(acked(Req::kSetVringNum, VringState{0, 0}), 0u);
  EXPECT_NE(acked(Req::kSetVringNum, VringState{0, 32769}), 0u);
}

TEST_F(BackendTest, SetFeaturesNotOfferedIsRefused) {
  ASSERT_TRUE(plain(Req::kSetProtocolFeatures, kOfferedProto));
  EXPECT_NE(acked(Req::kSetFeatures, kOffered | bit(virtio::kFAccessPlatform)), 0u);
  EXPECT_NE(acked(Req::kSetProtocolFeatures, kOfferedProto | bit(kProtoBackendReq)), 0u);
  EXPECT_EQ(be->features(), 0u);
}

// Item 5: the "no fd" flag.
TEST_F(BackendTest, KickWithNoFdFlagStartsThePollingMode) {
  negotiate(/*proto=*/true, /*enable=*/true, /*kick_nofd=*/true);
  for (uint32_t i = 0; i < kNumVrings; ++i) {
    EXPECT_TRUE(be->vring(i).ready) << be->vring(i).why_not;
    EXPECT_TRUE(be->vring(i).started);
    EXPECT_FALSE(be->vring(i).kick.valid());
  }
  // Call with no fd: published used entries signal nothing, and nothing breaks.
  EXPECT_EQ(acked(Req::kSetVringCall, uint64_t{kTxVring} | kVringNoFd), 0u);
  EXPECT_FALSE(be->vring(kTxVring).call.valid());
  EXPECT_EQ(be->vring(kTxVring).q.call_fd(), -1);
}

TEST_F(BackendTest, NoFdFlagWithAnFdIsRefusedAndTheFdClosed) {
  negotiate();
  const int base = count_open_fds();
  {
    UniqueFd e(eventfd(0, EFD_CLOEXEC));
    EXPECT_NE(acked(Req::kSetVringKick, uint64_t{0} | kVringNoFd, {e.get()}), 0u);
    EXPECT_NE(acked(Req::kSetVringCall, uint64_t{1} | kVringNoFd, {e.get()}), 0u);
  }
  EXPECT_EQ(count_open_fds(), base);
  // Without the flag, an fd is required.
  EXPECT_NE(acked(Req::kSetVringKick, uint64_t{0}), 0u);
  for (uint32_t i = 0; i < kNumVrings; ++i) {
    EXPECT_TRUE(be->vring(i).ready);
    EXPECT_TRUE(be->vring(i).kick.valid());
    EXPECT_TRUE(be->vring(i).call.valid());
  }
}

// The datapath signals the call fd: a front-end's fd that could block (a pipe nobody reads)
// must not hang the thread that signals it, which serves other ports too.
TEST_F(BackendTest, CallFdThatCouldBlockIsMadeNonBlocking) {
  negotiate();
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);  // blocking
  UniqueFd rd(p[0]), wr(p[1]);
  EXPECT_EQ(acked(Req::kSetVringCall, uint64_t{kTxVring}, {wr.get()}), 0u) << why;
  auto& q = be->vring(kTxVring).q;
  ASSERT_GE(q.call_fd(), 0);
  ASSERT_TRUE(fcntl(q.call_fd(), F_GETFL) & O_NONBLOCK) << "a full pipe would block the datapath";
  for (int i = 0; i < 20000; ++i) q.signal();  // 160 KB into a 64 KB pipe: returns at once
  EXPECT_TRUE(be->vring(kTxVring).ready);
}

TEST_F(BackendTest, KickWithUnknownUpperBitsIsRefused) {
  negotiate();
  for (uint64_t v : std::initializer_list<uint64_t>{0x200ull, 0x400ull | kVringNoFd, 0x8000ull, 1ull << 32, 1ull << 63}) {
    UniqueFd e(eventfd(0, EFD_CLOEXEC));
    const bool nofd = v & kVringNoFd;
    EXPECT_NE(acked(Req::kSetVringKick, v, nofd ? std::vector<int>{} : std::vector<int>{e.get()}), 0u) << v;
  }
  EXPECT_TRUE(be->vring(0).ready);
}

// Item 9: ring addresses that do not translate: the ring does not start.
TEST_F(BackendTest, RingAddressesInNoRegion) {
  negotiate();
  const uint64_t end0 = fm.regions()[0].uva + fm.regions()[0].size;
  struct Case {
    const char* name;
    uint64_t desc, used, avail;
  };
  const VringAddr g = addr_of(kTxVring);
  const Case cases[] = {
      {"desc nowhere", 0x1000, g.used_user_addr, g.avail_user_addr},
      {"used nowhere", g.desc_user_addr, 0xdead0000, g.avail_user_addr},
      {"avail nowhere", g.desc_user_addr, g.used_user_addr, ~0ull - 1},
      {"desc past the region end", end0 - 16 * kNum + 16, g.used_user_addr, g.avail_user_addr},
      {"used past the region end", g.desc_user_addr, end0 - 8, g.avail_user_addr},
      {"desc misaligned", g.desc_user_addr + 8, g.used_user_addr, g.avail_user_addr},
      {"used misaligned", g.desc_user_addr, g.used_user_addr + 2, g.avail_user_addr},
      {"avail misaligned", g.desc_user_addr, g.used_user_addr, g.avail_user_addr + 1},
  };
  for (const Case& k : cases) {
    const VringAddr a{kTxVring, 0, k.desc, k.used, k.avail, 0};
    EXPECT_EQ(acked(Req::kSetVringAddr, a), 0u) << k.name;  // accepted, but...
    EXPECT_FALSE(be->vring(kTxVring).ready) << k.name;      // ...the ring does not start
    EXPECT_FALSE(be->vring(kTxVring).q.attached()) << k.name;
    EXPECT_EQ(be->vring(kTxVring).why_not, "ring address not in guest memory") << k.name;
    EXPECT_TRUE(be->vring(kRxVring).ready) << k.name;
  }
  // Good addresses again: it starts.
  EXPECT_EQ(acked(Req::kSetVringAddr, g), 0u);
  EXPECT_TRUE(be->vring(kTxVring).ready) << be->vring(kTxVring).why_not;
  // Unknown address flags are refused.
  VringAddr f = g;
  f.flags = 2;
  EXPECT_NE(acked(Req::kSetVringAddr, f), 0u);
}

TEST_F(BackendTest, MoreThanEightFdsIsAConnectionErrorWithoutLeaks) {
  ASSERT_TRUE(plain(Req::kSetProtocolFeatures, kOfferedProto));
  const int base = count_open_fds();
  {
    std::vector<UniqueFd> owned;
    std::vector<int> fds;
    for (int i = 0; i < 9; ++i) {
      owned.emplace_back(dup(fm.fds()[0]));
      fds.push_back(owned.back().get());
    }
    std::vector<MemRegion> nine;
    for (uint64_t i = 0; i < 9; ++i) nine.push_back({i << 20, 4096, 0x500000000ull + (i << 20), 0});
    const auto p = mem_table(nine);
    ASSERT_TRUE(peer->send(static_cast<uint32_t>(Req::kSetMemTable), kAck, p.data(), p.size(), fds));
  }
  EXPECT_FALSE(pump());
  EXPECT_NE(why.find("fds"), std::string::npos) << why;
  be->disconnect();
  EXPECT_EQ(count_open_fds(), base - 1);  // only the back-end's socket end went away
}

TEST_F(BackendTest, RingBreakingStopsOnlyThatRing) {
  negotiate();
  rings[kTxVring]->set_avail_idx(kNum + 1);
  EXPECT_EQ(be->vring(kTxVring).q.pending(), -1);
  EXPECT_TRUE(be->vring(kTxVring).q.broken());
  // Another message re-evaluates readiness: the broken ring stays stopped.
  EXPECT_EQ(acked(Req::kSetVringEnable, VringState{kRxVring, 1}), 0u);
  EXPECT_FALSE(be->vring(kTxVring).ready);
  EXPECT_EQ(be->vring(kTxVring).why_not, "ring broken");
  EXPECT_TRUE(be->vring(kRxVring).ready);
  // Setting the ring up again restarts it.
  rings[kTxVring]->set_avail_idx(0);
  EXPECT_EQ(acked(Req::kSetVringAddr, addr_of(kTxVring)), 0u);
  EXPECT_TRUE(be->vring(kTxVring).ready) << be->vring(kTxVring).why_not;
}

// ---------------------------------------------------------------- upgrade (ctl upgrade)

/// Dups every fd of a snapshot (a successor gets its own copies through SCM_RIGHTS).
BackendSnapshot dup_fds(BackendSnapshot s) {
  auto d = [](int fd) { return fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1; };
  s.conn = d(s.conn);
  s.link_chan = d(s.link_chan);
  for (int& fd : s.mem_fds) fd = d(fd);
  for (auto& r : s.rings) {
    r.kick = d(r.kick);
    r.call = d(r.call);
    r.err = d(r.err);
  }
  return s;
}

TEST_F(BackendTest, AdoptedSnapshotResumesEveryRingWhereItStopped) {
  negotiate();
  ASSERT_EQ(acked(Req::kNetSetMtu, uint64_t{1400}), 0u) << why;
  for (int i = 0; i < 5; ++i) rings[kTxVring]->add_tx(test::make_frame(60));
  auto& txq = be->vring(kTxVring).q;
  auto arena = std::make_unique<virtio::SegmentArena>();
  for (int i = 0; i < 3; ++i) {  // 3 of 5 taken and used; 2 wait in the ring
    virtio::Chain c{};
    ASSERT_EQ(txq.pop<false>(*arena, &c), virtio::PopStatus::kOk);
    txq.push_used(c.head, 0);
  }
  txq.publish_used();
  eventfd_t n;
  eventfd_read(call[kRxVring].get(), &n);  // (whatever was signalled so far)
  eventfd_read(call[kTxVring].get(), &n);

  BackendSnapshot s;
  host.pause_datapath();
  be->snapshot(&s);
  host.resume_datapath();
  EXPECT_EQ(s.nregions, 2u);
  EXPECT_EQ(s.nrings, 2 * kMaxQueuePairs);
  EXPECT_EQ(s.rings[kTxVring].base, 3u);
  EXPECT_EQ(s.mtu, 1400u);
  EXPECT_EQ(s.conn, be->fd());

  CountingHost host2;
  Backend next(&host2, BackendOptions::defaults());
  BackendSnapshot mine = dup_fds(s);
  std::string err;
  ASSERT_TRUE(next.adopt(mine, &err)) << err;
  EXPECT_TRUE(next.connected());
  EXPECT_EQ(next.features(), kAcked);
  EXPECT_EQ(next.protocol_features(), kOfferedProto);
  EXPECT_EQ(next.mtu(), 1400u);
  ASSERT_NE(next.memory(), nullptr);
  EXPECT_EQ(next.memory()->region_count(), 2u);
  for (uint32_t i = 0; i < kNumVrings; ++i) {
    EXPECT_TRUE(next.vring(i).ready) << i << ": " << next.vring(i).why_not;
    // Each ready ring's call fd is signalled once (a notification the old one may have owed).
    EXPECT_EQ(eventfd_read(call[i].get(), &n), 0) << i;
  }
  auto& q2 = next.vring(kTxVring).q;
  EXPECT_EQ(q2.last_avail(), 3);
  EXPECT_EQ(q2.pending(), 2);  // the two chains not taken are the successor's to take
  virtio::Chain c{};
  ASSERT_EQ(q2.pop<false>(*arena, &c), virtio::PopStatus::kOk);
  q2.push_used(c.head, 0);
  q2.publish_used();
  EXPECT_EQ(rings[kTxVring]->used_idx(), 4);
  // The connection is the same socket: a message from the front-end reaches the successor.
  ASSERT_TRUE(peer->send_empty(Req::kGetFeatures));
  ASSERT_TRUE(next.on_readable(&why)) << why;
  auto rep = peer->recv();
  ASSERT_TRUE(rep.has_value());
  EXPECT_EQ(rep->u64(), kOffered);
}

TEST_F(BackendTest, AdoptRefusesWhatThisPortDoesNotOfferAndClosesTheFds) {
  negotiate();
  BackendSnapshot s;
  be->snapshot(&s);
  // A successor configured with fewer queue pairs, then one without offloads.
  for (int k = 0; k < 2; ++k) {
    auto o = BackendOptions::defaults();
    if (k == 0) o.queue_pairs = 2;
    else o.features &= ~vl::vhost::kOffloadFeatures;
    CountingHost h;
    Backend next(&h, o);
    BackendSnapshot mine = dup_fds(s);
    const int conn = mine.conn;
    std::string err;
    EXPECT_FALSE(next.adopt(mine, &err));
    EXPECT_NE(err.find(k == 0 ? "vrings handed" : "not offered here"), std::string::npos) << err;
    EXPECT_FALSE(next.connected());
    EXPECT_EQ(fcntl(conn, F_GETFD), -1);  // closed
  }
  EXPECT_TRUE(be->connected());  // the first back-end's connection is untouched
}

}  // namespace
}  // namespace vl::vhost
