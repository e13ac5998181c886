// `ctl trace`'s reply (app/json_views.h trace_json): a dp::TraceResult in the switch's
// words, port names for ids and drop reasons as `ctl stats` names them.
#include <arpa/inet.h>

#include <fmt/format.h>

#include "app/json_views.h"
#include "dp/trace.h"

namespace vl::app {

namespace {

using control::Json;

std::string mac_text(const uint8_t* m) {
  return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5]);
}

std::string ip_text(uint8_t version, const uint8_t* a) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(version == 4 ? AF_INET : AF_INET6, a, buf, sizeof buf);
  return buf;
}

const char* ethertype_name(uint16_t t) {
  switch (t) {
    case 0x0800: return "ipv4";
    case 0x0806: return "arp";
    case 0x8035: return "rarp";
    case 0x86dd: return "ipv6";
    case 0x8100: return "vlan";
    case 0x88a8: return "qinq";
    case 0x88cc: return "lldp";
    case 0x8847: return "mpls";
    default: return t < 0x0600 ? "802.3 length" : "";
  }
}

const char* l4_name(uint8_t p) {
  switch (p) {
    case 1: return "icmp";
    case 2: return "igmp";
    case 6: return "tcp";
    case 17: return "udp";
    case 58: return "icmpv6";
    case 132: return "sctp";
    default: return "";
  }
}

Json frame_json(const dp::FrameHeaders& h) {
  Json f = {{"len", h.len}, {"bytes_given", h.have}};
  if (!h.eth) return f;
  f["dst"] = mac_text(h.dst);
  f["src"] = mac_text(h.src);
  f["vlan_tag"] = h.tag_whole ? Json{{"vid", h.vid}, {"pcp", h.pcp}} : Json();
  if (h.tagged && !h.tag_whole) return f;
  f["ethertype"] = fmt::format("0x{:04x}", h.ethertype);
  f["ethertype_name"] = ethertype_name(h.ethertype);
  if (!h.ip) return f;
  Json ip = {{"src", ip_text(h.ip, h.ip_src)}, {"dst", ip_text(h.ip, h.ip_dst)},
             {"protocol", h.l4}, {"protocol_name", l4_name(h.l4)}};
  if (h.fragment) ip["fragment"] = true;
  if (h.ports) {
    ip["src_port"] = h.sport;
    ip["dst_port"] = h.dport;
  }
  f[h.ip == 4 ? "ipv4" : "ipv6"] = ip;
  return f;
}

/// How the datapath carries VLANs on a port (dp::PortVlan): as `ctl ports` shows "vlan".
Json vlan_mode_json(const dp::PortVlan& v) {
  if (v.mode == dp::PortVlan::Mode::kAccess) return {{"mode", "access"}, {"vlan", v.tag}};
  if (v.mode == dp::PortVlan::Mode::kAll) return {{"mode", "all"}};
  Json trunks = Json::array();
  for (uint16_t i = 1; i <= dp::kMaxVid; ++i)
    if ((v.allowed[i >> 6] >> (i & 63)) & 1) trunks.push_back(i);
  return {{"mode", "trunk"}, {"trunks", trunks}, {"native_vlan", v.native}};
}

std::string port_name(const SwitchView& sw, uint32_t p) {
  return p < sw.ports.size() && sw.ports[p] ? sw.ports[p]->name() : fmt::format("#{}", p);
}

Json entry_json(const SwitchView& sw, bool known, const dp::Fdb::Entry& e) {
  if (!known) return Json();
  return {{"port", port_name(sw, e.port)}, {"age_s", e.age_s}};
}

Json drop_json(const SwitchView& sw, port::Drop d, uint32_t on) {
  return {{"reason", port::drop_name(d)}, {"counted_on", port_name(sw, on)}};
}

Json output_json(const SwitchView& sw, const dp::TraceOut& x) {
  const bool delivered = x.drop == port::Drop::kCount;
  return {{"port", port_name(sw, x.port)},
          {"vlan_edit", x.tag_edit > 0 ? "tag_added" : x.tag_edit < 0 ? "tag_removed" : "none"},
          {"len", x.len},
          {"max_frame", x.max_frame},
          {"mrg_rxbuf", x.mrg_rxbuf},
          {"flush", dp::flush_policy_name(x.flush)},
          {"queues", x.queues},
          {"queue", x.queue},
          {"handoff_pmd", x.handoff},
          {"offload", "none"},  // a plain frame asks for none (dp/trace.h)
          {"result", delivered ? "delivered" : "dropped"},
          {"drop", delivered ? Json() : drop_json(sw, x.drop, x.drop_port)}};
}

const char* action_of(const dp::TraceResult& r) {
  using W = dp::TraceWhy;
  if (r.why == W::kUnderlay || r.why == W::kLinkedAway) return "not_switched";
  if (r.flooded) return "flood";
  return r.out.empty() ? "drop" : "output";
}

/// Learning and lookup, for a frame the bridge classified (null otherwise).
void add_bridge(const SwitchView& sw, const dp::TraceResult& r, Json* out) {
  (*out)["learning"] = Json();
  (*out)["lookup"] = Json();
  if (!r.bridged) return;
  const uint16_t vlan = static_cast<uint16_t>(r.vlans ? r.vlan : 0);
  const bool moves = r.src_known && r.src_entry.port != r.in;
  (*out)["learning"] = {{"mac", mac_text(r.h.src)},
                        {"vlan", vlan},
                        {"learnable", r.learnable},
                        {"entry", entry_json(sw, r.src_known, r.src_entry)},
                        {"would", !r.learnable    ? "none"
                                  : !r.src_known ? "learn"
                                  : moves        ? "move"
                                                 : "refresh"}};
  const char* kind = r.why == dp::TraceWhy::kBroadcast   ? "broadcast"
                     : r.why == dp::TraceWhy::kMulticast ? "multicast"
                                                         : "unicast";
  Json lookup = {{"mac", mac_text(r.h.dst)}, {"vlan", vlan}, {"kind", kind},
                 {"entry", entry_json(sw, r.dst_known, r.dst_entry)}};
  if (r.to_own_source) lookup["note"] = "its own source, learned on the ingress port just before the lookup";
  (*out)["lookup"] = lookup;
}

}  // namespace

control::Json trace_json(const SwitchView& sw, const dp::TraceResult& r) {
  Json out = {{"port", port_name(sw, r.in)}, {"frame", frame_json(r.h)}};
  const port::Port* in = r.in < sw.ports.size() ? sw.ports[r.in].get() : nullptr;
  out["ingress"] = {{"forward", r.mode == dp::ForwardMode::kBridge ? "bridge" : "xconnect"},
                    {"state", in ? in->state() : "?"},
                    {"active", r.in_active},
                    {"vlans_in_use", r.vlans},
                    {"vlan_mode", vlan_mode_json(sw.tables.vlan[r.in])},
                    {"vlan", r.vlans && r.vlan >= 0 ? Json(r.vlan) : Json()}};
  add_bridge(sw, r, &out);
  out["decision"] = {{"action", action_of(r)}, {"reason", dp::trace_why_name(r.why)}};
  out["drop"] = r.drop == port::Drop::kCount ? Json() : drop_json(sw, r.drop, r.in);
  Json outputs = Json::array(), delivered = Json::array(), drops = Json::array();
  if (r.drop != port::Drop::kCount) drops.push_back(drop_json(sw, r.drop, r.in));
  for (const dp::TraceOut& x : r.out) {
    outputs.push_back(output_json(sw, x));
    if (x.drop == port::Drop::kCount) delivered.push_back(port_name(sw, x.port));
    else drops.push_back(drop_json(sw, x.drop, x.drop_port));
  }
  out["outputs"] = outputs;
  out["delivered_to"] = delivered;
  out["drops"] = drops;
  out["plain_frame"] = true;  // no virtio-net header: no offload asked for (dp/trace.h)
  out["changed"] = false;     // no MAC learned, no counter moved
  return out;
}

}  // namespace vl::app
