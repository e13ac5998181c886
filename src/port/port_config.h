#pragma once
// The static configuration of one port as the command line and the TOML file give it
// (INTERFACES.md): its type, its target, and its settings.
#include <cstdint>
#include <string>
#include <vector>

namespace vl::port {

enum class SocketMode : uint8_t { kServer, kClient };

/// Default of PortConfig::tx_retry_us, and its largest value (µs).
inline constexpr uint32_t kDefaultTxRetryUs = 20;
inline constexpr uint32_t kMaxTxRetryUs = 10000;
/// Default of PortConfig::completion_coalesce_us, and its largest value (µs).
inline constexpr uint32_t kDefaultCompletionCoalesceUs = 250;
inline constexpr uint32_t kMaxCompletionCoalesceUs = 10000;

/// What a port is (INTERFACES.md port types).
enum class PortType : uint8_t {
  kVhostUser,  ///< vhost-user (SocketMode: server or client)
  kTap,        ///< tap:IFNAME, a tap device into the host's stack
  kAfPacket,   ///< af-packet:IFACE, a packet socket (TPACKET_V3)
  kAfXdp,      ///< af-xdp:IFACE, an AF_XDP socket (falls back to af-packet)
  kDpdk,       ///< dpdk:DEVARGS, a DPDK ethdev (PCI address or virtual device)
  kVxlan,      ///< vxlan:uplink=PORT,local=IP,vni=N,remote=IP[+IP...], a VXLAN tunnel
};

/// A VXLAN tunnel port's settings (RFC 7348; port/vxlan_wire.h), parsed from its argument.
/// IPv4 addresses in network byte order, as they stand in a packet.
struct VxlanSettings {
  std::string uplink;             ///< the port it is encapsulated on (its underlay)
  uint32_t local_ip = 0;          ///< the VTEP's address on the uplink (it answers ARP for it)
  uint32_t vni = 0;               ///< 24-bit VXLAN network identifier
  std::vector<uint32_t> remotes;  ///< the remote VTEPs (full mesh), 1..kMaxVxlanRemotes
  uint16_t dst_port = 4789;       ///< UDP destination port (IANA: 4789)
  /// Next hop of every remote (a routed underlay); else each remote is ARPed for directly.
  bool has_gateway_mac = false;
  uint8_t gateway_mac[6] = {};
  /// The VTEP's Ethernet address; default: a locally administered one derived from the
  /// port's name and local address.
  bool has_mac = false;
  uint8_t mac[6] = {};
};
inline constexpr uint32_t kMaxVxlanRemotes = 16;

/// Parses a vxlan port's argument: comma-separated KEY=VALUE with uplink=PORT, local=IP,
/// vni=N (0..16777215) and remote=IP[+IP...] required; dst_port=N, gateway_mac=MAC and
/// mac=MAC optional. False with `*err`.
bool parse_vxlan_arg(const std::string& arg, VxlanSettings* out, std::string* err);

/// Static configuration of one port: vhost-user or an uplink (port/uplink_port.h).
struct PortConfig {
  std::string name;
  PortType type = PortType::kVhostUser;
  SocketMode mode = SocketMode::kServer;
  /// vhost-user: the socket's path; tap, af-packet, af-xdp: the interface; dpdk: DEVARGS.
  std::string path;
  uint32_t mtu = 0;  ///< 0: vhost-user: no limit beyond the guest's NET_SET_MTU; uplinks: the interface's
  uint32_t socket_mode = 0600;  ///< permission bits of the socket file (server mode)
  std::string socket_owner;     ///< user name or uid of the socket file; empty: ours
  std::string socket_group;     ///< group name or gid of the socket file; empty: ours
  bool mrg_rxbuf = true;        ///< offer VIRTIO_NET_F_MRG_RXBUF
  bool offloads = true;         ///< offer CSUM/GUEST_CSUM/TSO/ECN (offload::kOffloadFeatures)
  /// Queue pairs offered (GET_QUEUE_NUM; VIRTIO_NET_F_MQ when above 1), 1..8.
  uint32_t max_queues = 8;
  /// Bounded retry into this port's full receive queue (µs, 0: drop at once): a frame that
  /// finds no receive buffer is kept in its intermediate queue and delivered at the next
  /// passes until it is this old (from being taken off its sender's ring), then dropped as
  /// no_rx_buffer. Frames kept count in tx_retries. Like OVS's tx-retries-max, bounded in
  /// time rather than attempts.
  uint32_t tx_retry_us = kDefaultTxRetryUs;
  /// Transmit completion coalescing (µs, 0: off), in the spirit of virtio-net's
  /// notification coalescing (virtio 1.3 §5.1.6.5.6, tx_usecs): a call the guest asked for on
  /// its transmit queue (its sent buffers are used) waits up to this long, and goes out
  /// with the next call into its receive queue if one comes sooner; counted in
  /// rx_calls_deferred. docs/architecture.md "Notifications".
  uint32_t completion_coalesce_us = kDefaultCompletionCoalesceUs;
  /// Most bytes of guest memory one connection may map (SET_MEM_TABLE beyond it is
  /// refused): bounds the address space a front-end can take.
  uint64_t max_guest_memory = uint64_t{1} << 40;
  // ---- 802.1Q (dp/vlan.h; any port type) ----
  /// Access port: its one VLAN (1..4094), untagged on the port; 0: not an access port.
  uint16_t vlan = 0;
  /// Trunk port: the VLANs it carries tagged (each 1..4094); empty: not a trunk. With
  /// neither `vlan` nor `trunks` a port carries every VLAN as it comes (untagged: VLAN 0).
  std::vector<uint16_t> trunks;
  /// Trunk port: the VLAN of its untagged frames (0: untagged frames are dropped).
  uint16_t native_vlan = 0;
  /// Port security: the source MACs the port's frames may carry (each as a 48-bit number,
  /// its first byte in bits 40-47: dp::mac_from_bytes), at most dp::kMaxAllowedMacs; other
  /// frames are dropped as source_not_allowed. Empty: any source.
  std::vector<uint64_t> port_security;
  // ---- Uplinks (tap, af-packet, af-xdp, dpdk) ----
  /// Descriptors per virtqueue between the uplink's wire and the switch, and per device
  /// ring of a dpdk port (a power of two, 64..4096).
  uint32_t queue_size = 256;
  /// Queue pairs of a dpdk or af-xdp device (RSS over them where the device has it).
  uint32_t queues = 1;
  /// vxlan: its settings (`path` keeps the argument as given).
  VxlanSettings vxlan;
  /// MAC table entries this port may hold (0: the switch's --mac-limit).
  uint32_t mac_limit = 0;
  /// Which of the keys above the port's own [[port]] table set (switch-wide settings fill
  /// in the others): bits of PortKey.
  uint32_t explicit_keys = 0;
};

/// Bits of PortConfig::explicit_keys.
enum PortKey : uint32_t {
  kKeySocketMode = 1,
  kKeySocketOwner = 2,
  kKeySocketGroup = 4,
  kKeyMaxGuestMemory = 8,
  kKeyTxRetry = 16,
  kKeyCompletionCoalesce = 32,
};


/// The type's name as `--port NAME=TYPE:ARG` spells it ("vhost-user", "vhost-user-client",
/// "tap", "af-packet", "af-xdp", "dpdk").
const char* port_type_name(PortType t, SocketMode m);

}  // namespace vl::port
