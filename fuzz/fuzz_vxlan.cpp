// Fuzz target: a VXLAN tunnel endpoint's receive side as its underlay calls it
// (port::VxlanWire::demux: ARP for the local address and from the remotes, outer IPv4, UDP
// and VXLAN header checks, a virtio-net header that may ask for a checksum or carry a TSO
// train, the copy into the decapsulation ring), and its transmit side (send: the inner
// frame's MAC looked up, outer headers written into the headroom, flooding to every remote).
// The endpoint is 10.0.0.1 with VNI 0x000064 and remotes 10.0.0.2 and 10.0.0.3 on a fake
// underlay; every decapsulated frame is read back out of the ring and checked to fit.
// Input: u8 selector (bit 0: also send the frame through the tunnel), then the 12-byte
// virtio-net header the underlay gave, then the frame.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fake_wire.h"
#include "fuzz_input.h"
#include "port/vxlan_wire.h"

using namespace vl;

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "fuzz_vxlan: %s\n", what);
  std::abort();
}

struct Endpoint {
  test::FakeWire under{true};
  std::unique_ptr<port::VxlanWire> vx;
  std::vector<uint8_t> out = std::vector<uint8_t>(wire::kHdrLen + virtio::kMaxFrameLen + 64);
  std::vector<uint8_t> tx = std::vector<uint8_t>(port::VxlanWire::kHeadroom + wire::kHdrLen + 2048);

  Endpoint() {
    port::VxlanSettings s;
    std::string err;
    if (!port::parse_vxlan_arg("uplink=up,local=10.0.0.1,vni=100,remote=10.0.0.2+10.0.0.3", &s, &err))
      die(err.c_str());
    vx = std::make_unique<port::VxlanWire>("fuzz", s, "vx");
    vx->set_underlay(&under);
    if (!vx->open(&err)) die(err.c_str());
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Endpoint* e = new Endpoint;  // (lives for the process: the ring persists across inputs)
  fuzz::Input in(data, size);
  const uint8_t sel = in.u8();
  size_t n = wire::kHdrLen;
  const uint8_t* h = in.take(&n);
  uint8_t hdr[wire::kHdrLen] = {};
  std::memcpy(hdr, h, n);
  size_t flen = in.left();
  const uint8_t* f = in.take(&flen);
  std::vector<uint8_t> frame(f, f + flen);  // its own heap block: reads past it are caught
  port::VxlanWire* const t[1] = {e->vx.get()};
  port::VxlanWire::demux(t, 1, 0, hdr, frame.data(), static_cast<uint32_t>(frame.size()));
  e->vx->rx_batch_done(0);
  wire::Buf b{e->out.data(), static_cast<uint32_t>(e->out.size()), 0};
  while (e->vx->recv(0, &b, 1) == 1) {
    if (b.len < wire::kHdrLen + 14 || b.len > b.cap) die("a decapsulated frame of an impossible length");
    b.len = 0;
  }
  if ((sel & 1) && frame.size() >= 14 && frame.size() <= e->vx->info().max_frame) {
    uint8_t* p = e->tx.data() + port::VxlanWire::kHeadroom;
    std::memset(p, 0, wire::kHdrLen);
    std::memcpy(p + wire::kHdrLen, frame.data(), frame.size());
    const wire::Buf s{p, static_cast<uint32_t>(e->tx.size() - port::VxlanWire::kHeadroom),
                      static_cast<uint32_t>(wire::kHdrLen + frame.size())};
    e->vx->send(0, &s, 1);
    for (const auto& pkt : e->under.sent)
      if (pkt.size() != wire::kHdrLen + port::VxlanWire::kEncapLen + frame.size())
        die("an encapsulated packet of the wrong length");
  }
  e->under.sent.clear();
  e->under.control.clear();
  return 0;
}
