#pragma once
// A virtio-net port driven from userspace: the front-end side of one vhost-user connection,
// with its own driver memory (one memfd), `queues` receive/transmit queue pairs (split or
// packed rings, chosen once at open) and a buffer pool per queue.
// This is what `virtlink gen` sends and receives through.
//
// Buffers are one descriptor each: [virtio-net header][frame], `buf_size` bytes. Transmit
// buffer i of queue k belongs to that queue's descriptor cookie i and is prefilled once by the
// caller; receive buffers are posted whole and re-posted after use.
//
// Hot path: the *_on<Q>() members are templates over the queue type (virtio::SplitDriverQueue or
// virtio::PackedDriverQueue): the caller dispatches once (packed() ? ... : ...) for a whole
// loop, so there is no branch or virtual call per packet. The members without <Q> dispatch
// themselves, for set-up and slow paths.
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "vhost/frontend.h"
#include "virtio/driver_memory.h"
#include "virtio/packed_driver_queue.h"
#include "virtio/split_driver_queue.h"

namespace vl::gen {

/// What a generator port is attached to: a vhost-user back-end (VPort, this file), or a
/// wire of one of the switch's uplink types (WirePort, gen/wire_port.h).
enum class PortKind : uint8_t { kVhostUser, kTap, kAfPacket, kAfXdp, kDpdk };

/// A generator port's configuration (`--port NAME=TYPE:ARG`): the vhost-user settings, or
/// for a wire the interface or DEVARGS in `path` (`server`, `timeout_ms` and `packed` then
/// do not apply; `queues` applies to af-xdp and dpdk, `queue_size` to every kind).
struct VPortConfig {
  std::string name;
  PortKind kind = PortKind::kVhostUser;
  std::string path;
  bool server = false;        ///< listen on path (the back-end is a vhost-user client)
  uint32_t queue_size = 256;  ///< entries per virtqueue
  uint32_t buf_size = 2048;   ///< bytes per buffer, header included
  uint64_t mac = 0;           ///< 48-bit; 0: the user's default (Generator::default_mac)
  int timeout_ms = 10000;
  bool packed = false;  ///< packed virtqueues (VIRTIO_F_RING_PACKED, virtio 1.2 §2.8)
  uint32_t queues = 1;  ///< queue pairs (more than 1: VIRTIO_NET_F_MQ)
};

class VPort {
 public:
  using Split = virtio::SplitDriverQueue;
  using Packed = virtio::PackedDriverQueue;

  /// Negotiates with the back-end. Fails (with `*err`) when it does not offer what the
  /// config asks for: RING_PACKED for `packed`, multiqueue with enough pairs for `queues`.
  bool open(const VPortConfig& c, std::string* err);
  void close();
  const VPortConfig& config() const { return cfg_; }
  uint32_t hdr_len() const { return hdr_len_; }
  uint64_t features() const { return fe_.features(); }
  bool packed() const { return cfg_.packed; }
  uint32_t queues() const { return cfg_.queues; }
  int rx_call_fd(uint32_t k = 0) const { return fe_.call_fd(2 * k); }
  bool broken() const;

  template <class Q>
  Q& rxq(uint32_t k) {
    if constexpr (std::is_same_v<Q, Packed>) return prx_[k];
    else return srx_[k];
  }
  template <class Q>
  Q& txq(uint32_t k) {
    if constexpr (std::is_same_v<Q, Packed>) return ptx_[k];
    else return stx_[k];
  }

  // ---- Transmit (queue k) ----
  /// Our pointer to transmit buffer `i`'s frame area (after the header), i < queue_size.
  uint8_t* tx_frame(uint32_t k, uint32_t i) const { return tx_pool_[k].data(i) + hdr_len_; }
  /// Takes a free transmit buffer index of queue k, or false when all are in flight.
  bool tx_get(uint32_t k, uint32_t* i) { return tx_pool_[k].get(i); }
  uint32_t tx_free(uint32_t k) const { return tx_pool_[k].available(); }
  /// Free transmit buffers over all queues.
  uint32_t tx_free_all() const;
  /// Returns queue k's transmitted buffers to its pool.
  template <class Q>
  uint32_t reclaim_on(uint32_t k) {
    Q& q = txq<Q>(k);
    uint32_t n = 0, id, len;
    while (q.get_used(&id, &len)) {
      tx_pool_[k].put(id);
      ++n;
    }
    return n;
  }
  /// Posts buffer `i` of queue k with a frame of `len` bytes (not visible until tx_flush_on()).
  template <class Q>
  void tx_put_on(uint32_t k, uint32_t i, uint32_t len) {
    txq<Q>(k).add(tx_pool_[k].gpa(i), hdr_len_ + len, false, i);
  }
  /// Publishes queue k's posted frames (one kick per burst, if the device wants it).
  template <class Q>
  void tx_flush_on(uint32_t k) {
    txq<Q>(k).publish();
  }
  uint32_t reclaim();  ///< every queue
  void tx_put(uint32_t k, uint32_t i, uint32_t len) {
    packed() ? tx_put_on<Packed>(k, i, len) : tx_put_on<Split>(k, i, len);
  }
  void tx_flush();  ///< every queue

  // ---- Receive (queue k) ----
  /// Used receive entries ready now on queue k (rx_next_on() takes them).
  template <class Q>
  uint32_t rx_ready_on(uint32_t k) {
    return rxq<Q>(k).used_ready();
  }
  /// The next received frame (after the header) and its buffer index; release it after use.
  /// Frames spread over several mergeable buffers are counted in `fragmented()` and dropped.
  template <class Q>
  bool rx_next_on(uint32_t k, const uint8_t** frame, uint32_t* len, uint32_t* idx);
  template <class Q>
  void rx_release_on(uint32_t k, uint32_t idx) {
    rxq<Q>(k).add(rx_pool_[k].gpa(idx), rx_pool_[k].buf_size(), true, idx);
  }
  template <class Q>
  void rx_flush_on(uint32_t k) {
    rxq<Q>(k).publish();
  }
  /// Takes and re-posts everything received on every queue; returns the frames dropped.
  uint32_t rx_discard();
  uint64_t fragmented() const { return fragmented_; }

 private:
  template <class Q>
  bool setup(std::vector<Q>& rx, std::vector<Q>& tx, std::string* err);

  VPortConfig cfg_;
  virtio::DriverMemory mem_;
  std::vector<Split> srx_, stx_;
  std::vector<Packed> prx_, ptx_;
  std::vector<virtio::BufferPool> rx_pool_, tx_pool_;
  vhost::Frontend fe_;
  uint32_t hdr_len_ = 12;
  uint64_t fragmented_ = 0;
};

template <class Q>
bool VPort::rx_next_on(uint32_t k, const uint8_t** frame, uint32_t* len, uint32_t* idx) {
  Q& q = rxq<Q>(k);
  const virtio::BufferPool& pool = rx_pool_[k];
  for (;;) {
    uint32_t id, l;
    if (!q.get_used(&id, &l)) return false;
    const uint8_t* p = pool.data(id);
    uint16_t nbufs = 1;
    if (hdr_len_ >= 12) __builtin_memcpy(&nbufs, p + 10, 2);
    if (l < hdr_len_ || l > pool.buf_size() || nbufs != 1) [[unlikely]] {
      // A frame over several buffers (or a bogus length): not reassembled here.
      ++fragmented_;
      rx_release_on<Q>(k, id);
      continue;
    }
    *frame = p + hdr_len_;
    *len = l - hdr_len_;
    *idx = id;
    return true;
  }
}

}  // namespace vl::gen
