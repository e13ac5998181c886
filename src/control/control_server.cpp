#include "control/control_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "util/unix_socket.h"

namespace vl::control {

namespace {
void set_timeout(int fd, int secs) {
  timeval tv{secs, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

bool read_line(int fd, std::string* out, size_t limit) {
  char buf[4096];
  while (out->size() < limit) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return !out->empty();
    out->append(buf, static_cast<size_t>(n));
    if (out->find('\n') != std::string::npos) return true;
  }
  return false;
}

bool write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}
}  // namespace

bool ControlServer::listen(const std::string& path, std::string* err) {
  sockaddr_un a;
  if (!make_unix_addr(path, &a, err)) return false;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      *err = fmt::format("{} exists and is not a socket", path);
      return false;
    }
    // A live switch answers on it; a stale file from a crashed one does not.
    UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (connect(probe.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      *err = fmt::format("another switch is using the control socket {}", path);
      return false;
    }
    unlink(path.c_str());
  }
  UniqueFd s(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.valid() || bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      chmod(path.c_str(), 0600) != 0 || ::listen(s.get(), 8) != 0) {
    *err = fmt::format("cannot listen on {}: {}", path, strerror(errno));
    return false;
  }
  listen_ = std::move(s);
  path_ = path;
  return true;
}

void ControlServer::close() {
  if (listen_.valid()) {
    listen_.reset();
    unlink(path_.c_str());
  }
}

void ControlServer::serve_one() {
  UniqueFd c(accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!c.valid()) return;
  set_timeout(c.get(), 1);
  std::string line;
  Json reply;
  if (!read_line(c.get(), &line, 1 << 16)) return;
  Json req = Json::parse(line, nullptr, false);
  if (req.is_discarded() || !req.is_object() || !req.contains("cmd") || !req["cmd"].is_string()) {
    reply = {{"ok", false}, {"error", "malformed request"}};
  } else {
    const std::string cmd = req["cmd"];
    auto it = handlers_.find(cmd);
    if (it == handlers_.end()) {
      reply = {{"ok", false}, {"error", fmt::format("unknown command '{}'", cmd)}};
    } else {
      Json result;
      std::string err;
      const Json args = req.contains("args") ? req["args"] : Json::object();
      if (it->second(args, &result, &err)) reply = {{"ok", true}, {"result", result}};
      else reply = {{"ok", false}, {"error", err}};
    }
  }
  write_all(c.get(), reply.dump() + "\n");
}

bool request(const std::string& path, const std::string& cmd, const Json& args, Json* result,
             std::string* err) {
  sockaddr_un a;
  if (!make_unix_addr(path, &a, err)) return false;
  UniqueFd s(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    *err = fmt::format("cannot reach the switch at {}: {}", path, strerror(errno));
    return false;
  }
  set_timeout(s.get(), 5);
  const Json req = {{"cmd", cmd}, {"args", args}};
  std::string line;
  if (!write_all(s.get(), req.dump() + "\n") || !read_line(s.get(), &line, 64u << 20)) {
    *err = "no reply from the switch";
    return false;
  }
  Json reply = Json::parse(line, nullptr, false);
  if (reply.is_discarded() || !reply.is_object()) {
    *err = "malformed reply from the switch";
    return false;
  }
  if (!reply.value("ok", false)) {
    *err = reply.value("error", std::string("unknown error"));
    return false;
  }
  *result = reply["result"];
  return true;
}

}  // namespace vl::control
