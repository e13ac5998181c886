#include "port/uplink_port.h"

#include <cstring>

#include <spdlog/spdlog.h>

#include "util/log.h"
#include "vhost/backend.h"
#include "virtio/virtio_defs.h"
#include "wire/af_packet.h"
#include "wire/af_xdp.h"
#include "wire/dpdk.h"
#include "wire/tap.h"

namespace vl::port {

using virtio::bit;

std::unique_ptr<wire::Wire> make_wire(const PortConfig& cfg) {
  switch (cfg.type) {
    case PortType::kTap: return std::make_unique<wire::TapWire>(cfg.path, cfg.offloads);
    case PortType::kAfPacket: return std::make_unique<wire::AfPacketWire>(cfg.path, cfg.offloads);
    case PortType::kAfXdp: return std::make_unique<wire::AfXdpWire>(cfg.path, cfg.queues);
    case PortType::kDpdk: {
      wire::DpdkWire::Options o;
      o.queues = cfg.queues;
      // At least 1024: DPDK 22.11's net_af_xdp reserves 1024 fill-ring entries per queue at
      // set-up and refuses a smaller ring ("Failed to configure xdp socket"): with 512, a
      // dpdk:net_af_xdp0,iface=IF port of the default queue_size did not open.
      o.rx_desc = o.tx_desc = std::max<uint32_t>(cfg.queue_size, 1024);
      o.mtu = cfg.mtu;
      return std::make_unique<wire::DpdkWire>(cfg.path, o);
    }
    case PortType::kVhostUser: return nullptr;
  }
  return nullptr;
}

UplinkPort::UplinkPort(uint32_t id, PortConfig cfg, std::unique_ptr<wire::Wire> w, Quiescer* q)
    : Port(id, cfg.name), cfg_(std::move(cfg)), wire_(std::move(w)), quiescer_(q) {
  for (int& f : rx_fd_) f = -1;
}

UplinkPort::~UplinkPort() { stop(); }

const char* UplinkPort::type_name() const {
  return wire_ ? wire_->type() : port_type_name(cfg_.type, cfg_.mode);
}

const char* UplinkPort::state() const {
  if (!open_) return "down";
  return link_up_ ? "connected" : "waiting";
}

bool UplinkPort::start(std::string* err) {
  std::string why;
  if (!wire_ || !wire_->open(&why)) {
    if (cfg_.type != PortType::kAfXdp) {
      *err = wire_ ? why : fmt::format("port {}: type {} is not built into this virtlink", cfg_.name,
                                       port_type_name(cfg_.type, cfg_.mode));
      return false;
    }
    // AF_XDP cannot attach (no XDP support, no privilege, a program already there): the
    // same interface through a packet socket.
    spdlog::warn("port {}: AF_XDP on {}: {}; using AF_PACKET instead", cfg_.name, cfg_.path, why);
    wire_ = std::make_unique<wire::AfPacketWire>(cfg_.path, cfg_.offloads);
    if (!wire_->open(err)) return false;
  }
  if (!lay_out(err)) {
    wire_->close();
    return false;
  }
  open_ = true;
  link_up_ = wire_->link_up();
  const wire::WireInfo& info = wire_->info();
  spdlog::info("port {}: {} {} open: {} queue pair(s) of {} descriptors, MTU {}, {}{}", cfg_.name,
               wire_->type(), cfg_.path, nqp_, cfg_.queue_size, info.mtu,
               info.offloads ? "checksum and TSO offloads" : "no offloads",
               info.rx_interrupts ? "" : "; no receive interrupts: its rxqs are polled in every PMD mode");
  publish_dp();
  return true;
}

bool UplinkPort::lay_out(std::string* err) {
  const wire::WireInfo& info = wire_->info();
  nqp_ = std::min<uint32_t>(info.queues, kMaxQueuePairs);
  const uint32_t mtu = cfg_.mtu ? std::min(cfg_.mtu, info.mtu) : info.mtu;
  max_frame_ = mtu + virtio::kEthHdrLen + 4;  // one VLAN tag
  // The rings carry what a virtio 1.0 driver would have negotiated: the 12-byte header,
  // no mergeable buffers (a frame in one buffer, which the wire sends or receives whole),
  // and with the wire's offloads both ways buffers for a whole TSO frame.
  features_ = bit(virtio::kFVersion1);
  if (info.offloads) features_ |= vhost::kOffloadFeatures;
  const uint32_t largest = info.offloads ? virtio::kMaxFrameLen + 4 : max_frame_;
  buf_size_ = (wire::kHdrLen + largest + 63) & ~63u;
  const uint32_t num = cfg_.queue_size;
  const size_t ring_bytes = size_t{num} * 16 + 6 + 2 * num + 4096 + 6 + 8 * num + 8192;
  const size_t bytes = nqp_ * (2 * ring_bytes + 2 * size_t{num} * buf_size_) + (2u << 20);
  if (!mem_.create(bytes, "virtlink-uplink-" + cfg_.name, err)) return false;
  const virtio::MemRegionDesc r = mem_.region();
  uint8_t* host = mem_.host(r.guest_phys_addr);
  if (!gmem_.build_unowned(&r, &host, 1, err)) return false;
  q_ = std::make_unique<Queue[]>(nqp_);
  for (uint32_t i = 0; i < nqp_; ++i) {
    Queue& q = q_[i];
    if (!q.to_wire_drv.init(mem_, num, false, err) || !q.from_wire_drv.init(mem_, num, false, err) ||
        !q.to_wire_bufs.init(mem_, num, buf_size_, err) ||
        !q.from_wire_bufs.init(mem_, num, buf_size_, err))
      return false;
    // Never a kick or a call: the hooks run in the PMD threads that serve the rings.
    q.to_wire_drv.set_interrupts(false);
    q.from_wire_drv.set_interrupts(false);
    auto attach = [&](virtio::SplitDeviceQueue& d, virtio::SplitDriverQueue& v) {
      d.attach(&gmem_, num, reinterpret_cast<virtio::VringDesc*>(v.desc_uva()),
               reinterpret_cast<virtio::VringAvail*>(v.avail_uva()),
               reinterpret_cast<virtio::VringUsed*>(v.used_uva()), 0, features_);
    };
    attach(q.to_wire_dev, q.to_wire_drv);
    attach(q.from_wire_dev, q.from_wire_drv);
    // Every receive buffer is posted at once; transmit buffers as frames arrive.
    uint32_t b;
    while (q.to_wire_bufs.get(&b)) q.to_wire_drv.add(q.to_wire_bufs.gpa(b), buf_size_, true, b);
    q.to_wire_drv.publish();
  }
  return true;
}

void UplinkPort::publish_dp() {
  PortDp d;
  d.nqp = nqp_;
  for (uint32_t q = 0; q < kMaxQueuePairs; ++q) {
    d.qp[q].rx_shared = &shared_[2 * q];
    d.qp[q].tx_shared = &shared_[2 * q + 1];
  }
  const bool interrupts = wire_->info().rx_interrupts;
  for (uint32_t q = 0; q < nqp_; ++q) {
    d.qp[q].rxq = virtio::RingRef{&q_[q].to_wire_dev};
    d.qp[q].txq = virtio::RingRef{&q_[q].from_wire_dev};
    d.qp[q].kickless = !interrupts || wire_->rx_fd(q) < 0;
  }
  quiescer_->assign_rx_writers(d, rx_rotation_);
  d.gen = ++dp_gen_;
  d.caps.hdr_len = wire::kHdrLen;
  d.caps.mrg_rxbuf = false;
  d.caps.features = features_;
  d.caps.max_frame = max_frame_;
  d.tx_retry_ns = uint64_t{cfg_.tx_retry_us} * 1000;
  d.completion_coalesce_ns = 0;  // nobody waits for a call
  d.wire = {&UplinkPort::pull, &UplinkPort::push, this};
  dp_ = d;
  for (uint32_t q = 0; q < nqp_; ++q) {
    rx_fd_[q] = d.qp[q].kickless ? -1 : wire_->rx_fd(q);
    if (rx_fd_[q] >= 0) quiescer_->set_kick_fd(id_, q, -1, rx_fd_[q]);
  }
  active_.store(true, std::memory_order_seq_cst);
  quiescer_->ports_changed();
}

void UplinkPort::leave_dp() {
  if (!active_.load()) return;
  active_.store(false, std::memory_order_seq_cst);
  quiescer_->wait_quiescent();
  for (uint32_t q = 0; q < kMaxQueuePairs; ++q) {
    if (rx_fd_[q] < 0) continue;
    quiescer_->set_kick_fd(id_, q, rx_fd_[q], -1);
    rx_fd_[q] = -1;
  }
}

void UplinkPort::move_rx_writers(uint32_t rotation) {
  rx_rotation_ = rotation;
  if (!open_) return;
  leave_dp();
  publish_dp();
}

void UplinkPort::stop() {
  if (!open_) return;
  leave_dp();
  quiescer_->ports_changed();
  wire_->close();
  open_ = false;
}

bool UplinkPort::on_tick() {
  if (!open_) return false;
  const bool up = wire_->link_up();
  if (up != link_up_) {
    spdlog::info("port {}: {} {}: link {}", cfg_.name, wire_->type(), cfg_.path, up ? "up" : "down");
    link_up_ = up;
  }
  return false;
}

UplinkQueueCounters UplinkPort::queue_counters(uint32_t qi) const {
  UplinkQueueCounters r;
  if (qi >= nqp_) return r;
  const UplinkQueueCounters& c = q_[qi].c;
  r.wire_rx_packets = wire::peek(c.wire_rx_packets);
  r.wire_tx_packets = wire::peek(c.wire_tx_packets);
  r.wire_tx_dropped = wire::peek(c.wire_tx_dropped);
  r.bad_used = wire::peek(c.bad_used);
  return r;
}

uint32_t UplinkPort::pull(void* self, uint32_t qi) {
  auto* u = static_cast<UplinkPort*>(self);
  Queue& q = u->q_[qi];
  // The chains the switch is done with come back first: their buffers take frames again.
  uint32_t id, len;
  while (q.from_wire_drv.get_used(&id, &len)) q.from_wire_bufs.put(id);
  uint32_t n = std::min(q.from_wire_bufs.available(), kPullBurst);
  if (n == 0) return 0;
  wire::Buf b[kPullBurst];
  uint32_t ids[kPullBurst];
  for (uint32_t i = 0; i < n; ++i) {
    q.from_wire_bufs.get(&ids[i]);
    b[i] = {q.from_wire_bufs.data(ids[i]), u->buf_size_, 0};
  }
  const uint32_t got = u->wire_->recv(qi, b, n);
  for (uint32_t i = 0; i < got; ++i)
    q.from_wire_drv.add(q.from_wire_bufs.gpa(ids[i]), b[i].len, false, ids[i]);
  for (uint32_t i = n; i-- > got;) q.from_wire_bufs.put(ids[i]);  // unused, in the order taken
  if (got) {
    q.from_wire_drv.publish();
    wire::bump(q.c.wire_rx_packets, got);
  }
  return got;
}

void UplinkPort::push(void* self, uint32_t qi) {
  auto* u = static_cast<UplinkPort*>(self);
  Queue& q = u->q_[qi];
  wire::Buf b[kPushBurst];
  uint32_t ids[kPushBurst];
  for (;;) {
    uint32_t k = 0, id, len;
    while (k < kPushBurst && q.to_wire_drv.get_used(&id, &len)) {
      if (len <= wire::kHdrLen + virtio::kEthHdrLen - 1 || len > u->buf_size_) [[unlikely]] {
        wire::bump(q.c.bad_used);
        q.to_wire_drv.add(q.to_wire_bufs.gpa(id), u->buf_size_, true, id);
        continue;
      }
      b[k] = {q.to_wire_bufs.data(id), u->buf_size_, len};
      ids[k++] = id;
    }
    if (k == 0) break;
    const uint32_t sent = u->wire_->send(qi, b, k);
    wire::bump(q.c.wire_tx_packets, sent);
    if (sent < k) wire::bump(q.c.wire_tx_dropped, k - sent);
    for (uint32_t i = 0; i < k; ++i)
      q.to_wire_drv.add(q.to_wire_bufs.gpa(ids[i]), u->buf_size_, true, ids[i]);
    if (k < kPushBurst) break;
  }
  q.to_wire_drv.publish();
}

}  // namespace vl::port
