#pragma once
// A tap device into the host's own network stack (/dev/net/tun, IFF_TAP | IFF_VNET_HDR):
// frames cross with the virtio-net header, so with offloads (TUNSETOFFLOAD) a TSO frame
// from a guest reaches the host stack whole and the host may answer with large frames.
// The device is created if it does not exist (and goes away with the port) or attached if
// it does; the port sets it up (IFF_UP), its addresses are the host's business.
#include <string>

#include "util/fd.h"
#include "wire/wire.h"

namespace vl::wire {

class TapWire final : public Wire {
 public:
  /// `offloads`: ask for checksum and TSO frames both ways (else plain frames only).
  /// `mtu`: set on the device when it opens (0: keep its own).
  TapWire(std::string ifname, bool offloads, uint32_t mtu = 0)
      : name_(std::move(ifname)), want_offloads_(offloads), want_mtu_(mtu) {}
  bool open(std::string* err) override;
  void close() override { fd_.reset(); }
  const WireInfo& info() const override { return info_; }
  const char* type() const override { return "tap"; }
  std::string target() const override { return name_; }
  int rx_fd(uint32_t) const override { return fd_.get(); }
  bool link_up() const override;
  uint32_t recv(uint32_t q, Buf* bufs, uint32_t n) override;
  uint32_t send(uint32_t q, const Buf* bufs, uint32_t n) override;
  void counters(DeviceCounters* out) const override;
  bool send_control(const uint8_t* frame, uint32_t len) override;
  bool has_control_path() const override { return true; }

 private:
  std::string name_;
  bool want_offloads_;
  uint32_t want_mtu_;
  UniqueFd fd_;
  WireInfo info_;
  uint64_t rx_truncated_ = 0, tx_errors_ = 0;  // single writer each (the queue's thread)
  uint64_t tx_control_ = 0, tx_control_errors_ = 0;  // send_control (any thread: atomic adds)
};

}  // namespace vl::wire
