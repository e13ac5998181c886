#pragma once
// Messages with fds (SCM_RIGHTS) over a SOCK_SEQPACKET socket: the hand-over between a
// running switch and its successor (`ctl upgrade`, docs/architecture.md "Upgrade").
#include <sys/socket.h>

#include <cstddef>
#include <string>
#include <vector>

#include "util/fd.h"

namespace vl {

/// Largest payload of one message (bytes); a longer text is sent as several.
inline constexpr size_t kFdMessageMax = 60 * 1024;
/// Most fds sent with one message (below the kernel's SCM_MAX_FD, 253).
inline constexpr size_t kFdMessageMaxFds = 200;

/// Puts `nfds` fds into `mh` as one SCM_RIGHTS message, in `cbuf` (room for them:
/// CMSG_SPACE(sizeof(int) * nfds) bytes, aligned for cmsghdr). nfds 0: no control data.
void attach_fds(msghdr* mh, char* cbuf, const int* fds, size_t nfds);

/// Sends `bytes` (at most kFdMessageMax) with `nfds` fds (at most kFdMessageMaxFds; the
/// caller keeps its own). Blocks up to `timeout_ms` for room. False with `*err`.
bool send_fd_message(int sock, const std::string& bytes, const int* fds, size_t nfds,
                     int timeout_ms, std::string* err);

/// Receives one message into `*bytes`, appending its fds to `*fds` (close-on-exec). Waits up
/// to `timeout_ms`. False with `*err` on timeout, a closed peer ("peer closed"), a truncated
/// message or truncated fds.
bool recv_fd_message(int sock, int timeout_ms, std::string* bytes, std::vector<UniqueFd>* fds,
                     std::string* err);

/// A text of any length as messages of kFdMessageMax: a count line, then the parts.
bool send_long_text(int sock, const std::string& text, int timeout_ms, std::string* err);
/// The text send_long_text sent; at most `max_bytes` of it (more is refused).
bool recv_long_text(int sock, int timeout_ms, size_t max_bytes, std::string* text, std::string* err);

}  // namespace vl
