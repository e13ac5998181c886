#pragma once
// `virtlink switch`: owns the ports, the PMD threads and the control socket, and runs the
// control thread's event loop (vhost-user messages, reconnects, MAC aging, ctl requests,
// SIGINT/SIGTERM).
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/announce_limiter.h"
#include "app/capture.h"
#include "app/config.h"
#include "app/counter_base.h"
#include "app/links.h"
#include "app/port_rates.h"
#include "app/state_db.h"
#include "control/control_server.h"
#include "control/metrics_server.h"
#include "dp/fdb.h"
#include "dp/forwarder.h"
#include "dp/pmd.h"
#include "port/uplink_port.h"
#include "port/vacant_port.h"
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
  /// `ctl trace`: what the datapath would do with a frame of `len` bytes arriving on `port`,
  /// whose first bytes (or all) are `bytes` (dp/trace.h trace_frame, as the PMD thread
  /// polling the port would). Reads the tables; changes nothing.
  control::Json trace(uint32_t port, const std::vector<uint8_t>& bytes, uint32_t len) const;
  control::Json pmd_stats() const;
  /// `ctl pmd-rxq-show` (and the reply of `ctl pmd-rebalance`): each thread's rxqs.
  control::Json pmd_rxq_show() const;
  /// `ctl pmd-rebalance`: the rxqs are assigned to PMD threads again now.
  void rebalance() { pmds_->reassign(true); }
  /// The flush policy of `port` (port::kMaxPorts: every port); PMD threads pick it up at
  /// their next burst or check.
  void set_flush(uint32_t port, dp::FlushPolicy p);
  /// After a change the state file keeps (a link made or revoked): writes it.
  void state_changed() { save_state(); }
  /// Why the last write of the --db state file failed ("" when it succeeded, or without
  /// --db): the changes since hold until the switch stops.
  const std::string& state_error() const { return state_error_; }
  /// The index of the port named `name`.
  std::optional<uint32_t> port_index(const std::string& name) const;
  LinkManager& links() { return links_; }

  // Ports at run time (app/switch_ports.cpp; docs/architecture.md "Ports at run time").
  // Each returns false with `*err` and changes nothing when the request cannot be done;
  // `*usage` is set when that is the request's fault (a usage error: exit status 2).
  /// `ctl add-port NAME TYPE ARG [KEY=VALUE ...]`: a new port in the lowest vacant slot,
  /// started at once. `settings`: set_port_setting's keys, flush=POLICY and
  /// external-id:KEY=VALUE. With `may_exist`, a port of that name, type and target is left
  /// as it is (success).
  bool add_port(const std::string& name, const std::string& type, const std::string& arg,
                const std::vector<std::string>& settings, bool may_exist, control::Json* out,
                std::string* err, bool* usage);
  /// `ctl del-port`: stops the port (its front-end sees the connection closed, its memory is
  /// unmapped, its socket file removed) and frees its slot. With `if_exists`, no such port
  /// is a success.
  /// `by_reload`: the configuration read again dropped it (not a run-time deletion).
  bool del_port(const std::string& name, bool if_exists, control::Json* out, std::string* err,
                bool* usage, bool by_reload = false);
  /// `ctl set-port NAME key=value ...` (set_port_setting's keys, flush, external-id:K=V).
  bool set_port(const std::string& name, const std::vector<std::string>& kv, control::Json* out,
                std::string* err, bool* usage);
  /// `ctl stats-clear`: the counters `ctl stats` shows start again from 0 (app/counter_base.h).
  void clear_stats();
  /// How reload() gets the start's configuration again (the command line and its --config
  /// file, read anew): cli/cmd_switch.cpp.
  using Reloader = std::function<bool(SwitchConfig* cfg, std::string* err)>;
  void set_reloader(Reloader r) { reloader_ = std::move(r); }
  /// SIGHUP and `ctl reload`: reads the --config file again and applies what changed (ports
  /// added, removed, re-set; the flush policy, MAC aging); reports what needs a restart.
  /// False with `*err` when the file is refused (nothing changes). Under systemd it is
  /// bracketed by RELOADING=1 and READY=1 (with STATUS=, saying so when it was refused).
  bool reload(control::Json* out, std::string* err);
  /// `ctl upgrade [BINARY]` (app/switch_upgrade.cpp; docs/architecture.md "Upgrade"):
  /// starts the successor, hands it every vhost-user socket, guest memory, ring state, the
  /// MAC table, counters and the control and metrics listeners, and once it forwards sets
  /// `*take`, after whose reply this process exits (run()). False with `*err` when refused
  /// or failed: this switch then forwards as before.
  bool upgrade(const std::vector<std::string>& argv, control::Json* out, control::Takeover* take,
               std::string* err);

  // Capture and mirroring (app/switch_observe.cpp; docs/architecture.md "Capture and
  // mirroring").
  /// `ctl capture PORT rx|tx|both [--count N] [--snaplen B] [--duration S] [--bpf P]`:
  /// checks the request and gives `*take`, which starts the session on the connection.
  bool capture(const std::vector<std::string>& argv, control::Json* out, control::Takeover* take,
               std::string* err);
  /// `ctl mirror PORT rx|tx|both to OUTPORT`, `ctl mirror PORT off`.
  bool mirror(const std::vector<std::string>& argv, control::Json* out, std::string* err);
  /// Every mirror: [{"port", "rx", "tx"}] (the ports their frames go to, or null).
  control::Json mirrors() const;

 private:
  /// A port deleted: its captures end, its mirrors (either end) go.
  void observe_port_gone(uint32_t i);
  /// Closes port `i` and opens it in its slot with `next` (its external ids, settings
  /// and flush policy kept); if that fails, with `old` again. False with `*err` when
  /// `next` did not open (and says whether the port is back as it was or deleted).
  bool reopen_port(uint32_t i, const port::PortConfig& next, const port::PortConfig& old,
                   std::string* err);
  /// Set-up, in its order: ports and tables, flush policies, the control thread's fds, the
  /// control socket and its commands, then the ports' sockets, the PMD threads and links.
  bool setup(std::string* err);
  void add_ports();
  /// A port object for `pc` in slot `i`, not started.
  std::unique_ptr<port::Port> make_port(uint32_t i, const port::PortConfig& pc);
  /// The live configuration: the start's settings with today's ports (in slot order) and
  /// links, for validation and the state file.
  SwitchConfig live_config() const;
  /// Slot `i`'s port leaves the datapath and is destroyed; the slot is vacant after.
  void remove_port(uint32_t i);
  /// Writes the state file (--db), if there is one; logs a failure.
  void save_state();
  /// A port's settings as add-port/set-port give them, sorted out: its configuration,
  /// flush policy and external ids. False with `*err` for a bad one.
  struct PortEdit {
    port::PortConfig cfg;
    std::optional<std::string> flush;  ///< flush=POLICY ("default": the switch's)
    std::map<std::string, std::string> set_ids;  ///< external-id:KEY=VALUE (VALUE "": removed)
    std::vector<std::string> keys;  ///< the keys of PortConfig given (restart ones among them)
  };
  bool parse_edit(const std::vector<std::string>& settings, PortEdit* e, std::string* err) const;
  /// Creates and starts the port of `pc` in vacant slot `i`. False with `*err` (slot left
  /// vacant).
  bool open_port(uint32_t i, const port::PortConfig& pc, std::string* err);
  /// Port security of slot `i` from `pc` into the datapath's tables (SwitchTables::guard),
  /// while the slot is out of the datapath (at start; open_port).
  void set_source_guard(uint32_t i, const port::PortConfig& pc);
  /// Loads --db and merges it into cfg_ before the ports exist (the rule of README "Ports
  /// at run time"). False with `*err` when the file is refused.
  bool restore_state(std::string* err);
  /// What restore_state kept for each port by name, given to its slot once it exists.
  struct Restored {
    bool runtime = false;
    std::vector<std::string> settings;
    std::map<std::string, std::string> external_ids;
  };
  std::map<std::string, Restored> restored_;
  /// The records of the state file (app/state_db.h) as they are now.
  SavedState saved_state() const;
  /// Merges a state file's records into cfg_ (restore_state); `handover`: from a
  /// predecessor (`ctl upgrade`), whose deleted ports stay deleted.
  void merge_state(const SavedState& s, bool handover);

  // ---- Upgrade (app/switch_upgrade.cpp) ----
  /// Why `ctl upgrade` cannot be done now ("" when it can).
  std::string upgrade_refusal() const;
  /// The hand-over document; `*fds` the fds it names by index; `*reopened` the ports whose
  /// fds are not handed (uplinks: the successor opens them again).
  control::Json handover_state(std::vector<int>* fds, std::vector<std::string>* reopened) const;
  /// Pauses every vhost-user port's datapath and closes the uplinks (true), or undoes it.
  void pause_for_upgrade(bool pause);
  /// The successor: takes the offer, answers it and receives the state (before the ports
  /// exist). False with `*err`.
  bool receive_handover(std::string* err);
  bool parse_handover(const std::string& text, std::vector<UniqueFd>* fds, std::string* err);
  /// Starts slot `i`'s port on what the predecessor handed (`*handled`), if anything.
  bool start_handed_port(uint32_t i, bool* handled, std::string* err);
  /// Re-learns the handed MAC table and tells the predecessor this process forwards.
  void finish_takeover();
  /// Tells the predecessor the take-over failed (it resumes).
  void handover_failed(const std::string& why);
  struct HandedPort {
    HandedPort() = default;
    HandedPort(const HandedPort&) = delete;
    HandedPort& operator=(const HandedPort&) = delete;
    ~HandedPort();
    UniqueFd listen;
    bool connected = false;  ///< `backend` holds a connection's fds (closed if not adopted)
    vhost::BackendSnapshot backend;
    port::CounterSnapshot counters;
  };
  struct HandedFdbEntry {
    uint64_t mac;  ///< dp::Fdb::Entry::mac (VLAN << 48 | MAC)
    std::string port;
    uint32_t age_s;
  };
  std::map<std::string, HandedPort> handover_;  ///< by port name, until the ports start
  std::vector<HandedFdbEntry> handed_fdb_;
  UniqueFd handed_control_, handed_metrics_, handover_sock_;
  bool handover_done_ = false;
  uint64_t handover_ns_ = 0;  ///< mono_ns() when it was  ///< the predecessor: a successor forwards; exit after the reply
  /// reload()'s work, without the notifications (app/switch_ports.cpp).
  bool apply_reload(control::Json* out, std::string* err);
  /// The one-line summary logged at start-up and sent as STATUS= (ports, forwarding, PMD
  /// threads, control socket).
  std::string status_summary() const;
  /// SIGHUP's work on the ports: those the new configuration `nc` adds, removes or changes.
  void reload_ports(const SwitchConfig& nc, control::Json* out);
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
  /// Created by the first `ctl capture`; declared before pmds_, so it outlives the PMD
  /// threads that write its rings.
  std::unique_ptr<CaptureService> capture_;
  std::unique_ptr<dp::PmdSet> pmds_;
  /// By slot (port id); null in a vacant slot (tables_.ports points at vacant_ there).
  std::vector<std::unique_ptr<port::Port>> ports_;
  port::VacantPort vacant_;
  CounterBase base_;
  std::map<std::string, std::string> external_ids_[port::kMaxPorts];
  // The state file's records (app/state_db.h): per slot, whether the port was added at
  // run time and its settings as given (add-port's and set-port's KEY=VALUE); the config's
  // ports deleted at run time; a set-flush of every port.
  bool runtime_[port::kMaxPorts] = {};
  std::vector<std::string> settings_[port::kMaxPorts];
  std::vector<std::string> deleted_;
  std::string flush_all_;
  std::string state_error_;  // state_error()
  Reloader reloader_;
  LinkManager links_{&ports_};
  std::vector<int> watched_fd_ = std::vector<int>(port::kMaxPorts, -1);  // per slot: the fd in epoll_
  control::ControlServer ctl_;
  control::MetricsServer metrics_;  // --metrics
  UniqueFd epoll_, timer_, signal_;
  std::atomic<bool> stop_{false};
  AnnounceLimiter announce_limit_;  ///< SEND_RARP per port (control thread)
  uint64_t start_ns_ = 0;
  PortRates rates_;  ///< control thread (on_tick, stats)
};

}  // namespace vl::app
