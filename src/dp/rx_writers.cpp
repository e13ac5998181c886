#include "dp/rx_writers.h"

namespace vl::dp {

void assign_rx_writers(port::PortDp& d, uint32_t threads, uint32_t rotation) {
  uint8_t ready[port::kMaxQueuePairs];
  uint32_t e = 0;
  for (uint32_t q = 0; q < d.nqp; ++q)
    if (d.qp[q].has_rxq()) ready[e++] = static_cast<uint8_t>(q);
  d.rx_ready = e;
  for (uint32_t t = 0; t < port::kMaxPmdThreads; ++t) {
    port::PortDp::RxTargets& r = d.rx_for[t];
    r = port::PortDp::RxTargets{};
    if (!e || t >= threads) continue;
    if (e >= threads) {
      for (uint32_t j = t; j < e; j += threads) r.q[r.n++] = ready[j];
      continue;
    }
    // t = (rotation + rank) mod T
    const uint32_t rank = (t + threads - rotation % threads) % threads;
    r.n = 1;
    r.q[0] = ready[rank % e];
    if (rank >= e) r.via = static_cast<uint8_t>((rotation + rank % e) % threads);
  }
}

}  // namespace vl::dp
