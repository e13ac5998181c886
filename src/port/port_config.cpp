#include "port/port_config.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

namespace vl::port {

const char* port_type_name(PortType t, SocketMode m) {
  switch (t) {
    case PortType::kVhostUser: return m == SocketMode::kServer ? "vhost-user" : "vhost-user-client";
    case PortType::kTap: return "tap";
    case PortType::kAfPacket: return "af-packet";
    case PortType::kAfXdp: return "af-xdp";
    case PortType::kDpdk: return "dpdk";
    case PortType::kVxlan: return "vxlan";
  }
  return "?";
}

namespace {
bool parse_ipv4(const std::string& s, uint32_t* out) {
  in_addr a{};
  if (inet_pton(AF_INET, s.c_str(), &a) != 1) return false;
  std::memcpy(out, &a, 4);
  return true;
}
bool parse_mac(const std::string& s, uint8_t out[6]) {
  unsigned v[6];
  char tail = 0;
  if (std::sscanf(s.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                  &tail) != 6)
    return false;
  for (int i = 0; i < 6; ++i) out[i] = static_cast<uint8_t>(v[i]);
  return true;
}
/// Not 0.0.0.0, 255.255.255.255, multicast (224/4) or 240/4 (`ip` in network byte order).
bool unicast_ipv4(uint32_t ip) {
  uint8_t b[4];
  std::memcpy(b, &ip, 4);
  return ip != 0 && b[0] < 224;
}
bool parse_uint(const std::string& s, uint32_t hi, uint32_t* out) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  const unsigned long v = std::stoul(s);
  if (v > hi) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}
}  // namespace

bool parse_vxlan_arg(const std::string& arg, VxlanSettings* out, std::string* err) {
  VxlanSettings v;
  bool have_vni = false;
  size_t i = 0;
  auto bad = [&](const std::string& item, const char* want) {
    *err = fmt::format("vxlan '{}': '{}': {}", arg, item, want);
    return false;
  };
  while (i <= arg.size()) {
    size_t j = arg.find(',', i);
    if (j == std::string::npos) j = arg.size();
    const std::string item = arg.substr(i, j - i);
    i = j + 1;
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq), val = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (key == "uplink" && !val.empty()) {
      v.uplink = val;
    } else if (key == "local") {
      if (!parse_ipv4(val, &v.local_ip) || !unicast_ipv4(v.local_ip)) return bad(item, "a unicast IPv4 address");
    } else if (key == "vni") {
      if (!parse_uint(val, 0xffffff, &v.vni)) return bad(item, "a VNI is 0..16777215");
      have_vni = true;
    } else if (key == "remote") {
      size_t a = 0;
      while (a <= val.size()) {
        size_t b = val.find('+', a);
        if (b == std::string::npos) b = val.size();
        uint32_t ip;
        if (!parse_ipv4(val.substr(a, b - a), &ip) || !unicast_ipv4(ip))
          return bad(item, "unicast IPv4 addresses joined by '+'");
        if (std::find(v.remotes.begin(), v.remotes.end(), ip) == v.remotes.end()) v.remotes.push_back(ip);
        a = b + 1;
      }
      if (v.remotes.size() > kMaxVxlanRemotes)
        return bad(item, fmt::format("at most {} remotes", kMaxVxlanRemotes).c_str());
    } else if (key == "dst_port") {
      uint32_t p;
      if (!parse_uint(val, 65535, &p) || !p) return bad(item, "a UDP port 1..65535");
      v.dst_port = static_cast<uint16_t>(p);
    } else if (key == "gateway_mac") {
      if (!parse_mac(val, v.gateway_mac) || (v.gateway_mac[0] & 1)) return bad(item, "a unicast MAC address");
      v.has_gateway_mac = true;
    } else if (key == "mac") {
      if (!parse_mac(val, v.mac) || (v.mac[0] & 1)) return bad(item, "a unicast MAC address");
      v.has_mac = true;
    } else {
      return bad(item, "expected uplink=PORT, local=IP, vni=N, remote=IP[+IP...], dst_port=N, "
                       "gateway_mac=MAC or mac=MAC");
    }
  }
  if (v.uplink.empty() || !v.local_ip || !have_vni || v.remotes.empty()) {
    *err = fmt::format("vxlan '{}': uplink=PORT, local=IP, vni=N and remote=IP are required", arg);
    return false;
  }
  if (std::find(v.remotes.begin(), v.remotes.end(), v.local_ip) != v.remotes.end()) {
    *err = fmt::format("vxlan '{}': the local address is also a remote", arg);
    return false;
  }
  *out = std::move(v);
  return true;
}

}  // namespace vl::port
