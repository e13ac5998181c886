#pragma once
// `virtlink switch`: owns the ports, the PMD threads and the control socket, and runs the
// control thread's event loop (vhost-user messages, reconnects, MAC aging, ctl requests,
// SIGINT/SIGTERM).
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/announce_limiter.h"
#include "app/config.h"
#include "app/links.h"
#include "app/port_rates.h"
#include "control/control_server.h"
#include "dp/fdb.h"
#include "dp/forwarder.h"
#include "dp/pmd.h"
#include "port/uplink_port.h"
#include "port/vhost_port.h"
#include "util/fd.h"
#include "vhost/memory_budget.h"

namespace vl::app {

struct SwitchView;

class Switch {
 public:
  explicit Switch(SwitchConfig cfg);
  ~Switch();

  /// Runs until SIGINT/SIGTERM (or stop()). Returns the process exit code.
  int run();
  /// The state the control commands act on, without sockets or threads: the ports (not
  /// started), the tables, the PMD set (its threads not started) and the flush policies,
  /// the first steps of run()'s set-up (run() does them once, prepared or not). For a
  /// caller that serves the commands itself (add_ctl_commands on its own ControlServer, as
  /// fuzz/fuzz_control.cpp does) without a running datapath.
  void prepare();
  void stop() { stop_.store(true); }

  // What the control commands (app/ctl_commands.h) ask of the switch, on the control thread.
  /// The `ctl stats --json` document (INTERFACES.md).
  control::Json stats() const;
  control::Json ports_info() const;
  /// `ctl show`: the switch, its PMD threads, ports and links on one screen.
  control::Json show() const;
  /// `ctl fdb`: the MAC table's entries of `port` (~0u: every port's), at most `limit` of
  /// them, as a reply made in slices (app/json_views.h fdb_stream).
  std::unique_ptr<control::ReplyStream> fdb(uint32_t port, size_t limit) const;
  control::Json pmd_stats() const;
  /// `ctl pmd-rxq-show` (and the reply of `ctl pmd-rebalance`): each thread's rxqs.
  control::Json pmd_rxq_show() const;
  /// `ctl pmd-rebalance`: the rxqs are assigned to PMD threads again now.
  void rebalance() { pmds_->reassign(true); }
  /// The flush policy of `port` (port::kMaxPorts: every port); PMD threads pick it up at
  /// their next burst or check.
  void set_flush(uint32_t port, dp::FlushPolicy p);
  /// The index of the port named `name`.
  std::optional<uint32_t> port_index(const std::string& name) const;
  LinkManager& links() { return links_; }

 private:
  /// Set-up, in its order: ports and tables, flush policies, the control thread's fds, the
  /// control socket and its commands, then the ports' sockets, the PMD threads and links.
  bool setup(std::string* err);
  void add_ports();
  void set_flush_policies();
  /// epoll, the 1 s timer and the signalfd (SIGINT, SIGTERM; SIGPIPE is blocked).
  void open_event_fds();
  void epoll_add(int fd, uint64_t key);
  uint32_t send_rarp(uint32_t from, const uint8_t mac[6], uint16_t vlan);
  void attach_tunnels();
  bool start_datapath(std::string* err);
  void teardown();
  /// SEND_RARP on `port` (a migrated guest): the bridge learns `mac` there.
  void announce(uint32_t port, const uint8_t mac[6]);
  void watch_port(uint32_t i);
  void on_tick();
  /// The tick's sample of every port's counters, for the rates of `ctl stats`.
  void sample_rates();
  /// The state the JSON views read (app/json_views.h).
  SwitchView view() const;

  SwitchConfig cfg_;
  dp::SwitchTables tables_;
  dp::Fdb fdb_;
  /// --max-total-guest-memory, shared by every port (declared before ports_: it outlives
  /// their shares).
  vhost::MemoryBudget mem_budget_;
  std::unique_ptr<dp::PmdSet> pmds_;
  std::vector<std::unique_ptr<port::Port>> ports_;
  LinkManager links_{&ports_};
  std::vector<int> watched_fd_;
  control::ControlServer ctl_;
  UniqueFd epoll_, timer_, signal_;
  std::atomic<bool> stop_{false};
  AnnounceLimiter announce_limit_;  ///< SEND_RARP per port (control thread)
  uint64_t start_ns_ = 0;
  PortRates rates_;  ///< control thread (on_tick, stats)
};

}  // namespace vl::app
