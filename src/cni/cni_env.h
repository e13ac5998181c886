#pragma once
// The CNI_* environment a runtime gives a plugin (CNI spec 1.1 "Parameters"), read once and
// validated: command, container ID, network namespace, interface name, CNI_ARGS, CNI_PATH.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cni/cni_error.h"

namespace vl::cni {

struct Env {
  std::string command;       ///< ADD, DEL, CHECK, STATUS, GC, VERSION
  std::string container_id;  ///< CNI_CONTAINERID
  std::string netns;         ///< CNI_NETNS (a path)
  std::string ifname;        ///< CNI_IFNAME
  std::map<std::string, std::string> args;  ///< CNI_ARGS "K=V;K=V"
  std::vector<std::string> path;            ///< CNI_PATH, split at ':'
};

/// Reads the environment through `get` (getenv in the plugin; a map in tests). Validates
/// what `command` needs (ADD and CHECK: container ID, netns, ifname; DEL: container ID and
/// ifname) and the form of what is given: a container ID of letters, digits, '_', '.',
/// '-' starting with a letter or digit (at most 256 bytes), an interface name of 1-15
/// bytes without '/', ':' or whitespace and not "." or "..", CNI_ARGS pairs with '='.
/// False with `*e` (code 4, or 4 for an unknown command).
bool read_env(const std::function<const char*(const char*)>& get, Env* env, Error* e);

}  // namespace vl::cni
