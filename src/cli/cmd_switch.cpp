#include <spdlog/spdlog.h>

#include "app/config.h"
#include "app/switch.h"
#include "cli/commands.h"
#include "util/cpuset.h"
#include "util/log_sinks.h"
#include "util/service_notify.h"
#include "wire/dpdk_eal.h"

namespace vl::cli {

namespace {
/// --control and the control socket file's mode, owner and group.
void add_control_options(CLI::App* s, SwitchArgs& a) {
  s->add_option("--control", a.control,
                "control socket (default /run/virtlink/virtlink.ctl, $XDG_RUNTIME_DIR/virtlink.ctl "
                "when not root; a given path's directory must exist)");
  s->add_option("--control-mode", a.control_mode,
                "permission bits of the control socket file, octal (0600)");
  s->add_option("--control-owner", a.control_owner, "owner (name or uid) of the control socket file");
  s->add_option("--control-group", a.control_group, "group (name or gid) of the control socket file");
}
}  // namespace

namespace {
/// --db and --log-file: what the switch keeps on disk.
void add_state_options(CLI::App* s, SwitchArgs& a) {
  s->add_option("--db", a.db,
                "state file: ports, settings, external ids and links changed at run time are "
                "written to FILE (atomically) and restored at the next start (README \"Ports "
                "at run time\"); default: none");
  // Internal: the successor `ctl upgrade` starts (app/successor.h) takes its state on FD.
  s->add_option("--handover-fd", a.handover_fd, "(internal) started by ctl upgrade: take over on FD")
      ->group("");
  s->add_option("--metrics", a.metrics,
                "serve Prometheus metrics at http://[ADDR:]PORT/metrics (a port alone: "
                "127.0.0.1; TOML metrics); default: none");
  s->add_option("--log-file", a.log_file,
                "append the log to FILE too (created if absent, never truncated; TOML "
                "log_file); under systemd the log also goes to the journal, else to stderr");
}
}  // namespace

void add_switch_command(CLI::App& app, SwitchArgs& a) {
  CLI::App* s = app.add_subcommand("switch", "Run the vhost-user switch daemon");
  // The switch's options hold 0 for "not given" (the TOML file or the built-in default
  // applies, as each help text says): showing "=0" would mislead.
  s->option_defaults()->always_capture_default(false);
  s->add_option("--config", a.config, "TOML file with the same settings (command line wins)");
  s->add_option("--port", a.ports,
                "NAME=vhost-user:PATH (virtlink listens), NAME=vhost-user-client:PATH "
                "(virtlink connects, retrying every second), or an uplink: NAME=tap:IFNAME (a "
                "tap device into the host's stack, created if absent), NAME=af-packet:IFACE (a "
                "packet socket), NAME=af-xdp:IFACE (AF_XDP, falling back to af-packet), "
                "NAME=dpdk:DEVARGS (a DPDK ethdev: PCI address or vdev), or a tunnel: "
                "NAME=vxlan:uplink=PORT,local=IP,vni=N,remote=IP[+IP...] (optional "
                "dst_port=N, gateway_mac=MAC, mac=MAC); repeat for more ports");
  s->add_option("--port-set", a.port_sets,
                "NAME:KEY=VALUE, one of a port's settings (repeat): vlan=N (an access port of "
                "VLAN N, untagged), trunks=LIST (a trunk of the VLANs in LIST, e.g. 10,20-30, "
                "tagged), native_vlan=N (a trunk's untagged VLAN)");
  s->add_option("--dpdk-extra", a.dpdk_extra,
                "extra EAL arguments for dpdk ports, space separated (as OVS's dpdk-extra); EAL "
                "starts only when a dpdk port opens, with --no-huge where there are no "
                "hugepages");
  s->add_option("--forward", a.forward,
                "bridge (MAC learning, default) or xconnect (1<->2, 3<->4, ...: an even number "
                "of ports)")
      ->check(CLI::IsMember({"bridge", "xconnect"}));
  s->add_option("--pmd-cores", a.pmd_cores,
                "CPUs for PMD threads, taskset syntax (1 | 1,3 | 2-5), each CPU once")
      ->each([&a](const std::string&) { a.pmd_cores_given = true; });
  s->add_option("--pmd-mode", a.pmd_mode, "poll (default), interrupt or adaptive")
      ->check(CLI::IsMember({"poll", "interrupt", "adaptive"}));
  s->add_option("--pmd-idle-us", a.pmd_idle_us, "adaptive mode: the longest spin before sleeping, microseconds (200); the spin window adapts below it");
  s->add_option("--flush", a.flush,
                "output batching: POLICY for every port, or PORT:POLICY for one (repeat); "
                "POLICY is immediate, rx-batch (default), interval=US or budget=US");
  add_control_options(s, a);
  add_state_options(s, a);
  s->add_option("--mac-aging", a.mac_aging_s, "MAC table aging in seconds (300)");
  s->add_option("--burst", a.burst, "packets taken from a queue per poll (32, at most 64)");
  s->add_option("--offloads", a.offloads,
                "on (default): offer CSUM, GUEST_CSUM, TSO4/6, ECN on every port; off: refuse them")
      ->check(CLI::IsMember({"on", "off"}));
  s->add_option("--link", a.links,
                "A:B: a direct link, the front-end of port B serves port A's rings "
                "(docs/direct-link.md; repeatable)");
  s->add_option("--mac-table-buckets", a.mac_table_buckets,
                "MAC table buckets of 8 entries, rounded up to a power of two (65536)");
  s->add_option("--mac-limit", a.mac_limit, "MAC table entries one port may hold (8192)");
  s->add_flag("--vlans", a.vlans,
              "802.1Q on from the start, for ports added at run time with vlan or trunks "
              "(else on when some start-up port has them)");
  s->add_option("--socket-mode", a.socket_mode,
                "permission bits of the vhost-user socket files, octal (0600)");
  s->add_option("--socket-owner", a.socket_owner, "owner (name or uid) of the socket files");
  s->add_option("--socket-group", a.socket_group, "group (name or gid) of the socket files");
  s->add_option("--max-guest-memory", a.max_guest_memory_gib,
                "GiB of guest memory one front-end may map (1024)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 16));
  s->add_option("--max-total-guest-memory", a.max_total_guest_memory_gib,
                "GiB of guest memory every front-end together may map, over all ports and "
                "connections (65536: half the address space); a SET_MEM_TABLE that does not "
                "fit is refused and counted")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 17));
  s->add_option("--max-queues", a.max_queues,
                "queue pairs each port offers (VIRTIO_NET_F_MQ, GET_QUEUE_NUM), 1..8 (8)")
      ->check(CLI::Range(1, 8));
  s->add_option("--tx-retry-us", a.tx_retry_us,
                "bounded retry into a full guest receive queue: a frame with no receive buffer "
                "is kept and retried at the next passes until it is US microseconds old, then "
                "dropped as no_rx_buffer (20; 0: drop at once; at most 10000; like OVS "
                "tx-retries-max); counted in tx_retries")
      ->check(CLI::Range(int64_t{0}, int64_t{10000}));
  s->add_option("--completion-coalesce-us", a.completion_coalesce_us,
                "transmit completion coalescing (like virtio-net's notification coalescing, "
                "tx_usecs): a call a guest asked for on its transmit queue waits up to US "
                "microseconds and goes out with the next call into its receive queue if one "
                "comes sooner (250; 0: off; at most 10000); counted in rx_calls_deferred")
      ->check(CLI::Range(int64_t{0}, int64_t{10000}));
  s->add_option("--pmd-rxq-assign", a.pmd_rxq_assign,
                "how rxqs (port, queue pair) go to PMD threads: roundrobin (default) or cycles "
                "(by measured load, like OVS pmd-rxq-assign=cycles)")
      ->check(CLI::IsMember({"roundrobin", "cycles"}));
  s->add_option("--pmd-rx-writers", a.pmd_rx_writers,
                "with fewer enabled receive queues than PMD threads, which thread writes a "
                "port's queue: fixed (default: dealt by port id, or by the peer's with "
                "xconnect; other threads hand their frames over) or follow (moved every "
                "second to the thread that sends it most; a move drops a few frames)")
      ->check(CLI::IsMember({"follow", "fixed"}));
}

namespace {

// The steps of run_switch: each logs its error and returns false (a usage error, exit 2).
// The command line wins over the TOML file.

/// --config, then the --port options (added after the file's ports).
bool load_config_and_ports(const SwitchArgs& a, app::SwitchConfig* cfg) {
  std::string err;
  if (!a.config.empty() && !app::load_toml(a.config, cfg, &err)) {
    spdlog::error("{}", err);
    return false;
  }
  for (const auto& spec : a.ports) {
    auto p = app::parse_port_spec(spec, &err);
    if (!p) {
      spdlog::error("{}", err);
      return false;
    }
    cfg->ports.push_back(*p);
  }
  if (!a.dpdk_extra.empty()) {
    std::vector<std::string> args;
    std::istringstream in(a.dpdk_extra);
    for (std::string w; in >> w;) args.push_back(w);
    wire::set_eal_extra_args(std::move(args));
  }
  for (const auto& set : a.port_sets) {
    const size_t colon = set.find(':'), eq = set.find('=');
    port::PortConfig* pc = nullptr;
    for (auto& p : cfg->ports)
      if (colon != std::string::npos && p.name == set.substr(0, colon)) pc = &p;
    if (!pc || eq == std::string::npos || eq < colon) {
      spdlog::error("--port-set '{}': expected NAME:KEY=VALUE with NAME a port", set);
      return false;
    }
    if (!app::set_port_setting(pc, set.substr(colon + 1, eq - colon - 1), set.substr(eq + 1), &err)) {
      spdlog::error("{}", err);
      return false;
    }
  }
  return true;
}

/// --offloads, --max-queues, --tx-retry-us, --completion-coalesce-us: set on every port.
void apply_port_options(const SwitchArgs& a, app::SwitchConfig* cfg) {
  if (!a.offloads.empty())
    for (auto& p : cfg->ports) p.offloads = a.offloads == "on";
  if (a.max_queues)
    for (auto& p : cfg->ports) p.max_queues = a.max_queues;
  if (a.tx_retry_us >= 0) {  // the command line wins over the TOML file's global and per port
    for (auto& p : cfg->ports) {
      p.tx_retry_us = static_cast<uint32_t>(a.tx_retry_us);
      p.explicit_keys |= port::kKeyTxRetry;
    }
  }
  if (a.completion_coalesce_us >= 0) {
    for (auto& p : cfg->ports) {
      p.completion_coalesce_us = static_cast<uint32_t>(a.completion_coalesce_us);
      p.explicit_keys |= port::kKeyCompletionCoalesce;
    }
  }
}

/// --forward and the PMD threads' options.
bool apply_pmd_options(const SwitchArgs& a, app::SwitchConfig* cfg) {
  if (!a.pmd_rxq_assign.empty())
    cfg->pmd.rxq_assign =
        a.pmd_rxq_assign == "cycles" ? dp::RxqAssign::kCycles : dp::RxqAssign::kRoundRobin;
  if (!a.pmd_rx_writers.empty()) cfg->pmd.follow_writers = a.pmd_rx_writers == "follow";
  if (!a.forward.empty()) cfg->forward = *app::parse_forward(a.forward);
  if (!a.pmd_cores.empty()) {
    auto c = parse_cpu_list(a.pmd_cores);
    if (!c) {
      spdlog::error("--pmd-cores '{}' is not a CPU list", a.pmd_cores);
      return false;
    }
    if (const auto twice = repeated_cpu(a.pmd_cores)) {
      spdlog::error("--pmd-cores '{}': CPU {} is given twice (one PMD thread per CPU)",
                    a.pmd_cores, *twice);
      return false;
    }
    cfg->pmd_cores = *c;
  } else if (a.pmd_cores_given) {
    spdlog::error("--pmd-cores '': an empty CPU list (omit the option for one unpinned thread)");
    return false;
  }
  if (!a.pmd_mode.empty()) cfg->pmd.mode = *app::parse_pmd_mode(a.pmd_mode);
  if (a.pmd_idle_us) cfg->pmd.idle_us = a.pmd_idle_us;
  return true;
}

/// --flush, --control, --mac-aging, --burst, --link and the MAC table's size and limit.
bool apply_switch_options(const SwitchArgs& a, app::SwitchConfig* cfg) {
  for (const auto& f : a.flush) {
    const size_t colon = f.find(':');
    if (colon == std::string::npos) cfg->flush = f;
    else cfg->port_flush[f.substr(0, colon)] = f.substr(colon + 1);
  }
  if (!a.control.empty()) cfg->control_path = a.control;
  if (a.mac_aging_s) cfg->mac_aging_s = a.mac_aging_s;
  if (a.burst) cfg->burst = a.burst;
  for (const auto& l : a.links) {
    const auto colon = l.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == l.size()) {
      spdlog::error("--link '{}': expected A:B (port names)", l);
      return false;
    }
    cfg->links.emplace_back(l.substr(0, colon), l.substr(colon + 1));
  }
  if (a.mac_table_buckets) cfg->fdb_buckets = a.mac_table_buckets;
  if (a.mac_limit) cfg->mac_limit = a.mac_limit;
  if (a.vlans) cfg->vlans = true;
  return true;
}

/// --control-mode, --control-owner, --control-group: the control socket file's.
/// --socket-mode, --socket-owner, --socket-group, --max-guest-memory: the switch-wide
/// defaults of every port that does not set its own (app::apply_port_defaults); and
/// --max-total-guest-memory, the cap over every port together.
bool apply_socket_options(const SwitchArgs& a, app::SwitchConfig* cfg) {
  if (!a.socket_mode.empty()) {
    auto m = app::parse_socket_mode(a.socket_mode);
    if (!m) {
      spdlog::error("--socket-mode '{}': octal permission bits, e.g. 0660", a.socket_mode);
      return false;
    }
    cfg->socket_mode = *m;
  }
  if (!a.control_mode.empty()) {
    auto m = app::parse_socket_mode(a.control_mode);
    if (!m) {
      spdlog::error("--control-mode '{}': octal permission bits, e.g. 0660", a.control_mode);
      return false;
    }
    cfg->control_mode = *m;
  }
  if (!a.control_owner.empty()) cfg->control_owner = a.control_owner;
  if (!a.control_group.empty()) cfg->control_group = a.control_group;
  if (!a.socket_owner.empty()) cfg->socket_owner = a.socket_owner;
  if (!a.socket_group.empty()) cfg->socket_group = a.socket_group;
  if (a.max_guest_memory_gib) cfg->max_guest_memory = a.max_guest_memory_gib << 30;
  if (a.max_total_guest_memory_gib)
    cfg->max_total_guest_memory = a.max_total_guest_memory_gib << 30;
  return true;
}

/// --log-file (the command line wins over TOML log_file): the log goes there too from here
/// on. Under systemd (NOTIFY_SOCKET), a watchdog interval the 1 s control tick cannot ping
/// at half of (below 2 s) is warned about: the switch would be killed while healthy.
bool open_log_file(const SwitchArgs& a, app::SwitchConfig* cfg) {
  if (!a.log_file.empty()) cfg->log_file = a.log_file;
  std::string err;
  if (!cfg->log_file.empty() && !add_log_file(cfg->log_file, &err)) {
    spdlog::error("{}", err);
    return false;
  }
  if (const uint64_t w = service::watchdog_interval_us(); w > 0 && w < 2000000)
    spdlog::warn("WATCHDOG_USEC={}: the switch pings once a second (its control tick); "
                 "WatchdogSec= below 2 s may kill it while healthy", w);
  return true;
}

/// The configuration the command line and its --config file give (each error logged).
bool build_config(const SwitchArgs& a, app::SwitchConfig* out) {
  app::SwitchConfig cfg;
  if (!load_config_and_ports(a, &cfg)) return false;
  apply_port_options(a, &cfg);
  if (!apply_pmd_options(a, &cfg) || !apply_switch_options(a, &cfg) ||
      !apply_socket_options(a, &cfg))
    return false;
  app::apply_port_defaults(&cfg);
  if (cfg.burst > dp::kMaxBurst) {
    spdlog::error("--burst {} is above {}", cfg.burst, dp::kMaxBurst);
    return false;
  }
  if (!a.metrics.empty()) cfg.metrics = a.metrics;
  std::string err;
  if (!app::validate(cfg, &err)) {
    spdlog::error("{}", err);
    return false;
  }
  cfg.db_path = a.db;
  cfg.handover_fd = a.handover_fd;
  cfg.config_file = a.config;
  *out = std::move(cfg);
  return true;
}

}  // namespace

int run_switch(const SwitchArgs& a) {
  app::SwitchConfig cfg;
  if (!build_config(a, &cfg) || !open_log_file(a, &cfg)) return 2;  // (a reload keeps the file)
  app::Switch sw(std::move(cfg));
  // SIGHUP reads the same command line and --config file again (app/switch.h reload).
  sw.set_reloader([a](app::SwitchConfig* c, std::string* err) {
    ErrorCapture why;  // build_config logs its reasons: the client gets them too
    if (build_config(a, c)) return true;
    std::string reasons;
    for (const std::string& e : why.errors()) reasons += (reasons.empty() ? "" : "; ") + e;
    *err = fmt::format("the configuration was refused{}{}; nothing changed",
                       reasons.empty() ? "" : ": ", reasons.substr(0, 4096));
    return false;
  });
  return sw.run();
}

}  // namespace vl::cli
