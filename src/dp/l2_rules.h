#pragma once
// The switch's rules for one frame, each stated once: the forwarder's burst loop
// (dp/forwarder.cpp) and the frame trace (dp/trace.cpp) both call these, so `ctl trace`
// says what the datapath does by construction. Small inline functions over plain values:
// the forwarder pays nothing for them (bench/instructions.py, same count before and after).
#include <cstdint>

#include "dp/fdb.h"
#include "dp/forwarder.h"
#include "dp/vlan.h"
#include "virtio/virtio_defs.h"

namespace vl::dp {

/// Arrival: a frame shorter than an Ethernet header is refused (bad_header, on the ingress
/// port), before anything reads it (virtio::split_tx_chain; the one-buffer fast path tests
/// the same length).
inline bool shorter_than_ethernet(uint32_t len) { return len < virtio::kEthHdrLen; }

/// With VLANs (SwitchTables::vlans): the VLAN of a frame of `len` bytes arriving on a port
/// of settings `pv`, whose ethertype at offset 12 is 802.1Q (`tagged`) with VID `vid`; -1
/// when the port does not take it (vlan_not_allowed). A tag needs the ethertype after it
/// (18 bytes in all): a shorter frame with the 802.1Q TPID is in no VLAN (untagging it would
/// leave less than an Ethernet header; the kernel's skb_vlan_untag drops it too).
inline int ingress_vlan(const PortVlan& pv, bool tagged, uint16_t vid, uint32_t len) {
  return tagged && len < virtio::kEthHdrLen + kVlanTagLen ? -1 : pv.ingress(tagged, vid);
}

/// Port security (SwitchTables::guarded): a frame from a port that has it is forwarded
/// only when its source MAC is one the port allows; else it is dropped (source_not_allowed,
/// on the ingress port), after the VLAN step and before learning, so it teaches the MAC
/// table nothing.
inline bool source_allowed(const SourceGuard& g, Mac src) { return g.allows(src); }

/// Bridge: a unicast frame goes to port `o` alone, the one its destination MAC was learned
/// on (Fdb::lookup; kNoPort when unknown), when `o` is a port of the table (< nports) and
/// not the frame's ingress port `in` (and, with VLANs, carries the frame's VLAN).
inline bool to_learned_port(uint32_t o, uint32_t in, uint32_t nports) {
  return o < nports && o != in;
}

/// Bridge: never back out. A unicast frame whose destination was learned on its ingress
/// port is dropped (no_destination, on that port), not flooded; anything else that is not
/// sent to a learned port is flooded.
inline bool back_to_ingress(Mac dst, uint32_t o, uint32_t in) {
  return o == in && !mac_is_multicast(dst);
}

/// Flooding: port `o` takes a frame of VLAN `vlan` flooded from port `in`: not the ingress
/// port, active, not a tunnel's underlay (bit o of `underlays`), and with VLANs (`vlans`)
/// carrying the VLAN. None: no_destination on the ingress port.
inline bool floods_to(const SwitchTables& t, uint32_t o, uint32_t in, uint64_t underlays,
                      bool vlans, uint16_t vlan) {
  if (o == in || !t.port(o)->active() || ((underlays >> o) & 1)) return false;
  return !vlans || t.vlan[o].carries(vlan);
}

/// Delivery: a frame that asks for no segmentation (gso_type none) and is longer, as it
/// leaves (its tag added or removed), than the receiver's largest frame is too_big on the
/// receiving port (offload/deliver.cpp; Forwarder::hand_off before the copy). A TSO frame is
/// judged by its segments (offload/deliver.cpp).
inline bool too_big_for(uint32_t len, uint8_t gso_type, uint32_t max_frame) {
  return len > max_frame && gso_type == virtio::kNetHdrGsoNone;
}

}  // namespace vl::dp
