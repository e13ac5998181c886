#pragma once
// The Internet checksum (RFC 1071) as the software offloads need it: a ones'-complement sum
// over bytes, folded to 16 bits, and the TCP/UDP pseudo-headers of IPv4 (RFC 793 §3.1,
// RFC 768) and IPv6 (RFC 8200 §8.1).
//
// Sums are kept in memory byte order: the ones'-complement sum is independent of byte
// order (RFC 1071 §2(B)), so a sum of little-endian 16-bit words, folded and stored with
// memcpy, lands in the packet as the network-order checksum. Every chunk added must start
// at an even offset from the start of the checksummed area, except that the last may end
// on an odd byte.
#include <cstdint>
#include <cstring>

namespace vl::offload {

/// Adds the bytes [p, p+n) to the running sum `acc` (memory byte order, unfolded).
inline uint64_t csum_add(uint64_t acc, const uint8_t* p, uint32_t n) {
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    acc += w & 0xffffffffu;
    acc += w >> 32;
    p += 8;
    n -= 8;
  }
  if (n >= 4) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    acc += w;
    p += 4;
    n -= 4;
  }
  if (n >= 2) {
    uint16_t w;
    std::memcpy(&w, p, 2);
    acc += w;
    p += 2;
    n -= 2;
  }
  if (n) acc += *p;  // the odd last byte is the first byte of a zero-padded word
  return acc;
}

/// Folds a running sum to 16 bits (not inverted).
inline uint16_t csum_fold(uint64_t acc) {
  while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
  return static_cast<uint16_t>(acc);
}

/// Sum of the IPv4 pseudo-header: source and destination addresses (`addrs`: 8 bytes as in
/// the IPv4 header at offset 12), zero, protocol, L4 length (bytes).
inline uint64_t pseudo_sum_v4(const uint8_t* addrs, uint8_t proto, uint32_t l4_len) {
  const uint8_t tail[4] = {0, proto, static_cast<uint8_t>(l4_len >> 8),
                           static_cast<uint8_t>(l4_len)};
  return csum_add(csum_add(0, addrs, 8), tail, 4);
}

/// Sum of the IPv6 pseudo-header: source and destination addresses (`addrs`: 32 bytes as
/// in the IPv6 header at offset 8), upper-layer length (32 bits), zero, next header.
inline uint64_t pseudo_sum_v6(const uint8_t* addrs, uint8_t proto, uint32_t l4_len) {
  const uint8_t tail[8] = {static_cast<uint8_t>(l4_len >> 24), static_cast<uint8_t>(l4_len >> 16),
                           static_cast<uint8_t>(l4_len >> 8),  static_cast<uint8_t>(l4_len),
                           0, 0, 0, proto};
  return csum_add(csum_add(0, addrs, 32), tail, 8);
}

/// Stores the 16-bit value `v` (memory byte order, as csum_fold returns it) at `p`.
inline void store_csum(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

/// The IPv4 header checksum of the `ihl_bytes`-byte header at `ip` (its checksum field is
/// treated as zero); memory byte order, ready for store_csum.
inline uint16_t ipv4_header_csum(const uint8_t* ip, uint32_t ihl_bytes) {
  uint64_t acc = csum_add(0, ip, 10);
  acc = csum_add(acc, ip + 12, ihl_bytes - 12);
  return static_cast<uint16_t>(~csum_fold(acc));
}

}  // namespace vl::offload
