#include "app/switch.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "util/clock.h"
#include "util/log.h"
#include "virtio/virtio_defs.h"
#include "virtlink_version.h"

namespace vl::app {

namespace {
constexpr uint64_t kKeyTimer = 1ull << 40;
constexpr uint64_t kKeySignal = 2ull << 40;
constexpr uint64_t kKeyControl = 3ull << 40;

std::string hex(uint64_t v) { return fmt::format("{:#x}", v); }

control::Json feature_names(uint64_t f) {
  control::Json names = control::Json::array();
  for (int b = 0; b < 64; ++b) {
    if (!(f & (uint64_t{1} << b))) continue;
    const char* n = virtio::feature_name(b);
    names.push_back(n ? std::string(n) : fmt::format("BIT_{}", b));
  }
  return names;
}
}  // namespace

Switch::Switch(SwitchConfig cfg) : cfg_(std::move(cfg)), fdb_(cfg_.fdb_buckets, cfg_.mac_limit) {}

Switch::~Switch() { teardown(); }

bool Switch::setup(std::string* err) {
  tables_.mode = cfg_.forward;
  tables_.fdb = &fdb_;
  tables_.burst = cfg_.burst;
  tables_.now_s.store(static_cast<uint32_t>(mono_s()));
  pmds_ = std::make_unique<dp::PmdSet>(&tables_, cfg_.pmd_cores, cfg_.pmd);
  for (uint32_t i = 0; i < cfg_.ports.size(); ++i) {
    ports_.push_back(std::make_unique<port::VhostPort>(i, cfg_.ports[i], pmds_.get()));
    ports_.back()->set_link_hooks(&links_);
    tables_.ports[i] = ports_.back().get();
    tables_.xc_peer[i] = dp::SwitchTables::kNoPeer;
  }
  tables_.nports = static_cast<uint32_t>(ports_.size());
  for (uint32_t i = 0; i + 1 < tables_.nports; i += 2) {
    tables_.xc_peer[i] = i + 1;
    tables_.xc_peer[i + 1] = i;
    if (cfg_.forward == dp::ForwardMode::kXconnect) {
      // A cross-connected port's frames all come from its peer, whose rxqs roundrobin gives
      // to thread (peer id) mod T: that thread writes the port's receive queue, so the frames
      // need no handoff (dp/handoff.h).
      ports_[i]->set_rx_writer_rotation(i + 1);
      ports_[i + 1]->set_rx_writer_rotation(i);
    }
  }
  // rxqs are assigned to PMD threads as their queues become ready (PmdSet::reassign).
  std::string perr;
  tables_.set_flush(port::kMaxPorts, *dp::parse_flush_policy(cfg_.flush, &perr));  // validated
  for (uint32_t i = 0; i < cfg_.ports.size(); ++i) {
    auto it = cfg_.port_flush.find(cfg_.ports[i].name);
    if (it != cfg_.port_flush.end()) tables_.set_flush(i, *dp::parse_flush_policy(it->second, &perr));
  }

  epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  timer_.reset(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  itimerspec its{{1, 0}, {1, 0}};
  timerfd_settime(timer_.get(), 0, &its, nullptr);
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);  // before any thread starts: all inherit it
  sigdelset(&mask, SIGPIPE);
  signal_.reset(signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  auto add = [&](int fd, uint64_t key) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = key;
    epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
  };
  add(timer_.get(), kKeyTimer);
  add(signal_.get(), kKeySignal);

  const std::string ctl_path = cfg_.control_path.empty() ? default_control_path() : cfg_.control_path;
  if (!ctl_.listen(ctl_path, err)) return false;
  add(ctl_.fd(), kKeyControl);
  ctl_.add("stats", [this](const control::Json&, control::Json* r, std::string*) {
    *r = stats();
    return true;
  });
  ctl_.add("ports", [this](const control::Json&, control::Json* r, std::string*) {
    *r = ports_info();
    return true;
  });
  ctl_.add("fdb", [this](const control::Json& a, control::Json* r, std::string* e) {
    return fdb_info(a, r, e);
  });
  ctl_.add("pmd-stats", [this](const control::Json&, control::Json* r, std::string*) {
    *r = pmd_stats();
    return true;
  });
  ctl_.add("pmd-rebalance", [this](const control::Json&, control::Json* r, std::string*) {
    pmds_->reassign(true);
    *r = pmd_rxq_show();
    return true;
  });
  ctl_.add("pmd-rxq-show", [this](const control::Json&, control::Json* r, std::string*) {
    *r = pmd_rxq_show();
    return true;
  });
  ctl_.add("set-flush", [this](const control::Json& a, control::Json* r, std::string* e) {
    return set_flush(a, r, e);
  });
  auto two_ports = [](const control::Json& args, std::string* a, std::string* b, std::string* err) {
    const auto it = args.find("argv");
    if (it == args.end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_string() ||
        !(*it)[1].is_string()) {
      *err = "expected two port names: A B (the front-end of B serves A's rings)";
      return false;
    }
    *a = (*it)[0].get<std::string>();
    *b = (*it)[1].get<std::string>();
    return true;
  };
  ctl_.add("link", [this, two_ports](const control::Json& args, control::Json* r, std::string* err) {
    std::string a, b;
    return two_ports(args, &a, &b, err) && links_.link(a, b, r, err);
  });
  ctl_.add("unlink", [this, two_ports](const control::Json& args, control::Json* r, std::string* err) {
    std::string a, b;
    return two_ports(args, &a, &b, err) && links_.unlink(a, b, r, err);
  });
  ctl_.add("links", [this](const control::Json&, control::Json* r, std::string*) {
    *r = links_.info();
    return true;
  });
  ctl_.add("version", [](const control::Json&, control::Json* r, std::string*) {
    *r = {{"version", VIRTLINK_VERSION}};
    return true;
  });

  watched_fd_.assign(ports_.size(), -1);
  for (uint32_t i = 0; i < ports_.size(); ++i) {
    if (!ports_[i]->start(err)) return false;
    watch_port(i);
  }
  if (!pmds_->start(err)) return false;
  for (const auto& [a, b] : cfg_.links) {
    control::Json r;
    if (!links_.link(a, b, &r, err)) return false;
  }
  spdlog::info("virtlink {} switch: {} port(s), forward {}, {} PMD thread(s) in {} mode, control {}",
               VIRTLINK_VERSION, ports_.size(),
               cfg_.forward == dp::ForwardMode::kBridge ? "bridge" : "xconnect",
               pmds_->threads().size(), dp::pmd_mode_name(cfg_.pmd.mode), ctl_path);
  return true;
}

void Switch::watch_port(uint32_t i) {
  const int fd = ports_[i]->watch_fd();
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
    const bool was_connected = ports_[i]->backend().connected();
    ports_[i]->on_tick();
    if (was_connected != ports_[i]->backend().connected()) {
      if (was_connected) fdb_.flush_port(i);
      watch_port(i);
    }
  }
  links_.on_tick();
  ctl_.expire();  // control clients past their request budget
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
    teardown();
    return 1;
  }
  while (!stop_.load()) {
    epoll_event evs[32];
    const int n = epoll_wait(epoll_.get(), evs, 32, 500);
    for (int e = 0; e < n; ++e) {
      const uint64_t key = evs[e].data.u64;
      if (key == kKeyTimer) {
        uint64_t x;
        if (read(timer_.get(), &x, sizeof x) > 0) on_tick();
      } else if (key == kKeySignal) {
        signalfd_siginfo si;
        if (read(signal_.get(), &si, sizeof si) > 0) {
          spdlog::info("signal {}: shutting down", si.ssi_signo);
          stop_.store(true);
        }
      } else if (key == kKeyControl) {
        ctl_.on_ready();
      } else if (key < ports_.size()) {
        const uint32_t i = static_cast<uint32_t>(key);
        const bool was = ports_[i]->backend().connected();
        ports_[i]->on_event();
        if (was && !ports_[i]->backend().connected()) fdb_.flush_port(i);
        uint8_t mac[6];
        if (ports_[i]->take_rarp(mac)) announce(i, mac);
        watch_port(i);
      }
    }
  }
  teardown();
  return 0;
}

void Switch::announce(uint32_t port, const uint8_t mac[6]) {
  // vhost-user.rst SEND_RARP: QEMU asks the back-end to announce a migrated guest (OVS and
  // DPDK broadcast a RARP from it). Here the bridge learns the MAC on the port at once;
  // multicast MACs are not learned, like on the datapath.
  const dp::Mac m = dp::mac_from_bytes(mac);
  const bool ok = !dp::mac_is_multicast(m) && fdb_.learn(m, port, tables_.now_s.load());
  // Rate-limited: a front-end can send SEND_RARP in a loop (a log line per wake-up).
  VL_LOG_RL(spdlog::level::info, "port {}: SEND_RARP for {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}: {}",
            ports_[port]->config().name, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5],
            ok ? "learned on this port" : "not learned");
}

void Switch::teardown() {
  links_.shutdown();  // peers unmap; the rings return to the switch before it stops
  if (pmds_) pmds_->stop();  // no PMD thread runs from here on
  for (auto& p : ports_) p->stop();  // rings stopped, memory unmapped, socket files removed
  ctl_.close();
}

port::CounterSnapshot Switch::sum_counters(uint32_t p) const {
  port::CounterSnapshot s;
  for (const auto& t : pmds_->threads()) t->forwarder().counters(p).accumulate(s);
  links_.add_counters(p, s);  // what direct-link peers moved on this port's rings
  return s;
}

control::Json Switch::stats() const {
  control::Json ports = control::Json::array();
  for (uint32_t i = 0; i < ports_.size(); ++i) {
    const port::VhostPort& p = *ports_[i];
    const port::CounterSnapshot c = sum_counters(i);
    control::Json drops = control::Json::object();
    for (uint32_t d = 0; d < port::kNumDrops; ++d)
      drops[port::drop_name(static_cast<port::Drop>(d))] = c.drops[d];
    control::Json soft = control::Json::object();
    for (uint32_t k = 0; k < port::kNumSoft; ++k)
      soft[port::soft_name(static_cast<port::Soft>(k))] = c.soft[k];
    const uint64_t f = p.backend().features();
    ports.push_back({{"name", p.config().name},
                     {"type", p.config().mode == port::SocketMode::kServer ? "vhost-user"
                                                                           : "vhost-user-client"},
                     {"path", p.config().path},
                     {"state", p.state()},
                     {"features", hex(f)},
                     {"feature_names", feature_names(f)},
                     {"rx_packets", c.rx_packets},
                     {"rx_bytes", c.rx_bytes},
                     {"tx_packets", c.tx_packets},
                     {"tx_bytes", c.tx_bytes},
                     {"tx_retries", c.tx_retries},
                     {"drops", drops},
                     {"flush", dp::flush_policy_name(tables_.flush_policy(i))},
                     {"offload", soft},
                     {"migration",
                      {{"logging", p.backend().logging()},
                       {"dirty_pages_logged",
                        p.backend().log_stats().pages_logged.load(std::memory_order_relaxed)},
                       {"dirty_log_out_of_range",
                        p.backend().log_stats().out_of_range.load(std::memory_order_relaxed)}}}});
    add_queue_age(i, &ports.back());
    add_queues(i, &ports.back());
  }
  return {{"ports", ports}};
}

void Switch::add_queues(uint32_t port, control::Json* out) const {
  const port::VhostPort& p = *ports_[port];
  const vhost::Backend& b = p.backend();
  const port::PortDp& d = p.dp();
  control::Json qs = control::Json::array();
  for (uint32_t q = 0; q < b.queue_pairs(); ++q) {
    const vhost::Vring& rx = b.vring(vhost::rx_vring(q));
    const vhost::Vring& tx = b.vring(vhost::tx_vring(q));
    uint64_t rxp = 0, rxb = 0, txp = 0, txb = 0, nobuf = 0, handed = 0;
    for (const auto& t : pmds_->threads()) {
      const port::QueueCounters& c = t->forwarder().queue_counters(port, q);
      handed += c.handoff_packets.load(std::memory_order_relaxed);
      rxp += c.rx_packets.load(std::memory_order_relaxed);
      rxb += c.rx_bytes.load(std::memory_order_relaxed);
      txp += c.tx_packets.load(std::memory_order_relaxed);
      txb += c.tx_bytes.load(std::memory_order_relaxed);
      nobuf += c.no_rx_buffer.load(std::memory_order_relaxed);
    }
    // Shown: pair 0, pairs the front-end set up, and pairs that ever carried traffic (the
    // counters live as long as the switch, like the port's).
    if (q > 0 && !rx.num && !tx.num && !rxp && !txp && !nobuf) continue;
    const port::QueueShared& rs = p.rx_shared(q);
    const port::QueueShared& ts = p.tx_shared(q);
    const dp::PmdThread* owner = pmds_->owner_of(port, q);
    // The PMD thread that writes this receive queue (port.h PortDp::rx_for), -1 if none.
    int writer = -1;
    bool handed_to = false;
    for (uint32_t t = 0; t < pmds_->threads().size() && t < port::kMaxPmdThreads; ++t) {
      const port::PortDp::RxTargets& r = d.rx_for[t];
      if (std::find(r.q, r.q + r.n, q) == r.q + r.n) continue;
      if (r.via == port::PortDp::kDirect) writer = static_cast<int>(t);
      else handed_to = true;
    }
    qs.push_back({{"queue", q},
                  {"enabled", rx.enabled || tx.enabled},
                  {"rx_enabled", rx.enabled},
                  {"tx_enabled", tx.enabled},
                  {"rx_ready", rx.ready},  // the guest's receive queue: we deliver into it
                  {"tx_ready", tx.ready},  // the guest's transmit queue: a PMD thread polls it
                  {"pmd", owner ? static_cast<int>(owner->index()) : -1},
                  {"rx_packets", rxp},
                  {"rx_bytes", rxb},
                  {"tx_packets", txp},
                  {"tx_bytes", txb},
                  {"no_rx_buffer", nobuf},
                  {"rx_writer_pmd", writer},
                  {"rx_handoff_target", handed_to},
                  {"handoff_packets", handed},
                  {"concurrent_entries", rs.concurrent.load(std::memory_order_relaxed) +
                                             ts.concurrent.load(std::memory_order_relaxed)},
                  {"last_rx_thread", static_cast<int>(rs.last_thread.load(std::memory_order_relaxed))},
                  {"last_tx_thread", static_cast<int>(ts.last_thread.load(std::memory_order_relaxed))}});
  }
  (*out)["queues"] = qs;
}

void Switch::add_queue_age(uint32_t port, control::Json* out) const {
  // Summed over PMD threads: each has its own intermediate queue for this port.
  uint64_t max_ns = 0;
  uint64_t hist[dp::QueueAgeStats::kBuckets] = {};
  for (const auto& t : pmds_->threads()) {
    const dp::QueueAgeStats& a = t->forwarder().queue_age(port);
    max_ns = std::max(max_ns, a.max_ns.load(std::memory_order_relaxed));
    for (uint32_t b = 0; b < dp::QueueAgeStats::kBuckets; ++b)
      hist[b] += a.hist[b].load(std::memory_order_relaxed);
  }
  control::Json h = control::Json::array();
  for (uint32_t b = 0; b < dp::QueueAgeStats::kBuckets; ++b) {
    if (!hist[b]) continue;
    const uint64_t edge = b + 1 < dp::QueueAgeStats::kBuckets ? dp::QueueAgeStats::upper_edge_ns(b)
                                                              : max_ns;
    h.push_back({edge, hist[b]});
  }
  (*out)["queue_age_max_ns"] = max_ns;
  (*out)["queue_age_histogram"] = h;
}

bool Switch::set_flush(const control::Json& args, control::Json* result, std::string* err) {
  const control::Json argv = args.value("argv", control::Json::array());
  if (!argv.is_array() || argv.size() != 2 || !argv[0].is_string() || !argv[1].is_string()) {
    *err = "usage: set-flush PORT|all POLICY (immediate, rx-batch, interval=US, budget=US)";
    return false;
  }
  const std::string who = argv[0], text = argv[1];
  auto p = dp::parse_flush_policy(text, err);
  if (!p) return false;
  uint32_t port = port::kMaxPorts;  // all
  if (who != "all") {
    for (uint32_t i = 0; i < ports_.size(); ++i)
      if (ports_[i]->config().name == who) port = i;
    if (port == port::kMaxPorts) {
      *err = fmt::format("no port named '{}'", who);
      return false;
    }
  }
  tables_.set_flush(port, *p);  // PMD threads pick it up at their next burst or check
  spdlog::info("flush policy of {} set to {}", who == "all" ? "every port" : "port " + who,
               dp::flush_policy_name(*p));
  *result = {{"port", who}, {"flush", dp::flush_policy_name(*p)}};
  return true;
}

control::Json Switch::ports_info() const {
  control::Json out = control::Json::array();
  for (uint32_t i = 0; i < ports_.size(); ++i) {
    const port::VhostPort& p = *ports_[i];
    const vhost::Backend& b = p.backend();
    control::Json vrings = control::Json::array();
    for (uint32_t v = 0; v < b.num_vrings(); ++v) {
      const vhost::Vring& r = b.vring(v);
      if (v >= vhost::kNumVrings && !r.num) continue;  // pairs beyond the first, unused
      vrings.push_back({{"index", v},
                        {"queue", v / 2},
                        {"enabled", r.enabled},
                        {"role", v % 2 == 0 ? "guest-rx" : "guest-tx"},
                        {"size", r.num},
                        {"layout", r.packed ? "packed" : "split"},
                        {"ready", r.ready},
                        {"why_not", r.ready ? "" : r.why_not},
                        {"kick", r.kick.valid() ? "eventfd" : (r.started ? "polling" : "none")},
                        {"call", r.call.valid()}});
    }
    out.push_back({{"name", p.config().name},
                   {"id", i},
                   {"type", p.config().mode == port::SocketMode::kServer ? "vhost-user"
                                                                         : "vhost-user-client"},
                   {"path", p.config().path},
                   {"state", p.state()},
                   {"connects", p.connects()},
                   {"messages", b.messages()},
                   {"mtu", b.mtu()},
                   {"mtu_config", p.config().mtu},
                   {"max_frame", p.dp().max_frame},
                   {"features", hex(b.features())},
                   {"protocol_features", hex(b.protocol_features())},
                   {"mapped_bytes", b.memory() ? b.memory()->mapped_bytes() : 0},
                   {"pmd", pmds_->owner_of(i) ? static_cast<int>(pmds_->owner_of(i)->index()) : -1},
                   {"queue_pairs", b.queue_pairs()},
                   {"direct_link", links_.role(i)},
                   {"vrings", vrings}});
  }
  return out;
}

bool Switch::fdb_info(const control::Json& args, control::Json* result, std::string* err) const {
  uint32_t port = ~0u;
  size_t limit = kFdbShown;
  const auto it = args.find("argv");
  if (it != args.end()) {
    if (!it->is_array() || it->size() > 2) {
      *err = "usage: fdb [PORT] [all]";
      return false;
    }
    for (const auto& a : *it) {
      if (!a.is_string()) {
        *err = "usage: fdb [PORT] [all]";
        return false;
      }
      const std::string w = a.get<std::string>();
      if (w == "all") {
        limit = SIZE_MAX;
        continue;
      }
      for (uint32_t i = 0; i < ports_.size(); ++i)
        if (ports_[i]->config().name == w) port = i;
      if (port == ~0u) {
        *err = fmt::format("no port named '{}'", w);
        return false;
      }
    }
  }
  control::Json out = control::Json::array();
  for (const auto& e : fdb_.entries(tables_.now_s.load(), port, limit)) {
    const uint64_t m = e.mac;
    out.push_back({{"mac", fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", (m >> 40) & 0xff,
                                       (m >> 32) & 0xff, (m >> 24) & 0xff, (m >> 16) & 0xff,
                                       (m >> 8) & 0xff, m & 0xff)},
                   {"port", e.port < ports_.size() ? ports_[e.port]->config().name : "?"},
                   {"age_s", e.age_s}});
  }
  *result = std::move(out);
  return true;
}

control::Json Switch::pmd_stats() const {
  control::Json out = control::Json::array();
  for (const auto& t : pmds_->threads()) {
    // The thread's total first, the rxq loads after it: on a live thread the loads can
    // only lead the total (by the frames taken in between), never trail it.
    const uint64_t packets = t->packets();
    const uint64_t busy = t->busy_cycles();
    control::Json names = control::Json::array();
    control::Json rxqs = control::Json::array();
    // Each rxq's counters are read once, so the shares add up to 1 while the thread runs.
    struct Sample {
      dp::RxqId q;
      uint64_t packets, cycles;
    };
    std::vector<Sample> samples;
    uint64_t total = 0;
    for (const dp::RxqId& q : t->rxqs()) {
      const dp::RxqLoad& l = pmds_->load(q.port, q.queue);
      samples.push_back({q, l.packets.load(std::memory_order_relaxed),
                         l.cycles.load(std::memory_order_relaxed)});
      total += samples.back().cycles;
    }
    for (const Sample& s : samples) {
      const std::string& name = ports_[s.q.port]->config().name;
      names.push_back(name);
      rxqs.push_back({{"port", name},
                      {"queue", s.q.queue},
                      {"packets", s.packets},
                      {"cycles", s.cycles},
                      {"cycles_share",
                       total ? static_cast<double>(s.cycles) / static_cast<double>(total) : 0.0}});
    }
    const uint64_t elapsed = t->elapsed_cycles();
    out.push_back({{"pmd", t->index()},
                   {"cpu", t->cpu()},
                   {"mode", dp::pmd_mode_name(cfg_.pmd.mode)},
                   {"rxq_assign", dp::rxq_assign_name(pmds_->assign_mode())},
                   {"passes", t->passes()},
                   {"busy_passes", t->busy_passes()},
                   {"sleeps", t->sleeps()},
                   {"packets", packets},
                   {"busy_cycles", busy},
                   {"elapsed_cycles", elapsed},
                   {"busy_pct", elapsed ? 100.0 * static_cast<double>(busy) /
                                              static_cast<double>(elapsed)
                                        : 0.0},
                   {"cycles_per_packet", packets ? static_cast<double>(busy) /
                                                        static_cast<double>(packets)
                                                      : 0.0},
                   {"rxqs", names},
                   {"rxq_loads", rxqs},
                   {"flush_check_gap_max_ns", t->forwarder().check_gap_max_ns()}});
  }
  return out;
}

control::Json Switch::pmd_rxq_show() const {
  control::Json out = control::Json::array();
  for (const auto& t : pmds_->threads()) {
    control::Json rxqs = control::Json::array();
    for (const dp::RxqId& q : t->rxqs())
      rxqs.push_back({{"port", ports_[q.port]->config().name}, {"queue", q.queue}});
    out.push_back({{"pmd", t->index()}, {"cpu", t->cpu()}, {"rxqs", rxqs}});
  }
  return {{"assign", dp::rxq_assign_name(pmds_->assign_mode())},
          {"reassignments", pmds_->reassignments()},
          {"pmds", out}};
}

}  // namespace vl::app
