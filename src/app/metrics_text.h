#pragma once
// The switch's counters in the Prometheus text exposition format (version 0.0.4), made from
// the same JSON views `ctl stats`, `ctl pmd-stats` and `ctl show` answer with, so the
// two never disagree. Names and labels: docs/architecture.md, "Metrics".
#include <string>

#include "control/control_server.h"

namespace vl::app {

/// The body of GET /metrics. `stats`: stats_json(); `pmd_stats`: pmd_stats_json();
/// `show`: show_json() (the switch's version). Every counter of a port carries
/// port="NAME" (and queue="N", reason="...", work="..." where it has them), every
/// counter of a PMD thread pmd="N"; counters end in _total, times are in seconds, sizes
/// in bytes (Prometheus naming conventions). Label values are escaped (\\, \", \n).
/// `exporter`: the endpoint's own counters ({"scrapes": N, ...}: virtlink_metrics_*_total).
std::string metrics_text(const control::Json& stats, const control::Json& pmd_stats,
                         const control::Json& show, const control::Json& exporter = control::Json::object());

/// A label value in the exposition format's escaping (backslash, double quote, newline).
std::string escape_label(const std::string& v);

}  // namespace vl::app
