#include "vhost/channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "util/fd_message.h"

namespace vl::vhost {

namespace {

/// Most fds the kernel passes with one sendmsg (SCM_MAX_FD). read() makes room for all of
/// them: fds that do not fit the control buffer are closed by the kernel itself, in this
/// thread, before we could make their close harmless (see untrusted_fd_is_socket).
constexpr size_t kMaxScmFds = 253;

/// True if a front-end's fd is a socket, after making its close unable to block. No
/// request virtlink serves carries a socket, and a socket is the kind of fd whose close()
/// can wait: a TCP socket with SO_LINGER and unsent data makes close() wait up to the
/// linger time the sender chose (seconds to years) - on the control thread, stopping every
/// port's control plane, `ctl`, and SIGTERM handling. Lingering is turned off here, and the
/// caller closes the socket at once and fails the connection, so no socket is ever kept.
bool untrusted_fd_is_socket(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  const linger off{0, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, sizeof off);
  return true;
}

}  // namespace

ReadStatus Channel::read(std::string* err) {
  if (failed_) {  // framing is lost after an error: never read on into msg_
    *err = "connection already failed";
    return ReadStatus::kError;
  }
  if (have_ == sizeof(MsgHeader) + msg_.hdr.size && have_ != 0) {
    have_ = 0;  // the previous message was consumed
  }
  if (have_ == 0) msg_.close_fds();
  for (;;) {
    const bool in_header = have_ < sizeof(MsgHeader);
    uint8_t* dst;
    size_t want;
    if (in_header) {
      dst = reinterpret_cast<uint8_t*>(&msg_.hdr) + have_;
      want = sizeof(MsgHeader) - have_;
    } else {
      const uint32_t got = have_ - sizeof(MsgHeader);
      dst = msg_.payload + got;
      want = msg_.hdr.size - got;
    }
    if (want == 0) return ReadStatus::kMessage;

    iovec iov{dst, want};
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxScmFds)];
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    const ssize_t n = recvmsg(sock_.get(), &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return ReadStatus::kAgain;
      if (errno == EINTR) continue;
      *err = fmt::format("recvmsg: {}", strerror(errno));
      failed_ = true;
      return ReadStatus::kError;
    }
    // Take ownership of every fd first, so none leaks whatever happens next.
    bool too_many = (mh.msg_flags & MSG_CTRUNC) != 0;
    bool socket_fd = false;
    for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const int* fds = reinterpret_cast<const int*>(CMSG_DATA(c));
      for (size_t i = 0; i < k; ++i) {
        int fd;
        std::memcpy(&fd, fds + i, sizeof fd);
        if (!accept_sockets_ && untrusted_fd_is_socket(fd)) {
          ::close(fd);
          socket_fd = true;
        } else if (msg_.nfds < kMaxFds) {
          msg_.fds[msg_.nfds++].reset(fd);
        } else {
          ::close(fd);
          too_many = true;
        }
      }
    }
    if (n == 0) {
      if (have_ == 0) return ReadStatus::kClosed;
      *err = "peer closed the socket in the middle of a message";
      failed_ = true;
      return ReadStatus::kError;
    }
    if (too_many || socket_fd) {
      *err = socket_fd ? std::string("a socket passed as an fd")
                       : fmt::format("more than {} fds on one message", kMaxFds);
      msg_.close_fds();
      failed_ = true;
      return ReadStatus::kError;
    }
    have_ += static_cast<uint32_t>(n);
    if (in_header && have_ == sizeof(MsgHeader) && msg_.hdr.size > kMaxPayload) {
      *err = fmt::format("payload size {} over the {} byte limit", msg_.hdr.size, kMaxPayload);
      msg_.close_fds();
      failed_ = true;
      return ReadStatus::kError;
    }
  }
}

ReadStatus Channel::read_wait(int timeout_ms, std::string* err) {
  for (;;) {
    ReadStatus st = read(err);
    if (st != ReadStatus::kAgain) return st;
    pollfd p{sock_.get(), POLLIN, 0};
    const int r = poll(&p, 1, timeout_ms);
    if (r == 0) {
      *err = "timed out waiting for a reply";
      return ReadStatus::kAgain;
    }
    if (r < 0 && errno != EINTR) {
      *err = fmt::format("poll: {}", strerror(errno));
      return ReadStatus::kError;
    }
  }
}

bool Channel::send(uint32_t request, uint32_t flags, const void* payload, uint32_t size,
                   const int* fds, uint32_t nfds) {
  if (size > kMaxPayload || nfds > kMaxFds) return false;
  MsgHeader h{request, flags, size};
  iovec iov[2] = {{&h, sizeof h}, {const_cast<void*>(payload), size}};
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msghdr mh{};
  mh.msg_iov = iov;
  mh.msg_iovlen = size ? 2 : 1;
  attach_fds(&mh, cbuf, fds, nfds);
  size_t total = sizeof h + size;
  size_t sent = 0;
  while (sent < total) {
    const ssize_t n = sendmsg(sock_.get(), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        pollfd p{sock_.get(), POLLOUT, 0};
        if (send_timeout_ms_ <= 0 || poll(&p, 1, send_timeout_ms_) <= 0) return false;
        continue;
      }
      return false;
    }
    sent += static_cast<size_t>(n);
    if (sent == total) break;
    // Partial write: resend the rest without fds.
    mh.msg_control = nullptr;
    mh.msg_controllen = 0;
    size_t skip = static_cast<size_t>(n);
    while (mh.msg_iovlen && skip >= mh.msg_iov[0].iov_len) {
      skip -= mh.msg_iov[0].iov_len;
      ++mh.msg_iov;
      --mh.msg_iovlen;
    }
    if (mh.msg_iovlen) {
      mh.msg_iov[0].iov_base = static_cast<char*>(mh.msg_iov[0].iov_base) + skip;
      mh.msg_iov[0].iov_len -= skip;
    }
  }
  return true;
}

}  // namespace vl::vhost
