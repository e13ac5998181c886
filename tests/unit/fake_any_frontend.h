// A vhost-user front-end for unit tests with split or packed rings, a feature mask and extra
// memory regions (the hostile take_burst and receive-batch suites share it).
#pragma once

#include <sys/eventfd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "fake_frontend.h"
#include "fake_packed_driver.h"
#include "port/vhost_port.h"

namespace vl::test {

inline constexpr uint64_t kExtraGpa = 0x1000000;  // small adjacent regions: straddling buffers
inline constexpr uint64_t kExtraSize = 0x10000;

/// A front-end like Frontend, with split or packed rings (one queue pair), a feature mask
/// (start()), and memory: region 0 of `mem_bytes` at 0, plus `extra` adjacent small regions
/// of kExtraSize from kExtraGpa (buffers that straddle region edges).
struct AnyRingFrontend {
  test::FakeMemory fm;
  bool packed;
  std::vector<std::unique_ptr<FakeVring>> split;
  std::vector<std::unique_ptr<FakePackedRing>> pk;
  std::vector<UniqueFd> kick, call;
  std::unique_ptr<RawPeer> peer;
  std::function<bool()> pump;

  AnyRingFrontend(bool packed_, uint64_t mem_bytes, uint32_t extra = 0) : packed(packed_) {
    fm.add_memfd_region(0x0, mem_bytes);
    for (uint32_t i = 0; i < extra; ++i) fm.add_memfd_region(kExtraGpa + i * kExtraSize, kExtraSize);
    for (uint32_t i = 0; i < 2; ++i) {
      if (packed) pk.push_back(std::make_unique<FakePackedRing>(fm, kNum, 0));
      else split.push_back(std::make_unique<FakeVring>(fm, kNum, 0));
      kick.emplace_back(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
      call.emplace_back(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    }
  }
  template <typename T>
  bool plain(vhost::Req r, const T& v, std::vector<int> fds = {}) {
    EXPECT_TRUE(peer->send(static_cast<uint32_t>(r), vhost::kVersion, &v, sizeof v, std::move(fds)));
    return pump();
  }
  uint64_t get_u64(vhost::Req r) {
    EXPECT_TRUE(peer->send_empty(r));
    EXPECT_TRUE(pump());
    auto rep = peer->recv();
    return rep ? rep->u64() : ~0ull;
  }
  void start(uint64_t drop_features) {
    const uint64_t offered = get_u64(vhost::Req::kGetFeatures);
    const uint64_t proto = get_u64(vhost::Req::kGetProtocolFeatures);
    ASSERT_TRUE(plain(vhost::Req::kSetProtocolFeatures, proto));
    ASSERT_TRUE(peer->send_empty(vhost::Req::kSetOwner));
    ASSERT_TRUE(pump());
    uint64_t f = offered & ~drop_features;
    if (!packed) f &= ~virtio::bit(virtio::kFRingPacked);
    ASSERT_TRUE(plain(vhost::Req::kSetFeatures, f));
    const auto mt = test::mem_table(fm);
    ASSERT_TRUE(peer->send(static_cast<uint32_t>(vhost::Req::kSetMemTable), vhost::kVersion, mt.data(),
                           mt.size(), fm.fds()));
    ASSERT_TRUE(pump());
    for (uint32_t i = 0; i < 2; ++i) {
      ASSERT_TRUE(plain(vhost::Req::kSetVringNum, vhost::VringState{i, kNum}));
      if (packed) {
        ASSERT_TRUE(plain(vhost::Req::kSetVringBase, vhost::VringState{i, virtio::kPackedInitialBase}));
        const FakePackedRing& r = *pk[i];
        ASSERT_TRUE(plain(vhost::Req::kSetVringAddr, vhost::VringAddr{i, 0, r.ring_uva(), r.device_event_uva(),
                                                        r.driver_event_uva(), 0}));
      } else {
        ASSERT_TRUE(plain(vhost::Req::kSetVringBase, vhost::VringState{i, 0}));
        const FakeVring& r = *split[i];
        ASSERT_TRUE(plain(vhost::Req::kSetVringAddr,
                          vhost::VringAddr{i, 0, r.desc_uva(), r.used_uva(), r.avail_uva(), 0}));
      }
      ASSERT_TRUE(plain(vhost::Req::kSetVringKick, uint64_t{i}, {kick[i].get()}));
      ASSERT_TRUE(plain(vhost::Req::kSetVringCall, uint64_t{i}, {call[i].get()}));
    }
    for (uint32_t i = 0; i < 2; ++i) ASSERT_TRUE(plain(vhost::Req::kSetVringEnable, vhost::VringState{i, 1}));
  }
};

/// Connects `fe` to port `p` over a socketpair; fe.pump() runs the port's event handler.
inline bool connect_any(port::VhostPort& p, AnyRingFrontend& fe) { return connect_port(p, fe); }

/// A frame of `len` bytes from MAC ...:01 to ...:02, `tag` in bytes 14-15.
inline std::vector<uint8_t> frame_tagged(uint32_t len, uint32_t tag) {
  std::vector<uint8_t> f = test::make_frame(len, static_cast<uint8_t>(tag));
  const uint8_t d[6] = {0x02, 0, 0, 0, 0, 2}, s[6] = {0x02, 0, 0, 0, 0, 1};
  std::memcpy(f.data(), d, 6);
  std::memcpy(f.data() + 6, s, 6);
  f[14] = static_cast<uint8_t>(tag);
  f[15] = static_cast<uint8_t>(tag >> 8);
  return f;
}

}  // namespace vl::test
