#include "app/json_views.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <iterator>
#include <vector>

#include <fmt/format.h>

#include "app/config.h"
#include "port/vxlan_wire.h"
#include "util/clock.h"
#include "util/thread_sched.h"
#include "virtio/virtio_defs.h"
#include "virtlink_version.h"

namespace vl::app {

port::CounterSnapshot raw_port_counters(const SwitchView& sw, uint32_t p) {
  port::CounterSnapshot s;
  for (const auto& t : sw.pmds.threads()) t->forwarder().counters(p).accumulate(s);
  sw.links.add_counters(p, s);  // what direct-link peers moved on this port's rings
  add(s, sw.base.carried[p]);  // what a predecessor counted (ctl upgrade)
  return s;
}

QueueCounts raw_queue_counts(const SwitchView& sw, uint32_t port, uint32_t q) {
  QueueCounts v;
  for (const auto& t : sw.pmds.threads()) {
    const port::QueueCounters& c = t->forwarder().queue_counters(port, q);
    v.handed += c.handoff_packets.load(std::memory_order_relaxed);
    v.rxp += c.rx_packets.load(std::memory_order_relaxed);
    v.rxb += c.rx_bytes.load(std::memory_order_relaxed);
    v.txp += c.tx_packets.load(std::memory_order_relaxed);
    v.txb += c.tx_bytes.load(std::memory_order_relaxed);
    v.nobuf += c.no_rx_buffer.load(std::memory_order_relaxed);
  }
  return v;
}

/// Queue ages of output `port` summed over the PMD threads (each has its own intermediate
/// queue for it), raw or on CPU (`on_cpu`): the buckets into `hist`, the largest into
/// `*max_ns`; returns the sum of the ages (raw only; 0 on CPU).
/// The buckets of `a` as a JSON array (bucket b: below 2^(b+8) ns; the last: above).
static control::Json bucket_counts(const dp::QueueAgeStats& a) {
  control::Json out = control::Json::array();
  for (const auto& h : a.hist) out.push_back(h.load(std::memory_order_relaxed));
  return out;
}

static uint64_t summed_ages(const SwitchView& sw, uint32_t port, bool on_cpu,
                            uint64_t (&hist)[dp::QueueAgeStats::kBuckets], uint64_t* max_ns) {
  uint64_t sum_ns = 0;
  *max_ns = 0;
  std::fill(std::begin(hist), std::end(hist), 0);
  for (const auto& t : sw.pmds.threads()) {
    const dp::QueueAgeStats& a = on_cpu ? t->forwarder().queue_age_on_cpu(port)
                                        : t->forwarder().queue_age(port);
    *max_ns = std::max(*max_ns, a.max_ns.load(std::memory_order_relaxed));
    if (!on_cpu) sum_ns += a.sum_ns.load(std::memory_order_relaxed);
    for (uint32_t b = 0; b < dp::QueueAgeStats::kBuckets; ++b)
      hist[b] += a.hist[b].load(std::memory_order_relaxed);
  }
  return sum_ns;
}

void take_counter_base(const SwitchView& sw, uint32_t p, CounterBase* base) {
  base->port[p] = raw_port_counters(sw, p);
  for (uint32_t q = 0; q < port::kMaxQueuePairs; ++q) base->queue[p][q] = raw_queue_counts(sw, p, q);
  uint64_t max_ns;
  base->age_sum[p] = summed_ages(sw, p, false, base->age_hist[p], &max_ns);
  summed_ages(sw, p, true, base->age_on_cpu_hist[p], &max_ns);
  base->over_budget[p] = base->over_budget_raw[p] = 0;
  for (const auto& t : sw.pmds.threads()) {
    base->over_budget[p] += t->forwarder().over_budget(p);
    base->over_budget_raw[p] += t->forwarder().over_budget_raw(p);
  }
  for (const auto& t : sw.pmds.threads()) t->clear_queue_age_max(p);
}

namespace {

std::string hex(uint64_t v) { return fmt::format("{:#x}", v); }

control::Json feature_names(uint64_t f) {
  control::Json names = control::Json::array();
  for (int b = 0; b < 64; ++b) {
    if (!(f & (uint64_t{1} << b))) continue;
    const char* n = virtio::feature_name(b);
    names.push_back(n ? std::string(n) : fmt::format("BIT_{}", b));
  }
  return names;
}

/// What the scheduler says of a PMD thread (util/thread_sched.h), null if unreadable.
control::Json sched_json(int tid) {
  ThreadSched ts;
  if (!read_thread_sched(tid, &ts)) return nullptr;
  return {{"cpu_ns", ts.cpu_ns},
          {"wait_ns", ts.wait_ns},
          {"voluntary_switches", ts.voluntary},
          {"involuntary_switches", ts.involuntary}};
}

/// The switch's counters of queue pair q of `port` (summed over PMD threads), and which
/// thread writes its receive queue (-1: none) and whether others hand frames to it.
struct QueueView : QueueCounts {
  int writer = -1;
  bool handed_to = false;
};
QueueView queue_view(const SwitchView& sw, uint32_t port, uint32_t q) {
  QueueView v;
  static_cast<QueueCounts&>(v) = raw_queue_counts(sw, port, q);
  subtract(v, sw.base.queue[port][q]);
  const port::PortDp& d = sw.ports[port]->dp();
  for (uint32_t t = 0; t < sw.pmds.threads().size() && t < port::kMaxPmdThreads; ++t) {
    const port::PortDp::RxTargets& r = d.rx_for[t];
    if (std::find(r.q, r.q + r.n, q) == r.q + r.n) continue;
    if (r.via == port::PortDp::kDirect) v.writer = static_cast<int>(t);
    else v.handed_to = true;
  }
  return v;
}

/// Adds "queues": per queue pair enabled/ready flags, counters, lock and self-check
/// counters of `port` to its stats object.
void add_queues(const SwitchView& sw, uint32_t port, const port::VhostPort& p,
                control::Json* out) {
  const vhost::Backend& b = p.backend();
  control::Json qs = control::Json::array();
  uint64_t rx_calls = 0, tx_calls = 0, rx_deferred = 0;
  for (uint32_t q = 0; q < b.queue_pairs(); ++q) {
    const vhost::Vring& rx = b.vring(vhost::rx_vring(q));
    const vhost::Vring& tx = b.vring(vhost::tx_vring(q));
    tx_calls += rx.calls();
    rx_calls += tx.calls();
    rx_deferred += tx.calls_deferred();
    const QueueView qv = queue_view(sw, port, q);
    const uint64_t rxp = qv.rxp, rxb = qv.rxb, txp = qv.txp, txb = qv.txb, nobuf = qv.nobuf;
    // Shown: pair 0, pairs the front-end set up, and pairs that ever carried traffic (the
    // counters live as long as the switch, like the port's).
    if (q > 0 && !rx.num && !tx.num && !rxp && !txp && !nobuf) continue;
    const port::QueueShared& rs = p.rx_shared(q);
    const port::QueueShared& ts = p.tx_shared(q);
    const dp::PmdThread* owner = sw.pmds.owner_of(port, q);
    // The PMD thread that writes this receive queue (port.h PortDp::rx_for), -1 if none.
    const int writer = qv.writer;
    const bool handed_to = qv.handed_to;
    qs.push_back({{"queue", q},
                  {"enabled", rx.enabled || tx.enabled},
                  {"rx_enabled", rx.enabled},
                  {"tx_enabled", tx.enabled},
                  {"rx_ready", rx.ready},  // the guest's receive queue: we deliver into it
                  {"tx_ready", tx.ready},  // the guest's transmit queue: a PMD thread polls it
                  {"pmd", owner ? static_cast<int>(owner->index()) : -1},
                  {"rx_packets", rxp},
                  {"rx_bytes", rxb},
                  {"tx_packets", txp},
                  {"tx_bytes", txb},
                  {"no_rx_buffer", nobuf},
                  // Used-buffer notifications (call fd writes) for the guest's receive and
                  // transmit queue of this pair (the switch's view, like rx/tx above).
                  {"tx_calls", rx.calls()},
                  {"rx_calls", tx.calls()},
                  // Calls the guest asked for on its transmit queue that were noted for
                  // later (completion coalescing); several may have gone out as one.
                  {"rx_calls_deferred", tx.calls_deferred()},
                  {"rx_writer_pmd", writer},
                  {"rx_handoff_target", handed_to},
                  {"handoff_packets", qv.handed},
                  {"concurrent_entries", rs.concurrent.load(std::memory_order_relaxed) +
                                             ts.concurrent.load(std::memory_order_relaxed)},
                  {"last_rx_thread", static_cast<int>(rs.last_thread.load(std::memory_order_relaxed))},
                  {"last_tx_thread", static_cast<int>(ts.last_thread.load(std::memory_order_relaxed))}});
  }
  (*out)["queues"] = qs;
  (*out)["rx_calls"] = rx_calls;
  (*out)["tx_calls"] = tx_calls;
  (*out)["rx_calls_deferred"] = rx_deferred;
}

std::string ipv4_str(uint32_t ip) {
  uint8_t b[4];
  std::memcpy(b, &ip, 4);
  return fmt::format("{}.{}.{}.{}", b[0], b[1], b[2], b[3]);
}

std::string mac_str(const uint8_t* m) {
  return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5]);
}

/// How a port carries VLANs (its settings): "mode" all, access (and "vlan") or trunk (and
/// "trunks", "native_vlan").
control::Json vlan_json(const port::PortConfig& c) {
  if (c.vlan) return {{"mode", "access"}, {"vlan", c.vlan}};
  if (!c.trunks.empty()) return {{"mode", "trunk"}, {"trunks", c.trunks}, {"native_vlan", c.native_vlan}};
  return {{"mode", "all"}};
}

/// Port security's allowed source MACs ("xx:xx:..." each; empty: any source).
control::Json port_security_json(const port::PortConfig& c) {
  control::Json a = control::Json::array();
  for (uint64_t m : c.port_security) a.push_back(port_security_text({m}));
  return a;
}

/// A tunnel port's endpoint: its address, VNI, underlay and remotes with their next hops.
control::Json tunnel_json(const port::UplinkPort& p) {
  const port::VxlanWire& v = *p.vxlan();
  const port::VxlanSettings& s = v.settings();
  control::Json remotes = control::Json::array();
  for (const auto& r : v.remotes())
    remotes.push_back({{"ip", ipv4_str(r.ip)},
                       {"resolved", r.resolved},
                       {"next_hop", r.resolved ? mac_str(r.next_hop) : ""}});
  return {{"kind", "vxlan"},
          {"uplink", s.uplink},
          {"local", ipv4_str(s.local_ip)},
          {"mac", mac_str(v.mac())},
          {"vni", s.vni},
          {"dst_port", s.dst_port},
          {"gateway_mac", s.has_gateway_mac ? mac_str(s.gateway_mac) : ""},
          {"learned_macs", v.learned_macs()},
          {"remotes", remotes}};
}

/// An uplink's "queues" and "uplink" (its wire: link, the device's counters).
void add_uplink(const SwitchView& sw, uint32_t port, const port::UplinkPort& p,
                control::Json* out) {
  control::Json qs = control::Json::array();
  uint64_t wrx = 0, wtx = 0, wdrop = 0;
  for (uint32_t q = 0; q < std::max(1u, p.queue_pairs()); ++q) {
    const QueueView v = queue_view(sw, port, q);
    const port::UplinkQueueCounters u = p.queue_counters(q);
    wrx += u.wire_rx_packets;
    wtx += u.wire_tx_packets;
    wdrop += u.wire_tx_dropped;
    const dp::PmdThread* owner = sw.pmds.owner_of(port, q);
    qs.push_back({{"queue", q},
                  {"pmd", owner ? static_cast<int>(owner->index()) : -1},
                  {"rx_packets", v.rxp},
                  {"rx_bytes", v.rxb},
                  {"tx_packets", v.txp},
                  {"tx_bytes", v.txb},
                  {"no_rx_buffer", v.nobuf},
                  {"rx_writer_pmd", v.writer},
                  {"rx_handoff_target", v.handed_to},
                  {"handoff_packets", v.handed},
                  {"wire_rx_packets", u.wire_rx_packets},
                  {"wire_tx_packets", u.wire_tx_packets},
                  {"wire_tx_dropped", u.wire_tx_dropped},
                  {"bad_used", u.bad_used},
                  {"wire_tx_too_big", u.wire_tx_too_big},
                  {"not_for_vtep", u.not_for_vtep}});
  }
  (*out)["queues"] = qs;
  control::Json dev = control::Json::object();
  if (p.wire()) {
    wire::DeviceCounters dc;
    p.wire()->counters(&dc);
    for (const auto& kv : dc) dev[kv.first] = kv.second;
  }
  (*out)["uplink"] = {{"link", p.wire() && p.wire()->link_up() ? "up" : "down"},
                      {"offloads", p.wire() && p.wire()->info().offloads},
                      {"rx_interrupts", p.wire() && p.wire()->info().rx_interrupts},
                      {"wire_rx_packets", wrx},
                      {"wire_tx_packets", wtx},
                      {"wire_tx_dropped", wdrop},
                      {"device", dev}};
  if (p.vxlan()) (*out)["tunnel"] = tunnel_json(p);
}

uint64_t port_features(const port::Port& p) {
  if (const auto* v = dynamic_cast<const port::VhostPort*>(&p)) return v->backend().features();
  if (const auto* u = dynamic_cast<const port::UplinkPort*>(&p)) return u->features();
  return 0;
}

/// Adds queue_age_max_ns and queue_age_histogram of output `port` to its stats object.
void add_queue_age(const SwitchView& sw, uint32_t port, control::Json* out) {
  uint64_t hist[dp::QueueAgeStats::kBuckets], max_ns;
  const uint64_t sum_ns = summed_ages(sw, port, false, hist, &max_ns);
  for (uint32_t b = 0; b < dp::QueueAgeStats::kBuckets; ++b) hist[b] = since(hist[b], sw.base.age_hist[port][b]);
  control::Json h = control::Json::array();
  for (uint32_t b = 0; b < dp::QueueAgeStats::kBuckets; ++b) {
    if (!hist[b]) continue;
    const uint64_t edge = b + 1 < dp::QueueAgeStats::kBuckets ? dp::QueueAgeStats::upper_edge_ns(b)
                                                              : max_ns;
    h.push_back({edge, hist[b]});
  }
  (*out)["queue_age_max_ns"] = max_ns;
  (*out)["queue_age_histogram"] = h;
  // Every bucket (below 2^(b+8) ns; the last one: above), and the sum of the ages: the
  // Prometheus histogram (app/metrics_text.h).
  (*out)["queue_age_buckets"] = control::Json(std::vector<uint64_t>(std::begin(hist), std::end(hist)));
  (*out)["queue_age_sum_ns"] = since(sum_ns, sw.base.age_sum[port]);
  // The same ages less the time the PMD thread was kept off its CPU (dp/off_cpu.h), for
  // outputs under budget=US.
  uint64_t on[dp::QueueAgeStats::kBuckets], on_max;
  summed_ages(sw, port, true, on, &on_max);
  for (uint32_t b = 0; b < dp::QueueAgeStats::kBuckets; ++b) on[b] = since(on[b], sw.base.age_on_cpu_hist[port][b]);
  uint64_t over = 0, over_raw = 0;
  for (const auto& t : sw.pmds.threads()) {
    over += t->forwarder().over_budget(port);
    over_raw += t->forwarder().over_budget_raw(port);
  }
  // Frames delivered later than a budget=US policy's US, on CPU and raw.
  (*out)["over_budget"] = since(over, sw.base.over_budget[port]);
  (*out)["over_budget_raw"] = since(over_raw, sw.base.over_budget_raw[port]);
  (*out)["queue_age_on_cpu_max_ns"] = on_max;
  (*out)["queue_age_on_cpu_buckets"] = control::Json(std::vector<uint64_t>(std::begin(on), std::end(on)));
}

/// Adds the port's rates over the tick's last sampling interval (app/port_rates.h).
void add_rates(const SwitchView& sw, uint32_t port, control::Json* out) {
  const PortRates::Rate r = sw.rates.rate(port);
  const PortRates::Totals t = sw.rates.last(port);
  (*out)["rx_pps"] = r.rx_pps;
  (*out)["tx_pps"] = r.tx_pps;
  (*out)["rx_bps"] = r.rx_bps;
  (*out)["tx_bps"] = r.tx_bps;
  (*out)["rate_counters"] = {{"rx_packets", t.rx_packets},
                             {"rx_bytes", t.rx_bytes},
                             {"tx_packets", t.tx_packets},
                             {"tx_bytes", t.tx_bytes}};
}

/// A client port's last failed connect (VhostPort::ConnectError), null when none failed.
control::Json connect_error_json(const port::VhostPort& p) {
  const port::VhostPort::ConnectError& e = p.last_connect_error();
  if (!e.err) return nullptr;
  char when[32] = "";
  const time_t t = static_cast<time_t>(e.at_unix_s);
  tm utc;
  if (gmtime_r(&t, &utc)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return {{"errno", e.err},
          {"error", e.text},
          {"at", when},
          {"age_s", mono_s() - e.at_mono_s},
          {"failures", e.failures}};
}

}  // namespace

port::CounterSnapshot port_counters(const SwitchView& sw, uint32_t p) {
  port::CounterSnapshot s = raw_port_counters(sw, p);
  subtract(s, sw.base.port[p]);
  return s;
}

control::Json stats_json(const SwitchView& sw) {
  control::Json ports = control::Json::array();
  for (uint32_t i = 0; i < sw.ports.size(); ++i) {
    if (!sw.ports[i]) continue;  // a vacant slot
    const port::Port& p = *sw.ports[i];
    const port::CounterSnapshot c = port_counters(sw, i);
    control::Json drops = control::Json::object();
    for (uint32_t d = 0; d < port::kNumDrops; ++d)
      drops[port::drop_name(static_cast<port::Drop>(d))] = c.drops[d];
    control::Json soft = control::Json::object();
    for (uint32_t k = 0; k < offload::kNumWork; ++k)
      soft[offload::work_name(static_cast<offload::Work>(k))] = c.offload_work[k];
    const uint64_t f = port_features(p);
    const auto* v = dynamic_cast<const port::VhostPort*>(&p);
    const auto* u = dynamic_cast<const port::UplinkPort*>(&p);
    const port::PortConfig& cfg = v ? v->config() : u->config();
    ports.push_back({{"name", p.name()},
                     {"type", p.type_name()},
                     {"path", p.target()},
                     {"state", p.state()},
                     {"features", hex(f)},
                     {"feature_names", feature_names(f)},
                     {"rx_packets", c.rx_packets},
                     {"rx_bytes", c.rx_bytes},
                     {"tx_packets", c.tx_packets},
                     {"tx_bytes", c.tx_bytes},
                     {"tx_retries", c.tx_retries},
                     // The port's settings in force (PortConfig), µs.
                     {"tx_retry_us", cfg.tx_retry_us},
                     {"completion_coalesce_us", u ? 0 : cfg.completion_coalesce_us},
                     {"drops", drops},
                     {"flush", dp::flush_policy_name(sw.tables.flush_policy(i))},
                     {"offload", soft}});
    control::Json& o = ports.back();
    if (v) {
      // SET_MEM_TABLEs refused by --max-total-guest-memory (item 22)
      o["guest_memory_refused"] = v->backend().mem_tables_refused();
      o["migration"] = {
          {"logging", v->backend().logging()},
          {"dirty_pages_logged", v->backend().log_stats().pages_logged.load(std::memory_order_relaxed)},
          {"dirty_log_out_of_range",
           v->backend().log_stats().out_of_range.load(std::memory_order_relaxed)}};
    }
    add_queue_age(sw, i, &o);
    add_rates(sw, i, &o);
    if (v) add_queues(sw, i, *v, &o);
    if (u) add_uplink(sw, i, *u, &o);
  }
  return {{"ports", ports},
          {"rates", {{"interval_ns", sw.rates.interval_ns()}, {"sampled_ns", sw.rates.sampled_ns()}}}};
}

control::Json ports_json(const SwitchView& sw) {
  control::Json out = control::Json::array();
  for (uint32_t i = 0; i < sw.ports.size(); ++i) {
    if (!sw.ports[i]) continue;  // a vacant slot
    if (const auto* u = dynamic_cast<const port::UplinkPort*>(sw.ports[i].get())) {
      const port::UplinkPort& p = *u;
      out.push_back({{"name", p.name()},
                     {"id", i},
                     {"type", p.type_name()},
                     {"path", p.target()},
                     {"state", p.state()},
                     {"link", p.wire() && p.wire()->link_up() ? "up" : "down"},
                     {"mtu", p.wire() ? p.wire()->info().mtu : 0},
                     {"mtu_config", p.config().mtu},
                     {"max_frame", p.dp().caps.max_frame},
                     {"features", hex(p.features())},
                     {"offloads", p.wire() && p.wire()->info().offloads},
                     {"rx_interrupts", p.wire() && p.wire()->info().rx_interrupts},
                     {"pmd", sw.pmds.owner_of(i) ? static_cast<int>(sw.pmds.owner_of(i)->index()) : -1},
                     {"queue_pairs", p.queue_pairs()},
                     {"queue_size", p.queue_size()},
                     {"direct_link", sw.links.role(i)}});
      out.back()["vlan"] = vlan_json(p.config());
      out.back()["port_security"] = port_security_json(p.config());
      out.back()["external_ids"] = sw.external_ids[i];
      if (p.vxlan()) out.back()["tunnel"] = tunnel_json(p);
      if (p.is_underlay()) out.back()["underlay_of"] = p.tunnel_names();
      continue;
    }
    const port::VhostPort& p = dynamic_cast<const port::VhostPort&>(*sw.ports[i]);
    const vhost::Backend& b = p.backend();
    control::Json vrings = control::Json::array();
    for (uint32_t v = 0; v < b.num_vrings(); ++v) {
      const vhost::Vring& r = b.vring(v);
      if (v >= vhost::kNumVrings && !r.num) continue;  // pairs beyond the first, unused
      vrings.push_back({{"index", v},
                        {"queue", v / 2},
                        {"enabled", r.enabled},
                        {"role", v % 2 == 0 ? "guest-rx" : "guest-tx"},
                        {"size", r.num},
                        // (a ring never attached has the layout the features chose)
                        {"layout", (r.attached() ? r.packed : virtio::has(b.features(), virtio::kFRingPacked))
                                       ? "packed"
                                       : "split"},
                        {"ready", r.ready},
                        {"why_not", r.ready ? "" : r.why_not},
                        {"kick", r.kick.valid() ? "eventfd" : (r.started ? "polling" : "none")},
                        {"call", r.call.valid()}});
    }
    out.push_back({{"name", p.name()},
                   {"id", i},
                   {"type", p.type_name()},
                   {"path", p.target()},
                   {"state", p.state()},
                   {"connects", p.connects()},
                   {"messages", b.messages()},
                   {"mtu", b.mtu()},
                   {"mtu_config", p.config().mtu},
                   {"max_frame", p.dp().caps.max_frame},
                   {"features", hex(b.features())},
                   {"protocol_features", hex(b.protocol_features())},
                   {"mapped_bytes", b.memory() ? b.memory()->mapped_bytes() : 0},
                   {"pmd", sw.pmds.owner_of(i) ? static_cast<int>(sw.pmds.owner_of(i)->index()) : -1},
                   {"queue_pairs", b.queue_pairs()},
                   {"direct_link", sw.links.role(i)},
                   {"vrings", vrings}});
    out.back()["vlan"] = vlan_json(p.config());
    out.back()["port_security"] = port_security_json(p.config());
    out.back()["external_ids"] = sw.external_ids[i];
    if (p.config().mode == port::SocketMode::kClient)
      out.back()["last_connect_error"] = connect_error_json(p);
  }
  return out;
}

namespace {

// hostile-inputs.md item 23: a listing of any length costs the control thread at most one
// slice (ReplyStream::kSliceUs, kSliceBytes) per turn.
class FdbStream final : public control::ReplyStream {
 public:
  FdbStream(const SwitchView& sw, uint32_t port, size_t limit)
      : fdb_(sw.fdb), now_s_(sw.tables.now_s.load()), port_(port), limit_(limit) {
    for (const auto& p : sw.ports) names_.push_back(control::Json(p ? p->name() : "").dump());
  }

  bool next(std::string* out) override {
    if (!started_) {
      out->append(R"({"ok":true,"result":[)");
      started_ = true;
    }
    const uint64_t t0 = mono_ns();
    auto it = std::back_inserter(*out);
    while (bucket_ < fdb_.buckets()) {
      batch_.clear();
      bucket_ = fdb_.entries_in(bucket_, kBucketsPerStep, now_s_, port_, &batch_);
      for (const dp::Fdb::Entry& e : batch_) {
        ++total_;
        if (shown_ >= limit_) continue;
        if (shown_++) out->push_back(',');
        const uint64_t m = e.mac;  // (VLAN << 48) | MAC (dp/vlan.h vlan_key)
        // The keys in nlohmann's order (sorted), as the reply had them.
        fmt::format_to(it, R"({{"age_s":{},"mac":"{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}","port":{},"vlan":{}}})",
                       e.age_s, (m >> 40) & 0xff, (m >> 32) & 0xff, (m >> 24) & 0xff,
                       (m >> 16) & 0xff, (m >> 8) & 0xff, m & 0xff,
                       e.port < names_.size() ? names_[e.port] : std::string(R"("?")"), m >> 48);
      }
      if (out->size() >= kSliceBytes || mono_ns() - t0 >= kSliceUs * 1000) return false;
    }
    fmt::format_to(it, R"(],"total":{},"shown":{},"truncated":{}}})"
                       "\n",
                   total_, shown_, shown_ < total_ ? "true" : "false");
    return true;
  }

 private:
  /// Buckets read between two looks at the clock (512 slots: a few µs).
  static constexpr uint32_t kBucketsPerStep = 64;
  const dp::Fdb& fdb_;
  const uint32_t now_s_;
  const uint32_t port_;
  const size_t limit_;
  std::vector<std::string> names_;  // port names as JSON strings, by port index
  std::vector<dp::Fdb::Entry> batch_;
  uint32_t bucket_ = 0;
  uint64_t total_ = 0;
  uint64_t shown_ = 0;
  bool started_ = false;
};

}  // namespace

std::unique_ptr<control::ReplyStream> fdb_stream(const SwitchView& sw, uint32_t port, size_t limit) {
  return std::make_unique<FdbStream>(sw, port, limit);
}

control::Json show_json(const SwitchView& sw, const std::string& control) {
  const control::Json pmds = pmd_rxq_json(sw);
  const control::Json links = sw.links.info();
  control::Json ports = control::Json::array();
  uint32_t i = 0;
  for (const control::Json& p : ports_json(sw)) {
    control::Json o = {{"name", p["name"]},
                       {"type", p["type"]},
                       {"target", p["path"]},
                       {"state", p["state"]},
                       {"mtu", p["mtu"]},
                       {"mtu_config", p["mtu_config"]},
                       {"queues", p["queue_pairs"]},
                       {"vlan", p["vlan"]},
                       {"flush", dp::flush_policy_name(sw.tables.flush_policy(i++))},
                       {"direct_link", p["direct_link"]},
                       {"link", nullptr}};
    const std::string name = p["name"];
    for (const control::Json& l : links) {  // a direct link names its partner
      if (l["a"] != name && l["b"] != name) continue;
      o["link"] = {{"peer", l["a"] == name ? l["b"] : l["a"]},
                   {"serves", l["b"] == name},  // B's front-end serves A's rings
                   {"state", l["state"]}};
    }
    for (const char* k : {"tunnel", "underlay_of", "last_connect_error"})
      if (p.contains(k)) o[k] = p[k];
    if (p.contains("link")) o["uplink_link"] = p["link"];  // an uplink's carrier: up, down
    ports.push_back(std::move(o));
  }
  return {{"switch",
           {{"version", VIRTLINK_VERSION},
            {"pid", static_cast<int64_t>(getpid())},
            {"control", control},
            {"forward", sw.cfg.forward == dp::ForwardMode::kBridge ? "bridge" : "xconnect"},
            {"pmd_mode", dp::pmd_mode_name(sw.cfg.pmd.mode)},
            {"rxq_assign", pmds["assign"]},
            {"pmds", pmds["pmds"]}}},
          {"ports", ports},
          {"links", links}};
}

control::Json pmd_stats_json(const SwitchView& sw) {
  control::Json out = control::Json::array();
  for (const auto& t : sw.pmds.threads()) {
    // The thread's total first, the rxq loads after it: on a live thread the loads can
    // only lead the total (by the frames taken in between), never trail it.
    const uint64_t packets = t->packets();
    const uint64_t busy = t->busy_cycles();
    control::Json names = control::Json::array();
    control::Json rxqs = control::Json::array();
    // Each rxq's counters are read once, so the shares add up to 1 while the thread runs.
    struct Sample {
      dp::RxqId q;
      uint64_t packets, cycles;
    };
    std::vector<Sample> samples;
    uint64_t total = 0;
    for (const dp::RxqId& q : t->rxqs()) {
      const dp::RxqLoad& l = sw.pmds.load(q.port, q.queue);
      samples.push_back({q, l.packets.load(std::memory_order_relaxed),
                         l.cycles.load(std::memory_order_relaxed)});
      total += samples.back().cycles;
    }
    for (const Sample& s : samples) {
      const std::string& name = sw.ports[s.q.port]->name();
      names.push_back(name);
      rxqs.push_back({{"port", name},
                      {"queue", s.q.queue},
                      {"packets", s.packets},
                      {"cycles", s.cycles},
                      {"cycles_share",
                       total ? static_cast<double>(s.cycles) / static_cast<double>(total) : 0.0}});
    }
    const uint64_t elapsed = t->elapsed_cycles();
    out.push_back({{"pmd", t->index()},
                   {"cpu", t->cpu()},
                   {"mode", dp::pmd_mode_name(sw.cfg.pmd.mode)},
                   {"rxq_assign", dp::rxq_assign_name(sw.pmds.assign_mode())},
                   {"passes", t->passes()},
                   {"busy_passes", t->busy_passes()},
                   {"sleeps", t->sleeps()},
                   {"packets", packets},
                   {"busy_cycles", busy},
                   {"elapsed_cycles", elapsed},
                   {"busy_pct", elapsed ? 100.0 * static_cast<double>(busy) /
                                              static_cast<double>(elapsed)
                                        : 0.0},
                   {"cycles_per_packet", packets ? static_cast<double>(busy) /
                                                        static_cast<double>(packets)
                                                      : 0.0},
                   {"rxqs", names},
                   {"rxq_loads", rxqs},
                   {"flush_check_gap_max_ns", t->forwarder().check_gap_max_ns()},
                   {"off_cpu", {{"intervals", t->off_cpu().count()},
                                {"total_ns", t->off_cpu().total_ns()},
                                {"max_ns", t->off_cpu().max_ns()},
                                {"buckets", bucket_counts(t->off_cpu().lengths())}}},
                   {"spin_preempted", t->spin_preempted()},
                   {"spin_window_ns", t->spin_window_ns()},
                   {"sched", sched_json(t->tid())}});
  }
  return out;
}

control::Json pmd_rxq_json(const SwitchView& sw) {
  control::Json out = control::Json::array();
  for (const auto& t : sw.pmds.threads()) {
    control::Json rxqs = control::Json::array();
    for (const dp::RxqId& q : t->rxqs())
      rxqs.push_back({{"port", sw.ports[q.port]->name()}, {"queue", q.queue}});
    out.push_back({{"pmd", t->index()}, {"cpu", t->cpu()}, {"rxqs", rxqs}});
  }
  return {{"assign", dp::rxq_assign_name(sw.pmds.assign_mode())},
          {"reassignments", sw.pmds.reassignments()},
          {"pmds", out}};
}

}  // namespace vl::app
