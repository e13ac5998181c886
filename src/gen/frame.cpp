#include "gen/frame.h"

#include <cstdio>

namespace vl::gen {

namespace {
void put_mac(uint8_t* p, uint64_t mac) {
  for (int i = 0; i < 6; ++i) p[i] = static_cast<uint8_t>(mac >> (40 - 8 * i));
}
void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void put32(uint8_t* p, uint32_t v) {
  put16(p, static_cast<uint16_t>(v >> 16));
  put16(p + 2, static_cast<uint16_t>(v));
}
uint16_t ip_checksum(const uint8_t* h) {
  uint32_t s = 0;
  for (int i = 0; i < 20; i += 2) s += (uint32_t{h[i]} << 8) | h[i + 1];
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return static_cast<uint16_t>(~s);
}
}  // namespace

void build_frame(uint8_t* out, uint32_t len, const FlowSpec& spec, uint32_t flow,
                 uint32_t stream) {
  std::memset(out, 0, len);
  put_mac(out, spec.dst_mac_base + flow);
  put_mac(out + 6, spec.src_mac);
  put16(out + 12, 0x0800);
  uint8_t* ip = out + kEthLen;
  ip[0] = 0x45;
  put16(ip + 2, static_cast<uint16_t>(len - kEthLen));
  ip[8] = 64;
  ip[9] = 17;
  put32(ip + 12, spec.src_ip_base + flow);
  put32(ip + 16, spec.dst_ip);
  put16(ip + 10, ip_checksum(ip));
  uint8_t* udp = ip + kIpLen;
  const uint16_t port = static_cast<uint16_t>(1024 + flow % 60000);
  put16(udp, port);
  put16(udp + 2, port);
  put16(udp + 4, static_cast<uint16_t>(len - kEthLen - kIpLen));
  // UDP checksum 0: none (allowed for IPv4).
  uint8_t* t = out + kTrailerOff;
  std::memcpy(t, &kMagic, 2);
  std::memcpy(t + 2, &stream, 4);
  for (uint32_t i = kMinFrame; i < len; ++i) out[i] = payload_byte(i - kMinFrame);
}

bool payload_intact(const uint8_t* f, uint32_t len) {
  if (len < kMinFrame || f[12] != 0x08 || f[13] != 0x00) return false;
  const uint8_t* ip = f + kEthLen;
  if (((uint32_t{ip[2]} << 8) | ip[3]) + kEthLen != len) return false;
  uint32_t s = 0;
  for (int i = 0; i < 20; i += 2) s += (uint32_t{ip[i]} << 8) | ip[i + 1];
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  if (s != 0xffff) return false;
  for (uint32_t i = kMinFrame; i < len; ++i)
    if (f[i] != payload_byte(i - kMinFrame)) return false;
  return true;
}

void patch_flow(uint8_t* out, const FlowSpec& spec, uint32_t flow) {
  put_mac(out, spec.dst_mac_base + flow);
  uint8_t* ip = out + kEthLen;
  put32(ip + 12, spec.src_ip_base + flow);
  put16(ip + 10, 0);
  put16(ip + 10, ip_checksum(ip));
  const uint16_t port = static_cast<uint16_t>(1024 + flow % 60000);
  put16(ip + kIpLen, port);
  put16(ip + kIpLen + 2, port);
}

void build_learning_frame(uint8_t* out, uint64_t mac) {
  std::memset(out, 0, 64);
  put_mac(out, 0xffffffffffffull);
  put_mac(out + 6, mac);
  put16(out + 12, 0x88b5);  // IEEE 802 local experimental ethertype
}

bool parse_mac(const char* s, uint64_t* mac) {
  unsigned b[6];
  char extra;
  if (std::sscanf(s, "%x:%x:%x:%x:%x:%x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &extra) != 6)
    return false;
  uint64_t m = 0;
  for (unsigned v : b) {
    if (v > 255) return false;
    m = (m << 8) | v;
  }
  *mac = m;
  return true;
}

}  // namespace vl::gen
