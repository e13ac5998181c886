#include "app/ctl_commands.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "app/switch.h"
#include "control/command_table.h"
#include "dp/flush.h"
#include "dp/trace.h"
#include "util/log.h"
#include "virtio/virtio_defs.h"
#include "virtlink_version.h"

namespace vl::app {

namespace {

using control::Json;

bool stats(Switch& sw, const CtlArgv&, Json* out, std::string*) {
  *out = sw.stats();
  return true;
}

bool ports(Switch& sw, const CtlArgv&, Json* out, std::string*) {
  *out = sw.ports_info();
  return true;
}

/// fdb [PORT] [all]: the entries of PORT (else every port's), all of them or the first
/// control::kFdbShown, with their total (a reply made in slices: app/json_views.h).
bool fdb(Switch& sw, const CtlArgv& argv, std::unique_ptr<control::ReplyStream>* out,
         std::string* err) {
  uint32_t port = ~0u;
  size_t limit = control::kFdbShown;
  for (const std::string& w : argv) {
    if (w == "all") {
      limit = SIZE_MAX;
      continue;
    }
    const auto i = sw.port_index(w);
    if (!i || port != ~0u) {  // one port at most, and it must exist
      *err = i ? fmt::format("usage: fdb [PORT] [all] (one port: '{}' is a second)", w)
               : fmt::format("no port named '{}'", w);
      return false;
    }
    port = *i;
  }
  *out = sw.fdb(port, limit);
  return true;
}

bool pmd_stats(Switch& sw, const CtlArgv&, Json* out, std::string*) {
  *out = sw.pmd_stats();
  return true;
}

bool pmd_rxq_show(Switch& sw, const CtlArgv&, Json* out, std::string*) {
  *out = sw.pmd_rxq_show();
  return true;
}

bool pmd_rebalance(Switch& sw, const CtlArgv&, Json* out, std::string*) {
  sw.rebalance();
  *out = sw.pmd_rxq_show();
  return true;
}

/// set-flush PORT|all POLICY.
bool set_flush(Switch& sw, const CtlArgv& argv, Json* out, std::string* err) {
  const std::string& who = argv[0];
  const auto p = dp::parse_flush_policy(argv[1], err);
  if (!p) return false;
  uint32_t port = port::kMaxPorts;  // all
  if (who != "all") {
    const auto i = sw.port_index(who);
    if (!i) {
      *err = fmt::format("no port named '{}'", who);
      return false;
    }
    port = *i;
  }
  sw.set_flush(port, *p);
  spdlog::info("flush policy of {} set to {}", who == "all" ? "every port" : "port " + who,
               dp::flush_policy_name(*p));
  *out = {{"port", who}, {"flush", dp::flush_policy_name(*p)}};
  return true;
}

bool links(Switch& sw, const CtlArgv&, Json* out, std::string*) {
  *out = sw.links().info();
  return true;
}

/// link A B: the front-end of B serves A's rings.
bool link(Switch& sw, const CtlArgv& argv, Json* out, std::string* err) {
  const bool ok = sw.links().link(argv[0], argv[1], out, err);
  if (ok) sw.state_changed();
  return ok;
}

bool unlink(Switch& sw, const CtlArgv& argv, Json* out, std::string* err) {
  const bool ok = sw.links().unlink(argv[0], argv[1], out, err);
  if (ok) sw.state_changed();
  return ok;
}

/// Takes the flag `flag` out of `argv` (anywhere, as `virtlink ctl` passes it).
bool take_flag(CtlArgv& argv, const char* flag) {
  const auto n = std::erase(argv, std::string(flag));
  return n != 0;
}

/// A refusal that is the request's fault reads as a usage error (ctl's exit status 2).
bool refused(bool ok, bool usage, std::string* err) {
  if (!ok && usage) *err = "usage: " + *err;
  return ok;
}

/// add-port [--may-exist] NAME TYPE ARG [KEY=VALUE ...]
bool add_port(Switch& sw, const CtlArgv& argv, Json* out, std::string* err) {
  CtlArgv a = argv;
  const bool may_exist = take_flag(a, "--may-exist");
  if (a.size() < 3) {
    *err = std::string(control::usage_error(*control::find_command("add-port")));
    return false;
  }
  bool usage = false;
  const CtlArgv settings(a.begin() + 3, a.end());
  const bool ok = sw.add_port(a[0], a[1], a[2], settings, may_exist, out, err, &usage);
  return refused(ok, usage, err);
}

/// del-port [--if-exists] NAME
bool del_port(Switch& sw, const CtlArgv& argv, Json* out, std::string* err) {
  CtlArgv a = argv;
  const bool if_exists = take_flag(a, "--if-exists");
  if (a.size() != 1) {
    *err = std::string(control::usage_error(*control::find_command("del-port")));
    return false;
  }
  bool usage = false;
  const bool ok = sw.del_port(a[0], if_exists, out, err, &usage);
  return refused(ok, usage, err);
}

/// set-port NAME KEY=VALUE ...
bool set_port(Switch& sw, const CtlArgv& argv, Json* out, std::string* err) {
  bool usage = false;
  const bool ok = sw.set_port(argv[0], CtlArgv(argv.begin() + 1, argv.end()), out, err, &usage);
  return refused(ok, usage, err);
}

bool stats_clear(Switch& sw, const CtlArgv&, Json* out, std::string*) {
  sw.clear_stats();
  *out = {{"cleared", true}};
  return true;
}

bool reload(Switch& sw, const CtlArgv&, Json* out, std::string* err) { return sw.reload(out, err); }
bool show(Switch& sw, const CtlArgv&, Json* out, std::string*) {
  *out = sw.show();
  return true;
}

/// log-level [LEVEL]: sets the log level at run time (without LEVEL: shows it).
bool log_level(Switch&, const CtlArgv& argv, Json* out, std::string* err) {
  static constexpr const char* kNames[] = {"trace", "debug", "info", "warn", "error", "off"};
  const auto name_of = [](spdlog::level::level_enum l) -> std::string {
    switch (l) {
      case spdlog::level::trace: return "trace";
      case spdlog::level::debug: return "debug";
      case spdlog::level::info: return "info";
      case spdlog::level::warn: return "warn";
      case spdlog::level::err: return "error";
      case spdlog::level::critical: return "critical";
      default: return "off";
    }
  };
  const std::string before = name_of(spdlog::get_level());
  if (argv.empty()) {
    *out = {{"log_level", before}};
    return true;
  }
  if (std::find(std::begin(kNames), std::end(kNames), argv[0]) == std::end(kNames)) {
    *err = std::string(control::usage_error(*control::find_command("log-level")));
    return false;
  }
  set_log_level(argv[0].c_str());
  spdlog::info("log level set to {} (was {})", argv[0], before);  // (not shown above info)
  *out = {{"log_level", argv[0]}, {"previous", before}};
  return true;
}

/// trace PORT HEX [LEN]: what the datapath would do with the frame (HEX, or its first bytes
/// of LEN) arriving on PORT (dp/trace.h). The words are a control client's: bounded and
/// checked here (hex digits, at most the largest frame, LEN not below what HEX holds).
bool trace(Switch& sw, const CtlArgv& argv, Json* out, std::string* err) {
  const auto port = sw.port_index(argv[0]);
  if (!port) {
    *err = fmt::format("no port named '{}'", argv[0]);
    return false;
  }
  std::vector<uint8_t> bytes;
  std::string why;
  if (!dp::parse_frame_hex(argv[1], &bytes, &why)) {
    *err = "usage: trace PORT HEX [LEN]: HEX: " + why;
    return false;
  }
  uint64_t len = bytes.size();
  if (argv.size() == 3) {
    const std::string& w = argv[2];
    len = 0;
    const bool digits = !w.empty() && w.size() <= 6 &&
                        std::all_of(w.begin(), w.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) len = std::stoull(w);
    if (!digits || len < bytes.size() || len > virtio::kMaxFrameLen ||
        bytes.size() < std::min<uint64_t>(len, dp::kTraceMinHead)) {
      *err = fmt::format("usage: trace PORT HEX [LEN]: LEN is the frame's length, {} to {} (HEX "
                         "holds {} bytes: at least its first {})",
                         bytes.size(), virtio::kMaxFrameLen, bytes.size(), dp::kTraceMinHead);
      return false;
    }
  }
  *out = sw.trace(*port, bytes, static_cast<uint32_t>(len));
  return true;
}

bool version(Switch&, const CtlArgv&, Json* out, std::string*) {
  *out = {{"version", VIRTLINK_VERSION}};
  return true;
}

/// capture PORT DIR [--count N] [--snaplen B] [--duration S] [--bpf PROGRAM]: the frames
/// follow the reply on the same connection (app/capture.h CaptureRecord).
bool capture(Switch& sw, const CtlArgv& argv, Json* out, control::Takeover* take, std::string* err) {
  return sw.capture(argv, out, take, err);
}

bool upgrade(Switch& sw, const CtlArgv& argv, Json* out, control::Takeover* take, std::string* err) {
  return sw.upgrade(argv, out, take, err);
}

bool mirror(Switch& sw, const CtlArgv& argv, Json* out, std::string* err) {
  return sw.mirror(argv, out, err);
}

constexpr CtlCommand kHandlers[] = {
    {"stats", stats},
    {"ports", ports},
    {"fdb", nullptr, fdb},
    {"pmd-stats", pmd_stats},
    {"pmd-rxq-show", pmd_rxq_show},
    {"pmd-rebalance", pmd_rebalance},
    {"set-flush", set_flush},
    {"links", links},
    {"link", link},
    {"unlink", unlink},
    {"add-port", add_port},
    {"del-port", del_port},
    {"set-port", set_port},
    {"stats-clear", stats_clear},
    {"reload", reload},
    {"upgrade", nullptr, nullptr, upgrade},
    {"version", version},
    {"show", show},
    {"capture", nullptr, nullptr, capture},
    {"mirror", mirror},
    {"log-level", log_level},
    {"trace", trace},
};

/// Commands whose change the --db state file keeps.
bool changes_state(std::string_view name) {
  for (const char* n : {"add-port", "del-port", "set-port", "set-flush", "link", "unlink", "reload"})
    if (name == n) return true;
  return false;
}

const CtlCommand* find_handler(std::string_view name) {
  for (const CtlCommand& c : kHandlers)
    if (c.name == name) return &c;
  return nullptr;
}

}  // namespace

std::span<const CtlCommand> ctl_commands() { return kHandlers; }

bool add_ctl_commands(Switch& sw, control::ControlServer* server, std::string* err) {
  for (const CtlCommand& c : kHandlers) {
    if (!control::find_command(c.name)) {
      *err = fmt::format("control command '{}' has a handler but no row in the table", c.name);
      return false;
    }
  }
  for (const control::CommandSpec& spec : control::switch_commands()) {
    const CtlCommand* c = find_handler(spec.name);
    if (!c) {
      *err = fmt::format("control command '{}' has no handler", spec.name);
      return false;
    }
    if (c->takeover) {
      server->add_takeover(spec, [&sw, h = c->takeover](const CtlArgv& argv, Json* out,
                                                        control::Takeover* take, std::string* e) {
        return h(sw, argv, out, take, e);
      });
      continue;
    }
    if (c->stream) {
      server->add_stream(spec, [&sw, h = c->stream](const CtlArgv& argv,
                                                    std::unique_ptr<control::ReplyStream>* out,
                                                    std::string* e) { return h(sw, argv, out, e); });
      continue;
    }
    const bool changes = changes_state(spec.name);
    server->add(spec, [&sw, h = c->handler, changes](const CtlArgv& argv, Json* out, std::string* e) {
      const bool ok = h(sw, argv, out, e);
      // A change the state file could not keep: done, and said (the client warns).
      if (ok && changes && !sw.state_error().empty() && out->is_object())
        (*out)["warning"] = fmt::format("the state file is behind: its last write failed ({}); "
                                        "the change holds until the switch stops",
                                        sw.state_error());
      return ok;
    });
  }
  return true;
}

}  // namespace vl::app
