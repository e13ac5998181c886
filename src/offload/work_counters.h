#pragma once
// Offload work counted on an egress port (the keys of `ctl stats --json` "offload",
// INTERFACES.md): TSO frames passed through with their metadata, and what was done in
// software because the receiver did not negotiate it.
#include <atomic>
#include <cstdint>

namespace vl::offload {

enum class Work : uint8_t {
  kGsoPassed,    ///< TSO frames delivered whole (the receiver negotiated GUEST_TSO4/6)
  kGsoFrames,    ///< TSO frames segmented in software
  kGsoSegments,  ///< segments those produced
  kCsumFilled,   ///< NEEDS_CSUM frames whose checksum was filled in software
  kCount,
};
inline constexpr uint32_t kNumWork = static_cast<uint32_t>(Work::kCount);
/// "gso_passed", "sw_gso_frames", "sw_gso_segments", "sw_csum_filled".
const char* work_name(Work w);

/// One PMD thread's counts for one port (single writer; relaxed reads by the control thread).
struct WorkCounters {
  std::atomic<uint64_t> n[kNumWork] = {};
  void add(Work w, uint64_t v = 1) {
    std::atomic<uint64_t>& c = n[static_cast<uint32_t>(w)];
    c.store(c.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }
  uint64_t get(Work w) const { return n[static_cast<uint32_t>(w)].load(std::memory_order_relaxed); }
};

}  // namespace vl::offload
