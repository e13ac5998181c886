#include "cni/cni_plugin.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "cni/cni_config.h"
#include "cni/cni_files.h"
#include "cni/cni_ipam.h"
#include "control/control_server.h"

namespace vl::cni {

namespace {

uint64_t fnv1a(const std::string& a, const std::string& b, uint64_t seed) {
  uint64_t h = 14695981039346656037ull ^ seed;
  for (const std::string* s : {&a, &b}) {
    for (unsigned char ch : *s) h = (h ^ ch) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;  // a separator no name contains
  }
  return h;
}

// External ids that tie a port to its attachment (ctl ports --json "external_ids").
constexpr const char* kIdContainer = "cni_container_id";
constexpr const char* kIdIfname = "cni_ifname";
constexpr const char* kIdNetwork = "cni_network";

/// One request to the node's switch. An unreachable switch is code 11 (try again later),
/// a refusal code 100 with the switch's message.
bool ask(const NetConf& c, const std::string& cmd, const std::vector<std::string>& argv, Json* result, Error* e) {
  Json args = Json::object();
  if (!argv.empty()) args["argv"] = argv;
  std::string err;
  if (control::request(c.control, cmd, args, result, &err)) return true;
  const bool unreachable = err.rfind("cannot reach", 0) == 0 || err.rfind("no reply", 0) == 0 ||
                           err.rfind("malformed", 0) == 0;
  *e = {unreachable ? kTryAgainLater : kSwitchRefused,
        unreachable ? fmt::format("the switch is not reachable at {}", c.control)
                    : fmt::format("the switch refused {}: {}", cmd, err),
        err};
  return false;
}

bool mac_ok(const std::string& m) {
  unsigned b[6];
  char tail = 0;
  return m.size() == 17 &&
         std::sscanf(m.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &tail) == 6 &&
         !(b[0] & 1) && (b[0] | b[1] | b[2] | b[3] | b[4] | b[5]) != 0;
}

/// The pod's MAC: CNI_ARGS MAC, else runtimeConfig.mac, else mac_for(); lower case.
bool pod_mac(const NetConf& c, const Env& env, std::string* mac, Error* e) {
  const auto a = env.args.find("MAC");
  *mac = a != env.args.end() ? a->second : !c.runtime_mac.empty() ? c.runtime_mac : mac_for(env.container_id, env.ifname);
  for (char& ch : *mac) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (mac_ok(*mac)) return true;
  *e = {kInvalidConfig, "the MAC given (CNI_ARGS MAC or runtimeConfig.mac) is not a unicast MAC", *mac};
  return false;
}

const Json* find_port(const Json& ports, const std::string& name) {
  if (!ports.is_array()) return nullptr;
  for (const Json& p : ports)
    if (p.is_object() && p.value("name", std::string()) == name) return &p;
  return nullptr;
}

std::string ext_id(const Json& port, const char* key) {
  const Json& ids = port.value("external_ids", Json::object());
  return ids.is_object() ? ids.value(key, std::string()) : std::string();
}

bool ours(const Json& port, const Env& env) {
  return ext_id(port, kIdContainer) == env.container_id && ext_id(port, kIdIfname) == env.ifname;
}

bool carries(const Json& vlan, uint16_t v) {
  const std::string mode = vlan.value("mode", std::string("all"));
  if (mode == "access") return vlan.value("vlan", 0) == v;
  if (mode != "trunk") return v == 0;
  for (const Json& t : vlan.value("trunks", Json::array()))
    if (t.is_number() && t.get<int>() == v) return true;
  return vlan.value("native_vlan", 0) == v && v != 0;
}

/// With a vni: the node's switch has a vxlan port of that VNI carrying the network's VLAN.
bool check_tunnel(const NetConf& c, const Json& ports, Error* e) {
  if (!c.vni) return true;
  for (const Json& p : ports) {
    const Json& t = p.value("tunnel", Json::object());
    if (t.is_object() && t.value("vni", 0u) == *c.vni && carries(p.value("vlan", Json::object()), c.vlan))
      return true;
  }
  *e = {kInvalidConfig,
        fmt::format("network {}: this node's switch has no vxlan port with vni {} carrying VLAN {}", c.name,
                    *c.vni, c.vlan),
        "the node's switch configuration creates the tunnels (docs/kubernetes.md)"};
  return false;
}

std::vector<std::string> add_port_argv(const NetConf& c, const Env& env, const PodFiles& f, const std::string& mac) {
  std::vector<std::string> a = {port_name_for(env.container_id, env.ifname),
                                c.switch_listens ? "vhost-user" : "vhost-user-client", f.socket};
  if (c.vlan) a.push_back(fmt::format("vlan={}", c.vlan));
  if (c.mtu) a.push_back(fmt::format("mtu={}", c.mtu));
  if (c.offloads) a.push_back(*c.offloads ? "offloads=on" : "offloads=off");
  if (c.spoof_check) a.push_back("port_security=" + mac);
  a.push_back(fmt::format("external-id:{}={}", kIdContainer, env.container_id));
  a.push_back(fmt::format("external-id:{}={}", kIdIfname, env.ifname));
  a.push_back(fmt::format("external-id:{}={}", kIdNetwork, c.name));
  return a;
}

/// The CNI result of ADD: the interface (with the 1.1 socketPath) and IPAM's addresses on it.
Json make_result(const NetConf& c, const Env& env, const PodFiles& f, const std::string& mac, const Json& ipam) {
  Json r = {{"cniVersion", c.cni_version},
            {"interfaces", Json::array({{{"name", env.ifname}, {"mac", mac}, {"sandbox", env.netns},
                                         {"socketPath", f.socket}}})},
            {"ips", Json::array()}};
  if (ipam.is_object()) {
    for (Json ip : ipam.value("ips", Json::array())) {
      ip["interface"] = 0;
      r["ips"].push_back(std::move(ip));
    }
    if (ipam.contains("routes")) r["routes"] = ipam["routes"];
    if (ipam.contains("dns")) r["dns"] = ipam["dns"];
  }
  return r;
}

/// The JSON file for the application in the pod (docs/kubernetes.md "In the pod").
Json pod_doc(const NetConf& c, const Env& env, const PodFiles& f, const std::string& mac, const Json& result) {
  Json ips = Json::array();
  std::string gateway;
  for (const Json& ip : result["ips"]) {
    ips.push_back(ip.value("address", std::string()));
    if (gateway.empty()) gateway = ip.value("gateway", std::string());
  }
  return {{"network", c.name},  {"ifname", env.ifname},
          {"socket", env.ifname + ".sock"}, {"hostSocketPath", f.socket},
          {"mode", c.switch_listens ? "client" : "server"},
          {"mac", mac}, {"mtu", c.mtu}, {"vlan", c.vlan}, {"ips", ips}, {"gateway", gateway},
          {"routes", result.value("routes", Json::array())}, {"result", result}};
}

Outcome fail(const Error& e, const NetConf& c) { return {1, error_json(e, c.cni_version).dump() + "\n"}; }

}  // namespace

std::string port_name_for(const std::string& container_id, const std::string& ifname) {
  return fmt::format("cni-{:016x}", fnv1a(container_id, ifname, 0));
}

std::string mac_for(const std::string& container_id, const std::string& ifname) {
  const uint64_t h = fnv1a(container_id, ifname, 0x9e3779b97f4a7c15ull);
  return fmt::format("02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", (h >> 32) & 0xff, (h >> 24) & 0xff,
                     (h >> 16) & 0xff, (h >> 8) & 0xff, h & 0xff);
}

namespace {

/// ADD's steps after the switch has answered: addresses, directory, port, file; each step's
/// failure undoes the ones before it (a socket or file already at the pod's paths is another
/// attachment's: the switch refused the port, and they stay).
Outcome add_attachment(const NetConf& c, const Env& env, const PodFiles& f, const std::string& mac) {
  Error e, ignored;
  Json ipam, r;
  if (!run_ipam(env, "ADD", c, &ipam, &e)) return fail(e, c);
  auto undo_ipam = [&] {
    Json none;
    run_ipam(env, "DEL", c, &none, &ignored);
  };
  if (!make_pod_dir(f, &e) || !ask(c, "add-port", add_port_argv(c, env, f, mac), &r, &e)) {
    undo_ipam();
    remove_dir_if_empty(f);
    return fail(e, c);
  }
  const Json result = make_result(c, env, f, mac, ipam);
  if (!write_pod_json(f, pod_doc(c, env, f, mac, result), &e)) {
    ask(c, "del-port", {"--if-exists", port_name_for(env.container_id, env.ifname)}, &r, &ignored);
    undo_ipam();
    remove_dir_if_empty(f);
    return fail(e, c);
  }
  return {0, result.dump() + "\n"};
}

Outcome cmd_add(const NetConf& c, const Env& env) {
  Error e;
  PodFiles f;
  std::string mac;
  Json ports;
  if (!pod_files(c, env, &f, &e) || !pod_mac(c, env, &mac, &e) || !ask(c, "ports", {}, &ports, &e) ||
      !check_tunnel(c, ports, &e))
    return fail(e, c);
  if (const Json* p = find_port(ports, port_name_for(env.container_id, env.ifname))) {
    e = {kInvalidConfig,
         ours(*p, env) ? "this container's interface is already added (DEL it first)"
                       : "another attachment holds this interface's port name",
         p->value("name", std::string())};
    return fail(e, c);
  }
  return add_attachment(c, env, f, mac);
}

/// DEL: everything of the attachment that exists goes; what is already gone is no error.
/// An unreachable switch still lets the addresses and files go, then says so (code 11, so
/// that the runtime tries again and the port goes too).
Outcome cmd_del(const NetConf& c, const Env& env) {
  Error e, first;
  PodFiles f;
  if (!pod_files(c, env, &f, &e)) return fail(e, c);
  Json ports, r;
  const std::string name = port_name_for(env.container_id, env.ifname);
  // The files at the pod's paths are another attachment's while another port has the
  // socket: they stay. An unreachable switch leaves the socket (it may be a port's).
  bool others = false, known = ask(c, "ports", {}, &ports, &e);
  if (known) {
    const Json* p = find_port(ports, name);
    if (p && ours(*p, env) && !ask(c, "del-port", {"--if-exists", name}, &r, &e)) first = e;
    for (const Json& q : ports)
      others |= q.value("path", std::string()) == f.socket && !(p && &q == p && ours(*p, env));
  } else {
    first = e;
  }
  Json none;
  if (!run_ipam(env, "DEL", c, &none, &e) && !first.code) first = e;
  if (!others && !remove_pod_files(f, known, &e) && !first.code) first = e;
  return first.code ? fail(first, c) : Outcome{};
}

/// CHECK's comparison of the switch's port with what ADD made.
bool check_port(const NetConf& c, const Env& env, const PodFiles& f, const Json& ports, Error* e) {
  const Json* p = find_port(ports, port_name_for(env.container_id, env.ifname));
  auto bad = [&](const std::string& what) {
    *e = {kCheckFailed, what, port_name_for(env.container_id, env.ifname)};
    return false;
  };
  if (!p || !ours(*p, env)) return bad("the switch has no port for this attachment");
  if (p->value("path", std::string()) != f.socket ||
      p->value("type", std::string()) != (c.switch_listens ? "vhost-user" : "vhost-user-client"))
    return bad("the port's socket or mode differs from the network configuration");
  if (!carries(p->value("vlan", Json::object()), c.vlan)) return bad("the port's VLAN differs");
  const Json mac = f.json.empty() ? Json() : read_pod_json(f).value("mac", Json());
  const Json ps = p->value("port_security", Json::array());
  if (c.spoof_check && (ps.size() != 1 || ps[0] != mac)) return bad("the port's port_security is not the pod's MAC");
  if (c.switch_listens && !is_socket(f.socket)) return bad("the port's socket file is missing");
  return true;
}

Outcome cmd_check(const NetConf& c, const Env& env) {
  Error e;
  PodFiles f;
  Json ports;
  if (compare_versions(c.cni_version, "0.4.0") < 0)
    return fail({kIncompatibleVersion, "CHECK needs cniVersion 0.4.0 or newer", c.cni_version}, c);
  if (!c.prev_result.is_object())
    return fail({kInvalidConfig, "CHECK needs prevResult", ""}, c);
  if (!pod_files(c, env, &f, &e)) return fail(e, c);
  const Json doc = read_pod_json(f);
  const Json& ifs = c.prev_result.value("interfaces", Json::array());
  if (!doc.is_object() || !ifs.is_array() || ifs.empty() || !ifs[0].is_object() ||
      ifs[0].value("mac", Json()) != doc.value("mac", Json()) ||
      ifs[0].value("socketPath", Json()) != Json(f.socket))
    return fail({kCheckFailed, "the pod's file is missing or differs from prevResult", f.json}, c);
  if (!ask(c, "ports", {}, &ports, &e) || !check_port(c, env, f, ports, &e) || !check_tunnel(c, ports, &e))
    return fail(e, c);
  Json none;
  if (!run_ipam(env, "CHECK", c, &none, &e)) return fail(e, c);
  return {};
}

/// GC (1.1): ports of this network whose (container, ifname) is not a valid attachment go,
/// with their files and addresses (the IPAM plugin's DEL for each; its own GC is not called:
/// host-local of Debian 12 has none).
Outcome cmd_gc(const NetConf& c, const Env& env) {
  Error e;
  Json ports, r;
  if (!ask(c, "ports", {}, &ports, &e)) return fail(e, c);
  for (const Json& p : ports) {
    if (ext_id(p, kIdNetwork) != c.name || ext_id(p, kIdContainer).empty()) continue;
    const std::pair<std::string, std::string> at{ext_id(p, kIdContainer), ext_id(p, kIdIfname)};
    if (std::find(c.valid_attachments.begin(), c.valid_attachments.end(), at) != c.valid_attachments.end())
      continue;
    if (!ask(c, "del-port", {"--if-exists", p.value("name", std::string())}, &r, &e)) return fail(e, c);
    Env gone = env;  // the attachment's own ids, for the IPAM plugin's DEL
    gone.container_id = at.first;
    gone.ifname = at.second;
    Json none;
    Error ignored;
    run_ipam(gone, "DEL", c, &none, &ignored);
    PodFiles f;  // the runtime gives no pod names to GC: the files are where the socket is
    const std::string path = p.value("path", std::string());
    const bool shared = std::count_if(ports.begin(), ports.end(), [&](const Json& q) {
                          return q.value("path", std::string()) == path;
                        }) > 1;
    if (!shared && pod_files_of_socket(c, path, &f)) remove_pod_files(f, true, &ignored);
  }
  return {};
}

}  // namespace

Outcome run_command(const Env& env, const std::string& stdin_text) {
  NetConf c;
  Error e;
  if (env.command == "VERSION") {
    Json j = Json::parse(stdin_text, nullptr, false);
    const std::string asked = j.is_object() ? j.value("cniVersion", std::string()) : std::string();
    c.cni_version = asked;
    return {0, Json({{"cniVersion", compare_versions(asked, "0.3.0") >= 0 ? asked : supported_versions().back()},
                     {"supportedVersions", supported_versions()}}).dump() + "\n"};
  }
  if (!parse_netconf(stdin_text, &c, &e)) return fail(e, c);
  if (env.command == "ADD") return cmd_add(c, env);
  if (env.command == "DEL") return cmd_del(c, env);
  if (env.command == "CHECK") return cmd_check(c, env);
  if (compare_versions(c.cni_version, "1.1.0") < 0)
    return fail({kIncompatibleVersion, fmt::format("{} needs cniVersion 1.1.0", env.command), c.cni_version}, c);
  if (env.command == "GC") return cmd_gc(c, env);
  Json v;  // STATUS
  if (!ask(c, "version", {}, &v, &e))
    return fail({kNotAvailable, e.msg, e.details}, c);
  return {};
}

}  // namespace vl::cni
