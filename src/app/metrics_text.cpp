#include "app/metrics_text.h"

#include <cstdint>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "dp/flush.h"

namespace vl::app {
namespace {

using control::Json;

/// Metric families in the order first seen, each with its samples (the text format wants a
/// family's samples together, after its HELP and TYPE lines).
class Families {
 public:
  /// One sample of family `name` (`type`: counter, gauge, histogram; `help` for its HELP
  /// line), `labels` already formatted ("port=\"a\",queue=\"0\"" or ""), `suffix` for
  /// a histogram's _bucket, _sum and _count.
  void add(const std::string& name, const char* type, const char* help, const std::string& labels,
           const std::string& value, const char* suffix = "") {
    Family* f = nullptr;
    for (Family& g : families_)
      if (g.name == name) f = &g;
    if (!f) {
      families_.push_back({name, type, help, {}});
      f = &families_.back();
    }
    f->lines += fmt::format("{}{}{}{}{}{} {}\n", name, suffix, labels.empty() ? "" : "{", labels,
                            labels.empty() ? "" : "}", "", value);
  }
  std::string text() const {
    std::string out;
    for (const Family& f : families_)
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}", f.name, f.help, f.name, f.type, f.lines);
    return out;
  }

 private:
  struct Family {
    std::string name;
    const char* type;
    const char* help;
    std::string lines;
  };
  std::vector<Family> families_;
};

std::string num(const Json& v) {
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number_float()) return fmt::format("{}", v.get<double>());
  if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
  return "0";
}

std::string label(std::string_view key, const std::string& value) {
  return fmt::format("{}=\"{}\"", key, escape_label(value));
}

std::string str(const Json& o, const char* key) {
  const Json& v = o.value(key, Json());
  return v.is_string() ? v.get<std::string>() : (v.is_null() ? "" : v.dump());
}

/// The queue-age histogram of one port: buckets below 2^(b+8) ns, cumulative, in seconds.
void add_queue_age(Families* m, const std::string& port, const Json& p) {
  const Json& buckets = p.value("queue_age_buckets", Json::array());
  if (!buckets.is_array() || buckets.empty()) return;
  static constexpr const char* kName = "virtlink_port_queue_age_seconds";
  static constexpr const char* kHelp =
      "How long frames bound for the port waited in intermediate queues (output batching).";
  uint64_t cum = 0;
  for (uint32_t b = 0; b < buckets.size(); ++b) {
    const Json& n = buckets[b];
    cum += n.is_number_unsigned() || (n.is_number_integer() && n.get<int64_t>() >= 0) ? n.get<uint64_t>() : 0;
    if (b + 1 == buckets.size()) break;  // the last bucket is everything above: +Inf
    const double le = static_cast<double>(dp::QueueAgeStats::upper_edge_ns(b)) / 1e9;
    m->add(kName, "histogram", kHelp, port + "," + label("le", fmt::format("{}", le)),
           std::to_string(cum), "_bucket");
  }
  m->add(kName, "histogram", kHelp, port + "," + label("le", "+Inf"), std::to_string(cum), "_bucket");
  m->add(kName, "histogram", kHelp, port,
         fmt::format("{}", static_cast<double>(p.value("queue_age_sum_ns", uint64_t{0})) / 1e9), "_sum");
  m->add(kName, "histogram", kHelp, port, std::to_string(cum), "_count");
}

void add_port(Families* m, const Json& p) {
  const std::string port = label("port", str(p, "name"));
  struct Counter {
    const char* key;
    const char* name;
    const char* help;
  };
  static constexpr Counter kCounters[] = {
      {"rx_packets", "virtlink_port_rx_packets_total", "Frames the switch received from the port (the guest's transmit queue)."},
      {"rx_bytes", "virtlink_port_rx_bytes_total", "Bytes of the frames received from the port."},
      {"tx_packets", "virtlink_port_tx_packets_total", "Frames the switch delivered to the port (the guest's receive queue)."},
      {"tx_bytes", "virtlink_port_tx_bytes_total", "Bytes of the frames delivered to the port."},
      {"tx_retries", "virtlink_port_tx_retries_total", "Times a frame was kept for a retry into a full receive queue."},
      {"guest_memory_refused", "virtlink_port_guest_memory_refused_total", "Memory tables refused by the guest memory limit."},
  };
  for (const Counter& c : kCounters)
    if (p.contains(c.key)) m->add(c.name, "counter", c.help, port, num(p[c.key]));
  const Json drops = p.value("drops", Json::object()), work = p.value("offload", Json::object());
  for (const auto& [reason, n] : drops.items())
    m->add("virtlink_port_drops_total", "counter", "Frames dropped, by reason.",
           port + "," + label("reason", reason), num(n));
  for (const auto& [kind, n] : work.items())
    m->add("virtlink_port_offload_work_total", "counter",
           "Offload work done in software for the port's frames, by kind.",
           port + "," + label("work", kind), num(n));
  const std::string state = str(p, "state");
  m->add("virtlink_port_up", "gauge", "1 when the port's peer is connected (state connected).", port,
         state == "connected" ? "1" : "0");
  m->add("virtlink_port_info", "gauge", "The port's type, target, state and flush policy (value 1).",
         port + "," + label("type", str(p, "type")) + "," + label("path", str(p, "path")) + "," +
             label("state", state) + "," + label("flush", str(p, "flush")),
         "1");
  for (const Json& f : p.value("feature_names", Json::array()))
    if (f.is_string())
      m->add("virtlink_port_feature", "gauge", "The virtio features negotiated on the port (value 1).",
             port + "," + label("feature", f.get<std::string>()), "1");
  m->add("virtlink_port_queue_age_max_seconds", "gauge",
         "The longest a frame bound for the port waited in an intermediate queue.", port,
         fmt::format("{}", static_cast<double>(p.value("queue_age_max_ns", uint64_t{0})) / 1e9));
  add_queue_age(m, port, p);
  for (const Json& q : p.value("queues", Json::array())) {
    const std::string ql = port + "," + label("queue", num(q.value("queue", Json(0))));
    for (const char* k : {"rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "no_rx_buffer"})
      if (q.contains(k))
        m->add(fmt::format("virtlink_port_queue_{}_total", k), "counter",
               "A queue pair's share of the port's counter of that name.", ql, num(q[k]));
  }
}

void add_pmd(Families* m, const Json& t) {
  const std::string pmd = label("pmd", num(t.value("pmd", Json(0))));
  static constexpr const char* kCounters[][3] = {
      {"packets", "virtlink_pmd_packets_total", "Frames the PMD thread took from its rxqs."},
      {"busy_cycles", "virtlink_pmd_busy_cycles_total", "TSC cycles of passes that found work."},
      {"elapsed_cycles", "virtlink_pmd_elapsed_cycles_total", "TSC cycles since the thread started."},
      {"passes", "virtlink_pmd_passes_total", "Passes over the thread's rxqs."},
      {"busy_passes", "virtlink_pmd_busy_passes_total", "Passes that found work."},
      {"sleeps", "virtlink_pmd_sleeps_total", "Times the thread slept (interrupt and adaptive modes)."},
      {"spin_preempted", "virtlink_pmd_spin_preempted_total", "Spin windows given up because the thread waited for its CPU."},
  };
  for (const auto& c : kCounters)
    if (t.contains(c[0])) m->add(c[1], "counter", c[2], pmd, num(t[c[0]]));
  m->add("virtlink_pmd_busy_ratio", "gauge", "Busy cycles over elapsed cycles (0..1).", pmd,
         fmt::format("{}", t.value("busy_pct", 0.0) / 100.0));
  m->add("virtlink_pmd_cycles_per_packet", "gauge", "Busy TSC cycles per frame.", pmd,
         num(t.value("cycles_per_packet", Json(0.0))));
  m->add("virtlink_pmd_info", "gauge", "The PMD thread's CPU (-1: not pinned) and mode (value 1).",
         pmd + "," + label("cpu", num(t.value("cpu", Json(-1)))) + "," + label("mode", str(t, "mode")), "1");
  for (const Json& q : t.value("rxq_loads", Json::array())) {
    const std::string ql = pmd + "," + label("port", str(q, "port")) + "," + label("queue", num(q.value("queue", Json(0))));
    m->add("virtlink_pmd_rxq_packets_total", "counter", "Frames the thread took from the rxq.", ql,
           num(q.value("packets", Json(0))));
    m->add("virtlink_pmd_rxq_cycles_total", "counter", "TSC cycles the thread spent on the rxq.", ql,
           num(q.value("cycles", Json(0))));
  }
}

}  // namespace

std::string escape_label(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (const char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string metrics_text(const Json& stats, const Json& pmd_stats, const Json& show, const Json& exporter) {
  Families m;
  const Json& sw = show.value("switch", Json::object());
  m.add("virtlink_info", "gauge", "The switch's version and forwarding mode (value 1).",
        label("version", str(sw, "version")) + "," + label("forward", str(sw, "forward")) + "," +
            label("pmd_mode", str(sw, "pmd_mode")),
        "1");
  for (const Json& p : stats.value("ports", Json::array())) add_port(&m, p);
  for (const Json& t : pmd_stats) add_pmd(&m, t);
  const Json& mem = stats.value("guest_memory", Json::object());
  if (mem.contains("mapped_bytes"))
    m.add("virtlink_guest_memory_mapped_bytes", "gauge", "Guest memory mapped, over every port.", "",
          num(mem["mapped_bytes"]));
  const Json control = stats.value("control", Json::object());
  for (const auto& [k, v] : control.items())
    m.add(fmt::format("virtlink_control_{}_total", k), "counter",
          "Control socket clients (accepted, answered, dropped by reason).", "", num(v));
  for (const auto& [k, v] : exporter.items())
    m.add(fmt::format("virtlink_metrics_{}_total", k), "counter",
          "The metrics endpoint's requests (scrapes, stale bodies, refused paths and methods).", "",
          num(v));
  return m.text();
}

}  // namespace vl::app
