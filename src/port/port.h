#pragma once
// The one interface between ports and the switch datapath: what every port is to a PMD
// thread (Port: an id, a name, an active flag, a datapath view of ring references) and what
// the datapath is to a port (Quiescer: the quiescence contract and the writer policy).
// vhost-user ports implement Port today (port/vhost_port.h); docs/architecture.md "Ports".
#include <atomic>
#include <cstdint>
#include <string>

#include "port/counters.h"
#include "port/port_config.h"
#include "port/port_dp.h"

namespace vl::port {

/// A switch port as the datapath sees it. The datapath reads only `active()` and `dp()`
/// per burst (no virtual call per burst or frame); the virtual members are the control
/// thread's (state, writer placement). A port publishes a new PortDp only while paused:
/// clear active, wait for quiescence (Quiescer::wait_quiescent), change, rebuild, set active.
class Port {
 public:
  virtual ~Port() = default;
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  uint32_t id() const { return id_; }
  const std::string& name() const { return name_; }
  /// The datapath view may be used (acquire): a PMD thread reads dp() only then.
  bool active() const { return active_.load(std::memory_order_acquire); }
  const PortDp& dp() const { return dp_; }

  /// Link state for `ctl show`: "connected", "waiting" or "down" (INTERFACES.md).
  virtual const char* state() const = 0;
  /// The port type as `--port NAME=TYPE:ARG` spells it (port_type_name).
  virtual const char* type_name() const = 0;
  /// What the type's argument names: the socket path, the interface, DEVARGS.
  virtual const std::string& target() const = 0;
  /// Its peer is there: a front-end connected, a device open.
  virtual bool connected() const = 0;
  /// The settings it was made with.
  virtual const PortConfig& config() const = 0;

  // ---- The control thread's loop (app/switch.h) ----
  /// Opens what the port needs (a socket, a device). False with `*err` on a fatal error.
  virtual bool start(std::string* err) = 0;
  /// Closes it; the port is down and out of the datapath after.
  virtual void stop() = 0;
  /// The fd the control loop should watch for this port (-1: none).
  virtual int watch_fd() const { return -1; }
  /// Handles readiness of watch_fd(). True if the watched fd changed.
  virtual bool on_event() { return false; }
  /// Called every second. True if watch_fd() changed.
  virtual bool on_tick() { return false; }
  /// Out of the switched path (a direct link serves its rings): not polled, not a
  /// destination, its writers never moved.
  virtual bool linked_away() const { return false; }
  /// Which PMD threads write the receive queues when there are fewer ready ones than
  /// threads (dp/rx_writers.h `rotation`).
  uint32_t rx_writer_rotation() const { return rx_rotation_; }
  /// Sets it before the port starts (default: the port's id).
  void set_rx_writer_rotation(uint32_t r) { rx_rotation_ = r; }
  /// Changes the rotation of a live port and republishes its datapath view. Control thread.
  virtual void move_rx_writers(uint32_t rotation) = 0;

 protected:
  Port(uint32_t id, std::string name) : id_(id), name_(std::move(name)), rx_rotation_(id) {}

  uint32_t id_;
  std::string name_;
  std::atomic<bool> active_{false};
  PortDp dp_;
  uint32_t rx_rotation_;
};

/// The datapath as a port sees it: waits until no PMD thread is inside a port's datapath
/// (an RCU-style grace period), wakes PMD threads, and applies the writer policy.
class Quiescer {
 public:
  virtual ~Quiescer() = default;
  virtual void wait_quiescent() = 0;
  /// Tells PMD threads that ports changed (wakes sleeping ones).
  virtual void ports_changed() = 0;
  /// Moves the kick eventfd a sleeping PMD thread waits on for rxq (`port`, `queue`) from
  /// `old_fd` to `new_fd` (-1: none). Called before the old fd is closed (epoll keys on the
  /// open file, which the front-end still holds, so it must be removed while our fd number
  /// is valid).
  virtual void set_kick_fd(uint32_t port, uint32_t queue, int old_fd, int new_fd) = 0;
  /// Fills the writer fields of a datapath view being rebuilt (PortDp::rx_ready, rx_for)
  /// for the PMD threads there are (dp/rx_writers.h).
  virtual void assign_rx_writers(PortDp& d, uint32_t rotation) const = 0;
};

}  // namespace vl::port
