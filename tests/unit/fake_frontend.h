#pragma once
// A vhost-user front-end for unit tests: split rings in fake memory (fake_driver.h),
// speaking raw vhost-user to a back-end in the same thread, in the order QEMU uses; and a
// Quiescer for ports without PMD threads. Shared by the multiqueue and datapath tests.
#include <sys/eventfd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "dp/rx_writers.h"
#include "fake_driver.h"
#include "port/port.h"
#include "port/vhost_port.h"
#include "port/vhost_port.h"
#include "vhost/backend.h"
#include "vhost_peer.h"

namespace vl::test {

using vhost::Req;
using vhost::VringAddr;
using vhost::VringState;
using virtio::bit;

inline constexpr uint32_t kNum = 256;
inline const uint64_t kOffered = vhost::BackendOptions::defaults().features;
inline const uint64_t kOfferedProto = vhost::BackendOptions::defaults().protocol_features;

class NullHost : public vhost::DeviceHost {
 public:
  void pause_datapath() override {}
  void resume_datapath() override {}
};

inline std::vector<uint8_t> mem_table(const FakeMemory& fm) {
  std::vector<vhost::MemRegion> r;
  for (const auto& d : fm.descs()) r.push_back({d.guest_phys_addr, d.memory_size, d.userspace_addr, d.mmap_offset});
  std::vector<uint8_t> p(sizeof(vhost::MemTableHeader) + r.size() * sizeof(vhost::MemRegion));
  const vhost::MemTableHeader h{static_cast<uint32_t>(r.size()), 0};
  std::memcpy(p.data(), &h, sizeof h);
  std::memcpy(p.data() + sizeof h, r.data(), r.size() * sizeof(vhost::MemRegion));
  return p;
}

/// A front-end with `nqp` queue pairs of split rings in fake memory, speaking raw
/// vhost-user to a back-end through `pump` (which lets the back-end read).
struct Frontend {
  FakeMemory fm;
  std::vector<std::unique_ptr<FakeVring>> rings;
  std::vector<UniqueFd> kick, call;
  std::unique_ptr<RawPeer> peer;
  std::function<bool()> pump;

  explicit Frontend(uint32_t nqp) {
    fm.add_memfd_region(0x0, 4 << 20);
    for (uint32_t i = 0; i < 2 * nqp; ++i) {
      rings.push_back(std::make_unique<FakeVring>(fm, kNum, 0));
      kick.emplace_back(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
      call.emplace_back(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    }
  }
  template <typename T>
  bool plain(Req r, const T& v, std::vector<int> fds = {}) {
    EXPECT_TRUE(peer->send(static_cast<uint32_t>(r), vhost::kVersion, &v, sizeof v, std::move(fds)));
    return pump();
  }
  /// NEED_REPLY: the REPLY_ACK value, or nullopt if the connection failed.
  template <typename T>
  std::optional<uint64_t> acked(Req r, const T& v) {
    EXPECT_TRUE(peer->send(static_cast<uint32_t>(r), vhost::kVersion | vhost::kFlagNeedReply, &v,
                           sizeof v, {}));
    if (!pump()) return std::nullopt;
    auto rep = peer->recv();
    if (!rep) return std::nullopt;
    return rep->u64();
  }
  uint64_t get_u64(Req r) {
    EXPECT_TRUE(peer->send_empty(r));
    EXPECT_TRUE(pump());
    auto rep = peer->recv();
    return rep ? rep->u64() : ~0ull;
  }
  /// What QEMU's vhost_user_backend_init + vhost_dev_start send for one vhost_dev (queue
  /// pair `qp`): the handshake for every pair, the one-time requests only for the first.
  void start_pair(uint32_t qp, bool enable = true) {
    const uint64_t offered = get_u64(Req::kGetFeatures);
    ASSERT_EQ(offered & ~bit(virtio::kNetFMq), kOffered & ~bit(virtio::kNetFMq));
    ASSERT_EQ(virtio::has(offered, virtio::kNetFMq), rings.size() > 2);
    ASSERT_EQ(get_u64(Req::kGetProtocolFeatures), kOfferedProto);
    ASSERT_TRUE(plain(Req::kSetProtocolFeatures, kOfferedProto));
    if (qp == 0) {
      ASSERT_GE(get_u64(Req::kGetQueueNum), rings.size() / 2);
      ASSERT_TRUE(peer->send_empty(Req::kSetOwner));
      ASSERT_TRUE(pump());
    }
    ASSERT_TRUE(plain(Req::kSetFeatures, offered & ~bit(virtio::kFRingPacked)));
    if (qp == 0) {
      const auto mt = mem_table(fm);
      ASSERT_TRUE(peer->send(static_cast<uint32_t>(Req::kSetMemTable), vhost::kVersion, mt.data(),
                             mt.size(), fm.fds()));
      ASSERT_TRUE(pump());
    }
    for (uint32_t i = 2 * qp; i < 2 * qp + 2; ++i) {
      ASSERT_TRUE(plain(Req::kSetVringNum, VringState{i, kNum}));
      ASSERT_TRUE(plain(Req::kSetVringBase, VringState{i, 0}));
      const FakeVring& r = *rings[i];
      ASSERT_TRUE(plain(Req::kSetVringAddr,
                        VringAddr{i, 0, r.desc_uva(), r.used_uva(), r.avail_uva(), 0}));
      ASSERT_TRUE(plain(Req::kSetVringKick, uint64_t{i}, {kick[i].get()}));
      ASSERT_TRUE(plain(Req::kSetVringCall, uint64_t{i}, {call[i].get()}));
    }
    if (enable) {
      for (uint32_t i = 2 * qp; i < 2 * qp + 2; ++i)
        ASSERT_TRUE(plain(Req::kSetVringEnable, VringState{i, 1}));
    }
  }
};

/// The configuration of port `i` in the forwarding tests' rigs: named 'a' + i, one queue
/// pair, MTU 1500, no socket file (the front-end connects over a socketpair).
inline port::PortConfig rig_port_config(uint32_t i) {
  port::PortConfig c;
  c.name = std::string(1, static_cast<char>('a' + i));
  c.path = "/nonexistent";
  c.max_queues = 1;
  c.mtu = 1500;
  return c;
}

/// Connects front-end `fe` (a Frontend or an AnyRingFrontend: anything with `peer` and
/// `pump`) to port `p` over a socketpair, the port's back-end pumped in the caller's
/// thread. False if the socketpair cannot be made.
template <class Fe>
inline bool connect_port(port::VhostPort& p, Fe& fe) {
  UniqueFd ours, peer;
  if (!make_socketpair(&ours, &peer)) return false;
  p.backend_for_link().attach(std::move(ours));
  fe.peer = std::make_unique<RawPeer>(std::move(peer));
  port::VhostPort* pp = &p;
  fe.pump = [pp] {
    pp->on_event();
    return pp->backend().connected();
  };
  return true;
}

class FakeQuiescer : public port::Quiescer {
 public:
  explicit FakeQuiescer(uint32_t threads) : threads_(threads) {}
  void wait_quiescent() override {}
  void ports_changed() override {}
  void set_kick_fd(uint32_t, uint32_t, int, int) override {}
  void assign_rx_writers(port::PortDp& d, uint32_t rotation) const override {
    dp::assign_rx_writers(d, threads_, rotation);
  }

 private:
  uint32_t threads_;
};

}  // namespace vl::test
