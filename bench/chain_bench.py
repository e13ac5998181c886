#!/usr/bin/env python3
"""`virtlink bench chain`: the vhost-pci experiment (seed 000, EXPERIMENTS.md section 1).

A chain of N VNFs (`virtlink vnf`, io forwarding) between the generator's two ports:

    gen:g0 -> [g0 | c0a] -> vnf0 -> [c0b | c1a] -> vnf1 -> ... -> vnfN-1 -> [cN-1b | g1] -> gen:g1

Modes (same run, same machine, same core plan):
  virtlink   switched through virtlink (xconnect pairs in brackets): every hop crosses the switch
  ovs-dpdk   switched through OVS-DPDK (port-to-port flows)
  testpmd    switched through DPDK testpmd (io forwarding between paired net_vhost ports)
  direct     virtlink with direct links (docs/direct-link.md): each inner pair [cIb | cI+1a] is
             `ctl link cI+1a cIb`, so vnfI writes straight into vnfI+1's rings and only the
             first and last hop cross the switch (the generator's ports are the "NICs")

Per N and frame size: RFC 2544 NDR (the search of virtlink_bench.py), and CPU cycles per
frame of each component measured in one back-pressured trial (the generator sending as fast
as the rings allow: every component as busy as the path lets it be):
  switch   the switch's forwarding thread's busy cycles per packet it handled (virtlink:
           pmd-stats; OVS: pmd-stats-show; testpmd: --record-core-cycles) x the times each
           frame crosses it (N + 1 switched, 2 direct);
  vnfI     the vnf's CPU time (schedstat) at the TSC rate per frame it forwarded, which
           counts its idle passes and sleeps and leaves out others' time on its CPU (its
           busy TSC cycles, read with SIGUSR1, are kept as vnf_busy_cycles_per_packet).
The arithmetic is bench/projection.py's, shared with bench batching's PVP rows.
Projected NDR with one core per component = min over components of TSC Hz / cycles per frame
(the slowest component limits the chain). On this 2-CPU machine the VNFs share cores with the
switch and the generator, so the measured NDR falls with N for reasons the projection
removes; the projection is checked against p2p (gen -> switch -> gen), the one topology where
every busy-polling process has its own core: projected (switch alone, and with the
generator's own one-core ceiling) vs measured NDR, in the same run.

Caveats: the switch's busy cycles of a pass in which it was preempted include the time it
was off the CPU (TSC), so on a loaded machine its cycles per frame are an upper bound and
the projection a lower bound.
"""

import argparse
import copy
import os
import sys
import time

import _pylib  # noqa: F401  (puts pylib/ on sys.path)
import projection as pj
import report
import topologies
import virtlink_bench as vb
from vltestlib import vltest

MODES = ["virtlink", "ovs-dpdk", "testpmd", "direct"]
SWITCH_OF = {"virtlink": ("virtlink", "xconnect"), "direct": ("virtlink", "xconnect"),
             "ovs-dpdk": ("ovs-dpdk", "xconnect"), "testpmd": ("testpmd", "io")}

CORE_PLAN = ("switch PMD (virtlink PMD thread, testpmd forwarding lcore, or OVS PMD thread) "
             "busy-polls alone on CPU %d; the generator (virtlink gen, one thread: transmit "
             "and receive) busy-polls on CPU %d; the VNFs (virtlink vnf, io forwarding, "
             "interrupt mode) are pinned to CPU %d with the generator (vnf --cpu), so the "
             "switch's busy cycles are its own; in direct mode they copy into their "
             "neighbours' rings there. The VNFs run SCHED_BATCH unless --vnf-sched other: "
             "a VNF woken by a notification does not preempt its sender" % (
                 topologies.SWITCH_CPU, topologies.GEN_CPU, topologies.GEN_CPU))


def chain_topology(n):
    ports, vnfs = ["g0"], []
    for i in range(n):
        ports += ["c%da" % i, "c%db" % i]
        vnfs.append(("c%da" % i, "c%db" % i))
    ports.append("g1")
    return ports, vnfs


def log(msg):
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def run_mode(mode, n, sizes, opts, rows, errors, diag):
    kind, swmode = SWITCH_OF[mode]
    if not vb.available(kind):
        errors.append("%s: not installed (scripts/install-deps.sh), skipped" % kind)
        return
    topologies.TOPOLOGIES["chain%d" % n] = chain_topology(n)
    label = "%s N=%d" % (mode, n)
    try:
        with vltest.Testbed(None) as tb:
            sw = topologies.make_switch(tb, kind, swmode)
            topo = topologies.Topology(tb, "chain%d" % n, sw, queue_size=opts.queue_size,
                                       vnf_cpu=topologies.GEN_CPU, vnf_batch=opts.vnf_batch)
            t0 = time.time()
            topo.start()
            hops = n + 1
            if mode == "direct":
                for i in range(n - 1):
                    r = tb.ctl("link", "c%da" % (i + 1), "c%db" % i)
                    if r["state"] != "direct":
                        raise RuntimeError("link c%da c%db stayed %s: %s" % (
                            i + 1, i, r["state"], r["why"]))
                hops = 2
            topo.start_gen()
            log("[chain %s] started in %.1f s" % (label, time.time() - t0))
            for size in sizes:
                tag = "[chain %s %dB]" % (label, size)
                carried, cyc, tsc, gen_ceiling, busy, wake = pj.cycles_repeated(topo, size, opts, hops)
                proj, bottleneck = pj.projection(cyc, tsc) if tsc else (None, None)
                log("%s back-pressured: %.3f Mpps carried; cycles/frame %s; projected NDR with "
                    "one core per component %s Mpps (%s); vnf sleeps/passes per 1000 frames %s"
                    % (tag, carried / 1e6, cyc, proj, bottleneck, wake))
                o = copy.copy(opts)
                line = vb.line_rate_pps(size) * 2
                o.max_mpps = max(min(line, 1.25 * carried), 1000.0) / 1e6
                fields, _ = vb.measure_repeated(topo, label, size, o)
                fields["cycles_per_packet"] = cyc or None
                fields["vnf_busy_cycles_per_packet"] = busy or None
                fields["vnf_sleeps_passes_per_1000"] = wake or None
                fields["search"]["calibration_mpps"] = round(carried / 1e6, 4)
                rows.append(report.row(
                    experiment="chain", topology="chain", switch="none" if mode == "direct" else kind,
                    mode="direct" if mode == "direct" else "switched",
                    policy="rx-batch" if kind == "virtlink" else None, pmd_mode="poll",
                    vnfs=n, flows=opts.flows, frame_size=size, trial_s=opts.trial,
                    projected_ndr_mpps=proj, projection_bottleneck=bottleneck,
                    switch_hops=hops, tsc_hz=tsc, gen_ceiling_mpps=gen_ceiling,
                    chain_mode=mode, vnf_pmd_mode="interrupt", vnf_sched=opts.vnf_sched,
                    **fields))
            if kind == "virtlink":
                diag["%s/%d" % (mode, n)] = {
                    "switch_ports": {k: {x: v[x] for x in ("rx_packets", "tx_packets", "drops")}
                                     for k, v in tb.switch_stats().items()},
                    "links": tb.ctl("links")}
            topo.stop()
    except (RuntimeError, vltest.TestTimeout, AssertionError) as e:
        msg = "%s: failed: %s" % (label, str(e).strip().splitlines()[0] if str(e) else e)
        log(msg)
        errors.append(msg)


def p2p_check(sizes, opts, rows, errors):
    """The projection method on p2p, where the switch and the generator each busy-poll on a
    core of their own: projected vs measured NDR."""
    try:
        with vltest.Testbed(None) as tb:
            topo = topologies.Topology(tb, "p2p", topologies.make_switch(tb, "virtlink", "xconnect"),
                                       queue_size=opts.queue_size)
            topo.start()
            topo.start_gen()
            for size in sizes:
                carried, cyc, tsc, gen_ceiling, _, _ = pj.cycles_repeated(topo, size, opts, 1)
                proj, _ = pj.projection(cyc, tsc) if tsc else (None, None)
                o = copy.copy(opts)
                o.max_mpps = max(min(vb.line_rate_pps(size) * 2, 1.25 * carried), 1000.0) / 1e6
                fields, _ = vb.measure_repeated(topo, "p2p-check", size, o)
                both = min(proj, gen_ceiling) if proj and gen_ceiling else proj
                # The search offers at most 2 x 10GbE line rate: a projection above it is
                # compared at it (1518 B: 1.625 Mpps).
                line_mpps = vb.line_rate_pps(size) * 2 / 1e6
                both = min(both, line_mpps) if both else both
                fields["cycles_per_packet"] = cyc or None
                rows.append(report.row(
                    experiment="chain", topology="p2p", switch="virtlink", mode="xconnect",
                    policy="rx-batch", pmd_mode="poll", vnfs=0, flows=opts.flows,
                    frame_size=size, trial_s=opts.trial, projected_ndr_mpps=proj,
                    projected_with_gen_mpps=round(both, 4) if both else None,
                    gen_ceiling_mpps=gen_ceiling, tsc_hz=tsc, chain_mode="p2p-check",
                    switch_hops=1, **fields))
                log("[p2p check %dB] projected %s Mpps (switch), %s with the generator's ceiling "
                    "and the line rate; "
                    "measured NDR %.3f Mpps" % (size, proj, both, fields["ndr_mpps"]))
            topo.stop()
    except (RuntimeError, vltest.TestTimeout, AssertionError) as e:
        errors.append("p2p check: failed: %s" % (str(e).strip().splitlines()[0] if str(e) else e))


def table(rows, sizes, ns):
    lines = []
    chain = [r for r in rows if r["topology"] == "chain"]
    for size in sizes:
        lines.append("")
        lines.append("%d B: NDR Mpps (both directions) per number of VNFs, measured with N + 2 "
                     "busy processes on 2 CPUs: NOT fair (0.000: no trial passed); proj: "
                     "projected, one core per component; cycles per frame: switch / each vnf"
                     % size)
        lines.append("%-9s %3s %9s %9s  %-11s %s" % ("mode", "N", "NDR", "proj", "bottleneck",
                                                     "cycles/frame"))
        for mode in MODES:
            for n in ns:
                r = next((x for x in chain if x["chain_mode"] == mode and x["vnfs"] == n and
                          x["frame_size"] == size), None)
                if r is None:
                    continue
                cyc = r["cycles_per_packet"] or {}
                cs = "sw %s | vnf %s" % (cyc.get("switch", "-"), " ".join(
                    str(cyc.get("vnf%d" % i, "-")) for i in range(n)))
                lines.append("%-9s %3d %9s %9s  %-11s %s" % (
                    mode, n, report.fmt_num(r["ndr_mpps"]) + ("+" if r["ndr_gen_limited"] else ""),
                    report.fmt_num(r["projected_ndr_mpps"]), r.get("projection_bottleneck") or "-",
                    cs))
        # The seed's headline: the drop from the smallest to the largest chain.
        lo, hi = min(ns), max(ns)
        for mode in MODES:
            a = next((x for x in chain if x["chain_mode"] == mode and x["vnfs"] == lo and
                      x["frame_size"] == size), None)
            b = next((x for x in chain if x["chain_mode"] == mode and x["vnfs"] == hi and
                      x["frame_size"] == size), None)
            if a and b and lo != hi:
                def pct(x, y):
                    return "%+.0f%%" % (100.0 * (y - x) / x) if x and y is not None else "-"
                lines.append("  %-9s N=%d -> N=%d: measured %s, projected %s" % (
                    mode, lo, hi, pct(a["ndr_mpps"], b["ndr_mpps"]),
                    pct(a["projected_ndr_mpps"], b["projected_ndr_mpps"])))
    checks = [r for r in rows if r["topology"] == "p2p"]
    if checks:
        lines.append("")
        lines.append("method check (p2p: switch on CPU 1, generator on CPU 0, each alone on its core):")
        for r in checks:
            lines.append("  %d B: measured NDR %s Mpps; projected %s (switch alone), %s (with the "
                         "generator's one-core ceiling, TX + RX, and the search's line-rate "
                         "cap); measured/projected %s" % (
                             r["frame_size"], report.fmt_num(r["ndr_mpps"]),
                             report.fmt_num(r["projected_ndr_mpps"]),
                             report.fmt_num(r["projected_with_gen_mpps"]),
                             "%.2f" % (r["ndr_mpps"] / r["projected_with_gen_mpps"])
                             if r["projected_with_gen_mpps"] else "-"))
    lines += goals(rows, sizes, ns)
    return lines


def chain_cycles(r):
    """Cycles per frame of every process that works on a frame of chain row `r` (the switch,
    all its crossings, and every VNF), or None if one is missing."""
    cyc = r["cycles_per_packet"] or {}
    vals = [cyc.get("switch")] + [cyc.get("vnf%d" % i) for i in range(r["vnfs"])]
    return sum(vals) if all(v is not None for v in vals) else None


def goals(rows, sizes, ns):
    """Issue 21's goals for this bench: the method check within 20%, direct links flat from
    the shortest to the longest chain (projected, >= 0.9x), and a chain of direct links
    cheaper, counting every process, than the same chain switched."""
    out = ["", "goals (issue 21):"]
    if not any(x["topology"] == "p2p" for x in rows):
        out.append("  not measured: the method check (p2p; --no-check, or it failed)")
    if min(ns) == max(ns):
        out.append("  not measured: direct N=max / N=min (one chain length: --vnfs)")
    for r in (x for x in rows if x["topology"] == "p2p"):
        p = r.get("projected_with_gen_mpps")
        if p:
            q = r["ndr_mpps"] / p
            out.append("  method check %d B: measured/projected %.2f (goal 0.80-1.20): %s" % (
                r["frame_size"], q, "met" if 0.8 <= q <= 1.2 else "NOT met"))
    chain = [r for r in rows if r["topology"] == "chain"]

    def find(mode, n, size):
        return next((x for x in chain if x["chain_mode"] == mode and x["vnfs"] == n and
                     x["frame_size"] == size), None)
    lo, hi = min(ns), max(ns)
    for size in sizes:
        a, b = find("direct", lo, size), find("direct", hi, size)
        if a and b and lo != hi and a["projected_ndr_mpps"] and b["projected_ndr_mpps"]:
            q = b["projected_ndr_mpps"] / a["projected_ndr_mpps"]
            out.append("  direct %d B: projected NDR N=%d / N=%d %.3f (goal >= 0.90): %s" % (
                size, hi, lo, q, "met" if q >= 0.9 else "NOT met"))
        for n in ns:
            sw, d = find("virtlink", n, size), find("direct", n, size)
            cs, cd = (chain_cycles(sw) if sw else None), (chain_cycles(d) if d else None)
            if cs and cd:
                out.append("  %d B N=%d: cycles per frame of every process, switched %d, direct "
                           "%d: a direct hop %s than a switched one (%+.0f cycles per inner "
                           "hop): %s" % (size, n, cs, cd, "cheaper" if cd < cs else "dearer",
                                         (cd - cs) / max(n - 1, 1),
                                         "met" if cd < cs else "NOT met"))
    return out


def plot(rows, sizes, path_base, title):
    """Like the seed's Fig. 3: NDR against the number of chained VNFs, one line per mode
    (measured solid, projected dashed), one PNG per frame size."""
    out = []
    for size in sizes:
        data, plots = {}, []
        for i, mode in enumerate(MODES):
            pts = sorted((r["vnfs"], r["ndr_mpps"], r["projected_ndr_mpps"]) for r in rows
                         if r["topology"] == "chain" and r["chain_mode"] == mode and
                         r["frame_size"] == size)
            if not pts:
                continue
            name = "m%d.dat" % i
            data[name] = "".join("%d %.6f %s\n" % (n, v or 0, "%.6f" % p if p else "NaN")
                                 for n, v, p in pts)
            key = name.replace(".", "_")
            plots.append("'{%s}' using 1:2 with linespoints lw 2 lc %d title '%s (measured, "
                         "not fair)'" % (key, i + 1, mode))
            plots.append("'{%s}' using 1:3 with linespoints dt 2 lc %d title '%s (projected, "
                         "one core each)'" % (key, i + 1, mode))
        if not plots:
            continue
        path = "%s-%d.png" % (path_base, size)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        script = ("set terminal pngcairo size 1100,560\nset output '%s'\n"
                  "set title '%s, %d B (solid: measured, not fair on 2 CPUs; dashed: "
                  "projected)'\n"
                  "set xlabel 'number of chained VNFs'\nset ylabel 'NDR (Mpps, both directions)'\n"
                  "set xtics 1\nset grid\nset key outside right\nset yrange [0:*]\n"
                  "plot %s\n" % (path, title.replace("'", ""), size,
                                                   ", ".join(plots)))
        report._gnuplot(script, data)
        out.append(path)
    return out


def parse_ns(text):
    if ".." in text:
        a, b = text.split("..")
        return list(range(int(a), int(b) + 1))
    return [int(x) for x in text.split(",")]


def main(argv):
    ap = argparse.ArgumentParser(prog="virtlink bench chain", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--virtlink", required=True, help=argparse.SUPPRESS)
    ap.add_argument("--vnfs", default=None, help="chain lengths: 2..5 (default) or 2,5 "
                    "(--quick: 2,5)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated of %s (default "
                    "all)" % ",".join(MODES))
    ap.add_argument("--json", help="write the bench JSON (INTERFACES.md) here")
    ap.add_argument("--quick", action="store_true", help="N = 2 and 5, 64 and 1518 B, 0.5 s "
                    "trials, 25%% precision, at most 5 trials per search, no retries, no "
                    "latency trial")
    ap.add_argument("--frame-sizes", default="64,1518", help="bytes, comma-separated (64,1518)")
    ap.add_argument("--trial", type=float, help="seconds per trial (2; --quick 0.5)")
    ap.add_argument("--precision", help="search resolution (5%%; --quick 25%%)")
    ap.add_argument("--pdr-loss", type=float, default=0.5,
                    help="loss (%%) a PDR trial may have (0.5)")
    ap.add_argument("--latency-fraction", type=float, default=None,
                    help="latency trial at this fraction of NDR (0.9; --quick 0: none)")
    ap.add_argument("--flows", type=int, default=1, help="flows the generator sends (1)")
    ap.add_argument("--retries", type=int, default=None,
                    help="repeats of a trial the generator could not offer (1; --quick 0)")
    ap.add_argument("--max-short", type=float, default=0.05,
                    help="a trial is invalid when the generator offered less than 1 - this of "
                    "its planned frames (0.05)")
    ap.add_argument("--queue-size", type=int, default=4096,
                    help="entries of the generator's rings (4096, as bench batching: they "
                    "absorb the host's stalls of about 1 ms; bench/README.md 'Host stalls')")
    ap.add_argument("--repeat", type=int, default=1,
                    help="measure every point N times: the median NDR run (its figures) and, "
                    "from N back-pressured trials, the median cycles per frame of each "
                    "component (default 1)")
    ap.add_argument("--max-trials", type=int, default=None,
                    help="trials per NDR search (20; --quick 5)")
    ap.add_argument("--placement", choices=("near", "any"), default="near",
                    help="take each NDR trial at near core placement (bench/README.md 'Core "
                    "placement') or at whatever the host gives (any)")
    ap.add_argument("--placement-wait", type=float, default=None,
                    help="seconds a trial waits for near placement (20; --quick 5)")
    ap.add_argument("--vnf-sched", choices=("batch", "other"), default="batch",
                    help="the VNFs' scheduling policy: batch (SCHED_BATCH, default: a VNF woken "
                    "by its neighbour's notification does not preempt it mid-batch, as VNFs "
                    "with cores of their own would not) or other (the default policy; "
                    "bench/README.md 'VNFs sharing a CPU')")
    ap.add_argument("--no-check", action="store_true", help="skip the p2p method check")
    ap.add_argument("--plot-dir", default=None,
                    help="where PNG plots go (default: the --json file's directory, else the "
                    "current directory)")
    ap.add_argument("--no-plot", action="store_true")
    opts = ap.parse_args(argv)
    opts.vnf_batch = opts.vnf_sched == "batch"
    if opts.plot_dir is None:
        opts.plot_dir = os.path.dirname(os.path.abspath(opts.json)) if opts.json else os.getcwd()
    vltest.VIRTLINK = os.path.abspath(opts.virtlink)
    q = opts.quick
    ns = parse_ns(opts.vnfs or ("2,5" if q else "2..5"))
    sizes = [int(x) for x in opts.frame_sizes.split(",")]
    opts.trial = opts.trial or (0.5 if q else 2.0)
    opts.precision = opts.precision or ("25%" if q else "5%")
    opts.retries = opts.retries if opts.retries is not None else (0 if q else 1)
    opts.max_trials = opts.max_trials or (5 if q else 20)
    if opts.latency_fraction is None:
        opts.latency_fraction = 0.0 if q else 0.9
    opts.max_mpps = None
    if opts.placement_wait is None:
        opts.placement_wait = 5.0 if q else 20.0
    if opts.repeat < 1:
        raise SystemExit("--repeat: at least 1")
    modes = [m.strip() for m in opts.modes.split(",")]
    for m in modes:
        if m not in MODES:
            raise SystemExit("unknown mode %s (%s)" % (m, ",".join(MODES)))
    command = report.bench_command("chain", argv)
    version, anchors = report.versions(vltest.VIRTLINK)
    load0 = report.load_average()
    t0 = time.time()
    rows, errors, diag = [], [], {}
    if not opts.no_check:
        p2p_check(sizes, opts, rows, errors)
    for n in ns:
        for mode in modes:
            run_mode(mode, n, sizes, opts, rows, errors, diag)
    load1 = report.load_average()
    lines = table(rows, sizes, ns)
    plots = []
    if not opts.no_plot and report.have_gnuplot() and rows:
        try:
            plots = plot(rows, sizes, os.path.join(opts.plot_dir, "chain" + ("-quick" if q else "")),
                         "VNF chain NDR (%s)" % version)
        except RuntimeError as e:
            log("plot: %s" % e)
    note = ("NDR: RFC 2544 no-loss rate, Mpps over both directions ('+': generator-limited "
            "lower bound; 0.000: not even the search's lowest rate passed); proj: projected NDR "
            "with one core per component = min over the switch and every vnf of TSC Hz / that "
            "component's cycles per frame (switch: its busy cycles per packet x the times a "
            "frame crosses it, N+1 switched, 2 direct; vnf: its CPU time per frame), medians "
            "of --repeat back-pressured trials; trials of %.3g s (vsperf: 60 s)" % opts.trial)
    print("virtlink bench chain   (%s, %s)" % (time.strftime("%Y-%m-%d %H:%M"), version))
    report.print_summary(CORE_PLAN, load0, load1, lines, note, errors, plots, t0)
    if opts.json:
        report.write_json(opts.json, command, version, CORE_PLAN, rows, anchors=anchors,
                          errors=errors, load_average={"start": load0, "end": load1},
                          method={"trial_s": opts.trial, "precision": opts.precision,
                                  "pdr_loss_percent": opts.pdr_loss,
                                  "latency_fraction": opts.latency_fraction,
                                  "retries": opts.retries, "max_trials": opts.max_trials,
                                  "queue_size": opts.queue_size, "note": note,
                                  "vnf_sched": opts.vnf_sched,
                                  "projection": __doc__.split("Per N and frame size:")[1]},
                          diagnostics=diag)
        print("wrote " + opts.json)
    return 1 if (errors and not rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
