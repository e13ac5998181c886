// virtlink-cni's pure parts (src/cni/): the runtime's environment, the network
// configuration, versions, names and the pod's paths. The commands themselves, against a
// real switch and host-local, are tests/interop/test_cni.py.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "cni/cni_config.h"
#include "cni/cni_env.h"
#include "cni/cni_files.h"
#include "cni/cni_plugin.h"

namespace vl::cni {
namespace {

bool env_of(std::map<std::string, std::string> vars, Env* env, Error* e) {
  return read_env([&](const char* n) { return vars.count(n) ? vars[n].c_str() : nullptr; }, env, e);
}

std::map<std::string, std::string> add_env() {
  return {{"CNI_COMMAND", "ADD"}, {"CNI_CONTAINERID", "abc"}, {"CNI_NETNS", "/var/run/netns/x"},
          {"CNI_IFNAME", "net1"}, {"CNI_PATH", "/usr/lib/cni::/opt/cni/bin"},
          {"CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0"}};
}

TEST(CniEnv, WhatEachCommandNeedsIsThereAndWellFormed) {
  Env env;
  Error e;
  ASSERT_TRUE(env_of(add_env(), &env, &e)) << e.msg;
  EXPECT_EQ(env.path, (std::vector<std::string>{"/usr/lib/cni", "/opt/cni/bin"}));
  EXPECT_EQ(env.args.at("K8S_POD_NAME"), "web-0");
  auto refused = [](std::map<std::string, std::string> v) {
    Env en;
    Error er;
    return !env_of(v, &en, &er) && er.code == kInvalidEnv;
  };
  for (const char* bad : {"a/b", "", "0123456789abcdef", ".", "..", "a b", "a:b"}) {
    auto v = add_env();
    v["CNI_IFNAME"] = bad;
    EXPECT_TRUE(refused(v)) << "ifname '" << bad << "'";
  }
  for (const char* bad : {"", "-abc", "a/b", "a b", "a;b"}) {
    auto v = add_env();
    v["CNI_CONTAINERID"] = bad;
    EXPECT_TRUE(refused(v)) << "container id '" << bad << "'";
  }
  auto v = add_env();
  v["CNI_COMMAND"] = "FOO";
  EXPECT_TRUE(refused(v));
  v = add_env();
  v.erase("CNI_NETNS");
  EXPECT_TRUE(refused(v));
  v["CNI_COMMAND"] = "DEL";  // DEL may come without a netns
  EXPECT_FALSE(refused(v));
  v = add_env();
  v["CNI_ARGS"] = "K8S_POD_NAME";
  EXPECT_TRUE(refused(v));
  EXPECT_FALSE(refused({{"CNI_COMMAND", "VERSION"}}));
}

TEST(CniConfig, FieldsDefaultsAndRanges) {
  NetConf c;
  Error e;
  ASSERT_TRUE(parse_netconf(R"({"cniVersion":"1.0.0","name":"n","type":"virtlink-cni"})", &c, &e)) << e.msg;
  EXPECT_EQ(c.control, kDefaultControl);
  EXPECT_EQ(c.socket_dir, kDefaultSocketDir);
  EXPECT_TRUE(c.switch_listens);
  EXPECT_TRUE(c.spoof_check);
  EXPECT_TRUE(c.ipam.is_null());
  ASSERT_TRUE(parse_netconf(R"({"cniVersion":"0.3.1","name":"n","mode":"client","vlan":100,"vni":5100,
      "mtu":1450,"offloads":false,"spoofCheck":false,"socketDir":"/x/","runtimeConfig":{"mac":"02:00:00:00:00:01"},
      "ipam":{"type":"host-local"}})", &c, &e)) << e.msg;
  EXPECT_FALSE(c.switch_listens);
  EXPECT_EQ(c.vlan, 100);
  EXPECT_EQ(c.vni, 5100u);
  EXPECT_EQ(c.mtu, 1450u);
  EXPECT_EQ(c.offloads, false);
  EXPECT_FALSE(c.spoof_check);
  EXPECT_EQ(c.socket_dir, "/x");
  EXPECT_EQ(c.runtime_mac, "02:00:00:00:00:01");
  auto code = [](const std::string& text) {
    NetConf n;
    Error er;
    return parse_netconf(text, &n, &er) ? 0 : er.code;
  };
  const std::string v = R"("cniVersion":"1.0.0","name":"n")";
  EXPECT_EQ(code("not json"), kDecodeFailure);
  EXPECT_EQ(code("[1]"), kDecodeFailure);
  EXPECT_EQ(code(R"({"cniVersion":"9.9.9","name":"n"})"), kIncompatibleVersion);
  EXPECT_EQ(code(R"({"cniVersion":"1.0.0"})"), kInvalidConfig);
  for (const char* bad : {R"("vlan":0)", R"("vlan":4095)", R"("vlan":"10")", R"("vni":16777216)",
                          R"("mtu":67)", R"("mode":"bogus")", R"("socketDir":"rel")",
                          R"("control":"/a/../b")", R"("ipam":[])", R"("spoofCheck":1)"})
    EXPECT_EQ(code("{" + v + "," + bad + "}"), kInvalidConfig) << bad;
  // The userspace CNI plugin's config: host.vhost.mode is the switch's side.
  ASSERT_TRUE(parse_netconf("{" + v + R"(,"type":"userspace","host":{"engine":"ovs-dpdk","iftype":"vhostuser",
      "netType":"bridge","vhost":{"mode":"client"}}})", &c, &e)) << e.msg;
  EXPECT_FALSE(c.switch_listens);
  EXPECT_EQ(code("{" + v + R"(,"host":{"iftype":"memif"}})"), kUnsupportedField);
}

TEST(CniConfig, VersionsCompareByNumber) {
  EXPECT_LT(compare_versions("0.4.0", "1.0.0"), 0);
  EXPECT_LT(compare_versions("0.3.1", "0.4.0"), 0);
  EXPECT_EQ(compare_versions("1.1.0", "1.1.0"), 0);
  EXPECT_GT(compare_versions("0.10.0", "0.4.0"), 0);
  EXPECT_LT(compare_versions("bogus", "0.1.0"), 0);
  EXPECT_EQ(supported_versions().back(), "1.1.0");
}

TEST(CniNames, PortNamesAndMacsAreStableDistinctAndValid) {
  EXPECT_EQ(port_name_for("abc", "net1"), port_name_for("abc", "net1"));
  std::set<std::string> names, macs;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = "c" + std::to_string(i);
    names.insert(port_name_for(id, "net1"));
    names.insert(port_name_for(id, "net2"));
    const std::string m = mac_for(id, "net1");
    macs.insert(m);
    ASSERT_EQ(m.size(), 17u);
    EXPECT_EQ(m.substr(0, 3), "02:");  // locally administered unicast
  }
  EXPECT_EQ(names.size(), 2000u);
  EXPECT_EQ(macs.size(), 1000u);
  // "ab"+"c" and "a"+"bc" are different attachments.
  EXPECT_NE(port_name_for("ab", "c"), port_name_for("a", "bc"));
  EXPECT_EQ(port_name_for("abc", "net1").size(), 20u);
}

TEST(CniFiles, PodDirectoryFromKubernetesNamesOrTheContainer) {
  Env env;
  Error e;
  ASSERT_TRUE(env_of(add_env(), &env, &e));
  NetConf c;
  PodFiles f;
  ASSERT_TRUE(pod_files(c, env, &f, &e)) << e.msg;
  EXPECT_EQ(f.dir, "/run/virtlink/pods/default_web-0");
  EXPECT_EQ(f.socket, "/run/virtlink/pods/default_web-0/net1.sock");
  EXPECT_EQ(f.json, "/run/virtlink/pods/default_web-0/net1.json");
  env.args.erase("K8S_POD_NAME");
  ASSERT_TRUE(pod_files(c, env, &f, &e));
  EXPECT_EQ(f.dir, "/run/virtlink/pods/abc");
  env.args["K8S_POD_NAME"] = "../../etc";  // not a Kubernetes name
  EXPECT_FALSE(pod_files(c, env, &f, &e));
  EXPECT_EQ(e.code, kInvalidConfig);
  env.args["K8S_POD_NAME"] = std::string(100, 'a');  // too long for sun_path
  EXPECT_FALSE(pod_files(c, env, &f, &e));
  EXPECT_NE(e.msg.find("Unix socket"), std::string::npos) << e.msg;
}

TEST(CniFiles, GcFindsTheFilesFromTheSocketUnderSocketDirOnly) {
  NetConf c;
  PodFiles f;
  ASSERT_TRUE(pod_files_of_socket(c, "/run/virtlink/pods/default_web-0/net1.sock", &f));
  EXPECT_EQ(f.dir, "/run/virtlink/pods/default_web-0");
  EXPECT_EQ(f.json, "/run/virtlink/pods/default_web-0/net1.json");
  for (const char* bad : {"/run/virtlink/pods/net1.sock", "/etc/x/net1.sock", "/run/virtlink/pods/a/b/net1.sock",
                          "/run/virtlink/pods/../x/net1.sock", "/run/virtlink/pods/a/net1.json",
                          "/run/virtlink/podsx/a/net1.sock", "/run/virtlink/pods/a/.sock"})
    EXPECT_FALSE(pod_files_of_socket(c, bad, &f)) << bad;
}

}  // namespace
}  // namespace vl::cni
