#include "offload/soft_gso.h"

#include <algorithm>
#include <cstring>

#include "offload/checksum.h"

namespace vl::offload {

using namespace vl::virtio;

namespace {

uint16_t rd16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t rd32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}
void wr16(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void wr32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

constexpr uint16_t kEthIpv4 = 0x0800;
constexpr uint16_t kEthIpv6 = 0x86dd;
constexpr uint16_t kEthVlan = 0x8100;
constexpr uint16_t kEthQinQ = 0x88a8;
constexpr uint8_t kProtoTcp = 6;
constexpr uint8_t kTcpFin = 0x01, kTcpPsh = 0x08, kTcpCwr = 0x80;

}  // namespace

TxCheck check_tx_header(NetHdr* h, uint32_t frame_len, uint64_t features) {
  h->flags &= kNetHdrFNeedsCsum;  // DATA_VALID is the device's to set (virtio 1.2 §5.1.6.2)
  if (h->flags & kNetHdrFNeedsCsum) {
    if (!has(features, kNetFCsum)) return TxCheck::kBadCsum;
    if (uint32_t{h->csum_start} + h->csum_offset + 2 > frame_len) return TxCheck::kBadCsum;
  } else {
    h->csum_start = 0;
    h->csum_offset = 0;
  }
  const uint8_t type = h->gso_type & ~kGsoEcn;
  if (type == kNetHdrGsoNone) {
    if (h->gso_type & kGsoEcn) return TxCheck::kBadGso;
    h->gso_size = 0;
    h->hdr_len = 0;
    return TxCheck::kOk;
  }
  if (type == kGsoTcpV4) {
    if (!has(features, kNetFHostTso4)) return TxCheck::kBadGso;
  } else if (type == kGsoTcpV6) {
    if (!has(features, kNetFHostTso6)) return TxCheck::kBadGso;
  } else {
    return TxCheck::kBadGso;  // UFO / USO: not offered
  }
  if ((h->gso_type & kGsoEcn) && !has(features, kNetFHostEcn)) return TxCheck::kBadGso;
  if (h->gso_size == 0 || !(h->flags & kNetHdrFNeedsCsum)) return TxCheck::kBadGso;
  return TxCheck::kOk;
}

bool parse_gso(const uint8_t* f, uint32_t avail, uint32_t len, const NetHdr& h, GsoPlan* p) {
  if (avail > len || avail < kEthHdrLen || h.gso_size == 0) return false;
  uint32_t off = 12;
  uint16_t type = rd16(f + off);
  if (type == kEthVlan || type == kEthQinQ) {
    if (avail < off + 6) return false;
    off += 4;
    type = rd16(f + off);
  }
  off += 2;
  const uint8_t gso = h.gso_type & ~kGsoEcn;
  p->l3off = off;
  if (gso == kGsoTcpV4) {
    if (type != kEthIpv4 || avail < off + 20) return false;
    const uint8_t* ip = f + off;
    const uint32_t ihl = (ip[0] & 0xf) * 4u;
    if ((ip[0] >> 4) != 4 || ihl < 20 || avail < off + ihl) return false;
    if (ip[9] != kProtoTcp) return false;
    if (rd16(ip + 6) & 0x3fff) return false;  // MF or a fragment offset: not segmentable
    const uint32_t tot = rd16(ip + 2);
    if (tot < ihl + 20 || off + tot > len) return false;
    p->l4off = off + ihl;
    p->end = off + tot;
    p->ipv6 = false;
  } else if (gso == kGsoTcpV6) {
    if (type != kEthIpv6 || avail < off + 40) return false;
    const uint8_t* ip = f + off;
    if ((ip[0] >> 4) != 6 || ip[6] != kProtoTcp) return false;  // no extension headers
    const uint32_t plen = rd16(ip + 4);
    if (plen < 20 || off + 40 + plen > len) return false;
    p->l4off = off + 40;
    p->end = off + 40 + plen;
    p->ipv6 = true;
  } else {
    return false;
  }
  if (avail < p->l4off + 20) return false;
  const uint32_t thl = (f[p->l4off + 12] >> 4) * 4u;
  if (thl < 20 || p->l4off + thl > avail || p->l4off + thl > p->end) return false;
  p->hdrs = p->l4off + thl;
  p->mss = h.gso_size;
  const uint32_t payload = p->end - p->hdrs;
  p->nsegs = payload == 0 ? 1 : (payload + p->mss - 1) / p->mss;
  return p->nsegs <= kMaxGsoSegments;
}

void build_segment(const uint8_t* f, const GsoPlan& p, uint32_t i, bool partial, uint8_t* out,
                   uint32_t* pay_off, uint32_t* pay_len) {
  const uint32_t payload = p.end - p.hdrs;
  const uint32_t off = i * p.mss;
  const uint32_t n = std::min(p.mss, payload - off);
  const bool last = i + 1 == p.nsegs;
  std::memcpy(out, f, p.hdrs);
  uint8_t* ip = out + p.l3off;
  uint8_t* th = out + p.l4off;
  const uint32_t l4len = p.hdrs - p.l4off + n;
  uint64_t acc;
  if (!p.ipv6) {
    wr16(ip + 2, p.hdrs - p.l3off + n);
    wr16(ip + 4, rd16(ip + 4) + i);  // Linux increments the id per segment (no FIXEDID)
    ip[10] = ip[11] = 0;
    store_csum(ip + 10, ipv4_header_csum(ip, p.l4off - p.l3off));
    acc = pseudo_sum_v4(ip + 12, kProtoTcp, l4len);
  } else {
    wr16(ip + 4, l4len);
    acc = pseudo_sum_v6(ip + 8, kProtoTcp, l4len);
  }
  wr32(th + 4, rd32(th + 4) + off);
  if (!last) th[13] &= static_cast<uint8_t>(~(kTcpFin | kTcpPsh));
  if (i > 0) th[13] &= static_cast<uint8_t>(~kTcpCwr);
  th[16] = th[17] = 0;
  if (partial) {
    store_csum(th + 16, csum_fold(acc));
  } else {
    acc = csum_add(acc, th, p.hdrs - p.l4off);
    acc = csum_add(acc, f + p.hdrs + off, n);
    store_csum(th + 16, static_cast<uint16_t>(~csum_fold(acc)));
  }
  *pay_off = p.hdrs + off;
  *pay_len = n;
}

void fill_csum(uint8_t* f, uint32_t len, uint32_t csum_start, uint32_t csum_offset) {
  const uint16_t s = static_cast<uint16_t>(~csum_fold(csum_add(0, f + csum_start, len - csum_start)));
  store_csum(f + csum_start + csum_offset, s ? s : 0xffff);
}

}  // namespace vl::offload
