#pragma once
// Delivering one transmitted frame to a receiving port with its offload metadata: the
// virtio-net header travels with the frame when the receiver negotiated what it needs
// (GUEST_CSUM for NEEDS_CSUM; GUEST_TSO4/6, GUEST_CSUM and, for ECN, GUEST_ECN for a TSO
// frame, up to 64 KiB through mergeable receive buffers); otherwise the work is done here
// in software: the checksum filled in, or the frame cut into gso_size segments.
//
// The common frame (no offload asked for) goes straight to virtio::deliver_frame, copied
// once from the sender's buffers. The software path first copies the frame into a
// per-thread scratch area (so a guest changing its buffer under us changes nothing we
// parsed), then delivers from there: one more copy, only for frames the receiver could not
// take as they were. No allocation.
#include <cstdint>

#include "offload/rx_caps.h"
#include "offload/soft_gso.h"
#include "offload/work_counters.h"
#include "virtio/net_copy.h"

namespace vl::offload {

enum class Outcome : uint8_t {
  kOk,
  kNoBuffer,  ///< receiver had no buffer (for a segmented frame: some segments may be in)
  kTooBig,    ///< above the receiver's largest frame (a segment, for a segmented frame)
  kBadRing,   ///< the receive queue is broken
  kBadGso,    ///< the TSO frame's headers are not segmentable (count on the ingress port)
  kShortBuffer,  ///< the receiver's next buffer could take no frame; it was returned unused
};

/// The outcome of a plain delivery (virtio::deliver_frame).
inline Outcome map(virtio::DeliverStatus s) {
  switch (s) {
    case virtio::DeliverStatus::kOk: return Outcome::kOk;
    case virtio::DeliverStatus::kNoBuffer: return Outcome::kNoBuffer;
    case virtio::DeliverStatus::kTooBig: return Outcome::kTooBig;
    case virtio::DeliverStatus::kShortBuffer: return Outcome::kShortBuffer;
    case virtio::DeliverStatus::kBadRing: break;
  }
  return Outcome::kBadRing;
}

/// Per-PMD-thread state of the software offloads: the scratch frame and segment headers.
class SoftOffload {
 public:
  /// True when deliver() puts a frame with header `h` into a receiver with `caps` in one
  /// piece (one deliver_frame: plain, checksum filled in or passed on, TSO passed whole),
  /// so a kNoBuffer outcome left nothing in the queue; false for software segmentation.
  static bool delivers_whole(const virtio::NetHdr& h, const RxCaps& caps) {
    return h.gso_type == virtio::kNetHdrGsoNone || takes_gso(h.gso_type, caps.features);
  }
  /// The receiver (features `rf`) takes a TSO frame of `gso_type` whole: TSO4/6 as the
  /// type says, GUEST_CSUM, and GUEST_ECN if the frame has ECN (virtio 1.2 §5.1.6.4).
  static bool takes_gso(uint8_t gso_type, uint64_t rf) {
    const bool v4 = (gso_type & ~kGsoEcn) == kGsoTcpV4;
    return virtio::has(rf, v4 ? virtio::kNetFGuestTso4 : virtio::kNetFGuestTso6) &&
           virtio::has(rf, virtio::kNetFGuestCsum) &&
           (!(gso_type & kGsoEcn) || virtio::has(rf, virtio::kNetFGuestEcn));
  }
  /// Delivers the frame of `len` bytes at `src` (`nsrc` segments, sender's memory) whose
  /// header `h` passed check_tx_header(), to the receive queue `rq` of a port that
  /// negotiated `caps`. Counts software work and passed-through TSO frames in `work` (the
  /// receiver's counters).
  /// `Q`: virtio::SplitDeviceQueue or PackedDeviceQueue (instantiated in deliver.cpp).
  template <class Q>
  Outcome deliver(Q& rq, virtio::SegmentArena& scratch, const virtio::NetHdr& h,
                  const virtio::Segment* src, uint32_t nsrc, uint32_t len, const RxCaps& caps,
                  WorkCounters& work);

 private:
  template <class Q>
  Outcome pass_gso(Q& rq, virtio::SegmentArena& scratch, const virtio::NetHdr& h,
                   const virtio::Segment* src, uint32_t nsrc, uint32_t len, const RxCaps& caps,
                   WorkCounters& work);
  template <class Q>
  Outcome soft_gso(Q& rq, virtio::SegmentArena& scratch, const virtio::NetHdr& h,
                   const virtio::Segment* src, uint32_t nsrc, uint32_t len, const RxCaps& caps,
                   WorkCounters& work);

  alignas(64) uint8_t frame_[virtio::kMaxFrameLen + 64];
  alignas(64) uint8_t hdrs_[kMaxGsoHeaders + 8];
};

}  // namespace vl::offload
