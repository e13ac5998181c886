#include "port/uplink_port.h"

#include <cstring>

#include <spdlog/spdlog.h>

#include "util/log.h"
#include "vhost/backend.h"
#include "virtio/virtio_defs.h"
#include "wire/af_packet.h"
#include "wire/af_xdp.h"
#include "wire/dpdk.h"
#include "port/vxlan_wire.h"
#include "wire/tap.h"

namespace vl::port {

using virtio::bit;

namespace {
bool is_vlan_type(const uint8_t* t) { return (t[0] == 0x81 && t[1] == 0x00) || (t[0] == 0x88 && t[1] == 0xa8); }
}  // namespace

std::unique_ptr<wire::Wire> make_wire(const PortConfig& cfg) {
  switch (cfg.type) {
    case PortType::kTap: return std::make_unique<wire::TapWire>(cfg.path, cfg.offloads, cfg.mtu);
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
    case PortType::kVxlan: return std::make_unique<VxlanWire>(cfg.path, cfg.vxlan, cfg.name);
    case PortType::kVhostUser: return nullptr;
  }
  return nullptr;
}

UplinkPort::UplinkPort(uint32_t id, PortConfig cfg, std::unique_ptr<wire::Wire> w, Quiescer* q)
    : Port(id, cfg.name), cfg_(std::move(cfg)), wire_(std::move(w)), quiescer_(q) {
  for (int& f : rx_fd_) f = -1;
  if (cfg_.type == PortType::kVxlan) vx_ = static_cast<VxlanWire*>(wire_.get());
}

void UplinkPort::attach_tunnel(UplinkPort* t) {
  if (!t->vx_ || ntunnels_ == kMaxTunnels) return;  // (config validation refuses both)
  tunnels_[ntunnels_] = t->vx_;
  tunnel_ports_[ntunnels_++] = t;
  t->underlay_ = this;
  t->rx_rotation_ = rx_rotation_;
}

void UplinkPort::attach_tunnel_live(UplinkPort* t) {
  const bool live = active_.load();
  if (live) leave_dp();  // no PMD thread in pull(), which reads the tunnel list
  attach_tunnel(t);
  if (live) publish_dp();
}

void UplinkPort::detach_tunnel(UplinkPort* t) {
  const bool live = active_.load();
  if (live) leave_dp();
  uint32_t n = 0;
  for (uint32_t i = 0; i < ntunnels_; ++i) {
    if (tunnel_ports_[i] == t) continue;
    tunnels_[n] = tunnels_[i];
    tunnel_ports_[n++] = tunnel_ports_[i];
  }
  for (uint32_t i = n; i < ntunnels_; ++i) {
    tunnels_[i] = nullptr;
    tunnel_ports_[i] = nullptr;
  }
  ntunnels_ = n;
  t->underlay_ = nullptr;
  if (live) publish_dp();
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
  if (vx_) {  // a tunnel: on its underlay's wire, which started first
    if (!underlay_ || !underlay_->open_) {
      *err = fmt::format("port {}: its uplink '{}' is not open", cfg_.name, cfg_.vxlan.uplink);
      return false;
    }
    vx_->set_underlay(underlay_->wire_.get());
  }
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
               wire_->type(), cfg_.path, nqp_, qsize_, info.mtu,
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
  tag_free_max_ = mtu + virtio::kEthHdrLen;
  if (info.max_frame) {  // a tunnel's is exact
    max_frame_ = std::min(max_frame_, info.max_frame);
    tag_free_max_ = 0;
  }
  headroom_ = (info.headroom + 63) & ~63u;
  // The rings carry what a virtio 1.0 driver would have negotiated: the 12-byte header,
  // no mergeable buffers (a frame in one buffer, which the wire sends or receives whole),
  // and with the wire's offloads both ways buffers for a whole TSO frame. A tunnel takes
  // partial checksums and TSO frames from its wire (a local sender's, decapsulated) but
  // gives it none: the switch finishes them (its receive queue has no GUEST_ offloads).
  features_ = bit(virtio::kFVersion1);
  if (info.offloads) features_ |= vhost::kOffloadFeatures;
  else if (info.rx_offloads) features_ |= vhost::kOffloadFeatures & ~vhost::kGuestOffloadFeatures;
  const uint32_t big = virtio::kMaxFrameLen + 4;
  to_size_ = headroom_ + ((wire::kHdrLen + (info.offloads ? big : max_frame_) + 63) & ~63u);
  from_size_ = (wire::kHdrLen + (info.offloads || info.rx_offloads ? big : max_frame_) + 63) & ~63u;
  // A tunnel segments TSO frames into its receive ring: a 64 KiB frame takes up to 45
  // descriptors there, so at least 1024 of them.
  const uint32_t to_num = vx_ ? std::max<uint32_t>(cfg_.queue_size, 1024) : cfg_.queue_size;
  const uint32_t from_num = cfg_.queue_size;
  qsize_ = to_num;
  auto ring_bytes = [](size_t n) { return n * 16 + 6 + 2 * n + 4096 + 6 + 8 * n + 8192; };
  const size_t bytes = nqp_ * (ring_bytes(to_num) + ring_bytes(from_num) + size_t{to_num} * to_size_ +
                               size_t{from_num} * from_size_) + (2u << 20);
  if (!mem_.create(bytes, "virtlink-uplink-" + cfg_.name, err)) return false;
  const virtio::MemRegionDesc r = mem_.region();
  uint8_t* host = mem_.host(r.guest_phys_addr);
  if (!gmem_.build_unowned(&r, &host, 1, err)) return false;
  q_ = std::make_unique<Queue[]>(nqp_);
  for (uint32_t i = 0; i < nqp_; ++i) {
    Queue& q = q_[i];
    if (!q.to_wire_drv.init(mem_, to_num, false, err) ||
        !q.from_wire_drv.init(mem_, from_num, false, err) ||
        !q.to_wire_bufs.init(mem_, to_num, to_size_, err) ||
        !q.from_wire_bufs.init(mem_, from_num, from_size_, err))
      return false;
    // Never a kick or a call: the hooks run in the PMD threads that serve the rings.
    q.to_wire_drv.set_interrupts(false);
    q.from_wire_drv.set_interrupts(false);
    auto attach = [&](virtio::SplitDeviceQueue& d, virtio::SplitDriverQueue& v, uint32_t num) {
      d.attach(&gmem_, num, reinterpret_cast<virtio::VringDesc*>(v.desc_uva()),
               reinterpret_cast<virtio::VringAvail*>(v.avail_uva()),
               reinterpret_cast<virtio::VringUsed*>(v.used_uva()), 0, features_);
    };
    attach(q.to_wire_dev, q.to_wire_drv, to_num);
    attach(q.from_wire_dev, q.from_wire_drv, from_num);
    // Every receive buffer is posted at once; transmit buffers as frames arrive.
    uint32_t b;
    while (q.to_wire_bufs.get(&b))
      q.to_wire_drv.add(q.to_wire_bufs.gpa(b) + headroom_, to_size_ - headroom_, true, b);
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
  // A tunnel sends on its underlay's queues: both keep one rotation, so the thread that
  // writes a queue of one writes the same queue of the other.
  if (underlay_) {
    underlay_->move_rx_writers(rotation);
    return;
  }
  rx_rotation_ = rotation;
  for (uint32_t i = 0; i < ntunnels_; ++i) {
    tunnel_ports_[i]->rx_rotation_ = rotation;
    if (tunnel_ports_[i]->open_) tunnel_ports_[i]->leave_dp();
  }
  if (open_) {
    leave_dp();
    publish_dp();
  }
  for (uint32_t i = 0; i < ntunnels_; ++i)
    if (tunnel_ports_[i]->open_) tunnel_ports_[i]->publish_dp();
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
  wire_->on_tick();
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
  r.wire_tx_too_big = wire::peek(c.wire_tx_too_big);
  r.not_for_vtep = wire::peek(c.not_for_vtep);
  return r;
}

uint32_t UplinkPort::pull(void* self, uint32_t qi) {
  auto* u = static_cast<UplinkPort*>(self);
  Queue& q = u->q_[qi];
  // The chains the switch is done with come back first: their buffers take frames again.
  uint32_t id, len;
  while (q.from_wire_drv.get_used(&id, &len)) q.from_wire_bufs.put(id);
  // Buffers stay staged for the wire from one poll to the next: a poll that finds nothing
  // costs the wire's look only, not taking and putting back a burst of buffers.
  while (q.nstaged < kPullBurst && q.from_wire_bufs.get(&q.staged_id[q.nstaged])) {
    q.staged[q.nstaged] = {q.from_wire_bufs.data(q.staged_id[q.nstaged]), u->from_size_, 0};
    ++q.nstaged;
  }
  if (q.nstaged == 0) return 0;
  const uint32_t got = u->wire_->recv(qi, q.staged, q.nstaged);
  if (!got) return 0;
  wire::bump(q.c.wire_rx_packets, got);
  if (u->ntunnels_) [[unlikely]] {  // copied out by the tunnels: the buffers stay staged
    u->demux(q, qi, q.staged, got);
    return got;
  }
  for (uint32_t i = 0; i < got; ++i)
    q.from_wire_drv.add(q.from_wire_bufs.gpa(q.staged_id[i]), q.staged[i].len, false, q.staged_id[i]);
  q.from_wire_drv.publish();
  for (uint32_t i = got; i < q.nstaged; ++i) {  // the rest move to the front
    q.staged[i - got] = q.staged[i];
    q.staged_id[i - got] = q.staged_id[i];
  }
  q.nstaged -= got;
  return got;
}

uint32_t UplinkPort::demux(Queue& q, uint32_t qi, const wire::Buf* b, uint32_t got) {
  // An underlay: every frame is a tunnel's or nobody's (an underlay switches nothing else).
  for (uint32_t i = 0; i < got; ++i) {
    const uint8_t* h = b[i].p;
    if (!VxlanWire::demux(tunnels_, ntunnels_, qi, h, h + wire::kHdrLen, b[i].len - wire::kHdrLen))
      wire::bump(q.c.not_for_vtep);
  }
  for (uint32_t t = 0; t < ntunnels_; ++t) tunnels_[t]->rx_batch_done(qi);
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
      const uint32_t room = u->to_size_ - u->headroom_;
      uint8_t* p = q.to_wire_bufs.data(id) + u->headroom_;
      if (len <= wire::kHdrLen + virtio::kEthHdrLen - 1 || len > room) [[unlikely]] {
        wire::bump(q.c.bad_used);
        q.to_wire_drv.add(q.to_wire_bufs.gpa(id) + u->headroom_, room, true, id);
        continue;
      }
      // The largest frame leaves room for a VLAN tag: an untagged one that uses it (and is
      // no TSO frame) is more than the interface takes.
      if (len - wire::kHdrLen > u->tag_free_max_ && u->tag_free_max_ && p[1] == 0 &&
          !is_vlan_type(p + wire::kHdrLen + 12)) [[unlikely]] {
        wire::bump(q.c.wire_tx_too_big);
        q.to_wire_drv.add(q.to_wire_bufs.gpa(id) + u->headroom_, room, true, id);
        continue;
      }
      b[k] = {p, room, len};
      ids[k++] = id;
    }
    if (k == 0) break;
    const uint32_t sent = u->wire_->send(qi, b, k);
    wire::bump(q.c.wire_tx_packets, sent);
    if (sent < k) wire::bump(q.c.wire_tx_dropped, k - sent);
    for (uint32_t i = 0; i < k; ++i)
      q.to_wire_drv.add(q.to_wire_bufs.gpa(ids[i]) + u->headroom_, u->to_size_ - u->headroom_,
                        true, ids[i]);
    if (k < kPushBurst) break;
  }
  q.to_wire_drv.publish();
}

}  // namespace vl::port
