#!/usr/bin/env python3
"""virtlink's benchmark harness: `virtlink bench NAME [options]` runs this file.

Benchmarks are not tests: they measure, print a table, and record results with the command
that produced them (--json; plots in bench/results/). Every benchmark measures its anchors
(other switches) in the same run, so ratios hold even though this machine's speed drifts.

  p2p, p2v, pvp,   RFC 2544 throughput (NDR: no loss; PDR: <= 0.5% loss) by binary search,
  pvvp             then one-way latency at a fraction of NDR (90%), per frame size, for
                   virtlink (xconnect; bridge in p2p and p2v) and the anchors DPDK testpmd
                   (io forwarding between net_vhost ports) and OVS-DPDK (port-to-port
                   flows, NORMAL). Traffic: `virtlink gen` (two ports, one stream each way;
                   p2v one way).
                     p2p   gen -> switch -> gen
                     p2v   gen -> switch -> gen (one way: the receiving port is the "V")
                     pvp   gen -> switch -> vnf -> switch -> gen
                     pvvp  gen -> switch -> vnf -> switch -> vnf -> switch -> gen
                   p2v and pvp --uplink af-xdp|af-packet|dpdk-af-xdp: the "P" is a veth
                   pair, the switch's uplink on one end (virtlink af-xdp:, af-packet: or
                   dpdk:net_af_xdp ports; testpmd and OVS-DPDK the DPDK vdev net_af_xdp or
                   net_af_packet on the same interface), the generator in a network
                   namespace of its own behind the other (gen --port af-xdp:PEER, or
                   --gen-wire af-packet). Also a table of each switch's busy cycles per
                   frame in the back-pressured trial (the same offered load for all).
  batching         output batching (seed 003): NDR vs flows for P2V and PVP, and P2V
                   latency for 512-1518 B, per flush policy (immediate, rx-batch,
                   interval=50, budget=50) and OVS-DPDK tx-flush-interval 0 and 50
                   (bench/batching_bench.py)
  tcp, ping        guests: iperf3 throughput with offloads on/off, ping RTT and flood ping,
                   through virtlink, QEMU userspace networking and native namespaces
                   (bench/tcp_bench.py, bench/ping_bench.py; options: NAME --help)
  upgrade          `ctl upgrade` under traffic: frames lost and the longest gap, against a
                   no-upgrade baseline and restarts with reconnect of virtlink and OVS-DPDK
                   (bench/upgrade_bench.py)
  soak             N minutes (10; --quick 1) of traffic with port churn: the switch's RSS,
                   fds and mappings over time, flat or not (bench/soak_bench.py)
  loopback         the most a path carries when the traffic side sends as fast as the rings
                   allow (back-pressure, no loss criterion): virtlink xconnect and bridge
                   vs testpmd's vhost PMD. --traffic gen (default: `virtlink gen` at rate 0)
                   or --traffic testpmd (the earlier variant: one testpmd, two virtio-user
                   ports, io forwarding seeded with --tx-first, frames circulate).

Method (RFC 2544 section 26.1, as vsperf runs it, with shorter trials): each trial offers a
constant rate for --trial seconds (default 2 s, --quick 1 s; vsperf uses 60 s) and counts
every frame by its sequence number; the search starts at the maximum rate and bisects until
the NDR and PDR intervals are narrower than --precision (default 2% of the maximum). The
maximum is 2 x 10GbE line rate for the frame size, capped at 1.25 x what the path carried in
a first back-pressured trial (so the search spends its trials where the answer is). A trial
in which the generator itself fell behind its schedule (it offered less than 95% of the
planned frames, e.g. while preempted) is repeated; if it stays short, that rate counts as
failed and the result is marked '+' (a lower bound: generator-limited). NDR and PDR are the
rates actually offered in the passing trials. Frames the switch did not take from the
generator's transmit ring (1024 entries: the switch's receive queue) in time count as lost,
as a full NIC receive ring would.
Latency: one-way, TSC timestamps in every frame, sender and receiver in one process; min,
avg, max and percentiles from a log-linear histogram (3% bucket width).
"""

import argparse
import contextlib
import os
import signal
import statistics
import sys
import time

import _pylib  # noqa: F401  (puts pylib/ on sys.path)
import loopback_testpmd
import report
import rfc2544
import topologies
from vltestlib import vltest  # process management shared with the interop tests

ALL_SIZES = "64,128,256,512,1024,1280,1518"
DEFAULT_SWITCHES = {
    "p2p": "virtlink:xconnect,virtlink:bridge,testpmd:io,ovs-dpdk:xconnect,ovs-dpdk:normal",
    "p2v": "virtlink:xconnect,virtlink:bridge,testpmd:io,ovs-dpdk:xconnect,ovs-dpdk:normal",
    "pvp": "virtlink:xconnect,testpmd:io,ovs-dpdk:xconnect,ovs-dpdk:normal",
    "pvvp": "virtlink:xconnect,testpmd:io,ovs-dpdk:xconnect",
}


def log(msg):
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def line_rate_pps(size, gbps=10.0):
    """Frames per second of one 10GbE direction: frame + FCS 4 + preamble/SFD 8 + IFG 12."""
    return gbps * 1e9 / ((size + 24) * 8)


def parse_precision(text, max_pps):
    """'2%' of the maximum rate, or an absolute rate in pps ('50000', '50k', '0.05M')."""
    t = text.strip().lower()
    if t.endswith("%"):
        return max_pps * float(t[:-1]) / 100.0
    mult = 1.0
    if t.endswith("k"):
        mult, t = 1e3, t[:-1]
    elif t.endswith("m"):
        mult, t = 1e6, t[:-1]
    return float(t) * mult


def parse_switches(text, topology):
    out = []
    for item in text.split(","):
        kind, _, mode = item.strip().partition(":")
        mode = mode or {"virtlink": "xconnect", "testpmd": "io", "ovs-dpdk": "xconnect"}.get(kind)
        if kind not in ("virtlink", "testpmd", "ovs-dpdk"):
            raise SystemExit("unknown switch %s (virtlink, testpmd, ovs-dpdk)" % kind)
        if kind == "virtlink" and mode not in ("xconnect", "bridge"):
            raise SystemExit("virtlink modes: xconnect, bridge")
        if kind == "virtlink" and mode == "bridge" and topology not in ("p2p", "p2v"):
            raise SystemExit("virtlink:bridge applies to p2p and p2v only (PVP through one "
                             "bridge domain would loop; one domain per side is not in "
                             "virtlink yet)")
        if kind == "ovs-dpdk" and mode not in ("xconnect", "normal"):
            raise SystemExit("ovs-dpdk modes: xconnect (port-to-port flows), normal")
        if kind == "testpmd" and mode != "io":
            raise SystemExit("testpmd mode: io")
        out.append((kind, mode))
    return out


def available(kind):
    if kind == "testpmd":
        return topologies.have_testpmd()
    if kind == "ovs-dpdk":
        return topologies.have_ovs()
    return True


# ---------------------------------------------------------------------------------------
# RFC 2544 benches: p2p, pvp, pvvp

def trial_switch_figures(cycles):
    """What virtlink's stats say of one trial (topologies.VirtlinkSwitch.cycles_end): frames
    delivered past a budget=US policy's US on CPU and raw, of those delivered, and the PMD
    threads' time off their CPUs. {} for other switches."""
    if not cycles or "delivered" not in cycles:
        return {}
    n = cycles["delivered"]
    return {"delivered": n, "over_budget": cycles["over_budget"],
            "over_budget_raw": cycles["over_budget_raw"],
            "over_budget_fraction": cycles["over_budget"] / n if n else 0.0,
            "off_cpu_intervals": cycles["off_cpu_intervals"],
            "off_cpu_ms": round(cycles["off_cpu_ns"] / 1e6, 3)}


def over_budget_max(res, ndr_pps):
    """The largest over_budget_fraction (trial_switch_figures()) of the search's valid trials
    offered at most `ndr_pps`, or None where the switch does not report it."""
    vals = [trial_switch_figures(t.info.cycles).get("over_budget_fraction") for t in res.trials
            if t.valid and t.info.offered_pps <= ndr_pps * 1.0001]
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


def measure_point(topo, label, size, opts):
    """NDR/PDR search and the latency trial for one frame size. Returns (row fields, the
    latency histogram)."""
    tag = "[%s %s %dB]" % (topo.topology, label, size)
    line = line_rate_pps(size) * (1 if topo.topology in topologies.UNIDIRECTIONAL else 2)
    cal_cycles, cal_pl, cal, cal_rxq = None, None, None, None
    if opts.max_mpps:
        max_pps = opts.max_mpps * 1e6
        cal_pps = None
    else:
        if getattr(opts, "uplink", None) and opts.placement == "near":
            # Its cycles per frame are compared across switches (the same offered load for
            # every one): at near core placement, as the search's trials.
            cal, cal_pl, _ = topologies.placed_trial(topo, 0, size, opts.trial, opts.flows,
                                                     opts.placement_wait, 3, log)
        else:
            cal = topo.trial(0, size, opts.trial, flows=opts.flows)
        cal_pps = cal.rx / cal.duration_s
        cal_cycles = cal.cycles["switch"] if cal.cycles else None
        cal_rxq = (cal.cycles or {}).get("rxq")
        log("%s calibration (back-pressured, as fast as possible): %.3f Mpps carried, "
            "loss %d, gen TX %.0f cycles/frame, switch %s cycles/frame%s" % (
                tag, cal_pps / 1e6, cal.lost, cal.doc.get("tx_cycles_per_packet", 0),
                cal_cycles, "" if cal_pl is None else " (core placement %s)" % cal_pl))
        if cal.rx == 0:
            raise RuntimeError("%s no frame came back in the calibration trial" % tag)
        max_pps = min(line, 1.25 * cal_pps)
    precision = parse_precision(opts.precision, max_pps)
    n = [0]

    placements = []
    repeats = [0]

    def trial_fn(rate):
        n[0] += 1
        if opts.placement == "near":
            run, pl, rep = topologies.placed_trial(topo, rate, size, opts.trial, opts.flows,
                                                   opts.placement_wait, 3, log)
            repeats[0] += rep
        else:
            run, pl = topo.trial(rate, size, opts.trial, flows=opts.flows), None
        placements.append(pl)
        short = run.offered_fraction() < 1.0 - opts.max_short
        t = rfc2544.Trial(rate, run.loss, not short, run)
        verdict = ("INVALID: generator offered %.1f%% of the plan" % (100 * run.offered_fraction())
                   if short else "%s NDR, %s PDR" % ("pass" if run.loss == 0 else "fail",
                                                    "pass" if run.loss <= opts.pdr_loss / 100
                                                    else "fail"))
        log("%s trial %d at %.3f Mpps: offered %.3f Mpps, lost %d of %d (%.4f%%; %d at a full "
            "ring), %s%s" % (tag, n[0], rate / 1e6, run.offered_pps / 1e6, run.lost, run.offered,
                             100 * run.loss, run.ring_full, verdict,
                             "" if pl in (None, "near") else " (core placement %s)" % pl))
        return t

    res = rfc2544.search(trial_fn, max_pps, precision, pdr_loss=opts.pdr_loss / 100.0,
                         retries=opts.retries, max_trials=opts.max_trials)
    # Report what was offered in the passing trials (the nominal rate less the slots the
    # generator skipped while it was preempted: at most --max-short).
    ndr = res.ndr_trial.info.offered_pps if res.ndr_trial is not None else 0.0
    pdr = res.pdr_trial.info.offered_pps if res.pdr_trial is not None else 0.0
    lat, hist, lat_rate = None, [], None
    if ndr > 0 and opts.latency_fraction > 0:
        lat_rate = ndr * opts.latency_fraction
        run = topo.trial(lat_rate, size, opts.trial, flows=opts.flows)
        lat, hist = run.latency, run.histogram
        log("%s latency trial at %.3f Mpps (%.0f%% of NDR): lost %d, one-way ns %s" % (
            tag, lat_rate / 1e6, 100 * opts.latency_fraction, run.lost, lat))
    cycles = res.ndr_trial.info.cycles if res.ndr_trial is not None else None
    if cycles:  # cycles per frame only (trial_switch_figures() has the rest, per trial)
        cycles = {k: v for k, v in cycles.items() if k in ("switch", "rxq")}
    log("%s NDR %.3f Mpps%s, PDR %.3f Mpps%s (offered; %d trials)" % (
        tag, ndr / 1e6, " (generator-limited)" if res.ndr_gen_limited else "",
        pdr / 1e6, " (generator-limited)" if res.pdr_gen_limited else "", len(res.trials)))
    fields = dict(
        ndr_mpps=round(ndr / 1e6, 4), pdr_mpps=round(pdr / 1e6, 4),
        cycles_per_packet=cycles, latency_ns=lat,
        ndr_gen_limited=res.ndr_gen_limited, pdr_gen_limited=res.pdr_gen_limited,
        # Passed at the search's maximum: the true value may be higher.
        ndr_at_max=res.ndr >= max_pps, pdr_at_max=res.pdr >= max_pps,
        latency_rate_mpps=round(lat_rate / 1e6, 4) if lat_rate else None,
        search={"max_mpps": round(max_pps / 1e6, 4),
                "calibration_mpps": round(cal_pps / 1e6, 4) if cal_pps is not None else None,
                "calibration_cycles": cal_cycles, "calibration_placement": cal_pl,
                "calibration_rxq_cycles": cal_rxq,
                "calibration_offered_mpps": round(cal.offered_pps / 1e6, 4) if cal else None,
                "calibration_gen_cycles": round(cal.doc.get("tx_cycles_per_packet", 0))
                if cal else None,
                "precision_mpps": round(precision / 1e6, 4),
                "pdr_loss_percent": opts.pdr_loss,
                "ndr_nominal_mpps": round(res.ndr / 1e6, 4),
                "pdr_nominal_mpps": round(res.pdr / 1e6, 4),
                "ndr_interval_mpps": [round(x / 1e6, 4) for x in res.ndr_interval],
                "pdr_interval_mpps": [round(x / 1e6, 4) for x in res.pdr_interval],
                "queue_size": opts.queue_size,
                "trials": [dict({"mpps": round(t.rate / 1e6, 4), "loss": t.loss, "valid": t.valid,
                                 "offered_mpps": round(t.info.offered_pps / 1e6, 4),
                                 "core_placement": pl}, **trial_switch_figures(t.info.cycles))
                           for t, pl in zip(res.trials, placements)]},
        # budget=US: the largest share of frames delivered past US (on CPU) in any valid
        # trial at or below the NDR (None: not virtlink)
        over_budget_max_fraction=over_budget_max(res, ndr),
        # Trials kept although their core placement was not near (far, or changed during
        # the trial) after the repeats placed_trial() allows; None: placement not probed.
        trials_not_near=sum(1 for pl in placements if pl not in (None, "near"))
        if any(pl is not None for pl in placements) else None,
        placement_repeats=repeats[0])
    return fields, hist


def spread(vals):
    """(max - min) / median of `vals`, or None for fewer than two values or a zero median."""
    if len(vals) < 2 or not statistics.median(vals):
        return None
    return round((max(vals) - min(vals)) / statistics.median(vals), 4)


def measure_repeated(topo, label, size, opts):
    """measure_point() --repeat times: every figure of the run whose NDR is the median (the
    lower of the middle two for an even count: one run's NDR, PDR, latency and cycles, never
    an average of runs), with every run's NDR and PDR and their spreads ((max - min) /
    median)."""
    runs = []
    for r in range(opts.repeat):
        if opts.repeat > 1:
            log("%s %d B: repeat %d of %d" % (label, size, r + 1, opts.repeat))
        runs.append(measure_point(topo, label, size, opts))
    order = sorted(range(len(runs)), key=lambda i: runs[i][0]["ndr_mpps"])
    fields, hist = runs[order[(len(order) - 1) // 2]]
    fields = dict(fields)
    ndrs = [f["ndr_mpps"] for f, _ in runs]
    pdrs = [f["pdr_mpps"] for f, _ in runs]
    over = [f["over_budget_max_fraction"] for f, _ in runs if f.get("over_budget_max_fraction") is not None]
    fields.update(ndr_runs=ndrs, pdr_runs=pdrs, ndr_spread=spread(ndrs), pdr_spread=spread(pdrs),
                  repeat=opts.repeat, over_budget_max_fraction=max(over) if over else None)
    return fields, hist


def bench_rfc2544(opts):
    topology = opts.name
    sizes = [int(x) for x in opts.frame_sizes.split(",")]
    configs = parse_switches(opts.switches or DEFAULT_SWITCHES[topology], topology)
    rows, hists, errors, diagnostics = [], {}, [], {}
    n_vnfs = len(topologies.TOPOLOGIES[topology][1])
    uplink = getattr(opts, "uplink", None)
    uplink_ports = topologies.UPLINK_TOPOLOGIES[topology][2] if uplink else None
    # Consecutive OVS configurations that differ only in their flows share one OVS
    # instance (its start-up takes seconds): the flows are replaced in place.
    groups = []
    for kind, mode in configs:
        if groups and groups[-1][0] == kind == "ovs-dpdk" and \
                topologies.OvsSwitch._bridges_for(mode, topologies.TOPOLOGIES[topology][0]) == \
                topologies.OvsSwitch._bridges_for(groups[-1][1][0],
                                                  topologies.TOPOLOGIES[topology][0]):
            groups[-1][1].append(mode)
        else:
            groups.append((kind, [mode]))
    for kind, modes in groups:
        if not available(kind):
            msg = "%s: not installed (scripts/install-deps.sh), skipped" % kind
            log(msg)
            errors.append(msg)
            continue
        label = "%s/%s" % (kind, modes[0])
        try:
            with contextlib.ExitStack() as stack:
                # Left in reverse: the processes stop before their veths go.
                links = stack.enter_context(topologies.VethLinks(uplink_ports)) \
                    if uplink else None
                tb = stack.enter_context(vltest.Testbed(None))
                sw = topologies.make_switch(tb, kind, modes[0], pmd_threads=opts.pmd_threads,
                                            queues=opts.queues)
                topo = topologies.Topology(tb, topology, sw, queue_size=opts.queue_size,
                                           ring=opts.ring, queues=opts.queues, uplink=uplink,
                                           links=links, gen_wire=opts.gen_wire,
                                           vnf_batch=opts.vnf_sched == "batch")
                t0 = time.time()
                topo.start()
                topo.start_gen()
                log("[%s %s] started in %.1f s" % (topology, label, time.time() - t0))
                for mode in modes:
                    label = "%s/%s" % (kind, mode)
                    if mode != sw.mode:
                        sw.set_mode(mode)
                    for size in sizes:
                        fields, hist = measure_repeated(topo, label, size, opts)
                        rows.append(report.row(
                            experiment=topology, topology=topology, switch=kind, mode=mode,
                            policy="rx-batch" if kind == "virtlink" else None,
                            pmd_mode="poll", vnfs=n_vnfs, flows=opts.flows, frame_size=size,
                            trial_s=opts.trial,
                            vnf_pmd_mode="interrupt" if n_vnfs else None,
                            ring=opts.ring, queues=opts.queues,
                            pmd_threads=opts.pmd_threads if kind == "virtlink" else 1,
                            # One way (p2v): one stream, as batching's rows say; null
                            # for the two-way topologies, as before.
                            streams=1 if topology in topologies.UNIDIRECTIONAL else None,
                            uplink=uplink, gen_wire=opts.gen_wire if uplink else None,
                            **fields))
                        if hist:
                            hists.setdefault(size, {})[label] = hist
                # Where frames were lost, over all trials: the switch's drops by reason
                # (virtlink) and the VNFs' counters.
                diag = {}
                if kind == "virtlink":
                    st = tb.switch_stats()
                    diag["switch_ports"] = {
                        n: {k: p[k] for k in ("rx_packets", "tx_packets", "drops")}
                        for n, p in st.items()}
                    if uplink:  # the uplinks' wire and device counters
                        diag["uplinks"] = {n: dict(p.get("uplink") or {}, type=p["type"])
                                           for n, p in st.items() if n in uplink_ports}
                diag["vnfs"] = topo.vnf_stats()
                diagnostics["%s/%s" % (kind, "+".join(modes))] = diag
                topo.stop()
        except (RuntimeError, vltest.TestTimeout, AssertionError) as e:
            msg = "%s: failed: %s" % (label, str(e).strip().splitlines()[0] if str(e) else e)
            log(msg)
            errors.append(msg)
    return rows, hists, errors, diagnostics


# ---------------------------------------------------------------------------------------
# loopback

def _signal_all(tb, topo, sig):
    """Sends `sig` to every process of a Testbed and its switch (SIGSTOP parks a busy-polling
    topology while another one is measured; SIGCONT wakes it)."""
    for pid in [p.p.pid for p in tb.procs if p.p.poll() is None] + \
            topologies.topology_pids(topo):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def bench_loopback_gen(opts):
    """All configurations start at once, each parked (SIGSTOP) while another runs, and their
    runs interleave (run 1 of each, then run 2 of each, ...), so that the host's core
    placement, which changes every few seconds (bench/README.md "Core placement"), is as
    likely to be shared by the switches compared."""
    sizes = [int(x) for x in opts.frame_sizes.split(",")]
    runs = opts.repeat if opts.repeat_given else (1 if opts.quick else opts.runs)
    configs = [("virtlink", "xconnect"), ("virtlink", "bridge"), ("testpmd", "io")]
    with contextlib.ExitStack() as stack:
        up = []  # (kind, mode, Testbed, Topology)
        for kind, mode in configs:
            if not available(kind):
                log("%s: not installed, skipped" % kind)
                continue
            tb = stack.enter_context(vltest.Testbed(None))
            topo = topologies.Topology(
                tb, "p2p", topologies.make_switch(tb, kind, mode, pmd_threads=opts.pmd_threads,
                                                  queues=opts.queues),
                ring=opts.ring, queues=opts.queues)
            try:
                topo.start()
                topo.start_gen()
            except (RuntimeError, vltest.TestTimeout, AssertionError) as e:
                msg = "%s/%s: failed: %s" % (kind, mode, str(e).strip().splitlines()[0]
                                             if str(e) else e)
                log(msg)
                opts.loopback_errors.append(msg)
                continue
            _signal_all(tb, topo, signal.SIGSTOP)
            up.append((kind, mode, tb, topo))
        for size in sizes:
            for kind, mode, tb, topo in up:  # warm-up
                _signal_all(tb, topo, signal.SIGCONT)
                topo.trial(0, size, min(1.0, opts.trial))
                _signal_all(tb, topo, signal.SIGSTOP)
            for r in range(runs):
                for kind, mode, tb, topo in up:
                    _signal_all(tb, topo, signal.SIGCONT)
                    try:
                        before = topologies.probe_placement(tb, topologies.topology_pids(topo))
                        run = topo.trial(0, size, opts.trial)
                        after = topologies.probe_placement(tb, topologies.topology_pids(topo))
                    finally:
                        _signal_all(tb, topo, signal.SIGSTOP)
                    pl = topologies.placement(before, after)
                    mpps = run.rx / run.duration_s / 1e6
                    log("[loopback %s/%s %dB] run %d: %.3f Mpps carried (gen TX %.0f "
                        "cycles/frame; core placement %s, probe %s/%s cycles)"
                        % (kind, mode, size, r + 1, mpps,
                           run.doc.get("tx_cycles_per_packet", 0), pl or "unknown",
                           before, after))
                    hz = (run.doc.get("clock") or {}).get("hz")
                    if hz:
                        opts.tsc_hz = hz
                    opts.loopback_runs.setdefault((kind, mode, size), []).append(
                        {"mpps": mpps, "placement": pl, "probe_cycles": [before, after],
                         "cycles": run.cycles["switch"] if run.cycles else None,
                         "gen_cycles": run.doc.get("tx_cycles_per_packet", 0)})
        for kind, mode, tb, topo in up:
            _signal_all(tb, topo, signal.SIGCONT)
            topo.stop()
    results = loopback_by_placement(opts.loopback_runs, sizes, configs, opts)
    return loopback_table(results, sizes, configs, opts, "gen")


def common_placement(runs, keys):
    """The core placement every key in `keys` has runs in ("near" first), or None; "any"
    when no run was probed (every run counts)."""
    present = [k for k in keys if runs.get(k)]
    if present and all(r["placement"] is None for k in present for r in runs[k]):
        return "any"
    for pl in ("near", "far"):
        if present and all(any(r["placement"] == pl for r in runs[k]) for k in present):
            return pl
    return None


def _at(rs, pl):
    """(median Mpps, Mpps of the runs used, median cycles/frame, median gen cycles) of the
    runs `rs` at placement `pl` ("any": all of them)."""
    use = rs if pl == "any" else [r for r in rs if r["placement"] == pl]
    vals = [r["mpps"] for r in use]
    cpps = [r["cycles"] for r in use if r["cycles"]]
    return (statistics.median(vals), vals, round(statistics.median(cpps)) if cpps else None,
            round(statistics.median(r["gen_cycles"] for r in use)))


def loopback_by_placement(runs, sizes, configs, opts):
    """{key: (median Mpps, Mpps of the runs used, median cycles/frame)}. Each virtlink
    point is taken at the placement it shares with the anchor (testpmd io; near first:
    opts.placement_used[key]); the anchor's figure for that comparison is in
    opts.anchor_at[key]. A point that shares none with the anchor is shown at its own most
    common placement (opts.placement_used[key] None: no ratio); the anchor's row at its
    own. The median gen cycles go to opts.gen_cycles."""
    results = {}
    opts.placement_used, opts.anchor_at = {}, {}
    for size in sizes:
        a_key = ("testpmd", "io", size)
        a_runs = runs.get(a_key) or []
        for sw, mode in configs:
            k = (sw, mode, size)
            rs = runs.get(k) or []
            if not rs:
                continue
            pl = common_placement(runs, [k, a_key]) if k != a_key else None
            if pl is None:
                own = max(("near", "far", "changed", None),
                          key=lambda p: sum(1 for r in rs if r["placement"] == p))
                fig = _at(rs, own if any(r["placement"] is not None for r in rs) else "any")
                opts.placement_used[k] = "any" if own is None else (own if k == a_key else None)
            else:
                fig = _at(rs, pl)
                opts.placement_used[k] = pl
                if a_runs:
                    opts.anchor_at[k] = _at(a_runs, pl)[:3]
            results[k] = fig[:3]
            opts.gen_cycles[k] = fig[3]
    return results


# A loopback point (or its anchor) whose runs spread more than this ((max - min) / median)
# yields no ratio: the issue-15 steadiness bound is 30% around the median.
MAX_SPREAD = 0.3
# Below this fraction of its core busy, a busy-polling switch waited for the traffic side.
MIN_BUSY = 0.9


def busy_fraction(res, opts):
    """Fraction of one core the switch's forwarding thread was busy at the measured rate:
    its busy cycles per frame x frames per second / the TSC rate; None if unknown."""
    med, _, cpp = res
    hz = getattr(opts, "tsc_hz", None)
    if not cpp or not hz:
        return None
    return cpp * med * 1e6 / hz


def is_lower(results, key, opts):
    """True if the point's rate is a lower bound: the switch was idle part of the time, so
    the generator (its transmit and its receive work on one core) set the rate."""
    if key not in results:
        return False
    b = busy_fraction(results[key], opts)
    return b is not None and b < MIN_BUSY


def loopback_table(results, sizes, configs, opts, traffic):
    rows = []
    lines = ["%-10s %-9s %6s %10s %12s %11s %10s %10s %s" % ("switch", "mode", "bytes", "Mpps",
                                                              "vs testpmd", "cycles/pkt",
                                                              "cyc ratio", "gen cyc/f", "runs")]
    verdicts = []
    loaded = bool(getattr(opts, "loaded", None))
    for size in sizes:
        for sw, mode in configs:
            if (sw, mode, size) not in results:
                continue
            med, vals, cpp = results[(sw, mode, size)]
            gcyc = getattr(opts, "gen_cycles", {}).get((sw, mode, size))
            lower = is_lower(results, (sw, mode, size), opts)
            sp = spread(vals)
            a_key = ("testpmd", "io", size)
            pl_used = getattr(opts, "placement_used", {}).get((sw, mode, size), "any")
            # The anchor's figure at this point's placement (its own row's otherwise).
            anchor_fig = getattr(opts, "anchor_at", {}).get((sw, mode, size), results.get(a_key))
            anchor = anchor_fig[0] if anchor_fig else None
            unsteady = (sp or 0) > MAX_SPREAD or (spread(anchor_fig[1]) or 0) > MAX_SPREAD \
                if anchor_fig else False
            a_busy = busy_fraction(anchor_fig, opts) if anchor_fig else None
            a_lower = a_busy is not None and a_busy < MIN_BUSY
            all_runs = getattr(opts, "loopback_runs", {}).get((sw, mode, size), [])
            ratio = med / anchor if anchor and pl_used is not None and not (
                lower or a_lower or loaded or unsteady) else None
            # The switch's own busy cycles per frame against the anchor's: valid even when
            # the generator set the rate (idle polls are not counted; a partial burst only
            # makes a frame dearer), not under load nor across placements.
            a_cpp = anchor_fig[2] if anchor_fig else None
            cyc_ratio = cpp / a_cpp if cpp and a_cpp and pl_used is not None and not loaded \
                else None
            if cyc_ratio and sw != "testpmd":
                verdicts.append("verdict: %s/%s %d B: %d cycles per frame, %.2fx testpmd io's %d "
                                "(core placement %s)" % (sw, mode, size, cpp, cyc_ratio, a_cpp,
                                                         pl_used))
            if pl_used is None and sw != "testpmd" and anchor:
                verdicts.append("verdict: %s/%s %d B: no run shares its core placement with "
                                "the anchor's (%s here): no ratio" % (
                                    sw, mode, size, ", ".join(
                                        str(r["placement"]) for r in all_runs)))
            if lower:
                verdicts.append("verdict: %s/%s %d B: %.3f Mpps is a lower bound (the switch was "
                                "busy %.0f%% of its core: the generator was the limit): no ratio"
                                % (sw, mode, size, med, 100 * busy_fraction(
                                    results[(sw, mode, size)], opts)))
            elif unsteady and sw != "testpmd" and anchor:
                verdicts.append("verdict: %s/%s %d B: not steady (spread above %.0f%% here or in "
                                "the anchor): no ratio" % (sw, mode, size, 100 * MAX_SPREAD))
            lines.append("%-10s %-9s %6d %10.3f %12s %11s %10s %10s %s%s" % (
                sw, mode, size, med, "%.2fx" % ratio if ratio else ("lb" if lower else "-"),
                cpp if cpp is not None else "-", "%.2fx" % cyc_ratio if cyc_ratio else "-",
                gcyc if gcyc else "-",
                " ".join("%.3f" % v for v in vals) + (
                    "  [%s: %s]" % (pl_used or "own", " ".join(
                        "%s%s" % (("%.2f" % r["mpps"]), (r["placement"] or "?")[0])
                        for r in all_runs)) if all_runs and pl_used != "any" else ""),
                "  (spread %.0f%%)" % (100 * sp) if sp is not None else ""))
            rows.append(report.row(
                experiment="loopback", topology="p2p", switch=sw, mode=mode,
                policy="rx-batch" if sw == "virtlink" else None, pmd_mode="poll", vnfs=0,
                flows=1, frame_size=size, trial_s=opts.trial,
                cycles_per_packet={"switch": cpp} if cpp else None,
                mpps=round(med, 4), mpps_runs=[round(v, 4) for v in vals],
                ratio_to_testpmd=round(ratio, 3) if ratio else None, traffic=traffic,
                ring=getattr(opts, "ring", "split"), queues=getattr(opts, "queues", 1),
                pmd_threads=getattr(opts, "pmd_threads", 1) if sw == "virtlink" else 1,
                gen_tx_cycles_per_packet=getattr(opts, "gen_cycles", {}).get((sw, mode, size)),
                mpps_spread=sp, lower_bound=lower, loaded=loaded,
                core_placement=pl_used if pl_used != "any" else None,
                cycles_ratio_to_testpmd=round(cyc_ratio, 3) if cyc_ratio else None,
                runs_by_placement=[{"placement": r["placement"], "mpps": round(r["mpps"], 4),
                                    "cycles_per_packet": r["cycles"],
                                    "probe_round_trip_cycles": r["probe_cycles"]}
                                   for r in all_runs] or None,
                switch_busy_fraction=round(busy_fraction(results[(sw, mode, size)], opts), 3)
                if busy_fraction(results[(sw, mode, size)], opts) is not None else None))
    lines += verdicts
    if not loaded:
        lines += placement_lines(sizes, configs, opts)
    if loaded:
        lines.append(opts.loaded)
    return rows, lines


def placement_lines(sizes, configs, opts):
    """One line per virtlink point and core placement that it shares with testpmd io (both
    near and far where both have runs): cycles per frame and Mpps there, with their ratios
    to the anchor's at the same placement (the rate's "lb" when the switch was under 90%
    busy, "-" when either side's runs spread over MAX_SPREAD)."""
    runs = getattr(opts, "loopback_runs", {})
    out = []
    for size in sizes:
        a_runs = runs.get(("testpmd", "io", size)) or []
        for sw, mode in configs:
            if sw == "testpmd":
                continue
            rs = runs.get((sw, mode, size)) or []
            for pl in ("near", "far"):
                if not any(r["placement"] == pl for r in rs) or \
                        not any(r["placement"] == pl for r in a_runs):
                    continue
                v, a = _at(rs, pl), _at(a_runs, pl)
                cyc = "%d vs %d cycles/frame (%.2fx)" % (v[2], a[2], v[2] / a[2]) \
                    if v[2] and a[2] else "cycles unknown"
                lower = (busy_fraction(v[:3], opts) or 1) < MIN_BUSY or \
                    (busy_fraction(a[:3], opts) or 1) < MIN_BUSY
                unsteady = (spread(v[1]) or 0) > MAX_SPREAD or (spread(a[1]) or 0) > MAX_SPREAD
                rate = "%.3f vs %.3f Mpps (%s)" % (
                    v[0], a[0], "lb" if lower else "-" if unsteady else "%.2fx" % (v[0] / a[0]))
                out.append("at %s placement: %s/%s %d B: %s, %s; %d and %d runs" % (
                    pl, sw, mode, size, cyc, rate, len(v[1]), len(a[1])))
    return out


# ---------------------------------------------------------------------------------------

BENCHES = [
    ("p2p", "RFC 2544 NDR/PDR and latency: gen -> switch -> gen (virtlink, testpmd, OVS-DPDK)"),
    ("pvp", "the same through one VNF: gen -> switch -> vnf -> switch -> gen"),
    ("pvvp", "the same through two VNFs"),
    ("loopback", "the most a p2p path carries with the traffic side sending as fast as it can"),
    ("batching", "seed 003: NDR vs flows and latency per flush policy, OVS-DPDK tx-flush-interval"),
    ("chain", "seed 000: N chained VNFs switched (virtlink, OVS-DPDK, testpmd) and direct links"),
    ("tcp", "iperf3 between guests through virtlink, QEMU userspace networking and native"),
    ("ping", "ping RTT between guests through virtlink (poll/interrupt/adaptive), QEMU, native"),
    ("soak", "traffic with port churn for minutes: switch RSS, fds and mappings over time"),
    ("upgrade", "ctl upgrade vs restart (virtlink, OVS-DPDK): frames lost, longest gap"),
]


def list_benches():
    print("usage: virtlink bench NAME [options]   (virtlink bench NAME --help: its options)\n")
    for name, what in BENCHES:
        print("  %-9s %s" % (name, what))
    print("\nEvery bench takes --json FILE and --quick; see bench/README.md.")
    return 0


def pmd_share_note(opts):
    """What shares a core when virtlink runs two PMD threads (2 CPUs)."""
    if opts.pmd_threads == 1:
        return ""
    return ("; virtlink with --pmd-threads 2: PMD threads on CPUs %d and %d (--pmd-cores %d,%d), "
            "the one on CPU %d SHARES it with the generator (both busy-poll: the kernel "
            "time-slices them), --pmd-rx-writers follow; testpmd and OVS keep one "
            "forwarding thread" % (
                min(topologies.SWITCH_CPU, topologies.GEN_CPU),
                max(topologies.SWITCH_CPU, topologies.GEN_CPU),
                min(topologies.SWITCH_CPU, topologies.GEN_CPU),
                max(topologies.SWITCH_CPU, topologies.GEN_CPU), topologies.GEN_CPU))


def main():
    if sys.argv[1:2] in (["list"], ["-h"], ["--help"], []):
        return list_benches()
    if sys.argv[1:2] == ["ping"]:  # guest ping RTT: its own module and options
        import ping_bench
        return ping_bench.main(sys.argv[2:])
    if sys.argv[1:2] == ["tcp"]:  # guest and native iperf3 TCP: its own module and options
        import tcp_bench
        return tcp_bench.main(sys.argv[2:])
    if sys.argv[1:2] == ["chain"]:  # VNF chains, switched and direct: chain_bench.py
        import chain_bench
        return chain_bench.main(sys.argv[2:])
    if sys.argv[1:2] == ["upgrade"]:  # ctl upgrade vs restarts: upgrade_bench.py
        import upgrade_bench
        return upgrade_bench.main(sys.argv[2:])
    if sys.argv[1:2] == ["soak"]:  # resources over time under traffic and port churn
        import soak_bench
        return soak_bench.main(sys.argv[2:])
    ap = argparse.ArgumentParser(prog="virtlink bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", choices=["p2p", "p2v", "pvp", "pvvp", "loopback", "batching"])
    ap.add_argument("--virtlink", required=True, help=argparse.SUPPRESS)
    ap.add_argument("--json", help="write the bench JSON (INTERFACES.md) here")
    ap.add_argument("--quick", action="store_true",
                    help="64 and 1518 B, 1 s trials, 10%% precision, one run per loopback "
                    "point (p2p with every anchor: about 2-4 minutes)")
    ap.add_argument("--frame-sizes", help="comma-separated bytes (default %s; loopback and "
                    "--quick: 64,1518)" % ALL_SIZES)
    ap.add_argument("--switches", help="batching: virtlink and/or ovs-dpdk; else "
                    "comma-separated KIND:MODE of virtlink:xconnect, "
                    "virtlink:bridge (p2p), testpmd:io, ovs-dpdk:xconnect, ovs-dpdk:normal "
                    "(default: all that apply)")
    ap.add_argument("--trial", type=float, help="seconds per trial (default 2, --quick 1; "
                    "loopback 5, --quick 2; batching 2, --quick 0.5; vsperf uses 60)")
    ap.add_argument("--precision", help="search resolution: PERCENT%% of the maximum rate or "
                    "an absolute rate (50k, 0.1M) in frames/s (default 2%%; --quick 10%%)")
    ap.add_argument("--max-mpps", type=float, help="maximum offered rate, all directions "
                    "(default: min(2 x 10GbE line rate, 1.25 x a back-pressured trial))")
    ap.add_argument("--pdr-loss", type=float, default=0.5, help="PDR loss, percent (0.5)")
    ap.add_argument("--latency-fraction", type=float, default=0.9,
                    help="latency trial at this fraction of NDR (0.9; 0 skips it)")
    ap.add_argument("--flows", type=int, default=1, help="flows per stream (1)")
    ap.add_argument("--topologies", help="batching: p2v and/or pvp (default both)")
    ap.add_argument("--flows-list", help="batching: comma-separated flow counts (default "
                    "10,32,50,100,500,1000; --quick 10,1000)")
    ap.add_argument("--retries", type=int, help="repeats of a trial the generator could not "
                    "offer (2; --quick 1)")
    ap.add_argument("--max-short", type=float, default=0.05,
                    help="a trial is invalid when the generator offered less than "
                    "1 - this of its planned frames (0.05)")
    ap.add_argument("--queue-size", type=int,
                    help="entries of the generator's rings (the switch's receive queue from "
                    "the generator, as deep as a NIC's: 1024; batching 4096, the deepest "
                    "rings of common NICs, which absorb the host's stalls of about 1 ms at "
                    "the rates measured: bench/README.md 'Host stalls')")
    ap.add_argument("--max-trials", type=int, default=30, help="per search (30)")
    ap.add_argument("--runs", type=int, default=3, help="loopback: runs per point (median; "
                    "default 3, --quick 1); --repeat N overrides it")
    ap.add_argument("--placement", choices=("near", "any"), default="near",
                    help="p2p/pvp/pvvp/batching: take each trial at near core placement "
                    "(bench/README.md 'Core placement': wait for it, repeat a trial whose "
                    "placement changed; default near) or at whatever the host gives (any)")
    ap.add_argument("--placement-wait", type=float, default=None,
                    help="seconds a trial waits for near placement before it runs anyway "
                    "(20; --quick 5)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="measure every point N times and report the median and spread "
                    "((max - min) / median) of each figure (default 1; loopback: --runs)")
    ap.add_argument("--warm", type=float, default=2.0, help="loopback --traffic testpmd: "
                    "seconds before measuring (2)")
    ap.add_argument("--traffic", choices=["gen", "testpmd"], default="gen",
                    help="loopback: traffic side (gen)")
    ap.add_argument("--ring", choices=["split", "packed"], default="split",
                    help="loopback, p2p: virtqueue layout of the traffic side's rings (gen "
                    "--ring; --traffic testpmd: virtio-user packed_vq=1)")
    ap.add_argument("--queues", type=int, default=1,
                    help="loopback, p2p: queue pairs of the traffic side's ports (gen --queues: "
                    "flow f on queue f %% N, so use --flows >= N; testpmd as the switch gets "
                    "net_vhost queues=N and --rxq/--txq=N; virtlink takes what the front-end "
                    "negotiates, up to its --max-queues, 8; default 1)")
    ap.add_argument("--pmd-threads", type=int, choices=[1, 2], default=1,
                    help="loopback, p2p: virtlink PMD threads (1: --pmd-cores 1; 2: --pmd-cores "
                    "0,1, the second sharing CPU 0 with the generator; rxqs (port, queue pair) "
                    "are dealt to the threads round-robin and receive-queue writers follow the "
                    "traffic, --pmd-rx-writers follow; default 1)")
    ap.add_argument("--uplink", choices=sorted(topologies.UPLINKS),
                    help="p2v, pvp, batching: the \"P\" is a veth pair with the generator in a "
                    "network namespace of its own behind it: the switch's port on its end is "
                    "an uplink of this type (virtlink af-xdp:, af-packet:, or dpdk:net_af_xdp; "
                    "testpmd and OVS-DPDK the DPDK vdev net_af_xdp, or net_af_packet for "
                    "af-packet, on the same interface); default: none (a vhost-user port of "
                    "the generator's)")
    ap.add_argument("--gen-wire", choices=topologies.GEN_WIRES, default="af-xdp",
                    help="with --uplink: the generator's port on its end of each veth (gen "
                    "--port TYPE:IFACE; default af-xdp)")
    ap.add_argument("--vnf-sched", choices=("batch", "other"), default="batch",
                    help="pvp, pvvp, batching: the VNFs' scheduling policy: batch (SCHED_BATCH, "
                    "default: a VNF woken by a notification does not preempt its sender, the "
                    "switch or the generator, mid-batch) or other (the default policy; "
                    "bench/README.md 'VNFs sharing a CPU')")
    ap.add_argument("--plot-dir", default=None,
                    help="where PNG plots go (default: the --json file's directory, else the "
                    "current directory)")
    ap.add_argument("--no-plot", action="store_true")
    opts = ap.parse_args()
    if opts.plot_dir is None:
        opts.plot_dir = os.path.dirname(os.path.abspath(opts.json)) if opts.json else os.getcwd()
    vltest.VIRTLINK = os.path.abspath(opts.virtlink)
    if opts.queues < 1 or opts.queues > 64:
        ap.error("--queues: 1..64")
    if opts.uplink and opts.name not in topologies.UPLINK_TOPOLOGIES and opts.name != "batching":
        ap.error("--uplink: p2v, pvp and batching only")
    opts.loopback_errors, opts.gen_cycles, opts.loopback_runs = [], {}, {}
    opts.repeat_given = opts.repeat is not None
    if opts.repeat is None:
        opts.repeat = 1
    if opts.repeat < 1:
        ap.error("--repeat: at least 1")
    if opts.queue_size is None:
        opts.queue_size = 4096 if opts.name == "batching" else 1024
    if opts.name == "batching":
        # Table (a) is at 64 B; --frame-sizes are table (b)'s (default 512,1024,1280,1518).
        if opts.trial is None:
            opts.trial = 0.5 if opts.quick else 2.0
        if opts.precision is None:
            opts.precision = "15%" if opts.quick else "2%"
        if opts.quick and opts.max_trials > 10:
            # 10: the generator cannot pace the search's first rates (1.25x a back-pressured
            # trial) on this machine; those trials are repeated, and count
            opts.max_trials = 10
        if "--latency-fraction" not in " ".join(sys.argv):
            opts.latency_fraction = 0.5
    elif opts.frame_sizes is None:
        opts.frame_sizes = "64,1518" if (opts.quick or opts.name == "loopback") else ALL_SIZES
    if opts.trial is None:
        opts.trial = (1.0 if opts.quick else 2.0) if opts.name != "loopback" else \
            (2.0 if opts.quick else 5.0)
    if opts.precision is None:
        opts.precision = "10%" if opts.quick else "2%"
    if opts.retries is None:
        opts.retries = 1 if opts.quick else 2
    if opts.placement_wait is None:
        opts.placement_wait = 5.0 if opts.quick else 20.0
    if opts.quick and opts.max_trials > 12:
        opts.max_trials = 12  # keeps --quick under 3 minutes on a noisy machine
    command = report.bench_command("", sys.argv[1:])
    version, anchors = report.versions(vltest.VIRTLINK)
    load0 = report.load_average()
    opts.busy0 = report.cpu_busy()
    opts.loaded = report.load_verdict(opts.busy0)
    t0 = time.time()
    errors, plots, diagnostics = [], [], {}
    if opts.name == "batching":
        import batching_bench
        core_plan = topologies.CORE_PLAN
        if opts.uplink:
            core_plan += ("; the \"P\" of P2V and PVP: a veth pair, the switch's uplink (%s) "
                          "on its end, the generator in its own network namespace behind the "
                          "other (%s port)" % (opts.uplink, opts.gen_wire)) + \
                topologies.UPLINK_CORE_PLAN
        rows, lines, errors, diagnostics, plots = batching_bench.run(opts, measure_repeated, log)
        plots = [p for p in plots if p]
        note = ("NDR: Mpps offered in the passing trial (0 loss), unidirectional, 64 B, searched "
                "to %s with %.3g s trials; latency: one-way (gen TSC timestamps), min/avg/max in "
                "us at the stated rate. virtlink policies set at run time with ctl set-flush; "
                "OVS tx-flush-interval set with ovs-vsctl in the same instance." % (
                    opts.precision, opts.trial))
    elif opts.name == "loopback":
        if opts.traffic == "gen":
            core_plan = ("switch under test (virtlink PMD thread or testpmd's forwarding lcore) "
                         "busy-polls on CPU 1; the traffic side (virtlink gen, one thread, "
                         "sending as fast as the rings allow, %s rings, %d queue pair%s) "
                         "busy-polls on CPU 0" % (opts.ring, opts.queues,
                                                  "" if opts.queues == 1 else "s")) + \
                pmd_share_note(opts)
            rows, lines = bench_loopback_gen(opts)
            errors = opts.loopback_errors
        else:
            core_plan = loopback_testpmd.CORE_PLAN + " (virtio-user %s rings, queues=%d)" % (
                opts.ring, opts.queues) + pmd_share_note(opts)
            rows, lines = loopback_testpmd.bench(opts, loopback_table, loopback_by_placement)
        note = ("Mpps: frames the traffic side received per second over the trial, both "
                "directions; cycles/pkt: the switch's forwarding thread's busy TSC cycles per "
                "frame (virtlink: its own counter, all PMD threads; testpmd: "
                "--record-core-cycles, with --traffic gen); gen cyc/f: the generator's own TSC "
                "cycles per transmitted frame (its TX work: reclaim, stamp, post, publish; "
                "--traffic gen); runs: the Mpps of the runs the figures come from, then [P: "
                "every run with its core placement] (n near, f far, c changed during the run: "
                "bench/micro/core_to_core before and after it), P the placement the figures "
                "come from: the one the point shares with testpmd io (near first), else the "
                "point's most common ('own', no ratio); each figure is its own median over "
                "those runs")
    else:
        core_plan = topologies.CORE_PLAN + ("; generator rings: %s, %d queue pair%s" % (
            opts.ring, opts.queues, "" if opts.queues == 1 else "s")) + pmd_share_note(opts)
        if opts.uplink:
            core_plan += ("; the \"P\": a veth pair per uplink, the switch's uplink (%s) on "
                          "its end, the generator in its own network namespace behind the "
                          "other (%s port)" % (opts.uplink, opts.gen_wire)) + \
                topologies.UPLINK_CORE_PLAN
        rows, hists, errors, diagnostics = bench_rfc2544(opts)
        vl_modes = ["xconnect", "bridge"] if opts.name in ("p2p", "p2v") else ["xconnect"]
        lines = report.throughput_table(rows, vl_modes, loaded=bool(opts.loaded))
        if opts.uplink:
            lines += [""] + report.cycles_table(rows, vl_modes, loaded=bool(opts.loaded))
        lb = [("verdict: %s/%s %d B: nothing measured: no trial passed, every failing one "
               "invalid (the generator offered too little of its plan: --max-short)" % (
                   r["switch"], r["mode"], r["frame_size"]))
              if not r["ndr_mpps"] and not r["pdr_mpps"] else
              ("verdict: %s/%s %d B: NDR %.3f Mpps is a lower bound (the generator could not "
               "offer more, or it passed at the search maximum): no ratio" % (
                   r["switch"], r["mode"], r["frame_size"], r["ndr_mpps"] or 0))
              for r in rows if report.lower_bound(r)]
        lines += lb + ([opts.loaded] if opts.loaded else [])
        for r in rows:
            r["loaded"] = bool(opts.loaded)
        note = ("NDR/PDR: Mpps over both directions (PDR: <= %.2g%% loss), offered in the passing "
                "trial; '+': a lower bound (the generator could not offer more, or it passed at "
                "the search maximum); lat@Mpps: the rate of the latency "
                "trial (%.0f%% of NDR); avg/p99/max: one-way latency there; cyc/pkt: the "
                "switch PMD's TSC cycles per frame at NDR (virtlink: its own counter; "
                "OVS: pmd-stats-show; testpmd: --record-core-cycles); vl-xc/this (vl-br/this): "
                "virtlink xconnect's (bridge's) NDR over this line's NDR ('lb': a lower "
                "bound on either side; 'pl': a trial of either kept at far or changed core "
                "placement). Trials of %.3g s (vsperf: 60 s), %s." % (
                    opts.pdr_loss, 100 * opts.latency_fraction, opts.trial,
                    "each at near core placement where the host gave it within %g s "
                    "(--placement near; a trial whose placement changed is repeated, up to 3 "
                    "in all)" % opts.placement_wait if opts.placement == "near"
                    else "at whatever core placement the host gave (--placement any)"))
        if opts.name in topologies.UNIDIRECTIONAL:
            note = note.replace("over both directions", "one way")
        if opts.uplink:
            note += (" Cycles table: the back-pressured trial (the generator sending as fast as "
                     "it can, with its own cost per frame, gen cyc/f, which includes the "
                     "kernel's delivery into the switch's socket: it differs by switch), what "
                     "it offered and what came back, and the switch's busy cycles per frame "
                     "there (cyc/f@max) and at NDR; vl-xc/this: virtlink's cyc/f@max over "
                     "this line's ('pl': either trial off near core placement). Each switch "
                     "counts its own busy cycles (virtlink: PMD passes that moved frames, wire "
                     "calls and the kernel's work inside them included; OVS: pmd-stats-show "
                     "processing cycles; testpmd: --record-core-cycles); rxq c/f (virtlink "
                     "only): the cycles of its rxq polls that returned frames, per frame, "
                     "in that trial (without the rest of the pass: the empty polls of the "
                     "other rxqs after them, the pass's bookkeeping), nearer what OVS and "
                     "testpmd count; the ratios use cyc/f@max.")
        if not opts.no_plot and report.have_gnuplot() and rows:
            name = opts.name + ("-quick" if opts.quick else "") + \
                ("-uplink-" + opts.uplink if opts.uplink else "")
            try:
                if len({r["frame_size"] for r in rows}) > 1:
                    p = report.plot_throughput(rows, os.path.join(opts.plot_dir, name + "-ndr.png"),
                                               "%s NDR vs frame size (%s)" % (opts.name, version))
                    plots.append(p)
                for size, h in sorted(hists.items()):
                    p = report.plot_latency_cdf(
                        h, os.path.join(opts.plot_dir, "%s-latency-%d.png" % (name, size)),
                        "%s one-way latency at %.0f%% of NDR, %d B" % (
                            opts.name, 100 * opts.latency_fraction, size))
                    plots.append(p)
            except RuntimeError as e:
                log("plot: %s" % e)
    load1 = report.load_average()
    print("virtlink bench %s   (%s, %s)" % (opts.name, time.strftime("%Y-%m-%d %H:%M"), version))
    report.print_summary(core_plan, load0, load1, lines, note, errors, plots, t0)
    if opts.json:
        report.write_json(opts.json, command, version, core_plan, rows, anchors=anchors,
                          errors=errors, load_average={"start": load0, "end": load1},
                          cpu_busy_before_start=opts.busy0, loaded=bool(opts.loaded),
                          method={"trial_s": opts.trial, "precision": opts.precision,
                                  "pdr_loss_percent": opts.pdr_loss,
                                  "latency_fraction": opts.latency_fraction,
                                  "max_short": opts.max_short, "retries": opts.retries,
                                  "queue_size": opts.queue_size,
                                  "note": note},
                          diagnostics=diagnostics)
        print("wrote " + opts.json)
    return 1 if (errors and not rows) else 0


if __name__ == "__main__":
    sys.exit(main())
