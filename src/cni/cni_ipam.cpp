#include "cni/cni_ipam.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>

#include <fmt/format.h>

namespace vl::cni {

namespace {

/// The plugin `type` in CNI_PATH's directories (a plain name: no '/').
std::string find_plugin(const Env& env, const std::string& type) {
  if (type.empty() || type.find('/') != std::string::npos || type == "." || type == "..") return "";
  for (const std::string& d : env.path) {
    const std::string p = d + "/" + type;
    struct stat st;
    if (stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

/// Runs `exe` with CNI_COMMAND=`command`, `input` on its stdin; its stdout in `*out`.
/// Returns its exit status (-1: it did not run, or was killed for a minute without EOF or
/// more than 1 MiB of output).
int run_child(const std::string& exe, const std::string& command, const Env& env,
              const std::string& input, std::string* out) {
  int in[2], o[2];
  if (pipe2(in, O_CLOEXEC) != 0) return -1;
  if (pipe2(o, O_CLOEXEC) != 0) {
    close(in[0]), close(in[1]);
    return -1;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(o[1], 1);
    setenv("CNI_COMMAND", command.c_str(), 1);
    // The attachment's (GC deletes attachments the runtime did not name in its environment).
    if (!env.container_id.empty()) setenv("CNI_CONTAINERID", env.container_id.c_str(), 1);
    if (!env.ifname.empty()) setenv("CNI_IFNAME", env.ifname.c_str(), 1);
    execl(exe.c_str(), exe.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(in[0]);
  close(o[1]);
  signal(SIGPIPE, SIG_IGN);
  if (pid > 0) {
    for (size_t off = 0; off < input.size();) {
      const ssize_t n = write(in[1], input.data() + off, input.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
  }
  close(in[1]);
  // Its output until EOF, at most kMaxOutput bytes and kTimeoutMs: a plugin that hangs or
  // floods is killed (an IPAM result is a few hundred bytes, in milliseconds).
  constexpr size_t kMaxOutput = 1u << 20;
  constexpr int kTimeoutMs = 60000;
  char buf[4096];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
  bool killed = false;
  while (pid > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd pf{o[0], POLLIN, 0};
    const int r = left.count() > 0 ? poll(&pf, 1, static_cast<int>(left.count())) : 0;
    if (r < 0 && errno == EINTR) continue;
    const ssize_t n = r > 0 ? read(o[0], buf, sizeof buf) : -1;
    if (n < 0 && r > 0 && errno == EINTR) continue;
    if (n == 0) break;
    if (n < 0 || out->size() + static_cast<size_t>(n) > kMaxOutput) {
      kill(pid, SIGKILL);
      killed = true;
      break;
    }
    out->append(buf, static_cast<size_t>(n));
  }
  close(o[0]);
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid || killed) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace

bool run_ipam(const Env& env, const std::string& command, const NetConf& c, Json* out, Error* e) {
  *out = Json();
  if (c.ipam.is_null()) return true;
  const std::string type = c.ipam.value("type", std::string());
  const std::string exe = find_plugin(env, type);
  if (exe.empty()) {
    *e = {kIoFailure, fmt::format("IPAM plugin '{}' not found in CNI_PATH", type), ""};
    return false;
  }
  Json conf = c.raw;
  if (compare_versions(c.cni_version, "1.0.0") > 0) conf["cniVersion"] = "1.0.0";
  std::string text;
  const int status = run_child(exe, command, env, conf.dump(), &text);
  Json j = Json::parse(text, nullptr, false);
  if (status == 0) {
    if (command == "ADD" && (j.is_discarded() || !j.is_object())) {
      *e = {kIoFailure, fmt::format("IPAM plugin '{}' printed no result", type), text.substr(0, 200)};
      return false;
    }
    if (command == "ADD") *out = std::move(j);
    return true;
  }
  if (j.is_object() && j.value("code", Json()).is_number_unsigned() && j.value("msg", Json()).is_string()) {
    *e = {j["code"].get<int>(), fmt::format("IPAM plugin '{}': {}", type, j["msg"].get<std::string>()),
          j.value("details", std::string())};
    return false;
  }
  *e = {kIoFailure, fmt::format("IPAM plugin '{}' failed (exit status {})", type, status), text.substr(0, 200)};
  return false;
}

}  // namespace vl::cni
