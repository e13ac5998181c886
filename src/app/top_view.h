#pragma once
// The frame of `virtlink top` (README "Live view", docs/architecture.md "Live view"): a
// pure function from two polls of a running switch (`ctl stats` and `ctl pmd-stats`
// results) to lines of text, and the keys that change the view. No terminal here: the CLI
// (cli/cmd_top.cpp) draws the lines and reads the keys; tests feed JSON in and read lines.
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "control/control_server.h"

namespace vl::app {

/// One poll of the switch.
struct TopSample {
  control::Json stats;  ///< `ctl stats` result: {"ports": [...], "rates": {...}}
  control::Json pmds;   ///< `ctl pmd-stats` result: [{pmd, cpu, busy_cycles, ...}]
  double mono_s = 0;    ///< when the replies came (CLOCK_MONOTONIC, s)
};

/// The columns the view sorts by, in the order `s` steps through them; digit key N picks
/// the Nth. name and state sort A to Z, the others largest first (`r` turns either round).
/// busy and cycles sort the PMD threads (the ports then by name); the others sort the ports
/// (the PMD threads then by index).
inline constexpr std::array<std::string_view, 9> kTopSortColumns = {
    "name", "state", "rx_pps", "rx_bps", "tx_pps", "tx_bps", "drops", "busy", "cycles"};

/// What the user chose and what the frame says around the figures.
struct TopView {
  size_t sort = 2;       ///< index into kTopSortColumns (default rx_pps)
  bool reverse = false;  ///< the other order than the column's own
  std::string title;     ///< first line, e.g. "switch 1234 at /run/virtlink/virtlink.ctl, 12:00:01"
  std::string error;     ///< the last poll's failure ("" when it answered), shown in the frame
};

/// Index of column `name` in kTopSortColumns, or -1 when there is none of that name.
int top_sort_index(std::string_view name);

/// Applies key `k`: `s` next sort column, `S` previous, `1`..`9` that column, `r` reverse
/// the order. Returns false (the view unchanged) for any other key.
bool top_key(char k, TopView* v);

/// The help line the frame shows (the keys above, and `q`).
std::string top_help_line();

/// The lines of one frame (plain text, no escape codes; the caller cuts them to its
/// terminal). Ports: name, state, rx/tx packets and bits per second over the switch's
/// own last sampling interval (about 1 s), drops in total, drops per second, and a line of
/// the reasons that are not 0. PMD threads: busy % of their cycles, cycles per frame,
/// frames per second, and each rxq (port/queue) with its frames per second and share of
/// the thread's cycles. Those PMD figures and the drops per second are over the time from
/// `prev` to `cur` (`prev` null, or a thread or port not in it, or counters that went back:
/// since the switch started or its counters were cleared, and "-" where no rate is known).
std::vector<std::string> top_frame(const TopSample& cur, const TopSample* prev, const TopView& v);

/// A rate with an SI prefix: "0", "950", "12.3k", "1.49M", "9.87G".
std::string top_si(double v);

}  // namespace vl::app
