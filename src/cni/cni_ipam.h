#pragma once
// Delegation to an IPAM plugin (CNI spec 1.1 "Delegated plugins"): the plugin named by the
// config's ipam.type, found in CNI_PATH, run with the same environment and config.
#include "cni/cni_config.h"
#include "cni/cni_env.h"

namespace vl::cni {

/// Runs the IPAM plugin for `command` (ADD, DEL, CHECK) with `c`'s config on its stdin
/// (cniVersion 1.1.0 given as 1.0.0, whose results are the same, for plugins of 1.0).
/// ADD: `*out` is its result. False with `*e`: the plugin's own error object when it
/// printed one, else code 5 (not found in CNI_PATH, did not run, printed no JSON).
/// A config without ipam does nothing (true, `*out` null). The plugin gets `env`'s container
/// ID and ifname as CNI_CONTAINERID and CNI_IFNAME.
bool run_ipam(const Env& env, const std::string& command, const NetConf& c, Json* out, Error* e);

}  // namespace vl::cni
