#pragma once
// Unix-domain socket addresses for the vhost-user and control sockets.
#include <sys/un.h>

#include <string>

namespace vl {

/// Fills `*a` for `path`. False with `*err` when the path is empty or does not fit
/// sun_path (107 bytes on Linux).
bool make_unix_addr(const std::string& path, sockaddr_un* a, std::string* err);

}  // namespace vl
