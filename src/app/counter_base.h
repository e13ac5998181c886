#pragma once
// What `ctl stats` subtracts from the datapath's counters: their values when they were last
// cleared (`ctl stats-clear`) or when a port was added into a slot another port had used.
// The PMD threads' counters are single-writer and never reset; a clear takes a baseline
// instead (docs/architecture.md, "Ports at run time").
#include <algorithm>
#include <cstdint>

#include "dp/flush.h"
#include "port/counters.h"

namespace vl::app {

/// A queue pair's counters as `ctl stats` shows them (summed over PMD threads).
struct QueueCounts {
  uint64_t rxp = 0, rxb = 0, txp = 0, txb = 0, nobuf = 0, handed = 0;
};

struct CounterBase {
  port::CounterSnapshot port[port::kMaxPorts];
  QueueCounts queue[port::kMaxPorts][port::kMaxQueuePairs];
  uint64_t age_hist[port::kMaxPorts][dp::QueueAgeStats::kBuckets] = {};
  uint64_t age_sum[port::kMaxPorts] = {};
  uint64_t age_on_cpu_hist[port::kMaxPorts][dp::QueueAgeStats::kBuckets] = {};
  uint64_t over_budget[port::kMaxPorts] = {};
  uint64_t over_budget_raw[port::kMaxPorts] = {};
  /// What a predecessor counted on the port of this slot (`ctl upgrade`), added to the
  /// datapath's counters.
  port::CounterSnapshot carried[port::kMaxPorts];
};

inline void add(port::CounterSnapshot& s, const port::CounterSnapshot& b) {
  s.rx_packets += b.rx_packets;
  s.rx_bytes += b.rx_bytes;
  s.tx_packets += b.tx_packets;
  s.tx_bytes += b.tx_bytes;
  s.tx_retries += b.tx_retries;
  for (uint32_t d = 0; d < port::kNumDrops; ++d) s.drops[d] += b.drops[d];
  for (uint32_t k = 0; k < offload::kNumWork; ++k) s.offload_work[k] += b.offload_work[k];
}

/// a - b, never below 0 (a baseline is never above the counter it was taken from).
inline uint64_t since(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

inline void subtract(port::CounterSnapshot& s, const port::CounterSnapshot& b) {
  s.rx_packets = since(s.rx_packets, b.rx_packets);
  s.rx_bytes = since(s.rx_bytes, b.rx_bytes);
  s.tx_packets = since(s.tx_packets, b.tx_packets);
  s.tx_bytes = since(s.tx_bytes, b.tx_bytes);
  s.tx_retries = since(s.tx_retries, b.tx_retries);
  for (uint32_t d = 0; d < port::kNumDrops; ++d) s.drops[d] = since(s.drops[d], b.drops[d]);
  for (uint32_t k = 0; k < offload::kNumWork; ++k)
    s.offload_work[k] = since(s.offload_work[k], b.offload_work[k]);
}

inline void subtract(QueueCounts& q, const QueueCounts& b) {
  q.rxp = since(q.rxp, b.rxp);
  q.rxb = since(q.rxb, b.rxb);
  q.txp = since(q.txp, b.txp);
  q.txb = since(q.txb, b.txb);
  q.nobuf = since(q.nobuf, b.nobuf);
  q.handed = since(q.handed, b.handed);
}

}  // namespace vl::app
