#include "app/switch.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

#include "app/ctl_commands.h"
#include "app/json_views.h"
#include "app/metrics_text.h"
#include "app/state_db.h"
#include "control/command_table.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/service_notify.h"
#include "virtlink_version.h"
#include "wire/arp.h"

namespace vl::app {

namespace {
constexpr uint64_t kKeyTimer = 1ull << 40;
constexpr uint64_t kKeySignal = 2ull << 40;
constexpr uint64_t kKeyControl = 3ull << 40;
constexpr uint64_t kKeyMetrics = 4ull << 40;

}  // namespace

Switch::Switch(SwitchConfig cfg)
    : cfg_(std::move(cfg)),
      fdb_(cfg_.fdb_buckets, cfg_.mac_limit),
      mem_budget_(cfg_.max_total_guest_memory) {}

Switch::~Switch() { teardown(); }

SwitchView Switch::view() const {
  return {cfg_, tables_, fdb_, *pmds_, ports_, links_, base_, external_ids_, rates_};
}

void Switch::prepare() {
  if (pmds_) return;  // done
  add_ports();
  set_flush_policies();
}

bool Switch::setup(std::string* err) {
  // A successor (`ctl upgrade`) takes the predecessor's records instead of the state file's.
  if (cfg_.handover_fd >= 0 ? !receive_handover(err) : !restore_state(err)) return false;
  prepare();
  for (uint32_t i = 0; i < ports_.size(); ++i) {  // the state file's records, by name
    const auto r = restored_.find(ports_[i]->name());
    if (r == restored_.end()) continue;
    runtime_[i] = r->second.runtime;
    settings_[i] = r->second.settings;
    external_ids_[i] = r->second.external_ids;
  }
  restored_.clear();
  open_event_fds();
  const std::string ctl_path =
      cfg_.control_path.empty() ? control::default_control_path() : cfg_.control_path;
  const control::ControlServer::ListenOptions ctl_opts{
      cfg_.control_mode, cfg_.control_owner, cfg_.control_group, cfg_.control_path.empty()};
  if (handed_control_.valid() ? !ctl_.adopt(std::move(handed_control_), ctl_path, err)
                              : !ctl_.listen(ctl_path, ctl_opts, err))
    return false;
  epoll_add(ctl_.fd(), kKeyControl);
  if (!cfg_.metrics.empty()) {  // before the ports: a scrape waits for nothing of theirs
    if (!metrics_.start(cfg_.metrics, err, handed_metrics_.release())) return false;
    epoll_add(metrics_.wake_fd(), kKeyMetrics);
  }
  if (!add_ctl_commands(*this, &ctl_, err)) return false;
  if (!start_datapath(err)) return false;
  if (cfg_.handover_fd >= 0) finish_takeover();  // the predecessor exits now
  save_state();  // what the start made of the config and the state file
  const std::string summary = status_summary();
  spdlog::info("virtlink {} switch: {}", VIRTLINK_VERSION, summary);
  service::notify_ready(summary);  // systemd (Type=notify): the control socket listens
  return true;
}

std::string Switch::status_summary() const {
  const auto nports =
      std::count_if(ports_.begin(), ports_.end(), [](const auto& p) { return p != nullptr; });
  return fmt::format("{} port(s), forward {}, {} PMD thread(s) in {} mode, control {}", nports,
                     cfg_.forward == dp::ForwardMode::kBridge ? "bridge" : "xconnect",
                     pmds_->threads().size(), dp::pmd_mode_name(cfg_.pmd.mode), ctl_.path());
}

bool Switch::reload(control::Json* out, std::string* err) {
  // sd_notify(3): RELOADING=1 (with MONOTONIC_USEC) while the file is read and applied,
  // READY=1 when done. A refused file changes nothing: the switch is ready as it was.
  service::notify_reloading();
  const bool ok = apply_reload(out, err);
  service::notify_ready(ok ? status_summary()
                           : "reload refused (" + *err + "); " + status_summary());
  return ok;
}

std::unique_ptr<port::Port> Switch::make_port(uint32_t i, const port::PortConfig& pc) {
  if (pc.type == port::PortType::kVhostUser) {
    auto v = std::make_unique<port::VhostPort>(i, pc, pmds_.get(), &mem_budget_);
    v->set_link_hooks(&links_);
    return v;
  }
  return std::make_unique<port::UplinkPort>(i, pc, port::make_wire(pc), pmds_.get());
}

void Switch::add_ports() {
  tables_.mode = cfg_.forward;
  tables_.fdb = &fdb_;
  tables_.burst = cfg_.burst;
  tables_.now_s.store(static_cast<uint32_t>(mono_s()));
  pmds_ = std::make_unique<dp::PmdSet>(&tables_, cfg_.pmd_cores, cfg_.pmd);
  // xconnect pairs slots (2k, 2k+1): the ports in the order given, and a port added at run
  // time with the port in its partner slot. Every slot starts vacant.
  for (uint32_t i = 0; i < port::kMaxPorts; ++i) {
    tables_.ports[i].store(&vacant_);
    tables_.xc_peer[i] = i ^ 1;
  }
  for (uint32_t i = 0; i < cfg_.ports.size(); ++i) {
    const port::PortConfig& pc = cfg_.ports[i];
    ports_.push_back(make_port(i, pc));
    if (cfg_.forward == dp::ForwardMode::kXconnect) {
      // A cross-connected port's frames all come from its peer, whose rxqs roundrobin gives
      // to thread (peer id) mod T: that thread writes the port's receive queue, so the frames
      // need no handoff (dp/handoff.h).
      ports_[i]->set_rx_writer_rotation(i ^ 1);
    }
    tables_.ports[i].store(ports_.back().get());
    if (pc.mac_limit) fdb_.set_port_limit(i, pc.mac_limit);
  }
  tables_.nports = static_cast<uint32_t>(ports_.size());
  attach_tunnels();
  for (uint32_t i = 0; i < cfg_.ports.size(); ++i) {
    const port::PortConfig& pc = cfg_.ports[i];
    dp::PortVlan& v = tables_.vlan[i];
    v = dp::PortVlan::from(pc.vlan, pc.trunks, pc.native_vlan);
    if (v.mode != dp::PortVlan::Mode::kAll) tables_.vlans = true;
    set_source_guard(i, pc);
  }
  if (cfg_.vlans) tables_.vlans = true;
  fdb_.set_vlans(tables_.vlans);
  // rxqs are assigned to PMD threads as their queues become ready (PmdSet::reassign).
}

void Switch::set_source_guard(uint32_t i, const port::PortConfig& pc) {
  dp::SourceGuard& g = tables_.guard[i];
  g.n = static_cast<uint32_t>(std::min<size_t>(pc.port_security.size(), dp::kMaxAllowedMacs));
  std::copy_n(pc.port_security.begin(), g.n, g.macs);
  const uint64_t bit = uint64_t{1} << i;
  if (g.n) tables_.guarded.fetch_or(bit, std::memory_order_relaxed);
  else tables_.guarded.fetch_and(~bit, std::memory_order_relaxed);
}

void Switch::set_flush_policies() {
  std::string perr;
  tables_.set_flush(port::kMaxPorts, *dp::parse_flush_policy(cfg_.flush, &perr));  // validated
  for (uint32_t i = 0; i < cfg_.ports.size(); ++i) {
    auto it = cfg_.port_flush.find(cfg_.ports[i].name);
    if (it != cfg_.port_flush.end()) tables_.set_flush(i, *dp::parse_flush_policy(it->second, &perr));
  }
}

void Switch::open_event_fds() {
  epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  timer_.reset(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  itimerspec its{{1, 0}, {1, 0}};
  timerfd_settime(timer_.get(), 0, &its, nullptr);
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);  // reload (Switch::reload)
  sigaddset(&mask, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);  // before any thread starts: all inherit it
  sigdelset(&mask, SIGPIPE);
  signal_.reset(signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  epoll_add(timer_.get(), kKeyTimer);
  epoll_add(signal_.get(), kKeySignal);
}

void Switch::epoll_add(int fd, uint64_t key) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = key;
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
}

void Switch::attach_tunnels() {
  for (uint32_t i = 0; i < cfg_.ports.size(); ++i) {
    const port::PortConfig& pc = cfg_.ports[i];
    if (pc.type != port::PortType::kVxlan) continue;
    const auto u = port_index(pc.vxlan.uplink);  // (validated: an uplink of another type)
    auto* under = u ? dynamic_cast<port::UplinkPort*>(ports_[*u].get()) : nullptr;
    if (!under) continue;
    under->attach_tunnel(static_cast<port::UplinkPort*>(ports_[i].get()));
    tables_.underlays.fetch_or(uint64_t{1} << *u);
  }
}

bool Switch::start_datapath(std::string* err) {
  // Tunnels after the rest: each opens on its underlay's wire.
  for (const bool tunnels : {false, true}) {
    for (uint32_t i = 0; i < ports_.size(); ++i) {
      if ((ports_[i]->config().type == port::PortType::kVxlan) != tunnels) continue;
      bool handed = false;  // (a successor's port on its predecessor's sockets)
      if (!start_handed_port(i, &handed, err) || (!handed && !ports_[i]->start(err))) {
        if (err->rfind("port ", 0) != 0) *err = fmt::format("port {}: {}", ports_[i]->name(), *err);
        return false;
      }
      watch_port(i);
    }
  }
  if (!pmds_->start(err)) return false;
  for (const auto& [a, b] : cfg_.links) {
    control::Json r;
    if (!links_.link(a, b, &r, err)) return false;
  }
  return true;
}

void Switch::watch_port(uint32_t i) {
  const int fd = ports_[i] ? ports_[i]->watch_fd() : -1;
  if (fd == watched_fd_[i]) return;
  if (watched_fd_[i] >= 0) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, watched_fd_[i], nullptr);
  watched_fd_[i] = fd;
  if (fd < 0) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = i;
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
}

void Switch::on_tick() {
  const uint32_t now = static_cast<uint32_t>(mono_s());
  tables_.now_s.store(now, std::memory_order_relaxed);
  pmds_->watchdog();  // a PMD thread blocked on a front-end's fd is interrupted (dp/pmd.h)
  pmds_->place_rx_writers();  // receive-queue writers follow traffic (dp/pmd.h)
  for (uint32_t i = 0; i < ports_.size(); ++i) {
    if (!ports_[i]) continue;
    const bool was_connected = ports_[i]->connected();
    ports_[i]->on_tick();
    if (was_connected != ports_[i]->connected()) {
      if (was_connected) fdb_.flush_port(i);
      watch_port(i);
    }
  }
  links_.on_tick();
  sample_rates();
  ctl_.expire();  // control clients past their request budget
  // systemd's watchdog (WatchdogSec=): pinged from this loop only, so a control thread that
  // hangs stops the pings and systemd restarts the switch.
  service::notify_watchdog();
  static uint32_t last_age = 0;
  if (now - last_age >= 5) {
    last_age = now;
    fdb_.age(now, cfg_.mac_aging_s);
  }
}

int Switch::run() {
  std::string err;
  if (!setup(&err)) {
    spdlog::error("{}", err);
    handover_failed(err);  // a successor: the predecessor goes on
    teardown();
    return 1;
  }
  while (!stop_.load()) {
    epoll_event evs[32];
    // A control reply made in slices (control::ReplyStream) goes on at the next turn, after
    // whatever else is ready: no wait then.
    const int n = epoll_wait(epoll_.get(), evs, 32, ctl_.busy() ? 0 : 500);
    bool ctl_turn = false;
    for (int e = 0; e < n; ++e) {
      const uint64_t key = evs[e].data.u64;
      // Handed over: only the reply to `ctl upgrade` is left to send; the ports' sockets
      // and rings are the successor's.
      if (handover_done_ && key != kKeyControl) continue;
      if (key == kKeyTimer) {
        uint64_t x;
        if (read(timer_.get(), &x, sizeof x) > 0) on_tick();
      } else if (key == kKeySignal) {
        signalfd_siginfo si{};
        if (read(signal_.get(), &si, sizeof si) <= 0) {
        } else if (si.ssi_signo == SIGHUP) {
          control::Json r;
          std::string why;
          if (reload(&r, &why)) spdlog::info("SIGHUP: configuration read again: {}", r.dump());
          else spdlog::error("SIGHUP: {}", why);
        } else {
          spdlog::info("signal {}: shutting down", si.ssi_signo);
          stop_.store(true);
        }
      } else if (key == kKeyMetrics) {
        metrics_.serve([this] {
          const control::MetricsServer::Counters& c = metrics_.counters();
          const control::Json own = {{"scrapes", c.scrapes.load()}, {"stale", c.stale.load()},
                                     {"not_found", c.not_found.load()}, {"bad_method", c.bad_method.load()}};
          return metrics_text(stats(), pmd_stats(), show(), own);
        });
      } else if (key == kKeyControl) {
        ctl_.on_ready();
        ctl_turn = true;
      } else if (key < ports_.size() && ports_[key]) {  // (a port deleted in this turn: none)
        const uint32_t i = static_cast<uint32_t>(key);
        const bool was = ports_[i]->connected();
        ports_[i]->on_event();
        if (was && !ports_[i]->connected()) fdb_.flush_port(i);
        uint8_t mac[6];
        auto* v = dynamic_cast<port::VhostPort*>(ports_[i].get());
        if (v && v->take_rarp(mac)) announce(i, mac);
        watch_port(i);
      }
    }
    if (!ctl_turn && ctl_.busy()) ctl_.on_ready();
    if (handover_done_ && mono_ns() - handover_ns_ > 2000000000ull) stop_.store(true);
  }
  if (handover_done_) {
    // Nothing of ours is torn down: the sockets, memory and files are the successor's
    // (closing our copies of the fds would be harmless; removing socket files would not).
    spdlog::info("handed over: exiting");
    spdlog::default_logger()->flush();
    _exit(0);
  }
  service::notify_stopping();
  teardown();
  return 0;
}

void Switch::announce(uint32_t port, const uint8_t mac[6]) {
  // vhost-user.rst SEND_RARP: QEMU asks the back-end to announce a migrated guest (OVS and
  // DPDK broadcast a RARP from it). Here the bridge learns the MAC on the port at once;
  // multicast MACs are not learned, like on the datapath.
  const dp::Mac m = dp::mac_from_bytes(mac);
  // In the guest's VLAN: an access port's (a guest on a trunk or on a port of every VLAN is
  // learned in VLAN 0, its untagged frames').
  const dp::PortVlan& pv = tables_.vlan[port];
  const uint16_t vlan = pv.mode == dp::PortVlan::Mode::kAccess ? pv.tag
                        : pv.mode == dp::PortVlan::Mode::kTrunk ? pv.native : 0;
  const dp::Mac key = tables_.vlans ? dp::vlan_key(m, vlan) : m;
  const bool ok = dp::mac_is_learnable(m) && fdb_.learn(key, port, tables_.now_s.load());
  // The RARPs are bounded per port (app/announce_limiter.h): a front-end can send SEND_RARP
  // in a loop, each one a broadcast on every uplink. Learning is not (a frame's source is
  // learned as cheaply, and the MAC limit bounds it).
  const bool announce = ok && announce_limit_.allow(port, mono_ms());
  const uint32_t sent = announce ? send_rarp(port, mac, vlan) : 0;
  // Rate-limited: a front-end can send SEND_RARP in a loop (a log line per wake-up).
  VL_LOG_RL(spdlog::level::info, "port {}: SEND_RARP for {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}: {}",
            ports_[port]->name(), mac[0], mac[1], mac[2], mac[3], mac[4], mac[5],
            announce ? fmt::format("learned on this port, RARP sent on {} uplink(s) and tunnel(s)", sent)
            : ok     ? fmt::format("learned on this port, no RARP (more than {} a second from this port)",
                                   AnnounceLimiter::kPerSecond)
                     : std::string("not learned"));
}

uint32_t Switch::send_rarp(uint32_t from, const uint8_t mac[6], uint16_t vlan) {
  // Other hosts and switches learn the guest's new place from a RARP in its VLAN (QEMU's
  // announce frame), sent on every uplink and tunnel that carries the VLAN (guests on this
  // switch need none: it already learned the MAC).
  uint32_t sent = 0;
  for (uint32_t i = 0; i < ports_.size(); ++i) {
    auto* u = dynamic_cast<port::UplinkPort*>(ports_[i].get());
    if (i == from || !u || !u->connected() || !u->wire() || ((tables_.underlays.load() >> i) & 1)) continue;
    const dp::PortVlan& pv = tables_.vlan[i];
    if (tables_.vlans && !pv.carries(vlan)) continue;
    uint8_t f[wire::kArpFrameLen + 4];
    const uint32_t len = wire::write_rarp_announce(f, mac, tables_.vlans && !pv.untagged(vlan) ? vlan : 0);
    if (u->send_control(f, len)) ++sent;
  }
  return sent;
}

void Switch::teardown() {
  metrics_.stop();  // no scrape from here on (one waiting gets the last body)
  links_.shutdown();  // peers unmap; the rings return to the switch before it stops
  if (pmds_) pmds_->stop();  // no PMD thread runs from here on
  capture_.reset();  // its sessions end ("switch stopping"), its rings go
  for (auto& p : ports_)
    if (p) p->stop();  // rings stopped, memory unmapped, socket files removed
  ctl_.close();
}

control::Json Switch::stats() const {
  control::Json j = stats_json(view());
  // hostile-inputs.md item 22: guest memory over every port (--max-total-guest-memory).
  j["rarp"] = {{"announced", announce_limit_.allowed()}, {"rate_limited", announce_limit_.limited()}};
  j["guest_memory"] = {{"mapped_bytes", mem_budget_.used()},
                       {"limit_bytes", mem_budget_.limit()},
                       {"refused", mem_budget_.refused()}};
  // The control socket's own clients (docs/architecture.md, "Control socket").
  const control::ControlServer::Counters& c = ctl_.counters();
  j["control"] = {{"accepted", c.accepted},         {"answered", c.answered},
                  {"streamed", c.streamed},         {"dropped_slow", c.dropped_slow},
                  {"dropped_idle", c.dropped_idle}, {"dropped_excess", c.dropped_excess},
                  {"handed_over", c.handed_over}, {"abandoned", c.abandoned}};
  return j;
}

void Switch::set_flush(uint32_t port, dp::FlushPolicy p) {
  tables_.set_flush(port, p);
  if (port >= port::kMaxPorts) {
    flush_all_ = dp::flush_policy_name(p);
    for (auto& st : settings_) std::erase_if(st, [](const std::string& s) { return s.rfind("flush=", 0) == 0; });
  } else {
    put_setting(&settings_[port], "flush", dp::flush_policy_name(p));
  }
  save_state();
}

control::Json Switch::ports_info() const { return ports_json(view()); }

control::Json Switch::show() const {
  // (A prepared switch served by the caller's own server, prepare(): the configured path.)
  const std::string& cfg_path = cfg_.control_path;
  control::Json j = show_json(view(), !ctl_.path().empty() ? ctl_.path()
                                      : cfg_path.empty()   ? control::default_control_path()
                                                           : cfg_path);
  j["mirrors"] = mirrors();
  j["captures"] = capture_ ? capture_->stats() : control::Json{{"sessions", 0}, {"started", 0}, {"frames", 0}};
  return j;
}

void Switch::sample_rates() {
  std::vector<PortRates::Totals> t(ports_.size());
  for (uint32_t i = 0; i < ports_.size(); ++i) {
    const port::CounterSnapshot c = raw_port_counters(view(), i);  // (rates: never rebased)
    t[i] = {c.rx_packets, c.rx_bytes, c.tx_packets, c.tx_bytes};
  }
  rates_.sample(mono_ns(), t);
}

control::Json Switch::trace(uint32_t port, const std::vector<uint8_t>& bytes, uint32_t len) const {
  const dp::PmdThread* t = pmds_->owner_of(port);
  const auto n = static_cast<uint32_t>(bytes.size());
  return trace_json(view(), dp::trace_frame(tables_, port, bytes.data(), n, len, t ? t->index() : 0));
}

std::unique_ptr<control::ReplyStream> Switch::fdb(uint32_t port, size_t limit) const {
  return fdb_stream(view(), port, limit);
}

std::optional<uint32_t> Switch::port_index(const std::string& name) const {
  for (uint32_t i = 0; i < ports_.size(); ++i)
    if (ports_[i] && ports_[i]->name() == name) return i;
  return std::nullopt;
}

control::Json Switch::pmd_stats() const { return pmd_stats_json(view()); }

control::Json Switch::pmd_rxq_show() const { return pmd_rxq_json(view()); }

}  // namespace vl::app
