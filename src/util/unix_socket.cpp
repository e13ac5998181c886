#include "util/unix_socket.h"

#include <sys/socket.h>

#include <cstring>

#include <fmt/format.h>

namespace vl {

bool make_unix_addr(const std::string& path, sockaddr_un* a, std::string* err) {
  if (path.empty() || path.size() >= sizeof(a->sun_path)) {
    *err = fmt::format("socket path '{}' is empty or longer than {} bytes", path,
                       sizeof(a->sun_path) - 1);
    return false;
  }
  std::memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  std::memcpy(a->sun_path, path.data(), path.size());
  return true;
}

}  // namespace vl
