#include "cli/terminal.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

namespace vl::cli {
namespace {

volatile sig_atomic_t g_quit = 0;
volatile sig_atomic_t g_resize = 0;
sigset_t g_unblocked;  // the thread's mask before install(): what wait_input() waits with

void on_quit(int sig) { g_quit = sig; }
void on_resize(int) { g_resize = 1; }

/// Writes all of `s` to fd 1 (a terminal that went away: the rest is dropped).
void write_all(const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = write(1, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// Alternate screen buffer on/off (xterm's 1049, which also saves and restores the cursor),
// cursor hidden/shown, home, clear to the end of the line and of the screen.
constexpr const char* kEnter = "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J";
constexpr const char* kLeave = "\x1b[?25h\x1b[?1049l";

}  // namespace

bool FullScreen::enter(std::string* err) {
  if (tcgetattr(0, &saved_) != 0) {
    *err = fmt::format("stdin is not a terminal: {}", strerror(errno));
    return false;
  }
  termios t = saved_;
  // Keys as typed, no echo; Ctrl-C stays a signal (ISIG), Ctrl-S/Ctrl-Q do not stop the
  // output (IXON), Ctrl-Z does nothing (VSUSP off).
  t.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
  t.c_iflag &= static_cast<tcflag_t>(~(IXON | ICRNL));
  t.c_cc[VMIN] = 1;  // read() only after poll() said a key is there: 0 bytes is end of file
  t.c_cc[VTIME] = 0;
  t.c_cc[VSUSP] = _POSIX_VDISABLE;
  if (tcsetattr(0, TCSAFLUSH, &t) != 0) {
    *err = fmt::format("cannot set the terminal's mode: {}", strerror(errno));
    return false;
  }
  entered_ = true;
  write_all(kEnter);
  return true;
}

FullScreen::~FullScreen() {
  if (!entered_) return;
  write_all(kLeave);
  tcsetattr(0, TCSAFLUSH, &saved_);
}

void FullScreen::draw(const std::vector<std::string>& lines) const {
  winsize ws{};
  size_t rows = 24, cols = 80;
  if (ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) rows = ws.ws_row, cols = ws.ws_col;
  const size_t shown = std::min(lines.size(), rows);
  std::string out = "\x1b[H";
  for (size_t i = 0; i < shown; ++i) {
    std::string line = lines[i];
    if (i + 1 == shown && shown < lines.size())
      line = fmt::format("... {} more line(s): a taller window shows them", lines.size() - shown + 1);
    out += line.substr(0, cols);
    out += "\x1b[K";
    if (i + 1 < shown) out += "\r\n";
  }
  out += "\x1b[J";
  write_all(out);
}

void ScreenSignals::install() {
  struct sigaction sa {};
  sa.sa_handler = on_quit;  // no SA_RESTART: the wait returns at once
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &sa, nullptr);
  sa.sa_handler = on_resize;
  sigaction(SIGWINCH, &sa, nullptr);
  sigset_t block;
  sigemptyset(&block);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGWINCH}) sigaddset(&block, s);
  pthread_sigmask(SIG_BLOCK, &block, &g_unblocked);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGWINCH}) sigdelset(&g_unblocked, s);
}

int ScreenSignals::quit_signal() { return g_quit; }

bool ScreenSignals::take_resize() {
  const bool r = g_resize;
  g_resize = 0;
  return r;
}

std::string ScreenSignals::wait_input(int timeout_ms, bool* hangup) {
  if (g_quit || g_resize) return "";
  pollfd p{0, POLLIN, 0};
  const timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  if (ppoll(&p, 1, &ts, &g_unblocked) <= 0) return "";  // timeout, or a signal (EINTR)
  if (!(p.revents & POLLIN)) {
    *hangup = (p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
    return "";
  }
  char buf[64];
  const ssize_t n = read(0, buf, sizeof buf);
  if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) *hangup = true;
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

}  // namespace vl::cli
