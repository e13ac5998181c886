// app::validate and app::load_toml: cross-checks of a whole switch configuration, from the
// command line's settings or from a TOML file (INTERFACES.md "Command line").
#include "app/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace vl::app {
namespace {

SwitchConfig with_ports(dp::ForwardMode mode, std::initializer_list<const char*> names) {
  SwitchConfig c;
  c.forward = mode;
  for (const char* n : names) {
    port::VhostPortConfig p;
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
  port::VhostPortConfig p;
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
  EXPECT_EQ(port::VhostPortConfig{}.tx_retry_us, port::kDefaultTxRetryUs);
}

}  // namespace
}  // namespace vl::app
