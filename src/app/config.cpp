#include "app/config.h"

#include <sched.h>

#include <cctype>
#include <cstdio>
#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "control/metrics_server.h"
#include "util/cpuset.h"
#include "util/text.h"
#include "util/unix_socket.h"

namespace vl::app {

namespace {
/// The port types, as `--port NAME=TYPE:ARG` and TOML `type` spell them.
struct TypeName {
  const char* name;
  port::PortType type;
  port::SocketMode mode;
};
constexpr TypeName kTypes[] = {
    {"vhost-user", port::PortType::kVhostUser, port::SocketMode::kServer},
    {"vhost-user-client", port::PortType::kVhostUser, port::SocketMode::kClient},
    {"tap", port::PortType::kTap, port::SocketMode::kServer},
    {"af-packet", port::PortType::kAfPacket, port::SocketMode::kServer},
    {"af-xdp", port::PortType::kAfXdp, port::SocketMode::kServer},
    {"dpdk", port::PortType::kDpdk, port::SocketMode::kServer},
    {"vxlan", port::PortType::kVxlan, port::SocketMode::kServer},
};
constexpr const char* kTypeList = "vhost-user, vhost-user-client, tap, af-packet, af-xdp, dpdk or vxlan";

bool set_port_type(const std::string& type, port::PortConfig* c) {
  for (const TypeName& t : kTypes) {
    if (type != t.name) continue;
    c->type = t.type;
    c->mode = t.mode;
    return true;
  }
  return false;
}

/// What the type's argument says beyond a path (a vxlan port's settings).
bool parse_port_arg(port::PortConfig* c, std::string* err) {
  if (c->type != port::PortType::kVxlan) return true;
  if (port::parse_vxlan_arg(c->path, &c->vxlan, err)) return true;
  *err = fmt::format("port {}: {}", c->name, *err);
  return false;
}
}  // namespace

std::optional<port::PortConfig> parse_port_spec(const std::string& spec, std::string* err) {
  const size_t eq = spec.find('=');
  const size_t colon = eq == std::string::npos ? std::string::npos : spec.find(':', eq);
  if (eq == std::string::npos || colon == std::string::npos || eq == 0 || colon + 1 == spec.size()) {
    *err = fmt::format("port '{}': expected NAME=TYPE:ARG (vhost-user:PATH, vhost-user-client:PATH, "
                       "tap:IFNAME, af-packet:IFACE, af-xdp:IFACE, dpdk:DEVARGS, "
                       "vxlan:uplink=PORT,local=IP,vni=N,remote=IP[+IP...])", spec);
    return std::nullopt;
  }
  port::PortConfig c;
  c.name = spec.substr(0, eq);
  const std::string type = spec.substr(eq + 1, colon - eq - 1);
  c.path = spec.substr(colon + 1);
  if (!set_port_type(type, &c)) {
    *err = fmt::format("port '{}': unknown type '{}' ({})", spec, type, kTypeList);
    return std::nullopt;
  }
  if (!parse_port_arg(&c, err)) return std::nullopt;
  return c;
}

const char* const kPortSettingKeys =
    "vlan, trunks, native_vlan, mtu, offloads, mrg_rxbuf, max_queues, queues, queue_size, "
    "mac_limit, tx_retry_us, completion_coalesce_us, max_guest_memory_gib, socket_mode, "
    "socket_owner, socket_group, port_security";

namespace {
/// A VLAN number as written: 1 to 4 decimal digits (sscanf's %u took "4294967306" as 10).
bool vid_digits(const std::string& s, unsigned* out) {
  if (s.empty() || s.size() > 4 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = static_cast<unsigned>(std::stoul(s));
  return true;
}
}  // namespace

bool parse_port_security(const std::string& s, std::vector<uint64_t>* out, std::string* err) {
  std::vector<uint64_t> v;
  for (size_t i = 0, j = 0; !s.empty() && j < s.size(); i = j + 1) {  // "" is none; "a," is an error
    j = std::min(s.find(',', i), s.size());
    const std::string one = s.substr(i, j - i);
    unsigned b[6];
    char tail = 0;
    uint8_t mac[6];
    const bool ok = one.size() == 17 && std::sscanf(one.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1],
                                                    &b[2], &b[3], &b[4], &b[5], &tail) == 6;
    for (int k = 0; k < 6; ++k) mac[k] = static_cast<uint8_t>(ok ? b[k] : 0);
    const uint64_t m = dp::mac_from_bytes(mac);
    if (!ok || (mac[0] & 1) || m == 0) {
      *err = fmt::format("port_security: '{}' is not a unicast MAC address (xx:xx:xx:xx:xx:xx)",
                         utf8_prefix(one, 64));
      return false;
    }
    if (std::find(v.begin(), v.end(), m) == v.end()) v.push_back(m);
  }
  if (v.size() > dp::kMaxAllowedMacs) {
    *err = fmt::format("port_security: at most {} MAC addresses", dp::kMaxAllowedMacs);
    return false;
  }
  *out = std::move(v);
  return true;
}

std::string port_security_text(const std::vector<uint64_t>& macs) {
  std::string t;
  for (uint64_t m : macs)
    t += fmt::format("{}{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", t.empty() ? "" : ",", (m >> 40) & 0xff,
                     (m >> 32) & 0xff, (m >> 24) & 0xff, (m >> 16) & 0xff, (m >> 8) & 0xff, m & 0xff);
  return t;
}

bool parse_vlan_list(const std::string& s, std::vector<uint16_t>* out, std::string* err) {
  std::set<uint16_t> v;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string item = s.substr(i, j - i);
    const size_t dash = item.find('-');
    unsigned lo = 0, hi = 0;
    const bool ok = dash == std::string::npos
                        ? vid_digits(item, &lo)
                        : vid_digits(item.substr(0, dash), &lo) && vid_digits(item.substr(dash + 1), &hi);
    if (dash == std::string::npos) hi = lo;
    if (!ok || lo < 1 || hi > dp::kMaxVid || lo > hi) {
      *err = fmt::format("VLAN list '{}': '{}' is not a VLAN (1..{}) or an ascending range", s,
                         item, dp::kMaxVid);
      return false;
    }
    for (unsigned x = lo; x <= hi; ++x) v.insert(static_cast<uint16_t>(x));
    i = j + 1;
  }
  out->assign(v.begin(), v.end());
  return true;
}

namespace {
/// set_port_setting's 802.1Q and port-security keys; nullopt for any other key.
std::optional<bool> set_l2_setting(port::PortConfig* c, const std::string& key, const std::string& value,
                                   std::string* err) {
  auto vid = [&](uint16_t* out) {
    unsigned v = 0;
    if (!vid_digits(value, &v) || v > dp::kMaxVid) {
      *err = fmt::format("port {}: {}={}: a VLAN is 1..{} (0: none)", c->name, key, value, dp::kMaxVid);
      return false;
    }
    *out = static_cast<uint16_t>(v);
    return true;
  };
  if (key == "vlan") return vid(&c->vlan);
  if (key == "native_vlan") return vid(&c->native_vlan);
  if (key == "port_security") {
    if (parse_port_security(value, &c->port_security, err)) return true;
    *err = fmt::format("port {}: {}", c->name, *err);
    return false;
  }
  if (key == "trunks") {
    if (!parse_vlan_list(value, &c->trunks, err)) {
      *err = fmt::format("port {}: {}", c->name, *err);
      return false;
    }
    return true;
  }
  return std::nullopt;
}
}  // namespace

bool set_port_setting(port::PortConfig* c, const std::string& key, const std::string& value,
                      std::string* err) {
  if (const std::optional<bool> l2 = set_l2_setting(c, key, value, err)) return *l2;
  // A decimal number in lo..hi.
  auto num = [&](uint64_t lo, uint64_t hi, auto* out) {
    const bool digits = !value.empty() && value.size() <= 12 &&
                        value.find_first_not_of("0123456789") == std::string::npos;
    const uint64_t v = digits ? std::stoull(value) : 0;
    if (!digits || v < lo || v > hi) {
      *err = fmt::format("port {}: {}={}: a number in {}..{}", c->name, key, value, lo, hi);
      return false;
    }
    *out = static_cast<std::remove_reference_t<decltype(*out)>>(v);
    return true;
  };
  auto flag = [&](bool* out) {
    if (value == "on" || value == "true") *out = true;
    else if (value == "off" || value == "false") *out = false;
    else {
      *err = fmt::format("port {}: {}={}: on or off", c->name, key, value);
      return false;
    }
    return true;
  };
  if (key == "mtu") return (value == "0" ? (c->mtu = 0, true) : num(68, 65535, &c->mtu));
  if (key == "offloads") return flag(&c->offloads);
  if (key == "mrg_rxbuf") return flag(&c->mrg_rxbuf);
  if (key == "max_queues") return num(1, port::kMaxQueuePairs, &c->max_queues);
  if (key == "queues") return num(1, port::kMaxQueuePairs, &c->queues);
  if (key == "mac_limit") return num(0, 1u << 27, &c->mac_limit);
  if (key == "queue_size") {
    if (!num(64, 4096, &c->queue_size)) return false;
    if (c->queue_size & (c->queue_size - 1)) {
      *err = fmt::format("port {}: queue_size={}: a power of two", c->name, value);
      return false;
    }
    return true;
  }
  if (key == "tx_retry_us") {
    c->explicit_keys |= port::kKeyTxRetry;
    return num(0, port::kMaxTxRetryUs, &c->tx_retry_us);
  }
  if (key == "completion_coalesce_us") {
    c->explicit_keys |= port::kKeyCompletionCoalesce;
    return num(0, port::kMaxCompletionCoalesceUs, &c->completion_coalesce_us);
  }
  if (key == "max_guest_memory_gib") {
    uint64_t g = 0;
    if (!num(1, 1u << 16, &g)) return false;
    c->max_guest_memory = g << 30;
    c->explicit_keys |= port::kKeyMaxGuestMemory;
    return true;
  }
  if (key == "socket_mode") {
    const auto m = parse_socket_mode(value);
    if (!m) {
      *err = fmt::format("port {}: socket_mode={}: octal permission bits, e.g. 0660", c->name, value);
      return false;
    }
    c->socket_mode = *m;
    c->explicit_keys |= port::kKeySocketMode;
    return true;
  }
  if (key == "socket_owner" || key == "socket_group") {
    (key == "socket_owner" ? c->socket_owner : c->socket_group) = value;
    c->explicit_keys |= key == "socket_owner" ? port::kKeySocketOwner : port::kKeySocketGroup;
    return true;
  }
  *err = fmt::format("port {}: unknown setting '{}' ({})", c->name, key, kPortSettingKeys);
  return false;
}

std::optional<dp::ForwardMode> parse_forward(const std::string& s) {
  if (s == "bridge") return dp::ForwardMode::kBridge;
  if (s == "xconnect") return dp::ForwardMode::kXconnect;
  return std::nullopt;
}

std::optional<dp::PmdMode> parse_pmd_mode(const std::string& s) {
  if (s == "poll") return dp::PmdMode::kPoll;
  if (s == "interrupt") return dp::PmdMode::kInterrupt;
  if (s == "adaptive") return dp::PmdMode::kAdaptive;
  return std::nullopt;
}

namespace {

template <typename T>
bool get_int(const toml::node& n, const char* key, T lo, T hi, T* out, std::string* err) {
  auto v = n.is_integer() ? n.value<int64_t>() : std::nullopt;  // (not a bool or a float)
  if (!v || *v < static_cast<int64_t>(lo) || *v > static_cast<int64_t>(hi)) {
    *err = fmt::format("'{}' must be an integer in {}..{}", key, lo, hi);
    return false;
  }
  *out = static_cast<T>(*v);
  return true;
}

bool get_str(const toml::node& n, const char* key, std::string* out, std::string* err) {
  auto v = n.value<std::string>();
  if (!v) {
    *err = fmt::format("'{}' must be a string", key);
    return false;
  }
  *out = *v;
  return true;
}

/// A [[port]] key of load_port()'s beyond its own: port_security ("MAC,MAC" or an array
/// of MAC strings); false with `*err` for any other key.
bool load_port_list_key(const std::string& key, const toml::node& v, port::PortConfig* c,
                        std::string* err) {
  if (key != "port_security") {
    *err = fmt::format("unknown port key '{}'", key);
    return false;
  }
  std::string list;
  if (const toml::array* a = v.as_array()) {
    for (auto&& e : *a) {
      const auto m = e.value<std::string>();
      if (!m) { *err = "'port_security' must be MAC addresses: \"MAC,MAC\" or [\"MAC\", ...]"; return false; }
      list += (list.empty() ? "" : ",") + *m;
    }
  } else if (!get_str(v, "port_security", &list, err)) {
    return false;
  }
  return parse_port_security(list, &c->port_security, err);
}

/// One [[port]] table. On an error `*where` is the node it is about: the key's value, or
/// the table (a missing or bad name, path or type).
bool load_port(const toml::table& t, port::PortConfig* c, std::string* flush, std::string* err,
               const toml::node** where) {
  std::string type = "vhost-user";
  for (auto&& [k, v] : t) {
    *where = &v;
    const std::string key(k.str());
    if (key == "name") { if (!get_str(v, "name", &c->name, err)) return false; }
    else if (key == "type") { if (!get_str(v, "type", &type, err)) return false; }
    else if (key == "path") { if (!get_str(v, "path", &c->path, err)) return false; }
    else if (key == "mtu") { if (!get_int<uint32_t>(v, "mtu", 68, 65535, &c->mtu, err)) return false; }
    else if (key == "socket_mode") {
      if (!get_int<uint32_t>(v, "socket_mode", 0, 0777, &c->socket_mode, err)) return false;
      c->explicit_keys |= port::kKeySocketMode;
    } else if (key == "socket_owner") {
      if (!get_str(v, "socket_owner", &c->socket_owner, err)) return false;
      c->explicit_keys |= port::kKeySocketOwner;
    } else if (key == "socket_group") {
      if (!get_str(v, "socket_group", &c->socket_group, err)) return false;
      c->explicit_keys |= port::kKeySocketGroup;
    } else if (key == "max_guest_memory_gib") {
      uint64_t g;
      if (!get_int<uint64_t>(v, "max_guest_memory_gib", 1, 1u << 16, &g, err)) return false;
      c->max_guest_memory = g << 30;
      c->explicit_keys |= port::kKeyMaxGuestMemory;
    } else if (key == "mrg_rxbuf") {
      auto b = v.value<bool>();
      if (!b) { *err = "'mrg_rxbuf' must be true or false"; return false; }
      c->mrg_rxbuf = *b;
    } else if (key == "flush") {
      if (!get_str(v, "flush", flush, err)) return false;
    } else if (key == "offloads") {
      auto b = v.value<bool>();
      if (!b) { *err = "'offloads' must be true or false"; return false; }
      c->offloads = *b;
    } else if (key == "max_queues") {
      if (!get_int<uint32_t>(v, "max_queues", 1, 8, &c->max_queues, err)) return false;
    } else if (key == "vlan" || key == "native_vlan") {
      uint16_t x;
      if (!get_int<uint16_t>(v, key.c_str(), 0, dp::kMaxVid, &x, err)) return false;
      (key == "vlan" ? c->vlan : c->native_vlan) = x;
    } else if (key == "trunks") {
      // "10,20-30" or [10, 20, 21]
      if (const toml::array* a = v.as_array()) {
        std::string list;
        for (auto&& e : *a) {
          auto n = e.is_integer() ? e.value<int64_t>() : std::nullopt;
          if (!n) { *err = "'trunks' must be a VLAN list: \"10,20-30\" or [10, 20]"; return false; }
          list += (list.empty() ? "" : ",") + std::to_string(*n);
        }
        if (!parse_vlan_list(list, &c->trunks, err)) return false;
      } else {
        std::string list;
        if (!get_str(v, "trunks", &list, err) || !parse_vlan_list(list, &c->trunks, err)) return false;
      }
    } else if (key == "queue_size") {
      if (!get_int<uint32_t>(v, "queue_size", 64, 4096, &c->queue_size, err)) return false;
      if (c->queue_size & (c->queue_size - 1)) { *err = "'queue_size' must be a power of two"; return false; }
    } else if (key == "queues") {
      if (!get_int<uint32_t>(v, "queues", 1, port::kMaxQueuePairs, &c->queues, err)) return false;
    } else if (key == "tx_retry_us") {
      if (!get_int<uint32_t>(v, "tx_retry_us", 0, port::kMaxTxRetryUs, &c->tx_retry_us, err)) return false;
      c->explicit_keys |= port::kKeyTxRetry;
    } else if (key == "completion_coalesce_us") {
      if (!get_int<uint32_t>(v, "completion_coalesce_us", 0, port::kMaxCompletionCoalesceUs,
                             &c->completion_coalesce_us, err))
        return false;
      c->explicit_keys |= port::kKeyCompletionCoalesce;
    } else if (!load_port_list_key(key, v, c, err)) {
      return false;
    }
  }
  *where = &t;
  if (!set_port_type(type, c)) {
    *err = fmt::format("unknown port type '{}' ({})", type, kTypeList);
    return false;
  }
  if (c->name.empty() || c->path.empty()) {
    *err = "every [[port]] needs a name and a path (a socket path, an interface, DEVARGS)";
    return false;
  }
  return parse_port_arg(c, err);
}

/// A top-level key of the TOML file: reads its value into `cfg`, or false with `*err`.
using RootLoader = bool (*)(const toml::node& v, SwitchConfig* cfg, std::string* err);
struct RootKey {
  std::string_view name;
  RootLoader load;
  /// The loader's errors begin with "LINE: " (an array of tables: the line of the key or
  /// table at fault); else load_toml gives the key's line.
  bool positioned = false;
};

/// The line a TOML node starts on (1-based, toml++ source positions).
uint32_t line_of(const toml::node& n) { return static_cast<uint32_t>(n.source().begin.line); }

bool load_forward(const toml::node& v, SwitchConfig* cfg, std::string* err) {
  std::string s;
  if (!get_str(v, "forward", &s, err)) return false;
  auto f = parse_forward(s);
  if (!f) { *err = fmt::format("forward '{}' (bridge or xconnect)", s); return false; }
  cfg->forward = *f;
  return true;
}

bool load_pmd_cores(const toml::node& v, SwitchConfig* cfg, std::string* err) {
  std::string s;
  if (!get_str(v, "pmd_cores", &s, err)) return false;
  auto c = parse_cpu_list(s);
  if (!c) { *err = fmt::format("pmd_cores '{}' is not a CPU list", s); return false; }
  if (const auto twice = repeated_cpu(s)) {
    *err = fmt::format("pmd_cores '{}': CPU {} is given twice (one PMD thread per CPU)", s, *twice);
    return false;
  }
  cfg->pmd_cores = *c;
  return true;
}

bool load_pmd_mode(const toml::node& v, SwitchConfig* cfg, std::string* err) {
  std::string s;
  if (!get_str(v, "pmd_mode", &s, err)) return false;
  auto m = parse_pmd_mode(s);
  if (!m) { *err = fmt::format("pmd_mode '{}' (poll, interrupt or adaptive)", s); return false; }
  cfg->pmd.mode = *m;
  return true;
}

bool load_pmd_rxq_assign(const toml::node& v, SwitchConfig* cfg, std::string* err) {
  std::string s;
  if (!get_str(v, "pmd_rxq_assign", &s, err)) return false;
  if (s == "roundrobin") cfg->pmd.rxq_assign = dp::RxqAssign::kRoundRobin;
  else if (s == "cycles") cfg->pmd.rxq_assign = dp::RxqAssign::kCycles;
  else { *err = fmt::format("pmd_rxq_assign '{}' (roundrobin or cycles)", s); return false; }
  return true;
}

bool load_pmd_rx_writers(const toml::node& v, SwitchConfig* cfg, std::string* err) {
  std::string s;
  if (!get_str(v, "pmd_rx_writers", &s, err)) return false;
  if (s == "follow" || s == "fixed") cfg->pmd.follow_writers = s == "follow";
  else { *err = fmt::format("pmd_rx_writers '{}' (follow or fixed)", s); return false; }
  return true;
}

bool load_socket_mode(const toml::node& v, SwitchConfig* cfg, std::string* err) {
  uint32_t m;
  if (!get_int<uint32_t>(v, "socket_mode", 0, 0777, &m, err)) return false;
  cfg->socket_mode = m;
  return true;
}

bool load_socket_owner(const toml::node& v, SwitchConfig* cfg, std::string* err) {
  std::string s;
  if (!get_str(v, "socket_owner", &s, err)) return false;
  cfg->socket_owner = s;
  return true;
}

bool load_socket_group(const toml::node& v, SwitchConfig* cfg, std::string* err) {
  std::string s;
  if (!get_str(v, "socket_group", &s, err)) return false;
  cfg->socket_group = s;
  return true;
}

bool load_max_guest_memory(const toml::node& v, SwitchConfig* cfg, std::string* err) {
  uint64_t g;
  if (!get_int<uint64_t>(v, "max_guest_memory_gib", 1, 1u << 16, &g, err)) return false;
  cfg->max_guest_memory = g << 30;
  return true;
}

bool load_max_total_guest_memory(const toml::node& v, SwitchConfig* cfg, std::string* err) {
  uint64_t g;
  if (!get_int<uint64_t>(v, "max_total_guest_memory_gib", 1, 1u << 17, &g, err)) return false;
  cfg->max_total_guest_memory = g << 30;
  return true;
}

bool load_tx_retry(const toml::node& v, SwitchConfig* cfg, std::string* err) {
  uint32_t us;
  if (!get_int<uint32_t>(v, "tx_retry_us", 0, port::kMaxTxRetryUs, &us, err)) return false;
  cfg->tx_retry_us = us;
  return true;
}

bool load_completion_coalesce(const toml::node& v, SwitchConfig* cfg, std::string* err) {
  uint32_t us;
  if (!get_int<uint32_t>(v, "completion_coalesce_us", 0, port::kMaxCompletionCoalesceUs, &us, err))
    return false;
  cfg->completion_coalesce_us = us;
  return true;
}

/// [[port]] tables. An error says "LINE: port NAME: ..." (NAME "#N", the N-th table, when
/// it has no name yet).
bool load_ports(const toml::node& v, SwitchConfig* cfg, std::string* err) {
  const toml::array* arr = v.as_array();
  if (!arr) {
    *err = fmt::format("{}: 'port' must be an array of tables ([[port]])", line_of(v));
    return false;
  }
  size_t n = 0;
  for (auto&& e : *arr) {
    ++n;
    const toml::table* t = e.as_table();
    if (!t) {
      *err = fmt::format("{}: 'port' entries must be tables", line_of(e));
      return false;
    }
    port::PortConfig pc;
    std::string flush;
    const toml::node* where = t;
    if (!load_port(*t, &pc, &flush, err, &where)) {
      const auto name = (*t)["name"].value<std::string>();
      const std::string who = fmt::format("port {}: ", name ? *name : fmt::format("#{}", n));
      if (err->rfind(who, 0) == 0) err->erase(0, who.size());  // (a vxlan argument's says so)
      *err = fmt::format("{}: {}{}", line_of(*where), who, *err);
      return false;
    }
    if (!flush.empty()) cfg->port_flush[pc.name] = flush;
    cfg->ports.push_back(pc);
  }
  return true;
}

/// [[link]] tables with keys a and b. An error says "LINE: link: ...".
bool load_links(const toml::node& v, SwitchConfig* cfg, std::string* err) {
  const toml::array* arr = v.as_array();
  if (!arr) {
    *err = fmt::format("{}: 'link' must be an array of tables ([[link]])", line_of(v));
    return false;
  }
  for (auto&& e : *arr) {
    const toml::table* t = e.as_table();
    if (!t) {
      *err = fmt::format("{}: 'link' entries must be tables", line_of(e));
      return false;
    }
    std::string a, b;
    for (auto&& [lk, lv] : *t) {
      const std::string k2(lk.str());
      const bool ok = k2 == "a"   ? get_str(lv, "a", &a, err)
                      : k2 == "b" ? get_str(lv, "b", &b, err)
                                  : (*err = fmt::format("unknown link key '{}' (a, b)", k2), false);
      if (!ok) {
        *err = fmt::format("{}: link: {}", line_of(lv), *err);
        return false;
      }
    }
    if (a.empty() || b.empty()) {
      *err = fmt::format("{}: link: every [[link]] needs a and b (port names)", line_of(*t));
      return false;
    }
    cfg->links.emplace_back(a, b);
  }
  return true;
}

// Every top-level key (config.h load_toml lists them).
constexpr RootKey kRootKeys[] = {
    {"forward", load_forward},
    {"pmd_cores", load_pmd_cores},
    {"pmd_mode", load_pmd_mode},
    {"pmd_rxq_assign", load_pmd_rxq_assign},
    {"pmd_rx_writers", load_pmd_rx_writers},
    {"pmd_idle_us",
     [](const toml::node& v, SwitchConfig* c, std::string* e) {
       return get_int<uint32_t>(v, "pmd_idle_us", 1, 10000000, &c->pmd.idle_us, e);
     }},
    {"flush",
     [](const toml::node& v, SwitchConfig* c, std::string* e) {
       return get_str(v, "flush", &c->flush, e);
     }},
    {"control",
     [](const toml::node& v, SwitchConfig* c, std::string* e) {
       return get_str(v, "control", &c->control_path, e);
     }},
    {"control_mode",
     [](const toml::node& v, SwitchConfig* c, std::string* e) {
       return get_int<uint32_t>(v, "control_mode", 0, 0777, &c->control_mode, e);
     }},
    {"control_owner",
     [](const toml::node& v, SwitchConfig* c, std::string* e) {
       return get_str(v, "control_owner", &c->control_owner, e);
     }},
    {"control_group",
     [](const toml::node& v, SwitchConfig* c, std::string* e) {
       return get_str(v, "control_group", &c->control_group, e);
     }},
    {"log_file",
     [](const toml::node& v, SwitchConfig* c, std::string* e) {
       return get_str(v, "log_file", &c->log_file, e);
     }},
    {"metrics",
     [](const toml::node& v, SwitchConfig* c, std::string* e) {
       return get_str(v, "metrics", &c->metrics, e);
     }},
    {"vlans",
     [](const toml::node& v, SwitchConfig* c, std::string* e) {
       const auto b = v.value<bool>();
       if (!b) *e = "'vlans' must be true or false";
       else c->vlans = *b;
       return b.has_value();
     }},
    {"mac_aging_s",
     [](const toml::node& v, SwitchConfig* c, std::string* e) {
       return get_int<uint32_t>(v, "mac_aging_s", 1, 1000000, &c->mac_aging_s, e);
     }},
    {"mac_table_buckets",
     [](const toml::node& v, SwitchConfig* c, std::string* e) {
       return get_int<uint32_t>(v, "mac_table_buckets", 1, 1u << 24, &c->fdb_buckets, e);
     }},
    {"mac_limit",
     [](const toml::node& v, SwitchConfig* c, std::string* e) {
       return get_int<uint32_t>(v, "mac_limit", 1, 1u << 27, &c->mac_limit, e);
     }},
    {"socket_mode", load_socket_mode},
    {"socket_owner", load_socket_owner},
    {"socket_group", load_socket_group},
    {"max_guest_memory_gib", load_max_guest_memory},
    {"max_total_guest_memory_gib", load_max_total_guest_memory},
    {"tx_retry_us", load_tx_retry},
    {"completion_coalesce_us", load_completion_coalesce},
    {"burst",
     [](const toml::node& v, SwitchConfig* c, std::string* e) {
       return get_int<uint32_t>(v, "burst", 1, dp::kMaxBurst, &c->burst, e);
     }},
    {"port", load_ports, true},
    {"link", load_links, true},
};

const RootKey* find_root_key(std::string_view key) {
  for (const RootKey& k : kRootKeys)
    if (k.name == key) return &k;
  return nullptr;
}

}  // namespace

bool load_toml(const std::string& file, SwitchConfig* out, std::string* err) {
  toml::table root;
  try {
    root = toml::parse_file(file);
  } catch (const toml::parse_error& e) {
    *err = fmt::format("{}:{}: {}", file, e.source().begin.line, e.description());
    return false;
  }
  SwitchConfig cfg = *out;
  // Errors say FILE:LINE: (the line of the key, or of the [[port]] key or table at fault).
  for (auto&& [k, v] : root) {
    const RootKey* key = find_root_key(k.str());
    if (!key) {
      *err = fmt::format("{}:{}: unknown key '{}'", file, line_of(v), k.str());
      return false;
    }
    if (!key->load(v, &cfg, err)) {
      *err = key->positioned ? fmt::format("{}:{}", file, *err)
                             : fmt::format("{}:{}: {}", file, line_of(v), *err);
      return false;
    }
  }
  *out = std::move(cfg);
  return true;
}

void apply_port_defaults(SwitchConfig* cfg) {
  for (auto& p : cfg->ports) {
    if (cfg->socket_mode && !(p.explicit_keys & port::kKeySocketMode)) p.socket_mode = *cfg->socket_mode;
    if (cfg->socket_owner && !(p.explicit_keys & port::kKeySocketOwner)) p.socket_owner = *cfg->socket_owner;
    if (cfg->socket_group && !(p.explicit_keys & port::kKeySocketGroup)) p.socket_group = *cfg->socket_group;
    if (cfg->max_guest_memory && !(p.explicit_keys & port::kKeyMaxGuestMemory))
      p.max_guest_memory = *cfg->max_guest_memory;
    if (cfg->tx_retry_us && !(p.explicit_keys & port::kKeyTxRetry)) p.tx_retry_us = *cfg->tx_retry_us;
    if (cfg->completion_coalesce_us && !(p.explicit_keys & port::kKeyCompletionCoalesce))
      p.completion_coalesce_us = *cfg->completion_coalesce_us;
  }
}

std::optional<uint32_t> parse_socket_mode(const std::string& s) {
  if (s.empty() || s.size() > 4) return std::nullopt;
  uint32_t m = 0;
  for (char c : s) {
    if (c < '0' || c > '7') return std::nullopt;
    m = m * 8 + static_cast<uint32_t>(c - '0');
  }
  if (m > 0777) return std::nullopt;
  return m;
}

namespace {
/// vxlan ports: each on an uplink port of a kernel interface or a NIC that is in no link,
/// at most 8 on one uplink, one (address, VNI) each; bridge forwarding only.
bool validate_tunnels(const SwitchConfig& cfg, const std::set<std::string>& linked, std::string* err) {
  std::map<std::string, uint32_t> per_uplink;
  std::set<std::pair<uint32_t, uint32_t>> endpoints;
  for (const auto& p : cfg.ports) {
    if (p.type != port::PortType::kVxlan) continue;
    const auto u = std::find_if(cfg.ports.begin(), cfg.ports.end(),
                                [&](const port::PortConfig& x) { return x.name == p.vxlan.uplink; });
    if (u == cfg.ports.end()) {
      *err = fmt::format("port {}: uplink '{}': no such port", p.name, p.vxlan.uplink);
      return false;
    }
    if (u->type == port::PortType::kVhostUser || u->type == port::PortType::kVxlan) {
      *err = fmt::format("port {}: uplink '{}' is a {} port; a tunnel needs tap, af-packet, af-xdp "
                         "or dpdk", p.name, u->name, port::port_type_name(u->type, u->mode));
      return false;
    }
    if (linked.count(u->name)) {
      *err = fmt::format("port {}: its uplink '{}' is in a direct link", p.name, u->name);
      return false;
    }
    if (++per_uplink[u->name] > 8) {
      *err = fmt::format("uplink {}: more than 8 tunnels", u->name);
      return false;
    }
    if (!endpoints.insert({p.vxlan.local_ip, p.vxlan.vni}).second) {
      *err = fmt::format("port {}: another tunnel has the same local address and VNI", p.name);
      return false;
    }
    if (cfg.forward != dp::ForwardMode::kBridge) {
      *err = fmt::format("port {}: vxlan ports need forward bridge", p.name);
      return false;
    }
  }
  return true;
}

/// What the sockets name on this host: owners and groups that exist, and directories that
/// exist for the sockets the switch creates (a vhost-user server port's; the control
/// socket's when given: the default one's directory is made).
bool validate_sockets(const SwitchConfig& cfg, std::string* err) {
  uint32_t id;
  const auto known = [&](const std::string& who, bool group, const std::string& what) {
    if (who.empty() || resolve_id(who, group, &id)) return true;
    *err = fmt::format("{}: unknown socket {} '{}'", what, group ? "group" : "owner", who);
    return false;
  };
  for (const auto& p : cfg.ports) {
    if (p.type != port::PortType::kVhostUser) continue;
    const std::string what = "port " + p.name;
    if (!known(p.socket_owner, false, what) || !known(p.socket_group, true, what)) return false;
    if (p.mode != port::SocketMode::kServer) continue;
    if (std::string e = missing_socket_dir(p.path, "vhost-user socket"); !e.empty()) {
      *err = fmt::format("port {}: {}", p.name, e);
      return false;
    }
  }
  if (!known(cfg.control_owner, false, "control socket") ||
      !known(cfg.control_group, true, "control socket"))
    return false;
  if (!cfg.control_path.empty()) {
    if (std::string e = missing_socket_dir(cfg.control_path, "control socket"); !e.empty()) {
      *err = e;
      return false;
    }
  }
  return true;
}
}  // namespace

bool port_name_ok(const std::string& n, std::string* err) {
  const bool printable = std::all_of(n.begin(), n.end(), [](char ch) {
    return ch > ' ' && ch < 0x7f && ch != '=' && ch != ':';
  });
  // A name that reads as a flag (--if-exists: del-port would take it for the flag and the
  // port could not be deleted) or as the word `all` (set-flush all, fdb all) is refused.
  if (!n.empty() && n.size() <= kMaxPortNameLen && printable && n[0] != '-' && n != "all")
    return true;
  *err = fmt::format("port name '{}': 1 to {} printable characters, without spaces, '=' or ':', "
                     "not starting with '-', and not 'all'",
                     utf8_prefix(n, kMaxPortNameLen), kMaxPortNameLen);
  return false;
}

bool validate(const SwitchConfig& cfg, std::string* err, bool at_start) {
  std::string maddr;
  uint16_t mport;
  if (!cfg.metrics.empty() && !control::MetricsServer::parse_listen(cfg.metrics, &maddr, &mport, err))
    return false;
  if (cfg.ports.size() > port::kMaxPorts) {
    *err = fmt::format("{} ports, at most {}", cfg.ports.size(), port::kMaxPorts);
    return false;
  }
  std::set<std::string> names, paths;
  for (const auto& p : cfg.ports) {
    if (!port_name_ok(p.name, err)) return false;
    if (!names.insert(p.name).second) { *err = fmt::format("port name '{}' used twice", p.name); return false; }
    // A socket path, or an interface or device (one port each), used twice.
    const std::string key = (p.type == port::PortType::kVhostUser ? "socket path '" : "interface '") + p.path + "'";
    if (!paths.insert(key).second) { *err = fmt::format("{} used twice", key); return false; }
  }
  // xconnect pairs ports in the order given, 1<->2, 3<->4, ... (INTERFACES.md): with an odd
  // count the last port would have no peer and drop every frame it receives.
  if (at_start && cfg.forward == dp::ForwardMode::kXconnect && cfg.ports.size() % 2 != 0) {
    *err = fmt::format(
        "forward xconnect pairs ports in the order given (1<->2, 3<->4, ...): port '{}' has no "
        "peer; give an even number of ports (or forward bridge)",
        cfg.ports.back().name);
    return false;
  }
  std::set<std::string> linked;
  for (const auto& [a, b] : cfg.links) {
    if (!names.count(a) || !names.count(b)) {
      *err = fmt::format("link {} {}: no such port", a, b);
      return false;
    }
    if (a == b || !linked.insert(a).second || !linked.insert(b).second) {
      *err = fmt::format("link {} {}: a port can be in one link only, with another port", a, b);
      return false;
    }
  }
  if (cfg.pmd_cores.size() > dp::kMaxPmdThreads) {
    *err = fmt::format("{} PMD cores: at most {} PMD threads", cfg.pmd_cores.size(), dp::kMaxPmdThreads);
    return false;
  }
  if (!cfg.pmd_cores.empty()) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
      for (const int cpu : cfg.pmd_cores) {
        if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed)) {
          *err = fmt::format("PMD core {} is not a CPU this process may run on", cpu);
          return false;
        }
      }
    }
  }
  for (const auto& p : cfg.ports) {
    if (p.vlan && !p.trunks.empty()) {
      *err = fmt::format("port {}: vlan (an access port) and trunks (a trunk) exclude each other", p.name);
      return false;
    }
    if (p.native_vlan && p.trunks.empty()) {
      *err = fmt::format("port {}: native_vlan needs trunks", p.name);
      return false;
    }
  }
  if (!validate_tunnels(cfg, linked, err)) return false;
  if (!validate_sockets(cfg, err)) return false;
  if (!dp::parse_flush_policy(cfg.flush, err)) return false;
  for (const auto& [name, policy] : cfg.port_flush) {
    if (!names.count(name)) {
      *err = fmt::format("flush policy for '{}': no such port", name);
      return false;
    }
    if (!dp::parse_flush_policy(policy, err)) return false;
  }
  return true;
}

}  // namespace vl::app
