"""`virtlink bench soak`: the switch under steady traffic and port churn for N minutes
(default 10, --quick 1), sampling its resident memory, open fds and memory mappings over
time. The question it answers: are they flat (nothing leaks per connection, per message,
per frame)?

Set-up (2 CPUs):
  switch    `virtlink switch --forward bridge --pmd-cores 1 --pmd-mode adaptive`, ports a, b
            (steady pair) and c, d, e (churn), the release binary `virtlink bench` runs
  traffic   `virtlink gen` on a and b (vhost-user client ports): one 64-byte stream each
            way at --rate frames/s (default 100000), for the whole run, pinned to CPU 0
  churn     front-ends built on tests/hostile's vhost-user peer (Python, memfd guest
            memory): every cycle, on c, d and e in turn: connect, negotiate, post receive
            buffers, exchange frames with the other churn ports, then one of: a clean
            close; a close without GET_VRING_BASE (abrupt); a memory-table swap then close;
            five quick connect/close cycles (reconnect storm); a RESET_OWNER then close.
Sampling: every --interval seconds (default 5; --quick 2) /proc/PID/status VmRSS,
/proc/PID/fd, /proc/PID/maps (all lines, and those of front-end memfds) and `ctl stats`.
After every churn cycle, once the churn ports are disconnected again, a "quiescent" sample:
with only the generator connected, fds and mappings must equal the baseline taken after
the warm-up, whatever happened before.

Verdict ("flat"): quiescent fds and mappings equal to the baseline in every cycle after
the warm-up, and RSS growth after the warm-up (least-squares slope over the quiescent
samples, extrapolated to one hour) under --rss-tolerance-mib (default 4) per hour.

Outputs: a table, the bench JSON (--json; one row with `duration_s` and the samples, the
churn cycle count, the verdict) and a PNG plot (RSS, fds, mappings over time) next to it
(or bench/results/soak-<date>.png).
"""

import argparse
import os
import random
import struct
import subprocess
import sys
import threading
import time

import _pylib  # noqa: F401  (puts pylib/ on sys.path)
import report
from vltestlib import vhost_peer as hp
from vltestlib import vltest

CORE_PLAN = ("2 CPUs. The switch's PMD thread is pinned to CPU 1 in adaptive mode (polls "
             "while busy, sleeps after 200 us idle); `virtlink gen` (one thread, paced, "
             "busy-waits between frames) on CPU 0; the churn front-ends (Python) and the "
             "switch's control thread unpinned. The whole bench runs under nice when "
             "started so.")
CHURN_PORTS = ("c", "d", "e")
MACS = {p: bytes([2, 0, 0, 0, 0x50, i]) for i, p in enumerate(CHURN_PORTS)}


def log(msg):
    sys.stderr.write(time.strftime("%H:%M:%S ") + msg + "\n")
    sys.stderr.flush()


def proc_sample(pid):
    """RSS (KiB), open fds, mappings, memfd mappings and their bytes of process `pid`."""
    rss = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    fds = len(os.listdir("/proc/%d/fd" % pid))
    maps = memfd = memfd_bytes = 0
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            maps += 1
            if "memfd:" in line:
                lo, hi = line.split()[0].split("-")
                memfd += 1
                memfd_bytes += int(hi, 16) - int(lo, 16)
    return {"rss_kib": rss, "fds": fds, "maps": maps, "memfd_maps": memfd,
            "memfd_bytes": memfd_bytes}


def stable_sample(pid, tries=40):
    """A sample once fds and maps stop moving (a `ctl` connection may still be closing)."""
    last = None
    for _ in range(tries):
        s = proc_sample(pid)
        if last and (s["fds"], s["maps"]) == (last["fds"], last["maps"]):
            return s
        last = s
        time.sleep(0.05)
    return last


def slope_per_hour(points):
    """Least-squares slope of [(t_s, v)] in units per hour (0 for fewer than 3 points)."""
    if len(points) < 3:
        return 0.0
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    if den == 0:
        return 0.0
    return sum((t - mt) * (v - mv) for t, v in points) / den * 3600.0


class Churn:
    """Connects, uses and drops front-ends on the churn ports, cycle after cycle."""

    KINDS = ("clean", "abrupt", "mem_swap", "storm", "reset_owner")

    def __init__(self, tb, pid, stop, on_quiescent):
        self.tb = tb
        self.pid = pid
        self.stop = stop
        self.on_quiescent = on_quiescent
        self.cycles = 0
        self.connects = 0
        self.frames_ok = 0
        self.errors = []
        self.rnd = random.Random(8)

    def wait_churn_ports_down(self, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = self.tb.ports_info()
            if all(info[p]["state"] != "connected" for p in CHURN_PORTS):
                return True
            time.sleep(0.05)
        return False

    def cycle(self):
        kind = self.KINDS[self.cycles % len(self.KINDS)]
        guests = {}
        extra_mem = None
        try:
            for p in CHURN_PORTS:
                guests[p] = hp.Guest(self.tb.sock(p)).negotiate()
                guests[p].rx.post()
                self.connects += 1
            for p, g in guests.items():  # learning: one frame to itself
                g.tx.send_frame(hp.frame(MACS[p], MACS[p], b"learn"))
            for src, dst in (("c", "d"), ("d", "e"), ("e", "c")):
                for i in range(4):
                    guests[src].tx.send_frame(hp.frame(MACS[dst], MACS[src], b"SOAK" + bytes([i])))
            deadline = time.monotonic() + 3
            got = 0
            while got < 12 and time.monotonic() < deadline:
                for g in guests.values():
                    got += sum(1 for f in g.rx.take() if f[14:18] == b"SOAK")
                time.sleep(0.005)
            self.frames_ok += got
            if got < 12:
                self.errors.append("cycle %d: %d of 12 churn frames delivered" % (self.cycles, got))
            g = guests["c"]
            if kind == "mem_swap":
                # A second table (other gpa/uva) replaces the first: the switch must unmap
                # the first now and the second when the connection ends.
                extra_mem = hp.Memory.simple(gpa=0x80000000, uva=0x7f1400000000)
                g.set_mem_table(extra_mem.regions)
            elif kind == "reset_owner":
                g.request(hp.RESET_OWNER)
            elif kind == "clean":
                for gg in guests.values():
                    for i in (hp.RX, hp.TX):
                        gg.request(hp.GET_VRING_BASE, struct.pack("<II", i, 0), reply=True)
        finally:
            for gg in guests.values():
                gg.close()
                if gg.mem is not None:
                    gg.mem.close()
            if extra_mem is not None:
                extra_mem.close()
        if kind == "storm":
            for _ in range(5):
                for p in CHURN_PORTS:
                    s = hp.Guest(self.tb.sock(p))
                    s.close()
                    self.connects += 1
        self.cycles += 1
        if not self.wait_churn_ports_down():
            self.errors.append("cycle %d: churn ports still connected 10 s after closing" % self.cycles)
            return
        self.on_quiescent(self.cycles, kind)

    def run(self):
        while not self.stop.is_set():
            try:
                self.cycle()
            except Exception as e:  # recorded; the soak goes on
                self.errors.append("cycle %d: %s: %s" % (self.cycles, type(e).__name__, e))
                time.sleep(0.5)
            self.stop.wait(0.5)


def plot(samples, quiescent, path, title):
    if not report.have_gnuplot():
        return False
    data = "\n".join("%.1f %.2f %d %d %d" % (s["t_s"] / 60.0, s["rss_kib"] / 1024.0, s["fds"],
                                             s["maps"], s["memfd_maps"]) for s in samples)
    qdata = "\n".join("%.1f %.2f %d %d %d" % (s["t_s"] / 60.0, s["rss_kib"] / 1024.0, s["fds"],
                                              s["maps"], s["memfd_maps"]) for s in quiescent)
    script = """
set terminal pngcairo size 1000,900 font ",10"
set output "%s"
set multiplot layout 3,1 title "%s"
set grid
set xlabel "minutes"
set key top left
set ylabel "RSS (MiB)"
plot "{all_dat}" using 1:2 with lines title "RSS (every sample)", \\
     "{q_dat}" using 1:2 with points pt 7 ps 0.6 title "RSS (quiescent: churn ports down)"
set ylabel "open fds"
plot "{all_dat}" using 1:3 with lines title "fds (every sample)", \\
     "{q_dat}" using 1:3 with points pt 7 ps 0.6 title "fds (quiescent)"
set ylabel "mappings"
plot "{all_dat}" using 1:4 with lines title "all mappings", \\
     "{all_dat}" using 1:5 with lines title "front-end memfd mappings", \\
     "{q_dat}" using 1:4 with points pt 7 ps 0.6 title "all mappings (quiescent)"
unset multiplot
""" % (path, title)
    report._gnuplot(script, {"all.dat": data + "\n", "q.dat": (qdata or "0 0 0 0 0") + "\n"})
    return True


def main(argv):
    ap = argparse.ArgumentParser(prog="virtlink bench soak", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--virtlink", required=True, help=argparse.SUPPRESS)
    ap.add_argument("--json", help="write the bench JSON (INTERFACES.md) here")
    ap.add_argument("--quick", action="store_true", help="1 minute, samples every 2 s")
    ap.add_argument("--minutes", type=float, help="soak duration (10; --quick 1)")
    ap.add_argument("--interval", type=float, help="seconds between samples (5; --quick 2)")
    ap.add_argument("--rate", type=int, default=100000, help="frames/s per direction (100000)")
    ap.add_argument("--warmup", type=float, help="seconds before the baseline (30; --quick 10)")
    ap.add_argument("--rss-tolerance-mib", type=float, default=4.0,
                    help="RSS growth per hour still called flat (4 MiB)")
    ap.add_argument("--plot", help="PNG path (default: next to --json, or bench/results/)")
    opts = ap.parse_args(argv)
    vltest.VIRTLINK = os.path.abspath(opts.virtlink)
    minutes = opts.minutes or (1.0 if opts.quick else 10.0)
    interval = opts.interval or (2.0 if opts.quick else 5.0)
    warmup = opts.warmup if opts.warmup is not None else (10.0 if opts.quick else 30.0)
    command = report.bench_command("soak", argv)
    version, anchors = report.versions(vltest.VIRTLINK)
    load0 = report.load_average()
    duration = minutes * 60.0
    samples, quiescent, errors = [], [], []
    t0 = time.monotonic()
    lock = threading.Lock()
    with vltest.Testbed(None) as tb:
        tb.start_switch(ports=["a", "b"] + list(CHURN_PORTS), forward="bridge", pmd_cores="1",
                        extra=["--pmd-mode", "adaptive"])
        pid = tb.switch.pid
        gen_json = os.path.join(tb.dir, "gen.json")
        gen_argv = [vltest.VIRTLINK, "gen", "--port", "g0=vhost-user-client:" + tb.sock("a"),
                    "--port", "g1=vhost-user-client:" + tb.sock("b"), "--rate", str(opts.rate),
                    "--size", "64", "--duration", "%.0f" % (duration + warmup + 5), "--cpu", "0",
                    "--queue-size", "1024", "--json", gen_json]
        gen = vltest.Proc("gen", gen_argv, tb.dir)
        tb.procs.append(gen)
        tb.wait_connected(["a", "b"], timeout=30)
        tb.wait_counter("b", "tx_packets", 1000, timeout=30)
        stop = threading.Event()
        base = {}

        def sample(kind=None, cycle=None):
            s = proc_sample(pid) if kind is None else stable_sample(pid)
            s["t_s"] = round(time.monotonic() - t0, 2)
            st = tb.switch_stats()
            s["steady_tx_packets"] = st["a"]["tx_packets"] + st["b"]["tx_packets"]
            s["churn_connects"] = sum(p.get("connects", 0) for n, p in tb.ports_info().items()
                                      if n in CHURN_PORTS)
            if kind is not None:
                s["cycle"], s["kind"] = cycle, kind
            return s

        def on_quiescent(cycle, kind):
            s = sample(kind, cycle)
            with lock:
                if base:
                    s["fds_delta"] = s["fds"] - base["fds"]
                    s["maps_delta"] = s["maps"] - base["maps"]
                    s["memfd_maps_delta"] = s["memfd_maps"] - base["memfd_maps"]
                quiescent.append(s)

        churn = Churn(tb, pid, stop, on_quiescent)
        th = threading.Thread(target=churn.run, daemon=True)
        th.start()
        log("soak: %.1f min, warm-up %.0f s, samples every %.0f s" % (minutes, warmup, interval))
        try:
            next_t = time.monotonic()
            while True:
                now = time.monotonic()
                if now - t0 >= warmup + duration:
                    break
                if not tb.switch.alive():
                    errors.append("the switch exited during the soak")
                    break
                if not base and now - t0 >= warmup and quiescent:
                    with lock:
                        base.update(quiescent[-1])
                        log("baseline after warm-up: fds %d, maps %d, memfd maps %d, RSS %d KiB" %
                            (base["fds"], base["maps"], base["memfd_maps"], base["rss_kib"]))
                samples.append(sample())
                s = samples[-1]
                if len(samples) % max(1, int(60 / interval)) == 0:
                    log("t=%4.0f s RSS %d KiB fds %d maps %d memfd %d cycles %d" %
                        (s["t_s"], s["rss_kib"], s["fds"], s["maps"], s["memfd_maps"], churn.cycles))
                next_t += interval
                time.sleep(max(0.0, next_t - time.monotonic()))
        finally:
            stop.set()
            th.join(30)
        try:
            gen.p.wait(timeout=warmup + 20)
        except subprocess.TimeoutExpired:
            pass
        gen.stop()
        gen_doc = None
        try:
            import json
            with open(gen_json) as f:
                gen_doc = json.load(f)
        except (OSError, ValueError) as e:
            errors.append("gen wrote no results: %s" % e)
        final = tb.switch_stats()
    load1 = report.load_average()
    errors += churn.errors

    after = [q for q in quiescent if base and q["t_s"] >= base["t_s"]]
    fd_dev = sorted({q["fds_delta"] for q in after if "fds_delta" in q})
    map_dev = sorted({q["maps_delta"] for q in after if "maps_delta" in q})
    memfd_dev = sorted({q["memfd_maps_delta"] for q in after if "memfd_maps_delta" in q})
    rss_slope = slope_per_hour([(q["t_s"], q["rss_kib"] / 1024.0) for q in after])
    rss_after = [q["rss_kib"] for q in after] or [0]
    flat = {"fds": fd_dev in ([0], []) and bool(after),
            "maps": map_dev in ([0], []) and memfd_dev in ([0], []) and bool(after),
            "rss": abs(rss_slope) <= opts.rss_tolerance_mib and bool(after)}
    streams = (gen_doc or {}).get("streams", [])
    lost = sum(s.get("lost", 0) for s in streams)
    sent = sum(s.get("tx", 0) for s in streams)
    row = report.row(experiment="soak", topology="p2p", switch="virtlink", mode="bridge",
                     policy="rx-batch", pmd_mode="adaptive", flows=1, frame_size=64,
                     streams=2, duration_s=round(duration, 1))
    row.update({
        "flat": flat, "rss_slope_mib_per_hour": round(rss_slope, 3),
        "rss_kib": {"baseline": base.get("rss_kib"), "min_after_warmup": min(rss_after),
                    "max_after_warmup": max(rss_after)},
        "fds_baseline": base.get("fds"), "maps_baseline": base.get("maps"),
        "quiescent_fd_deltas": fd_dev, "quiescent_map_deltas": map_dev,
        "quiescent_memfd_map_deltas": memfd_dev,
        "churn_cycles": churn.cycles, "churn_connects": churn.connects,
        "churn_frames_delivered": churn.frames_ok,
        "steady_frames_sent": sent, "steady_frames_lost": lost,
        "switch_drops": {n: {k: v for k, v in p["drops"].items() if v} for n, p in final.items()},
        "samples": samples, "quiescent_samples": quiescent,
    })
    verdict = "FLAT" if all(flat.values()) else "NOT FLAT"
    print("virtlink bench soak   (%s, %s)" % (time.strftime("%Y-%m-%d %H:%M"), version))
    print("command: " + command)
    print("core plan: " + CORE_PLAN)
    print("load average at start %s, at end %s (2 CPUs shared with other work)" % (load0, load1))
    print("duration %.1f min after a %.0f s warm-up; %d samples, %d churn cycles (%d connections)"
          % (minutes, warmup, len(samples), churn.cycles, churn.connects))
    print("%-22s %12s %12s %12s" % ("", "baseline", "min", "max"))
    print("%-22s %12s %12d %12d" % ("RSS KiB (quiescent)", base.get("rss_kib"), min(rss_after), max(rss_after)))
    allfd = [s["fds"] for s in samples] or [0]
    allmap = [s["maps"] for s in samples] or [0]
    print("%-22s %12s %12d %12d" % ("fds (every sample)", base.get("fds"), min(allfd), max(allfd)))
    print("%-22s %12s %12d %12d" % ("maps (every sample)", base.get("maps"), min(allmap), max(allmap)))
    print("quiescent deltas from the baseline: fds %s, maps %s, memfd maps %s" % (fd_dev, map_dev, memfd_dev))
    print("RSS slope after warm-up: %+.3f MiB/hour (tolerance %.1f)" % (rss_slope, opts.rss_tolerance_mib))
    print("steady pair: %d frames sent, %d lost; churn frames delivered %d" % (sent, lost, churn.frames_ok))
    print("verdict: %s (%s)" % (verdict, ", ".join("%s %s" % (k, "flat" if v else "NOT flat")
                                                   for k, v in flat.items())))
    for e in errors[:20]:
        print("error: " + e)
    png = opts.plot
    if not png:
        if opts.json:
            png = os.path.splitext(opts.json)[0] + ".png"
        else:
            png = os.path.join(report.RESULTS_DIR, "soak-%s.png" % time.strftime("%Y-%m-%d"))
    if plot(samples, quiescent, os.path.abspath(png),
            "virtlink soak: %.0f min, %d churn cycles, %s" % (minutes, churn.cycles, verdict)):
        print("wrote " + png)
    if opts.json:
        report.write_json(opts.json, command, version, CORE_PLAN, [row], anchors=anchors,
                          errors=errors, load_average={"start": load0, "end": load1},
                          method={"warmup_s": warmup, "interval_s": interval,
                                  "rate_pps_per_direction": opts.rate,
                                  "rss_tolerance_mib_per_hour": opts.rss_tolerance_mib,
                                  "note": __doc__.split("Verdict")[1].strip()})
        print("wrote " + opts.json)
    return 0 if all(flat.values()) and not errors else 1
