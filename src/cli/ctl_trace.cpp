#include "cli/ctl_trace.h"

#include <pcap/pcap.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "dp/trace.h"
#include "virtio/virtio_defs.h"

namespace vl::cli {

using control::Json;

namespace {

/// The capture's first frame: its bytes and its length on the wire (more than the bytes
/// when it was cut at the capture's snaplen). False with `*err`.
bool read_pcap(const std::string& file, std::vector<uint8_t>* bytes, uint32_t* len,
               std::string* err) {
  char ebuf[PCAP_ERRBUF_SIZE] = {};
  pcap_t* p = pcap_open_offline(file.c_str(), ebuf);
  if (!p) {
    *err = fmt::format("--pcap {}: {}", file, ebuf);
    return false;
  }
  bool ok = false;
  pcap_pkthdr* h = nullptr;
  const u_char* data = nullptr;
  const int link = pcap_datalink(p);
  const int rc = link == DLT_EN10MB ? pcap_next_ex(p, &h, &data) : 0;
  if (link != DLT_EN10MB) {
    *err = fmt::format("--pcap {}: link type {} ({}), not Ethernet", file,
                       pcap_datalink_val_to_name(link) ? pcap_datalink_val_to_name(link) : "?", link);
  } else if (rc != 1) {
    *err = fmt::format("--pcap {}: {}", file, rc == PCAP_ERROR_BREAK ? "no frame in it" : pcap_geterr(p));
  } else if (h->caplen > h->len) {
    *err = fmt::format("--pcap {}: its first frame's record is corrupt ({} bytes captured of {})",
                       file, h->caplen, h->len);
  } else if (h->len > virtio::kMaxFrameLen) {
    *err = fmt::format("--pcap {}: its first frame is of {} bytes, above the largest frame ({})",
                       file, h->len, virtio::kMaxFrameLen);
  } else {
    bytes->assign(data, data + h->caplen);
    *len = h->len;
    ok = true;
  }
  pcap_close(p);
  return ok;
}

int usage(const std::string& what) {
  fmt::print(stderr, "virtlink ctl trace: {}\n", what);
  return 2;
}

}  // namespace

int trace_words(const std::string& pcap, std::vector<std::string>* words) {
  std::vector<uint8_t> bytes;
  uint32_t len = 0;
  std::string err;
  if (!pcap.empty()) {
    if (words->size() != 1) return usage("usage: trace PORT --pcap FILE (the port, then the file)");
    if (!read_pcap(pcap, &bytes, &len, &err)) {
      fmt::print(stderr, "virtlink ctl trace: {}\n", err);
      return 1;
    }
    if (bytes.size() < std::min<uint32_t>(len, dp::kTraceMinHead))
      return usage(fmt::format("--pcap {}: its first frame was captured with {} of its {} bytes: "
                               "too few for its headers ({})", pcap, bytes.size(), len, dp::kTraceMinHead));
  } else {
    if (words->size() < 2 || words->size() > 3) return 0;  // the command table's check says it
    if (!dp::parse_frame_hex((*words)[1], &bytes, &err)) return usage("HEX: " + err);
    if (words->size() == 3) {  // LEN given: sent as it is (the switch checks it against HEX)
      (*words)[1] = dp::frame_hex(bytes.data(), bytes.size());
      return 0;
    }
    len = static_cast<uint32_t>(bytes.size());
  }
  const size_t send = len > dp::kTraceWholeBytes ? std::min<size_t>(bytes.size(), dp::kTraceHeadBytes)
                                                 : bytes.size();
  words->resize(1);
  words->push_back(dp::frame_hex(bytes.data(), send));
  if (send < len) words->push_back(std::to_string(len));
  return 0;
}

namespace {

std::string str(const Json& j, const char* k, const char* dflt = "?") {
  return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : dflt;
}

/// The frame's headers: Ethernet, a tag, IPv4/IPv6 and the L4 ports.
void print_frame(const Json& r) {
  const Json& f = r["frame"];
  const uint32_t len = f.value("len", 0u), given = f.value("bytes_given", 0u);
  fmt::print("Frame: {} bytes arriving on port {}{}\n", len, str(r, "port"),
             given < len ? fmt::format(" (traced from its first {} bytes)", given) : "");
  if (!f.contains("dst")) {
    fmt::print("  shorter than an Ethernet header (14 bytes)\n");
    return;
  }
  const std::string et = str(f, "ethertype", ""), name = str(f, "ethertype_name", "");
  fmt::print("  ethernet: dst {}, src {}{}\n", str(f, "dst"), str(f, "src"),
             et.empty() ? "" : fmt::format(", ethertype {}{}", et, name.empty() ? "" : " (" + name + ")"));
  if (const Json& t = f.value("vlan_tag", Json()); t.is_object())
    fmt::print("  802.1Q tag: VLAN {}, priority {}\n", t.value("vid", 0), t.value("pcp", 0));
  else if (et.empty())
    fmt::print("  802.1Q type without a whole tag after it\n");
  for (const char* v : {"ipv4", "ipv6"}) {
    if (!f.contains(v)) continue;
    const Json& ip = f[v];
    const std::string proto = str(ip, "protocol_name", "");
    std::string l4 = proto.empty() ? fmt::format("protocol {}", ip.value("protocol", 0)) : proto;
    if (ip.contains("src_port"))
      l4 += fmt::format(" {} -> {}", ip.value("src_port", 0), ip.value("dst_port", 0));
    fmt::print("  {}: {} -> {}, {}{}\n", v, str(ip, "src"), str(ip, "dst"), l4,
               ip.value("fragment", false) ? " (a fragment: no ports)" : "");
  }
  fmt::print("  traced as a plain frame: no virtio-net header, so no checksum or segmentation "
             "offload asked for\n");
}

std::string vlan_mode_text(const Json& m) {
  const std::string mode = str(m, "mode", "all");
  if (mode == "access") return fmt::format("access port of VLAN {}", m.value("vlan", 0));
  if (mode != "trunk") return "a port of every VLAN (untagged frames in VLAN 0)";
  std::string list;
  for (const auto& t : m.value("trunks", Json::array())) list += (list.empty() ? "" : ",") + t.dump();
  const int native = m.value("native_vlan", 0);
  return fmt::format("trunk of VLANs {}{}", list.empty() ? "none" : list,
                     native ? fmt::format(" (native VLAN {})", native) : " (no native VLAN)");
}

void print_ingress(const Json& r) {
  const Json& i = r["ingress"];
  fmt::print("Ingress: port {} ({}{}), {}\n", str(r, "port"), str(i, "state"),
             i.value("active", false) ? "" : ": not taking frames now, traced as if it were",
             str(i, "forward"));
  const Json& f = r["frame"];
  if (f.contains("dst")) fmt::print("  length {}: an Ethernet header is there\n", f.value("len", 0));
  if (!i.value("vlans_in_use", false))
    fmt::print("  VLANs: none set on this switch (every frame in VLAN 0, tags carried as they come)\n");
  else if (const Json& v = i.value("vlan", Json()); v.is_number())
    fmt::print("  VLANs: {}: the frame is in VLAN {}\n", vlan_mode_text(i["vlan_mode"]), v.get<int>());
  else if (r["decision"].value("reason", "") != "short_frame")
    fmt::print("  VLANs: {}: the frame is in none of its VLANs\n", vlan_mode_text(i["vlan_mode"]));
}

std::string entry_text(const Json& e) {
  return fmt::format("learned on {}, {} s ago", str(e, "port"), e.value("age_s", 0u));
}

void print_bridge(const Json& r) {
  const Json& l = r.value("learning", Json());
  if (l.is_object()) {
    const std::string mac = str(l, "mac"), would = str(l, "would");
    const Json& e = l.value("entry", Json());
    if (would == "none")
      fmt::print("Learning: source {} is multicast or zero: not learned\n", mac);
    else if (would == "learn")
      fmt::print("Learning: source {} is not in the MAC table: the frame would teach it (port {})\n",
                 mac, str(r, "port"));
    else
      fmt::print("Learning: source {} {}: the frame would {}\n", mac, entry_text(e),
                 would == "move" ? "move it to port " + str(r, "port") : std::string("refresh it"));
  }
  const Json& k = r.value("lookup", Json());
  if (!k.is_object()) return;
  const std::string kind = str(k, "kind");
  const Json& e = k.value("entry", Json());
  fmt::print("Lookup: destination {} (VLAN {}) {}\n", str(k, "mac"), k.value("vlan", 0),
             kind != "unicast" ? "is " + kind
             : e.is_object()   ? entry_text(e) + (k.contains("note") ? " (" + str(k, "note") + ")" : "")
                               : "is not in the MAC table");
}

std::string why_text(const Json& r) {
  const std::string why = str(r["decision"], "reason"), in = str(r, "port");
  const Json& outs = r["outputs"];
  const std::string first = outs.empty() ? "" : str(outs[0], "port");
  if (why == "learned_unicast") return "to " + first + " alone (its destination was learned there)";
  if (why == "xconnect_peer") return "to " + first + ", its cross-connect peer";
  if (why == "unknown_unicast") return "flooded: its destination is unknown";
  if (why == "broadcast" || why == "multicast") return "flooded: " + why;
  if (why == "learned_port_outside_vlan") return "flooded: its destination's port does not carry its VLAN";
  if (why == "short_frame") return "dropped: shorter than an Ethernet header (14 bytes)";
  if (why == "vlan_not_taken") return "dropped: port " + in + " does not take the frame's VLAN";
  if (why == "short_vlan_tag") return "dropped: the 802.1Q type without a whole tag and ethertype (under 18 bytes)";
  if (why == "no_xconnect_peer") return "dropped: port " + in + " has no cross-connect peer";
  if (why == "xconnect_peer_vlan") return "dropped: its cross-connect peer does not carry its VLAN";
  if (why == "back_to_ingress")
    return "dropped: its destination was learned on its ingress port " + in + " (never sent back out)";
  if (why == "underlay")
    return "not switched: " + in + " is a tunnel's underlay (decapsulated for its tunnels, or counted in not_for_vtep)";
  if (why == "direct_link") return "not switched: a direct link serves " + in + "'s rings (docs/direct-link.md)";
  return why;
}

void print_output(const Json& o) {
  const std::string edit = str(o, "vlan_edit", "none");
  const int handoff = o.value("handoff_pmd", -1);
  std::string how = fmt::format("{} bytes (largest frame {}){}, flush {}, receive queue {}{}",
                                o.value("len", 0u), o.value("max_frame", 0u),
                                edit == "none" ? "" : edit == "tag_added" ? ", 802.1Q tag added" : ", 802.1Q tag removed",
                                str(o, "flush"), o.value("queue", 0u),
                                handoff >= 0 ? fmt::format(" (handed to PMD thread {})", handoff) : "");
  if (o.value("result", "") == "delivered")
    fmt::print("  -> {}: delivered, {}, no offload work{}\n", str(o, "port"), how,
               o.value("mrg_rxbuf", true) ? "" : " (no mergeable buffers: it must fit one receive buffer)");
  else
    fmt::print("  -> {}: dropped as {} (counted on {}), {}\n", str(o, "port"), str(o["drop"], "reason"),
               str(o["drop"], "counted_on"), how);
}

}  // namespace

void print_trace(const Json& r) {
  print_frame(r);
  print_ingress(r);
  print_bridge(r);
  fmt::print("Decision: {}\n", why_text(r));
  for (const auto& o : r["outputs"]) print_output(o);
  if (const Json& d = r.value("drop", Json()); d.is_object())
    fmt::print("  dropped as {} (counted on {}){}\n", str(d, "reason"), str(d, "counted_on"),
               r["decision"].value("action", "") == "flood" ? ": no port to flood to" : "");
  std::string drops;
  for (const auto& d : r["drops"])
    drops += fmt::format("{}{} on {}", drops.empty() ? "" : ", ", str(d, "reason"), str(d, "counted_on"));
  std::string to;
  for (const auto& p : r["delivered_to"]) to += (to.empty() ? "" : ", ") + p.get<std::string>();
  fmt::print("Result: {}; drops: {}\n", to.empty() ? "delivered nowhere" : "delivered to " + to,
             drops.empty() ? "none" : drops);
  fmt::print("(a trace changes nothing: no MAC learned, no counter moved)\n");
}

}  // namespace vl::cli
