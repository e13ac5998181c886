#pragma once
// A kernel interface through AF_XDP sockets (Documentation/networking/af_xdp.rst): one
// socket per queue, bound to the interface's queue of that number, each with a UMEM of its
// own (libxdp's xsk.h: UMEM, rings, bind). An XDP program of ours, libxdp's default one
// without its bookkeeping, redirects each queue's frames to its socket. Frames are copied
// between the UMEM and the port's buffers both ways; no system call per frame. No
// virtio-net header, so no offloads. Zero-copy where the driver has it, else copy mode
// (veth, and every interface in SKB mode).
#include <cstdint>
#include <memory>
#include <string>

#include "util/fd.h"
#include "wire/wire.h"

namespace vl::wire {

/// Where the XDP program runs: the driver's hook (native), else the generic one (SKB).
enum class XdpMode { kAuto, kNative, kSkb };

class AfXdpWire final : public Wire {
 public:
  /// `queues`: interface queues 0..queues-1, one socket each. `mode`: kAuto tries native,
  /// then SKB.
  explicit AfXdpWire(std::string ifname, uint32_t queues = 1, XdpMode mode = XdpMode::kAuto);
  ~AfXdpWire() override;
  /// Attaches the program, binds the sockets. False with `*err`, nothing left attached or
  /// open, when the interface does not exist, a queue does not exist or is taken (EBUSY
  /// after a wait), or no mode attaches (another XDP program holds the interface: it is
  /// never replaced).
  bool open(std::string* err) override;
  /// Detaches the program (if it is still ours), closes the sockets, frees the UMEMs.
  void close() override;
  const WireInfo& info() const override { return info_; }
  const char* type() const override { return "af-xdp"; }
  std::string target() const override { return name_; }
  /// The queue's socket: readable when its rx ring has frames. Never read it.
  int rx_fd(uint32_t q) const override;
  bool link_up() const override;
  /// Takes up to `n` descriptors from queue q's rx ring and copies each frame (its bytes
  /// from the destination MAC on) to the next buffer; its chunk goes back to the fill ring
  /// at once. Not returned: a frame bigger than its buffer (rx_truncated), a descriptor
  /// outside our receive chunks (rx_bad_desc). A system call only for a zero-copy driver
  /// that asks for a kick (need_wakeup on the fill ring).
  uint32_t recv(uint32_t q, Buf* bufs, uint32_t n) override;
  /// Takes back the chunks on the completion ring, copies each frame into a free transmit
  /// chunk and queues it on the tx ring, then one sendto() kick (always in copy mode).
  /// Returns the frames queued: not a frame of 0 or more than kFrameSize bytes
  /// (tx_bad_len), nor, once no chunk is free, the rest (tx_ring_full).
  uint32_t send(uint32_t q, const Buf* bufs, uint32_t n) override;
  /// XDP_STATISTICS summed over the queues (rx_dropped, rx_invalid_descs, tx_invalid_descs,
  /// rx_ring_full, rx_fill_ring_empty_descs, tx_ring_empty_descs: the kernel's names), then
  /// ours: rx_truncated, rx_bad_desc, tx_ring_full, tx_bad_len, tx_bad_desc (a completion
  /// outside our transmit chunks), tx_kick_again (sendto() left descriptors queued: EAGAIN,
  /// past kTxBudget or a busy driver), tx_kick_errors (it failed but for EAGAIN, EBUSY,
  /// ENOBUFS).
  void counters(DeviceCounters* out) const override;
  /// Through a packet socket of its own on the interface (XDP programs see only what the
  /// interface receives; the kernel's transmit path is free).
  bool send_control(const uint8_t* frame, uint32_t len) override;
  bool has_control_path() const override { return control_fd_.valid(); }

  /// Where the program runs: "native", "skb", or "" when closed.
  const char* attach_mode() const {
    return attached_ == XdpMode::kSkb ? "skb" : attached_ == XdpMode::kNative ? "native" : "";
  }
  /// After open(): the kernel bound every socket zero-copy (XDP_OPTIONS_ZEROCOPY).
  bool zero_copy() const { return zero_copy_; }

  /// UMEM geometry, per queue: kFrames frames of kFrameSize bytes (aligned chunks, 16 MiB
  /// the kernel pins: RLIMIT_MEMLOCK without CAP_IPC_LOCK), the first kRxFrames for
  /// receiving (each in the fill ring, the kernel's hands or the rx ring), the others for
  /// sending. Ring sizes follow: rx kRxFrames, completion kTxFrames, fill and tx twice that
  /// (the kernel shows its consumer position late), so a ring never lacks room for a chunk
  /// we hold.
  static constexpr uint32_t kFrameSize = 4096;
  static constexpr uint32_t kRxFrames = 2048;
  static constexpr uint32_t kTxFrames = 2048;
  static constexpr uint32_t kFrames = kRxFrames + kTxFrames;
  /// The kernel writes a received frame this far into its chunk in copy mode
  /// (XDP_PACKET_HEADROOM): the largest frame received is kFrameSize - kRxHeadroom bytes.
  static constexpr uint32_t kRxHeadroom = 256;
  /// Descriptors one copy-mode sendto() may send (XDP_MAX_TX_SKB_BUDGET, Linux 6.17; the
  /// kernel's default, and older kernels' limit, is 32): the rest of a batch stays queued
  /// until the next send() (tx_kick_again).
  static constexpr uint32_t kTxBudget = 256;

 private:
  struct Queue;
  bool load_program(std::string* err);
  bool attach(XdpMode mode, std::string* err);
  bool open_queue(Queue& x, uint32_t q, std::string* err);
  int make_socket(Queue& x, uint32_t q, const void* config, const char** step);
  static void close_queue(Queue& x);

  std::string name_;
  uint32_t nq_;
  XdpMode want_;
  uint32_t ifindex_ = 0;
  UniqueFd map_, prog_;                // the XSKMAP (queue -> socket) and the program
  XdpMode attached_ = XdpMode::kAuto;  // kAuto: not attached
  bool zero_copy_ = false;
  WireInfo info_;
  std::unique_ptr<Queue[]> qs_;  // nq_ of them while open
  UniqueFd control_fd_;          // send_control's packet socket
  uint64_t tx_control_ = 0, tx_control_errors_ = 0;  // (any thread: atomic adds)
};

}  // namespace vl::wire
