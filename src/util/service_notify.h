#pragma once
// The service manager's notification protocol, sd_notify(3) (through libsystemd): READY=1
// once the switch serves, STATUS= a one-line summary, WATCHDOG=1 keep-alive pings,
// RELOADING=1 and STOPPING=1. systemd sets NOTIFY_SOCKET for a Type=notify unit, and
// WATCHDOG_USEC (with WATCHDOG_PID) when the unit has WatchdogSec= (systemd.service(5)).
// Every call is a no-op when NOTIFY_SOCKET is unset. docs/architecture.md, "Running as a
// service".
#include <cstdint>
#include <string_view>

namespace vl::service {

/// READY=1 and STATUS=`status`: start-up is over (a Type=notify unit is "active" from here).
void notify_ready(std::string_view status);
/// STATUS=`status` alone (shown by `systemctl status`).
void notify_status(std::string_view status);
/// `ctl upgrade`: the service's main process is `pid` from now on (MAINPID=, with READY=1
/// and STATUS=), sent by the predecessor before it exits, so systemd follows the successor.
void notify_main_pid(long pid, std::string_view status);
/// RELOADING=1 and MONOTONIC_USEC= (CLOCK_MONOTONIC, µs, as systemd 253's Type=notify-reload
/// wants): a reload began; notify_ready() ends it.
void notify_reloading();
/// STOPPING=1: shutdown began.
void notify_stopping();
/// WATCHDOG=1 when the manager asked this process for a watchdog (watchdog_interval_us() >
/// 0), else nothing. The caller paces it: at least once per half interval, from a thread
/// whose liveness it stands for (the switch: its control thread's 1 s tick).
void notify_watchdog();
/// The watchdog interval the manager asked for, in µs (WATCHDOG_USEC; sd_watchdog_enabled(3)):
/// 0 when there is none, or when WATCHDOG_PID names another process.
uint64_t watchdog_interval_us();

}  // namespace vl::service
