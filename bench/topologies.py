"""Topologies for the RFC 2544 benches: the switch under test or an anchor switch, the VNFs
and the traffic generator, each started through vltestlib.vltest (pylib/vltestlib: child
processes with cleanup guarantees: SIGINT/SIGTERM then SIGKILL, PDEATHSIG, temporary
directories and DPDK runtime directories removed).

    with vltest.Testbed(None) as tb:
        topo = Topology(tb, "pvp", make_switch(tb, "virtlink", "xconnect"))
        topo.start()                   # switch, VNFs; waits until they are connected
        t = topo.trial(rate_pps=2e6, frame_size=64, duration_s=2)   # one trial
        topo.stop()

Ports (gen = `virtlink gen`, vnfN = `virtlink vnf`):
  p2p   gen:g0 -> [g0 switch g1] -> gen:g1                         (and back)
  p2v   gen:g0 -> [g0 switch g1] -> gen:g1                         (one way: g1 is the "V")
  pvp   gen:g0 -> [g0 - v0] -> vnf0 -> [v1 - g1] -> gen:g1          (and back)
  pvvp  gen:g0 -> [g0 - v0] -> vnf0 -> [v1 - w0] -> vnf1 -> [w1 - g1] -> gen:g1
The switch cross-connects the pairs in brackets (virtlink xconnect, testpmd io forwarding's
paired ports, OVS port-to-port flows), or learns MAC addresses (virtlink bridge, OVS
NORMAL: p2p and p2v only, one bridge domain; PVP needs one per side, which virtlink has not).

With an uplink (`Topology(..., uplink="af-xdp"|"af-packet"|"dpdk-af-xdp")`, bench p2v/pvp
--uplink) the "P" is a veth pair: the switch's end in this namespace is its uplink port
(u0, u1), the peer end is in a network namespace of the generator's own (VethLinks), where
`virtlink gen` runs with a wire port on it (gen --port g0=af-xdp:PEER or af-packet:PEER):
  p2v   gen:g0 ~veth~ [u0 switch g1] -> gen:g1 (vhost-user: the "V")     (one way)
  pvp   gen:g0 ~veth~ [u0 - v0] -> vnf0 -> [v1 - u1] ~veth~ gen:g1        (and back)
The uplink on the switch's side: virtlink `af-xdp:IF`, `af-packet:IF` or `dpdk:net_af_xdpN,
iface=IF`; testpmd and OVS-DPDK a DPDK vdev on the same interface (net_af_xdp for af-xdp and
dpdk-af-xdp, net_af_packet for af-packet; OVS: a `type=dpdk` port with dpdk-devargs).

Core plan on the 2-CPU machine: the switch's PMD (virtlink PMD thread, testpmd's forwarding
lcore, OVS's PMD thread) busy-polls on CPU 1; the generator busy-polls on CPU 0; VNFs run in
interrupt mode, unpinned (they sleep on their receive queues' call eventfds when idle and
take CPU time from whichever busy-poller the scheduler picks): at most two processes poll.
"""

import json
import os
import re
import signal
import subprocess
import time

import _pylib  # noqa: F401  (puts pylib/ on sys.path)
from vltestlib import vltest

SWITCH_CPU = 1
GEN_CPU = 0

OVS_VSWITCHD = os.environ.get("VLBENCH_OVS_VSWITCHD",
                              "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk")
OVS_SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"

# Which ports each topology has on the switch, in cross-connect pair order, and the VNFs'
# (port 0, port 1).
TOPOLOGIES = {
    "p2p": (["g0", "g1"], []),
    "p2v": (["g0", "g1"], []),
    "pvp": (["g0", "v0", "v1", "g1"], [("v0", "v1")]),
    "pvvp": (["g0", "v0", "v1", "w0", "w1", "g1"], [("v0", "v1"), ("w0", "w1")]),
}
# One-way topologies: only the generator's first port sends (gen --unidirectional).
UNIDIRECTIONAL = {"p2v"}

# With an uplink: (switch ports in cross-connect order, VNF ports, the ports that are
# uplinks on veths). The generator faces the first and the last port, as above.
UPLINK_TOPOLOGIES = {
    "p2v": (["u0", "g1"], [], ["u0"]),
    "pvp": (["u0", "v0", "v1", "u1"], [("v0", "v1")], ["u0", "u1"]),
}
# --uplink: the switch side's port type (virtlink) and the DPDK vdev driver the anchors use.
UPLINKS = {"af-xdp": "net_af_xdp", "af-packet": "net_af_packet", "dpdk-af-xdp": "net_af_xdp"}
# The generator's side of the veth (gen --port TYPE:PEER).
GEN_WIRES = ("af-xdp", "af-packet")
# MTU of the veth pairs: 1518-byte frames (no FCS) are 1504 bytes of L3, above 1500.
VETH_MTU = 2000

CORE_PLAN = ("switch PMD (virtlink PMD thread, testpmd forwarding lcore, or OVS PMD thread) "
             "busy-polls on CPU %d; the generator (virtlink gen, one thread: transmit and "
             "receive) busy-polls on CPU %d; VNFs (virtlink vnf, io forwarding) run in "
             "interrupt mode, unpinned, sharing both CPUs, under SCHED_BATCH unless --vnf-sched "
             "other (a VNF woken by a notification does not preempt its sender); testpmd's "
             "main lcore and OVS's non-PMD threads mostly sleep" % (SWITCH_CPU, GEN_CPU))
UPLINK_CORE_PLAN = (
    "; on the veths the kernel's work runs on the sender's CPU: a frame the generator sends "
    "is carried through the veth into the switch's socket (softirq: veth, XDP program or "
    "packet tap, copy into its AF_XDP UMEM or TPACKET ring) on CPU %d inside the generator's "
    "send call, and one the switch sends reaches the generator's socket the same way on CPU "
    "%d, counted in the switch's busy cycles" % (GEN_CPU, SWITCH_CPU))


# ---------------------------------------------------------------------------------------
# veth pairs for the uplink topologies

def _ip(*args, ns=None, check=True):
    argv = ["ip"] + (["-n", ns] if ns else []) + list(args)
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(argv), r.stderr.strip()))
    return r


def _no_ipv6(dev, ns=None):
    """No IPv6 on `dev` (no router solicitations or MLD reports among the test frames)."""
    argv = (["ip", "netns", "exec", ns] if ns else []) + [
        "sysctl", "-qw", "net.ipv6.conf.%s.disable_ipv6=1" % dev]
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)


def sweep_stale_netns():
    """Deletes the generator namespaces (vlb-PID) of bench runs that were killed outright;
    their veth pairs go with them."""
    r = _ip("netns", "list", check=False)
    for line in r.stdout.splitlines():
        m = re.match(r"vlb-(\d+)\b", line.strip())
        if m and int(m.group(1)) != os.getpid() and not vltest._pid_alive(int(m.group(1))):
            _ip("netns", "del", "vlb-" + m.group(1), check=False)


class VethLinks:
    """One veth pair per uplink port: the switch's end in this namespace (vbNNNNNsI), the
    generator's (vbNNNNNgI) in the namespace vlb-PID; both up, MTU VETH_MTU, no IPv6.
    A context manager: leaving it deletes the namespace, and the pairs with it.

        with VethLinks(["u0"]) as links:
            links.sw("u0"), links.gen("u0"), links.ns
    """

    def __init__(self, names, mtu=VETH_MTU):
        self.ns = "vlb-%d" % os.getpid()
        tag = "vb%05d" % (os.getpid() % 100000)
        self.pairs = {n: ("%ss%d" % (tag, i), "%sg%d" % (tag, i)) for i, n in enumerate(names)}
        self.mtu = mtu
        self.made = False

    def sw(self, name):
        return self.pairs[name][0]

    def gen(self, name):
        return self.pairs[name][1]

    def __enter__(self):
        self.create()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def create(self):
        sweep_stale_netns()
        _ip("netns", "del", self.ns, check=False)
        _ip("netns", "add", self.ns)
        self.made = True
        _ip("link", "set", "lo", "up", ns=self.ns)
        for sw, gen in self.pairs.values():
            _ip("link", "del", sw, check=False)
            _ip("link", "add", sw, "mtu", str(self.mtu), "type", "veth", "peer", "name", gen,
                "mtu", str(self.mtu), "netns", self.ns)
            _no_ipv6(sw)
            _no_ipv6(gen, self.ns)
            _ip("link", "set", sw, "up")
            _ip("link", "set", gen, "up", ns=self.ns)

    def close(self):
        if self.made:
            _ip("netns", "del", self.ns, check=False)
            for sw, _ in self.pairs.values():  # gone with their peers; in case one was not
                _ip("link", "del", sw, check=False)
            self.made = False


def uplink_devargs(uplink, iface, index):
    """The DPDK vdev an anchor (testpmd, OVS) uses for `--uplink` on `iface`."""
    return "%s%d,iface=%s" % (UPLINKS[uplink], index, iface)


def uplink_plugins(uplinks):
    """The DPDK driver plugins the vdevs of `uplinks` ({port: (uplink type, iface)}) need."""
    return [os.path.join(vltest.PMD_DIR, "librte_%s.so" % d)
            for d in sorted({UPLINKS[k] for k, _ in uplinks.values()})]


def uplink_spec(uplink, name, iface, index):
    """virtlink's --port for `--uplink` on `iface`."""
    if uplink == "dpdk-af-xdp":
        return "%s=dpdk:%s" % (name, uplink_devargs(uplink, iface, index))
    return "%s=%s:%s" % (name, uplink, iface)


def have_testpmd():
    import shutil
    return shutil.which(vltest.TESTPMD) is not None and os.path.exists(
        os.path.join(vltest.PMD_DIR, "librte_net_vhost.so"))


def have_ovs():
    import shutil
    return os.access(OVS_VSWITCHD, os.X_OK) and shutil.which("ovsdb-server") is not None


# ---------------------------------------------------------------------------------------
# Core placement. The host runs this machine's two vCPUs on cores that share an L3 (near)
# or not (far), and moves them every few seconds: a cache line passed between CPUs 0 and 1
# takes about 4x longer far than near, and every switch's cycles per frame follow it
# (bench/README.md "Core placement"). A run is compared only with runs of its placement.

# Round trips (TSC cycles) up to this are near; today's machine: near 210-490, far 1030-1470.
NEAR_MAX_CYCLES = 700


def core_to_core_path():
    """The probe built with virtlink (build/bench/micro/core_to_core), or None."""
    p = os.path.join(os.path.dirname(os.path.abspath(vltest.VIRTLINK or "")), "bench", "micro",
                     "core_to_core")
    return p if os.access(p, os.X_OK) else None


def probe_placement(tb, extra_pids=()):
    """TSC cycles of a cache-line round trip between SWITCH_CPU and GEN_CPU, with every
    process of the Testbed (and `extra_pids`) stopped (SIGSTOP) for the ~50 ms it takes so
    that busy-polling threads leave both CPUs; None if the probe is not built or fails."""
    exe = core_to_core_path()
    if exe is None:
        return None
    pids = [p.p.pid for p in tb.procs if p.p.poll() is None] + list(extra_pids)
    pids = list(dict.fromkeys(pids))
    stopped = []
    try:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            except ProcessLookupError:
                pass
        out = subprocess.run([exe, str(GEN_CPU), str(SWITCH_CPU), "20000"], capture_output=True,
                             text=True, timeout=30)
        if out.returncode != 0:
            return None
        return json.loads(out.stdout)["round_trip_cycles"]
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
        return None
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def topology_pids(topo):
    """Processes of a Topology's switch that the Testbed does not list (OVS's daemons)."""
    return [p.p.pid for p in getattr(topo.switch, "procs", []) if p.p.poll() is None]


def placed_trial(topo, rate_pps, size, duration_s, flows, wait_s, tries, log=None):
    """One trial at near core placement where it can be had: waits up to `wait_s` (probing
    each second) for a near placement before the trial, and repeats a trial whose probes
    before and after are not both near, up to `tries` trials in all. Returns (GenRun,
    placement of the run returned, trials repeated). With no probe: one plain trial."""
    repeats = 0
    run, pl = None, None
    for attempt in range(max(1, tries)):
        before = probe_placement(topo.tb, topology_pids(topo))
        if before is None:
            return topo.trial(rate_pps, size, duration_s, flows=flows), None, 0
        waited = 0
        while before > NEAR_MAX_CYCLES and waited < wait_s:
            time.sleep(1)
            waited += 1
            before = probe_placement(topo.tb, topology_pids(topo))
        run = topo.trial(rate_pps, size, duration_s, flows=flows)
        after = probe_placement(topo.tb, topology_pids(topo))
        pl = placement(before, after)
        if pl == "near":
            break
        if attempt + 1 < max(1, tries):
            repeats += 1
            if log:
                log("  trial at %s core placement (probe %s/%s cycles): repeated" % (
                    pl, before, after))
    return run, pl, repeats


def placement(before, after):
    """"near" or "far" when the probes before and after a run agree, "changed" when they
    do not, None when there was no probe."""
    if before is None or after is None:
        return None
    a, b = before <= NEAR_MAX_CYCLES, after <= NEAR_MAX_CYCLES
    if a != b:
        return "changed"
    return "near" if a else "far"


# ---------------------------------------------------------------------------------------
# Switches. Each: start(ports) -> {port: socket path the peers connect to (as clients)},
# wait_ready(ports), cycles_begin()/cycles_end() -> {"switch": cycles per packet} or None,
# stop(). Processes are registered with the Testbed, which stops them in any case.

class VirtlinkSwitch:
    name = "virtlink"

    def __init__(self, tb, mode="xconnect", pmd_mode="poll", policy="rx-batch", pmd_threads=1):
        """`pmd_threads`: 1 (a PMD thread on SWITCH_CPU) or 2 (--pmd-cores on both CPUs: the
        second shares GEN_CPU with the generator)."""
        self.tb, self.mode, self.pmd_mode, self.policy = tb, mode, pmd_mode, policy
        self.pmd_threads = pmd_threads
        self._p0 = None

    def pmd_cores(self):
        return str(SWITCH_CPU) if self.pmd_threads == 1 else "%d,%d" % (min(SWITCH_CPU, GEN_CPU),
                                                                        max(SWITCH_CPU, GEN_CPU))

    def start(self, ports, uplinks=None):
        """`uplinks`: {port: (uplink type, interface)} of the ports that are uplinks."""
        uplinks = uplinks or {}
        self.uplinks = uplinks
        extra = ["--pmd-mode", self.pmd_mode]
        if self.pmd_threads > 1:
            # Receive-queue writers follow the traffic (README "Several PMD threads"): after
            # the first second (the warm-up) no frame crosses threads, in bridge mode too.
            extra += ["--pmd-rx-writers", "follow"]
        specs = []
        for p in ports:
            if p in uplinks:
                kind, iface = uplinks[p]
                specs.append(uplink_spec(kind, p, iface, len([s for s in specs if "=" in s])))
            else:
                specs.append(p)
        self.tb.start_switch(ports=specs, forward=self.mode, pmd_cores=self.pmd_cores(),
                             extra=extra, log_level="warn")
        return {p: self.tb.sock(p) for p in ports if p not in uplinks}

    def wait_ready(self, ports, timeout=30):
        ups = [p for p in ports if p in getattr(self, "uplinks", {})]
        self.tb.wait_connected([p for p in ports if p not in ups], timeout=timeout)
        if ups:
            vltest._wait(lambda: all(self.tb.switch_stats()[p]["state"] == "connected"
                                     for p in ups), timeout, "uplinks %s open, link up" % ups,
                         interval=0.1)

    def _pmd(self):
        st = self.tb.ctl("pmd-stats")
        rxq = [l for p in st for l in p.get("rxq_loads") or []]
        ports = self.tb.switch_stats().values()
        off = [p.get("off_cpu") or {} for p in st]
        return (sum(p["packets"] for p in st), sum(p["busy_cycles"] for p in st),
                sum(l["packets"] for l in rxq), sum(l["cycles"] for l in rxq),
                # budget=US: frames delivered past it (on CPU, raw) of all delivered;
                # the PMD threads' time off their CPUs (dp/off_cpu.h)
                sum(p.get("over_budget", 0) for p in ports),
                sum(p.get("over_budget_raw", 0) for p in ports),
                sum(p["tx_packets"] for p in ports),
                sum(o.get("intervals", 0) for o in off), sum(o.get("total_ns", 0) for o in off))

    def cycles_begin(self):
        self._p0 = self._pmd()

    def cycles_end(self):
        """{"switch": busy cycles per frame (whole PMD passes that moved frames), "rxq": the
        cycles of the rxq polls that returned frames per frame (from the pass's start or
        the previous such poll: nearer what OVS's processing cycles count)}, or None."""
        if self._p0 is None:
            return None
        now = self._pmd()
        d = [a - b for a, b in zip(now, self._p0)]
        self._p0 = None
        if d[0] <= 0:
            return None
        out = {"switch": round(d[1] / d[0])}
        if d[2] > 0:
            out["rxq"] = round(d[3] / d[2])
        out.update(over_budget=d[4], over_budget_raw=d[5], delivered=d[6],
                   off_cpu_intervals=d[7], off_cpu_ns=d[8])
        return out

    def stop(self):
        if self.tb.switch is not None and self.tb.switch.returncode is None:
            rc = self.tb.switch.stop(signal.SIGTERM, timeout=15)
            if rc != 0:
                raise RuntimeError("virtlink switch exited with status %s" % rc)


class TestpmdSwitch:
    """DPDK testpmd as the switch: one net_vhost port (server socket) per switch port, io
    forwarding between paired ports (0<->1, 2<->3, ...), forwarding lcore on CPU 1."""
    name = "testpmd"

    def __init__(self, tb, mode="io", queues=1):
        """`queues`: queue pairs per net_vhost port (--rxq/--txq; one forwarding lcore polls
        them all)."""
        self.tb, self.mode, self.queues = tb, mode, queues
        self.proc = None

    def start(self, ports, uplinks=None):
        """`uplinks`: {port: (uplink type, interface)}: those ports are DPDK vdevs on the
        interface (net_af_xdp, net_af_packet), the others net_vhost."""
        uplinks = uplinks or {}
        tb = self.tb
        prefix = "vlt%dbsw" % os.getpid()
        tb.prefixes.append(prefix)
        other = 1 - SWITCH_CPU
        # Interactive (commands on stdin) with line-buffered output, so the harness can ask
        # for the forwarding core's cycles per packet around each trial.
        argv = ["stdbuf", "-oL", vltest.TESTPMD, "-l", "0,1", "--main-lcore", str(other),
                "--no-huge",
                "-m", "1024", "--no-pci", "--file-prefix", prefix,
                "-d", os.path.join(vltest.PMD_DIR, "librte_net_vhost.so"),
                "-d", os.path.join(vltest.PMD_DIR, "librte_mempool_ring.so")]
        for lib in uplink_plugins(uplinks):
            argv += ["-d", lib]
        socks = {}
        n_up = 0
        for i, p in enumerate(ports):
            if p in uplinks:
                kind, iface = uplinks[p]
                argv += ["--vdev", uplink_devargs(kind, iface, n_up)]
                n_up += 1
                continue
            socks[p] = os.path.join(tb.dir, "tp-%s.sock" % p)
            argv += ["--vdev", "net_vhost%d,iface=%s,queues=%d" % (i, socks[p], self.queues)]
        argv += ["--", "--no-mlockall", "--total-num-mbufs=32768", "--forward-mode=io", "-i",
                 "-a", "--record-core-cycles"]
        if any(UPLINKS[k] == "net_af_xdp" for k, _ in uplinks.values()):
            # 1518-byte frames are above testpmd's default MTU of 1500 (net_af_packet
            # refuses a larger one: its largest frame is 1518 bytes, and it takes them).
            argv += ["--max-pkt-len=%d" % (VETH_MTU + 18)]
        if self.queues > 1:
            argv += ["--rxq=%d" % self.queues, "--txq=%d" % self.queues]
        env = dict(os.environ)
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LD_PRELOAD"):
            env.pop(k, None)
        self.proc = vltest.Proc("testpmd-switch", argv, tb.dir, env=env)
        self.proc.interactive = True  # stopped with "stop", "quit"
        tb.procs.append(self.proc)

        def ready():
            if not self.proc.alive():
                raise RuntimeError("testpmd switch exited:\n" + self.proc.output()[-3000:])
            return all(os.path.exists(s) for s in socks.values())
        vltest._wait(ready, 30, "testpmd's net_vhost sockets")
        return socks

    def wait_ready(self, ports, timeout=30):
        # testpmd has no query we can use from here (its stdout is a block-buffered file):
        # the peers' own connect waits (gen, vnf) cover it.
        if not self.proc.alive():
            raise RuntimeError("testpmd switch exited:\n" + self.proc.output()[-3000:])

    def _cmd(self, text):
        try:
            self.proc.p.stdin.write(text.encode())
            self.proc.p.stdin.flush()
            return True
        except OSError:
            return False

    def cycles_begin(self):
        self._cmd("clear fwd stats all\n")

    def cycles_end(self):
        """The forwarding core's busy cycles per received packet since cycles_begin()
        (testpmd --record-core-cycles, `show fwd stats all`), or None."""
        start = len(self.proc.output())
        if not self._cmd("show fwd stats all\n"):
            return None
        pat = re.compile(r"CPU cycles/packet=([\d.]+)")
        found = {}

        def shown():
            m = pat.search(self.proc.output()[start:])
            if m:
                found["v"] = float(m.group(1))
            return m is not None
        # (No packets since the clear: no cycles line; give up after 3 s.)
        try:
            vltest._wait(shown, 3, "testpmd's forward statistics", interval=0.05)
        except vltest.TestTimeout:
            return None
        return {"switch": round(found["v"])} if found.get("v") else None

    def stop(self):
        if self.proc and self.proc.returncode is None:
            self.proc.stop()


class OvsSwitch:
    """OVS-DPDK 3.1: a private ovsdb-server and ovs-vswitchd (DPDK build) in the Testbed's
    directory, PMD on CPU 1 (pmd-cpu-mask), dpdkvhostuser ports (OVS is the server, sockets
    in its run directory), port-to-port flows ("xconnect") or the NORMAL action ("normal").
    Stopped by PID through the Testbed (SIGINT, then SIGKILL)."""
    name = "ovs-dpdk"

    def __init__(self, tb, mode="xconnect", tx_flush_interval=None, client_paths=None):
        """`client_paths`: {port: socket path}: those ports are dpdkvhostuserclient (OVS
        connects to a front-end listening there, and reconnects after a restart)."""
        self.tb, self.mode, self.flush = tb, mode, tx_flush_interval
        self.client_paths = client_paths or {}
        self.dir = os.path.join(tb.dir, "ovs")
        self.db = os.path.join(self.dir, "db.sock")
        self.env = None
        self.procs = []
        self.ports = []

    def _run(self, *argv, timeout=30):
        r = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, env=self.env, timeout=timeout, text=True)
        if r.returncode != 0:
            raise RuntimeError("%s failed (%d): %s" % (" ".join(argv), r.returncode, r.stderr))
        return r.stdout

    def vsctl(self, *args, timeout=60):
        return self._run("ovs-vsctl", "--db=unix:" + self.db, "--timeout=%d" % timeout, *args,
                         timeout=timeout + 5)

    def appctl(self, *args):
        return self._run("ovs-appctl", "-t", os.path.join(self.dir, "ovs-vswitchd.ctl"), *args)

    def ofctl(self, *args):
        return self._run("ovs-ofctl", *args)

    @staticmethod
    def remove_stale_taps():
        """The netdev datapath creates a kernel tap 'ovs-netdev' (and one per bridge); an
        ovs-vswitchd that was killed leaves them behind, and the next one then fails with
        'creating tap device failed: Device or resource busy'. Removed only while no
        ovs-vswitchd runs on this machine."""
        if subprocess.run(["pgrep", "-x", "ovs-vswitchd"], stdout=subprocess.DEVNULL).returncode == 0:
            return
        if subprocess.run(["pgrep", "-f", "ovs-vswitchd-dpdk"], stdout=subprocess.DEVNULL).returncode == 0:
            return
        for dev in ["ovs-netdev"] + ["br%d" % i for i in range(4)]:
            shown = subprocess.run(["ip", "-d", "link", "show", dev], capture_output=True,
                                   text=True).stdout
            if " tun " in shown or dev == "ovs-netdev" and shown:  # only OVS's own taps
                subprocess.run(["ip", "link", "del", dev], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)

    def start(self, ports, uplinks=None):
        """`uplinks`: {port: (uplink type, interface)}: those ports are `type=dpdk` with a
        vdev on the interface as dpdk-devargs (net_af_xdp, net_af_packet), the others
        dpdkvhostuser."""
        uplinks = uplinks or {}
        tb = self.tb
        self.remove_stale_taps()
        os.makedirs(self.dir)
        self.env = dict(os.environ, OVS_RUNDIR=self.dir, OVS_DBDIR=self.dir,
                        OVS_LOGDIR=self.dir, OVS_SYSCONFDIR=self.dir)
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LD_PRELOAD"):
            self.env.pop(k, None)
        conf = os.path.join(self.dir, "conf.db")
        self._run("ovsdb-tool", "create", conf, OVS_SCHEMA)
        p = vltest.Proc("ovsdb-server", [
            "ovsdb-server", conf, "--remote=punix:" + self.db,
            "--pidfile=" + os.path.join(self.dir, "ovsdb-server.pid"),
            "--unixctl=" + os.path.join(self.dir, "ovsdb-server.ctl"),
            "--log-file=" + os.path.join(self.dir, "ovsdb-server.log")], tb.dir, env=self.env)
        tb.procs.append(p)
        self.procs.append(p)
        vltest._wait(lambda: os.path.exists(self.db) or not p.alive(), 20, "ovsdb-server")
        if not p.alive():
            raise RuntimeError("ovsdb-server exited:\n" + p.output())
        prefix = "vlt%dovs" % os.getpid()
        tb.prefixes.append(prefix)
        self.vsctl("--no-wait", "init")
        self.vsctl("--no-wait", "set", "Open_vSwitch", ".",
                   "other_config:dpdk-init=true",
                   "other_config:pmd-cpu-mask=0x%x" % (1 << SWITCH_CPU),
                   'other_config:dpdk-extra="--no-huge --legacy-mem -m 2048 --no-pci '
                   '--file-prefix=%s%s"' % (prefix, "".join(" -d " + lib for lib in
                                                        uplink_plugins(uplinks))))
        if self.flush is not None:
            self.vsctl("--no-wait", "set", "Open_vSwitch", ".",
                       "other_config:tx-flush-interval=%d" % self.flush)
        self._start_vswitchd()
        # Bridges: one for p2p and cross-connects; NORMAL with VNFs needs one per side.
        self.bridges = self._bridges(ports)
        n_up = 0
        for br, bports in self.bridges:
            self.vsctl("add-br", br, "--", "set", "bridge", br, "datapath_type=netdev")
            for i, name in enumerate(bports):
                if name in uplinks:
                    kind, iface = uplinks[name]
                    # net_af_xdp takes the veth's MTU; net_af_packet refuses one above 1500.
                    mtu = ["mtu_request=%d" % VETH_MTU] if UPLINKS[kind] == "net_af_xdp" else []
                    self.vsctl("add-port", br, name, "--", "set", "Interface", name, "type=dpdk",
                               "options:dpdk-devargs=%s" % uplink_devargs(kind, iface, n_up),
                               *mtu, "ofport_request=%d" % (i + 1))
                    n_up += 1
                    continue
                if name in self.client_paths:
                    self.vsctl("add-port", br, name, "--", "set", "Interface", name,
                               "type=dpdkvhostuserclient",
                               "options:vhost-server-path=%s" % self.client_paths[name],
                               "ofport_request=%d" % (i + 1))
                    continue
                self.vsctl("add-port", br, name, "--", "set", "Interface", name,
                           "type=dpdkvhostuser", "ofport_request=%d" % (i + 1))
        self._flows()
        self.ports = ports
        socks = {p: os.path.join(self.dir, p) for p in ports
                 if p not in uplinks and p not in self.client_paths}
        vltest._wait(lambda: all(os.path.exists(s) for s in socks.values()), 30,
                     "OVS's dpdkvhostuser sockets")
        return socks

    def _start_vswitchd(self):
        p = vltest.Proc("ovs-vswitchd", [
            OVS_VSWITCHD, "unix:" + self.db,
            "--pidfile=" + os.path.join(self.dir, "ovs-vswitchd.pid"),
            "--unixctl=" + os.path.join(self.dir, "ovs-vswitchd.ctl"),
            "--log-file=" + os.path.join(self.dir, "ovs-vswitchd.log")], self.tb.dir, env=self.env)
        self.tb.procs.append(p)
        self.procs.insert(0, p)  # stopped before ovsdb-server
        vltest._wait(lambda: os.path.exists(os.path.join(self.dir, "ovs-vswitchd.ctl"))
                     or not p.alive(), 60, "ovs-vswitchd's control socket")
        if not p.alive():
            raise RuntimeError("ovs-vswitchd exited:\n" + p.output()[-3000:])
        self.vswitchd = p

    def restart_vswitchd(self):
        """ovs-vswitchd stopped with SIGTERM and started again on the same database (its
        ports come back from it); the OpenFlow flows, which OVS does not keep, are added
        again as soon as it answers."""
        self.vswitchd.stop(signal.SIGTERM, timeout=30)
        self.procs.remove(self.vswitchd)
        os.rename(self.vswitchd.log_path, self.vswitchd.log_path + ".%d" % time.time_ns())
        self._start_vswitchd()
        vltest._wait(lambda: self._try_flows(), 60, "ovs-vswitchd's bridge after a restart")

    def _try_flows(self):
        try:
            self._flows()
            return True
        except RuntimeError:
            return False

    def _flows(self):
        for br, bports in self.bridges:
            self.ofctl("del-flows", br)
            if self.mode == "xconnect":
                for i in range(0, len(bports), 2):
                    self.ofctl("add-flow", br, "in_port=%d,actions=output:%d" % (i + 1, i + 2))
                    self.ofctl("add-flow", br, "in_port=%d,actions=output:%d" % (i + 2, i + 1))
            else:
                self.ofctl("add-flow", br, "actions=NORMAL")

    def can_switch_mode(self, mode):
        """Whether set_mode(mode) works in place (the bridges stay as they are)."""
        return self._bridges(self.ports) == self._bridges_for(mode, self.ports)

    def set_mode(self, mode):
        """Replaces the flows (port-to-port or NORMAL) without restarting OVS."""
        assert self.can_switch_mode(mode)
        self.mode = mode
        self._flows()

    def _bridges(self, ports):
        return self._bridges_for(self.mode, ports)

    @staticmethod
    def _bridges_for(mode, ports):
        if mode == "xconnect" or len(ports) == 2:
            return [("br0", list(ports))]
        # NORMAL: one bridge per cross-connect pair (g0+v0, v1+g1, ...); p2p: one bridge.
        return [("br%d" % (i // 2), list(ports[i:i + 2])) for i in range(0, len(ports), 2)]

    def wait_ready(self, ports, timeout=90):
        """Until OVS reports each port's link up: it adds a vhost device only after
        reconfiguring its PMD threads, which took up to 15 s on the loaded test machine."""
        def up():
            for p in self.procs:
                if not p.alive():
                    raise RuntimeError("%s exited:\n%s" % (p.name, p.output()[-3000:]))
            return all(self.vsctl("get", "Interface", n, "link_state").strip() == "up"
                       for n in ports)
        vltest._wait(up, timeout, "OVS ports %s up" % list(ports), interval=0.2)

    def cycles_begin(self):
        self.appctl("dpif-netdev/pmd-stats-clear")

    def cycles_end(self):
        out = self.appctl("dpif-netdev/pmd-stats-show")
        m = re.search(r"avg processing cycles per packet:\s*([\d.]+)", out)
        return {"switch": round(float(m.group(1)))} if m else None

    def stop(self):
        for p in self.procs:
            if p.returncode is None:
                p.stop()
        self.remove_stale_taps()


def make_switch(tb, kind, mode, pmd_mode="poll", pmd_threads=1, queues=1):
    """`pmd_threads` applies to virtlink (--pmd-cores on 1 or 2 CPUs); `queues` to testpmd
    (net_vhost queues=N, --rxq/--txq=N). virtlink and OVS take what the front-end negotiates."""
    if kind == "virtlink":
        return VirtlinkSwitch(tb, mode, pmd_mode, pmd_threads=pmd_threads)
    if kind == "testpmd":
        return TestpmdSwitch(tb, mode, queues=queues)
    if kind == "ovs-dpdk":
        return OvsSwitch(tb, mode)
    raise ValueError(kind)


# ---------------------------------------------------------------------------------------
# Generator results

def _percentile(hist, count, q, vmax):
    """The C++ LatencyHistogram's percentile: upper bucket edge, capped at max."""
    if not count:
        return 0
    target = int(q * (count - 1)) + 1
    acc = 0
    for edge, n in hist:
        acc += n
        if acc >= target:
            return min(edge, vmax)
    return vmax


def merge_latency(streams):
    """One-way latency over every stream of a gen run: {min, avg, max, p50, p99, p999} in
    ns (None when nothing was received), plus the merged histogram [(edge, count)]."""
    hist = {}
    count, total = 0, 0.0
    mins, maxs = [], []
    for s in streams:
        h = s.get("latency_histogram") or []
        c = sum(n for _, n in h)
        if not c:
            continue
        for edge, n in h:
            hist[edge] = hist.get(edge, 0) + n
        count += c
        total += s["latency_ns"]["avg"] * c
        mins.append(s["latency_ns"]["min"])
        maxs.append(s["latency_ns"]["max"])
    if not count:
        return None, []
    h = sorted(hist.items())
    vmax = max(maxs)
    lat = {"min": min(mins), "avg": round(total / count), "max": vmax,
           "p50": _percentile(h, count, 0.5, vmax), "p99": _percentile(h, count, 0.99, vmax),
           "p999": _percentile(h, count, 0.999, vmax)}
    return lat, h


class GenRun:
    """The totals of one `virtlink gen` run (one trial)."""

    def __init__(self, doc, rate_pps, duration_s):
        self.doc = doc
        st = doc["streams"]
        self.rate_pps = rate_pps
        self.planned = sum(s["planned"] for s in st)
        self.offered = sum(s["offered"] for s in st)
        self.tx = sum(s["tx"] for s in st)
        self.ring_full = sum(s["tx_ring_full"] for s in st)
        self.skipped = sum(s["late_skipped"] for s in st)
        self.rx = sum(s["rx"] for s in st)
        self.lost = sum(s["lost"] for s in st)
        self.dup = sum(s["duplicates"] for s in st)
        self.reordered = sum(s["reordered"] for s in st)
        self.duration_s = duration_s
        self.offered_pps = self.offered / duration_s if duration_s else 0
        self.loss = self.lost / self.offered if self.offered else 1.0
        self.latency, self.histogram = merge_latency(st)

    def offered_fraction(self):
        return self.offered / self.planned if self.planned else 0.0


# ---------------------------------------------------------------------------------------
# A topology: switch + VNFs + generator

class Topology:
    def __init__(self, tb, topology, switch, vnf_mode="io", vnf_pmd_mode="interrupt",
                 queue_size=1024, ring="split", queues=1, uplink=None, links=None,
                 gen_wire="af-xdp", vnf_cpu=None, vnf_batch=False):
        """`queue_size`: entries of the generator's rings (the VNFs keep their default, 256,
        QEMU's default for a guest's virtio-net queues). `ring` (split | packed) and `queues`
        (queue pairs): the generator's virtqueues (gen --ring, --queues). `uplink` (a key of
        UPLINKS) with `links` (VethLinks over the topology's uplink ports): the "P" is a
        veth, the switch's uplink on one end and the generator, in the links' namespace, on
        the other through a `gen_wire` port (af-xdp or af-packet). `vnf_cpu`: pin every VNF
        to this CPU (vnf --cpu; default: unpinned). `vnf_batch`: run the VNFs under
        SCHED_BATCH (`chrt -b 0`): a VNF woken by a notification does not preempt the
        process that sent it (a neighbour VNF in the middle of its batch, or the generator),
        as VNFs with cores of their own would not (bench/README.md "VNFs sharing a CPU")."""
        self.vnf_cpu, self.vnf_batch = vnf_cpu, vnf_batch
        self.ring, self.queues = ring, queues
        self.uplink, self.links, self.gen_wire = uplink, links, gen_wire
        if uplink is not None:
            if topology not in UPLINK_TOPOLOGIES:
                raise ValueError("no uplink variant of %s" % topology)
            self.ports, self.vnf_ports, self.uplinks = UPLINK_TOPOLOGIES[topology]
            if links is None or set(links.pairs) != set(self.uplinks):
                raise ValueError("%s --uplink needs VethLinks(%s)" % (topology, self.uplinks))
        elif topology not in TOPOLOGIES:
            raise ValueError("unknown topology %s" % topology)
        else:
            self.uplinks = []
        self.tb, self.topology, self.switch = tb, topology, switch
        if uplink is None:
            self.ports, self.vnf_ports = TOPOLOGIES[topology]
        self.vnf_mode, self.vnf_pmd_mode, self.queue_size = vnf_mode, vnf_pmd_mode, queue_size
        self.socks = {}
        self.vnfs = []
        self.gen = None
        self.unidirectional = False
        self._n = 0

    @property
    def n_vnfs(self):
        return len(self.vnf_ports)

    def start(self):
        if self.uplink is not None:
            self.socks = self.switch.start(self.ports, uplinks={
                u: (self.uplink, self.links.sw(u)) for u in self.uplinks})
        else:
            self.socks = self.switch.start(self.ports)
        for i, (a, b) in enumerate(self.vnf_ports):
            argv = [vltest.VIRTLINK, "--log-level", "warn", "vnf",
                    "--port", "vhost-user-client:" + self.socks[a],
                    "--port", "vhost-user-client:" + self.socks[b],
                    "--mode", self.vnf_mode, "--pmd-mode", self.vnf_pmd_mode]
            if self.vnf_cpu is not None:
                argv += ["--cpu", str(self.vnf_cpu)]
            if self.vnf_batch:
                argv = ["chrt", "-b", "0"] + argv
            p = vltest.Proc("vnf%d" % i, argv, self.tb.dir)
            self.tb.procs.append(p)
            self.vnfs.append(p)
        vnf_side = [p for pair in self.vnf_ports for p in pair]
        if vnf_side:
            self.switch.wait_ready(vnf_side)
        for p in self.vnfs:
            if not p.alive():
                raise RuntimeError("%s exited:\n%s" % (p.name, p.output()[-3000:]))

    def gen_ports(self):
        return [self.ports[0], self.ports[-1]]

    def start_gen(self, max_frame=1518, unidirectional=None):
        """Starts the generator (`virtlink gen --serve`): connected to the switch's gen
        ports until stop(), running one trial per trial() call (one learning phase, send,
        drain each). Waits until its ports are negotiated. `unidirectional` None: as the
        topology is (UNIDIRECTIONAL). With an uplink the generator runs in the veths'
        namespace, its port on each uplink's veth a `gen_wire` port."""
        if unidirectional is None:
            unidirectional = self.topology in UNIDIRECTIONAL
        argv = [vltest.VIRTLINK, "--log-level", "warn", "gen"]
        if self.uplinks:
            argv = ["ip", "netns", "exec", self.links.ns] + argv
        for i, p in enumerate(self.gen_ports()):
            if p in self.uplinks:
                argv += ["--port", "g%d=%s:%s" % (i, self.gen_wire, self.links.gen(p))]
            else:
                argv += ["--port", "g%d=vhost-user-client:%s" % (i, self.socks[p])]
        argv += ["--size", str(max(max_frame, 1518)), "--cpu", str(GEN_CPU),
                 "--queue-size", str(self.queue_size), "--ring", self.ring,
                 "--queues", str(self.queues), "--serve"]
        if unidirectional:
            argv.append("--unidirectional")
        self.unidirectional = unidirectional
        self.gen = vltest.Proc("gen", argv, self.tb.dir)
        self.tb.procs.append(self.gen)

        def ready():
            if not self.gen.alive():
                raise RuntimeError("gen exited:\n" + self.gen.output()[-3000:])
            return "ready" in self.gen.output()
        vltest._wait(ready, 60, "the generator's ports")
        self.switch.wait_ready(self.gen_ports())

    def trial(self, rate_pps, frame_size, duration_s, flows=1, timeout=None):
        """One trial: the generator offers `rate_pps` in total, split over its streams (2,
        or 1 unidirectional), for `duration_s`. Returns a GenRun; `.cycles` holds the
        switch's cycles per packet over the trial where the switch reports them."""
        if self.gen is None:
            self.start_gen()
        self._n += 1
        out = os.path.join(self.tb.dir, "trial-%d.json" % self._n)
        streams = 1 if self.unidirectional else 2
        self.switch.cycles_begin()
        cmd = "run %.3f %s %s %d %s\n" % (rate_pps / streams, frame_size, duration_s, flows, out)
        try:
            self.gen.p.stdin.write(cmd.encode())
            self.gen.p.stdin.flush()
        except OSError as e:
            raise RuntimeError("gen: cannot send a trial (%s):\n%s" % (e, self.gen.output()[-3000:]))
        mark = "error "

        def done():
            if os.path.exists(out):
                return True
            if not self.gen.alive():
                raise RuntimeError("gen exited:\n" + self.gen.output()[-3000:])
            text = self.gen.output()
            if mark in text[-2000:]:
                raise RuntimeError("gen: " + text[text.rindex(mark):].splitlines()[0])
            return False
        vltest._wait(done, timeout or duration_s + 30, "trial %d" % self._n, interval=0.05)
        cycles = self.switch.cycles_end()
        with open(out) as f:
            doc = json.load(f)
        os.unlink(out)
        run = GenRun(doc, rate_pps, duration_s)
        run.cycles = cycles
        return run

    def stop_gen(self):
        if self.gen is not None and self.gen.returncode is None:
            try:
                self.gen.p.stdin.write(b"quit\n")
                self.gen.p.stdin.flush()
                self.gen.p.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self.gen.stop()
        self.gen = None

    def vnf_stats(self):
        """Stops the VNFs and returns their final statistics (JSON they print on exit)."""
        out = []
        for p in self.vnfs:
            p.stop()
            text = p.output().strip().splitlines()
            try:
                out.append(json.loads(text[-1]))
            except (ValueError, IndexError):
                out.append(None)
        return out

    def stop(self):
        self.stop_gen()
        for p in self.vnfs:
            if p.returncode is None:
                p.stop()
        self.switch.stop()
