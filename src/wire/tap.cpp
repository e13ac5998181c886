#include "wire/tap.h"

#include <sys/uio.h>

#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "util/log.h"
#include "wire/netdev.h"

namespace vl::wire {

bool TapWire::open(std::string* err) {
  if (name_.empty() || name_.size() >= IFNAMSIZ) {
    *err = fmt::format("tap '{}': an interface name is 1..{} characters", name_, IFNAMSIZ - 1);
    return false;
  }
  UniqueFd fd(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) {
    *err = fmt::format("tap {}: /dev/net/tun: {}", name_, std::strerror(errno));
    return false;
  }
  ifreq ifr{};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  std::memcpy(ifr.ifr_name, name_.data(), name_.size());
  if (ioctl(fd.get(), TUNSETIFF, &ifr) != 0) {
    *err = fmt::format("tap {}: TUNSETIFF: {}", name_, std::strerror(errno));
    return false;
  }
  int hdr = static_cast<int>(kHdrLen);  // the whole header: frames start where ours do
  if (ioctl(fd.get(), TUNSETVNETHDRSZ, &hdr) != 0) {
    *err = fmt::format("tap {}: TUNSETVNETHDRSZ: {}", name_, std::strerror(errno));
    return false;
  }
  // TUNSETOFFLOAD: what we accept on read (the kernel then sends checksum-offloaded and TSO
  // frames whole); writes may carry them whatever it is.
  info_.offloads = want_offloads_ &&
                   ioctl(fd.get(), TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6) == 0;
  if (!info_.offloads) ioctl(fd.get(), TUNSETOFFLOAD, 0);
  info_.vnet_hdr = true;
  info_.queues = 1;
  info_.rx_interrupts = true;
  if (want_mtu_ && !if_set_mtu(name_, want_mtu_, err)) return false;
  if (!if_set_up(name_, err)) return false;
  const uint32_t mtu = if_mtu(name_);
  info_.mtu = mtu ? mtu : 1500;
  fd_ = std::move(fd);
  return true;
}

// A tap moved into another network namespace is out of our sight (no such interface here):
// its carrier is our open fd.
bool TapWire::link_up() const { return fd_.valid() && (!if_index(name_) || if_running(name_)); }

uint32_t TapWire::recv(uint32_t, Buf* bufs, uint32_t n) {
  uint32_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd_.get(), bufs[got].p, bufs[got].cap);
    if (r < 0) break;  // EAGAIN: nothing more now (EIO, EBADFD: the device went away)
    if (static_cast<size_t>(r) < kHdrLen + 14 || static_cast<size_t>(r) > bufs[got].cap) {
      bump(rx_truncated_);  // cannot happen with buffers of the largest frame; counted if it does
      continue;
    }
    bufs[got++].len = static_cast<uint32_t>(r);
  }
  return got;
}

uint32_t TapWire::send(uint32_t, const Buf* bufs, uint32_t n) {
  uint32_t sent = 0;
  for (uint32_t i = 0; i < n; ++i) {
    // A tap write never blocks (O_NONBLOCK); EIO while the interface is down.
    if (::write(fd_.get(), bufs[i].p, bufs[i].len) == static_cast<ssize_t>(bufs[i].len)) ++sent;
    else {
      bump(tx_errors_);
      VL_LOG_RL(spdlog::level::warn, "tap {}: a frame of {} bytes not sent: {}", name_,
                bufs[i].len - kHdrLen, std::strerror(errno));
    }
  }
  return sent;
}

bool TapWire::send_control(const uint8_t* frame, uint32_t len) {
  if (!fd_.valid()) return false;
  uint8_t hdr[kHdrLen] = {};
  iovec iov[2] = {{hdr, kHdrLen}, {const_cast<uint8_t*>(frame), len}};
  // One write is one frame, whichever thread makes it.
  const bool ok = ::writev(fd_.get(), iov, 2) == static_cast<ssize_t>(kHdrLen + len);
  __atomic_fetch_add(ok ? &tx_control_ : &tx_control_errors_, 1, __ATOMIC_RELAXED);
  return ok;
}

void TapWire::counters(DeviceCounters* out) const {
  out->emplace_back("rx_truncated", peek(rx_truncated_));
  out->emplace_back("tx_errors", peek(tx_errors_));
  out->emplace_back("tx_control", peek(tx_control_));
  out->emplace_back("tx_control_errors", peek(tx_control_errors_));
}

}  // namespace vl::wire
