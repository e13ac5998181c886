#pragma once
// A wire of in-memory frames for tests of uplink and tunnel ports, and test frames.
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "ref_frames.h"
#include "virtio/virtio_defs.h"
#include "wire/wire.h"

namespace vl::test {

using ref::Bytes;

/// A wire of in-memory frames: `inbox` is what the device receives, `sent` what it was
/// given; each frame with its 12-byte header first.
class FakeWire final : public wire::Wire {
 public:
  explicit FakeWire(bool offloads) {
    info_.offloads = offloads;
    info_.vnet_hdr = offloads;
    info_.mtu = 1500;
  }
  bool open(std::string*) override { return true; }
  void close() override {}
  const wire::WireInfo& info() const override { return info_; }
  const char* type() const override { return "af-packet"; }
  std::string target() const override { return "fake0"; }
  int rx_fd(uint32_t) const override { return -1; }
  bool link_up() const override { return true; }
  uint32_t recv(uint32_t, wire::Buf* b, uint32_t n) override {
    uint32_t got = 0;
    while (got < n && !inbox.empty()) {
      Bytes f = std::move(inbox.front());
      inbox.pop_front();
      if (f.size() > b[got].cap) continue;
      std::memcpy(b[got].p, f.data(), f.size());
      b[got++].len = static_cast<uint32_t>(f.size());
    }
    return got;
  }
  uint32_t send(uint32_t, const wire::Buf* b, uint32_t n) override {
    if (refuse) return 0;
    for (uint32_t i = 0; i < n; ++i) sent.emplace_back(b[i].p, b[i].p + b[i].len);
    return n;
  }
  bool has_control_path() const override { return true; }
  /// Keeps the frame (without a header) in `control`.
  bool send_control(const uint8_t* f, uint32_t len) override {
    control.emplace_back(f, f + len);
    return !refuse;
  }
  /// Queues `frame` for receipt, after header `h`.
  void receive(const Bytes& frame, const virtio::NetHdr& h = {}) {
    Bytes f(wire::kHdrLen);
    std::memcpy(f.data(), &h, sizeof h);
    f.insert(f.end(), frame.begin(), frame.end());
    inbox.push_back(std::move(f));
  }
  std::deque<Bytes> inbox;
  std::vector<Bytes> sent;
  std::vector<Bytes> control;
  bool refuse = false;

 private:
  wire::WireInfo info_;
};

/// A frame of `len` bytes from 52:54:00:00:00:01 to 52:54:00:00:00:02, of a local
/// experimental ethertype, its payload made from `seed`.
inline Bytes eth_frame(size_t len, uint8_t seed) {
  Bytes f(len);
  const uint8_t macs[12] = {0x52, 0x54, 0, 0, 0, 2, 0x52, 0x54, 0, 0, 0, 1};
  std::memcpy(f.data(), macs, 12);
  f[12] = 0x88;
  f[13] = 0xb5;  // local experimental ethertype
  for (size_t i = 14; i < len; ++i) f[i] = static_cast<uint8_t>(seed + i * 7);
  return f;
}

}  // namespace vl::test
