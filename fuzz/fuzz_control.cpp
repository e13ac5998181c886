// Fuzz target: the control socket's requests (docs/architecture.md "Control socket"), through
// the switch's own serving code: a control::ControlServer listening on a Unix socket, with
// every command of control/command_table.h added by app::add_ctl_commands for a real
// app::Switch of three ports (a, b, c; bridge mode; 64 MAC table buckets; not started: Switch::prepare(), so no
// vhost-user sockets and no running PMD thread). Each request is sent on its own connection
// and answered by ControlServer::on_ready(): read (line framing, answer at EOF), depth
// limit, JSON parse, request shape, the row's argument check, the handler, the reply's dump.
//
// Input: bytes (the first kMaxInput of them, so no line reaches the server's 64 KiB limit),
// cut at '\n' into request lines (at most kMaxRequests; the rest is ignored).
// Each line is sent with its '\n'; a last line without one is sent and the connection's
// write side shut (the server answers what it got at EOF); an empty last piece is not sent.
// make_seeds.py writes seeds of every command with valid and invalid arguments and
// fuzz_control.dict gives libFuzzer the protocol's words.
//
// Oracle, per request:
//  - one reply line, a JSON object of exactly {"ok": true, "result": ...} or
//    {"ok": false, "error": non-empty string} (INTERFACES.md, architecture.md);
//  - an error for anything malformed: not JSON (a NUL byte anywhere included: the parser
//    would stop there), not an object, no string cmd, args not an object, nesting over 16
//    (and "nested too deeply" only then), an unknown command, argv not an array of strings
//    of the row's count;
//  - for a well-formed request, the outcome a model of the switch predicts: which
//    arguments each command accepts (port names, "all", flush policies, link pairs) and the
//    result's shape (version's text, three ports in stats and ports, one PMD thread, the
//    links the model holds, set-flush's port and policy; add-port, del-port and set-port
//    with --may-exist/--if-exists, names, paths and the slot a new port takes; stats-clear;
//    reload refused, as this switch has no command line to read again; trace: its words
//    checked as dp/trace.h says, and a frame traced on a switch none of whose ports is
//    active dropped where it came in, as bad_header below 14 bytes, else no_destination).
// Ports at run time: the harness writes "$D/" in a request as its own socket directory
// (/tmp/vl-fuzz-control-PID/p/), which the fuzzer cannot know. An add-port the switch would
// open as anything but a vhost-user socket in that directory (a tap, AF_XDP or DPDK port,
// a tunnel, a path elsewhere) is not sent: the harness never creates interfaces, initialises
// DPDK or binds outside its directory. Everything else is, valid or not.
// A capture the switch would start (a port of the model and a direction) is not sent
// either: its connection goes on as a stream of frames (app/capture.h), which is not a
// reply line; capture requests it refuses are. A mirror's outcome is checked for its shape
// (the model keeps no mirrors; every input's mirrors are turned off in the reset).
// No connection is left pending after a reply. After every input that named a command that
// changes state (set-flush, link, unlink, pmd-rebalance, add-port, del-port, set-port; valid
// or not): `stats` answers with each port's flush policy as the model has it, `ports` with
// the model's names and ids, `links` with the model's links; then the input's links are
// unlinked, the ports it added, deleted or changed deleted and a, b, c added again in their
// slots, and the flush policies reset (through the socket), so inputs are independent.
// Sanitizers: ASan (with leak checks), UBSan.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "app/config.h"
#include "app/ctl_commands.h"
#include "app/switch.h"
#include "control/command_table.h"
#include "control/control_server.h"
#include "dp/flush.h"
#include "dp/trace.h"
#include "util/fd.h"
#include "virtio/virtio_defs.h"
#include "virtlink_version.h"

using namespace vl;
using control::Json;

namespace {

constexpr size_t kMaxRequests = 64;  // request lines per input
constexpr size_t kMaxInput = 32 << 10;  // bytes of an input used
constexpr size_t kMaxSubstitutions = 8;  // "$D/" written as the port directory, per line
constexpr const char* kPorts[] = {"a", "b", "c"};
constexpr size_t kNumPorts = 3;
constexpr size_t kMaxDepth = 16;  // control_server.cpp: deeper requests are refused
const std::string kDefaultFlush = "rx-batch";

std::string g_request;  // the request being checked, for die()

[[noreturn]] void die(const std::string& what, const std::string& reply = "") {
  std::fprintf(stderr, "fuzz_control: %s\n  request: %s\n  reply: %s\n", what.c_str(),
               Json(g_request).dump(-1, ' ', true, Json::error_handler_t::replace).c_str(),
               reply.c_str());
  std::abort();
}

struct Harness {
  std::string dir;
  std::string port_dir;  // dir + "/p/": what "$D/" in a request stands for
  std::unique_ptr<app::Switch> sw;
  control::ControlServer server;
  sockaddr_un addr{};
};
Harness* h = nullptr;

/// The socket path the harness gives config port `name` (a, b, c).
std::string own_path(const std::string& name) { return h->dir + "/" + name + ".sock"; }

/// One port as the model has it: in the slot (port id) of its index in Model::slots.
struct Slot {
  std::string name;
  std::string type;  // as add-port names it: vhost-user or vhost-user-client
  std::string path;
  std::string flush;
  bool pristine = true;  // one of a, b, c as the harness made it
};

/// What the switch should hold: the model the replies are checked against.
struct Model {
  std::vector<std::optional<Slot>> slots;
  std::string flush_all = kDefaultFlush;  // a vacant slot's policy (set-flush all sets it)
  std::vector<std::pair<std::string, std::string>> links;  // in the order linked
  bool touched = false;  // a request named a command that changes state (set-flush, ...)
  Model();
  /// The port id of `name`, or -1.
  int find(const std::string& name) const {
    for (size_t i = 0; i < slots.size(); ++i)
      if (slots[i] && slots[i]->name == name) return static_cast<int>(i);
    return -1;
  }
  std::vector<const Slot*> live() const {
    std::vector<const Slot*> out;
    for (const auto& s : slots)
      if (s) out.push_back(&*s);
    return out;
  }
  /// The slot a new port takes: the first vacant one.
  size_t first_free() const {
    size_t i = 0;
    while (i < slots.size() && slots[i]) ++i;
    return i;
  }
};

Model::Model() {
  for (const char* n : kPorts) slots.push_back(Slot{n, "vhost-user", own_path(n), kDefaultFlush, true});
}

/// Sends `bytes` on a new connection (then shuts its write side) and serves it; returns the
/// reply the server wrote (all of it, up to its close).
std::string exchange(const std::string& bytes) {
  UniqueFd s(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid() || connect(s.get(), reinterpret_cast<sockaddr*>(&h->addr), sizeof h->addr) != 0)
    die(std::string("connect: ") + strerror(errno));
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = send(s.get(), bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) die(std::string("send: ") + strerror(errno));
    off += static_cast<size_t>(n);
  }
  shutdown(s.get(), SHUT_WR);
  std::string reply;
  // One on_ready() accepts, the next reads and answers; a few more are slack.
  for (int round = 0; round < 8; ++round) {
    h->server.on_ready();
    char buf[4096];
    for (;;) {
      const ssize_t n = recv(s.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        reply.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) return reply;  // the server closed: its reply is complete
      break;                     // EAGAIN: not answered yet
    }
  }
  die("no reply (the server neither answered nor closed)", reply);
}

/// Depth of a parsed value: 0 for a scalar, 1 for [] or {}, ...
size_t depth_of(const Json& j) {
  if (!j.is_structured()) return 0;
  size_t d = 0;
  for (const Json& e : j) d = std::max(d, depth_of(e));
  return d + 1;
}

struct Reply {
  bool ok;
  Json result;
  std::string error;
  std::string text;
};

/// Checks the reply's framing and shape: exactly ok+result or ok+error, except that an ok
/// `fdb` reply also carries total, shown and truncated (shown = the list's length,
/// truncated = shown < total); and every reply "switch": {control, pid}, this process's.
Reply parse_reply(const std::string& text) {
  if (text.empty() || text.back() != '\n' || text.find('\n') != text.size() - 1)
    die("the reply is not one line", text);
  Json r = Json::parse(text.substr(0, text.size() - 1), nullptr, false);
  if (r.is_object()) {
    const Json who = {{"control", h->server.path()}, {"pid", getpid()}};
    if (!r.contains("switch") || r["switch"] != who) die("the reply does not name the switch", text);
    r.erase("switch");
  }
  const bool fdb_shape = r.is_object() && r.size() == 5 && r.contains("total") &&
                         r.contains("shown") && r.contains("truncated");
  if (r.is_discarded() || !r.is_object() || (r.size() != 2 && !fdb_shape) || !r.contains("ok") ||
      !r["ok"].is_boolean())
    die("the reply is not {ok, result} or {ok, error}", text);
  if (fdb_shape) {
    if (!r["ok"].get<bool>() || !r.contains("result") || !r["result"].is_array() ||
        !r["total"].is_number_unsigned() || !r["shown"].is_number_unsigned() ||
        !r["truncated"].is_boolean() || r["shown"].get<uint64_t>() != r["result"].size() ||
        r["truncated"].get<bool>() != (r["shown"].get<uint64_t>() < r["total"].get<uint64_t>()))
      die("an fdb reply whose total, shown and truncated disagree with its list", text);
  }
  Reply out{r["ok"].get<bool>(), {}, {}, text};
  if (out.ok) {
    if (!r.contains("result")) die("an ok reply without result", text);
    out.result = r["result"];
  } else {
    if (!r.contains("error") || !r["error"].is_string() || r["error"].get<std::string>().empty())
      die("an error reply without an error text", text);
    out.error = r["error"].get<std::string>();
  }
  return out;
}

bool starts(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

void expect_error(const Reply& r, const char* prefix, const char* why) {
  if (r.ok) die(std::string("accepted ") + why, r.text);
  if (!starts(r.error, prefix)) die(std::string(why) + ": the error does not start with '" + prefix + "'", r.text);
}

/// A listing's ports (stats, show): the model's, in slot order, with their flush policies.
void check_port_list(const Json& p, const Model& m, const char* what, const Reply& r) {
  const auto live = m.live();
  if (!p.is_array() || p.size() != live.size()) die(std::string(what) + ": not the model's ports", r.text);
  for (size_t i = 0; i < live.size(); ++i) {
    if (p[i].value("name", "") != live[i]->name) die(std::string(what) + ": port names or order changed", r.text);
    if (p[i].value("flush", "") != live[i]->flush)
      die(std::string(what) + ": a flush policy is not the one set", r.text);
  }
}

void check_stats(const Reply& r, const Model& m) {
  if (!r.ok) die("stats failed", r.text);
  check_port_list(r.result.contains("ports") ? r.result["ports"] : Json(), m, "stats", r);
}

/// `ports`: the model's names, each with the id of its slot.
void check_ports(const Reply& r, const Model& m) {
  if (!r.ok || !r.result.is_array()) die("ports: not a list", r.text);
  size_t k = 0;
  for (size_t i = 0; i < m.slots.size(); ++i) {
    if (!m.slots[i]) continue;
    if (k >= r.result.size() || r.result[k].value("name", "") != m.slots[i]->name ||
        r.result[k].value("id", -1) != static_cast<int>(i))
      die("ports: names or ids are not the model's", r.text);
    ++k;
  }
  if (k != r.result.size()) die("ports: more ports than the model's", r.text);
}

void check_links(const Reply& r, const Model& m) {
  if (!r.ok || !r.result.is_array() || r.result.size() != m.links.size())
    die("links: not the links made", r.text);
  for (size_t i = 0; i < m.links.size(); ++i) {
    if (r.result[i].value("a", "") != m.links[i].first || r.result[i].value("b", "") != m.links[i].second)
      die("links: not the links made", r.text);
  }
}

void check_pmd_rxq(const Reply& r) {
  if (!r.ok || !r.result.is_object() || !r.result.contains("assign") ||
      !r.result["assign"].is_string() || !r.result.contains("pmds") ||
      !r.result["pmds"].is_array() || r.result["pmds"].size() != 1 ||
      !r.result.contains("reassignments"))
    die("pmd-rxq-show: not {assign, reassignments, pmds: [one thread]}", r.text);
}

/// The harness's log level (off unless VL_FUZZ_VERBOSE), put back after a log-level.
spdlog::level::level_enum g_log_level = spdlog::level::info;

/// `show`: this process, one PMD thread, the three ports with the model's flush policies,
/// and the model's links.
void check_show(const Reply& r, const Model& m) {
  if (!r.ok || !r.result.is_object() || !r.result.contains("switch") || !r.result.contains("ports") ||
      !r.result.contains("links"))
    die("show: not {switch, ports, links}", r.text);
  const Json& s = r.result["switch"];
  if (s.value("pid", -1) != getpid() || s.value("control", "") != h->server.path() ||
      s.value("version", "") != VIRTLINK_VERSION || !s.contains("pmds") || s["pmds"].size() != 1)
    die("show: not this switch", r.text);
  check_port_list(r.result["ports"], m, "show", r);
  if (!r.result["links"].is_array() || r.result["links"].size() != m.links.size())
    die("show: not the links made", r.text);
}

/// `log-level [LEVEL]`: one of the six names sets it (and says the one before), none says
/// it, any other word is a usage error. The level is put back (the harness's own).
void check_log_level(const std::vector<std::string>& argv, const Reply& r) {
  static const std::vector<std::string> kLevels = {"trace", "debug", "info", "warn", "error", "off"};
  if (argv.empty()) {
    if (!r.ok || !r.result.contains("log_level") || !r.result["log_level"].is_string())
      die("log-level: not the level", r.text);
  } else if (std::find(kLevels.begin(), kLevels.end(), argv[0]) == kLevels.end()) {
    expect_error(r, "usage: log-level", "a log level not of the six");
  } else if (!r.ok || r.result.value("log_level", "") != argv[0] || !r.result.contains("previous")) {
    die("log-level: wrong reply", r.text);
  }
  spdlog::set_level(g_log_level);
}

/// Takes every `flag` out of `words` (as ctl_commands.cpp's take_flag does, anywhere);
/// whether there was one.
bool take_flag(std::vector<std::string>* words, const char* flag) {
  return std::erase(*words, std::string(flag)) != 0;
}

/// The flush policy the settings `kv[from...]` give a port: the last flush= (by its
/// canonical name; "default" is the switch-wide one), or nullopt. Only for settings the
/// switch accepted, so the policy parses.
std::optional<std::string> flush_setting(const std::vector<std::string>& kv, size_t from,
                                         const Model& m, const Reply& r) {
  std::optional<std::string> f;
  for (size_t i = from; i < kv.size(); ++i)
    if (starts(kv[i], "flush=")) f = kv[i].substr(6);
  if (!f || *f == "default") return f ? std::optional<std::string>(m.flush_all) : f;
  std::string err;
  const auto p = dp::parse_flush_policy(*f, &err);
  if (!p) die("accepted a port setting of a bad flush policy", r.text);
  return dp::flush_policy_name(*p);
}

/// Whether the harness sends this add-port: not if the switch would open anything but a
/// vhost-user socket in the harness's directory (see the file's comment).
bool add_port_sendable(const std::vector<std::string>& argv) {
  std::vector<std::string> a = argv;
  take_flag(&a, "--may-exist");
  if (a.size() < 3) return true;
  std::string err;
  const auto pc = app::parse_port_spec(a[0] + "=" + a[1] + ":" + a[2], &err);
  if (!pc) return true;
  if (pc->type != port::PortType::kVhostUser || pc->path.find("..") != std::string::npos) return false;
  for (const char* n : kPorts)
    if (pc->path == own_path(n)) return true;
  return starts(pc->path, h->port_dir.c_str());
}

/// add-port [--may-exist] NAME TYPE ARG [KEY=VALUE ...]: a name of 1 to 64 printable
/// characters without spaces, '=' or ':', not starting with '-' and not "all"
/// (switch_ports.cpp); a name that exists is accepted
/// only with --may-exist and the same type and path (created: false, its id); a path that
/// is another port's is refused; a new port takes the first vacant slot, with the flush
/// policy of its settings or the switch-wide one. Refused settings are the switch's call.
void check_add_port(const std::vector<std::string>& argv, const Reply& r, Model* m) {
  std::vector<std::string> a = argv;
  const bool may_exist = take_flag(&a, "--may-exist");
  if (a.size() < 3) {
    if (r.ok || r.error != control::usage_error(*control::find_command("add-port")))
      die("add-port without NAME TYPE ARG: not its usage error", r.text);
    return;
  }
  const bool name_ok = !a[0].empty() && a[0].size() <= 64 && a[0][0] != '-' && a[0] != "all" &&
                       std::all_of(a[0].begin(), a[0].end(), [](char ch) {
                         return ch > ' ' && ch < 0x7f && ch != '=' && ch != ':';
                       });
  if (!name_ok) return expect_error(r, "usage: port name '", "an add-port of a bad name");
  std::string err;
  const auto pc = app::parse_port_spec(a[0] + "=" + a[1] + ":" + a[2], &err);
  if (!pc) return expect_error(r, "usage: ", "an add-port of a bad port spec");
  const std::string type = port::port_type_name(pc->type, pc->mode);
  if (const int have = m->find(a[0]); have >= 0) {
    const Slot& s = *m->slots[static_cast<size_t>(have)];
    if (!may_exist || s.type != type || s.path != pc->path)
      return expect_error(r, "usage: port '", "an add-port of a name that exists");
    if (!r.ok || r.result.value("created", true) || r.result.value("id", -1) != have)
      die("add-port --may-exist of the port as it is: not {created: false} with its id", r.text);
    return;
  }
  for (const Slot* s : m->live())
    if (s->path == pc->path) return expect_error(r, "usage: socket path '", "an add-port of a used path");
  if (!r.ok) return;  // a refused name or setting (usage), or a socket that did not open
  const size_t slot = m->first_free();
  if (slot >= port::kMaxPorts) die("add-port beyond the switch's most ports", r.text);
  if (r.result.value("port", "") != a[0] || !r.result.value("created", false) ||
      r.result.value("id", -1) != static_cast<int>(slot))
    die("add-port: not {port, created: true} in the first vacant slot", r.text);
  if (slot >= m->slots.size()) m->slots.resize(slot + 1);
  m->slots[slot] = Slot{a[0], type, pc->path, flush_setting(a, 3, *m, r).value_or(m->flush_all), false};
}

/// del-port [--if-exists] NAME: the port goes with its link; a name that does not exist is
/// accepted only with --if-exists (deleted: false).
void check_del_port(const std::vector<std::string>& argv, const Reply& r, Model* m) {
  std::vector<std::string> a = argv;
  const bool if_exists = take_flag(&a, "--if-exists");
  if (a.size() != 1) {
    if (r.ok || r.error != control::usage_error(*control::find_command("del-port")))
      die("del-port without one NAME: not its usage error", r.text);
    return;
  }
  const int i = m->find(a[0]);
  if (i < 0) {
    if (!if_exists) return expect_error(r, "usage: no port named '", "a del-port of an unknown port");
    if (!r.ok || r.result != Json({{"port", a[0]}, {"deleted", false}}))
      die("del-port --if-exists of an unknown port: not {deleted: false}", r.text);
    return;
  }
  if (!r.ok || r.result != Json({{"port", a[0]}, {"deleted", true}})) die("del-port: not {deleted: true}", r.text);
  m->slots[static_cast<size_t>(i)].reset();
  std::erase_if(m->links, [&](const auto& l) { return l.first == a[0] || l.second == a[0]; });
}

/// set-port NAME KEY=VALUE ...: an unknown name is refused; an accepted change sets the
/// flush policy it names; a port that could not reopen either way is deleted (its error
/// says so). Which settings are valid is the switch's call.
void check_set_port(const std::vector<std::string>& argv, const Reply& r, Model* m) {
  const int i = m->find(argv[0]);
  if (i < 0) return expect_error(r, "usage: no port named '", "a set-port of an unknown port");
  auto& s = m->slots[static_cast<size_t>(i)];
  s->pristine = false;
  if (!r.ok) {
    if (r.error.find("it is deleted") != std::string::npos) s.reset();
    return;
  }
  if (r.result.value("port", "") != argv[0] || !r.result.contains("restarted") ||
      !r.result["restarted"].is_boolean())
    die("set-port: not {port, restarted}", r.text);
  if (const auto f = flush_setting(argv, 1, *m, r)) s->flush = *f;
}

/// trace PORT HEX [LEN]: an unknown port, bad hex (dp::parse_frame_hex) and a LEN not of
/// 1-6 digits, below the bytes given, above the largest frame or with fewer than
/// dp::kTraceMinHead bytes given are refused; otherwise, as no port of this switch is active
/// (none is started) and no VLAN is set, the frame is dropped on its port: bad_header below
/// 14 bytes, else no_destination (flooded to no one, or a frame to its own source), changing
/// nothing.
void check_trace(const std::vector<std::string>& argv, const Reply& r, const Model& m) {
  if (m.find(argv[0]) < 0) return expect_error(r, "no port named '", "a trace on an unknown port");
  static constexpr const char* kUsage = "usage: trace PORT HEX [LEN]: ";
  std::vector<uint8_t> bytes;
  std::string err;
  if (!dp::parse_frame_hex(argv[1], &bytes, &err)) return expect_error(r, kUsage, "a trace of bad hex");
  uint64_t len = bytes.size();
  if (argv.size() == 3) {
    const std::string& w = argv[2];
    const bool digits = !w.empty() && w.size() <= 6 &&
                        std::all_of(w.begin(), w.end(), [](char c) { return c >= '0' && c <= '9'; });
    len = digits ? std::stoull(w) : 0;
    if (!digits || len < bytes.size() || len > virtio::kMaxFrameLen ||
        bytes.size() < std::min<uint64_t>(len, dp::kTraceMinHead))
      return expect_error(r, kUsage, "a trace of a bad LEN");
  }
  if (!r.ok || !r.result.is_object()) die("trace: refused a well-formed request", r.text);
  const Json frame = r.result.value("frame", Json::object());
  const Json drop = {{"reason", len < 14 ? "bad_header" : "no_destination"}, {"counted_on", argv[0]}};
  if (r.result.value("port", "") != argv[0] || frame.value("len", uint64_t{0}) != len ||
      frame.value("bytes_given", uint64_t{0}) != bytes.size() || r.result.value("changed", true) ||
      r.result.value("drops", Json()) != Json::array({drop}) ||
      r.result.value("delivered_to", Json()) != Json::array())
    die("trace: not what a switch without an active port does with the frame", r.text);
}

/// Checks the reply to a well-formed request of `cmd` with `argv` against the model, and
/// updates the model by what the command did.
void check_command(const std::string& cmd, const std::vector<std::string>& argv, const Reply& r,
                   Model* m) {
  if (cmd == "version") {
    if (!r.ok || r.result != Json({{"version", VIRTLINK_VERSION}})) die("version: wrong reply", r.text);
  } else if (cmd == "stats") {
    check_stats(r, *m);
  } else if (cmd == "ports") {
    check_ports(r, *m);
  } else if (cmd == "fdb") {
    int named = 0;
    bool unknown = false;
    for (const std::string& w : argv) {
      if (w == "all") continue;
      if (m->find(w) < 0) unknown = true;
      ++named;
    }
    if (unknown) expect_error(r, "no port named '", "fdb of an unknown port");
    else if (named > 1) expect_error(r, "usage: fdb", "fdb of two ports");
    else if (!r.ok || r.result != Json::array()) die("fdb: not the (empty) table", r.text);
  } else if (cmd == "pmd-stats") {
    if (!r.ok || !r.result.is_array() || r.result.size() != 1 || r.result[0].value("pmd", -1) != 0)
      die("pmd-stats: not one thread", r.text);
  } else if (cmd == "pmd-rxq-show" || cmd == "pmd-rebalance") {
    check_pmd_rxq(r);
  } else if (cmd == "set-flush") {
    std::string perr;
    const auto p = dp::parse_flush_policy(argv[1], &perr);
    const int port = m->find(argv[0]);
    if (!p) {
      expect_error(r, "flush policy '", "a bad flush policy");
    } else if (argv[0] != "all" && port < 0) {
      expect_error(r, "no port named '", "set-flush of an unknown port");
    } else {
      const std::string name = dp::flush_policy_name(*p);
      if (!r.ok || r.result != Json({{"port", argv[0]}, {"flush", name}}))
        die("set-flush: wrong reply", r.text);
      for (size_t i = 0; i < m->slots.size(); ++i)
        if (m->slots[i] && (port < 0 || static_cast<size_t>(port) == i)) m->slots[i]->flush = name;
      if (port < 0) m->flush_all = name;
    }
  } else if (cmd == "links") {
    check_links(r, *m);
  } else if (cmd == "link") {
    const std::string &a = argv[0], &b = argv[1];
    bool same = false, busy = false;
    for (const auto& [la, lb] : m->links) {
      if (la == a && lb == b) same = true;
      else if (la == a || lb == a || la == b || lb == b) busy = true;
    }
    if (m->find(a) < 0 || m->find(b) < 0) {
      expect_error(r, "no port named '", "a link of an unknown port");
    } else if (a == b) {
      expect_error(r, "a port cannot be linked to itself", "a port linked to itself");
    } else if (!same && busy) {
      expect_error(r, "port '", "a link of a port already in one");
    } else {
      if (!r.ok || r.result.value("a", "") != a || r.result.value("b", "") != b ||
          !r.result.contains("state"))
        die("link: wrong reply", r.text);
      if (!same) m->links.emplace_back(a, b);
    }
  } else if (cmd == "unlink") {
    size_t i = 0;
    while (i < m->links.size() && m->links[i] != std::make_pair(argv[0], argv[1])) ++i;
    if (i == m->links.size()) {
      expect_error(r, "no link ", "unlink of a link not made");
    } else {
      if (!r.ok || r.result.value("a", "") != argv[0] || r.result.value("b", "") != argv[1])
        die("unlink: wrong reply", r.text);
      m->links.erase(m->links.begin() + static_cast<long>(i));
    }
  } else if (cmd == "show") {
    check_show(r, *m);
  } else if (cmd == "log-level") {
    check_log_level(argv, r);
  } else if (cmd == "add-port") {
    check_add_port(argv, r, m);
  } else if (cmd == "del-port") {
    check_del_port(argv, r, m);
  } else if (cmd == "set-port") {
    check_set_port(argv, r, m);
  } else if (cmd == "stats-clear") {
    if (!r.ok || r.result != Json({{"cleared", true}})) die("stats-clear: not {cleared: true}", r.text);
  } else if (cmd == "reload") {
    expect_error(r, "this switch cannot read its configuration again", "a reload without a command line");
  } else if (cmd == "capture") {  // (one it would start is not sent: request())
    if (r.ok) die("capture: a refusal expected", r.text);
  } else if (cmd == "mirror") {
    if (m->find(argv[0]) < 0) expect_error(r, "no port named '", "a mirror of an unknown port");
    else if (r.ok && r.result.value("port", "") != argv[0]) die("mirror: not the port's", r.text);
    else if (!r.ok && !starts(r.error, "mirror:") && !starts(r.error, "usage: mirror") &&
             !starts(r.error, "no port named '"))
      die("mirror: an unexpected error", r.text);
  } else if (cmd == "trace") {
    check_trace(argv, r, *m);
  } else {
    die("a command of the table this harness does not know: " + cmd, r.text);
  }
}

/// Sends one request (its bytes as sent, `line` the request line the server sees) and
/// checks the reply.
void request(const std::string& bytes, const std::string& line, Model* m) {
  g_request = bytes;
  const bool nul = line.find('\0') != std::string::npos;  // never JSON (nlohmann's parser stops there)
  const Json req = nul ? Json(Json::value_t::discarded) : Json::parse(line, nullptr, false);
  if (req.is_object() && req.value("cmd", Json()) == "add-port" && req.contains("args") &&
      req["args"].is_object() && req["args"].contains("argv") && req["args"]["argv"].is_array() &&
      std::all_of(req["args"]["argv"].begin(), req["args"]["argv"].end(),
                  [](const Json& w) { return w.is_string(); }) &&
      !add_port_sendable(req["args"]["argv"].get<std::vector<std::string>>()))
    return;  // a port the harness does not open (not sent)
  if (req.is_object() && req.value("cmd", Json()) == "capture" && req.contains("args") &&
      req["args"].is_object() && req["args"].contains("argv") && req["args"]["argv"].is_array() &&
      req["args"]["argv"].size() >= 2 && req["args"]["argv"][0].is_string() &&
      m->find(req["args"]["argv"][0].get<std::string>()) >= 0)
    return;  // a capture that could start (not sent: its connection becomes a stream)
  const Reply r = parse_reply(exchange(bytes));
  if (h->server.pending() != 0) die("a connection is left pending after its reply", r.text);
  if (nul) {
    expect_error(r, "malformed request", "a request with a NUL byte");
    return;
  }
  if (!r.ok && r.error == "request nested too deeply") {
    if (!req.is_discarded() && depth_of(req) <= kMaxDepth) die("refused as too deep, but is not", r.text);
    return;
  }
  if (!req.is_discarded() && depth_of(req) > kMaxDepth) die("a request nested too deeply was served", r.text);
  if (req.is_discarded() || !req.is_object() || !req.contains("cmd") || !req["cmd"].is_string() ||
      (req.contains("args") && !req["args"].is_object())) {
    expect_error(r, "malformed request", "a malformed request");
    return;
  }
  const std::string cmd = req["cmd"].get<std::string>();
  const control::CommandSpec* spec = control::find_command(cmd);
  if (cmd == "set-flush" || cmd == "link" || cmd == "unlink" || cmd == "pmd-rebalance" ||
      cmd == "add-port" || cmd == "del-port" || cmd == "set-port" || cmd == "mirror")
    m->touched = true;
  if (!spec) {
    expect_error(r, "unknown command '", "an unknown command");
    return;
  }
  const Json args = req.value("args", Json::object());
  const Json argv = args.contains("argv") ? args["argv"] : Json::array();
  bool strings = argv.is_array();
  std::vector<std::string> words;
  if (strings) {
    for (const Json& w : argv) {
      if (!w.is_string()) strings = false;
      else words.push_back(w.get<std::string>());
    }
  }
  if (!strings || words.size() < spec->min_args || words.size() > spec->max_args) {
    if (r.ok || r.error != control::usage_error(*spec)) die("arguments that do not fit the row: not its usage error", r.text);
    return;
  }
  check_command(cmd, words, r, m);
}

std::string line_of(const std::string& cmd, const std::vector<std::string>& argv) {
  Json args = Json::object();
  if (!argv.empty()) args["argv"] = argv;
  return Json{{"cmd", cmd}, {"args", args}}.dump();
}

/// A request of the harness's own (consistency checks and the reset).
void own(const std::string& cmd, const std::vector<std::string>& argv, Model* m) {
  const std::string line = line_of(cmd, argv);
  request(line + "\n", line, m);
}

/// Back to the switch as LLVMFuzzerInitialize made it: no links; the ports an input added,
/// deleted or changed deleted and a, b, c added again (each into its slot, the first
/// vacant one); every flush policy the default.
void reset(Model* m) {
  while (!m->links.empty()) {
    const auto [a, b] = m->links.front();
    own("unlink", {a, b}, m);
  }
  for (size_t i = 0; i < m->slots.size(); ++i) {
    const auto& s = m->slots[i];
    if (s && (!s->pristine || i >= kNumPorts || s->name != kPorts[i])) own("del-port", {s->name}, m);
  }
  for (size_t i = 0; i < kNumPorts; ++i) {
    if (m->find(kPorts[i]) >= 0) continue;
    own("add-port", {kPorts[i], "vhost-user", own_path(kPorts[i])}, m);
    if (m->find(kPorts[i]) != static_cast<int>(i)) die(std::string("port ") + kPorts[i] + " did not come back in its slot");
  }
  for (const Slot* s : m->live()) own("mirror", {s->name, "off"}, m);
  bool other = m->flush_all != kDefaultFlush;
  for (const Slot* s : m->live()) other = other || s->flush != kDefaultFlush;
  if (other) own("set-flush", {"all", kDefaultFlush}, m);
}

constexpr const char* kDirPrefix = "vl-fuzz-control-";  // /tmp/vl-fuzz-control-PID

/// Removes the socket directories (/tmp/vl-fuzz-control-PID) of earlier runs whose process
/// is gone: a run that crashes, or each child of -minimize_crash, ends without atexit.
void remove_stale_dirs() {
  namespace fs = std::filesystem;
  try {
    for (const fs::directory_entry& e : fs::directory_iterator("/tmp")) {
      const std::string name = e.path().filename().string();
      if (!starts(name, kDirPrefix)) continue;
      const std::string pid = name.substr(std::strlen(kDirPrefix));
      if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
      if (fs::exists("/proc/" + pid)) continue;
      std::error_code ec;
      fs::remove_all(e.path(), ec);
    }
  } catch (const fs::filesystem_error&) {  // /tmp unreadable: nothing to clean
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (!getenv("VL_FUZZ_VERBOSE")) spdlog::set_level(spdlog::level::off);
  g_log_level = spdlog::get_level();
  h = new Harness;
  remove_stale_dirs();
  h->dir = std::string("/tmp/") + kDirPrefix + std::to_string(getpid());
  std::filesystem::remove_all(h->dir);  // a dead process's of the same pid
  if (mkdir(h->dir.c_str(), 0700) != 0) die("mkdir " + h->dir + ": " + strerror(errno));
  h->port_dir = h->dir + "/p/";
  if (mkdir(h->port_dir.c_str(), 0700) != 0) die("mkdir " + h->port_dir + ": " + strerror(errno));
  app::SwitchConfig cfg;
  for (const char* n : kPorts) {
    port::PortConfig p;
    p.name = n;
    p.path = own_path(n);  // not created until a port is reopened: the ports are not started
    cfg.ports.push_back(p);
  }
  cfg.flush = kDefaultFlush;
  // A small MAC table (mac_table_buckets = 64): `ctl fdb` walks every bucket, and 2^16 of
  // them took most of the time of an input in this uninlined, instrumented build.
  cfg.fdb_buckets = 64;
  cfg.control_path = h->dir + "/ctl";
  h->sw = std::make_unique<app::Switch>(cfg);
  h->sw->prepare();
  std::string err;
  if (!h->server.listen(cfg.control_path, &err)) die("listen: " + err);
  if (!app::add_ctl_commands(*h->sw, &h->server, &err)) die("add_ctl_commands: " + err);
  h->addr.sun_family = AF_UNIX;
  std::snprintf(h->addr.sun_path, sizeof h->addr.sun_path, "%s", cfg.control_path.c_str());
  // The socket and its directory go when the process exits normally (otherwise the next
  // run's remove_stale_dirs() takes them).
  std::atexit([] {
    h->server.close();
    std::error_code ec;
    std::filesystem::remove_all(h->dir, ec);  // with the sockets of ports added again
  });
  return 0;
}

namespace {

/// `in` with the first kMaxSubstitutions "$D/" of each line written as the harness's
/// port directory.
std::string substitute_dir(const std::string& in) {
  std::string out;
  size_t n = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\n') n = 0;
    if (n < kMaxSubstitutions && in.compare(i, 3, "$D/") == 0) {
      out += h->port_dir;
      i += 2;
      ++n;
      continue;
    }
    out += in[i];
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in =
      substitute_dir(std::string(reinterpret_cast<const char*>(data), std::min(size, kMaxInput)));
  Model m;
  size_t pos = 0;
  for (size_t n = 0; n < kMaxRequests && pos < in.size(); ++n) {
    const size_t nl = in.find('\n', pos);
    if (nl == std::string::npos) {
      const std::string line = in.substr(pos);
      request(line, line, &m);
      break;
    }
    request(in.substr(pos, nl + 1 - pos), in.substr(pos, nl - pos), &m);
    pos = nl + 1;
  }
  // The switch as the model has it, then back to the start for the next input. Only after
  // an input that named a state-changing command (the others leave nothing to check, and
  // two more requests would take most of a short input's time).
  if (!m.touched) return 0;
  own("stats", {}, &m);
  own("ports", {}, &m);
  own("links", {}, &m);
  reset(&m);
  g_request.clear();
  return 0;
}
