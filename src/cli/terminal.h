#pragma once
// The terminal of a full-screen view (`virtlink top`): plain ANSI escape codes and termios,
// no curses. While a FullScreen lives the terminal reads keys as they are typed (no echo,
// no line editing; Ctrl-C still sends SIGINT, Ctrl-Z is off so that a stopped view cannot
// leave the screen as it is), the view is on the alternate screen with the cursor hidden;
// the destructor puts every setting back, also on the way out after a signal.
#include <termios.h>

#include <string>
#include <vector>

namespace vl::cli {

class FullScreen {
 public:
  /// Takes the terminal on fds 0 (keys) and 1 (the screen). False with `*err` when stdin's
  /// settings cannot be read or set (not a terminal): nothing was changed then.
  bool enter(std::string* err);
  /// Restores the terminal (settings, main screen, cursor) when enter() took it.
  ~FullScreen();

  /// Draws `lines` from the top left, each cut to the window's width and the rest of each
  /// line and of the screen cleared; with more lines than the window has rows the last
  /// row says how many are not shown.
  void draw(const std::vector<std::string>& lines) const;

 private:
  termios saved_{};
  bool entered_ = false;
};

/// Signals a full-screen loop waits for: SIGINT, SIGTERM and SIGHUP (quit), SIGWINCH (the
/// window changed). install() makes their handlers (which only set the flags below) and
/// blocks them; wait_input() unblocks them only while it waits, so none is lost between a
/// look at the flags and the wait.
struct ScreenSignals {
  /// Installs the handlers and blocks the signals in this thread.
  static void install();
  /// The quit signal that came (0: none).
  static int quit_signal();
  /// True once after each SIGWINCH.
  static bool take_resize();
  /// Waits up to `timeout_ms` for input on fd 0 or one of the signals. Returns the bytes
  /// read ("" after a timeout or a signal); sets `*hangup` when fd 0 closed or failed.
  static std::string wait_input(int timeout_ms, bool* hangup);
};

}  // namespace vl::cli
