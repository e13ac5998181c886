#include "cni/cni_files.h"

#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace vl::cni {

namespace {

/// A Kubernetes object name (RFC 1123 subdomain): 1-253 bytes of [a-z0-9.-].
bool k8s_name_ok(const std::string& s) {
  if (s.empty() || s.size() > 253 || s[0] == '.') return false;
  for (char ch : s)
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '.' || ch == '-')) return false;
  return true;
}

bool mkdirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string part = dir.substr(0, i);
    if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat st;
  return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

bool pod_files(const NetConf& c, const Env& env, PodFiles* f, Error* e) {
  const auto ns = env.args.find("K8S_POD_NAMESPACE"), pod = env.args.find("K8S_POD_NAME");
  std::string leaf = env.container_id;
  if (ns != env.args.end() && pod != env.args.end()) {
    if (!k8s_name_ok(ns->second) || !k8s_name_ok(pod->second)) {
      *e = {kInvalidConfig, "K8S_POD_NAMESPACE and K8S_POD_NAME must be Kubernetes names ([a-z0-9.-])",
            ns->second + "/" + pod->second};
      return false;
    }
    leaf = ns->second + "_" + pod->second;
  }
  f->dir = c.socket_dir + "/" + leaf;
  f->socket = f->dir + "/" + env.ifname + ".sock";
  f->json = f->dir + "/" + env.ifname + ".json";
  if (f->socket.size() >= sizeof(sockaddr_un{}.sun_path)) {
    *e = {kInvalidConfig,
          fmt::format("the socket path is {} bytes, more than a Unix socket address holds ({})",
                      f->socket.size(), sizeof(sockaddr_un{}.sun_path) - 1),
          f->socket + " (a shorter socketDir, namespace or pod name)"};
    return false;
  }
  return true;
}

bool make_pod_dir(const PodFiles& f, Error* e) {
  if (mkdirs(f.dir)) return true;
  *e = {kIoFailure, fmt::format("cannot create {}: {}", f.dir, strerror(errno)), ""};
  return false;
}

bool write_pod_json(const PodFiles& f, const Json& doc, Error* e) {
  const std::string tmp = f.json + ".tmp";
  {
    std::ofstream o(tmp, std::ios::trunc);
    o << doc.dump(2) << "\n";
    if (!o.flush()) {
      *e = {kIoFailure, fmt::format("cannot write {}", tmp), ""};
      return false;
    }
  }
  if (rename(tmp.c_str(), f.json.c_str()) != 0) {
    *e = {kIoFailure, fmt::format("cannot rename {}: {}", tmp, strerror(errno)), ""};
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

Json read_pod_json(const PodFiles& f) {
  std::ifstream in(f.json);
  if (!in) return Json();
  std::stringstream ss;
  ss << in.rdbuf();
  Json j = Json::parse(ss.str(), nullptr, false);
  return j.is_discarded() ? Json() : j;
}

bool is_socket(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

void remove_dir_if_empty(const PodFiles& f) { rmdir(f.dir.c_str()); }

bool pod_files_of_socket(const NetConf& c, const std::string& path, PodFiles* f) {
  const std::string root = c.socket_dir + "/";
  const size_t slash = path.rfind('/');
  if (path.rfind(root, 0) != 0 || slash == std::string::npos || slash < root.size() ||
      path.find("/..", root.size() - 1) != std::string::npos || path.size() < 5 ||
      path.compare(path.size() - 5, 5, ".sock") != 0 || path.size() - 5 <= slash + 1 ||
      path.find('/', root.size()) != slash)  // exactly one directory below socketDir
    return false;
  f->dir = path.substr(0, slash);
  f->socket = path;
  f->json = path.substr(0, path.size() - 5) + ".json";
  return true;
}

bool remove_pod_files(const PodFiles& f, bool socket_too, Error* e) {
  auto gone = [&](const std::string& p) {
    if (unlink(p.c_str()) == 0 || errno == ENOENT) return true;
    *e = {kIoFailure, fmt::format("cannot remove {}: {}", p, strerror(errno)), ""};
    return false;
  };
  if (!gone(f.json) || !gone(f.json + ".tmp")) return false;
  if (socket_too && is_socket(f.socket) && !gone(f.socket)) return false;
  if (rmdir(f.dir.c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY && errno != EEXIST) {
    *e = {kIoFailure, fmt::format("cannot remove {}: {}", f.dir, strerror(errno)), ""};
    return false;
  }
  return true;
}

}  // namespace vl::cni
