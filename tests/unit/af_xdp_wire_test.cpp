// AfXdpWire (src/wire/af_xdp.h) against a veth pair in a network namespace of the test's
// own: each test runs on a thread that unshares its network namespace, so the pair and
// whatever program is on it go when the thread ends, pass or fail. The peer end is a raw
// packet socket bound to one EtherType (kEtherType), which also keeps the kernel's own
// frames out of what is compared. Needs root (CAP_NET_ADMIN, CAP_BPF).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_link.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "util/fd.h"
#include "wire/af_xdp.h"

namespace vl::wire {
namespace {

using Bytes = std::vector<uint8_t>;
constexpr uint16_t kEtherType = 0x88b5;  // IEEE 802 local experimental
constexpr uint32_t kBatch = 32;

/// Runs `body` on a thread of its own in a new network namespace (it goes with the thread).
void in_netns(const std::function<void()>& body) {
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) {
      ADD_FAILURE() << "unshare(CLONE_NEWNET): " << std::strerror(errno);
      return;
    }
    body();
  });
  t.join();
}

bool sh(const std::string& cmd) { return std::system((cmd + " >/dev/null").c_str()) == 0; }

/// va (the wire's) and vb (the peer's), `queues` queue pairs each, vb up, no IPv6 chatter.
bool make_veth(uint32_t queues = 1) {
  const std::string q =
      " numtxqueues " + std::to_string(queues) + " numrxqueues " + std::to_string(queues);
  if (!sh("ip link add va" + q + " type veth peer name vb" + q)) return false;
  for (const char* ifn : {"va", "vb"}) {
    const std::string p = std::string("/proc/sys/net/ipv6/conf/") + ifn + "/disable_ipv6";
    UniqueFd f(::open(p.c_str(), O_WRONLY | O_CLOEXEC));
    if (f.valid() && ::write(f.get(), "1", 1) != 1) return false;
  }
  return sh("ip link set vb up");
}

/// A broadcast frame of `len` bytes and EtherType kEtherType, its payload numbered `seq`.
Bytes frame(uint32_t len, uint32_t seq) {
  Bytes f(len);
  std::memset(f.data(), 0xff, 6);
  const uint8_t src[6] = {0x02, 0, 0, 0, 0, 0x0b};
  std::memcpy(f.data() + 6, src, 6);
  f[12] = kEtherType >> 8;
  f[13] = kEtherType & 0xff;
  for (uint32_t i = 14; i < len; ++i) f[i] = static_cast<uint8_t>(seq * 7 + i);
  std::memcpy(f.data() + 14, &seq, sizeof seq);
  return f;
}
bool ours(const uint8_t* p, uint32_t len) {
  return len >= 14 && p[12] == kEtherType >> 8 && p[13] == (kEtherType & 0xff);
}

/// A packet socket on `ifname` for kEtherType frames only, non-blocking.
UniqueFd peer_socket(const char* ifname) {
  UniqueFd fd(socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(kEtherType)));
  sockaddr_ll a{};
  a.sll_family = AF_PACKET;
  a.sll_protocol = htons(kEtherType);
  a.sll_ifindex = static_cast<int>(if_nametoindex(ifname));
  if (!fd.valid() || bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return {};
  return fd;
}

bool peer_send(int fd, const Bytes& f) {
  for (int tries = 0; tries < 1000; ++tries) {  // ENOBUFS: the veth ring is full for a moment
    if (::send(fd, f.data(), f.size(), 0) == static_cast<ssize_t>(f.size())) return true;
    if (errno != ENOBUFS && errno != EAGAIN) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return false;
}

/// Up to `want` frames of ours from `fd` within `ms`.
std::vector<Bytes> peer_recv(int fd, size_t want, int ms = 2000) {
  std::vector<Bytes> got;
  uint8_t b[4096];
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (got.size() < want && std::chrono::steady_clock::now() < end) {
    const ssize_t r = ::recv(fd, b, sizeof b, 0);
    if (r > 0 && ours(b, static_cast<uint32_t>(r))) got.emplace_back(b, b + r);
    if (r < 0) {
      pollfd p{fd, POLLIN, 0};
      poll(&p, 1, 20);
    }
  }
  return got;
}

/// Up to `want` frames of ours from the wire's queue `q` within `ms`, in buffers of `cap`.
std::vector<Bytes> wire_recv(AfXdpWire& w, size_t want, uint32_t cap = 2048, int ms = 2000,
                             uint32_t q = 0) {
  std::vector<Bytes> got;
  std::vector<uint8_t> mem(size_t{kBatch} * cap);
  Buf bufs[kBatch];
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (got.size() < want && std::chrono::steady_clock::now() < end) {
    for (uint32_t i = 0; i < kBatch; ++i) bufs[i] = {mem.data() + size_t{i} * cap, cap, 0};
    const uint32_t n = w.recv(q, bufs, kBatch);
    for (uint32_t i = 0; i < n; ++i) {  // each the header (zeros: no offloads), the frame
      const uint8_t* f = bufs[i].p + kHdrLen;
      const uint32_t len = bufs[i].len - kHdrLen;
      EXPECT_EQ(Bytes(static_cast<const uint8_t*>(bufs[i].p), f), Bytes(kHdrLen, 0));
      if (ours(f, len)) got.emplace_back(f, f + len);
    }
    if (!n) {
      pollfd p{w.rx_fd(q), POLLIN, 0};
      poll(&p, 1, 20);
    }
  }
  return got;
}

uint32_t wire_send(AfXdpWire& w, const std::vector<Bytes>& frames) {
  std::vector<Bytes> with_hdr;  // each buffer: the header, then the frame
  for (const Bytes& f : frames) {
    with_hdr.emplace_back(kHdrLen, 0);
    with_hdr.back().insert(with_hdr.back().end(), f.begin(), f.end());
  }
  std::vector<Buf> bufs;
  for (Bytes& b : with_hdr)
    bufs.push_back({b.data(), static_cast<uint32_t>(b.size()), static_cast<uint32_t>(b.size())});
  return w.send(0, bufs.data(), static_cast<uint32_t>(bufs.size()));
}

uint64_t counter(const AfXdpWire& w, const std::string& name) {
  DeviceCounters c;
  w.counters(&c);
  for (const auto& kv : c) {
    if (kv.first == name) return kv.second;
  }
  ADD_FAILURE() << "no counter " << name;
  return 0;
}

/// The interface's XDP attachment (XDP_ATTACHED_NONE, _DRV, _SKB...) and program id.
std::pair<int, uint32_t> xdp_on(const char* ifname) {
  bpf_xdp_query_opts o{};
  o.sz = sizeof o;
  if (bpf_xdp_query(static_cast<int>(if_nametoindex(ifname)), 0, &o) != 0) return {-1, 0};
  return {o.attach_mode, o.prog_id};
}

size_t open_fds() {
  size_t n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (d && readdir(d)) ++n;
  if (d) closedir(d);
  return n;
}

/// Frames both ways through `mode` on the pair; "" or what went wrong. No gtest macros: a
/// forked child runs it too.
std::string exchange(XdpMode mode, const char* want_mode, int want_attach) {
  AfXdpWire w("va", 1, mode);
  std::string err;
  if (!w.open(&err)) return "open: " + err;
  if (std::string(w.attach_mode()) != want_mode) return std::string("mode ") + w.attach_mode();
  if (xdp_on("va").first != want_attach) return "attach " + std::to_string(xdp_on("va").first);
  const WireInfo& in = w.info();
  if (in.vnet_hdr || in.offloads || in.queues != 1 || in.mtu != 1500 || !in.rx_interrupts) {
    return "info";
  }
  if (w.rx_fd(0) < 0 || w.zero_copy() || !w.link_up()) return "rx_fd, zero_copy or link_up";
  UniqueFd peer = peer_socket("vb");
  if (!peer.valid()) return std::string("peer socket: ") + std::strerror(errno);
  std::vector<Bytes> in_frames, out_frames;
  for (uint32_t len : {60u, 61u, 1000u, 1514u}) in_frames.push_back(frame(len, len));
  for (const Bytes& f : in_frames) {
    if (!peer_send(peer.get(), f)) return std::string("peer send: ") + std::strerror(errno);
  }
  if (wire_recv(w, in_frames.size()) != in_frames) return "recv: not the frames sent";
  for (uint32_t len : {60u, 777u, 1514u}) out_frames.push_back(frame(len, len + 1));
  if (wire_send(w, out_frames) != out_frames.size()) return "send: not all queued";
  if (peer_recv(peer.get(), out_frames.size()) != out_frames) return "peer: not the frames sent";
  w.close();
  if (xdp_on("va").first != XDP_ATTACHED_NONE) return "a program is left after close()";
  return "";
}

TEST(AfXdpWire, NativeModeCarriesFramesBothWays) {
  in_netns([] {
    ASSERT_TRUE(make_veth());
    EXPECT_EQ(exchange(XdpMode::kAuto, "native", XDP_ATTACHED_DRV), "");
  });
}

TEST(AfXdpWire, SkbModeCarriesFramesBothWays) {
  in_netns([] {
    ASSERT_TRUE(make_veth());
    EXPECT_EQ(exchange(XdpMode::kSkb, "skb", XDP_ATTACHED_SKB), "");
  });
}

TEST(AfXdpWire, AFrameBiggerThanItsBufferIsCountedAndSkipped) {
  in_netns([] {
    ASSERT_TRUE(make_veth());
    AfXdpWire w("va");
    std::string err;
    ASSERT_TRUE(w.open(&err)) << err;
    UniqueFd peer = peer_socket("vb");
    ASSERT_TRUE(peer.valid());
    const Bytes big = frame(1000, 1), small = frame(100, 2);
    ASSERT_TRUE(peer_send(peer.get(), big));
    ASSERT_TRUE(peer_send(peer.get(), small));
    EXPECT_EQ(wire_recv(w, 1, 500), std::vector<Bytes>{small});
    EXPECT_EQ(counter(w, "rx_truncated"), 1u);
    EXPECT_EQ(counter(w, "rx_bad_desc"), 0u);
  });
}

// As the port uses it: edge-triggered, never read. Each arrival after a drain is an edge.
TEST(AfXdpWire, RxFdWakesAnEdgeTriggeredEpoll) {
  in_netns([] {
    ASSERT_TRUE(make_veth());
    AfXdpWire w("va");
    std::string err;
    ASSERT_TRUE(w.open(&err)) << err;
    UniqueFd peer = peer_socket("vb");
    ASSERT_TRUE(peer.valid());
    UniqueFd ep(epoll_create1(EPOLL_CLOEXEC));
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLET;
    ASSERT_EQ(epoll_ctl(ep.get(), EPOLL_CTL_ADD, w.rx_fd(0), &ev), 0);
    epoll_event out{};
    EXPECT_EQ(epoll_wait(ep.get(), &out, 1, 0), 0);
    for (uint32_t i = 0; i < 3; ++i) {
      ASSERT_TRUE(peer_send(peer.get(), frame(100, i)));
      EXPECT_EQ(epoll_wait(ep.get(), &out, 1, 1000), 1) << "frame " << i;
      EXPECT_EQ(wire_recv(w, 1), std::vector<Bytes>{frame(100, i)});
      EXPECT_EQ(epoll_wait(ep.get(), &out, 1, 0), 0) << "frame " << i;
    }
  });
}

// Three times as many frames as each ring holds, both ways: chunks go back to the fill
// ring after recv() and come back from the completion ring before send().
TEST(AfXdpWire, ChunksAreRecycledBeyondTheRingSizes) {
  in_netns([] {
    ASSERT_TRUE(make_veth());
    AfXdpWire w("va");
    std::string err;
    ASSERT_TRUE(w.open(&err)) << err;
    UniqueFd peer = peer_socket("vb");
    ASSERT_TRUE(peer.valid());
    uint32_t seq = 0;
    for (uint32_t round = 0; round < 3 * AfXdpWire::kRxFrames / 128; ++round) {
      std::vector<Bytes> sent;
      for (uint32_t i = 0; i < 128; ++i) sent.push_back(frame(100, seq++));
      for (const Bytes& f : sent) ASSERT_TRUE(peer_send(peer.get(), f));
      ASSERT_EQ(wire_recv(w, sent.size()), sent) << "round " << round;
    }
    // Batches of 32: what one sendto() sends before Linux 6.17 (XDP_MAX_TX_SKB_BUDGET).
    for (uint32_t round = 0; round < 3 * AfXdpWire::kTxFrames / 32; ++round) {
      std::vector<Bytes> sent;
      for (uint32_t i = 0; i < 32; ++i) sent.push_back(frame(100, seq++));
      ASSERT_EQ(wire_send(w, sent), sent.size()) << "round " << round;
      ASSERT_EQ(peer_recv(peer.get(), sent.size()), sent) << "round " << round;
    }
    EXPECT_EQ(counter(w, "tx_ring_full"), 0u);
    EXPECT_EQ(counter(w, "tx_kick_again"), 0u);
    EXPECT_EQ(counter(w, "tx_kick_errors"), 0u);
    EXPECT_EQ(counter(w, "rx_dropped"), 0u);
    EXPECT_EQ(counter(w, "tx_invalid_descs"), 0u);
  });
}

TEST(AfXdpWire, OpenFailsOnAMissingInterface) {
  AfXdpWire w("vl-nosuch0");
  std::string err;
  EXPECT_FALSE(w.open(&err));
  EXPECT_NE(err.find("vl-nosuch0"), std::string::npos) << err;
  EXPECT_NE(err.find("no such interface"), std::string::npos) << err;
  EXPECT_EQ(w.rx_fd(0), -1);
  EXPECT_FALSE(w.link_up());
}

// Another XDP program holds va (natively): neither mode attaches, the error says so, the
// other program stays and no descriptor is left open.
TEST(AfXdpWire, OpenFailsCleanlyWhenAnotherProgramHoldsTheInterface) {
  in_netns([] {
    ASSERT_TRUE(make_veth());
    const bpf_insn pass[] = {
        {BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, XDP_PASS},
        {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
    };
    UniqueFd prog(bpf_prog_load(BPF_PROG_TYPE_XDP, "pass", "GPL", pass, 2, nullptr));
    ASSERT_TRUE(prog.valid()) << std::strerror(errno);
    ASSERT_EQ(bpf_xdp_attach(static_cast<int>(if_nametoindex("va")), prog.get(), XDP_FLAGS_DRV_MODE,
                             nullptr),
              0);
    const auto before = xdp_on("va");
    ASSERT_EQ(before.first, XDP_ATTACHED_DRV);
    const size_t fds = open_fds();
    AfXdpWire w("va");
    std::string err;
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(w.open(&err));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
    EXPECT_NE(err.find("cannot attach XDP"), std::string::npos) << err;
    EXPECT_NE(err.find("native mode"), std::string::npos) << err;
    EXPECT_NE(err.find("skb mode"), std::string::npos) << err;
    EXPECT_EQ(xdp_on("va"), before);
    EXPECT_EQ(open_fds(), fds);
    EXPECT_EQ(w.rx_fd(0), -1);
  });
}

// Queue 1 does not exist: queue 0's socket, already bound with the program attached, is
// closed again and the program detached.
TEST(AfXdpWire, AMissingQueueLeavesNothingAttached) {
  in_netns([] {
    ASSERT_TRUE(make_veth(1));
    const size_t fds = open_fds();
    std::string err;
    {
      AfXdpWire w("va", 2);
      EXPECT_FALSE(w.open(&err));
      EXPECT_NE(err.find("queue 1"), std::string::npos) << err;
      EXPECT_EQ(xdp_on("va").first, XDP_ATTACHED_NONE);
      EXPECT_EQ(open_fds(), fds);
    }
    AfXdpWire w("va", 1);
    EXPECT_TRUE(w.open(&err)) << err;  // at once: the kernel may still hold queue 0 a moment
  });
}

// At once: the kernel holds a queue a few ms after its socket is closed. Nothing is left
// behind (libxdp 1.3.1's own program handling kept two descriptors per round).
TEST(AfXdpWire, ReopensAtOnceAfterCloseAndLeavesNothingBehind) {
  in_netns([] {
    ASSERT_TRUE(make_veth());
    const size_t fds = open_fds();
    AfXdpWire w("va");
    std::string err;
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(w.open(&err)) << "open " << i << ": " << err;
      EXPECT_EQ(xdp_on("va").first, XDP_ATTACHED_DRV);
      w.close();
      EXPECT_EQ(xdp_on("va").first, XDP_ATTACHED_NONE);
      EXPECT_EQ(open_fds(), fds) << "round " << i;
      EXPECT_STREQ(w.attach_mode(), "");
    }
  });
}

TEST(AfXdpWire, OneSocketPerQueue) {
  in_netns([] {
    ASSERT_TRUE(make_veth(2));
    AfXdpWire w("va", 2);
    std::string err;
    ASSERT_TRUE(w.open(&err)) << err;
    EXPECT_EQ(w.info().queues, 2u);
    EXPECT_GE(w.rx_fd(0), 0);
    EXPECT_GE(w.rx_fd(1), 0);
    EXPECT_NE(w.rx_fd(0), w.rx_fd(1));
    EXPECT_EQ(w.rx_fd(2), -1);
    EXPECT_EQ(xdp_on("va").first, XDP_ATTACHED_DRV);
    w.close();
    EXPECT_EQ(xdp_on("va").first, XDP_ATTACHED_NONE);
  });
}

// lo has no native XDP: the wire falls back to SKB mode, and a frame it sends loops back.
TEST(AfXdpWire, FallsBackToSkbModeWithoutNativeXdp) {
  in_netns([] {
    AfXdpWire w("lo");
    std::string err;
    ASSERT_TRUE(w.open(&err)) << err;
    EXPECT_STREQ(w.attach_mode(), "skb");
    EXPECT_EQ(xdp_on("lo").first, XDP_ATTACHED_SKB);
    const std::vector<Bytes> f{frame(200, 9)};
    ASSERT_EQ(wire_send(w, f), 1u);
    EXPECT_EQ(wire_recv(w, 1), f);
  });
}

// The program is the wire's, not libxdp's (which would try its dispatcher, pinned in a
// bpffs): a bpffs at /sys/fs/bpf changes nothing. In a child process with mount and
// network namespaces of its own, so the mount goes with it.
TEST(AfXdpWire, WorksWithABpffs) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string r;
    if (unshare(CLONE_NEWNET | CLONE_NEWNS) != 0) {
      r = std::string("unshare: ") + std::strerror(errno);
    } else if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
               mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700") != 0) {
      r = std::string("mount: ") + std::strerror(errno);
    } else if (!make_veth()) {
      r = "veth";
    } else {
      r = exchange(XdpMode::kAuto, "native", XDP_ATTACHED_DRV);
    }
    (void)!::write(p[1], r.data(), r.size());
    _exit(0);
  }
  ::close(p[1]);
  std::string r;
  char b[256];
  bool eof = false;  // the child is gone (or going)
  pollfd pf{p[0], POLLIN, 0};
  while (!eof && poll(&pf, 1, 10000) == 1) {
    const ssize_t n = ::read(p[0], b, sizeof b);
    if (n > 0) r.append(b, static_cast<size_t>(n));
    eof = n <= 0;
  }
  ::close(p[0]);
  if (!eof) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(eof) << "the child took more than 10 s";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_EQ(r, "");
}

}  // namespace
}  // namespace vl::wire
