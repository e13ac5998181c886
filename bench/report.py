"""Results of the benches: bench JSON rows (INTERFACES.md "Bench JSON"), the machine and
version record, text tables, and PNG plots drawn with gnuplot (Debian gnuplot-nox) into
bench/results/.
"""

import json
import os
import time
import platform
import shlex
import shutil
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS_DIR = os.path.join(HERE, "results")

ROW_KEYS = ("experiment", "topology", "switch", "mode", "policy", "pmd_mode", "vnfs", "flows",
            "frame_size", "trial_s", "ndr_mpps", "pdr_mpps", "projected_ndr_mpps",
            "cycles_per_packet", "latency_ns", "path", "offloads", "streams",
            "throughput_mbps", "rtt_ns", "duration_s")
LATENCY_KEYS = ("min", "avg", "max", "p50", "p99", "p999")


def row(**kw):
    """A bench JSON row: every documented key present (None where it does not apply), plus
    any extra keys given."""
    r = {k: None for k in ROW_KEYS}
    r.update(kw)
    return r


def check_row(r):
    missing = [k for k in ROW_KEYS if k not in r]
    if missing:
        raise ValueError("row misses %s" % missing)
    if r["latency_ns"] is not None and set(r["latency_ns"]) != set(LATENCY_KEYS):
        raise ValueError("latency_ns needs exactly %s" % (LATENCY_KEYS,))
    if "repeat" in r and not isinstance(r["repeat"], int):
        raise ValueError("repeat is the run's index, an int: %r" % (r["repeat"],))


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return None


# A bench is "taken under load" when the CPUs were busier than this (fraction of all CPUs)
# in the seconds before it started: its figures then say so and yield no ratio.
LOADED_BUSY = 0.25


def cpu_busy(seconds=2.0):
    """Fraction (0..1) of all CPUs' time spent busy over `seconds`, from /proc/stat; None if
    unreadable. The 1-minute load average would also count a previous bench's own polling."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return sum(v), idle
    try:
        t0, i0 = sample()
        time.sleep(seconds)
        t1, i1 = sample()
    except (OSError, ValueError):
        return None
    return round(1 - (i1 - i0) / (t1 - t0), 3) if t1 > t0 else None


def load_verdict(busy):
    """The verdict line for a bench whose CPUs were `busy` before it started, or None."""
    if busy is None or busy <= LOADED_BUSY:
        return None
    return ("verdict: taken under load (CPUs %.0f%% busy in the 2 s before the start): the "
            "figures are not comparable and yield no ratio" % (100 * busy))


def bench_command(name, argv):
    """The command line a bench records: `virtlink bench NAME ARGS`, without the --virtlink
    option `virtlink bench` passes to its scripts (not the user's)."""
    skip = set()
    for i, a in enumerate(argv):
        if a == "--virtlink":
            skip.update((i, i + 1))
        elif a.startswith("--virtlink="):
            skip.add(i)
    words = ["virtlink", "bench"] + ([name] if name else [])
    return " ".join(words + [shlex.quote(a) for i, a in enumerate(argv) if i not in skip])


def require_guest_image(bench, image_dir):
    """Exits with a message when the guest kernel or initramfs is missing."""
    for f in ("vmlinuz", "initramfs.cpio.gz"):
        if not os.path.exists(os.path.join(image_dir, f)):
            raise SystemExit("%s: no guest image in %s (scripts/guest/build-guest.sh)"
                             % (bench, image_dir))


def print_summary(core_plan, load0, load1, lines, note, errors, plots, t0):
    """The end of a bench's terminal report: core plan, load, table, note, what was not
    measured, plots, and the time taken."""
    print("core plan: " + core_plan)
    print("load average at start %s, at end %s (2 CPUs: above 1 the numbers mean little)" %
          (load0, load1))
    print("\n".join(lines))
    print(note)
    for e in errors:
        print("not measured: " + e)
    for p in plots:
        if p:
            print("plot: " + p)
    print("took %.0f s" % (time.time() - t0))


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
            "hostname": platform.node(), "load_average": load_average()}


def package_version(pkg):
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             timeout=5).stdout
        return out.strip() or None
    except Exception:
        return None


def versions(virtlink):
    v = subprocess.run([virtlink, "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    return v, {"dpdk": package_version("dpdk"),
               "openvswitch-switch-dpdk": package_version("openvswitch-switch-dpdk")}


def source_commit():
    """The commit of the tree this bench runs from ("abc1234", "+changes" appended when
    tracked files differ from it), or None outside a git checkout (an installed package)."""
    top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    try:
        head = subprocess.run(["git", "-C", top, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", top, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


def write_json(path, command, version, core_plan, rows, **extra):
    for r in rows:
        check_row(r)
    doc = {"command": command, "version": version, "commit": source_commit(),
           "machine": machine(), "core_plan": core_plan, "rows": rows}
    doc.update(extra)
    text = json.dumps(doc, indent=2) + "\n"  # whole before the file is opened: never half written
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def fmt_num(v, spec="%.3f", none="-"):
    return none if v is None else spec % v


def fmt_us(ns):
    return "-" if ns is None else "%.1f" % (ns / 1000.0)


def throughput_table(rows, virtlink_modes, loaded=False):
    """NDR/PDR table: one block per frame size, one line per switch configuration, with
    virtlink's NDR ratio to every other configuration (anchor) of the same run. With
    --repeat, NDR and PDR are medians and "spread" is (max - min) / median of the NDRs.
    A lower bound ('+') on either side yields "lb" instead of a ratio, a trial at another core
    placement than near on either side "pl"; `loaded` (the bench was taken under load)
    yields none at all.

    `virtlink_modes`: the virtlink modes to compare (e.g. ["xconnect", "bridge"]).
    """
    lines = []
    sizes = sorted({r["frame_size"] for r in rows})
    short = {"xconnect": "xc", "bridge": "br"}
    ratio_cols = ["vl-%s/this" % short.get(m, m) for m in virtlink_modes]
    hdr = "%-9s %-9s %6s %9s %9s %7s %9s %11s %11s %9s" % (
        "switch", "mode", "bytes", "NDR Mpps", "PDR Mpps", "spread", "lat@Mpps", "avg/p99 us",
        "max us", "cyc/pkt")
    hdr += "".join(" %10s" % c for c in ratio_cols)
    lines.append(hdr)
    for size in sizes:
        block = [r for r in rows if r["frame_size"] == size]
        vl = {r["mode"]: r for r in block if r["switch"] == "virtlink"}
        for r in block:
            lat = r["latency_ns"]
            cyc = (r["cycles_per_packet"] or {}).get("switch")
            ndr = fmt_num(r["ndr_mpps"]) + \
                ("+" if r.get("ndr_gen_limited") or r.get("ndr_at_max") else "")
            pdr = fmt_num(r["pdr_mpps"]) + \
                ("+" if r.get("pdr_gen_limited") or r.get("pdr_at_max") else "")
            sp = r.get("ndr_spread")
            line = "%-9s %-9s %6d %9s %9s %7s %9s %11s %11s %9s" % (
                r["switch"], r["mode"], size, ndr, pdr,
                "%.0f%%" % (100 * sp) if sp is not None else "-",
                fmt_num(r.get("latency_rate_mpps")),
                "%s/%s" % (fmt_us(lat["avg"]), fmt_us(lat["p99"])) if lat else "-",
                fmt_us(lat["max"]) if lat else "-", cyc if cyc is not None else "-")
            for m in virtlink_modes:
                v = vl.get(m)
                if loaded or r["switch"] == "virtlink" or v is None or not r["ndr_mpps"] or \
                        v["ndr_mpps"] is None:
                    line += " %10s" % "-"
                elif lower_bound(r) or lower_bound(v):
                    line += " %10s" % "lb"
                elif r.get("trials_not_near") or v.get("trials_not_near"):
                    line += " %10s" % "pl"
                else:
                    line += " %9.2fx" % (v["ndr_mpps"] / r["ndr_mpps"])
            lines.append(line)
    return lines


def _cal(r):
    """(cycles per frame, Mpps carried, core placement, Mpps offered, the generator's TX
    cycles per frame) of a row's back-pressured calibration trial."""
    se = r.get("search") or {}
    return se.get("calibration_cycles"), se.get("calibration_mpps"), \
        se.get("calibration_placement"), se.get("calibration_offered_mpps"), \
        se.get("calibration_gen_cycles")


# The anchor each virtlink mode is held to (the uplink goals: cycles per frame <= 0.7x
# OVS-DPDK's on the same interface, 64 B NDR >= 1.3x).
GOAL_ANCHOR = {"xconnect": ("ovs-dpdk", "xconnect"), "bridge": ("ovs-dpdk", "normal")}
GOAL_CYCLES, GOAL_NDR = 0.7, 1.3


def cycles_ratio(v, r, loaded):
    """virtlink row v's calibration cycles per frame over row r's, or why there is none."""
    vc, rc = _cal(v)[0], _cal(r)[0]
    if loaded:
        return None, "taken under load"
    if not vc or not rc:
        return None, "no cycle count"
    if any(_cal(x)[2] not in (None, "near") for x in (v, r)):
        return None, "core placement not near"
    return vc / rc, None


def ndr_ratio(v, r, loaded):
    if loaded:
        return None, "taken under load"
    if not v.get("ndr_mpps") or not r.get("ndr_mpps"):
        return None, "no NDR"
    if lower_bound(v) or lower_bound(r):
        return None, "a lower bound"
    if v.get("trials_not_near") or r.get("trials_not_near"):
        return None, "a trial off near core placement"
    return v["ndr_mpps"] / r["ndr_mpps"], None


def cycles_table(rows, virtlink_modes, loaded=False):
    """The switches' busy cycles per frame (uplink benches): in the back-pressured
    calibration trial, where the generator sends as fast as it can (the same offered load
    for every switch of the run), and at NDR; virtlink's calibration figure over each
    other configuration's ('pl': either trial off near core placement; none under load);
    then the goals against OVS-DPDK per frame size."""
    short = {"xconnect": "xc", "bridge": "br"}
    cols = ["vl-%s/this" % short.get(m, m) for m in virtlink_modes]
    lines = ["%-9s %-9s %6s %11s %11s %10s %10s %9s %10s" % (
        "switch", "mode", "bytes", "offer Mpps", "carry Mpps", "gen cyc/f", "cyc/f@max",
        "rxq c/f", "cyc/f@NDR") + "".join(" %10s" % c for c in cols)]
    verdicts = []
    for size in sorted({r["frame_size"] for r in rows}):
        block = [r for r in rows if r["frame_size"] == size]
        vl = {r["mode"]: r for r in block if r["switch"] == "virtlink"}
        for r in block:
            cyc, mpps, pl, offered, gen_cyc = _cal(r)
            ndr_cyc = (r["cycles_per_packet"] or {}).get("switch")
            rxq = (r.get("search") or {}).get("calibration_rxq_cycles")
            line = "%-9s %-9s %6d %11s %11s %10s %10s %9s %10s" % (
                r["switch"], r["mode"], size, fmt_num(offered), fmt_num(mpps),
                gen_cyc if gen_cyc else "-", cyc if cyc else "-", rxq if rxq else "-",
                ndr_cyc if ndr_cyc else "-")
            for m in virtlink_modes:
                v = vl.get(m)
                x, why = cycles_ratio(v, r, loaded) if v is not None and \
                    r["switch"] != "virtlink" else (None, None)
                line += " %10s" % ("%.2fx" % x if x is not None else
                                   "pl" if why == "core placement not near" else "-")
            lines.append(line + ("" if pl in (None, "near") else "  (%s)" % pl))
        for m in virtlink_modes:
            v = vl.get(m)
            a = next((r for r in block if (r["switch"], r["mode"]) == GOAL_ANCHOR[m]), None)
            if v is None or a is None:
                continue
            c, cwhy = cycles_ratio(v, a, loaded)
            n, nwhy = ndr_ratio(v, a, loaded)
            verdicts.append(
                "goal %d B virtlink/%s vs %s/%s: cycles per frame %s (goal <= %.1fx); NDR %s"
                % (size, m, a["switch"], a["mode"],
                   "%.2fx: %s" % (c, "met" if c <= GOAL_CYCLES else "not met") if c is not None
                   else "no ratio (%s)" % cwhy, GOAL_CYCLES,
                   ("%.2fx%s" % (n, " (goal >= %.1fx: %s)" % (
                       GOAL_NDR, "met" if n >= GOAL_NDR else "not met") if size == 64 else "")
                    if n is not None else "no ratio (%s)" % nwhy)))
    return lines + verdicts


def lower_bound(r):
    """True if the row's NDR is a lower bound (generator-limited, or at the search maximum)."""
    return bool(r.get("ndr_gen_limited") or r.get("ndr_at_max"))


# ---------------------------------------------------------------------------------------
# Plots (gnuplot)

def have_gnuplot():
    return shutil.which("gnuplot") is not None


def _gnuplot(script, data_files):
    with tempfile.TemporaryDirectory(prefix="vlplot-") as d:
        paths = {}
        for name, text in data_files.items():
            paths[name] = os.path.join(d, name)
            with open(paths[name], "w") as f:
                f.write(text)
        script = script.format(**{k.replace(".", "_"): v for k, v in paths.items()})
        r = subprocess.run(["gnuplot"], input=script, text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        if r.returncode != 0:
            raise RuntimeError("gnuplot failed: " + r.stderr)


def _label(r):
    return "%s %s" % (r["switch"], r["mode"])


def plot_throughput(rows, path, title):
    """NDR (Mpps) against frame size, one line per switch configuration."""
    configs = []
    for r in rows:
        if _label(r) not in configs:
            configs.append(_label(r))
    data = {}
    plots = []
    marked = []  # (frame size, NDR) of points that are lower bounds or off-placement
    for i, c in enumerate(configs):
        pts = sorted((r["frame_size"], r["ndr_mpps"]) for r in rows
                     if _label(r) == c and r["ndr_mpps"] is not None)
        name = "t%d.dat" % i
        data[name] = "".join("%d %.6f\n" % p for p in pts)
        plots.append("'{%s}' using 1:2 with linespoints title '%s'" % (name.replace(".", "_"), c))
        marked += [(r["frame_size"], r["ndr_mpps"]) for r in rows if _label(r) == c and
                   r["ndr_mpps"] is not None and (lower_bound(r) or r.get("trials_not_near"))]
    if not plots:
        return None
    if marked:
        # Lower bounds ('+' in the table) and points with a trial at far or changed core
        # placement ('pl'): open circles around the point, one legend entry.
        data["m.dat"] = "".join("%d %.6f\n" % p for p in sorted(marked))
        plots.append("'{m_dat}' using 1:2 with points pt 6 ps 2.5 lc rgb 'black' "
                     "title 'lower bound or off-placement (no ratio)'")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    script = ("set terminal pngcairo size 900,560\nset output '%s'\nset title '%s'\n"
              "set xlabel 'frame size (bytes)'\nset ylabel 'NDR (Mpps, all directions)'\n"
              "set grid\nset key top right\nset yrange [0:*]\nplot %s\n" %
              (path, title.replace("'", ""), ", ".join(plots)))
    _gnuplot(script, data)
    return path


def plot_latency_cdf(hists, path, title):
    """Latency CDFs: `hists` is {label: [(upper edge ns, count), ...]} (the generator's
    histogram, merged over streams)."""
    data = {}
    plots = []
    for i, (label, h) in enumerate(hists.items()):
        total = sum(n for _, n in h)
        if not total:
            continue
        acc = 0
        text = ""
        for edge, n in h:
            acc += n
            text += "%.3f %.6f\n" % (edge / 1000.0, acc / total)
        name = "c%d.dat" % i
        data[name] = text
        plots.append("'{%s}' using 1:2 with steps title '%s'" % (name.replace(".", "_"), label))
    if not plots:
        return None
    os.makedirs(os.path.dirname(path), exist_ok=True)
    script = ("set terminal pngcairo size 900,560\nset output '%s'\nset title '%s'\n"
              "set xlabel 'one-way latency (us, log scale)'\nset ylabel 'fraction of frames'\n"
              "set logscale x\nset grid\nset key bottom right\nset yrange [0:1]\nplot %s\n" %
              (path, title.replace("'", ""), ", ".join(plots)))
    _gnuplot(script, data)
    return path


def print_guest_report(bench, version, qemu, command, core_plan, load0, load1, table_lines,
                       note, errors, t0, json_path, rows, anchors, method, summary=None):
    """The end of a guest bench (ping, tcp): header, core plan, load, table, note, what was
    not measured and the time taken; then the bench JSON when `json_path` is set."""
    print("virtlink bench %s   (%s, %s, %s)" % (bench, time.strftime("%Y-%m-%d %H:%M"),
                                                version, qemu))
    print("command: " + command)
    print("core plan: " + core_plan)
    print("load average at start %s, at end %s (2 CPUs: above 1 the numbers mean little)" %
          (load0, load1))
    print("\n".join(table_lines))
    print(note)
    for e in errors:
        print("not measured: " + e)
    print("took %.0f s" % (time.time() - t0))
    if json_path:
        extra = {"summary": summary} if summary is not None else {}
        write_json(json_path, command, version, core_plan, rows, anchors=anchors, errors=errors,
                   load_average={"start": load0, "end": load1}, method=method, **extra)

