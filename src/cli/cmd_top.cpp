// `virtlink top`: a live view of a running switch over its control socket (README "Live
// view"), refreshed every --interval s: per port its state, rates and drops, per PMD thread
// its busy %, cycles per frame and rxqs. The frame is app::top_frame() (app/top_view.h),
// the terminal cli/terminal.h; this file polls and runs the loop.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "app/top_view.h"
#include "cli/commands.h"
#include "cli/terminal.h"
#include "control/command_table.h"
#include "control/control_server.h"
#include "util/clock.h"

namespace vl::cli {

using control::Json;

void add_top_command(CLI::App& app, TopArgs& a) {
  CLI::App* c = app.add_subcommand(
      "top", "Live view of a running switch: port rates and drops, PMD threads' load");
  c->add_option("--control", a.control,
                "control socket of the switch (default /run/virtlink/virtlink.ctl, "
                "$XDG_RUNTIME_DIR/virtlink.ctl when not root: as virtlink ctl)");
  c->add_option("--interval", a.interval_s, "seconds between polls of the switch (0.1 to 3600)")
      ->check(CLI::Range(0.1, 3600.0));
  std::vector<std::string> cols(app::kTopSortColumns.begin(), app::kTopSortColumns.end());
  c->add_option("--sort", a.sort, "column to sort by at start")->check(CLI::IsMember(cols));
  c->add_flag("--once", a.once,
              "print one frame (two polls --interval apart) and exit; also what happens when "
              "stdin or stdout is not a terminal");
  c->footer(
      "Keys: s and S step to the next and previous sort column, 1 to 9 sort by that column "
      "(1 name, 2 state, 3 rx_pps, 4 rx_bps, 5 tx_pps, 6 tx_bps, 7 drops, 8 busy, 9 cycles; "
      "the sorted column's header has a *), r reverses the order, q quits. Ctrl-C quits too "
      "(exit status 0); SIGTERM and SIGHUP restore the terminal and exit with 128 + the "
      "signal. Port rates are the switch's own over its last sample of about 1 s (ctl "
      "stats); busy %, cycles per frame, frames/s and drops/s are over the time between "
      "two polls (ctl pmd-stats, ctl stats). Exit status 1 when the switch does not answer "
      "the first poll.");
}

namespace {

/// Polls the switch at `path` (`ctl stats`, then `ctl pmd-stats`) into `*s`, and says which
/// switch answered in `*who` ("switch PID at PATH"). False with `*err` when either fails;
/// `*s` is then unchanged.
bool poll_switch(const std::string& path, app::TopSample* s, std::string* who, std::string* err) {
  app::TopSample n;
  Json reply;
  // A poll gives up after 5 s (a switch that answers a byte now and then), so the view and
  // its keys come back.
  if (!control::request(path, "stats", Json::object(), &n.stats, err, &reply, 5000)) return false;
  if (!control::request(path, "pmd-stats", Json::object(), &n.pmds, err, nullptr, 5000)) return false;
  n.mono_s = static_cast<double>(mono_ns()) / 1e9;
  *s = std::move(n);
  // (Members of another type are not exceptions: the socket may not be a switch's.)
  const auto sw = reply.find("switch");
  const Json none = Json::object();
  const Json& id = sw != reply.end() && sw->is_object() ? *sw : none;
  const auto pid = id.find("pid");
  const auto ctl = id.find("control");
  *who = fmt::format("switch {} at {}", pid != id.end() && pid->is_number_integer() ? pid->get<int64_t>() : 0,
                     ctl != id.end() && ctl->is_string() ? ctl->get<std::string>() : path);
  return true;
}

/// "switch 1234 at PATH, 12:00:01, every 1 s"
std::string title(const std::string& who, double interval_s) {
  char now[16] = "";
  const time_t t = time(nullptr);
  tm local;
  if (localtime_r(&t, &local)) strftime(now, sizeof now, "%H:%M:%S", &local);
  return fmt::format("{}, {}, every {:g} s", who, now, interval_s);
}

/// Why the first poll failed, on stderr, the way `virtlink ctl` says it.
int unreachable(const std::string& path, const std::string& err) {
  const bool down = err.find("Connection refused") != std::string::npos ||
                    err.find("No such file") != std::string::npos;
  fmt::print(stderr, "virtlink top: {}{}\n", err,
             down ? fmt::format(" (is the switch running with --control {}?)", path) : "");
  return 1;
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

/// --once, or no terminal: two polls an interval apart, one frame on stdout.
int run_once(const TopArgs& a, const std::string& path, app::TopView view) {
  app::TopSample first, second;
  std::string who, err;
  if (!poll_switch(path, &first, &who, &err)) return unreachable(path, err);
  sleep_s(a.interval_s);
  if (!poll_switch(path, &second, &who, &err)) return unreachable(path, err);
  view.title = title(who, a.interval_s);
  for (const std::string& line : app::top_frame(second, &first, view)) fmt::print("{}\n", line);
  return 0;
}

/// Applies the keys in `keys` to `*view`; true when `q` (or Ctrl-C read as a byte) came.
/// An escape sequence (an arrow key, ...) is skipped with the rest of its read.
bool apply_keys(const std::string& keys, app::TopView* view) {
  for (const char k : keys) {
    if (k == 'q' || k == 'Q' || k == 3) return true;
    if (k == 0x1b) break;
    app::top_key(k, view);
  }
  return false;
}

/// The view on the terminal until `q` or a signal. Returns the exit status.
int run_screen(const TopArgs& a, const std::string& path, app::TopView view) {
  app::TopSample cur, prev;
  bool have_prev = false;
  std::string who, err;
  if (!poll_switch(path, &cur, &who, &err)) return unreachable(path, err);
  ScreenSignals::install();
  FullScreen screen;
  if (!screen.enter(&err)) {
    fmt::print(stderr, "virtlink top: {}\n", err);
    return 1;
  }
  double next = cur.mono_s + a.interval_s;
  bool redraw = true;
  while (!ScreenSignals::quit_signal()) {
    if (static_cast<double>(mono_ns()) / 1e9 >= next) {
      app::TopSample s;
      if (poll_switch(path, &s, &who, &err)) {
        prev = std::move(cur);
        cur = std::move(s);
        have_prev = true;
        view.error.clear();
      } else {
        view.error = err;
      }
      next = static_cast<double>(mono_ns()) / 1e9 + a.interval_s;
      redraw = true;
    }
    if (ScreenSignals::take_resize()) redraw = true;
    if (redraw) {
      view.title = title(who, a.interval_s);
      screen.draw(app::top_frame(cur, have_prev ? &prev : nullptr, view));
      redraw = false;
    }
    const double left = next - static_cast<double>(mono_ns()) / 1e9;
    bool hangup = false;
    const std::string keys = ScreenSignals::wait_input(std::max(0, static_cast<int>(std::ceil(left * 1000))), &hangup);
    if (apply_keys(keys, &view) || hangup) return 0;
    redraw = !keys.empty();
  }
  const int sig = ScreenSignals::quit_signal();
  return sig == SIGINT ? 0 : 128 + sig;
}

}  // namespace

int run_top(const TopArgs& a) {
  const std::string path = a.control.empty() ? control::default_control_path() : a.control;
  app::TopView view;
  view.sort = static_cast<size_t>(std::max(0, app::top_sort_index(a.sort)));
  if (a.once || !isatty(0) || !isatty(1)) return run_once(a, path, view);
  return run_screen(a, path, view);
}

}  // namespace vl::cli
