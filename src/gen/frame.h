#pragma once
// Test frames: Ethernet + IPv4 + UDP with a 22-byte virtlink trailer carried at the start of
// the UDP payload, so the smallest frame is 64 bytes (no FCS).
//
// Flows (INTERFACES.md "Flows"): flow i of N has destination MAC dst_base + i, source IPv4
// src_ip_base + i, UDP source and destination ports 1024 + i % 60000; the source MAC is
// the sending port's. The trailer: magic (u16 0x564c "VL"), stream (u32: trial number << 16
// | stream index), sequence (u64), TX timestamp (u64, TSC ticks), little-endian.
#include <cstdint>
#include <cstring>

namespace vl::gen {

inline constexpr uint32_t kEthLen = 14, kIpLen = 20, kUdpLen = 8;
inline constexpr uint32_t kTrailerOff = kEthLen + kIpLen + kUdpLen;  ///< 42
inline constexpr uint32_t kTrailerLen = 22;
inline constexpr uint32_t kMinFrame = kTrailerOff + kTrailerLen;  ///< 64 bytes
inline constexpr uint32_t kMaxFrame = 9018;
inline constexpr uint16_t kMagic = 0x564c;

struct FlowSpec {
  uint64_t src_mac = 0;      ///< 48-bit
  uint64_t dst_mac_base = 0;  ///< 48-bit; flow i uses + i
  uint32_t src_ip_base = 0xc6120001;  ///< 198.18.0.1 (RFC 2544 range); flow i uses + i
  uint32_t dst_ip = 0xc6130001;       ///< 198.19.0.1
  uint32_t flows = 1;
};

/// Writes a complete frame of `len` bytes (kMinFrame..kMaxFrame) for flow `flow` into
/// `out`, with the trailer's sequence and timestamp zero (patched by stamp()) and the
/// payload behind the trailer filled with payload_byte(0, 1, ...).
void build_frame(uint8_t* out, uint32_t len, const FlowSpec& spec, uint32_t flow,
                 uint32_t stream);

/// Rewrites the per-flow fields (destination MAC, source IPv4 and its checksum, UDP ports)
/// of a frame built by build_frame() for another flow: no full rebuild per frame.
void patch_flow(uint8_t* frame, const FlowSpec& spec, uint32_t flow);

/// Patches sequence and timestamp into a frame built by build_frame().
inline void stamp(uint8_t* frame, uint64_t seq, uint64_t tsc) {
  std::memcpy(frame + kTrailerOff + 6, &seq, 8);
  std::memcpy(frame + kTrailerOff + 14, &tsc, 8);
}

struct Trailer {
  uint32_t stream;
  uint64_t seq;
  uint64_t tsc;
};

/// Reads the trailer of a received frame; false if it is not one of ours.
inline bool parse_trailer(const uint8_t* frame, uint32_t len, Trailer* t) {
  if (len < kMinFrame) return false;
  uint16_t magic;
  std::memcpy(&magic, frame + kTrailerOff, 2);
  if (magic != kMagic) return false;
  std::memcpy(&t->stream, frame + kTrailerOff + 2, 4);
  std::memcpy(&t->seq, frame + kTrailerOff + 6, 8);
  std::memcpy(&t->tsc, frame + kTrailerOff + 14, 8);
  return true;
}

/// The byte build_frame() puts at offset `off` of the payload behind the trailer.
inline uint8_t payload_byte(uint32_t off) { return static_cast<uint8_t>(off * 7 + 0x5a); }

/// Checks a received frame of ours end to end: IPv4 header checksum, IPv4 total length
/// against the frame length, and every payload byte behind the trailer (build_frame's
/// pattern). False if any byte differs (a frame corrupted or truncated on its way).
bool payload_intact(const uint8_t* frame, uint32_t len);

/// A 64-byte learning frame (RFC 2889 address learning): broadcast destination, source
/// MAC `mac`, so a bridge learns `mac` on the port it arrives from.
void build_learning_frame(uint8_t* out, uint64_t mac);

/// Parses "aa:bb:cc:dd:ee:ff" into 48 bits; false if malformed.
bool parse_mac(const char* s, uint64_t* mac);

}  // namespace vl::gen
