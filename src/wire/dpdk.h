#pragma once
// A DPDK ethdev (`--port NAME=dpdk:DEVARGS`): a NIC bound to vfio-pci (DEVARGS a PCI address,
// "0000:03:00.0") or any DPDK virtual device ("net_af_xdp0,iface=eth1", "net_af_packet0,
// iface=veth0", "net_tap0,iface=tap9", "net_null0"...), probed at open through EAL
// (wire/dpdk_eal.h, initialised by the first dpdk port). Frames are copied between the
// port's buffers and mbufs of a mempool of the port's own: the datapath never sees an mbuf.
// Polled only (no receive interrupts), no offloads yet. DPDK's Programmer's Guide "Poll Mode
// Driver", rte_ethdev.h.
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "wire/wire.h"

struct rte_mbuf;
struct rte_mempool;

namespace vl::wire {

class DpdkWire final : public Wire {
 public:
  struct Options {
    uint32_t queues = 1;      ///< receive/transmit queue pairs (RSS spreads receive when > 1)
    uint32_t rx_desc = 1024;  ///< descriptors per receive queue (the device may adjust them)
    uint32_t tx_desc = 1024;  ///< descriptors per transmit queue
    /// Bytes of L3 payload to set (rte_eth_dev_set_mtu); 0: keep the device's (for a vdev
    /// on a kernel interface, iface=, that interface's, as far as the driver carries it).
    uint32_t mtu = 0;
  };
  explicit DpdkWire(std::string devargs) : DpdkWire(std::move(devargs), Options{}) {}
  DpdkWire(std::string devargs, Options opt) : devargs_(std::move(devargs)), opt_(opt) {}
  ~DpdkWire() override { close(); }
  DpdkWire(const DpdkWire&) = delete;
  DpdkWire& operator=(const DpdkWire&) = delete;

  /// Initialises EAL if needed, probes the device (rte_dev_probe), configures `queues`
  /// queue pairs, their descriptors, the MTU and a mempool, starts it and turns promiscuous
  /// mode on. False with `*err` ("dpdk DEVARGS: ..."), everything undone.
  bool open(std::string* err) override;
  /// Stops and closes the ethdev, detaches the device (rte_dev_remove), frees the mempool.
  void close() override;
  const WireInfo& info() const override { return info_; }
  const char* type() const override { return "dpdk"; }
  std::string target() const override { return devargs_; }
  int rx_fd(uint32_t) const override { return -1; }
  bool link_up() const override;
  uint32_t recv(uint32_t q, Buf* bufs, uint32_t n) override;
  uint32_t send(uint32_t q, const Buf* bufs, uint32_t n) override;
  /// The ethdev's statistics (rte_eth_stats_get: eth_rx_packets, eth_tx_packets, eth_rx_bytes,
  /// eth_tx_bytes, eth_rx_missed, eth_rx_errors, eth_tx_errors, eth_rx_nombuf) and the
  /// wire's own (rx_truncated, tx_no_mbuf, tx_full, tx_oversize), summed over the queues.
  void counters(DeviceCounters* out) const override;
  /// On a transmit queue of its own (the device's first beyond the queue pairs, under a
  /// lock); false when the device has no spare transmit queue (give a vdev one more, e.g.
  /// queue_count= for net_af_xdp, qpairs= for net_af_packet).
  bool send_control(const uint8_t* frame, uint32_t len) override;
  /// The device has a transmit queue for send_control (after open).
  bool has_control_queue() const { return control_q_ >= 0; }
  bool has_control_path() const override { return has_control_queue(); }

  /// The ethdev's port id once open (diagnostics); -1 before.
  int port_id() const { return port_; }

  /// Frames per rte_eth_rx_burst / rte_eth_tx_burst call (the arrays live on the stack).
  static constexpr uint32_t kBurst = 32;
  /// Per-lcore mempool cache (mbufs).
  static constexpr uint32_t kPoolCache = 256;

 private:
  /// Written by the queue's thread only (bump), read by counters() (peek).
  struct alignas(64) QueueCounters {
    uint64_t rx_truncated = 0;  // frames larger than the caller's buffer, dropped
    uint64_t tx_no_mbuf = 0;    // frames not sent: the mempool was empty
    uint64_t tx_full = 0;       // frames the device did not take (rte_eth_tx_burst)
    uint64_t tx_oversize = 0;   // frames larger than an mbuf's data room, dropped
  };
  bool configure(std::string* err);
  bool setup_queues(std::string* err);
  void fail(std::string* err, const std::string& what);
  uint32_t send_burst(uint32_t q, const Buf* bufs, uint32_t n);

  std::string devargs_;
  Options opt_;
  WireInfo info_;
  int port_ = -1;
  bool started_ = false;
  rte_mempool* pool_ = nullptr;
  uint32_t room_ = 0;  // bytes of frame an mbuf of pool_ holds
  std::vector<QueueCounters> qc_;
  int control_q_ = -1;         // send_control's transmit queue, -1: none
  std::mutex control_mu_;      // serialises send_control (not the datapath's queues)
  uint64_t tx_control_ = 0, tx_control_errors_ = 0;  // (under control_mu_)
};

}  // namespace vl::wire
