#!/usr/bin/env python3
"""One QEMU/TCG guest on a vhost-user port, and the switch's uplinks to the kernel (README
"Uplinks", "VLANs"), all in network namespaces and veth pairs made here. The guest boots
once (setUpClass); each part starts its own switch (in a namespace of its own) on the same
socket, to which QEMU reconnects, and runs in order:

  1. af-xdp on a veth whose peer is a namespace's stack: ping both ways, iperf3 both ways,
     10 MiB each way with matching md5; the XDP program is ours, the guest's TSO frames are
     segmented in software for the wire;
  2. the same through dpdk:net_af_xdp0,iface=IF (EAL with --no-huge);
  3. the same through af-packet (TSO frames whole both ways), beside an af-xdp port on an
     interface where someone else's XDP program is attached: it falls back to af-packet,
     says so, leaves that program alone and carries traffic;
  4. a tap into the switch namespace's own stack: TSO frames whole both ways (gso_passed),
     iperf3 both ways, 10 MiB each way;
  5. VLANs: the guest (access VLAN 10) and the switch namespace's stack behind a tap (access
     VLAN 20) have the same address; a trunk (10, 20) to a second virtlink whose access ports
     are taps into two namespaces, again with one address. Each tenant reaches its own peer
     and no frame of one tenant, broadcasts included, reaches the other (counted per source
     MAC by raw sockets in each namespace, and in the MAC tables);
  6. hostile input on an af-xdp trunk: runts, tagged runts, frames above the MTU, odd
     ethertypes and tags, a flood of random source MACs: each counted where the README says,
     none delivered malformed, and the guest still pings through afterwards.

Asserts on counters (the switch's, the kernel's, the guest's), checksums and who answered,
never on rates. Every switch must exit 0 on SIGTERM without a sanitizer report (the ASan
build runs this file too).

    PYTHONPATH=pylib:bench python3 tests/interop/test_uplinks.py --virtlink build/virtlink [-v]
"""
import contextlib
import glob
import json
import os
import random
import signal
import subprocess
import time
import unittest

from vltestlib import netns, vlguest, vltest
from vltestlib.netns import NsHost, Sniffer, mac_bytes
from vltestlib.vlguest import iperf, ping, transfer
from vltestlib.vltest import log

GUEST_MAC = "52:54:00:00:00:01"
GUEST_CIDR = "10.0.0.1/24"
PEER_MAC = "02:00:00:00:00:02"
PEER_CIDR, PEER_IP = "10.0.0.2/24", "10.0.0.2"
XFER_KIB = 10 * 1024  # 10 MiB each way
IPERF_S = 2
# Drops a congested TCP stream may cause (a guest slow to post receive buffers, a device
# whose queue was full): TCP recovers them. Any other reason fails.
CONGESTION_DROPS = ("no_rx_buffer",)


def delta(after, before, port, *keys):
    """after[port][k1][k2]... - before[...]."""
    a, b = after[port], before[port]
    for k in keys:
        a, b = a[k], b[k]
    return a - b


def drops_delta(after, before):
    """{(port, reason): n} of the drops counted between the two stats."""
    out = {}
    for name, p in after.items():
        for k, v in p["drops"].items():
            d = v - before.get(name, {"drops": {}})["drops"].get(k, 0)
            if d:
                out[(name, k)] = d
    return out


def ctl_json(path, *args):
    r = subprocess.run([vltest.VIRTLINK, "ctl", "--control", path] + list(args) + ["--json"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=10,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise AssertionError("ctl %s failed (%d): %s" % (" ".join(args), r.returncode, r.stderr))
    return json.loads(r.stdout)


def fdb_by_vlan(path):
    """{(mac, vlan): port} of a switch's MAC table."""
    return {(e["mac"], e["vlan"]): e["port"] for e in ctl_json(path, "fdb", "all")}


@vltest.ctest("uplinks", timeout=240, asan=True, qemu=True)
class Uplinks(unittest.TestCase):
    tb = None
    g = None

    # -- one guest for the whole class ------------------------------------------------------
    @classmethod
    def setUpClass(cls):
        cls.t0 = time.monotonic()
        cls.tb = vlguest.GuestTestbed(None)
        try:
            # A first switch with the guest's port only: QEMU waits for its back-end.
            cls.tb.start_switch(ports=["vm"], pmd_cores=None, extra=["--pmd-mode", "interrupt"])
            cls.g = cls.tb.start_guest("g", "vm", GUEST_CIDR, mac=GUEST_MAC, extra=["--iperf"])
            cls.g.wait_ready()
            cls.tb.wait_connected(["vm"])
            cls.tb.stop_switch()
        except BaseException:
            cls.tb.close(failed=True)
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.tb is not None:
            cls.tb.close()
        log("uplinks: %.0f s in all (guest boot included)" % (time.monotonic() - cls.t0))

    @contextlib.contextmanager
    def part(self, tag):
        """A part's namespaces (a netns.Lab) and switches: removed and stopped whatever
        happens (each switch must exit 0 without a sanitizer report), logs dumped if the
        part failed."""
        lab = netns.Lab(tag, logdir=self.tb.dir)
        self.far = None
        t0 = time.monotonic()
        failed = True
        try:
            yield lab
            failed = False
        finally:
            try:
                problems = []
                for p in (self.far, self.tb.switch):
                    if p is None or p.returncode is not None:
                        continue
                    rc = p.stop(signal.SIGTERM, timeout=15)
                    text = vltest.read_text(p.log_path)
                    if rc != 0:
                        problems.append("%s exited with %s" % (p.name, rc))
                    problems += ["%s: sanitizer report %r" % (p.name, m)
                                 for m in vltest.SANITIZER_MARKERS if m in text]
                if failed or problems:
                    self.tb.dump_logs()
            finally:
                lab.close()
            log("part %s: %.1f s" % (tag, time.monotonic() - t0))
            if problems and not failed:
                raise AssertionError("; ".join(problems))

    def start(self, ns, args, config=None):
        """The switch of a part in namespace `ns`: the guest's port vm (from `config`'s TOML
        if given) and `args`; waits for the guest's rings and for every uplink to be
        connected. Returns its stats."""
        tb = self.tb
        tb.start_switch(ports=[] if config else ["vm"], pmd_cores=None, config=config,
                        extra=list(args) + ["--pmd-mode", "interrupt"], netns=ns.name)
        tb.wait_connected(["vm"], timeout=30)

        def up():
            return all(p["state"] == "connected" for p in tb.ctl("ports"))
        vltest._wait(up, 15, "every uplink connected", 0.1)
        self.g.run("ip neigh flush dev eth0")
        return tb.switch_stats()

    def start_far(self, ns, args):
        """A second switch in namespace `ns` (control socket DIR/ctl-far)."""
        path = os.path.join(self.tb.dir, "ctl-far")
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "abort_on_error=0:detect_leaks=1")
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        argv = ns.argv(vltest.VIRTLINK, "--log-level", "info", "switch", *args,
                       "--pmd-mode", "interrupt", "--control", path)
        self.far = vltest.Proc("switch-far", argv, self.tb.dir, env=env)
        self.tb.procs.append(self.far)

        def up():
            if not self.far.alive():
                raise AssertionError("the far switch exited:\n" + self.far.output())
            try:
                return all(p["state"] == "connected" for p in ctl_json(path, "ports"))
            except AssertionError:
                return False
        vltest._wait(up, 15, "the far switch's ports connected", 0.1)
        return path

    # -- what parts 1 to 3 share --------------------------------------------------------------
    def exercise(self, port, host, xfer_kib=XFER_KIB, iperf_s=IPERF_S):
        """Ping both ways, iperf3 both ways and XFER_KIB each way with matching md5 between
        the guest and `host` (a netns.NsHost behind uplink `port`). Asserts the uplink's
        counters moved with the traffic and nothing was dropped but for congestion (and
        nothing at all during the pings). Returns the stats before and after."""
        tb, g = self.tb, self.g
        s0 = tb.wait_quiet()
        ping(self, g, host, count=5)
        ping(self, host, g, count=5)
        s1 = tb.wait_quiet()
        log("%s after the pings: %s" % (port, json.dumps(s1[port]["uplink"])))
        # 5 echo requests and 5 replies each way, the ARP exchanges besides.
        self.assertGreaterEqual(delta(s1, s0, port, "uplink", "wire_rx_packets"), 10)
        self.assertGreaterEqual(delta(s1, s0, port, "uplink", "wire_tx_packets"), 10)
        self.assertEqual(drops_delta(s1, s0), {}, "drops during the pings")
        self.assertEqual(delta(s1, s0, port, "uplink", "wire_tx_dropped"), 0)

        iperf(self, host, g, iperf_s)                # host -> guest
        iperf(self, host, g, iperf_s, reverse=True)  # guest -> host
        try:
            transfer(self, g, host, kib=xfer_kib, port=5001)
            transfer(self, host, g, kib=xfer_kib, port=5002)
        finally:
            host.cleanup()
        s2 = tb.wait_quiet()
        log("%s after the bulk traffic: %s; offload %s; switch %s" %
            (port, json.dumps(s2[port]["uplink"]), json.dumps(s2[port]["offload"]),
             vltest.fmt_stats(s2)))
        # Every frame the device gave was taken by the switch; frames the switch delivered
        # to the port reached the device, or were refused by it and counted (a TSO frame
        # segmented in software counts once in tx_packets, each segment on the wire).
        self.assertEqual(delta(s2, s1, port, "uplink", "wire_rx_packets"),
                         delta(s2, s1, port, "rx_packets"))
        self.assertGreaterEqual(delta(s2, s1, port, "uplink", "wire_tx_packets") +
                                delta(s2, s1, port, "uplink", "wire_tx_dropped"),
                                delta(s2, s1, port, "tx_packets"))
        self.assertGreater(delta(s2, s1, port, "rx_bytes"), xfer_kib * 1024)
        self.assertGreater(delta(s2, s1, port, "tx_bytes"), xfer_kib * 1024)
        self.assertGreater(delta(s2, s1, "vm", "rx_bytes"), xfer_kib * 1024)
        self.assertGreater(delta(s2, s1, "vm", "tx_bytes"), xfer_kib * 1024)
        unexpected = {k: v for k, v in drops_delta(s2, s1).items() if k[1] not in CONGESTION_DROPS}
        self.assertEqual(unexpected, {}, vltest.fmt_stats(s2))
        wdrop = delta(s2, s1, port, "uplink", "wire_tx_dropped")
        log("%s: frames refused by the device during the bulk traffic: %d; congestion drops %s"
            % (port, wdrop, drops_delta(s2, s1) or "none"))
        vltest.assert_no_corruption(self, s2)
        return s0, s2

    def peer(self, lab, sw, ifname, checksum_offload=True):
        """A veth IFNAME (switch side, in `sw`) / IFNAME + "p" in a new namespace with
        PEER_CIDR; returns the namespace's NsHost."""
        ns = lab.netns("p")
        lab.veth(ifname, sw, ifname + "p", ns, mac_b=PEER_MAC)
        ns.addr(ifname + "p", PEER_CIDR)
        if not checksum_offload:
            # README (af-xdp): AF_XDP carries no checksum state, so the peer must not leave
            # its checksums to offload.
            ns.run("ethtool", "-K", ifname + "p", "tx", "off")
        return NsHost(ns, PEER_IP, name="peer-" + ifname, workdir=self.tb.dir)

    # -- 1. af-xdp ---------------------------------------------------------------------------
    def test_1_af_xdp(self):
        with self.part("x") as lab:
            sw = lab.netns("sw")
            host = self.peer(lab, sw, "vx0", checksum_offload=False)
            st = self.start(sw, ["--port", "up=af-xdp:vx0"])
            self.assertEqual(st["up"]["type"], "af-xdp", "af-xdp fell back: %s" %
                             self.tb.switch.output()[-2000:])
            self.assertFalse(st["up"]["uplink"]["offloads"])
            link = sw.ip("link", "show", "vx0").stdout
            self.assertIn("virtlink_xsk", link, "our XDP program is not attached")
            s0, s1 = self.exercise("up", host)
            # The guest's TSO frames were cut in software for a wire without offloads.
            self.assertGreater(delta(s1, s0, "up", "offload", "sw_gso_frames"), 0)
            dev = s1["up"]["uplink"]["device"]
            for k in ("rx_bad_desc", "rx_truncated", "tx_bad_desc", "tx_bad_len",
                      "rx_invalid_descs", "tx_invalid_descs"):
                self.assertEqual(dev[k], 0, "af-xdp %s: %s" % (k, dev))
            # The program goes with the switch.
            self.tb.stop_switch()
            self.assertNotIn("xdp", sw.ip("link", "show", "vx0").stdout)

    # -- 2. dpdk:net_af_xdp ------------------------------------------------------------------
    def test_2_dpdk_af_xdp(self):
        with self.part("d") as lab:
            sw = lab.netns("sw")
            host = self.peer(lab, sw, "vd0", checksum_offload=False)
            st = self.start(sw, ["--port", "up=dpdk:net_af_xdp0,iface=vd0"])
            self.assertEqual(st["up"]["type"], "dpdk")
            self.assertIn("--no-huge", self.tb.switch.output(),
                          "EAL without hugepages is what this machine has")
            s0, s1 = self.exercise("up", host)
            self.assertGreater(delta(s1, s0, "up", "offload", "sw_gso_frames"), 0)
            dev = s1["up"]["uplink"]["device"]
            log("dpdk device counters: %s" % dev)
            self.assertGreater(dev["eth_rx_packets"], 0)
            self.assertGreater(dev["eth_tx_packets"], 0)
            self.assertEqual(dev["eth_rx_errors"], 0, dev)

    # -- 3. af-packet, and af-xdp falling back to it -----------------------------------------
    def test_3_af_packet_and_fallback(self):
        progs = sorted(glob.glob("/usr/lib/*/bpf/xsk_def_xdp_prog.o"))
        self.assertTrue(progs, "libxdp's xsk_def_xdp_prog.o is missing (libxdp1, a "
                        "dependency of libxdp-dev: scripts/install-deps.sh)")
        with self.part("p") as lab:
            sw = lab.netns("sw")
            host = self.peer(lab, sw, "vp0")
            # A second peer behind an interface where someone else's XDP program (libxdp's
            # default AF_XDP program, which passes what no socket takes) is attached.
            fns = lab.netns("f")
            lab.veth("vf0", sw, "vf0p", fns, mac_b="02:00:00:00:00:03")
            fns.addr("vf0p", "10.0.0.3/24")
            sw.run("ip", "link", "set", "dev", "vf0", "xdpgeneric", "obj", progs[0], "sec", "xdp")
            theirs = sw.ip("link", "show", "vf0").stdout
            self.assertIn("xsk_def_prog", theirs)
            st = self.start(sw, ["--port", "up=af-packet:vp0", "--port", "fb=af-xdp:vf0"])
            out = self.tb.switch.output()
            self.assertEqual(st["up"]["type"], "af-packet")
            self.assertTrue(st["up"]["uplink"]["offloads"])
            self.assertEqual(st["fb"]["type"], "af-packet", "af-xdp did not fall back")
            self.assertEqual(st["fb"]["state"], "connected")
            self.assertRegex(out, r"warn.*port fb: AF_XDP on vf0: .*cannot attach XDP.*"
                             r"using AF_PACKET instead")
            self.assertIn("xsk_def_prog", sw.ip("link", "show", "vf0").stdout,
                          "the other program was replaced")
            s0, s1 = self.exercise("up", host)
            # TSO frames whole both ways: the guest's to the veth, the peer's to the guest.
            self.assertGreater(delta(s1, s0, "up", "offload", "gso_passed"), 0)
            self.assertGreater(delta(s1, s0, "vm", "offload", "gso_passed"), 0)
            self.assertEqual(delta(s1, s0, "up", "offload", "sw_gso_frames"), 0)
            dev = s1["up"]["uplink"]["device"]
            self.assertEqual((dev["rx_truncated"], dev["rx_bad"]), (0, 0), dev)
            # The fallback port carries traffic too.
            f0 = self.tb.switch_stats()
            fhost = NsHost(fns, "10.0.0.3", name="peer-vf0", workdir=self.tb.dir)
            ping(self, self.g, fhost, count=5)
            try:
                transfer(self, fhost, self.g, kib=1024, port=5003)
            finally:
                fhost.cleanup()
            f1 = self.tb.wait_quiet()
            self.assertGreater(delta(f1, f0, "fb", "uplink", "wire_rx_packets"), 5)
            self.assertGreater(delta(f1, f0, "fb", "rx_bytes"), 1 << 20)
            self.assertEqual(drops_delta(f1, f0), {})
            # Stopped, the switch leaves the other program where it was.
            self.tb.stop_switch()
            self.assertIn("xsk_def_prog", sw.ip("link", "show", "vf0").stdout)

    # -- 4. tap ------------------------------------------------------------------------------
    def test_4_tap(self):
        with self.part("t") as lab:
            sw = lab.netns("sw")
            st = self.start(sw, ["--port", "host=tap:vlhost"])
            self.assertEqual((st["host"]["type"], st["host"]["state"]), ("tap", "connected"))
            self.assertTrue(st["host"]["uplink"]["offloads"])
            sw.addr("vlhost", PEER_CIDR)
            host = NsHost(sw, PEER_IP, name="host-stack", workdir=self.tb.dir)
            s0, s1 = self.exercise("host", host)
            # TSO frames whole both ways: the guest's into the host stack, the host's
            # into the guest.
            passed_in = delta(s1, s0, "host", "offload", "gso_passed")
            passed_out = delta(s1, s0, "vm", "offload", "gso_passed")
            log("TSO frames passed whole: guest -> host %d, host -> guest %d" %
                (passed_in, passed_out))
            self.assertGreater(passed_in, 0)
            self.assertGreater(passed_out, 0)
            self.assertEqual(delta(s1, s0, "host", "offload", "sw_gso_frames"), 0)
            dev = s1["host"]["uplink"]["device"]
            self.assertEqual((dev["rx_truncated"], dev["tx_errors"], dev["tx_control_errors"]),
                             (0, 0, 0), dev)

    # -- 5. VLANs ----------------------------------------------------------------------------
    def test_5_vlans(self):
        T20A, P10, P20 = "02:00:00:00:20:01", "02:00:00:00:10:02", "02:00:00:00:20:02"
        g = self.g
        with self.part("v") as lab:
            a, b, c = lab.netns("a"), lab.netns("b"), lab.netns("c")
            lab.veth("tra", a, "trb", b)
            # Switch A (the guest's): the guest in VLAN 10, A's own stack in VLAN 20 behind
            # tap t20 with the guest's address, the trunk to B.
            self.start(a, ["--port", "t20=tap:t20", "--port", "up=af-packet:tra",
                           "--port-set", "vm:vlan=10", "--port-set", "t20:vlan=20",
                           "--port-set", "up:trunks=10,20"])
            a.ip("link", "set", "t20", "address", T20A)
            a.addr("t20", GUEST_CIDR)
            # Switch B (the far end): its own stack in VLAN 10 behind tap p10, a namespace
            # in VLAN 20 behind tap p20, both with the same address.
            far = self.start_far(b, ["--port", "up=af-packet:trb", "--port", "p10=tap:p10",
                                     "--port", "p20=tap:p20", "--port-set", "up:trunks=10,20",
                                     "--port-set", "p10:vlan=10", "--port-set", "p20:vlan=20"])
            b.ip("link", "set", "p10", "address", P10)
            b.addr("p10", PEER_CIDR)
            b.ip("link", "set", "p20", "netns", c.name)
            c.ip("link", "set", "p20", "address", P20)
            c.addr("p20", PEER_CIDR)
            c.up("p20")
            tenant20 = NsHost(a, "10.0.0.1", name="tenant20-a")
            sniff = {"t20": Sniffer(a, "t20"), "p10": Sniffer(b, "p10"), "p20": Sniffer(c, "p20")}
            try:
                # Tenant 20 alone first (the guest is silent: no IPv6, no traffic): nothing
                # reaches the guest's port.
                sa0 = self.tb.wait_quiet()
                ping(self, tenant20, PEER_IP, count=5)
                tenant20.ping_out("10.0.0.255", 3, 0.2, "-b")  # broadcasts (no replies)
                sa1 = self.tb.wait_quiet()
                self.assertEqual(delta(sa1, sa0, "vm", "tx_packets"), 0,
                                 "tenant 20's frames reached the guest (VLAN 10)")
                # Then the guest, tenant 10.
                ping(self, g, PEER_IP, count=5)
                g.ping_out("10.0.0.255", 3, 0.2, "-b")
                self.tb.wait_quiet()
            finally:
                counts = {k: s.stop() for k, s in sniff.items()}
            log("frames by source MAC/ethertype/broadcast: %s" % json.dumps(counts))

            def frm(where, mac, broadcast=None):
                return sniff[where].frames_from(mac, broadcast)
            # Each tenant's frames, broadcasts included, reached its own far peer only.
            self.assertGreaterEqual(frm("p10", GUEST_MAC), 5 + 3 + 1)  # echo, broadcasts, ARP
            self.assertGreaterEqual(frm("p10", GUEST_MAC, True), 3 + 1)
            self.assertGreaterEqual(frm("p20", T20A), 5 + 3 + 1)
            self.assertGreaterEqual(frm("p20", T20A, True), 3 + 1)
            self.assertGreaterEqual(frm("t20", P20), 5)  # tenant 20's replies
            for where, mac in (("p10", T20A), ("p10", P20), ("p20", GUEST_MAC),
                               ("p20", P10), ("t20", GUEST_MAC), ("t20", P10)):
                self.assertEqual(frm(where, mac), 0, "%s saw %d frames of %s" %
                                 (where, frm(where, mac), mac))
            # Who answered for 10.0.0.2, on each side.
            self.assertIn(P10, g.neigh(PEER_IP).lower())
            self.assertIn(P20, tenant20.neigh(PEER_IP).lower())
            # Both MAC tables keyed by (MAC, VLAN).
            fa, fb = fdb_by_vlan(self.tb.ctl_path), fdb_by_vlan(far)
            log("MAC tables: A %s; B %s; the far switch's ports: %s" %
                (fa, fb, {p["name"]: p["state"] for p in ctl_json(far, "ports")}))
            for table, want in ((fa, {(GUEST_MAC, 10): "vm", (P10, 10): "up",
                                      (T20A, 20): "t20", (P20, 20): "up"}),
                                (fb, {(GUEST_MAC, 10): "up", (P10, 10): "p10",
                                      (T20A, 20): "up", (P20, 20): "p20"})):
                for k, port in want.items():
                    self.assertEqual(table.get(k), port, "%s in %s" % (k, table))
                for mac, vlan in table:
                    self.assertIn(vlan, (10, 20), table)
            sa, sb = self.tb.switch_stats(), {p["name"]: p for p in ctl_json(far, "stats")["ports"]}
            for st in (sa, sb):
                vltest.assert_no_corruption(self, st)
                self.assertEqual(vltest.drops_by_reason(st)["vlan_not_allowed"], 0,
                                 vltest.fmt_stats(st))
            self.assertGreaterEqual(sa["up"]["uplink"]["device"]["rx_vlan_restored"], 5,
                                    "the kernel's VLAN acceleration took the tags: put back")

    # -- 6. hostile wire input -----------------------------------------------------------------
    def test_6_hostile_wire(self):
        g = self.g
        cfg = ('[[port]]\nname = "vm"\ntype = "vhost-user"\npath = "%s"\nmtu = 1500\n' %
               self.tb.sock("vm"))
        with self.part("h") as lab:
            sw = lab.netns("sw")
            ns = lab.netns("p")
            lab.veth("vh0", sw, "vh0p", ns, mac_b=PEER_MAC, mtu=3000)
            ns.addr("vh0p", PEER_CIDR)
            ns.run("ethtool", "-K", "vh0p", "tx", "off")
            st = self.start(sw, ["--port", "up=af-xdp:vh0", "--port", "t20=tap:t20",
                                 "--port-set", "vm:vlan=10", "--port-set", "t20:vlan=20",
                                 "--port-set", "up:trunks=10,20", "--port-set", "up:native_vlan=10",
                                 "--mac-limit", "1000"], config=cfg)
            self.assertEqual(st["up"]["type"], "af-xdp")
            host = NsHost(ns, PEER_IP, name="peer-vh0")
            ping(self, g, host, count=3)  # the guest's MAC learned, the path works
            glen0 = int(g.run("cat /sys/class/net/eth0/statistics/rx_length_errors"))
            s0 = self.tb.wait_quiet()

            bc, unk = b"\xff" * 6, mac_bytes("02:ee:00:00:00:01")  # broadcast, unknown unicast
            src = mac_bytes("02:66:00:00:00:01")

            rnd = random.Random(1)

            def tag(vid, tpid=b"\x81\x00"):
                return tpid + vid.to_bytes(2, "big")

            def pad(f, n):
                return f + bytes(rnd.getrandbits(8) for _ in range(n - len(f)))
            runts_under_14 = [b"\x01", bc[:6], bc + src[:6], bc + src + b"\x08"]
            runts = [pad(bc + src + b"\x08\x00", n) for n in (14, 15, 20, 42, 59)]
            # 802.1Q tags without room for the ethertype after them (< 18 bytes): malformed.
            bad_tags = [(bc + src + tag(v))[:n] for v in (10, 20) for n in (14, 15, 16, 17)]
            short_tags = {10: [pad(bc + src + tag(10) + b"\x08\x00", n) for n in (18, 19)],
                          20: [pad(bc + src + tag(20) + b"\x08\x00", n) for n in (18, 19, 60)]}
            big = {0: [pad(bc + src + b"\x08\x00", n) for n in (1600, 2500, 3014)],
                   20: [pad(bc + src + tag(20) + b"\x08\x00", n) for n in (1600, 2500, 3018)]}
            too_big_for_kernel = [pad(bc + src + b"\x08\x00", 3100)]
            odd_types = [pad(unk + src + t.to_bytes(2, "big"), 64)
                         for t in (0x0000, 0x0001, 0x05dc, 0x0600, 0xffff, 0x88a8, 0x9100)]
            odd_types.append(pad(unk + src + tag(10) + tag(20), 64))  # 802.1Q in 802.1Q
            not_allowed = [pad(unk + src + tag(v) + b"\x08\x00", 64) for v in (30, 1, 4095, 0)]
            not_allowed.append(pad(unk + src + tag(10, b"\x88\xa8") + b"\x08\x00", 64))
            vlan_drops = len(bad_tags) + len(not_allowed) - 1  # 88a8: untagged, native VLAN

            # Bursts where frames dropped at ingress come before frames forwarded (each of
            # its own source, 02:67:00:00:ROUND:I): what is forwarded arrives once and intact.
            mixed, mixed20 = [], []
            for rd in range(20):
                for i in range(32):
                    f = pad(bc + mac_bytes("02:67:00:00:%02x:%02x" % (rd, i)) +
                            tag(30 if i < 12 else 20) + b"\x08\x00", 64)
                    mixed.append(f)
                    if i >= 12:
                        mixed20.append("02:67:00:00:%02x:%02x" % (rd, i))
            vlan_drops += 20 * 12
            flood = [pad(unk + bytes([0x02]) + rnd.getrandbits(40).to_bytes(5, "big") +
                         b"\x88\xb5", 64) for _ in range(3000)]
            flood += [pad(unk + bytes([0x03]) + rnd.getrandbits(40).to_bytes(5, "big") +
                          b"\x88\xb5", 64) for _ in range(100)]  # multicast sources

            r = netns.inject(ns, "vh0p", runts_under_14 + too_big_for_kernel)
            log("frames the kernel refuses to send: %s" % r)
            self.assertEqual(r["sent"], 0, "a packet socket sent a frame under 14 bytes or "
                             "above the MTU: the frames below are not what they should be")
            legal = (runts + bad_tags + short_tags[10] + short_tags[20] + big[0] + big[20] +
                     odd_types + not_allowed)
            # Each frame its own source, 02:66:00:00:00:NN, so that the frames t20 receives
            # can be told apart (a frame repeated or overwritten on the way shows).
            label = {id(f): "02:66:00:00:00:%02x" % i for i, f in enumerate(legal)}
            legal = [f[:11] + bytes([i]) + f[12:] for i, f in enumerate(legal)]
            with Sniffer(sw, "t20") as at_t20:
                sent = netns.inject(ns, "vh0p", legal)
                for i in range(0, len(mixed), 128):
                    sent2 = netns.inject(ns, "vh0p", mixed[i:i + 128])
                    self.assertEqual(sent2["sent"], len(mixed[i:i + 128]), sent2)
                for i in range(0, len(flood), 250):  # paced: the device's ring is 2048 deep
                    sent2 = netns.inject(ns, "vh0p", flood[i:i + 250])
                    self.assertEqual(sent2["sent"], len(flood[i:i + 250]), sent2)
                self.assertEqual(sent["sent"], len(legal), sent)
                s1 = self.tb.wait_quiet(timeout=30)
            got = {}
            for k, n in at_t20.stop().items():
                got[k.split("/")[0]] = got.get(k.split("/")[0], 0) + n
            want = {label[id(f)]: 1 for f in short_tags[20]}
            want.update({m: 1 for m in mixed20})
            self.assertEqual({k: n for k, n in got.items() if got[k] != want.get(k)},
                             {}, "t20 should get each VLAN 20 frame that fits once, and nothing "
                             "else (%d of %d)" % (sum(got.values()), len(want)))
            self.assertEqual(set(got), set(want))
            dev0, dev1 = s0["up"]["uplink"]["device"], s1["up"]["uplink"]["device"]
            dev = {k: dev1[k] - dev0[k] for k in dev1}
            log("hostile input: up %s; device %s; drops %s; fdb entries on up %d" %
                (vltest.fmt_stats(s1), dev, drops_delta(s1, s0),
                 len(ctl_json(self.tb.ctl_path, "fdb", "up", "all"))))
            # Every frame the peer's kernel sent was taken by the switch, or dropped by the
            # device and counted there.
            lost_in_device = sum(dev[k] for k in ("rx_dropped", "rx_ring_full", "rx_truncated",
                                                  "rx_bad_desc", "rx_fill_ring_empty_descs"))
            self.assertEqual(delta(s1, s0, "up", "rx_packets") + lost_in_device,
                             len(legal) + len(mixed) + len(flood), dev)
            self.assertEqual(delta(s1, s0, "up", "uplink", "wire_rx_packets"),
                             delta(s1, s0, "up", "rx_packets"))
            d = drops_delta(s1, s0)
            self.assertEqual(d.get(("up", "vlan_not_allowed"), 0), vlan_drops, d)
            self.assertEqual(d.get(("vm", "too_big"), 0), len(big[0]), d)
            self.assertEqual(d.get(("t20", "too_big"), 0), len(big[20]), d)
            vltest.assert_no_corruption(self, s1)
            for k in ("bad_csum", "bad_gso", "handoff_full", "short_rx_buffer"):
                self.assertEqual(sum(v for (p, r), v in d.items() if r == k), 0, d)
            # None delivered malformed: no frame under 14 bytes reached the tap (the uplink
            # refuses them as bad_used) or the guest (its driver counts rx_length_errors).
            for q in s1["t20"]["queues"]:
                self.assertEqual(q["bad_used"], 0, "frames under 14 bytes sent to t20: %s" % q)
            self.assertEqual(s1["t20"]["uplink"]["device"]["tx_errors"], 0)
            glen1 = int(g.run("cat /sys/class/net/eth0/statistics/rx_length_errors"))
            self.assertEqual(glen1 - glen0, 0, "the guest got frames shorter than 14 bytes")
            # What entered VLAN 10 (untagged: the native VLAN; or tagged 10) reached the guest's
            # port, or was counted there; what entered VLAN 20 reached t20 only, untagged.
            vlan10 = runts + short_tags[10] + odd_types + not_allowed[-1:] + flood
            self.assertEqual(delta(s1, s0, "vm", "tx_packets") +
                             delta(s1, s0, "vm", "drops", "no_rx_buffer"), len(vlan10))
            self.assertEqual(delta(s1, s0, "t20", "tx_packets"), len(short_tags[20]) + len(mixed20))
            # The flood of sources: learned up to the port's limit, multicast ones never;
            # the guest's entry stays.
            fdb = ctl_json(self.tb.ctl_path, "fdb", "all")
            on_up = [e for e in fdb if e["port"] == "up"]
            self.assertLessEqual(len(on_up), 1000)
            self.assertGreater(len(on_up), 500)
            self.assertFalse([e for e in on_up if int(e["mac"][:2], 16) & 1], "multicast learned")
            self.assertIn((GUEST_MAC, 10), {(e["mac"], e["vlan"]) for e in fdb if e["port"] == "vm"})
            # And the guest still forwards, both ways.
            ping(self, g, host, count=5)
            ping(self, host, g, count=5)
            self.assertTrue(self.tb.switch.alive())


if __name__ == "__main__":
    vlguest.main(default_timeout=230)
