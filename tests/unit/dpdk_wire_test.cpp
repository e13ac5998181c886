// DpdkWire on DPDK virtual devices (no hugepages, no NIC): net_null for the API, and
// net_af_packet on a veth pair in a private network namespace for frames both ways. EAL is
// initialised once per process: every test works whether it is the first DPDK user of the
// process or not (ctest runs each test alone, a plain run runs them all in one process); the
// failure test runs in a re-executed child (death test, threadsafe style).
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "util/fd.h"
#include "wire/dpdk.h"
#include "wire/dpdk_eal.h"
#include "wire/netdev.h"

// LeakSanitizer (sanitizer builds): DPDK 22.11's af_xdp driver (Debian 22.11.11) does not
// delete its libxdp umem when the port closes (xsk_umem__delete is never reached: the
// umem's reference count does not reach the value its close path tests): per closed port 80
// bytes, the umem's AF_XDP socket and a BPF map and program fd stay. Not ours to free.
extern "C" const char* __lsan_default_suppressions() { return "leak:xsk_umem__create\n"; }

namespace vl::wire {
namespace {

uint64_t counter(const Wire& w, const std::string& name) {
  DeviceCounters c;
  w.counters(&c);
  for (const auto& [k, v] : c) {
    if (k == name) return v;
  }
  ADD_FAILURE() << "no counter " << name;
  return 0;
}

bool has_arg(const std::string& a) {
  for (const auto& s : eal_args()) {
    if (s == a) return true;
  }
  return false;
}

cpu_set_t affinity() {
  cpu_set_t s;
  CPU_ZERO(&s);
  pthread_getaffinity_np(pthread_self(), sizeof s, &s);
  return s;
}

/// Cpus_allowed_list of every thread of the process (EAL's own threads among them).
std::vector<std::string> thread_cpus() {
  std::vector<std::string> out;
  for (const auto& t : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream f(t.path() / "status");
    for (std::string line; std::getline(f, line);) {
      if (line.rfind("Cpus_allowed_list:", 0) == 0) out.push_back(line);
    }
  }
  return out;
}

constexpr uint16_t kEtherType = 0x88b5;  // IEEE local experimental: nothing else sends it

/// A test frame: broadcast destination, our EtherType, then `tag` and a pattern.
std::vector<uint8_t> frame(uint32_t len, uint8_t tag) {
  std::vector<uint8_t> f(len);
  std::memset(f.data(), 0xff, 6);
  const uint8_t src[6] = {0x02, 0, 0, 0, 0, tag};
  std::memcpy(f.data() + 6, src, 6);
  f[12] = kEtherType >> 8;
  f[13] = kEtherType & 0xff;
  for (uint32_t i = 14; i < len; ++i) f[i] = static_cast<uint8_t>(tag * 31 + i);
  return f;
}

/// A send buffer for frame `f`: the virtio-net header (zeros), then the frame (wire.h).
Buf as_buf(const std::vector<uint8_t>& f) {
  static std::deque<std::vector<uint8_t>> store;  // stable addresses for the test's life
  store.emplace_back(kHdrLen, 0);
  store.back().insert(store.back().end(), f.begin(), f.end());
  const auto n = static_cast<uint32_t>(store.back().size());
  return {store.back().data(), n, n};
}

bool ours(const uint8_t* p, size_t len) {
  return len >= 14 && p[12] == (kEtherType >> 8) && p[13] == (kEtherType & 0xff);
}

TEST(DpdkWire, NullDeviceOpensSendsReceivesAndCounts) {
  const cpu_set_t before = affinity();
  DpdkWire w("net_null0");
  std::string err;
  ASSERT_TRUE(w.open(&err)) << err;
  EXPECT_TRUE(eal_initialised());
  // rte_eal_init pins its caller to lcore 0: the caller's affinity must be back.
  const cpu_set_t after = affinity();
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
  // Nor is any of EAL's threads (interrupts, control) confined to fewer CPUs than we had.
  const std::vector<std::string> cpus = thread_cpus();
  EXPECT_GT(cpus.size(), 1u);
  for (const auto& c : cpus) EXPECT_EQ(c, cpus.front());
  EXPECT_TRUE(has_arg("--no-pci"));
  EXPECT_TRUE(has_arg("--lcores"));
  EXPECT_TRUE(has_arg("--no-huge") || has_arg("--in-memory"));
  EXPECT_FALSE(set_eal_extra_args({"-v"}));  // too late once EAL is up

  EXPECT_STREQ(w.type(), "dpdk");
  EXPECT_EQ(w.target(), "net_null0");
  EXPECT_EQ(w.info().queues, 1u);
  EXPECT_FALSE(w.info().vnet_hdr);
  EXPECT_FALSE(w.info().offloads);
  EXPECT_FALSE(w.info().rx_interrupts);
  EXPECT_EQ(w.rx_fd(0), -1);
  EXPECT_GE(w.info().mtu, 1500u);
  EXPECT_TRUE(w.link_up());
  EXPECT_GE(w.port_id(), 0);

  // 40 frames: more than one burst of DpdkWire::kBurst.
  std::vector<std::vector<uint8_t>> frames;
  std::vector<Buf> out;
  for (uint8_t i = 0; i < 40; ++i) frames.push_back(frame(60 + i, i));
  for (auto& f : frames) out.push_back(as_buf(f));
  EXPECT_EQ(w.send(0, out.data(), 40), 40u);
  EXPECT_EQ(counter(w, "eth_tx_packets"), 40u);

  // net_null makes up 64-byte frames on every receive call.
  std::vector<std::vector<uint8_t>> store(16, std::vector<uint8_t>(2048));
  std::vector<Buf> in;
  for (auto& s : store) in.push_back({s.data(), 2048, 0});
  EXPECT_EQ(w.recv(0, in.data(), 16), 16u);
  for (const Buf& b : in) EXPECT_EQ(b.len, kHdrLen + 64u);
  EXPECT_GE(counter(w, "eth_rx_packets"), 16u);

  // A buffer too small: the frame is counted, not returned.
  in[0].cap = 32;
  EXPECT_EQ(w.recv(0, in.data(), 1), 0u);
  EXPECT_EQ(counter(w, "rx_truncated"), 1u);
  // A frame larger than an mbuf's room is dropped and counted.
  std::vector<uint8_t> big(70000);
  Buf huge = as_buf(big);
  EXPECT_EQ(w.send(0, &huge, 1), 0u);
  EXPECT_EQ(counter(w, "tx_oversize"), 1u);
  EXPECT_EQ(counter(w, "tx_no_mbuf"), 0u);
  EXPECT_EQ(counter(w, "tx_full"), 0u);
  w.close();
  EXPECT_FALSE(w.link_up());
}

TEST(DpdkWire, QueuesReopenAndOneOwnerPerDevice) {
  DpdkWire::Options opt;
  opt.queues = 2;
  opt.rx_desc = 256;
  opt.tx_desc = 512;
  DpdkWire w("net_null1", opt);
  std::string err;
  ASSERT_TRUE(w.open(&err)) << err;
  EXPECT_EQ(w.info().queues, 2u);
  std::vector<uint8_t> f = frame(100, 1);
  Buf b = as_buf(f);
  EXPECT_EQ(w.send(1, &b, 1), 1u);
  EXPECT_EQ(counter(w, "eth_tx_packets"), 1u);

  // A second port on the same device is refused; the first keeps working.
  DpdkWire twin("net_null1");
  EXPECT_FALSE(twin.open(&err));
  EXPECT_NE(err.find("net_null1"), std::string::npos) << err;
  EXPECT_EQ(w.send(0, &b, 1), 1u);

  // close() detaches the device: it can be probed again (with other arguments, too).
  w.close();
  DpdkWire again("net_null1,size=128");
  ASSERT_TRUE(again.open(&err)) << err;
  std::vector<uint8_t> s(2048);
  Buf in{s.data(), 2048, 0};
  EXPECT_EQ(again.recv(0, &in, 1), 1u);
  EXPECT_EQ(in.len, kHdrLen + 128u);
  EXPECT_EQ(counter(again, "eth_tx_packets"), 0u);  // a new device, new statistics
}

TEST(DpdkWire, BadDevargsFailOpenWithAMessage) {
  std::string err;
  DpdkWire nodriver("net_nosuchdriver0");
  EXPECT_FALSE(nodriver.open(&err));
  EXPECT_NE(err.find("dpdk net_nosuchdriver0:"), std::string::npos) << err;
  EXPECT_EQ(nodriver.port_id(), -1);
  err.clear();
  DpdkWire noiface("net_af_packet9,iface=vl-no-such0");
  EXPECT_FALSE(noiface.open(&err));
  EXPECT_NE(err.find("net_af_packet9"), std::string::npos) << err;
  // EAL runs with --no-pci here (its first port was a vdev): a PCI device is refused, clearly.
  DpdkWire pci("0000:00:1f.6");
  err.clear();
  EXPECT_FALSE(pci.open(&err));
  EXPECT_NE(err.find("--no-pci"), std::string::npos) << err;
  DpdkWire::Options opt;
  opt.queues = 4096;  // more than net_null has
  DpdkWire many("net_null2", opt);
  err.clear();
  EXPECT_FALSE(many.open(&err));
  EXPECT_NE(err.find("queue pairs"), std::string::npos) << err;
  // What failed was undone: the same device opens now.
  DpdkWire ok("net_null2");
  EXPECT_TRUE(ok.open(&err)) << err;
}

TEST(DpdkWire, PmdThreadGetsAnLcore) {
  DpdkWire w("net_null3");
  std::string err;
  ASSERT_TRUE(w.open(&err)) << err;
  int id = -2, again = -2;
  uint32_t sent = 0;
  std::thread t([&] {
    id = register_pmd_thread();
    again = register_pmd_thread();
    std::vector<uint8_t> f = frame(64, 3);
    std::vector<Buf> b(64, as_buf(f));
    sent = w.send(0, b.data(), 64);  // mbufs through this thread's mempool cache
    unregister_pmd_thread();
  });
  t.join();
  EXPECT_GT(id, 0);  // lcore 0 is the main lcore
  EXPECT_EQ(again, id);
  EXPECT_EQ(sent, 64u);
}

/// The calling thread in a new network namespace with a veth pair vl-dpA / vl-dpB, both up;
/// back to the original namespace (the pair deleted) on destruction.
class VethNetns {
 public:
  VethNetns() {
    saved_ = UniqueFd(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!saved_.valid() || unshare(CLONE_NEWNET) != 0) {
      why_ = std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
      return;
    }
    inside_ = true;
    // No IPv6 chatter (router solicitations) on the pair; the test filters on EtherType too.
    const int r = std::system(
        "echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6 2>/dev/null;"
        "ip link add vl-dpA type veth peer name vl-dpB && ip link set vl-dpA up && "
        "ip link set vl-dpB up");
    if (r != 0) why_ = "ip link add veth failed";
  }
  ~VethNetns() {
    if (!inside_) return;
    (void)std::system("ip link del vl-dpA 2>/dev/null");
    setns(saved_.get(), CLONE_NEWNET);
  }
  const std::string& why() const { return why_; }  // empty: ready

 private:
  UniqueFd saved_;
  bool inside_ = false;
  std::string why_;
};

/// A raw packet socket on `ifname` (the veth peer the test talks through).
UniqueFd raw_socket(const char* ifname) {
  UniqueFd fd(socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL)));
  sockaddr_ll a{};
  a.sll_family = AF_PACKET;
  a.sll_protocol = htons(ETH_P_ALL);
  a.sll_ifindex = static_cast<int>(if_nametoindex(ifname));
  if (!fd.valid() || !a.sll_ifindex || bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a)) {
    return UniqueFd();
  }
  return fd;
}

/// Our frames arriving at `fd` (not its own outgoing ones), until `want` or 3 s.
std::vector<std::vector<uint8_t>> read_raw(int fd, size_t want) {
  std::vector<std::vector<uint8_t>> got;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (got.size() < want && std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    uint8_t buf[4096];
    sockaddr_ll from{};
    socklen_t fl = sizeof from;
    const ssize_t r = recvfrom(fd, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &fl);
    if (r > 0 && from.sll_pkttype != PACKET_OUTGOING && ours(buf, static_cast<size_t>(r))) {
      got.emplace_back(buf, buf + r);
    }
  }
  return got;
}

/// Our frames from the wire's queue 0, until `want` or 3 s.
std::vector<std::vector<uint8_t>> read_wire(Wire& w, size_t want) {
  std::vector<std::vector<uint8_t>> got;
  std::vector<std::vector<uint8_t>> store(32, std::vector<uint8_t>(2048));
  std::vector<Buf> in;
  for (auto& s : store) in.push_back({s.data(), 2048, 0});
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (got.size() < want && std::chrono::steady_clock::now() < end) {
    const uint32_t n = w.recv(0, in.data(), 32);
    for (uint32_t i = 0; i < n; ++i) {
      if (ours(in[i].p + kHdrLen, in[i].len - kHdrLen)) got.emplace_back(in[i].p + kHdrLen, in[i].p + in[i].len);
    }
    if (!n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return got;
}

/// Frames both ways between a DpdkWire on DEVARGS (a vdev on vl-dpA) and a packet socket on
/// vl-dpB: in order, byte for byte, counted by the ethdev.
void both_ways(const std::string& devargs) {
  std::string err;
  // EAL first, outside the namespace: its threads must not keep the namespace alive.
  ASSERT_TRUE(eal_init({}, &err)) << err;
  VethNetns ns;
  if (!ns.why().empty()) GTEST_SKIP() << ns.why();
  DpdkWire w(devargs);
  ASSERT_TRUE(w.open(&err)) << err;
  EXPECT_TRUE(w.link_up());
  UniqueFd peer = raw_socket("vl-dpB");
  ASSERT_TRUE(peer.valid()) << std::strerror(errno);

  const uint32_t sizes[] = {60, 61, 64, 128, 511, 1000, 1513, 1514};
  std::vector<std::vector<uint8_t>> frames;
  for (uint8_t i = 0; i < 8; ++i) frames.push_back(frame(sizes[i], i));
  std::vector<Buf> out;
  for (auto& f : frames) out.push_back(as_buf(f));
  EXPECT_EQ(w.send(0, out.data(), 8), 8u);
  const auto at_peer = read_raw(peer.get(), 8);
  EXPECT_EQ(at_peer, frames);

  for (auto& f : frames) f[6 + 5] ^= 0x80;  // other sources, the same sizes
  for (const auto& f : frames) {
    EXPECT_EQ(::send(peer.get(), f.data(), f.size(), 0), static_cast<ssize_t>(f.size()));
  }
  const auto at_wire = read_wire(w, 8);
  EXPECT_EQ(at_wire, frames);
  EXPECT_GE(counter(w, "eth_tx_packets"), 8u);
  EXPECT_GE(counter(w, "eth_rx_packets"), 8u);
  EXPECT_GE(counter(w, "eth_rx_bytes"), 4851u);  // the sizes' sum
  w.close();
}

TEST(DpdkWire, AfPacketVdevOnAVethPairBothWays) { both_ways("net_af_packet0,iface=vl-dpA"); }

TEST(DpdkWire, AfXdpVdevOnAVethPairBothWays) { both_ways("net_af_xdp0,iface=vl-dpA"); }

/// What an uplink's dpdk port asks for (port/uplink_port.cpp: max(queue_size, 512)
/// descriptors; queue_size is 256 by default): net_af_xdp fills 2048 receive buffers from the
/// pool at queue setup, however few descriptors it is given.
TEST(DpdkWire, AfXdpVdevOpensWithFewDescriptors) {
  std::string err;
  ASSERT_TRUE(eal_init({}, &err)) << err;
  for (const uint32_t desc : {64u, 512u}) {
    // A veth pair each: DPDK 22.11's af_xdp leaves its socket bound when the port closes.
    VethNetns ns;
    if (!ns.why().empty()) GTEST_SKIP() << ns.why();
    DpdkWire::Options opt;
    opt.rx_desc = opt.tx_desc = desc;
    DpdkWire w("net_af_xdp0,iface=vl-dpA", opt);
    ASSERT_TRUE(w.open(&err)) << desc << " descriptors: " << err;
    w.close();
  }
}

TEST(DpdkWire, KernelVdevTakesTheInterfaceMtuOrSetsIt) {
  std::string err;
  ASSERT_TRUE(eal_init({}, &err)) << err;
  VethNetns ns;
  if (!ns.why().empty()) GTEST_SKIP() << ns.why();
  ASSERT_EQ(std::system("ip link set vl-dpA mtu 1400"), 0);
  {
    DpdkWire w("net_af_packet0,iface=vl-dpA");
    ASSERT_TRUE(w.open(&err)) << err;
    EXPECT_EQ(w.info().mtu, 1400u);  // the kernel's, not ethdev's default 1500
  }
  {
    DpdkWire::Options opt;
    opt.mtu = 1280;
    DpdkWire w("net_af_packet0,iface=vl-dpA", opt);
    ASSERT_TRUE(w.open(&err)) << err;
    EXPECT_EQ(w.info().mtu, 1280u);
    EXPECT_EQ(if_mtu("vl-dpA"), 1280u);  // the driver set the interface's
  }
  ASSERT_EQ(std::system("ip link set vl-dpA mtu 9000"), 0);
  DpdkWire w("net_af_packet0,iface=vl-dpA");
  ASSERT_TRUE(w.open(&err)) << err;
  EXPECT_EQ(w.info().mtu, 1500u);  // what net_af_packet carries (max_rx_pktlen 1518)
}

/// The death test's child: exits 0 when a failed EAL initialisation is reported by both
/// opens, the second without a second rte_eal_init (the same message).
[[noreturn]] void eal_failure_child() {
  bool ok = register_pmd_thread() == -1 && set_eal_extra_args({"--no-such-eal-option"});
  DpdkWire a("net_null0");
  DpdkWire b("net_null1");
  std::string e1, e2;
  ok = ok && !a.open(&e1) && !b.open(&e2) && !eal_initialised();
  ok = ok && e1.find("EAL initialisation failed") != std::string::npos;
  ok = ok && e2.find(e1.substr(e1.find("EAL"))) != std::string::npos;
  ok = ok && register_pmd_thread() == -1 && !set_eal_extra_args({});
  std::fprintf(stderr, "%s\n%s\n", e1.c_str(), e2.c_str());
  std::exit(ok ? 0 : 1);
}

// In a re-executed child (threadsafe style), where EAL has never run.
TEST(DpdkWireDeathTest, EalFailureIsReportedAgain) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(eal_failure_child(), ::testing::ExitedWithCode(0), "EAL initialisation failed");
}

}  // namespace
}  // namespace vl::wire
