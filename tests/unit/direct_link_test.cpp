// The B side of a direct link (vnf/direct_link.h) driven over a real link channel, with the
// peer's ("A"'s) rings in a memfd written by a fake driver: set-up validation, frames both
// ways, and a hostile A that writes garbage into its rings after the link started (B drops
// and counts by reason, keeps running, never follows the garbage).
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstring>
#include <vector>

#include "fake_driver.h"
#include "port/port.h"
#include "vhost/channel.h"
#include "vhost/link_protocol.h"
#include "virtio/driver_memory.h"
#include "virtio/split_driver_queue.h"
#include "vnf/direct_link.h"

namespace {

using namespace vl;
using namespace vl::virtio;
using vhost::LinkReq;
using vl::test::FakeMemory;
using vl::test::FakeVring;

constexpr uint64_t kFeatures = bit(kFVersion1) | bit(kRingFEventIdx) | bit(kFProtocolFeatures);
constexpr uint32_t kHdr = 12;

uint32_t drop_idx(port::Drop d) { return static_cast<uint32_t>(d); }

class DirectLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    sw_.reset(UniqueFd(sv[0]));
    link_.set_channel(UniqueFd(sv[1]));
    mem_.add_memfd_region(0x100000, 1 << 20);
    rx_ = std::make_unique<FakeVring>(mem_, 64);
    tx_ = std::make_unique<FakeVring>(mem_, 64);
    std::string err;
    ASSERT_TRUE(dmem_.create(4 << 20, "dl-test", &err)) << err;
    ASSERT_TRUE(pool_.init(dmem_, 64, 2048, &err)) << err;
  }

  /// Sends one request and lets B answer it; returns the reply's u64 status (or the
  /// LinkStopReply's, filling *stop).
  uint64_t request(LinkReq req, const void* p, uint32_t size, std::vector<int> fds = {},
                   vhost::LinkStopReply* stop = nullptr) {
    EXPECT_TRUE(sw_.send(static_cast<uint32_t>(req), vhost::kVersion | vhost::kFlagNeedReply, p,
                         size, fds.data(), static_cast<uint32_t>(fds.size())));
    link_.service();
    std::string err;
    if (sw_.read_wait(1000, &err) != vhost::ReadStatus::kMessage) return ~0ull;
    vhost::Message& m = sw_.message();
    EXPECT_EQ(m.hdr.request, static_cast<uint32_t>(req));
    uint64_t st;
    std::memcpy(&st, m.payload, 8);
    if (stop && m.hdr.size == sizeof *stop) std::memcpy(stop, m.payload, sizeof *stop);
    return st;
  }

  uint64_t send_mem() {
    struct {
      vhost::LinkMem h;
      vhost::MemRegion r;
    } t{};
    const auto d = mem_.descs();
    t.h.nregions = 1;
    t.r = vhost::MemRegion{d[0].guest_phys_addr, d[0].memory_size, d[0].userspace_addr,
                           d[0].mmap_offset};
    return request(LinkReq::kLinkMem, &t, sizeof t, mem_.fds());
  }

  uint64_t send_vring(uint32_t i, FakeVring& v, uint64_t desc_override = 0) {
    vhost::LinkVring lv{i, v.num(), desc_override ? desc_override : v.desc_uva(), v.avail_uva(),
                        v.used_uva(), 0, 0};
    return request(LinkReq::kLinkVring, &lv, sizeof lv);
  }

  uint64_t start() {
    const vhost::LinkStart s{kFeatures, 1518 + 18, 0};
    return request(LinkReq::kLinkStart, &s, sizeof s);
  }

  void link_up() {
    const uint64_t v = vhost::kLinkVersion;
    ASSERT_EQ(request(LinkReq::kLinkProbe, &v, 8), 0u);
    ASSERT_EQ(send_mem(), 0u);
    ASSERT_EQ(send_vring(0, *rx_), 0u);
    ASSERT_EQ(send_vring(1, *tx_), 0u);
    ASSERT_EQ(start(), 0u);
    ASSERT_TRUE(link_.active());
  }

  std::vector<uint8_t> frame(uint32_t len, uint8_t fill) {
    std::vector<uint8_t> b(kHdr + len, fill);
    std::memset(b.data(), 0, kHdr);  // a plain header: no offloads
    return b;
  }

  uint32_t receive(uint32_t* bufs, uint32_t* lens) {
    const uint32_t n = link_.receive(pool_, kHdr, bufs, lens, 32);
    for (uint32_t i = 0; i < n; ++i) pool_.put(bufs[i]);
    return n;
  }

  vhost::Channel sw_;
  vnf::DirectLink link_;
  FakeMemory mem_;
  std::unique_ptr<FakeVring> rx_, tx_;
  DriverMemory dmem_;
  BufferPool pool_;
};

TEST_F(DirectLinkTest, FramesBothWaysThenStop) {
  link_up();
  // A transmits a frame split over two descriptors: B copies it into its own buffer.
  const auto f = frame(100, 0xab);
  tx_->add_tx(f, {30, static_cast<uint32_t>(f.size()) - 30});
  uint32_t bufs[32], lens[32];
  const uint32_t n = link_.receive(pool_, kHdr, bufs, lens, 32);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(lens[0], kHdr + 100);
  EXPECT_EQ(0, std::memcmp(pool_.data(bufs[0]) + kHdr, f.data() + kHdr, 100));
  EXPECT_EQ(tx_->used_idx(), 1);  // the chain went back to A
  // B delivers a frame into A's receive buffer.
  const uint16_t head = rx_->add_rx({2048});
  ASSERT_TRUE(link_.deliver(pool_.data(bufs[0]) + kHdr, 100));
  link_.flush();
  EXPECT_EQ(rx_->used_idx(), 1);
  EXPECT_EQ(rx_->used_elem(0).len, kHdr + 100);
  EXPECT_EQ(rx_->chain_bytes(head, kHdr + 100)[kHdr + 5], 0xab);
  pool_.put(bufs[0]);
  // Nothing posted: counted as no_rx_buffer.
  EXPECT_FALSE(link_.deliver(f.data() + kHdr, 100));
  EXPECT_EQ(link_.counters().drops[drop_idx(port::Drop::kNoRxBuffer)], 1u);

  vhost::LinkStopReply r{};
  const uint64_t z = 0;
  EXPECT_EQ(request(LinkReq::kLinkStop, &z, 8, {}, &r), 0u);
  EXPECT_FALSE(link_.active());
  EXPECT_EQ(r.last_avail[0], 1u);
  EXPECT_EQ(r.last_avail[1], 1u);
  EXPECT_EQ(r.counters.rx_packets, 1u);
  EXPECT_EQ(r.counters.tx_packets, 1u);
  EXPECT_EQ(r.counters.drops[drop_idx(port::Drop::kNoRxBuffer)], 1u);
}

TEST_F(DirectLinkTest, SetUpIsValidated) {
  const uint64_t bad_version = 99;
  EXPECT_NE(request(LinkReq::kLinkProbe, &bad_version, 8), 0u);
  // Start before memory and rings.
  EXPECT_NE(start(), 0u);
  // A ring outside A's memory does not start (hostile-inputs.md item 9).
  ASSERT_EQ(send_mem(), 0u);
  ASSERT_EQ(send_vring(0, *rx_), 0u);
  ASSERT_EQ(send_vring(1, *tx_, /*desc_override=*/0xdead0000), 0u);
  EXPECT_NE(start(), 0u);
  EXPECT_FALSE(link_.active());
  // Queue size not a power of two; an index out of range.
  vhost::LinkVring lv{1, 100, tx_->desc_uva(), tx_->avail_uva(), tx_->used_uva(), 0, 0};
  EXPECT_NE(request(LinkReq::kLinkVring, &lv, sizeof lv), 0u);
  lv = {7, 64, tx_->desc_uva(), tx_->avail_uva(), tx_->used_uva(), 0, 0};
  EXPECT_NE(request(LinkReq::kLinkVring, &lv, sizeof lv), 0u);
  // Flags promise a kick fd that is not there.
  lv = {1, 64, tx_->desc_uva(), tx_->avail_uva(), tx_->used_uva(), 0, vhost::kLinkVringKick};
  EXPECT_NE(request(LinkReq::kLinkVring, &lv, sizeof lv), 0u);
  // A memory table with overlapping regions, or an fd count that does not match.
  struct {
    vhost::LinkMem h;
    vhost::MemRegion r[2];
  } t{};
  t.h.nregions = 2;
  t.r[0] = {0x100000, 1 << 20, 0x7000000000, 0};
  t.r[1] = {0x180000, 1 << 20, 0x7100000000, 0};
  const int fd = mem_.fds()[0];
  EXPECT_NE(request(LinkReq::kLinkMem, &t, sizeof t, {fd, fd}), 0u);
  EXPECT_NE(request(LinkReq::kLinkMem, &t, sizeof t, {fd}), 0u);
  // Still usable: a correct set-up starts.
  ASSERT_EQ(send_mem(), 0u);
  ASSERT_EQ(send_vring(1, *tx_), 0u);
  EXPECT_EQ(start(), 0u);
  EXPECT_TRUE(link_.active());
}

TEST_F(DirectLinkTest, GarbageInAsRingsIsDroppedAndCounted) {
  link_up();
  uint32_t bufs[32], lens[32];
  // A head far above the queue size (item 14).
  tx_->publish(4000);
  EXPECT_EQ(receive(bufs, lens), 0u);
  EXPECT_EQ(link_.counters().drops[drop_idx(port::Drop::kBadDescriptor)], 1u);
  // A chain whose next pointer loops (item 10).
  uint16_t d = tx_->alloc_desc();
  const uint64_t buf = mem_.alloc(64);
  tx_->write_desc(d, buf, 0, kDescFNext, d);
  tx_->publish(d);
  EXPECT_EQ(receive(bufs, lens), 0u);
  EXPECT_EQ(link_.counters().drops[drop_idx(port::Drop::kBadDescriptor)], 2u);
  // A buffer address in no region (item 8), and one running past the region's end (item 7).
  d = tx_->alloc_desc();
  tx_->write_desc(d, 0xdeadbeef000, 200, 0);
  tx_->publish(d);
  const uint16_t d2 = tx_->alloc_desc();
  tx_->write_desc(d2, 0x100000 + (1 << 20) - 16, 200, 0);
  tx_->publish(d2);
  EXPECT_EQ(receive(bufs, lens), 0u);
  EXPECT_EQ(link_.counters().drops[drop_idx(port::Drop::kBadDescriptor)], 4u);
  // A chain shorter than the header plus an Ethernet header; one asking for offloads.
  const auto small = frame(4, 0x11);
  tx_->add_tx(small);
  auto csum = frame(64, 0x22);
  csum[0] = kNetHdrFNeedsCsum;
  tx_->add_tx(csum);
  EXPECT_EQ(receive(bufs, lens), 0u);
  EXPECT_EQ(link_.counters().drops[drop_idx(port::Drop::kBadHeader)], 2u);
  // A good frame still goes through after all that.
  tx_->add_tx(frame(64, 0x33));
  EXPECT_EQ(receive(bufs, lens), 1u);
  // A receive chain the device may not write (read-only descriptor): the receive queue stops.
  const uint16_t ro = rx_->alloc_desc();
  rx_->write_desc(ro, mem_.alloc(2048), 2048, 0);
  rx_->publish(ro);
  const auto f = frame(64, 0x44);
  EXPECT_FALSE(link_.deliver(f.data() + kHdr, 64));
  EXPECT_FALSE(link_.deliver(f.data() + kHdr, 64));
  EXPECT_EQ(link_.counters().drops[drop_idx(port::Drop::kRingBroken)], 2u);
  // The avail index jumping more than a queue ahead (item 11): the transmit queue stops.
  tx_->set_avail_idx(static_cast<uint16_t>(tx_->avail_idx() + 1000));
  EXPECT_EQ(receive(bufs, lens), 0u);
  EXPECT_EQ(receive(bufs, lens), 0u);
  EXPECT_EQ(link_.counters().drops[drop_idx(port::Drop::kRingBroken)], 3u);
  // And B still answers the switch: stop reports the drops.
  vhost::LinkStopReply r{};
  const uint64_t z = 0;
  EXPECT_EQ(request(LinkReq::kLinkStop, &z, 8, {}, &r), 0u);
  EXPECT_EQ(r.counters.drops[drop_idx(port::Drop::kBadDescriptor)], 4u);
  EXPECT_EQ(r.counters.drops[drop_idx(port::Drop::kRingBroken)], 3u);
}

TEST_F(DirectLinkTest, MalformedRequestClosesTheChannel) {
  link_up();
  const uint32_t junk = 0;
  ASSERT_TRUE(sw_.send(0x12345678, vhost::kVersion | vhost::kFlagNeedReply, &junk, 4));
  link_.service();
  EXPECT_FALSE(link_.active());  // unmapped
  EXPECT_FALSE(link_.has_channel());
  std::string err;
  EXPECT_EQ(sw_.read_wait(1000, &err), vhost::ReadStatus::kClosed);
}

}  // namespace
