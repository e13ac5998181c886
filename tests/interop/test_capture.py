#!/usr/bin/env python3
"""Packet capture and port mirroring ("See inside it" items 2 and 3).

- Exact: Python front-ends send known frames through the bridge while `ctl capture a both`
  and a filtered `ctl capture b tx` run; `tcpdump -r` reads exactly the frames the switch
  counted, byte for byte, in order per direction; the counters are those of the same
  traffic without a capture.
- Under DPDK testpmd traffic: `--count N` gives N frames; `--file - | tcpdump -r -` reads
  what ctl says it captured; what did not fit is counted; forwarding's counters still add
  up; a capture into a full file system and one into a file ctl may not write (ctl run as
  nobody) fail cleanly, and the switch goes on.
- Mirroring: a port's received and sent frames reach the mirror port, the same bytes;
  `mirror PORT off` stops it.
"""

import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "hostile"))

from vltestlib import vltest  # noqa: E402
from vltestlib.vltest import log  # noqa: E402
from vltestlib.vhost_peer import (DEFAULT_FEATURES, VIRTIO_NET_F_CSUM, VIRTIO_NET_F_HOST_TSO4,  # noqa: E402
                                   frame, mac, tcp4_frame, tcp4_valid)
from harness import Harness  # noqa: E402

MAC_A = mac("02:00:00:00:00:0a")
MAC_B = mac("02:00:00:00:00:0b")
MAC_C = mac("02:00:00:00:00:0c")


def read_pcap(path):
    """[(ts_ns, caplen, len, bytes)] of a pcap file (either precision)."""
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    assert magic in (0xa1b2c3d4, 0xa1b23c4d), hex(magic)
    scale = 1000 if magic == 0xa1b2c3d4 else 1
    out, at = [], 24
    while at < len(data):
        sec, frac, caplen, ln = struct.unpack("<IIII", data[at:at + 16])
        out.append((sec * 10**9 + frac * scale, caplen, ln, data[at + 16:at + 16 + caplen]))
        at += 16 + caplen
    return out


def tcpdump_count(path):
    r = subprocess.run(["tcpdump", "-nn", "-r", path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # One line per frame starts with its time (an unknown ethertype adds hex lines).
    import re
    return len([l for l in r.stdout.splitlines() if re.match(r"\d\d:\d\d:\d\d\.\d+ ", l)])


class Capture:
    """`virtlink ctl capture ...` running in the background."""

    def __init__(self, ctl_path, *args, stdout=None, user=None):
        argv = [vltest.VIRTLINK, "ctl", "--control", ctl_path, "capture"] + list(args)
        if user:
            argv = ["setpriv", "--reuid", user, "--regid", "nogroup", "--clear-groups"] + argv
        self.p = subprocess.Popen(argv, stdout=stdout or subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
        self.err = ""

    def started(self, tb, timeout=10):
        """Waits until the switch runs this capture (its session count)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.p.poll() is not None:
                raise AssertionError("ctl capture exited: %s" % self.p.stderr.read())
            if tb.ctl("show")["captures"]["sessions"] >= 1:
                return
            time.sleep(0.05)
        raise AssertionError("the capture did not start")

    def stop(self, timeout=15):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
        return self.wait(timeout)

    def wait(self, timeout=30):
        _, self.err = self.p.communicate(timeout=timeout)
        log("ctl capture: exit %d: %s" % (self.p.returncode, self.err.strip()))
        return self.p.returncode

    def captured(self):
        import re
        m = re.search(r"(\d+) frames captured", self.err)
        assert m, self.err
        return int(m.group(1))


def bridge_of_three(name):
    """The hostile harness's switch with Python front-ends on a, b and c, their MACs
    learned; returns (harness, c's guest)."""
    h = Harness(name, ports=("a", "b", "c"))
    try:
        c = h.guest("c")
        c.rx.post()
        for g, m in ((h.a, MAC_A), (h.b, MAC_B), (c, MAC_C)):
            h.learn(g, m)
        return h, c
    except BaseException:
        h.close()
        raise


class CaptureExact(unittest.TestCase):

    @vltest.ctest("interop_capture_exact", timeout=90, asan=True)
    def test_capture_exact(self):
        h, c = bridge_of_three("capture_exact")
        try:
            tb = h.tb
            pa, pb = os.path.join(tb.dir, "a.pcap"), os.path.join(tb.dir, "b.pcap")
            cap_a = Capture(tb.ctl_path, "a", "both", "--file", pa)
            cap_a.started(tb)
            cap_b = Capture(tb.ctl_path, "b", "tx", "--file", pb, "--filter",
                            "ether src 02:00:00:00:00:0a", "--snaplen", "100")
            deadline = time.monotonic() + 10
            while tb.ctl("show")["captures"]["sessions"] < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            before = h.stats()
            # a -> b: 40 frames of several sizes; b -> a: 20; c -> b: 10 (filtered out of b.pcap).
            sent_ab = [frame(MAC_B, MAC_A, b"AB%04d" % i + bytes(range(200)), size=60 + 30 * i)
                       for i in range(40)]
            sent_ba = [frame(MAC_A, MAC_B, b"BA%04d" % i, size=64 + i) for i in range(20)]
            sent_cb = [frame(MAC_B, MAC_C, b"CB%04d" % i) for i in range(10)]
            for fr in sent_ab:
                self.assertTrue(h.a.tx.send_frame(fr))
            for fr in sent_ba:
                self.assertTrue(h.b.tx.send_frame(fr))
            for fr in sent_cb:
                self.assertTrue(c.tx.send_frame(fr))
            after = h.wait_stats(lambda st: h.delta(before, st, "b", "tx_packets") >= 50 and
                                 h.delta(before, st, "a", "tx_packets") >= 20, 10, "frames delivered")
            time.sleep(0.3)
            self.assertEqual(cap_a.stop(), 0, cap_a.err)
            self.assertEqual(cap_b.stop(), 0, cap_b.err)
            # The switch's counters of this traffic: what a capture must hold.
            rx_a = h.delta(before, after, "a", "rx_packets")
            tx_a = h.delta(before, after, "a", "tx_packets")
            self.assertEqual((rx_a, tx_a), (40, 20))
            self.assertEqual(h.delta(before, after, "b", "tx_packets"), 50)
            self.assertEqual(sum(after["a"]["drops"].values()), sum(before["a"]["drops"].values()))
            self.assertEqual(tcpdump_count(pa), 60)
            self.assertEqual(cap_a.captured(), 60)
            self.assertIn("0 missed (capture ring full), 0 missed (ctl too slow)", cap_a.err)
            got = read_pcap(pa)
            # Direction by content: a's received frames come from MAC_A, its sent ones from B.
            rx = [g[3] for g in got if g[3][6:12] == MAC_A]
            tx = [g[3] for g in got if g[3][6:12] == MAC_B]
            self.assertEqual(rx, sent_ab)
            self.assertEqual(tx, sent_ba)
            self.assertTrue(all(g[1] == g[2] == len(g[3]) for g in got))
            ts = [g[0] for g in got]
            now = time.time_ns()
            self.assertTrue(all(now - 60 * 10**9 < t <= now for t in ts), ts[:3])
            # b tx with the filter and a snaplen: a's 40 frames, cut at 100 bytes; c's filtered.
            gb = read_pcap(pb)
            self.assertEqual(tcpdump_count(pb), 40)
            self.assertEqual([g[3] for g in gb], [f[:100] for f in sent_ab])
            self.assertEqual([g[2] for g in gb], [len(f) for f in sent_ab])
            self.assertIn("10 filtered out", cap_b.err)
            self.assertEqual(tb.ctl("show")["captures"]["sessions"], 0)
            h.check_healthy()
        finally:
            h.close()

    @vltest.ctest("interop_capture_tso", timeout=60, asan=True)
    def test_capture_tso(self):
        """A TSO frame is captured as its sender gave it (one frame above the MTU, its
        checksums not filled in) and ctl says so; the receiver, without TSO, gets it cut
        into valid segments by the switch."""
        h = Harness("capture_tso", ports=("a", "b", "c"))
        try:
            tb = h.tb
            c = h.guest("c", features=DEFAULT_FEATURES | VIRTIO_NET_F_CSUM | VIRTIO_NET_F_HOST_TSO4)
            for g, m in ((h.b, MAC_B), (c, MAC_C)):
                h.learn(g, m)
            h.b.rx.take()
            pc = os.path.join(tb.dir, "c.pcap")
            cap = Capture(tb.ctl_path, "c", "rx", "--file", pc, "--count", "1")
            cap.started(tb)
            tso = tcp4_frame(MAC_B, MAC_C, bytes(range(256)) * 7)  # 1846 bytes, MSS 1000
            hdr = struct.pack("<BBHHHHH", 1, 1, 54, 1000, 34, 16, 0)  # NEEDS_CSUM, TCPV4
            self.assertTrue(c.tx.send_frame(tso, hdr=hdr))
            self.assertEqual(cap.wait(), 0, cap.err)
            self.assertIn("1 frames captured (count)", cap.err)
            self.assertIn("1 are TSO/GSO frames as their sender gave them", cap.err)
            got = read_pcap(pc)
            self.assertEqual([g[3] for g in got], [tso])
            self.assertFalse(tcp4_valid(got[0][3]))  # checksums partial, as sent
            segs = []
            deadline = time.monotonic() + 5
            while len(segs) < 2 and time.monotonic() < deadline:
                segs += h.b.rx.take()
                time.sleep(0.01)
            self.assertEqual([len(f) for f in segs], [54 + 1000, 54 + 792])
            self.assertTrue(all(tcp4_valid(f) for f in segs))
        finally:
            h.close()

    @vltest.ctest("interop_mirror", timeout=60, asan=True)
    def test_mirror(self):
        h, c = bridge_of_three("mirror")
        try:
            tb = h.tb
            c.rx.take()
            r = tb.ctl("mirror", "a", "both", "to", "c")
            self.assertEqual(r, {"port": "a", "direction": "both", "to": "c"})
            self.assertEqual(tb.ctl("show")["mirrors"], [{"port": "a", "rx": "c", "tx": "c"}])
            ab = [frame(MAC_B, MAC_A, b"MAB%03d" % i, size=70 + i) for i in range(12)]
            ba = [frame(MAC_A, MAC_B, b"MBA%03d" % i) for i in range(8)]
            for fr in ab:
                self.assertTrue(h.a.tx.send_frame(fr))
            self.assertTrue(h.a.tx.wait_done())
            for fr in ba:
                self.assertTrue(h.b.tx.send_frame(fr))
            got = []
            deadline = time.monotonic() + 5
            while len(got) < 20 and time.monotonic() < deadline:
                got += c.rx.take()
                time.sleep(0.01)
            self.assertEqual([f for f in got if f[6:12] == MAC_A], ab)
            self.assertEqual([f for f in got if f[6:12] == MAC_B], ba)
            self.assertEqual(len(got), 20)
            # Refusals: a mirror port is not mirrored; no such port; its own mirror.
            for args in (("c", "rx", "to", "b"), ("a", "rx", "to", "a"), ("a", "rx", "to", "zz"),
                         ("a", "sideways", "to", "b")):
                r = subprocess.run([vltest.VIRTLINK, "ctl", "--control", tb.ctl_path, "mirror"] +
                                   list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                self.assertNotEqual(r.returncode, 0, args)
            self.assertEqual(tb.ctl("mirror", "a", "off"), {"port": "a", "mirror": None})
            self.assertEqual(tb.ctl("show")["mirrors"], [])
            for fr in ab[:4]:
                self.assertTrue(h.a.tx.send_frame(fr))
            self.assertTrue(h.a.tx.wait_done())
            time.sleep(0.2)
            self.assertEqual(c.rx.take(), [])
            h.check_healthy()
        finally:
            h.close()


class CaptureUnderTraffic(unittest.TestCase):

    @vltest.ctest("interop_capture_traffic", timeout=120)
    def test_capture_under_traffic(self):
        with vltest.Testbed(self) as tb:
            tb.start_switch(ports=["a", "b"], forward="xconnect",
                            extra=["--control-mode", "0666"])
            rx = tb.start_testpmd("rx", [tb.virtio_user("b")], "rxonly")
            tx = tb.start_testpmd("tx", [tb.virtio_user("a")], "txonly", args=["--txpkts=64"])
            tb.wait_connected(["a", "b"])
            tb.wait_counter("a", "rx_packets", 10000, timeout=30)
            # --count: exactly N frames, testpmd's 64-byte frames (--txpkts: no FCS on virtio).
            p1 = os.path.join(tb.dir, "count.pcap")
            c1 = Capture(tb.ctl_path, "a", "both", "--file", p1, "--count", "5000")
            self.assertEqual(c1.wait(), 0, c1.err)
            self.assertEqual(tcpdump_count(p1), 5000)
            self.assertEqual(c1.captured(), 5000)
            self.assertIn("(count)", c1.err)
            lens = {g[2] for g in read_pcap(p1)}
            self.assertEqual(lens, {64})
            # Standard output into tcpdump, for 2 s.
            pipe = subprocess.run("%s ctl --control %s capture b tx --duration 2 --file - | "
                                  "tcpdump -nn -r - 2>/dev/null | wc -l" % (vltest.VIRTLINK, tb.ctl_path),
                                  shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, timeout=60)
            log("pipe: %s" % pipe.stderr.strip())
            import re
            m = re.search(r"(\d+) frames captured \(duration\); (\d+) missed \(capture ring full\), "
                          r"(\d+) missed \(ctl too slow\)", pipe.stderr)
            self.assertTrue(m, pipe.stderr)
            self.assertEqual(int(pipe.stdout.strip()), int(m.group(1)))
            self.assertGreater(int(m.group(1)), 1000)
            # A full file system mid-capture: ctl fails, the session ends, forwarding goes on.
            small = tempfile.mkdtemp(prefix="vl-full-", dir=tb.dir)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", small], check=True)
            c2 = None
            try:
                c2 = Capture(tb.ctl_path, "a", "both", "--file", os.path.join(small, "x.pcap"))
                self.assertEqual(c2.wait(), 1)
                self.assertIn("No space left on device", c2.err)
            finally:
                if c2 is not None and c2.p.poll() is None:
                    c2.p.kill()  # (a ctl still writing keeps the file system busy)
                    c2.p.wait()
                subprocess.run(["umount", "-l", small])
            # ctl as nobody: a file it may not write fails before the switch is asked; one it
            # may write is its own (the switch opens no path for it).
            started = tb.ctl("show")["captures"]["started"]
            os.chmod(tb.dir, 0o755)  # (mkdtemp's 0700 would keep nobody from the socket)
            c3 = Capture(tb.ctl_path, "a", "rx", "--file", "/root/vl-denied.pcap", "--count", "10",
                         user="nobody")
            self.assertEqual(c3.wait(), 1)
            self.assertIn("cannot write /root/vl-denied.pcap", c3.err)
            self.assertEqual(tb.ctl("show")["captures"]["started"], started)
            mine = os.path.join(tempfile.mkdtemp(prefix="vl-nobody-", dir=tb.dir), "n.pcap")
            os.chmod(os.path.dirname(mine), 0o777)
            c4 = Capture(tb.ctl_path, "a", "rx", "--file", mine, "--count", "10", user="nobody")
            self.assertEqual(c4.wait(), 0, c4.err)
            self.assertEqual(tcpdump_count(mine), 10)
            import pwd
            self.assertEqual(os.stat(mine).st_uid, pwd.getpwnam("nobody").pw_uid)
            # A capture the switch refuses leaves the file as it was (and makes none).
            keep = os.path.join(tb.dir, "keep.pcap")
            with open(keep, "wb") as f:
                f.write(b"precious")
            for args, rc in ((("zz", "rx"), 1), (("a", "sideways"), 2)):
                c5 = Capture(tb.ctl_path, *args, "--file", keep, "--count", "1")
                self.assertEqual(c5.wait(), rc, c5.err)
                with open(keep, "rb") as f:
                    self.assertEqual(f.read(), b"precious")
            c6 = Capture(tb.ctl_path, "zz", "rx", "--file", os.path.join(tb.dir, "new.pcap"))
            self.assertEqual(c6.wait(), 1)
            self.assertFalse(os.path.exists(os.path.join(tb.dir, "new.pcap")))
            # Forwarding's counters add up with the captures done: every frame a took is
            # b's or a drop, nothing was sent back to a.
            tb.stop_testpmd(tx)
            st = tb.wait_quiet()
            a, b = st["a"], st["b"]
            self.assertEqual(a["rx_packets"], b["tx_packets"] + sum(b["drops"].values()) +
                             sum(a["drops"].values()))
            self.assertEqual(a["tx_packets"], 0)
            self.assertEqual(tb.ctl("show")["captures"]["sessions"], 0)
            tb.stop_testpmd(rx)


class ReadmeCapture(unittest.TestCase):

    @vltest.ctest("readme_capture_recipe", timeout=120)
    def test_readme_capture(self):
        """README "Capture and mirroring": its four commands, as printed, against the switch
        of README "Metrics" (also as printed) carrying testpmd's traffic from vm1 to vm2."""
        sw_cmd = vltest.readme_command("virtlink switch --port vm1=vhost-user:/tmp/vm1.sock --port "
                                       "vm2=vhost-user:/tmp/vm2.sock --control /tmp/virtlink.ctl --metrics")
        cmds = vltest.readme_commands("### Capture and mirroring")
        self.assertEqual(len(cmds), 4, cmds)
        env = dict(os.environ, PATH=os.path.dirname(vltest.VIRTLINK) + ":" + os.environ["PATH"])

        def sh(cmd):
            r = subprocess.run(["sh", "-c", cmd], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=60)
            log("README: %s -> %d; %s" % (cmd, r.returncode, r.stderr.strip()[-300:]))
            self.assertEqual(r.returncode, 0, r.stderr)
            return r
        with vltest.readme_paths(("/tmp/vm1.sock", "/tmp/vm2.sock", "/tmp/virtlink.ctl")), \
                vltest.Testbed(self) as tb:
            tb.switch = vltest.Proc("switch", ["sh", "-c", "exec " + sw_cmd], tb.dir, env=env)
            tb.procs.append(tb.switch)
            tb.ctl_path = "/tmp/virtlink.ctl"
            tb.port_paths = {"vm1": "/tmp/vm1.sock", "vm2": "/tmp/vm2.sock"}
            vltest._wait(lambda: all(os.path.exists(p) for p in
                                     ("/tmp/vm1.sock", "/tmp/vm2.sock", "/tmp/virtlink.ctl")),
                         15, "the README switch's sockets")
            rx = tb.start_testpmd("vm2", [tb.virtio_user("vm2")], "rxonly")
            tx = tb.start_testpmd("vm1", [tb.virtio_user("vm1")], "txonly", args=["--txpkts=64"])
            tb.wait_connected(["vm1", "vm2"])
            tb.wait_counter("vm1", "rx_packets", 10000, timeout=30)
            try:
                self.assertIn("100 frames captured (count)", sh(cmds[0]).stderr)
                out = sh(cmds[1]).stdout.splitlines()
                self.assertEqual(len(out), 100)
                self.assertIn("ethertype IPv4", out[0])
                piped = sh(cmds[2])
                self.assertGreater(len(piped.stdout.splitlines()), 100)
                self.assertIn("frames captured (duration)", piped.stderr)
                sh(cmds[3])
                self.assertEqual(tb.ctl("show")["mirrors"], [{"port": "vm1", "rx": "vm2", "tx": "vm2"}])
                # vm2 now gets each frame of vm1 twice: flooded to it, and mirrored (what
                # its receive queue had no room for is dropped there, and counted).
                time.sleep(0.2)
                s0 = tb.switch_stats()
                time.sleep(1.0)
                s1 = tb.switch_stats()

                def out2(st):
                    return st["vm2"]["tx_packets"] + sum(st["vm2"]["drops"].values())
                d_in = s1["vm1"]["rx_packets"] - s0["vm1"]["rx_packets"]
                self.assertGreater(d_in, 1000)
                self.assertAlmostEqual(out2(s1) - out2(s0), 2 * d_in, delta=0.02 * d_in + 256)
            finally:
                if os.path.exists("/tmp/vm1.pcap"):
                    os.unlink("/tmp/vm1.pcap")
                tb.stop_testpmd(tx)
                tb.stop_testpmd(rx)


if __name__ == "__main__":
    vltest.main()
