#pragma once
// The flow hash that spreads a port's output over its guest receive queues (multiqueue,
// port/port.h PortDp): util/flow_hash.h over at most the first 64 bytes of the frame,
// computed only for ports with several candidate queues.
#include <cstdint>

#include "util/flow_hash.h"
#include "virtio/net_copy.h"

namespace vl::dp {

using vl::flow_hash_bytes;

/// Hash of a frame held as guest-memory segments (copies at most 64 bytes into a local
/// when the first segment is shorter).
inline uint32_t flow_hash(const virtio::Segment* segs, uint32_t nsegs, uint32_t len) {
  constexpr uint32_t kMax = 64;
  const uint32_t want = len < kMax ? len : kMax;
  if (nsegs && segs[0].len >= want) return flow_hash_bytes(segs[0].ptr, want);
  uint8_t buf[kMax];
  virtio::gather_copy(buf, segs, nsegs, 0, want);
  return flow_hash_bytes(buf, want);
}

/// Picks one of `n` candidates for hash `h` (multiply-shift: no division).
inline uint32_t pick_queue(uint32_t h, uint32_t n) {
  return static_cast<uint32_t>((uint64_t{h} * n) >> 32);
}

}  // namespace vl::dp
