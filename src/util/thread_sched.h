#pragma once
// What the kernel's scheduler says of one thread of this process: time on a CPU, time
// runnable but waiting for one, and its context switches (proc(5): /proc/PID/task/TID/
// schedstat and status). Read by the control thread for pmd-stats; never on a datapath.
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

}  // namespace vl
