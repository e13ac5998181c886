// Fuzz target: the offload parsers and the software offload path (src/offload): a
// transmitted frame's virtio-net header checked against the sender's features
// (check_tx_header), the TSO frame parsed (parse_gso) and cut (build_segment), the
// checksum completed (fill_csum), and the whole delivery to a receiver of other features
// (SoftOffload::deliver: passed through, checksummed or segmented in software) into a
// fake receive queue with mergeable buffers or not.
// Input: u16 sender feature bits, u16 receiver feature bits (bit i: kBits[i]), u8 receive
// buffers (count % 64 + 1), u16 buffer size, u16 receiver max frame, 12-byte NetHdr,
// u16 frame length (up to 65549), frame bytes (zeros past the input's end).
// Checks beyond the sanitizers: a parsed plan stays inside the frame and its headers
// inside kMaxGsoHeaders; every segment's payload lies in [hdrs, end); the used entries
// the delivery wrote fit the buffers posted.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "fake_driver.h"
#include "fuzz_input.h"
#include "offload/deliver.h"
#include "offload/soft_gso.h"

using namespace vl;
using namespace vl::virtio;

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "fuzz_offload: %s\n", what);
  std::abort();
}

constexpr int kBits[] = {kNetFCsum,      kNetFGuestCsum, kNetFHostTso4,  kNetFHostTso6,
                         kNetFHostEcn,   kNetFGuestTso4, kNetFGuestTso6, kNetFGuestEcn,
                         kNetFMrgRxbuf,  kFVersion1,     kRingFEventIdx};

uint64_t features(uint16_t sel) {
  uint64_t f = 0;
  for (uint32_t i = 0; i < sizeof kBits / sizeof kBits[0]; ++i)
    if (sel & (1u << i)) f |= bit(kBits[i]);
  return f;
}

offload::SoftOffload* soft() {
  static auto* s = new offload::SoftOffload;  // 64 KiB scratch, as one per PMD thread
  return s;
}
SegmentArena* scratch() {
  static auto* a = new SegmentArena;
  return a;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const uint64_t txf = features(in.u16());
  const uint64_t rxf = features(in.u16());
  const uint32_t nbufs = in.u8() % 64 + 1;
  const uint32_t buf_size = in.u16() % 9000 + 1;
  const uint32_t max_frame = in.u16() % kMaxFrameLen + 64;
  NetHdr h;
  in.bytes(&h, sizeof h);
  const uint32_t len = in.u16() % (kMaxFrameLen + 1);
  static std::vector<uint8_t> frame(kMaxFrameLen + 64);
  std::memset(frame.data(), 0, len);
  in.bytes(frame.data(), len);

  const bool verbose = getenv("VL_FUZZ_VERBOSE") != nullptr;
  const offload::TxCheck chk = offload::check_tx_header(&h, len, txf);
  if (verbose) std::fprintf(stderr, "check_tx_header: %d\n", static_cast<int>(chk));
  if (chk != offload::TxCheck::kOk) return 0;
  if (h.flags & kNetHdrFNeedsCsum) {
    if (uint32_t{h.csum_start} + h.csum_offset + 2 > len) die("check_tx_header passed a checksum past the frame");
    std::vector<uint8_t> copy(frame.begin(), frame.begin() + len);
    offload::fill_csum(copy.data(), len, h.csum_start, h.csum_offset);
  }
  const uint8_t gso = h.gso_type & 0x7f;
  if (gso != kNetHdrGsoNone) {
    offload::GsoPlan p;
    const bool parsed = offload::parse_gso(frame.data(), len, len, h, &p);
    if (verbose) std::fprintf(stderr, "parse_gso: %d, %u segments\n", parsed, parsed ? p.nsegs : 0);
    if (parsed) {
      if (p.hdrs > offload::kMaxGsoHeaders || p.end > len || p.l4off >= p.hdrs || p.mss == 0 ||
          p.nsegs == 0 || p.nsegs > offload::kMaxGsoSegments)
        die("parse_gso: a plan outside the frame");
      uint8_t out[offload::kMaxGsoHeaders + 8];
      for (uint32_t i = 0; i < p.nsegs; ++i) {
        uint32_t off = 0, plen = 0;
        offload::build_segment(frame.data(), p, i, i & 1, out, &off, &plen);
        if (off < p.hdrs || off + plen > p.end || plen > p.mss) die("build_segment: payload outside the packet");
      }
    }
  }

  // Delivery to a receiver with its own features.
  test::FakeMemory mem;
  mem.add_region(0, 16u << 10);  // the ring
  mem.add_region(1u << 20, (nbufs * ((buf_size + 63) & ~63u)) + 4096);
  test::FakeVring ring(mem, 256, 0);
  for (uint32_t i = 0; i < nbufs; ++i) {
    test::ChainOpts o;
    o.region = 1;
    ring.add_rx({buf_size}, o);
  }
  GuestMemory gm;
  if (!mem.build(gm)) die("GuestMemory::build_unowned failed");
  SplitDeviceQueue q;
  ring.attach(q, gm, rxf);
  offload::RxCaps od;
  od.hdr_len = net_hdr_len(rxf);
  od.mrg_rxbuf = has(rxf, kNetFMrgRxbuf);
  od.features = rxf;
  od.max_frame = max_frame;
  offload::WorkCounters oc;
  Segment src{frame.data(), len};
  const offload::Outcome out = soft()->deliver(q, *scratch(), h, &src, 1, len, od, oc);
  q.publish_used();
  const uint16_t used = ring.used_idx();
  if (verbose) std::fprintf(stderr, "deliver: outcome %d, %u used entries\n", static_cast<int>(out), used);
  if (used > nbufs) die("more used entries than buffers posted");
  for (uint16_t i = 0; i < used; ++i) {
    const VringUsedElem& e = ring.used()->ring[i];
    if (e.len > buf_size) die("a used entry longer than its buffer");
  }
  return 0;
}
