#pragma once
// Software offloads on a linear copy of a frame: the checksum a NEEDS_CSUM header asks for,
// and TCP segmentation (TSO/GSO) of IPv4 and IPv6 frames by the sender's gso_size, as a
// device does when the receiving port did not negotiate the offload (virtio 1.2 §5.1.6.2,
// §5.1.6.4). Plus the check of a transmitted header's offload fields, before any use.
//
// Security model: the header and the frame come from a guest. check_tx_header() looks at
// the header alone (offsets against the frame length, gso_type against the negotiated
// features, gso_size 0) and is cheap enough for every frame; parse_gso() checks every
// header field it uses against the bytes it was given (`avail`) and the frame (`len`), so a
// frame whose headers lie is refused, never read out of bounds (hostile-inputs.md 16-17).
// Nothing here allocates: segments are built one at a time into a caller's buffer.
#include <cstdint>

#include "virtio/virtio_defs.h"

namespace vl::offload {

// gso_type values (virtio 1.2 §5.1.6).
inline constexpr uint8_t kGsoTcpV4 = 1;
inline constexpr uint8_t kGsoUdp = 3;
inline constexpr uint8_t kGsoTcpV6 = 4;
inline constexpr uint8_t kGsoUdpL4 = 5;
inline constexpr uint8_t kGsoEcn = 0x80;

/// Most bytes of headers in front of a TCP payload: Ethernet 14 + one VLAN tag 4 +
/// IPv4 with options 60 (IPv6 without extension headers: 40) + TCP with options 60.
inline constexpr uint32_t kMaxGsoHeaders = 14 + 4 + 60 + 60;
/// Most segments one frame may be cut into (a 64 KiB frame at gso_size 64); more is
/// refused as bad_gso, which bounds the work one transmitted frame can cause.
inline constexpr uint32_t kMaxGsoSegments = 1024;

enum class TxCheck : uint8_t { kOk, kBadCsum, kBadGso };

/// Checks the offload fields of `*h`, read off the transmit queue of a port that negotiated
/// `features`, for a frame of `frame_len` bytes; clears what must not travel further
/// (DATA_VALID and unknown flags; gso fields of a non-GSO frame). kBadCsum: NEEDS_CSUM
/// without CSUM negotiated, or csum_start + csum_offset + 2 past the frame. kBadGso:
/// unknown or not negotiated gso_type (HOST_TSO4/6, HOST_ECN), gso_size 0, or a GSO frame
/// without NEEDS_CSUM.
TxCheck check_tx_header(virtio::NetHdr* h, uint32_t frame_len, uint64_t features);

/// The common case, checked inline: a header that asks for no offload (no NEEDS_CSUM, no
/// gso_type) is valid for any features and frame length; it is cleared to the header
/// check_tx_header() would leave (all zero) and true returned. Anything else returns false
/// untouched: call check_tx_header().
inline bool plain_tx_header(virtio::NetHdr* h) {
  if ((h->flags & virtio::kNetHdrFNeedsCsum) || h->gso_type != virtio::kNetHdrGsoNone) return false;
  *h = virtio::NetHdr{};
  return true;
}

/// Where a TCP frame's headers are and how it is cut.
struct GsoPlan {
  uint32_t l3off;  ///< IP header offset (bytes from the frame start)
  uint32_t l4off;  ///< TCP header offset
  uint32_t hdrs;   ///< bytes of headers repeated in front of every segment (L2..TCP options)
  uint32_t end;    ///< end of the IP packet (l3off + IP length), <= the frame length
  uint32_t mss;    ///< payload bytes per segment (gso_size)
  uint32_t nsegs;  ///< segments (the last may be shorter)
  bool ipv6;
};

/// Parses a TSO frame of `len` bytes whose first `avail` bytes are at `f` (avail <= len),
/// for the header `h` (TCPV4 or TCPV6). False if it is not TCP over IPv4 (no fragment) or
/// IPv6 (no extension headers), optionally behind one VLAN tag, with every length field
/// consistent, its headers within `avail`, and at most kMaxGsoSegments segments.
bool parse_gso(const uint8_t* f, uint32_t avail, uint32_t len, const virtio::NetHdr& h,
               GsoPlan* p);

/// Writes the headers of segment `i` (plan.hdrs bytes) of the linear frame `f` into `out`,
/// as Linux's TCP segmentation does: IPv4 total length, id + i and header checksum; IPv6
/// payload length; TCP sequence number + i * mss, FIN and PSH only on the last segment, CWR
/// only on the first; TCP checksum over the pseudo-header, header and payload, or, when
/// `partial`, only the pseudo-header sum (for a receiver that takes NEEDS_CSUM: csum_start
/// l4off, csum_offset 16). Sets `*pay_off`, `*pay_len`: the segment's payload in `f`.
void build_segment(const uint8_t* f, const GsoPlan& p, uint32_t i, bool partial, uint8_t* out,
                   uint32_t* pay_off, uint32_t* pay_len);

/// Completes the checksum of a NEEDS_CSUM frame (virtio 1.2 §5.1.6.2: the ones'-complement
/// sum from csum_start to the end of the frame, stored at csum_start + csum_offset; the
/// field holds the pseudo-header sum). A result of 0 is stored as 0xffff (RFC 768). The
/// caller checked csum_start + csum_offset + 2 <= len (check_tx_header).
void fill_csum(uint8_t* f, uint32_t len, uint32_t csum_start, uint32_t csum_offset);

}  // namespace vl::offload
