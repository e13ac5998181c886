#include "wire/arp.h"

#include <cstring>

namespace vl::wire {

namespace {
uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

/// The 28 bytes of an ARP packet for IPv4 over Ethernet at p (RFC 826 "Packet format").
void put_arp_body(uint8_t* p, uint16_t op, const uint8_t* sha, uint32_t spa, const uint8_t* tha,
                  uint32_t tpa) {
  put16(p, 1);                // hardware: Ethernet
  put16(p + 2, kEtherIpv4);   // protocol: IPv4
  p[4] = 6;
  p[5] = 4;
  put16(p + 6, op);
  std::memcpy(p + 8, sha, 6);
  std::memcpy(p + 14, &spa, 4);
  std::memcpy(p + 18, tha, 6);
  std::memcpy(p + 24, &tpa, 4);
}
}  // namespace

bool parse_arp(const uint8_t* f, uint32_t len, ArpView* out) {
  if (len < 14 + 28 || be16(f + 12) != kEtherArp) return false;
  const uint8_t* p = f + 14;
  if (be16(p) != 1 || be16(p + 2) != kEtherIpv4 || p[4] != 6 || p[5] != 4) return false;
  out->op = be16(p + 6);
  std::memcpy(out->sha, p + 8, 6);
  std::memcpy(&out->spa, p + 14, 4);
  std::memcpy(out->tha, p + 18, 6);
  std::memcpy(&out->tpa, p + 24, 4);
  return true;
}

uint32_t write_arp(uint8_t* out, const uint8_t dst[6], const ArpView& a) {
  std::memset(out, 0, kArpFrameLen);
  std::memcpy(out, dst, 6);
  std::memcpy(out + 6, a.sha, 6);
  put16(out + 12, kEtherArp);
  put_arp_body(out + 14, a.op, a.sha, a.spa, a.tha, a.tpa);
  return kArpFrameLen;
}

uint32_t write_rarp_announce(uint8_t* out, const uint8_t mac[6], uint16_t vlan) {
  const uint32_t tag = vlan ? 4 : 0;
  std::memset(out, 0, kArpFrameLen + tag);
  std::memset(out, 0xff, 6);
  std::memcpy(out + 6, mac, 6);
  if (tag) {
    put16(out + 12, kEtherVlan);
    put16(out + 14, vlan & 0x0fff);
  }
  put16(out + 12 + tag, kEtherRarp);
  put_arp_body(out + 14 + tag, kRarpRequest, mac, 0, mac, 0);
  return kArpFrameLen + tag;
}

}  // namespace vl::wire
