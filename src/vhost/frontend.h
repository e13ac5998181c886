#pragma once
// The vhost-user front-end (driver side): what QEMU or DPDK virtio-user do, for virtlink's
// own traffic generator and VNF. It connects to (or accepts) a back-end socket, negotiates
// features, shares its driver memory (one memfd) and sets up queue pair 0, following the
// message order QEMU uses (vhost-user.rst "Starting and stopping rings").
#include <cstdint>
#include <string>

#include "util/fd.h"
#include "vhost/channel.h"
#include "vhost/protocol.h"
#include "virtio/driver_memory.h"
#include "virtio/driver_queue.h"

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

class Frontend {
 public:
  /// Opens the connection (client: retries until timeout; server: waits for the back-end).
  bool connect(const FrontendOptions& o, std::string* err);
  /// Negotiates and starts queue pair 0: vring 0 = `rxq` (we receive), 1 = `txq`.
  bool start(virtio::DriverMemory& mem, virtio::DriverQueue& rxq, virtio::DriverQueue& txq,
             std::string* err);
  /// Stops both vrings (GET_VRING_BASE) and closes the connection.
  void stop();

  uint64_t features() const { return features_; }
  uint32_t hdr_len() const { return virtio::net_hdr_len(features_); }
  int kick_fd(uint32_t vring) const { return kick_[vring].get(); }
  int call_fd(uint32_t vring) const { return call_[vring].get(); }
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
  UniqueFd kick_[2], call_[2];
  UniqueFd link_chan_;
  bool request_link_channel(std::string* err);
};

}  // namespace vl::vhost
