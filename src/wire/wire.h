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

/// Bytes of the legacy virtio-net header (struct virtio_net_hdr, virtio 1.2 §5.1.6) that a
/// tap device (IFF_VNET_HDR) and a packet socket (PACKET_VNET_HDR) put before each frame.
inline constexpr uint32_t kVnetHdrLen = 10;

/// One frame's buffer: our pointer, its capacity and the bytes in it (header included when
/// the wire carries one: Wire::vnet_hdr()).
struct Buf {
  uint8_t* p = nullptr;
  uint32_t cap = 0;
  uint32_t len = 0;
};

/// What a wire is, once open.
struct WireInfo {
  uint32_t queues = 1;     ///< receive/transmit queue pairs
  /// Each frame is preceded by a kVnetHdrLen virtio-net header, both ways.
  bool vnet_hdr = false;
  /// With vnet_hdr: the header may ask for a checksum (NEEDS_CSUM) and carry a TSO frame
  /// (GSO TCPv4/TCPv6), both ways.
  bool offloads = false;
  uint32_t mtu = 1500;     ///< bytes of L3 payload (the interface's MTU)
  /// Receive interrupts: rx_fd() becomes readable when frames arrive (else poll only).
  bool rx_interrupts = true;
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
  /// Receives up to `n` frames from queue q into bufs[0..n) (each `cap` bytes at `p`; with
  /// vnet_hdr the header first), setting each `len`. Returns the frames received. A frame
  /// larger than its buffer is not returned (counted by the wire).
  virtual uint32_t recv(uint32_t q, Buf* bufs, uint32_t n) = 0;
  /// Sends bufs[0..n) on queue q (with vnet_hdr, each starts with the header). Returns the
  /// frames the device took; the others are dropped by the caller (the buffers stay ours).
  virtual uint32_t send(uint32_t q, const Buf* bufs, uint32_t n) = 0;
  /// Adds the device's counters (missed, errors...) to `out`.
  virtual void counters(DeviceCounters* out) const { (void)out; }
};

}  // namespace vl::wire
