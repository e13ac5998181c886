#include "app/links.h"

#include <fcntl.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "util/log.h"
#include "vhost/link_protocol.h"

namespace vl::app {

using vhost::LinkReq;

namespace {
/// The switch's drop reason for a reason B reports on a link (wire values, link_protocol.h).
constexpr port::Drop port_drop(vhost::LinkDrop d) {
  switch (d) {
    case vhost::LinkDrop::kNoRxBuffer: return port::Drop::kNoRxBuffer;
    case vhost::LinkDrop::kBadDescriptor: return port::Drop::kBadDescriptor;
    case vhost::LinkDrop::kBadHeader: return port::Drop::kBadHeader;
    case vhost::LinkDrop::kTooBig: return port::Drop::kTooBig;
    case vhost::LinkDrop::kRingBroken: return port::Drop::kRingBroken;
    case vhost::LinkDrop::kNoDestination: return port::Drop::kNoDestination;
    case vhost::LinkDrop::kShortRxBuffer: return port::Drop::kShortRxBuffer;
    case vhost::LinkDrop::kCount: break;
  }
  return port::Drop::kCount;
}
}  // namespace

const char* LinkManager::state_name(State s) {
  switch (s) {
    case State::kSwitched: return "switched";
    case State::kDirect: return "direct";
    case State::kQuarantined: return "quarantined";
  }
  return "?";
}

std::string LinkManager::name(uint32_t p) const {
  return p < ports_->size() && (*ports_)[p] ? (*ports_)[p]->name() : std::string();
}

std::vector<std::pair<std::string, std::string>> LinkManager::pairs() const {
  std::vector<std::pair<std::string, std::string>> v;
  for (const Link& l : links_)
    if (!l.forget) v.emplace_back(name(l.a), name(l.b));
  return v;
}

bool LinkManager::drop_port(uint32_t p, std::string* err) {
  for (auto it = links_.begin(); it != links_.end(); ++it) {
    if (it->a != p && it->b != p) continue;
    if (it->state == State::kDirect) revoke(*it, "a port of the link was deleted");
    if (it->state == State::kQuarantined) {
      *err = fmt::format("link {} {}: B has not yet let go of A's rings; retry in a second",
                         name(it->a), name(it->b));
      return false;
    }
    links_.erase(it);
    return true;
  }
  return true;
}

port::VhostPort* LinkManager::vhost(uint32_t p) const {
  return dynamic_cast<port::VhostPort*>((*ports_)[p].get());
}

LinkManager::Link* LinkManager::find(uint32_t port) {
  for (Link& l : links_)
    if (l.a == port || l.b == port) return &l;
  return nullptr;
}

control::Json LinkManager::describe(const Link& l) const {
  return {{"a", name(l.a)},
          {"b", name(l.b)},
          {"state", state_name(l.state)},
          {"why", l.state == State::kDirect ? "" : l.why},
          {"established", l.established},
          {"revoked", l.revoked}};
}

bool LinkManager::link(const std::string& a, const std::string& b, control::Json* out,
                       std::string* err) {
  int ia = -1, ib = -1;
  for (uint32_t i = 0; i < ports_->size(); ++i) {
    if (!(*ports_)[i]) continue;  // a vacant slot: its name() is "", which no port has
    if (name(i) == a) ia = static_cast<int>(i);
    if (name(i) == b) ib = static_cast<int>(i);
  }
  if (ia < 0 || ib < 0) {
    *err = fmt::format("no port named '{}'", ia < 0 ? a : b);
    return false;
  }
  if (ia == ib) {
    *err = "a port cannot be linked to itself";
    return false;
  }
  if (!vhost(static_cast<uint32_t>(ia)) || !vhost(static_cast<uint32_t>(ib))) {
    *err = fmt::format("port '{}' is not a vhost-user port: direct links join vhost-user ports",
                       vhost(static_cast<uint32_t>(ia)) ? b : a);
    return false;
  }
  for (const Link& l : links_) {
    if (l.a == static_cast<uint32_t>(ia) && l.b == static_cast<uint32_t>(ib)) {
      *out = describe(l);  // already recorded: report its state
      return true;
    }
    if (l.a == static_cast<uint32_t>(ia) || l.b == static_cast<uint32_t>(ia) ||
        l.a == static_cast<uint32_t>(ib) || l.b == static_cast<uint32_t>(ib)) {
      *err = fmt::format("port '{}' is already in the link {} {}",
                         (l.a == static_cast<uint32_t>(ia) || l.b == static_cast<uint32_t>(ia)) ? a : b,
                         name(l.a), name(l.b));
      return false;
    }
  }
  Link l;
  l.a = static_cast<uint32_t>(ia);
  l.b = static_cast<uint32_t>(ib);
  links_.push_back(std::move(l));
  establish(links_.back());
  *out = describe(links_.back());
  return true;
}

bool LinkManager::unlink(const std::string& a, const std::string& b, control::Json* out,
                         std::string* err) {
  for (auto it = links_.begin(); it != links_.end(); ++it) {
    if (name(it->a) != a || name(it->b) != b) continue;
    if (it->state == State::kDirect) revoke(*it, "unlinked by the operator");
    *out = describe(*it);
    if (it->state == State::kQuarantined) {
      it->forget = true;  // kept until B lets go of A's rings (on_tick)
      return true;
    }
    links_.erase(it);
    return true;
  }
  *err = fmt::format("no link {} {}", a, b);
  return false;
}

control::Json LinkManager::info() const {
  control::Json arr = control::Json::array();
  for (const Link& l : links_) arr.push_back(describe(l));
  return arr;
}

const char* LinkManager::role(uint32_t p) const {
  for (const Link& l : links_) {
    if (l.state == State::kSwitched) continue;
    if (l.a == p) return "rings served by a direct-link peer";
    if (l.b == p) return "serves a direct link";
  }
  return "";
}

void LinkManager::set_switched(Link& l, std::string why) {
  if (l.why != why) spdlog::info("link {} {}: switched: {}", name(l.a), name(l.b), why);
  l.state = State::kSwitched;
  l.why = std::move(why);
}

LinkManager::Call LinkManager::call(vhost::Channel& ch, LinkReq req, const void* payload,
                                    uint32_t size, const int* fds, uint32_t nfds,
                                    uint32_t reply_size, std::string* err) {
  if (!ch.send(static_cast<uint32_t>(req), vhost::kVersion | vhost::kFlagNeedReply, payload, size,
               fds, nfds)) {
    *err = "cannot send to the peer's link channel";
    return Call::kClosed;
  }
  const vhost::ReadStatus st = ch.read_wait(kReplyTimeoutMs, err);
  if (st == vhost::ReadStatus::kAgain) {
    *err = fmt::format("no reply from the peer within {} ms", kReplyTimeoutMs);
    return Call::kTimeout;
  }
  if (st != vhost::ReadStatus::kMessage) {
    if (st == vhost::ReadStatus::kClosed) *err = "the peer closed its link channel";
    return Call::kClosed;
  }
  vhost::Message& m = ch.message();
  if (m.hdr.request != static_cast<uint32_t>(req) || !(m.hdr.flags & vhost::kFlagReply) ||
      m.hdr.size != reply_size || m.nfds != 0) {
    *err = fmt::format("malformed reply to {:#x}", static_cast<uint32_t>(req));
    return Call::kClosed;  // the channel is out of step: treat as gone
  }
  uint64_t status;
  std::memcpy(&status, m.payload, 8);
  if (status != 0) {
    *err = "the peer refused";
    return Call::kRefused;
  }
  return Call::kOk;
}

std::string LinkManager::not_ready(const Link& l) {
  port::VhostPort& pb = *vhost(l.b);
  vhost::Backend& be = vhost(l.a)->backend_for_link();
  if (!be.connected()) return fmt::format("port {} is not connected", name(l.a));
  if (!be.memory() || !be.vring(vhost::kRxVring).ready || !be.vring(vhost::kTxVring).ready)
    return fmt::format("port {}'s rings are not ready", name(l.a));
  if (be.vring(vhost::kRxVring).packed || be.vring(vhost::kTxVring).packed)
    return fmt::format("port {} uses packed rings, which direct links do not serve yet", name(l.a));
  // Live migration: B's front-end would write A's guest memory without marking the dirty
  // log, so a port under migration stays switched (the pause that set LOG_ALL revoked any
  // link it had).
  if (virtio::has(be.features(), virtio::kFLogAll))
    return fmt::format("port {} is being migrated (dirty logging on)", name(l.a));
  for (uint32_t v = vhost::kNumVrings; v < be.num_vrings(); ++v) {
    if (be.vring(v).ready)  // a direct link serves queue pair 0 only
      return fmt::format("port {} uses several queue pairs, which direct links do not serve yet",
                         name(l.a));
  }
  if (!pb.backend().connected()) return fmt::format("port {} is not connected", name(l.b));
  if (pb.backend().link_channel_fd() < 0)
    return fmt::format("the front-end of port {} cannot take a direct link (a QEMU guest, DPDK, "
                       "or a vnf with --no-direct-link): {} stays switched",
                       name(l.b), name(l.a));
  return "";
}

LinkManager::Call LinkManager::send_memory(vhost::Channel& ch, vhost::Backend& be,
                                           std::string* err) {
  const virtio::GuestMemory& mem = *be.memory();
  struct {
    vhost::LinkMem h;
    vhost::MemRegion r[virtio::GuestMemory::kMaxRegions];
  } mt{};
  const uint32_t n = mem.region_count();
  mt.h.nregions = n;
  int fds[virtio::GuestMemory::kMaxRegions];
  for (uint32_t i = 0; i < n; ++i) {
    const virtio::MemRegionDesc& d = be.mem_region(i);
    mt.r[i] = vhost::MemRegion{d.guest_phys_addr, d.memory_size, d.userspace_addr, d.mmap_offset};
    fds[i] = be.mem_fd(i);
  }
  const auto size = static_cast<uint32_t>(sizeof mt.h + n * sizeof(vhost::MemRegion));
  return call(ch, LinkReq::kLinkMem, &mt, size, fds, n, 8, err);
}

LinkManager::Call LinkManager::send_vring(vhost::Channel& ch, const vhost::Vring& v, uint32_t i,
                                          std::string* err) {
  vhost::LinkVring lv{i, v.num, v.addr.desc_user_addr, v.addr.avail_user_addr,
                      v.addr.used_user_addr, v.q.last_avail(), 0};
  int vfds[2];
  uint32_t nv = 0;
  if (v.kick.valid()) {
    lv.flags |= vhost::kLinkVringKick;
    vfds[nv++] = v.kick.get();
  }
  if (v.call.valid()) {
    lv.flags |= vhost::kLinkVringCall;
    vfds[nv++] = v.call.get();
  }
  return call(ch, LinkReq::kLinkVring, &lv, sizeof lv, vfds, nv, 8, err);
}

void LinkManager::establish(Link& l) {
  if (std::string why = not_ready(l); !why.empty()) return set_switched(l, std::move(why));
  port::VhostPort& pa = *vhost(l.a);
  port::VhostPort& pb = *vhost(l.b);
  vhost::Backend& be = pa.backend_for_link();
  const int cfd = pb.backend().link_channel_fd();
  auto ch = std::make_unique<vhost::Channel>(UniqueFd(fcntl(cfd, F_DUPFD_CLOEXEC, 0)));
  std::string err;
  const uint64_t version = vhost::kLinkVersion;
  ++busy_;
  Call c = call(*ch, LinkReq::kLinkProbe, &version, 8, nullptr, 0, 8, &err);
  if (c != Call::kOk) {
    --busy_;
    return set_switched(l, fmt::format("the front-end of port {} did not accept the link: {}",
                                       name(l.b), err));
  }

  // From here on no PMD thread touches A's rings: A leaves the switched path.
  pa.pause_for_link();
  pa.set_linked_away(true);
  c = send_memory(*ch, be, &err);
  for (uint32_t i = 0; i < vhost::kNumVrings && c == Call::kOk; ++i)
    c = send_vring(*ch, be.vring(i), i, &err);
  if (c == Call::kOk) {
    const vhost::LinkStart st{be.features(), pa.max_frame(), 0};
    c = call(*ch, LinkReq::kLinkStart, &st, sizeof st, nullptr, 0, 8, &err);
  }
  l.chan = std::move(ch);
  if (c == Call::kOk) {
    pa.resume_for_link();  // publishes A as idle: its rings belong to B now
    --busy_;
    l.state = State::kDirect;
    l.why.clear();
    ++l.established;
    spdlog::info("link {} {}: direct (the front-end of {} serves {}'s rings)", name(l.a), name(l.b),
                 name(l.b), name(l.a));
    return;
  }
  // B may have started before it failed to answer: take the rings back the same way as an
  // unlink (or quarantine A when B does not answer).
  pa.resume_for_link();
  --busy_;
  l.state = State::kDirect;
  revoke(l, fmt::format("link set-up failed: {}", err));
}

void LinkManager::revoke(Link& l, const std::string& reason) {
  if (l.state != State::kDirect || !l.chan) return;
  ++busy_;
  std::string err;
  const uint64_t zero = 0;
  const Call c = call(*l.chan, LinkReq::kLinkStop, &zero, 8, nullptr, 0,
                      sizeof(vhost::LinkStopReply), &err);
  --busy_;
  if (c == Call::kTimeout) {
    // B may still be using A's rings: A stays out of the switched path until B answers or
    // its channel closes (on_tick).
    l.state = State::kQuarantined;
    l.why = fmt::format("{}; the peer {} did not acknowledge the revocation ({}): {} stays off "
                        "the switched path until it does or its process exits",
                        reason, name(l.b), err, name(l.a));
    spdlog::error("link {} {}: {}", name(l.a), name(l.b), l.why);
    return;
  }
  finish_revoke(l, c == Call::kOk || c == Call::kRefused ? &l.chan->message() : nullptr,
                c == Call::kOk || c == Call::kRefused ? reason : reason + " (" + err + ")");
}

void LinkManager::finish_revoke(Link& l, const vhost::Message* reply, const std::string& reason) {
  port::VhostPort& pa = *vhost(l.a);
  vhost::LinkStopReply r{};
  const bool have = reply && reply->hdr.size == sizeof r;
  if (have) {
    std::memcpy(&r, reply->payload, sizeof r);
    // What B counted on A's rings joins A's counters (rx: B took from A's transmit queue;
    // tx: B put into A's receive queue).
    port::CounterSnapshot& s = reported_[l.a];
    s.rx_packets += r.counters.rx_packets;
    s.rx_bytes += r.counters.rx_bytes;
    s.tx_packets += r.counters.tx_packets;
    s.tx_bytes += r.counters.tx_bytes;
    for (uint32_t d = 0; d < vhost::kLinkDrops; ++d) {
      const port::Drop to = port_drop(static_cast<vhost::LinkDrop>(d));
      s.drops[static_cast<uint32_t>(to)] += r.counters.drops[d];
    }
  }
  ++busy_;
  pa.pause_for_link();
  vhost::Backend& be = pa.backend_for_link();
  for (uint32_t i = 0; i < vhost::kNumVrings; ++i) {
    // The ring restarts at its used index (backend refresh): B returned every chain it took.
    const uint16_t base = have ? static_cast<uint16_t>(r.last_avail[i]) : be.vring(i).base;
    if (be.vring(i).ready || be.vring(i).attached()) be.restart_vring(i, base);
  }
  pa.set_linked_away(false);
  pa.resume_for_link();
  --busy_;
  l.chan.reset();
  ++l.revoked;
  l.state = State::kSwitched;
  l.why = reason;
  spdlog::info("link {} {}: revoked ({}); {} is switched again{}", name(l.a), name(l.b), reason,
               name(l.a), have ? fmt::format(" (the peer moved {} frames from and {} frames to it)",
                                             r.counters.rx_packets, r.counters.tx_packets)
                               : "");
}

void LinkManager::port_changing(uint32_t port) {
  if (busy_) return;
  for (Link& l : links_) {
    if (l.state == State::kDirect && (l.a == port || l.b == port))
      revoke(l, fmt::format("port {} changed or disconnected", name(port)));
  }
}

void LinkManager::on_tick() {
  std::erase_if(links_, [](const Link& l) { return l.forget && l.state == State::kSwitched; });
  for (Link& l : links_) {
    if (l.state == State::kSwitched) {
      if (!l.forget) establish(l);
    } else if (l.state == State::kQuarantined && l.chan) {
      std::string err;
      const vhost::ReadStatus st = l.chan->read(&err);
      if (st == vhost::ReadStatus::kAgain) continue;
      const vhost::Message* m = st == vhost::ReadStatus::kMessage ? &l.chan->message() : nullptr;
      finish_revoke(l, m, "the peer let go of the rings late");
    }
  }
}

void LinkManager::shutdown() {
  for (Link& l : links_) revoke(l, "the switch is stopping");
}

void LinkManager::add_counters(uint32_t p, port::CounterSnapshot& s) const {
  const port::CounterSnapshot& r = reported_[p];
  s.rx_packets += r.rx_packets;
  s.rx_bytes += r.rx_bytes;
  s.tx_packets += r.tx_packets;
  s.tx_bytes += r.tx_bytes;
  for (uint32_t d = 0; d < port::kNumDrops; ++d) s.drops[d] += r.drops[d];
}

}  // namespace vl::app
