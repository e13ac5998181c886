#include "util/service_notify.h"

#include <systemd/sd-daemon.h>

#include <atomic>
#include <string>

#include "util/clock.h"
#include "util/log.h"

namespace vl::service {

namespace {

/// sd_notify(3) with `state` (newline-separated KEY=VALUE assignments). A send that fails
/// (the manager's socket gone) is logged once; NOTIFY_SOCKET unset is not a failure.
void send(const std::string& state) {
  const int r = sd_notify(0, state.c_str());
  static std::atomic<bool> warned{false};
  if (r < 0 && !warned.exchange(true))
    spdlog::warn("sd_notify to NOTIFY_SOCKET failed: {} (no further warnings)", -r);
}

/// STATUS= carries one line: a newline would start another assignment.
std::string one_line(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c == '\n') c = ' ';
  return out;
}

}  // namespace

void notify_ready(std::string_view status) { send("READY=1\nSTATUS=" + one_line(status)); }

void notify_status(std::string_view status) { send("STATUS=" + one_line(status)); }

void notify_main_pid(long pid, std::string_view status) {
  send("MAINPID=" + std::to_string(pid) + "\nREADY=1\nSTATUS=" + one_line(status));
}

void notify_reloading() { send("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(mono_us())); }

void notify_stopping() { send("STOPPING=1\nSTATUS=stopping"); }

void notify_watchdog() {
  if (watchdog_interval_us() > 0) send("WATCHDOG=1");
}

uint64_t watchdog_interval_us() {
  uint64_t us = 0;
  return sd_watchdog_enabled(0, &us) > 0 ? us : 0;
}

}  // namespace vl::service
