#pragma once
// A watchdog for one polling thread that writes to fds a peer controls (StallWatchdog):
// signals the thread when its progress counter stalls, so a blocked write fails with EINTR.
// Used by `virtlink vnf`; the switch's PMD threads are watched by the control thread.
// docs/architecture.md, "Quiescence" (watchdog).
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace vl {

/// Installs a do-nothing handler for `sig` without SA_RESTART (a system call it interrupts
/// fails with EINTR). Returns 0 or an errno value.
int install_interrupt_handler(int sig);

class StallWatchdog {
 public:
  StallWatchdog() = default;
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;
  ~StallWatchdog() { stop(); }

  /// Starts watching `target`, which bumps `*progress` at least once every `limit_ms`
  /// milliseconds while it is healthy (also while idle: a poll with a timeout counts).
  /// Returns false if the thread could not be started.
  bool start(pthread_t target, const std::atomic<uint64_t>* progress, int sig,
             uint32_t limit_ms = 1000, uint32_t period_ms = 100);
  /// Stops the watchdog thread (idempotent).
  void stop();
  /// Signals sent so far.
  uint64_t interrupts() const { return interrupts_.load(std::memory_order_relaxed); }

 private:
  void run();

  pthread_t target_{};
  const std::atomic<uint64_t>* progress_ = nullptr;
  int sig_ = 0;
  uint32_t limit_ms_ = 1000, period_ms_ = 100;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<uint64_t> interrupts_{0};
};

}  // namespace vl
