#pragma once
// Virtio constants and wire layouts shared by the device (back-end) and driver (front-end)
// sides. Sources: virtio 1.2 §2.7 (split virtqueues), §5.1 (network device), and
// QEMU docs/interop/vhost-user.rst for VHOST_USER_F_PROTOCOL_FEATURES.
//
// All multi-byte fields are little-endian (virtio 1.x); virtlink runs on little-endian
// hosts only (checked at compile time below).
#include <bit>
#include <cstdint>

static_assert(std::endian::native == std::endian::little, "virtlink assumes a little-endian host");

namespace vl::virtio {

// ---- Feature bits (virtio 1.2 §5.1.3, §6) ----
inline constexpr int kNetFCsum = 0;
inline constexpr int kNetFGuestCsum = 1;
inline constexpr int kNetFCtrlGuestOffloads = 2;
inline constexpr int kNetFMtu = 3;
inline constexpr int kNetFMac = 5;
inline constexpr int kNetFGuestTso4 = 7;
inline constexpr int kNetFGuestTso6 = 8;
inline constexpr int kNetFGuestEcn = 9;
inline constexpr int kNetFGuestUfo = 10;
inline constexpr int kNetFHostTso4 = 11;
inline constexpr int kNetFHostTso6 = 12;
inline constexpr int kNetFHostEcn = 13;
inline constexpr int kNetFHostUfo = 14;
inline constexpr int kNetFMrgRxbuf = 15;
inline constexpr int kNetFStatus = 16;
inline constexpr int kNetFCtrlVq = 17;
inline constexpr int kNetFCtrlRx = 18;
inline constexpr int kNetFCtrlVlan = 19;
inline constexpr int kNetFGuestAnnounce = 21;
inline constexpr int kNetFMq = 22;
inline constexpr int kNetFCtrlMacAddr = 23;
inline constexpr int kFNotifyOnEmpty = 24;
inline constexpr int kFLogAll = 26;  // VHOST_F_LOG_ALL
inline constexpr int kFAnyLayout = 27;
inline constexpr int kRingFIndirectDesc = 28;
inline constexpr int kRingFEventIdx = 29;
inline constexpr int kFProtocolFeatures = 30;  // VHOST_USER_F_PROTOCOL_FEATURES
inline constexpr int kFVersion1 = 32;
inline constexpr int kFAccessPlatform = 33;
inline constexpr int kFRingPacked = 34;
inline constexpr int kFInOrder = 35;

constexpr uint64_t bit(int n) { return uint64_t{1} << n; }
constexpr bool has(uint64_t features, int n) { return (features & bit(n)) != 0; }

/// Returns the name of a feature bit ("VERSION_1", "MRG_RXBUF", ...), or nullptr.
const char* feature_name(int bit);

// ---- Split virtqueue layout (virtio 1.2 §2.7) ----
inline constexpr uint16_t kDescFNext = 1;
inline constexpr uint16_t kDescFWrite = 2;
inline constexpr uint16_t kDescFIndirect = 4;
inline constexpr uint16_t kAvailFNoInterrupt = 1;
inline constexpr uint16_t kUsedFNoNotify = 1;

/// Largest queue size a split virtqueue may have (virtio 1.2 §2.7: Queue Size <= 32768).
inline constexpr uint32_t kMaxQueueSize = 32768;

/// One descriptor: 16 bytes, 16-byte aligned table (virtio 1.2 §2.7.5).
struct VringDesc {
  uint64_t addr;   ///< guest-physical address of the buffer
  uint32_t len;    ///< bytes
  uint16_t flags;  ///< kDescF*
  uint16_t next;   ///< index of the next descriptor when kDescFNext
};
static_assert(sizeof(VringDesc) == 16);

/// Available ring header; ring[num] then used_event (u16) follow (virtio 1.2 §2.7.6).
struct VringAvail {
  uint16_t flags;
  uint16_t idx;
  uint16_t ring[];
};

/// One used-ring element: 8 bytes (virtio 1.2 §2.7.8).
struct VringUsedElem {
  uint32_t id;   ///< head index of the chain
  uint32_t len;  ///< bytes written into the chain's device-writable buffers
};

/// Used ring header; ring[num] then avail_event (u16) follow (virtio 1.2 §2.7.8).
struct VringUsed {
  uint16_t flags;
  uint16_t idx;
  VringUsedElem ring[];
};

/// Bytes of each part of a split ring of `num` entries (virtio 1.2 §2.7).
constexpr uint64_t desc_table_bytes(uint32_t num) { return 16ull * num; }
constexpr uint64_t avail_ring_bytes(uint32_t num) { return 6ull + 2ull * num; }
constexpr uint64_t used_ring_bytes(uint32_t num) { return 6ull + 8ull * num; }

/// vring_need_event() of virtio 1.2 §2.7.10: true if `event_idx` lies in (old, new].
constexpr bool need_event(uint16_t event_idx, uint16_t new_idx, uint16_t old_idx) {
  return static_cast<uint16_t>(new_idx - event_idx - 1) < static_cast<uint16_t>(new_idx - old_idx);
}

// ---- Packed virtqueue layout (virtio 1.2 §2.8) ----
inline constexpr uint16_t kPackedDescFAvail = 1 << 7;  ///< VIRTQ_DESC_F_AVAIL
inline constexpr uint16_t kPackedDescFUsed = 1 << 15;  ///< VIRTQ_DESC_F_USED
/// Event suppression flags (virtio 1.2 §2.8.10): RING_EVENT_FLAGS_*.
inline constexpr uint16_t kRingEventFlagsEnable = 0;
inline constexpr uint16_t kRingEventFlagsDisable = 1;
inline constexpr uint16_t kRingEventFlagsDesc = 2;  ///< only with EVENT_IDX

/// One packed-ring descriptor: 16 bytes, 16-byte aligned ring (virtio 1.2 §2.8.13). The
/// same layout is used in indirect tables, where only kDescFWrite is meaningful.
struct PackedDesc {
  uint64_t addr;   ///< guest-physical address of the buffer
  uint32_t len;    ///< bytes (the device writes the bytes it wrote, in used descriptors)
  uint16_t id;     ///< buffer ID: chosen by the driver, echoed back by the device
  uint16_t flags;  ///< kDescF* plus kPackedDescFAvail / kPackedDescFUsed
};
static_assert(sizeof(PackedDesc) == 16);

/// An event suppression structure (virtio 1.2 §2.8.10): the driver's (read by the device:
/// may the device notify?) and the device's (read by the driver: may the driver kick?).
struct PackedEvent {
  uint16_t off_wrap;  ///< bits 0-14 descriptor ring offset, bit 15 wrap counter
  uint16_t flags;     ///< kRingEventFlags*
};
static_assert(sizeof(PackedEvent) == 4);

/// Bytes of a packed ring of `num` descriptors, and of an event suppression structure.
constexpr uint64_t packed_ring_bytes(uint32_t num) { return 16ull * num; }
inline constexpr uint64_t kPackedEventBytes = 4;

// ---- Network device (virtio 1.2 §5.1.6) ----
inline constexpr uint8_t kNetHdrFNeedsCsum = 1;
inline constexpr uint8_t kNetHdrFDataValid = 2;
inline constexpr uint8_t kNetHdrGsoNone = 0;

/// struct virtio_net_hdr with num_buffers: 12 bytes when VERSION_1 or MRG_RXBUF is
/// negotiated, else the first 10 bytes only (virtio 1.2 §5.1.6).
struct NetHdr {
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len;
  uint16_t gso_size;
  uint16_t csum_start;
  uint16_t csum_offset;
  uint16_t num_buffers;
};
static_assert(sizeof(NetHdr) == 12);

/// The virtio-net header length (bytes) for the whole negotiated feature set, the one
/// rule every part of virtlink uses (hostile-inputs.md item 20): 12 (NetHdr, with
/// num_buffers) with VERSION_1 (virtio 1.2 §5.1.6) or MRG_RXBUF (the legacy layout,
/// §5.1.6.1), and with RING_PACKED even without VERSION_1: not a combination the spec
/// defines, but the one DPDK's virtio PMD negotiates in legacy mode, and both its PMD
/// (vtnet_hdr_size) and its vhost library then use 12 bytes. 10 otherwise. (HASH_REPORT's
/// 20-byte header is never offered.)
constexpr uint32_t net_hdr_len(uint64_t features) {
  return (has(features, kFVersion1) || has(features, kNetFMrgRxbuf) || has(features, kFRingPacked))
             ? 12
             : 10;
}

/// Ethernet sizes (bytes, without FCS).
inline constexpr uint32_t kEthHdrLen = 14;
inline constexpr uint32_t kEthMinFrame = kEthHdrLen;
/// The shortest valid Ethernet frame without its FCS (IEEE 802.3: 64 bytes with it;
/// Linux ETH_ZLEN). A receive buffer that cannot take one takes no real frame.
inline constexpr uint32_t kEthZlen = 60;
/// Largest frame virtlink carries: 64 KiB TSO frames plus an Ethernet header.
inline constexpr uint32_t kMaxFrameLen = 65535 + kEthHdrLen;

}  // namespace vl::virtio
