// `ctl upgrade`: the running switch hands its sockets, guest memory, ring state, MAC table
// and counters to a successor process, which goes on forwarding without the front-ends
// noticing (docs/architecture.md "Upgrade"). Both sides of the hand-over are here.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "app/state_db.h"
#include "app/json_views.h"
#include "app/successor.h"
#include "app/switch.h"
#include "util/clock.h"
#include "util/fd_message.h"
#include "util/log.h"
#include "util/service_notify.h"
#include "virtlink_version.h"

namespace vl::app {

using control::Json;

namespace {

/// The hand-over's format: a successor takes only the one it knows.
constexpr int kHandoverFormat = 1;
/// From the successor's start to its answer to the offer (its configuration read; ASan
/// builds and DPDK's EAL take seconds). The control thread waits that long at most: no
/// other ctl request is served meanwhile (docs/architecture.md "Upgrade").
constexpr int kAnswerTimeoutMs = 15000;
/// From the state sent to the successor's "forwarding".
constexpr int kForwardTimeoutMs = 10000;
constexpr size_t kMaxStateBytes = size_t{64} << 20;

/// The fds of a hand-over, in the order sent: the state names each by its index.
struct FdList {
  std::vector<int> fds;
  int add(int fd) {
    if (fd < 0) return -1;
    fds.push_back(fd);
    return static_cast<int>(fds.size() - 1);
  }
};

Json snapshot_json(const vhost::BackendSnapshot& s, FdList* f) {
  Json regions = Json::array();
  for (uint32_t i = 0; i < s.nregions; ++i) {
    const virtio::MemRegionDesc& r = s.regions[i];
    regions.push_back({r.guest_phys_addr, r.memory_size, r.userspace_addr, r.mmap_offset, f->add(s.mem_fds[i])});
  }
  Json rings = Json::array();
  for (uint32_t i = 0; i < s.nrings; ++i) {
    const vhost::BackendSnapshot::Ring& r = s.rings[i];
    rings.push_back({{"num", r.num},
                     {"addr", {r.addr.flags, r.addr.desc_user_addr, r.addr.used_user_addr,
                               r.addr.avail_user_addr, r.addr.log_guest_addr}},
                     {"addr_set", r.addr_set}, {"base_set", r.base_set}, {"base", r.base},
                     {"started", r.started}, {"enabled", r.enabled},
                     {"kick", f->add(r.kick)}, {"call", f->add(r.call)}, {"err", f->add(r.err)}});
  }
  return {{"conn", f->add(s.conn)}, {"link_chan", f->add(s.link_chan)},
          {"features", s.features}, {"protocol_features", s.protocol_features},
          {"features_set", s.features_set}, {"mtu", s.mtu},
          {"rarp_mac", s.rarp_mac_set ? Json(std::vector<int>(s.rarp_mac, s.rarp_mac + 6)) : Json()},
          {"regions", regions}, {"rings", rings}};
}

/// The fd at index `j` of `fds` (taken), or -1; out of range throws (a malformed state).
int take_fd(const Json& j, std::vector<UniqueFd>* fds) {
  const int i = j.get<int>();
  if (i < 0) return -1;
  return fds->at(static_cast<size_t>(i)).release();
}

/// The snapshot `j` describes, with its fds taken from `fds`. Throws on a malformed state;
/// fds taken before that are closed by `out`'s owner (Backend::adopt or close_snapshot).
void snapshot_from_json(const Json& j, std::vector<UniqueFd>* fds, vhost::BackendSnapshot* s) {
  *s = vhost::BackendSnapshot{};
  s->conn = take_fd(j.at("conn"), fds);
  s->link_chan = take_fd(j.at("link_chan"), fds);
  s->features = j.at("features").get<uint64_t>();
  s->protocol_features = j.at("protocol_features").get<uint64_t>();
  s->features_set = j.at("features_set").get<bool>();
  s->mtu = j.at("mtu").get<uint32_t>();
  if (j.at("rarp_mac").is_array()) {
    s->rarp_mac_set = true;
    for (int k = 0; k < 6; ++k) s->rarp_mac[k] = j.at("rarp_mac").at(k).get<uint8_t>();
  }
  const Json& regions = j.at("regions");
  if (regions.size() > virtio::GuestMemory::kMaxRegions) throw std::out_of_range("regions");
  for (const Json& r : regions) {
    const uint32_t i = s->nregions++;
    s->regions[i] = {r.at(0).get<uint64_t>(), r.at(1).get<uint64_t>(), r.at(2).get<uint64_t>(),
                     r.at(3).get<uint64_t>()};
    s->mem_fds[i] = take_fd(r.at(4), fds);
  }
  const Json& rings = j.at("rings");
  if (rings.size() > vhost::kMaxVrings) throw std::out_of_range("rings");
  for (const Json& r : rings) {
    vhost::BackendSnapshot::Ring& x = s->rings[s->nrings++];
    x.num = r.at("num").get<uint32_t>();
    const Json& a = r.at("addr");
    x.addr = {0, a.at(0).get<uint32_t>(), a.at(1).get<uint64_t>(), a.at(2).get<uint64_t>(),
              a.at(3).get<uint64_t>(), a.at(4).get<uint64_t>()};
    x.addr_set = r.at("addr_set").get<bool>();
    x.base_set = r.at("base_set").get<bool>();
    x.base = r.at("base").get<uint32_t>();
    x.started = r.at("started").get<bool>();
    x.enabled = r.at("enabled").get<bool>();
    x.kick = take_fd(r.at("kick"), fds);
    x.call = take_fd(r.at("call"), fds);
    x.err = take_fd(r.at("err"), fds);
  }
}

/// Closes the fds of a snapshot that no back-end took.
void close_snapshot(vhost::BackendSnapshot& s) {
  vhost::BackendSnapshot owned = s;
  s = vhost::BackendSnapshot{};
  for (int fd : {owned.conn, owned.link_chan}) if (fd >= 0) close(fd);
  for (int fd : owned.mem_fds) if (fd >= 0) close(fd);
  for (const auto& r : owned.rings)
    for (int fd : {r.kick, r.call, r.err}) if (fd >= 0) close(fd);
}

Json counters_json(const port::CounterSnapshot& c) {
  return {{"rx", {c.rx_packets, c.rx_bytes}}, {"tx", {c.tx_packets, c.tx_bytes}},
          {"retries", c.tx_retries}, {"drops", std::vector<uint64_t>(c.drops, c.drops + port::kNumDrops)},
          {"work", std::vector<uint64_t>(c.offload_work, c.offload_work + offload::kNumWork)}};
}

port::CounterSnapshot counters_from_json(const Json& j) {
  port::CounterSnapshot c;
  c.rx_packets = j.at("rx").at(0).get<uint64_t>();
  c.rx_bytes = j.at("rx").at(1).get<uint64_t>();
  c.tx_packets = j.at("tx").at(0).get<uint64_t>();
  c.tx_bytes = j.at("tx").at(1).get<uint64_t>();
  c.tx_retries = j.at("retries").get<uint64_t>();
  const auto d = j.at("drops").get<std::vector<uint64_t>>();
  for (size_t i = 0; i < d.size() && i < port::kNumDrops; ++i) c.drops[i] = d[i];
  const auto w = j.at("work").get<std::vector<uint64_t>>();
  for (size_t i = 0; i < w.size() && i < offload::kNumWork; ++i) c.offload_work[i] = w[i];
  return c;
}

/// Sends the fds of `f` in messages of kFdMessageMaxFds.
bool send_fds(int sock, const FdList& f, std::string* err) {
  for (size_t at = 0; at < f.fds.size(); at += kFdMessageMaxFds) {
    const size_t n = std::min(kFdMessageMaxFds, f.fds.size() - at);
    if (!send_fd_message(sock, "fds", f.fds.data() + at, n, kForwardTimeoutMs, err)) return false;
  }
  return send_fd_message(sock, "end", nullptr, 0, kForwardTimeoutMs, err);
}

/// Waits for `pid` to be gone (SIGKILL after `ms`), so that a failed successor leaves nothing.
void reap(pid_t pid, int ms) {
  for (int waited = 0; waited < ms; waited += 10) {
    const pid_t r = waitpid(pid, nullptr, WNOHANG);
    if (r == pid || r < 0) return;  // (< 0: reaped already)
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

}  // namespace

std::string Switch::upgrade_refusal() const {
  if (handover_done_) return "this switch has handed over already";
  if (cfg_.handover_fd >= 0 && !handover_.empty()) return "this switch is still taking over";
  for (const auto& p : ports_) {
    const auto* v = dynamic_cast<const port::VhostPort*>(p.get());
    if (v && v->backend().logging())
      return fmt::format("port {} is being live-migrated (dirty logging is on): upgrade after the "
                         "migration ends", v->name());
  }
  if (const auto l = links_.pairs(); !l.empty())
    return fmt::format("direct link {} {} is up: unlink it first (links are not handed over)",
                       l[0].first, l[0].second);
  if (cfg_.forward == dp::ForwardMode::kXconnect &&
      std::any_of(ports_.begin(), ports_.end(), [](const auto& p) { return !p; }))
    return "a cross-connect with a deleted port: its pairs would change in the successor; restart instead";
  return "";
}

Json Switch::handover_state(std::vector<int>* fds, std::vector<std::string>* reopened) const {
  FdList f;
  Json ports = Json::array();
  for (uint32_t i = 0; i < ports_.size(); ++i) {
    if (!ports_[i]) continue;
    Json p = {{"name", ports_[i]->name()}, {"counters", counters_json(port_counters(view(), i))}};
    if (const auto* v = dynamic_cast<const port::VhostPort*>(ports_[i].get())) {
      p["listen"] = f.add(v->listen_fd());
      if (v->connected()) {
        vhost::BackendSnapshot s;
        v->backend().snapshot(&s);
        p["backend"] = snapshot_json(s, &f);
      }
    } else {
      reopened->push_back(ports_[i]->name());
    }
    ports.push_back(std::move(p));
  }
  Json fdb = Json::array();
  const uint32_t now = tables_.now_s.load();
  for (const dp::Fdb::Entry& e : fdb_.entries(now))
    if (e.port < ports_.size() && ports_[e.port])
      fdb.push_back({e.mac, ports_[e.port]->name(), e.age_s});
  Json j = {{"format", kHandoverFormat}, {"version", VIRTLINK_VERSION},
            {"state", state_to_text(saved_state())}, {"ports", ports}, {"fdb", fdb},
            {"control", f.add(ctl_.listen_fd())}, {"metrics", f.add(metrics_.listen_fd())}};
  *fds = std::move(f.fds);
  return j;
}

void Switch::pause_for_upgrade(bool pause) {
  if (pause) pmds_->hold(true);  // no thread polls from here: nothing goes to a paused port
  for (uint32_t i = 0; i < ports_.size(); ++i) {
    if (!ports_[i]) continue;
    if (auto* v = dynamic_cast<port::VhostPort*>(ports_[i].get())) {
      if (pause) v->pause_for_link();  // at a burst boundary: what PMD threads hold is delivered
      else v->resume_for_link();
    } else if (pause) {
      ports_[i]->stop();  // the successor opens the uplink again (its fds are not handed)
    } else {
      std::string err;
      if (!ports_[i]->start(&err)) spdlog::error("port {}: not reopened: {}", ports_[i]->name(), err);
      watch_port(i);
    }
  }
  if (!pause) pmds_->hold(false);
}

bool Switch::upgrade(const std::vector<std::string>& argv, Json* out, control::Takeover* take,
                     std::string* err) {
  if (const std::string why = upgrade_refusal(); !why.empty()) {
    *err = "upgrade refused: " + why;
    return false;
  }
  std::string path;
  if (!successor_binary(argv.empty() ? "" : argv[0], &path, err)) return false;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    *err = fmt::format("socketpair: {}", strerror(errno));
    return false;
  }
  UniqueFd sock(sv[0]), child_end(sv[1]);
  const pid_t pid = spawn_successor(successor_argv(path), child_end.get(), err);
  child_end.reset();
  if (pid < 0) return false;
  spdlog::info("upgrade: started {} (pid {}); offering hand-over format {}", path, pid, kHandoverFormat);
  const uint64_t t0 = mono_ns();
  const auto fail = [&](const std::string& why) {
    reap(pid, 2000);
    *err = fmt::format("upgrade to {} failed: {}; this switch (pid {}) goes on forwarding", path, why, getpid());
    spdlog::error("{}", *err);
    return false;
  };
  std::string msg, why;
  std::vector<UniqueFd> none;
  const Json offer = {{"format", kHandoverFormat}, {"version", VIRTLINK_VERSION}, {"pid", getpid()}};
  if (!send_fd_message(sock.get(), offer.dump(), nullptr, 0, kAnswerTimeoutMs, &why) ||
      !recv_fd_message(sock.get(), kAnswerTimeoutMs, &msg, &none, &why))
    return fail(successor_gone(pid, "before it answered", why));
  const Json ans = Json::parse(msg, nullptr, false);
  if (!ans.is_object() || !ans.contains("format") || !ans["format"].is_number_integer())
    return fail("the successor's answer is not a hand-over answer");
  if (ans.value("refused", std::string()) != "")
    return fail("the successor refused: " + ans["refused"].get<std::string>());
  if (ans["format"].get<int>() != kHandoverFormat)
    return fail(fmt::format("the successor speaks hand-over format {}, this switch {}",
                            ans["format"].get<int>(), kHandoverFormat));
  const std::string version = ans.value("version", std::string("?"));
  const uint64_t t_answer = mono_ns();
  pause_for_upgrade(true);
  const uint64_t t_paused = mono_ns();
  std::vector<int> fds;
  std::vector<std::string> reopened;
  const Json state = handover_state(&fds, &reopened);
  FdList fl{fds};
  bool sent = send_long_text(sock.get(), state.dump(), kForwardTimeoutMs, &why) && send_fds(sock.get(), fl, &why);
  Json done;
  if (sent && recv_fd_message(sock.get(), kForwardTimeoutMs, &msg, &none, &why)) {
    done = Json::parse(msg, nullptr, false);
    if (!done.is_object() || !done.value("forwarding", false))
      why = done.is_object() ? done.value("failed", std::string("no reason given")) : "a malformed reply";
  } else {
    why = successor_gone(pid, "during the hand-over", why);
  }
  if (!done.is_object() || !done.value("forwarding", false)) {
    pause_for_upgrade(false);  // rings and memory as they were: traffic resumes here
    return fail(why);
  }
  const uint64_t t_done = mono_ns();
  // Our PMD threads poll nothing (held) but would spin on the successor's CPUs until this
  // process exits: they stop now.
  pmds_->stop();
  metrics_.stop();  // (its listening socket is the successor's: only our copy closes)
  ctl_.retire(fmt::format("this switch (pid {}) handed over to pid {}: ask again", getpid(), pid));
  handover_done_ = true;
  handover_ns_ = mono_ns();
  service::notify_main_pid(pid, fmt::format("upgraded: pid {} forwards now", pid));
  *out = {{"upgraded", true}, {"pid", pid}, {"binary", path}, {"version", version},
          {"previous_pid", getpid()}, {"previous_version", VIRTLINK_VERSION},
          {"fds_handed", fds.size()}, {"reinitialised", reopened},
          {"start_ms", (t_answer - t0) / 1000000.0},
          {"paused_ms", (t_done - t_paused) / 1000000.0},
          {"successor", done}};
  spdlog::info("upgrade: pid {} ({}) forwards now; datapath paused {:.3f} ms; this process exits",
               pid, version, (t_done - t_paused) / 1e6);
  *take = [this](UniqueFd) { stop_.store(true); };  // the reply has left: exit (run())
  return true;
}

// ---- The successor's side ----

bool Switch::receive_handover(std::string* err) {
  UniqueFd& sock = handover_sock_;
  sock.reset(cfg_.handover_fd);
  std::string msg;
  std::vector<UniqueFd> none;
  if (!recv_fd_message(sock.get(), kAnswerTimeoutMs, &msg, &none, err)) {
    *err = "hand-over: no offer from the running switch: " + *err;
    return false;
  }
  const Json offer = Json::parse(msg, nullptr, false);
  if (!offer.is_object() || offer.value("format", -1) != kHandoverFormat) {
    const std::string why = fmt::format("hand-over format {} offered, this virtlink ({}) takes {}",
                                        offer.is_object() ? offer.value("format", -1) : -1,
                                        VIRTLINK_VERSION, kHandoverFormat);
    send_fd_message(sock.get(), Json{{"format", kHandoverFormat}, {"refused", why}}.dump(), nullptr, 0, 1000, err);
    *err = "hand-over refused: " + why;
    return false;
  }
  // What takes time and needs nothing handed is done before the answer, while the old
  // switch still forwards: the TSC calibration (10 ms) the PMD threads' start would do.
  calibrate_tsc_ns();
  const Json ans = {{"format", kHandoverFormat}, {"version", VIRTLINK_VERSION}, {"pid", getpid()}};
  std::string text;
  if (!send_fd_message(sock.get(), ans.dump(), nullptr, 0, 1000, err) ||
      !recv_long_text(sock.get(), kForwardTimeoutMs, kMaxStateBytes, &text, err)) {
    *err = "hand-over: " + *err;
    return false;
  }
  std::vector<UniqueFd> fds;
  for (;;) {
    if (!recv_fd_message(sock.get(), kForwardTimeoutMs, &msg, &fds, err)) return false;
    if (msg == "end") break;
    if (msg != "fds") {
      *err = "hand-over: unexpected message";
      return false;
    }
  }
  return parse_handover(text, &fds, err);
}

bool Switch::parse_handover(const std::string& text, std::vector<UniqueFd>* fds, std::string* err) {
  const Json j = Json::parse(text, nullptr, false);
  try {
    SavedState s;
    if (j.is_discarded() || !state_from_text(j.at("state").get<std::string>(), &s, err)) {
      *err = "hand-over: malformed state: " + *err;
      return false;
    }
    merge_state(s, true);
    for (const Json& p : j.at("ports")) {
      const std::string name = p.at("name").get<std::string>();
      if (handover_.count(name)) throw std::invalid_argument("port " + name + " handed twice");
      HandedPort& h = handover_[name];
      h.listen.reset(take_fd(p.value("listen", Json(-1)), fds));
      h.counters = counters_from_json(p.at("counters"));
      if (p.contains("backend")) {
        h.connected = true;
        snapshot_from_json(p.at("backend"), fds, &h.backend);
      }
    }
    for (const Json& e : j.at("fdb"))
      handed_fdb_.push_back({e.at(0).get<uint64_t>(), e.at(1).get<std::string>(), e.at(2).get<uint32_t>()});
    handed_control_.reset(take_fd(j.at("control"), fds));
    handed_metrics_.reset(take_fd(j.at("metrics"), fds));
  } catch (const std::exception& e) {
    *err = fmt::format("hand-over: malformed state: {}", e.what());
    return false;
  }
  spdlog::info("hand-over: {} port(s), {} MAC entries, {} fds taken", handover_.size(),
               handed_fdb_.size(), fds->size());
  return true;
}

Switch::HandedPort::~HandedPort() {
  if (connected) close_snapshot(backend);
}

bool Switch::start_handed_port(uint32_t i, bool* handled, std::string* err) {
  auto* v = dynamic_cast<port::VhostPort*>(ports_[i].get());
  auto it = handover_.find(ports_[i]->name());
  *handled = v && it != handover_.end();
  if (it != handover_.end()) base_.carried[i] = it->second.counters;
  if (!*handled) return true;
  HandedPort& h = it->second;
  const bool ok = v->adopt(std::move(h.listen), h.connected ? &h.backend : nullptr, err);
  h.connected = false;  // adopt took the fds (and closed them on failure)
  return ok;
}

void Switch::finish_takeover() {
  for (const HandedFdbEntry& e : handed_fdb_) {
    const auto i = port_index(e.port);
    const uint32_t now = tables_.now_s.load();
    if (i) fdb_.learn(tables_.vlans ? e.mac : e.mac & ((uint64_t{1} << 48) - 1), *i, now - std::min(now, e.age_s));
  }
  const Json done = {{"forwarding", true}, {"pid", getpid()}, {"ports", handover_.size()},
                     {"fdb", handed_fdb_.size()}};
  handover_.clear();
  handed_fdb_.clear();
  std::string err;
  if (!send_fd_message(handover_sock_.get(), done.dump(), nullptr, 0, 1000, &err))
    spdlog::warn("hand-over: the running switch did not take the confirmation: {}", err);
  handover_sock_.reset();
}

void Switch::handover_failed(const std::string& why) {
  if (!handover_sock_.valid()) return;
  std::string err;
  send_fd_message(handover_sock_.get(), Json{{"failed", why}}.dump(), nullptr, 0, 1000, &err);
  handover_sock_.reset();
}

}  // namespace vl::app
