#!/usr/bin/env python3
"""`virtlink ctl trace PORT HEX|--pcap FILE` ("See inside it" item 5) against a running
switch: Python vhost-user front-ends (vltestlib.vhost_peer.Guest) on ports a, b, c, d of a
bridge (d with MTU 1500); for each case the trace is asked first (the MAC table and every
counter unchanged by it), then the same frame is sent for real, and the ports that received
it and the counters that moved (packets and drops by reason and port) must be what the
trace said. Cases: a learned unicast, an unknown unicast, a broadcast, a frame whose
destination was learned on its ingress port, a frame above its receiver's largest frame,
one shorter than an Ethernet header. Then `--pcap` (a capture written here and read back
by tcpdump; one cut at its snaplen), the text form, and README "Frame trace" as printed.

    PYTHONPATH=pylib:bench python3 tests/interop/test_trace.py --virtlink build/virtlink -v
"""
import os
import re
import struct
import subprocess
import time
import unittest

from vltestlib import vltest
from vltestlib.vhost_peer import Guest, frame, mac

MAC = {p: mac("02:00:00:00:00:%02x" % (0x0a + i)) for i, p in enumerate("abcd")}
BCAST = b"\xff" * 6
STRANGER = mac("02:00:00:00:00:99")


def write_pcap(path, frames, snaplen=65535):
    """A classic pcap file (microseconds, Ethernet) of `frames`, each cut at `snaplen`."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, snaplen, 1))
        for i, fr in enumerate(frames):
            cap = fr[:snaplen]
            f.write(struct.pack("<IIII", 1700000000 + i, 0, len(cap), len(fr)) + cap)


def counters(tb):
    """Every port's packets and drops by reason: {(port, key): n}."""
    out = {}
    for name, p in tb.switch_stats().items():
        out[(name, "rx_packets")] = p["rx_packets"]
        out[(name, "tx_packets")] = p["tx_packets"]
        for k, v in p["drops"].items():
            out[(name, k)] = v
    return out


def mac_table(tb):
    return sorted((e["mac"], e["port"], e["vlan"]) for e in tb.ctl("fdb", "all"))


class Trace(unittest.TestCase):

    def expect(self, tb, port, t):
        """The counters the trace `t` says the frame moves, from `port`."""
        want = {(port, "rx_packets"): 1}
        for p in t["delivered_to"]:
            want[(p, "tx_packets")] = want.get((p, "tx_packets"), 0) + 1
        for d in t["drops"]:
            k = (d["counted_on"], d["reason"])
            want[k] = want.get(k, 0) + 1
        return want

    def check(self, tb, guests, what, port, fr):
        before, fdb = counters(tb), mac_table(tb)
        t = tb.ctl("trace", port, fr.hex())
        self.assertFalse(t["changed"], what)
        self.assertEqual(counters(tb), before, "%s: the trace moved a counter" % what)
        self.assertEqual(mac_table(tb), fdb, "%s: the trace changed the MAC table" % what)
        for g in guests.values():
            g.rx.take()
        self.assertTrue(guests[port].tx.send_frame(fr), what)
        self.assertTrue(guests[port].tx.wait_done(5), what)
        want = dict(before)
        for k, n in self.expect(tb, port, t).items():
            want[k] = want.get(k, 0) + n
        deadline = time.monotonic() + 5
        while counters(tb) != want and time.monotonic() < deadline:
            time.sleep(0.05)
        after = counters(tb)
        moved = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        self.assertEqual(after, want, "%s: the switch moved %s; the trace said %s" % (
            what, moved, self.expect(tb, port, t)))
        got = sorted(p for p, g in guests.items() if fr in g.rx.take())
        self.assertEqual(got, sorted(t["delivered_to"]), what)
        vltest.log("%s: %s (%s), delivered to %s, drops %s" % (
            what, t["decision"]["action"], t["decision"]["reason"], got,
            [(d["reason"], d["counted_on"]) for d in t["drops"]]))
        return t

    @vltest.ctest("interop_ctl_trace", timeout=60)
    def test_trace_says_what_the_switch_does(self):
        with vltest.Testbed(self) as tb:
            tb.start_switch(ports=list("abcd"), forward="bridge", extra=["--port-set", "d:mtu=1500"])
            guests = {}
            try:
                for p in "abcd":
                    guests[p] = Guest(tb.sock(p)).negotiate()
                    guests[p].rx.post()
                tb.wait_connected(list("abcd"))
                for p in "abd":  # each MAC learned on its port: a frame to itself
                    guests[p].tx.send_frame(frame(MAC[p], MAC[p], b"learn"))
                    self.assertTrue(guests[p].tx.wait_done(5))
                vltest._wait(lambda: len(mac_table(tb)) == 3, 5, "a, b and d's MACs learned")
                t = self.check(tb, guests, "learned unicast", "a", frame(MAC["b"], MAC["a"], b"1"))
                self.assertEqual((t["decision"]["reason"], t["delivered_to"]), ("learned_unicast", ["b"]))
                self.assertEqual(t["lookup"]["entry"]["port"], "b")
                t = self.check(tb, guests, "unknown unicast", "a", frame(STRANGER, MAC["a"], b"2"))
                self.assertEqual((t["decision"]["reason"], t["delivered_to"]), ("unknown_unicast", ["b", "c", "d"]))
                t = self.check(tb, guests, "broadcast", "b", frame(BCAST, MAC["b"], b"3"))
                self.assertEqual((t["decision"]["reason"], t["delivered_to"]), ("broadcast", ["a", "c", "d"]))
                t = self.check(tb, guests, "back to its ingress port", "a", frame(MAC["a"], STRANGER, b"4"))
                self.assertEqual(t["drops"], [{"reason": "no_destination", "counted_on": "a"}])
                big = frame(MAC["d"], MAC["a"], b"5", size=1600)
                t = self.check(tb, guests, "above d's largest frame", "a", big)
                self.assertEqual(t["drops"], [{"reason": "too_big", "counted_on": "d"}])
                self.assertEqual(t["outputs"][0]["max_frame"], 1518)
                t = self.check(tb, guests, "shorter than an Ethernet header", "c", b"\x02" * 10)
                self.assertEqual(t["drops"], [{"reason": "bad_header", "counted_on": "c"}])
                self.pcap_and_text(tb, big)
            finally:
                for g in guests.values():
                    g.close()

    def pcap_and_text(self, tb, big):
        """--pcap traces the capture's first frame as HEX would (tcpdump reads the file
        too); a capture cut at its snaplen is traced from its headers with its length; the
        text form reads like ofproto/trace."""
        path = os.path.join(tb.dir, "frames.pcap")
        write_pcap(path, [big, frame(BCAST, MAC["a"])])
        seen = subprocess.run(["tcpdump", "-r", path, "-nn", "-e"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=10).stdout.decode()
        self.assertIn("02:00:00:00:00:0a > 02:00:00:00:00:0d", seen)
        self.assertEqual(tb.ctl("trace", "a", "--pcap", path), tb.ctl("trace", "a", big.hex()))
        write_pcap(path, [big], snaplen=96)
        t = tb.ctl("trace", "a", "--pcap", path)
        self.assertEqual((t["frame"]["len"], t["frame"]["bytes_given"]), (1600, 96))
        self.assertEqual(t["drops"], [{"reason": "too_big", "counted_on": "d"}])
        r = subprocess.run([vltest.VIRTLINK, "ctl", "--control", tb.ctl_path, "trace", "a", "--pcap",
                            os.path.join(tb.dir, "missing.pcap")], stderr=subprocess.PIPE, timeout=10)
        self.assertEqual(r.returncode, 1, r.stderr)
        r = subprocess.run([vltest.VIRTLINK, "ctl", "--control", tb.ctl_path, "trace", "a", "0g"],
                           stderr=subprocess.PIPE, timeout=10)
        self.assertEqual(r.returncode, 2, r.stderr)
        text = tb.ctl("trace", "a", big.hex(), json_out=False)
        self.assertIn("Frame: 1600 bytes arriving on port a\n", text)
        self.assertIn("Lookup: destination 02:00:00:00:00:0d (VLAN 0) learned on d, ", text)
        self.assertRegex(text, r"\n  -> d: dropped as too_big \(counted on d\), 1600 bytes \(largest frame 1518\)")
        self.assertIn("Result: delivered nowhere; drops: too_big on d\n", text)

    @vltest.ctest("readme_trace_recipe", timeout=40)
    def test_readme_recipe(self):
        """README "Frame trace": its commands as printed, with front-ends on the three
        ports; the output is the README's (the answering switch's PID aside)."""
        start = "virtlink switch --port vm1=vhost-user:/tmp/vm1.sock --port vm2=vhost-user:/tmp/vm2.sock --port vm3"
        sw_cmd = vltest.readme_command(start)
        trace_cmd = vltest.readme_command("virtlink ctl --control /tmp/virtlink.ctl trace vm1 ")
        with open(os.path.join(vltest.REPO, "README.md")) as f:
            readme = f.read()
        section = readme.split("\n### Frame trace\n", 1)[1]
        want = re.search(r"\n```\n(Frame: .*?\n)```\n", section, re.S).group(1)
        env = dict(os.environ, PATH=os.path.dirname(vltest.VIRTLINK) + ":" + os.environ["PATH"])
        socks = ["/tmp/vm%d.sock" % i for i in (1, 2, 3)]
        with vltest.readme_paths(socks + ["/tmp/virtlink.ctl"]):
            sw = subprocess.Popen(["sh", "-c", "exec " + sw_cmd], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
            guests = []
            try:
                vltest._wait(lambda: all(os.path.exists(p) for p in socks + ["/tmp/virtlink.ctl"]),
                             15, "the README switch's sockets")
                for s in socks:
                    guests.append(Guest(s).negotiate())
                    guests[-1].rx.post()
                got = ""
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:  # until the three ports are up
                    got = subprocess.run(["sh", "-c", trace_cmd], env=env, stdout=subprocess.PIPE,
                                         timeout=10, check=True, text=True).stdout
                    if "delivered to vm2, vm3;" in got:
                        break
                    time.sleep(0.2)
                got = re.sub(r"\(switch \d+ at ", "(switch PID at ", got)
                want = re.sub(r"\(switch \d+ at ", "(switch PID at ", want)
                self.assertEqual(got, want)
                vltest.log("README trace as printed:\n" + got)
            finally:
                for g in guests:
                    g.close()
                sw.terminate()
                out = sw.communicate(timeout=15)[0]
                if sw.returncode not in (0, -15):
                    vltest.log("the README switch: status %s\n%s" % (sw.returncode, out[-3000:]))


if __name__ == "__main__":
    vltest.main(default_timeout=50)
