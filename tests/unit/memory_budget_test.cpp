// The switch-wide cap on guest memory (vhost/memory_budget.h, --max-total-guest-memory;
// docs/reference/hostile-inputs.md item 22): shares taken and given back, a replaced table
// never counted twice, and back-ends sharing one budget: the table that does not fit is
// refused (an error reply with REPLY_ACK, the connection closed without), counted, and the
// other connections keep theirs; once one disconnects, the refused one fits.
#include "vhost/memory_budget.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "fake_driver.h"
#include "vhost/backend.h"
#include "vhost_peer.h"

namespace vl {
namespace {

using vhost::MemoryBudget;

TEST(MemoryBudget, SharesAreTakenAndGivenBack) {
  MemoryBudget b(100);
  MemoryBudget::Share none, s1, s2, s3;
  ASSERT_TRUE(b.take(60, none, &s1));
  ASSERT_TRUE(b.take(40, none, &s2));
  EXPECT_EQ(b.used(), 100u);
  EXPECT_FALSE(b.take(1, none, &s3));
  EXPECT_EQ(b.refused(), 1u);
  EXPECT_EQ(s3.bytes(), 0u);
  // A table replacing s1's: s1's 60 count as given back, so 60 fit (not 120 counted).
  MemoryBudget::Share r1;
  ASSERT_TRUE(b.take(60, s1, &r1));
  s1 = std::move(r1);  // the old share goes as the new table takes its place
  EXPECT_EQ(b.used(), 100u);
  EXPECT_FALSE(b.take(61, s1, &r1));  // 40 + 61 > 100
  EXPECT_EQ(b.refused(), 2u);
  EXPECT_EQ(b.used(), 100u);  // a refused take holds nothing
  s2 = {};                    // a disconnect
  EXPECT_EQ(b.used(), 60u);
  EXPECT_TRUE(b.take(40, none, &s3));
  EXPECT_FALSE(b.take(~uint64_t{0}, none, &r1));  // no overflow in the check
  {
    MemoryBudget::Share gone;
    MemoryBudget::Share empty;
    ASSERT_FALSE(b.take(1, empty, &gone));
  }
  s1 = {};
  s3 = {};
  EXPECT_EQ(b.used(), 0u);
}

struct NullHost : vhost::DeviceHost {
  void pause_datapath() override {}
  void resume_datapath() override {}
};

/// One connection: a back-end sharing `budget`, its raw peer and a memfd table of `bytes`.
struct Conn {
  NullHost host;
  std::unique_ptr<vhost::Backend> be;
  std::unique_ptr<test::RawPeer> peer;
  std::string why;
  bool reply_ack;

  Conn(MemoryBudget* budget, bool ack) : reply_ack(ack) {
    auto o = vhost::BackendOptions::defaults();
    o.memory_budget = budget;
    UniqueFd a, b;
    EXPECT_TRUE(test::make_socketpair(&a, &b));
    be = std::make_unique<vhost::Backend>(&host, o);
    be->attach(std::move(a));
    peer = std::make_unique<test::RawPeer>(std::move(b));
    if (reply_ack) {
      EXPECT_TRUE(peer->send_u64(vhost::Req::kSetProtocolFeatures,
                                 uint64_t{1} << vhost::kProtoReplyAck));
      EXPECT_TRUE(be->on_readable(&why)) << why;
    }
  }
  /// Sends a table of one memfd region of `bytes` with NEED_REPLY: the ack's value (0
  /// without REPLY_ACK when the back-end took it), or nullopt when the back-end closed the
  /// connection.
  std::optional<uint64_t> set_table(uint64_t bytes, uint64_t gpa = 0) {
    test::FakeMemory fm;
    fm.add_memfd_region(gpa, bytes);
    const auto d = fm.descs()[0];
    std::vector<uint8_t> p(sizeof(vhost::MemTableHeader) + sizeof(vhost::MemRegion));
    const vhost::MemTableHeader h{1, 0};
    const vhost::MemRegion r{d.guest_phys_addr, d.memory_size, d.userspace_addr, d.mmap_offset};
    std::memcpy(p.data(), &h, sizeof h);
    std::memcpy(p.data() + sizeof h, &r, sizeof r);
    EXPECT_TRUE(peer->send(static_cast<uint32_t>(vhost::Req::kSetMemTable),
                           vhost::kVersion | vhost::kFlagNeedReply, p.data(), p.size(), fm.fds()));
    why.clear();
    if (!be->on_readable(&why)) return std::nullopt;
    if (!reply_ack) return 0;
    auto rep = peer->recv();
    if (!rep) return std::nullopt;
    return rep->u64();
  }
  uint64_t mapped() const { return be->memory() ? be->memory()->mapped_bytes() : 0; }
};

constexpr uint64_t kMiB = 1 << 20;

TEST(MemoryBudget, ThirdConnectionRefusedUntilOneLeaves) {
  MemoryBudget budget(5 * kMiB / 2);  // fits two tables of 1 MiB, and half of a third
  Conn a(&budget, true), b(&budget, true), c(&budget, true);
  EXPECT_EQ(a.set_table(kMiB), 0u) << a.why;
  EXPECT_EQ(b.set_table(kMiB), 0u) << b.why;
  const int fds = test::count_open_fds();
  EXPECT_EQ(c.set_table(kMiB), 1u);  // refused: an error reply, the connection stays
  EXPECT_EQ(test::count_open_fds(), fds);  // the refused table's fd closed
  EXPECT_EQ(c.be->memory(), nullptr);
  EXPECT_TRUE(c.be->connected());
  EXPECT_EQ(c.be->mem_tables_refused(), 1u);
  EXPECT_EQ(budget.refused(), 1u);
  EXPECT_EQ(budget.used(), 2 * kMiB);

  // a replaces its table by one of the same size: its old share counts as given back.
  EXPECT_EQ(a.set_table(kMiB, 0x100000000ull), 0u) << a.why;
  EXPECT_EQ(budget.used(), 2 * kMiB);
  EXPECT_EQ(a.mapped(), kMiB);
  // A larger one does not fit (1 + 2 > 2.5 MiB): refused, a keeps the old table.
  EXPECT_EQ(a.set_table(2 * kMiB), 1u);
  EXPECT_EQ(a.mapped(), kMiB);
  EXPECT_EQ(budget.used(), 2 * kMiB);
  EXPECT_EQ(budget.refused(), 2u);

  // b disconnects: its share is given back and c's table fits.
  b.be->disconnect();
  EXPECT_EQ(budget.used(), kMiB);
  EXPECT_EQ(c.set_table(kMiB), 0u) << c.why;
  EXPECT_EQ(budget.used(), 2 * kMiB);
  EXPECT_EQ(c.mapped(), kMiB);

  // RESET_OWNER unmaps too.
  ASSERT_TRUE(a.peer->send_empty(vhost::Req::kResetOwner));
  ASSERT_TRUE(a.be->on_readable(&a.why)) << a.why;
  EXPECT_EQ(budget.used(), kMiB);
  c.be.reset();  // a back-end destroyed with its table gives its share back
  EXPECT_EQ(budget.used(), 0u);
}

TEST(MemoryBudget, RefusalWithoutReplyAckClosesOnlyThatConnection) {
  MemoryBudget budget(kMiB);
  Conn a(&budget, false), c(&budget, false);
  EXPECT_EQ(a.set_table(kMiB), 0u) << a.why;
  EXPECT_EQ(a.mapped(), kMiB);
  EXPECT_EQ(c.set_table(kMiB), std::nullopt);
  EXPECT_NE(c.why.find("--max-total-guest-memory"), std::string::npos) << c.why;
  EXPECT_EQ(c.be->memory(), nullptr);
  EXPECT_EQ(budget.refused(), 1u);
  EXPECT_EQ(a.mapped(), kMiB);
}

}  // namespace
}  // namespace vl
