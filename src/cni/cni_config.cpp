#include "cni/cni_config.h"

#include <cstdio>

#include <fmt/format.h>

namespace vl::cni {

const std::vector<std::string>& supported_versions() {
  static const std::vector<std::string> v = {"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"};
  return v;
}

int compare_versions(const std::string& a, const std::string& b) {
  auto parse = [](const std::string& s, int out[3]) {
    char tail = 0;
    return std::sscanf(s.c_str(), "%d.%d.%d%c", &out[0], &out[1], &out[2], &tail) == 3;
  };
  int x[3] = {-1, 0, 0}, y[3] = {-1, 0, 0};
  if (!parse(a, x)) x[0] = -1;
  if (!parse(b, y)) y[0] = -1;
  for (int i = 0; i < 3; ++i)
    if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
  return 0;
}

namespace {

/// An absolute path without ".." components or control characters.
bool abs_path_ok(const std::string& p) {
  if (p.empty() || p[0] != '/' || p.find("/../") != std::string::npos ||
      (p.size() >= 3 && p.compare(p.size() - 3, 3, "/..") == 0))
    return false;
  for (char ch : p)
    if (static_cast<unsigned char>(ch) < ' ' || ch == 0x7f) return false;
  return true;
}

template <class T>
bool get_uint(const Json& j, const char* key, uint64_t lo, uint64_t hi, T* out, Error* e) {
  if (!j.contains(key)) return true;
  const Json& v = j[key];
  if (!v.is_number_unsigned() || v.get<uint64_t>() < lo || v.get<uint64_t>() > hi) {
    *e = {kInvalidConfig, fmt::format("'{}' must be a number in {}..{}", key, lo, hi), v.dump()};
    return false;
  }
  *out = static_cast<T>(v.get<uint64_t>());
  return true;
}

bool get_string(const Json& j, const char* key, std::string* out, Error* e) {
  if (!j.contains(key)) return true;
  if (!j[key].is_string()) {
    *e = {kInvalidConfig, fmt::format("'{}' must be a string", key), j[key].dump()};
    return false;
  }
  *out = j[key].get<std::string>();
  return true;
}

bool get_bool(const Json& j, const char* key, bool* out, Error* e) {
  if (!j.contains(key)) return true;
  if (!j[key].is_boolean()) {
    *e = {kInvalidConfig, fmt::format("'{}' must be true or false", key), j[key].dump()};
    return false;
  }
  *out = j[key].get<bool>();
  return true;
}

/// mode, or the userspace CNI plugin's host.iftype and host.vhost.mode.
bool read_mode(const Json& j, NetConf* c, Error* e) {
  std::string mode = "server";
  if (const auto h = j.find("host"); h != j.end() && h->is_object()) {
    const std::string iftype = h->value("iftype", std::string("vhostuser"));
    if (iftype != "vhostuser") {
      *e = {kUnsupportedField, fmt::format("host.iftype '{}': virtlink-cni makes vhost-user ports only", iftype),
            "iftype vhostuser"};
      return false;
    }
    if (const auto v = h->find("vhost"); v != h->end() && v->is_object() && v->contains("mode"))
      if (!get_string(*v, "mode", &mode, e)) return false;
  }
  if (!get_string(j, "mode", &mode, e)) return false;
  if (mode != "server" && mode != "client") {
    *e = {kInvalidConfig, "'mode' must be \"server\" (virtlink listens) or \"client\"", mode};
    return false;
  }
  c->switch_listens = mode == "server";
  return true;
}

bool read_paths(const Json& j, NetConf* c, Error* e) {
  if (!get_string(j, "control", &c->control, e) || !get_string(j, "socketDir", &c->socket_dir, e))
    return false;
  for (const auto* p : {&c->control, &c->socket_dir}) {
    if (!abs_path_ok(*p)) {
      *e = {kInvalidConfig, "'control' and 'socketDir' must be absolute paths without '..'", *p};
      return false;
    }
  }
  while (c->socket_dir.size() > 1 && c->socket_dir.back() == '/') c->socket_dir.pop_back();
  return true;
}

bool read_runtime(const Json& j, NetConf* c, Error* e) {
  if (const auto rc = j.find("runtimeConfig"); rc != j.end() && rc->is_object())
    if (!get_string(*rc, "mac", &c->runtime_mac, e)) return false;
  if (const auto va = j.find("cni.dev/valid-attachments"); va != j.end()) {
    if (!va->is_array()) {
      *e = {kInvalidConfig, "'cni.dev/valid-attachments' must be an array", ""};
      return false;
    }
    for (const Json& a : *va) {
      if (!a.is_object() || !a.value("containerID", Json()).is_string() || !a.value("ifname", Json()).is_string()) {
        *e = {kInvalidConfig, "each valid attachment needs containerID and ifname strings", a.dump()};
        return false;
      }
      c->valid_attachments.emplace_back(a["containerID"].get<std::string>(), a["ifname"].get<std::string>());
    }
  }
  return true;
}

}  // namespace

bool parse_netconf(const std::string& text, NetConf* c, Error* e) {
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    *e = {kDecodeFailure, "the network configuration on stdin is not a JSON object", ""};
    return false;
  }
  if (!get_string(j, "cniVersion", &c->cni_version, e) || !get_string(j, "name", &c->name, e) ||
      !get_string(j, "type", &c->type, e))
    return false;
  const auto& sv = supported_versions();
  if (std::find(sv.begin(), sv.end(), c->cni_version) == sv.end()) {
    *e = {kIncompatibleVersion, fmt::format("cniVersion '{}' is not supported", c->cni_version),
          "supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"};
    return false;
  }
  if (c->name.empty()) {
    *e = {kInvalidConfig, "the network configuration needs a 'name'", ""};
    return false;
  }
  if (!read_mode(j, c, e) || !read_paths(j, c, e) || !get_uint(j, "vlan", 1, 4094, &c->vlan, e) ||
      !get_uint(j, "mtu", 68, 65535, &c->mtu, e) || !get_bool(j, "spoofCheck", &c->spoof_check, e) ||
      !read_runtime(j, c, e))
    return false;
  uint32_t vni = 0;
  if (!get_uint(j, "vni", 1, (1u << 24) - 1, &vni, e)) return false;
  if (vni) c->vni = vni;
  bool off = true;
  if (j.contains("offloads")) {
    if (!get_bool(j, "offloads", &off, e)) return false;
    c->offloads = off;
  }
  if (j.contains("ipam") && !j["ipam"].is_object()) {
    *e = {kInvalidConfig, "'ipam' must be an object", ""};
    return false;
  }
  c->ipam = j.value("ipam", Json());
  c->prev_result = j.value("prevResult", Json());
  c->raw = std::move(j);
  return true;
}

}  // namespace vl::cni
