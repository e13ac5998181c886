#!/usr/bin/env python3
"""The README's peer recipes, run as printed ("Running the switch" and "Peers"): the switch
command of each form, QEMU and DPDK testpmd, taken from README.md at run time.

What is substituted, and only that: the `...` of the QEMU lines becomes the test guest
image's arguments (TCG, `-m 256M` to match the printed memory backend, the kernel and
initrd, `vl.keep=1` on the kernel command line, `-global virtio-net-pci.vectors=0` as the
README says for TCG, and the serial console on a unix socket the test reads and types on);
`virtlink` is found on PATH (the build directory put first). Nothing else changes: the
commands run through `sh -c "exec COMMAND"` with their fixed paths (/tmp/vm1.sock,
/tmp/vm2.sock, /tmp/virtlink.ctl, DPDK prefixes vm1 and vm2), so the tests hold
vltest.readme_paths() while they run.

  * client mode, the recommended form (test_client_mode): the switch connects to its
    peers. Two testpmd peers (txonly on vm1, icmpecho on vm2, both `server=1`): frames
    cross the switch; the switch is stopped with SIGTERM and started again with the same
    command: both testpmds (not restarted) are connected again and frames cross again;
    testpmd's own counters cover what both switches took. Then QEMU (`server=on`) on vm1
    in place of the txonly peer: the guest pings testpmd's icmpecho (ARP and ICMP answered
    by DPDK), the switch is restarted again, and the guest, not rebooted, pings again.
  * server mode, the second form (test_server_mode): the switch listens; QEMU
    (`reconnect=1`) on vm1, testpmd (without `server=1`) on vm2: the guest pings; after a
    restart of the switch QEMU is back and testpmd is not (as the README says), until
    testpmd is run again with the same command: then the guest pings again.

Each testpmd's forwarding lcore must be off the switch's PMD CPU (`--pmd-cores` of the
printed switch command). Every command of the "Peers" section must be one of those run here (a new one fails the
test until it is tested too).

    PYTHONPATH=pylib:bench python3 tests/interop/test_readme_peers.py --virtlink build/virtlink [-v]
"""
import os
import re
import shlex
import time
import unittest

from vltestlib import vltest
from vltestlib import vlguest
from vltestlib.vltest import log

PATHS = ("/tmp/vm1.sock", "/tmp/vm2.sock", "/tmp/virtlink.ctl")
CTL = "/tmp/virtlink.ctl"
GUEST_IP = "10.0.0.1/24"
PEER_ADDR = "10.0.0.2"   # anything on the guest's subnet: testpmd's icmpecho answers every ARP


def peer_recipes(test):
    """The README's commands by role; asserts "Peers" prints nothing else."""
    top = vltest.readme_command("virtlink switch --port vm1=vhost-user-client:")
    cmds = vltest.readme_commands("### Peers")
    roles = {}

    def role(c):
        if c.startswith("virtlink switch "):
            return "switch_server"
        if c.startswith("qemu-system-x86_64 "):
            return "qemu_server" if "server=on" in c else "qemu_client"
        if c.startswith("dpdk-testpmd "):
            if "server=1" not in c:
                return "testpmd_client"
            return "testpmd_txonly" if "txonly" in c else "testpmd_server"
        return None
    for c in cmds:
        r = role(c)
        test.assertIsNotNone(r, "README \"Peers\" prints a command this test does not run: %s" % c)
        test.assertNotIn(r, roles, "two %s commands in README \"Peers\"" % r)
        roles[r] = c
    test.assertEqual(sorted(roles), sorted(["switch_server", "qemu_server", "qemu_client",
                                            "testpmd_server", "testpmd_txonly",
                                            "testpmd_client"]), cmds)
    test.assertIn("vm2=vhost-user-client:", top)
    roles["switch_client"] = top
    return roles


def cpus(spec):
    """A CPU list ("0", "1,3", "2-5") as a list of ints."""
    out = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


class Readme:
    """Runs README commands in a vlguest.GuestTestbed: the switch (tb.switch, so tb.ctl(),
    wait_connected() and stop_switch() work, with the recipe's control path) and peers."""

    def __init__(self, test, tb):
        self.test, self.tb = test, tb
        self.env = dict(os.environ, PATH=os.path.dirname(vltest.VIRTLINK) + ":" +
                        os.environ.get("PATH", ""))
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
            self.env.pop(k, None)
        tb.ctl_path = CTL
        tb.prefixes += ["vm1", "vm2"]  # the recipes' --file-prefix: removed at the end
        self.n_switch = 0

    def run(self, name, cmd):
        p = vltest.Proc(name, ["sh", "-c", "exec " + cmd], self.tb.dir, env=self.env)
        self.tb.procs.append(p)
        return p

    def start_switch(self, cmd):
        if self.tb.switch is not None:
            self.tb.stop_switch()  # SIGTERM: exit status 0, no sanitizer report
        self.n_switch += 1
        env = dict(self.env)
        env.setdefault("ASAN_OPTIONS", "abort_on_error=0:detect_leaks=1")
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        sw = vltest.Proc("switch-%d" % self.n_switch, ["sh", "-c", "exec " + cmd], self.tb.dir,
                         env=env)
        self.tb.procs.append(sw)
        self.tb.switch = sw

        def answers():
            if not sw.alive():
                raise AssertionError("the switch exited (%s):\n%s" % (sw.p.returncode,
                                                                      sw.output()))
            try:
                self.tb.ctl("version")
                return True
            except AssertionError:
                return False
        vltest._wait(answers, 15, "the switch's control socket %s" % CTL, 0.1)
        return sw

    def guest(self, qemu_cmd, name):
        """The README's QEMU line with `...` replaced by the guest image's arguments."""
        self.test.assertEqual(qemu_cmd.count(" ... "), 1, qemu_cmd)
        log("README command, its ... replaced: %s" % qemu_cmd)
        image = vlguest.IMAGE_DIR
        kernel = os.path.join(image, "vmlinux")
        if not os.path.exists(kernel):
            kernel = os.path.join(image, "vmlinuz")
        console = os.path.join(self.tb.dir, name + ".console")
        serial = os.path.join(self.tb.dir, name + ".serial")
        args = ["-machine", "accel=tcg", "-cpu", "max", "-m", "256M", "-nographic",
                "-no-reboot", "-kernel", kernel, "-initrd",
                os.path.join(image, "initramfs.cpio.gz"), "-append",
                "console=ttyS0 quiet panic=-1 vl.name=%s vl.ip=%s vl.keep=1" % (name, GUEST_IP),
                "-global", "virtio-net-pci.vectors=0",
                "-chardev", "socket,id=ser0,path=%s,server=on,wait=off,logfile=%s" %
                (console, serial), "-serial", "chardev:ser0", "-monitor", "none"]
        cmd = qemu_cmd.replace(" ... ", " " + " ".join(shlex.quote(a) for a in args) + " ")
        p = self.run("qemu-" + name, cmd)
        return vlguest.Guest.attach(self.tb, name, p, console, serial, GUEST_IP)

    def check_lcores(self, p, switch_cmd):
        """testpmd's forwarding lcores (threads rte-worker-N) are off the CPUs of the
        switch's PMD threads (--pmd-cores in the switch's command)."""
        pmd = set(cpus(re.search(r"--pmd-cores (\S+)", switch_cmd).group(1)))
        workers = {}
        for tid in os.listdir("/proc/%d/task" % p.pid):
            with open("/proc/%d/task/%s/comm" % (p.pid, tid)) as f:
                comm = f.read().strip()
            if comm.startswith("rte-worker"):
                with open("/proc/%d/task/%s/status" % (p.pid, tid)) as f:
                    allowed = re.search(r"^Cpus_allowed_list:\s+(\S+)", f.read(), re.M).group(1)
                workers[comm] = set(cpus(allowed))
        self.test.assertTrue(workers, "%s has no forwarding lcore thread" % p.name)
        for comm, allowed in workers.items():
            self.test.assertFalse(allowed & pmd, "%s: %s may run on the switch's PMD CPUs %s"
                                  % (p.name, comm, sorted(pmd)))

    def testpmd_counts(self, p):
        res = self.tb.stop_testpmd(p)  # SIGINT: testpmd prints its forward statistics
        fwd = res["fwd"].get(0)
        self.test.assertIsNotNone(fwd, res["text"][-3000:])
        log("%s: RX %d TX %d" % (p.name, fwd["RX-packets"], fwd["TX-packets"]))
        return fwd


class ReadmePeers(unittest.TestCase):

    @vltest.ctest("readme_peers_client_mode", timeout=150, qemu=True)
    def test_client_mode(self):
        r = peer_recipes(self)
        with vltest.readme_paths(PATHS), vlguest.GuestTestbed(self) as tb:
            rd = Readme(self, tb)
            rd.start_switch(r["switch_client"])
            self.assertEqual({p["name"]: p["type"] for p in tb.ctl("ports")},
                             {"vm1": "vhost-user-client", "vm2": "vhost-user-client"})
            echo = rd.run("testpmd-vm2", r["testpmd_server"])
            tx = rd.run("testpmd-vm1", r["testpmd_txonly"])
            tb.wait_connected(["vm1", "vm2"], timeout=30)
            for p in (echo, tx):
                rd.check_lcores(p, r["switch_client"])
            st1 = tb.wait_counter("vm2", "tx_packets", 1000, timeout=30)
            vltest.assert_no_corruption(self, st1)
            log("first switch: " + vltest.fmt_stats(st1))

            # Restart: SIGTERM, the same command; the testpmds are not touched.
            rd.start_switch(r["switch_client"])
            tb.wait_connected(["vm1", "vm2"], timeout=30)
            st2 = tb.wait_counter("vm2", "tx_packets", 1000, timeout=30)
            self.assertGreaterEqual(st2["vm1"]["rx_packets"], 1000, vltest.fmt_stats(st2))
            self.assertTrue(tx.alive() and echo.alive())
            txc = rd.testpmd_counts(tx)
            st2 = tb.wait_quiet()
            log("second switch: " + vltest.fmt_stats(st2))
            vltest.assert_no_corruption(self, st2)
            # testpmd sent at least what the two switches took from it.
            self.assertGreaterEqual(txc["TX-packets"],
                                    st1["vm1"]["rx_packets"] + st2["vm1"]["rx_packets"])

            # QEMU on vm1 in place of the txonly peer; the switch connects to it.
            g = rd.guest(r["qemu_server"], "g1")
            g.wait_ready(timeout=120)
            tb.wait_connected(["vm1", "vm2"], timeout=30)
            vlguest.ping(self, g, PEER_ADDR, count=5)
            rd.start_switch(r["switch_client"])
            tb.wait_connected(["vm1", "vm2"], timeout=30)
            vlguest.ping(self, g, PEER_ADDR, count=5)
            st3 = tb.switch_stats()  # the third switch: since the restart only
            self.assertGreaterEqual(st3["vm1"]["rx_packets"], 5, vltest.fmt_stats(st3))
            self.assertGreaterEqual(st3["vm2"]["rx_packets"], 5, vltest.fmt_stats(st3))
            self.assertEqual(g.console.count(r"^VL-READY "), 1, "the guest booted again")
            echoc = rd.testpmd_counts(echo)
            self.assertGreater(echoc["RX-packets"], 0)
            self.assertGreaterEqual(echoc["TX-packets"], 10)  # 10 echo replies at least

    @vltest.ctest("readme_peers_server_mode", timeout=120, qemu=True)
    def test_server_mode(self):
        r = peer_recipes(self)
        with vltest.readme_paths(PATHS), vlguest.GuestTestbed(self) as tb:
            rd = Readme(self, tb)
            rd.start_switch(r["switch_server"])
            self.assertEqual({p["name"]: p["type"] for p in tb.ctl("ports")},
                             {"vm1": "vhost-user", "vm2": "vhost-user"})
            g = rd.guest(r["qemu_client"], "g1")
            echo = rd.run("testpmd-vm2", r["testpmd_client"])
            g.wait_ready(timeout=120)
            tb.wait_connected(["vm1", "vm2"], timeout=30)
            rd.check_lcores(echo, r["switch_server"])
            vlguest.ping(self, g, PEER_ADDR, count=5)

            # Restart: QEMU reconnects (reconnect=1); DPDK's virtio-user does not.
            rd.start_switch(r["switch_server"])
            tb.wait_connected(["vm1"], timeout=30)
            time.sleep(3)
            info = tb.ports_info()
            self.assertNotEqual(info["vm2"]["state"], "connected",
                                "testpmd reconnected: README \"Peers\" says it does not")
            self.assertTrue(echo.alive(), "testpmd exited:\n" + echo.output()[-2000:])
            first = rd.testpmd_counts(echo)
            self.assertGreaterEqual(first["TX-packets"], 5)  # its echo replies

            # Run it again, the same command: then the guest pings again.
            echo2 = rd.run("testpmd-vm2-again", r["testpmd_client"])
            tb.wait_connected(["vm1", "vm2"], timeout=30)
            vlguest.ping(self, g, PEER_ADDR, count=5)
            st = tb.switch_stats()
            self.assertGreaterEqual(st["vm1"]["rx_packets"], 5, vltest.fmt_stats(st))
            self.assertGreaterEqual(st["vm2"]["tx_packets"], 5, vltest.fmt_stats(st))
            vltest.assert_no_corruption(self, st)
            self.assertEqual(g.console.count(r"^VL-READY "), 1, "the guest booted again")
            self.assertGreaterEqual(rd.testpmd_counts(echo2)["TX-packets"], 5)


if __name__ == "__main__":
    vlguest.main(default_timeout=140)
