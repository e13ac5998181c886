#!/usr/bin/env python3
"""VXLAN against the plain uplink it rides on: two virtlink switches in two network
namespaces joined by a veth pair (MTU 1600), the generator (`virtlink gen`, vhost-user)
sending from switch A's port g0 to switch B's port g1, one way:

    plain:  g0 -> A -> af-packet uA == veth == uB af-packet -> B -> g1
    vxlan:  g0 -> A -> vx (VNI 100) -> uA (underlay) == veth == uB -> vx -> B -> g1

Per mode and frame size: the RFC 2544 NDR (bench/rfc2544.py) and the rate carried when
offered `--max-mpps`, with each switch's busy cycles per frame (ctl pmd-stats). The goal of
"Off the host": VXLAN carries >= 0.8x what the plain uplink carries. Both switches' PMD
threads share CPU 1 (interrupt mode), the generator busy-polls CPU 0, and the veth's softirq
work runs on whichever CPU sends: every figure here is a ratio of two runs on the same
placement, not a rate of the switch alone.

    python3 bench/vxlan_bench.py --virtlink build/virtlink [--quick] [--out FILE.md]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _pylib  # noqa: E402,F401  (pylib on the path)
import rfc2544  # noqa: E402
import topologies  # noqa: E402
from vltestlib import vltest  # noqa: E402

NS = ("vxbA", "vxbB")


def sh(*args, ns=None, check=True):
    argv = (["ip", "netns", "exec", ns] if ns else []) + [str(a) for a in args]
    return subprocess.run(argv, check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class TwoSwitches:
    """Switch A (g0 + uplink [+ tunnel]) and switch B (uplink [+ tunnel] + g1), each in its
    namespace, as bench/topologies.py's Topology drives a switch."""
    name = "virtlink"

    def __init__(self, tb, mode, pmd_mode="interrupt"):
        self.tb, self.mode, self.pmd_mode = tb, mode, pmd_mode
        self.procs, self.ctls = [], []
        self._p0 = None

    def start(self, ports):
        for n in NS:
            sh("ip", "netns", "del", n, check=False)
            sh("ip", "netns", "add", n)
        sh("ip", "link", "add", "uA", "netns", NS[0], "type", "veth", "peer", "name", "uB", "netns", NS[1])
        for n, i in zip(NS, ("uA", "uB")):
            sh("ip", "link", "set", i, "mtu", 1600, "up", ns=n)
        socks = {p: self.tb.sock(p) for p in ports}
        for k, (n, gport) in enumerate(zip(NS, ports)):
            ctl = os.path.join(self.tb.dir, "ctl%d" % k)
            argv = ["ip", "netns", "exec", n, vltest.VIRTLINK, "--log-level", "warn", "switch",
                    "--port", "%s=vhost-user:%s" % (gport, socks[gport]),
                    "--port", "up=af-packet:" + ("uA", "uB")[k]]
            if self.mode == "vxlan":
                argv += ["--port", "vx=vxlan:uplink=up,local=10.99.0.%d,vni=100,remote=10.99.0.%d" %
                         (k + 1, 2 - k)]
            argv += ["--forward", "bridge", "--pmd-mode", self.pmd_mode,
                     "--pmd-cores", str(topologies.SWITCH_CPU), "--control", ctl]
            p = vltest.Proc("switch%s-%s" % ("AB"[k], self.mode), argv, self.tb.dir)
            self.tb.procs.append(p)
            self.procs.append(p)
            self.ctls.append(ctl)
        vltest._wait(lambda: all(os.path.exists(c) for c in self.ctls) and
                     all(os.path.exists(socks[p]) for p in ports), 20, "the switches")
        return socks

    def ctl(self, k, *args):
        r = subprocess.run([vltest.VIRTLINK, "ctl", "--control", self.ctls[k]] + list(args) + ["--json"],
                           stdout=subprocess.PIPE, text=True, check=True)
        return json.loads(r.stdout)

    def wait_ready(self, ports, timeout=30):
        def ok():
            for k in range(2):
                st = {p["name"]: p for p in self.ctl(k, "stats")["ports"]}
                if any(st[p]["state"] != "connected" for p in ports if p in st):
                    return False
            return True
        vltest._wait(ok, timeout, "the generator's ports")

    def _pmd(self):
        out = []
        for k in range(2):
            st = self.ctl(k, "pmd-stats")
            out.append((sum(p["packets"] for p in st), sum(p["busy_cycles"] for p in st)))
        return out

    def cycles_begin(self):
        self._p0 = self._pmd()

    def cycles_end(self):
        if self._p0 is None:
            return None
        now = self._pmd()
        res = {}
        for k, name in enumerate(("A", "B")):
            dp, dc = now[k][0] - self._p0[k][0], now[k][1] - self._p0[k][1]
            if dp > 0:
                res[name] = round(dc / dp)
        self._p0 = None
        return res

    def stop(self):
        for p in self.procs:
            if p.returncode is None:
                p.stop()
        for n in NS:
            sh("ip", "netns", "del", n, check=False)


def measure(mode, sizes, opts, log):
    rows = []
    with vltest.Testbed() as tb:
        sw = TwoSwitches(tb, mode)
        topo = topologies.Topology(tb, "p2p", sw, queue_size=1024)
        try:
            topo.start()
            topo.start_gen(unidirectional=True)
            for size in sizes:
                max_pps = opts.max_mpps * 1e6 * (1 if size <= 128 else 0.5)
                topo.trial(max_pps / 10, size, 1.0)  # warm-up: learning, ARP, buffers

                def trial(rate):
                    r = topo.trial(rate, size, opts.trial_s)
                    return rfc2544.Trial(rate, r.loss, r.offered_fraction() > 0.98, r)
                res = rfc2544.search(trial, max_pps, max_pps * opts.precision, max_trials=opts.max_trials)
                full = topo.trial(max_pps, size, opts.trial_s)
                carried = full.rx / opts.trial_s
                ndr_run = res.ndr_trial.info if res.ndr_trial else None
                rows.append({"mode": mode, "frame_size": size, "ndr_pps": round(res.ndr),
                             "carried_pps": round(carried), "offered_pps": round(full.offered_pps),
                             "cycles_at_max": full.cycles,
                             "cycles_at_ndr": ndr_run.cycles if ndr_run else None,
                             "trials": len(res.trials)})
                log("%s %d B: NDR %.3f Mpps, carried %.3f Mpps at %.3f offered, cycles/frame %s" % (
                    mode, size, res.ndr / 1e6, carried / 1e6, full.offered_pps / 1e6, full.cycles))
        finally:
            topo.stop()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--virtlink", required=True)
    ap.add_argument("--quick", action="store_true", help="64 and 1518 B, 1 s trials, coarse search")
    ap.add_argument("--sizes", default="64,512,1518")
    ap.add_argument("--trial-s", type=float, default=2.0)
    ap.add_argument("--precision", type=float, default=0.02, help="of the maximum rate")
    ap.add_argument("--max-mpps", type=float, default=2.0, help="highest rate tried (64-128 B; half above)")
    ap.add_argument("--max-trials", type=int, default=14)
    ap.add_argument("--json")
    ap.add_argument("--out", help="write a markdown report here")
    opts = ap.parse_args()
    vltest.VIRTLINK = os.path.abspath(opts.virtlink)
    sizes = [int(s) for s in opts.sizes.split(",")]
    if opts.quick:
        sizes, opts.trial_s, opts.precision, opts.max_trials = [64, 1518], 1.0, 0.05, 8

    def log(m):
        print("[vxlan-bench] " + m, flush=True)
    load0 = open("/proc/loadavg").read().split()[:3]
    rows = measure("plain", sizes, opts, log) + measure("vxlan", sizes, opts, log)
    load1 = open("/proc/loadavg").read().split()[:3]
    by = {(r["mode"], r["frame_size"]): r for r in rows}
    lines = ["| frame (B) | plain NDR (Mpps) | VXLAN NDR (Mpps) | NDR ratio | plain carried | VXLAN carried | "
             "carried ratio | cycles/frame A, B plain | cycles/frame A, B VXLAN |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in sizes:
        p, v = by[("plain", s)], by[("vxlan", s)]
        ratio = lambda a, b: "%.2f" % (a / b) if b else "n/a"  # noqa: E731
        cyc = lambda r: "%s, %s" % ((r["cycles_at_max"] or {}).get("A"), (r["cycles_at_max"] or {}).get("B"))  # noqa: E731
        lines.append("| %d | %.3f | %.3f | %s | %.3f | %.3f | %s | %s | %s |" % (
            s, p["ndr_pps"] / 1e6, v["ndr_pps"] / 1e6, ratio(v["ndr_pps"], p["ndr_pps"]),
            p["carried_pps"] / 1e6, v["carried_pps"] / 1e6, ratio(v["carried_pps"], p["carried_pps"]),
            cyc(p), cyc(v)))
    table = "\n".join(lines)
    print(table)
    doc = {"experiment": "vxlan", "topology": "p2p", "switch": "virtlink", "date":
           datetime.datetime.now().isoformat(timespec="seconds"), "load_before": load0,
           "load_after": load1, "rows": rows, "command": " ".join(sys.argv)}
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(doc, f, indent=1)
    if opts.out:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE, text=True).stdout.strip()
        with open(opts.out, "w") as f:
            f.write("# VXLAN against the plain uplink\n\n`%s` at %s, %s; load average before %s, after %s.\n\n"
                    "%s\n\n%s\n" % (" ".join(sys.argv), rev, doc["date"], " ".join(load0), " ".join(load1),
                                   __doc__.split("\n\n")[2].strip() if False else "", table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
