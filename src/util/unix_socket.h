#pragma once
// Unix-domain socket addresses for the vhost-user and control sockets, the owner and group
// names of their files, and the directory a socket file goes into.
#include <sys/types.h>
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

/// A socket file this process bound, known by its identity (device, inode) read right
/// after bind(): its owner and mode are set, and it is removed, only while its path still
/// names that file. The switch runs as root; a file put at the path meanwhile (a symlink to
/// another file, another process's socket) is never chown'ed, chmod'ed or unlinked.
class BoundSocketFile {
 public:
  /// Right after bind() on `path`: records the file. False (errno set) if it is not a
  /// socket.
  bool record(const std::string& path);
  /// chown (-1: unchanged) and chmod of the recorded file, through an O_PATH descriptor of
  /// it (no symlink followed, no window between the check and the change). False with
  /// errno set (ESTALE: the path no longer names the file).
  bool set_access(uint32_t mode, uint32_t uid, uint32_t gid) const;
  /// Unlinks the path if it still names the recorded file, and forgets it.
  void remove();
  bool valid() const { return valid_; }

 private:
  std::string path_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  bool valid_ = false;
};

}  // namespace vl
