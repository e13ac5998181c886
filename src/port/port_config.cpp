#include "port/port_config.h"

namespace vl::port {

const char* port_type_name(PortType t, SocketMode m) {
  switch (t) {
    case PortType::kVhostUser: return m == SocketMode::kServer ? "vhost-user" : "vhost-user-client";
    case PortType::kTap: return "tap";
    case PortType::kAfPacket: return "af-packet";
    case PortType::kAfXdp: return "af-xdp";
    case PortType::kDpdk: return "dpdk";
  }
  return "?";
}

}  // namespace vl::port
