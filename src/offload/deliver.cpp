#include "offload/deliver.h"

#include <algorithm>

namespace vl::offload {

using namespace vl::virtio;


template <class Q>
Outcome SoftOffload::deliver(Q& rq, SegmentArena& scratch, const NetHdr& h,
                             const Segment* src, uint32_t nsrc, uint32_t len,
                             const RxCaps& caps, WorkCounters& work) {
  const bool gso = h.gso_type != kNetHdrGsoNone;
  const bool csum = (h.flags & kNetHdrFNeedsCsum) != 0;
  if (!gso && !csum) [[likely]] {
    if (len > caps.max_frame) return Outcome::kTooBig;
    return map(deliver_frame(rq, scratch, NetHdr{}, caps.hdr_len, src, nsrc, len, caps.mrg_rxbuf));
  }
  const uint64_t rf = caps.features;
  if (!gso) {
    if (len > caps.max_frame) return Outcome::kTooBig;
    if (has(rf, kNetFGuestCsum)) {
      NetHdr out{};
      out.flags = kNetHdrFNeedsCsum;
      out.csum_start = h.csum_start;
      out.csum_offset = h.csum_offset;
      return map(deliver_frame(rq, scratch, out, caps.hdr_len, src, nsrc, len, caps.mrg_rxbuf));
    }
    if (len > sizeof frame_) return Outcome::kTooBig;
    gather_copy(frame_, src, nsrc, 0, len);
    fill_csum(frame_, len, h.csum_start, h.csum_offset);
    const Segment s{frame_, len};
    const Outcome o = map(deliver_frame(rq, scratch, NetHdr{}, caps.hdr_len, &s, 1, len, caps.mrg_rxbuf));
    if (o == Outcome::kOk) work.add(Work::kCsumFilled);
    return o;
  }
  if (takes_gso(h.gso_type, rf)) return pass_gso(rq, scratch, h, src, nsrc, len, caps, work);
  return soft_gso(rq, scratch, h, src, nsrc, len, caps, work);
}

template <class Q>
Outcome SoftOffload::pass_gso(Q& rq, SegmentArena& scratch, const NetHdr& h,
                              const Segment* src, uint32_t nsrc, uint32_t len,
                              const RxCaps& caps, WorkCounters& work) {
  // The receiver's kernel trusts what we tell it: check the headers the metadata describes
  // (on a local copy of them) and describe them ourselves.
  const uint32_t avail = std::min(len, kMaxGsoHeaders);
  gather_copy(hdrs_, src, nsrc, 0, avail);
  GsoPlan p;
  if (!parse_gso(hdrs_, avail, len, h, &p)) return Outcome::kBadGso;
  if (p.hdrs + p.mss > caps.max_frame) return Outcome::kTooBig;
  NetHdr out{};
  out.flags = kNetHdrFNeedsCsum;
  out.gso_type = h.gso_type;
  out.gso_size = h.gso_size;
  out.hdr_len = static_cast<uint16_t>(p.hdrs);
  out.csum_start = static_cast<uint16_t>(p.l4off);
  out.csum_offset = 16;  // TCP checksum field
  // Only the IP packet travels: bytes past its end (a sender's chain may be far longer than
  // 64 KiB) would otherwise reach the receiver unbounded by any length it can check.
  const Outcome o =
      map(deliver_frame(rq, scratch, out, caps.hdr_len, src, nsrc, p.end, caps.mrg_rxbuf));
  if (o == Outcome::kOk) work.add(Work::kGsoPassed);
  return o;
}

template <class Q>
Outcome SoftOffload::soft_gso(Q& rq, SegmentArena& scratch, const NetHdr& h,
                              const Segment* src, uint32_t nsrc, uint32_t len,
                              const RxCaps& caps, WorkCounters& work) {
  if (len > sizeof frame_) return Outcome::kTooBig;
  gather_copy(frame_, src, nsrc, 0, len);
  GsoPlan p;
  if (!parse_gso(frame_, len, len, h, &p)) return Outcome::kBadGso;
  if (p.hdrs + std::min(p.mss, p.end - p.hdrs) > caps.max_frame) return Outcome::kTooBig;
  // A receiver that takes NEEDS_CSUM gets the pseudo-header sum and finishes the checksum
  // itself (or never needs it: local delivery); the others get a complete checksum.
  const bool partial = has(caps.features, kNetFGuestCsum);
  NetHdr out{};
  if (partial) {
    out.flags = kNetHdrFNeedsCsum;
    out.csum_start = static_cast<uint16_t>(p.l4off);
    out.csum_offset = 16;
  }
  for (uint32_t i = 0; i < p.nsegs; ++i) {
    uint32_t off, n;
    build_segment(frame_, p, i, partial, hdrs_, &off, &n);
    const Segment s[2] = {{hdrs_, p.hdrs}, {frame_ + off, n}};
    const Outcome o =
        map(deliver_frame(rq, scratch, out, caps.hdr_len, s, n ? 2 : 1, p.hdrs + n, caps.mrg_rxbuf));
    if (o != Outcome::kOk) {
      work.add(Work::kGsoSegments, i);
      return o;
    }
  }
  work.add(Work::kGsoFrames);
  work.add(Work::kGsoSegments, p.nsegs);
  return Outcome::kOk;
}

template Outcome SoftOffload::deliver<SplitDeviceQueue>(SplitDeviceQueue&, SegmentArena&, const NetHdr&,
                                                   const Segment*, uint32_t, uint32_t,
                                                   const RxCaps&, WorkCounters&);
template Outcome SoftOffload::deliver<PackedDeviceQueue>(PackedDeviceQueue&, SegmentArena&,
                                                         const NetHdr&, const Segment*, uint32_t,
                                                         uint32_t, const RxCaps&,
                                                         WorkCounters&);

}  // namespace vl::offload
