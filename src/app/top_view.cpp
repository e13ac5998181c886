#include "app/top_view.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>

#include <fmt/format.h>

namespace vl::app {
namespace {

using control::Json;

constexpr size_t kColumns = kTopSortColumns.size();
constexpr size_t kSortBusy = 7, kSortCycles = 8;

/// Member `k` of object `o` as a number, 0 when absent or not a number.
double num(const Json& o, const char* k) {
  if (!o.is_object()) return 0;
  const auto it = o.find(k);
  return it != o.end() && it->is_number() ? it->get<double>() : 0;
}
/// `v` as an integer, clamped (a number out of int64_t's range is not undefined behaviour).
int64_t whole(double v) { return v >= -9.2e18 && v <= 9.2e18 ? static_cast<int64_t>(v) : 0; }
uint64_t count(const Json& o, const char* k) {
  if (!o.is_object()) return 0;
  const auto it = o.find(k);
  return it != o.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}
std::string text(const Json& o, const char* k, const char* dflt = "?") {
  if (!o.is_object()) return dflt;
  const auto it = o.find(k);
  return it != o.end() && it->is_string() ? it->get<std::string>() : std::string(dflt);
}
/// Array member `k` of `o` (an empty array when absent).
const Json& list(const Json& o, const char* k) {
  static const Json kEmpty = Json::array();
  if (!o.is_object()) return kEmpty;
  const auto it = o.find(k);
  return it != o.end() && it->is_array() ? *it : kEmpty;
}

/// One port's line (and its drop reasons' line).
struct PortRow {
  std::string name, state;
  double rx_pps = 0, rx_bps = 0, tx_pps = 0, tx_bps = 0;
  uint64_t drops = 0;
  double drop_rate = -1;  ///< drops per second between the polls; -1: unknown
  std::string reasons;    ///< "no_rx_buffer 12 (3/s), too_big 1": the reasons not 0
};

/// One PMD thread's line.
struct PmdRow {
  int64_t pmd = 0;
  std::string cpu, mode;
  double busy_pct = 0;
  double cycles_per_frame = -1;  ///< TSC cycles of busy passes per frame; -1: no frame
  double fps = -1;               ///< frames per second between the polls; -1: unknown
  std::string rxqs;              ///< "a/0 (1.49M/s, 99%)  b/0 (0/s, 1%)"
};

/// The drop reasons of port `p` that are not 0, with their rates from `before` (null: none)
/// over `dt` s; sets the row's total and rate.
void port_drops(const Json& p, const Json* before, double dt, PortRow* r) {
  const Json drops = p.is_object() ? p.value("drops", Json::object()) : Json::object();
  const Json was_drops =
      before && before->is_object() ? before->value("drops", Json::object()) : Json::object();
  bool rate_known = before != nullptr && dt > 0;
  uint64_t total = 0, total_before = 0;
  for (const auto& [k, v] : drops.items()) {
    const uint64_t n = v.is_number_unsigned() ? v.get<uint64_t>() : 0;
    total += n;
    const uint64_t was = count(was_drops, k.c_str());
    total_before += was;
    if (n < was) rate_known = false;  // cleared (ctl stats-clear) between the polls
    if (!n) continue;
    r->reasons += fmt::format("{}{} {}", r->reasons.empty() ? "" : ", ", k, n);
    if (before && dt > 0 && n >= was) r->reasons += fmt::format(" ({}/s)", top_si((n - was) / dt));
  }
  r->drops = total;
  if (rate_known && total >= total_before) r->drop_rate = (total - total_before) / dt;
}

std::vector<PortRow> port_rows(const TopSample& cur, const TopSample* prev) {
  std::map<std::string, const Json*> before;
  if (prev)
    for (const auto& p : list(prev->stats, "ports")) before[text(p, "name")] = &p;
  const double dt = prev ? cur.mono_s - prev->mono_s : 0;
  std::vector<PortRow> rows;
  for (const auto& p : list(cur.stats, "ports")) {
    PortRow r;
    r.name = text(p, "name");
    r.state = text(p, "state");
    r.rx_pps = num(p, "rx_pps");
    r.rx_bps = num(p, "rx_bps");
    r.tx_pps = num(p, "tx_pps");
    r.tx_bps = num(p, "tx_bps");
    const auto it = before.find(r.name);
    port_drops(p, it == before.end() ? nullptr : it->second, dt, &r);
    rows.push_back(std::move(r));
  }
  return rows;
}

/// The rxqs of thread `t` with their frames per second and shares of the thread's cycles
/// between the polls (`b`: the same thread in the poll before, null when none), else
/// since the start (the switch's cycles_share, no rate).
std::string rxq_text(const Json& t, const Json* b, double dt) {
  struct Q {
    std::string name;
    double pkts, cycles, share;
  };
  std::vector<Q> qs;
  bool delta = b != nullptr && dt > 0;
  double total = 0;
  for (const auto& q : list(t, "rxq_loads")) {
    Q x{fmt::format("{}/{}", text(q, "port"), whole(num(q, "queue"))), -1, 0,
        num(q, "cycles_share")};
    const Json* was = nullptr;
    if (b)
      for (const auto& o : list(*b, "rxq_loads"))
        if (text(o, "port") == text(q, "port") && num(o, "queue") == num(q, "queue")) was = &o;
    if (!was || count(q, "packets") < count(*was, "packets") || count(q, "cycles") < count(*was, "cycles"))
      delta = false;
    else {
      x.pkts = static_cast<double>(count(q, "packets") - count(*was, "packets"));
      x.cycles = static_cast<double>(count(q, "cycles") - count(*was, "cycles"));
      total += x.cycles;
    }
    qs.push_back(std::move(x));
  }
  std::string out;
  for (const Q& q : qs) {
    const double share = delta ? (total > 0 ? q.cycles / total : 0) : q.share;
    out += fmt::format("{}{} ({}/s, {:.0f}%)", out.empty() ? "" : "  ", q.name,
                       delta ? top_si(q.pkts / dt) : std::string("-"), 100 * share);
  }
  return out.empty() ? "(no rxqs)" : out;
}

/// Thread `t`'s line: figures between `b` (the same thread in the poll before) and `t`
/// over `dt` s, or the switch's own since-start figures when there is no usable `b`.
PmdRow pmd_row(const Json& t, const Json* b, double dt) {
  PmdRow r;
  r.pmd = whole(num(t, "pmd"));
  const int64_t cpu = t.is_object() && t.contains("cpu") && t["cpu"].is_number() ? whole(num(t, "cpu")) : -1;
  r.cpu = cpu >= 0 ? std::to_string(cpu) : "any";
  r.mode = text(t, "mode");
  const char* keys[] = {"busy_cycles", "elapsed_cycles", "packets"};
  bool delta = b != nullptr && dt > 0;
  for (const char* k : keys) delta = delta && count(t, k) >= count(*b, k);
  if (delta && count(t, "elapsed_cycles") > count(*b, "elapsed_cycles")) {
    const double busy = static_cast<double>(count(t, "busy_cycles") - count(*b, "busy_cycles"));
    const double elapsed = static_cast<double>(count(t, "elapsed_cycles") - count(*b, "elapsed_cycles"));
    const double pkts = static_cast<double>(count(t, "packets") - count(*b, "packets"));
    r.busy_pct = 100 * busy / elapsed;
    r.cycles_per_frame = pkts > 0 ? busy / pkts : -1;
    r.fps = pkts / dt;
  } else {
    r.busy_pct = num(t, "busy_pct");
    r.cycles_per_frame = count(t, "packets") ? num(t, "cycles_per_packet") : -1;
  }
  r.rxqs = rxq_text(t, delta ? b : nullptr, dt);
  return r;
}

std::vector<PmdRow> pmd_rows(const TopSample& cur, const TopSample* prev) {
  const double dt = prev ? cur.mono_s - prev->mono_s : 0;
  std::vector<PmdRow> rows;
  const Json& threads = cur.pmds.is_array() ? cur.pmds : Json::array();
  for (const auto& t : threads) {
    const Json* b = nullptr;
    if (prev && prev->pmds.is_array())
      for (const auto& o : prev->pmds)
        if (num(o, "pmd") == num(t, "pmd")) b = &o;
    rows.push_back(pmd_row(t, b, dt));
  }
  return rows;
}

/// -1, 0, 1: a before, level with, after b in `col`'s own order (A to Z, largest first).
int port_order(const PortRow& a, const PortRow& b, size_t col) {
  const auto desc = [](double x, double y) { return x > y ? -1 : (x < y ? 1 : 0); };
  switch (col) {
    case 0: return a.name.compare(b.name) < 0 ? -1 : (a.name == b.name ? 0 : 1);
    case 1: return a.state.compare(b.state) < 0 ? -1 : (a.state == b.state ? 0 : 1);
    case 2: return desc(a.rx_pps, b.rx_pps);
    case 3: return desc(a.rx_bps, b.rx_bps);
    case 4: return desc(a.tx_pps, b.tx_pps);
    case 5: return desc(a.tx_bps, b.tx_bps);
    case 6: return desc(static_cast<double>(a.drops), static_cast<double>(b.drops));
    default: return 0;  // a PMD column: the ports by name
  }
}

void sort_rows(std::vector<PortRow>* ports, std::vector<PmdRow>* pmds, const TopView& v) {
  const bool rev = v.reverse;
  std::sort(ports->begin(), ports->end(), [&](const PortRow& a, const PortRow& b) {
    const int c = port_order(a, b, v.sort);
    if (c) return rev ? c > 0 : c < 0;
    return a.name < b.name;
  });
  std::sort(pmds->begin(), pmds->end(), [&](const PmdRow& a, const PmdRow& b) {
    double x = 0, y = 0;
    if (v.sort == kSortBusy) x = a.busy_pct, y = b.busy_pct;
    if (v.sort == kSortCycles) x = a.cycles_per_frame, y = b.cycles_per_frame;
    if (x != y) return rev ? x < y : x > y;
    return a.pmd < b.pmd;
  });
}

/// Column header `name`, marked with '*' when the view sorts by column `col`.
std::string head(const char* name, size_t col, const TopView& v) {
  return v.sort == col ? std::string(name) + "*" : std::string(name);
}

std::string dash_or(double v) { return v < 0 ? std::string("-") : top_si(v); }

void add_ports(const std::vector<PortRow>& rows, const TopView& v, std::vector<std::string>* out) {
  size_t w = 6;
  for (const PortRow& r : rows) w = std::max(w, std::min<size_t>(r.name.size() + 1, 32));
  out->push_back(fmt::format("{:<{}} {:<10} {:>8} {:>8} {:>8} {:>8} {:>10} {:>8}",
                             head("PORT", 0, v), w, head("STATE", 1, v), head("RX_PPS", 2, v),
                             head("RX_BPS", 3, v), head("TX_PPS", 4, v), head("TX_BPS", 5, v),
                             head("DROPS", 6, v), "DROPS/S"));
  for (const PortRow& r : rows) {
    out->push_back(fmt::format("{:<{}} {:<10} {:>8} {:>8} {:>8} {:>8} {:>10} {:>8}", r.name, w,
                               r.state, top_si(r.rx_pps), top_si(r.rx_bps), top_si(r.tx_pps),
                               top_si(r.tx_bps), r.drops, dash_or(r.drop_rate)));
    if (!r.reasons.empty()) out->push_back(fmt::format("{:<{}}   drops: {}", "", w, r.reasons));
  }
  if (rows.empty()) out->push_back("(no ports)");
}

void add_pmds(const std::vector<PmdRow>& rows, const TopView& v, std::vector<std::string>* out) {
  out->push_back(fmt::format("{:>3} {:>4} {:<9} {:>6} {:>10} {:>8}  {}", "PMD", "CPU", "MODE",
                             head("BUSY%", kSortBusy, v), head("CYC/FRAME", kSortCycles, v),
                             "FRAMES/S", "RXQS (port/queue: frames/s, share of the thread's busy cycles)"));
  for (const PmdRow& r : rows)
    out->push_back(fmt::format("{:>3} {:>4} {:<9} {:>6.1f} {:>10} {:>8}  {}", r.pmd, r.cpu, r.mode,
                               r.busy_pct,
                               r.cycles_per_frame < 0 ? std::string("-")
                                                      : fmt::format("{:.0f}", r.cycles_per_frame),
                               dash_or(r.fps), r.rxqs));
  if (rows.empty()) out->push_back("(no PMD threads)");
}

/// "sorted by rx_pps, largest first; 2 ports (2 connected), rx 1.49M pps, ..."
std::string summary(const std::vector<PortRow>& rows, const TopView& v) {
  const bool az = v.sort < 2;
  double rx = 0, tx = 0;
  uint64_t drops = 0, up = 0;
  for (const PortRow& r : rows) {
    rx += r.rx_pps;
    tx += r.tx_pps;
    drops += r.drops;
    up += r.state == "connected";
  }
  const char* order = az ? (v.reverse ? "Z to A" : "A to Z") : (v.reverse ? "smallest first" : "largest first");
  return fmt::format("sorted by {}, {}; {} port(s) ({} connected), rx {} pps, tx {} pps, {} drop(s)",
                     kTopSortColumns[v.sort], order, rows.size(), up, top_si(rx), top_si(tx), drops);
}

}  // namespace

std::string top_si(double v) {
  static constexpr const char* kPrefix[] = {"", "k", "M", "G", "T"};
  size_t i = 0;
  // (999.5 and up would print as 1000 or "1e+03" with three digits: the next prefix.)
  while (v >= 999.5 && i + 1 < std::size(kPrefix)) {
    v /= 1000;
    ++i;
  }
  return i == 0 ? fmt::format("{:.0f}", v) : fmt::format("{:.3g}{}", v, kPrefix[i]);
}

int top_sort_index(std::string_view name) {
  for (size_t i = 0; i < kColumns; ++i)
    if (kTopSortColumns[i] == name) return static_cast<int>(i);
  return -1;
}

bool top_key(char k, TopView* v) {
  if (k == 's' || k == 'S') {
    v->sort = (v->sort + (k == 's' ? 1 : kColumns - 1)) % kColumns;
    v->reverse = false;
  } else if (k >= '1' && k < static_cast<char>('1' + kColumns)) {
    v->sort = static_cast<size_t>(k - '1');
    v->reverse = false;
  } else if (k == 'r') {
    v->reverse = !v->reverse;
  } else {
    return false;
  }
  return true;
}

std::string top_help_line() {
  std::string cols;
  for (size_t i = 0; i < kColumns; ++i) cols += fmt::format("{}{} {}", i ? " " : "", i + 1, kTopSortColumns[i]);
  return fmt::format("keys: s/S next/previous sort column; sort by {}; r reverse; q quit", cols);
}

std::vector<std::string> top_frame(const TopSample& cur, const TopSample* prev, const TopView& v) {
  std::vector<PortRow> ports = port_rows(cur, prev);
  std::vector<PmdRow> pmds = pmd_rows(cur, prev);
  sort_rows(&ports, &pmds, v);
  std::vector<std::string> out;
  out.push_back("virtlink top: " + v.title);
  out.push_back(top_help_line());
  out.push_back(summary(ports, v));
  const double rate_s =
      num(cur.stats.is_object() ? cur.stats.value("rates", Json::object()) : Json::object(),
          "interval_ns") / 1e9;
  const double dt = prev ? cur.mono_s - prev->mono_s : 0;
  out.push_back(fmt::format("port rates over the switch's last {:.2f} s sample; PMD figures and "
                            "drops/s {}", rate_s,
                            dt > 0 ? fmt::format("over the last {:.2f} s", dt)
                                   : std::string("since the switch started (first poll)")));
  out.push_back(v.error.empty() ? std::string() : "poll failed (the figures are the last answer's): " + v.error);
  add_ports(ports, v, &out);
  out.push_back("");
  add_pmds(pmds, v, &out);
  return out;
}

}  // namespace vl::app
