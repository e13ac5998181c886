#pragma once
// Adaptive mode's sleep decision (--pmd-mode adaptive): how long an idle PMD thread spins
// before it sleeps on its kick fds, from what the spins and sleeps measured. Pure logic over
// a clock the caller passes in (unit-tested over a simulated one). Design and the measurements
// behind the constants: docs/architecture.md "Adaptive mode".
#include <cstdint>

namespace vl::dp {

/// The spin window of one PMD thread, in the manner of KVM's halt polling
/// (Documentation/virt/kvm/halt-polling.rst): a sleep short enough that a longer spin would
/// have caught its work grows the window, a long sleep shrinks it. One rule of its own: a spin
/// during which the thread was kept off its CPU (a gap between two idle passes above
/// kOffCpuNs), or run-queue wait above kWaitedNs since the last spin began (the kernel's
/// schedstat, read once per idle period), means another runnable thread wants that CPU, on a
/// shared host usually a guest's vCPU; spinning then takes CPU from the guest and gets the thread preempted while the
/// guest's kicks are off, so the window drops to 0 (sleep at once, as interrupt mode) for a
/// hold time that doubles while it keeps happening. All times are ns of one monotonic clock.
class AdaptiveIdle {
 public:
  /// First window after a reset (KVM's halt_poll_ns_grow_start default).
  static constexpr uint64_t kMinSpinNs = 10'000;
  /// A gap this long between two idle passes (each a few hundred ns) means the thread was
  /// off its CPU: host interrupts take a few us, a preemption a scheduler slice (ms).
  static constexpr uint64_t kOffCpuNs = 20'000;
  /// Hold after the first preemption in a spin; doubles on each next one, up to kMaxHoldNs.
  static constexpr uint64_t kHoldNs = 100'000'000;
  static constexpr uint64_t kMaxHoldNs = 6'400'000'000;

  /// `max_spin_ns`: the longest spin (--pmd-idle-us); 0 sleeps at once always.
  explicit AdaptiveIdle(uint64_t max_spin_ns)
      : max_(max_spin_ns), window_(max_spin_ns < kMinSpinNs ? max_spin_ns : kMinSpinNs) {}

  /// Time runnable but off a CPU that kWaitedNs of run-queue wait in one busy period means:
  /// a wake-up on a free CPU waits a few us; behind a guest's vCPU thread, a slice (ms).
  static constexpr uint64_t kWaitedNs = 50'000;

  /// A pass found nothing at `now`. Returns true when the thread should sleep now.
  /// `wait_ns`: the thread's total run-queue wait so far (schedstat), read only when
  /// wants_wait() said so at this pass, else ignored.
  bool idle(uint64_t now, uint64_t wait_ns = 0) {
    if (!spinning_) {
      const bool read = wants_wait(now);
      spinning_ = true;
      spin_start_ = last_ = now;
      if (read) {
        const uint64_t waited = wait_ns > wait_seen_ ? wait_ns - wait_seen_ : 0;
        const bool first = !have_wait_;
        wait_seen_ = wait_ns;
        have_wait_ = true;
        // The thread waited for a CPU since the last spin began: the CPUs are shared with
        // runnable threads, so a spin would take CPU from them. Hold, as for a preemption.
        if (!first && waited > kWaitedNs) {
          contended(now);
          return true;
        }
      }
    } else if (off_cpu(now)) {
      return true;
    }
    last_ = now;
    return now - spin_start_ >= effective_window(now);
  }
  /// At an idle pass at `now`: does idle() want the run-queue wait? (At the first idle
  /// pass after work, when a spin would follow: one read per idle period, none while
  /// holding.)
  bool wants_wait(uint64_t now) const { return !spinning_ && effective_window(now) != 0; }

  /// A pass that started at `now` found work (a spin, if one was running, caught it). The
  /// pass's start, not its end: a long burst is not time off the CPU.
  void busy(uint64_t now) {
    if (!spinning_) return;
    spinning_ = false;
    if (off_cpu(now)) return;
    if (probing_) {  // a whole spin after a hold without preemption: contention is over
      probing_ = false;
      hold_ = kHoldNs;
    }
  }

  /// The thread slept from `from` to `to` (woken by a kick, a wake-up or its timeout).
  void slept(uint64_t from, uint64_t to) {
    spinning_ = false;
    if (from < hold_until_) return;  // holding at 0: the sleep says nothing of the window
    if (probing_) {  // the spin after the hold ran its course unpreempted
      probing_ = false;
      hold_ = kHoldNs;
    }
    const uint64_t d = to - from;
    if (d < max_) {  // a spin of max_ would have caught it: spin longer next time
      window_ = window_ ? (window_ * 2 < max_ ? window_ * 2 : max_) : (kMinSpinNs < max_ ? kMinSpinNs : max_);
    } else {  // nothing came for a whole max_: spinning was wasted
      window_ /= 2;
      if (window_ < kMinSpinNs) window_ = 0;
    }
  }

  /// The window the next idle pass is judged by, at `now` (0 while holding).
  uint64_t effective_window(uint64_t now) const { return now < hold_until_ ? 0 : window_; }
  uint64_t window_ns() const { return window_; }
  /// Spins cut short or skipped because the thread was off its CPU or waited for one
  /// (pmd-stats spin_preempted).
  uint64_t preemptions() const { return preemptions_; }

 private:
  /// True (and starts or extends the hold) if the thread was off its CPU since the last pass.
  bool off_cpu(uint64_t now) {
    if (now - last_ <= kOffCpuNs) return false;
    contended(now);
    return true;
  }
  /// Starts (or extends) the hold: no spin until hold_until_.
  void contended(uint64_t now) {
    spinning_ = false;
    ++preemptions_;
    hold_until_ = now + hold_;
    hold_ = hold_ * 2 < kMaxHoldNs ? hold_ * 2 : kMaxHoldNs;
    probing_ = true;
    if (window_ > kMinSpinNs) window_ = kMinSpinNs;  // the probe after the hold is short
  }

  uint64_t max_;
  uint64_t window_;
  bool spinning_ = false;
  bool probing_ = false;  ///< the spin after a hold has not yet completed unpreempted
  uint64_t spin_start_ = 0, last_ = 0;
  uint64_t hold_until_ = 0;
  uint64_t hold_ = kHoldNs;
  uint64_t preemptions_ = 0;
  uint64_t wait_seen_ = 0;  ///< run-queue wait at the last read
  bool have_wait_ = false;
};

}  // namespace vl::dp
