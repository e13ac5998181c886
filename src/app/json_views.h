#pragma once
// The JSON replies of `ctl stats`, `ports`, `fdb`, `pmd-stats` and `pmd-rxq-show` (README
// "Control"; `stats` is in INTERFACES.md), built from the switch's state on the control
// thread. Keys are only ever added.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/counter_base.h"
#include "app/links.h"
#include "app/port_rates.h"
#include "control/control_server.h"
#include "dp/fdb.h"
#include "dp/forwarder.h"
#include "dp/pmd.h"
#include "dp/trace.h"
#include "port/uplink_port.h"
#include "port/vhost_port.h"

namespace vl::app {

/// What the views read: the running switch's state (Switch::view()).
struct SwitchView {
  const SwitchConfig& cfg;
  const dp::SwitchTables& tables;
  const dp::Fdb& fdb;
  const dp::PmdSet& pmds;
  /// Indexed by slot (port id); null where no port is (deleted at run time).
  const std::vector<std::unique_ptr<port::Port>>& ports;
  const LinkManager& links;
  /// The counters' baselines (app/counter_base.h), subtracted from what `stats` shows.
  const CounterBase& base;
  /// Per slot: the port's external-id:KEY=VALUE metadata (`ctl add-port`, `set-port`).
  const std::map<std::string, std::string>* external_ids;
  const PortRates& rates;  ///< the tick's samples of every port's counters
};

/// The datapath's counters of port `p` (summed over PMD threads and direct-link peers) and
/// of its queue pair `q`, without a baseline.
port::CounterSnapshot raw_port_counters(const SwitchView& sw, uint32_t p);
QueueCounts raw_queue_counts(const SwitchView& sw, uint32_t port, uint32_t q);
/// Sets `base`'s entries of port `p` to its counters now (they show as 0 from here on) and
/// starts its longest queue age afresh.
void take_counter_base(const SwitchView& sw, uint32_t p, CounterBase* base);

/// `ctl stats`: {"ports": [...]}, per port its counters summed over the PMD threads and
/// direct-link peers, drops by reason, flush policy, queue age and "queues".

/// Port `p`'s counters as `ctl stats` reports them: raw_port_counters less its baseline.
port::CounterSnapshot port_counters(const SwitchView& sw, uint32_t p);

/// `ctl stats`: {"ports": [...], "rates": {interval_ns, sampled_ns}}, per port its counters
/// summed over the PMD threads and direct-link peers, drops by reason, flush policy, queue
/// age, "queues", and its rates over the tick's last interval (rx_pps, tx_pps, rx_bps,
/// tx_bps; "rate_counters": the counters at the sample the interval ends with).
control::Json stats_json(const SwitchView& sw);
/// `ctl ports`: per port its connection, vhost-user state and vrings.
control::Json ports_json(const SwitchView& sw);
/// `ctl fdb`, made in slices (control::ReplyStream) so that a table of a million MACs never
/// holds the control thread for more than a slice: the reply line
/// {"ok": true, "result": [{age_s, mac, port}, ...], "total": N, "shown": M, "truncated": B}
/// with the entries of port `port` (~0u: every port) in bucket order, at most `limit` of
/// them in "result"; "total" counts every entry of the port(s) the walk met, "shown" those
/// in "result", "truncated" is shown < total. The table changes while the walk goes on
/// (PMD threads learn, the tick ages), as it did between two buckets of a walk in one go.
std::unique_ptr<control::ReplyStream> fdb_stream(const SwitchView& sw, uint32_t port, size_t limit);
/// `ctl show`: {"switch": {version, pid, control, forward, pmd_mode, rxq_assign,
/// pmds: [{pmd, cpu, rxqs}]}, "ports": [{name, type, target, state, mtu, mtu_config,
/// queues, vlan, flush, direct_link, link, tunnel, underlay_of, uplink_link}], "links":
/// [...]}, made from the views of `ctl ports`, `pmd-rxq-show` and `links`. `control` is the
/// control socket's path.
control::Json show_json(const SwitchView& sw, const std::string& control);
/// `ctl trace`: a frame trace (dp/trace.h) as {port, frame, ingress, learning, lookup,
/// decision: {action, reason}, drop, outputs: [...], delivered_to, drops, plain_frame,
/// changed} (README "Frame trace"; app/trace_json.cpp).
control::Json trace_json(const SwitchView& sw, const dp::TraceResult& r);
/// `ctl pmd-stats`: per PMD thread its passes, cycles, packets and rxq loads.
control::Json pmd_stats_json(const SwitchView& sw);
/// `ctl pmd-rxq-show` (and the reply of `ctl pmd-rebalance`): {assign, reassignments,
/// pmds: [{pmd, cpu, rxqs: [{port, queue}]}]}.
control::Json pmd_rxq_json(const SwitchView& sw);

}  // namespace vl::app
