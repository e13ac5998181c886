#pragma once
// The flow hash of a frame's bytes: Ethernet addresses, then (past up to two VLAN tags) IPv4
// or IPv6 source and destination, then TCP or UDP ports when the packet is not a later
// fragment (IPv6: only when the next header is TCP or UDP; extension headers are not
// walked). Frames of one flow always get the same hash. Used to spread output over receive
// queues (dp/flow_hash.h) and for a VXLAN packet's UDP source port (RFC 7348 §5).
#include <cstdint>
#include <cstring>

namespace vl {

namespace flow_detail {
inline uint32_t mix(uint32_t h, uint32_t v) {
  h ^= v;
  h *= 0x9e3779b1u;
  return h ^ (h >> 15);
}
inline uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint16_t load_be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
}  // namespace flow_detail

/// Hash of the `len` contiguous bytes of a frame (an Ethernet frame; shorter ones hash
/// whatever they hold).
inline uint32_t flow_hash_bytes(const uint8_t* f, uint32_t len) {
  using namespace flow_detail;
  if (len < 14) return 0;
  uint32_t h = 0x5bd1e995u;
  h = mix(h, load32(f));
  h = mix(h, load32(f + 4));
  h = mix(h, load32(f + 8));
  uint32_t off = 12;
  uint16_t type = load_be16(f + off);
  for (int tags = 0; tags < 2 && (type == 0x8100 || type == 0x88a8) && off + 6 <= len; ++tags) {
    off += 4;
    type = load_be16(f + off);
  }
  off += 2;
  uint8_t proto = 0;
  uint32_t l4 = 0;
  if (type == 0x0800 && off + 20 <= len) {
    const uint8_t* ip = f + off;
    h = mix(h, load32(ip + 12));
    h = mix(h, load32(ip + 16));
    const uint32_t ihl = (ip[0] & 0xf) * 4u;
    const bool later_fragment = (load_be16(ip + 6) & 0x1fff) != 0;
    proto = ip[9];
    if (!later_fragment && ihl >= 20) l4 = off + ihl;
  } else if (type == 0x86dd && off + 40 <= len) {
    const uint8_t* ip = f + off;
    for (uint32_t i = 8; i < 40; i += 4) h = mix(h, load32(ip + i));
    proto = ip[6];
    l4 = off + 40;
  }
  if ((proto == 6 || proto == 17) && l4 && l4 + 4 <= len) h = mix(h, load32(f + l4));
  return h ^ (h >> 16);
}

}  // namespace vl
