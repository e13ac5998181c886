#include "wire/netdev.h"

#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "util/fd.h"

namespace vl::wire {

namespace {
/// ioctl `req` on `name`; `keep`: ifr holds the request's data already (a set).
bool ifreq_ioctl(const std::string& name, unsigned long req, ifreq* ifr, bool keep = false) {
  if (name.empty() || name.size() >= IFNAMSIZ) return false;
  UniqueFd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return false;
  if (!keep) std::memset(ifr, 0, sizeof *ifr);
  std::memcpy(ifr->ifr_name, name.data(), name.size());
  ifr->ifr_name[name.size()] = 0;
  return ioctl(s.get(), req, ifr) == 0;
}
}  // namespace

uint32_t if_index(const std::string& name) {
  ifreq ifr;
  return ifreq_ioctl(name, SIOCGIFINDEX, &ifr) ? static_cast<uint32_t>(ifr.ifr_ifindex) : 0;
}

uint32_t if_mtu(const std::string& name) {
  ifreq ifr;
  return ifreq_ioctl(name, SIOCGIFMTU, &ifr) ? static_cast<uint32_t>(ifr.ifr_mtu) : 0;
}

bool if_running(const std::string& name) {
  ifreq ifr;
  return ifreq_ioctl(name, SIOCGIFFLAGS, &ifr) && (ifr.ifr_flags & IFF_UP) &&
         (ifr.ifr_flags & IFF_RUNNING);
}

bool if_set_mtu(const std::string& name, uint32_t mtu, std::string* err) {
  ifreq ifr{};
  ifr.ifr_mtu = static_cast<int>(mtu);
  if (!ifreq_ioctl(name, SIOCSIFMTU, &ifr, true)) {
    *err = fmt::format("interface {}: cannot set MTU {}: {}", name, mtu, std::strerror(errno));
    return false;
  }
  return true;
}

bool if_set_up(const std::string& name, std::string* err) {
  ifreq ifr;
  if (!ifreq_ioctl(name, SIOCGIFFLAGS, &ifr)) {
    *err = fmt::format("interface {}: {}", name, std::strerror(errno));
    return false;
  }
  if (ifr.ifr_flags & IFF_UP) return true;
  ifr.ifr_flags |= IFF_UP;
  if (!ifreq_ioctl(name, SIOCSIFFLAGS, &ifr, true)) {
    *err = fmt::format("interface {}: cannot set it up: {}", name, std::strerror(errno));
    return false;
  }
  return true;
}

int open_send_socket(uint32_t ifindex, std::string* err) {
  UniqueFd fd(socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    *err = fmt::format("packet socket: {}", std::strerror(errno));
    return -1;
  }
  sockaddr_ll a{};
  a.sll_family = AF_PACKET;
  a.sll_ifindex = static_cast<int>(ifindex);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    *err = fmt::format("packet socket: bind to interface {}: {}", ifindex, std::strerror(errno));
    return -1;
  }
  return fd.release();
}

}  // namespace vl::wire
