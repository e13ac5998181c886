// Hardening against hostile front-ends and ports (issue 8, tests/hostile/README.md "open
// issues"): the MAC table's eviction rule and keyed hash, the per-connection cap on mapped
// guest memory and mapping from the region's page, replies a front-end never reads,
// RESET_OWNER's acknowledgement, and the socket-file settings.
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <vector>

#include "app/config.h"
#include "dp/fdb.h"
#include "fake_driver.h"
#include "vhost/backend.h"
#include "vhost_peer.h"

namespace vl {
namespace {

using dp::Fdb;
using dp::Mac;

// ------------------------------------------------------------------------------ MAC table

constexpr uint64_t kKey = 0x5eed;

// The attack the hostile suite found: a port floods source MACs into a victim's bucket.
// Here the table has one bucket, so every MAC collides whatever the key.
TEST(FdbHardening, FloodDoesNotEvictFreshEntriesOfOtherPorts) {
  Fdb f(1, Fdb::kDefaultMaxPerPort, kKey);
  ASSERT_TRUE(f.learn(0x02000000000aull, 0, 100));
  ASSERT_TRUE(f.learn(0x02000000000bull, 1, 100));
  for (uint32_t i = 0; i < 40; ++i) f.learn(0x020000001000ull + i, 2, 100 + i / 8);
  EXPECT_EQ(f.lookup(0x02000000000aull), 0u);
  EXPECT_EQ(f.lookup(0x02000000000bull), 1u);
  EXPECT_EQ(f.port_entries(2), Fdb::kSlots - 2);  // the attacker churns its own entries
  EXPECT_EQ(f.lookup(0x020000001000ull + 39), 2u);  // ...and still learns (its newest)
}

TEST(FdbHardening, StaleEntriesOfOtherPortsAreEvicted) {
  Fdb f(1, Fdb::kDefaultMaxPerPort, kKey);
  ASSERT_TRUE(f.learn(0x02000000000aull, 0, 100));
  for (uint32_t i = 0; i < Fdb::kSlots - 1; ++i) ASSERT_TRUE(f.learn(0x020000001000ull + i, 1 + i, 105));
  // Port 9 is new in this bucket; the only entry not seen for kFreshS seconds is port 0's.
  EXPECT_FALSE(f.learn(0x020000002000ull, 9, 100 + Fdb::kFreshS - 1));
  EXPECT_EQ(f.declined(), 1u);
  EXPECT_TRUE(f.learn(0x020000002000ull, 9, 100 + Fdb::kFreshS));
  EXPECT_EQ(f.lookup(0x02000000000aull), Fdb::kNoPort);
  EXPECT_EQ(f.lookup(0x020000002000ull), 9u);
}

// One port filled the bucket before the victim came: it holds more than half, so its
// oldest entry makes room, and the victim then stays.
TEST(FdbHardening, ABucketHeldByOnePortYieldsToANewcomer) {
  Fdb f(1, Fdb::kDefaultMaxPerPort, kKey);
  for (uint32_t i = 0; i < Fdb::kSlots; ++i) ASSERT_TRUE(f.learn(0x020000001000ull + i, 2, 100 + i));
  EXPECT_TRUE(f.learn(0x02000000000aull, 0, 108));
  EXPECT_EQ(f.lookup(0x020000001000ull), Fdb::kNoPort);  // port 2's oldest
  for (uint32_t i = 0; i < 40; ++i) f.learn(0x020000003000ull + i, 2, 108);
  EXPECT_EQ(f.lookup(0x02000000000aull), 0u);
  EXPECT_EQ(f.port_entries(0), 1u);
  EXPECT_EQ(f.port_entries(2), Fdb::kSlots - 1);
}

TEST(FdbHardening, PerPortLimit) {
  Fdb f(1024, 3, kKey);
  uint32_t learned = 0;
  for (uint32_t i = 0; i < 10; ++i) learned += f.learn(0x020000000100ull + i * 7919, 4, 10);
  EXPECT_LE(f.port_entries(4), 3u);
  EXPECT_EQ(f.port_entries(4), static_cast<uint32_t>(f.entries(10).size()));
  EXPECT_GE(learned, 3u);
  EXPECT_GT(f.declined(), 0u);
  EXPECT_TRUE(f.learn(0x02000000aaaaull, 5, 10));  // other ports are not affected
  f.flush_port(4);
  EXPECT_EQ(f.port_entries(4), 0u);
  EXPECT_TRUE(f.learn(0x02000000bbbbull, 4, 11));
  EXPECT_EQ(f.port_entries(4), 1u);
}

// Found by fuzz_packet (fuzz/regressions/fuzz_packet/port_limit_bypassed_by_moves): a port
// at its limit took more entries by claiming MACs learned on other ports (moves).
TEST(FdbHardening, PerPortLimitHoldsForMoves) {
  Fdb f(1024, 2, kKey);
  for (uint32_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(f.learn(0x020000000100ull + i, 1, 10));
    ASSERT_TRUE(f.learn(0x020000000110ull + i, 2, 10));
  }
  ASSERT_TRUE(f.learn(0x020000000200ull, 3, 10));
  ASSERT_TRUE(f.learn(0x020000000201ull, 3, 10));
  for (uint32_t i = 0; i < 2; ++i) {  // port 3, at its limit, claims the others' MACs
    EXPECT_FALSE(f.learn(0x020000000100ull + i, 3, 11));
    EXPECT_FALSE(f.learn(0x020000000110ull + i, 3, 11));
  }
  EXPECT_EQ(f.port_entries(3), 2u);
  EXPECT_EQ(f.lookup(0x020000000100ull), 1u);  // still on port 1: the move was declined
  EXPECT_EQ(f.lookup(0x020000000111ull), 2u);
  EXPECT_EQ(f.declined(), 4u);
  f.flush_port(3);  // below the limit again: a move is a move
  EXPECT_TRUE(f.learn(0x020000000100ull, 3, 12));
  EXPECT_EQ(f.port_entries(1), 1u);
  EXPECT_EQ(f.port_entries(3), 1u);
}

TEST(FdbHardening, CountsFollowMovesAgingAndFlushes) {
  Fdb f(64, Fdb::kDefaultMaxPerPort, kKey);
  for (uint32_t i = 0; i < 100; ++i) f.learn(0x020000000000ull + i, i % 4, 10);
  for (uint32_t i = 0; i < 20; ++i) f.learn(0x020000000000ull + i, 7, 20);  // moves
  f.age(25, 10);  // removes everything last seen at 10
  const auto e = f.entries(25);
  EXPECT_EQ(f.port_entries(7), static_cast<uint32_t>(e.size()));
  for (uint32_t p = 0; p < 4; ++p) EXPECT_EQ(f.port_entries(p), 0u);
  f.flush_port(7);
  EXPECT_EQ(f.port_entries(7), 0u);
  EXPECT_TRUE(f.entries(25).empty());
}

// The bucket of a MAC depends on the table's key: two tables with random keys spread the
// same MACs differently, two with the same key identically.
TEST(FdbHardening, HashIsKeyed) {
  Fdb a(1u << 16), b(1u << 16), c(1u << 16, Fdb::kDefaultMaxPerPort, kKey),
      d(1u << 16, Fdb::kDefaultMaxPerPort, kKey);
  uint32_t differ = 0;
  for (Mac m = 0x020000000000ull; m < 0x020000000000ull + 64; ++m) {
    differ += a.bucket_of(m) != b.bucket_of(m);
    EXPECT_EQ(c.bucket_of(m), d.bucket_of(m));
  }
  EXPECT_GT(differ, 32u);
  // The old public multiply-shift's collisions for one bucket do not collide any more.
  std::set<uint32_t> buckets;
  uint32_t found = 0;
  for (Mac m = 0x020000000000ull; found < 16; ++m) {
    if ((((m * 0x9e3779b97f4a7c15ull) >> 40) & 0xffff) == 0x1234) {
      buckets.insert(a.bucket_of(m));
      ++found;
    }
  }
  EXPECT_GT(buckets.size(), 8u);
}

// ------------------------------------------------------------------------ guest memory

TEST(GuestMemoryHardening, RegionIsMappedFromItsOffsetsPage) {
  const int fd = memfd_create("hardening", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  constexpr uint64_t kOff = (1ull << 40) + 0x100;  // 1 TiB into a sparse memfd
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(kOff + 8192)), 0);
  ASSERT_EQ(pwrite(fd, "virtlink", 8, static_cast<off_t>(kOff)), 8);
  virtio::GuestMemory gm;
  const virtio::MemRegionDesc r{0x1000, 4096, 0x7f0000001000ull, kOff};
  std::string err;
  ASSERT_TRUE(gm.build(&r, &fd, 1, &err)) << err;
  EXPECT_EQ(gm.mapped_bytes(), 8192u);  // 0x100 + 4096 bytes, page-rounded; not 1 TiB
  uint64_t contig;
  const uint8_t* p = gm.translate(0x1000, 8, &contig);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(std::memcmp(p, "virtlink", 8), 0);
  close(fd);
}

TEST(GuestMemoryHardening, CapCountsEveryRegion) {
  test::FakeMemory fm;
  fm.add_memfd_region(0x0, 1 << 20);
  fm.add_memfd_region(0x100000, 1 << 20);
  const auto d = fm.descs();
  const auto f = fm.fds();
  std::string err;
  virtio::GuestMemory a;
  EXPECT_FALSE(a.build(d.data(), f.data(), 2, &err, (2u << 20) - 1));
  EXPECT_NE(err.find("allowed per connection"), std::string::npos) << err;
  EXPECT_EQ(a.region_count(), 0u);
  virtio::GuestMemory b;
  EXPECT_TRUE(b.build(d.data(), f.data(), 2, &err, 2u << 20)) << err;
  EXPECT_EQ(b.mapped_bytes(), 2u << 20);
}

// ------------------------------------------------------------------------------- back-end

struct NullHost : vhost::DeviceHost {
  void pause_datapath() override {}
  void resume_datapath() override {}
};

class BackendHardening : public ::testing::Test {
 protected:
  void start(vhost::BackendOptions o = vhost::BackendOptions::defaults()) {
    UniqueFd a, b;
    ASSERT_TRUE(test::make_socketpair(&a, &b));
    be = std::make_unique<vhost::Backend>(&host, o);
    be->attach(std::move(a));
    peer = std::make_unique<test::RawPeer>(std::move(b));
  }
  bool pump() {
    why.clear();
    return be->on_readable(&why);
  }
  std::optional<uint64_t> acked(vhost::Req r, const void* p, size_t len, std::vector<int> fds = {}) {
    EXPECT_TRUE(peer->send(static_cast<uint32_t>(r), vhost::kVersion | vhost::kFlagNeedReply, p, len, fds));
    if (!pump()) return std::nullopt;
    auto rep = peer->recv();
    if (!rep) return std::nullopt;
    return rep->u64();
  }
  void negotiate_reply_ack() {
    const uint64_t pf = uint64_t{1} << vhost::kProtoReplyAck;
    ASSERT_TRUE(peer->send_u64(vhost::Req::kSetProtocolFeatures, pf));
    ASSERT_TRUE(pump()) << why;
  }
  NullHost host;
  std::unique_ptr<vhost::Backend> be;
  std::unique_ptr<test::RawPeer> peer;
  std::string why;
};

// vhost-user.rst REPLY_ACK: every request with NEED_REPLY gets its ack, RESET_OWNER too
// (it clears the negotiated protocol features, the ack is still due).
TEST_F(BackendHardening, ResetOwnerWithNeedReplyIsAcked) {
  start();
  negotiate_reply_ack();
  EXPECT_EQ(acked(vhost::Req::kResetOwner, nullptr, 0), 0u) << why;
  EXPECT_EQ(be->protocol_features(), 0u);
  EXPECT_TRUE(peer->nothing_to_read());
}

TEST_F(BackendHardening, MemoryTableOverTheCapIsRefused) {
  auto o = vhost::BackendOptions::defaults();
  o.max_mapped_bytes = 1 << 20;
  start(o);
  negotiate_reply_ack();
  test::FakeMemory fm;
  fm.add_memfd_region(0x0, 1 << 20);
  fm.add_memfd_region(0x100000, 4096);
  std::vector<uint8_t> p(sizeof(vhost::MemTableHeader) + 2 * sizeof(vhost::MemRegion));
  const vhost::MemTableHeader h{2, 0};
  std::memcpy(p.data(), &h, sizeof h);
  uint32_t i = 0;
  for (const auto& d : fm.descs()) {
    const vhost::MemRegion r{d.guest_phys_addr, d.memory_size, d.userspace_addr, d.mmap_offset};
    std::memcpy(p.data() + sizeof h + i++ * sizeof r, &r, sizeof r);
  }
  const int base = test::count_open_fds();
  EXPECT_EQ(acked(vhost::Req::kSetMemTable, p.data(), p.size(), fm.fds()), 1u);
  EXPECT_EQ(be->memory(), nullptr);
  EXPECT_EQ(test::count_open_fds(), base);
  // One region alone fits.
  const vhost::MemTableHeader h1{1, 0};
  std::memcpy(p.data(), &h1, sizeof h1);
  p.resize(sizeof h1 + sizeof(vhost::MemRegion));
  EXPECT_EQ(acked(vhost::Req::kSetMemTable, p.data(), p.size(), {fm.fds()[0]}), 0u) << why;
  ASSERT_NE(be->memory(), nullptr);
  EXPECT_EQ(be->memory()->mapped_bytes(), 1u << 20);
}

// A front-end that never reads its replies: once its socket buffer is full the back-end
// drops the connection at once instead of waiting (it used to wait 1 s per reply on the
// control thread, which serves every port and `ctl`).
TEST_F(BackendHardening, UnreadRepliesDropTheConnectionWithoutWaiting) {
  start();
  uint64_t worst_ns = 0;
  bool dropped = false;
  for (int round = 0; round < 20000 && !dropped; ++round) {
    for (int k = 0; k < 32; ++k) ASSERT_TRUE(peer->send_empty(vhost::Req::kGetFeatures));
    timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    dropped = !pump();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const uint64_t ns = static_cast<uint64_t>((t1.tv_sec - t0.tv_sec) * 1000000000ll + (t1.tv_nsec - t0.tv_nsec));
    worst_ns = std::max(worst_ns, ns);
  }
  ASSERT_TRUE(dropped);
  EXPECT_EQ(why, "could not send a reply");
  EXPECT_LT(worst_ns, 200'000'000u) << "one call blocked for " << worst_ns / 1000000 << " ms";
}

// -------------------------------------------------------------------------------- config

TEST(ConfigHardening, SocketModeParsing) {
  EXPECT_EQ(app::parse_socket_mode("0600"), 0600u);
  EXPECT_EQ(app::parse_socket_mode("660"), 0660u);
  EXPECT_EQ(app::parse_socket_mode("0777"), 0777u);
  EXPECT_FALSE(app::parse_socket_mode("0800"));
  EXPECT_FALSE(app::parse_socket_mode("1777"));
  EXPECT_FALSE(app::parse_socket_mode(""));
  EXPECT_FALSE(app::parse_socket_mode("rw"));
}

TEST(ConfigHardening, SocketKeysSwitchWideAndPerPort) {
  char path[] = "/tmp/vl-hardening-XXXXXX.toml";
  const int fd = mkstemps(path, 5);
  ASSERT_GE(fd, 0);
  const std::string toml = R"(
socket_mode = 0o660
socket_group = "nogroup"
max_guest_memory_gib = 64
mac_table_buckets = 16
mac_limit = 100
[[port]]
name = "a"
path = "/tmp/a.sock"
[[port]]
name = "b"
path = "/tmp/b.sock"
socket_mode = 0o600
socket_owner = "nobody"
socket_group = "root"
max_guest_memory_gib = 2
)";
  ASSERT_EQ(write(fd, toml.data(), toml.size()), static_cast<ssize_t>(toml.size()));
  close(fd);
  app::SwitchConfig cfg;
  std::string err;
  ASSERT_TRUE(app::load_toml(path, &cfg, &err)) << err;
  unlink(path);
  app::apply_port_defaults(&cfg);
  ASSERT_EQ(cfg.ports.size(), 2u);
  EXPECT_EQ(cfg.ports[0].socket_mode, 0660u);
  EXPECT_EQ(cfg.ports[0].socket_owner, "");
  EXPECT_EQ(cfg.ports[0].socket_group, "nogroup");
  EXPECT_EQ(cfg.ports[0].max_guest_memory, 64ull << 30);
  EXPECT_EQ(cfg.ports[1].socket_mode, 0600u);
  EXPECT_EQ(cfg.ports[1].socket_owner, "nobody");
  EXPECT_EQ(cfg.ports[1].socket_group, "root");
  EXPECT_EQ(cfg.ports[1].max_guest_memory, 2ull << 30);
  EXPECT_EQ(cfg.fdb_buckets, 16u);
  EXPECT_EQ(cfg.mac_limit, 100u);
  // A port without settings keeps the defaults: 0600, our user and group, 1 TiB.
  app::SwitchConfig plain;
  plain.ports.push_back(*app::parse_port_spec("c=vhost-user:/tmp/c.sock", &err));
  app::apply_port_defaults(&plain);
  EXPECT_EQ(plain.ports[0].socket_mode, 0600u);
  EXPECT_TRUE(plain.ports[0].socket_owner.empty());
  EXPECT_EQ(plain.ports[0].max_guest_memory, 1ull << 40);
}

}  // namespace
}  // namespace vl
