// Fuzz target: the split-ring walker (virtio::SplitDeviceQueue::pop, indirect tables, avail
// index checks, used ring and notifications) and the copy paths (split_tx_chain,
// gather_copy, deliver_frame with and without mergeable RX buffers) over fake guest memory
// whose descriptors, rings, indirect tables and headers the input writes, also between
// two walks (rings changed under the device's feet).
//
// Memory (tests/unit/fake_driver.h FakeMemory, heap regions with ASan redzones):
//   region 0: gpa 0x0,      64 KiB: the TX and RX rings, then data
//   region 1: gpa 0x10000,  16 KiB: contiguous with region 0 in guest-physical space only
//   region 2: gpa 0x100000, 12 KiB - 100 bytes: not a page multiple
// Input: u8 log2(queue size) (% 9), u8 feature bits (1 EVENT_IDX, 2 INDIRECT_DESC,
// 4 MRG_RXBUF, 8 VERSION_1 -> 12-byte header), then operations, opcode byte first:
//   0 DESC   u8 ring, u16 index, u64 addr, u32 len, u16 flags, u16 next (raw descriptor)
//   1 AVAIL  u8 ring, u16 slot, u16 head      2 IDX  u8 ring, u16 avail index
//   3 MEM    u8 region, u32 offset, u16 length, bytes (headers, frames, tables)
//   4 CHAIN  u8 ring, u16 first index, u8 count, per descriptor u8 region, u32 offset,
//            u16 len, u8 flags; linked with NEXT and published (avail slot + index)
//   5 TABLE  u8 region, u32 offset, u8 count, per entry u8 region, u32 offset, u16 len,
//            u16 flags, u16 next: an indirect table written into data memory
//   6 BURST  the forwarder's work: pop up to 32 TX chains, split the header, deliver each
//            frame to the RX queue, return the TX chains, publish both used rings
//   7 FRAME  u16 length: a frame of that size delivered to the RX queue
//   8 EVENT  u8 ring, u16 value: used_event, avail flags, set_kicks on/off
// Checks beyond the sanitizers: every segment pop() returns lies inside one region;
// a chain's segments add up to its length; the used index never runs more than the
// queue size ahead of the avail index the device has seen.
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "fake_driver.h"
#include "fuzz_input.h"

using namespace vl;
using namespace vl::virtio;
using vl::test::FakeMemory;
using vl::test::FakeVring;

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "fuzz_device_queue: %s\n", what);
  std::abort();
}

struct RegionSpec {
  uint64_t gpa, size;
};
constexpr RegionSpec kRegions[] = {{0x0, 0x10000}, {0x10000, 0x4000}, {0x100000, 0x3000 - 100}};

struct World {
  FakeMemory mem;
  GuestMemory gm;
  std::unique_ptr<FakeVring> ring[2];  // 0: TX (driver -> device), 1: RX
  SplitDeviceQueue q[2];
  uint32_t num = 0;
  uint64_t features = 0;
  uint32_t hdr_len = 10;
  bool mrg = false;
  // Scratch that needs no fresh state: shared by every input (allocating and zeroing them
  // per input cost more than the walk itself).
  static inline SegmentArena arena;
  static inline SegmentArena scratch;
  static inline uint8_t frame[kMaxFrameLen];

  void check_segments(const Chain& c) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < c.nsegs; ++i) {
      const Segment& s = arena.segs[c.seg_begin + i];
      bool inside = false;
      for (const auto& r : mem.regions()) {
        if (s.ptr >= r.host && s.ptr < r.host + r.size && s.len <= r.size - (s.ptr - r.host))
          inside = true;
      }
      if (!inside) die("a segment leaves guest memory");
      total += s.len;
    }
    if (total != c.len) die("segments do not add up to the chain length");
  }
  uint64_t addr(uint8_t region, uint32_t off) const {
    const RegionSpec& r = kRegions[region % 3];
    return r.gpa + off % r.size;
  }
};

void burst(World& w) {
  SplitDeviceQueue& tx = w.q[0];
  SplitDeviceQueue& rx = w.q[1];
  if (tx.broken()) return;
  const int n = tx.pending();
  if (n < 0) return;
  w.arena.clear();
  for (int i = 0; i < n && i < 32 && w.arena.has_room_for_chain(); ++i) {
    Chain c;
    const PopStatus st = tx.pop<false>(w.arena, &c);
    if (st != PopStatus::kOk) continue;
    w.check_segments(c);
    TxFrame f;
    if (split_tx_chain(w.arena, c, w.hdr_len, &f)) {
      uint64_t flen = 0;
      for (uint32_t k = 0; k < f.nsegs; ++k) flen += w.arena.segs[f.seg_begin + k].len;
      if (flen != f.len) die("split_tx_chain: segments do not add up to the frame length");
      if (f.len <= sizeof w.frame) {
        gather_copy(w.frame, &w.arena.segs[f.seg_begin], f.nsegs, 0, f.len);
        if (!rx.broken() && rx.pending() >= 0) {
          // From a bounce buffer: here the sender's and the receiver's rings share one
          // mapping and a hostile driver can make their buffers overlap; in the switch they
          // are two ports' mappings, which never overlap in our address space.
          Segment s{w.frame, f.len};
          if (deliver_frame(rx, w.scratch, f.hdr, w.hdr_len, &s, 1, f.len, w.mrg) ==
              DeliverStatus::kBadRing)
            rx.mark_broken();
        }
      }
    }
    tx.push_used(c.head, 0);
  }
  tx.publish_used();
  if (!rx.broken()) rx.publish_used();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  auto w = std::unique_ptr<World>(new World);
  w->num = 1u << (in.u8() % 9);
  const uint8_t fb = in.u8();
  if (fb & 1) w->features |= bit(kRingFEventIdx);
  if (fb & 2) w->features |= bit(kRingFIndirectDesc);
  if (fb & 4) w->features |= bit(kNetFMrgRxbuf);
  if (fb & 8) w->features |= bit(kFVersion1);
  w->hdr_len = net_hdr_len(w->features);
  w->mrg = has(w->features, kNetFMrgRxbuf);
  static const std::vector<uint8_t> pattern = [] {
    std::vector<uint8_t> p(9100);
    for (size_t k = 0; k < p.size(); ++k) p[k] = static_cast<uint8_t>(k * 7);
    return p;
  }();
  std::memcpy(w->frame, pattern.data(), pattern.size());
  for (const RegionSpec& r : kRegions) w->mem.add_region(r.gpa, r.size);
  for (int i = 0; i < 2; ++i) w->ring[i] = std::make_unique<FakeVring>(w->mem, w->num, 0);
  if (!w->mem.build(w->gm)) die("GuestMemory::build_unowned failed");
  for (int i = 0; i < 2; ++i) w->ring[i]->attach(w->q[i], w->gm, w->features);

  for (int ops = 0; !in.empty() && ops < 512; ++ops) {
    const uint8_t op = in.u8() % 9;
    switch (op) {
      case 0: {
        const int r = in.u8() & 1;
        const uint16_t idx = in.u16();
        const uint64_t a = in.u64();
        const uint32_t len = in.u32();
        const uint16_t flags = in.u16();
        const uint16_t next = in.u16();
        w->ring[r]->write_desc(idx % w->num, a, len, flags, next);
        break;
      }
      case 1: {
        const int r = in.u8() & 1;
        const uint16_t slot = in.u16();
        w->ring[r]->set_avail_slot(slot, in.u16());
        break;
      }
      case 2: {
        const int r = in.u8() & 1;
        w->ring[r]->set_avail_idx(in.u16());
        break;
      }
      case 3: {
        const uint8_t reg = in.u8();
        const uint32_t off = in.u32();
        size_t n = in.u16();
        const uint8_t* p = in.take(&n);
        const RegionSpec& rs = kRegions[reg % 3];
        const uint64_t o = off % rs.size;
        if (n > rs.size - o) n = rs.size - o;
        w->mem.write(rs.gpa + o, p, n);
        break;
      }
      case 4: {
        const int r = in.u8() & 1;
        const uint16_t first = in.u16();
        const uint32_t count = in.u8() % 8 + 1;
        for (uint32_t k = 0; k < count; ++k) {
          const uint8_t reg = in.u8();
          const uint32_t off = in.u32();
          const uint16_t len = in.u16();
          uint16_t flags = in.u8() & (kDescFWrite | kDescFIndirect);
          if (k + 1 < count) flags |= kDescFNext;
          w->ring[r]->write_desc((first + k) % w->num, w->addr(reg, off), len, flags,
                                 static_cast<uint16_t>((first + k + 1) % w->num));
        }
        w->ring[r]->publish(static_cast<uint16_t>(first % w->num));
        break;
      }
      case 5: {
        const uint64_t base = w->addr(in.u8(), in.u32()) & ~uint64_t{15};
        const uint32_t count = in.u8() % 32 + 1;
        for (uint32_t k = 0; k < count; ++k) {
          VringDesc d;
          d.addr = w->addr(in.u8(), in.u32());
          d.len = in.u16();
          d.flags = in.u16();
          d.next = in.u16();
          const uint64_t at = base + k * sizeof d;
          bool fits = false;
          for (const RegionSpec& rs : kRegions)
            fits |= at >= rs.gpa && at + sizeof d <= rs.gpa + rs.size;
          if (fits) w->mem.write(at, &d, sizeof d);
        }
        break;
      }
      case 6: burst(*w); break;
      case 7: {
        const uint32_t len = in.u16() % 9100;
        SplitDeviceQueue& rx = w->q[1];
        if (rx.broken() || rx.pending() < 0) break;
        Segment s{w->frame, len};
        NetHdr hdr{};
        const DeliverStatus ds = deliver_frame(rx, w->scratch, hdr, w->hdr_len, &s, 1, len, w->mrg);
        if (ds == DeliverStatus::kBadRing) rx.mark_broken();
        rx.publish_used();
        break;
      }
      default: {
        const int r = in.u8() & 1;
        const uint16_t v = in.u16();
        w->ring[r]->used_event() = v;
        w->ring[r]->set_avail_flags(v & 1);
        if (!w->q[r].broken()) w->q[r].set_kicks(v & 2);
        break;
      }
    }
  }
  return 0;
}
