#pragma once
// The vhost-user front-end (driver side) for virtlink's generator and VNF: connects to (or
// accepts) a back-end socket, negotiates features, shares its driver memory and sets up
// queue pair 0. docs/architecture.md, "The vhost-user back-end".
#include <cstdint>
#include <string>
#include <vector>

#include "util/fd.h"
#include "vhost/channel.h"
#include "vhost/protocol.h"
#include "virtio/driver_memory.h"
#include "virtio/split_driver_queue.h"

namespace vl::vhost {

struct FrontendOptions {
  std::string path;           ///< the back-end's socket
  bool server = false;        ///< listen on path and accept the back-end (DPDK client=1)
  int timeout_ms = 10000;     ///< connect retries / accept wait / each reply
  /// Features we would like; the negotiated set is this AND what the back-end offers.
  uint64_t features = 0;
  /// Ask for the direct-link channel (vhost/link_protocol.h) when the back-end offers it.
  bool direct_link = false;
  /// The default wish: VERSION_1, MRG_RXBUF, EVENT_IDX, PROTOCOL_FEATURES.
  static uint64_t default_features();
};

/// One vring as SET_VRING_NUM/BASE/ADDR describe it (our addresses; for a packed ring avail
/// and used are the driver and device event suppression areas).
struct VringSetup {
  uint32_t num = 0;
  uint64_t desc_uva = 0, avail_uva = 0, used_uva = 0;
  uint32_t base = 0;  ///< SET_VRING_BASE num (packed: slot | wrap << 15)
  template <class Q>
  static VringSetup of(const Q& q) {
    return {q.size(), q.desc_uva(), q.avail_uva(), q.used_uva(), q.vring_base()};
  }
};

class Frontend {
 public:
  /// Opens the connection (client: retries until timeout; server: waits for the back-end).
  bool connect(const FrontendOptions& o, std::string* err);
  /// Negotiates and starts queue pair 0: vring 0 = `rxq` (we receive), 1 = `txq`.
  bool start(virtio::DriverMemory& mem, virtio::SplitDriverQueue& rxq, virtio::SplitDriverQueue& txq,
             std::string* err);
  /// Negotiates and starts `vrings.size() / 2` queue pairs: vring 2k is pair k's receive
  /// queue, 2k+1 its transmit queue (virtio 1.2 §5.1.2), each given by its ring addresses
  /// (split or packed: the caller asked for VIRTIO_F_RING_PACKED in FrontendOptions::features
  /// and checks features() for it). More than one pair needs VIRTIO_NET_F_MQ in the wish and
  /// from the back-end, the MQ protocol feature, and GET_QUEUE_NUM (queue pairs the back-end
  /// supports, vhost-user.rst) at least as large; every vring is enabled (SET_VRING_ENABLE)
  /// when PROTOCOL_FEATURES was negotiated. Kick and call eventfds: kick_fd(i), call_fd(i).
  bool start(virtio::DriverMemory& mem, const std::vector<VringSetup>& vrings, std::string* err);
  /// Stops every vring (GET_VRING_BASE) and closes the connection.
  void stop();

  uint64_t features() const { return features_; }
  uint32_t hdr_len() const { return virtio::net_hdr_len(features_); }
  int kick_fd(uint32_t vring) const { return vring < kick_.size() ? kick_[vring].get() : -1; }
  int call_fd(uint32_t vring) const { return vring < call_.size() ? call_[vring].get() : -1; }
  /// Queue pairs started; the back-end's GET_QUEUE_NUM (0 when MQ was not negotiated).
  uint32_t queue_pairs() const { return static_cast<uint32_t>(kick_.size() / 2); }
  uint64_t backend_queue_num() const { return backend_queue_num_; }
  bool connected() const { return chan_.open(); }
  /// Our end of the direct-link channel (FrontendOptions::direct_link and a back-end that
  /// offered it), handed over once; an invalid fd otherwise.
  UniqueFd take_link_channel() { return std::move(link_chan_); }

  /// Sends one request; with `reply` waits for the u64 reply (GET_* requests), else, when
  /// REPLY_ACK was negotiated, waits for the ack and fails on a non-zero one.
  bool request(Req req, const void* payload, uint32_t size, const int* fds, uint32_t nfds,
               uint64_t* reply, std::string* err);
  /// A GET_VRING_BASE-style request whose reply is a vring state.
  bool request_state(Req req, VringState s, VringState* out, std::string* err);

 private:
  FrontendOptions opts_;
  Channel chan_;
  uint64_t features_ = 0;
  uint64_t proto_ = 0;
  std::vector<UniqueFd> kick_, call_;
  uint64_t backend_queue_num_ = 0;
  UniqueFd link_chan_;
  bool request_link_channel(std::string* err);
};

}  // namespace vl::vhost
