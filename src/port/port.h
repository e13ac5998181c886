#pragma once
// The narrow interface between ports and the switch datapath: what a PMD thread reads of a
// port (PortDp), the per-reason drop counters, and the quiescence contract.
#include <atomic>
#include <cstdint>

#include "virtio/device_queue.h"
#include "virtio/packed_device_queue.h"

namespace vl::port {

/// Most ports one switch serves; port ids are 0..kMaxPorts-1 (a 64-bit flood mask).
inline constexpr uint32_t kMaxPorts = 64;

/// Why a packet was dropped: the snake_case keys of `ctl stats --json` drops
/// (INTERFACES.md). Counted on the ingress port except where noted.
enum class Drop : uint8_t {
  kNoRxBuffer,     ///< egress port: the guest had no receive buffer posted
  kBadDescriptor,  ///< malformed chain: index, address, direction, indirect table, loop
  kBadHeader,      ///< chain shorter than the virtio-net header plus an Ethernet header
  kTooBig,         ///< egress port: frame above its MTU / buffer; or a chain too fragmented
  kRingBroken,     ///< the queue stopped because its avail index was implausible
  kNoDestination,  ///< bridge/xconnect had no ready port to send to
  kBadCsum,        ///< NEEDS_CSUM not negotiated, or csum_start/csum_offset past the frame
  kBadGso,         ///< gso_type not negotiated or unknown, gso_size 0, unsegmentable headers
  kCount,
};
inline constexpr uint32_t kNumDrops = static_cast<uint32_t>(Drop::kCount);
const char* drop_name(Drop d);

/// Offload work seen on an egress port (keys of `ctl stats --json` "offload"): TSO frames
/// passed through with their metadata, and what was done in software because the port did
/// not negotiate it.
enum class Soft : uint8_t {
  kGsoPassed,    ///< TSO frames delivered whole (the receiver negotiated GUEST_TSO4/6)
  kGsoFrames,    ///< TSO frames segmented in software
  kGsoSegments,  ///< segments those produced
  kCsumFilled,   ///< NEEDS_CSUM frames whose checksum was filled in software
  kCount,
};
inline constexpr uint32_t kNumSoft = static_cast<uint32_t>(Soft::kCount);
const char* soft_name(Soft s);

/// A plain copy of counters, summed over PMD threads for display.
struct CounterSnapshot {
  uint64_t rx_packets = 0, rx_bytes = 0, tx_packets = 0, tx_bytes = 0;
  uint64_t drops[kNumDrops] = {};
  uint64_t soft[kNumSoft] = {};
};

/// Counters of one port as seen by one PMD thread (single writer; read by the control
/// thread with relaxed loads). Direction is the switch's view (INTERFACES.md).
struct PortCounters {
  std::atomic<uint64_t> rx_packets{0}, rx_bytes{0}, tx_packets{0}, tx_bytes{0};
  std::atomic<uint64_t> drops[kNumDrops] = {};
  std::atomic<uint64_t> soft[kNumSoft] = {};
  static void add(std::atomic<uint64_t>& c, uint64_t n) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void drop(Drop d, uint64_t n = 1) { add(drops[static_cast<uint32_t>(d)], n); }
  void soft_add(Soft k, uint64_t n = 1) { add(soft[static_cast<uint32_t>(k)], n); }
  /// Adds these counters to `s` (relaxed reads; the control thread's view).
  void accumulate(CounterSnapshot& s) const {
    s.rx_packets += rx_packets.load(std::memory_order_relaxed);
    s.rx_bytes += rx_bytes.load(std::memory_order_relaxed);
    s.tx_packets += tx_packets.load(std::memory_order_relaxed);
    s.tx_bytes += tx_bytes.load(std::memory_order_relaxed);
    for (uint32_t d = 0; d < kNumDrops; ++d) s.drops[d] += drops[d].load(std::memory_order_relaxed);
    for (uint32_t k = 0; k < kNumSoft; ++k) s.soft[k] += soft[k].load(std::memory_order_relaxed);
  }
};

/// What the datapath reads of a port. Rebuilt by the control thread while the port is
/// paused; a PMD thread may use it only while `active` (acquire) is true.
struct PortDp {
  virtio::DeviceQueue* rxq = nullptr;  ///< the guest's receive queue (we fill it), or null
  virtio::DeviceQueue* txq = nullptr;  ///< the guest's transmit queue (we drain it), or null
  /// The same queues when the front-end negotiated VIRTIO_F_RING_PACKED (then rxq and txq
  /// are null). The datapath picks the ring layout once per burst, not per packet.
  virtio::PackedDeviceQueue* rxq_packed = nullptr;
  virtio::PackedDeviceQueue* txq_packed = nullptr;
  uint32_t hdr_len = 12;               ///< virtio-net header bytes on this port
  bool mrg_rxbuf = false;              ///< mergeable receive buffers negotiated
  uint64_t features = 0;               ///< negotiated virtio features (offloads: offload/)
  uint32_t max_frame = virtio::kMaxFrameLen;  ///< largest frame deliverable (bytes)
  /// The transmit queue has no kick fd (SET_VRING_KICK with the no-fd flag: the front-end
  /// never kicks, vhost-user.rst), so a PMD thread serving it must poll, never sleep.
  bool kickless = false;

  bool has_txq() const { return txq || txq_packed; }
  bool has_rxq() const { return rxq || rxq_packed; }
  /// The transmit queue stopped (a hostile or broken driver).
  bool txq_broken() const { return txq ? txq->broken() : txq_packed && txq_packed->broken(); }
  /// Asks the driver to kick (or not) on its transmit queue (not per packet: per pass).
  void txq_set_kicks(bool on) const {
    if (txq) txq->set_kicks(on);
    else if (txq_packed) txq_packed->set_kicks(on);
  }
  /// New chains on the transmit queue (split: how many; packed: 1 if any), -1 if broken.
  int txq_pending() const { return txq ? txq->pending() : txq_packed ? txq_packed->pending() : 0; }
};

/// Waits until no PMD thread is inside a port's datapath (an RCU-style grace period).
class Quiescer {
 public:
  virtual ~Quiescer() = default;
  virtual void wait_quiescent() = 0;
  /// Tells PMD threads that ports changed (wakes sleeping ones).
  virtual void ports_changed() = 0;
  /// Moves the kick eventfd a sleeping PMD thread waits on for `port` from `old_fd` to
  /// `new_fd` (-1: none). Called before the old fd is closed (epoll keys on the open file,
  /// which the front-end still holds, so it must be removed while our fd number is valid).
  virtual void set_kick_fd(uint32_t port, int old_fd, int new_fd) = 0;
};

}  // namespace vl::port
