#include "port/counters.h"

namespace vl::port {

const char* drop_name(Drop d) {
  switch (d) {
    case Drop::kNoRxBuffer: return "no_rx_buffer";
    case Drop::kBadDescriptor: return "bad_descriptor";
    case Drop::kBadHeader: return "bad_header";
    case Drop::kTooBig: return "too_big";
    case Drop::kRingBroken: return "ring_broken";
    case Drop::kNoDestination: return "no_destination";
    case Drop::kBadCsum: return "bad_csum";
    case Drop::kBadGso: return "bad_gso";
    case Drop::kHandoffFull: return "handoff_full";
    case Drop::kShortRxBuffer: return "short_rx_buffer";
    case Drop::kVlanNotAllowed: return "vlan_not_allowed";
    case Drop::kSourceNotAllowed: return "source_not_allowed";
    case Drop::kCount: break;
  }
  return "unknown";
}

}  // namespace vl::port
