#!/usr/bin/env python3
"""virtlink's benchmark harness: `virtlink bench NAME [options]` runs this file.

Benchmarks are not tests: they measure, print a table, and record results with the command
that produced them (bench/results/). Every benchmark measures its anchors (other switches)
in the same run, so ratios hold even though this machine's speed drifts by ~15%.

  ping       ping RTT between two QEMU guests through virtlink (poll, interrupt,
             adaptive) and through QEMU's userspace networking (tap + Linux bridge)
             (bench/ping_bench.py)
  loopback   64 B and 1518 B loopback Mpps through virtlink (xconnect, bridge) and
             through DPDK testpmd's vhost PMD (io forwarding) as the switch, with the
             same traffic side: one testpmd with two virtio-user ports in io forwarding,
             seeded with --tx-first, so frames circulate gen -> switch -> gen.

Core plan (2 CPUs): the switch's forwarding thread on CPU 1, the traffic side's
forwarding lcore on CPU 0; each process's main lcore idles on the other CPU.
"""

import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "interop"))
import vltest  # noqa: E402  (process management shared with the interop tests)

ROW_KEYS = ("experiment", "topology", "switch", "mode", "policy", "pmd_mode", "vnfs", "flows",
            "frame_size", "trial_s", "ndr_mpps", "pdr_mpps", "projected_ndr_mpps",
            "cycles_per_packet", "latency_ns", "path", "offloads", "streams",
            "throughput_mbps", "rtt_ns", "duration_s")


def row(**kw):
    r = {k: None for k in ROW_KEYS}
    r.update(kw)
    return r


def machine():
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cpus": os.cpu_count(), "kernel": platform.release(),
            "hostname": platform.node()}


def testpmd_version():
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "dpdk"],
                             stdout=subprocess.PIPE, text=True, timeout=5).stdout
        return out.strip()
    except Exception:
        return None


_PPS = re.compile(r"Rx-pps:\s+(\d+)")


def rx_pps_series(text, nports):
    """Per --stats-period sample, the sum of Rx-pps over the traffic side's ports."""
    vals = [int(x) for x in _PPS.findall(text)]
    return [sum(vals[i:i + nports]) for i in range(0, len(vals) - nports + 1, nports)]


class TrafficLoop:
    """The traffic side: testpmd, two virtio-user ports, io forwarding, seeded with a burst."""

    def __init__(self, tb, frame_size, sock_a, sock_b, server=False):
        kw = {"server": 1} if server else {}
        vdevs = ["net_virtio_user0,path=%s,queues=1,mac=02:00:00:00:00:0a%s" %
                 (sock_a, ",server=1" if server else ""),
                 "net_virtio_user1,path=%s,queues=1,mac=02:00:00:00:00:0b%s" %
                 (sock_b, ",server=1" if server else "")]
        del kw
        args = ["--tx-first", "--txpkts=%d" % frame_size, "--eth-peer=0,02:00:00:00:00:0b",
                "--eth-peer=1,02:00:00:00:00:0a"]
        self.p = tb.start_testpmd("gen", vdevs, "io", args=args, stats_period=1,
                                  interactive=False)

    def mpps(self, warm_s, trial_s):
        t_end = time.monotonic() + warm_s + trial_s + 0.5
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


def run_virtlink(tb, mode, frame_size, warm_s, trial_s):
    tb.start_switch(ports=["a", "b"], forward=mode, pmd_cores="1")
    gen = TrafficLoop(tb, frame_size, tb.sock("a"), tb.sock("b"))
    tb.wait_connected(["a", "b"])
    time.sleep(warm_s)
    p0 = tb.ctl("pmd-stats")[0]
    mpps = gen.mpps(0, trial_s)
    p1 = tb.ctl("pmd-stats")[0]
    pk = p1["packets"] - p0["packets"]
    cpp = (p1["busy_cycles"] - p0["busy_cycles"]) / pk if pk else None
    return mpps, ({"switch_tsc": round(cpp)} if cpp else None)


def run_testpmd_switch(tb, frame_size, warm_s, trial_s):
    """DPDK testpmd as the switch: two net_vhost ports (server sockets), io forwarding on CPU 1."""
    sa, sb = tb.sock("a"), tb.sock("b")
    prefix = "vlbsw%d" % os.getpid()
    tb.prefixes.append(prefix)
    argv = [vltest.TESTPMD, "-l", "0,1", "--main-lcore", "0", "--no-huge", "-m", "1024",
            "--no-pci", "--file-prefix", prefix,
            "-d", os.path.join(vltest.PMD_DIR, "librte_net_vhost.so"),
            "-d", os.path.join(vltest.PMD_DIR, "librte_mempool_ring.so"),
            "--vdev", "net_vhost0,iface=%s,queues=1" % sa,
            "--vdev", "net_vhost1,iface=%s,queues=1" % sb,
            "--", "--no-mlockall", "--total-num-mbufs=16384", "--forward-mode=io", "-a",
            "--stats-period", "1"]
    sw = vltest.Proc("testpmd-switch", argv, tb.dir)
    tb.procs.append(sw)
    vltest._wait(lambda: os.path.exists(sa) and os.path.exists(sb), 20, "net_vhost sockets")
    gen = TrafficLoop(tb, frame_size, sa, sb)
    time.sleep(warm_s)
    return gen.mpps(0, trial_s), None


def bench_loopback(opts):
    sizes = [int(x) for x in opts.frame_sizes.split(",")]
    runs = 1 if opts.quick else opts.runs
    configs = [("virtlink", "xconnect"), ("virtlink", "bridge"), ("testpmd", "io")]
    results = {}
    total = len(sizes) * len(configs) * runs
    done = 0
    for size in sizes:
        for sw, mode in configs:
            vals, cpps = [], []
            for r in range(runs):
                done += 1
                sys.stderr.write("\r[%d/%d] %s %s %d B run %d ...   " % (done, total, sw, mode,
                                                                      size, r + 1))
                sys.stderr.flush()
                with vltest.Testbed(None) as tb:
                    if sw == "virtlink":
                        m, c = run_virtlink(tb, mode, size, opts.warm, opts.trial)
                    else:
                        m, c = run_testpmd_switch(tb, size, opts.warm, opts.trial)
                vals.append(m)
                if c:
                    cpps.append(c["switch_tsc"])
            results[(sw, mode, size)] = (statistics.median(vals), vals,
                                         round(statistics.median(cpps)) if cpps else None)
    sys.stderr.write("\n")

    rows = []
    lines = ["%-10s %-9s %6s %10s %12s %14s %s" % ("switch", "mode", "bytes", "Mpps",
                                                    "vs testpmd", "cycles/pkt", "runs")]
    for size in sizes:
        anchor = results[("testpmd", "io", size)][0]
        for sw, mode in configs:
            med, vals, cpp = results[(sw, mode, size)]
            ratio = med / anchor if anchor else None
            lines.append("%-10s %-9s %6d %10.2f %12s %14s %s" % (
                sw, mode, size, med, "%.2fx" % ratio if ratio else "-",
                cpp if cpp is not None else "-", " ".join("%.2f" % v for v in vals)))
            rows.append(row(experiment="loopback", topology="p2p", switch=sw, mode=mode,
                            policy="rx-batch" if sw == "virtlink" else None, pmd_mode="poll",
                            frame_size=size, trial_s=opts.trial,
                            cycles_per_packet={"switch_tsc": cpp} if cpp else None,
                            mpps=round(med, 3), mpps_runs=[round(v, 3) for v in vals],
                            ratio_to_testpmd=round(ratio, 3) if ratio else None))
    return rows, lines


CORE_PLAN = ("switch under test (virtlink PMD thread, or testpmd's forwarding lcore) busy-polls "
             "on CPU 1; the traffic side (testpmd, two virtio-user ports, io forwarding) "
             "busy-polls on CPU 0; each testpmd's main lcore sleeps on the other CPU")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "ping":
        import ping_bench
        return ping_bench.main(sys.argv[2:])
    ap = argparse.ArgumentParser(prog="virtlink bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", choices=["loopback"])
    ap.add_argument("--virtlink", required=True, help=argparse.SUPPRESS)
    ap.add_argument("--json", help="write the bench JSON (INTERFACES.md) here")
    ap.add_argument("--quick", action="store_true", help="one run per point (under 3 minutes)")
    ap.add_argument("--frame-sizes", default="64,1518", help="comma-separated bytes")
    ap.add_argument("--trial", type=float, default=5.0, help="seconds measured per run")
    ap.add_argument("--warm", type=float, default=2.0, help="seconds before measuring")
    ap.add_argument("--runs", type=int, default=3, help="runs per point (median reported)")
    opts = ap.parse_args()
    vltest.VIRTLINK = os.path.abspath(opts.virtlink)
    command = "virtlink bench " + " ".join(shlex.quote(a) for a in sys.argv[1:]
                                           if not a.startswith("--virtlink") and a != opts.virtlink)
    t0 = time.time()
    rows, lines = bench_loopback(opts)
    print("virtlink bench %s   (%s)" % (opts.name, time.strftime("%Y-%m-%d %H:%M")))
    print("core plan: " + CORE_PLAN)
    print("\n".join(lines))
    print("cycles/pkt: TSC cycles of the switch's PMD thread in passes that forwarded frames, "
          "per frame (virtlink's own counter)")
    print("took %.0f s" % (time.time() - t0))
    if opts.json:
        ver = subprocess.run([vltest.VIRTLINK, "--version"], stdout=subprocess.PIPE,
                             text=True).stdout.strip()
        doc = {"command": command, "version": ver, "machine": machine(),
               "anchors": {"dpdk": testpmd_version()}, "core_plan": CORE_PLAN, "rows": rows}
        with open(opts.json, "w") as f:
            json.dump(doc, f, indent=2)
        print("wrote " + opts.json)


if __name__ == "__main__":
    main()
