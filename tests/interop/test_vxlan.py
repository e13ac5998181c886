#!/usr/bin/env python3
"""VXLAN between hosts (RFC 7348), on one namespace topology shared by every part:

    under (a Linux bridge br0) -- veth -- h1, h2, h3: a virtlink switch each, its af-packet
                                                       uplink `up`, a tunnel `vx` to the
                                                       others, tap end points `ep` and `x`
                               -- veth -- h4: Linux's own vxlan device (the interop peer)
                               -- veth -- inj: raw frames of the hostile part

The tap end points live in namespaces e1..e3 (10.30.0.1-3) and xn1..xn3 (a station that
moves, 10.30.0.50); h4's vxlan device is 10.30.0.4. The parts, in order: ARP and ping across
the mesh, Linux's vxlan both ways, iperf3, a MAC that moves from h2 to h3, a SEND_RARP on
h1 that reaches the other hosts (and Linux's fdb), hostile packets on the underlay.

    PYTHONPATH=pylib:bench python3 tests/interop/test_vxlan.py --virtlink build/virtlink [-v]
"""
import json
import os
import socket
import struct
import subprocess
import time
import unittest

from vltestlib import underlay, vhost_peer, vltest
from vltestlib.underlay import sh

VNI = 100
HOSTS = (1, 2, 3)
LINUX = 4
MOVER_MAC = "02:aa:00:00:00:50"
RARP_MAC = "52:54:00:12:34:56"


def vtep(i):
    return "192.168.60.%d" % i


def inet_csum(b):
    return vhost_peer.inet_csum(b)


@vltest.ctest("vxlan", timeout=120, asan=True)
class Vxlan(unittest.TestCase):
    net = underlay.Underlay("vx%d" % (os.getpid() % 10000))
    beds = {}

    @classmethod
    def ns(cls, name):
        return cls.net.ns(name)

    @classmethod
    def setUpClass(cls):
        try:
            cls.build()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def build(cls):
        hosts = {i: "h%d" % i for i in HOSTS}
        hosts.update({LINUX: "h4", 9: "inj"})
        cls.net.build(hosts, extra=["e%d" % i for i in HOSTS] + ["xn%d" % i for i in HOSTS])
        # h4: Linux's VTEP, head-end replication to the three switches, learning on.
        h4 = cls.ns("h4")
        sh("ip", "addr", "add", vtep(LINUX) + "/24", "dev", "u4", ns=h4)
        sh("ip", "link", "add", "vx0", "type", "vxlan", "id", VNI, "dstport", 4789, "local",
           vtep(LINUX), "dev", "u4", ns=h4)
        for i in HOSTS:
            sh("bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "vx0", "dst", vtep(i), ns=h4)
        sh("ip", "addr", "add", "10.30.0.4/24", "dev", "vx0", ns=h4)
        sh("ip", "link", "set", "vx0", "up", ns=h4)
        for i in HOSTS:
            cls.start_host(i)
        for i in HOSTS:
            for tap, ns, addr in (("t%d" % i, cls.ns("e%d" % i), "10.30.0.%d/24" % i),
                                  ("x%d" % i, cls.ns("xn%d" % i), None)):
                sh("ip", "link", "set", tap, "netns", ns, ns=cls.ns("h%d" % i))
                sh("ip", "link", "set", tap, "mtu", 1450, ns=ns)  # the tunnel's inner MTU
                if addr:
                    sh("ip", "addr", "add", addr, "dev", tap, ns=ns)
                    sh("ip", "link", "set", tap, "up", ns=ns)
        # The station that moves: on h2 first.
        xn2 = cls.ns("xn2")
        sh("ip", "link", "set", "x2", "address", MOVER_MAC, ns=xn2)
        sh("ip", "addr", "add", "10.30.0.50/24", "dev", "x2", ns=xn2)
        sh("ip", "link", "set", "x2", "up", ns=xn2)

    @classmethod
    def start_host(cls, i):
        tb = vltest.Testbed()
        cls.beds[i] = tb
        remotes = "+".join(vtep(j) for j in list(HOSTS) + [LINUX] if j != i)
        args = ["--port", "up=af-packet:u%d" % i,
                "--port", "vx=vxlan:uplink=up,local=%s,vni=%d,remote=%s" % (vtep(i), VNI, remotes),
                "--port", "ep=tap:t%d" % i, "--port", "x=tap:x%d" % i]
        if i == 1:
            args += ["--port", "vm=vhost-user:" + tb.sock("vm")]
        args += ["--forward", "bridge", "--pmd-mode", "interrupt"]
        cls.net.start_switch(tb, "h%d" % i, "switch-h%d" % i, args)

    @classmethod
    def tearDownClass(cls):
        cls.net.close(cls.beds.values())

    # -- helpers ---------------------------------------------------------------------
    def ctl(self, i, *args):
        out = self.beds[i].ctl(*args)
        return out

    def port(self, i, name, what="stats"):
        ports = self.ctl(i, "stats")["ports"] if what == "stats" else self.ctl(i, "ports")
        return next(p for p in ports if p["name"] == name)

    def dev(self, i):
        return self.port(i, "vx")["uplink"]["device"]

    def ping(self, ns, addr, count=3):
        r = sh("ping", "-c", count, "-i", "0.2", "-W", 2, addr, ns=ns, check=False)
        return r.returncode == 0, r.stdout

    def wait(self, cond, what, timeout=10):
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                self.fail("timed out waiting for " + what)
            time.sleep(0.1)

    # -- parts ---------------------------------------------------------------------
    def test_1_arp_and_ping_across_the_mesh(self):
        for i in HOSTS:
            for j in HOSTS:
                if i != j:
                    ok, out = self.ping(self.ns("e%d" % i), "10.30.0.%d" % j, count=2)
                    self.assertTrue(ok, "e%d -> e%d: %s" % (i, j, out))
        info = self.port(1, "vx", "ports")["tunnel"]
        self.assertEqual(info["vni"], VNI)
        resolved = {r["ip"] for r in info["remotes"] if r["resolved"]}
        self.assertTrue({vtep(2), vtep(3)} <= resolved, info)
        d = self.dev(1)
        self.assertGreater(d["decap_packets"], 0)
        self.assertGreater(d["encap_packets"], 0)
        self.assertGreaterEqual(d["arp_replies"] + d["arp_requests"], 1)
        up = self.port(1, "up", "ports")
        self.assertEqual(up.get("underlay_of"), ["vx"])

    def test_2_linux_vxlan_both_ways(self):
        ok, out = self.ping(self.ns("e1"), "10.30.0.4")
        self.assertTrue(ok, out)
        ok, out = self.ping(self.ns("h4"), "10.30.0.3")
        self.assertTrue(ok, out)
        # Linux's kernel ARPed for h1's VTEP address and got the tunnel's MAC.
        mac = self.port(1, "vx", "ports")["tunnel"]["mac"]
        neigh = sh("ip", "neigh", "show", vtep(1), ns=self.ns("h4")).stdout
        self.assertIn(mac, neigh.lower())

    def iperf(self, server_ns, client_ns, addr, seconds=2):
        srv = subprocess.Popen(["ip", "netns", "exec", server_ns, "iperf3", "-s", "-1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.3)
            r = sh("iperf3", "-c", addr, "-t", seconds, "-J", ns=client_ns, timeout=30)
            return json.loads(r.stdout)["end"]["sum_received"]["bytes"]
        finally:
            srv.kill()
            srv.wait()

    def test_3_iperf_between_switches_and_from_linux(self):
        before = self.port(2, "ep")["tx_packets"]
        got = self.iperf(self.ns("e2"), self.ns("e1"), "10.30.0.2")
        self.assertGreater(got, 1 << 20)
        self.assertGreater(self.port(2, "ep")["tx_packets"] - before, 500)
        # From Linux's vxlan device: its TSO trains come decapsulated and pass whole to the tap.
        gso = self.port(3, "ep")["offload"].get("gso_passed", 0)
        got = self.iperf(self.ns("e3"), self.ns("h4"), "10.30.0.3")
        self.assertGreater(got, 1 << 20)
        self.assertGreater(self.port(3, "ep")["offload"].get("gso_passed", 0), gso)
        for i in HOSTS:
            for q in self.port(i, "vx")["queues"]:
                self.assertEqual(q["bad_used"], 0)

    def test_4_a_mac_that_moves_is_relearned(self):
        ok, out = self.ping(self.ns("e1"), "10.30.0.50")
        self.assertTrue(ok, out)
        xn2, xn3 = self.ns("xn2"), self.ns("xn3")
        sh("ip", "link", "set", "x2", "down", ns=xn2)
        sh("ip", "link", "set", "x3", "address", MOVER_MAC, ns=xn3)
        sh("ip", "addr", "add", "10.30.0.50/24", "dev", "x3", ns=xn3)
        sh("ip", "link", "set", "x3", "up", ns=xn3)
        # The station speaks from its new host (as a moved VM's first frames do).
        ok, out = self.ping(xn3, "10.30.0.1", count=1)
        self.assertTrue(ok, out)
        before = self.port(3, "x")["tx_packets"]
        ok, out = self.ping(self.ns("e1"), "10.30.0.50")
        self.assertTrue(ok, out)
        self.assertGreaterEqual(self.port(3, "x")["tx_packets"] - before, 3)

    def test_5_send_rarp_reaches_the_other_hosts(self):
        g = vhost_peer.Guest(self.beds[1].sock("vm"))
        try:
            g.negotiate(protocol=vhost_peer.DEFAULT_PROTOCOL | vhost_peer.PROTO_RARP)
            g.request(vhost_peer.SEND_RARP, vhost_peer.mac(RARP_MAC) + b"\0\0")

            def learned(i):
                rows = self.ctl(i, "fdb")
                rows = rows.get("entries", rows) if isinstance(rows, dict) else rows
                return any(r.get("mac") == RARP_MAC and r.get("port") == "vx" for r in rows)
            for i in (2, 3):
                self.wait(lambda: learned(i), "h%d to learn %s behind its tunnel" % (i, RARP_MAC))
            self.wait(lambda: RARP_MAC in sh("bridge", "fdb", "show", "dev", "vx0",
                                             ns=self.ns("h4")).stdout,
                      "Linux's vxlan fdb to learn %s" % RARP_MAC)
            fdb = sh("bridge", "fdb", "show", "dev", "vx0", ns=self.ns("h4")).stdout
            line = next(l for l in fdb.splitlines() if RARP_MAC in l)
            self.assertIn("dst " + vtep(1), line)
            self.assertRegex(self.beds[1].switch.output(),
                             "SEND_RARP for %s: learned on this port, RARP sent on [1-9]" % RARP_MAC)
        finally:
            g.close()

    def test_6_hostile_packets_on_the_underlay(self):
        tun = self.port(1, "vx", "ports")["tunnel"]
        dst_mac = bytes.fromhex(tun["mac"].replace(":", ""))
        src_mac = bytes.fromhex("02bb00000009")

        def packet(inner, src=vtep(2), vni=VNI, dport=4789, flags=0x08, frag=0, options=b"",
                   udp_len_delta=0, csum_delta=0, udp_csum=0):
            vx = struct.pack("!B3xI", flags, vni << 8)
            udp = struct.pack("!HHHH", 50000, dport, 8 + len(vx) + len(inner) + udp_len_delta, udp_csum)
            ihl = 5 + len(options) // 4
            total = ihl * 4 + len(udp) + len(vx) + len(inner)
            hdr = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, total, 0, frag, 64, 17, 0,
                              socket.inet_aton(src), socket.inet_aton(vtep(1))) + options
            c = inet_csum(hdr) ^ csum_delta
            hdr = hdr[:10] + struct.pack("!H", c) + hdr[12:]
            return dst_mac + src_mac + b"\x08\x00" + hdr + udp + vx + inner

        inner = bytes.fromhex("ffffffffffff" "02cc00000001" "88b5") + bytes(46)
        cases = {
            "wrong_vni": [packet(inner, vni=VNI + 1)],
            "bad_outer_ip": [packet(inner, csum_delta=1), packet(inner)[:14] + b"\x65" + packet(inner)[15:],
                             packet(inner)[:45]],
            "fragment": [packet(inner, frag=0x2000), packet(inner, frag=0x0010)],
            "unknown_vtep": [packet(inner, src="192.168.60.99")],
            "bad_vxlan": [packet(inner, flags=0), packet(bytes(8))],
            "not_vxlan": [packet(inner, dport=4790)],
            "bad_udp": [packet(inner, udp_len_delta=-1), packet(inner, udp_csum=0x1234)],
        }
        # Runts: no IPv4 header to look at (not for the VTEP: counted by the underlay).
        runts = [dst_mac + src_mac + b"\x08\x00", dst_mac + src_mac + b"\x08\x00" + bytes(6),
                 packet(inner)[:30]]
        before = self.dev(1)
        decap0 = before["decap_packets"]
        nfv0 = self.port(1, "up")["queues"][0]["not_for_vtep"]
        if True:
            sender = subprocess.Popen(
                ["ip", "netns", "exec", self.ns("inj"), "python3", "-c",
                 "import socket,sys\n"
                 "s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)\ns.bind(('u9',0))\n"
                 "data=sys.stdin.buffer.read()\ni=0\n"
                 "while i<len(data):\n"
                 " n=int.from_bytes(data[i:i+4],'big');i+=4\n"
                 " f=data[i:i+n];i+=n\n"
                 " f=f+bytes(max(0,14-len(f)))\n"
                 " s.send(f)\n"],
                stdin=subprocess.PIPE)
            frames = [f for fs in cases.values() for f in fs] + runts
            # A flood of unknown inner source MACs from a real remote's address: learned,
            # bounded, and the mesh keeps working.
            flood = 3000
            for k in range(flood):
                f = bytes.fromhex("ffffffffffff") + b"\x02\xdd" + struct.pack("!I", k) + b"\x88\xb5" + bytes(46)
                frames.append(packet(f, src=vtep(3)))
            blob = b"".join(len(f).to_bytes(4, "big") + f for f in frames)
            sender.communicate(blob, timeout=60)
            self.assertEqual(sender.returncode, 0)

        def settled():
            d = self.dev(1)
            return all(d[k] - before[k] >= len(v) for k, v in cases.items()) and \
                d["decap_packets"] - decap0 >= flood - d["rx_ring_full"]
        try:
            self.wait(settled, "the hostile packets to be counted", timeout=20)
        except AssertionError:
            d = self.dev(1)
            raise AssertionError("counted %s, expected at least %s; decap %d of a flood of %d" % (
                {k: d[k] - before[k] for k in cases}, {k: len(v) for k, v in cases.items()},
                d["decap_packets"] - decap0, flood))
        after = self.dev(1)
        for k, v in cases.items():
            self.assertEqual(after[k] - before[k], len(v), k)
        self.assertGreaterEqual(self.port(1, "up")["queues"][0]["not_for_vtep"] - nfv0, len(runts))
        self.assertGreater(after["learned_macs"], 1000)
        self.assertLessEqual(after["learned_macs"], 4096)
        # Healthy traffic goes on, on every host.
        ok, out = self.ping(self.ns("e1"), "10.30.0.2")
        self.assertTrue(ok, out)
        ok, out = self.ping(self.ns("e3"), "10.30.0.4")
        self.assertTrue(ok, out)
        for i in HOSTS:
            self.assertTrue(self.beds[i].switch.alive(), "switch h%d died" % i)


if __name__ == "__main__":
    vltest.main(default_timeout=240)
