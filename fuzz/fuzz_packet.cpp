// Fuzz target: the packet-level parsers and tables a frame's bytes reach.
//  - split_tx_chain (virtio-net header off a transmitted chain) over a scatter list cut
//    where the input says, checked against the same bytes flat: header and frame equal;
//  - gen::parse_trailer (the generator's receive side reads frames from any port) and
//    gen::parse_mac;
//  - the bridge's MAC table (dp::Fdb, one bucket so every MAC collides) driven by a
//    sequence of learn / lookup / age / flush operations from source addresses of the
//    frames, checked against its invariants: one entry per MAC, a port's fresh entries
//    never taken by another port holding at most half the bucket, per-port counts equal
//    to the entries.
// Input: u8 header length selector, u8 segment count, per segment a u16 length, then the
// bytes (the chain), then MAC table operations (u8 op, u8 port, u16 time step, 6-byte MAC).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "dp/fdb.h"
#include "fuzz_input.h"
#include "gen/frame.h"
#include "virtio/net_copy.h"

using namespace vl;
using namespace vl::virtio;

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "fuzz_packet: %s\n", what);
  std::abort();
}

SegmentArena arena;

void check_split(fuzz::Input& in) {
  const uint32_t hdr_len = (in.u8() & 1) ? 12 : 10;
  const uint32_t nseg = in.u8() % 16 + 1;
  uint32_t lens[16];
  for (uint32_t i = 0; i < nseg; ++i) lens[i] = in.u16() % 2048;
  std::vector<uint8_t> flat;
  std::vector<std::vector<uint8_t>> bufs(nseg);  // one heap buffer per segment (redzones)
  arena.clear();
  for (uint32_t i = 0; i < nseg; ++i) {
    size_t n = lens[i];
    const uint8_t* p = in.take(&n);
    bufs[i].assign(p, p + n);
    flat.insert(flat.end(), p, p + n);
    arena.segs[i] = Segment{bufs[i].data(), static_cast<uint32_t>(n)};
  }
  Chain c{};  // fields by name: the struct's layout is not this harness's business
  c.head = 0;
  c.seg_begin = 0;
  c.nsegs = nseg;
  c.len = static_cast<uint32_t>(flat.size());
  c.ndesc = nseg;
  TxFrame f;
  const bool ok = split_tx_chain(arena, c, hdr_len, &f);
  if (ok != (flat.size() >= hdr_len + kEthHdrLen)) die("split_tx_chain accepted a short chain or refused a long one");
  if (!ok) return;
  if (std::memcmp(&f.hdr, flat.data(), hdr_len) != 0) die("header differs from the chain's bytes");
  if (f.len != flat.size() - hdr_len) die("frame length");
  std::vector<uint8_t> frame(f.len);
  gather_copy(frame.data(), &arena.segs[f.seg_begin], f.nsegs, 0, f.len);
  if (std::memcmp(frame.data(), flat.data() + hdr_len, f.len) != 0) die("frame bytes differ");
  gen::Trailer t;
  if (gen::parse_trailer(frame.data(), f.len, &t) && f.len < gen::kMinFrame) die("trailer of a short frame");
  std::string s(reinterpret_cast<const char*>(frame.data()), std::min<size_t>(f.len, 40));
  uint64_t mac;
  if (gen::parse_mac(s.c_str(), &mac) && (mac >> 48) != 0) die("parse_mac: more than 48 bits");
}

void check_fdb(fuzz::Input& in) {
  // One bucket: everything collides. One table for every input (its 64 Ki per-port counters
  // cost more to allocate than an input to run), emptied first: same state each time.
  static dp::Fdb fdb(1, 6, 0x1234);
  for (uint32_t p = 0; p < 8; ++p) fdb.flush_port(p);
  uint32_t now = 100;
  std::map<uint32_t, uint32_t> last_seen_port;  // port -> last time it learned
  for (int ops = 0; !in.empty() && ops < 256; ++ops) {
    const uint8_t op = in.u8();
    const uint32_t port = in.u8() % 8;
    now += in.u16() % 16;
    uint8_t b[6];
    in.bytes(b, 6);
    b[0] &= 0xfe;  // unicast
    const dp::Mac mac = dp::mac_from_bytes(b);
    switch (op % 4) {
      case 0:
      case 1: {
        const auto before = fdb.entries(now);
        const bool learned = fdb.learn(mac, port, now);
        const uint32_t got = fdb.lookup(mac);
        if (learned && got != port) die("learned but not found");
        if (!learned && got == port) die("declined but found");
        // No fresh entry of another port with at most half the bucket was evicted.
        std::map<uint32_t, uint32_t> held;
        for (const auto& e : before) ++held[e.port];
        const auto after = fdb.entries(now);
        for (const auto& e : before) {
          if (e.port == port || e.mac == mac || e.age_s >= dp::Fdb::kFreshS ||
              held[e.port] > dp::Fdb::kSlots / 2)
            continue;
          bool still = false;
          for (const auto& a : after) still |= a.mac == e.mac;
          if (!still) die("a fresh entry of another port was evicted");
        }
        break;
      }
      case 2: fdb.age(now, in.u8() % 32 + 1); break;
      default: fdb.flush_port(port); break;
    }
    const auto all = fdb.entries(now);
    std::map<dp::Mac, int> seen;
    std::map<uint32_t, uint32_t> per_port;
    for (const auto& e : all) {
      if (++seen[e.mac] > 1) die("a MAC in the table twice");
      ++per_port[e.port];
    }
    for (uint32_t p = 0; p < 8; ++p) {
      if (fdb.port_entries(p) != per_port[p]) die("per-port count differs from the entries");
      if (per_port[p] > 6) die("a port holds more than its limit");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  check_split(in);
  check_fdb(in);
  return 0;
}
