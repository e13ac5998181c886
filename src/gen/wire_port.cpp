#include "gen/wire_port.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "wire/af_packet.h"
#include "wire/af_xdp.h"
#include "wire/dpdk.h"
#include "wire/tap.h"

namespace vl::gen {

namespace {

// The wire for a port kind. Packet sockets and taps without the virtio-net header: the
// generator's frames are whole (checksummed, never TSO) and it wants them so back.
std::unique_ptr<wire::Wire> make_wire(const VPortConfig& c) {
  switch (c.kind) {
    case PortKind::kTap:
      return std::make_unique<wire::TapWire>(c.path, false);
    case PortKind::kAfPacket:
      return std::make_unique<wire::AfPacketWire>(c.path, false);
    case PortKind::kAfXdp:
      return std::make_unique<wire::AfXdpWire>(c.path, c.queues);
    case PortKind::kDpdk: {
      wire::DpdkWire::Options o;
      o.queues = c.queues;
      // At least 1024: DPDK 22.11's net_af_xdp reserves 1024 fill-ring entries per queue at
      // set-up, and refuses a smaller ring ("Failed to configure xdp socket").
      o.rx_desc = o.tx_desc = std::max<uint32_t>(c.queue_size, 1024);
      return std::make_unique<wire::DpdkWire>(c.path, o);
    }
    case PortKind::kVhostUser:
      break;
  }
  return nullptr;
}

}  // namespace

bool WirePort::open(const VPortConfig& c, std::string* err) {
  cfg_ = c;
  if (c.queue_size < 1 || c.queue_size > 32768) {
    *err = fmt::format("port {}: {} transmit buffers per queue (1..32768)", c.name, c.queue_size);
    return false;
  }
  wire_ = make_wire(c);
  std::string why;
  if (!wire_ || !wire_->open(&why)) {
    if (c.kind != PortKind::kAfXdp) {
      *err = fmt::format("port {}: {}", c.name, wire_ ? why : "not a wire");
      return false;
    }
    // As the switch's af-xdp ports do: the same interface through a packet socket.
    spdlog::warn("gen: port {}: AF_XDP on {}: {}; using AF_PACKET instead", c.name, c.path, why);
    wire_ = std::make_unique<wire::AfPacketWire>(c.path, false);
    if (!wire_->open(err)) {
      *err = fmt::format("port {}: {}", c.name, *err);
      return false;
    }
  }
  nq_ = std::max<uint32_t>(1, wire_->info().queues);
  q_ = std::make_unique<Queue[]>(nq_);
  for (uint32_t k = 0; k < nq_; ++k) {
    Queue& q = q_[k];
    q.mem.assign(size_t{c.queue_size + kRxBatch} * c.buf_size, 0);
    q.pending.resize(c.queue_size);
  }
  spdlog::info("gen: port {}: {} {}: {} queue pair(s), MTU {}", c.name, wire_->type(), c.path, nq_,
               wire_->info().mtu);
  return true;
}

void WirePort::close() {
  if (wire_) wire_->close();
}

void WirePort::refill(Queue& q, uint32_t k) {
  uint8_t* base = q_[k].mem.data() + size_t{cfg_.queue_size} * cfg_.buf_size;
  for (uint32_t i = 0; i < kRxBatch; ++i)
    q.rx[i] = {base + size_t{i} * cfg_.buf_size, cfg_.buf_size, 0};
  q.rx_pos = 0;
  q.rx_n = wire_->recv(k, q.rx, kRxBatch);
  c_.rx_packets += q.rx_n;
}

uint32_t WirePort::rx_discard() {
  uint32_t n = 0;
  for (uint32_t k = 0; k < nq_; ++k) {
    Queue& q = q_[k];
    n += q.rx_n - q.rx_pos;
    q.rx_pos = q.rx_n;
    // Bounded: a wire that keeps receiving (a flood) is left for the trial to count.
    for (int batches = 0; batches < 4096; ++batches) {
      refill(q, k);
      if (!q.rx_n) break;
      n += q.rx_n;
      q.rx_pos = q.rx_n;
    }
  }
  return n;
}

}  // namespace vl::gen
