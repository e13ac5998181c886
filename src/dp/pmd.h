#pragma once
// PMD threads (PmdThread: polls its rxqs and forwards with its own Forwarder) and the set of
// them (PmdSet: rxq assignment, receive-queue writers, the quiescence wait, the watchdog).
// Design: docs/architecture.md, "PMD threads", "Quiescence", "Writers and handoff".
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dp/forwarder.h"
#include "dp/idle_policy.h"
#include "port/port.h"
#include "util/fd.h"
#include "util/thread_sched.h"

namespace vl::dp {

enum class PmdMode : uint8_t { kPoll, kInterrupt, kAdaptive };
enum class RxqAssign : uint8_t { kRoundRobin, kCycles };
const char* rxq_assign_name(RxqAssign a);

inline constexpr uint32_t kMaxPmdThreads = port::kMaxPmdThreads;

/// One rxq: a port's queue pair, whose guest transmit queue a PMD thread polls.
struct RxqId {
  uint8_t port = 0;
  uint8_t queue = 0;
  bool operator==(const RxqId&) const = default;
};
/// Most rxqs of a switch.
inline constexpr uint32_t kMaxRxqs = port::kMaxPorts * port::kMaxQueuePairs;

/// The rxq assignment (--pmd-rxq-assign): `rxqs` in (port, queue) order and `cycles[i]`, the
/// TSC cycles rxq i took since the previous assignment (cycles mode only; may be empty for
/// roundrobin). Returns one list per thread (nthreads >= 1). roundrobin: rxq i to thread
/// i % nthreads. cycles (OVS pmd-rxq-assign=cycles): busiest first, each to the least
/// loaded thread so far (ties: fewer rxqs, then the lower index); equal loads keep
/// (port, queue) order.
std::vector<std::vector<RxqId>> plan_rxq_assignment(RxqAssign mode, const std::vector<RxqId>& rxqs,
                                                    const std::vector<uint64_t>& cycles,
                                                    size_t nthreads);

/// Load of one rxq, written by the thread serving it (relaxed), read by the control thread.
struct RxqLoad {
  std::atomic<uint64_t> cycles{0};   ///< TSC cycles of its non-empty bursts
  std::atomic<uint64_t> packets{0};  ///< chains taken
  uint64_t cycles_mark = 0;          ///< control thread: `cycles` at the last assignment
};

/// The signal that interrupts a PMD thread blocked in a system call on a front-end's fd
/// (its handler does nothing and is installed without SA_RESTART). SIGURG's default action
/// is to ignore it, so a stray one is harmless.
inline constexpr int kInterruptSignal = SIGURG;
const char* pmd_mode_name(PmdMode m);

struct PmdOptions {
  PmdMode mode = PmdMode::kPoll;
  /// adaptive: the longest spin before sleeping (us); the window itself adapts between 0
  /// and this (dp/idle_policy.h)
  uint32_t idle_us = 200;
  RxqAssign rxq_assign = RxqAssign::kRoundRobin;
  /// --pmd-rx-writers: `follow` (true) moves a port's receive-queue writer to the thread
  /// that sends it most (PmdSet::place_rx_writers); `fixed` (default) keeps the initial
  /// deal. A move pauses the port: frames routed to it meanwhile are dropped.
  bool follow_writers = false;
};

class PmdThread {
 public:
  PmdThread(uint32_t index, int cpu, SwitchTables* t, PmdOptions opts, RxqLoad (*load)[port::kMaxQueuePairs]);
  ~PmdThread();

  /// The rxqs the control thread last gave this thread (its view; the thread switches to
  /// them at its next quiescent point, see applied()).
  const std::vector<RxqId>& rxqs() const { return assigned_; }
  /// Gives the thread a new rxq list (control thread). Returns the generation to wait for
  /// with applied(); before start() the list takes effect at once.
  uint64_t post_rxqs(const std::vector<RxqId>& l);
  /// The last posted generation the thread has switched to (it has delivered everything
  /// it held before switching).
  uint64_t applied() const { return applied_gen_.load(std::memory_order_acquire); }
  /// TSC cycles since the thread started (for busy %), 0 before.
  uint64_t elapsed_cycles() const;
  bool start(std::string* err);
  void stop();

  uint32_t index() const { return index_; }
  int cpu() const { return cpu_; }
  const Forwarder& forwarder() const { return *fw_; }
  /// Forwarder::clear_queue_age_max of this thread's forwarder (control thread).
  void clear_queue_age_max(uint32_t port) { fw_->clear_queue_age_max(port); }

  /// Quiescence and wake-up, for the control thread.
  uint64_t passes() const { return passes_.load(std::memory_order_seq_cst); }
  bool sleeping() const { return sleeping_.load(std::memory_order_seq_cst); }
  /// Asleep and holding no noted call (completion coalescing): quiescent.
  bool asleep_quiescent() const {
    return sleeping() && !holds_notes_.load(std::memory_order_seq_cst);
  }
  void wake();
  /// What a handoff ring to this thread needs to wake it (dp/handoff.h).
  const std::atomic<bool>* sleeping_flag() const { return &sleeping_; }
  int wake_fd() const { return wake_.get(); }
  /// Sends the thread kInterruptSignal: a system call it is blocked in (a write to a
  /// front-end's call fd) returns EINTR. Harmless when it is not blocked.
  void interrupt();
  /// Watchdog step (control thread, once a tick): interrupts the thread if it is awake and
  /// has not finished a pass since the previous call.
  void check_stuck();
  /// Adds/removes a kick eventfd to this thread's epoll set (control thread).
  void watch_kick(RxqId q, int fd);
  void unwatch_kick(int fd);

  /// Busy and idle passes, and sleeps, for pmd-stats.
  uint64_t busy_passes() const { return busy_passes_.load(std::memory_order_relaxed); }
  uint64_t sleeps() const { return sleeps_.load(std::memory_order_relaxed); }
  /// Adaptive mode: spins cut short or skipped because the thread was off its CPU or
  /// waited for one, and the spin window in force in ns (0 while giving way;
  /// dp/idle_policy.h); 0 in the other modes.
  uint64_t spin_preempted() const { return spin_preempted_.load(std::memory_order_relaxed); }
  uint64_t spin_window_ns() const { return spin_window_ns_.load(std::memory_order_relaxed); }
  /// The kernel thread id (for /proc/self/task/TID/schedstat), 0 before it runs.
  int tid() const { return tid_.load(std::memory_order_relaxed); }
  /// TSC cycles spent in passes that forwarded something, and the chains they took:
  /// their ratio is the thread's cycles per packet (like OVS pmd-stats-show).
  uint64_t busy_cycles() const { return busy_cycles_.load(std::memory_order_relaxed); }
  /// The intervals this thread was kept off its CPU (dp/off_cpu.h).
  const OffCpuLog& off_cpu() const { return fw_->off_cpu(); }
  /// Chains the thread took, lifetime. Stored after the pass's per-rxq loads (release), so
  /// a reader that takes packets() first and the RxqLoad counters next gets rxq packets
  /// >= this total, ahead by at most what the thread took in between.
  uint64_t packets() const { return packets_.load(std::memory_order_acquire); }

 private:
  void run();
  bool try_sleep();
  /// Polls every rxq once (a pass starting at TSC `t0`); returns the frames taken.
  uint32_t poll_rxqs(uint64_t t0);
  /// The pass [t0, t1) (TSC) took `got` frames and was handed `handed`: busy cycles.
  void account_pass(uint64_t t0, uint64_t t1, uint32_t got, uint32_t handed);
  /// Notes the part of [from, to) (TSC) beyond the bound of the work done since `from`
  /// (plus `handed` frames) as time off the CPU (`tpu`: TSC ticks per us).
  void note_excess(uint64_t from, uint64_t to, uint64_t handed, uint64_t tpu);
  /// Notes [from, to) (TSC ticks) as time off the CPU.
  void note_off_cpu(uint64_t from_tsc, uint64_t to_tsc);
  /// Adaptive mode's idle pass (dp/idle_policy.h): spins a pause or sleeps. Returns true
  /// if it tried to sleep (kicks are then enabled).
  bool adaptive_idle(const OwnWait& own_wait);
  void apply_rxqs();
  /// Sends the calls noted in the transmit queues of this thread's rxqs (completion
  /// coalescing), active ports only: those a paused port kept, once it is back.
  void send_noted_calls();

  uint32_t index_;
  int cpu_;
  SwitchTables* tables_;
  PmdOptions opts_;
  std::unique_ptr<Forwarder> fw_;
  RxqLoad (*load_)[port::kMaxQueuePairs];
  std::vector<RxqId> assigned_;  ///< control thread's view
  // Posted list (under mu_), and the thread's own copy (no allocation in the thread).
  std::mutex mu_;
  RxqId pending_[kMaxRxqs];
  uint32_t npending_ = 0;
  std::atomic<uint64_t> posted_gen_{0}, applied_gen_{0};
  uint64_t seen_gen_ = 0;  ///< thread: last generation applied
  RxqId rxqs_[kMaxRxqs];
  uint32_t nrxqs_ = 0;
  std::atomic<uint64_t> start_tsc_{0};
  std::thread thread_;
  UniqueFd epoll_, wake_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> exited_{false};  ///< run() returned (stop() interrupts it until then)
  std::atomic<uint64_t> passes_{0};
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> holds_notes_{false};  ///< set before each sleep: asleep_quiescent()
  uint64_t watchdog_passes_ = ~0ull;  ///< passes() at the previous check_stuck()
  std::atomic<uint64_t> busy_passes_{0}, sleeps_{0}, busy_cycles_{0}, packets_{0};
  AdaptiveIdle idle_;  ///< adaptive mode's sleep decision (thread only)
  std::atomic<uint64_t> spin_preempted_{0}, spin_window_ns_{0};
  std::atomic<int> tid_{0};
};

/// All PMD threads of a switch; implements the ports' quiescence contract.
class PmdSet final : public port::Quiescer {
 public:
  PmdSet(SwitchTables* t, const std::vector<int>& cpus, PmdOptions opts);
  bool start(std::string* err);
  void stop();
  const std::vector<std::unique_ptr<PmdThread>>& threads() const { return threads_; }
  /// The thread serving rxq (port, queue), or null.
  PmdThread* owner_of(uint32_t port, uint32_t queue = 0) const;
  const RxqLoad& load(uint32_t port, uint32_t queue) const { return load_[port][queue]; }
  /// Zeroes the loads of `port`'s rxqs, which no thread serves (a slot a port is added
  /// into at run time: its loads start afresh). Control thread.
  void clear_load(uint32_t port);
  RxqAssign assign_mode() const { return opts_.rxq_assign; }
  /// Recomputes the assignment (roundrobin or cycles) over the rxqs that exist now and
  /// moves rxqs between threads safely (see the top of this file). `force`: even if the
  /// set of rxqs did not change (`ctl pmd-rebalance`). Control thread only.
  void reassign(bool force);
  /// `ctl upgrade`: every thread gives up all its rxqs (delivering what it holds) and polls
  /// none until hold(false), which assigns them again; meanwhile port changes assign
  /// nothing. So every port stops at once: no frame is sent to a port already paused.
  void hold(bool on);
  /// Assignments made since start (for tests and pmd-stats).
  uint64_t reassignments() const { return reassignments_; }

  void wait_quiescent() override;
  /// Called every second by the control thread: interrupts PMD threads stuck in a pass.
  void watchdog();
  /// Also recomputes the assignment when the set of rxqs changed.
  void ports_changed() override;
  /// Writers follow traffic (docs/architecture.md); control thread, once a tick. Returns
  /// the number of ports whose writers moved.
  uint32_t place_rx_writers();
  uint64_t writer_moves() const { return writer_moves_; }
  void set_kick_fd(uint32_t port, uint32_t queue, int old_fd, int new_fd) override;
  /// dp/rx_writers.h for this set's threads.
  void assign_rx_writers(port::PortDp& d, uint32_t rotation) const override;

 private:
  /// The rxqs that exist now (a ready guest transmit queue), in (port, queue) order.
  std::vector<RxqId> current_rxqs() const;
  std::vector<std::vector<RxqId>> plan(const std::vector<RxqId>& rxqs);
  /// Posts `lists` to the threads whose list differs and waits until each has applied it.
  void post_and_wait(const std::vector<std::vector<RxqId>>& lists);

  SwitchTables* tables_;
  PmdOptions opts_;
  std::vector<std::unique_ptr<PmdThread>> threads_;
  /// The handoff rings between the threads (SwitchTables::handoff points at them).
  std::vector<std::unique_ptr<HandoffRing>> rings_;
  uint64_t routed_seen_[kMaxPmdThreads][port::kMaxPorts] = {};  // place_rx_writers' last look
  uint64_t writer_moves_ = 0;
  bool running_ = false;
  bool held_ = false;  ///< hold()
  RxqLoad load_[port::kMaxPorts][port::kMaxQueuePairs];
  int owner_[port::kMaxPorts][port::kMaxQueuePairs];    ///< thread index or -1
  int kick_fd_[port::kMaxPorts][port::kMaxQueuePairs];  ///< registered kick fd or -1
  uint64_t reassignments_ = 0;
};

}  // namespace vl::dp
