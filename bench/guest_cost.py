"""What one run of a guest bench (`bench tcp`, `bench ping`) cost the guests and the switch.

Read before and after each run, the difference is the run's cost:
  guests   each guest's own counters: virtio-net's kicks (ethtool -S *_kicks: notifications
           the driver sent), its virtio interrupts (/proc/interrupts virtioN-input/output:
           notifications it took), eth0's packets and bytes sent, and its ICMP OutErrors
           (/proc/net/snmp: a reply it could not send, e.g. its socket's send buffer full);
           and each QEMU process's CPU time on the host (utime + stime).
  switch   virtlink's process CPU time, the used-buffer notifications it sent (ctl stats
           rx_calls + tx_calls) and its drops by reason (ctl stats drops).
Per MB and per frame use what the guests sent (eth0 tx bytes and packets, both guests): a
TSO frame counts once, as its driver sent it. Kicks plus guest interrupts are the
notifications of a path; every path is measured the same way, QEMU's userspace one included.
"""

import re

from vltestlib import vlguest, vltest

_GUEST_CMD = ("cat /sys/class/net/eth0/statistics/tx_packets /sys/class/net/eth0/statistics/"
              "tx_bytes; ethtool -S eth0 | grep '_kicks:'; grep virtio /proc/interrupts; "
              "grep '^Icmp:' /proc/net/snmp | tail -1")
# MSI-X (virtioN-input.Q, virtioN-output.Q) or one legacy INTx line per device (virtioN:
# the guests on vhost-user ports use INTx, docs/reference/TESTBED.md); config interrupts
# (virtioN-config) are not counted.
_IRQ = re.compile(r"^\s*\d+:((?:\s+\d+)+)\s.*\svirtio\d+(-input\.\d+|-output\.\d+)?\s*$")
_KICKS = re.compile(r"^\s*\w+_queue_\d+_kicks:\s+(\d+)")


def guest_sample(g):
    """The counters of guest `g` (a vlguest.Guest) and its QEMU's CPU seconds."""
    out = g.run(_GUEST_CMD, timeout=30)
    lines = out.splitlines()
    s = {"tx_packets": int(lines[0]), "tx_bytes": int(lines[1]), "kicks": 0, "interrupts": 0,
         "icmp_out_errors": 0, "cpu_s": vlguest.proc_cpu_s(g.pid)}
    for l in lines[2:]:
        m = _KICKS.match(l)
        if m:
            s["kicks"] += int(m.group(1))
            continue
        m = _IRQ.match(l)
        if m:
            s["interrupts"] += sum(int(x) for x in m.group(1).split())
            continue
        if l.startswith("Icmp:"):
            # Icmp: InMsgs InErrors InCsumErrors ... OutMsgs OutErrors ...: OutErrors is the
            # 16th value (proc(5), /proc/net/snmp; the header line names them).
            s["icmp_out_errors"] = int(l.split()[16])
    return s


def switch_sample(tb):
    """virtlink's CPU seconds, notifications sent and drops by reason (None: no switch)."""
    if tb.switch is None:
        return None
    st = tb.switch_stats()
    return {"cpu_s": vlguest.proc_cpu_s(tb.switch.pid),
            "calls": sum(p.get("rx_calls", 0) + p.get("tx_calls", 0) for p in st.values()),
            "drops": vltest.drops_by_reason(st)}


def sample(tb, guests):
    return {"guests": [guest_sample(g) for g in guests], "switch": switch_sample(tb)}


def cost(before, after):
    """The run's cost (bench JSON `cost`) from two sample() results."""
    g = [{k: b[k] - a[k] for k in b} for a, b in zip(before["guests"], after["guests"])]
    frames = sum(x["tx_packets"] for x in g)
    mbytes = sum(x["tx_bytes"] for x in g) / 1e6
    kicks = sum(x["kicks"] for x in g)
    irqs = sum(x["interrupts"] for x in g)
    c = {"frames": frames, "mbytes": round(mbytes, 3), "guest_kicks": kicks,
         "guest_interrupts": irqs, "guest_cpu_s": round(sum(x["cpu_s"] for x in g), 3),
         "guest_icmp_out_errors": sum(x["icmp_out_errors"] for x in g),
         "guest_kicks_per_mb": round(kicks / mbytes, 2) if mbytes else None,
         "guest_interrupts_per_mb": round(irqs / mbytes, 2) if mbytes else None,
         "notifications_per_mb": round((kicks + irqs) / mbytes, 2) if mbytes else None,
         "notifications_per_frame": round((kicks + irqs) / frames, 4) if frames else None,
         "switch_cpu_s": None, "switch_calls": None, "switch_drops": None}
    sa, sb = before["switch"], after["switch"]
    if sa is not None and sb is not None:
        c["switch_cpu_s"] = round(sb["cpu_s"] - sa["cpu_s"], 3)
        c["switch_calls"] = sb["calls"] - sa["calls"]
        c["switch_drops"] = {k: v - sa["drops"].get(k, 0) for k, v in sb["drops"].items()
                             if v - sa["drops"].get(k, 0)}
    return c


def fmt_drops(c):
    """Drops of one run as text: the switch's by reason, and replies the guests lost."""
    parts = ["%s %d" % kv for kv in sorted((c.get("switch_drops") or {}).items())]
    if c.get("guest_icmp_out_errors"):
        parts.append("guest icmp_out_errors %d" % c["guest_icmp_out_errors"])
    return ", ".join(parts) or "none"


def median(values):
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def median_cost(costs):
    """The per-key median of several runs' costs (drops: summed over the runs)."""
    out = {}
    for k in ("frames", "mbytes", "guest_kicks", "guest_interrupts", "guest_cpu_s",
              "guest_kicks_per_mb", "guest_interrupts_per_mb", "notifications_per_mb", "notifications_per_frame", "switch_cpu_s",
              "switch_calls"):
        out[k] = median([c[k] for c in costs])
    out["guest_icmp_out_errors"] = sum(c["guest_icmp_out_errors"] for c in costs)
    drops = {}
    for c in costs:
        for k, v in (c["switch_drops"] or {}).items():
            drops[k] = drops.get(k, 0) + v
    out["switch_drops"] = drops if any(c["switch_drops"] is not None for c in costs) else None
    return out


COST_HEADER = "%9s %9s %9s %9s %10s  %s" % ("sw cpu s", "vm cpu s", "kicks/MB", "irqs/MB",
                                              "notif/frm", "drops")


def cost_columns(c):
    """The cost columns of a table row (COST_HEADER)."""
    f = lambda v, spec: spec % v if v is not None else "-"  # noqa: E731
    return "%9s %9s %9s %9s %10s  %s" % (
        f(c["switch_cpu_s"], "%.2f"), f(c["guest_cpu_s"], "%.2f"),
        f(c["guest_kicks_per_mb"], "%.1f"), f(c["guest_interrupts_per_mb"], "%.1f"),
        f(c["notifications_per_frame"], "%.3f"), fmt_drops(c))
