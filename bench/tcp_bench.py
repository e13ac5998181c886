"""`virtlink bench tcp`: iperf3 TCP throughput between two Linux guests, offloads on and off.

Paths (iperf3 -c in g1 -> iperf3 -s in g2, `-P 1` and `-P 10`, `-t SECONDS`):
  virtlink-MODE    guest1 -> virtlink (bridge, --pmd-mode MODE; poll: PMD on CPU 1, adaptive
                   and interrupt: unpinned) -> guest2 (--modes, default all three).
                   offloads on: the switch offers CSUM, GUEST_CSUM, TSO4/6, ECN and the
                   guests take them (TSO frames cross the switch whole, up to 64 KiB);
                   off: the switch refuses them (`--offloads off`), so the guests checksum
                   and segment in their own kernels.
  qemu-userspace   guest1 -> QEMU tap back-end (vhost=off) -> tap -> Linux bridge -> tap ->
                   QEMU -> guest2. on: QEMU's defaults (TSO through the tap's vnet header);
                   off: `-device virtio-net-pci,csum=off,guest_csum=off,gso=off,
                   host_tso4=off,...,guest_tso4=off,...`.
  native           two network namespaces on a veth pair, no guests. off: `ethtool -K`
                   tx, sg, tso, gso, gro off on both ends.

Each (path, offloads) boots its own guests (features are negotiated at boot). Throughput is
the receiver's: iperf3's sum_received bits_per_second. Guests run under TCG, so their CPU
(emulated) is the bottleneck of every guest path; the native path shows the host kernel.
"""

import argparse
import contextlib
import os
import shlex
import subprocess
import time

import _pylib  # noqa: F401  (puts pylib/ on sys.path)
import guest_cost
import ping_bench
import report
from ping_bench import MAC1, MAC2, IP1, IP2, LinuxBridge, NetnsPair, log
from vltestlib import vlguest, vltest

QEMU_OFFLOADS_OFF = ("csum=off,guest_csum=off,gso=off,host_tso4=off,host_tso6=off,"
                     "host_ecn=off,host_ufo=off,guest_tso4=off,guest_tso6=off,guest_ecn=off,"
                     "guest_ufo=off")
CORE_PLAN = ("2 CPUs. virtlink-poll: the switch's PMD thread busy-polls pinned to CPU 1 and "
             "has it to itself: the two QEMU guests (TCG, 1 vCPU each) are pinned to CPU 0. "
             "virtlink-adaptive/-interrupt: the PMD thread and the guests unpinned, the PMD "
             "thread asleep when idle, so the guests get both CPUs. qemu-userspace: each QEMU's tap back-end in its own main loop, the Linux "
             "bridge in the host kernel, unpinned. native: iperf3 client and server in two "
             "network namespaces, unpinned.")


def guest_iperf(g1, g2, streams, seconds):
    """iperf3 in g1 to g2; returns (received Mbit/s, sent bytes, received bytes, retransmits)."""
    cmd = ("timeout %d iperf3 -c %s -t %d -P %d -J >/tmp/iperf.json; s=$?; "
           "sed -n '/\"sum_sent\"/,/\"retransmits\"/p;/\"sum_received\"/,/\"bits_per_second\"/p'"
           " /tmp/iperf.json | grep -E '\"(bytes|bits_per_second|retransmits)\"'; [ $s = 0 ]"
           % (seconds + 60, g2.addr, seconds, streams))
    out = g1.run(cmd, timeout=seconds + 90)
    vals = [l.split(":")[0].strip().strip('"') + "=" + l.split(":")[1].strip().rstrip(",")
            for l in out.splitlines() if ":" in l]
    # sum_sent: bytes, bits_per_second, retransmits; sum_received: bytes, bits_per_second
    if len(vals) != 5:
        raise RuntimeError("unexpected iperf3 summary:\n" + out)
    v = [float(x.split("=")[1]) for x in vals]
    return v[4] / 1e6, int(v[0]), int(v[3]), int(v[2])


def make_row(path, switch, mode, offloads, streams, seconds, mbps, sent, received, retr,
             pmd_mode=None, cost=None, repeat=0):
    return report.row(
        experiment="tcp", topology="netns" if path == "native" else "guest", switch=switch,
        mode=mode, pmd_mode=pmd_mode, path=path, offloads=offloads, streams=streams,
        trial_s=seconds, throughput_mbps=round(mbps, 1),
        iperf3={"sent_bytes": sent, "received_bytes": received, "retransmits": retr},
        cost=cost, repeat=repeat)


def run_guest_pair(opts, rows, errors, path, offloads, switch_extra=None, net_extra=(),
                   pmd_mode=None):
    """Boots a pair (on virtlink ports when `switch_extra` is a list of switch options,
    else on taps of a Linux bridge) and measures every stream count."""
    try:
        with contextlib.ExitStack() as stack:
            if switch_extra is None:
                lb = stack.enter_context(LinuxBridge(str(os.getpid() % 100000)))
                e1, e2 = ["--tap", lb.taps[0]], ["--tap", lb.taps[1]]
            else:
                e1, e2 = [], []
            tb = stack.enter_context(vlguest.GuestTestbed(None))
            if switch_extra is not None:
                tb.start_switch(ports=["vm1", "vm2"], forward="bridge",
                                pmd_cores="1" if pmd_mode == "poll" else "",
                                extra=switch_extra)
            g1 = tb.start_guest("g1", "vm1", IP1, mac=MAC1, extra=e1 + list(net_extra))
            g2 = tb.start_guest("g2", "vm2", IP2, mac=MAC2,
                                extra=e2 + list(net_extra) + ["--iperf"])
            vlguest.wait_all_ready([g1, g2], timeout=180)
            if tb.switch is not None:
                tb.wait_connected(["vm1", "vm2"], timeout=30)
            if pmd_mode == "poll":  # CPU 1 is the poller's alone
                for g in (g1, g2):
                    vlguest.pin_process(g.pid, {0})
            g1.run("ip neigh replace %s lladdr %s dev eth0 nud permanent" % (g2.addr, MAC2))
            g2.run("ip neigh replace %s lladdr %s dev eth0 nud permanent" % (g1.addr, MAC1))
            g1.run("ping -c 3 -i 0.2 -W 2 %s" % g2.addr, timeout=30)
            sw = "virtlink" if tb.switch is not None else "qemu-userspace"
            for r in range(opts.repeat):
                for streams in opts.streams:
                    before = guest_cost.sample(tb, [g1, g2])
                    mbps, sent, received, retr = guest_iperf(g1, g2, streams, opts.seconds)
                    c = guest_cost.cost(before, guest_cost.sample(tb, [g1, g2]))
                    log("[tcp %s offloads %s -P %d #%d] %.1f Mbit/s (sent %d B, received %d B, "
                        "%d retransmits); cost: %s" % (path, offloads, streams, r + 1, mbps, sent,
                                                       received, retr, guest_cost.cost_columns(c)))
                    rows.append(make_row(path, sw, "bridge" if sw == "virtlink" else
                                         "linux-bridge", offloads, streams, opts.seconds, mbps,
                                         sent, received, retr, pmd_mode=pmd_mode, cost=c,
                                         repeat=r))
            if tb.switch is not None:
                st = tb.switch_stats()
                log("[tcp %s offloads %s] switch: features vm1 %s; offload vm1 %s vm2 %s; "
                    "drops vm1 %s vm2 %s" % (
                        path, offloads, st["vm1"]["feature_names"], st["vm1"]["offload"],
                        st["vm2"]["offload"],
                        {k: v for k, v in st["vm1"]["drops"].items() if v},
                        {k: v for k, v in st["vm2"]["drops"].items() if v}))
    except (RuntimeError, AssertionError, vltest.TestTimeout) as e:
        msg = "%s offloads %s: failed: %s" % (path, offloads,
                                               str(e).strip().splitlines()[0] if str(e) else e)
        log(msg)
        errors.append(msg)


def guest_net_args(opts, args=()):
    """run-guest.sh options for the guests' virtio-net-pci devices: `args` and, with
    --rx-queue-size, the receive queue's size (the same for every guest path)."""
    args = list(args) + (["rx_queue_size=%d" % opts.rx_queue_size] if opts.rx_queue_size else [])
    return ["--extra-net-args", ",".join(args)] if args else []


def bench_virtlink(opts, rows, errors):
    for mode in opts.modes:
        for offloads in opts.offloads:
            run_guest_pair(opts, rows, errors, "virtlink-" + mode, offloads, pmd_mode=mode,
                           switch_extra=["--pmd-mode", mode, "--offloads", offloads] + opts.switch_args,
                           net_extra=guest_net_args(opts))


def bench_qemu_userspace(opts, rows, errors, path="qemu-userspace", intx=False):
    for offloads in opts.offloads:
        args = ([] if offloads == "on" else [QEMU_OFFLOADS_OFF]) + (["vectors=0"] if intx else [])
        run_guest_pair(opts, rows, errors, path, offloads, net_extra=guest_net_args(opts, args))


def bench_native(opts, rows, errors):
    import json
    path = "native"
    try:
        with NetnsPair(str(os.getpid() % 10000)) as nn:
            for offloads in opts.offloads:
                for i in (0, 1):
                    feats = "on" if offloads == "on" else "off"
                    res = nn.exec(i, ["ethtool", "-K", nn.dev[i], "tx", feats, "sg", feats, "tso",
                                      feats, "gso", feats, "gro", feats])
                    if res.returncode != 0:
                        raise RuntimeError("ethtool -K: " + res.stderr.strip())
                for rep, streams in [(k, n) for k in range(opts.repeat) for n in opts.streams]:
                    srv = subprocess.Popen(["ip", "netns", "exec", nn.ns[1], "iperf3", "-s", "-1"],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    try:
                        time.sleep(0.5)
                        res = nn.exec(0, ["iperf3", "-c", nn.addr[1], "-t", str(opts.seconds),
                                          "-P", str(streams), "-J"], timeout=opts.seconds + 60)
                        if res.returncode != 0:
                            raise RuntimeError("iperf3: " + (res.stdout + res.stderr)[-300:])
                        end = json.loads(res.stdout)["end"]
                        mbps = end["sum_received"]["bits_per_second"] / 1e6
                        sent, received = end["sum_sent"]["bytes"], end["sum_received"]["bytes"]
                        retr = end["sum_sent"].get("retransmits", 0)
                    finally:
                        srv.kill()
                        srv.wait()
                    log("[tcp native offloads %s -P %d] %.1f Mbit/s" % (offloads, streams, mbps))
                    rows.append(make_row(path, "none", "veth", offloads, streams, opts.seconds,
                                         mbps, sent, received, retr, repeat=rep))
    except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as e:
        msg = "native: failed: %s" % (str(e).strip().splitlines()[0] if str(e) else e)
        log(msg)
        errors.append(msg)


def summarize(rows):
    """One entry per (path, offloads, streams): the median Mbit/s over the repeats, their
    spread ((max - min) / median) and the median cost."""
    groups = {}
    for r in rows:
        groups.setdefault((r["path"], r["offloads"], r["streams"]), []).append(r)
    out = []
    for (path, offloads, streams), rs in groups.items():
        v = [r["throughput_mbps"] for r in rs]
        med = guest_cost.median(v)
        costs = [r["cost"] for r in rs if r.get("cost")]
        out.append({"path": path, "offloads": offloads, "streams": streams, "repeats": len(rs),
                    "throughput_mbps": med, "runs_mbps": v,
                    "spread": round((max(v) - min(v)) / med, 3) if med else None,
                    "cost": guest_cost.median_cost(costs) if costs else None})
    return out


def goals(summary, seconds):
    """Issue 21's goals on every virtlink path: offloads on >= 3x off with one stream (the
    guests' CPU next to it: TCG guests bound both sides), and -P 10 without no_rx_buffer
    drops (the switch's, summed over the repeats)."""
    out = ["", "goals (issue 21, virtlink paths):"]

    def find(path, offloads, streams):
        return next((s for s in summary if (s["path"], s["offloads"], s["streams"]) ==
                     (path, offloads, streams)), None)

    def cpu(s):
        c = s.get("cost") or {}
        v = c.get("guest_cpu_s")
        return "-" if v is None else "%.2f s (%.0f%% of 2 guests x %d s)" % (
            v, 100.0 * v / (2 * seconds), seconds)
    for path in sorted({s["path"] for s in summary if s["path"].startswith("virtlink")}):
        on, off = find(path, "on", 1), find(path, "off", 1)
        if on and off and off["throughput_mbps"]:
            q = on["throughput_mbps"] / off["throughput_mbps"]
            out.append("  %s -P 1: offloads on/off %.2fx (goal >= 3x): %s; guests' CPU on %s, "
                       "off %s" % (path, q, "met" if q >= 3 else "NOT met", cpu(on), cpu(off)))
        for offloads in ("on", "off"):
            p10 = find(path, offloads, 10)
            if not p10 or not p10.get("cost") or p10["cost"].get("switch_drops") is None:
                continue
            n = p10["cost"]["switch_drops"].get("no_rx_buffer", 0)
            out.append("  %s -P 10 offloads %s: no_rx_buffer drops %d over %d runs (goal 0): %s"
                       % (path, offloads, n, p10["repeats"], "met" if n == 0 else "NOT met"))
    return out if len(out) > 2 else []


def table(rows, seconds=None):
    summary = summarize(rows)

    def find(path, offloads, streams):
        return next((s for s in summary if (s["path"], s["offloads"], s["streams"]) ==
                     (path, offloads, streams)), None)
    lines = ["%-19s %-8s %7s %3s %9s %7s %7s %8s %8s %8s %s" % (
        "path", "offloads", "streams", "n", "Mbit/s", "spread", "on/off", "/native", "/qemu-us",
        "/q-intx", guest_cost.COST_HEADER)]
    for s in summary:
        other = find(s["path"], "off" if s["offloads"] == "on" else "on", s["streams"])
        nat = find("native", s["offloads"], s["streams"])
        qus = find("qemu-userspace", s["offloads"], s["streams"])
        qix = find("qemu-userspace-intx", s["offloads"], s["streams"])
        ratio = lambda o: "%.2fx" % (s["throughput_mbps"] / o["throughput_mbps"]) if (  # noqa: E731
            o and o["throughput_mbps"]) else "-"
        lines.append("%-19s %-8s %7d %3d %9.1f %7s %7s %8s %8s %8s %s" % (
            s["path"], s["offloads"], s["streams"], s["repeats"], s["throughput_mbps"],
            "%.2f" % s["spread"] if s["spread"] is not None else "-",
            ratio(other) if s["offloads"] == "on" else "", ratio(nat), ratio(qus), ratio(qix),
            guest_cost.cost_columns(s["cost"]) if s["cost"] else ""))
    return lines + (goals(summary, seconds) if seconds else [])


def main(argv):
    ap = argparse.ArgumentParser(prog="virtlink bench tcp", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--virtlink", required=True, help=argparse.SUPPRESS)
    ap.add_argument("--json", help="write the bench JSON (INTERFACES.md) here")
    ap.add_argument("--quick", action="store_true", help="3 s per iperf3 run (default 10 s)")
    ap.add_argument("--seconds", type=int, help="iperf3 -t (10; --quick 3)")
    ap.add_argument("--streams", default="1,10", help="iperf3 -P values (1,10)")
    ap.add_argument("--paths", default="virtlink,qemu-userspace,native",
                    help="virtlink, qemu-userspace and/or native (default all three); also "
                    "qemu-userspace-intx "
                    "(QEMU's path with the vhost-user guests' INTx interrupts, vectors=0)")
    ap.add_argument("--modes", default="poll,interrupt,adaptive",
                    help="virtlink PMD modes, each a path (poll,interrupt,adaptive)")
    ap.add_argument("--offloads", default="on,off", help="on and/or off (on,off)")
    ap.add_argument("--switch-args", default="",
                    help="more `virtlink switch` options for the virtlink paths, one string "
                    "(e.g. \"--tx-retry-us 500\")")
    ap.add_argument("--repeat", type=int, default=1,
                    help="iperf3 runs of every path, offload setting and stream count on the "
                    "same guests; the table gives medians (1)")
    ap.add_argument("--rx-queue-size", type=int, default=1024,
                    help="the guests' virtio-net receive queue size (QEMU rx_queue_size; 1024, "
                    "QEMU's largest: room for -P 10's 64 KiB frames; 0: QEMU's default, 256)")
    opts = ap.parse_args(argv)
    if opts.repeat < 1:
        ap.error("--repeat: at least 1")
    opts.offloads = [o.strip() for o in opts.offloads.split(",")]
    opts.switch_args = shlex.split(opts.switch_args)
    if set(opts.offloads) - {"on", "off"}:
        ap.error("--offloads: on and/or off")
    vltest.VIRTLINK = os.path.abspath(opts.virtlink)
    if opts.seconds is None:
        opts.seconds = 3 if opts.quick else 10
    opts.streams = [int(x) for x in opts.streams.split(",")]
    opts.modes = [m.strip() for m in opts.modes.split(",")]
    paths = [p.strip() for p in opts.paths.split(",")]
    if set(paths) - {"native"}:
        report.require_guest_image("tcp", vlguest.IMAGE_DIR)
    command = report.bench_command("tcp", argv)
    version, anchors = report.versions(vltest.VIRTLINK)
    anchors["qemu"] = ping_bench.qemu_version()
    anchors["iperf3"] = report.package_version("iperf3")
    load0 = report.load_average()
    t0 = time.time()
    rows, errors = [], []
    if "virtlink" in paths:
        bench_virtlink(opts, rows, errors)
    if "qemu-userspace" in paths:
        bench_qemu_userspace(opts, rows, errors)
    if "qemu-userspace-intx" in paths:  # the vhost-user guests' INTx (ping_bench.QEMU_INTX)
        bench_qemu_userspace(opts, rows, errors, "qemu-userspace-intx", intx=True)
    if "native" in paths:
        bench_native(opts, rows, errors)
    load1 = report.load_average()
    note = ("Mbit/s: iperf3 -t %d, the receiver's rate (sum_received), median of n runs "
            "(--repeat) on the same guests; spread: (max - min) / median; on/off: this path "
            "with offloads over without, same stream count; /native, /qemu-us: over the veth "
            "pair between namespaces, over QEMU's userspace path and over that path with INTx "
            "interrupts (qemu-userspace-intx, as the vhost-user guests here), same offload "
            "setting and stream count. Cost (medians; bench/guest_cost.py): sw cpu s, the switch "
            "process's CPU time in the run; vm cpu s, both QEMUs'; kicks/MB and irqs/MB, the "
            "notifications the guests' drivers sent and the virtio interrupts they took, per "
            "MB the guests sent; notif/frm, both per frame the guests sent (a TSO frame "
            "counts once); drops, the switch's by reason, summed over the runs. Guests run "
            "under TCG (no KVM); every guest's virtio-net receive queue has %s entries "
            "(rx_queue_size)." % (opts.seconds, opts.rx_queue_size or "QEMU's default 256"))
    report.print_guest_report("tcp", version, anchors["qemu"], command, CORE_PLAN, load0, load1,
                              table(rows, opts.seconds), note, errors, t0, opts.json, rows,
                              anchors,
                              method={"seconds": opts.seconds, "streams": opts.streams,
                                  "repeat": opts.repeat, "modes": opts.modes,
                                  "offloads": opts.offloads, "switch_args": opts.switch_args,
                                  "rx_queue_size": opts.rx_queue_size or None,
                                  "qemu_offloads_off": QEMU_OFFLOADS_OFF, "note": note},
                              summary=summarize(rows))
    if opts.json:
        print("wrote " + opts.json)
    return 1 if (errors and not rows) else 0
