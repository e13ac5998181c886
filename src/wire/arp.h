#pragma once
// ARP (RFC 826) and RARP (RFC 903) frames over Ethernet, for IPv4: what a tunnel endpoint
// answers and asks on its uplink, and the announcement of a migrated guest.
#include <cstdint>

namespace vl::wire {

inline constexpr uint16_t kEtherArp = 0x0806;
inline constexpr uint16_t kEtherRarp = 0x8035;
inline constexpr uint16_t kEtherIpv4 = 0x0800;
inline constexpr uint16_t kEtherVlan = 0x8100;
inline constexpr uint16_t kArpRequest = 1;
inline constexpr uint16_t kArpReply = 2;
inline constexpr uint16_t kRarpRequest = 3;  ///< RFC 903 "request reverse", as QEMU announces
/// Bytes of the frames below: 14 of Ethernet header and 28 of ARP, padded to the 60 of the
/// shortest Ethernet frame (without FCS), 4 more with an 802.1Q tag.
inline constexpr uint32_t kArpFrameLen = 60;

/// The fields of an ARP packet for IPv4 over Ethernet. Addresses are in network byte order
/// as they stand in the packet (loaded with memcpy).
struct ArpView {
  uint16_t op = 0;
  uint8_t sha[6] = {};  ///< sender hardware address
  uint32_t spa = 0;     ///< sender protocol address
  uint8_t tha[6] = {};  ///< target hardware address
  uint32_t tpa = 0;     ///< target protocol address
};

/// Parses the untagged Ethernet frame f[0..len) as ARP for IPv4 (hardware type 1, protocol
/// 0x0800, lengths 6 and 4). False for anything else, or a frame too short.
bool parse_arp(const uint8_t* f, uint32_t len, ArpView* out);

/// Writes an ARP frame of opcode `op` to `dst` (Ethernet destination) into out[0..60) and
/// returns 60. The Ethernet source is `a.sha`.
uint32_t write_arp(uint8_t* out, const uint8_t dst[6], const ArpView& a);

/// Writes the RARP announcement of `mac` (broadcast; sender and target hardware address
/// `mac`, protocol addresses 0; QEMU's qemu_announce_self) into out[] and returns its
/// length: 60 bytes, or 64 with an 802.1Q tag of `vlan` (1..4094; 0: untagged).
uint32_t write_rarp_announce(uint8_t* out, const uint8_t mac[6], uint16_t vlan);

}  // namespace vl::wire
