#include "gen/port.h"

namespace vl::gen {

const char* port_kind_name(PortKind k, bool server) {
  switch (k) {
    case PortKind::kVhostUser:
      return server ? "vhost-user" : "vhost-user-client";
    case PortKind::kTap:
      return "tap";
    case PortKind::kAfPacket:
      return "af-packet";
    case PortKind::kAfXdp:
      return "af-xdp";
    case PortKind::kDpdk:
      return "dpdk";
  }
  return "?";
}

bool GenPort::open(const VPortConfig& c, std::string* err) {
  if (c.kind == PortKind::kVhostUser) {
    vport_ = std::make_unique<VPort>();
    return vport_->open(c, err);
  }
  wire_ = std::make_unique<WirePort>();
  return wire_->open(c, err);
}

void GenPort::close() {
  if (vport_) vport_->close();
  if (wire_) wire_->close();
}

const char* GenPort::type() const {
  if (wire_) return wire_->type();
  return port_kind_name(PortKind::kVhostUser, vport_->config().server);
}

uint32_t GenPort::reclaim() {
  if (vport_) return vport_->reclaim();
  return 0;
}

uint32_t GenPort::tx_free_all() const {
  if (vport_) return vport_->tx_free_all();
  uint32_t n = 0;
  for (uint32_t k = 0; k < wire_->queues(); ++k) n += wire_->tx_free(k);
  return n;
}

uint32_t GenPort::rx_discard() {
  return vport_ ? vport_->rx_discard() : wire_->rx_discard();
}

}  // namespace vl::gen
