#!/usr/bin/env python3
"""Faults (issue 8): the switch restarted under traffic with DPDK virtio-user front-ends in
server mode (the switch is the vhost-user client), front-ends killed mid-traffic, and the
socket files' owner, group and mode.

    PYTHONPATH=pylib:bench python3 tests/interop/test_faults.py --virtlink build/virtlink -v [Faults.test_...]
"""
import grp
import os
import pwd
import re
import signal
import socket
import stat
import subprocess
import time
import unittest

from vltestlib import vlguest
from vltestlib import vltest
from vltestlib.vltest import log


def memfd_maps(pid):
    """(number, bytes) of the switch's mappings of front-end memory (memfds)."""
    n = size = 0
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            if "memfd:" in line:
                lo, hi = line.split()[0].split("-")
                n += 1
                size += int(hi, 16) - int(lo, 16)
    return n, size


def fd_count(pid):
    last = None
    for _ in range(50):
        n = len(os.listdir("/proc/%d/fd" % pid))
        if n == last:
            return n
        last = n
        time.sleep(0.02)
    return last


def wait(cond, timeout, what):
    vltest._wait(cond, timeout, what, 0.1)


class Faults(unittest.TestCase):

    # -- switch restart under traffic, the switch as the vhost-user client ------------------
    @vltest.ctest("interop_faults_switch_restart_dpdk_server", timeout=120)
    def test_switch_restart_dpdk_server(self):
        """testpmd txonly (virtio-user server=1) -> switch (client ports, xconnect) -> testpmd
        rxonly (server=1). The switch is stopped (SIGTERM) and later killed (SIGKILL) while
        traffic flows; each time a new switch connects to the same testpmd processes and
        traffic resumes without restarting them."""
        with vlguest.GuestTestbed(self) as tb:
            rx = tb.start_testpmd("rx", [tb.virtio_user("b", server=1)], "rxonly")
            wait(lambda: os.path.exists(tb.sock("b")), 15, "testpmd rx listening")
            tx = tb.start_testpmd("tx", [tb.virtio_user("a", server=1)], "txonly",
                                  args=["--txpkts=64"])
            wait(lambda: os.path.exists(tb.sock("a")), 15, "testpmd tx listening")
            delivered = []
            for rnd, sig in enumerate((None, signal.SIGTERM, signal.SIGKILL)):
                if sig is not None:
                    pid = tb.switch.pid
                    if sig == signal.SIGTERM:
                        tb.stop_switch(sig)
                    else:
                        tb.switch.stop(sig, timeout=10)
                        self.assertFalse(vltest._pid_alive(pid))
                    t_down = time.monotonic()
                    log("switch %d stopped with %s under traffic" % (pid, sig.name))
                tb.start_switch(ports=[], client_ports=["a", "b"], forward="xconnect")
                tb.wait_connected(["a", "b"], timeout=30)
                tb.wait_counter("b", "tx_packets", 1, timeout=30)
                if sig is not None:
                    log("round %d: the new switch forwards %.2f s after the old one stopped" %
                        (rnd, time.monotonic() - t_down))
                st = tb.wait_counter("b", "tx_packets", 5000, timeout=30)
                info = tb.ports_info()
                self.assertEqual([info[p]["connects"] for p in ("a", "b")], [1, 1])
                vltest.assert_no_corruption(self, st)
                self.assertTrue(tx.alive() and rx.alive(), "a testpmd front-end died")
                delivered.append(st["b"]["tx_packets"])
            txres = tb.stop_testpmd(tx)
            st = tb.wait_quiet()
            rxres = tb.stop_testpmd(rx)
            vltest.assert_no_corruption(self, st)
            got = rxres["fwd"][0]["RX-packets"]
            log("delivered per switch: %s; testpmd tx sent %d, rx got %d" %
                (delivered, txres["fwd"][0]["TX-packets"], got))
            # Everything the last switch delivered reached the receiver.
            self.assertGreaterEqual(got, st["b"]["tx_packets"])

    # -- front-ends killed mid-traffic ---------------------------------------------------------
    @vltest.ctest("interop_faults_frontend_killed", timeout=120, asan=True)
    def test_frontend_killed_mid_traffic(self):
        """testpmd txonly on a -> switch -> testpmd rxonly on b. Four rounds: the receiver
        (whose memory the PMD thread writes) or the sender (whose memory it reads) is killed
        with SIGKILL while frames flow, then started again. The switch must survive (under
        ASan: no report, so nothing touched the memory after it was unmapped), drop only that
        connection, unmap its memory and close its fds (back to the baseline without peers),
        and forward again."""
        with vltest.Testbed(self) as tb:
            tb.start_switch(ports=["a", "b"], forward="xconnect")
            pid = tb.switch.pid
            base_fds = fd_count(pid)
            base_maps = memfd_maps(pid)
            rx = tb.start_testpmd("rx", [tb.virtio_user("b")], "rxonly")
            tb.wait_connected(["b"])
            tx = tb.start_testpmd("tx", [tb.virtio_user("a")], "txonly", args=["--txpkts=1518"])
            tb.wait_connected(["a"])
            for rnd in range(4):
                victim = "b" if rnd % 2 == 0 else "a"
                st = tb.switch_stats()
                tb.wait_counter("b", "tx_packets", st["b"]["tx_packets"] + 5000, timeout=30)
                p = rx if victim == "b" else tx
                p.interactive = False
                p.stop(signal.SIGKILL, timeout=10)
                wait(lambda: tb.ports_info()[victim]["state"] != "connected", 10,
                     "port %s disconnected after its front-end was killed" % victim)
                info = tb.ports_info()
                self.assertEqual(info[victim]["mapped_bytes"], 0)
                self.assertTrue(tb.switch.alive())
                log("round %d: killed the %s front-end mid-traffic; port down, memory unmapped" %
                    (rnd, "receiving" if victim == "b" else "sending"))
                name = "%s%d" % ("rx" if victim == "b" else "tx", rnd)
                if victim == "b":
                    rx = tb.start_testpmd(name, [tb.virtio_user("b")], "rxonly")
                else:
                    tx = tb.start_testpmd(name, [tb.virtio_user("a")], "txonly", args=["--txpkts=1518"])
                tb.wait_connected([victim])
            st = tb.switch_stats()
            tb.wait_counter("b", "tx_packets", st["b"]["tx_packets"] + 5000, timeout=30)
            tb.stop_testpmd(tx)
            tb.wait_quiet()
            tb.stop_testpmd(rx)
            wait(lambda: all(p["state"] != "connected" for p in tb.ports_info().values()), 10,
                 "both ports disconnected")
            self.assertEqual(memfd_maps(pid), base_maps, "front-end memory still mapped")
            self.assertEqual(fd_count(pid), base_fds, "fds not back to the baseline")
            st = tb.switch_stats()
            self.assertEqual(st["a"]["drops"]["bad_descriptor"] + st["b"]["drops"]["bad_descriptor"], 0)

    # -- socket files: owner, group, mode ----------------------------------------------------
    @vltest.ctest("interop_faults_socket_permissions", timeout=60, asan=True)
    def test_socket_owner_group_mode(self):
        """Default 0600 and our own user; --socket-mode/--socket-owner/--socket-group for every
        port; a [[port]]'s own socket_* keys win over the switch-wide ones; an unknown group
        is a start-up error; a second switch cannot take over a live port's socket."""
        nobody = pwd.getpwnam("nobody").pw_uid
        nogroup = grp.getgrnam("nogroup").gr_gid
        with vltest.Testbed(self) as tb:
            tb.start_switch(ports=["a"], forward="bridge")
            s = os.stat(tb.sock("a"))
            self.assertTrue(stat.S_ISSOCK(s.st_mode))
            self.assertEqual(stat.S_IMODE(s.st_mode), 0o600)
            self.assertEqual((s.st_uid, s.st_gid), (os.geteuid(), os.getegid()))
            c = os.stat(tb.ctl_path)  # the control socket: 0600 and ours too
            self.assertEqual((stat.S_IMODE(c.st_mode), c.st_uid, c.st_gid),
                             (0o600, os.geteuid(), os.getegid()))
        with vltest.Testbed(self) as tb:
            cfg = ('socket_group = "nogroup"\ncontrol_mode = 0o640\ncontrol_group = "nogroup"\n'
                   '[[port]]\nname = "b"\npath = "%s"\nsocket_mode = 0o640\nsocket_group = "root"\n'
                   % tb.sock("b"))
            tb.start_switch(ports=["a"], forward="bridge", config=cfg,
                            extra=["--socket-mode", "0660", "--socket-owner", "nobody",
                                   "--control-mode", "0660", "--control-owner", "nobody"])
            a, b = os.stat(tb.sock("a")), os.stat(tb.sock("b"))
            self.assertEqual((stat.S_IMODE(a.st_mode), a.st_uid, a.st_gid), (0o660, nobody, nogroup))
            self.assertEqual((stat.S_IMODE(b.st_mode), b.st_uid, b.st_gid), (0o640, nobody, 0))
            # The control socket: its mode from the command line (winning over the file's),
            # its group from the file, its owner from the command line.
            c = os.stat(tb.ctl_path)
            self.assertEqual((stat.S_IMODE(c.st_mode), c.st_uid, c.st_gid), (0o660, nobody, nogroup))
            self.assertEqual(tb.ports_info()["a"]["state"], "waiting")
        with vltest.Testbed(self) as tb:
            r = subprocess.run([vltest.VIRTLINK, "switch", "--port", "a=vhost-user:" + tb.sock("a"),
                                "--control", tb.ctl_path, "--socket-group", "no-such-group-vl"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(b"unknown socket group", r.stdout)
            self.assertFalse(os.path.exists(tb.sock("a")))
            r = subprocess.run([vltest.VIRTLINK, "switch", "--port", "a=vhost-user:" + tb.sock("a"),
                                "--control", tb.ctl_path, "--socket-mode", "0999"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
            self.assertEqual(r.returncode, 2)

            # A second switch naming a socket a running switch serves is refused, and the
            # running switch's socket stays (it used to be taken over, then removed when the
            # second one exited).
            tb.start_switch(ports=["a"], forward="bridge")
            before = os.stat(tb.sock("a")).st_ino
            r = subprocess.run([vltest.VIRTLINK, "switch", "--port", "a=vhost-user:" + tb.sock("a"),
                                "--control", tb.ctl_path + "-2"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
            self.assertNotEqual(r.returncode, 0, r.stdout)
            self.assertIn(b"another process is listening on the vhost-user socket", r.stdout)
            self.assertEqual(os.stat(tb.sock("a")).st_ino, before)
            self.assertFalse(os.path.exists(tb.ctl_path + "-2"))
            # ... and the running switch still accepts a front-end on it.
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(tb.sock("a"))
            c.close()

    # -- usage errors and what the switch says (new-user findings) ---------------------------
    @vltest.ctest("interop_faults_usage_errors", timeout=60)
    def test_usage_errors_exit_2(self):
        """Every command-line usage error exits 2 with a message on stderr, whether CLI11 finds
        it (unknown option, a value outside its set or range, a missing value or subcommand:
        CLI11's own codes were 105 and others) or the command does (a value it checks itself,
        xconnect leaving a port without a peer, from --port or from the TOML file; an
        unknown socket owner or group and a socket directory that does not exist, which
        exited 1; an empty --pmd-cores, which started one unpinned thread, and one naming
        a CPU twice; a ctl command missing an argument, exit 1 when no switch ran); nothing
        is started and no directory made. A TOML error names FILE:LINE: port NAME. --help
        and --version exit 0."""
        with vltest.Testbed(self) as tb:
            def run(*args):
                return subprocess.run([vltest.VIRTLINK] + list(args), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                      timeout=20)
            port_a = ["--port", "a=vhost-user:" + tb.sock("a"), "--control", tb.ctl_path]
            cfg = os.path.join(tb.dir, "odd.toml")
            with open(cfg, "w") as f:
                f.write('forward = "xconnect"\n')
                for n in ("b", "c", "d"):
                    f.write('[[port]]\nname = "%s"\npath = "%s"\n' % (n, tb.sock(n)))
            bad_toml = os.path.join(tb.dir, "bad.toml")
            with open(bad_toml, "w") as f:
                f.write('[[port]]\nname = "vm1"\npath = "%s"\nmtu = 12\n' % tb.sock("b"))
            nodir = os.path.join(tb.dir, "nodir")
            cases = [
                (["switch", "--no-such-option"] + port_a, "--no-such-option"),
                (["switch", "--forward", "hub"] + port_a, "hub"),
                (["switch", "--max-queues", "9"] + port_a, "--max-queues"),
                (["switch", "--burst", "many"] + port_a, "--burst"),
                (["switch", "--port"], "--port"),
                ([], "subcommand"),
                (["ctl", "--control", tb.ctl_path, "stats", "extra"], "takes no arguments"),
                (["switch", "--burst", "65"] + port_a, "--burst 65"),
                (["switch", "--forward", "xconnect"] + port_a, "port 'a' has no peer"),
                (["switch", "--config", cfg, "--control", tb.ctl_path], "port 'd' has no peer"),
                (["gen", "--port", "g0=vhost-user-client:" + tb.sock("a"), "--duration", "1"],
                 "even number of --port"),
                (["switch", "--socket-owner", "no-such-user-vl"] + port_a,
                 "port a: unknown socket owner 'no-such-user-vl'"),
                (["switch", "--socket-group", "no-such-group-vl"] + port_a, "unknown socket group"),
                (["switch", "--control-group", "no-such-group-vl"] + port_a,
                 "control socket: unknown socket group 'no-such-group-vl'"),
                (["switch", "--control-owner", "no-such-user-vl"] + port_a,
                 "control socket: unknown socket owner"),
                (["switch", "--control-mode", "0999"] + port_a, "--control-mode '0999'"),
                (["switch", "--pmd-cores", ""] + port_a, "an empty CPU list"),
                (["switch", "--pmd-cores", "1,1"] + port_a, "CPU 1 is given twice"),
                (["switch", "--pmd-cores", "0-1,1"] + port_a, "CPU 1 is given twice"),
                (["switch", "--pmd-cores", "0", "--pmd-cores", "1"] + port_a, "--pmd-cores"),
                (["switch", "--port", "a=vhost-user:" + os.path.join(nodir, "a.sock"),
                  "--control", tb.ctl_path], "directory %s does not exist" % nodir),
                (["switch", "--port", "a=vhost-user:" + tb.sock("a"),
                  "--control", os.path.join(nodir, "ctl")],
                 "control socket %s/ctl: directory %s does not exist" % (nodir, nodir)),
                (["switch", "--config", bad_toml, "--control", tb.ctl_path],
                 "%s:4: port vm1: 'mtu' must be an integer in 68..65535" % bad_toml),
                (["ctl", "--control", tb.ctl_path, "set-flush"], "usage: set-flush"),
                (["ctl", "--control", tb.ctl_path, "set-flush", "a"], "usage: set-flush"),
                (["ctl", "--control", tb.ctl_path, "link", "a"], "usage: link"),
                (["ctl", "--control", tb.ctl_path, "log-level", "info", "x"], "usage: log-level"),
                (["ctl", "--control", tb.ctl_path], "command is required"),
            ] + [  # gen's values: a negative duration aborted (bad_alloc), others were accepted
                (["gen", "--port", "g0=vhost-user-client:" + tb.sock("a"),
                  "--port", "g1=vhost-user-client:" + tb.sock("b")] + extra, msg)
                for extra, msg in ((["--duration", "-1"], "--duration"),
                                   (["--rate", "-5"], "--rate"),
                                   (["--cpu", "4095"], "--cpu 4095"),
                                   (["--duration", "100000"], "frames per stream planned"),
                                   (["--json", "/nonexistent/x.json"], "--json"))]
            for argv, msg in cases:
                r = run(*argv)
                err = r.stderr.decode(errors="replace")
                self.assertEqual(r.returncode, 2, "virtlink %s: %s" % (" ".join(argv), err))
                self.assertIn(msg, err, argv)
                for n in ("a", "b", "c", "d"):
                    self.assertFalse(os.path.exists(tb.sock(n)), argv)
                self.assertFalse(os.path.exists(tb.ctl_path), argv)
                self.assertFalse(os.path.exists(nodir), argv)  # (it used to be made and left)
            # A fourth port on the command line completes the TOML file's pairs: the switch
            # starts.
            with open(cfg) as f:
                tb.start_switch(ports=["e"], forward=None, pmd_cores="1", config=f.read())
            self.assertEqual(sorted(tb.ports_info()), ["b", "c", "d", "e"])
            # A command the switch does not know is a usage error too, and so is a known one
            # with its arguments wrong.
            r = run("ctl", "--control", tb.ctl_path, "stat")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("unknown command 'stat'", r.stderr.decode(), r.stderr)
            for argv in (["set-flush", "b"], ["fdb", "b", "all", "extra"], ["log-level", "loud"],
                         ["link"], ["unlink", "b"]):
                r = run("ctl", "--control", tb.ctl_path, *argv)
                self.assertEqual(r.returncode, 2, (argv, r.stderr))
                self.assertIn("usage:", r.stderr.decode(), argv)
            # gen told to listen (vhost-user:) on the switch's own server socket refuses
            # instead of removing it: the switch's port stays reachable.
            r = run("gen", "--port", "g0=vhost-user:" + tb.sock("b"),
                    "--port", "g1=vhost-user:" + tb.sock("c"), "--duration", "1")
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("listening on", r.stderr.decode(), r.stderr)
            for n in ("b", "c"):
                self.assertTrue(os.path.exists(tb.sock(n)), n)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(tb.sock("b"))  # the switch still accepts on it
            s.close()
            for argv, out in ((["--help"], "switch"), (["switch", "--help"], "--forward"),
                              (["--version"], "")):
                r = run(*argv)
                self.assertEqual(r.returncode, 0, (argv, r.stderr))
                self.assertIn(out, r.stdout.decode(), argv)
                self.assertNotEqual(r.stdout.strip(), b"", argv)
            # ctl to a switch that is not running: exit 1 (not a usage error), with a hint.
            r = run("ctl", "--control", os.path.join(tb.dir, "none.ctl"), "stats")
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("is the switch running", r.stderr.decode(), r.stderr)

    @vltest.ctest("interop_faults_unpinned_pmd_port_names", timeout=60)
    def test_unpinned_pmd_and_port_names(self):
        """An unpinned PMD thread (no --pmd-cores) is "cpu any" in the log and in the text of
        ctl pmd-stats and pmd-rxq-show, -1 in their JSON (unchanged); the back-end's
        memory-table line names its port like the other per-port lines."""
        with vltest.Testbed(self) as tb:
            tb.start_switch(ports=["a", "b"], forward="bridge", pmd_cores=None)
            vnf = vltest.Proc("vnf", [vltest.VIRTLINK, "vnf",
                                      "--port", "vhost-user-client:" + tb.sock("a"),
                                      "--port", "vhost-user-client:" + tb.sock("b"),
                                      "--pmd-mode", "interrupt", "--queue-size", "256"], tb.dir)
            tb.procs.append(vnf)
            tb.wait_connected(["a", "b"])
            line = r"port %s: memory table with \d+ regions, \d+ MiB mapped"
            wait(lambda: all(re.search(line % p, tb.switch.output()) for p in "ab"), 5,
                 "the memory-table lines of ports a and b")
            out = tb.switch.output()
            self.assertNotIn("vhost-user: memory table", out)
            self.assertRegex(out, r"pmd 0: \w+ mode on cpu any")
            self.assertEqual([t["cpu"] for t in tb.ctl("pmd-stats")], [-1])
            self.assertEqual([t["cpu"] for t in tb.ctl("pmd-rxq-show")["pmds"]], [-1])
            text = tb.ctl("pmd-stats", json_out=False)
            self.assertRegex(text, r"^pmd 0 \(cpu any, ", text)
            text = tb.ctl("pmd-rxq-show", json_out=False)
            self.assertRegex(text, r"(?m)^pmd 0 cpu any: ", text)
            # (the last line names the switch by its control path, which may hold "-1")
            self.assertNotIn("-1", "".join(text.splitlines(True)[:-1]), text)


if __name__ == "__main__":
    vltest.main(default_timeout=170)
