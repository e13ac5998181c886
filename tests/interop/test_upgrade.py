#!/usr/bin/env python3
"""`virtlink ctl upgrade` with DPDK virtio-user peers in an io loop (testpmd forwards what
each port receives out of the other; the switch cross-connects or bridges them): the
successor takes every connection, guest memory and ring state; no frame is lost.

  Upgrade.test_io_loop_five_upgrades
      xconnect, 1 PMD thread: 5 upgrades to the same binary while the loop runs. After
      each: the old process exited 0, a new pid answers ctl, both directions still move,
      the counters went on from the old process's (carried, not reset), no drop, no new
      connection (`connects` stays 1), and the new process holds the same guest memory
      mappings and vhost-user sockets as the old. At the end: taken = delivered + dropped
      over the whole run, and what testpmd received trails the switch's tx by at most the
      loop's population (nothing lost across 5 hand-overs).
  Upgrade.test_packed_rings
      the same loop on packed rings (packed_vq=1: their position is the avail slot with
      both wrap counters, kept only by the switch): 3 upgrades, nothing lost.
  Upgrade.test_two_pmds_two_queues
      bridge, 2 PMD threads, testpmd with 2 queue pairs per port: 3 upgrades; every queue
      of both ports carries frames after them, the MAC table is handed over, nothing lost.
  Upgrade.test_refusals_and_systemd
      a port under live migration (a front-end with LOG_ALL and a dirty log) makes the
      upgrade refused, with the port named, and nothing starts; once logging stops, the
      upgrade goes through; under a NOTIFY_SOCKET the old process hands the unit to the
      successor (MAINPID=<new pid> with READY=1); the front-end's connection stays.
  Upgrade.test_failed_successors
      successors that fail to start (exit 1), answer in another hand-over format, refuse,
      or crash after taking the state and fds; a binary writable by others and one not
      owned by root: each upgrade fails with its reason, the same switch process goes on
      forwarding (the loop keeps moving, nothing lost), and a good upgrade then succeeds.

    PYTHONPATH=pylib:bench python3 tests/interop/test_upgrade.py --virtlink build/virtlink
"""
import json
import os
import shutil
import socket
import stat
import subprocess
import time
import unittest

from vltestlib import vhost_peer as hp
from vltestlib import vltest
from vltestlib import vlguest
from vltestlib.notify_socket import NotifySocket

LOOP = 32  # tx_first: one burst of 32 frames per port circulates


def moving(tb, names=("a", "b"), wait=0.3):
    """Both ports' rx_packets grow over `wait` s; returns the later stats."""
    s1 = tb.switch_stats()
    time.sleep(wait)
    s2 = tb.switch_stats()
    for n in names:
        if s2[n]["rx_packets"] <= s1[n]["rx_packets"]:
            raise AssertionError("port %s stopped receiving: %s" % (n, vltest.fmt_stats(s2)))
    return s2


def memory_maps(pid):
    """The guest memory the process maps: {(size, path)} of its shared file mappings that
    are not files of the binary or its libraries (memfd or DPDK's --no-huge files)."""
    return sorted(m for m in vlguest.proc_maps(pid)
                  if "memfd:" in m[1] or "/dev/shm" in m[1] or "rtemap" in m[1])


def sockets(pid):
    return {t for t in vlguest.proc_fds(pid).values() if t.startswith("socket:")}


def fake_successor(tb, name, mode):
    """A root-owned executable speaking the hand-over's first steps, then misbehaving."""
    path = os.path.join(tb.dir, name)
    with open(path, "w") as f:
        f.write("""#!/usr/bin/env python3
import json, os, signal, socket, sys
s = socket.socket(fileno=3)
offer = json.loads(s.recv(65536))
mode = %r
if mode == "format":
    s.send(json.dumps({"format": 999, "version": "9.9.9"}).encode())
elif mode == "refuse":
    s.send(json.dumps({"format": offer["format"], "refused": "no room for this state"}).encode())
elif mode == "crash":
    s.send(json.dumps({"format": offer["format"], "version": "fake"}).encode())
    n = 0
    while True:
        msg, fds, _, _ = socket.recv_fds(s, 70000, 250)
        n += len(fds)
        if msg == b"end":
            break
    print("fake successor: took %%d fds, crashing" %% n, flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)
elif mode == "slow":
    import time
    time.sleep(2)
    sys.exit(1)
s.recv(16)
""" % mode)
    os.chmod(path, 0o755)
    return path


def start_loop(tb, forward="xconnect", pmd_cores="1", queues=1, packed=False):
    tb.start_switch(ports=["a", "b"], forward=forward, pmd_cores=pmd_cores)
    args = ["--rxq=%d" % queues, "--txq=%d" % queues] if queues > 1 else []
    vdevs = ["net_virtio_user%d,path=%s,queues=%d,mac=02:00:00:00:00:0%s%s" % (
        i, tb.sock(n), queues, n, ",packed_vq=1" if packed else "") for i, n in enumerate(("a", "b"))]
    # In a bridge, io forwarding would send a's frames back into the switch from b with a's
    # source MAC: the table flaps and frames die as no_destination. mac forwarding gives
    # each port its own source and the other as destination.
    fwd = "io"
    if forward == "bridge":
        fwd = "mac"
        args += ["--eth-peer=0,02:00:00:00:00:0b", "--eth-peer=1,02:00:00:00:00:0a"]
    tp = tb.start_testpmd("io", vdevs, fwd, args=args, tx_first=True)
    tb.wait_connected(["a", "b"])
    tb.wait_counter("a", "rx_packets", 1, timeout=20)
    tb.wait_counter("b", "rx_packets", 1, timeout=20)
    return tp


class Upgrade(unittest.TestCase):

    def upgrade_once(self, tb, s_before):
        """One good upgrade; checks what must hold right after it. Returns the reply."""
        old = tb.switch.pid
        maps0, socks0 = memory_maps(old), sockets(old)
        ok, res = tb.upgrade()
        self.assertTrue(ok, res)
        self.assertEqual(res["previous_pid"], old)
        self.assertNotEqual(res["pid"], old)
        self.assertEqual(tb.ctl("show")["switch"]["pid"], res["pid"])
        self.assertEqual(res["reinitialised"], [])
        self.assertGreater(res["fds_handed"], 0)
        s = moving(tb)
        for n in ("a", "b"):
            # Carried over: the successor's counters go on from the old process's.
            self.assertGreaterEqual(s[n]["rx_packets"], s_before[n]["rx_packets"])
            self.assertGreaterEqual(s[n]["tx_packets"], s_before[n]["tx_packets"])
        info = tb.ports_info()
        self.assertEqual([info[n]["connects"] for n in ("a", "b")], [1, 1],
                         "a front-end connected again: the hand-over closed its connection")
        self.assertEqual(memory_maps(res["pid"]), maps0, "guest memory mapped differently")
        # Every socket of the old process (listeners and connections) is the new one's.
        self.assertLessEqual(socks0, sockets(res["pid"]))
        return res, s

    def finish(self, tb, tp, queues=1):
        res = tb.stop_testpmd(tp)
        st = tb.wait_quiet()
        vltest.log("final: %s; testpmd %s" % (vltest.fmt_stats(st), res["nic"]))
        vltest.assert_no_corruption(self, st)
        # (Drops after the upgrades: only frames towards a port testpmd closed first.)
        by = vltest.drops_by_reason(st)
        self.assertEqual(vltest.drops_total(st) - by["no_destination"], 0, by)
        self.assertEqual(st["a"]["rx_packets"] + st["b"]["rx_packets"],
                         st["a"]["tx_packets"] + st["b"]["tx_packets"] + vltest.drops_total(st),
                         vltest.fmt_stats(st))
        in_flight = 0
        for i, n in enumerate(("a", "b")):
            nic = res["nic"][i]
            self.assertLessEqual(nic["RX-packets"], st[n]["tx_packets"])
            self.assertLessEqual(st[n]["rx_packets"], nic["TX-packets"])
            in_flight += st[n]["tx_packets"] - nic["RX-packets"]
        self.assertLessEqual(in_flight, 2 * LOOP * queues)  # tx_first: a burst per queue
        return st

    @vltest.ctest("interop_upgrade_io_loop", timeout=90, asan=True)
    def test_io_loop_five_upgrades(self):
        with vltest.Testbed(self) as tb:
            tp = start_loop(tb)
            s = moving(tb)
            drops0 = vltest.drops_total(s)  # (a burst sent before the peer port was up)
            for k in range(5):
                res, s = self.upgrade_once(tb, s)
                vltest.log("upgrade %d: pid %d, paused %.2f ms, %s" %
                           (k + 1, res["pid"], res["paused_ms"], vltest.fmt_stats(s)))
                self.assertEqual(vltest.drops_total(s), drops0, vltest.fmt_stats(s))
            self.finish(tb, tp)

    @vltest.ctest("interop_upgrade_packed", timeout=90, asan=True)
    def test_packed_rings(self):
        with vltest.Testbed(self) as tb:
            tp = start_loop(tb, packed=True)
            s = moving(tb)
            self.assertIn("packed", {v["layout"] for v in tb.ports_info()["a"]["vrings"]})
            drops0 = vltest.drops_total(s)
            for k in range(3):
                res, s = self.upgrade_once(tb, s)
                self.assertEqual(vltest.drops_total(s), drops0, vltest.fmt_stats(s))
                self.assertEqual({v["layout"] for v in tb.ports_info()["a"]["vrings"]}, {"packed"})
            self.finish(tb, tp)

    @vltest.ctest("interop_upgrade_two_pmds", timeout=90, asan=True)
    def test_two_pmds_two_queues(self):
        with vltest.Testbed(self) as tb:
            tp = start_loop(tb, forward="bridge", pmd_cores="0,1", queues=2)
            s = moving(tb)
            drops0 = vltest.drops_total(s)
            fdb0 = {(e["mac"], e["port"]) for e in tb.ctl("fdb")}
            for k in range(3):
                res, s = self.upgrade_once(tb, s)
                self.assertEqual(len(tb.ctl("pmd-stats")), 2)
            fdb1 = {(e["mac"], e["port"]) for e in tb.ctl("fdb")}
            self.assertLessEqual(fdb0, fdb1, "MAC table entries lost in the hand-over")
            s1 = tb.switch_stats()
            time.sleep(0.5)
            s2 = tb.switch_stats()
            for n in ("a", "b"):
                for q1, q2 in zip(s1[n]["queues"], s2[n]["queues"]):
                    self.assertGreater(q2["rx_packets"] + q2["tx_packets"],
                                       q1["rx_packets"] + q1["tx_packets"], (n, q2))
            self.finish(tb, tp, queues=2)

    @vltest.ctest("interop_upgrade_refusals_systemd", timeout=90, asan=True)
    def test_refusals_and_systemd(self):
        with vltest.Testbed(self) as tb, NotifySocket(os.path.join(tb.dir, "notify")) as ns:
            tb.start_switch(ports=["c"], forward="bridge", env=ns.env())
            ns.wait(lambda m: m.get("READY") == "1", 15, "READY=1")
            pid = tb.switch.pid
            proto = hp.DEFAULT_PROTOCOL | hp.PROTO_LOG_SHMFD
            g = hp.Guest(tb.sock("c")).negotiate(protocol=proto,
                                                 features=hp.DEFAULT_FEATURES | hp.VHOST_F_LOG_ALL)
            self.assertTrue(g.features & hp.VHOST_F_LOG_ALL, "LOG_ALL not offered")
            log = hp.DirtyLogFd(hp.log_bytes_for(max(r.gpa + r.size for r in g.mem.regions)))
            self.assertEqual(g.request(hp.SET_LOG_BASE, log.payload(), [log.fd], reply=True),
                             b"\0" * 8)
            vltest._wait(lambda: tb.switch_stats()["c"]["migration"]["logging"], 10, "logging")
            before = set(os.listdir("/proc"))
            ok, err = tb.upgrade()
            self.assertFalse(ok)
            self.assertIn("port c is being live-migrated", err)
            self.assertEqual(tb.ctl("show")["switch"]["pid"], pid)
            # Refused before anything started: no successor was spawned.
            self.assertFalse(any(p.isdigit() and vltest.read_text("/proc/%s/cmdline" % p).find(
                "--handover-fd") >= 0 for p in set(os.listdir("/proc")) - before
                if os.path.exists("/proc/%s/cmdline" % p)))
            self.assertEqual(g.u64(hp.SET_FEATURES, g.features & ~hp.VHOST_F_LOG_ALL), 0)
            n0 = len(ns.messages)
            ok, res = tb.upgrade()
            self.assertTrue(ok, res)
            i = ns.wait(lambda m: m.get("MAINPID") == str(res["pid"]), 10, "MAINPID", n0)
            self.assertEqual(ns.messages[i][1].get("READY"), "1", ns.messages[i])
            self.assertEqual(tb.ports_info()["c"]["connects"], 1)
            g.close()
            log.close()

    @vltest.ctest("interop_upgrade_failures", timeout=120, asan=True)
    def test_failed_successors(self):
        with vltest.Testbed(self) as tb:
            tp = start_loop(tb)
            s = moving(tb)
            drops0 = vltest.drops_total(s)
            pid = tb.switch.pid
            exit1 = os.path.join(tb.dir, "exit1")
            with open(exit1, "w") as f:
                f.write("#!/bin/sh\nexit 1\n")
            os.chmod(exit1, 0o755)
            writable = os.path.join(tb.dir, "writable-virtlink")
            shutil.copy(vltest.VIRTLINK, writable)
            os.chmod(writable, 0o777)
            foreign = os.path.join(tb.dir, "foreign-virtlink")
            shutil.copy(vltest.VIRTLINK, foreign)
            os.chmod(foreign, 0o755)
            os.chown(foreign, 65534, 65534)
            cases = [
                (exit1, "exited (status 1) before it answered"),
                (fake_successor(tb, "format", "format"), "format 999"),
                (fake_successor(tb, "refuse", "refuse"), "refused: no room for this state"),
                (fake_successor(tb, "crash", "crash"), "exited (signal 11) during the hand-over"),
                (writable, "writable by no one else"),
                (foreign, "owned by root"),
                (os.path.join(tb.dir, "missing"), "No such file"),
            ]
            for binary, why in cases:
                ok, err = tb.upgrade(binary)
                vltest.log("upgrade to %s: %s" % (os.path.basename(binary), err.strip()))
                self.assertFalse(ok, binary)
                self.assertIn(why, err)
                self.assertEqual(tb.ctl("show")["switch"]["pid"], pid)
                self.assertTrue(tb.switch.alive())
                s = moving(tb)
                self.assertEqual(vltest.drops_total(s), drops0, vltest.fmt_stats(s))
            self.assertIn("took", tb.switch.output())  # the crashing one had the fds
            self.abandoned_and_relative(tb, pid, writable)
            # The default binary is checked too: the copy this switch now runs from, made
            # writable by all, is refused; made safe again, it is taken.
            own = os.path.join(tb.dir, "own-virtlink")
            shutil.copy(vltest.VIRTLINK, own)
            os.chmod(own, 0o755)
            ok, res = tb.upgrade(own)
            self.assertTrue(ok, res)
            os.chmod(own, 0o777)
            ok, err = tb.upgrade()
            self.assertFalse(ok)
            self.assertIn("%s: refused: the successor's binary must be owned by root" % own, err)
            os.chmod(own, 0o755)
            res, s = self.upgrade_once(tb, moving(tb))
            self.assertEqual(res["binary"], own)
            self.finish(tb, tp)

    def abandoned_and_relative(self, tb, pid, writable):
        """An upgrade request queued behind a slow one whose client hung up is not run
        (counted `abandoned`); a relative BINARY is made absolute by ctl (this shell's
        directory), and refused by the switch when a client sends one."""
        slow = subprocess.Popen([vltest.VIRTLINK, "ctl", "--control", tb.ctl_path, "upgrade",
                                 fake_successor(tb, "slow", "slow")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(0.5)  # the control thread waits for the slow successor's answer
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(tb.ctl_path)
            c.sendall(b'{"cmd": "upgrade", "args": {}}\n')
        out, err = slow.communicate(timeout=30)
        self.assertEqual(slow.returncode, 1, out)
        self.assertIn(b"exited (status 1) before it answered", err)
        vltest._wait(lambda: tb.ctl("stats")["control"]["abandoned"] == 1, 10,
                        "the hung-up request counted abandoned")
        self.assertEqual(tb.ctl("show")["switch"]["pid"], pid)
        self.assertEqual(tb.switch.output().count("upgrade: started"), 4 + 1)  # the cases that started one, and this
        r = subprocess.run([vltest.VIRTLINK, "ctl", "--control", tb.ctl_path, "upgrade",
                            os.path.basename(writable)], cwd=tb.dir, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("%s: refused" % writable, r.stderr.decode())
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(tb.ctl_path)
            c.sendall(b'{"cmd": "upgrade", "args": {"argv": ["virtlink"]}}\n')
            reply = json.loads(c.makefile().readline())
        self.assertIn("virtlink: the binary must be an absolute path", reply["error"])


if __name__ == "__main__":
    vltest.main(default_timeout=120)
