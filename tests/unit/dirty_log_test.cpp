// Live migration in the back-end: the dirty log (virtio::DirtyLog), SET_LOG_BASE's
// validation (hostile-inputs.md: sizes, offset overflow, fd size, fd count), and the
// marking of every page the back-end writes into guest memory while VHOST_F_LOG_ALL is set
// (receive buffers filled by deliver_frame, used ring entries and index), nothing without it.
#include "virtio/dirty_log.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "fake_driver.h"
#include "fake_packed_driver.h"
#include "vhost/backend.h"
#include "vhost_peer.h"
#include "virtio/net_copy.h"

namespace vl::vhost {
namespace {

using test::FakeMemory;
using test::FakeVring;
using test::RawPeer;
using virtio::bit;
using virtio::DirtyLog;
using virtio::DirtyLogStats;

UniqueFd memfd_of(uint64_t size) {
  UniqueFd fd(memfd_create("log", MFD_CLOEXEC));
  EXPECT_TRUE(fd.valid());
  EXPECT_EQ(ftruncate(fd.get(), static_cast<off_t>(size)), 0);
  return fd;
}

bool bit_set(const uint8_t* bm, uint64_t gpa) {
  const uint64_t pg = gpa >> 12;
  return (bm[pg >> 3] >> (pg & 7)) & 1;
}

// ---------------------------------------------------------------- DirtyLog itself

TEST(DirtyLog, BytesForRoundsUpToWholePagesAndBytes) {
  EXPECT_EQ(DirtyLog::bytes_for(0), 0u);
  EXPECT_EQ(DirtyLog::bytes_for(1), 1u);
  EXPECT_EQ(DirtyLog::bytes_for(8 * 4096), 1u);
  EXPECT_EQ(DirtyLog::bytes_for(8 * 4096 + 1), 2u);
  EXPECT_EQ(DirtyLog::bytes_for(uint64_t{256} << 20), 8192u);  // 256 MiB: 65536 pages
}

TEST(DirtyLog, MarkSetsOneBitPerPageAndCountsNewOnes) {
  DirtyLogStats st;
  std::vector<uint8_t> bm(8 + 16, 0);  // 8 bytes of log, then a guard
  DirtyLog log(&st);
  log.map_unowned(bm.data(), 8);
  log.mark(0x1000, 1);           // page 1
  log.mark(0x2fff, 2);           // pages 2 and 3
  log.mark(0x2000, 0x2000);      // pages 2, 3 again: not new
  log.mark(0x5000, 0);           // nothing
  EXPECT_EQ(bm[0], 0b00001110);
  EXPECT_EQ(st.pages_logged.load(), 3u);
  // Past the end (64 pages): counted, never written.
  log.mark(63 * 4096, 3 * 4096);
  EXPECT_EQ(bm[7], 0x80);
  EXPECT_EQ(st.out_of_range.load(), 2u);
  log.mark(~uint64_t{0} - 10, 100);  // wraps the address space: nothing written
  for (size_t i = 8; i < bm.size(); ++i) EXPECT_EQ(bm[i], 0) << i;
}

TEST(DirtyLog, MapRefusesHostileSizesOffsetsAndFds) {
  DirtyLogStats st;
  std::string err;
  UniqueFd fd = memfd_of(8192);
  {
    DirtyLog l(&st);
    EXPECT_FALSE(l.map(fd.get(), 0, 0, &err)) << "size 0";
    EXPECT_FALSE(l.map(fd.get(), 4096, 8192, &err)) << "offset at the end of the fd";
    EXPECT_FALSE(l.map(fd.get(), 8192, 1, &err)) << "one byte past the fd";
    EXPECT_FALSE(l.map(fd.get(), 4096, ~uint64_t{0} - 100, &err)) << "offset + size overflows";
    EXPECT_NE(err.find("overflow"), std::string::npos) << err;
    EXPECT_FALSE(l.map(fd.get(), DirtyLog::kMaxBytes + 1, 0, &err)) << "above the cap";
    EXPECT_FALSE(l.map(-1, 4096, 0, &err)) << "no fd";
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    EXPECT_FALSE(l.map(p[0], 4096, 0, &err)) << "a pipe";
    close(p[0]);
    close(p[1]);
    EXPECT_EQ(l.size(), 0u);
  }
  // A good one, at an offset that is not page aligned: the bitmap starts there.
  DirtyLog l(&st);
  ASSERT_TRUE(l.map(fd.get(), 100, 5000, &err)) << err;
  l.mark(0, 4096 * 9);  // pages 0..8: byte 0 all ones, bit 0 of byte 1
  uint8_t b[2];
  ASSERT_EQ(pread(fd.get(), b, 2, 5000), 2);
  EXPECT_EQ(b[0], 0xff);
  EXPECT_EQ(b[1], 0x01);
}

// ---------------------------------------------------------------- through the back-end

class NullHost : public DeviceHost {
 public:
  void pause_datapath() override { ++pauses; }
  void resume_datapath() override { ++resumes; }
  int pauses = 0, resumes = 0;
};

constexpr uint32_t kNum = 256;
const uint64_t kOffered = BackendOptions::defaults().features;
const uint64_t kProto = BackendOptions::defaults().protocol_features;
const uint64_t kAcked = kOffered & ~bit(virtio::kFRingPacked) & ~bit(virtio::kFLogAll);
constexpr uint64_t kMemEnd = 0x200000;  // two 1 MiB regions: 512 pages, 64 bytes of log

class MigrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fm.add_memfd_region(0x0, 1 << 20);
    fm.add_memfd_region(0x100000, 1 << 20);
    rings[0] = std::make_unique<FakeVring>(fm, kNum, 0);
    rings[1] = std::make_unique<FakeVring>(fm, kNum, 1);  // the TX ring in the second region
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
  void TearDown() override { EXPECT_EQ(host.pauses, host.resumes); }

  bool pump() {
    why.clear();
    return be->on_readable(&why);
  }
  template <typename T>
  bool plain(Req r, const T& v, std::vector<int> fds = {}) {
    EXPECT_TRUE(peer->send(static_cast<uint32_t>(r), kVersion, &v, sizeof v, std::move(fds)));
    return pump();
  }
  void negotiate(uint64_t proto = kProto) {
    ASSERT_TRUE(plain(Req::kSetProtocolFeatures, proto)) << why;
    ASSERT_TRUE(plain(Req::kSetFeatures, kAcked)) << why;
    std::vector<uint8_t> mt(sizeof(MemTableHeader) + 2 * sizeof(MemRegion));
    const MemTableHeader h{2, 0};
    std::memcpy(mt.data(), &h, sizeof h);
    int i = 0;
    for (const auto& d : fm.descs()) {
      const MemRegion r{d.guest_phys_addr, d.memory_size, d.userspace_addr, d.mmap_offset};
      std::memcpy(mt.data() + sizeof h + sizeof r * i++, &r, sizeof r);
    }
    ASSERT_TRUE(peer->send(static_cast<uint32_t>(Req::kSetMemTable), kVersion, mt.data(), mt.size(), fm.fds()));
    ASSERT_TRUE(pump()) << why;
    for (uint32_t v = 0; v < kNumVrings; ++v) {
      ASSERT_TRUE(plain(Req::kSetVringNum, VringState{v, kNum})) << why;
      ASSERT_TRUE(plain(Req::kSetVringBase, VringState{v, 0})) << why;
      ASSERT_TRUE(plain(Req::kSetVringAddr, addr_of(v))) << why;
      ASSERT_TRUE(plain(Req::kSetVringKick, uint64_t{v} | kVringNoFd)) << why;
      ASSERT_TRUE(plain(Req::kSetVringCall, uint64_t{v}, {call[v].get()})) << why;
      ASSERT_TRUE(plain(Req::kSetVringEnable, VringState{v, 1})) << why;
    }
    ASSERT_TRUE(be->vring(kRxVring).ready) << be->vring(kRxVring).why_not;
    ASSERT_TRUE(be->vring(kTxVring).ready) << be->vring(kTxVring).why_not;
  }
  VringAddr addr_of(uint32_t i, bool log = false) const {
    return VringAddr{i, log ? kVringFLog : 0u, rings[i]->desc_uva(), rings[i]->used_uva(),
                     rings[i]->avail_uva(), log ? rings[i]->used_gpa() : 0};
  }
  /// Sends SET_LOG_BASE; returns the connection's survival and the reply (if any).
  bool set_log_base(uint64_t size, uint64_t offset, std::vector<int> fds, std::optional<test::Reply>* rep) {
    const LogDesc d{size, offset};
    EXPECT_TRUE(peer->send(static_cast<uint32_t>(Req::kSetLogBase), kVersion, &d, sizeof d, std::move(fds)));
    const bool ok = pump();
    if (ok) *rep = peer->recv();
    else EXPECT_TRUE(peer->nothing_to_read()) << "no reply to a refused message";
    return ok;
  }
  /// Gives the back-end a good log (returns our mapping of it).
  uint8_t* good_log() {
    log_fd = memfd_of(4096);
    std::optional<test::Reply> rep;
    EXPECT_TRUE(set_log_base(4096, 0, {log_fd.get()}, &rep)) << why;
    EXPECT_TRUE(rep.has_value());
    if (rep) {
      EXPECT_EQ(rep->hdr.request, static_cast<uint32_t>(Req::kSetLogBase));
      EXPECT_EQ(rep->hdr.flags, kVersion | kFlagReply);
      EXPECT_EQ(rep->u64(), 0u);
    }
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, log_fd.get(), 0);
    EXPECT_NE(p, MAP_FAILED);
    maps.push_back(p);
    return static_cast<uint8_t*>(p);
  }
  ~MigrationTest() override {
    for (void* p : maps) munmap(p, 4096);
  }
  /// Delivers one frame into the back-end's receive queue and publishes it.
  uint16_t deliver(uint32_t buf, uint32_t frame_len, bool mergeable = true) {
    const uint16_t head = rings[kRxVring]->add_rx({buf});
    auto& q = be->vring(kRxVring).q;
    const auto frame = test::make_frame(frame_len);
    const virtio::Segment s{const_cast<uint8_t*>(frame.data()), frame_len};
    EXPECT_EQ(virtio::deliver_frame(q, *scratch, virtio::NetHdr{}, 12, &s, 1, frame_len, mergeable),
              virtio::DeliverStatus::kOk);
    q.publish_used();
    return head;
  }

  NullHost host;
  FakeMemory fm;
  std::unique_ptr<FakeVring> rings[kNumVrings];
  UniqueFd call[kNumVrings];
  UniqueFd log_fd;
  std::vector<void*> maps;
  std::unique_ptr<Backend> be;
  std::unique_ptr<RawPeer> peer;
  std::unique_ptr<virtio::SegmentArena> scratch = std::make_unique<virtio::SegmentArena>();
  std::string why;
};

TEST_F(MigrationTest, OffersLogAllGuestAnnounceAndLogShmfd) {
  EXPECT_TRUE(virtio::has(kOffered, virtio::kFLogAll));
  EXPECT_TRUE(virtio::has(kOffered, virtio::kNetFGuestAnnounce));
  EXPECT_TRUE(virtio::has(kProto, kProtoLogShmfd));
}

TEST_F(MigrationTest, SetLogBaseHostileCasesCloseTheConnection) {
  struct Case {
    const char* what;
    uint64_t fd_size, size, offset;
    int nfds;
  };
  const Case cases[] = {
      {"size 0", 4096, 0, 0, 1},
      {"offset beyond the fd", 4096, 64, 4096, 1},
      {"offset + size overflows", 4096, 64, ~uint64_t{0} - 8, 1},
      {"fd smaller than the log", 32, 64, 0, 1},
      {"too small for guest memory (64 bytes needed)", 4096, 63, 0, 1},
      {"no fd", 4096, 64, 0, 0},
      {"two fds", 4096, 64, 0, 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    reconnect();
    negotiate();
    UniqueFd f1 = memfd_of(c.fd_size), f2 = memfd_of(c.fd_size);
    std::vector<int> fds;
    if (c.nfds >= 1) fds.push_back(f1.get());
    if (c.nfds >= 2) fds.push_back(f2.get());
    const int before = test::count_open_fds();
    std::optional<test::Reply> rep;
    EXPECT_FALSE(set_log_base(c.size, c.offset, fds, &rep));
    EXPECT_FALSE(why.empty());
    EXPECT_EQ(test::count_open_fds(), before) << "the message's fds are closed";
    EXPECT_FALSE(be->logging());
  }
}

TEST_F(MigrationTest, SetLogBaseWithoutLogShmfdIsRefused) {
  negotiate(kProto & ~bit(kProtoLogShmfd));
  UniqueFd f = memfd_of(4096);
  std::optional<test::Reply> rep;
  EXPECT_FALSE(set_log_base(4096, 0, {f.get()}, &rep));
  EXPECT_NE(why.find("LOG_SHMFD"), std::string::npos) << why;
}

TEST_F(MigrationTest, SetLogBaseHostileWithReplyAckGetsAnErrorAndKeepsTheConnection) {
  negotiate();
  UniqueFd f = memfd_of(4096);
  const LogDesc d{0, 0};
  ASSERT_TRUE(peer->send(static_cast<uint32_t>(Req::kSetLogBase), kVersion | kFlagNeedReply, &d,
                         sizeof d, {f.get()}));
  ASSERT_TRUE(pump()) << why;
  auto rep = peer->recv();
  ASSERT_TRUE(rep.has_value());
  EXPECT_EQ(rep->u64(), 1u);
  EXPECT_TRUE(be->vring(kRxVring).ready);
}

TEST_F(MigrationTest, ReceiveBuffersAndUsedRingsAreMarkedWithLogAll) {
  negotiate();
  uint8_t* bm = good_log();
  ASSERT_TRUE(plain(Req::kSetFeatures, kAcked | bit(virtio::kFLogAll))) << why;
  for (uint32_t v = 0; v < kNumVrings; ++v) ASSERT_TRUE(plain(Req::kSetVringAddr, addr_of(v, true))) << why;
  ASSERT_TRUE(be->logging());
  ASSERT_TRUE(be->vring(kRxVring).ready) << be->vring(kRxVring).why_not;
  ASSERT_EQ(be->vring(kRxVring).q.dirty_log() != nullptr, true);

  // A receive buffer spanning 3 pages, filled by a frame of 2 pages and a bit.
  const uint16_t head = deliver(3 * 4096, 2 * 4096 + 100);
  const uint64_t buf = rings[kRxVring]->chain_bufs(head)[0].gpa;
  const uint64_t written = 12 + 2 * 4096 + 100;
  for (uint64_t a = buf; a < buf + written; a += 4096) EXPECT_TRUE(bit_set(bm, a)) << std::hex << a;
  EXPECT_TRUE(bit_set(bm, buf + written - 1));
  if (((buf + written - 1) >> 12) != ((buf + 3 * 4096 - 1) >> 12)) {
    EXPECT_FALSE(bit_set(bm, buf + 3 * 4096 - 1)) << "unwritten tail page";
  }
  EXPECT_TRUE(bit_set(bm, rings[kRxVring]->used_gpa())) << "used ring of the receive queue";

  // The transmit queue's used ring (region 1) when a chain is returned.
  const uint64_t tx_used = rings[kTxVring]->used_gpa();
  EXPECT_FALSE(bit_set(bm, tx_used));
  rings[kTxVring]->add_tx(test::make_frame(60));
  auto& txq = be->vring(kTxVring).q;
  virtio::Chain c{};
  ASSERT_EQ(txq.pending(), 1);
  ASSERT_EQ(txq.pop<false>(*scratch, &c), virtio::PopStatus::kOk);
  txq.push_used(c.head, 0);
  txq.publish_used();
  EXPECT_TRUE(bit_set(bm, tx_used));
  EXPECT_TRUE(bit_set(bm, tx_used + 4 + 8 * 0));
  EXPECT_GT(be->log_stats().pages_logged.load(), 3u);
  EXPECT_EQ(be->log_stats().out_of_range.load(), 0u);

  // Mergeable buffers: a frame over 3 chains of 2000 bytes, each chain's pages marked.
  std::memset(bm, 0, 64);
  const uint16_t h1 = rings[kRxVring]->add_rx({2000});
  const uint16_t h2 = rings[kRxVring]->add_rx({2000});
  const uint16_t h3 = rings[kRxVring]->add_rx({2000});
  const auto frame = test::make_frame(5000);
  const virtio::Segment s{const_cast<uint8_t*>(frame.data()), 5000};
  auto& rxq = be->vring(kRxVring).q;
  ASSERT_EQ(virtio::deliver_frame(rxq, *scratch, virtio::NetHdr{}, 12, &s, 1, 5000, true),
            virtio::DeliverStatus::kOk);
  rxq.publish_used();
  for (uint16_t h : {h1, h2, h3}) {
    const uint64_t g = rings[kRxVring]->chain_bufs(h)[0].gpa;
    EXPECT_TRUE(bit_set(bm, g)) << h;
    EXPECT_TRUE(bit_set(bm, g + 1011)) << h;  // the last chain holds 5012 - 4000 bytes
  }
}

TEST_F(MigrationTest, NothingIsLoggedWithoutLogAll) {
  negotiate();
  uint8_t* bm = good_log();  // a log, but LOG_ALL not set (QEMU gives the log first)
  EXPECT_FALSE(be->logging());
  EXPECT_EQ(be->vring(kRxVring).q.dirty_log(), nullptr);
  deliver(4096, 1000);
  rings[kTxVring]->add_tx(test::make_frame(60));
  auto& txq = be->vring(kTxVring).q;
  virtio::Chain c{};
  ASSERT_EQ(txq.pending(), 1);
  ASSERT_EQ(txq.pop<false>(*scratch, &c), virtio::PopStatus::kOk);
  txq.push_used(c.head, 0);
  txq.publish_used();
  txq.set_kicks(true);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(bm[i], 0) << i;
  EXPECT_EQ(be->log_stats().pages_logged.load(), 0u);

  // LOG_ALL on, then off again (migration cancelled): marking stops.
  ASSERT_TRUE(plain(Req::kSetFeatures, kAcked | bit(virtio::kFLogAll))) << why;
  EXPECT_TRUE(be->logging());
  EXPECT_NE(be->vring(kRxVring).q.dirty_log(), nullptr);
  ASSERT_TRUE(plain(Req::kSetFeatures, kAcked)) << why;
  EXPECT_EQ(be->vring(kRxVring).q.dirty_log(), nullptr);
  deliver(4096, 1000);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(bm[i], 0) << i;
}

TEST_F(MigrationTest, UsedRingLogAddressOutsideGuestMemoryStopsTheRing) {
  negotiate();
  good_log();
  VringAddr a = addr_of(kRxVring, true);
  a.log_guest_addr = kMemEnd - 8;  // the used ring would run past guest memory
  ASSERT_TRUE(plain(Req::kSetVringAddr, a)) << why;
  EXPECT_FALSE(be->vring(kRxVring).ready);
  EXPECT_NE(be->vring(kRxVring).why_not.find("log address"), std::string::npos);
  ASSERT_TRUE(plain(Req::kSetVringAddr, addr_of(kRxVring, true))) << why;
  EXPECT_TRUE(be->vring(kRxVring).ready) << be->vring(kRxVring).why_not;
}

TEST_F(MigrationTest, ReplacingTheLogSwitchesTheQueuesToTheNewOne) {
  negotiate();
  uint8_t* old_bm = good_log();
  ASSERT_TRUE(plain(Req::kSetFeatures, kAcked | bit(virtio::kFLogAll))) << why;
  uint8_t* new_bm = good_log();  // QEMU resizes the log while logging
  deliver(4096, 500);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(old_bm[i], 0) << i;
  EXPECT_TRUE(bit_set(new_bm, rings[kRxVring]->used_gpa()));
}

TEST_F(MigrationTest, SetVringAddrMidTrafficKeepsThePosition) {
  // QEMU sets the ring addresses again with VHOST_VRING_F_LOG when migration starts: the
  // ring must carry on where it was, and GET_VRING_BASE then reports that position.
  negotiate();
  good_log();
  for (int i = 0; i < 5; ++i) deliver(2048, 100);
  ASSERT_TRUE(plain(Req::kSetFeatures, kAcked | bit(virtio::kFLogAll))) << why;
  ASSERT_TRUE(plain(Req::kSetVringAddr, addr_of(kRxVring, true))) << why;
  EXPECT_EQ(be->vring(kRxVring).q.last_avail(), 5);
  deliver(2048, 100);
  ASSERT_TRUE(peer->send_struct(Req::kGetVringBase, VringState{kRxVring, 0}));
  ASSERT_TRUE(pump()) << why;
  auto rep = peer->recv();
  ASSERT_TRUE(rep.has_value());
  VringState s;
  ASSERT_EQ(rep->payload.size(), sizeof s);
  std::memcpy(&s, rep->payload.data(), sizeof s);
  EXPECT_EQ(s.num, 6u);
  EXPECT_EQ(rings[kRxVring]->used_idx(), 6);
}

}  // namespace
}  // namespace vl::vhost

namespace vl::virtio {
namespace {

// A packed receive queue under LOG_ALL: the buffer written and the ring slots written back
// are marked, the rest of the ring is not; set_kicks marks the device event area.
TEST(DirtyLogPacked, BufferAndWrittenBackSlotsAreMarked) {
  test::FakeMemory fm;
  fm.add_region(0x100000, 4 << 20);
  constexpr uint32_t kNumP = 1024;  // a 16 KiB ring: 4 pages
  test::FakePackedRing ring(fm, kNumP, 0);
  GuestMemory gm;
  ASSERT_TRUE(fm.build(gm));
  PackedDeviceQueue q;
  ring.attach(q, gm, bit(kFVersion1) | bit(kFRingPacked) | bit(kNetFMrgRxbuf));
  const uint64_t ring_gpa = ring.ring_uva() - test::kUvaBias;
  const uint64_t dev_gpa = ring.device_event_uva() - test::kUvaBias;
  DirtyLogStats st;
  std::vector<uint8_t> bm(DirtyLog::bytes_for(0x100000 + (4 << 20)), 0);
  DirtyLog log(&st);
  log.map_unowned(bm.data(), bm.size());
  q.set_dirty_log(&log, ring_gpa, dev_gpa);

  const uint64_t buf = fm.alloc(3000, 4096, 0);
  ring.add_chain({{buf, 3000, kDescFWrite}});
  auto scratch = std::make_unique<SegmentArena>();
  const auto frame = test::make_frame(2500);
  const Segment s{const_cast<uint8_t*>(frame.data()), 2500};
  ASSERT_EQ(deliver_frame(q, *scratch, NetHdr{}, 12, &s, 1, 2500, true), DeliverStatus::kOk);
  q.publish_used();
  EXPECT_TRUE(vhost::bit_set(bm.data(), buf));
  EXPECT_TRUE(vhost::bit_set(bm.data(), ring_gpa)) << "slot 0 written back";
  EXPECT_FALSE(vhost::bit_set(bm.data(), ring_gpa + 16 * 512)) << "slot 512 untouched";
  EXPECT_GE(st.pages_logged.load(), 2u);

  std::fill(bm.begin(), bm.end(), 0);
  q.set_kicks(true);
  EXPECT_TRUE(vhost::bit_set(bm.data(), dev_gpa));
  q.set_dirty_log(nullptr, 0, 0);
  std::fill(bm.begin(), bm.end(), 0);
  q.set_kicks(false);
  ring.add_chain({{buf, 3000, kDescFWrite}});
  ASSERT_EQ(deliver_frame(q, *scratch, NetHdr{}, 12, &s, 1, 2500, true), DeliverStatus::kOk);
  q.publish_used();
  for (size_t i = 0; i < bm.size(); ++i) ASSERT_EQ(bm[i], 0) << i;
}

}  // namespace
}  // namespace vl::virtio
