#include "util/fd_message.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

namespace vl {

namespace {

/// Waits until `sock` is ready for `events`; false with `*err` after `timeout_ms`.
bool wait_for(int sock, short events, int timeout_ms, std::string* err) {
  pollfd p{sock, events, 0};
  for (;;) {
    const int r = poll(&p, 1, timeout_ms);
    if (r > 0) return true;
    if (r == 0) {
      *err = fmt::format("no answer within {} ms", timeout_ms);
      return false;
    }
    if (errno != EINTR) {
      *err = fmt::format("poll: {}", strerror(errno));
      return false;
    }
  }
}

}  // namespace

void attach_fds(msghdr* mh, char* cbuf, const int* fds, size_t nfds) {
  if (!nfds) return;
  mh->msg_control = cbuf;
  mh->msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
  cmsghdr* c = CMSG_FIRSTHDR(mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
  std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
}

bool send_fd_message(int sock, const std::string& bytes, const int* fds, size_t nfds,
                     int timeout_ms, std::string* err) {
  if (bytes.size() > kFdMessageMax || nfds > kFdMessageMaxFds) {
    *err = fmt::format("message of {} bytes and {} fds is too big", bytes.size(), nfds);
    return false;
  }
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  char one = 0;
  if (bytes.empty()) iov = {&one, 1};  // a message needs a byte to carry its fds
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kFdMessageMaxFds)];
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  attach_fds(&mh, cbuf, fds, nfds);
  for (;;) {
    if (!wait_for(sock, POLLOUT, timeout_ms, err)) return false;
    const ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return true;
    if (errno == EAGAIN || errno == EINTR) continue;
    *err = fmt::format("sendmsg: {}", strerror(errno));
    return false;
  }
}

bool recv_fd_message(int sock, int timeout_ms, std::string* bytes, std::vector<UniqueFd>* fds,
                     std::string* err) {
  bytes->assign(kFdMessageMax + 1, '\0');
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kFdMessageMaxFds)];
  for (;;) {
    if (!wait_for(sock, POLLIN, timeout_ms, err)) return false;
    iovec iov{bytes->data(), bytes->size()};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    const ssize_t n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) {
      *err = fmt::format("recvmsg: {}", strerror(errno));
      return false;
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds->emplace_back(fd);
      }
    }
    if (n == 0) {
      *err = "peer closed";
      return false;
    }
    if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
      *err = "message or its fds truncated";
      return false;
    }
    bytes->resize(static_cast<size_t>(n));
    return true;
  }
}

bool send_long_text(int sock, const std::string& text, int timeout_ms, std::string* err) {
  const size_t parts = (text.size() + kFdMessageMax - 1) / kFdMessageMax;
  if (!send_fd_message(sock, fmt::format("parts {} bytes {}", parts, text.size()), nullptr, 0,
                       timeout_ms, err))
    return false;
  for (size_t i = 0; i < parts; ++i)
    if (!send_fd_message(sock, text.substr(i * kFdMessageMax, kFdMessageMax), nullptr, 0,
                         timeout_ms, err))
      return false;
  return true;
}

bool recv_long_text(int sock, int timeout_ms, size_t max_bytes, std::string* text, std::string* err) {
  std::string head;
  std::vector<UniqueFd> none;
  if (!recv_fd_message(sock, timeout_ms, &head, &none, err)) return false;
  unsigned long long parts = 0, bytes = 0;
  if (std::sscanf(head.c_str(), "parts %llu bytes %llu", &parts, &bytes) != 2 || bytes > max_bytes ||
      parts != (bytes + kFdMessageMax - 1) / kFdMessageMax || !none.empty()) {
    *err = fmt::format("bad text header '{}'", head.substr(0, 64));
    return false;
  }
  text->clear();
  for (unsigned long long i = 0; i < parts; ++i) {
    std::string part;
    if (!recv_fd_message(sock, timeout_ms, &part, &none, err)) return false;
    *text += part;
  }
  if (text->size() != bytes || !none.empty()) {
    *err = "text of the wrong length, or with fds";
    return false;
  }
  return true;
}

}  // namespace vl
