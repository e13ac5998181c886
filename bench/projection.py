"""Projected NDR from each component's cycles per frame (bench chain, bench batching PVP).

On this 2-CPU machine a topology with more than two busy components (PVP, chains of VNFs)
cannot give each its own core, so its measured NDR measures the sharing. The projection
removes it: every component's cycles per frame are measured in one back-pressured trial
(the generator sending as fast as the rings allow), and

    projected NDR (Mpps) = min over components of TSC Hz / cycles per frame / 1e6

(the slowest component limits the path; each is assumed to have a core of its own).
Components:
  switch  its forwarding thread's busy cycles per packet it handled (virtlink: pmd-stats;
          OVS: pmd-stats-show; testpmd: --record-core-cycles) x the times each frame
          crosses it (`hops`);
  vnfI    the vnf's CPU time (schedstat, every thread) at the TSC rate per frame it
          forwarded: it counts the vnf's idle passes and sleeps (interrupt mode) and leaves
          out the time others ran on its CPU. Its busy TSC cycles (its own counter) are kept
          next to it as a diagnostic.
bench chain checks the method on p2p, where the switch and the generator each busy-poll on
a core of their own (measured / projected within 20%: issue 21).
"""

import os

import _pylib  # noqa: F401  (puts pylib/ on sys.path)
from vltestlib import vltest


def vnf_snapshot(proc, timeout=5):
    """The vnf's statistics (vltest.vnf_stats: SIGUSR1 makes it print one JSON line)."""
    return vltest.vnf_stats(proc, timeout)


def cpu_ns(pid):
    """CPU time (ns) of every thread of process `pid` so far: the first field of the kernel's
    schedstat, time on a CPU (time waiting for one is not in it)."""
    total = 0
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile
    return total


def component_cycles(switch_cycles, hops, vnf_deltas, tsc_hz):
    """Cycles per frame of each component of one trial.

    switch_cycles: the switch's busy cycles per packet it handled (None if unknown);
    hops: the times a frame crosses the switch; vnf_deltas: per vnf, a dict of what the
    trial added to its counters: packets, busy_cycles, sleeps, passes, and cpu_ns (its CPU
    time); tsc_hz: the TSC rate (Hz).
    Returns ({component: cycles per frame}, {vnfI: busy TSC cycles per frame},
    {vnfI: {sleeps, passes} per 1000 frames}); a vnf that forwarded nothing has None."""
    cyc, busy, wake = {}, {}, {}
    if switch_cycles:
        cyc["switch"] = round(switch_cycles * hops)
    for i, d in enumerate(vnf_deltas):
        k, dp = "vnf%d" % i, d["packets"]
        busy[k] = round(d["busy_cycles"] / dp) if dp > 0 else None
        cyc[k] = round(d["cpu_ns"] * tsc_hz / 1e9 / dp) if dp > 0 and tsc_hz else None
        wake[k] = {x: round(1000.0 * d[x] / dp, 2) if dp > 0 else None
                   for x in ("sleeps", "passes")}
    return cyc, busy, wake


def projection(cyc, tsc_hz):
    """Projected NDR (Mpps) with one core per component, rounded to 4 decimals, and the
    component that limits it; (None, None) if no component has a figure."""
    rates = {k: tsc_hz / v / 1e6 for k, v in cyc.items() if v}
    if not rates:
        return None, None
    k = min(rates, key=rates.get)
    return round(rates[k], 4), k


def cycles_trial(topo, size, trial_s, hops, flows=1):
    """One back-pressured trial of `topo` (bench/topologies.py) at `size` bytes; returns
    (carried pps, {component: cycles per frame}, tsc_hz, the generator's one-core ceiling
    (Mpps), {vnfI: busy TSC cycles per frame}, {vnfI: {sleeps, passes} per 1000 frames})."""
    before = [vnf_snapshot(p) for p in topo.vnfs]
    cpu0 = [cpu_ns(p.pid) for p in topo.vnfs]
    run = topo.trial(0, size, trial_s, flows=flows)
    cpu1 = [cpu_ns(p.pid) for p in topo.vnfs]
    after = [vnf_snapshot(p) for p in topo.vnfs]
    carried = run.rx / run.duration_s if run.duration_s else 0
    tsc = run.doc.get("clock", {}).get("hz") or (after[0]["tsc_hz"] if after else None)
    deltas = [dict({k: a[k] - b[k] for k in ("packets", "busy_cycles", "sleeps", "passes")},
                   cpu_ns=c1 - c0) for b, a, c0, c1 in zip(before, after, cpu0, cpu1)]
    sw = run.cycles.get("switch") if run.cycles else None
    cyc, busy, wake = component_cycles(sw, hops, deltas, tsc)
    # The generator sends and receives every frame on one core: its loop ceiling (TX + RX
    # cycles; older builds: TX only).
    return (carried, cyc, tsc, run.doc.get("loop_ceiling_mpps") or run.doc.get("ceiling_mpps"),
            busy, wake)


def median(vals):
    """The lower median of the values that are not None, or None."""
    vals = sorted(v for v in vals if v is not None)
    return vals[(len(vals) - 1) // 2] if vals else None


def cycles_repeated(topo, size, opts, hops, flows=1):
    """cycles_trial() opts.repeat times (trials of opts.trial s): the median carried rate
    and, per component, the median cycles per frame (same tuple as cycles_trial)."""
    runs = [cycles_trial(topo, size, opts.trial, hops, flows) for _ in range(opts.repeat)]
    cyc = {k: median([r[1].get(k) for r in runs]) for k in sorted(set(k for r in runs for k in r[1]))}
    busy = {k: median([r[4].get(k) for r in runs]) for k in sorted(set(k for r in runs for k in r[4]))}
    wake = {k: {x: median([r[5].get(k, {}).get(x) for r in runs]) for x in ("sleeps", "passes")}
            for k in sorted(set(k for r in runs for k in r[5]))}
    return (median([r[0] for r in runs]), cyc, median([r[2] for r in runs]),
            median([r[3] for r in runs]), busy, wake)
