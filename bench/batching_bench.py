"""`virtlink bench batching`: output batching (seed 003, EXPERIMENTS.md section 3).

Reproduces both tables of the seed with virtlink's flush policies side by side with
OVS-DPDK's tx-flush-interval 0 and 50, all measured in the same run:
  (a) NDR (RFC 2544, 0 loss) at 64 B against the number of flows (10, 32, 50, 100, 500,
      1000; --quick: 10, 1000), for P2V and PVP;
  (b) one-way latency min/avg/max (ns) for 512, 1024, 1280, 1518 B in P2V, at one common
      offered rate for every configuration: --latency-fraction (0.5) of the lowest P2V
      64-B NDR that virtlink's policies reached at the largest flow count, capped at the
      10GbE line rate of each size (the seed sent at wire speed; here the common rate
      keeps the comparison at equal load).

Topologies on this machine (every port is a virtio front-end; the seed's "physical" NIC is
a `virtlink gen` port), unidirectional as the seed's:
  P2V  gen:g0 -> [g0 | g1] -> g1, where g1 (the generator's receive side) plays the VM's
       virtio-net receive queue and counts every frame by sequence number
  PVP  gen:g0 -> [g0 | v0] -> vnf (virtlink vnf, io, interrupt mode) -> [v1 | g1] -> gen:g1
Switch modes: P2V virtlink bridge (MAC learning: the N flows are N destination MACs looked
up per frame) vs OVS NORMAL; PVP virtlink xconnect vs OVS port-to-port flows (a bridge
domain per side is not in virtlink). One switch instance per topology and switch; the
policy is changed at run time between measurements (`virtlink ctl set-flush all P`,
`ovs-vsctl set Open_vSwitch . other_config:tx-flush-interval=N`).

With --uplink TYPE the "P" of both is a veth pair instead of a generator's vhost-user port
(bench/topologies.py UPLINK_TOPOLOGIES): the switch's uplink of that type on one end
(OVS-DPDK: a dpdk port on the same interface, net_af_xdp or net_af_packet), the generator in
a namespace of its own behind the other (--gen-wire).

PVP cannot be measured fairly here: the generator, the switch and the VNF busy-poll on 2
CPUs. Its rows say so (ndr_fair false) and carry the projected NDR with one core per
component (bench/projection.py: the switch's cycles per packet x 2 crossings and the VNF's,
from back-pressured trials at each point), tabled and plotted next to the measured one.

The harness (processes, gen trials, the NDR search, OVS) is bench/topologies.py and
virtlink_bench.measure_point, shared with p2p/pvp.
"""

import contextlib
import copy
import os

import _pylib  # noqa: F401  (puts pylib/ on sys.path)
import projection as pj
import report
import topologies
from vltestlib import vltest

POLICIES = ["immediate", "rx-batch", "interval=50", "budget=50"]
OVS_FLUSH = [0, 50]
FLOWS = [10, 32, 50, 100, 500, 1000]
QUICK_FLOWS = [10, 1000]
LAT_SIZES = [512, 1024, 1280, 1518]
TOPOS = [("p2v", "p2p"), ("pvp", "pvp")]  # (seed name, topologies.TOPOLOGIES key)


def config_label(kind, setting):
    return setting if kind == "virtlink" else "ovs:%d" % setting


def set_setting(sw, kind, setting):
    if kind == "virtlink":
        sw.tb.ctl("set-flush", "all", setting)
        got = {p["flush"] for p in sw.tb.switch_stats().values()}
        if got != {setting}:
            raise RuntimeError("set-flush %s: the switch reports %s" % (setting, got))
    else:
        sw.vsctl("set", "Open_vSwitch", ".", "other_config:tx-flush-interval=%d" % setting)


def run(opts, measure_point, log):
    """Returns (rows, table lines, errors, diagnostics, plots)."""
    flows_list = [int(x) for x in opts.flows_list.split(",")] if opts.flows_list else \
        (QUICK_FLOWS if opts.quick else FLOWS)
    lat_sizes = [int(x) for x in opts.frame_sizes.split(",")] if opts.frame_sizes else LAT_SIZES
    lat_flows = max(flows_list)
    rows, errors, diagnostics = [], [], {}
    ndr = {}      # (topo, label, flows) -> Mpps
    carried = {}  # (topo, label, flows) -> Mpps carried in the back-pressured calibration trial
    point = {}    # (topo, label, flows) -> every field of the point (measure_point)
    projected = {}  # ("pvp", label, flows) -> projected NDR, Mpps (bench/projection.py)
    lat = {}      # (label, size) -> latency dict
    hists = {}    # size -> {label: hist}
    lat_rate = {"pps": None}
    # --switches: the kinds to measure (virtlink, ovs-dpdk; default both); --topologies:
    # p2v and/or pvp (default both). Left out, a column or table stays empty and says so.
    want = set(k.split(":")[0] for k in opts.switches.split(",")) if opts.switches else \
        {"virtlink", "ovs-dpdk"}
    topos = [t for t in TOPOS if not opts.topologies or t[0] in opts.topologies.split(",")]
    kinds = [("virtlink", POLICIES)] if "virtlink" in want else []
    if "ovs-dpdk" not in want:
        errors.append("ovs-dpdk: left out (--switches), its columns are empty")
    elif topologies.have_ovs():
        kinds.append(("ovs-dpdk", OVS_FLUSH))
    else:
        errors.append("ovs-dpdk: not installed (scripts/install-deps.sh), its columns are empty")
    if len(topos) < len(TOPOS):
        errors.append("topologies: only %s (--topologies)" % ",".join(t[0] for t in topos))
    for seed_topo, topo_key in topos:
        for kind, settings in kinds:
            mode = ("bridge" if kind == "virtlink" else "normal") if seed_topo == "p2v" else "xconnect"
            tag = "%s %s/%s" % (seed_topo, kind, mode)
            uplink = getattr(opts, "uplink", None)
            try:
                with contextlib.ExitStack() as stack:
                    links = stack.enter_context(topologies.VethLinks(
                        topologies.UPLINK_TOPOLOGIES[seed_topo][2])) if uplink else None
                    tb = stack.enter_context(vltest.Testbed(None))
                    if kind == "virtlink":
                        sw = topologies.VirtlinkSwitch(tb, mode)
                    else:
                        sw = topologies.OvsSwitch(tb, mode, tx_flush_interval=settings[0])
                    topo = topologies.Topology(tb, seed_topo if uplink else topo_key, sw,
                                               queue_size=opts.queue_size, uplink=uplink,
                                               links=links, gen_wire=opts.gen_wire,
                                               vnf_batch=opts.vnf_sched == "batch")
                    topo.start()
                    topo.start_gen(unidirectional=True)
                    n_vnfs = topo.n_vnfs
                    for setting in settings:
                        label = config_label(kind, setting)
                        set_setting(sw, kind, setting)
                        for flows in flows_list:
                            o = copy.copy(opts)
                            o.flows = flows
                            o.latency_fraction = 0
                            fields, _ = measure_point(topo, "%s %s %d flows" % (tag, label, flows),
                                                      64, o)
                            ndr[(seed_topo, label, flows)] = fields["ndr_mpps"]
                            carried[(seed_topo, label, flows)] = fields["search"]["calibration_mpps"]
                            point[(seed_topo, label, flows)] = fields
                            extra = {}
                            if seed_topo == "pvp":
                                extra = pvp_projection(topo, o, flows, fields, log,
                                                       "%s %s %d flows" % (tag, label, flows))
                                projected[(seed_topo, label, flows)] = extra["projected_ndr_mpps"]
                            rows.append(report.row(
                                experiment="batching", topology=seed_topo, switch=kind, mode=mode,
                                policy=label if kind == "virtlink" else "tx-flush-interval=%d" % setting,
                                pmd_mode="poll", vnfs=n_vnfs, flows=flows, frame_size=64,
                                trial_s=opts.trial, streams=1, table="ndr_vs_flows",
                                uplink=uplink, **extra, **fields))
                    if seed_topo == "p2v":
                        if lat_rate["pps"] is None:
                            base = [ndr[("p2v", p, lat_flows)] for p in POLICIES
                                    if ndr.get(("p2v", p, lat_flows))]
                            lat_rate["basis"] = "NDR"
                            if len(base) < len(POLICIES):
                                # Some search found no passing rate (on a loaded machine the
                                # generator cannot keep its schedule): use what the paths
                                # carried back-pressured instead, and say so.
                                base = [carried[("p2v", p, lat_flows)] for p in POLICIES
                                        if carried.get(("p2v", p, lat_flows))]
                                lat_rate["basis"] = "carried (no NDR for every policy)"
                            if not base:
                                raise RuntimeError("no virtlink P2V rate: no latency rate")
                            lat_rate["pps"] = min(base) * 1e6 * opts.latency_fraction
                            log("[batching] latency trials at %.3f Mpps (%.0f%% of the lowest "
                                "virtlink P2V 64-B %s at %d flows), capped at 10GbE line rate" %
                                (lat_rate["pps"] / 1e6, 100 * opts.latency_fraction,
                                 lat_rate["basis"], lat_flows))
                        for setting in settings:
                            label = config_label(kind, setting)
                            set_setting(sw, kind, setting)
                            for size in lat_sizes:
                                rate = min(lat_rate["pps"], line_rate_pps(size))
                                r = latency_trial(topo, rate, size, opts, lat_flows)
                                log("[%s %s %dB] latency trial at %.3f Mpps: lost %d of %d, one-way "
                                    "ns %s" % (tag, label, size, rate / 1e6, r.lost, r.offered,
                                               r.latency))
                                lat[(label, size)] = dict(r.latency, avg_below_100us=r.avg_below_100us) \
                                    if r.latency else None
                                if r.histogram:
                                    hists.setdefault(size, {})[label] = r.histogram
                                rows.append(report.row(
                                    experiment="batching", topology="p2v", switch=kind, mode=mode,
                                    policy=label if kind == "virtlink" else
                                    "tx-flush-interval=%d" % setting,
                                    pmd_mode="poll", vnfs=0, flows=lat_flows, frame_size=size,
                                    trial_s=opts.trial, streams=1, latency_ns=r.latency,
                                    latency_avg_runs_ns=r.avg_runs,
                                    latency_avg_below_100us_ns=r.avg_below_100us,
                                    table="latency", latency_rate_mpps=round(rate / 1e6, 4),
                                    lost=r.lost, offered=r.offered, uplink=uplink))
                    diag = {}
                    if kind == "virtlink":
                        diag["switch_ports"] = {
                            n: {k: p.get(k) for k in ("rx_packets", "tx_packets", "drops",
                                                      "queue_age_max_ns", "queue_age_histogram")}
                            for n, p in tb.switch_stats().items()}
                    diag["vnfs"] = topo.vnf_stats()
                    diagnostics[tag] = diag
                    topo.stop()
            except (RuntimeError, vltest.TestTimeout, AssertionError) as e:
                msg = "%s: failed: %s" % (tag, str(e).strip().splitlines()[0] if str(e) else e)
                log(msg)
                errors.append(msg)
    labels = [config_label("virtlink", p) for p in POLICIES] + \
        [config_label("ovs-dpdk", f) for f in OVS_FLUSH]
    lines = tables(ndr, carried, lat, labels, flows_list, lat_sizes, lat_rate, lat_flows,
                   opts.latency_fraction, projected)
    lines += goals(ndr, carried, lat, flows_list, lat_sizes, point)
    plots = []
    if not opts.no_plot and report.have_gnuplot():
        name = "batching" + ("-quick" if opts.quick else "")
        try:
            for seed_topo, _ in TOPOS:
                plots.append(plot_ndr_vs_flows(ndr, seed_topo, labels, flows_list, os.path.join(
                    opts.plot_dir, "%s-%s-ndr.png" % (name, seed_topo)), projected))
            for size, h in sorted(hists.items()):
                plots.append(report.plot_latency_cdf(h, os.path.join(
                    opts.plot_dir, "%s-latency-%d.png" % (name, size)),
                    "batching P2V one-way latency, %d B, %d flows" % (size, lat_flows)))
        except RuntimeError as e:
            log("plot: %s" % e)
    return rows, lines, errors, diagnostics, plots


PVP_NOT_FAIR = ("measured PVP NDR is not fair here: the generator, the switch and the VNF "
                "busy-poll on 2 CPUs, so it measures their sharing (issue 21)")


def pvp_projection(topo, opts, flows, fields, log, tag):
    """PVP's projected NDR with one core per component (bench/projection.py): the switch's
    cycles per packet x 2 crossings and the VNF's, from back-pressured trials at 64 B. The
    row's fields for it; the point's own `cycles_per_packet` becomes per component."""
    carried, cyc, tsc, _, busy, wake = pj.cycles_repeated(topo, 64, opts, 2, flows)
    proj, bottleneck = pj.projection(cyc, tsc) if tsc else (None, None)
    log("[%s] back-pressured %.3f Mpps; cycles/frame per component (switch: both crossings) "
        "%s; projected NDR %s Mpps (%s)" % (
        tag, carried / 1e6, cyc, proj, bottleneck))
    fields["cycles_per_packet"] = cyc or None
    return {"projected_ndr_mpps": proj, "projection_bottleneck": bottleneck, "tsc_hz": tsc,
            "switch_hops": 2, "vnf_busy_cycles_per_packet": busy or None,
            "vnf_sleeps_passes_per_1000": wake or None, "ndr_fair": False,
            "vnf_sched": opts.vnf_sched,
            "ndr_note": PVP_NOT_FAIR}


STALL_TRIM_NS = 100_000


def trimmed_avg(hist, below=STALL_TRIM_NS):
    """Mean one-way latency (ns) of the frames below `below` in histogram [(upper edge ns,
    count)] (edges of 3%: each frame counts at its bucket's upper edge), or None. The host's
    stalls of 1-4 ms put a backlog of thousands of frames into the mean of a 0.5 s trial
    (bench/README.md 'Host stalls'); a policy's own delay is a few us, far below `below`."""
    n = sum(c for e, c in hist if e <= below)
    return sum(e * c for e, c in hist if e <= below) / n if n else None


def latency_trial(topo, rate, size, opts, flows):
    """--repeat latency trials; the one with the median mean latency, with its histogram's
    trimmed mean (`.avg_below_100us`) and every trial's mean (`.avg_runs`)."""
    runs = [topo.trial(rate, size, opts.trial, flows=flows) for _ in range(opts.repeat)]
    runs = [r for r in runs if r.latency] or runs[:1]
    runs.sort(key=lambda r: r.latency["avg"] if r.latency else 0)
    r = runs[(len(runs) - 1) // 2]
    r.avg_runs = [x.latency["avg"] for x in runs if x.latency]
    r.avg_below_100us = trimmed_avg(r.histogram or [])
    return r


def line_rate_pps(size, gbps=10.0):
    return gbps * 1e9 / ((size + 24) * 8)


def tables(ndr, carried, lat, labels, flows_list, lat_sizes, lat_rate, lat_flows, fraction,
           projected):
    out = []
    for seed_topo, _ in TOPOS:
        what_d = [("NDR (0 loss)", ndr), ("carried back-pressured (gen as fast as the rings "
                                          "allow, no loss criterion)", carried)]
        if seed_topo == "pvp":
            what_d[0] = ("NDR (0 loss) measured, NOT fair: 3 busy processes on 2 CPUs", ndr)
            what_d.append(("NDR projected, one core per component (min of TSC Hz / cycles per "
                           "frame of the switch x 2 and the VNF)", projected))
        for what, d in what_d:
            out.append("")
            out.append("(a) %s %s, Mpps at 64 B, unidirectional (seed: pps; 'plain' ~ immediate, "
                       "'patch' ~ interval, 'patch + flush' ~ rx-batch)" % (seed_topo.upper(), what))
            out.append("%-6s " % "flows" + " ".join("%12s" % l for l in labels))
            for f in flows_list:
                out.append("%-6d " % f + " ".join(
                    "%12s" % report.fmt_num(d.get((seed_topo, l, f))) for l in labels))
    rate = lat_rate.get("pps")
    out.append("")
    out.append("(b) P2V one-way latency min/avg/max (us), %d flows, at %s Mpps = %.0f%% of the "
               "lowest virtlink 64-B %s (capped at the 10GbE line rate of each size)" % (
                   lat_flows, "%.3f" % (rate / 1e6) if rate else "-", 100 * fraction,
                   lat_rate.get("basis", "NDR")))
    out.append("%-6s " % "bytes" + " ".join("%22s" % l for l in labels))
    for s in lat_sizes:
        cells = []
        for l in labels:
            v = lat.get((l, s))
            cells.append("%22s" % ("%.1f/%.1f/%.0f" % (v["min"] / 1e3, v["avg"] / 1e3, v["max"] / 1e3)
                                   if v else "-"))
        out.append("%-6d " % s + " ".join(cells))
    out.append("")
    out.append("(b) the same, mean over the frames below 100 us (us; the host's stall backlogs "
               "left out) and p50 (us)")
    out.append("%-6s " % "bytes" + " ".join("%22s" % l for l in labels))
    for s in lat_sizes:
        cells = []
        for l in labels:
            v = lat.get((l, s))
            cells.append("%22s" % ("%.2f / %.2f" % (v["avg_below_100us"] / 1e3, v["p50"] / 1e3)
                                   if v and v.get("avg_below_100us") else "-"))
        out.append("%-6d " % s + " ".join(cells))
    return out


def goals(ndr, carried, lat, flows_list, lat_sizes, point):
    out = ["", "goals (issue 21; P2V, virtlink):"]
    f = max(flows_list)
    for fl in flows_list:
        # 1. budget=50 keeps its budget (on CPU) at every valid rate up to NDR, carrying at
        #    least 0.95x rx-batch's NDR.
        b, r = point.get(("p2v", "budget=50", fl)), point.get(("p2v", "rx-batch", fl))
        if b and r:
            over = b.get("over_budget_max_fraction")
            ok_t = b["ndr_mpps"] >= 0.95 * r["ndr_mpps"] and r["ndr_mpps"] > 0
            out.append("  %4d flows: budget=50 NDR %.3f vs rx-batch %.3f Mpps (goal >= 0.95x): %s; "
                       "frames past 50 us on CPU at rates up to NDR: at most %s (goal <= 1%%, "
                       "i.e. p99 within the budget): %s" % (
                           fl, b["ndr_mpps"], r["ndr_mpps"], "met" if ok_t else "NOT met",
                           "-" if over is None else "%.3f%%" % (100 * over),
                           "-" if over is None else ("met" if over <= 0.01 else "NOT met")))
        # 2. rx-batch's NDR >= immediate's at every flow count, >= 1.5x at the largest.
        i = point.get(("p2v", "immediate", fl))
        if i and r:
            goal = 1.5 if fl == f else 1.0
            ratio = r["ndr_mpps"] / i["ndr_mpps"] if i["ndr_mpps"] else None
            cyc = lambda p: (p["search"] or {}).get("calibration_cycles")
            out.append("  %4d flows: rx-batch / immediate NDR %s (goal >= %.1fx): %s; switch cycles/"
                       "frame back-pressured: rx-batch %s, immediate %s" % (
                           fl, "-" if ratio is None else "%.2fx" % ratio, goal,
                           "met" if ratio is not None and ratio >= goal else "NOT met",
                           cyc(r), cyc(i)))
    worst = None
    for s in lat_sizes:
        a, b = lat.get(("immediate", s)), lat.get(("rx-batch", s))
        if a and b:
            r = b["avg"] / a["avg"]
            worst = r if worst is None else max(worst, r)
    if worst is not None:
        out.append("  rx-batch avg latency / immediate, worst size: %.2fx (goal <= 1.10x): %s" % (
            worst, "met" if worst <= 1.10 else "NOT met"))
    worst = None
    for s in lat_sizes:
        a, b = lat.get(("immediate", s)), lat.get(("rx-batch", s))
        if a and b and a.get("avg_below_100us") and b.get("avg_below_100us"):
            r = b["avg_below_100us"] / a["avg_below_100us"]
            worst = r if worst is None else max(worst, r)
    if worst is not None:
        out.append("  the same over frames below 100 us (the host's stall backlogs left out, "
                   "bench/README.md 'Host stalls'): %.2fx (goal <= 1.10x): %s" % (
                       worst, "met" if worst <= 1.10 else "NOT met"))
    for seed_topo, _ in TOPOS:
        ahead = []
        for fl in flows_list:
            vl = max([ndr.get((seed_topo, p, fl)) or 0 for p in POLICIES])
            ovs = max([ndr.get((seed_topo, "ovs:%d" % x, fl)) or 0 for x in OVS_FLUSH])
            if ovs:
                ahead.append(vl > ovs)
        if ahead:
            out.append("  %s NDR, best virtlink policy ahead of best OVS setting at %d of %d flow "
                       "counts" % (seed_topo.upper(), sum(ahead), len(ahead)))
    ahead = []
    for s in lat_sizes:
        vl = [lat[(p, s)]["avg"] for p in POLICIES if lat.get((p, s))]
        ovs = [lat[("ovs:%d" % x, s)]["avg"] for x in OVS_FLUSH if lat.get(("ovs:%d" % x, s))]
        if vl and ovs:
            ahead.append(min(vl) < min(ovs))
    if ahead:
        out.append("  P2V avg latency, best virtlink policy below best OVS setting at %d of %d "
                   "sizes" % (sum(ahead), len(ahead)))
    return out


def plot_ndr_vs_flows(ndr, seed_topo, labels, flows_list, path, projected=None):
    """NDR against flows, a line per configuration; PVP's measured lines are labelled not
    fair and its projected ones (dashed, same colour) are drawn with them."""
    data, plots = {}, []
    pvp = seed_topo == "pvp"
    for i, l in enumerate(labels):
        for what, d, style in (("measured", ndr, "lw 2"), ("projected", projected or {}, "dt 2")):
            if what == "projected" and not pvp:
                continue
            pts = [(f, d.get((seed_topo, l, f))) for f in flows_list]
            pts = [(f, v) for f, v in pts if v is not None]
            if not pts:
                continue
            name = "n%d%s.dat" % (i, what[0])
            data[name] = "".join("%d %.6f\n" % p for p in pts)
            title = "%s (%s)" % (l, "measured, not fair" if what == "measured" else
                                 "projected, one core each") if pvp else l
            plots.append("'{%s}' using 1:2 with linespoints %s lc %d title '%s'" % (
                name.replace(".", "_"), style, i + 1, title))
    if not plots:
        return None
    os.makedirs(os.path.dirname(path), exist_ok=True)
    title = "%s NDR vs flows, 64 B%s" % (seed_topo.upper(), " (solid: measured, not fair on 2 "
                                         "CPUs; dashed: projected)" if pvp else "")
    script = ("set terminal pngcairo size %d,560\nset output '%s'\nset title '%s'\n"
              "set xlabel 'flows'\nset ylabel 'NDR (Mpps)'\nset logscale x\nset grid\n"
              "set key %s\nset yrange [0:*]\nplot %s\n" % (
                  1200 if pvp else 900, path, title, "outside right" if pvp else "bottom left", ", ".join(plots)))
    report._gnuplot(script, data)
    return path
