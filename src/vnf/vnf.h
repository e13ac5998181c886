#pragma once
// `virtlink vnf`: a two-port forwarder that plays the VM in PVP and chain topologies.
// Like a guest running DPDK io forwarding, both ports share one driver memory (one memfd,
// given to both back-ends with SET_MEM_TABLE), so a received buffer is transmitted on the
// other port as it is: zero copies in the VNF. Frames received on port 0 leave on port 1
// and back.
// Modes: io (unchanged), macswap (swap source and destination MAC), l2fwd (destination =
// the configured peer MAC of the output port, source = the output port's MAC).
// Poll (busy) or interrupt (sleep on the receive queues' call eventfds when idle).
#include <atomic>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "util/stall_watchdog.h"
#include "vhost/frontend.h"
#include "vnf/direct_link.h"
#include "virtio/driver_memory.h"
#include "virtio/split_driver_queue.h"

namespace vl::vnf {

/// Largest burst the VNF takes from one queue (frames).
inline constexpr uint32_t kMaxVnfBurst = 64;

enum class Mode : uint8_t { kIo, kMacswap, kL2fwd };

struct VnfPortConfig {
  std::string path;
  bool server = false;
  uint64_t mac = 0;        ///< this port's MAC (l2fwd source)
  uint64_t peer_mac = 0;   ///< l2fwd: destination for frames sent out of this port
};

struct VnfConfig {
  VnfPortConfig ports[2];
  Mode mode = Mode::kIo;
  bool interrupt = false;
  uint32_t queue_size = 256;
  uint32_t buf_size = 2048;
  uint32_t burst = 32;
  int cpu = -1;
  double duration_s = 0;  ///< 0: until stop()
  /// Offer to serve direct links (docs/direct-link.md) on both ports.
  bool direct_link = true;
};

struct VnfCounters {
  uint64_t rx = 0, tx = 0, drop_tx_full = 0, drop_fragmented = 0;
  uint64_t drop_link = 0;  ///< frames for a direct link that it dropped (reason in its counters)
};

class Vnf {
 public:
  explicit Vnf(VnfConfig c) : cfg_(std::move(c)) {}
  bool open(std::string* err);
  /// Forwards until stop() or the configured duration.
  void run();
  void stop() { stop_.store(true); }
  /// Asks run() to print stats() as one JSON line on stdout at its next pass (signal-safe).
  void request_stats() { stats_requested_.store(true, std::memory_order_relaxed); }
  void close();
  nlohmann::json stats() const;

 private:
  uint32_t forward(uint32_t in);
  uint32_t forward_from_link(uint32_t in);
  /// Sends buffers `bufs` (header + frame, `lens` bytes) out of port `out`: its transmit
  /// queue, or the peer's receive queue when `out` serves a direct link.
  void send(uint32_t in, uint32_t out, const uint32_t* bufs, const uint32_t* lens, uint32_t n);
  bool sleep_until_traffic();

  VnfConfig cfg_;
  virtio::DriverMemory mem_;
  virtio::BufferPool pool_;
  vhost::Frontend fe_[2];
  virtio::SplitDriverQueue rxq_[2], txq_[2];
  VnfCounters c_[2];  ///< indexed by input port
  uint32_t hdr_len_ = 12;
  DirectLink link_[2];
  std::atomic<bool> stop_{false};
  /// Bumped every pass (the watchdog's view of progress; a pass in interrupt mode sleeps
  /// at most 100 ms).
  std::atomic<uint64_t> progress_{0};
  /// Interrupts run() when a write to a direct-link peer's call fd blocks it for 1 s: the
  /// write fails with EINTR and that queue stops (the link is then served no more).
  StallWatchdog watchdog_;
  std::atomic<bool> stats_requested_{false};
  uint64_t sleeps_ = 0;
  /// TSC cycles of passes that forwarded something, and the frames they forwarded: their
  /// ratio is this VNF's cycles per packet (as the switch's pmd-stats).
  uint64_t busy_cycles_ = 0, busy_packets_ = 0, passes_ = 0;
  double tsc_hz_ = 0;
};

}  // namespace vl::vnf
