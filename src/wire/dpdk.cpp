#include "wire/dpdk.h"

#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "wire/dpdk_eal.h"
#include "wire/netdev.h"

namespace vl::wire {

namespace {

// Ports some DpdkWire holds (a device probed twice, by two ports of the switch, is refused).
std::mutex g_mu;
std::set<uint16_t> g_owned;
uint32_t g_pools = 0;  // mempool names are unique per process

/// Receive buffers a queue may hold whatever its descriptors (net_af_xdp's fill ring,
/// ETH_AF_XDP_DFLT_NUM_DESCS in DPDK 22.11).
constexpr uint32_t kMinRxFill = 2048;

/// The device name of DEVARGS: what precedes the first ','.
std::string dev_name(const std::string& devargs) { return devargs.substr(0, devargs.find(',')); }

/// A PCI address ([DDDD:]BB:DD.F, hexadecimal): vdev names have no ':'.
bool is_pci(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (name.find(':') == std::string::npos || dot == std::string::npos) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
  });
}

/// The value of `key=` in DEVARGS ("net_af_xdp0,iface=eth1": iface is eth1), or "".
std::string kvarg(const std::string& devargs, const std::string& key) {
  const std::string k = "," + key + "=";
  const size_t at = devargs.find(k);
  if (at == std::string::npos) return {};
  const size_t from = at + k.size();
  return devargs.substr(from, devargs.find(',', from) - from);
}

std::string dpdk_error(int r) { return rte_strerror(r < 0 ? -r : r); }

/// The first ethdev port of DEVARGS's device that no wire holds, now held; -1 when there is
/// none (`*held`: because wires hold them all). `probed`: the device's driver is known to
/// exist (else only its name is looked up: the iterator logs errors for unknown drivers).
int take_port(const std::string& devargs, bool probed, bool* held) {
  rte_dev_iterator it;
  uint16_t id = 0;
  int found = -1;
  *held = false;
  std::lock_guard lock(g_mu);
  // Matches the device of DEVARGS (rte_eth_iterator_init); the name lookup catches devargs
  // the iterator does not parse (vdev arguments it takes for class filters).
  if (probed && rte_eth_iterator_init(&it, devargs.c_str()) == 0) {
    for (id = rte_eth_iterator_next(&it); id != RTE_MAX_ETHPORTS; id = rte_eth_iterator_next(&it)) {
      if (g_owned.count(id)) {
        *held = true;
        continue;
      }
      found = id;
      rte_eth_iterator_cleanup(&it);  // the iterator cleans up itself only at its end
      break;
    }
  }
  if (found < 0 && rte_eth_dev_get_port_by_name(dev_name(devargs).c_str(), &id) == 0) {
    if (!g_owned.count(id)) {
      found = id;
    } else {
      *held = true;
    }
  }
  if (found >= 0) g_owned.insert(static_cast<uint16_t>(found));
  return found;
}

}  // namespace

void DpdkWire::fail(std::string* err, const std::string& what) {
  *err = fmt::format("dpdk {}: {}", devargs_, what);
  close();
}

bool DpdkWire::open(std::string* err) {
  close();
  if (opt_.queues == 0 || opt_.rx_desc == 0 || opt_.tx_desc == 0) {
    *err = fmt::format("dpdk {}: queues and descriptors must be at least 1", devargs_);
    return false;
  }
  std::vector<std::string> pci;
  if (is_pci(dev_name(devargs_))) pci.push_back(dev_name(devargs_));
  std::string e;
  if (!eal_init(pci, &e)) {
    *err = fmt::format("dpdk {}: {}", devargs_, e);
    return false;
  }
  // A device probed already (by --vdev in the extra EAL arguments, or a wire that could not
  // detach it) is used as it is; probing it again would replace its devargs.
  bool held = false;
  port_ = take_port(devargs_, false, &held);
  if (port_ < 0 && held) {
    *err = fmt::format("dpdk {}: the device is already used by another port", devargs_);
    return false;
  }
  if (port_ < 0) {
    // Synchronous: the device's ethdev ports exist when it returns.
    if (const int r = rte_dev_probe(devargs_.c_str()); r < 0) {
      *err = fmt::format("dpdk {}: probing the device failed: {} (no such driver, bad "
                         "arguments, or the device is missing)", devargs_, dpdk_error(r));
      return false;
    }
    port_ = take_port(devargs_, true, &held);
    if (port_ < 0) {
      rte_eal_hotplug_remove(pci.empty() ? "vdev" : "pci", dev_name(devargs_).c_str());
      *err = fmt::format("dpdk {}: the device has no ethdev port (not a network device?)",
                         devargs_);
      return false;
    }
  }
  if (!configure(err)) return false;
  if (const int s = rte_eth_dev_start(static_cast<uint16_t>(port_)); s < 0) {
    fail(err, fmt::format("rte_eth_dev_start: {}", dpdk_error(s)));
    return false;
  }
  started_ = true;
  if (const int p = rte_eth_promiscuous_enable(static_cast<uint16_t>(port_)); p != 0) {
    spdlog::warn("dpdk {}: promiscuous mode: {}", devargs_, dpdk_error(p));
  }
  info_.queues = opt_.queues;
  // Plain frames both ways for now: mapping virtio-net checksum and TSO requests to mbuf
  // offload flags (RTE_MBUF_F_TX_*, RTE_ETH_TX_OFFLOAD_*) is a later step.
  info_.vnet_hdr = false;
  info_.offloads = false;
  // Polled: receive interrupts (rte_eth_dev_rx_intr_*) need per-driver support and a re-arm
  // protocol the Wire interface does not have.
  info_.rx_interrupts = false;
  qc_.assign(opt_.queues, QueueCounters{});
  spdlog::info("dpdk {}: port {}, {} queue pair(s), MTU {}, {} mbufs of {} bytes", devargs_,
               port_, info_.queues, info_.mtu, pool_->size, room_);
  return true;
}

bool DpdkWire::configure(std::string* err) {
  const auto port = static_cast<uint16_t>(port_);
  rte_eth_dev_info di{};
  if (const int r = rte_eth_dev_info_get(port, &di); r != 0) {
    fail(err, fmt::format("rte_eth_dev_info_get: {}", dpdk_error(r)));
    return false;
  }
  if (opt_.queues > di.max_rx_queues || opt_.queues > di.max_tx_queues) {
    fail(err, fmt::format("{} queue pairs asked, the device ({}) has {} rx / {} tx",
                          opt_.queues, di.driver_name, di.max_rx_queues, di.max_tx_queues));
    return false;
  }
  rte_eth_conf conf{};
  if (opt_.queues > 1 && di.flow_type_rss_offloads) {
    conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    conf.rx_adv_conf.rss_conf.rss_hf =
        (RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP) & di.flow_type_rss_offloads;
  } else if (opt_.queues > 1) {
    spdlog::info("dpdk {}: no RSS ({}): the driver decides which queue receives", devargs_,
                 di.driver_name);
  }
  // rte_eth_dev_configure sets the MTU to rxmode.mtu (1500 when 0): keep the device's. A
  // vdev on a kernel interface does not tell ethdev that interface's MTU: the kernel's, as
  // far as the driver carries it (max_mtu, and max_rx_pktlen less Ethernet header and CRC:
  // 1500 for af_packet).
  uint16_t mtu = 0;
  rte_eth_dev_get_mtu(port, &mtu);
  const uint32_t top = std::min<uint32_t>(
      di.max_mtu, di.max_rx_pktlen > 18 ? di.max_rx_pktlen - 18 : di.max_mtu);
  if (const uint32_t k = if_mtu(kvarg(devargs_, "iface")); k && di.min_mtu <= top) {
    mtu = static_cast<uint16_t>(std::clamp<uint32_t>(k, di.min_mtu, top));
  }
  conf.rxmode.mtu = mtu;
  const auto q = static_cast<uint16_t>(opt_.queues);
  // One transmit queue more where the device has it, for send_control.
  control_q_ = di.max_tx_queues > q ? q : -1;
  const auto ntxq = static_cast<uint16_t>(q + (control_q_ >= 0 ? 1 : 0));
  if (const int r = rte_eth_dev_configure(port, q, ntxq, &conf); r != 0) {
    fail(err, fmt::format("rte_eth_dev_configure: {}", dpdk_error(r)));
    return false;
  }
  if (opt_.mtu) {
    if (const int r = rte_eth_dev_set_mtu(port, static_cast<uint16_t>(opt_.mtu)); r != 0) {
      fail(err, fmt::format("MTU {}: {} (the device takes {}..{})", opt_.mtu, dpdk_error(r),
                            di.min_mtu, di.max_mtu));
      return false;
    }
  }
  mtu = 0;
  rte_eth_dev_get_mtu(port, &mtu);
  info_.mtu = mtu ? mtu : 1500;
  return setup_queues(err);
}

bool DpdkWire::setup_queues(std::string* err) {
  const auto port = static_cast<uint16_t>(port_);
  uint16_t nrx = static_cast<uint16_t>(std::min<uint32_t>(opt_.rx_desc, UINT16_MAX));
  uint16_t ntx = static_cast<uint16_t>(std::min<uint32_t>(opt_.tx_desc, UINT16_MAX));
  if (const int r = rte_eth_dev_adjust_nb_rx_tx_desc(port, &nrx, &ntx); r != 0) {
    fail(err, fmt::format("rte_eth_dev_adjust_nb_rx_tx_desc: {}", dpdk_error(r)));
    return false;
  }
  // Every descriptor may hold an mbuf, a burst per queue is in flight in send(), and each
  // thread's cache (the queues' threads and the control thread) may keep 1.5 times its size.
  // A driver may hold more receive buffers than descriptors: net_af_xdp (DPDK 22.11) puts
  // kMinRxFill mbufs in its fill ring at queue setup whatever nrx is, and fails the setup
  // ("Failed to configure xdp socket") when the pool cannot give them.
  const uint32_t rx_held = std::max<uint32_t>(nrx, kMinRxFill);
  const uint32_t want =
      opt_.queues * (rx_held + ntx + kBurst) + (opt_.queues + 1) * kPoolCache * 3 / 2;
  uint32_t n = 1;
  while (n - 1 < want) n <<= 1;  // 2^k - 1: the ring-based pool's best size
  // Room for a frame of the MTU (Ethernet header, two VLAN tags, CRC) in one mbuf.
  const uint32_t frame = std::max<uint32_t>(RTE_MBUF_DEFAULT_DATAROOM, info_.mtu + 26);
  const uint32_t data_room = std::min<uint32_t>(frame + RTE_PKTMBUF_HEADROOM, UINT16_MAX);
  int socket = rte_eth_dev_socket_id(port);
  uint32_t seq = 0;
  {
    std::lock_guard lock(g_mu);
    seq = ++g_pools;
  }
  const std::string name = fmt::format("vl_{}_{}", port_, seq);
  pool_ = rte_pktmbuf_pool_create(name.c_str(), n - 1, kPoolCache, 0,
                                  static_cast<uint16_t>(data_room), socket);
  if (!pool_ && socket != SOCKET_ID_ANY) {  // no memory on the device's NUMA node
    socket = SOCKET_ID_ANY;
    pool_ = rte_pktmbuf_pool_create(name.c_str(), n - 1, kPoolCache, 0,
                                    static_cast<uint16_t>(data_room), socket);
  }
  if (!pool_) {
    fail(err, fmt::format("mempool of {} mbufs of {} bytes: {}", n - 1, data_room,
                          dpdk_error(rte_errno)));
    return false;
  }
  room_ = data_room - RTE_PKTMBUF_HEADROOM;
  for (uint16_t q = 0; q < opt_.queues; ++q) {
    // nullptr: the driver's default queue configuration (rte_eth_dev_info.default_rxconf).
    if (const int r = rte_eth_rx_queue_setup(port, q, nrx, socket, nullptr, pool_); r != 0) {
      fail(err, fmt::format("rx queue {} ({} descriptors): {}", q, nrx, dpdk_error(r)));
      return false;
    }
    if (const int r = rte_eth_tx_queue_setup(port, q, ntx, socket, nullptr); r != 0) {
      fail(err, fmt::format("tx queue {} ({} descriptors): {}", q, ntx, dpdk_error(r)));
      return false;
    }
  }
  if (control_q_ >= 0 &&
      rte_eth_tx_queue_setup(port, static_cast<uint16_t>(control_q_), 64, socket, nullptr) != 0) {
    control_q_ = -1;  // (rte_eth_dev_start would fail on a queue configured but not set up)
    fail(err, "the transmit queue for control frames could not be set up");
    return false;
  }
  return true;
}

bool DpdkWire::send_control(const uint8_t* frame, uint32_t len) {
  if (control_q_ < 0 || !started_ || len > room_) return false;
  std::lock_guard lock(control_mu_);
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  bool ok = m != nullptr;
  if (ok) {
    std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), frame, len);
    m->data_len = static_cast<uint16_t>(len);
    m->pkt_len = len;
    ok = rte_eth_tx_burst(static_cast<uint16_t>(port_), static_cast<uint16_t>(control_q_), &m, 1) == 1;
    if (!ok) rte_pktmbuf_free(m);
  }
  bump(ok ? tx_control_ : tx_control_errors_);
  return ok;
}

void DpdkWire::close() {
  if (port_ < 0) return;
  const auto port = static_cast<uint16_t>(port_);
  rte_eth_dev_info di{};
  rte_device* dev = rte_eth_dev_info_get(port, &di) == 0 ? di.device : nullptr;
  if (started_) rte_eth_dev_stop(port);
  started_ = false;
  rte_eth_dev_close(port);  // releases the port (and gives back the device's mbufs)
  if (dev) {
    bool other = false;  // another port of the same device (a multi-port NIC) stays
    uint16_t p = 0;
    RTE_ETH_FOREACH_DEV_OF(p, dev) other = true;
    if (!other) {
      if (const int r = rte_dev_remove(dev); r != 0) {
        spdlog::warn("dpdk {}: rte_dev_remove: {}", devargs_, dpdk_error(r));
      }
    }
  }
  if (pool_) rte_mempool_free(pool_);
  pool_ = nullptr;
  {
    std::lock_guard lock(g_mu);
    g_owned.erase(port);
  }
  port_ = -1;
}

bool DpdkWire::link_up() const {
  if (port_ < 0) return false;
  rte_eth_link link{};
  return rte_eth_link_get_nowait(static_cast<uint16_t>(port_), &link) == 0 &&
         link.link_status == RTE_ETH_LINK_UP;
}

uint32_t DpdkWire::recv(uint32_t q, Buf* bufs, uint32_t n) {
  rte_mbuf* m[kBurst];
  uint32_t got = 0, taken = 0;  // frames returned; frames taken from the device (n at most)
  while (taken < n) {
    const auto want = static_cast<uint16_t>(std::min(n - taken, kBurst));
    const uint16_t k = rte_eth_rx_burst(static_cast<uint16_t>(port_), static_cast<uint16_t>(q),
                                        m, want);
    taken += k;
    for (uint16_t i = 0; i < k; ++i) {
      Buf& b = bufs[got];
      const uint32_t len = m[i]->pkt_len;
      if (kHdrLen + len > b.cap) {
        bump(qc_[q].rx_truncated);
        continue;
      }
      std::memset(b.p, 0, kHdrLen);  // no offloads yet: a plain virtio-net header
      // A frame may span several segments (scattered receive): copy each in turn.
      uint32_t off = 0;
      for (const rte_mbuf* s = m[i]; s && off < len; s = s->next) {
        const uint32_t c = std::min<uint32_t>(s->data_len, len - off);
        std::memcpy(b.p + kHdrLen + off, rte_pktmbuf_mtod(s, const uint8_t*), c);
        off += c;
      }
      b.len = kHdrLen + off;
      ++got;
    }
    if (k) rte_pktmbuf_free_bulk(m, k);
    if (k < want) break;
  }
  return got;
}

uint32_t DpdkWire::send(uint32_t q, const Buf* bufs, uint32_t n) {
  QueueCounters& c = qc_[q];
  uint32_t sent = 0;
  for (uint32_t i = 0; i < n; i += kBurst) {
    const uint32_t k = std::min(n - i, kBurst);
    rte_mbuf* m[kBurst];
    if (rte_pktmbuf_alloc_bulk(pool_, m, k) != 0) {  // all or nothing
      bump(c.tx_no_mbuf, n - i);
      break;
    }
    uint32_t j = 0;  // mbufs filled, in the order of the frames
    for (uint32_t f = 0; f < k; ++f) {
      const Buf& b = bufs[i + f];
      const uint32_t len = b.len > kHdrLen ? b.len - kHdrLen : 0;  // the frame after the header
      if (len > room_ || len == 0) {
        bump(c.tx_oversize);
        continue;
      }
      rte_mbuf* x = m[j++];
      std::memcpy(rte_pktmbuf_mtod(x, uint8_t*), b.p + kHdrLen, len);
      x->data_len = static_cast<uint16_t>(len);
      x->pkt_len = len;
    }
    if (j < k) rte_pktmbuf_free_bulk(m + j, k - j);
    const uint16_t t = rte_eth_tx_burst(static_cast<uint16_t>(port_), static_cast<uint16_t>(q),
                                        m, static_cast<uint16_t>(j));
    sent += t;
    if (t < j) {  // the device's queue is full: the rest of this call is dropped too
      rte_pktmbuf_free_bulk(m + t, j - t);
      bump(c.tx_full, j - t + (n - i - k));
      break;
    }
  }
  return sent;
}

void DpdkWire::counters(DeviceCounters* out) const {
  rte_eth_stats st{};
  if (port_ >= 0 && rte_eth_stats_get(static_cast<uint16_t>(port_), &st) == 0) {
    out->emplace_back("eth_rx_packets", st.ipackets);
    out->emplace_back("eth_tx_packets", st.opackets);
    out->emplace_back("eth_rx_bytes", st.ibytes);
    out->emplace_back("eth_tx_bytes", st.obytes);
    out->emplace_back("eth_rx_missed", st.imissed);
    out->emplace_back("eth_rx_errors", st.ierrors);
    out->emplace_back("eth_tx_errors", st.oerrors);
    out->emplace_back("eth_rx_nombuf", st.rx_nombuf);
  }
  uint64_t trunc = 0, nombuf = 0, full = 0, big = 0;
  for (const auto& c : qc_) {
    trunc += peek(c.rx_truncated);
    nombuf += peek(c.tx_no_mbuf);
    full += peek(c.tx_full);
    big += peek(c.tx_oversize);
  }
  out->emplace_back("rx_truncated", trunc);
  out->emplace_back("tx_no_mbuf", nombuf);
  out->emplace_back("tx_full", full);
  out->emplace_back("tx_oversize", big);
  out->emplace_back("tx_control", peek(tx_control_));
  out->emplace_back("tx_control_errors", peek(tx_control_errors_));
}

}  // namespace vl::wire
