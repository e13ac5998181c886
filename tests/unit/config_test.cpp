// app::validate and app::load_toml: cross-checks of a whole switch configuration, from the
// command line's settings or from a TOML file (INTERFACES.md "Command line").
#include "app/config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace vl::app {
namespace {

SwitchConfig with_ports(dp::ForwardMode mode, std::initializer_list<const char*> names) {
  SwitchConfig c;
  c.forward = mode;
  for (const char* n : names) {
    port::PortConfig p;
    p.name = n;
    p.path = std::string("/tmp/vl-config-test-") + n + ".sock";
    c.ports.push_back(p);
  }
  return c;
}

/// Writes `text` to a new temporary .toml file and returns its path (removed by the caller).
std::string write_toml(const std::string& text) {
  char path[] = "/tmp/vl-config-test-XXXXXX.toml";
  const int fd = mkstemps(path, 5);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  return path;
}

// xconnect pairs ports in the order given (1<->2, 3<->4, ...): a port left without a peer
// would drop everything it receives, so the configuration is refused and the message names
// that port.
TEST(ConfigValidate, XconnectRefusesAPortWithoutPeer) {
  std::string err;
  EXPECT_FALSE(validate(with_ports(dp::ForwardMode::kXconnect, {"a"}), &err));
  EXPECT_NE(err.find("port 'a' has no peer"), std::string::npos) << err;
  err.clear();
  EXPECT_FALSE(validate(with_ports(dp::ForwardMode::kXconnect, {"a", "b", "c"}), &err));
  EXPECT_NE(err.find("port 'c' has no peer"), std::string::npos) << err;
  EXPECT_NE(err.find("xconnect"), std::string::npos) << err;
}

// Port names at start-up follow add-port's rule: a config port named `all` was ambiguous
// with `set-flush all`, one named `-x` could only be deleted after `--`, and one that is
// not UTF-8 ended the switch at the first `ctl ports` (an attack on the control socket).
TEST(ConfigValidate, PortNamesAsAddPortHasThem) {
  std::string err;
  const std::string long65(65, 'n'), long64(64, 'n');
  for (const char* bad : {"all", "-x", long65.c_str(), "sp ace", "a:b", "\xff\xfe", ""}) {
    EXPECT_FALSE(validate(with_ports(dp::ForwardMode::kBridge, {bad}), &err)) << bad;
    EXPECT_NE(err.find("port name '"), std::string::npos) << err;
  }
  EXPECT_TRUE(validate(with_ports(dp::ForwardMode::kBridge, {long64.c_str(), "g0", "vx.1_a"}), &err))
      << err;
}

TEST(ConfigValidate, XconnectEvenAndBridgeAnyCountAccepted) {
  std::string err;
  EXPECT_TRUE(validate(with_ports(dp::ForwardMode::kXconnect, {"a", "b"}), &err)) << err;
  EXPECT_TRUE(validate(with_ports(dp::ForwardMode::kXconnect, {"a", "b", "c", "d"}), &err)) << err;
  EXPECT_TRUE(validate(with_ports(dp::ForwardMode::kBridge, {"a"}), &err)) << err;
  EXPECT_TRUE(validate(with_ports(dp::ForwardMode::kBridge, {"a", "b", "c"}), &err)) << err;
}

// The TOML path ends in the same check (the command line adds its --port entries after the
// file's [[port]] tables, then validates the whole).
TEST(ConfigValidate, XconnectFromTomlRefusesAPortWithoutPeer) {
  const std::string file = write_toml(
      "forward = \"xconnect\"\n"
      "[[port]]\nname = \"vm1\"\ntype = \"vhost-user\"\npath = \"/tmp/vl-config-test-vm1.sock\"\n"
      "[[port]]\nname = \"vm2\"\ntype = \"vhost-user\"\npath = \"/tmp/vl-config-test-vm2.sock\"\n"
      "[[port]]\nname = \"vm3\"\ntype = \"vhost-user\"\npath = \"/tmp/vl-config-test-vm3.sock\"\n");
  SwitchConfig cfg;
  std::string err;
  ASSERT_TRUE(load_toml(file, &cfg, &err)) << err;
  std::remove(file.c_str());
  ASSERT_EQ(cfg.forward, dp::ForwardMode::kXconnect);
  ASSERT_EQ(cfg.ports.size(), 3u);
  EXPECT_FALSE(validate(cfg, &err));
  EXPECT_NE(err.find("port 'vm3' has no peer"), std::string::npos) << err;
  // A fourth port from the command line completes the pair.
  port::PortConfig p;
  p.name = "vm4";
  p.path = "/tmp/vl-config-test-vm4.sock";
  cfg.ports.push_back(p);
  EXPECT_TRUE(validate(cfg, &err)) << err;
}

// tx_retry_us (bounded retry into a full receive queue): the file's global value fills in
// every port that does not set its own; out-of-range values are refused.
TEST(ConfigToml, TxRetryGlobalAndPerPort) {
  const std::string f = write_toml(
      "tx_retry_us = 50\n"
      "[[port]]\nname = \"a\"\npath = \"/tmp/vl-ct-a.sock\"\n"
      "[[port]]\nname = \"b\"\npath = \"/tmp/vl-ct-b.sock\"\ntx_retry_us = 0\n");
  SwitchConfig c;
  std::string err;
  ASSERT_TRUE(load_toml(f, &c, &err)) << err;
  apply_port_defaults(&c);
  ASSERT_EQ(c.ports.size(), 2u);
  EXPECT_EQ(c.ports[0].tx_retry_us, 50u);
  EXPECT_EQ(c.ports[1].tx_retry_us, 0u);
  std::remove(f.c_str());
  const std::string bad = write_toml("tx_retry_us = 20000\n");
  SwitchConfig c2;
  EXPECT_FALSE(load_toml(bad, &c2, &err));
  EXPECT_NE(err.find("tx_retry_us"), std::string::npos) << err;
  std::remove(bad.c_str());
  EXPECT_EQ(port::PortConfig{}.tx_retry_us, port::kDefaultTxRetryUs);
}

// completion_coalesce_us (transmit completion coalescing): global and per port like
// tx_retry_us; 250 us unless set; out-of-range values are refused.
TEST(ConfigToml, CompletionCoalesceGlobalAndPerPort) {
  const std::string f = write_toml(
      "completion_coalesce_us = 1000\n"
      "[[port]]\nname = \"a\"\npath = \"/tmp/vl-ct-a.sock\"\n"
      "[[port]]\nname = \"b\"\npath = \"/tmp/vl-ct-b.sock\"\ncompletion_coalesce_us = 0\n");
  SwitchConfig c;
  std::string err;
  ASSERT_TRUE(load_toml(f, &c, &err)) << err;
  apply_port_defaults(&c);
  ASSERT_EQ(c.ports.size(), 2u);
  EXPECT_EQ(c.ports[0].completion_coalesce_us, 1000u);
  EXPECT_EQ(c.ports[1].completion_coalesce_us, 0u);
  std::remove(f.c_str());
  const std::string bad = write_toml("[[port]]\nname = \"a\"\npath = \"/tmp/vl-ct-a.sock\"\n"
                                     "completion_coalesce_us = 10001\n");
  SwitchConfig c2;
  EXPECT_FALSE(load_toml(bad, &c2, &err));
  EXPECT_NE(err.find("completion_coalesce_us"), std::string::npos) << err;
  std::remove(bad.c_str());
  EXPECT_EQ(port::PortConfig{}.completion_coalesce_us, 250u);
  // An integer key takes an integer: not a bool (toml++ would read true as 1) nor a float.
  for (const char* v : {"true", "2.5"}) {
    const std::string b = write_toml(std::string("completion_coalesce_us = ") + v + "\n");
    SwitchConfig c3;
    EXPECT_FALSE(load_toml(b, &c3, &err)) << v;
    std::remove(b.c_str());
  }
}

// The switch-wide cap on guest memory (vhost/memory_budget.h): 64 TiB unless set, in GiB,
// 1 to 2^17.
TEST(ConfigToml, MaxTotalGuestMemory) {
  SwitchConfig c;
  EXPECT_EQ(c.max_total_guest_memory, uint64_t{64} << 40);
  std::string err;
  const std::string f = write_toml("max_total_guest_memory_gib = 33\n");
  ASSERT_TRUE(load_toml(f, &c, &err)) << err;
  EXPECT_EQ(c.max_total_guest_memory, uint64_t{33} << 30);
  std::remove(f.c_str());
  for (const char* bad : {"max_total_guest_memory_gib = 0\n", "max_total_guest_memory_gib = 131073\n",
                          "max_total_guest_memory_gib = \"1\"\n"}) {
    const std::string b = write_toml(bad);
    SwitchConfig c2;
    EXPECT_FALSE(load_toml(b, &c2, &err)) << bad;
    EXPECT_NE(err.find("max_total_guest_memory_gib"), std::string::npos) << err;
    EXPECT_EQ(c2.max_total_guest_memory, uint64_t{64} << 40);
    std::remove(b.c_str());
  }
}

// Every top-level key of the TOML file lands in its setting (config.h load_toml lists them).
TEST(ConfigToml, EveryTopLevelKey) {
  const std::string f = write_toml(
      "forward = \"xconnect\"\npmd_cores = \"0\"\npmd_mode = \"adaptive\"\n"
      "pmd_rxq_assign = \"cycles\"\npmd_rx_writers = \"follow\"\npmd_idle_us = 77\n"
      "flush = \"budget=40\"\ncontrol = \"/tmp/vl-ct.ctl\"\nmac_aging_s = 12\n"
      "mac_table_buckets = 1024\nmac_limit = 99\nsocket_mode = 0o640\n"
      "socket_owner = \"nobody\"\nsocket_group = \"nogroup\"\nmax_guest_memory_gib = 3\n"
      "tx_retry_us = 7\ncompletion_coalesce_us = 300\nburst = 16\n"
      "control_mode = 0o660\ncontrol_owner = \"nobody\"\ncontrol_group = \"nogroup\"\nvlans = true\n"
      "[[port]]\nname = \"a\"\npath = \"/tmp/vl-ct-a.sock\"\nflush = \"immediate\"\n"
      "[[port]]\nname = \"b\"\ntype = \"vhost-user-client\"\npath = \"/tmp/vl-ct-b.sock\"\n"
      "[[link]]\na = \"a\"\nb = \"b\"\n");
  SwitchConfig c;
  std::string err;
  ASSERT_TRUE(load_toml(f, &c, &err)) << err;
  std::remove(f.c_str());
  EXPECT_EQ(c.forward, dp::ForwardMode::kXconnect);
  EXPECT_EQ(c.pmd_cores, std::vector<int>{0});
  EXPECT_EQ(c.pmd.mode, dp::PmdMode::kAdaptive);
  EXPECT_EQ(c.pmd.rxq_assign, dp::RxqAssign::kCycles);
  EXPECT_TRUE(c.pmd.follow_writers);
  EXPECT_EQ(c.pmd.idle_us, 77u);
  EXPECT_EQ(c.flush, "budget=40");
  EXPECT_EQ(c.control_path, "/tmp/vl-ct.ctl");
  EXPECT_EQ(c.mac_aging_s, 12u);
  EXPECT_EQ(c.fdb_buckets, 1024u);
  EXPECT_EQ(c.mac_limit, 99u);
  EXPECT_EQ(c.socket_mode, 0640u);
  EXPECT_EQ(c.socket_owner, "nobody");
  EXPECT_EQ(c.socket_group, "nogroup");
  EXPECT_EQ(c.max_guest_memory, uint64_t{3} << 30);
  EXPECT_EQ(c.tx_retry_us, 7u);
  EXPECT_EQ(c.completion_coalesce_us, 300u);
  EXPECT_EQ(c.burst, 16u);
  EXPECT_EQ(c.control_mode, 0660u);
  EXPECT_EQ(c.control_owner, "nobody");
  EXPECT_EQ(c.control_group, "nogroup");
  EXPECT_TRUE(c.vlans);
  ASSERT_EQ(c.ports.size(), 2u);
  EXPECT_EQ(c.ports[0].mode, port::SocketMode::kServer);
  EXPECT_EQ(c.ports[1].mode, port::SocketMode::kClient);
  EXPECT_EQ(c.port_flush, (std::map<std::string, std::string>{{"a", "immediate"}}));
  ASSERT_EQ(c.links.size(), 1u);
  EXPECT_EQ(c.links[0], std::make_pair(std::string("a"), std::string("b")));
}

// A file with an error leaves the configuration as it was, and the message names the key.
TEST(ConfigToml, ErrorsNameTheKeyAndChangeNothing) {
  const std::pair<const char*, const char*> cases[] = {
      {"nope = 1\n", ": unknown key 'nope'"},
      {"forward = \"hub\"\n", "forward 'hub' (bridge or xconnect)"},
      {"forward = 1\n", "'forward' must be a string"},
      {"pmd_cores = \"x\"\n", "pmd_cores 'x' is not a CPU list"},
      {"pmd_mode = \"spin\"\n", "pmd_mode 'spin' (poll, interrupt or adaptive)"},
      {"pmd_rxq_assign = \"x\"\n", "pmd_rxq_assign 'x' (roundrobin or cycles)"},
      {"pmd_rx_writers = \"x\"\n", "pmd_rx_writers 'x' (follow or fixed)"},
      {"burst = 65\n", "'burst' must be an integer in 1..64"},
      {"mac_aging_s = 0\n", "'mac_aging_s' must be an integer in 1..1000000"},
      {"port = 1\n", "'port' must be an array of tables ([[port]])"},
      {"port = [1]\n", "'port' entries must be tables"},
      {"[[port]]\nname = \"a\"\n", "every [[port]] needs a name and a path"},
      {"[[port]]\nname = \"a\"\npath = \"p\"\ncolour = 1\n", "unknown port key 'colour'"},
      {"link = 1\n", "'link' must be an array of tables ([[link]])"},
      {"[[link]]\na = \"x\"\nc = \"y\"\n", "unknown link key 'c' (a, b)"},
      {"[[link]]\na = \"x\"\n", "every [[link]] needs a and b (port names)"},
  };
  for (const auto& [text, msg] : cases) {
    const std::string f = write_toml(std::string("flush = \"immediate\"\n") + text);
    SwitchConfig c;
    std::string err;
    EXPECT_FALSE(load_toml(f, &c, &err)) << text;
    EXPECT_NE(err.find(msg), std::string::npos) << text << ": " << err;
    EXPECT_EQ(c.flush, "rx-batch") << text;  // untouched
    std::remove(f.c_str());
  }
}

// An error says FILE:LINE: (the key's line), and in a [[port]] table FILE:LINE: port NAME:
// with the line of the key at fault, or of the table for what it lacks; a table without a
// (string) name is "#N", its place among the [[port]] tables.
TEST(ConfigToml, ErrorsGiveFileLineAndPort) {
  const std::pair<const char*, const char*> cases[] = {
      {"flush = \"immediate\"\nburst = 65\n", ":2: 'burst' must be an integer in 1..64"},
      {"nope = 1\n", ":1: unknown key 'nope'"},
      {"[[port]]\nname = \"a\"\npath = \"p\"\n\n[[port]]\nname = \"vm2\"\npath = \"q\"\nmtu = 1\n",
       ":8: port vm2: 'mtu' must be an integer in 68..65535"},
      {"[[port]]\nmtu = 9000\ncolour = 1\nname = \"vm1\"\n", ":3: port vm1: unknown port key 'colour'"},
      {"[[port]]\npath = \"p\"\nmtu = \"big\"\n", ":3: port #1: 'mtu' must be an integer"},
      {"\n[[port]]\nname = \"vm1\"\n", ":2: port vm1: every [[port]] needs a name and a path"},
      {"[[port]]\nname = \"t\"\ntype = \"vxlan\"\npath = \"vni=1\"\n", ":1: port t: "},
      {"[[link]]\na = \"x\"\nc = \"y\"\n", ":3: link: unknown link key 'c' (a, b)"},
      {"forward = \"bridge\"\nmtu = \n", ":2:"},  // a syntax error: toml++'s position
  };
  for (const auto& [text, msg] : cases) {
    const std::string f = write_toml(text);
    SwitchConfig c;
    std::string err;
    EXPECT_FALSE(load_toml(f, &c, &err)) << text;
    EXPECT_EQ(err.rfind(f + msg, 0), 0u) << text << ": " << err;
    std::remove(f.c_str());
  }
  // The port's own message names it once.
  const std::string f = write_toml("[[port]]\nname = \"t\"\ntype = \"vxlan\"\npath = \"vni=1\"\n");
  SwitchConfig c;
  std::string err;
  EXPECT_FALSE(load_toml(f, &c, &err));
  EXPECT_EQ(err.find("port t: port t"), std::string::npos) << err;
  std::remove(f.c_str());
}

// What a configuration names on this host: owners and groups that exist, and existing
// directories for the sockets the switch creates (a usage error, exit 2, before anything
// starts; the default control socket's directory is made, so only a given one is checked).
TEST(ConfigValidate, SocketOwnersGroupsAndDirectories) {
  std::string err;
  SwitchConfig c = with_ports(dp::ForwardMode::kBridge, {"a"});
  EXPECT_TRUE(validate(c, &err)) << err;
  c.ports[0].socket_owner = "no-such-user-vl";
  EXPECT_FALSE(validate(c, &err));
  EXPECT_EQ(err, "port a: unknown socket owner 'no-such-user-vl'");
  c.ports[0].socket_owner = "0";
  c.ports[0].socket_group = "no-such-group-vl";
  EXPECT_FALSE(validate(c, &err));
  EXPECT_EQ(err, "port a: unknown socket group 'no-such-group-vl'");
  c.ports[0].socket_group = "";
  c.control_group = "no-such-group-vl";
  EXPECT_FALSE(validate(c, &err));
  EXPECT_EQ(err, "control socket: unknown socket group 'no-such-group-vl'");
  c.control_group = std::to_string(getegid());
  c.control_owner = "no-such-user-vl";
  EXPECT_FALSE(validate(c, &err));
  EXPECT_EQ(err, "control socket: unknown socket owner 'no-such-user-vl'");
  c.control_owner = "";
  EXPECT_TRUE(validate(c, &err)) << err;
  c.control_path = "/nonexistent-vl-dir/ctl";
  EXPECT_FALSE(validate(c, &err));
  EXPECT_EQ(err, "control socket /nonexistent-vl-dir/ctl: directory /nonexistent-vl-dir does "
                 "not exist (create it first)");
  c.control_path = "/etc/passwd/ctl";
  EXPECT_FALSE(validate(c, &err));
  EXPECT_EQ(err, "control socket /etc/passwd/ctl: directory /etc/passwd is not a directory");
  c.control_path = "ctl";  // the working directory
  EXPECT_TRUE(validate(c, &err)) << err;
  c.ports[0].path = "/nonexistent-vl-dir/a.sock";
  EXPECT_FALSE(validate(c, &err));
  EXPECT_EQ(err, "port a: vhost-user socket /nonexistent-vl-dir/a.sock: directory "
                 "/nonexistent-vl-dir does not exist (create it first)");
  c.ports[0].mode = port::SocketMode::kClient;  // connects there, retrying: no file made
  EXPECT_TRUE(validate(c, &err)) << err;
}

}  // namespace
}  // namespace vl::app

namespace vl::app {
namespace {

// VLAN numbers are 1..4 digits: sscanf's %u wrapped "4294967306" to 10, accepted as VLAN 10
// (--port-set u:vlan=4294967306, trunks=4294967306, TOML trunks = [4294967306]).
TEST(ConfigVlan, NumbersThatWrapAreRefused) {
  std::vector<uint16_t> v;
  std::string err;
  EXPECT_FALSE(parse_vlan_list("4294967306", &v, &err));
  EXPECT_FALSE(parse_vlan_list("1-4294967306", &v, &err));
  EXPECT_FALSE(parse_vlan_list("00010", &v, &err));
  EXPECT_FALSE(parse_vlan_list("+10", &v, &err));
  EXPECT_FALSE(parse_vlan_list(" 10", &v, &err));
  EXPECT_FALSE(parse_vlan_list("10-", &v, &err));
  EXPECT_FALSE(parse_vlan_list("-10", &v, &err));
  EXPECT_FALSE(parse_vlan_list("10-20-30", &v, &err));
  EXPECT_FALSE(parse_vlan_list("4095", &v, &err));
  ASSERT_TRUE(parse_vlan_list("10,20-22,4094", &v, &err)) << err;
  EXPECT_EQ(v, (std::vector<uint16_t>{10, 20, 21, 22, 4094}));
  port::PortConfig c;
  c.name = "u";
  EXPECT_FALSE(set_port_setting(&c, "vlan", "4294967306", &err));
  EXPECT_FALSE(set_port_setting(&c, "native_vlan", "65546", &err));
  EXPECT_EQ(c.vlan, 0);
  ASSERT_TRUE(set_port_setting(&c, "vlan", "10", &err)) << err;
  EXPECT_EQ(c.vlan, 10);
  EXPECT_TRUE(set_port_setting(&c, "vlan", "0", &err));  // 0: none
}

TEST(ConfigPortSecurity, MacListsAsAddPortAndTomlGiveThem) {
  std::vector<uint64_t> v;
  std::string err;
  ASSERT_TRUE(parse_port_security("02:00:00:00:00:0a,52:54:00:AB:cd:01,02:00:00:00:00:0a", &v, &err)) << err;
  EXPECT_EQ(v, (std::vector<uint64_t>{0x02000000000aull, 0x525400abcd01ull}));  // duplicate dropped
  EXPECT_EQ(port_security_text(v), "02:00:00:00:00:0a,52:54:00:ab:cd:01");
  ASSERT_TRUE(parse_port_security("", &v, &err));
  EXPECT_TRUE(v.empty());
  for (const char* bad : {"01:00:5e:00:00:01", "00:00:00:00:00:00", "02:00:00:00:00", "02:00:00:00:00:0a:",
                          "02:00:00:00:00:0ax", "02:00:00:00:00:0a,", "zz:00:00:00:00:01", " 02:00:00:00:00:0a"})
    EXPECT_FALSE(parse_port_security(bad, &v, &err)) << bad;
  std::string nine;
  for (int i = 1; i <= 9; ++i) nine += fmt::format("{}02:00:00:00:00:{:02x}", i > 1 ? "," : "", i);
  EXPECT_FALSE(parse_port_security(nine, &v, &err));
  EXPECT_NE(err.find("at most 8"), std::string::npos) << err;
  port::PortConfig c;
  c.name = "p";
  ASSERT_TRUE(set_port_setting(&c, "port_security", "02:00:00:00:00:01", &err)) << err;
  EXPECT_EQ(c.port_security, std::vector<uint64_t>{0x020000000001ull});
  EXPECT_FALSE(set_port_setting(&c, "port_security", "ff:ff:ff:ff:ff:ff", &err));
  const std::string f = write_toml(
      "[[port]]\nname = \"a\"\npath = \"/tmp/vl-ps-a.sock\"\nport_security = \"02:00:00:00:00:01\"\n"
      "[[port]]\nname = \"b\"\npath = \"/tmp/vl-ps-b.sock\"\n"
      "port_security = [\"02:00:00:00:00:02\", \"02:00:00:00:00:03\"]\n");
  SwitchConfig sc;
  ASSERT_TRUE(load_toml(f, &sc, &err)) << err;
  std::remove(f.c_str());
  ASSERT_EQ(sc.ports.size(), 2u);
  EXPECT_EQ(sc.ports[0].port_security, std::vector<uint64_t>{0x020000000001ull});
  EXPECT_EQ(sc.ports[1].port_security, (std::vector<uint64_t>{0x020000000002ull, 0x020000000003ull}));
  const std::string g = write_toml("[[port]]\nname = \"a\"\npath = \"/tmp/vl-ps-a.sock\"\nport_security = [1]\n");
  SwitchConfig sg;
  EXPECT_FALSE(load_toml(g, &sg, &err));
  EXPECT_NE(err.find("port_security"), std::string::npos) << err;
  std::remove(g.c_str());
}

}  // namespace
}  // namespace vl::app
