#pragma once
// What the device side of both ring layouts shares: the guest memory a ring lives in, its
// size and negotiated ring features, the call eventfd (used-buffer notifications), the
// broken state, and the dirty log of live migration. SplitDeviceQueue (split) and
// PackedDeviceQueue (packed) derive from it; docs/architecture.md "Rings".
#include <sys/eventfd.h>

#include <cerrno>
#include <cstdint>

#include "virtio/dirty_log.h"
#include "virtio/guest_memory.h"
#include "virtio/virtio_defs.h"

namespace vl::virtio {

/// Marks ring entries [first, first + n) modulo `num` (each `elem` bytes, the ring's entry
/// 0 at guest-physical `gpa`) in `log`: one or two ranges. `n` above `num` marks them all.
inline void mark_ring_entries(DirtyLog& log, uint64_t gpa, uint32_t elem, uint32_t first,
                              uint32_t n, uint32_t num) {
  if (n > num) n = num;
  const uint32_t k = n < num - first ? n : num - first;  // entries before the wrap
  log.mark(gpa + uint64_t{elem} * first, uint64_t{elem} * k);
  if (n > k) log.mark(gpa, uint64_t{elem} * (n - k));
}

class DeviceRingBase {
 public:
  const GuestMemory* memory() const { return mem_; }
  DirtyLog* dirty_log() const { return log_; }
  bool broken() const { return broken_; }
  /// Stops the queue for good (until attach() again): the driver broke the ring.
  void mark_broken() { broken_ = true; }
  /// Ring entries (split) or descriptors (packed).
  uint32_t size() const { return num_; }
  void set_call_fd(int fd) { call_fd_ = fd; }
  int call_fd() const { return call_fd_; }

  /// Writes the call eventfd. The front-end shares that fd's open file description, so
  /// whatever the back-end set up, it can clear O_NONBLOCK and fill the counter (or hand us
  /// a pipe it never reads): the write then blocks the PMD thread, and with it every port
  /// that thread serves and every pause of the control thread. The PMD watchdog
  /// (dp/pmd.cpp) interrupts a thread stuck that long with a signal, so the write fails
  /// with EINTR; this queue then stops for good (no more writes to that fd). A
  /// well-behaved front-end's write never blocks, so EINTR cannot happen to it; EAGAIN
  /// (counter full, non-blocking) is ignored: the driver has a notification pending.
  void signal() {
    if (call_fd_ < 0) return;
    // Counted before the write (a system call anyway): single writer, relaxed.
    __atomic_store_n(&calls_, __atomic_load_n(&calls_, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
    if (eventfd_write(call_fd_, 1) != 0 && errno == EINTR) [[unlikely]] {
      call_fd_ = -1;
      broken_ = true;
      __atomic_store_n(&call_blocked_, true, __ATOMIC_RELEASE);
    }
  }
  /// Sends the call a publish_used(defer = true) noted, if any: the driver asked for it and
  /// may take it late, never not at all (a spurious one is allowed, virtio 1.2 §2.7.7).
  void flush_call() {
    if (call_deferred_) {
      call_deferred_ = false;
      signal();
    }
  }
  bool call_deferred() const { return call_deferred_; }
  /// Calls the driver asked for that publish_used(defer = true) noted rather than sent
  /// (several may go out as one flush_call()); any thread may read it.
  uint64_t calls_deferred() const { return __atomic_load_n(&calls_deferred_, __ATOMIC_RELAXED); }
  /// A write to the call fd blocked until the watchdog interrupted it: proof of a hostile
  /// front-end (the port drops the connection). Sticky: survives attach(), so re-setting
  /// the ring does not clear it; only a new queue object (a new connection) does.
  bool call_blocked() const { return __atomic_load_n(&call_blocked_, __ATOMIC_ACQUIRE); }
  /// Used-buffer notifications sent (call fd writes), for the life of this queue object;
  /// any thread may read it.
  uint64_t calls() const { return __atomic_load_n(&calls_, __ATOMIC_RELAXED); }

 protected:
  /// attach()'s common part: the memory, size and ring features; the queue works again.
  void bind(const GuestMemory* mem, uint32_t num, uint64_t features) {
    mem_ = mem;
    num_ = num;
    event_idx_ = has(features, kRingFEventIdx);
    indirect_ = has(features, kRingFIndirectDesc);
    broken_ = false;
    // (A noted call survives: the driver may still wait for it; a spurious one is allowed.)
  }
  /// detach()'s common part.
  void unbind() {
    mem_ = nullptr;
    log_ = nullptr;
  }

  const GuestMemory* mem_ = nullptr;
  uint32_t num_ = 0;
  bool event_idx_ = false;  ///< VIRTIO_RING_F_EVENT_IDX negotiated
  bool indirect_ = false;   ///< VIRTIO_RING_F_INDIRECT_DESC negotiated
  bool broken_ = false;
  bool call_blocked_ = false;  ///< see call_blocked(); written by a PMD thread
  bool call_deferred_ = false;  ///< a call noted by publish_used(true), see flush_call()
  uint64_t calls_ = 0;         ///< see calls(); written by the queue's writer thread
  uint64_t calls_deferred_ = 0;  ///< see calls_deferred(); the same writer
  /// publish_used()'s ending: signals a call the driver asked for (`need`), or notes it
  /// (`defer`) for flush_call().
  void call_if(bool need, bool defer) {
    if (!need) return;
    if (defer) {
      call_deferred_ = true;
      __atomic_store_n(&calls_deferred_, __atomic_load_n(&calls_deferred_, __ATOMIC_RELAXED) + 1,
                       __ATOMIC_RELAXED);
    } else {
      signal();
    }
  }
  int call_fd_ = -1;
  DirtyLog* log_ = nullptr;  ///< live migration: set_dirty_log() of each layout
};

}  // namespace vl::virtio
