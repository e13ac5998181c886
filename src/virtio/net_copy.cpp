#include "virtio/net_copy.h"

#include <algorithm>
#include <cstring>

namespace vl::virtio {

void gather_copy(uint8_t* dst, const Segment* src, uint32_t nsrc, uint32_t skip, uint32_t len) {
  for (uint32_t i = 0; i < nsrc && len; ++i) {
    if (skip >= src[i].len) {
      skip -= src[i].len;
      continue;
    }
    const uint32_t n = std::min(src[i].len - skip, len);
    std::memcpy(dst, src[i].ptr + skip, n);
    dst += n;
    len -= n;
    skip = 0;
  }
}

bool split_tx_chain(SegmentArena& arena, const Chain& chain, uint32_t hdr_len, TxFrame* out) {
  if (chain.len < hdr_len + kEthHdrLen) return false;
  Segment* s = &arena.segs[chain.seg_begin];
  out->hdr = NetHdr{};
  if (s[0].len >= hdr_len) [[likely]] {
    if (hdr_len == sizeof(NetHdr)) std::memcpy(&out->hdr, s[0].ptr, sizeof(NetHdr));
    else std::memcpy(&out->hdr, s[0].ptr, hdr_len);
  } else {
    gather_copy(reinterpret_cast<uint8_t*>(&out->hdr), s, chain.nsegs, 0, hdr_len);
  }
  compiler_barrier();
  // Trim the header off the front of the segment list.
  uint32_t i = 0;
  uint32_t skip = hdr_len;
  while (skip >= s[i].len) {  // terminates: chain.len > hdr_len
    skip -= s[i].len;
    ++i;
  }
  s[i].ptr += skip;
  s[i].len -= skip;
  out->seg_begin = chain.seg_begin + i;
  out->nsegs = chain.nsegs - i;
  out->len = chain.len - hdr_len;
  return true;
}

namespace {

/// A cursor over a scatter list that is read in order.
struct Reader {
  const Segment* s;
  uint32_t n;
  uint32_t i = 0;
  uint32_t off = 0;
  /// Copies up to `cap` bytes into `dst`; returns the bytes copied.
  uint32_t read(uint8_t* dst, uint32_t cap) {
    uint32_t done = 0;
    while (done < cap && i < n) {
      const uint32_t k = std::min(s[i].len - off, cap - done);
      std::memcpy(dst + done, s[i].ptr + off, k);
      done += k;
      off += k;
      if (off == s[i].len) {
        ++i;
        off = 0;
      }
    }
    return done;
  }
};

/// Fills one receive chain's segments from the header then the frame. Returns bytes written.
uint32_t fill_chain(const Segment* dst, uint32_t ndst, const uint8_t* hdr, uint32_t* hdr_left,
                    Reader& frame, uint32_t* frame_left) {
  uint32_t written = 0;
  for (uint32_t i = 0; i < ndst && (*hdr_left || *frame_left); ++i) {
    uint8_t* p = dst[i].ptr;
    uint32_t room = dst[i].len;
    if (*hdr_left) {
      const uint32_t k = std::min(room, *hdr_left);
      std::memcpy(p, hdr, k);  // hdr already points at the first unwritten header byte
      hdr += k;
      *hdr_left -= k;
      p += k;
      room -= k;
      written += k;
    }
    if (room && *frame_left) {
      const uint32_t k = frame.read(p, std::min(room, *frame_left));
      *frame_left -= k;
      written += k;
    }
  }
  return written;
}

/// Writes `v` at byte offset `off` of a scatter list (the num_buffers field).
void write_u16_at(const Segment* dst, uint32_t ndst, uint32_t off, uint16_t v) {
  uint8_t b[2];
  std::memcpy(b, &v, 2);
  for (uint32_t i = 0, k = 0; i < ndst && k < 2; ++i) {
    while (k < 2 && off < dst[i].len) dst[i].ptr[off++] = b[k++];
    off = off >= dst[i].len ? off - dst[i].len : off;
  }
}

/// Live migration: marks the first `bytes` bytes of a receive chain's segments in the log
/// (after they were written).
void log_written(DirtyLog* log, const GuestMemory* mem, const Segment* segs, uint32_t n,
                 uint64_t bytes) {
  for (uint32_t i = 0; i < n && bytes; ++i) {
    const uint64_t k = segs[i].len < bytes ? segs[i].len : bytes;
    log->mark_host(*mem, segs[i].ptr, k);
    bytes -= k;
  }
}

}  // namespace

template <class Q>
DeliverStatus deliver_frame_rest(Q& q, SegmentArena& scratch, NetHdr hdr, uint32_t hdr_len,
                                 const Segment* src, uint32_t nsrc, uint32_t frame_len,
                                 bool mergeable, typename Q::Mark start, const Chain& first) {
  const uint64_t total = uint64_t{hdr_len} + frame_len;
  // A first chain that can take no real frame: shorter than the header with mergeable
  // buffers (num_buffers, header bytes 10-11, must be in the first buffer: virtio 1.2
  // §5.1.6.3.1 asks every buffer to hold the header), or than the header plus the shortest
  // valid Ethernet frame without them (where §5.1.6.3.1 asks for 1526 bytes or more; left
  // in place, such a chain would make every frame too_big and stall the queue). Returned
  // unused, so that the queue does not stall on it and the driver never reads a header
  // split over two buffers (hostile-inputs.md item 21).
  if (first.len < (mergeable ? hdr_len : hdr_len + kEthZlen)) [[unlikely]] {
    q.push_used(first.head, 0, first.ring_descs);
    return DeliverStatus::kShortBuffer;
  }
  DirtyLog* const log = q.dirty_log();
  PopStatus st;
  Reader frame{src, nsrc};
  uint32_t frame_left = frame_len;
  if (first.len >= total || !mergeable) {
    if (first.len < total) {
      q.restore(start);
      return DeliverStatus::kTooBig;
    }
    hdr.num_buffers = 1;
    uint32_t hdr_left = hdr_len;
    const uint32_t w = fill_chain(&scratch.segs[first.seg_begin], first.nsegs,
                                  reinterpret_cast<const uint8_t*>(&hdr), &hdr_left, frame,
                                  &frame_left);
    if (log) [[unlikely]] log_written(log, q.memory(), &scratch.segs[first.seg_begin], first.nsegs, w);
    q.push_used(first.head, w, first.ring_descs);
    return DeliverStatus::kOk;
  }

  // Mergeable receive buffers: spread the frame over as many chains as it takes.
  //
  // The work this frame may cost is bounded by the queue and the frame, never by how the
  // driver shapes its chains: each pop may read up to 2 * size descriptors, and every avail
  // entry may name the same queue-long chain of empty buffers, so without a bound one frame
  // costs size^2 descriptor reads (2^30 at size 32768: seconds of a PMD thread shared with
  // other ports; hostile-inputs.md item 17). A legitimate driver's chains in flight are
  // disjoint and each descriptor holds at least a byte, so the chains of one frame read at
  // most 2 * size descriptors plus one per byte of header and frame. Past that budget the
  // receive queue is broken, like any other malformed receive chain.
  const uint64_t budget = 2ull * q.size() + total;
  uint64_t cost = first.ndesc;
  uint32_t hdr_left = hdr_len;
  const uint8_t* hdr_bytes = reinterpret_cast<const uint8_t*>(&hdr);
  uint16_t nbufs = 0;
  Chain c = first;
  for (;;) {
    const uint32_t before_hdr = hdr_left;
    const uint32_t w = fill_chain(&scratch.segs[c.seg_begin], c.nsegs,
                                  hdr_bytes + (hdr_len - before_hdr), &hdr_left, frame,
                                  &frame_left);
    if (log) [[unlikely]] log_written(log, q.memory(), &scratch.segs[c.seg_begin], c.nsegs, w);
    q.push_used(c.head, w, c.ring_descs);
    ++nbufs;
    if (!hdr_left && !frame_left) break;
    // Nothing is published while a frame is spread, so a driver cannot legitimately offer
    // more than a queue's worth of buffers for it (and num_buffers has 16 bits).
    if (nbufs >= q.size() || !q.has_avail()) {
      q.restore(start);
      return q.broken() ? DeliverStatus::kBadRing : DeliverStatus::kNoBuffer;
    }
    if (!scratch.has_room_for_chain()) scratch.used = first.seg_begin + first.nsegs;
    st = q.template pop<true>(scratch, &c);
    // A malformed chain or a walk over budget mid-spread: the queue stops. Nothing of this
    // frame is published (restore): a driver must not see the chains written so far as a
    // frame whose num_buffers was never set (hostile-inputs.md item 21).
    if (st != PopStatus::kOk) [[unlikely]] {
      q.restore(start);
      q.mark_broken();
      return DeliverStatus::kBadRing;
    }
    cost += c.ndesc;
    if (cost > budget) [[unlikely]] {
      q.restore(start);
      q.mark_broken();
      return DeliverStatus::kBadRing;
    }
  }
  // num_buffers (header bytes 10-11) is in the first chain, which holds the header (above).
  if (hdr_len >= 12) {
    write_u16_at(&scratch.segs[first.seg_begin], first.nsegs, 10, nbufs);
    if (log) [[unlikely]] log_written(log, q.memory(), &scratch.segs[first.seg_begin], first.nsegs, 12);
  }
  return DeliverStatus::kOk;
}

template DeliverStatus deliver_frame_rest<SplitDeviceQueue>(SplitDeviceQueue&, SegmentArena&, NetHdr,
                                                      uint32_t, const Segment*, uint32_t,
                                                      uint32_t, bool, SplitDeviceQueue::Mark,
                                                      const Chain&);
template DeliverStatus deliver_frame_rest<PackedDeviceQueue>(PackedDeviceQueue&, SegmentArena&,
                                                            NetHdr, uint32_t, const Segment*,
                                                            uint32_t, uint32_t, bool,
                                                            PackedDeviceQueue::Mark,
                                                            const Chain&);

}  // namespace vl::virtio
