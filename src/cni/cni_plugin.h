#pragma once
// virtlink-cni's commands (CNI spec 1.1 "Operations"): ADD creates the pod's vhost-user port
// on the node's switch (control socket), its addresses (the IPAM plugin) and its files;
// DEL removes them and is idempotent; CHECK verifies them; STATUS says whether the switch
// answers; GC deletes ports of the network whose attachment is gone; VERSION lists versions.
#include <string>

#include "cni/cni_env.h"

namespace vl::cni {

/// What the plugin prints on stdout and its exit status (0, or 1 with an error object).
struct Outcome {
  int status = 0;
  std::string out;
};

/// Runs `env.command` with the network configuration `stdin_text`.
Outcome run_command(const Env& env, const std::string& stdin_text);

/// The port name of a pod's interface: "cni-" and 16 hex digits of a hash of the container
/// ID and ifname (FNV-1a 64), within the switch's port-name rules.
std::string port_name_for(const std::string& container_id, const std::string& ifname);
/// The pod's MAC when the runtime gives none: locally administered unicast (02:...), the
/// other 40 bits from a hash of the container ID and ifname.
std::string mac_for(const std::string& container_id, const std::string& ifname);

}  // namespace vl::cni
