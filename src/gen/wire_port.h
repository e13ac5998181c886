#pragma once
// A generator port on a wire (wire/wire.h): a tap device, a packet socket, an AF_XDP socket
// or a DPDK ethdev, as `virtlink gen --port NAME=TYPE:ARG` names them with the switch's port
// types. This is how the generator stands behind a kernel interface (a veth in a network
// namespace of its own) and plays the "P" of P2V and PVP.
//
// Buffers are ours, in plain memory: per queue `queue_size` transmit buffers and a receive
// batch, each [12-byte virtio-net header (zeros)][frame] of `buf_size` bytes. The wire
// copies frames out of and into them a batch per call, so a transmit buffer is free again
// as soon as tx_flush() returns: frames are posted (tx_put) into a pending batch that
// tx_flush() hands to the wire in one call. The per-frame members are inline and keep to
// the contract of gen/port.h (the same the vhost-user port keeps), so the trial loop is the
// same for both.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gen/vport.h"
#include "wire/wire.h"

namespace vl::gen {

/// Counters of a wire port over its life (the generator's thread writes them).
struct WirePortCounters {
  uint64_t tx_packets = 0;  ///< frames the wire took
  uint64_t tx_refused = 0;  ///< frames it refused (its device full: never offered)
  uint64_t rx_packets = 0;  ///< frames it gave
};

class WirePort {
 public:
  /// Frames one receive call asks the wire for.
  static constexpr uint32_t kRxBatch = 32;

  /// Opens the wire `c.kind` names on `c.path` (af-xdp falls back to af-packet where XDP
  /// cannot attach, saying so). `c.queues` applies to af-xdp and dpdk; `c.queue_size`
  /// transmit buffers per queue. False with `*err`.
  bool open(const VPortConfig& c, std::string* err);
  void close();
  const VPortConfig& config() const { return cfg_; }
  uint32_t queues() const { return nq_; }
  uint32_t hdr_len() const { return wire::kHdrLen; }
  /// The wire in use ("af-packet" after a fallback from af-xdp).
  const char* type() const { return wire_ ? wire_->type() : "?"; }
  const wire::Wire* wire() const { return wire_.get(); }
  const WirePortCounters& counters() const { return c_; }

  // ---- Transmit (queue k): the contract of gen/port.h ----
  uint32_t reclaim(uint32_t) { return 0; }  ///< nothing in flight after tx_flush()
  uint8_t* tx_frame(uint32_t k, uint32_t i) const { return buf(k, i) + wire::kHdrLen; }
  bool tx_get(uint32_t k, uint32_t* i) {
    Queue& q = q_[k];
    if (q.taken == cfg_.queue_size) return false;
    *i = q.taken++;
    return true;
  }
  uint32_t tx_free(uint32_t k) const { return cfg_.queue_size - q_[k].taken; }
  void tx_put(uint32_t k, uint32_t i, uint32_t len) {
    Queue& q = q_[k];
    q.pending[q.npending++] = {buf(k, i), cfg_.buf_size, wire::kHdrLen + len};
  }
  /// Hands queue k's posted frames to the wire in one call; returns those it refused.
  uint32_t tx_flush(uint32_t k) {
    Queue& q = q_[k];
    const uint32_t n = q.npending;
    q.npending = q.taken = 0;
    if (!n) return 0;
    const uint32_t sent = wire_->send(k, q.pending.data(), n);
    c_.tx_packets += sent;
    c_.tx_refused += n - sent;
    return n - sent;
  }

  // ---- Receive (queue k) ----
  /// Frames ready now: what is left of the last batch, else a new batch from the wire.
  uint32_t rx_ready(uint32_t k) {
    Queue& q = q_[k];
    if (q.rx_pos == q.rx_n) refill(q, k);
    return q.rx_n - q.rx_pos;
  }
  bool rx_next(uint32_t k, const uint8_t** frame, uint32_t* len, uint32_t* idx) {
    Queue& q = q_[k];
    if (q.rx_pos == q.rx_n) return false;
    const wire::Buf& b = q.rx[q.rx_pos];
    *frame = b.p + wire::kHdrLen;
    *len = b.len - wire::kHdrLen;
    *idx = q.rx_pos++;
    return true;
  }
  void rx_release(uint32_t, uint32_t) {}  ///< the batch's buffers take the next batch
  void rx_flush(uint32_t) {}
  /// Takes and drops everything the wire holds now; returns the frames dropped.
  uint32_t rx_discard();

 private:
  struct Queue {
    std::vector<uint8_t> mem;          // queue_size transmit buffers, then kRxBatch receive ones
    std::vector<wire::Buf> pending;    // posted, not yet flushed
    uint32_t taken = 0, npending = 0;  // buffers handed out / posted since the last flush
    wire::Buf rx[kRxBatch];
    uint32_t rx_n = 0, rx_pos = 0;  // the last batch received, and the next frame of it
  };
  uint8_t* buf(uint32_t k, uint32_t i) const {
    return const_cast<uint8_t*>(q_[k].mem.data()) + size_t{i} * cfg_.buf_size;
  }
  void refill(Queue& q, uint32_t k);

  VPortConfig cfg_;
  std::unique_ptr<wire::Wire> wire_;
  std::unique_ptr<Queue[]> q_;
  uint32_t nq_ = 0;
  WirePortCounters c_;
};

}  // namespace vl::gen
