#pragma once
// Frame trace (`ctl trace PORT HEX`, like OVS's ofproto/trace): what the datapath would do
// with one frame arriving on a port, computed on the control thread from the tables the PMD
// threads read (ports, VLANs, the MAC table, flush policies), changing none of them: no MAC
// is learned, no counter moves. The rules are the forwarder's own (dp/l2_rules.h, shared
// with dp/forwarder.cpp); tests/unit/trace_test.cpp runs each case through a Forwarder too
// and checks that the trace said what it did. docs/architecture.md "Frame trace".
//
// The frame is traced as a plain one: it carries no virtio-net header, so it asks for no
// checksum or segmentation offload, and it is taken as one buffer (a chain too fragmented
// for the switch, too_big on arrival, is not something a trace can be).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dp/fdb.h"
#include "dp/flush.h"
#include "dp/forwarder.h"
#include "port/counters.h"

namespace vl::dp {

/// Bytes of a frame a trace request carries whole; a longer frame is sent as its first
/// kTraceHeadBytes with its length (every rule reads only its headers and its length), so
/// that the request fits the control socket's 64 KiB line in hex.
inline constexpr uint32_t kTraceWholeBytes = 16384;
inline constexpr uint32_t kTraceHeadBytes = 512;
/// The fewest bytes of a longer frame a trace takes: its headers (Ethernet, a tag, IPv6,
/// the L4 ports; the flow hash reads 64).
inline constexpr uint32_t kTraceMinHead = 64;

/// `text` (a control client's: hostile) as frame bytes: hex digits, two per byte, with ':',
/// '-', '.' or spaces allowed between bytes; at most virtio::kMaxFrameLen bytes, at least
/// one. False with `*err` otherwise.
bool parse_frame_hex(std::string_view text, std::vector<uint8_t>* out, std::string* err);
/// Bytes as lowercase hex digits, no separators.
std::string frame_hex(const uint8_t* p, size_t n);

/// A frame's headers as far as they are there. Only the Ethernet addresses, the 802.1Q tag
/// and the length decide anything; the rest is shown.
struct FrameHeaders {
  uint32_t len = 0;   ///< the frame's length
  uint32_t have = 0;  ///< bytes of it the trace was given (<= len)
  bool eth = false;   ///< at least an Ethernet header (14 bytes)
  uint8_t dst[6] = {}, src[6] = {};
  bool tagged = false;  ///< 802.1Q TPID at offset 12 (with 4 bytes after it: vid, pcp)
  bool tag_whole = false;
  uint16_t vid = 0;
  uint8_t pcp = 0;
  uint16_t ethertype = 0;  ///< after the tag, if there is one and it is whole
  uint8_t ip = 0;          ///< 4 or 6 when its header is whole, else 0
  uint8_t ip_src[16] = {}, ip_dst[16] = {};
  uint8_t l4 = 0;          ///< IPv4 protocol / IPv6 next header
  bool fragment = false;   ///< IPv4: a fragment after the first (no L4 header)
  bool ports = false;      ///< TCP/UDP/SCTP ports read
  uint16_t sport = 0, dport = 0;
};
FrameHeaders parse_headers(const uint8_t* p, uint32_t have, uint32_t len);

/// What the trace decided and why (the reply's decision.reason).
enum class TraceWhy : uint8_t {
  kLearned,        ///< unicast to the port its destination was learned on
  kUnknown,        ///< unicast whose destination is not in the table: flooded
  kBroadcast,      ///< flooded
  kMulticast,      ///< flooded
  kOutsideVlan,    ///< the entry's port does not carry the frame's VLAN: flooded
  kXconnect,       ///< cross-connect: the port's peer
  kShort,          ///< below an Ethernet header: bad_header
  kVlanIngress,    ///< a VLAN the port does not take: vlan_not_allowed
  kShortTag,       ///< the 802.1Q TPID without room for the tag: vlan_not_allowed
  kSourceGuard,    ///< a source MAC the port's port security does not allow: source_not_allowed
  kNoPeer,         ///< cross-connect without a peer: no_destination
  kPeerVlan,       ///< the peer does not carry the VLAN: vlan_not_allowed
  kBackToIngress,  ///< destination learned on the ingress port: no_destination
  kUnderlay,       ///< the port is a tunnel's underlay: its frames are not switched
  kLinkedAway,     ///< a direct link serves the port's rings: its frames never reach us
};
const char* trace_why_name(TraceWhy w);

/// One port the frame is sent to, and what delivery would do with it there.
struct TraceOut {
  uint32_t port = 0;
  int tag_edit = 0;        ///< +1: a tag added on the way out, -1: removed, 0: as it came
  uint32_t len = 0;        ///< as it leaves
  uint32_t max_frame = 0;  ///< the receiver's largest frame
  bool mrg_rxbuf = false;
  FlushPolicy flush;
  uint32_t queues = 0;  ///< candidate receive queues of the PMD thread's (PortDp::rx_for)
  uint32_t queue = 0;   ///< the one its flow hash picks
  int handoff = -1;     ///< the PMD thread it is handed to (-1: delivered by the one polling)
  /// kCount: delivered (into a receive buffer, when the guest has one posted); else the
  /// drop, counted on `drop_port` (the receiver for too_big, the sender for no_destination).
  port::Drop drop = port::Drop::kCount;
  uint32_t drop_port = 0;
};

struct TraceResult {
  uint32_t in = 0;
  FrameHeaders h;
  ForwardMode mode = ForwardMode::kBridge;
  bool in_active = false;  ///< the ingress port takes frames now (else traced as if it did)
  bool vlans = false;      ///< SwitchTables::vlans: some port has VLAN settings
  int vlan = 0;            ///< the frame's VLAN; -1: the port does not take it
  // Bridge: the source MAC's learning and the destination's lookup, by (VLAN, MAC) key.
  bool bridged = false;  ///< the bridge classified it (past the ingress checks)
  bool learnable = false;
  bool src_known = false;
  Fdb::Entry src_entry{};
  bool looked_up = false;  ///< a unicast destination was looked up
  bool dst_known = false;
  Fdb::Entry dst_entry{};
  bool to_own_source = false;  ///< the destination is its learnable source (found on `in`)
  TraceWhy why = TraceWhy::kUnknown;
  bool flooded = false;  ///< sent to every port that takes it (out; none: no_destination)
  /// A drop on the ingress port before any output (kCount: none).
  port::Drop drop = port::Drop::kCount;
  std::vector<TraceOut> out;
};

/// Traces a frame of `len` bytes arriving on port `in` (< nports), of which `p[0..have)`
/// are given (min(len, kTraceMinHead) <= have <= len; else it traces the bytes given), as
/// PMD thread `thread` (the one polling `in`) would forward it.
/// Reads the tables as the control thread does (`ctl fdb`: relaxed atomics); writes nothing.
TraceResult trace_frame(const SwitchTables& t, uint32_t in, const uint8_t* p, uint32_t have,
                        uint32_t len, uint32_t thread = 0);

}  // namespace vl::dp
