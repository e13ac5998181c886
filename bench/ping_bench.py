"""`virtlink bench ping`: ping RTT between two Linux guests (QEMU TCG, scripts/guest).

Paths (the same two guests' kernels, the same ping):
  virtlink-poll        guest1 -> virtlink (bridge, --pmd-mode poll, --pmd-cores 1) -> guest2
  virtlink-interrupt   the same, --pmd-mode interrupt, PMD thread unpinned
  virtlink-adaptive    the same, --pmd-mode adaptive, PMD thread unpinned
  qemu-userspace       guest1 -> QEMU tap back-end (vhost=off) -> tap -> Linux bridge -> tap
                       -> QEMU -> guest2: QEMU's own userspace networking, no vhost
  native               two network namespaces on a veth pair (the host kernel, no guests)

Runs per path (`--runs`, rows tagged ping.kind):
  interval   `ping -q -c COUNT -i INTERVAL`: RTT min/avg/max/mdev
  flood      `ping -q -f -c FLOOD` (56 B): RTT min/avg/max, total time
  flood-1024 `ping -q -s 1024 -l 120 -f -c FLOOD` (120 in flight): total time (duration_s,
             the `time` ping reports) and RTT

The virtlink paths share one pair of guests: between modes the switch is restarted on the
same sockets and the guests' vhost-user clients reconnect (QEMU reconnect=1). The tap path
boots its own pair (scripts/guest/run-guest.sh --tap). In each path guest1 runs
`ping -q -c COUNT -i INTERVAL` to guest2 (static neighbour entries, after a short warm-up)
and the harness parses iputils' summary (rtt min/avg/max/mdev).

Guests run under TCG, so their RTTs are dominated by emulation; the ratios between paths are
what the bench is for. Bridges and tap devices are removed on every exit path.
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
import time

import _pylib  # noqa: F401  (puts pylib/ on sys.path)
import guest_cost
import report
from vltestlib import vlguest, vltest

MAC1, MAC2 = "52:54:00:00:00:01", "52:54:00:00:00:02"
IP1, IP2 = "10.0.0.1/24", "10.0.0.2/24"
VIRTLINK_MODES = (("poll", "1"), ("interrupt", ""), ("adaptive", ""))
ALL_CPUS = set(range(os.cpu_count() or 1))
CORE_PLAN = ("2 CPUs. virtlink-poll: the switch's PMD thread busy-polls pinned to CPU 1 "
             "(--pmd-cores 1) and has it to itself: both QEMU guests (TCG, 1 vCPU each) are "
             "pinned to CPU 0, so two emulated guests share one core; interrupt/adaptive: "
             "the PMD thread and the guests are unpinned on CPUs 0-1 and the PMD thread "
             "sleeps when idle. qemu-userspace: no switch process; "
             "each QEMU's tap back-end runs in its own main loop, the Linux bridge in the "
             "host kernel, all unpinned on CPUs 0-1.")


def log(msg):
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def ip(*args, check=True):
    r = subprocess.run(["ip"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if check and r.returncode != 0:
        raise RuntimeError("ip %s: %s" % (" ".join(args), r.stderr.strip()))
    return r


class LinuxBridge:
    """A Linux bridge with two tap devices; removed on exit (context manager)."""

    def __init__(self, tag):
        self.br = "vlpbr%s" % tag
        self.taps = ["vlpt%s-%d" % (tag, i) for i in (1, 2)]
        assert all(len(n) <= 15 for n in [self.br] + self.taps)

    def __enter__(self):
        try:
            ip("link", "add", self.br, "type", "bridge")
            # No STP, no forwarding delay: ports forward as soon as they are up.
            ip("link", "set", self.br, "type", "bridge", "stp_state", "0", "forward_delay", "0")
            for t in self.taps:
                ip("tuntap", "add", "dev", t, "mode", "tap")
                ip("link", "set", t, "master", self.br)
                ip("link", "set", t, "up")
            ip("link", "set", self.br, "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        for t in self.taps:
            ip("link", "del", t, check=False)
        ip("link", "del", self.br, check=False)
        left = [n for n in [self.br] + self.taps
                if ip("link", "show", n, check=False).returncode == 0]
        if left:
            log("ping: could not remove %s" % left)


class NetnsPair:
    """Two network namespaces joined by a veth pair (10.9.0.1 <-> 10.9.0.2); removed on exit."""

    def __init__(self, tag):
        self.ns = ["vlns%sa" % tag, "vlns%sb" % tag]
        self.dev = ["vlve%sa" % tag, "vlve%sb" % tag]
        self.addr = ["10.9.0.1", "10.9.0.2"]

    def __enter__(self):
        try:
            for n in self.ns:
                ip("netns", "add", n)
            ip("link", "add", self.dev[0], "netns", self.ns[0], "type", "veth", "peer", "name",
               self.dev[1], "netns", self.ns[1])
            for i, (n, d) in enumerate(zip(self.ns, self.dev)):
                ip("-n", n, "addr", "add", "%s/24" % self.addr[i], "dev", d)
                ip("-n", n, "link", "set", d, "up")
                ip("-n", n, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def exec(self, i, argv, timeout=None):
        return subprocess.run(["ip", "netns", "exec", self.ns[i]] + argv, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=timeout)

    def close(self):
        for n in self.ns:
            ip("netns", "del", n, check=False)


_PING_TIME = re.compile(r"packets transmitted, .*time (\d+)ms")


def ping_cmds(opts):
    """(kind, ping arguments, count) of every run asked for."""
    out = []
    for kind in opts.runs:
        if kind == "interval":
            out.append((kind, "-q -c %d -i %s -W 2" % (opts.count, opts.interval), opts.count))
        elif kind == "flood":
            out.append((kind, "-q -f -c %d -W 2" % opts.flood, opts.flood))
        elif kind == "flood-1024":
            out.append((kind, "-q -s 1024 -l 120 -f -c %d -W 2" % opts.flood, opts.flood))
        else:
            raise SystemExit("ping: unknown run %r (interval, flood, flood-1024)" % kind)
    return out


def parse_run(cmd, status, out):
    p = vlguest.parse_ping(out)
    m = vlguest._PING_RTT.search(out)
    t = _PING_TIME.search(out)
    if p["rtt"] is None or status not in (0, 1) or not t:
        raise RuntimeError("`%s` exited with %d:\n%s" % (cmd, status, out))
    return p, float(m.group(4)), int(t.group(1)) / 1000.0


def guest_runs(opts, tb, g1, g2):
    """Warm-up, then every run g1 -> g2. Yields (kind, parsed, mdev ms, ping's time s,
    cost) with the run's cost to the guests and the switch (guest_cost.py)."""
    g1.run("ip neigh replace %s lladdr %s dev eth0 nud permanent" % (g2.addr, MAC2))
    g2.run("ip neigh replace %s lladdr %s dev eth0 nud permanent" % (g1.addr, MAC1))
    g1.run("ping -c 5 -i 0.2 -W 2 %s" % g2.addr, timeout=30)
    for kind, args, count in ping_cmds(opts):
        cmd = "ping %s %s" % (args, g2.addr)
        before = guest_cost.sample(tb, [g1, g2])
        status, out = g1.run(cmd, timeout=60 + count * 0.05, check=False)
        c = guest_cost.cost(before, guest_cost.sample(tb, [g1, g2]))
        yield (kind,) + parse_run(cmd, status, out) + (c,)


def make_row(path, switch, mode, pmd_mode, kind, p, mdev, dt, cost, repeat, opts):
    ns = lambda ms: int(round(ms * 1e6))  # noqa: E731
    mn, avg, mx = p["rtt"]
    return report.row(
        experiment="ping", topology="netns" if path == "native" else "guest", switch=switch,
        mode=mode, pmd_mode=pmd_mode, path=path,
        frame_size=14 + 20 + 8 + (1024 if kind == "flood-1024" else 56),
        rtt_ns={"min": ns(mn), "avg": ns(avg), "max": ns(mx)}, duration_s=round(dt, 3),
        ping={"kind": kind, "count": p["tx"],
              "interval_s": opts.interval if kind == "interval" else 0,
              "preload": 120 if kind == "flood-1024" else None, "tx": p["tx"], "rx": p["rx"],
              "loss_percent": p["loss"], "mdev_ns": ns(mdev)},
        cost=cost, repeat=repeat)


def record(rows, errors, path, switch, mode, pmd_mode, runs, repeat, opts):
    for kind, p, mdev, dt, cost in runs:
        log("[ping %s %s #%d] %s, mdev %.3f ms, ping time %.2f s; cost: %s" % (
            path, kind, repeat + 1, vlguest.fmt_ping(p), mdev, dt,
            guest_cost.cost_columns(cost) if cost else "-"))
        rows.append(make_row(path, switch, mode, pmd_mode, kind, p, mdev, dt, cost, repeat,
                             opts))


def failed(errors, path, e):
    msg = "%s: failed: %s" % (path, str(e).strip().splitlines()[0] if str(e) else e)
    log(msg)
    errors.append(msg)


def bench_virtlink(opts, rows, errors):
    with vlguest.GuestTestbed(None) as tb:
        g1 = g2 = None
        for r in range(opts.repeat):
            for mode, cores in VIRTLINK_MODES:
                if mode not in opts.modes:
                    continue
                path = "virtlink-" + mode
                try:
                    if tb.switch is not None:
                        tb.stop_switch()
                    tb.start_switch(ports=["vm1", "vm2"], forward="bridge", pmd_cores=cores,
                                    extra=["--pmd-mode", mode] + opts.switch_args)
                    if g1 is None:
                        g1 = tb.start_guest("g1", "vm1", IP1, mac=MAC1)
                        g2 = tb.start_guest("g2", "vm2", IP2, mac=MAC2)
                        vlguest.wait_all_ready([g1, g2], timeout=180)
                    tb.wait_connected(["vm1", "vm2"], timeout=30)
                    # poll: CPU 1 is the poller's alone (guests on CPU 0); else all CPUs.
                    for g in (g1, g2):
                        vlguest.pin_process(g.pid, {0} if cores else ALL_CPUS)
                    record(rows, errors, path, "virtlink", "bridge", mode,
                           guest_runs(opts, tb, g1, g2), r, opts)
                except (RuntimeError, AssertionError, vltest.TestTimeout) as e:
                    failed(errors, path, e)
                    if g1 is None or not (g1.alive() and g2.alive()):
                        return


# qemu-userspace-intx: QEMU's userspace path with the interrupt delivery the vhost-user
# guests have on this testbed (legacy INTx, vectors=0: docs/reference/TESTBED.md), so the
# two differ only in the back-end.
QEMU_INTX = ["--extra-net-args", "vectors=0"]


def bench_qemu_userspace(opts, rows, errors, path="qemu-userspace", net_extra=()):
    try:
        with LinuxBridge(str(os.getpid() % 100000)) as lb, vlguest.GuestTestbed(None) as tb:
            g1 = tb.start_guest("g1", "unused1", IP1, mac=MAC1,
                                extra=["--tap", lb.taps[0]] + list(net_extra))
            g2 = tb.start_guest("g2", "unused2", IP2, mac=MAC2,
                                extra=["--tap", lb.taps[1]] + list(net_extra))
            vlguest.wait_all_ready([g1, g2], timeout=180)
            for r in range(opts.repeat):
                record(rows, errors, path, "qemu-userspace", "linux-bridge", None,
                       guest_runs(opts, tb, g1, g2), r, opts)
    except (RuntimeError, AssertionError, vltest.TestTimeout) as e:
        failed(errors, path, e)


def bench_native(opts, rows, errors):
    path = "native"
    try:
        with NetnsPair(str(os.getpid() % 10000)) as nn:
            nn.exec(0, ["ping", "-c", "3", "-i", "0.2", nn.addr[1]], timeout=30)
            for r in range(opts.repeat):
                runs = []
                for kind, args, count in ping_cmds(opts):
                    argv = ["ping"] + args.split() + [nn.addr[1]]
                    res = nn.exec(0, argv, timeout=60 + count * 0.05)
                    runs.append((kind,) + parse_run(" ".join(argv), res.returncode,
                                                    res.stdout + res.stderr) + (None,))
                record(rows, errors, path, "none", "veth", None, runs, r, opts)
    except (RuntimeError, AssertionError, OSError, subprocess.TimeoutExpired) as e:
        failed(errors, path, e)


def summarize(rows):
    """One line per (path, run kind) over the repeats: min of the mins, median of the
    averages, max of the maxima, median mdev and time, loss over every ping sent, and the
    median cost (drops summed)."""
    groups = {}
    for r in rows:
        groups.setdefault((r["path"], r["ping"]["kind"]), []).append(r)
    out = []
    for (path, kind), rs in groups.items():
        med = guest_cost.median
        tx = sum(r["ping"]["tx"] for r in rs)
        rx = sum(r["ping"]["rx"] for r in rs)
        costs = [r["cost"] for r in rs if r.get("cost")]
        out.append({"path": path, "kind": kind, "repeats": len(rs),
                    "min": min(r["rtt_ns"]["min"] for r in rs),
                    "avg": med([r["rtt_ns"]["avg"] for r in rs]),
                    "max": max(r["rtt_ns"]["max"] for r in rs),
                    "mdev": med([r["ping"]["mdev_ns"] for r in rs]),
                    "time": med([r["duration_s"] for r in rs]),
                    "tx": tx, "rx": rx, "loss": round(100.0 * (tx - rx) / tx, 2) if tx else 0,
                    "cost": guest_cost.median_cost(costs) if costs else None})
    return out


def table(rows):
    summary = summarize(rows)
    lines = ["%-20s %-11s %3s %9s %9s %9s %9s %6s %7s %8s %8s %8s %s" % (
        "path", "run", "n", "min us", "avg us", "max us", "mdev us", "loss", "time s",
        "/native", "/qemu-us", "/q-intx", guest_cost.COST_HEADER)]
    for s in summary:
        ref = lambda path: next((x["avg"] for x in summary if x["path"] == path  # noqa: E731
                                 and x["kind"] == s["kind"]), None)
        nat, qus, qix = ref("native"), ref("qemu-userspace"), ref("qemu-userspace-intx")
        lines.append("%-20s %-11s %3d %9.1f %9.1f %9.1f %9.1f %5g%% %7.2f %8s %8s %8s %s" % (
            s["path"], s["kind"], s["repeats"], s["min"] / 1e3, s["avg"] / 1e3, s["max"] / 1e3,
            s["mdev"] / 1e3, s["loss"], s["time"],
            "%.2fx" % (s["avg"] / nat) if nat else "-",
            "%.2fx" % (s["avg"] / qus) if qus else "-",
            "%.2fx" % (s["avg"] / qix) if qix else "-",
            guest_cost.cost_columns(s["cost"]) if s["cost"] else ""))
    return lines


def qemu_version():
    try:
        return subprocess.run([vlguest.QEMU, "--version"], stdout=subprocess.PIPE,
                              text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        return None


def main(argv):
    ap = argparse.ArgumentParser(prog="virtlink bench ping", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--virtlink", required=True, help=argparse.SUPPRESS)
    ap.add_argument("--json", help="write the bench JSON (INTERFACES.md) here")
    ap.add_argument("--quick", action="store_true",
                    help="200 interval pings, 1000 flood pings per run (default 1000, 10000)")
    ap.add_argument("--count", type=int, help="interval pings per path (1000; --quick 200)")
    ap.add_argument("--flood", type=int, help="pings per flood run (10000; --quick 1000)")
    ap.add_argument("--interval", type=float, default=0.01, help="ping -i seconds (0.01)")
    ap.add_argument("--runs", default="interval,flood,flood-1024",
                    help="interval (-i), flood (-f, 56 B), flood-1024 (-s 1024 -l 120 -f)")
    ap.add_argument("--paths", default="virtlink,qemu-userspace,native",
                    help="virtlink (its PMD modes), qemu-userspace, native; also "
                    "qemu-userspace-intx (QEMU's path with the vhost-user guests' INTx "
                    "interrupts, vectors=0)")
    ap.add_argument("--modes", default="poll,interrupt,adaptive",
                    help="virtlink PMD modes, each a path (poll,interrupt,adaptive)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of every path and kind; the table gives medians (1)")
    ap.add_argument("--switch-args", default="",
                    help="more `virtlink switch` options for the virtlink paths, one string")
    opts = ap.parse_args(argv)
    if opts.repeat < 1:
        ap.error("--repeat: at least 1")
    opts.modes = [m.strip() for m in opts.modes.split(",")]
    opts.switch_args = shlex.split(opts.switch_args)
    unknown = set(opts.modes) - {m for m, _ in VIRTLINK_MODES}
    if unknown:
        ap.error("--modes: unknown %s (poll, interrupt, adaptive)" % ", ".join(sorted(unknown)))
    vltest.VIRTLINK = os.path.abspath(opts.virtlink)
    if opts.count is None:
        opts.count = 200 if opts.quick else 1000
    if opts.flood is None:
        opts.flood = 1000 if opts.quick else 10000
    opts.runs = [r.strip() for r in opts.runs.split(",")]
    ping_cmds(opts)  # unknown run names fail before anything starts
    paths = [p.strip() for p in opts.paths.split(",")]
    if set(paths) - {"native"}:
        report.require_guest_image("ping", vlguest.IMAGE_DIR)
    command = report.bench_command("ping", argv)
    version, anchors = report.versions(vltest.VIRTLINK)
    anchors["qemu"] = qemu_version()
    load0 = report.load_average()
    t0 = time.time()
    rows, errors = [], []
    if "virtlink" in paths:
        bench_virtlink(opts, rows, errors)
    if "qemu-userspace" in paths:
        bench_qemu_userspace(opts, rows, errors)
    if "qemu-userspace-intx" in paths:
        bench_qemu_userspace(opts, rows, errors, "qemu-userspace-intx", QEMU_INTX)
    if "native" in paths:
        bench_native(opts, rows, errors)
    load1 = report.load_average()
    note = ("iputils ping in guest g1 to g2 (native: namespace a to b), after 5 warm-up "
            "pings, static neighbour entries. interval: `ping -q -c %d -i %g`; flood: "
            "`ping -q -f -c %d` (56 B); flood-1024: `ping -q -s 1024 -l 120 -f -c %d`. "
            "n: runs (--repeat); min and max over them, avg, mdev and time (ping's total) "
            "their medians, loss over every ping sent; /native, /qemu-us, /q-intx: the median "
            "avg RTT over the native path's, QEMU's userspace path's and that path's with INTx "
            "interrupts (qemu-userspace-intx, as the vhost-user guests here). Cost (medians; bench/"
            "guest_cost.py): sw cpu s, the switch process's CPU time in the run; vm cpu s, "
            "both QEMUs'; kicks/MB and irqs/MB, the notifications the guests' drivers sent "
            "and the virtio interrupts they took, per MB the guests sent; notif/frm, both per "
            "frame sent; drops, the switch's by reason and replies the guests could not "
            "send (ICMP OutErrors), summed over the runs. Guests run under TCG (no KVM), so "
            "emulation dominates every RTT."
            % (opts.count, opts.interval, opts.flood, opts.flood))
    report.print_guest_report("ping", version, anchors["qemu"], command, CORE_PLAN, load0, load1,
                              table(rows), note, errors, t0, opts.json, rows, anchors,
                              method={"count": opts.count, "interval_s": opts.interval,
                                  "flood": opts.flood, "runs": opts.runs, "repeat": opts.repeat,
                                  "modes": opts.modes, "switch_args": opts.switch_args,
                                  "note": note},
                              summary=summarize(rows))
    if opts.json:
        print("wrote " + opts.json)
    return 1 if (errors and not rows) else 0
