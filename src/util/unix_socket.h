#pragma once
// Unix-domain socket addresses for the vhost-user and control sockets, the owner and group
// names of their files, and the directory a socket file goes into.
#include <sys/un.h>

#include <cstdint>
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

/// A user id (group = false) or group id (group = true) from a name or a decimal number.
/// False when the name is not known on this host (getpwnam/getgrnam).
bool resolve_id(const std::string& s, bool group, uint32_t* id);

/// "" when the directory `path` goes into exists (a relative path with no directory: the
/// working directory), else the error for a socket `what` at `path` ("control socket
/// /x/y.ctl: directory /x does not exist"): a socket file is never given a directory of
/// its own making, which nobody would remove.
std::string missing_socket_dir(const std::string& path, const char* what);

}  // namespace vl
