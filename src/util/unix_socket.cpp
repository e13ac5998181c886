#include "util/unix_socket.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "util/fd.h"

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

bool resolve_id(const std::string& s, bool group, uint32_t* id) {
  if (!s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos) {
    *id = static_cast<uint32_t>(std::stoul(s));
    return true;
  }
  if (group) {
    const struct group* g = getgrnam(s.c_str());
    if (!g) return false;
    *id = g->gr_gid;
  } else {
    const struct passwd* p = getpwnam(s.c_str());
    if (!p) return false;
    *id = p->pw_uid;
  }
  return true;
}

std::string missing_socket_dir(const std::string& path, const char* what) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) return "";
  struct stat st;
  const bool found = stat(dir.c_str(), &st) == 0;
  if (found && S_ISDIR(st.st_mode)) return "";
  return fmt::format("{} {}: directory {} {}", what, path, dir.string(),
                     found             ? "is not a directory"
                     : errno == ENOENT ? "does not exist (create it first)"
                                       : strerror(errno));
}

bool BoundSocketFile::record(const std::string& path) {
  struct stat st;
  valid_ = false;
  if (lstat(path.c_str(), &st) != 0) return false;
  if (!S_ISSOCK(st.st_mode)) {
    errno = ESTALE;
    return false;
  }
  path_ = path;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  valid_ = true;
  return true;
}

bool BoundSocketFile::set_access(uint32_t mode, uint32_t uid, uint32_t gid) const {
  if (!valid_) {
    errno = ESTALE;
    return false;
  }
  const UniqueFd f(open(path_.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  struct stat st;
  if (!f.valid() || fstat(f.get(), &st) != 0) return false;
  if (!S_ISSOCK(st.st_mode) || st.st_dev != dev_ || st.st_ino != ino_) {
    errno = ESTALE;
    return false;
  }
  if ((uid != static_cast<uint32_t>(-1) || gid != static_cast<uint32_t>(-1)) &&
      fchownat(f.get(), "", uid, gid, AT_EMPTY_PATH) != 0)
    return false;
  // chmod of an O_PATH descriptor's file: through its /proc link, which names the inode
  // itself (as glibc's fchmodat(AT_SYMLINK_NOFOLLOW) does).
  const std::string proc = fmt::format("/proc/self/fd/{}", f.get());
  return chmod(proc.c_str(), mode) == 0;
}

void BoundSocketFile::remove() {
  struct stat st;
  if (valid_ && lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_)
    unlink(path_.c_str());
  valid_ = false;
}

}  // namespace vl
