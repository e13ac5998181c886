#include "util/stall_watchdog.h"

#include <cerrno>
#include <chrono>

namespace vl {

namespace {
void on_interrupt(int) {}  // only makes a blocked system call return EINTR
}  // namespace

int install_interrupt_handler(int sig) {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART
  return sigaction(sig, &sa, nullptr) == 0 ? 0 : errno;
}

bool StallWatchdog::start(pthread_t target, const std::atomic<uint64_t>* progress, int sig,
                          uint32_t limit_ms, uint32_t period_ms) {
  stop();
  target_ = target;
  progress_ = progress;
  sig_ = sig;
  limit_ms_ = limit_ms;
  period_ms_ = period_ms ? period_ms : 1;
  stop_ = false;
  if (install_interrupt_handler(sig) != 0) return false;
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    return false;
  }
  return true;
}

void StallWatchdog::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StallWatchdog::run() {
  uint64_t last = progress_->load(std::memory_order_relaxed);
  uint32_t still_ms = 0;
  std::unique_lock<std::mutex> g(mu_);
  while (!cv_.wait_for(g, std::chrono::milliseconds(period_ms_), [this] { return stop_; })) {
    const uint64_t now = progress_->load(std::memory_order_relaxed);
    if (now != last) {
      last = now;
      still_ms = 0;
      continue;
    }
    still_ms += period_ms_;
    if (still_ms >= limit_ms_) {
      pthread_kill(target_, sig_);
      interrupts_.fetch_add(1, std::memory_order_relaxed);
      still_ms = 0;  // once per limit while it stays stuck
    }
  }
}

}  // namespace vl
