#pragma once
// Moving virtio-net frames between scatter lists: reading the virtio-net header off a
// transmitted chain, and writing header + frame into a driver's receive buffers (with or
// without mergeable RX buffers, virtio 1.2 §5.1.6.3-4).
//
// This is where a frame is copied, once, from the sender's buffer into the receiver's
// buffer: the datapath hands the sender's segments (pointers into its guest memory) here.
#include <cstdint>

#include "virtio/device_queue.h"
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
};

/// Writes `hdr` (hdr_len bytes; num_buffers filled in here) and the frame `src` of
/// `frame_len` bytes into the receive queue `q`. Used entries are pushed, not published.
/// `scratch` is cleared and used for the receive chains' segments. On any failure the
/// queue is left as it was, except for kBadRing. `Q` is DeviceQueue (split ring) or
/// PackedDeviceQueue (packed ring); both are instantiated in net_copy.cpp.
template <class Q>
DeliverStatus deliver_frame(Q& q, SegmentArena& scratch, NetHdr hdr, uint32_t hdr_len,
                            const Segment* src, uint32_t nsrc, uint32_t frame_len,
                            bool mergeable);

}  // namespace vl::virtio
