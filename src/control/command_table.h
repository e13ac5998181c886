#pragma once
// The switch's control commands as the control socket and `virtlink ctl` know them: one row
// per command with its name, its arguments and a line of help (INTERFACES.md: commands and
// their replies are extended, never renamed). The switch gives each row its handler
// (app/ctl_commands.h), ControlServer checks a request's arguments against the row before
// the handler runs, and `virtlink ctl` takes its help and its own argument check from here.
// Also what the switch and `virtlink ctl` share besides: the default socket path and the
// length of a `ctl fdb` listing.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "control/control_server.h"

namespace vl::control {

/// One control command. Its arguments travel as {"argv": [strings]} in the request's args
/// (no argv: no arguments); `virtlink ctl NAME ARG...` sends them so.
struct CommandSpec {
  std::string_view name;
  std::string_view args;  ///< synopsis, e.g. "[PORT] [all]", "PORT|all POLICY"; empty: none
  uint32_t min_args = 0;  ///< strings argv must hold
  uint32_t max_args = 0;
  /// The error for arguments that do not fit (their count, or one that is not a string);
  /// empty: "usage: NAME ARGS" ("usage: NAME (takes no arguments)" for none).
  std::string_view bad_args;
  std::string_view help;  ///< one line
};

/// Every command the switch serves, in the order `virtlink ctl --help` lists them.
std::span<const CommandSpec> switch_commands();
/// The row of switch_commands() named `name`, or nullptr.
const CommandSpec* find_command(std::string_view name);

/// The commands with their arguments on one line: "stats | ports | fdb [PORT] [all] | ...".
std::string command_synopsis();
/// One line per command: "  NAME ARGS", padded to a column, then its help.
std::string command_help();

/// The error for a request whose arguments do not fit `spec` (CommandSpec::bad_args).
std::string usage_error(const CommandSpec& spec);
/// Takes the argument strings of a request's `args` (its "argv") into `*argv`. False with
/// usage_error(spec) in `*err` when argv is not an array of strings or holds fewer than
/// min_args or more than max_args.
bool check_args(const CommandSpec& spec, const Json& args, std::vector<std::string>* argv,
                std::string* err);

/// `ctl fdb` lists at most this many MAC table entries unless given "all": a table of a
/// million MACs takes seconds to serialise on the control thread, which also serves
/// vhost-user.
inline constexpr size_t kFdbShown = 1000;

/// The control socket when --control (or the TOML key control) is not given:
/// /run/virtlink/virtlink.ctl for root, $XDG_RUNTIME_DIR/virtlink.ctl otherwise (falling
/// back to /tmp/virtlink-UID.ctl).
std::string default_control_path();

}  // namespace vl::control
