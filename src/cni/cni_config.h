#pragma once
// The network configuration virtlink-cni reads on stdin (docs/kubernetes.md "Network
// configuration"), and the userspace CNI plugin's config where it maps onto it.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cni/cni_error.h"

namespace vl::cni {

inline constexpr const char* kDefaultControl = "/run/virtlink/virtlink.ctl";
inline constexpr const char* kDefaultSocketDir = "/run/virtlink/pods";

/// The cniVersions the plugin speaks, oldest first (0.3.0 to 1.1.0).
const std::vector<std::string>& supported_versions();
/// <0, 0, >0 as version a is older than, the same as, newer than b ("1.0.0" > "0.4.0");
/// an unparsable version is older than any.
int compare_versions(const std::string& a, const std::string& b);

struct NetConf {
  std::string cni_version;
  std::string name;
  std::string type;
  std::string control = kDefaultControl;   ///< the node switch's control socket
  std::string socket_dir = kDefaultSocketDir;
  bool switch_listens = true;  ///< mode "server" (virtlink listens) or "client"
  uint16_t vlan = 0;           ///< access VLAN of the pods' ports (0: none)
  std::optional<uint32_t> vni;  ///< checked against the node's vxlan ports
  uint32_t mtu = 0;             ///< bytes (0: the switch's default)
  std::optional<bool> offloads;
  bool spoof_check = true;      ///< port_security = the pod's MAC
  std::string runtime_mac;      ///< runtimeConfig.mac (capability "mac")
  /// GC (1.1): cni.dev/valid-attachments, as (container ID, ifname).
  std::vector<std::pair<std::string, std::string>> valid_attachments;
  Json ipam;         ///< the ipam object (null: no IP addresses)
  Json prev_result;  ///< CHECK and DEL: prevResult (null when absent)
  Json raw;          ///< the whole config as given (delegated to the IPAM plugin)
};

/// Parses and checks the network configuration: a JSON object (else code 6) with a
/// supported cniVersion (else 1), a name, and fields in range (else 7): mode server|client,
/// socketDir and control absolute paths without "..", vlan 1-4094, vni 1-16777215, mtu
/// 68-65535. A userspace CNI config (a "host" object with iftype vhostuser and
/// vhost.mode) maps onto mode; other iftypes are refused (2). Unknown fields are ignored.
bool parse_netconf(const std::string& text, NetConf* c, Error* e);

}  // namespace vl::cni
