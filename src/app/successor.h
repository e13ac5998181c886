#pragma once
// The process `ctl upgrade` starts: which binary may be run, its command line, and its
// start with the hand-over socket as fd 3 (docs/architecture.md "Upgrade").
#include <sys/types.h>

#include <string>
#include <vector>

namespace vl::app {

/// The hand-over socket's fd number in the successor.
inline constexpr int kHandoverFd = 3;

/// The binary to start: `requested` (an absolute path), or (empty) this process's own path,
/// read again from disk (the file a package upgrade put there). Either must be a regular
/// executable file owned by root or this process's user and writable by no one else: a ctl
/// client must not choose, or plant, a program the switch runs. False with `*err`.
bool successor_binary(const std::string& requested, std::string* path, std::string* err);

/// This process's command line (/proc/self/cmdline) with `path` as argv[0], any
/// --handover-fd of its own dropped and `--handover-fd kHandoverFd` appended.
std::vector<std::string> successor_argv(const std::string& path);

/// What became of a successor whose socket failed `when` with `error`: its exit status if
/// it exits within 1 s (reaped), else `when: error`.
std::string successor_gone(pid_t pid, const std::string& when, const std::string& error);

/// Starts `argv` with `child_end` as fd kHandoverFd and no signal blocked. The pid, or -1
/// with `*err`.
pid_t spawn_successor(const std::vector<std::string>& argv, int child_end, std::string* err);

}  // namespace vl::app
