#pragma once
// Unix-domain socket addresses for the vhost-user and control sockets.
#include <sys/un.h>

#include <string>

namespace vl {

/// Fills `*a` for `path`. False with `*err` when the path is empty or does not fit
/// sun_path (107 bytes on Linux).
bool make_unix_addr(const std::string& path, sockaddr_un* a, std::string* err);

/// Before listening on `path` (address `a`): removes a stale socket file left by a process
/// that died. False with `*err` when `path` exists and is not a socket, or when a process
/// still accepts connections on it (a second switch must not take over, and later remove,
/// a socket a running one serves). `what` names the socket in the message.
bool clear_stale_socket(const std::string& path, const sockaddr_un& a, const char* what,
                        std::string* err);

}  // namespace vl
