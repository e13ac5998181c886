#pragma once
// A switch port backed by a vhost-user socket, in server mode (virtlink listens on PATH) or
// client mode (virtlink connects to PATH and retries every second while the peer is
// absent). It owns the vhost-user back-end of its current connection and publishes the
// datapath view (PortDp) under the quiescence protocol:
//   pause:  active = false; wait until every PMD thread has passed a quiescent point;
//   change: the back-end mutates rings, memory, fds;
//   resume: rebuild PortDp; active = true; wake PMD threads.
#include <atomic>
#include <cstdint>
#include <string>

#include "port/port.h"
#include "util/fd.h"
#include "vhost/backend.h"

namespace vl::port {

enum class SocketMode : uint8_t { kServer, kClient };

/// Static configuration of one vhost-user port.
/// Default of VhostPortConfig::tx_retry_us, and its largest value (µs).
inline constexpr uint32_t kDefaultTxRetryUs = 20;
inline constexpr uint32_t kMaxTxRetryUs = 10000;
/// Default of VhostPortConfig::completion_coalesce_us, and its largest value (µs).
inline constexpr uint32_t kDefaultCompletionCoalesceUs = 250;
inline constexpr uint32_t kMaxCompletionCoalesceUs = 10000;

struct VhostPortConfig {
  std::string name;
  SocketMode mode = SocketMode::kServer;
  std::string path;
  uint32_t mtu = 0;             ///< 0: no limit beyond the guest's NET_SET_MTU
  uint32_t socket_mode = 0600;  ///< permission bits of the socket file (server mode)
  std::string socket_owner;     ///< user name or uid of the socket file; empty: ours
  std::string socket_group;     ///< group name or gid of the socket file; empty: ours
  bool mrg_rxbuf = true;        ///< offer VIRTIO_NET_F_MRG_RXBUF
  bool offloads = true;         ///< offer CSUM/GUEST_CSUM/TSO/ECN (offload::kOffloadFeatures)
  /// Queue pairs offered (GET_QUEUE_NUM; VIRTIO_NET_F_MQ when above 1), 1..8.
  uint32_t max_queues = 8;
  /// Bounded retry into this port's full receive queue (µs, 0: drop at once): a frame that
  /// finds no receive buffer is kept in its intermediate queue and delivered at the next
  /// passes until it is this old (from being taken off its sender's ring), then dropped as
  /// no_rx_buffer. Frames kept count in tx_retries. Like OVS's tx-retries-max, bounded in
  /// time rather than attempts.
  uint32_t tx_retry_us = kDefaultTxRetryUs;
  /// Transmit completion coalescing (µs, 0: off), in the spirit of virtio-net's
  /// notification coalescing (virtio 1.3 §5.1.6.5.6, tx_usecs): a call the guest asked for on
  /// its transmit queue (its sent buffers are used) waits up to this long, and goes out
  /// with the next call into its receive queue if one comes sooner; counted in
  /// rx_calls_deferred. docs/architecture.md "Notifications".
  uint32_t completion_coalesce_us = kDefaultCompletionCoalesceUs;
  /// Most bytes of guest memory one connection may map (SET_MEM_TABLE beyond it is
  /// refused): bounds the address space a front-end can take.
  uint64_t max_guest_memory = uint64_t{1} << 40;
  /// Which of the keys above the port's own [[port]] table set (switch-wide settings fill
  /// in the others): bits of PortKey.
  uint32_t explicit_keys = 0;
};

/// Bits of VhostPortConfig::explicit_keys.
enum PortKey : uint32_t {
  kKeySocketMode = 1,
  kKeySocketOwner = 2,
  kKeySocketGroup = 4,
  kKeyMaxGuestMemory = 8,
  kKeyTxRetry = 16,
  kKeyCompletionCoalesce = 32,
};

/// Told before a port's rings or memory change, so that a direct link serving that port's
/// rings (or served by its front-end) is revoked first (app/links.h).
class LinkHooks {
 public:
  virtual ~LinkHooks() = default;
  virtual void port_changing(uint32_t port) = 0;
};

class VhostPort final : public Port, public vhost::DeviceHost {
 public:
  /// `budget`: the switch-wide cap on guest memory its back-end shares with the other ports
  /// (vhost/memory_budget.h), or null.
  VhostPort(uint32_t id, VhostPortConfig cfg, Quiescer* q, vhost::MemoryBudget* budget = nullptr);
  ~VhostPort() override;

  const VhostPortConfig& config() const { return cfg_; }

  /// Server mode: creates the listening socket (replacing a stale socket file).
  /// Client mode: tries to connect once. Returns false with `*err` on a fatal error.
  bool start(std::string* err);
  /// Closes the connection, the listening socket, and removes the socket file.
  void stop();

  /// The fd the control loop should watch: the connection if connected, else the
  /// listening socket (server) or -1 (client, waiting to retry).
  int watch_fd() const;
  /// Handles readiness of watch_fd(). Returns true if the watched fd changed.
  bool on_event();
  /// Called every second: client ports retry their connection. True if watch_fd changed.
  bool on_tick();

  /// "connected", "waiting" or "down" (INTERFACES.md).
  const char* state() const override;
  const vhost::Backend& backend() const { return backend_; }
  uint64_t connects() const { return connects_; }

  // ---- Datapath side (Port: active(), dp()) ----
  /// Shared state (locks, self-checks) of queue pair q's guest receive / transmit queue.
  const QueueShared& rx_shared(uint32_t q) const { return shared_[2 * q]; }
  const QueueShared& tx_shared(uint32_t q) const { return shared_[2 * q + 1]; }

  // ---- Direct links (app/links.h) ----
  void set_link_hooks(LinkHooks* h) { link_hooks_ = h; }
  /// Which PMD threads write this port's receive queues when it has fewer ready ones than
  /// there are threads (dp/rx_writers.h `rotation`; default: the port's id). Set before
  /// the front-end connects.
  void set_rx_writer_rotation(uint32_t r) { rx_rotation_ = r; }
  /// Changes the rotation of a live port and rebuilds its datapath view (a pause and a
  /// resume: the PMD threads deliver what they hold first); its rings and memory do not
  /// change, so a direct link is not revoked. Control thread.
  void move_rx_writers(uint32_t rotation) override {
    rx_rotation_ = rotation;
    ++no_link_hook_;  // rings and memory stay: no direct link to revoke
    pause_datapath();
    resume_datapath();
    --no_link_hook_;
  }
  /// Pause/resume for the link manager's own changes (no hook call).
  void pause_for_link() {
    ++no_link_hook_;
    pause_datapath();
  }
  void resume_for_link() {
    resume_datapath();
    --no_link_hook_;
  }
  /// While set (between pause_for_link and resume_for_link), the port is out of the
  /// switched path: no PMD thread polls or fills its rings; a direct-link peer serves them.
  void set_linked_away(bool on) { linked_away_ = on; }
  bool linked_away() const override { return linked_away_; }
  vhost::Backend& backend_for_link() { return backend_; }
  /// A SEND_RARP arrived since the last call (vhost::Backend::take_rarp).
  bool take_rarp(uint8_t mac[6]) { return backend_.take_rarp(mac); }
  /// Largest frame the port's front-end may receive (bytes): its MTU or ours, plus an
  /// Ethernet header and one VLAN tag.
  uint32_t max_frame() const;

  // DeviceHost
  void pause_datapath() override;
  void resume_datapath() override;

 private:
  bool try_connect();
  void drop_connection(const std::string& why);

  VhostPortConfig cfg_;
  Quiescer* quiescer_;
  vhost::Backend backend_;
  UniqueFd listen_;
  int kick_fd_[kMaxQueuePairs];  ///< transmit queues' kick fds registered with PMD threads
  QueueShared shared_[2 * kMaxQueuePairs];
  uint32_t dp_gen_ = 0;  ///< PortDp::gen of the last rebuild
  int pause_depth_ = 0;
  bool down_ = false;
  /// Seconds a port refuses connections after its front-end blocked the datapath.
  static constexpr uint64_t kHoldDownS = 30;
  uint64_t hold_until_s_ = 0;  ///< mono_s() (util/clock.h); accept/connect only from then
  bool retry_logged_ = false;
  uint64_t connects_ = 0;
  LinkHooks* link_hooks_ = nullptr;
  /// Pauses that change neither rings nor memory (the link manager's own, a writer move):
  /// pause_datapath calls no LinkHooks::port_changing for them.
  int no_link_hook_ = 0;
  bool linked_away_ = false;
};

}  // namespace vl::port
