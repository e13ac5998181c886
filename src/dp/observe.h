#pragma once
// What the datapath shows of its frames on request: packet capture taps and port mirrors
// (SPAN). Design and costs: docs/architecture.md, "Capture and mirroring".
#include <atomic>
#include <cstdint>
#include <mutex>

#include "dp/handoff.h"
#include "port/counters.h"

namespace vl::dp {

/// A tapped frame's direction as its port sees it: received from the port's peer (the
/// guest's transmit queue, the wire) or sent to it (the guest's receive queue).
enum TapDir : uint8_t { kTapRx = 0, kTapTx = 1 };

/// Written by the control side (the capture thread, the control thread) at any time, read
/// by PMD threads once per burst (rx) or per delivered batch (tx).
///
/// A capture ring is a HandoffRing (dp/handoff.h) from one PMD thread to the capture
/// thread, whose records mean: `len` bytes captured (at most the port's snaplen), `gen` the
/// frame's length, `port`, `queue` its TapDir, `t_ns` when it was taken (rx: its burst; tx:
/// its delivery; tsc_now_ns), `hdr` its virtio-net header (a TSO frame is captured whole,
/// as its sender gave it).
struct Observe {
  /// Ports whose received frames are captured or mirrored: classify's one test per burst.
  std::atomic<uint64_t> rx{0};
  std::atomic<uint64_t> tap_rx{0};     ///< ports whose received frames are captured
  std::atomic<uint64_t> tap_tx{0};     ///< ports whose sent frames are captured
  std::atomic<uint64_t> mirror_rx{0};  ///< ports whose received frames are mirrored
  std::atomic<uint64_t> mirror_tx{0};  ///< ports whose sent frames are mirrored
  /// Bytes of a frame put in the ring (per port: the largest snaplen of its captures).
  std::atomic<uint32_t> snaplen[port::kMaxPorts] = {};
  /// Where port i's received (mirror_rx) and sent (mirror_tx) frames are mirrored to.
  std::atomic<uint8_t> mirror_rx_to[port::kMaxPorts] = {};
  std::atomic<uint8_t> mirror_tx_to[port::kMaxPorts] = {};
  /// The capture ring of each PMD thread (null until the first capture; then kept).
  std::atomic<HandoffRing*> ring[port::kMaxPmdThreads] = {};
  /// Frames that found their thread's ring full, by thread, port and TapDir (each entry
  /// written by its thread only).
  std::atomic<uint64_t> missed[port::kMaxPmdThreads][port::kMaxPorts][2] = {};

  /// Frames of `port` in direction `dir` missed by every thread so far.
  uint64_t missed_total(uint32_t port, uint32_t dir) const {
    uint64_t n = 0;
    for (const auto& t : missed) n += t[port][dir].load(std::memory_order_relaxed);
    return n;
  }
  /// Recomputes `rx` from the masks it unites, after a change of tap_rx or mirror_rx made
  /// while holding `lock` (the capture and the control thread both change masks; no PMD
  /// thread takes it).
  void update_rx() {
    rx.store(tap_rx.load(std::memory_order_relaxed) | mirror_rx.load(std::memory_order_relaxed),
             std::memory_order_release);
  }
  std::mutex lock;
};

}  // namespace vl::dp
