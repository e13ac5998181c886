#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iterator>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/top_view.h"
#include "cli/commands.h"
#include "cli/ctl_trace.h"
#include "control/command_table.h"
#include "control/control_server.h"

namespace vl::cli {

using control::Json;

void add_ctl_command(CLI::App& app, CtlArgs& a) {
  CLI::App* c = app.add_subcommand("ctl", "Query or control a running switch");
  c->add_option("--control", a.control, "control socket (default /run/virtlink/virtlink.ctl)");
  c->add_flag("--json", a.json, "print the reply as JSON");
  c->add_flag("--may-exist", a.may_exist, "add-port: a port of that name, type and target is a success");
  c->add_flag("--if-exists", a.if_exists, "del-port: no such port is a success");
  c->add_option("--file", a.file, "capture: the pcap file to write (- : standard output)");
  c->add_option("--count", a.count, "capture: stop after this many frames (0: until stopped)");
  c->add_option("--snaplen", a.snaplen, "capture: bytes kept of each frame (default 262144)")
      ->check(CLI::Range(14, 262144));
  c->add_option("--duration", a.duration_s, "capture: stop after this many seconds (0: until stopped)");
  c->add_option("--filter", a.filter, "capture: only frames this tcpdump expression matches");
  c->add_option("--pcap", a.pcap, "trace: the first frame of this capture file (read by ctl)");
  c->add_option("command", a.command, control::command_synopsis())->required();
  c->add_option("args", a.args, "command arguments");
  c->footer("Commands:\n" + control::command_help());
}

namespace {

/// A rate with an SI prefix: "0", "950", "12.3k", "1.49M", "9.87G" (app/top_view.h).
std::string si(double v) { return app::top_si(v); }

void print_stats(const Json& r) {
  // Rates: over the switch's last sampling interval (about 1 s; "rates" in the JSON).
  fmt::print("{:<12} {:<10} {:>14} {:>16} {:>14} {:>16} {:>10} {:>7} {:>7} {:>7} {:>7}\n",
             "PORT", "STATE", "RX_PACKETS", "RX_BYTES", "TX_PACKETS", "TX_BYTES", "DROPS",
             "RX_PPS", "RX_BPS", "TX_PPS", "TX_BPS");
  for (const auto& p : r["ports"]) {
    uint64_t drops = 0;
    for (const auto& [k, v] : p["drops"].items()) drops += v.get<uint64_t>();
    const auto rate = [&](const char* k) { return si(p.value(k, 0.0)); };
    fmt::print("{:<12} {:<10} {:>14} {:>16} {:>14} {:>16} {:>10} {:>7} {:>7} {:>7} {:>7}\n",
               p["name"].get<std::string>(), p["state"].get<std::string>(),
               p["rx_packets"].get<uint64_t>(), p["rx_bytes"].get<uint64_t>(),
               p["tx_packets"].get<uint64_t>(), p["tx_bytes"].get<uint64_t>(), drops,
               rate("rx_pps"), rate("rx_bps"), rate("tx_pps"), rate("tx_bps"));
    for (const auto& [k, v] : p["drops"].items()) {
      if (v.get<uint64_t>()) fmt::print("{:<12}   drop {:<16} {}\n", "", k, v.get<uint64_t>());
    }
    // Used-buffer notifications sent to the guest: for its receive queues (tx_calls) and
    // for its transmit queues (rx_calls), the switch's view like the counters above.
    const uint64_t tc = p.value("tx_calls", uint64_t{0}), rc = p.value("rx_calls", uint64_t{0});
    const uint64_t rd = p.value("rx_calls_deferred", uint64_t{0});
    if (tc || rc)
      fmt::print("{:<12}   calls to the guest: {} (receive queues), {} (transmit queues{})\n", "",
                 tc, rc, rd ? fmt::format("; {} of the guest's asks held back, several going out as one", rd) : std::string());
  }
}

/// A port's VLAN settings as text ("" for a port of every VLAN).
std::string vlan_text(const Json& p) {
  if (!p.contains("vlan")) return "";
  const Json& v = p["vlan"];
  const std::string mode = v.value("mode", std::string("all"));
  if (mode == "access") return fmt::format(", access VLAN {}", v["vlan"].get<int>());
  if (mode != "trunk") return "";
  std::string list;
  for (const auto& t : v["trunks"]) list += (list.empty() ? "" : ",") + std::to_string(t.get<int>());
  const int native = v.value("native_vlan", 0);
  return fmt::format(", trunk VLANs {}{}", list, native ? fmt::format(" (native {})", native) : "");
}

/// An uplink or tunnel port (no vrings): its device, and a tunnel's endpoint.
void print_uplink(const Json& p) {
  const auto num = [&](const char* k) { return p.value(k, uint64_t{0}); };
  fmt::print("{} ({} {}): {}, link {}, pmd {}, mtu {}, largest frame {}, {} queue pair(s) of {} "
             "descriptors, features {}{}\n",
             p["name"].get<std::string>(), p["type"].get<std::string>(), p["path"].get<std::string>(),
             p["state"].get<std::string>(), p.value("link", std::string("?")),
             p.value("pmd", -1) < 0 ? std::string("none") : std::to_string(p.value("pmd", -1)),
             num("mtu"), num("max_frame"), num("queue_pairs"), num("queue_size"),
             p.value("features", std::string("?")), vlan_text(p));
  if (p.contains("underlay_of")) {
    std::string t;
    for (const auto& n : p["underlay_of"]) t += (t.empty() ? "" : ", ") + n.get<std::string>();
    fmt::print("  underlay of {} (switches nothing else)\n", t);
  }
  if (!p.contains("tunnel")) return;
  const Json& t = p["tunnel"];
  fmt::print("  vxlan VNI {}: VTEP {} ({}) on {}, UDP port {}, {} MAC(s) learned behind remotes\n",
             t["vni"].get<uint32_t>(), t["local"].get<std::string>(), t["mac"].get<std::string>(),
             t["uplink"].get<std::string>(), t["dst_port"].get<int>(), t["learned_macs"].get<uint32_t>());
  for (const auto& r : t["remotes"])
    fmt::print("  remote {}: next hop {}\n", r["ip"].get<std::string>(),
               r["resolved"].get<bool>() ? r["next_hop"].get<std::string>() : std::string("not resolved (ARP)"));
}

/// `ctl reload`: what the configuration read again changed.
void print_reload(const Json& r) {
  auto names = [&](const char* key) {
    std::string t;
    for (const auto& n : r.value(key, Json::array()))
      t += (t.empty() ? "" : ", ") + (n.is_string() ? n.get<std::string>() : n.value("port", std::string("?")));
    return t.empty() ? std::string("none") : t;
  };
  fmt::print("configuration read again: added {}; removed {}; reopened {}\n", names("added"),
             names("removed"), names("reopened"));
  for (const auto& f : r.value("failed", Json::array()))
    fmt::print("  not applied: port {}: {}\n", f.value("port", std::string("?")), f.value("error", std::string("?")));
  if (const Json& n = r.value("needs_restart", Json::array()); !n.empty())
    fmt::print("  needs a restart to take effect: {}\n", fmt::join(n.get<std::vector<std::string>>(), ", "));
}

/// `ctl upgrade`: who forwards now, and what the hand-over carried.
void print_upgrade(const Json& r) {
  fmt::print("upgraded: pid {} ({}) handed over to pid {} ({}, {})\n", r.value("previous_pid", 0),
             r.value("previous_version", std::string("?")), r.value("pid", 0),
             r.value("binary", std::string("?")), r.value("version", std::string("?")));
  fmt::print("  datapath paused {:.3f} ms (successor started in {:.1f} ms); {} fds handed\n",
             r.value("paused_ms", 0.0), r.value("start_ms", 0.0), r.value("fds_handed", 0));
  if (const Json& n = r.value("reinitialised", Json::array()); n.is_array() && !n.empty())
    fmt::print("  opened again by the successor: {}\n", fmt::join(n.get<std::vector<std::string>>(), ", "));
}

/// "  external ids: k=v, ..." (OVS external_ids), when the port has some.
void print_security_and_ids(const Json& p) {
  if (const Json& ps = p.value("port_security", Json::array()); ps.is_array() && !ps.empty()) {
    std::string t;
    for (const auto& m : ps) t += (t.empty() ? "" : ", ") + (m.is_string() ? m.get<std::string>() : m.dump());
    fmt::print("  port security: source MACs {}\n", t);
  }
  const Json& ids = p.value("external_ids", Json::object());
  if (!ids.is_object() || ids.empty()) return;
  std::string t;
  for (const auto& [k, v] : ids.items())
    t += fmt::format("{}{}={}", t.empty() ? "" : ", ", k, v.is_string() ? v.get<std::string>() : v.dump());
  fmt::print("  external ids: {}\n", t);
}

void print_ports(const Json& r) {
  for (const auto& p : r) {
    if (!p.contains("vrings")) {
      print_uplink(p);
      print_security_and_ids(p);
      continue;
    }
    // mtu: the configured one (0: none) and the guest's (VIRTIO_NET_F_MTU, NET_SET_MTU).
    const auto mtu = [](uint32_t v) { return v ? std::to_string(v) : std::string("none"); };
    fmt::print("{} ({} {}): {}, pmd {} (queue pair 0; ctl pmd-rxq-show for all), {} connect(s), "
               "mtu {} (guest: {}), features {}{}\n",
               p["name"].get<std::string>(), p["type"].get<std::string>(),
               p["path"].get<std::string>(), p["state"].get<std::string>(),
               p["pmd"].get<int>() < 0 ? std::string("none") : std::to_string(p["pmd"].get<int>()),
               p["connects"].get<uint64_t>(), mtu(p.value("mtu_config", 0u)),
               mtu(p["mtu"].get<uint32_t>()), p["features"].get<std::string>(), vlan_text(p));
    print_security_and_ids(p);
    if (const Json& e = p.value("last_connect_error", Json()); e.is_object())
      fmt::print("  last connect error: {} (errno {}) at {}, {} s ago; {} failed attempt(s) "
                 "since the last connect\n",
                 e["error"].get<std::string>(), e["errno"].get<int>(), e["at"].get<std::string>(),
                 e["age_s"].get<uint64_t>(), e["failures"].get<uint64_t>());
    for (const auto& v : p["vrings"]) {
      fmt::print("  vring {} (queue pair {}) {:<9} {:<6} size {:<5} {}{}{}\n", v["index"].get<int>(),
                 v.value("queue", 0), v["role"].get<std::string>(),
                 v.value("layout", std::string("split")), v["size"].get<uint32_t>(),
                 v.value("enabled", true) ? "" : "disabled, ",
                 v["ready"].get<bool>() ? "ready" : "not ready: ", v["why_not"].get<std::string>());
    }
  }
}

/// The note under a cut `ctl fdb` listing (the reply's "truncated", "total" and "shown"),
/// or "" when every entry was listed.
std::string fdb_cut_note(const Json& reply) {
  if (!reply.value("truncated", false)) return "";
  return fmt::format("(the first {} of {} entries: `virtlink ctl fdb [PORT] all` lists every one)",
                     reply.value("shown", uint64_t{0}), reply.value("total", uint64_t{0}));
}

void print_fdb(const Json& r, const Json& reply) {
  // A VLAN column when some entry has one (VLAN settings in use): (VLAN, MAC) is the key.
  bool vlans = false;
  for (const auto& e : r) vlans |= e.value("vlan", 0) != 0;
  std::string out = vlans ? fmt::format("{:>4} {:<18} {:<12} {:>6}\n", "VLAN", "MAC", "PORT", "AGE_S")
                          : fmt::format("{:<18} {:<12} {:>6}\n", "MAC", "PORT", "AGE_S");
  for (const auto& e : r) {
    if (vlans) fmt::format_to(std::back_inserter(out), "{:>4} ", e.value("vlan", 0));
    fmt::format_to(std::back_inserter(out), "{:<18} {:<12} {:>6}\n", e["mac"].get<std::string>(),
                   e["port"].get<std::string>(), e["age_s"].get<uint32_t>());
  }
  fwrite(out.data(), 1, out.size(), stdout);
  if (const std::string note = fdb_cut_note(reply); !note.empty()) fmt::print("{}\n", note);
}

/// A PMD thread's CPU as text: the JSON gives -1 for a thread not pinned to a CPU (no
/// --pmd-cores), shown as "any" like the switch's log.
std::string pmd_cpu(const Json& t) {
  const int cpu = t["cpu"].get<int>();
  return cpu >= 0 ? std::to_string(cpu) : std::string("any");
}

void print_pmd(const Json& r) {
  // Like OVS's dpif-netdev/pmd-stats-show: one block per PMD thread, its rxqs below.
  for (const auto& t : r) {
    fmt::print("pmd {} (cpu {}, {} mode, rxq assign {}):\n", t["pmd"].get<int>(), pmd_cpu(t),
               t["mode"].get<std::string>(),
               t.value("rxq_assign", std::string("roundrobin")));
    fmt::print("  busy {:.1f} % of cycles, {} packets, {:.0f} cycles/packet, {} passes ({} busy), "
               "{} sleeps\n",
               t.value("busy_pct", 0.0), t["packets"].get<uint64_t>(),
               t["cycles_per_packet"].get<double>(), t["passes"].get<uint64_t>(),
               t["busy_passes"].get<uint64_t>(), t["sleeps"].get<uint64_t>());
    if (t.value("mode", std::string()) == "adaptive")
      fmt::print("  adaptive: spin window {} us, {} spins given way (thread off its CPU or waiting for one)\n",
                 t.value("spin_window_ns", uint64_t{0}) / 1000, t.value("spin_preempted", uint64_t{0}));
    const Json sched = t.value("sched", Json());
    if (sched.is_object())
      fmt::print("  scheduler: {:.3f} s on a CPU, {:.3f} s waiting for one, {} voluntary and {} "
                 "involuntary context switches\n",
                 sched.value("cpu_ns", uint64_t{0}) / 1e9, sched.value("wait_ns", uint64_t{0}) / 1e9,
                 sched.value("voluntary_switches", uint64_t{0}),
                 sched.value("involuntary_switches", uint64_t{0}));
    for (const auto& q : t.value("rxq_loads", Json::array()))
      fmt::print("  rxq {}/{}: {} packets, {:.1f} % of this thread's busy cycles\n",
                 q["port"].get<std::string>(), q["queue"].get<int>(), q["packets"].get<uint64_t>(),
                 100.0 * q["cycles_share"].get<double>());
  }
}

void print_rxq_show(const Json& r) {
  fmt::print("rxq assignment {} ({} reassignments)\n", r["assign"].get<std::string>(),
             r["reassignments"].get<uint64_t>());
  for (const auto& t : r["pmds"]) {
    std::string q;
    for (const auto& x : t["rxqs"])
      q += fmt::format(" {}/{}", x["port"].get<std::string>(), x["queue"].get<int>());
    fmt::print("pmd {} cpu {}:{}\n", t["pmd"].get<int>(), pmd_cpu(t),
               q.empty() ? " (no rxqs)" : q);
  }
}

void print_link(const Json& l) {
  // "direct": B's front-end serves A's rings; "switched": the switch forwards A as usual.
  const std::string why = l["why"].get<std::string>();
  fmt::print("{} <- {}: {}{}{} (established {}, revoked {})\n", l["a"].get<std::string>(),
             l["b"].get<std::string>(), l["state"].get<std::string>(), why.empty() ? "" : ": ", why,
             l["established"].get<uint64_t>(), l["revoked"].get<uint64_t>());
}

/// `ctl show`: the switch, then each port, then the links (like `ovs-vsctl show`).
void print_show(const Json& r) {
  const Json& sw = r["switch"];
  fmt::print("virtlink {} (pid {}), control {}\n", sw["version"].get<std::string>(),
             sw["pid"].get<int64_t>(), sw["control"].get<std::string>());
  fmt::print("  forward {}, {} PMD thread(s) in {} mode, rxq assign {}\n",
             sw["forward"].get<std::string>(), sw["pmds"].size(), sw["pmd_mode"].get<std::string>(),
             sw["rxq_assign"].get<std::string>());
  for (const auto& t : sw["pmds"]) {
    std::string q;
    for (const auto& x : t["rxqs"])
      q += fmt::format(" {}/{}", x["port"].get<std::string>(), x["queue"].get<int>());
    fmt::print("  pmd {} cpu {}:{}\n", t["pmd"].get<int>(), pmd_cpu(t), q.empty() ? " (no rxqs)" : q);
  }
  for (const auto& p : r["ports"]) {
    const uint32_t mtu_cfg = p.value("mtu_config", 0u), mtu = p.value("mtu", 0u);
    fmt::print("  port {}: {} {}, {}, mtu {}, {} queue pair(s), flush {}{}\n",
               p["name"].get<std::string>(), p["type"].get<std::string>(),
               p["target"].get<std::string>(), p["state"].get<std::string>(),
               mtu_cfg ? std::to_string(mtu_cfg) : mtu ? std::to_string(mtu) : std::string("none"),
               p.value("queues", 0u), p["flush"].get<std::string>(), vlan_text(p));
    if (const Json& l = p.value("link", Json()); l.is_object())
      fmt::print("    direct link with {} ({}): {}\n", l["peer"].get<std::string>(),
                 l["serves"].get<bool>() ? "this port's front-end serves its rings"
                                         : "its front-end serves this port's rings",
                 l["state"].get<std::string>());
    if (const Json& t = p.value("tunnel", Json()); t.is_object())
      fmt::print("    vxlan VNI {} from {} on {}\n", t["vni"].get<uint32_t>(),
                 t["local"].get<std::string>(), t["uplink"].get<std::string>());
    if (p.contains("underlay_of")) {
      std::string t;
      for (const auto& n : p["underlay_of"]) t += (t.empty() ? "" : ", ") + n.get<std::string>();
      fmt::print("    underlay of {}\n", t);
    }
    if (const Json& e = p.value("last_connect_error", Json()); e.is_object())
      fmt::print("    last connect error: {}, {} s ago\n", e["error"].get<std::string>(),
                 e["age_s"].get<uint64_t>());
  }
  for (const auto& m : r.value("mirrors", Json::array())) {
    auto to = [&](const char* k) { return m[k].is_string() ? m[k].get<std::string>() : std::string("-"); };
    fmt::print("  mirror of {}: rx to {}, tx to {}\n", m["port"].get<std::string>(), to("rx"), to("tx"));
  }
  if (const Json& c = r.value("captures", Json()); c.is_object() && c.value("sessions", 0u))
    fmt::print("  captures running: {}\n", c.value("sessions", 0u));
  if (r["links"].empty()) fmt::print("  no links\n");
  for (const auto& l : r["links"])
    fmt::print("  link {} <- {}: {}\n", l["a"].get<std::string>(), l["b"].get<std::string>(),
               l["state"].get<std::string>());
}

}  // namespace

/// The command's words as the request carries them, checked against its row here too, so
/// that a usage error is one whether or not the switch runs. 0, or the exit status.
static int ctl_words(const CtlArgs& a, std::vector<std::string>* argv) {
  const control::CommandSpec* spec = control::find_command(a.command);
  *argv = a.args;
  if (!a.pcap.empty() && a.command != "trace") {
    fmt::print(stderr, "virtlink ctl {}: --pcap is trace's\n", a.command);
    return 2;
  }
  if (a.command == "trace")  // the frame as the request carries it (a capture's, read here)
    if (const int rc = trace_words(a.pcap, argv)) return rc;
  if (spec && spec->max_args == 0 && !argv->empty()) {
    fmt::print(stderr, "virtlink ctl {}: takes no arguments\n", a.command);
    return 2;
  }
  if (spec && (argv->size() < spec->min_args || argv->size() > spec->max_args)) {
    fmt::print(stderr, "virtlink ctl {}: {}\n", a.command, control::usage_error(*spec));
    return 2;
  }
  // The switch resolves no path against its own working directory: a binary named here is
  // the one this shell means.
  if (a.command == "upgrade" && !argv->empty() && !(*argv)[0].empty() && (*argv)[0][0] != '/') {
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute((*argv)[0], ec);
    if (!ec) (*argv)[0] = abs.lexically_normal().string();
  }
  return 0;
}

int run_ctl(const CtlArgs& a) {
  const std::string path = a.control.empty() ? control::default_control_path() : a.control;
  std::vector<std::string> argv;
  if (const int rc = ctl_words(a, &argv)) return rc;
  if (a.command == "capture") return run_ctl_capture(a, path);
  Json args = Json::object();
  // The flags travel as the switch reads them: words of argv (app/ctl_commands.cpp).
  if (a.if_exists) argv.insert(argv.begin(), "--if-exists");
  if (a.may_exist) argv.insert(argv.begin(), "--may-exist");
  if (!argv.empty()) args["argv"] = argv;
  Json result, reply;
  std::string err;
  if (!control::request(path, a.command, args, &result, &err, &reply)) {
    const bool unreachable = err.rfind("cannot reach the switch", 0) == 0;
    fmt::print(stderr, "virtlink ctl {}: {}{}\n", a.command, err,
               unreachable ? fmt::format(" (is the switch running with --control {}?)", path) : "");
    // A command the switch does not know, or a known one given the wrong arguments, is a
    // usage error (exit 2, like every other one); any other failure of a command is 1.
    return err.rfind("unknown command", 0) == 0 || err.rfind("usage:", 0) == 0 ? 2 : 1;
  }
  if (result.is_object() && result.contains("warning") && result["warning"].is_string())
    fmt::print(stderr, "virtlink ctl {}: warning: {}\n", a.command, result["warning"].get<std::string>());
  if (a.json) {
    fmt::print("{}\n", result.dump(2));
    // stdout stays the result (an array for fdb, as before); a cut listing says so on
    // stderr, and the reply's own "total"/"shown"/"truncated" say it to scripts.
    if (a.command == "fdb")
      if (const std::string note = fdb_cut_note(reply); !note.empty()) fmt::print(stderr, "{}\n", note);
    return 0;
  }
  if (a.command == "stats") print_stats(result);
  else if (a.command == "ports") print_ports(result);
  else if (a.command == "fdb")
    print_fdb(result, reply);
  else if (a.command == "pmd-stats") print_pmd(result);
  else if (a.command == "pmd-rxq-show" || a.command == "pmd-rebalance") print_rxq_show(result);
  else if (a.command == "link" || a.command == "unlink") print_link(result);
  else if (a.command == "set-flush")
    fmt::print("flush policy of {}: {}\n", result["port"].get<std::string>(),
               result["flush"].get<std::string>());
  else if (a.command == "mirror")
    fmt::print("mirror of {}: {}\n", result["port"].get<std::string>(),
               result.contains("to") ? fmt::format("{} to {}", result["direction"].get<std::string>(),
                                                   result["to"].get<std::string>())
                                     : std::string("off"));
  else if (a.command == "version") fmt::print("virtlink {}\n", result["version"].get<std::string>());
  else if (a.command == "add-port")
    fmt::print("port {}: {} (slot {}, {})\n", result["port"].get<std::string>(),
               result["created"].get<bool>() ? "added" : "exists", result["id"].get<int>(),
               result["state"].get<std::string>());
  else if (a.command == "del-port")
    fmt::print("port {}: {}\n", result["port"].get<std::string>(),
               result["deleted"].get<bool>() ? "deleted" : "no such port");
  else if (a.command == "set-port")
    fmt::print("port {}: set{} ({})\n", result["port"].get<std::string>(),
               result["restarted"].get<bool>() ? ", reopened" : "", result["state"].get<std::string>());
  else if (a.command == "stats-clear") fmt::print("counters cleared\n");
  else if (a.command == "reload") print_reload(result);
  else if (a.command == "show") print_show(result);
  else if (a.command == "upgrade") print_upgrade(result);
  else if (a.command == "trace") print_trace(result);
  else if (a.command == "log-level")
    fmt::print("log level {}{}\n", result["log_level"].get<std::string>(),
               result.contains("previous")
                   ? fmt::format(" (was {})", result["previous"].get<std::string>())
                   : std::string());
  else if (a.command == "links") {
    if (result.empty()) fmt::print("no links\n");
    for (const auto& l : result) print_link(l);
  }
  else fmt::print("{}\n", result.dump(2));
  // Which switch answered: a `ctl` without --control may reach another user's. After an
  // upgrade, the one now at that path: the successor.
  if (const Json& who = reply.value("switch", Json()); who.is_object())
    fmt::print("(switch {} at {})\n",
               a.command == "upgrade" ? result.value("pid", int64_t{0}) : who.value("pid", int64_t{0}),
               who.value("control", std::string("?")));
  return 0;
}

}  // namespace vl::cli
