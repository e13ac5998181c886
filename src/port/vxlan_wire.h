#pragma once
// A VXLAN tunnel endpoint (RFC 7348) as the wire of a tunnel port: the port is an uplink
// port (port/uplink_port.h) whose frames go out encapsulated on another uplink, its
// underlay, and come back decapsulated from it. Encapsulation writes the outer headers in
// front of the frame in place (the port's buffers keep kHeadroom bytes for them) and sends
// on the underlay's queue from the thread that writes it; decapsulation runs in the
// underlay's receive hook, which hands the inner frames over a ring per queue. The VTEP
// answers ARP for its address and resolves each remote's next hop by ARP, or takes a
// gateway's MAC. docs/architecture.md "VXLAN".
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "port/port_config.h"
#include "util/fd.h"
#include "wire/wire.h"

namespace vl::port {

/// What decapsulation counted on one queue of the underlay (its receiving thread's).
struct alignas(64) VxlanRxCounters {
  uint64_t decap = 0;         ///< frames decapsulated onto the tunnel
  uint64_t bad_outer_ip = 0;  ///< outer IPv4 header: version, length, checksum
  uint64_t fragment = 0;      ///< outer IPv4 fragments (not reassembled)
  uint64_t bad_udp = 0;       ///< UDP length or checksum
  uint64_t not_vxlan = 0;     ///< UDP to the local address on another port
  uint64_t bad_vxlan = 0;     ///< VXLAN header without the I flag, or a runt inner frame
  uint64_t inner_too_big = 0; ///< an inner frame larger than the tunnel's largest
  uint64_t wrong_vni = 0;     ///< a VNI no tunnel of this address has
  uint64_t unknown_vtep = 0;  ///< from an address that is none of the remotes
  uint64_t outer_gso = 0;     ///< the underlay gave a segmentation-offloaded packet
  uint64_t ring_full = 0;     ///< the tunnel's receive ring was full
  uint64_t arp_replies = 0;   ///< ARP requests for the local address answered
  uint64_t arp_rate_limited = 0;  ///< ARP requests not answered (over kArpRepliesPerSec)
  uint64_t arp_ignored = 0;   ///< ARP for the local address neither a request nor a reply
  uint64_t tunnel_down = 0;   ///< packets for a tunnel that was stopping
};

/// What encapsulation counted on one queue of the tunnel (its writer thread's).
struct alignas(64) VxlanTxCounters {
  uint64_t encap = 0;          ///< packets sent on the underlay (a flooded frame: one each)
  uint64_t flooded = 0;        ///< frames sent to every remote (broadcast, unknown, multicast)
  uint64_t no_neighbor = 0;    ///< packets not sent: the remote's next hop is not resolved
  uint64_t underlay_dropped = 0;  ///< packets the underlay did not take
};

class VxlanWire final : public wire::Wire {
 public:
  /// Outer Ethernet (14), IPv4 (20), UDP (8) and VXLAN (8) headers.
  static constexpr uint32_t kEncapLen = 50;
  /// Bytes the tunnel port keeps before each transmit buffer's header (WireInfo::headroom).
  static constexpr uint32_t kHeadroom = 64;
  /// Bytes of each queue's decapsulation ring (a power of two): two receive bursts of 64 KiB
  /// TSO trains fit.
  static constexpr uint32_t kRingBytes = 4u << 20;
  /// Inner MAC addresses the endpoint remembers a remote for (4 probes, then the oldest
  /// slot of them is taken).
  static constexpr uint32_t kMacSlots = 4096;  // (2^12: vxlan_wire.cpp mac_slot)
  static constexpr uint32_t kArpRepliesPerSec = 100;
  static constexpr uint32_t kMaxQueues = 8;

  /// `arg`: the port's argument as given; `s` parsed from it; `port` the port's name.
  VxlanWire(std::string arg, VxlanSettings s, const std::string& port);
  ~VxlanWire() override;
  /// The underlay's wire, open, before open(); it must stay open while this one is.
  void set_underlay(wire::Wire* u) { underlay_ = u; }
  /// Takes the underlay's queues; the MTU is its MTU less kEncapLen. Sends a gratuitous ARP
  /// for the local address and an ARP request for each remote (again at ticks while they
  /// fail, as with the link down). False with `*err` (no underlay, one without a control
  /// path, an MTU too small).
  bool open(std::string* err) override;
  void close() override;
  const wire::WireInfo& info() const override { return info_; }
  const char* type() const override { return "vxlan"; }
  std::string target() const override { return arg_; }
  int rx_fd(uint32_t q) const override;
  bool link_up() const override;
  /// Decapsulated frames of queue q (the tunnel's poller).
  uint32_t recv(uint32_t q, wire::Buf* bufs, uint32_t n) override;
  /// Encapsulates each frame in place (bufs[i].p has kHeadroom bytes before it) and sends it
  /// on the underlay's queue q: to the remote its destination MAC was learned behind, else
  /// to every remote. Called by the writer of the tunnel's receive queue q, which is the
  /// writer of the underlay's (port/uplink_port.h). Returns the frames sent to at least one
  /// remote.
  uint32_t send(uint32_t q, const wire::Buf* bufs, uint32_t n) override;
  void counters(wire::DeviceCounters* out) const override;
  /// Encapsulates the frame to every remote, on the underlay's control path.
  bool send_control(const uint8_t* frame, uint32_t len) override;
  /// ARP requests again for the remotes not resolved.
  void on_tick() override;

  /// The underlay's receive side: the frame f[0..len) with its virtio-net header `hdr`
  /// arrived on underlay queue q. True if it was for one of the endpoints t[0..n) (the
  /// VXLAN packet decapsulated onto it, an ARP for its address answered or learned from,
  /// or the packet dropped and counted); false for a frame of no endpoint's. Called by the
  /// thread that polls underlay queue q.
  static bool demux(VxlanWire* const* t, uint32_t n, uint32_t q, const uint8_t* hdr,
                    const uint8_t* f, uint32_t len);
  /// After the frames of one receive batch went through demux(): wakes the tunnel's poller
  /// if it may be asleep with frames waiting.
  void rx_batch_done(uint32_t q);

  const VxlanSettings& settings() const { return s_; }
  const uint8_t* mac() const { return mac_; }
  /// One remote as `ctl ports` shows it.
  struct RemoteView {
    uint32_t ip = 0;  ///< network byte order
    bool resolved = false;
    uint8_t next_hop[6] = {};
  };
  std::vector<RemoteView> remotes() const;
  /// Inner MAC addresses in the table now.
  uint32_t learned_macs() const;

 private:
  struct RxRing;
  bool accept(uint32_t q, const uint8_t* hdr, const uint8_t* ip, const uint8_t* udp,
              uint32_t udp_len, uint32_t src);
  bool on_arp(uint32_t q, const uint8_t* f, uint32_t len, bool answer);
  void push_inner(uint32_t q, int remote, const uint8_t* hdr, const uint8_t* inner, uint32_t len,
                  uint32_t inner_off);
  bool write_outer(uint8_t* o, int remote, const uint8_t* inner, uint32_t len);
  int remote_index(uint32_t ip) const;
  void learn(const uint8_t* mac, int remote);
  int lookup(const uint8_t* mac) const;
  void send_arp_requests(bool all);
  /// A gratuitous ARP for the local address (control thread). False if it was not sent.
  bool announce();

  std::string arg_;
  std::string name_;  // the port's
  VxlanSettings s_;
  uint8_t mac_[6];
  wire::Wire* underlay_ = nullptr;
  wire::WireInfo info_;
  std::atomic<bool> open_{false};
  uint32_t nq_ = 0;
  std::unique_ptr<RxRing[]> rx_;
  /// Each remote's next hop: MAC | kResolved, 0 while unresolved (the underlay's receiving
  /// threads write it from ARP, the writers read it).
  static constexpr uint64_t kResolved = uint64_t{1} << 63;
  std::atomic<uint64_t> next_hop_[kMaxVxlanRemotes] = {};
  /// Inner MAC -> remote: (MAC << 8) | (remote + 1), 0: empty (relaxed, any thread).
  std::unique_ptr<std::atomic<uint64_t>[]> macs_;
  VxlanRxCounters rxc_[kMaxQueues];
  VxlanTxCounters txc_[kMaxQueues];
  std::atomic<uint64_t> arp_window_{0};  // (second << 32) | replies sent in it
  uint64_t arp_requests_ = 0;            // control thread
  bool announce_pending_ = false;        // control thread: the gratuitous ARP is still due
};

}  // namespace vl::port
