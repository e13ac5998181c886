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
  kHandoffFull,    ///< egress port: the handoff ring to its queue's writer thread was full
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
  uint64_t tx_retries = 0;
  uint64_t drops[kNumDrops] = {};
  uint64_t soft[kNumSoft] = {};
};

/// Counters of one port as seen by one PMD thread (single writer; read by the control
/// thread with relaxed loads). Direction is the switch's view (INTERFACES.md).
struct PortCounters {
  std::atomic<uint64_t> rx_packets{0}, rx_bytes{0}, tx_packets{0}, tx_bytes{0};
  /// Egress: frames kept for a retry because the receive queue was full (tx_retry_us).
  std::atomic<uint64_t> tx_retries{0};
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
    s.tx_retries += tx_retries.load(std::memory_order_relaxed);
    for (uint32_t d = 0; d < kNumDrops; ++d) s.drops[d] += drops[d].load(std::memory_order_relaxed);
    for (uint32_t k = 0; k < kNumSoft; ++k) s.soft[k] += soft[k].load(std::memory_order_relaxed);
  }
};

/// Most queue pairs of one port (vhost::kMaxQueuePairs) and most PMD threads of a switch.
inline constexpr uint32_t kMaxQueuePairs = 8;
inline constexpr uint32_t kMaxPmdThreads = 16;

/// Counters of one queue pair of one port as seen by one PMD thread (single writer, relaxed
/// reads by the control thread): rx = frames taken from the guest's transmit queue,
/// tx = frames written into the guest's receive queue (the switch's view, INTERFACES.md).
struct QueueCounters {
  std::atomic<uint64_t> rx_packets{0}, rx_bytes{0}, tx_packets{0}, tx_bytes{0}, no_rx_buffer{0};
  /// Frames this thread handed to the queue's writer (dp/handoff.h); they count in
  /// tx_packets when the writer delivers them.
  std::atomic<uint64_t> handoff_packets{0};
};

/// What every PMD thread shares about one virtqueue (lives in the port, survives resumes):
/// a self-check. A thread entering the queue (one poll burst or one delivered batch) swaps
/// its index+1 into `inside`; finding another thread there counts in `concurrent`, which
/// must stay 0 (asserted by the tests): every queue has one writer (PortDp::rx_for) and one
/// poller (dp/pmd.h). One atomic exchange per burst, not per packet.
struct alignas(64) QueueShared {
  std::atomic<uint32_t> inside{0};
  std::atomic<uint32_t> last_thread{0xffffffff};  ///< PMD thread that last entered
  std::atomic<uint64_t> concurrent{0};

  void enter(uint32_t thread) {
    if (inside.exchange(thread + 1, std::memory_order_acq_rel) != 0) [[unlikely]]
      concurrent.fetch_add(1, std::memory_order_relaxed);
    last_thread.store(thread, std::memory_order_relaxed);
  }
  void leave() { inside.store(0, std::memory_order_release); }
};

/// One queue pair as the datapath sees it: the guest's receive queue (we fill it) and
/// transmit queue (we drain it), each split or packed (VIRTIO_F_RING_PACKED; the datapath
/// picks the layout once per burst), or null when the ring is not ready (not started,
/// disabled by SET_VRING_ENABLE, broken...).
struct QueuePairDp {
  virtio::DeviceQueue* rxq = nullptr;
  virtio::DeviceQueue* txq = nullptr;
  virtio::PackedDeviceQueue* rxq_packed = nullptr;
  virtio::PackedDeviceQueue* txq_packed = nullptr;
  QueueShared* rx_shared = nullptr;  ///< never null in a built PortDp
  QueueShared* tx_shared = nullptr;
  /// The transmit queue has no kick fd (SET_VRING_KICK with the no-fd flag: the front-end
  /// never kicks, vhost-user.rst), so a PMD thread serving it must poll, never sleep.
  bool kickless = false;

  bool has_txq() const { return txq || txq_packed; }
  bool has_rxq() const { return rxq || rxq_packed; }
  /// The transmit queue stopped (a hostile or broken driver).
  bool txq_broken() const { return txq ? txq->broken() : txq_packed && txq_packed->broken(); }
  bool rxq_broken() const { return rxq ? rxq->broken() : rxq_packed && rxq_packed->broken(); }
  /// Asks the driver to kick (or not) on its transmit queue (not per packet: per pass).
  void txq_set_kicks(bool on) const {
    if (txq) txq->set_kicks(on);
    else if (txq_packed) txq_packed->set_kicks(on);
  }
  /// New chains on the transmit queue (split: how many; packed: 1 if any), -1 if broken.
  int txq_pending() const { return txq ? txq->pending() : txq_packed ? txq_packed->pending() : 0; }
};

/// What the datapath reads of a port. Rebuilt by the control thread while the port is
/// paused; a PMD thread may use it only while `active` (acquire) is true.
///
/// Multiqueue. The unit a PMD thread polls is an rxq: (port, queue pair), the guest's
/// transmit queue of that pair (dp/pmd.h assigns rxqs to threads). Output into a port goes
/// to its ready guest receive queues, and every ready receive queue has exactly one writer
/// thread, so no lock is ever taken (rx_for[thread]):
/// - at least as many ready receive queues (E) as PMD threads (T): thread t writes the
///   queues at positions t, t+T, t+2T... of the ready list (like OVS XPS with static txqs);
/// - fewer: the queues get writers in turn from a thread that depends on the port
///   (thread (p + j) mod T writes ready queue j, p being the port's id, so single-queue
///   ports spread over the threads), and a thread that writes none of them hands its
///   frames to one writer through a lock-free ring (`via`, dp/handoff.h).
/// Within a thread's candidates a frame goes to the one its flow hash picks (dp/flow_hash.h,
/// computed only when there are several). A disabled queue is never in the lists.
struct PortDp {
  static constexpr uint8_t kDirect = 0xff;  ///< RxTargets::via: this thread writes q[]
  struct RxTargets {
    uint8_t n = 0;           ///< candidate queues (0: the port cannot receive)
    uint8_t via = kDirect;   ///< else: the PMD thread that writes q[0]; hand frames to it
    uint8_t q[kMaxQueuePairs] = {};
  };
  QueuePairDp qp[kMaxQueuePairs];
  uint32_t nqp = 0;          ///< queue pairs offered (qp[nqp..] stay null)
  uint32_t rx_ready = 0;     ///< ready guest receive queues
  /// Changes every time the port's datapath view is rebuilt: a handed-off frame carries the
  /// generation it was routed under and is dropped if the writers may have changed since.
  uint32_t gen = 0;
  RxTargets rx_for[kMaxPmdThreads];
  uint32_t hdr_len = 12;               ///< virtio-net header bytes on this port
  bool mrg_rxbuf = false;              ///< mergeable receive buffers negotiated
  uint64_t features = 0;               ///< negotiated virtio features (offloads: offload/)
  uint32_t max_frame = virtio::kMaxFrameLen;  ///< largest frame deliverable (bytes)
  uint64_t tx_retry_ns = 0;  ///< bounded retry into a full receive queue (VhostPortConfig)

  bool has_rxq() const { return rx_ready != 0; }
  bool has_txq() const {
    for (uint32_t q = 0; q < nqp; ++q)
      if (qp[q].has_txq()) return true;
    return false;
  }
  /// Fills rx_for from the ready receive queues for `threads` PMD threads; `port` (the
  /// port's id) rotates which threads write when there are fewer queues than threads.
  void build_rx_targets(uint32_t threads, uint32_t port = 0) {
    uint8_t ready[kMaxQueuePairs];
    uint32_t e = 0;
    for (uint32_t q = 0; q < nqp; ++q)
      if (qp[q].has_rxq()) ready[e++] = static_cast<uint8_t>(q);
    rx_ready = e;
    for (uint32_t t = 0; t < kMaxPmdThreads; ++t) {
      RxTargets& r = rx_for[t];
      r = RxTargets{};
      if (!e || t >= threads) continue;
      if (e >= threads) {
        for (uint32_t j = t; j < e; j += threads) r.q[r.n++] = ready[j];
        continue;
      }
      const uint32_t rank = (t + threads - port % threads) % threads;  // t = (port + rank) mod T
      r.n = 1;
      r.q[0] = ready[rank % e];
      if (rank >= e) r.via = static_cast<uint8_t>((port + rank % e) % threads);
    }
  }
};

/// Waits until no PMD thread is inside a port's datapath (an RCU-style grace period).
class Quiescer {
 public:
  virtual ~Quiescer() = default;
  virtual void wait_quiescent() = 0;
  /// Tells PMD threads that ports changed (wakes sleeping ones).
  virtual void ports_changed() = 0;
  /// Moves the kick eventfd a sleeping PMD thread waits on for rxq (`port`, `queue`) from
  /// `old_fd` to `new_fd` (-1: none). Called before the old fd is closed (epoll keys on the
  /// open file, which the front-end still holds, so it must be removed while our fd number
  /// is valid).
  virtual void set_kick_fd(uint32_t port, uint32_t queue, int old_fd, int new_fd) = 0;
  /// PMD threads (1..kMaxPmdThreads): PortDp::build_rx_targets needs it.
  virtual uint32_t num_threads() const = 0;
};

}  // namespace vl::port
