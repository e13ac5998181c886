#pragma once
// PMD threads: each polls the transmit queues of the ports assigned to it and forwards
// with its own Forwarder. Modes (INTERFACES.md --pmd-mode):
//   poll       busy-poll forever;
//   interrupt  after an empty pass, enable kicks, re-check, and sleep in epoll on the kick
//              eventfds (plus a wake-up eventfd for control changes);
//   adaptive   busy-poll while traffic flows, sleep as in interrupt mode after
//              `idle_us` microseconds without a packet.
// Quiescence: each pass starts with a seq_cst increment of `passes`; a sleeping thread sets
// `sleeping`. Output batching (dp/flush.h) may hold frames across passes (pointers into
// their sender's memory, to be written into their receiver's ring): right after each
// increment the thread checks the ports its queues involve and delivers every queue if one
// of them is paused (Forwarder::release_paused), and it delivers every queue before it
// sleeps. So the control thread, after clearing a port's `active`, waits for two increments
// (the second one follows a check that saw the port paused) or for the thread to sleep
// before touching the port.
// Watchdog: a pass never waits on a front-end, but a front-end can make the one write a
// PMD thread does to its fds (the call eventfd) block forever. A thread that is awake and
// has not finished a pass for 10 ms while the control thread waits for it, or for a whole
// control tick, gets kInterruptSignal; the blocked write fails with EINTR and that queue
// stops (DeviceQueue::signal).
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dp/forwarder.h"
#include "port/port.h"
#include "util/fd.h"

namespace vl::dp {

enum class PmdMode : uint8_t { kPoll, kInterrupt, kAdaptive };

/// The signal that interrupts a PMD thread blocked in a system call on a front-end's fd
/// (its handler does nothing and is installed without SA_RESTART). SIGURG's default action
/// is to ignore it, so a stray one is harmless.
inline constexpr int kInterruptSignal = SIGURG;
const char* pmd_mode_name(PmdMode m);

struct PmdOptions {
  PmdMode mode = PmdMode::kPoll;
  uint32_t idle_us = 200;  ///< adaptive: idle time before sleeping (microseconds)
};

class PmdThread {
 public:
  PmdThread(uint32_t index, int cpu, SwitchTables* t, PmdOptions opts);
  ~PmdThread();

  void assign(uint32_t port) { ports_.push_back(port); }
  const std::vector<uint32_t>& ports() const { return ports_; }
  bool start(std::string* err);
  void stop();

  uint32_t index() const { return index_; }
  int cpu() const { return cpu_; }
  const Forwarder& forwarder() const { return *fw_; }

  /// Quiescence and wake-up, for the control thread.
  uint64_t passes() const { return passes_.load(std::memory_order_seq_cst); }
  bool sleeping() const { return sleeping_.load(std::memory_order_seq_cst); }
  void wake();
  /// Sends the thread kInterruptSignal: a system call it is blocked in (a write to a
  /// front-end's call fd) returns EINTR. Harmless when it is not blocked.
  void interrupt();
  /// Watchdog step (control thread, once a tick): interrupts the thread if it is awake and
  /// has not finished a pass since the previous call.
  void check_stuck();
  /// Adds/removes a kick eventfd to this thread's epoll set (control thread).
  void watch_kick(uint32_t port, int fd);
  void unwatch_kick(int fd);

  /// Busy and idle passes, and sleeps, for pmd-stats.
  uint64_t busy_passes() const { return busy_passes_.load(std::memory_order_relaxed); }
  uint64_t sleeps() const { return sleeps_.load(std::memory_order_relaxed); }
  /// TSC cycles spent in passes that forwarded something, and the chains they took:
  /// their ratio is the thread's cycles per packet (like OVS pmd-stats-show).
  uint64_t busy_cycles() const { return busy_cycles_.load(std::memory_order_relaxed); }
  uint64_t packets() const { return packets_.load(std::memory_order_relaxed); }

 private:
  void run();
  bool try_sleep();

  uint32_t index_;
  int cpu_;
  SwitchTables* t_;
  PmdOptions opts_;
  std::unique_ptr<Forwarder> fw_;
  std::vector<uint32_t> ports_;
  std::thread thread_;
  UniqueFd epoll_, wake_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> exited_{false};  ///< run() returned (stop() interrupts it until then)
  std::atomic<uint64_t> passes_{0};
  std::atomic<bool> sleeping_{false};
  uint64_t watchdog_passes_ = ~0ull;  ///< passes() at the previous check_stuck()
  std::atomic<uint64_t> busy_passes_{0}, sleeps_{0}, busy_cycles_{0}, packets_{0};
};

/// All PMD threads of a switch; implements the ports' quiescence contract.
class PmdSet final : public port::Quiescer {
 public:
  PmdSet(SwitchTables* t, const std::vector<int>& cpus, PmdOptions opts);
  /// Assigns port rx (their transmit queues) round-robin over the threads.
  void assign_round_robin(uint32_t nports);
  bool start(std::string* err);
  void stop();
  const std::vector<std::unique_ptr<PmdThread>>& threads() const { return threads_; }
  PmdThread* owner_of(uint32_t port) const;

  void wait_quiescent() override;
  /// Called every second by the control thread: interrupts PMD threads stuck in a pass.
  void watchdog();
  void ports_changed() override;
  void set_kick_fd(uint32_t port, int old_fd, int new_fd) override;

 private:
  SwitchTables* tables_;
  std::vector<std::unique_ptr<PmdThread>> threads_;
  bool running_ = false;
};

}  // namespace vl::dp
