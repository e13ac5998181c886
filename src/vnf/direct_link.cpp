#include "vnf/direct_link.h"

#include <fcntl.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "util/log.h"
#include "vhost/backend.h"
#include "virtio/virtio_defs.h"

namespace vl::vnf {

using namespace vl::virtio;
using vhost::LinkReq;
using vhost::LinkDrop;

namespace {
constexpr uint32_t idx(LinkDrop d) { return static_cast<uint32_t>(d); }
}  // namespace

DirectLink::DirectLink()
    : arena_(std::make_unique<SegmentArena>()), scratch_(std::make_unique<SegmentArena>()) {}

DirectLink::~DirectLink() { stop(); }

void DirectLink::service() {
  // A bounded number of requests per call: the forwarding loop comes first.
  for (int i = 0; i < 16 && chan_.open(); ++i) {
    std::string err;
    const vhost::ReadStatus st = chan_.read(&err);
    if (st == vhost::ReadStatus::kAgain) return;
    if (st != vhost::ReadStatus::kMessage) {
      if (st == vhost::ReadStatus::kError)
        spdlog::warn("direct link: channel failed ({}); link stopped", err);
      stop();
      chan_.close();
      return;
    }
    vhost::Message& m = chan_.message();
    if (!handle(m, &err)) {
      spdlog::warn("direct link: {}; channel closed", err);
      stop();
      chan_.close();
      return;
    }
    m.close_fds();
  }
}

bool DirectLink::reply_status(uint32_t req, uint64_t status) {
  return chan_.send(req, vhost::kVersion | vhost::kFlagReply, &status, 8);
}

bool DirectLink::handle(vhost::Message& m, std::string* err) {
  if ((m.hdr.flags & vhost::kVersionMask) != vhost::kVersion || (m.hdr.flags & vhost::kFlagReply)) {
    *err = fmt::format("bad header flags {:#x}", m.hdr.flags);
    return false;
  }
  const uint32_t req = m.hdr.request;
  bool ok = false;
  std::string why;
  switch (static_cast<LinkReq>(req)) {
    case LinkReq::kLinkProbe: {
      uint64_t v = 0;
      ok = m.nfds == 0 && m.get(&v) && v == vhost::kLinkVersion && !active_;
      if (!ok) why = active_ ? "already serving a link" : "unsupported probe";
      break;
    }
    case LinkReq::kLinkMem: ok = h_mem(m, &why); break;
    case LinkReq::kLinkVring: ok = h_vring(m, &why); break;
    case LinkReq::kLinkStart: ok = h_start(m, &why); break;
    case LinkReq::kLinkStop: {
      vhost::LinkStopReply r{};
      // Everything popped was returned and published in the pass that popped it.
      if (active_) {
        r.last_avail[0] = q_[0].last_avail();
        r.last_avail[1] = q_[1].last_avail();
      }
      r.counters = cur_;
      stop();
      spdlog::info("direct link: stopped by the switch (rx {} tx {})", r.counters.rx_packets,
                   r.counters.tx_packets);
      return chan_.send(req, vhost::kVersion | vhost::kFlagReply, &r, sizeof r);
    }
    default:
      *err = fmt::format("unknown request {:#x}", req);
      return false;
  }
  if (!ok) VL_LOG_RL(spdlog::level::warn, "direct link: request {:#x} refused: {}", req, why);
  if (!reply_status(req, ok ? 0 : 1)) {
    *err = "cannot send a reply";
    return false;
  }
  return true;
}

bool DirectLink::h_mem(vhost::Message& m, std::string* why) {
  if (active_) {
    *why = "memory change while serving";
    return false;
  }
  vhost::LinkMem h;
  if (m.hdr.size < sizeof h) {
    *why = "short payload";
    return false;
  }
  std::memcpy(&h, m.payload, sizeof h);
  const uint32_t n = h.nregions;
  if (n == 0 || n > GuestMemory::kMaxRegions || m.hdr.size != sizeof h + n * sizeof(vhost::MemRegion) ||
      m.nfds != n) {
    *why = fmt::format("{} regions, {} bytes, {} fds", n, m.hdr.size, m.nfds);
    return false;
  }
  MemRegionDesc regions[GuestMemory::kMaxRegions];
  int fds[GuestMemory::kMaxRegions];
  for (uint32_t i = 0; i < n; ++i) {
    vhost::MemRegion r;
    std::memcpy(&r, m.payload + sizeof h + i * sizeof r, sizeof r);
    regions[i] = MemRegionDesc{r.guest_phys_addr, r.memory_size, r.userspace_addr, r.mmap_offset};
    fds[i] = m.fds[i].get();
  }
  auto mem = std::make_unique<GuestMemory>();
  if (!mem->build(regions, fds, n, why)) return false;  // validated and mapped, or nothing
  mem_ = std::move(mem);
  return true;
}

bool DirectLink::h_vring(vhost::Message& m, std::string* why) {
  vhost::LinkVring v;
  if (active_ || !m.get(&v)) {
    *why = active_ ? "ring change while serving" : "payload size";
    return false;
  }
  const uint32_t want_fds = ((v.flags & vhost::kLinkVringKick) ? 1 : 0) +
                            ((v.flags & vhost::kLinkVringCall) ? 1 : 0);
  if (v.index > 1 || v.num == 0 || v.num > kMaxQueueSize || (v.num & (v.num - 1)) ||
      v.last_avail > 0xffff || (v.flags & ~3u) || m.nfds != want_fds) {
    *why = fmt::format("vring {} size {} base {} flags {:#x} with {} fds", v.index, v.num,
                       v.last_avail, v.flags, m.nfds);
    return false;
  }
  uint32_t k = 0;
  kick_[v.index].reset();
  call_[v.index].reset();
  if (v.flags & vhost::kLinkVringKick) kick_[v.index] = std::move(m.fds[k++]);
  if (v.flags & vhost::kLinkVringCall) call_[v.index] = std::move(m.fds[k++]);
  for (UniqueFd* f : {&kick_[v.index], &call_[v.index]}) {
    if (f->valid()) fcntl(f->get(), F_SETFL, fcntl(f->get(), F_GETFL) | O_NONBLOCK);
  }
  vr_[v.index] = v;
  vr_set_[v.index] = true;
  return true;
}

bool DirectLink::h_start(vhost::Message& m, std::string* why) {
  vhost::LinkStart s;
  if (active_ || !m.get(&s) || !mem_ || !vr_set_[0] || !vr_set_[1]) {
    *why = "start without memory and both vrings";
    return false;
  }
  // Offload bits may be negotiated by A; frames that use them are dropped in receive()
  // (offloads are not carried across a direct link) and none are set in frames for A.
  const uint64_t known = bit(kFVersion1) | bit(kNetFMrgRxbuf) | bit(kRingFEventIdx) |
                         bit(kRingFIndirectDesc) | bit(kNetFMtu) | bit(kFProtocolFeatures) | bit(kFInOrder) |
                         vhost::kOffloadFeatures;
  if (s.features & ~known) {
    *why = fmt::format("features {:#x} not supported on a link", s.features & ~known);
    return false;
  }
  for (uint32_t i = 0; i < 2; ++i) {
    const vhost::LinkVring& v = vr_[i];
    // The same checks as the switch's (vhost/backend.cpp refresh, hostile-inputs.md item 9).
    auto* desc = mem_->uva_to_host(v.desc_user_addr, desc_table_bytes(v.num));
    auto* avail = mem_->uva_to_host(v.avail_user_addr, avail_ring_bytes(v.num));
    auto* used = mem_->uva_to_host(v.used_user_addr, used_ring_bytes(v.num));
    const bool aligned = !(reinterpret_cast<uintptr_t>(desc) & 15) &&
                         !(reinterpret_cast<uintptr_t>(avail) & 1) &&
                         !(reinterpret_cast<uintptr_t>(used) & 3);
    if (!desc || !avail || !used || !aligned) {
      *why = fmt::format("vring {} addresses are not in A's memory", i);
      for (auto& q : q_) q.detach();
      return false;
    }
    q_[i] = SplitDeviceQueue{};
    q_[i].attach(mem_.get(), v.num, reinterpret_cast<VringDesc*>(desc),
                 reinterpret_cast<VringAvail*>(avail), reinterpret_cast<VringUsed*>(used),
                 static_cast<uint16_t>(v.last_avail), s.features);
    q_[i].set_call_fd(call_[i].get());
  }
  hdr_len_ = net_hdr_len(s.features);
  mrg_ = has(s.features, kNetFMrgRxbuf);
  max_frame_ = s.max_frame >= kEthHdrLen ? s.max_frame : kMaxFrameLen;
  q_[0].set_kicks(false);  // we never wait for A's receive buffers
  q_[1].set_kicks(false);  // polling; interrupt mode enables them before sleeping
  cur_ = {};
  active_ = true;
  ++links_;
  spdlog::info("direct link: serving the peer's rings (sizes {}/{}, {}-byte header{})",
               vr_[0].num, vr_[1].num, hdr_len_, mrg_ ? ", mergeable" : "");
  return true;
}

void DirectLink::stop() {
  for (auto& q : q_) q.detach();
  active_ = false;
  mem_.reset();  // munmap of A's memory
  for (uint32_t i = 0; i < 2; ++i) {
    kick_[i].reset();
    call_[i].reset();
    vr_set_[i] = false;
  }
}

uint32_t DirectLink::receive(BufferPool& pool, uint32_t hdr_len, uint32_t* bufs, uint32_t* lens,
                             uint32_t max) {
  SplitDeviceQueue& q = q_[1];
  if (!active_ || q.broken()) return 0;
  const int pending = q.pending();
  if (pending <= 0) {
    if (pending < 0) {
      count_drop(idx(LinkDrop::kRingBroken));
      VL_LOG_RL(spdlog::level::err, "direct link: the peer's transmit queue is broken (avail "
                                    "index ran more than a queue ahead); stopped");
    }
    return 0;
  }
  // Frames wait in A's ring (back-pressure) rather than being dropped for want of a buffer.
  const uint32_t n = std::min({static_cast<uint32_t>(pending), max, pool.available()});
  SegmentArena& arena = *arena_;
  arena.clear();
  uint32_t k = 0, taken = 0;
  uint64_t bytes = 0;
  const uint32_t room = pool.buf_size() - hdr_len;
  for (; taken < n && arena.has_room_for_chain(); ++taken) {
    Chain ch;
    switch (q.pop<false>(arena, &ch)) {
      case PopStatus::kOk: {
        TxFrame f;
        if (!split_tx_chain(arena, ch, hdr_len_, &f) || f.hdr.flags != 0 ||
            f.hdr.gso_type != kNetHdrGsoNone) [[unlikely]] {
          // Too short, or asks for checksum/segmentation offload: not carried on a link.
          count_drop(idx(LinkDrop::kBadHeader));
        } else if (f.len > room) [[unlikely]] {
          count_drop(idx(LinkDrop::kTooBig));
        } else {
          uint32_t b = 0;
          pool.get(&b);  // n <= available
          uint8_t* p = pool.data(b);
          std::memset(p, 0, hdr_len);
          gather_copy(p + hdr_len, &arena.segs[f.seg_begin], f.nsegs, 0, f.len);
          bufs[k] = b;
          lens[k] = hdr_len + f.len;
          ++k;
          bytes += f.len;
        }
        q.push_used(ch.head, 0);
        arena.used = ch.seg_begin;  // the frame is copied: its segments can be reused
        break;
      }
      case PopStatus::kBadChain: count_drop(idx(LinkDrop::kBadDescriptor)); break;
      case PopStatus::kTooBig: count_drop(idx(LinkDrop::kTooBig)); break;
      default: break;
    }
  }
  q.publish_used();
  cur_.rx_packets += taken;
  total_.rx_packets += taken;
  cur_.rx_bytes += bytes;
  total_.rx_bytes += bytes;
  return k;
}

bool DirectLink::deliver(const uint8_t* frame, uint32_t len) {
  SplitDeviceQueue& q = q_[0];
  if (!active_) return false;
  if (q.broken()) {
    count_drop(idx(LinkDrop::kRingBroken));
    return false;
  }
  if (len > max_frame_) [[unlikely]] {
    count_drop(idx(LinkDrop::kTooBig));
    return false;
  }
  const Segment seg{const_cast<uint8_t*>(frame), len};
  switch (deliver_frame(q, *scratch_, NetHdr{}, hdr_len_, &seg, 1, len, mrg_)) {
    case DeliverStatus::kOk:
      ++cur_.tx_packets;
      ++total_.tx_packets;
      cur_.tx_bytes += len;
      total_.tx_bytes += len;
      return true;
    case DeliverStatus::kNoBuffer: count_drop(idx(LinkDrop::kNoRxBuffer)); return false;
    case DeliverStatus::kTooBig: count_drop(idx(LinkDrop::kTooBig)); return false;
    case DeliverStatus::kShortBuffer: count_drop(idx(LinkDrop::kShortRxBuffer)); return false;
    case DeliverStatus::kBadRing:
      count_drop(idx(LinkDrop::kRingBroken));
      VL_LOG_RL(spdlog::level::err, "direct link: malformed receive chain on the peer; its "
                                    "receive queue stopped");
      return false;
  }
  return false;
}

}  // namespace vl::vnf
