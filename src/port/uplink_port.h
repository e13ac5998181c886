#pragma once
// A port whose peer is a wire (wire/wire.h: a tap device, a packet socket, an AF_XDP socket,
// a DPDK ethdev) rather than a virtio driver. The port plays the driver itself: per queue
// pair it owns two split virtqueues in its own memory, and the switch serves them as it
// serves a guest's (the same PortDp, burst loop, writers, flush policies and counters: no
// second datapath). Its hooks (port::WireHooks) move frames between those rings and the
// wire, a batch per call: `pull` fills the transmit queue from the wire before the PMD
// thread polls it, `push` sends what the switch wrote into the receive queue.
// docs/architecture.md "Uplinks".
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "port/port.h"
#include "port/port_config.h"
#include "virtio/driver_memory.h"
#include "virtio/guest_memory.h"
#include "virtio/split_device_queue.h"
#include "virtio/split_driver_queue.h"
#include "wire/wire.h"

namespace vl::port {

/// The wire for an uplink's configuration (null for vhost-user). af-xdp gives the AF_XDP
/// wire; UplinkPort::start falls back to af-packet when it cannot open.
std::unique_ptr<wire::Wire> make_wire(const PortConfig& cfg);

/// Counters of one queue pair of an uplink, as its hooks keep them (single writer each:
/// the wire side of the transmit queue by its poller, of the receive queue by its writer).
struct UplinkQueueCounters {
  uint64_t wire_rx_packets = 0;   ///< frames the wire gave (onto the transmit queue)
  uint64_t wire_tx_packets = 0;   ///< frames the wire took (from the receive queue)
  uint64_t wire_tx_dropped = 0;   ///< frames the wire refused (device full, link down)
  uint64_t bad_used = 0;          ///< used entries of a length no frame has (a datapath bug)
  /// Untagged frames longer than the MTU allows (the port's largest frame leaves room for a
  /// tag), not sent.
  uint64_t wire_tx_too_big = 0;
  /// An underlay's frames that were for no tunnel endpoint (not switched: an underlay
  /// carries its tunnels only).
  uint64_t not_for_vtep = 0;
};

class VxlanWire;

class UplinkPort final : public Port {
 public:
  /// `w` from make_wire(cfg).
  UplinkPort(uint32_t id, PortConfig cfg, std::unique_ptr<wire::Wire> w, Quiescer* q);
  ~UplinkPort() override;

  const PortConfig& config() const override { return cfg_; }
  /// Opens the wire (af-xdp falls back to af-packet, saying so), lays out the rings and
  /// buffers, and joins the datapath. False with `*err`.
  bool start(std::string* err) override;
  void stop() override;
  const char* state() const override;
  const char* type_name() const override;
  const std::string& target() const override { return cfg_.path; }
  bool connected() const override { return open_; }
  bool on_tick() override;
  void move_rx_writers(uint32_t rotation) override;

  /// The wire in use (after a fallback, not the one configured), or null before start.
  const wire::Wire* wire() const { return wire_.get(); }
  /// The virtio features the port's rings carry, as a driver would have negotiated them
  /// (VERSION_1, and the offloads when the wire has them).
  uint64_t features() const { return features_; }
  uint32_t queue_pairs() const { return nqp_; }
  /// Descriptors per ring (the configured queue_size; at least 1024 for a tunnel).
  uint32_t queue_size() const { return qsize_; }
  /// Counters of queue pair q (relaxed reads).
  UplinkQueueCounters queue_counters(uint32_t q) const;
  /// Largest frame either way (bytes, Ethernet header and one VLAN tag included; TSO frames
  /// beyond it when the wire has offloads).
  uint32_t max_frame() const { return max_frame_; }

  /// Sends one frame outside the datapath on the wire (wire::Wire::send_control; a
  /// tunnel encapsulates it to every remote). Any thread.
  bool send_control(const uint8_t* frame, uint32_t len) {
    return open_ && wire_->send_control(frame, len);
  }

  // ---- Tunnels (port/vxlan_wire.h) ----
  /// Makes `tunnel` (a port whose wire is a VxlanWire) a tunnel over this port, before
  /// either starts: this port becomes its underlay (its receive hook decapsulates for it,
  /// and it switches nothing else), the tunnel sends on this port's queues from the same
  /// writer threads (its rotation follows this port's).
  void attach_tunnel(UplinkPort* tunnel);
  /// attach_tunnel on a running underlay (a tunnel added at run time, before it starts):
  /// this port leaves the datapath for the change. Control thread.
  void attach_tunnel_live(UplinkPort* tunnel);
  /// Takes `tunnel` off this underlay, before the tunnel stops (once this returns no PMD
  /// thread decapsulates into it). Control thread.
  void detach_tunnel(UplinkPort* tunnel);
  /// The tunnel's VXLAN endpoint (null for other ports).
  const VxlanWire* vxlan() const { return vx_; }
  /// The port this tunnel is encapsulated on (null for other ports).
  const UplinkPort* underlay() const { return underlay_; }
  bool is_underlay() const { return ntunnels_ != 0; }
  /// The names of the tunnels over this port.
  std::vector<std::string> tunnel_names() const {
    std::vector<std::string> v;
    for (uint32_t i = 0; i < ntunnels_; ++i) v.push_back(tunnel_ports_[i]->name());
    return v;
  }

 private:
  /// Frames one pull() takes from the wire, and one push() hands it, at most.
  static constexpr uint32_t kPullBurst = 32;
  static constexpr uint32_t kPushBurst = 64;

  /// One queue pair: the receive queue (the switch fills it, the wire sends it) and the
  /// transmit queue (the wire fills it, the switch takes it), each as the driver and as the
  /// device sees it, and each with its buffers.
  struct Queue {
    virtio::SplitDriverQueue to_wire_drv, from_wire_drv;
    virtio::SplitDeviceQueue to_wire_dev, from_wire_dev;
    virtio::BufferPool to_wire_bufs, from_wire_bufs;
    UplinkQueueCounters c;
    /// Transmit-queue buffers taken from the pool for the wire's next recv (pull's only).
    wire::Buf staged[kPullBurst];
    uint32_t staged_id[kPullBurst];
    uint32_t nstaged = 0;
  };
  static uint32_t pull(void* self, uint32_t q);
  static void push(void* self, uint32_t q);
  bool lay_out(std::string* err);
  uint32_t demux(Queue& q, uint32_t qi, const wire::Buf* b, uint32_t got);
  void publish_dp();
  void leave_dp();


  PortConfig cfg_;
  std::unique_ptr<wire::Wire> wire_;
  Quiescer* quiescer_;
  virtio::DriverMemory mem_;
  virtio::GuestMemory gmem_;  // the same memory, as the device side translates it
  std::unique_ptr<Queue[]> q_;
  uint32_t nqp_ = 0;
  uint32_t to_size_ = 0;    // bytes of a receive-queue buffer (headroom, header, frame)
  uint32_t from_size_ = 0;  // bytes of a transmit-queue buffer (header, frame)
  uint32_t max_frame_ = 0;
  uint64_t features_ = 0;
  bool open_ = false;
  bool link_up_ = false;
  int rx_fd_[kMaxQueuePairs];
  QueueShared shared_[2 * kMaxQueuePairs];
  uint32_t dp_gen_ = 0;
  uint32_t qsize_ = 0;
  uint32_t headroom_ = 0;   // bytes kept before each receive buffer (WireInfo::headroom)
  uint32_t tag_free_max_ = 0;  // largest untagged frame (0: no check, max_frame_ is exact)
  // Tunnels: an underlay's (fixed before start) and a tunnel's own links.
  static constexpr uint32_t kMaxTunnels = 8;
  VxlanWire* tunnels_[kMaxTunnels] = {};
  UplinkPort* tunnel_ports_[kMaxTunnels] = {};
  uint32_t ntunnels_ = 0;
  UplinkPort* underlay_ = nullptr;
  VxlanWire* vx_ = nullptr;
};

}  // namespace vl::port
