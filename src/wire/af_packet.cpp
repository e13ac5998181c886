#include "wire/af_packet.h"

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "util/log.h"
#include "wire/netdev.h"

namespace vl::wire {

namespace {
bool set_opt(int fd, int opt, int v) { return setsockopt(fd, SOL_PACKET, opt, &v, sizeof v) == 0; }
}  // namespace

bool AfPacketWire::open(std::string* err) {
  ifindex_ = if_index(name_);
  if (!ifindex_) {
    *err = fmt::format("af-packet {}: no such interface", name_);
    return false;
  }
  // Protocol 0 until bound: no frame is queued before the ring exists.
  UniqueFd fd(socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    *err = fmt::format("af-packet {}: socket: {}", name_, std::strerror(errno));
    return false;
  }
  if (!set_opt(fd.get(), PACKET_VERSION, TPACKET_V3)) {
    *err = fmt::format("af-packet {}: TPACKET_V3: {}", name_, std::strerror(errno));
    return false;
  }
  info_.offloads = want_offloads_ && set_opt(fd.get(), PACKET_VNET_HDR, 1);
  info_.vnet_hdr = info_.offloads;
  set_opt(fd.get(), PACKET_IGNORE_OUTGOING, 1);  // Linux 4.20; older kernels loop them back
  set_opt(fd.get(), PACKET_QDISC_BYPASS, 1);
  tpacket_req3 req{};
  req.tp_block_size = kBlockSize;
  req.tp_block_nr = kBlocks;
  req.tp_frame_size = 2048;
  req.tp_frame_nr = kBlockSize / 2048 * kBlocks;
  req.tp_retire_blk_tov = kBlockTimeoutMs;
  if (setsockopt(fd.get(), SOL_PACKET, PACKET_RX_RING, &req, sizeof req) != 0) {
    *err = fmt::format("af-packet {}: PACKET_RX_RING: {}", name_, std::strerror(errno));
    return false;
  }
  ring_len_ = size_t{kBlockSize} * kBlocks;
  void* m = mmap(nullptr, ring_len_, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (m == MAP_FAILED) {
    *err = fmt::format("af-packet {}: mmap: {}", name_, std::strerror(errno));
    return false;
  }
  ring_ = static_cast<uint8_t*>(m);
  // Up before the bind: a socket bound to a down interface keeps ENETDOWN pending, and its
  // first send returns it (that frame dropped).
  if (!if_set_up(name_, err)) {
    munmap(ring_, ring_len_);
    ring_ = nullptr;
    return false;
  }
  sockaddr_ll a{};
  a.sll_family = AF_PACKET;
  a.sll_protocol = htons(ETH_P_ALL);
  a.sll_ifindex = static_cast<int>(ifindex_);
  packet_mreq mr{};
  mr.mr_ifindex = static_cast<int>(ifindex_);
  mr.mr_type = PACKET_MR_PROMISC;
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      setsockopt(fd.get(), SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) != 0) {
    *err = fmt::format("af-packet {}: bind: {}", name_, std::strerror(errno));
    munmap(ring_, ring_len_);
    ring_ = nullptr;
    return false;
  }
  const uint32_t mtu = if_mtu(name_);
  info_.mtu = mtu ? mtu : 1500;
  info_.queues = 1;
  info_.rx_interrupts = true;
  block_ = 0;
  left_ = 0;
  fd_ = std::move(fd);
  return true;
}

void AfPacketWire::close() {
  if (ring_) munmap(ring_, ring_len_);
  ring_ = nullptr;
  fd_.reset();
}

bool AfPacketWire::link_up() const { return fd_.valid() && if_running(name_); }

uint32_t AfPacketWire::recv(uint32_t, Buf* bufs, uint32_t n) {
  const uint32_t hdr = info_.vnet_hdr ? kLegacyHdrLen : 0;  // before tp_mac in the ring
  uint32_t got = 0;
  while (got < n) {
    auto* bd = reinterpret_cast<tpacket_block_desc*>(ring_ + size_t{block_} * kBlockSize);
    if (!left_) {
      if (!(__atomic_load_n(&bd->hdr.bh1.block_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) break;
      left_ = bd->hdr.bh1.num_pkts;
      next_ = reinterpret_cast<uint8_t*>(bd) + bd->hdr.bh1.offset_to_first_pkt;
      if (!left_) {  // an empty block (timed out): give it back
        __atomic_store_n(&bd->hdr.bh1.block_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
        block_ = (block_ + 1) % kBlocks;
        continue;
      }
    }
    // The kernel wrote the block; its offsets are still checked against it.
    const uint8_t* end = reinterpret_cast<uint8_t*>(bd) + kBlockSize;
    const auto* ph = reinterpret_cast<const tpacket3_hdr*>(next_);
    bool ok = next_ + sizeof *ph <= end && ph->tp_mac >= hdr &&
              next_ + ph->tp_mac + ph->tp_snaplen <= end;
    if (ok && (ph->tp_snaplen < ph->tp_len || kHdrLen + ph->tp_snaplen > bufs[got].cap)) {
      bump(rx_truncated_);
    } else if (ok) {
      uint8_t* b = bufs[got].p;
      std::memset(b, 0, kHdrLen);
      std::memcpy(b, next_ + ph->tp_mac - hdr, hdr);
      const uint8_t* f = next_ + ph->tp_mac;
      // A VLAN tag the kernel took off (rx VLAN acceleration: the tag is in the ring's
      // header, not in the frame) goes back where it was, after the MAC addresses.
      const bool vlan = (ph->tp_status & TP_STATUS_VLAN_VALID) && ph->tp_snaplen >= 12;
      if (!vlan) {
        std::memcpy(b + kHdrLen, f, ph->tp_snaplen);
        bufs[got++].len = kHdrLen + ph->tp_snaplen;
      } else if (kHdrLen + ph->tp_snaplen + 4 > bufs[got].cap) {
        bump(rx_truncated_);
      } else {
        const uint16_t tpid = (ph->tp_status & TP_STATUS_VLAN_TPID_VALID) ? ph->hv1.tp_vlan_tpid : 0x8100;
        const uint16_t tci = static_cast<uint16_t>(ph->hv1.tp_vlan_tci);
        uint8_t* d = b + kHdrLen;
        std::memcpy(d, f, 12);
        const uint8_t tag[4] = {static_cast<uint8_t>(tpid >> 8), static_cast<uint8_t>(tpid),
                                static_cast<uint8_t>(tci >> 8), static_cast<uint8_t>(tci)};
        std::memcpy(d + 12, tag, 4);
        std::memcpy(d + 16, f + 12, ph->tp_snaplen - 12);
        bufs[got++].len = kHdrLen + ph->tp_snaplen + 4;
        // The header's offsets count from the frame's first byte: 4 more now.
        uint16_t v;
        std::memcpy(&v, b + 6, 2);  // csum_start (struct virtio_net_hdr)
        if (b[0] & 1) v = static_cast<uint16_t>(v + 4), std::memcpy(b + 6, &v, 2);
        std::memcpy(&v, b + 2, 2);  // hdr_len
        if (v) v = static_cast<uint16_t>(v + 4), std::memcpy(b + 2, &v, 2);
        bump(rx_vlan_restored_);
      }
    } else {
      bump(rx_bad_);
    }
    if (--left_ && ok && ph->tp_next_offset) {
      next_ += ph->tp_next_offset;
    } else {  // the block is read (or not readable): back to the kernel
      left_ = 0;
      __atomic_store_n(&bd->hdr.bh1.block_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
      block_ = (block_ + 1) % kBlocks;
    }
  }
  return got;
}

uint32_t AfPacketWire::send(uint32_t, const Buf* bufs, uint32_t n) {
  constexpr uint32_t kMax = 64;
  mmsghdr m[kMax];
  iovec iov[2 * kMax];
  uint32_t sent = 0;
  // With PACKET_VNET_HDR the socket takes the legacy header, then the frame.
  const bool vnet = info_.vnet_hdr;
  while (sent < n) {
    const uint32_t k = n - sent < kMax ? n - sent : kMax;
    for (uint32_t i = 0; i < k; ++i) {
      const Buf& b = bufs[sent + i];
      iov[2 * i] = {b.p, kLegacyHdrLen};
      iov[2 * i + 1] = {b.p + kHdrLen, b.len - kHdrLen};
      m[i] = {};
      m[i].msg_hdr.msg_iov = &iov[2 * i + (vnet ? 0 : 1)];
      m[i].msg_hdr.msg_iovlen = vnet ? 2 : 1;
    }
    const int r = sendmmsg(fd_.get(), m, k, MSG_DONTWAIT);
    if (r <= 0) {  // the first frame failed (ENOBUFS, EAGAIN, ENETDOWN, EMSGSIZE): drop it
      bump(tx_errors_);
      VL_LOG_RL(spdlog::level::warn, "af-packet {}: a frame of {} bytes not sent: {}", name_,
                bufs[sent].len - kHdrLen, std::strerror(errno));
      const uint32_t rest = n - sent - 1;
      // Try the others once more; a full device drops them too.
      return sent + (rest ? send(0, bufs + sent + 1, rest) : 0);
    }
    sent += static_cast<uint32_t>(r);
  }
  return sent;
}

bool AfPacketWire::send_control(const uint8_t* frame, uint32_t len) {
  if (!fd_.valid()) return false;
  uint8_t hdr[kLegacyHdrLen] = {};
  iovec iov[2] = {{hdr, kLegacyHdrLen}, {const_cast<uint8_t*>(frame), len}};
  msghdr m{};
  m.msg_iov = info_.vnet_hdr ? iov : iov + 1;
  m.msg_iovlen = info_.vnet_hdr ? 2 : 1;
  // A socket's sends are serialised by the kernel: any thread may call this.
  const bool ok = sendmsg(fd_.get(), &m, MSG_DONTWAIT) == static_cast<ssize_t>(len) + (info_.vnet_hdr ? kLegacyHdrLen : 0);
  __atomic_fetch_add(ok ? &tx_control_ : &tx_control_errors_, 1, __ATOMIC_RELAXED);
  return ok;
}

void AfPacketWire::counters(DeviceCounters* out) const {
  if (fd_.valid()) {
    tpacket_stats_v3 st{};
    socklen_t len = sizeof st;
    if (getsockopt(fd_.get(), SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0) {
      kernel_packets_ += st.tp_packets;
      kernel_drops_ += st.tp_drops;
    }
  }
  out->emplace_back("kernel_rx_packets", kernel_packets_);
  out->emplace_back("kernel_rx_dropped", kernel_drops_);
  out->emplace_back("rx_truncated", peek(rx_truncated_));
  out->emplace_back("rx_bad", peek(rx_bad_));
  out->emplace_back("rx_vlan_restored", peek(rx_vlan_restored_));
  out->emplace_back("tx_errors", peek(tx_errors_));
  out->emplace_back("tx_control", peek(tx_control_));
  out->emplace_back("tx_control_errors", peek(tx_control_errors_));
}

}  // namespace vl::wire
