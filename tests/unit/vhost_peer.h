#pragma once
// A raw vhost-user front-end for tests: writes arbitrary bytes and fds on one end of a
// socketpair and reads replies, with no validation of its own (so that hostile messages
// can be sent). Also counts this process's open fds for the leak tests.
#include <dirent.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "util/fd.h"
#include "vhost/protocol.h"

namespace vl::test {

/// Open fds of this process (entries of /proc/self/fd, not counting the directory's own).
inline int count_open_fds() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n - 1;
}

/// Creates a connected AF_UNIX stream pair: [0] for the code under test, [1] for the peer.
inline bool make_socketpair(UniqueFd* ours, UniqueFd* peer) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0) return false;
  ours->reset(sv[0]);
  peer->reset(sv[1]);
  return true;
}

struct Reply {
  vhost::MsgHeader hdr{};
  std::vector<uint8_t> payload;
  uint64_t u64() const {
    uint64_t v = ~0ull;
    if (payload.size() == 8) std::memcpy(&v, payload.data(), 8);
    return v;
  }
};

class RawPeer {
 public:
  explicit RawPeer(UniqueFd fd) : fd_(std::move(fd)) {}
  int fd() const { return fd_.get(); }
  void close() { fd_.reset(); }

  /// Sends raw bytes with optional fds in one sendmsg. Returns false on error.
  bool send_bytes(const void* data, size_t len, const int* fds = nullptr, size_t nfds = 0) {
    iovec iov{const_cast<void*>(data), len};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    std::vector<char> cbuf;
    if (nfds) {
      cbuf.resize(CMSG_SPACE(sizeof(int) * nfds));
      mh.msg_control = cbuf.data();
      mh.msg_controllen = cbuf.size();
      cmsghdr* c = CMSG_FIRSTHDR(&mh);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
      std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    const ssize_t n = sendmsg(fd_.get(), &mh, MSG_NOSIGNAL);
    return n == static_cast<ssize_t>(len);
  }

  /// Sends header + payload, with `size` as the header's size field (defaults to the real
  /// payload length: pass another value to lie about it).
  bool send(uint32_t request, uint32_t flags, const void* payload, size_t len,
            std::vector<int> fds = {}, std::optional<uint32_t> size = {}) {
    std::vector<uint8_t> b(sizeof(vhost::MsgHeader) + len);
    const vhost::MsgHeader h{request, flags, size.value_or(static_cast<uint32_t>(len))};
    std::memcpy(b.data(), &h, sizeof h);
    if (len) std::memcpy(b.data() + sizeof h, payload, len);
    return send_bytes(b.data(), b.size(), fds.data(), fds.size());
  }
  bool send_u64(vhost::Req r, uint64_t v, uint32_t flags = vhost::kVersion, std::vector<int> fds = {}) {
    return send(static_cast<uint32_t>(r), flags, &v, 8, std::move(fds));
  }
  template <typename T>
  bool send_struct(vhost::Req r, const T& v, uint32_t flags = vhost::kVersion, std::vector<int> fds = {}) {
    return send(static_cast<uint32_t>(r), flags, &v, sizeof v, std::move(fds));
  }
  bool send_empty(vhost::Req r, uint32_t flags = vhost::kVersion) {
    return send(static_cast<uint32_t>(r), flags, nullptr, 0);
  }

  /// Reads one whole reply (waits up to `timeout_ms` for each part). nullopt on timeout,
  /// close or a malformed reply.
  std::optional<Reply> recv(int timeout_ms = 1000) {
    Reply r;
    if (!read_full(&r.hdr, sizeof r.hdr, timeout_ms)) return std::nullopt;
    if (r.hdr.size > vhost::kMaxPayload) return std::nullopt;
    r.payload.resize(r.hdr.size);
    if (r.hdr.size && !read_full(r.payload.data(), r.hdr.size, timeout_ms)) return std::nullopt;
    return r;
  }
  /// True if nothing is waiting to be read (no reply was sent).
  bool nothing_to_read() {
    pollfd p{fd_.get(), POLLIN, 0};
    return poll(&p, 1, 0) == 0;
  }
  /// True if the other end closed (reads EOF).
  bool peer_closed(int timeout_ms = 1000) {
    pollfd p{fd_.get(), POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    char c;
    return ::recv(fd_.get(), &c, 1, MSG_DONTWAIT | MSG_PEEK) == 0;
  }

 private:
  bool read_full(void* dst, size_t len, int timeout_ms) {
    size_t got = 0;
    while (got < len) {
      pollfd p{fd_.get(), POLLIN, 0};
      if (poll(&p, 1, timeout_ms) <= 0) return false;
      const ssize_t n = ::recv(fd_.get(), static_cast<char*>(dst) + got, len - got, MSG_DONTWAIT);
      if (n <= 0) return false;
      got += static_cast<size_t>(n);
    }
    return true;
  }
  UniqueFd fd_;
};

}  // namespace vl::test
