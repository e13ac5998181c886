#pragma once
// A switch port backed by a vhost-user socket, in server mode (virtlink listens on PATH) or
// client mode (virtlink connects to PATH and retries every second while the peer is
// absent). It owns the vhost-user back-end of its current connection and publishes the
// datapath view (PortDp) under the quiescence protocol:
//   pause:  active = false; wait until every PMD thread has passed a quiescent point;
//   change: the back-end mutates rings, memory, fds;
//   resume: rebuild PortDp; active = true; wake PMD threads.
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "port/port.h"
#include "port/port_config.h"
#include "util/fd.h"
#include "util/unix_socket.h"
#include "vhost/backend.h"

namespace vl::port {

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
  VhostPort(uint32_t id, PortConfig cfg, Quiescer* q, vhost::MemoryBudget* budget = nullptr);
  ~VhostPort() override;

  const PortConfig& config() const override { return cfg_; }

  /// Server mode: creates the listening socket (replacing a stale socket file).
  /// Client mode: tries to connect once. Returns false with `*err` on a fatal error.
  bool start(std::string* err) override;
  /// Changes the socket file's permission bits and owner/group (names or ids; empty: as
  /// they are) while the port runs: its front-end stays connected. False with `*err` for
  /// an unknown user or group or a failed chmod/chown (then nothing changed in the config).
  bool set_socket_access(uint32_t mode, const std::string& owner, const std::string& group,
                         std::string* err);
  /// Closes the connection, the listening socket, and removes the socket file.
  void stop() override;

  // ---- Upgrade (`ctl upgrade`, app/switch_upgrade.cpp) ----
  /// The listening socket (server mode), or -1.
  int listen_fd() const { return listen_.get(); }
  /// Starts on a predecessor's sockets instead of start(): `listen` (server mode; none:
  /// listens anew) and, when `s` is not null, its connection with its device state
  /// (vhost::Backend::adopt). Takes the fds. False with `*err`.
  bool adopt(UniqueFd listen, vhost::BackendSnapshot* s, std::string* err);

  /// The fd the control loop should watch: the connection if connected, else the
  /// listening socket (server) or -1 (client, waiting to retry).
  int watch_fd() const override;
  /// Handles readiness of watch_fd(). Returns true if the watched fd changed.
  bool on_event() override;
  /// Called every second: client ports retry their connection. True if watch_fd changed.
  bool on_tick() override;

  /// "connected", "waiting" or "down" (INTERFACES.md).
  const char* state() const override;
  const char* type_name() const override { return port_type_name(cfg_.type, cfg_.mode); }
  const std::string& target() const override { return cfg_.path; }
  bool connected() const override { return backend_.connected(); }
  const vhost::Backend& backend() const { return backend_; }
  uint64_t connects() const { return connects_; }
  /// A client port's last failed connect (`ctl ports`): errno and its text, when (wall
  /// clock, s since the epoch, and CLOCK_MONOTONIC s for its age), and the attempts that
  /// failed in a row before a connect succeeded (0 once connected; the error stays shown).
  struct ConnectError {
    int err = 0;             ///< errno; 0: no connect failed yet
    std::string text;        ///< strerror(err), or why the path cannot be used
    int64_t at_unix_s = 0;   ///< CLOCK_REALTIME s
    uint64_t at_mono_s = 0;  ///< mono_s()
    uint64_t failures = 0;   ///< failed attempts since the last successful connect
  };
  const ConnectError& last_connect_error() const { return connect_error_; }

  // ---- Datapath side (Port: active(), dp()) ----
  /// Shared state (locks, self-checks) of queue pair q's guest receive / transmit queue.
  const QueueShared& rx_shared(uint32_t q) const { return shared_[2 * q]; }
  const QueueShared& tx_shared(uint32_t q) const { return shared_[2 * q + 1]; }

  // ---- Direct links (app/links.h) ----
  void set_link_hooks(LinkHooks* h) { link_hooks_ = h; }
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
  /// uid/gid of a socket owner/group name or id (-1 for empty); false with `*err`.
  bool resolve_access(const std::string& owner, const std::string& group, uid_t* uid, gid_t* gid,
                      std::string* err) const;
  bool try_connect();
  void drop_connection(const std::string& why);

  PortConfig cfg_;
  Quiescer* quiescer_;
  vhost::Backend backend_;
  UniqueFd listen_;
  BoundSocketFile file_;  // the listening socket's file
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
  ConnectError connect_error_;
  void connect_failed(int err, std::string text);
  LinkHooks* link_hooks_ = nullptr;
  /// Pauses that change neither rings nor memory (the link manager's own, a writer move):
  /// pause_datapath calls no LinkHooks::port_changing for them.
  int no_link_hook_ = 0;
  bool linked_away_ = false;
};

}  // namespace vl::port
