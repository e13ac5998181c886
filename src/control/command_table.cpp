#include "control/command_table.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

namespace vl::control {

namespace {

// The order is that of `virtlink ctl --help` (and of the README's list).
constexpr CommandSpec kCommands[] = {
    {"stats", "", 0, 0, "", "per-port counters and drops by reason"},
    {"ports", "", 0, 0, "", "connection, vrings and why a vring is not ready"},
    {"fdb", "[PORT] [all]", 0, 2, "", "MAC table (the first 1000 entries unless all)"},
    {"pmd-stats", "", 0, 0, "",
     "per PMD thread: busy %, cycles/packet, packets, rxqs and their cycle shares"},
    {"pmd-rxq-show", "", 0, 0, "", "which PMD thread serves which rxq (port, queue pair)"},
    {"pmd-rebalance", "", 0, 0, "", "recompute the rxq assignment now"},
    {"set-flush", "PORT|all POLICY", 2, 2,
     "usage: set-flush PORT|all POLICY (immediate, rx-batch, interval=US, budget=US)",
     "output batching policy, at run time (immediate, rx-batch, interval=US, budget=US)"},
    {"links", "", 0, 0, "", "direct links and their state"},
    {"link", "A B", 2, 2, "usage: link A B (two port names: the front-end of B serves A's rings)",
     "direct link: the front-end of B serves A's rings (docs/direct-link.md)"},
    {"unlink", "A B", 2, 2, "usage: unlink A B (two port names: A's rings return to the switch)",
     "revoke the direct link: A's rings return to the switch"},
    {"add-port", "[--may-exist] NAME TYPE ARG [KEY=VALUE ...]", 3, 72,
     "usage: add-port [--may-exist] NAME TYPE ARG [KEY=VALUE ...] (TYPE: vhost-user, "
     "vhost-user-client, tap, af-packet, af-xdp, dpdk, vxlan)",
     "add a port at run time (KEY=VALUE: its settings, flush=POLICY, external-id:KEY=VALUE)"},
    {"del-port", "[--if-exists] NAME", 1, 2, "usage: del-port [--if-exists] NAME",
     "delete a port: its front-end's connection closes, its socket file goes"},
    {"set-port", "NAME KEY=VALUE ...", 2, 72, "usage: set-port NAME KEY=VALUE ...",
     "change a port's settings (some reopen the port: README \"Ports at run time\")"},
    {"stats-clear", "", 0, 0, "", "the counters of ctl stats start again from 0"},
    {"reload", "", 0, 0, "", "read the configuration file again, as SIGHUP does"},
    {"upgrade", "[BINARY]", 0, 1,
     "usage: upgrade [BINARY] (default: the switch's own binary, read again from disk)",
     "hand every connection to a new switch process of BINARY; the front-ends notice nothing"},
    {"version", "", 0, 0, "", "the switch's version"},
    {"show", "", 0, 0, "",
     "one screen: the switch (version, pid, control, forward, PMD threads), ports, links"},
    {"capture", "PORT rx|tx|both --file F|- [--count N] [--snaplen B] [--duration S] [--filter BPF]",
     2, 10,
     "usage: capture PORT rx|tx|both --file F|- [--count N] [--snaplen B] [--duration S] "
     "[--filter BPF]",
     "capture a port's frames into a pcap file that ctl writes (- : standard output)"},
    {"mirror", "PORT rx|tx|both to OUTPORT | PORT off", 2, 4,
     "usage: mirror PORT rx|tx|both to OUTPORT, or mirror PORT off",
     "mirror a port's received and/or sent frames to another port (SPAN), or stop"},
    {"log-level", "[LEVEL]", 0, 1, "usage: log-level [LEVEL] (trace, debug, info, warn, error, off)",
     "set the switch's log level at run time (trace ... off); without LEVEL, show it"},
    {"trace", "PORT HEX|--pcap FILE", 2, 3,
     "usage: trace PORT HEX [LEN] (the frame's bytes in hex; LEN: its length when HEX is only "
     "its first bytes), or virtlink ctl trace PORT --pcap FILE",
     "what the switch would do with that frame arriving on PORT (changes nothing)"},
};
static_assert(kFdbShown == 1000, "the help line of fdb gives the number");

std::string with_args(const CommandSpec& c) {
  return c.args.empty() ? std::string(c.name) : fmt::format("{} {}", c.name, c.args);
}

}  // namespace

std::span<const CommandSpec> switch_commands() { return kCommands; }

const CommandSpec* find_command(std::string_view name) {
  for (const CommandSpec& c : kCommands)
    if (c.name == name) return &c;
  return nullptr;
}

std::string command_synopsis() {
  std::string out;
  for (const CommandSpec& c : kCommands) out += (out.empty() ? "" : " | ") + with_args(c);
  return out;
}

std::string command_help() {
  size_t width = 0;
  for (const CommandSpec& c : kCommands) width = std::max(width, with_args(c).size());
  std::string out;
  for (const CommandSpec& c : kCommands)
    out += fmt::format("  {:<{}}  {}\n", with_args(c), width, c.help);
  return out;
}

std::string usage_error(const CommandSpec& spec) {
  if (!spec.bad_args.empty()) return std::string(spec.bad_args);
  if (spec.max_args == 0) return fmt::format("usage: {} (takes no arguments)", spec.name);
  return fmt::format("usage: {}", with_args(spec));
}

bool check_args(const CommandSpec& spec, const Json& args, std::vector<std::string>* argv,
                std::string* err) {
  static const Json kNone = Json::array();
  const auto it = args.find("argv");
  const Json& a = it == args.end() ? kNone : *it;
  const bool fits = a.is_array() && a.size() >= spec.min_args && a.size() <= spec.max_args &&
                    std::all_of(a.begin(), a.end(), [](const Json& s) { return s.is_string(); });
  argv->clear();
  if (!fits) {
    *err = usage_error(spec);
    return false;
  }
  for (const Json& s : a) argv->push_back(s.get<std::string>());
  return true;
}

std::string default_control_path() {
  if (geteuid() == 0) return "/run/virtlink/virtlink.ctl";
  if (const char* x = getenv("XDG_RUNTIME_DIR"); x && *x) return fmt::format("{}/virtlink.ctl", x);
  return fmt::format("/tmp/virtlink-{}.ctl", geteuid());
}

}  // namespace vl::control
