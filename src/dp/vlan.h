#pragma once
// 802.1Q VLANs of the bridge (IEEE 802.1Q §6.9, §9.6): which VLANs a port carries and how
// (access: one VLAN, untagged; trunk: a set of VLANs, tagged, optionally one native VLAN
// untagged; the default: every VLAN, untagged frames in VLAN 0 and tagged ones as they
// come), and the classification of one frame's tag. The forwarder keys its MAC table by
// (VLAN, MAC) and confines flooding to a frame's VLAN. docs/architecture.md "VLANs".
#include <cstdint>
#include <cstring>
#include <vector>

namespace vl::dp {

inline constexpr uint16_t kEthTypeVlan = 0x8100;  ///< 802.1Q tag protocol identifier
inline constexpr uint32_t kVlanTagLen = 4;
inline constexpr uint16_t kMaxVid = 4094;

/// How one port carries VLANs. Set before the PMD threads start; read by them.
struct PortVlan {
  enum class Mode : uint8_t { kAll, kAccess, kTrunk };
  Mode mode = Mode::kAll;
  uint16_t tag = 0;     ///< access: its VLAN (1..4094)
  uint16_t native = 0;  ///< trunk: the VLAN of untagged frames (0: untagged frames dropped)
  uint64_t allowed[64] = {};  ///< trunk: bit v: VLAN v is carried (tagged)

  void allow(uint16_t v) { allowed[v >> 6] |= uint64_t{1} << (v & 63); }
  /// A port's settings (port::PortConfig vlan, trunks, native_vlan): an access port when
  /// `access`, else a trunk when `trunks` lists VLANs, else a port of every VLAN.
  static PortVlan from(uint16_t access, const std::vector<uint16_t>& trunks, uint16_t native) {
    PortVlan v;
    if (access) {
      v.mode = Mode::kAccess;
      v.tag = access;
    } else if (!trunks.empty()) {
      v.mode = Mode::kTrunk;
      v.native = native;
      for (const uint16_t t : trunks) v.allow(t);
    }
    return v;
  }
  /// The port carries VLAN v (0: untagged frames of a port in kAll mode).
  bool carries(uint16_t v) const {
    switch (mode) {
      case Mode::kAll: return true;
      case Mode::kAccess: return v == tag;
      case Mode::kTrunk: return (native && v == native) || ((allowed[v >> 6] >> (v & 63)) & 1);
    }
    return false;
  }
  /// Frames of VLAN v leave this port untagged (it carries v).
  bool untagged(uint16_t v) const {
    return mode == Mode::kAccess || (mode == Mode::kTrunk ? v == native : v == 0);
  }
  /// The VLAN a frame arriving on this port belongs to, from its tag (`tagged`, VID `vid`;
  /// a priority tag has VID 0), or -1 when the port does not take it.
  int ingress(bool tagged, uint16_t vid) const {
    if (!tagged || vid == 0) {  // untagged or priority-tagged
      switch (mode) {
        case Mode::kAll: return tagged ? -1 : 0;  // (a priority tag would need its tag kept)
        case Mode::kAccess: return tagged ? -1 : tag;
        case Mode::kTrunk: return native && !tagged ? native : -1;
      }
    }
    if (vid > kMaxVid) return -1;
    switch (mode) {
      case Mode::kAll: return vid;
      case Mode::kAccess: return -1;  // a tagged frame on an access port
      case Mode::kTrunk: return ((allowed[vid >> 6] >> (vid & 63)) & 1) ? vid : -1;
    }
    return -1;
  }
};

/// The tag of a frame whose first 16 bytes are `h`: true with its VID if the ethertype at
/// offset 12 is 802.1Q.
inline bool vlan_tag(const uint8_t* h, uint16_t* vid) {
  if (h[12] != (kEthTypeVlan >> 8) || h[13] != (kEthTypeVlan & 0xff)) return false;
  *vid = static_cast<uint16_t>((h[14] & 0x0f) << 8 | h[15]);
  return true;
}

/// The MAC table key of `mac` (48 bits) in VLAN `v`.
inline uint64_t vlan_key(uint64_t mac, uint16_t v) { return uint64_t{v} << 48 | mac; }

}  // namespace vl::dp
