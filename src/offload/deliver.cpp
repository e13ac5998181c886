#include "offload/deliver.h"

#include <algorithm>

namespace vl::offload {

using namespace vl::virtio;
using port::PortCounters;
using port::Soft;


template <class Q>
Outcome SoftOffload::deliver(Q& rq, SegmentArena& scratch, const NetHdr& h,
                             const Segment* src, uint32_t nsrc, uint32_t len,
                             const port::PortDp& od, PortCounters& oc) {
  const bool gso = h.gso_type != kNetHdrGsoNone;
  const bool csum = (h.flags & kNetHdrFNeedsCsum) != 0;
  if (!gso && !csum) [[likely]] {
    if (len > od.max_frame) return Outcome::kTooBig;
    return map(deliver_frame(rq, scratch, NetHdr{}, od.hdr_len, src, nsrc, len, od.mrg_rxbuf));
  }
  const uint64_t rf = od.features;
  if (!gso) {
    if (len > od.max_frame) return Outcome::kTooBig;
    if (has(rf, kNetFGuestCsum)) {
      NetHdr out{};
      out.flags = kNetHdrFNeedsCsum;
      out.csum_start = h.csum_start;
      out.csum_offset = h.csum_offset;
      return map(deliver_frame(rq, scratch, out, od.hdr_len, src, nsrc, len, od.mrg_rxbuf));
    }
    if (len > sizeof frame_) return Outcome::kTooBig;
    gather_copy(frame_, src, nsrc, 0, len);
    fill_csum(frame_, len, h.csum_start, h.csum_offset);
    const Segment s{frame_, len};
    const Outcome o = map(deliver_frame(rq, scratch, NetHdr{}, od.hdr_len, &s, 1, len, od.mrg_rxbuf));
    if (o == Outcome::kOk) oc.soft_add(Soft::kCsumFilled);
    return o;
  }
  const bool v4 = (h.gso_type & ~kGsoEcn) == kGsoTcpV4;
  const bool takes = has(rf, v4 ? kNetFGuestTso4 : kNetFGuestTso6) && has(rf, kNetFGuestCsum) &&
                     (!(h.gso_type & kGsoEcn) || has(rf, kNetFGuestEcn));
  if (takes) return pass_gso(rq, scratch, h, src, nsrc, len, od, oc);
  return soft_gso(rq, scratch, h, src, nsrc, len, od, oc);
}

template <class Q>
Outcome SoftOffload::pass_gso(Q& rq, SegmentArena& scratch, const NetHdr& h,
                              const Segment* src, uint32_t nsrc, uint32_t len,
                              const port::PortDp& od, PortCounters& oc) {
  // The receiver's kernel trusts what we tell it: check the headers the metadata describes
  // (on a local copy of them) and describe them ourselves.
  const uint32_t avail = std::min(len, kMaxGsoHeaders);
  gather_copy(hdrs_, src, nsrc, 0, avail);
  GsoPlan p;
  if (!parse_gso(hdrs_, avail, len, h, &p)) return Outcome::kBadGso;
  if (p.hdrs + p.mss > od.max_frame) return Outcome::kTooBig;
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
      map(deliver_frame(rq, scratch, out, od.hdr_len, src, nsrc, p.end, od.mrg_rxbuf));
  if (o == Outcome::kOk) oc.soft_add(Soft::kGsoPassed);
  return o;
}

template <class Q>
Outcome SoftOffload::soft_gso(Q& rq, SegmentArena& scratch, const NetHdr& h,
                              const Segment* src, uint32_t nsrc, uint32_t len,
                              const port::PortDp& od, PortCounters& oc) {
  if (len > sizeof frame_) return Outcome::kTooBig;
  gather_copy(frame_, src, nsrc, 0, len);
  GsoPlan p;
  if (!parse_gso(frame_, len, len, h, &p)) return Outcome::kBadGso;
  if (p.hdrs + std::min(p.mss, p.end - p.hdrs) > od.max_frame) return Outcome::kTooBig;
  // A receiver that takes NEEDS_CSUM gets the pseudo-header sum and finishes the checksum
  // itself (or never needs it: local delivery); the others get a complete checksum.
  const bool partial = has(od.features, kNetFGuestCsum);
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
        map(deliver_frame(rq, scratch, out, od.hdr_len, s, n ? 2 : 1, p.hdrs + n, od.mrg_rxbuf));
    if (o != Outcome::kOk) {
      oc.soft_add(Soft::kGsoSegments, i);
      return o;
    }
  }
  oc.soft_add(Soft::kGsoFrames);
  oc.soft_add(Soft::kGsoSegments, p.nsegs);
  return Outcome::kOk;
}

template Outcome SoftOffload::deliver<DeviceQueue>(DeviceQueue&, SegmentArena&, const NetHdr&,
                                                   const Segment*, uint32_t, uint32_t,
                                                   const port::PortDp&, PortCounters&);
template Outcome SoftOffload::deliver<PackedDeviceQueue>(PackedDeviceQueue&, SegmentArena&,
                                                         const NetHdr&, const Segment*, uint32_t,
                                                         uint32_t, const port::PortDp&,
                                                         PortCounters&);

}  // namespace vl::offload
