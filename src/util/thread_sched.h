#pragma once
// What the kernel's scheduler says of one thread of this process: time on a CPU, time
// runnable but waiting for one, and its context switches (proc(5): /proc/PID/task/TID/
// schedstat and status). Read by the control thread for pmd-stats, and (OwnWait) by an
// adaptive PMD thread for its own run-queue wait, once per idle period, never per packet.
#include <cstdint>

namespace vl {

struct ThreadSched {
  uint64_t cpu_ns = 0;       ///< time on a CPU (schedstat field 1)
  uint64_t wait_ns = 0;      ///< time runnable, waiting on a run queue (schedstat field 2)
  uint64_t voluntary = 0;    ///< context switches it asked for (sleeps)
  uint64_t involuntary = 0;  ///< preemptions
};

/// Reads thread `tid` of this process. False (and `*out` untouched) if the files cannot be
/// read or parsed (no such thread, or a kernel without CONFIG_SCHED_INFO).
bool read_thread_sched(int tid, ThreadSched* out);

/// The calling thread's own run-queue wait (schedstat field 2), from a file opened once:
/// one pread per read(). Not copyable; closes the file on destruction.
class OwnWait {
 public:
  OwnWait() = default;
  OwnWait(const OwnWait&) = delete;
  OwnWait& operator=(const OwnWait&) = delete;
  ~OwnWait();
  /// Opens /proc/thread-self/schedstat for the calling thread. False if unavailable.
  bool open();
  bool valid() const { return fd_ >= 0; }
  /// Total ns the thread has waited on a run queue; 0 if unreadable.
  uint64_t read() const;

 private:
  int fd_ = -1;
};

}  // namespace vl
