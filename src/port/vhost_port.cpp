#include "port/vhost_port.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/unix_socket.h"
#include "virtio/virtio_defs.h"

namespace vl::port {

using namespace vl::virtio;

VhostPort::VhostPort(uint32_t id, PortConfig cfg, Quiescer* q, vhost::MemoryBudget* budget)
    : Port(id, cfg.name), cfg_(std::move(cfg)), quiescer_(q), backend_(this, [&] {
        auto o = vhost::BackendOptions::defaults();
        if (!cfg_.mrg_rxbuf) o.features &= ~bit(kNetFMrgRxbuf);
        if (!cfg_.offloads) o.features &= ~vhost::kOffloadFeatures;
        o.max_mapped_bytes = cfg_.max_guest_memory;
        o.memory_budget = budget;
        o.queue_pairs = cfg_.max_queues;
        o.log_name = "port " + cfg_.name;  // "port b: memory table with ..."
        return o;
      }()) {
  static_assert(kMaxQueuePairs == vhost::kMaxQueuePairs);
  for (int& f : kick_fd_) f = -1;
}

VhostPort::~VhostPort() { stop(); }

bool VhostPort::resolve_access(const std::string& owner, const std::string& group, uid_t* uid,
                               gid_t* gid, std::string* err) const {
  *uid = static_cast<uid_t>(-1);  // chown: -1 leaves it as it is
  *gid = static_cast<gid_t>(-1);
  uint32_t id;
  if (!owner.empty()) {
    if (!resolve_id(owner, false, &id)) {
      *err = fmt::format("port {}: unknown socket owner '{}'", cfg_.name, owner);
      return false;
    }
    *uid = id;
  }
  if (!group.empty()) {
    if (!resolve_id(group, true, &id)) {
      *err = fmt::format("port {}: unknown socket group '{}'", cfg_.name, group);
      return false;
    }
    *gid = id;
  }
  return true;
}

bool VhostPort::set_socket_access(uint32_t mode, const std::string& owner, const std::string& group,
                                  std::string* err) {
  uid_t uid;
  gid_t gid;
  if (!resolve_access(owner, group, &uid, &gid, err)) return false;
  // On the listening socket's file (a client port's socket is its peer's: recorded only).
  if (cfg_.mode == SocketMode::kServer && listen_.valid() && !file_.set_access(mode, uid, gid)) {
    *err = errno == ESTALE
               ? fmt::format("port {}: {} is no longer the socket file it made", cfg_.name, cfg_.path)
               : fmt::format("port {}: {}: {}", cfg_.name, cfg_.path, strerror(errno));
    return false;
  }
  cfg_.socket_mode = mode;
  cfg_.socket_owner = owner;
  cfg_.socket_group = group;
  return true;
}

bool VhostPort::start(std::string* err) {
  if (cfg_.mode == SocketMode::kClient) {
    try_connect();
    return true;
  }
  sockaddr_un a;
  if (!make_unix_addr(cfg_.path, &a, err)) return false;
  if (!clear_stale_socket(cfg_.path, a, "vhost-user socket", err)) return false;
  uid_t uid;
  gid_t gid;
  if (!resolve_access(cfg_.socket_owner, cfg_.socket_group, &uid, &gid, err)) {
    down_ = true;
    return false;
  }
  // The socket file is created with the umask's bits and then narrowed; nobody can connect
  // before listen(), so the moment between bind and chmod/chown exposes nothing.
  // The file is known by its inode from bind() on (util/unix_socket.h BoundSocketFile).
  UniqueFd s(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.valid() || bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      !file_.record(cfg_.path) || !file_.set_access(cfg_.socket_mode, uid, gid) ||
      listen(s.get(), 4) != 0) {
    *err = fmt::format("cannot listen on {}: {}", cfg_.path, strerror(errno));
    file_.remove();
    down_ = true;
    return false;
  }
  listen_ = std::move(s);
  spdlog::info("port {}: listening on {}", cfg_.name, cfg_.path);
  return true;
}

bool VhostPort::adopt(UniqueFd listen, vhost::BackendSnapshot* s, std::string* err) {
  if (cfg_.mode == SocketMode::kServer && listen.valid()) {
    if (!file_.record(cfg_.path)) {
      *err = fmt::format("port {}: {}: {}", cfg_.name, cfg_.path, strerror(errno));
      return false;
    }
    listen_ = std::move(listen);
  } else if (cfg_.mode == SocketMode::kServer && !start(err)) {
    return false;
  }
  if (!s) return cfg_.mode == SocketMode::kServer || start(err);
  if (!backend_.adopt(*s, err)) {
    *err = fmt::format("port {}: {}", cfg_.name, *err);
    return false;
  }
  ++connects_;
  return true;
}

void VhostPort::stop() {
  if (backend_.connected()) backend_.disconnect();
  if (listen_.valid()) {
    listen_.reset();
    file_.remove();  // only the file it made (a file put at the path since stays)
  }
}

int VhostPort::watch_fd() const {
  if (backend_.connected()) return backend_.fd();
  return listen_.get();
}

const char* VhostPort::state() const {
  if (backend_.connected()) return "connected";
  if (down_) return "down";
  return "waiting";
}

void VhostPort::connect_failed(int err, std::string text) {
  connect_error_.err = err;
  connect_error_.text = std::move(text);
  connect_error_.at_unix_s = static_cast<int64_t>(time(nullptr));
  connect_error_.at_mono_s = mono_s();
  ++connect_error_.failures;
}

bool VhostPort::try_connect() {
  sockaddr_un a;
  std::string err;
  if (!make_unix_addr(cfg_.path, &a, &err)) {
    connect_failed(ENAMETOOLONG, err);
    down_ = true;
    return false;
  }
  UniqueFd s(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) {
    connect_failed(errno, strerror(errno));
    return false;
  }
  if (connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int e = errno;
    connect_failed(e, strerror(e));
    if (!retry_logged_) {
      spdlog::info("port {}: {} not reachable ({}), retrying every second", cfg_.name, cfg_.path,
                   strerror(e));
      retry_logged_ = true;
    }
    return false;
  }
  fcntl(s.get(), F_SETFL, fcntl(s.get(), F_GETFL) | O_NONBLOCK);
  retry_logged_ = false;
  connect_error_.failures = 0;
  ++connects_;
  backend_.attach(std::move(s));
  VL_LOG_RL(spdlog::level::info, "port {}: connected to {}", cfg_.name, cfg_.path);
  return true;
}

bool VhostPort::on_tick() {
  const virtio::GuestMemory* mem = backend_.memory();
  if (backend_.connected() && ((mem && mem->faulted()) || backend_.log_faulted())) {
    // Guest memory or the dirty log (live migration): both are the front-end's files.
    spdlog::error("port {}: the front-end truncated its shared memory under the switch "
                  "(faulting pages were replaced by zero pages); closing the connection",
                  cfg_.name);
    drop_connection("guest memory truncated");
    return true;
  }
  bool blocked = false;
  for (uint32_t v = 0; v < backend_.num_vrings(); ++v) blocked |= backend_.vring(v).call_blocked();
  if (backend_.connected() && blocked) {
    // The front-end made its call fd block a PMD thread (every port on that thread stalled
    // until the watchdog interrupted it, dp/pmd.h). Only a hostile front-end can do that, and
    // it could do it again at once, so the port also refuses connections for a while.
    hold_until_s_ = mono_s() + kHoldDownS;
    spdlog::error("port {}: the front-end's call fd blocked the datapath; closing the connection "
                  "and refusing new ones for {} s", cfg_.name, kHoldDownS);
    drop_connection("call fd blocked the datapath");
    return true;
  }
  if (cfg_.mode == SocketMode::kClient && !backend_.connected() && !down_ &&
      mono_s() >= hold_until_s_)
    return try_connect();
  return false;
}

bool VhostPort::on_event() {
  if (backend_.connected()) {
    std::string why;
    if (!backend_.on_readable(&why)) {
      drop_connection(why);
      return true;
    }
    return false;
  }
  if (!listen_.valid()) return false;
  UniqueFd c(accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (!c.valid()) return false;
  if (mono_s() < hold_until_s_) {  // held down (on_tick): c is closed at once
    VL_LOG_RL(spdlog::level::warn, "port {}: connection refused while held down", cfg_.name);
    return false;
  }
  ++connects_;
  backend_.attach(std::move(c));
  // A front-end controls how often this happens (reconnect storms): rate-limited.
  VL_LOG_RL(spdlog::level::info, "port {}: front-end connected on {}", cfg_.name, cfg_.path);
  return true;
}

void VhostPort::drop_connection(const std::string& why) {
  VL_LOG_RL(spdlog::level::info, "port {}: connection closed: {}", cfg_.name, why);
  backend_.disconnect();
  // Server ports keep listening for the next front-end; client ports retry on the tick.
}

void VhostPort::pause_datapath() {
  // A change of this port's rings or memory: a direct link that uses them is revoked first
  // (the peer unmaps and hands the rings back), so no two devices ever serve one ring.
  if (pause_depth_ == 0 && !no_link_hook_ && link_hooks_) link_hooks_->port_changing(id_);
  if (pause_depth_++ > 0) return;
  active_.store(false, std::memory_order_seq_cst);
  quiescer_->wait_quiescent();
  for (uint32_t q = 0; q < kMaxQueuePairs; ++q) {
    if (kick_fd_[q] < 0) continue;
    quiescer_->set_kick_fd(id_, q, kick_fd_[q], -1);
    kick_fd_[q] = -1;
  }
}

uint32_t VhostPort::max_frame() const {
  uint32_t mtu = backend_.mtu();
  if (cfg_.mtu && (!mtu || cfg_.mtu < mtu)) mtu = cfg_.mtu;
  return mtu ? mtu + kEthHdrLen + 4 /* one VLAN tag */ : kMaxFrameLen;
}

void VhostPort::resume_datapath() {
  if (--pause_depth_ > 0) return;
  PortDp d;
  const bool on = !linked_away_;  // linked away: a direct-link peer serves the rings
  d.nqp = backend_.queue_pairs();
  bool any = false;
  for (uint32_t q = 0; q < d.nqp; ++q) {
    auto& rx = const_cast<vhost::Vring&>(backend_.vring(vhost::rx_vring(q)));
    auto& tx = const_cast<vhost::Vring&>(backend_.vring(vhost::tx_vring(q)));
    QueuePairDp& p = d.qp[q];
    p.rxq = !(on && rx.ready) ? virtio::RingRef{}
            : rx.packed      ? virtio::RingRef{&rx.pq}
                             : virtio::RingRef{&rx.q};
    p.txq = !(on && tx.ready) ? virtio::RingRef{}
            : tx.packed      ? virtio::RingRef{&tx.pq}
                             : virtio::RingRef{&tx.q};
    p.rx_shared = &shared_[2 * q];
    p.tx_shared = &shared_[2 * q + 1];
    p.kickless = p.has_txq() && !tx.kick.valid();
    // No kick is ever waited for on the guest's receive queue (a full one is retried by
    // polling, --tx-retry-us): its driver need not kick when it refills (a packed ring
    // starts with kicks enabled, a split one without EVENT_IDX too), as DPDK's vhost
    // library also asks of every queue it polls.
    if (p.has_rxq() && !rx.broken()) p.rxq.set_kicks(false);
    any |= p.has_rxq() || p.has_txq();
  }
  for (uint32_t q = d.nqp; q < kMaxQueuePairs; ++q) {
    d.qp[q].rx_shared = &shared_[2 * q];
    d.qp[q].tx_shared = &shared_[2 * q + 1];
  }
  quiescer_->assign_rx_writers(d, rx_rotation_);
  d.gen = ++dp_gen_;
  d.caps.hdr_len = net_hdr_len(backend_.features());
  d.caps.mrg_rxbuf = has(backend_.features(), kNetFMrgRxbuf);
  d.caps.features = backend_.features();
  d.caps.max_frame = max_frame();
  d.tx_retry_ns = uint64_t{cfg_.tx_retry_us} * 1000;
  d.completion_coalesce_ns = uint64_t{cfg_.completion_coalesce_us} * 1000;
  dp_ = d;
  for (uint32_t q = 0; q < d.nqp; ++q) {
    const vhost::Vring& tx = backend_.vring(vhost::tx_vring(q));
    kick_fd_[q] = d.qp[q].has_txq() ? tx.kick.get() : -1;
    if (kick_fd_[q] >= 0) quiescer_->set_kick_fd(id_, q, -1, kick_fd_[q]);
  }
  active_.store(any, std::memory_order_seq_cst);
  quiescer_->ports_changed();
}

}  // namespace vl::port
