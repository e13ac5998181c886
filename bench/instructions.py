#!/usr/bin/env python3
"""Instructions per forwarded frame on the switch's datapath, by phase: a repeatable cost
figure where wall-clock rates swing with the machine (this VM has no hardware counters, so
`perf stat -e instructions` is not an option; callgrind counts instructions exactly).

The switch under test (the release build, as scripts/build.sh builds it) runs under
`valgrind --tool=callgrind`, which slows it about 50x, so `virtlink gen --rate 0` keeps its
transmit rings full: every burst is a full one, as at saturation. Only the datapath's busy
work is counted: the inclusive cost of Forwarder::forward_burst (a burst taken from a
non-empty queue, from the first pop to the last used-ring publish; empty polls return
before it and are not counted), divided by the frames the switch forwarded (its own
`ctl stats` tx_packets). The phases are the inclusive costs of the steps forward_burst
calls (src/dp/forwarder.cpp):

    dequeue    take_burst: pops, header reads, header checks, slots
    classify   classify: cross-connect peer or MAC learning and lookup
    copy       deliver_frame: the receive-chain pop, the one copy into the receiver and
               the used entry it writes
    deliver    the rest of delivery (flush policy, counters, queue ages, offload checks)
    write-back publish_used and retire: used entries returned to both drivers
    notify     signal(): eventfd writes to the drivers that asked for them

    python3 bench/instructions.py --virtlink build/virtlink [--ring split|packed]
        [--forward xconnect|bridge] [--size 64] [--duration 6] [--json FILE] [--out TXT]
        [--switch-arg WORD ...]

Prints one table; --json/--out keep it (bench/results/). Core plan: the switch (under
valgrind) on CPU 1, the generator on CPU 0; their speeds do not enter the figure.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# Phases: callgrind attributes every instruction to a "file:function" pair: the function
# it was compiled into (an inlined function counts in its caller) and the source file of
# its line (the inlined function's own header). Each pair goes to the first phase whose
# pattern matches it (re.search); what no phase names is "other". The receive side of
# deliver_frame (virtio/net_copy.h, the queue headers, guest_memory.h), inlined into the
# delivery loop, is "copy": the receive-chain pop, the header and frame copy and the used
# entry it writes.
COPY_INLINED = r"(net_copy\.h|device_queue\.h|guest_memory\.h):.*Forwarder::deliver_(to|queue)<"
PHASES = [
    ("dequeue", r"Forwarder::take_burst<|SplitDeviceQueue::pop<false>|PackedDeviceQueue::pop<false>|"
                r"split_tx_chain|check_tx_header|plain_tx_header|Forwarder::take_slot|has_avail|"
                r"SplitDeviceQueue::pending|QueueShared::"),
    ("classify", r"Forwarder::classify|Forwarder::enqueue|Forwarder::flood|Fdb::lookup|Fdb::learn|mac_from_bytes"),
    ("copy", COPY_INLINED + r"|deliver_frame<|SplitDeviceQueue::pop<true>|PackedDeviceQueue::pop<true>|memcpy|memmove|"
             r"fill_chain|Reader::read|gather_copy"),
    ("write_back", r"publish_used|Forwarder::retire|push_used|Forwarder::publish_senders|"
                   r"Forwarder::complete|Forwarder::unref|need_event"),
    ("notify", r"SplitDeviceQueue::signal|eventfd_write|^write$|__GI___libc_write"),
    ("deliver", r"Forwarder::deliver_queue|Forwarder::deliver_to|Forwarder::flush_port|"
                r"QueueAgeStats|SoftOffload::deliver|Forwarder::end_burst|due_at|Forwarder::flush_due"),
]
BUSY = r"Forwarder::forward_burst<"
# Before forward_burst existed (the baseline commit): the burst loop was poll_queue, whose
# inclusive cost also holds the empty polls.
LEGACY_BUSY = r"Forwarder::poll_queue<"


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def ctl(virtlink, path, *args):
    return json.loads(run([virtlink, "ctl", "--control", path, *args, "--json"]).stdout)


def inclusive_costs(outfile):
    """{function name: {"ir": inclusive Ir, "calls": N, "from": {caller: N}}} from
    callgrind_annotate --tree=caller: the cost of every call into a function, summed over
    its callers (inlined copies of a function make no calls and count in their caller)."""
    text = run(["callgrind_annotate", "--tree=caller", "--threshold=100", "--auto=no", outfile]).stdout
    costs = {}
    pending = []
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+\*\s+\S+?:(.*?)(?: \[[^\]]*\])?$", line)
        if m:
            c = costs.setdefault(m.group(2), {"ir": 0, "calls": 0, "from": {}})
            for ir, calls, caller in pending:
                c["ir"] += ir
                c["calls"] += calls
                c["from"][caller] = c["from"].get(caller, 0) + calls
            pending = []
            continue
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+<\s+\S+?:(.*) \(([\d,]+)x\)", line)
        if m:
            pending.append((int(m.group(1).replace(",", "")), int(m.group(3).replace(",", "")),
                            m.group(2)))
        elif not line.strip():
            pending = []
    return costs


def matching(costs, pat, key):
    return sum(v[key] for k, v in costs.items() if re.search(pat, k))


def self_costs(outfile):
    """{"file:function": self Ir}, each instruction under the function it was compiled
    into and the source file of its line."""
    text = run(["callgrind_annotate", "--threshold=100", "--auto=no", outfile]).stdout
    costs = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(\S+?:.*?)(?: \[[^\]]*\])?$", line)
        if m:
            name = m.group(2)
            costs[name] = costs.get(name, 0) + int(m.group(1).replace(",", ""))
    return costs


def phase_costs(incl, selfc):
    """{phase: Ir} over the whole run, plus busy (the total), bursts and other."""
    out = {"busy": matching(incl, BUSY, "ir"), "bursts": matching(incl, BUSY, "calls")}
    if not out["busy"]:  # the baseline: poll_queue, empty polls included
        out["busy"] = matching(incl, LEGACY_BUSY, "ir")
        out["polls"] = matching(incl, LEGACY_BUSY, "calls")
        # A busy poll_queue call ends with one publish_senders call; an empty one returns
        # before it.
        out["bursts"] = sum(n for k, v in incl.items() if re.search(r"Forwarder::publish_senders\(", k)
                            for caller, n in v["from"].items() if re.search(LEGACY_BUSY, caller))
        out["legacy"] = True
    named = 0
    for phase, _ in PHASES:
        out[phase] = 0
    for k, v in selfc.items():
        for phase, pat in PHASES:
            if re.search(pat, k):
                out[phase] += v
                named += v
                break
    # What the busy bursts cost beyond the named phases (loop control, clock reads, the
    # policy refresh).
    out["other"] = out["busy"] - named
    return out


def measure(a, rate="0"):
    tmp = tempfile.mkdtemp(prefix="vl-ipf-")
    sock_a, sock_b = os.path.join(tmp, "a.sock"), os.path.join(tmp, "b.sock")
    ctl_path = os.path.join(tmp, "ctl")
    out = os.path.join(tmp, "callgrind.out")
    sw_log = open(os.path.join(tmp, "switch.log"), "w")
    sw = subprocess.Popen(
        ["taskset", "-c", "1", "valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
         a.virtlink, "--log-level", "warn", "switch", "--port", "a=vhost-user:" + sock_a,
         "--port", "b=vhost-user:" + sock_b, "--forward", a.forward, "--pmd-cores", "1",
         "--control", ctl_path] + a.switch_arg, stdout=sw_log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(ctl_path):
            if sw.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the switch did not start: " + open(sw_log.name).read())
            time.sleep(0.2)
        gen = [a.virtlink, "gen", "--port", "g0=vhost-user-client:" + sock_a,
               "--port", "g1=vhost-user-client:" + sock_b, "--rate", rate,
               "--duration", str(a.duration), "--size", str(a.size), "--cpu", "0",
               "--ring", a.ring, "--json", os.path.join(tmp, "gen.json")]
        if a.forward == "xconnect":
            gen.append("--no-learn")
        run(gen, timeout=a.duration + 120)
        st = {p["name"]: p for p in ctl(a.virtlink, ctl_path, "stats")["ports"]}
        frames = sum(p["tx_packets"] for p in st.values())
        taken = sum(p["rx_packets"] for p in st.values())
        drops = {k: sum(p["drops"][k] for p in st.values()) for k in st["a"]["drops"]}
    finally:
        sw.send_signal(signal.SIGINT)
        try:
            sw.wait(timeout=60)
        except subprocess.TimeoutExpired:
            sw.kill()
            sw.wait()
        sw_log.close()
    ph = phase_costs(inclusive_costs(out), self_costs(out))
    if a.keep:
        print("kept %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return frames, taken, drops, ph


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--virtlink", default=os.path.join(HERE, "..", "build", "virtlink"))
    ap.add_argument("--ring", choices=("split", "packed"), default="split")
    ap.add_argument("--forward", choices=("xconnect", "bridge"), default="xconnect")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--duration", type=float, default=6.0)
    ap.add_argument("--json")
    ap.add_argument("--out", help="also write the table to this file")
    ap.add_argument("--keep", action="store_true", help="keep the callgrind output")
    ap.add_argument("--switch-arg", action="append", default=[],
                    help="one more word of the switch's command line (repeatable), e.g. "
                    "--switch-arg=--port-set --switch-arg=a:port_security=02:00:01:00:00:00 "
                    "(the generator's first port's MAC)")
    ap.add_argument("--label", default="",
                    help="what the binary is (default: the tree this script is in, at its commit)")
    a = ap.parse_args()
    for tool in ("valgrind", "callgrind_annotate"):
        if not shutil.which(tool):
            sys.exit("instructions: %s not found (scripts/install-deps.sh installs valgrind)" % tool)
    frames, taken, drops, ph = measure(a)
    if frames == 0:
        sys.exit("instructions: the switch forwarded no frame")
    if ph.get("legacy"):
        # The baseline's poll_queue holds the empty polls too: their cost, measured on an
        # idle switch (100 frames/s: almost every poll empty), is taken out.
        _, _, _, idle = measure(a, rate="100")
        ph["empty_poll_ir"] = idle["busy"] / max(1, idle["polls"])
        empty = (ph["polls"] - ph["bursts"]) * ph["empty_poll_ir"]
        ph["busy"] -= int(empty)
        ph["other"] -= int(empty)
    per = {k: v / frames for k, v in ph.items()
           if isinstance(v, int) and k not in ("bursts", "polls", "legacy")}
    commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", HERE, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    commit += "+changes" if dirty else ""
    cmd = "python3 bench/instructions.py " + " ".join(sys.argv[1:])
    lines = [
        "Instructions per forwarded frame (callgrind), %s, 1 PMD thread, %d B, %s ring: %s" % (
            a.forward, a.size, a.ring, a.label or "switch from the tree at " + commit),
        "command: " + cmd,
        "frames forwarded %d in %d busy bursts (%.1f a burst); taken %d; drops %s" % (
            frames, ph["bursts"], frames / ph["bursts"] if ph["bursts"] else 0, taken,
            {k: v for k, v in drops.items() if v} or "none"),
        "",
        "%-44s %8s" % ("phase", "Ir/frame"),
    ]
    total = ("busy polls, in all (poll_queue less %d empty polls of %.1f Ir)" % (
        ph["polls"] - ph["bursts"], ph["empty_poll_ir"]) if ph.get("legacy")
        else "busy bursts, in all (forward_burst)")
    rows = [(total, per["busy"])] + [("  " + p, per[p]) for p, _ in PHASES] + [("  other", per["other"])]
    for name, v in rows:
        lines.append("%-44s %8.1f" % (name, v))
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text + "\n\n")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"command": cmd, "commit": commit, "forward": a.forward, "ring": a.ring,
                       "size": a.size, "frames": frames, "taken": taken, "drops": drops,
                       "ir_per_frame": per, "ir_total": ph}, f, indent=1)


if __name__ == "__main__":
    main()
