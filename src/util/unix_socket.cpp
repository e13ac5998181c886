#include "util/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

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

bool clear_stale_socket(const std::string& path, const sockaddr_un& a, const char* what,
                        std::string* err) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return true;  // nothing there
  if (!S_ISSOCK(st.st_mode)) {
    *err = fmt::format("{} exists and is not a socket", path);
    return false;
  }
  // A live process answers on it; a stale file from a crashed one does not.
  const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool live =
      probe >= 0 && connect(probe, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
  if (probe >= 0) close(probe);
  if (live) {
    *err = fmt::format("another process is listening on the {} {}", what, path);
    return false;
  }
  unlink(path.c_str());
  return true;
}

}  // namespace vl
