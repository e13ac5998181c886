#pragma once
// Switch configuration: the command line of `virtlink switch` and its TOML file carry the
// same settings (INTERFACES.md). Parsing is all-or-nothing: an error leaves no partial
// configuration behind.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dp/fdb.h"
#include "dp/forwarder.h"
#include "dp/pmd.h"
#include "port/vhost_port.h"

namespace vl::app {

struct SwitchConfig {
  std::vector<port::PortConfig> ports;
  dp::ForwardMode forward = dp::ForwardMode::kBridge;
  std::vector<int> pmd_cores;  ///< empty: one unpinned PMD thread
  dp::PmdOptions pmd;
  std::string flush = "rx-batch";  ///< flush policy of every port (dp/flush.h)
  std::map<std::string, std::string> port_flush;  ///< port name -> its own flush policy
  std::string control_path;    ///< empty: control::default_control_path()
  /// --db: the state file of run-time changes (app/state_db.h); empty: none.
  std::string db_path;
  /// --config: the TOML file a SIGHUP reads again; empty: none.
  std::string config_file;
  /// --handover-fd: this switch is a successor started by `ctl upgrade`; it takes the
  /// running switch's state over this socket (app/switch_upgrade.cpp). -1: a plain start.
  int handover_fd = -1;
  /// The control socket file's permission bits, owner and group (names or ids; empty:
  /// the switch's). --control-mode/--control-owner/--control-group; TOML control_mode,
  /// control_owner, control_group.
  uint32_t control_mode = 0600;
  std::string control_owner;
  std::string control_group;
  std::string log_file;        ///< TOML log_file: the log appended there too (empty: none)
  /// --metrics / TOML metrics: "[ADDR:]PORT" of the Prometheus endpoint (empty: none).
  std::string metrics;
  uint32_t mac_aging_s = 300;
  uint32_t burst = 32;
  uint32_t fdb_buckets = 1u << 16;
  /// Direct links (docs/direct-link.md): {A, B}: the front-end of port B serves port A's
  /// rings. TOML: [[link]] tables with keys a and b; command line: --link A:B.
  std::vector<std::pair<std::string, std::string>> links;
  uint32_t mac_limit = dp::Fdb::kDefaultMaxPerPort;  ///< MAC table entries one port may hold
  /// --vlans / TOML vlans: 802.1Q on from the start, so that ports added at run time may
  /// have VLAN settings (without it VLANs are on when some start-up port has vlan or
  /// trunks; else every frame skips the VLAN steps).
  bool vlans = false;
  // Switch-wide defaults for every port that does not set its own (port/vhost_port.h).
  std::optional<uint32_t> socket_mode;
  std::optional<std::string> socket_owner;
  std::optional<std::string> socket_group;
  std::optional<uint64_t> max_guest_memory;  ///< bytes
  std::optional<uint32_t> tx_retry_us;       ///< µs (port::PortConfig::tx_retry_us)
  std::optional<uint32_t> completion_coalesce_us;  ///< µs (PortConfig::completion_coalesce_us)
  /// Guest memory mapped over every port and connection together (bytes; a SET_MEM_TABLE
  /// that does not fit is refused: vhost/memory_budget.h). TOML max_total_guest_memory_gib,
  /// --max-total-guest-memory GIB.
  uint64_t max_total_guest_memory = kDefaultMaxTotalGuestMemory;
  /// 64 TiB: half of the 128 TiB a 4-level-paging x86-64 process can address, so that
  /// front-ends together never take the other half, which the switch's own heap, stacks
  /// and libraries need; and above the memory of any host today (a few TiB to 24 TiB), so
  /// real guests never meet it. A host with less may lower it to its RAM.
  static constexpr uint64_t kDefaultMaxTotalGuestMemory = uint64_t{64} << 40;
};

/// Fills in each port's socket_mode/owner/group and max_guest_memory from the switch-wide
/// settings, where the port's own table did not set them.
void apply_port_defaults(SwitchConfig* cfg);

/// Parses a socket mode "0660" / "660" (octal digits only, at most 0777).
std::optional<uint32_t> parse_socket_mode(const std::string& s);

/// Parses "NAME=vhost-user:PATH" or "NAME=vhost-user-client:PATH".
std::optional<port::PortConfig> parse_port_spec(const std::string& spec, std::string* err);
/// Sets one of a port's settings from text, as `--port-set NAME:KEY=VALUE`, `ctl add-port`
/// and `ctl set-port` give it: `vlan` (1..4094, or 0 for none), `trunks` (a VLAN list
/// "10,20-30", or "" for none), `native_vlan` (1..4094, or 0), and the [[port]] keys of the
/// same names (kPortSettingKeys: mtu in bytes, 0 for the default; offloads and mrg_rxbuf
/// on|off; µs for the *_us keys; socket_mode octal). False with `*err` for an unknown key
/// or a bad value. `port_security`: the source MACs the port may send from
/// (parse_port_security; "" for any).
extern const char* const kPortSettingKeys;
bool set_port_setting(port::PortConfig* c, const std::string& key, const std::string& value,
                      std::string* err);
/// Parses a VLAN list "10,20-30" (each 1..4094, ranges ascending) into `out`, sorted,
/// without duplicates.
bool parse_vlan_list(const std::string& s, std::vector<uint16_t>* out, std::string* err);
/// Parses port security's MAC list "02:00:00:00:00:01,02:00:00:00:00:02" (each unicast,
/// at most dp::kMaxAllowedMacs, duplicates dropped; "" for none) into `out`
/// (PortConfig::port_security); port_security_text() writes it back.
bool parse_port_security(const std::string& s, std::vector<uint64_t>* out, std::string* err);
std::string port_security_text(const std::vector<uint64_t>& macs);
std::optional<dp::ForwardMode> parse_forward(const std::string& s);
std::optional<dp::PmdMode> parse_pmd_mode(const std::string& s);

/// Reads a TOML file into `cfg` (keys: forward, pmd_cores, pmd_mode, pmd_idle_us, pmd_rxq_assign,
/// pmd_rx_writers, flush, control, control_mode, control_owner, control_group, log_file, mac_aging_s, mac_table_buckets, mac_limit, vlans, burst, socket_mode, socket_owner,
/// socket_group, max_guest_memory_gib, max_total_guest_memory_gib, tx_retry_us, completion_coalesce_us, [[port]] tables with name, type, path,
/// mtu, socket_mode, socket_owner, socket_group, max_guest_memory_gib, mrg_rxbuf, flush,
/// max_queues, offloads, tx_retry_us, completion_coalesce_us, port_security, and [[link]] tables with a, b). Returns false with `*err` on any unknown or
/// invalid key.
bool load_toml(const std::string& file, SwitchConfig* cfg, std::string* err);

/// The most bytes of a port name (shown in every listing; it names the port in the state
/// file).
inline constexpr size_t kMaxPortNameLen = 64;
/// A port name of 1 to kMaxPortNameLen printable ASCII characters without spaces, '=' or
/// ':', not starting with '-' and not "all" (at start-up, in add-port and in reload alike);
/// false with `*err` naming the rule.
bool port_name_ok(const std::string& n, std::string* err);

/// Cross-checks a complete configuration (unique names and paths, port count, an even port
/// count for xconnect, links, PMD cores, flush), and what it names on this host: socket
/// owners and groups that exist, and the directories of the vhost-user server sockets and
/// of an explicit control socket. A switch may start without ports (they come with
/// `ctl add-port`). `at_start` false: the ports of a running switch, where xconnect pairs
/// slots (2k, 2k+1) and a port may wait for its peer.
bool validate(const SwitchConfig& cfg, std::string* err, bool at_start = true);

}  // namespace vl::app
