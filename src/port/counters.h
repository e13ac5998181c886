#pragma once
// A port's counters as the datapath keeps them (one copy per PMD thread, single writer)
// and the drop reasons they count: the `ctl stats --json` keys (INTERFACES.md).
#include <atomic>
#include <cstdint>

#include "offload/work_counters.h"

namespace vl::port {

/// Most ports one switch serves; port ids are 0..kMaxPorts-1 (a 64-bit flood mask).
inline constexpr uint32_t kMaxPorts = 64;
/// Most queue pairs of one port (vhost::kMaxQueuePairs) and most PMD threads of a switch.
inline constexpr uint32_t kMaxQueuePairs = 8;
inline constexpr uint32_t kMaxPmdThreads = 16;

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
  kHandoffFull,    ///< egress port: the handoff ring to its queue's writer thread was full
  /// egress port: its next receive buffer was too short for any frame (below the
  /// virtio-net header; hostile-inputs.md item 21): returned unused, the frame dropped
  kShortRxBuffer,
  /// a frame of a VLAN its port does not carry (a tagged frame on an access port, a VLAN
  /// not in a trunk's list, an untagged frame on a trunk without a native VLAN), or one its
  /// cross-connected peer does not carry (dp/vlan.h)
  kVlanNotAllowed,
  /// a frame whose source MAC its port's port security does not allow (dp/l2_rules.h)
  kSourceNotAllowed,
  kCount,
};
inline constexpr uint32_t kNumDrops = static_cast<uint32_t>(Drop::kCount);
const char* drop_name(Drop d);

/// A plain copy of counters, summed over PMD threads for display.
struct CounterSnapshot {
  uint64_t rx_packets = 0, rx_bytes = 0, tx_packets = 0, tx_bytes = 0;
  uint64_t tx_retries = 0;
  uint64_t drops[kNumDrops] = {};
  uint64_t offload_work[offload::kNumWork] = {};
};

/// Counters of one port as seen by one PMD thread (single writer; read by the control
/// thread with relaxed loads). Direction is the switch's view (INTERFACES.md).
struct PortCounters {
  std::atomic<uint64_t> rx_packets{0}, rx_bytes{0}, tx_packets{0}, tx_bytes{0};
  /// Egress: frames kept for a retry because the receive queue was full (tx_retry_us).
  std::atomic<uint64_t> tx_retries{0};
  std::atomic<uint64_t> drops[kNumDrops] = {};
  offload::WorkCounters offload_work;
  static void add(std::atomic<uint64_t>& c, uint64_t n) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void drop(Drop d, uint64_t n = 1) { add(drops[static_cast<uint32_t>(d)], n); }
  /// Adds these counters to `s` (relaxed reads; the control thread's view).
  void accumulate(CounterSnapshot& s) const {
    s.rx_packets += rx_packets.load(std::memory_order_relaxed);
    s.rx_bytes += rx_bytes.load(std::memory_order_relaxed);
    s.tx_packets += tx_packets.load(std::memory_order_relaxed);
    s.tx_bytes += tx_bytes.load(std::memory_order_relaxed);
    s.tx_retries += tx_retries.load(std::memory_order_relaxed);
    for (uint32_t d = 0; d < kNumDrops; ++d) s.drops[d] += drops[d].load(std::memory_order_relaxed);
    for (uint32_t k = 0; k < offload::kNumWork; ++k)
      s.offload_work[k] += offload_work.n[k].load(std::memory_order_relaxed);
  }
};

/// Counters of one queue pair of one port as seen by one PMD thread (single writer, relaxed
/// reads by the control thread): rx = frames taken from the guest's transmit queue,
/// tx = frames written into the guest's receive queue (the switch's view, INTERFACES.md).
struct QueueCounters {
  std::atomic<uint64_t> rx_packets{0}, rx_bytes{0}, tx_packets{0}, tx_bytes{0}, no_rx_buffer{0};
  /// Frames this thread handed to the queue's writer (dp/handoff.h); they count in
  /// tx_packets when the writer delivers them.
  std::atomic<uint64_t> handoff_packets{0};
};

}  // namespace vl::port
