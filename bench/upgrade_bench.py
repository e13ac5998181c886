"""`virtlink bench upgrade`: frames lost and the longest gap in forwarding while the switch
is replaced, three ways, in one run:

  upgrade    `virtlink ctl upgrade` (the successor takes every connection: architecture.md
             "Upgrade") while `virtlink gen` sends 64-byte frames both ways through
             vhost-user ports a and b (gen connects as the front-end; switch xconnect,
             PMD thread on CPU 1 in poll mode, gen on CPU 0). gen counts every frame by its
             sequence number (lost) and records the longest time between two receive bursts
             that brought new frames (max_rx_gap_ns).
  baseline   the same trial with no upgrade, alternating with the upgrade trials: host
             stalls of milliseconds happen here, so the upgrade's gap is read against the
             longest gap of a trial without one.
  restart    the switch stopped (SIGTERM) and started again, and killed (SIGKILL: a crash)
             and started again, with client-mode ports to DPDK testpmd virtio-user servers
             (server=1: the front-end waits for the new switch to connect, the way OVS-DPDK
             deployments use dpdkvhostuserclient), testpmd txonly on a -> rxonly on b. gap:
             from the stop to the first frame the new switch delivers (its counters polled
             every 10 ms). Frames are not counted lost here: while the link is down the
             sender's transmit ring fills and it holds its frames.
  ovs        the same restart for OVS-DPDK (ovs-vswitchd stopped with SIGTERM and started
             again on the same database, dpdkvhostuserclient ports, OpenFlow port-to-port
             flows), its counters polled with ovs-ofctl dump-ports.

Goal (vhost-user ports): 0 frames lost and a gap no more than 10 ms above the baseline's,
against seconds for a restart.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

import _pylib  # noqa: F401  (puts pylib/ on sys.path)
import report
import topologies
from vltestlib import vltest
from vltestlib import vlguest

CORE_PLAN = ("2 CPUs. upgrade/baseline: the switch's PMD thread on CPU 1 (poll mode; its "
             "control thread and the successor's set-up unpinned), `virtlink gen` on CPU 0. "
             "restart: the switch's PMD on CPU 1, testpmd txonly and rxonly each with its "
             "forwarding lcore on CPU 0 (they SHARE it). ovs: ovs-vswitchd's PMD on CPU 1, "
             "the same testpmd pair.")
GOAL_GAP_MS = 10.0


def log(msg):
    sys.stderr.write(time.strftime("%H:%M:%S ") + msg + "\n")
    sys.stderr.flush()


def gen_trial(tb, rate, duration, upgrade_at, name):
    """One gen trial through the running switch; `upgrade_at` s after traffic starts,
    `ctl upgrade` (None: no upgrade). Returns (gen JSON, the upgrade's reply or None)."""
    out = os.path.join(tb.dir, name + ".json")
    argv = [vltest.VIRTLINK, "gen", "--port", "a=vhost-user-client:" + tb.sock("a"),
            "--port", "b=vhost-user-client:" + tb.sock("b"), "--rate", str(rate),
            "--duration", str(duration), "--size", "64", "--cpu", str(topologies.GEN_CPU),
            "--json", out]
    p = vltest.Proc(name, argv, tb.dir)
    tb.procs.append(p)
    tb.wait_connected(["a", "b"], timeout=30)
    tb.wait_counter("b", "tx_packets", 1, timeout=30)
    reply = None
    if upgrade_at is not None:
        time.sleep(upgrade_at)
        ok, reply = tb.upgrade()
        if not ok:
            raise RuntimeError("upgrade failed: %s" % reply)
    p.p.wait(duration + 60)
    if p.stop() != 0:
        raise RuntimeError("gen failed:\n" + p.output()[-3000:])
    with open(out) as f:
        return json.load(f), reply


def switch_forwarding(tb, port, since):
    """Polls `ctl stats` every 10 ms until `port`'s tx_packets is above `since`; the time."""
    while True:
        try:
            if tb.switch_stats()[port]["tx_packets"] > since:
                return time.monotonic()
        except (AssertionError, KeyError, ValueError):
            pass
        time.sleep(0.01)


def restart_virtlink(opts, rows, lines):
    """SIGTERM and SIGKILL restarts with testpmd server=1 peers."""
    with vlguest.GuestTestbed() as tb:
        rx = tb.start_testpmd("rx", [tb.virtio_user("b", server=1)], "rxonly",
                              lcores="0,1", main_lcore=1)
        vltest._wait(lambda: os.path.exists(tb.sock("b")), 15, "testpmd rx listening")
        tx = tb.start_testpmd("tx", [tb.virtio_user("a", server=1)], "txonly",
                              args=["--txpkts=64"], lcores="0,1", main_lcore=1)
        vltest._wait(lambda: os.path.exists(tb.sock("a")), 15, "testpmd tx listening")
        tb.start_switch(ports=[], client_ports=["a", "b"], forward="xconnect",
                        pmd_cores=str(topologies.SWITCH_CPU))
        tb.wait_connected(["a", "b"], timeout=30)
        tb.wait_counter("b", "tx_packets", 1000, timeout=30)
        for how in ["upgrade"] * opts.trials + ["SIGTERM", "SIGKILL"] * opts.trials:
            time.sleep(1.0)
            t0 = time.monotonic()
            paused = None
            if how == "upgrade":  # the same client ports, handed over
                ok, reply = tb.upgrade()
                if not ok:
                    raise RuntimeError(reply)
                # (Polling from before the command would count the successor's start, during
                # which the old process forwards: the switch's own timestamps instead.)
                paused = reply["paused_ms"]
                t1 = t0 + paused / 1000
            else:
                if how == "SIGTERM":
                    tb.stop_switch(signal.SIGTERM)
                else:
                    tb.switch.stop(signal.SIGKILL, timeout=10)
                tb.start_switch(ports=[], client_ports=["a", "b"], forward="xconnect",
                                pmd_cores=str(topologies.SWITCH_CPU))
                t1 = switch_forwarding(tb, "b", 0)
            gap_ms = (t1 - t0) * 1000
            log("virtlink %s with client ports: forwarding again after %.1f ms" % (how, gap_ms))
            rows.append(report.row(experiment="upgrade", topology="p2p", switch="virtlink",
                                   mode="xconnect", pmd_mode="poll", frame_size=64,
                                   method="restart" if how != "upgrade" else "upgrade",
                                   event=how, ports="vhost-user-client", gap_ms=gap_ms,
                                   paused_ms=paused, lost=None,
                                   gap_from="switch timestamps (datapath paused)" if paused
                                   else "10 ms polls of the new switch's counters"))
        tb.stop_testpmd(tx)
        tb.stop_testpmd(rx)


def restart_ovs(opts, rows, lines):
    """OVS-DPDK restarted with dpdkvhostuserclient ports to testpmd server=1 peers."""
    with vltest.Testbed() as tb:
        rx = tb.start_testpmd("rx", [tb.virtio_user("b", server=1)], "rxonly")
        vltest._wait(lambda: os.path.exists(tb.sock("b")), 15, "testpmd rx listening")
        tx = tb.start_testpmd("tx", [tb.virtio_user("a", server=1)], "txonly", args=["--txpkts=64"])
        vltest._wait(lambda: os.path.exists(tb.sock("a")), 15, "testpmd tx listening")
        ovs = topologies.OvsSwitch(tb, mode="xconnect", client_paths={"a": tb.sock("a"),
                                                                      "b": tb.sock("b")})
        ovs.start(["a", "b"])

        def ovs_tx_b():
            try:
                out = ovs.ofctl("dump-ports", "br0", "2")
            except (RuntimeError, subprocess.TimeoutExpired):
                return -1
            m = re.search(r"tx pkts=(\d+)", out)
            return int(m.group(1)) if m else -1
        vltest._wait(lambda: ovs_tx_b() > 1000, 60, "OVS forwarding")
        for _ in range(opts.trials):
            time.sleep(1.0)
            t0 = time.monotonic()
            ovs.restart_vswitchd()
            while ovs_tx_b() <= 0:
                time.sleep(0.01)
            gap_ms = (time.monotonic() - t0) * 1000
            log("OVS-DPDK SIGTERM restart with dpdkvhostuserclient ports: forwarding again "
                "after %.1f ms" % gap_ms)
            rows.append(report.row(experiment="upgrade", topology="p2p", switch="ovs-dpdk",
                                   mode="xconnect", pmd_mode="poll", frame_size=64,
                                   method="restart", event="SIGTERM", ports="dpdkvhostuserclient",
                                   gap_ms=gap_ms, lost=None,
                                   gap_from="10 ms polls of ovs-ofctl dump-ports"))
        tb.stop_testpmd(tx)
        tb.stop_testpmd(rx)
        ovs.stop()


def upgrade_trials(opts, rows):
    with vltest.Testbed() as tb:
        tb.start_switch(ports=["a", "b"], forward="xconnect", pmd_cores=str(topologies.SWITCH_CPU),
                        extra=["--pmd-mode", "poll"])
        for k in range(opts.trials):
            for method in ("baseline", "upgrade"):
                d0 = vltest.drops_by_reason(tb.switch_stats())
                doc, reply = gen_trial(tb, opts.rate, opts.duration,
                                       opts.duration / 2 if method == "upgrade" else None,
                                       "gen-%s-%d" % (method, k))
                # gen counts a frame it found no free transmit descriptor for as lost (a NIC
                # would drop it); a guest's driver holds it instead (its queue stops): those
                # are `held`, and `lost` is what the switch lost of the frames it was given.
                held = sum(s["tx_ring_full"] for s in doc["streams"])
                lost = sum(s["lost"] for s in doc["streams"]) - held
                offered = sum(s["offered"] for s in doc["streams"])
                gap = max(s["max_rx_gap_ns"] for s in doc["streams"]) / 1e6
                paused = reply["paused_ms"] if reply else None
                d1 = vltest.drops_by_reason(tb.switch_stats())
                drops = {k: v - d0.get(k, 0) for k, v in d1.items() if v - d0.get(k, 0)}
                log("%s %d: offered %d, lost %d (switch drops %s), held by the front-end %d, "
                    "longest gap %.2f ms%s" % (method, k, offered, lost, drops or "none", held, gap,
                    ", datapath paused %.2f ms" % paused if paused else ""))
                rows.append(report.row(experiment="upgrade", topology="p2p", switch="virtlink",
                                       mode="xconnect", pmd_mode="poll", frame_size=64,
                                       streams=2, trial_s=opts.duration, method=method,
                                       event="upgrade" if reply else None, ports="vhost-user",
                                       rate_pps=opts.rate, offered=offered, lost=lost, held=held,
                                       switch_drops=drops,
                                       gap_ms=gap, paused_ms=paused, repeat=k))


def table(rows):
    out = ["%-9s %-9s %-8s %-20s %8s %8s %10s %11s" % ("switch", "method", "event", "ports",
                                                       "lost", "held", "gap (ms)", "paused (ms)")]
    for r in rows:
        out.append("%-9s %-9s %-8s %-20s %8s %8s %10.2f %11s%s" % (
            r["switch"], r["method"], r["event"] or "-", r["ports"],
            "-" if r["lost"] is None else r["lost"], "-" if r.get("held") is None else r["held"],
            r["gap_ms"], "-" if r.get("paused_ms") is None else "%.2f" % r["paused_ms"],
            "  switch drops %s" % r["switch_drops"] if r.get("switch_drops") else ""))
    out.append("lost: frames the switch was given and did not deliver (gen's sequence numbers); "
               "held: frames the front-end could not post while its ring was full (a guest "
               "holds them; gen, like a NIC, counts them lost). restart rows: no loss counted.")
    base = [r["gap_ms"] for r in rows if r["method"] == "baseline"]
    up = [r for r in rows if r["method"] == "upgrade" and r["ports"] == "vhost-user"]
    if base and up:
        worst_base = max(base)
        worst = max(r["gap_ms"] for r in up)
        lost = sum(r["lost"] for r in up)
        met = lost == 0 and worst - worst_base <= GOAL_GAP_MS
        out.append("goal (0 lost, gap <= baseline + %.0f ms): upgrade lost %d, longest gap "
                   "%.2f ms vs baseline's longest %.2f ms (+%.2f ms): %s" % (
                       GOAL_GAP_MS, lost, worst, worst_base, worst - worst_base,
                       "met" if met else "NOT met"))
    for sw, ev in (("virtlink", "SIGTERM"), ("virtlink", "SIGKILL"), ("ovs-dpdk", "SIGTERM")):
        g = [r["gap_ms"] for r in rows if r["switch"] == sw and r["event"] == ev]
        if g:
            out.append("%s restart (%s): forwarding again after %.0f-%.0f ms" % (sw, ev, min(g), max(g)))
    return out


def main(argv):
    ap = argparse.ArgumentParser(prog="virtlink bench upgrade", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--virtlink", required=True, help=argparse.SUPPRESS)
    ap.add_argument("--json", help="write the bench JSON (INTERFACES.md) here")
    ap.add_argument("--quick", action="store_true", help="1 trial of each (default 3)")
    ap.add_argument("--trials", type=int, help="trials of each kind (default 3; --quick 1)")
    ap.add_argument("--rate", type=int, default=200000, help="frames/s per direction (200000)")
    ap.add_argument("--duration", type=float, default=4.0, help="gen trial seconds (4)")
    ap.add_argument("--no-ovs", action="store_true", help="leave out the OVS-DPDK anchor")
    opts = ap.parse_args(argv)
    opts.trials = opts.trials or (1 if opts.quick else 3)
    vltest.VIRTLINK = os.path.abspath(opts.virtlink)
    t0 = time.time()
    command = report.bench_command("upgrade", argv)
    version, anchors = report.versions(vltest.VIRTLINK)
    busy = report.cpu_busy()
    load0 = report.load_average()
    rows, lines, errors = [], [], []
    upgrade_trials(opts, rows)
    restart_virtlink(opts, rows, lines)
    if opts.no_ovs:
        errors.append("OVS-DPDK restart (--no-ovs)")
    elif not topologies.have_ovs():
        errors.append("OVS-DPDK restart (openvswitch-switch-dpdk not installed)")
    else:
        try:
            restart_ovs(opts, rows, lines)
        except Exception as e:  # the anchor's failure is reported, not hidden
            errors.append("OVS-DPDK restart: %s: %s" % (type(e).__name__, e))
    load1 = report.load_average()
    lines = table(rows)
    verdict = report.load_verdict(busy)
    if verdict:
        lines.append(verdict)
    report.print_summary(CORE_PLAN, load0, load1, lines,
                         "gap: upgrade/baseline from gen's receive timestamps (TSC); restarts "
                         "from 10 ms polls of the switch's counters (a bound within 10 ms).",
                         errors, [], t0)
    if opts.json:
        report.write_json(opts.json, command, version, CORE_PLAN, rows, anchors=anchors,
                          table=lines, not_measured=errors, cpu_busy_before=busy)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
