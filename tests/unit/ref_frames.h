#pragma once
// Reference frames for tests: Ethernet / IPv4|IPv6 / TCP|UDP frames built field by field,
// checksums by a plain RFC 1071 loop over big-endian words, independent of src/offload.
// Shared by the offload and uplink tests.
#include <cstdint>
#include <vector>

#include "offload/soft_gso.h"
#include "virtio/virtio_defs.h"

namespace vl::test::ref {

using Bytes = std::vector<uint8_t>;
using virtio::NetHdr;
using namespace virtio;
using offload::kGsoEcn;
using offload::kGsoTcpV4;
using offload::kGsoTcpV6;

/// RFC 1071 the slow way: big-endian 16-bit words, end-around carry, inverted.
inline uint16_t ref_csum(const Bytes& b) {
  uint32_t s = 0;
  for (size_t i = 0; i < b.size(); i += 2) {
    s += uint32_t{b[i]} << 8 | (i + 1 < b.size() ? b[i + 1] : 0);
    s = (s & 0xffff) + (s >> 16);
  }
  return static_cast<uint16_t>(~s);
}
inline void put16(Bytes& b, size_t off, uint32_t v) {
  b[off] = static_cast<uint8_t>(v >> 8);
  b[off + 1] = static_cast<uint8_t>(v);
}
inline void put32(Bytes& b, size_t off, uint32_t v) {
  put16(b, off, v >> 16);
  put16(b, off + 2, v & 0xffff);
}
inline uint16_t get16(const Bytes& b, size_t off) { return static_cast<uint16_t>(b[off] << 8 | b[off + 1]); }

struct FrameSpec {
  bool ipv6 = false;
  bool udp = false;
  bool vlan = false;
  uint32_t seq = 0x01020304;
  uint16_t ip_id = 0x4242;
  uint8_t tcp_flags = 0x18;  // PSH ACK
  Bytes tcp_options;         // a multiple of 4 bytes
  Bytes ip_options;          // IPv4 only, a multiple of 4 bytes
};

/// Pseudo-header bytes (RFC 793 / RFC 8200 §8.1) for the L4 length `l4len`.
inline Bytes pseudo(const Bytes& f, size_t l3, bool ipv6, uint8_t proto, uint32_t l4len) {
  Bytes p;
  if (!ipv6) {
    p.insert(p.end(), f.begin() + l3 + 12, f.begin() + l3 + 20);
    p.insert(p.end(), {0, proto, static_cast<uint8_t>(l4len >> 8), static_cast<uint8_t>(l4len)});
  } else {
    p.insert(p.end(), f.begin() + l3 + 8, f.begin() + l3 + 40);
    p.insert(p.end(), {static_cast<uint8_t>(l4len >> 24), static_cast<uint8_t>(l4len >> 16),
                       static_cast<uint8_t>(l4len >> 8), static_cast<uint8_t>(l4len), 0, 0, 0,
                       proto});
  }
  return p;
}

struct Built {
  Bytes f;
  size_t l3, l4;
};

/// A complete, correct Ethernet / IPv4|IPv6 / TCP|UDP frame carrying `payload`.
/// `csum`: "full" (valid checksums), "partial" (L4 field = pseudo-header sum, as a
/// NEEDS_CSUM sender leaves it).
inline Built build(const FrameSpec& s, const Bytes& payload, bool partial = false) {
  Bytes f = {0x52, 0x54, 0, 0, 0, 2, 0x52, 0x54, 0, 0, 0, 1};
  if (s.vlan) f.insert(f.end(), {0x81, 0x00, 0x00, 0x64});
  f.insert(f.end(), {static_cast<uint8_t>(s.ipv6 ? 0x86 : 0x08), static_cast<uint8_t>(s.ipv6 ? 0xdd : 0x00)});
  const size_t l3 = f.size();
  const uint8_t proto = s.udp ? 17 : 6;
  const size_t l4hdr = s.udp ? 8 : 20 + s.tcp_options.size();
  const uint32_t l4len = static_cast<uint32_t>(l4hdr + payload.size());
  if (!s.ipv6) {
    const size_t ihl = 20 + s.ip_options.size();
    f.resize(l3 + ihl);
    f[l3] = static_cast<uint8_t>(0x40 | ihl / 4);
    put16(f, l3 + 2, static_cast<uint32_t>(ihl + l4len));
    put16(f, l3 + 4, s.ip_id);
    put16(f, l3 + 6, 0x4000);  // DF
    f[l3 + 8] = 64;
    f[l3 + 9] = proto;
    put32(f, l3 + 12, 0x0a000001);
    put32(f, l3 + 16, 0x0a000002);
    std::copy(s.ip_options.begin(), s.ip_options.end(), f.begin() + l3 + 20);
    put16(f, l3 + 10, ref_csum(Bytes(f.begin() + l3, f.end())));
  } else {
    f.resize(l3 + 40);
    f[l3] = 0x60;
    put16(f, l3 + 4, l4len);
    f[l3 + 6] = proto;
    f[l3 + 7] = 64;
    for (int i = 0; i < 16; ++i) {
      f[l3 + 8 + i] = static_cast<uint8_t>(0xfd + i * 7);
      f[l3 + 24 + i] = static_cast<uint8_t>(0x20 + i * 11);
    }
  }
  const size_t l4 = f.size();
  f.resize(l4 + l4hdr);
  if (s.udp) {
    put16(f, l4, 40000);
    put16(f, l4 + 2, 5201);
    put16(f, l4 + 4, l4len);
  } else {
    put16(f, l4, 40000);
    put16(f, l4 + 2, 5201);
    put32(f, l4 + 4, s.seq);
    put32(f, l4 + 8, 0xa0b0c0d0);
    f[l4 + 12] = static_cast<uint8_t>((l4hdr / 4) << 4);
    f[l4 + 13] = s.tcp_flags;
    put16(f, l4 + 14, 502);
    std::copy(s.tcp_options.begin(), s.tcp_options.end(), f.begin() + l4 + 20);
  }
  f.insert(f.end(), payload.begin(), payload.end());
  const size_t cso = l4 + (s.udp ? 6 : 16);
  Bytes ps = pseudo(f, l3, s.ipv6, proto, l4len);
  if (partial) {
    // The pseudo-header sum, not inverted (what Linux leaves for CHECKSUM_PARTIAL).
    put16(f, cso, static_cast<uint16_t>(~ref_csum(ps)));
  } else {
    Bytes all = ps;
    all.insert(all.end(), f.begin() + l4, f.end());
    uint16_t c = ref_csum(all);
    if (s.udp && c == 0) c = 0xffff;
    put16(f, cso, c);
  }
  return {f, l3, l4};
}

inline Bytes payload_of(size_t n, uint8_t seed = 3) {
  Bytes p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 31 + (i >> 8));
  return p;
}

inline const Bytes kTcpOptions = {1, 1, 8, 10, 0, 0, 0x12, 0x34, 0, 0, 0x56, 0x78};  // NOP NOP TS

inline NetHdr tso_hdr(bool ipv6, uint16_t mss, size_t l4, bool ecn = false) {
  NetHdr h{};
  h.flags = kNetHdrFNeedsCsum;
  h.gso_type = static_cast<uint8_t>((ipv6 ? kGsoTcpV6 : kGsoTcpV4) | (ecn ? kGsoEcn : 0));
  h.gso_size = mss;
  h.csum_start = static_cast<uint16_t>(l4);
  h.csum_offset = 16;
  h.hdr_len = 0;
  return h;
}

}  // namespace vl::test::ref
