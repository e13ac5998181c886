#pragma once
// The vhost-user back-end (device side) of one connection: answers a front-end (QEMU, DPDK
// virtio-user, virtlink's own front-end) and keeps the device state the datapath reads.
// Reference: QEMU docs/interop/vhost-user.rst. Multiqueue and the security model:
// docs/architecture.md, "The vhost-user back-end".
#include <cstdint>
#include <memory>
#include <string>

#include "util/fd.h"
#include "vhost/channel.h"
#include "vhost/link_protocol.h"
#include "vhost/memory_budget.h"
#include "vhost/protocol.h"
#include "virtio/split_device_queue.h"
#include "virtio/dirty_log.h"
#include "virtio/packed_device_queue.h"
#include "virtio/guest_memory.h"

namespace vl::vhost {

/// What the back-end needs from its owner while it changes state that the datapath reads.
class DeviceHost {
 public:
  virtual ~DeviceHost() = default;
  /// Returns once no datapath thread touches this device's queues or memory.
  virtual void pause_datapath() = 0;
  /// Lets the datapath use the device again (it re-reads which queues are ready).
  virtual void resume_datapath() = 0;
};

/// Vring numbers of a virtio-net device (virtio 1.2 §5.1.2): queue pair q is receiveqN at
/// 2q (the device writes: switch -> guest) and transmitqN at 2q+1 (the device reads: guest
/// -> switch). The control virtqueue (2N) stays in the front-end (QEMU, DPDK virtio-user
/// emulate it): the back-end never sees it; a guest's `ethtool -L eth0 combined N`
/// (VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET) reaches us as SET_VRING_ENABLE on the pairs' rings
/// (QEMU hw/net/virtio-net.c peer_attach/peer_detach).
inline constexpr uint32_t kRxVring = 0;  ///< receiveq1
inline constexpr uint32_t kTxVring = 1;  ///< transmitq1
/// Vrings of queue pair 0 (direct links, app/links.h, serve only this pair).
inline constexpr uint32_t kNumVrings = 2;
/// Most queue pairs a port may offer (VIRTIO_NET_F_MQ; GET_QUEUE_NUM answers the port's
/// own maximum, BackendOptions::queue_pairs, 1..kMaxQueuePairs).
inline constexpr uint32_t kMaxQueuePairs = 8;
inline constexpr uint32_t kMaxVrings = 2 * kMaxQueuePairs;
inline constexpr uint32_t rx_vring(uint32_t qp) { return 2 * qp; }
inline constexpr uint32_t tx_vring(uint32_t qp) { return 2 * qp + 1; }

/// One vring's control state plus the datapath queue.
struct Vring {
  virtio::SplitDeviceQueue q;         ///< the queue when the ring is split
  virtio::PackedDeviceQueue pq;  ///< the queue when VIRTIO_F_RING_PACKED was negotiated
  bool packed = false;           ///< which of the two is attached (set by refresh)
  uint32_t num = 0;  ///< SET_VRING_NUM; 0 until set
  VringAddr addr{};
  bool addr_set = false;
  /// SET_VRING_BASE: split, the next avail index (16 bits); packed, the slot and wrap
  /// counters (virtio::PackedRingState).
  uint32_t base = 0;
  bool base_set = false;  ///< SET_VRING_BASE (or GET_VRING_BASE) since the connection began
  /// `base` is where traffic left the ring (park()), not what the front-end gave: it holds
  /// only for the size and layout it was taken in (parked_num, parked_packed).
  bool parked = false;
  uint32_t parked_num = 0;
  bool parked_packed = false;
  UniqueFd kick, call, err;
  bool started = false;  ///< a SET_VRING_KICK arrived (fd or polling) and no GET_VRING_BASE since
  bool enabled = false;  ///< SET_VRING_ENABLE state
  bool ready = false;    ///< the datapath may use q (computed by refresh)
  std::string why_not = "not connected";  ///< why the ring is not ready, for `ctl ports`

  bool attached() const { return packed ? pq.attached() : q.attached(); }
  bool broken() const { return packed ? pq.broken() : q.broken(); }
  /// Used-buffer notifications sent to the front-end on this ring (both layouts' queues).
  uint64_t calls() const { return q.calls() + pq.calls(); }
  /// Of those the driver asked for, the ones noted for a later call (completion coalescing).
  uint64_t calls_deferred() const { return q.calls_deferred() + pq.calls_deferred(); }
  bool call_blocked() const { return q.call_blocked() || pq.call_blocked(); }
  /// Takes the queue down keeping where it was: an attached ring's position goes into
  /// `base` (split: next avail index; packed: both slots and wrap counters), so the ring
  /// resumes there when it is attached again (SET_VRING_ENABLE 0 -> 1, a new memory table,
  /// a new kick fd, SET_VRING_ADDR). Packed rings have no used index in guest memory to
  /// recover from (virtio 1.2 §2.8), so this is the only record of their position
  /// (hostile-inputs.md item 19). Called with the datapath paused: nothing is in flight.
  void park() {
    if (attached()) {
      const uint32_t pos = packed ? pq.vring_base() : q.last_avail();
      // A front-end's SET_VRING_BASE that traffic has not moved past stays the front-end's
      // (it holds for any size: QEMU may send SET_VRING_NUM after it). Compared on the
      // avail side, bits 0-15: the used side is not in what front-ends send.
      if (parked || !base_set || (pos & 0xffff) != (base & 0xffff)) {
        base = pos;
        parked = true;
        parked_num = num;
        parked_packed = packed;
      }
      base_set = true;
    }
    detach();
  }
  /// The base to attach at, for a ring of `num` entries in layout `as_packed`: the kept or
  /// given one, or `fresh` (slot 0) when none was given, or when traffic left it in a ring
  /// of another size or layout (SET_VRING_NUM, SET_FEATURES since: a new ring).
  uint32_t start_base(bool as_packed, uint32_t fresh) const {
    if (!base_set) return fresh;
    if (parked && (parked_num != num || parked_packed != as_packed)) return fresh;
    return base;
  }
  /// SET_VRING_BASE: the front-end says where the ring resumes.
  void set_base(uint32_t b) {
    base = b;
    base_set = true;
    parked = false;
  }
  /// Takes the queue down without keeping its position: for SET_VRING_BASE (the front-end
  /// says where to resume) and a new connection. (A new size or layout goes through park():
  /// start_base() then starts the ring anew.)
  void detach() {
    q.detach();
    pq.detach();
  }
};

/// Offload features a back-end offers unless told not to (virtio 1.2 §5.1.3): CSUM,
/// GUEST_CSUM, HOST_TSO4/6, HOST_ECN, GUEST_TSO4/6, GUEST_ECN. Not UFO (Linux stopped
/// producing UFO in 4.14) nor USO (the Debian 12 guests' kernel, 6.1, predates it). The
/// datapath carries them across the switch or does the work in software (src/offload/).
inline constexpr uint64_t kOffloadFeatures =
    virtio::bit(virtio::kNetFCsum) | virtio::bit(virtio::kNetFGuestCsum) |
    virtio::bit(virtio::kNetFHostTso4) | virtio::bit(virtio::kNetFHostTso6) |
    virtio::bit(virtio::kNetFHostEcn) | virtio::bit(virtio::kNetFGuestTso4) |
    virtio::bit(virtio::kNetFGuestTso6) | virtio::bit(virtio::kNetFGuestEcn);
/// The part of kOffloadFeatures about what the device gives the driver (GUEST_*).
inline constexpr uint64_t kGuestOffloadFeatures =
    virtio::bit(virtio::kNetFGuestCsum) | virtio::bit(virtio::kNetFGuestTso4) |
    virtio::bit(virtio::kNetFGuestTso6) | virtio::bit(virtio::kNetFGuestEcn);

/// Features and limits a back-end offers.
struct BackendOptions {
  uint64_t features = 0;            ///< virtio feature bits offered on GET_FEATURES
  uint64_t protocol_features = 0;   ///< offered on GET_PROTOCOL_FEATURES
  /// Queue pairs offered (1..kMaxQueuePairs): GET_QUEUE_NUM answers it, vrings
  /// 0..2*queue_pairs-1 exist, VIRTIO_NET_F_MQ is offered when it is above 1.
  uint32_t queue_pairs = kMaxQueuePairs;
  /// Most bytes one memory table may map (page-rounded region sizes): a larger
  /// SET_MEM_TABLE is refused, so a front-end cannot take the address space other
  /// connections need (sparse memfds of terabytes cost it nothing).
  uint64_t max_mapped_bytes = uint64_t{1} << 40;
  /// The switch-wide cap on guest memory, summed over every connection (the owner's, shared
  /// by its back-ends; vhost/memory_budget.h), or null for none. A SET_MEM_TABLE that does
  /// not fit is refused before anything is mapped, as one over max_mapped_bytes is.
  MemoryBudget* memory_budget = nullptr;
  /// What this connection's log lines start with ("{log_name}: memory table with ..."): the
  /// owner names its device here (a switch port gives "port NAME"), so the vhost layer needs
  /// nothing from the layers above it.
  std::string log_name = "vhost-user";
  /// The default offer: VERSION_1, MRG_RXBUF, EVENT_IDX, INDIRECT_DESC, RING_PACKED,
  /// IN_ORDER, MTU, PROTOCOL_FEATURES, MQ, kOffloadFeatures, and for live migration LOG_ALL
  /// and GUEST_ANNOUNCE; protocol MQ, REPLY_ACK, MTU, RARP, LOG_SHMFD; kMaxQueuePairs queue
  /// pairs.
  static BackendOptions defaults();
};

/// A connection's device state as a successor process takes it over (`ctl upgrade`;
/// docs/architecture.md "Upgrade"): what the front-end's messages set, each ring's position,
/// and the fds. Backend::snapshot fills it with fds the back-end keeps owning;
/// Backend::adopt takes ownership of every fd in it (>= 0).
struct BackendSnapshot {
  struct Ring {
    uint32_t num = 0;
    VringAddr addr{};
    bool addr_set = false;
    bool base_set = false;
    /// Where the ring resumes (split: the next avail index; packed: vhost-user.rst's
    /// slot and wrap counters), taken with the datapath paused: nothing in flight.
    uint32_t base = 0;
    bool started = false, enabled = false;
    int kick = -1, call = -1, err = -1;
  };
  int conn = -1;       ///< the vhost-user connection
  int link_chan = -1;  ///< the direct-link channel (VL_LINK_CHANNEL), or -1
  uint64_t features = 0, protocol_features = 0;
  bool features_set = false;
  uint32_t mtu = 0;
  bool rarp_mac_set = false;
  uint8_t rarp_mac[6] = {};
  uint32_t nregions = 0;
  virtio::MemRegionDesc regions[virtio::GuestMemory::kMaxRegions] = {};
  int mem_fds[virtio::GuestMemory::kMaxRegions] = {-1, -1, -1, -1, -1, -1, -1, -1};
  uint32_t nrings = 0;  ///< vrings 0..nrings-1 (2 per queue pair)
  Ring rings[kMaxVrings];
};

class Backend {
 public:
  /// `opts.queue_pairs` is clamped to 1..kMaxQueuePairs; VIRTIO_NET_F_MQ is offered only
  /// when it is above 1.
  Backend(DeviceHost* host, BackendOptions opts);
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  /// Starts serving a new connection (any previous one must be disconnected).
  void attach(UniqueFd sock);
  bool connected() const { return chan_.open(); }
  int fd() const { return chan_.fd(); }

  /// Handles what the socket has to read. Returns false when the connection has failed
  /// or closed; the caller then calls disconnect(). `why` says why.
  bool on_readable(std::string* why);

  /// Stops the rings, unmaps guest memory and closes every fd of this connection.
  void disconnect();

  /// The connection's state for a successor (backend_handover.cpp). Call with the
  /// datapath paused; changes nothing; the fds stay this back-end's.
  void snapshot(BackendSnapshot* s) const;
  /// Serves the connection `s` describes (this back-end not connected), as if its front-end
  /// had sent the messages that made it: maps the memory table, binds each ready ring at
  /// its base, and signals each ready ring's call fd once (a notification a predecessor may
  /// have owed). Takes every fd in `s`, closing them on failure. False with `*err` (a
  /// memory table that does not map, more queue pairs or features than this port offers).
  bool adopt(BackendSnapshot& s, std::string* err);

  // ---- State (read by the port; stable while the datapath is paused or resumed) ----
  Vring& vring(uint32_t i) { return vrings_[i]; }
  const Vring& vring(uint32_t i) const { return vrings_[i]; }
  uint64_t features() const { return features_; }
  uint64_t protocol_features() const { return proto_features_; }
  const virtio::GuestMemory* memory() const { return mem_.get(); }
  uint32_t mtu() const { return mtu_; }  ///< NET_SET_MTU, 0 if never set
  bool has_rarp_mac() const { return rarp_mac_set_; }
  const uint8_t* rarp_mac() const { return rarp_mac_; }
  /// SEND_RARP (after a live migration, when the guest did not negotiate GUEST_ANNOUNCE):
  /// true once per message, with the guest's MAC in `mac`, so that the switch learns it
  /// on this port.
  bool take_rarp(uint8_t mac[6]) {
    if (!rarp_pending_) return false;
    rarp_pending_ = false;
    __builtin_memcpy(mac, rarp_mac_, 6);
    return true;
  }
  uint64_t messages() const { return messages_; }
  /// SET_MEM_TABLEs refused because the switch-wide cap (BackendOptions::memory_budget)
  /// had no room for them, over every connection of this back-end.
  uint64_t mem_tables_refused() const { return mem_refused_; }
  /// Live migration: the front-end set VHOST_F_LOG_ALL and gave a log (SET_LOG_BASE); every
  /// write into guest memory is then marked in it (virtio/dirty_log.h).
  bool logging() const { return log_ && virtio::has(features_, virtio::kFLogAll); }
  /// The front-end truncated the log's file and a mark faulted (DirtyLog::faulted()).
  bool log_faulted() const { return log_ && log_->faulted(); }
  /// Dirty-log counters of this port, over all connections (stats JSON).
  const virtio::DirtyLogStats& log_stats() const { return log_stats_; }
  /// Queue pairs offered (GET_QUEUE_NUM); vrings 0..2*queue_pairs()-1 exist.
  uint32_t queue_pairs() const { return opts_.queue_pairs; }
  uint32_t num_vrings() const { return 2 * opts_.queue_pairs; }

  // Handlers (public for the message table; called only through dispatch()).
  struct Reply;
  bool h_get_features(Message&, Reply&);
  bool h_set_features(Message&, Reply&);
  bool h_get_protocol_features(Message&, Reply&);
  bool h_set_protocol_features(Message&, Reply&);
  bool h_set_owner(Message&, Reply&);
  bool h_reset_owner(Message&, Reply&);
  bool h_set_mem_table(Message&, Reply&);
  bool h_set_vring_num(Message&, Reply&);
  bool h_set_vring_addr(Message&, Reply&);
  bool h_set_vring_base(Message&, Reply&);
  bool h_get_vring_base(Message&, Reply&);
  bool h_set_vring_fd(Message&, Reply&);
  bool h_get_queue_num(Message&, Reply&);
  bool h_set_vring_enable(Message&, Reply&);
  bool h_send_rarp(Message&, Reply&);
  bool h_set_log_base(Message&, Reply&);
  bool h_net_set_mtu(Message&, Reply&);
  bool h_vl_link_channel(Message&, Reply&);

  // ---- Direct links (docs/direct-link.md; app/links.cpp uses these) ----
  /// The switch's end of the link channel this front-end asked for, or -1.
  int link_channel_fd() const { return link_chan_.get(); }
  /// The fds of the current memory table (kept so a direct link can hand them on), in
  /// region order; -1 past region_count().
  int mem_fd(uint32_t i) const { return i < virtio::GuestMemory::kMaxRegions ? mem_fds_[i].get() : -1; }
  const virtio::MemRegionDesc& mem_region(uint32_t i) const { return mem_regions_[i]; }
  /// Re-binds vring `i` at avail index `base` (after a direct link served it; the used
  /// index is read from the ring). Call with the datapath paused.
  void restart_vring(uint32_t i, uint16_t base);

  /// Outcome of a handler: an optional payload to send back.
  struct Reply {
    bool has_payload = false;
    uint8_t payload[16];
    uint32_t size = 0;
    std::string error;  ///< why the handler failed
    UniqueFd fd;        ///< an fd sent with the reply payload (closed after sending)
    void set_u64(uint64_t v) {
      has_payload = true;
      size = 8;
      __builtin_memcpy(payload, &v, 8);
    }
    void set_state(VringState s) {
      has_payload = true;
      size = 8;
      __builtin_memcpy(payload, &s, 8);
    }
  };

 private:
  bool dispatch(Message& m, std::string* why);
  /// Index of a vring from a u32 field; false if >= num_vrings() (all 32 bits checked).
  bool vring_index(uint64_t raw, uint32_t* out, Reply& r) const;
  /// Recomputes every vring's readiness and re-binds DeviceQueues (datapath paused).
  void refresh();
  void reset_device();
  /// Binds vring i's queue to its ring memory; false (why_not set) if the ring cannot start.
  bool attach_split(uint32_t i);
  bool attach_packed(uint32_t i);
  /// Gives vring i's queue the dirty log (or none) with its rings' guest-physical addresses.
  void set_queue_log(uint32_t i);

  DeviceHost* host_;
  BackendOptions opts_;
  Channel chan_;
  uint64_t features_ = 0;
  bool features_set_ = false;
  uint64_t proto_features_ = 0;
  std::unique_ptr<virtio::GuestMemory> mem_;
  MemoryBudget::Share mem_share_;  ///< mem_'s bytes in opts_.memory_budget (empty: none)
  uint64_t mem_refused_ = 0;
  Vring vrings_[kMaxVrings];
  uint32_t mtu_ = 0;
  uint8_t rarp_mac_[6] = {};
  bool rarp_mac_set_ = false;
  bool rarp_pending_ = false;  ///< a SEND_RARP not yet taken by take_rarp()
  uint64_t messages_ = 0;
  UniqueFd mem_fds_[virtio::GuestMemory::kMaxRegions];       ///< fds of mem_'s regions
  virtio::MemRegionDesc mem_regions_[virtio::GuestMemory::kMaxRegions] = {};
  UniqueFd link_chan_;  ///< the switch's end of the direct-link channel
  virtio::DirtyLogStats log_stats_;
  std::unique_ptr<virtio::DirtyLog> log_;  ///< SET_LOG_BASE's bitmap, or null
};

}  // namespace vl::vhost
