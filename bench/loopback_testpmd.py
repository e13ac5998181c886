"""`bench loopback --traffic testpmd`: the earlier loopback variant, kept for comparison.

The traffic side is one testpmd with two virtio-user ports in io forwarding, seeded with
--tx-first, so frames circulate gen -> switch -> gen; the rate is the median of testpmd's
per-second Rx-pps samples. Core plan: the switch's forwarding thread on CPU 1, the traffic
side's forwarding lcore on CPU 0; each testpmd's main lcore idles on the other CPU.
"""

import os
import re
import statistics
import sys
import time

import _pylib  # noqa: F401  (puts pylib/ on sys.path)
import topologies
from vltestlib import vltest

CORE_PLAN = ("switch under test (virtlink PMD thread, or testpmd's forwarding lcore) busy-polls "
             "on CPU 1; the traffic side (testpmd, two virtio-user ports, io forwarding) "
             "busy-polls on CPU 0; each testpmd's main lcore sleeps on the other CPU")

_PPS = re.compile(r"Rx-pps:\s+(\d+)")


def rx_pps_series(text, nports):
    """Per --stats-period sample, the sum of Rx-pps over the traffic side's ports."""
    vals = [int(x) for x in _PPS.findall(text)]
    return [sum(vals[i:i + nports]) for i in range(0, len(vals) - nports + 1, nports)]


class TrafficLoop:
    """The traffic side: testpmd, two virtio-user ports, io forwarding, seeded with a burst."""

    def __init__(self, tb, frame_size, sock_a, sock_b, ring="split", queues=1):
        # ring: the virtqueue layout the traffic side's virtio-user ports ask for (packed_vq);
        # queues: their queue pairs (virtio-user queues=N, --rxq/--txq=N).
        extra = ",packed_vq=1" if ring == "packed" else ""
        vdevs = ["net_virtio_user0,path=%s,queues=%d,mac=02:00:00:00:00:0a%s" % (sock_a, queues,
                                                                               extra),
                 "net_virtio_user1,path=%s,queues=%d,mac=02:00:00:00:00:0b%s" % (sock_b, queues,
                                                                               extra)]
        args = ["--tx-first", "--txpkts=%d" % frame_size, "--eth-peer=0,02:00:00:00:00:0b",
                "--eth-peer=1,02:00:00:00:00:0a"]
        if queues > 1:
            args += ["--rxq=%d" % queues, "--txq=%d" % queues]
        self.p = tb.start_testpmd("gen", vdevs, "io", args=args, stats_period=1,
                                  interactive=False)

    def mpps(self, trial_s):
        t_end = time.monotonic() + trial_s + 0.5
        while time.monotonic() < t_end:
            if not self.p.alive():
                raise RuntimeError("traffic testpmd exited:\n" + self.p.output()[-3000:])
            time.sleep(0.2)
        series = rx_pps_series(self.p.output(), 2)
        n = int(trial_s)
        samples = series[-n:] if len(series) >= n else series
        if not samples:
            raise RuntimeError("no rate samples from the traffic side")
        return statistics.median(samples) / 1e6


def run_virtlink(tb, mode, frame_size, warm_s, trial_s, ring="split", queues=1, pmd_threads=1):
    sw = topologies.VirtlinkSwitch(tb, mode, pmd_threads=pmd_threads)
    socks = sw.start(["a", "b"])
    gen = TrafficLoop(tb, frame_size, socks["a"], socks["b"], ring, queues)
    tb.wait_connected(["a", "b"])
    time.sleep(warm_s)
    before = topologies.probe_placement(tb)
    sw.cycles_begin()
    mpps = gen.mpps(trial_s)
    cycles = sw.cycles_end()
    return mpps, cycles, before, topologies.probe_placement(tb)


def run_testpmd_switch(tb, frame_size, warm_s, trial_s, ring="split", queues=1):
    """DPDK testpmd as the switch: two net_vhost ports (server sockets), io forwarding on CPU 1."""
    socks = topologies.TestpmdSwitch(tb, queues=queues).start(["a", "b"])
    gen = TrafficLoop(tb, frame_size, socks["a"], socks["b"], ring, queues)
    time.sleep(warm_s)
    before = topologies.probe_placement(tb)
    mpps = gen.mpps(trial_s)
    return mpps, None, before, topologies.probe_placement(tb)


def bench(opts, table, by_placement):
    """Rounds: --repeat N (else --runs, 1 with --quick), each a fresh testbed, the core
    placement probed before and after its measuring window (bench/README.md "Core
    placement"; the traffic side's own stats period runs on while it is probed)."""
    sizes = [int(x) for x in opts.frame_sizes.split(",")]
    runs = opts.repeat if getattr(opts, "repeat_given", False) else (
        1 if opts.quick else opts.runs)
    configs = [("virtlink", "xconnect"), ("virtlink", "bridge"), ("testpmd", "io")]
    total = len(sizes) * len(configs) * runs
    done = 0
    opts.loopback_runs = getattr(opts, "loopback_runs", None) or {}
    for size in sizes:
        for sw, mode in configs:
            for r in range(runs):
                done += 1
                sys.stderr.write("[%d/%d] %s %s %d B run %d ...\n" % (done, total, sw, mode,
                                                                     size, r + 1))
                with vltest.Testbed(None) as tb:
                    if sw == "virtlink":
                        m, c, before, after = run_virtlink(tb, mode, size, opts.warm, opts.trial,
                                                           opts.ring, opts.queues,
                                                           opts.pmd_threads)
                    else:
                        m, c, before, after = run_testpmd_switch(tb, size, opts.warm, opts.trial,
                                                                 opts.ring, opts.queues)
                pl = topologies.placement(before, after)
                sys.stderr.write("  %.3f Mpps, core placement %s (probe %s/%s cycles)\n" % (
                    m, pl or "unknown", before, after))
                opts.loopback_runs.setdefault((sw, mode, size), []).append(
                    {"mpps": m, "placement": pl, "probe_cycles": [before, after],
                     "cycles": c["switch"] if c else None, "gen_cycles": 0})
    results = by_placement(opts.loopback_runs, sizes, configs, opts)
    return table(results, sizes, configs, opts, "testpmd")
