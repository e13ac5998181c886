#pragma once
// A generator port, whatever it is attached to: a vhost-user back-end (gen/vport.h: the
// generator is the virtio driver) or a wire of one of the switch's uplink types
// (gen/wire_port.h: a tap, a packet socket, an AF_XDP socket, a DPDK ethdev). The trial loop
// (gen/generator.cpp) sends and receives through one per-frame contract, PortOps, which
// both kinds keep; GenPort::with_ops() picks the kind once per batch (a vhost-user port's
// ring layout with it), so the loop is instantiated per kind with no branch or virtual call
// per frame.
#include <concepts>
#include <cstdint>
#include <memory>
#include <string>

#include "gen/vport.h"
#include "gen/wire_port.h"

namespace vl::gen {

/// The per-frame contract of a generator port, queue k:
///  - transmit: reclaim(k) takes back what the device is done with (returns how many);
///    tx_get(k, &i) a free buffer i (false: none), whose frame area is tx_frame(k, i) (its
///    virtio-net header, hdr_len() bytes, before it); tx_put(k, i, len) posts its frame of
///    len bytes; tx_flush(k) hands the posted frames to the device in one go and returns
///    those it refused (a virtqueue refuses none: the buffers were free);
///  - receive: rx_ready(k) frames ready now; rx_next(k, &frame, &len, &idx) the next one
///    (false: none); rx_release(k, idx) gives its buffer back; rx_flush(k) publishes the
///    released buffers.
template <class P>
concept PortOps = requires(P& p, uint32_t k, uint32_t i, uint32_t* ip, const uint8_t** f,
                           uint32_t* lp) {
  { p.reclaim(k) } -> std::same_as<uint32_t>;
  { p.tx_get(k, ip) } -> std::same_as<bool>;
  { p.tx_frame(k, i) } -> std::same_as<uint8_t*>;
  p.tx_put(k, i, i);
  { p.tx_flush(k) } -> std::same_as<uint32_t>;
  { p.rx_ready(k) } -> std::same_as<uint32_t>;
  { p.rx_next(k, f, lp, ip) } -> std::same_as<bool>;
  p.rx_release(k, i);
  p.rx_flush(k);
};

/// A vhost-user port with ring layout Q (VPort::Split or VPort::Packed) under PortOps.
template <class Q>
class VhostOps {
 public:
  explicit VhostOps(VPort& p) : p_(p) {}
  uint32_t reclaim(uint32_t k) { return p_.template reclaim_on<Q>(k); }
  bool tx_get(uint32_t k, uint32_t* i) { return p_.tx_get(k, i); }
  uint8_t* tx_frame(uint32_t k, uint32_t i) const { return p_.tx_frame(k, i); }
  void tx_put(uint32_t k, uint32_t i, uint32_t len) { p_.template tx_put_on<Q>(k, i, len); }
  uint32_t tx_flush(uint32_t k) {
    p_.template tx_flush_on<Q>(k);
    return 0;
  }
  uint32_t rx_ready(uint32_t k) { return p_.template rx_ready_on<Q>(k); }
  bool rx_next(uint32_t k, const uint8_t** frame, uint32_t* len, uint32_t* idx) {
    return p_.template rx_next_on<Q>(k, frame, len, idx);
  }
  void rx_release(uint32_t k, uint32_t idx) { p_.template rx_release_on<Q>(k, idx); }
  void rx_flush(uint32_t k) { p_.template rx_flush_on<Q>(k); }

 private:
  VPort& p_;
};

static_assert(PortOps<VhostOps<VPort::Split>>);
static_assert(PortOps<VhostOps<VPort::Packed>>);
static_assert(PortOps<WirePort>);

/// The name `--port NAME=TYPE:ARG` gives a kind ("vhost-user" with `server`, else
/// "vhost-user-client"; "tap", "af-packet", "af-xdp", "dpdk").
const char* port_kind_name(PortKind k, bool server);

class GenPort {
 public:
  /// Opens the port `c.kind` says: vhost-user negotiation, or the wire.
  bool open(const VPortConfig& c, std::string* err);
  void close();
  const VPortConfig& config() const { return wire_ ? wire_->config() : vport_->config(); }
  bool is_wire() const { return wire_ != nullptr; }
  /// The kind in use: as configured, except "af-packet" after an af-xdp fallback.
  const char* type() const;
  uint32_t queues() const { return wire_ ? wire_->queues() : vport_->queues(); }
  uint32_t queue_size() const { return config().queue_size; }
  uint32_t hdr_len() const { return wire_ ? wire_->hdr_len() : vport_->hdr_len(); }
  /// Null for the other kind.
  const VPort* vport() const { return vport_.get(); }
  const WirePort* wire() const { return wire_.get(); }

  /// Calls f(ops) with this port's PortOps (a WirePort, or VhostOps of its ring layout).
  template <class F>
  decltype(auto) with_ops(F&& f) {
    if (wire_) return f(*wire_);
    if (vport_->packed()) {
      VhostOps<VPort::Packed> o(*vport_);
      return f(o);
    }
    VhostOps<VPort::Split> o(*vport_);
    return f(o);
  }

  // Slow paths (set-up, between trials).
  uint32_t reclaim();            ///< every queue
  uint32_t tx_free_all() const;  ///< free transmit buffers over all queues
  uint8_t* tx_frame(uint32_t k, uint32_t i) const {
    return wire_ ? wire_->tx_frame(k, i) : vport_->tx_frame(k, i);
  }
  uint32_t rx_discard();  ///< takes and drops everything received; returns how many
  uint64_t fragmented() const { return vport_ ? vport_->fragmented() : 0; }

 private:
  std::unique_ptr<VPort> vport_;
  std::unique_ptr<WirePort> wire_;
};

}  // namespace vl::gen
