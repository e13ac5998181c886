#pragma once
// The switch's handlers of its control commands: one named function per row of
// control/command_table.h, which lists the commands, their arguments and help. A handler
// gets its argument strings already checked against its row (count, strings).
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "control/control_server.h"

namespace vl::app {

class Switch;

using CtlArgv = std::vector<std::string>;
/// Fills `*out` (the reply's result) or returns false with `*err`.
using CtlHandler = bool (*)(Switch& sw, const CtlArgv& argv, control::Json* out, std::string* err);

/// A handler whose reply is made in slices (control::ReplyStream): gives the stream or
/// returns false with `*err`.
using CtlStreamHandler = bool (*)(Switch& sw, const CtlArgv& argv,
                                  std::unique_ptr<control::ReplyStream>* out, std::string* err);

/// A handler that keeps the connection after its reply (control::TakeoverHandler).
using CtlTakeoverHandler = bool (*)(Switch& sw, const CtlArgv& argv, control::Json* out,
                                    control::Takeover* take, std::string* err);

struct CtlCommand {
  std::string_view name;  ///< a row of control::switch_commands()
  CtlHandler handler;     ///< or, null, the command's reply is streamed:
  CtlStreamHandler stream = nullptr;
  CtlTakeoverHandler takeover = nullptr;  ///< or its connection is taken over
};

/// One handler per command of control::switch_commands().
std::span<const CtlCommand> ctl_commands();

/// Adds every command of control::switch_commands() to `server`, each with its handler
/// acting on `sw`. False with `*err` when a command has no handler or a handler no command.
bool add_ctl_commands(Switch& sw, control::ControlServer* server, std::string* err);

}  // namespace vl::app
