#pragma once
// Which PMD thread writes which guest receive queue of a port (one writer per queue, no
// lock): the policy the datapath applies whenever a port's datapath view is rebuilt
// (port::Quiescer::assign_rx_writers). docs/architecture.md "Writers and handoff".
#include <cstdint>

#include "port/port.h"

namespace vl::dp {

/// Fills `d.rx_ready` and `d.rx_for` from the ready receive queues of `d.qp[0..nqp)` for
/// `threads` PMD threads (1..port::kMaxPmdThreads):
/// - at least as many ready queues (E) as threads (T): thread t writes the queues at
///   positions t, t+T, t+2T... of the ready list (like OVS XPS with static txqs);
/// - fewer: thread (rotation + j) mod T writes ready queue j, and every other thread hands
///   its frames to one of those writers (RxTargets::via, dp/handoff.h). `rotation` is the
///   port's id by default, so single-queue ports spread over the threads.
void assign_rx_writers(port::PortDp& d, uint32_t threads, uint32_t rotation);

}  // namespace vl::dp
