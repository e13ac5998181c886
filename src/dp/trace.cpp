#include "dp/trace.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "dp/flow_hash.h"
#include "dp/l2_rules.h"

namespace vl::dp {

using port::Drop;

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool is_separator(char c) { return c == ':' || c == '-' || c == '.' || c == ' ' || c == '\t'; }

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

void parse_l4(const uint8_t* p, uint32_t n, FrameHeaders* h) {
  // TCP, UDP, SCTP, UDP-Lite: the ports are the first 4 bytes.
  if ((h->l4 == 6 || h->l4 == 17 || h->l4 == 132 || h->l4 == 136) && n >= 4) {
    h->ports = true;
    h->sport = be16(p);
    h->dport = be16(p + 2);
  }
}

void parse_l3(const uint8_t* p, uint32_t n, FrameHeaders* h) {
  if (h->ethertype == 0x0800 && n >= 20 && (p[0] >> 4) == 4) {
    const uint32_t ihl = (p[0] & 15u) * 4;
    if (ihl < 20 || n < ihl) return;
    h->ip = 4;
    std::memcpy(h->ip_src, p + 12, 4);
    std::memcpy(h->ip_dst, p + 16, 4);
    h->l4 = p[9];
    h->fragment = (be16(p + 6) & 0x1fff) != 0;
    if (!h->fragment) parse_l4(p + ihl, n - ihl, h);
  } else if (h->ethertype == 0x86dd && n >= 40 && (p[0] >> 4) == 6) {
    h->ip = 6;
    std::memcpy(h->ip_src, p + 8, 16);
    std::memcpy(h->ip_dst, p + 24, 16);
    h->l4 = p[6];  // (extension headers are not walked)
    parse_l4(p + 40, n - 40, h);
  }
}

/// What delivery does with the frame at output `o` (Forwarder::send_slots, hand_off,
/// deliver_to, deliver_queue, in their order).
TraceOut output(const SwitchTables& t, const TraceResult& r, uint32_t o, const uint8_t* p,
                uint32_t thread) {
  TraceOut x;
  x.port = o;
  x.flush = t.flush_policy(o);
  x.len = r.h.len;
  const port::Port* op = t.port(o);
  const port::PortDp& d = op->dp();
  x.max_frame = d.caps.max_frame;
  x.mrg_rxbuf = d.caps.mrg_rxbuf;
  if (t.vlans) {  // Forwarder::vlan_view: the frame as it leaves o
    const bool out_tagged = !t.vlan[o].untagged(static_cast<uint16_t>(r.vlan));
    if (out_tagged != r.h.tagged) {
      x.tag_edit = out_tagged ? 1 : -1;
      x.len = out_tagged ? x.len + kVlanTagLen : x.len - kVlanTagLen;
    }
  }
  const port::PortDp::RxTargets& tg = d.rx_for[thread];
  x.queues = tg.n;
  auto drop = [&](Drop why, uint32_t on) {
    x.drop = why;
    x.drop_port = on;
    return x;
  };
  if (!op->active() || !tg.n) return drop(Drop::kNoDestination, r.in);
  x.queue = tg.q[0];
  if (tg.via != port::PortDp::kDirect) {
    x.handoff = tg.via;
    if (too_big_for(x.len, virtio::kNetHdrGsoNone, x.max_frame)) return drop(Drop::kTooBig, o);
    if (tg.via >= port::kMaxPmdThreads || !t.handoff[thread][tg.via])
      return drop(Drop::kNoDestination, r.in);
  } else if (tg.n > 1) {
    const virtio::Segment s{const_cast<uint8_t*>(p), r.h.have};
    x.queue = tg.q[pick_queue(flow_hash(&s, 1, r.h.len), tg.n)];
  }
  const port::QueuePairDp& qp = d.qp[x.queue];
  if (!qp.rxq || qp.rxq.broken()) return drop(Drop::kNoDestination, r.in);
  if (too_big_for(x.len, virtio::kNetHdrGsoNone, x.max_frame)) return drop(Drop::kTooBig, o);
  return x;
}

/// Cross-connect (Forwarder::classify_as): the peer, if it carries the frame's VLAN.
void trace_xconnect(const SwitchTables& t, TraceResult& r, const uint8_t* p, uint32_t thread) {
  const uint32_t o = t.xc_peer[r.in];
  if (o == SwitchTables::kNoPeer) {
    r.why = TraceWhy::kNoPeer;
    r.drop = Drop::kNoDestination;
    return;
  }
  if (t.vlans && !t.vlan[o].carries(static_cast<uint16_t>(r.vlan))) {
    r.why = TraceWhy::kPeerVlan;
    r.drop = Drop::kVlanNotAllowed;
    return;
  }
  r.why = TraceWhy::kXconnect;
  r.out.push_back(output(t, r, o, p, thread));
}

/// Bridge (Forwarder::classify_as): learn the source (not here: said), look the destination
/// up, send it to the learned port, drop it back to its ingress port, or flood it.
void trace_bridge(const SwitchTables& t, TraceResult& r, const uint8_t* p, uint32_t thread) {
  const Fdb& fdb = *t.fdb;
  const uint32_t now_s = t.now_s.load(std::memory_order_relaxed);
  const uint32_t nports = t.nports.load(std::memory_order_relaxed);
  const uint16_t vlan = static_cast<uint16_t>(r.vlan);
  r.bridged = true;
  Mac dst = mac_from_bytes(p), src = mac_from_bytes(p + 6);
  if (t.vlans) {
    dst = vlan_key(dst, vlan);
    src = vlan_key(src, vlan);
  }
  r.learnable = mac_is_learnable(src);
  if (const auto e = r.learnable ? fdb.find(src, now_s) : std::nullopt) {
    r.src_known = true;
    r.src_entry = *e;
  }
  uint32_t o = Fdb::kNoPort;
  if (mac_is_multicast(dst)) {
    r.why = (dst & 0xffffffffffffull) == 0xffffffffffffull ? TraceWhy::kBroadcast : TraceWhy::kMulticast;
  } else {
    r.looked_up = true;
    r.why = TraceWhy::kUnknown;
    // The forwarder learns the source before it looks the destination up: a frame to its
    // own source finds it on its ingress port (unless the port's MAC limit declines it).
    if (r.learnable && dst == src) {
      r.to_own_source = r.dst_known = true;
      r.dst_entry = Fdb::Entry{dst, r.in, 0};
    } else if (const auto e = fdb.find(dst, now_s)) {
      r.dst_known = true;
      r.dst_entry = *e;
    }
    if (r.dst_known) o = r.dst_entry.port;
    if (to_learned_port(o, r.in, nports)) {
      if (!t.vlans || t.vlan[o].carries(vlan)) {
        r.why = TraceWhy::kLearned;
        r.out.push_back(output(t, r, o, p, thread));
        return;
      }
      r.why = TraceWhy::kOutsideVlan;
    }
  }
  if (back_to_ingress(dst, o, r.in)) {
    r.why = TraceWhy::kBackToIngress;
    r.drop = Drop::kNoDestination;
    return;
  }
  r.flooded = true;  // Forwarder::flood
  const uint64_t underlays = t.underlays.load(std::memory_order_relaxed);
  for (uint32_t q = 0; q < nports; ++q)
    if (floods_to(t, q, r.in, underlays, t.vlans, vlan)) r.out.push_back(output(t, r, q, p, thread));
  if (r.out.empty()) r.drop = Drop::kNoDestination;
}

}  // namespace

bool parse_frame_hex(std::string_view text, std::vector<uint8_t>* out, std::string* err) {
  out->clear();
  for (size_t i = 0; i < text.size();) {
    if (is_separator(text[i])) {
      ++i;
      continue;
    }
    const int hi = hex_digit(text[i]);
    const int lo = i + 1 < text.size() ? hex_digit(text[i + 1]) : -1;
    if (hi < 0 || lo < 0) {
      *err = hi < 0 || i + 1 < text.size()
                 ? fmt::format("not a hex digit at character {} (two hex digits per byte; ':', "
                               "'-', '.' or spaces may stand between bytes)",
                               hi < 0 ? i + 1 : i + 2)
                 : std::string("an odd number of hex digits (two per byte)");
      return false;
    }
    if (out->size() == virtio::kMaxFrameLen) {
      *err = fmt::format("more than {} bytes: above the largest frame", virtio::kMaxFrameLen);
      return false;
    }
    out->push_back(static_cast<uint8_t>(hi << 4 | lo));
    i += 2;
  }
  if (out->empty()) *err = "no bytes: the frame's bytes in hex";
  return !out->empty();
}

std::string frame_hex(const uint8_t* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

FrameHeaders parse_headers(const uint8_t* p, uint32_t have, uint32_t len) {
  FrameHeaders h;
  h.len = len;
  h.have = std::min(have, len);
  if (len < virtio::kEthHdrLen || h.have < virtio::kEthHdrLen) return h;
  h.eth = true;
  std::memcpy(h.dst, p, 6);
  std::memcpy(h.src, p + 6, 6);
  uint32_t off = virtio::kEthHdrLen;
  h.ethertype = be16(p + 12);
  if (h.ethertype == kEthTypeVlan) {  // as dp/vlan.h vlan_tag reads it
    h.tagged = true;
    if (h.have < virtio::kEthHdrLen + kVlanTagLen) return h;
    h.tag_whole = true;
    h.pcp = static_cast<uint8_t>(p[14] >> 5);
    h.vid = static_cast<uint16_t>((p[14] & 0x0f) << 8 | p[15]);
    h.ethertype = be16(p + 16);
    off += kVlanTagLen;
  }
  parse_l3(p + off, h.have - off, &h);
  return h;
}

const char* trace_why_name(TraceWhy w) {
  switch (w) {
    case TraceWhy::kLearned: return "learned_unicast";
    case TraceWhy::kUnknown: return "unknown_unicast";
    case TraceWhy::kBroadcast: return "broadcast";
    case TraceWhy::kMulticast: return "multicast";
    case TraceWhy::kOutsideVlan: return "learned_port_outside_vlan";
    case TraceWhy::kXconnect: return "xconnect_peer";
    case TraceWhy::kShort: return "short_frame";
    case TraceWhy::kVlanIngress: return "vlan_not_taken";
    case TraceWhy::kShortTag: return "short_vlan_tag";
    case TraceWhy::kSourceGuard: return "source_not_allowed";
    case TraceWhy::kNoPeer: return "no_xconnect_peer";
    case TraceWhy::kPeerVlan: return "xconnect_peer_vlan";
    case TraceWhy::kBackToIngress: return "back_to_ingress";
    case TraceWhy::kUnderlay: return "underlay";
    case TraceWhy::kLinkedAway: return "direct_link";
  }
  return "?";
}

TraceResult trace_frame(const SwitchTables& t, uint32_t in, const uint8_t* p, uint32_t have,
                        uint32_t len, uint32_t thread) {
  TraceResult r;
  r.in = in;
  if (have < std::min(len, kTraceMinHead)) len = have;  // (the caller's precondition)
  if (thread >= port::kMaxPmdThreads) thread = 0;
  r.h = parse_headers(p, have, len);
  r.mode = t.mode;
  r.vlans = t.vlans;
  const port::Port* ip = t.port(in);
  r.in_active = ip->active();
  if (ip->linked_away()) {
    r.why = TraceWhy::kLinkedAway;
    return r;
  }
  if ((t.underlays.load(std::memory_order_relaxed) >> in) & 1) {
    r.why = TraceWhy::kUnderlay;
    return r;
  }
  if (shorter_than_ethernet(len)) {
    r.why = TraceWhy::kShort;
    r.drop = Drop::kBadHeader;
    return r;
  }
  if (t.vlans) {  // Forwarder::vlan_ingress
    r.vlan = ingress_vlan(t.vlan[in], r.h.tagged, r.h.vid, len);
    if (r.vlan < 0) {
      r.why = r.h.tagged && len < virtio::kEthHdrLen + kVlanTagLen ? TraceWhy::kShortTag
                                                                   : TraceWhy::kVlanIngress;
      r.drop = Drop::kVlanNotAllowed;
      return r;
    }
  }
  if (((t.guarded.load(std::memory_order_relaxed) >> in) & 1) &&  // Forwarder::guard_sources
      !source_allowed(t.guard[in], mac_from_bytes(p + 6))) {
    r.why = TraceWhy::kSourceGuard;
    r.drop = Drop::kSourceNotAllowed;
    return r;
  }
  if (t.mode == ForwardMode::kXconnect) trace_xconnect(t, r, p, thread);
  else trace_bridge(t, r, p, thread);
  return r;
}

}  // namespace vl::dp
