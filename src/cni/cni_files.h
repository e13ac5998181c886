#pragma once
// Where a pod's interface lives on the host: its directory under socketDir (the pod mounts
// it), the vhost-user socket and the JSON file for the application in the pod.
#include <string>

#include "cni/cni_config.h"
#include "cni/cni_env.h"

namespace vl::cni {

struct PodFiles {
  std::string dir;     ///< socketDir/NAMESPACE_POD (K8S_POD_* of CNI_ARGS), else socketDir/CONTAINERID
  std::string socket;  ///< dir/IFNAME.sock
  std::string json;    ///< dir/IFNAME.json
};

/// The files of (`c`, `env`); false with `*e` (code 7) when a Kubernetes name has bytes
/// outside [a-z0-9.-] or the socket path does not fit a Unix socket address (107 bytes).
bool pod_files(const NetConf& c, const Env& env, PodFiles* f, Error* e);

/// Creates the pod's directory (0755, parents as needed). False with `*e` (code 5).
bool make_pod_dir(const PodFiles& f, Error* e);
/// Writes `doc` to f.json atomically (a temporary file renamed over it). False with `*e` (5).
bool write_pod_json(const PodFiles& f, const Json& doc, Error* e);
/// Reads f.json; null when it is missing or not JSON.
Json read_pod_json(const PodFiles& f);
/// Removes the JSON file, the socket when `socket_too` (only if it is a socket: another
/// port's socket at the same path is not this attachment's) and the directory if it is
/// left empty. Missing files are not an error; false with `*e` (5) for any other failure.
bool remove_pod_files(const PodFiles& f, bool socket_too, Error* e);
/// The files of the attachment whose port has socket `path` (GC: the runtime gives no pod
/// names then); false when `path` is not DIR/IFNAME.sock of a directory under socketDir.
bool pod_files_of_socket(const NetConf& c, const std::string& path, PodFiles* f);
/// Removes the pod's directory if nothing is left in it.
void remove_dir_if_empty(const PodFiles& f);
/// Whether `path` is a Unix socket.
bool is_socket(const std::string& path);

}  // namespace vl::cni
