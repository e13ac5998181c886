#pragma once
// The B side of a direct link (docs/direct-link.md, vhost/link_protocol.h): a virtlink
// front-end port that also serves another port's ("A"'s) rings as their device, the way a
// VM with a vhost-pci device served its neighbour's. The switch sends A's memory table,
// ring addresses and eventfds on the link channel; from kLinkStart to kLinkStop this object
// maps A's memory and moves frames between A's rings and our own buffers, one copy each
// way, with the switch's own ring code (virtio::SplitDeviceQueue, virtio::net_copy): the same
// validation, so a malformed ring on A is dropped and counted here, never followed.
//
// Single-threaded: the owner (Vnf) calls service() between forwarding passes, so the
// mapping is never removed while a pass uses it.
#include <cstdint>
#include <memory>
#include <string>

#include "util/fd.h"
#include "vhost/channel.h"
#include "vhost/link_protocol.h"
#include "virtio/split_device_queue.h"
#include "virtio/split_driver_queue.h"
#include "virtio/guest_memory.h"
#include "virtio/net_copy.h"

namespace vl::vnf {

class DirectLink {
 public:
  DirectLink();
  ~DirectLink();
  DirectLink(const DirectLink&) = delete;
  DirectLink& operator=(const DirectLink&) = delete;

  /// Takes our end of the link channel (vhost::Frontend::take_link_channel()).
  void set_channel(UniqueFd fd) { chan_.reset(std::move(fd)); }
  int channel_fd() const { return chan_.fd(); }
  bool has_channel() const { return chan_.open(); }

  /// Handles every request waiting on the channel (non-blocking). A closed or malformed
  /// channel stops the link (unmapping A's memory) and closes the channel.
  void service();
  /// Stops serving and unmaps (also done by service() on kLinkStop and by the destructor).
  void stop();

  bool active() const { return active_; }
  /// A's transmit queue's kick fd (to sleep on in interrupt mode), or -1.
  int kick_fd() const { return active_ ? kick_[1].get() : -1; }
  /// Asks A to kick (true) or not (false) when it transmits; after enabling, check
  /// tx_pending() before sleeping.
  void set_tx_kicks(bool on) {
    if (active_ && !q_[1].broken()) q_[1].set_kicks(on);
  }
  bool tx_pending() { return active_ && !q_[1].broken() && q_[1].pending() > 0; }

  /// Takes up to `max` frames A transmitted (at most as many as `pool` has free buffers)
  /// and copies each into a buffer of `pool` behind a zeroed `hdr_len`-byte virtio-net
  /// header; `bufs[i]`/`lens[i]` get the buffer index and header + frame bytes. A's chains
  /// are returned (used, length 0) and A is notified if it asked. Malformed chains are
  /// dropped and counted (bad_descriptor, bad_header, too_big, ring_broken).
  uint32_t receive(virtio::BufferPool& pool, uint32_t hdr_len, uint32_t* bufs, uint32_t* lens,
                   uint32_t max);
  /// Copies one frame (Ethernet header onwards, `len` bytes) into A's receive queue; false
  /// when it was dropped (no_rx_buffer, too_big, ring_broken; counted). flush() publishes.
  bool deliver(const uint8_t* frame, uint32_t len);
  void flush() {
    if (active_ && !q_[0].broken()) q_[0].publish_used();
  }

  /// Counters of the current link and of every link this object served so far.
  const vhost::LinkCounters& counters() const { return cur_; }
  const vhost::LinkCounters& totals() const { return total_; }
  uint64_t links() const { return links_; }

 private:
  bool handle(vhost::Message& m, std::string* err);
  bool reply_status(uint32_t req, uint64_t status);
  bool h_mem(vhost::Message& m, std::string* err);
  bool h_vring(vhost::Message& m, std::string* err);
  bool h_start(vhost::Message& m, std::string* err);
  void count_drop(uint32_t reason, uint64_t n = 1) {
    cur_.drops[reason] += n;
    total_.drops[reason] += n;
  }

  vhost::Channel chan_;
  std::unique_ptr<virtio::GuestMemory> mem_;
  vhost::LinkVring vr_[2] = {};
  bool vr_set_[2] = {};
  UniqueFd kick_[2], call_[2];
  virtio::SplitDeviceQueue q_[2];  ///< [0] A's receive queue, [1] A's transmit queue
  bool active_ = false;
  uint32_t hdr_len_ = 12;
  bool mrg_ = false;
  uint32_t max_frame_ = virtio::kMaxFrameLen;
  std::unique_ptr<virtio::SegmentArena> arena_, scratch_;
  vhost::LinkCounters cur_ = {}, total_ = {};
  uint64_t links_ = 0;
};

}  // namespace vl::vnf
