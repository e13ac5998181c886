#include "app/successor.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

extern char** environ;

namespace vl::app {

bool successor_binary(const std::string& requested, std::string* path, std::string* err) {
  std::string p = requested;
  if (p.empty()) {
    char buf[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) {
      *err = fmt::format("cannot read /proc/self/exe: {}", strerror(errno));
      return false;
    }
    p.assign(buf, static_cast<size_t>(n));
    // The file was replaced (a package upgrade): the kernel marks the old inode's path.
    const std::string deleted = " (deleted)";
    if (p.size() > deleted.size() && p.compare(p.size() - deleted.size(), deleted.size(), deleted) == 0)
      p.resize(p.size() - deleted.size());
  } else if (p[0] != '/') {
    // The switch's working directory is not the client's: `ctl` sends absolute paths.
    *err = fmt::format("{}: the binary must be an absolute path", p);
    return false;
  }
  char real[PATH_MAX];
  if (!realpath(p.c_str(), real)) {
    *err = fmt::format("{}: {}", p, strerror(errno));
    return false;
  }
  struct stat st;
  if (stat(real, &st) != 0 || !S_ISREG(st.st_mode) || !(st.st_mode & S_IXUSR)) {
    *err = fmt::format("{}: not an executable file", real);
    return false;
  }
  // The default path too: the copy this switch was started from may have been replaced
  // by anyone who could write there.
  if ((st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & (S_IWGRP | S_IWOTH))) {
    *err = fmt::format("{}: refused: the successor's binary must be owned by root or by the "
                       "switch's user (uid {}) and writable by no one else (owner uid {}, mode {:04o})",
                       real, geteuid(), st.st_uid, st.st_mode & 07777);
    return false;
  }
  *path = real;
  return true;
}

std::string successor_gone(pid_t pid, const std::string& when, const std::string& error) {
  int status = 0;
  bool exited = false;
  for (int k = 0; k < 200 && !exited; ++k) {  // up to 1 s for its exit status
    exited = waitpid(pid, &status, WNOHANG) == pid;
    if (!exited) usleep(5000);
  }
  if (!exited) return fmt::format("{}: {}", when, error);
  const std::string how = WIFEXITED(status) ? fmt::format("status {}", WEXITSTATUS(status))
                                            : fmt::format("signal {}", WTERMSIG(status));
  return fmt::format("the successor exited ({}) {}", how, when);
}

std::vector<std::string> successor_argv(const std::string& path) {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t at = 0; at < all.size();) {
    const size_t end = all.find('\0', at);
    args.push_back(all.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  std::vector<std::string> out{path};
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--handover-fd") {
      ++i;  // and its value
      continue;
    }
    if (args[i].rfind("--handover-fd=", 0) == 0) continue;
    out.push_back(args[i]);
  }
  out.push_back("--handover-fd");
  out.push_back(std::to_string(kHandoverFd));
  return out;
}

pid_t spawn_successor(const std::vector<std::string>& argv, int child_end, std::string* err) {
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  // dup2 onto itself would keep close-on-exec: clear it here (the control thread is the
  // only one that starts processes).
  fcntl(child_end, F_SETFD, 0);
  if (child_end != kHandoverFd) posix_spawn_file_actions_adddup2(&fa, child_end, kHandoverFd);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  const int r = posix_spawn(&pid, cargv[0], &fa, &at, cargv.data(), environ);
  fcntl(child_end, F_SETFD, FD_CLOEXEC);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (r != 0) {
    *err = fmt::format("cannot start {}: {}", argv[0], strerror(r));
    return -1;
  }
  return pid;
}

}  // namespace vl::app
