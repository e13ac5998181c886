// src/util/service_notify.h against a notification socket of the test's own: what systemd
// would receive (sd_notify(3)'s datagrams), and nothing at all without NOTIFY_SOCKET.
#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <string>

#include "util/fd.h"
#include "util/service_notify.h"

namespace vl::service {
namespace {

/// A SOCK_DGRAM socket bound to a fresh path, named by NOTIFY_SOCKET while it lives (the
/// test's environment is restored after).
class NotifySocket {
 public:
  NotifySocket() {
    char dir[] = "/tmp/vl-notify-XXXXXX";
    EXPECT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/notify";
    fd_.reset(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path_.c_str());
    EXPECT_EQ(bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    setenv("NOTIFY_SOCKET", path_.c_str(), 1);
  }
  ~NotifySocket() {
    unsetenv("NOTIFY_SOCKET");
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  /// The next datagram, or "" when none comes within `ms` milliseconds.
  std::string next(int ms = 1000) {
    pollfd p{fd_.get(), POLLIN, 0};
    if (poll(&p, 1, ms) != 1) return "";
    char buf[4096];
    const ssize_t n = recv(fd_.get(), buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }

 private:
  std::string dir_, path_;
  UniqueFd fd_;
};

TEST(ServiceNotify, SendsEachStateAsSystemdReadsIt) {
  NotifySocket s;
  notify_ready("2 port(s)\nforward bridge");  // a newline would start a new assignment
  EXPECT_EQ(s.next(), "READY=1\nSTATUS=2 port(s) forward bridge");
  notify_status("reloaded");
  EXPECT_EQ(s.next(), "STATUS=reloaded");
  notify_reloading();
  const std::string r = s.next();
  EXPECT_EQ(r.rfind("RELOADING=1\nMONOTONIC_USEC=", 0), 0u) << r;
  EXPECT_GT(std::stoull(r.substr(r.find('=', 12) + 1)), 0u) << r;
  notify_stopping();
  EXPECT_EQ(s.next(), "STOPPING=1\nSTATUS=stopping");
}

TEST(ServiceNotify, WatchdogPingsOnlyWhenAskedForThisProcess) {
  NotifySocket s;
  unsetenv("WATCHDOG_USEC");
  unsetenv("WATCHDOG_PID");
  EXPECT_EQ(watchdog_interval_us(), 0u);
  notify_watchdog();
  EXPECT_EQ(s.next(100), "");  // no watchdog asked for: no ping

  setenv("WATCHDOG_USEC", "2000000", 1);
  EXPECT_EQ(watchdog_interval_us(), 2000000u);  // WATCHDOG_PID unset: this process
  notify_watchdog();
  EXPECT_EQ(s.next(), "WATCHDOG=1");

  setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
  EXPECT_EQ(watchdog_interval_us(), 2000000u);
  setenv("WATCHDOG_PID", std::to_string(getpid() + 1).c_str(), 1);  // another process's
  EXPECT_EQ(watchdog_interval_us(), 0u);
  notify_watchdog();
  EXPECT_EQ(s.next(100), "");
  unsetenv("WATCHDOG_USEC");
  unsetenv("WATCHDOG_PID");
}

TEST(ServiceNotify, NothingWithoutNotifySocket) {
  std::string path;
  {
    NotifySocket s;  // bound, but no longer named once NOTIFY_SOCKET is unset
    unsetenv("NOTIFY_SOCKET");
    setenv("WATCHDOG_USEC", "2000000", 1);
    notify_ready("x");
    notify_watchdog();
    notify_stopping();
    EXPECT_EQ(s.next(100), "");
    unsetenv("WATCHDOG_USEC");
  }
}

}  // namespace
}  // namespace vl::service
