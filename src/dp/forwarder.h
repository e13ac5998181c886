#pragma once
// The per-PMD-thread forwarding engine: drains one port's transmit queue in a burst,
// classifies each frame (L2 bridge or cross-connect), gathers frames per output port and
// delivers each gathered group with one used-ring update and at most one notification.
//
// Copies: a frame is copied once, from the sender's TX buffer (guest memory) straight into
// the receiver's RX buffer (guest memory), by virtio::deliver_frame. A flooded frame is
// copied once per receiving port. Nothing else copies packet data; the only other bytes
// read are the virtio-net header and the 12 bytes of MAC addresses, into locals.
#include <atomic>
#include <cstdint>

#include "dp/fdb.h"
#include "port/port.h"
#include "port/vhost_port.h"
#include "virtio/net_copy.h"

namespace vl::dp {

enum class ForwardMode : uint8_t { kBridge, kXconnect };

/// Largest burst a PMD thread takes from one queue (packets).
inline constexpr uint32_t kMaxBurst = 64;

/// State shared by every PMD thread; set up before the threads start.
struct SwitchTables {
  ForwardMode mode = ForwardMode::kBridge;
  port::VhostPort* ports[port::kMaxPorts] = {};
  uint32_t nports = 0;
  uint32_t xc_peer[port::kMaxPorts];  ///< cross-connect partner, or kNoPeer
  Fdb* fdb = nullptr;
  std::atomic<uint32_t> now_s{0};  ///< coarse clock for MAC learning (seconds)
  uint32_t burst = 32;
  /// Bumped by the control thread whenever a port's datapath view changes.
  std::atomic<uint64_t> ports_gen{0};
  static constexpr uint32_t kNoPeer = 0xffffffff;
};

class Forwarder {
 public:
  explicit Forwarder(SwitchTables* t) : t_(t) {}
  Forwarder(const Forwarder&) = delete;

  /// Drains up to one burst from port `in`'s transmit queue and forwards it.
  /// Returns the number of descriptor chains taken from the queue.
  uint32_t poll(uint32_t in);

  /// Counters of `port` as seen by this thread.
  const port::PortCounters& counters(uint32_t port) const { return counters_[port]; }

 private:
  struct Pkt {
    virtio::TxFrame f;
    uint16_t head;
  };
  void enqueue(uint32_t out, uint32_t pkt) {
    if (!outn_[out]) touched_ |= uint64_t{1} << out;
    outq_[out][outn_[out]++] = static_cast<uint8_t>(pkt);
  }
  void flood(uint32_t in, uint32_t pkt);
  void flush(uint32_t in);

  SwitchTables* t_;
  virtio::SegmentArena arena_;    // segments of the frames taken in this burst
  virtio::SegmentArena scratch_;  // segments of the receive buffers being filled
  Pkt pkts_[kMaxBurst];
  uint8_t outq_[port::kMaxPorts][kMaxBurst];
  uint8_t outn_[port::kMaxPorts] = {};
  uint64_t touched_ = 0;
  port::PortCounters counters_[port::kMaxPorts];
};

}  // namespace vl::dp
