#include "vhost/frontend.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "util/clock.h"
#include "util/unix_socket.h"
#include "vhost/link_protocol.h"

namespace vl::vhost {

using namespace vl::virtio;

uint64_t FrontendOptions::default_features() {
  return bit(kFVersion1) | bit(kNetFMrgRxbuf) | bit(kRingFEventIdx) | bit(kFProtocolFeatures);
}

bool Frontend::connect(const FrontendOptions& o, std::string* err) {
  opts_ = o;
  sockaddr_un a;
  if (!make_unix_addr(o.path, &a, err)) return false;
  const uint64_t deadline = mono_ms() + static_cast<uint64_t>(o.timeout_ms);
  if (!o.server) {
    for (;;) {
      UniqueFd s(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        chan_.reset(std::move(s));
        return true;
      }
      if (mono_ms() >= deadline) {
        *err = fmt::format("cannot connect to {}: {}", o.path, strerror(errno));
        return false;
      }
      usleep(50000);
    }
  }
  // Never take over (and later remove) a socket a live back-end listens on, such as a
  // switch's own vhost-user server socket given here by mistake.
  if (!clear_stale_socket(o.path, a, "vhost-user socket", err)) return false;
  UniqueFd l(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (bind(l.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(l.get(), 1) != 0) {
    *err = fmt::format("cannot listen on {}: {}", o.path, strerror(errno));
    return false;
  }
  pollfd p{l.get(), POLLIN, 0};
  if (poll(&p, 1, o.timeout_ms) <= 0) {
    *err = fmt::format("no back-end connected to {} within {} ms", o.path, o.timeout_ms);
    unlink(o.path.c_str());
    return false;
  }
  UniqueFd c(accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC));
  unlink(o.path.c_str());
  if (!c.valid()) {
    *err = fmt::format("accept on {}: {}", o.path, strerror(errno));
    return false;
  }
  chan_.reset(std::move(c));
  return true;
}

bool Frontend::request(Req req, const void* payload, uint32_t size, const int* fds, uint32_t nfds,
                       uint64_t* reply, std::string* err) {
  const bool ack = !reply && (proto_ & bit(kProtoReplyAck));
  const uint32_t flags = kVersion | (ack ? kFlagNeedReply : 0);
  if (!chan_.send(static_cast<uint32_t>(req), flags, payload, size, fds, nfds)) {
    *err = fmt::format("{}: send failed", req_name(static_cast<uint32_t>(req)));
    return false;
  }
  if (!reply && !ack) return true;
  if (chan_.read_wait(opts_.timeout_ms, err) != ReadStatus::kMessage) {
    *err = fmt::format("{}: no reply ({})", req_name(static_cast<uint32_t>(req)), *err);
    return false;
  }
  const Message& m = chan_.message();
  uint64_t v = 0;
  if (m.hdr.request != static_cast<uint32_t>(req) || !(m.hdr.flags & kFlagReply) || !m.get(&v)) {
    *err = fmt::format("{}: malformed reply", req_name(static_cast<uint32_t>(req)));
    return false;
  }
  if (reply) {
    *reply = v;
  } else if (v != 0) {
    *err = fmt::format("{}: back-end refused (ack {})", req_name(static_cast<uint32_t>(req)), v);
    return false;
  }
  return true;
}

bool Frontend::request_state(Req req, VringState s, VringState* out, std::string* err) {
  if (!chan_.send(static_cast<uint32_t>(req), kVersion, &s, sizeof s)) {
    *err = "send failed";
    return false;
  }
  if (chan_.read_wait(opts_.timeout_ms, err) != ReadStatus::kMessage) return false;
  const Message& m = chan_.message();
  if (m.hdr.request != static_cast<uint32_t>(req) || !m.get(out)) {
    *err = fmt::format("{}: malformed reply", req_name(static_cast<uint32_t>(req)));
    return false;
  }
  return true;
}

bool Frontend::start(DriverMemory& mem, SplitDriverQueue& rxq, SplitDriverQueue& txq, std::string* err) {
  if (!start(mem, {VringSetup::of(rxq), VringSetup::of(txq)}, err)) return false;
  rxq.set_kick_fd(kick_fd(0));
  rxq.set_call_fd(call_fd(0));
  txq.set_kick_fd(kick_fd(1));
  txq.set_call_fd(call_fd(1));
  return true;
}

bool Frontend::start(DriverMemory& mem, const std::vector<VringSetup>& vrings, std::string* err) {
  const uint32_t nvrings = static_cast<uint32_t>(vrings.size());
  if (nvrings < 2 || nvrings % 2) {
    *err = fmt::format("{} vrings: queue pairs need an even number", nvrings);
    return false;
  }
  const uint32_t pairs = nvrings / 2;
  uint64_t offered = 0;
  if (!request(Req::kGetFeatures, nullptr, 0, nullptr, 0, &offered, err)) return false;
  proto_ = 0;
  backend_queue_num_ = 0;
  if (offered & bit(kFProtocolFeatures)) {
    uint64_t p = 0;
    if (!request(Req::kGetProtocolFeatures, nullptr, 0, nullptr, 0, &p, err)) return false;
    const uint64_t want = p & (bit(kProtoReplyAck) | bit(kProtoMq) |
                               (opts_.direct_link ? bit(kProtoVlDirectLink) : 0));
    if (!request(Req::kSetProtocolFeatures, &want, 8, nullptr, 0, nullptr, err)) return false;
    proto_ = want;
    if ((proto_ & bit(kProtoMq)) &&
        !request(Req::kGetQueueNum, nullptr, 0, nullptr, 0, &backend_queue_num_, err))
      return false;
  }
  features_ = offered & opts_.features;
  if (pairs == 1) {
    features_ &= ~bit(kNetFMq);  // one pair: nothing to steer
  } else {
    // virtio 1.2 §5.1.5: queue pairs beyond the first exist only with VIRTIO_NET_F_MQ.
    if (!(features_ & bit(kNetFMq)) || !(proto_ & bit(kProtoMq))) {
      *err = fmt::format("{} queue pairs asked for, but the back-end does not offer multiqueue "
                         "(VIRTIO_NET_F_MQ and the MQ protocol feature)", pairs);
      return false;
    }
    if (backend_queue_num_ < pairs) {
      *err = fmt::format("{} queue pairs asked for, the back-end supports {} (GET_QUEUE_NUM)",
                         pairs, backend_queue_num_);
      return false;
    }
  }
  if (!request(Req::kSetOwner, nullptr, 0, nullptr, 0, nullptr, err)) return false;
  if (!request(Req::kSetFeatures, &features_, 8, nullptr, 0, nullptr, err)) return false;

  struct {
    MemTableHeader h;
    MemRegion r;
  } table{{1, 0}, {}};
  const MemRegionDesc d = mem.region();
  table.r = MemRegion{d.guest_phys_addr, d.memory_size, d.userspace_addr, d.mmap_offset};
  const int mfd = mem.fd();
  if (!request(Req::kSetMemTable, &table, sizeof table, &mfd, 1, nullptr, err)) return false;

  kick_.clear();
  call_.clear();
  kick_.resize(nvrings);
  call_.resize(nvrings);
  for (uint32_t i = 0; i < nvrings; ++i) {
    const VringSetup& q = vrings[i];
    VringState num{i, q.num};
    VringState base{i, q.base};
    VringAddr addr{i, 0, q.desc_uva, q.used_uva, q.avail_uva, 0};
    kick_[i].reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    call_[i].reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!kick_[i].valid() || !call_[i].valid()) {
      *err = fmt::format("eventfd: {}", strerror(errno));
      return false;
    }
    const uint64_t idx = i;
    const int kfd = kick_[i].get(), cfd = call_[i].get();
    if (!request(Req::kSetVringNum, &num, sizeof num, nullptr, 0, nullptr, err) ||
        !request(Req::kSetVringBase, &base, sizeof base, nullptr, 0, nullptr, err) ||
        !request(Req::kSetVringAddr, &addr, sizeof addr, nullptr, 0, nullptr, err) ||
        !request(Req::kSetVringCall, &idx, 8, &cfd, 1, nullptr, err) ||
        !request(Req::kSetVringKick, &idx, 8, &kfd, 1, nullptr, err))
      return false;
  }
  if (features_ & bit(kFProtocolFeatures)) {
    for (uint32_t i = 0; i < nvrings; ++i) {
      VringState en{i, 1};
      if (!request(Req::kSetVringEnable, &en, sizeof en, nullptr, 0, nullptr, err)) return false;
    }
  }
  if (proto_ & bit(kProtoVlDirectLink)) return request_link_channel(err);
  return true;
}

bool Frontend::request_link_channel(std::string* err) {
  if (!chan_.send(kReqVlLinkChannel, kVersion, nullptr, 0)) {
    *err = "link channel request: send failed";
    return false;
  }
  chan_.accept_sockets(true);  // the reply carries a socket: our back-end's, trusted for this
  const ReadStatus st = chan_.read_wait(opts_.timeout_ms, err);
  chan_.accept_sockets(false);
  if (st != ReadStatus::kMessage) {
    *err = fmt::format("link channel request: no reply ({})", *err);
    return false;
  }
  Message& m = chan_.message();
  uint64_t v = 1;
  if (m.hdr.request != kReqVlLinkChannel || !(m.hdr.flags & kFlagReply) || !m.get(&v) || v != 0 ||
      m.nfds != 1) {
    *err = "link channel request: malformed reply";
    return false;
  }
  struct stat sb;
  if (fstat(m.fds[0].get(), &sb) != 0 || !S_ISSOCK(sb.st_mode)) {
    *err = "link channel request: the fd is not a socket";
    return false;
  }
  link_chan_ = std::move(m.fds[0]);
  m.nfds = 0;
  return true;
}

void Frontend::stop() {
  if (!chan_.open()) return;
  std::string err;
  for (uint32_t i = 0; i < kick_.size(); ++i) {
    VringState s{i, 0}, out;
    request_state(Req::kGetVringBase, s, &out, &err);
  }
  chan_.close();
}

}  // namespace vl::vhost
