#include "vhost/backend.h"

#include <fcntl.h>

#include <algorithm>
#include <utility>
#include <sys/socket.h>

#include <fmt/format.h>

#include "util/log.h"
#include "vhost/message_table.h"
#include "virtio/virtio_defs.h"

namespace vl::vhost {

using namespace vl::virtio;

namespace {

bool fail(Backend::Reply& r, std::string why) {
  r.error = std::move(why);
  return false;
}

uint64_t get_u64(const Message& m) {
  uint64_t v;
  __builtin_memcpy(&v, m.payload, 8);
  return v;
}

}  // namespace

BackendOptions BackendOptions::defaults() {
  BackendOptions o;
  o.features = bit(kFVersion1) | bit(kNetFMrgRxbuf) | bit(kRingFEventIdx) |
               bit(kRingFIndirectDesc) | bit(kNetFMtu) | bit(kFProtocolFeatures) |
               kOffloadFeatures | bit(kFRingPacked) | bit(kFInOrder) | bit(kFLogAll) |
               bit(kNetFGuestAnnounce) | bit(kNetFMq);
  o.protocol_features = bit(kProtoMq) | bit(kProtoReplyAck) | bit(kProtoMtu) | bit(kProtoRarp) |
                        bit(kProtoVlDirectLink) | bit(kProtoLogShmfd);
  o.queue_pairs = kMaxQueuePairs;
  return o;
}

Backend::Backend(DeviceHost* host, BackendOptions opts) : host_(host), opts_(std::move(opts)) {
  if (opts_.queue_pairs < 1) opts_.queue_pairs = 1;
  if (opts_.queue_pairs > kMaxQueuePairs) opts_.queue_pairs = kMaxQueuePairs;
  if (opts_.queue_pairs == 1) opts_.features &= ~bit(kNetFMq);
}

void Backend::attach(UniqueFd sock) {
  chan_.reset(std::move(sock));
  // The control thread serves every port and `ctl`: a front-end that does not read its
  // replies gets its connection dropped as soon as its socket buffer is full, instead of
  // stalling the thread.
  chan_.set_send_timeout(0);
  messages_ = 0;
}

bool Backend::on_readable(std::string* why) {
  // Bound the work per wake-up so one chatty front-end cannot starve the others.
  for (int i = 0; i < 64; ++i) {
    ReadStatus st = chan_.read(why);
    switch (st) {
      case ReadStatus::kAgain: return true;
      case ReadStatus::kClosed: *why = "front-end closed the connection"; return false;
      case ReadStatus::kError: return false;
      case ReadStatus::kMessage: break;
    }
    ++messages_;
    if (!dispatch(chan_.message(), why)) return false;
    // The owner takes a SEND_RARP (take_rarp) when this returns: stop here, or a second one
    // in the same batch would overwrite it (the socket is polled level-triggered and the
    // channel buffers nothing past the message, so the rest is read on the next call).
    if (rarp_pending_) return true;
  }
  return true;
}

bool Backend::dispatch(Message& m, std::string* why) {
  const uint32_t req = m.hdr.request;
  const MessageSpec* spec = find_message(req);
  Reply r;
  bool ok;
  // Decided before the handler runs: RESET_OWNER clears the negotiated protocol features,
  // and its acknowledgement is still due.
  const bool reply_ack = has(proto_features_, kProtoReplyAck) && (m.hdr.flags & kFlagNeedReply);
  if ((m.hdr.flags & kVersionMask) != kVersion || (m.hdr.flags & kFlagReply)) {
    ok = fail(r, fmt::format("bad header flags {:#x}", m.hdr.flags));
  } else if (!spec) {
    ok = fail(r, "unsupported request");
  } else if (m.nfds > spec->max_fds) {
    ok = fail(r, fmt::format("{} fds, at most {} allowed", m.nfds, spec->max_fds));
  } else if (spec->size != kVarSize && m.hdr.size != spec->size) {
    ok = fail(r, fmt::format("payload of {} bytes, {} expected", m.hdr.size, spec->size));
  } else {
    ok = (this->*(spec->fn))(m, r);
  }
  m.close_fds();  // handlers take the fds they keep; the rest close here

  if (!ok) {
    VL_LOG_RL(spdlog::level::warn, "{}: {} ({}) refused: {}", opts_.log_name, req_name(req), req,
              r.error);
    if (!reply_ack || (spec && r.has_payload)) {
      *why = fmt::format("{} refused: {}", req_name(req), r.error);
      return false;
    }
    const uint64_t err = 1;
    return chan_.send(req, kVersion | kFlagReply, &err, 8);
  }
  spdlog::debug("{}: {} ok", opts_.log_name, req_name(req));
  if (r.has_payload) {
    const int rfd = r.fd.get();
    if (!chan_.send(req, kVersion | kFlagReply, r.payload, r.size, rfd >= 0 ? &rfd : nullptr,
                    rfd >= 0 ? 1 : 0)) {
      *why = "could not send a reply";
      return false;
    }
  } else if (reply_ack) {
    const uint64_t zero = 0;
    if (!chan_.send(req, kVersion | kFlagReply, &zero, 8)) {
      *why = "could not send a reply";
      return false;
    }
  }
  return true;
}

bool Backend::vring_index(uint64_t raw, uint32_t* out, Reply& r) const {
  if (raw >= num_vrings())
    return fail(r, fmt::format("vring index {:#x} out of range ({} queue pairs)", raw,
                               opts_.queue_pairs));
  *out = static_cast<uint32_t>(raw);
  return true;
}

bool Backend::h_get_features(Message&, Reply& r) {
  r.set_u64(opts_.features);
  return true;
}

bool Backend::h_set_features(Message& m, Reply& r) {
  const uint64_t f = get_u64(m);
  if (f & ~opts_.features) return fail(r, fmt::format("features {:#x} not offered", f & ~opts_.features));
  host_->pause_datapath();
  features_ = f;
  features_set_ = true;
  refresh();
  host_->resume_datapath();
  return true;
}

bool Backend::h_get_protocol_features(Message&, Reply& r) {
  r.set_u64(opts_.protocol_features);
  return true;
}

bool Backend::h_set_protocol_features(Message& m, Reply& r) {
  const uint64_t f = get_u64(m);
  if (f & ~opts_.protocol_features)
    return fail(r, fmt::format("protocol features {:#x} not offered", f & ~opts_.protocol_features));
  proto_features_ = f;
  return true;
}

bool Backend::h_set_owner(Message&, Reply&) { return true; }

bool Backend::h_reset_owner(Message&, Reply&) {
  host_->pause_datapath();
  reset_device();
  host_->resume_datapath();
  return true;
}

bool Backend::h_set_mem_table(Message& m, Reply& r) {
  if (m.hdr.size < sizeof(MemTableHeader)) return fail(r, "payload shorter than its header");
  MemTableHeader h;
  __builtin_memcpy(&h, m.payload, sizeof h);
  const uint32_t n = h.nregions;
  if (n == 0 || n > GuestMemory::kMaxRegions)
    return fail(r, fmt::format("{} regions (1 to {} supported)", n, GuestMemory::kMaxRegions));
  const uint32_t need = sizeof(MemTableHeader) + n * sizeof(MemRegion);
  const uint32_t full = sizeof(MemTableHeader) + GuestMemory::kMaxRegions * sizeof(MemRegion);
  if (m.hdr.size != need && m.hdr.size != full)
    return fail(r, fmt::format("payload of {} bytes for {} regions", m.hdr.size, n));
  if (m.nfds != n) return fail(r, fmt::format("{} fds for {} regions", m.nfds, n));
  MemRegionDesc regions[GuestMemory::kMaxRegions];
  int fds[GuestMemory::kMaxRegions];
  for (uint32_t i = 0; i < n; ++i) {
    MemRegion mr;
    __builtin_memcpy(&mr, m.payload + sizeof h + i * sizeof mr, sizeof mr);
    regions[i] = MemRegionDesc{mr.guest_phys_addr, mr.memory_size, mr.userspace_addr, mr.mmap_offset};
    fds[i] = m.fds[i].get();
  }
  auto mem = std::make_unique<GuestMemory>();
  std::string err;
  // hostile-inputs.md item 22: every connection's tables together stay within the
  // switch-wide cap, checked before anything is mapped; the table this one replaces counts
  // as given back (its share goes when it is unmapped below).
  MemoryBudget::Share share;
  if (MemoryBudget* budget = opts_.memory_budget) {
    uint64_t bytes = 0;
    if (!GuestMemory::table_bytes(regions, n, &bytes, &err)) return fail(r, err);
    if (bytes <= opts_.max_mapped_bytes && !budget->take(bytes, mem_share_, &share)) {
      ++mem_refused_;
      return fail(r, fmt::format("memory table of {} MiB refused: the switch maps {} MiB of "
                                 "the {} MiB allowed over every connection "
                                 "(--max-total-guest-memory), this one's {} MiB included",
                                 bytes >> 20, budget->used() >> 20, budget->limit() >> 20,
                                 mem_share_.bytes() >> 20));  // old table kept
    }
  }
  if (!mem->build(regions, fds, n, &err, opts_.max_mapped_bytes)) return fail(r, err);  // old table kept
  host_->pause_datapath();
  mem_ = std::move(mem);  // the old table is unmapped here, with no thread using it
  mem_share_ = std::move(share);  // and its share given back
  for (uint32_t i = 0; i < GuestMemory::kMaxRegions; ++i) {
    // Kept for direct links (docs/direct-link.md), which hand A's regions to B.
    mem_fds_[i] = i < n ? std::move(m.fds[i]) : UniqueFd();
    mem_regions_[i] = i < n ? regions[i] : MemRegionDesc{};
  }
  for (Vring& v : vrings_) v.park();  // (reads no guest memory: the positions it keeps are ours)
  refresh();
  host_->resume_datapath();
  VL_LOG_RL(spdlog::level::info, "{}: memory table with {} regions, {} MiB mapped", opts_.log_name,
            n, mem_->mapped_bytes() >> 20);
  return true;
}

bool Backend::h_set_vring_num(Message& m, Reply& r) {
  VringState s;
  m.get(&s);
  uint32_t i;
  if (!vring_index(s.index, &i, r)) return false;
  // virtio 1.2 §2.7: a split ring's size is a power of two; §2.8: a packed ring's need not be.
  const bool packed = has(features_, kFRingPacked);
  if (s.num == 0 || s.num > kMaxQueueSize || (!packed && (s.num & (s.num - 1))))
    return fail(r, fmt::format("queue size {} ({} up to {} needed)", s.num,
                               packed ? "a size" : "a power of two", kMaxQueueSize));
  host_->pause_datapath();
  Vring& v = vrings_[i];
  v.park();  // (in a ring of another size the kept position does not hold: start_base)
  v.num = s.num;
  refresh();
  host_->resume_datapath();
  return true;
}

bool Backend::h_set_vring_addr(Message& m, Reply& r) {
  VringAddr a;
  m.get(&a);
  uint32_t i;
  if (!vring_index(a.index, &i, r)) return false;
  if (a.flags & ~1u) return fail(r, fmt::format("unknown vring address flags {:#x}", a.flags));
  host_->pause_datapath();
  vrings_[i].park();  // QEMU sets the address again (VHOST_VRING_F_LOG) mid-traffic
  vrings_[i].addr = a;
  vrings_[i].addr_set = true;
  refresh();
  host_->resume_datapath();
  return true;
}

bool Backend::h_set_vring_base(Message& m, Reply& r) {
  VringState s;
  m.get(&s);
  uint32_t i;
  if (!vring_index(s.index, &i, r)) return false;
  // vhost-user.rst "Vring descriptor indices": split rings use 16 bits; packed rings bits
  // 0-14 (avail slot) and 15 (avail wrap counter), the used side in bits 16-31 (ignored:
  // nothing is in flight when a ring starts). The slot is checked against the size when the
  // ring starts (refresh), since SET_VRING_NUM may come later.
  if (!has(features_, kFRingPacked) && s.num > 0xffff)
    return fail(r, fmt::format("split ring base {:#x} over 16 bits", s.num));
  host_->pause_datapath();
  vrings_[i].detach();
  vrings_[i].set_base(s.num);
  refresh();
  host_->resume_datapath();
  return true;
}

bool Backend::h_get_vring_base(Message& m, Reply& r) {
  VringState s;
  m.get(&s);
  uint32_t i;
  if (!vring_index(s.index, &i, r)) return false;
  host_->pause_datapath();
  Vring& v = vrings_[i];
  // Paused: no frame of this port is held in a PMD thread's output queues (they are
  // delivered or returned at the quiescent point, dp/pmd.h), so every chain taken is used.
  v.park();
  v.started = false;  // vhost-user.rst GET_VRING_BASE: stops the ring
  v.kick.reset();
  refresh();
  host_->resume_datapath();
  r.set_state(VringState{i, v.base});
  return true;
}

bool Backend::h_set_vring_fd(Message& m, Reply& r) {
  const uint64_t v = get_u64(m);
  uint32_t i;
  if (v & ~(kVringIdxMask | kVringNoFd)) return fail(r, fmt::format("payload {:#x} has unknown bits", v));
  if (!vring_index(v & kVringIdxMask, &i, r)) return false;
  const bool nofd = (v & kVringNoFd) != 0;
  if (nofd ? m.nfds != 0 : m.nfds != 1)
    return fail(r, fmt::format("{} fds with the no-fd flag {}", m.nfds, nofd ? "set" : "clear"));
  UniqueFd fd = nofd ? UniqueFd() : std::move(m.fds[0]);
  if (fd.valid() && static_cast<Req>(m.hdr.request) == Req::kSetVringCall) {
    // The datapath writes the call fd: a front-end's blocking pipe or socket that nobody
    // reads must not stall a PMD thread shared with other ports.
    const int fl = fcntl(fd.get(), F_GETFL);
    if (fl < 0 || fcntl(fd.get(), F_SETFL, fl | O_NONBLOCK) != 0)
      return fail(r, "call fd cannot be made non-blocking");
  }
  Vring& vr = vrings_[i];
  host_->pause_datapath();
  switch (static_cast<Req>(m.hdr.request)) {
    case Req::kSetVringKick:
      vr.kick = std::move(fd);
      vr.started = true;  // vhost-user.rst: the ring starts on SET_VRING_KICK
      vr.park();
      break;
    case Req::kSetVringCall: vr.call = std::move(fd); break;
    default: vr.err = std::move(fd); break;
  }
  refresh();
  host_->resume_datapath();
  return true;
}

bool Backend::h_get_queue_num(Message&, Reply& r) {
  r.set_u64(opts_.queue_pairs);
  return true;
}

bool Backend::h_set_vring_enable(Message& m, Reply& r) {
  VringState s;
  m.get(&s);
  uint32_t i;
  if (!vring_index(s.index, &i, r)) return false;
  if (s.num > 1) return fail(r, fmt::format("enable value {}", s.num));
  host_->pause_datapath();
  vrings_[i].enabled = s.num == 1;
  refresh();
  host_->resume_datapath();
  return true;
}

bool Backend::h_send_rarp(Message& m, Reply&) {
  // vhost-user.rst SEND_RARP: u64 payload, the guest's MAC in its first 6 bytes.
  __builtin_memcpy(rarp_mac_, m.payload, 6);
  rarp_mac_set_ = true;
  rarp_pending_ = true;
  return true;
}

bool Backend::h_net_set_mtu(Message& m, Reply& r) {
  const uint64_t mtu = get_u64(m);
  if (mtu < 68 || mtu > 65535) return fail(r, fmt::format("MTU {} outside 68..65535", mtu));
  host_->pause_datapath();
  mtu_ = static_cast<uint32_t>(mtu);
  host_->resume_datapath();
  return true;
}

bool Backend::h_vl_link_channel(Message&, Reply& r) {
  if (!has(proto_features_, kProtoVlDirectLink)) return fail(r, "direct links not negotiated");
  if (link_chan_.valid()) return fail(r, "the link channel was already given");
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return fail(r, "socketpair failed");
  // Ours stays non-blocking: the control thread polls it with a timeout (app/links.cpp).
  fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
  link_chan_.reset(sv[0]);
  r.set_u64(0);
  r.fd.reset(sv[1]);  // B's end, sent with the reply
  return true;
}

bool Backend::h_set_log_base(Message& m, Reply& r) {
  // vhost-user.rst SET_LOG_BASE: u64 mmap_size, u64 mmap_offset, the log's fd; with
  // LOG_SHMFD the front-end waits for a reply (QEMU vhost_user_set_log_base reads one).
  if (!has(proto_features_, kProtoLogShmfd)) return fail(r, "LOG_SHMFD not negotiated");
  if (m.nfds != 1) return fail(r, fmt::format("{} fds, the log's one expected", m.nfds));
  uint64_t size, offset;
  __builtin_memcpy(&size, m.payload, 8);
  __builtin_memcpy(&offset, m.payload + 8, 8);
  if (mem_) {
    uint64_t end = 0;
    for (uint32_t k = 0; k < mem_->region_count(); ++k)
      end = std::max(end, mem_->region(k).gpa + mem_->region(k).size);
    if (size < DirtyLog::bytes_for(end))
      return fail(r, fmt::format("log of {} bytes, guest memory up to {:#x} needs {}", size, end,
                                 DirtyLog::bytes_for(end)));
  }
  auto log = std::make_unique<DirtyLog>(&log_stats_);
  std::string err;
  if (!log->map(m.fds[0].get(), size, offset, &err)) return fail(r, err);
  host_->pause_datapath();
  log_ = std::move(log);  // the old log is unmapped here, with no thread using it
  refresh();
  host_->resume_datapath();
  VL_LOG_RL(spdlog::level::info, "{}: dirty log of {} bytes", opts_.log_name, size);
  r.set_u64(0);
  return true;
}

void Backend::set_queue_log(uint32_t i) {
  Vring& v = vrings_[i];
  DirtyLog* log = logging() ? log_.get() : nullptr;
  uint64_t a = 0, b = 0;
  if (log && v.packed) {
    // Validated by attach_packed (uva_to_host), so both translate.
    mem_->uva_to_gpa(v.addr.desc_user_addr, &a);
    mem_->uva_to_gpa(v.addr.used_user_addr, &b);
  } else if (log) {
    // vhost-user.rst SET_VRING_ADDR: with VHOST_VRING_F_LOG, log_guest_addr is the used
    // ring's guest-physical address for logging; attach_split checked it is in guest memory.
    if (v.addr.flags & kVringFLog) a = v.addr.log_guest_addr;
    else mem_->uva_to_gpa(v.addr.used_user_addr, &a);
  }
  if (v.packed) v.pq.set_dirty_log(log, a, b);
  else v.q.set_dirty_log(log, a);
}

void Backend::restart_vring(uint32_t i, uint16_t base) {
  if (i >= num_vrings()) return;
  vrings_[i].detach();
  vrings_[i].set_base(base);
  refresh();
}

void Backend::refresh() {
  // vhost-user.rst "Ring states": without VHOST_USER_F_PROTOCOL_FEATURES rings start enabled;
  // with it, they stay disabled until SET_VRING_ENABLE.
  const bool enabled_by_default = !has(features_, kFProtocolFeatures);
  for (uint32_t i = 0; i < num_vrings(); ++i) {
    Vring& v = vrings_[i];
    v.ready = false;
    if (!mem_) v.why_not = "no memory table";
    else if (!v.num) v.why_not = "no queue size";
    else if (!v.addr_set) v.why_not = "no ring address";
    else if (!v.started) v.why_not = "not started";
    else if (!(v.enabled || enabled_by_default)) v.why_not = "disabled";
    else if (!features_set_) v.why_not = "features not set";
    else if (v.attached() && v.broken()) v.why_not = "ring broken";
    else v.ready = true;
    if (!v.ready) {
      // Disabled, or stopped for a moment: keep the position (hostile-inputs.md item 19).
      if (v.why_not != "ring broken") v.park();
      continue;
    }
    const bool packed = has(features_, kFRingPacked);
    if (v.attached() && v.packed != packed) v.park();  // SET_FEATURES changed the layout: start_base
    v.packed = packed;
    if (!v.attached() && !(packed ? attach_packed(i) : attach_split(i))) {
      v.ready = false;
      continue;
    }
    if (packed) v.pq.set_call_fd(v.call.get());
    else v.q.set_call_fd(v.call.get());
    set_queue_log(i);
    v.why_not.clear();
  }
}

bool Backend::attach_split(uint32_t i) {
  Vring& v = vrings_[i];
  const uint32_t num = v.num;
  if (num & (num - 1)) {
    // virtio 1.2 §2.7: SET_VRING_NUM took a packed ring's size, then SET_FEATURES dropped
    // RING_PACKED; a split ring of that size does not start.
    v.why_not = "split ring size not a power of two";
    VL_LOG_RL(spdlog::level::warn, "{}: vring {} size {} is not a power of two (split ring)",
              opts_.log_name, i, num);
    return false;
  }
  auto* desc = mem_->uva_to_host(v.addr.desc_user_addr, desc_table_bytes(num));
  auto* avail = mem_->uva_to_host(v.addr.avail_user_addr, avail_ring_bytes(num));
  auto* used = mem_->uva_to_host(v.addr.used_user_addr, used_ring_bytes(num));
  const bool aligned = !(reinterpret_cast<uintptr_t>(desc) & 15) &&
                       !(reinterpret_cast<uintptr_t>(avail) & 1) &&
                       !(reinterpret_cast<uintptr_t>(used) & 3);
  if ((v.addr.flags & kVringFLog) && !mem_->translate_whole(v.addr.log_guest_addr, used_ring_bytes(num))) {
    v.why_not = "log address of the used ring not in guest memory";
    VL_LOG_RL(spdlog::level::warn, "{}: vring {} log address {:#x} does not translate",
              opts_.log_name, i, v.addr.log_guest_addr);
    return false;
  }
  if (!desc || !avail || !used || !aligned) {
    // hostile-inputs.md item 9: the ring does not start.
    v.why_not = "ring address not in guest memory";
    VL_LOG_RL(spdlog::level::warn, "{}: vring {} addresses do not translate", opts_.log_name, i);
    return false;
  }
  auto* u = reinterpret_cast<VringUsed*>(used);
  const uint16_t used_idx = __atomic_load_n(&u->idx, __ATOMIC_ACQUIRE);
  uint16_t base = static_cast<uint16_t>(v.start_base(false, 0));
  if (base != used_idx) {
    // Nothing is in flight when a ring stops, so the used index is where we left off
    // (the same recovery DPDK's vhost library uses after a reconnect).
    VL_LOG_RL(spdlog::level::info, "{}: vring {} base {} != used index {}; resuming at {}",
              opts_.log_name, i, base, used_idx, used_idx);
    base = used_idx;
  }
  v.q.attach(mem_.get(), num, reinterpret_cast<VringDesc*>(desc),
             reinterpret_cast<VringAvail*>(avail), u, base, features_);
  return true;
}

bool Backend::attach_packed(uint32_t i) {
  // vhost-user.rst SET_VRING_ADDR for packed rings: the descriptor ring, the driver event
  // suppression area (in avail_user_addr) and the device's (in used_user_addr).
  Vring& v = vrings_[i];
  const uint32_t num = v.num;
  auto* ring = mem_->uva_to_host(v.addr.desc_user_addr, packed_ring_bytes(num));
  auto* drv = mem_->uva_to_host(v.addr.avail_user_addr, kPackedEventBytes);
  auto* dev = mem_->uva_to_host(v.addr.used_user_addr, kPackedEventBytes);
  const bool aligned = !(reinterpret_cast<uintptr_t>(ring) & 15) &&
                       !(reinterpret_cast<uintptr_t>(drv) & 3) &&
                       !(reinterpret_cast<uintptr_t>(dev) & 3);
  if (!ring || !drv || !dev || !aligned) {
    v.why_not = "ring address not in guest memory";
    VL_LOG_RL(spdlog::level::warn, "{}: packed vring {} addresses do not translate", opts_.log_name,
              i);
    return false;
  }
  // A ring that never had SET_VRING_BASE starts at slot 0 with both wrap counters at 1.
  const uint32_t base = v.start_base(true, kPackedInitialBase);
  if (!PackedDeviceQueue::packed_base_valid(base, num)) {
    v.why_not = "ring base outside the ring";
    VL_LOG_RL(spdlog::level::warn, "{}: packed vring {} base {:#x} outside a ring of {}",
              opts_.log_name, i, base, num);
    return false;
  }
  v.pq.attach(mem_.get(), num, reinterpret_cast<PackedDesc*>(ring),
              reinterpret_cast<PackedEvent*>(drv), reinterpret_cast<PackedEvent*>(dev), base,
              features_);
  return true;
}

void Backend::reset_device() {
  for (Vring& v : vrings_) {
    v.detach();
    v = Vring{};
    v.why_not = "not connected";
  }
  mem_.reset();
  mem_share_ = {};  // hostile-inputs.md item 22: the unmapped table's share given back
  for (auto& f : mem_fds_) f.reset();
  link_chan_.reset();
  features_ = 0;
  features_set_ = false;
  proto_features_ = 0;
  mtu_ = 0;
  rarp_mac_set_ = false;
  rarp_pending_ = false;
  log_.reset();
}

void Backend::disconnect() {
  host_->pause_datapath();
  reset_device();
  chan_.close();
  host_->resume_datapath();
}

}  // namespace vl::vhost
