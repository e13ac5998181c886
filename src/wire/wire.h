#pragma once
// A wire: the kernel or NIC side of an uplink port (port/uplink_port.h). It moves frames
// between buffers the port owns and a tap device, a packet socket, an AF_XDP socket or a
// DPDK ethdev, a batch per call. It knows nothing of virtqueues or of the switch.
// docs/architecture.md "Uplinks".
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace vl::wire {

/// Every buffer starts with a virtio-net header of this many bytes (struct
/// virtio_net_hdr_mrg_rxbuf, virtio 1.2 §5.1.6; num_buffers is not used), the frame after
/// it. A wire with WireInfo::vnet_hdr reads and writes the header's first kLegacyHdrLen
/// bytes (struct virtio_net_hdr: what a tap device with IFF_VNET_HDR and a packet socket
/// with PACKET_VNET_HDR carry); one without writes zeros there and ignores it.
inline constexpr uint32_t kHdrLen = 12;
inline constexpr uint32_t kLegacyHdrLen = 10;

/// One frame's buffer: our pointer (to the header), its capacity and the bytes in it
/// (kHdrLen of header, then the frame).
struct Buf {
  uint8_t* p = nullptr;
  uint32_t cap = 0;
  uint32_t len = 0;
};

/// What a wire is, once open.
struct WireInfo {
  uint32_t queues = 1;     ///< receive/transmit queue pairs
  /// The header carries the device's virtio-net header fields, both ways.
  bool vnet_hdr = false;
  /// With vnet_hdr: the header may ask for a checksum (NEEDS_CSUM) and carry a TSO frame
  /// (GSO TCPv4/TCPv6), both ways.
  bool offloads = false;
  uint32_t mtu = 1500;     ///< bytes of L3 payload (the interface's MTU)
  /// Receive interrupts: rx_fd() becomes readable when frames arrive (else poll only).
  bool rx_interrupts = true;
  /// Without `offloads`: the wire's received frames may still ask for a checksum and be TSO
  /// frames (a tunnel's, decapsulated from a local sender), though it takes none.
  bool rx_offloads = false;
  /// Bytes before a send buffer's header the wire may write (a tunnel puts its outer headers
  /// there; 0 for a device).
  uint32_t headroom = 0;
  /// Largest frame either way (bytes); 0: mtu + the Ethernet header + one VLAN tag.
  uint32_t max_frame = 0;
};

/// Adds to a counter one thread writes and the control thread reads (relaxed).
inline void bump(uint64_t& c, uint64_t n = 1) {
  __atomic_store_n(&c, __atomic_load_n(&c, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}
inline uint64_t peek(const uint64_t& c) { return __atomic_load_n(&c, __ATOMIC_RELAXED); }

/// Named counters of the device itself (the kernel's or the NIC's view), for `ctl stats`.
using DeviceCounters = std::vector<std::pair<std::string, uint64_t>>;

/// The kernel or NIC side of an uplink. recv() and send() of queue q are called by one
/// thread at a time (the PMD thread that polls, resp. writes, that queue); the rest by the
/// control thread while the port is paused.
class Wire {
 public:
  virtual ~Wire() = default;
  /// Opens the device (its queues ready for recv/send). False with `*err`.
  virtual bool open(std::string* err) = 0;
  virtual void close() = 0;
  /// Valid after open().
  virtual const WireInfo& info() const = 0;
  /// The port type's name: "tap", "af-packet", "af-xdp", "dpdk".
  virtual const char* type() const = 0;
  /// What the port type's argument named (an interface, DEVARGS).
  virtual std::string target() const = 0;
  /// Readable (EPOLLIN, edge-triggered by its user) when queue q has frames; -1: none.
  virtual int rx_fd(uint32_t q) const = 0;
  /// Carrier: frames can flow.
  virtual bool link_up() const = 0;
  /// Receives up to `n` frames from queue q into bufs[0..n) (each `cap` bytes at `p`: the
  /// header, then the frame), setting each `len` (kHdrLen + the frame's bytes). Returns the
  /// frames received. A frame larger than its buffer is not returned (counted by the wire).
  virtual uint32_t recv(uint32_t q, Buf* bufs, uint32_t n) = 0;
  /// Sends bufs[0..n) on queue q (each the header, then the frame: len > kHdrLen). Returns the
  /// frames the device took; the others are dropped by the caller (the buffers stay ours).
  virtual uint32_t send(uint32_t q, const Buf* bufs, uint32_t n) = 0;
  /// Adds the device's counters (missed, errors...) to `out`.
  virtual void counters(DeviceCounters* out) const { (void)out; }
  /// Sends one Ethernet frame (`len` bytes, no virtio-net header) outside the datapath's
  /// queues: ARP of a tunnel endpoint, a migrated guest's RARP. Any thread, at any time
  /// (the slow path: a system call, or a lock of the wire's own); rare frames only. False
  /// if the wire has no such path or the device refused the frame.
  virtual bool send_control(const uint8_t* frame, uint32_t len) {
    (void)frame;
    (void)len;
    return false;
  }
  /// send_control() has a path (it may still fail: a link down, a full device).
  virtual bool has_control_path() const { return false; }
  /// Called by the control thread every second while open (a tunnel's ARP).
  virtual void on_tick() {}
};

}  // namespace vl::wire
