#pragma once
// The direct-link channel's wire format: how the switch hands the front-end of one port
// ("B", a virtlink vnf) the memory, rings and eventfds of another port ("A"). Set-up,
// message order and replies: docs/direct-link.md, "The channel".
#include <cstdint>

namespace vl::vhost {

/// Private protocol feature bit: "this front-end can serve a direct link". Bit 56 is far
/// above the bits vhost-user.rst defines, and front-ends only accept bits they know.
inline constexpr int kProtoVlDirectLink = 56;

/// Front-end -> back-end request on the vhost-user socket: "give me the link channel".
/// No payload; the reply is u64 0 and one fd (a SOCK_STREAM unix socket).
inline constexpr uint32_t kReqVlLinkChannel = 0x564c00;  // "VL" << 8

/// LINK_PROBE's version: 2 since LinkDrop::kShortRxBuffer (LINK_STOP's reply grew by 8 bytes).
inline constexpr uint32_t kLinkVersion = 2;

/// Requests on the link channel (switch -> B).
enum class LinkReq : uint32_t {
  kLinkProbe = 0x564c01,
  kLinkMem = 0x564c02,
  kLinkVring = 0x564c03,
  kLinkStart = 0x564c04,
  kLinkStop = 0x564c05,
};

/// kLinkMem payload: header, then `nregions` (1..8) regions as SET_MEM_TABLE's
/// MemRegion (guest_phys_addr, memory_size, userspace_addr, mmap_offset); one fd each.
struct LinkMem {
  uint32_t nregions;
  uint32_t padding;
};

/// kLinkVring payload. `index`: 0 = A's receive queue (B writes frames into it),
/// 1 = A's transmit queue (B takes frames from it). Addresses are A's front-end virtual
/// addresses (as in SET_VRING_ADDR), translated through the kLinkMem table.
/// `last_avail`: the next avail entry to process; the used index is read from the ring.
/// `flags`: kLinkVringKick / kLinkVringCall say which fds follow, in that order.
struct LinkVring {
  uint32_t index;
  uint32_t num;
  uint64_t desc_user_addr;
  uint64_t avail_user_addr;
  uint64_t used_user_addr;
  uint32_t last_avail;
  uint32_t flags;
};
static_assert(sizeof(LinkVring) == 40);
inline constexpr uint32_t kLinkVringKick = 1;
inline constexpr uint32_t kLinkVringCall = 2;

/// kLinkStart payload: A's negotiated virtio features (header size, mergeable receive
/// buffers, event index, indirect descriptors) and the largest frame A may receive.
struct LinkStart {
  uint64_t features;
  uint32_t max_frame;
  uint32_t padding;
};
static_assert(sizeof(LinkStart) == 16);

/// Why B dropped a frame of a link: the index into LinkCounters::drops. Fixed wire values
/// (docs/direct-link.md, LINK_STOP); the switch maps each to its own drop reason
/// (app/links.cpp). The names are the keys of `ctl stats --json` drops.
enum class LinkDrop : uint32_t {
  kNoRxBuffer = 0,     ///< no_rx_buffer: A's receive queue had no buffer posted
  kBadDescriptor = 1,  ///< bad_descriptor: malformed chain on A's transmit queue
  kBadHeader = 2,      ///< bad_header: too short, or asks for an offload (not carried)
  kTooBig = 3,         ///< too_big: above A's largest frame or receive buffers
  kRingBroken = 4,     ///< ring_broken: one of A's queues stopped
  kNoDestination = 5,  ///< no_destination: not counted by B today; keeps its slot
  kShortRxBuffer = 6,  ///< short_rx_buffer: A's next receive buffer could take no frame
  kCount = 7,
};
inline constexpr uint32_t kLinkDrops = static_cast<uint32_t>(LinkDrop::kCount);

/// The snake_case name of a link drop reason ("?" for kCount).
constexpr const char* link_drop_name(LinkDrop d) {
  switch (d) {
    case LinkDrop::kNoRxBuffer: return "no_rx_buffer";
    case LinkDrop::kBadDescriptor: return "bad_descriptor";
    case LinkDrop::kBadHeader: return "bad_header";
    case LinkDrop::kTooBig: return "too_big";
    case LinkDrop::kRingBroken: return "ring_broken";
    case LinkDrop::kNoDestination: return "no_destination";
    case LinkDrop::kShortRxBuffer: return "short_rx_buffer";
    case LinkDrop::kCount: break;
  }
  return "?";
}

/// Counters of one link as B saw them, in the switch's direction terms for port A:
/// rx = frames B took from A's transmit queue, tx = frames B put into A's receive queue;
/// drops are indexed by LinkDrop.
struct LinkCounters {
  uint64_t rx_packets, rx_bytes, tx_packets, tx_bytes;
  uint64_t drops[kLinkDrops];
};

/// kLinkStop reply: status 0, where B left each of A's rings (every chain it popped was
/// returned in the used ring and published), and B's counters for the link.
struct LinkStopReply {
  uint64_t status;
  uint32_t last_avail[2];  ///< [0] A's receive queue, [1] A's transmit queue
  LinkCounters counters;
};
static_assert(sizeof(LinkStopReply) == 16 + 88);

}  // namespace vl::vhost
