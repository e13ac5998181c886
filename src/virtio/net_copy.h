#pragma once
// Moving virtio-net frames between scatter lists: reading the virtio-net header off a
// transmitted chain, and writing header + frame into a driver's receive buffers (with or
// without mergeable RX buffers, virtio 1.2 §5.1.6.3-4).
//
// This is where a frame is copied, once, from the sender's buffer into the receiver's
// buffer: the datapath hands the sender's segments (pointers into its guest memory) here.
#include <cstdint>
#include <cstring>

#include "virtio/split_device_queue.h"
#include "virtio/packed_device_queue.h"

namespace vl::virtio {

/// Copies `len` bytes from the scatter list `src` (starting `skip` bytes in) to `dst`.
/// The caller guarantees that both lists hold enough bytes.
void gather_copy(uint8_t* dst, const Segment* src, uint32_t nsrc, uint32_t skip, uint32_t len);

/// Result of taking a transmitted chain apart.
struct TxFrame {
  NetHdr hdr;          ///< local copy of the header (read once)
  uint32_t seg_begin;  ///< first frame segment in the arena (the header is cut off)
  uint32_t nsegs;
  uint32_t len;        ///< frame bytes (Ethernet header onwards)
};

/// Reads the `hdr_len`-byte header (10 or 12) off `chain` into a local, and trims the
/// chain's segments in the arena so they start at the frame. Returns false if the chain
/// is shorter than hdr_len + an Ethernet header (counted by the caller as bad_header).
bool split_tx_chain(SegmentArena& arena, const Chain& chain, uint32_t hdr_len, TxFrame* out);

enum class DeliverStatus : uint8_t {
  kOk,
  kNoBuffer,  ///< the driver has not posted enough receive buffers; nothing was consumed
  kTooBig,    ///< without mergeable buffers the frame does not fit the posted buffer
  kBadRing,   ///< a receive chain was malformed: the queue is broken (stop it)
  /// The next receive chain is too short for any real frame (shorter than the header, or
  /// than the header plus kEthZlen without mergeable buffers): it was returned to the
  /// driver with used length 0 and the frame was not delivered.
  kShortBuffer,
};

/// Copies a frame of `n` bytes: frames of 16 to 64 bytes (the 64 B case every dataplane is
/// judged by) with fixed-size overlapping moves instead of a call to memcpy.
inline void copy_frame(uint8_t* dst, const uint8_t* src, uint32_t n) {
  if (n >= 16 && n <= 64) {
    uint8_t a[16], b[16], c[16], d[16];
    __builtin_memcpy(a, src, 16);
    __builtin_memcpy(b, src + n - 16, 16);
    if (n > 32) {
      __builtin_memcpy(c, src + 16, 16);
      __builtin_memcpy(d, src + n - 32, 16);
      __builtin_memcpy(dst + 16, c, 16);
      __builtin_memcpy(dst + n - 32, d, 16);
    }
    __builtin_memcpy(dst, a, 16);
    __builtin_memcpy(dst + n - 16, b, 16);
    return;
  }
  std::memcpy(dst, src, n);
}

/// Writes `hdr` (hdr_len bytes, num_buffers 1) and the `frame_len` bytes at `src` into the
/// one-descriptor receive buffer `b`, which the caller checked holds them
/// (b.len >= hdr_len + frame_len), and pushes its used entry (not published).
template <class Q>
[[gnu::always_inline]] inline void put_one(Q& q, const OneBuffer& b, NetHdr hdr, uint32_t hdr_len,
                                           const uint8_t* src, uint32_t frame_len) {
  const uint64_t total = uint64_t{hdr_len} + frame_len;
  hdr.num_buffers = 1;
  if (hdr_len == sizeof(NetHdr)) std::memcpy(b.ptr, &hdr, sizeof(NetHdr));
  else std::memcpy(b.ptr, &hdr, hdr_len);
  copy_frame(b.ptr + hdr_len, src, frame_len);
  // Non-null only while the front-end migrates the guest (VHOST_F_LOG_ALL).
  if (DirtyLog* log = q.dirty_log()) [[unlikely]] log->mark_host(*q.memory(), b.ptr, total);
  q.push_used(b.head, static_cast<uint32_t>(total), 1);
}

/// deliver_frame() past its first receive chain `first` (popped at mark `start`): spread
/// over several buffers or mergeable chains, gathered from several source segments.
template <class Q>
DeliverStatus deliver_frame_rest(Q& q, SegmentArena& scratch, NetHdr hdr, uint32_t hdr_len,
                                 const Segment* src, uint32_t nsrc, uint32_t frame_len,
                                 bool mergeable, typename Q::Mark start, const Chain& first);

/// Writes `hdr` (hdr_len bytes; num_buffers filled in here) and the frame `src` of
/// `frame_len` bytes into the receive queue `q`. Used entries are pushed, not published.
/// `scratch` is cleared and used for the receive chains' segments. On any failure the
/// queue is left as it was, except for kBadRing. `Q` is SplitDeviceQueue (split ring) or
/// PackedDeviceQueue (packed ring). The common case is inline: one source segment into a
/// one-descriptor receive chain that holds header and frame; deliver_frame_rest() does the
/// others.
template <class Q>
[[gnu::always_inline]] inline DeliverStatus deliver_frame(Q& q, SegmentArena& scratch, NetHdr hdr,
                                                          uint32_t hdr_len, const Segment* src,
                                                          uint32_t nsrc, uint32_t frame_len,
                                                          bool mergeable) {
  if (!q.has_avail()) return q.broken() ? DeliverStatus::kBadRing : DeliverStatus::kNoBuffer;
  const auto start = q.mark();
  scratch.clear();
  Chain first;
  OneBuffer b{};  // (initialised for the compiler: written whenever kOne is returned)
  const PopStatus st = q.template pop_any<true>(scratch, &first, &b);
  const uint64_t total = uint64_t{hdr_len} + frame_len;
  if (st == PopStatus::kOne) [[likely]] {
    if (nsrc == 1 && src[0].len >= frame_len && b.len >= total) [[likely]] {
      put_one(q, b, hdr, hdr_len, src[0].ptr, frame_len);
      return DeliverStatus::kOk;
    }
    take_one(scratch, &first, b.head, b.ptr, b.len);
  } else if (st != PopStatus::kOk) [[unlikely]] {
    // A malformed receive chain (or one too fragmented to use) is a driver bug or an attack:
    // stop this queue rather than guess which buffers are usable.
    q.mark_broken();
    return DeliverStatus::kBadRing;
  }
  return deliver_frame_rest(q, scratch, hdr, hdr_len, src, nsrc, frame_len, mergeable, start,
                            first);
}

}  // namespace vl::virtio
