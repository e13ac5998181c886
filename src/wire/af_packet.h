#pragma once
// A kernel interface through a packet socket (AF_PACKET): frames are received from a
// TPACKET_V3 ring (blocks of frames mapped from the kernel, no system call per frame) and
// sent with sendmmsg (one system call per batch). With offloads the socket carries the
// virtio-net header (PACKET_VNET_HDR), so checksum-offloaded and TSO frames of the host
// (a veth peer's TCP, for one) cross whole. The socket is promiscuous and ignores frames
// the host itself sends on the interface (PACKET_IGNORE_OUTGOING).
#include <string>

#include "util/fd.h"
#include "wire/wire.h"

namespace vl::wire {

class AfPacketWire final : public Wire {
 public:
  AfPacketWire(std::string ifname, bool offloads) : name_(std::move(ifname)), want_offloads_(offloads) {}
  ~AfPacketWire() override { close(); }
  bool open(std::string* err) override;
  void close() override;
  const WireInfo& info() const override { return info_; }
  const char* type() const override { return "af-packet"; }
  std::string target() const override { return name_; }
  int rx_fd(uint32_t) const override { return fd_.get(); }
  bool link_up() const override;
  uint32_t recv(uint32_t q, Buf* bufs, uint32_t n) override;
  uint32_t send(uint32_t q, const Buf* bufs, uint32_t n) override;
  void counters(DeviceCounters* out) const override;
  bool send_control(const uint8_t* frame, uint32_t len) override;
  bool has_control_path() const override { return true; }

  /// Ring geometry: blocks of kBlockSize bytes (a TSO frame of 64 KiB fits in one), and
  /// how long the kernel keeps a block that is not full before handing it over (ms; the
  /// least it takes, TPACKET_V3 hands over whole blocks only).
  static constexpr uint32_t kBlockSize = 1u << 18;
  static constexpr uint32_t kBlocks = 16;
  static constexpr uint32_t kBlockTimeoutMs = 1;

 private:
  std::string name_;
  bool want_offloads_;
  UniqueFd fd_;
  WireInfo info_;
  uint32_t ifindex_ = 0;
  uint8_t* ring_ = nullptr;
  size_t ring_len_ = 0;
  uint32_t block_ = 0;      // the block being read
  uint32_t left_ = 0;       // frames of it not yet read (0: not started)
  uint8_t* next_ = nullptr; // its next frame
  uint64_t rx_truncated_ = 0, rx_bad_ = 0, tx_errors_ = 0;
  uint64_t rx_vlan_restored_ = 0;  // frames whose tag the kernel had taken off
  uint64_t tx_control_ = 0, tx_control_errors_ = 0;  // send_control (any thread: atomic adds)
  mutable uint64_t kernel_packets_ = 0, kernel_drops_ = 0;  // PACKET_STATISTICS resets on read
};

}  // namespace vl::wire
