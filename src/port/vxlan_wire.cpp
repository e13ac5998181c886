#include "port/vxlan_wire.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "offload/checksum.h"
#include "util/clock.h"
#include "util/flow_hash.h"
#include "util/log.h"
#include "virtio/virtio_defs.h"
#include "wire/arp.h"

namespace vl::port {

using wire::bump;
using wire::kHdrLen;
using wire::peek;

namespace {
uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
void put16(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t mac48(const uint8_t* m) {
  uint64_t v = 0;
  for (int i = 0; i < 6; ++i) v = v << 8 | m[i];
  return v;
}
/// The MAC table slot of a 48-bit MAC (multiplicative hashing, the top bits).
uint32_t mac_slot(uint64_t m) {
  return static_cast<uint32_t>((m * 0x9e3779b97f4a7c15ull) >> (64 - 12)) & (VxlanWire::kMacSlots - 1);
}
void mac_bytes(uint64_t v, uint8_t* m) {
  for (int i = 5; i >= 0; --i, v >>= 8) m[i] = static_cast<uint8_t>(v);
}
std::string ip_str(uint32_t ip) {
  uint8_t b[4];
  std::memcpy(b, &ip, 4);
  return fmt::format("{}.{}.{}.{}", b[0], b[1], b[2], b[3]);
}
constexpr uint8_t kBroadcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
constexpr uint8_t kVxlanFlagI = 0x08;  // RFC 7348 §5: a valid VNI
}  // namespace

/// One queue's decapsulated frames, from the underlay's receiving thread (producer) to the
/// tunnel's poller (consumer): a single-producer single-consumer ring of bytes holding
/// copies, each an entry of a 16-byte length word, the virtio-net header and the frame,
/// 64-byte aligned and never wrapping (a length of kWrap sends the reader to the start).
struct VxlanWire::RxRing {
  static constexpr uint32_t kWrap = 0xffffffff;
  alignas(64) std::atomic<uint32_t> head{0};  // bytes written, ever (mod 2^32)
  alignas(64) std::atomic<uint32_t> tail{0};  // bytes read, ever
  alignas(64) uint32_t batch_start = 0;       // producer: head when its batch began adding
  bool added = false;                         // producer: this batch added frames
  UniqueFd kick;                              // eventfd: the consumer's wake-up
  std::unique_ptr<uint8_t[]> mem;             // kRingBytes

  static uint32_t entry_bytes(uint32_t len) { return (16 + len + 63) & ~63u; }
};

VxlanWire::VxlanWire(std::string arg, VxlanSettings s, const std::string& port)
    : arg_(std::move(arg)), name_(port), s_(std::move(s)) {
  if (s_.has_mac) {
    std::memcpy(mac_, s_.mac, 6);
  } else {  // locally administered, unicast, stable for a port name and address (FNV-1a)
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&](const void* p, size_t n) {
      for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 0x100000001b3ull;
    };
    mix(port.data(), port.size());
    mix(&s_.local_ip, 4);
    mac_[0] = 0x02;
    mac_[1] = 0x76;  // 'v'
    for (int i = 0; i < 4; ++i) mac_[2 + i] = static_cast<uint8_t>(h >> (8 * i));
  }
  macs_ = std::make_unique<std::atomic<uint64_t>[]>(kMacSlots);
}

VxlanWire::~VxlanWire() { close(); }

bool VxlanWire::open(std::string* err) {
  if (!underlay_) {
    *err = fmt::format("port {}: its uplink '{}' is not open", name_, s_.uplink);
    return false;
  }
  const wire::WireInfo& u = underlay_->info();
  if (u.mtu < kEncapLen - 14 + 68) {
    *err = fmt::format("port {}: the uplink's MTU {} leaves no room for a frame", name_, u.mtu);
    return false;
  }
  nq_ = std::min<uint32_t>(u.queues, kMaxQueues);
  info_ = wire::WireInfo{};
  info_.queues = nq_;
  info_.mtu = u.mtu - kEncapLen;         // an untagged inner frame of mtu + 14 bytes fits
  info_.max_frame = u.mtu - (kEncapLen - 14);  // outer IPv4 length = inner frame + 36
  info_.headroom = kHeadroom;
  info_.rx_interrupts = true;
  if (!rx_) {  // made once, kept until destruction: the underlay's threads may write into it
    rx_ = std::make_unique<RxRing[]>(kMaxQueues);
    for (uint32_t q = 0; q < kMaxQueues; ++q) {
      rx_[q].kick.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
      if (q < nq_) rx_[q].mem = std::make_unique<uint8_t[]>(kRingBytes);
    }
  } else if (nq_ > 0 && !rx_[nq_ - 1].mem) {
    *err = fmt::format("port {}: the uplink has more queues than when the tunnel first opened", name_);
    return false;
  }
  info_.rx_offloads = true;  // a local sender's partial checksums and TSO trains, passed on
  // The control path carries ARP: without it no next hop is ever resolved. (A send may
  // still fail, the link being down: the gratuitous ARP is then sent again at a tick.)
  if (!underlay_->has_control_path()) {
    *err = fmt::format("port {}: the uplink {} ({}) has no path for ARP (a dpdk device needs a "
                       "spare transmit queue: one more queue in its devargs)",
                       name_, s_.uplink, underlay_->type());
    return false;
  }
  if (s_.has_gateway_mac) {
    for (uint32_t r = 0; r < s_.remotes.size(); ++r)
      next_hop_[r].store(mac48(s_.gateway_mac) | kResolved, std::memory_order_relaxed);
  }
  open_.store(true, std::memory_order_release);
  announce_pending_ = !announce();
  send_arp_requests(true);
  spdlog::info("port {}: VTEP {} ({:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}) VNI {} on {}, {} "
               "remote(s), inner MTU {}",
               name_, ip_str(s_.local_ip), mac_[0], mac_[1], mac_[2], mac_[3], mac_[4], mac_[5],
               s_.vni, s_.uplink, s_.remotes.size(), info_.mtu);
  return true;
}

void VxlanWire::close() { open_.store(false, std::memory_order_release); }

int VxlanWire::rx_fd(uint32_t q) const { return rx_ && q < nq_ ? rx_[q].kick.get() : -1; }

bool VxlanWire::link_up() const {
  return open_.load(std::memory_order_relaxed) && underlay_ && underlay_->link_up();
}

int VxlanWire::remote_index(uint32_t ip) const {
  for (uint32_t r = 0; r < s_.remotes.size(); ++r)
    if (s_.remotes[r] == ip) return static_cast<int>(r);
  return -1;
}

// ---- MAC -> remote ----

void VxlanWire::learn(const uint8_t* mac, int remote) {
  if (mac[0] & 1) return;  // a multicast source is no station
  const uint64_t m = mac48(mac);
  const uint64_t want = m << 8 | static_cast<uint64_t>(remote + 1);
  const uint32_t h = mac_slot(m);
  for (uint32_t i = 0; i < 4; ++i) {
    std::atomic<uint64_t>& e = macs_[(h + i) & (kMacSlots - 1)];
    const uint64_t v = e.load(std::memory_order_relaxed);
    if (v == want) return;
    if (v == 0 || v >> 8 == m) {  // free, or the MAC moved to another remote
      e.store(want, std::memory_order_relaxed);
      return;
    }
  }
  macs_[h].store(want, std::memory_order_relaxed);  // all four taken: the first goes
}

int VxlanWire::lookup(const uint8_t* mac) const {
  const uint64_t m = mac48(mac);
  const uint32_t h = mac_slot(m);
  for (uint32_t i = 0; i < 4; ++i) {
    const uint64_t v = macs_[(h + i) & (kMacSlots - 1)].load(std::memory_order_relaxed);
    if (v == 0) return -1;
    if (v >> 8 == m) {
      const int r = static_cast<int>(v & 0xff) - 1;
      return r < static_cast<int>(s_.remotes.size()) ? r : -1;
    }
  }
  return -1;
}

uint32_t VxlanWire::learned_macs() const {
  uint32_t n = 0;
  for (uint32_t i = 0; i < kMacSlots; ++i) n += macs_[i].load(std::memory_order_relaxed) != 0;
  return n;
}

// ---- Decapsulation (the underlay's receiving thread) ----

bool VxlanWire::demux(VxlanWire* const* t, uint32_t n, uint32_t q, const uint8_t* hdr,
                      const uint8_t* f, uint32_t len) {
  if (len < 14) return false;
  const uint16_t type = be16(f + 12);
  if (type == wire::kEtherArp) {
    // Every endpoint learns from it; the first of an address answers for it.
    bool mine = false;
    for (uint32_t i = 0; i < n; ++i) {
      bool first = true;
      for (uint32_t j = 0; j < i && first; ++j) first = t[j]->s_.local_ip != t[i]->s_.local_ip;
      mine |= t[i]->on_arp(q, f, len, first);
    }
    return mine;
  }
  if (type != wire::kEtherIpv4 || len < 14 + 20) return false;
  const uint8_t* ip = f + 14;
  const uint32_t dst = load32(ip + 16);
  VxlanWire* first = nullptr;  // the first endpoint of this address counts what is wrong
  for (uint32_t i = 0; i < n && !first; ++i)
    if (t[i]->s_.local_ip == dst) first = t[i];
  if (!first || ip[9] != 17) return false;  // not to us, or not UDP (ICMP: the host's)
  VxlanRxCounters& c = first->rxc_[q];
  if (!first->open_.load(std::memory_order_acquire)) {  // (stopping)
    bump(c.tunnel_down);
    return true;
  }
  const uint32_t ihl = (ip[0] & 0xf) * 4u;
  const uint32_t total = be16(ip + 2);
  // RFC 791: version 4, a header of 20..60 bytes inside the total length, inside the frame
  // (Ethernet padding may follow), and its checksum right.
  if ((ip[0] >> 4) != 4 || ihl < 20 || total < ihl + 8 || total > len - 14 ||
      offload::csum_fold(offload::csum_add(0, ip, ihl)) != 0xffff) {
    bump(c.bad_outer_ip);
    return true;
  }
  if (be16(ip + 6) & 0x3fff) {  // MF or a fragment offset
    bump(c.fragment);
    return true;
  }
  const uint8_t* udp = ip + ihl;
  const uint32_t udp_len = be16(udp + 4);
  if (be16(udp + 2) != first->s_.dst_port) {
    bump(c.not_vxlan);
    return true;
  }
  if (udp_len != total - ihl) {
    bump(c.bad_udp);
    return true;
  }
  const uint16_t flags = hdr ? hdr[0] : 0;
  // A TSO train of a local sender (gso_type set: a Linux vxlan device on the same host)
  // carries its inner checksum partial; one that does not is no train we can pass on.
  const bool train = hdr && hdr[1] != 0;
  if (train && (!(flags & virtio::kNetHdrFNeedsCsum) ||
                static_cast<uint32_t>(hdr[6] | hdr[7] << 8) < 14 + ihl + 16 + 14)) {
    bump(c.outer_gso);
    return true;
  }
  // A checksum of zero is none (RFC 768; RFC 7348 §5 sends zero); a partial one (the sender
  // is local and left it to the device) is not yet a checksum.
  if (be16(udp + 6) != 0 && !(flags & virtio::kNetHdrFNeedsCsum)) {
    const uint64_t s = offload::csum_add(offload::pseudo_sum_v4(ip + 12, 17, udp_len), udp, udp_len);
    if (offload::csum_fold(s) != 0xffff) {
      bump(c.bad_udp);
      return true;
    }
  }
  if (udp_len < 8 + 8 + 14 || !(udp[8] & kVxlanFlagI)) {  // (the VNI is read only after this)
    bump(c.bad_vxlan);
    return true;
  }
  const uint32_t vni = be16(udp + 12) << 8 | udp[14];
  for (uint32_t i = 0; i < n; ++i) {
    VxlanWire* w = t[i];
    if (w->s_.local_ip != dst || w->s_.vni != vni) continue;
    if (w->open_.load(std::memory_order_acquire)) return w->accept(q, hdr, ip, udp, udp_len, load32(ip + 12));
    bump(c.tunnel_down);
    return true;
  }
  bump(c.wrong_vni);
  return true;
}

bool VxlanWire::accept(uint32_t q, const uint8_t* hdr, const uint8_t* ip,
                       const uint8_t* udp, uint32_t udp_len, uint32_t src) {
  VxlanRxCounters& c = rxc_[q];
  const int r = remote_index(src);
  if (r < 0) {
    bump(c.unknown_vtep);
    return true;
  }
  const uint32_t inner_len = udp_len - 16;
  if (inner_len > (hdr && hdr[1] ? virtio::kMaxFrameLen : info_.max_frame)) {
    bump(c.inner_too_big);
    return true;
  }
  const uint8_t* inner = udp + 16;
  push_inner(q, r, hdr, inner, inner_len, static_cast<uint32_t>(inner - (ip - 14)));
  return true;
}

void VxlanWire::push_inner(uint32_t q, int remote, const uint8_t* hdr, const uint8_t* inner,
                           uint32_t len, uint32_t inner_off) {
  RxRing& R = rx_[q];
  const uint32_t need = RxRing::entry_bytes(kHdrLen + len);
  const uint32_t h = R.head.load(std::memory_order_relaxed);
  const uint32_t at = h & (kRingBytes - 1);
  const uint32_t to_end = kRingBytes - at;
  const uint32_t used = h - R.tail.load(std::memory_order_acquire);
  // An entry never wraps: what is left before the end is skipped when it does not fit
  // (the wrap marker needs the 4 bytes that any entry boundary has before the end).
  const uint32_t take = need <= to_end ? need : to_end + need;
  if (used + take > kRingBytes) {
    bump(rxc_[q].ring_full);
    return;
  }
  uint8_t* base = R.mem.get();
  uint32_t pos = at;
  if (need > to_end) {
    const uint32_t wrap = RxRing::kWrap;
    std::memcpy(base + at, &wrap, 4);
    pos = 0;
  }
  uint8_t* e = base + pos;
  const uint32_t dlen = kHdrLen + len;
  std::memcpy(e, &dlen, 4);
  uint8_t* nh = e + 16;
  std::memset(nh, 0, kHdrLen);
  // The header of a local sender's packet (a partial checksum, a TSO train) moves to the
  // inner frame: its offsets count from the inner frame's start. The tunnel port takes
  // such frames (WireInfo::rx_offloads) and the switch checks them like a guest's.
  if (hdr && (hdr[0] & virtio::kNetHdrFNeedsCsum)) {
    const uint32_t start = static_cast<uint32_t>(hdr[6] | hdr[7] << 8);
    if (start < inner_off + 14) {  // the outer UDP checksum: the inner frame is complete
      if (hdr[1] != 0) {           // (a train without an inner checksum: demux refuses it)
        bump(rxc_[q].outer_gso);
        return;
      }
    } else {
      std::memcpy(nh, hdr, 10);
      const uint32_t hl = static_cast<uint32_t>(hdr[2] | hdr[3] << 8);
      const uint32_t ns = start - inner_off;
      const uint32_t nhl = hl > inner_off ? hl - inner_off : 0;
      nh[2] = static_cast<uint8_t>(nhl);
      nh[3] = static_cast<uint8_t>(nhl >> 8);
      nh[6] = static_cast<uint8_t>(ns);
      nh[7] = static_cast<uint8_t>(ns >> 8);
    }
  }
  std::memcpy(nh + kHdrLen, inner, len);
  if (!R.added) {
    R.added = true;
    R.batch_start = h;
  }
  R.head.store(h + take, std::memory_order_release);
  learn(inner + 6, remote);
  bump(rxc_[q].decap);
}

void VxlanWire::rx_batch_done(uint32_t q) {
  RxRing& R = rx_[q];
  if (!R.added) return;
  R.added = false;
  // Dekker with recv(): either the consumer sees what this batch added before it stops,
  // or it had taken everything before the batch and may be asleep: wake it.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (R.tail.load(std::memory_order_relaxed) == R.batch_start) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(R.kick.get(), &one, sizeof one);
  }
}

uint32_t VxlanWire::recv(uint32_t q, wire::Buf* bufs, uint32_t n) {
  RxRing& R = rx_[q];
  uint32_t got = 0;
  uint32_t t = R.tail.load(std::memory_order_relaxed);
  const uint8_t* base = R.mem.get();
  for (;;) {
    const uint32_t h = R.head.load(std::memory_order_acquire);
    while (t != h && got < n) {
      uint32_t at = t & (kRingBytes - 1);
      uint32_t dlen;
      std::memcpy(&dlen, base + at, 4);
      if (dlen == RxRing::kWrap) {
        t += kRingBytes - at;
        at = 0;
        std::memcpy(&dlen, base, 4);
      }
      t += RxRing::entry_bytes(dlen);
      if (dlen > bufs[got].cap) continue;  // (cannot happen: the port's buffers fit a TSO frame)
      std::memcpy(bufs[got].p, base + at + 16, dlen);
      bufs[got++].len = dlen;
    }
    R.tail.store(t, std::memory_order_release);
    if (got == n) return got;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (R.head.load(std::memory_order_relaxed) == t) return got;
  }
}

bool VxlanWire::on_arp(uint32_t q, const uint8_t* f, uint32_t len, bool answer) {
  wire::ArpView a;
  if (!wire::parse_arp(f, len, &a)) return false;
  const int r = remote_index(a.spa);
  // Any ARP from a remote tells its MAC (request, reply, gratuitous), unless a gateway is
  // the next hop.
  if (r >= 0 && !s_.has_gateway_mac && !(a.sha[0] & 1) && mac48(a.sha) != 0) {
    const uint64_t v = mac48(a.sha) | kResolved;
    if (next_hop_[r].exchange(v, std::memory_order_relaxed) != v)
      VL_LOG_RL(spdlog::level::info, "port {}: remote VTEP {} is at {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                name_, ip_str(a.spa), a.sha[0], a.sha[1], a.sha[2], a.sha[3], a.sha[4], a.sha[5]);
  }
  if (a.tpa != s_.local_ip || a.spa == s_.local_ip) return false;
  if (!answer) return true;  // (another endpoint of this address answers and counts)
  if (a.op != wire::kArpRequest || !open_.load(std::memory_order_acquire)) {
    if (a.op != wire::kArpReply) bump(rxc_[q].arp_ignored);  // (a reply was used above)
    return true;
  }
  {
    // At most kArpRepliesPerSec a second: each is a system call on a PMD thread.
    const uint64_t now = mono_s();
    uint64_t w = arp_window_.load(std::memory_order_relaxed);
    uint64_t next = (w >> 32) == now ? w + 1 : now << 32 | 1;
    if ((next & 0xffffffff) > kArpRepliesPerSec) {
      bump(rxc_[q].arp_rate_limited);
      return true;
    }
    arp_window_.store(next, std::memory_order_relaxed);
    wire::ArpView rep;
    rep.op = wire::kArpReply;
    std::memcpy(rep.sha, mac_, 6);
    rep.spa = s_.local_ip;
    std::memcpy(rep.tha, a.sha, 6);
    rep.tpa = a.spa;
    uint8_t out[wire::kArpFrameLen];
    if (underlay_->send_control(out, wire::write_arp(out, a.sha, rep))) bump(rxc_[q].arp_replies);
  }
  return true;
}

// ---- Encapsulation (the writer of the tunnel's receive queue) ----

bool VxlanWire::write_outer(uint8_t* o, int remote, const uint8_t* inner, uint32_t len) {
  const uint64_t nh = next_hop_[remote].load(std::memory_order_relaxed);
  if (!nh) return false;
  mac_bytes(nh, o);
  std::memcpy(o + 6, mac_, 6);
  put16(o + 12, wire::kEtherIpv4);
  uint8_t* ip = o + 14;
  ip[0] = 0x45;
  ip[1] = 0;
  put16(ip + 2, len + 36);
  put16(ip + 4, 0);
  put16(ip + 6, 0x4000);  // don't fragment: the tunnel's MTU keeps it within the uplink's
  ip[8] = 64;
  ip[9] = 17;
  std::memcpy(ip + 12, &s_.local_ip, 4);
  std::memcpy(ip + 16, &s_.remotes[static_cast<size_t>(remote)], 4);
  offload::store_csum(ip + 10, offload::ipv4_header_csum(ip, 20));
  uint8_t* udp = ip + 20;
  // RFC 7348 §5: the source port from a hash of the inner frame, in 49152..65535.
  put16(udp, 0xc000 | (flow_hash_bytes(inner, std::min<uint32_t>(len, 64)) & 0x3fff));
  put16(udp + 2, s_.dst_port);
  put16(udp + 4, len + 16);
  put16(udp + 6, 0);  // no UDP checksum (RFC 7348 §5, IPv4)
  udp[8] = kVxlanFlagI;
  udp[9] = udp[10] = udp[11] = 0;
  udp[12] = static_cast<uint8_t>(s_.vni >> 16);
  udp[13] = static_cast<uint8_t>(s_.vni >> 8);
  udp[14] = static_cast<uint8_t>(s_.vni);
  udp[15] = 0;
  return true;
}

uint32_t VxlanWire::send(uint32_t q, const wire::Buf* bufs, uint32_t n) {
  VxlanTxCounters& c = txc_[q];
  constexpr uint32_t kMax = 64;
  wire::Buf out[kMax];
  uint32_t k = 0, sent = 0;
  auto flush = [&] {
    if (!k) return;
    const uint32_t took = underlay_->send(q, out, k);
    bump(c.encap, took);
    sent += took;
    if (took < k) bump(c.underlay_dropped, k - took);
    k = 0;
  };
  const int nremotes = static_cast<int>(s_.remotes.size());
  for (uint32_t i = 0; i < n; ++i) {
    const wire::Buf& b = bufs[i];
    const uint8_t* inner = b.p + kHdrLen;
    const uint32_t len = b.len - kHdrLen;
    // The outer headers go in front of the frame, the (zero) header in front of them.
    uint8_t* o = b.p + kHdrLen - kEncapLen;
    const wire::Buf e{o - kHdrLen, b.cap + kEncapLen, b.len + kEncapLen};
    const int r = (inner[0] & 1) ? -1 : lookup(inner);
    if (r >= 0) {
      if (!write_outer(o, r, inner, len)) {
        bump(c.no_neighbor);
        continue;
      }
      std::memset(e.p, 0, kHdrLen);
      out[k++] = e;
      if (k == kMax) flush();
      continue;
    }
    // Broadcast, multicast or unknown: a copy to every remote (the underlay copies what it
    // sends, so the headers are rewritten in place for each).
    flush();
    bump(c.flooded);
    std::memset(e.p, 0, kHdrLen);
    uint32_t any = 0;
    for (int rr = 0; rr < nremotes; ++rr) {
      if (!write_outer(o, rr, inner, len)) {
        bump(c.no_neighbor);
        continue;
      }
      const uint32_t took = underlay_->send(q, &e, 1);
      bump(c.encap, took);
      if (!took) bump(c.underlay_dropped);
      any |= took;
    }
    sent += any;
  }
  flush();
  return sent;
}

bool VxlanWire::send_control(const uint8_t* frame, uint32_t len) {
  if (!open_.load(std::memory_order_acquire) || len > info_.max_frame) return false;
  uint8_t buf[kEncapLen + 1600];
  if (len > sizeof buf - kEncapLen) return false;
  std::memcpy(buf + kEncapLen, frame, len);
  bool any = false;
  for (uint32_t r = 0; r < s_.remotes.size(); ++r)
    if (write_outer(buf, static_cast<int>(r), frame, len))
      any |= underlay_->send_control(buf, len + kEncapLen);
  return any;
}

void VxlanWire::send_arp_requests(bool all) {
  if (s_.has_gateway_mac) return;
  for (uint32_t r = 0; r < s_.remotes.size(); ++r) {
    if (!all && next_hop_[r].load(std::memory_order_relaxed)) continue;
    wire::ArpView a;
    a.op = wire::kArpRequest;
    std::memcpy(a.sha, mac_, 6);
    a.spa = s_.local_ip;
    a.tpa = s_.remotes[r];
    uint8_t out[wire::kArpFrameLen];
    if (underlay_->send_control(out, wire::write_arp(out, kBroadcast, a))) ++arp_requests_;
  }
}

bool VxlanWire::announce() {
  uint8_t f[wire::kArpFrameLen];
  wire::ArpView g;
  g.op = wire::kArpRequest;  // gratuitous: our address as sender and target
  std::memcpy(g.sha, mac_, 6);
  g.spa = g.tpa = s_.local_ip;
  return underlay_->send_control(f, wire::write_arp(f, kBroadcast, g));
}

void VxlanWire::on_tick() {
  if (!open_.load(std::memory_order_relaxed)) return;
  if (announce_pending_) announce_pending_ = !announce();
  send_arp_requests(false);
}

std::vector<VxlanWire::RemoteView> VxlanWire::remotes() const {
  std::vector<RemoteView> v;
  for (uint32_t r = 0; r < s_.remotes.size(); ++r) {
    RemoteView x;
    x.ip = s_.remotes[r];
    const uint64_t nh = next_hop_[r].load(std::memory_order_relaxed);
    x.resolved = nh != 0;
    mac_bytes(nh, x.next_hop);
    v.push_back(x);
  }
  return v;
}

void VxlanWire::counters(wire::DeviceCounters* out) const {
  VxlanRxCounters r{};
  VxlanTxCounters t{};
  for (uint32_t q = 0; q < kMaxQueues; ++q) {
    const VxlanRxCounters& a = rxc_[q];
    r.decap += peek(a.decap);
    r.bad_outer_ip += peek(a.bad_outer_ip);
    r.fragment += peek(a.fragment);
    r.bad_udp += peek(a.bad_udp);
    r.not_vxlan += peek(a.not_vxlan);
    r.bad_vxlan += peek(a.bad_vxlan);
    r.inner_too_big += peek(a.inner_too_big);
    r.wrong_vni += peek(a.wrong_vni);
    r.unknown_vtep += peek(a.unknown_vtep);
    r.outer_gso += peek(a.outer_gso);
    r.tunnel_down += peek(a.tunnel_down);
    r.ring_full += peek(a.ring_full);
    r.arp_replies += peek(a.arp_replies);
    r.arp_rate_limited += peek(a.arp_rate_limited);
    r.arp_ignored += peek(a.arp_ignored);
    const VxlanTxCounters& b = txc_[q];
    t.encap += peek(b.encap);
    t.flooded += peek(b.flooded);
    t.no_neighbor += peek(b.no_neighbor);
    t.underlay_dropped += peek(b.underlay_dropped);
  }
  out->emplace_back("decap_packets", r.decap);
  out->emplace_back("encap_packets", t.encap);
  out->emplace_back("flooded", t.flooded);
  out->emplace_back("bad_outer_ip", r.bad_outer_ip);
  out->emplace_back("fragment", r.fragment);
  out->emplace_back("bad_udp", r.bad_udp);
  out->emplace_back("not_vxlan", r.not_vxlan);
  out->emplace_back("bad_vxlan", r.bad_vxlan);
  out->emplace_back("inner_too_big", r.inner_too_big);
  out->emplace_back("wrong_vni", r.wrong_vni);
  out->emplace_back("unknown_vtep", r.unknown_vtep);
  out->emplace_back("outer_gso", r.outer_gso);
  out->emplace_back("tunnel_down", r.tunnel_down);
  out->emplace_back("rx_ring_full", r.ring_full);
  out->emplace_back("no_neighbor", t.no_neighbor);
  out->emplace_back("underlay_dropped", t.underlay_dropped);
  out->emplace_back("arp_replies", r.arp_replies);
  out->emplace_back("arp_rate_limited", r.arp_rate_limited);
  out->emplace_back("arp_ignored", r.arp_ignored);
  out->emplace_back("arp_requests", __atomic_load_n(&arp_requests_, __ATOMIC_RELAXED));
  out->emplace_back("learned_macs", learned_macs());
}

}  // namespace vl::port
