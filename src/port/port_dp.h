#pragma once
// A port's datapath view: what a PMD thread reads of a port while the port is active (its
// queue pairs as ring references, who writes which receive queue, what the receiver
// negotiated), rebuilt by the control thread only while the port is paused.
// docs/architecture.md "Ports" and "Writers and handoff".
#include <atomic>
#include <cstdint>

#include "offload/rx_caps.h"
#include "port/counters.h"
#include "virtio/ring_ref.h"

namespace vl::port {

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
  virtio::RingRef rxq;  ///< the guest's receive queue (we fill it)
  virtio::RingRef txq;  ///< the guest's transmit queue (we drain it)
  QueueShared* rx_shared = nullptr;  ///< never null in a built PortDp
  QueueShared* tx_shared = nullptr;
  /// The transmit queue has no kick fd (SET_VRING_KICK with the no-fd flag: the front-end
  /// never kicks, vhost-user.rst), so a PMD thread serving it must poll, never sleep.
  bool kickless = false;

  bool has_txq() const { return static_cast<bool>(txq); }
  bool has_rxq() const { return static_cast<bool>(rxq); }
};

/// An uplink's two hooks (port/uplink_port.h): the datapath calls them once per batch, never
/// per frame, and only on ports that set them (a vhost-user port leaves them null).
/// `pull(ctx, q)`: before the poll of rxq q, moves frames from the wire onto its transmit
/// queue (returns the frames moved); called by that rxq's PMD thread. `push(ctx, q)`: after
/// a delivery into its receive queue q (frames or none), sends the used buffers to the wire
/// and posts them again; called by that queue's writer thread.
struct WireHooks {
  uint32_t (*pull)(void* ctx, uint32_t q) = nullptr;
  void (*push)(void* ctx, uint32_t q) = nullptr;
  void* ctx = nullptr;
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
  offload::RxCaps caps;      ///< what the receiver negotiated (header, offloads, MTU)
  uint64_t tx_retry_ns = 0;  ///< bounded retry into a full receive queue (PortConfig)
  uint64_t completion_coalesce_ns = 0;  ///< transmit completion coalescing (PortConfig)
  WireHooks wire;  ///< an uplink's (null for vhost-user ports)

  bool has_rxq() const { return rx_ready != 0; }
  bool has_txq() const {
    for (uint32_t q = 0; q < nqp; ++q)
      if (qp[q].has_txq()) return true;
    return false;
  }
};

}  // namespace vl::port
