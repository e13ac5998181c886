#!/usr/bin/env python3
"""`virtlink top` ("See inside it" item 4): the live view of a running switch, run in a
detached tmux session (a real terminal, 200x50) while DPDK virtio-user peers send through
the switch (testpmd txonly on port a, rxonly on port b, cross-connected). The pane shows
both ports with their rates (a receives, b is sent to), the PMD thread with its busy % and
rxqs; a sort key moves the sort marker and reorders the ports; `q` and Ctrl-C each end the
view with status 0 and the terminal as it was (settings, main screen, cursor shown). The
README's commands ("### Live view") are the ones run here, as printed; the second is the
one-frame form for scripts (stdout not a terminal)."""

import os
import re
import shutil
import subprocess
import time
import unittest

from vltestlib import vltest
from vltestlib.vltest import log

README_CTL = "/tmp/virtlink.ctl"  # the control socket the README's commands name

PORT_RE = re.compile(r"^(\S+)\s+(connected|waiting|down)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s*$")
PMD_RE = re.compile(r"^\s*(\d+)\s+(\S+)\s+(poll|interrupt|adaptive)\s+(\d+\.\d)\s+(\S+)\s+(\S+)\s+(.*)$")


def si_value(text):
    """top's SI rate ("1.49M", "950", "-") as a number (None for "-")."""
    if text == "-":
        return None
    mult = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    return float(text[:-1]) * mult[text[-1]] if text[-1] in mult else float(text)


def parse(screen):
    """The ports ({name: (state, rx_pps, rx_bps, tx_pps, tx_bps, drops)}, in screen order
    as a list of names too) and PMD lines ([(pmd, busy, rxqs)]) of a captured frame."""
    ports, order, pmds, section = {}, [], [], None
    for line in screen.splitlines():
        if line.startswith("PORT"):
            section = "ports"
            continue
        if line.startswith("PMD"):
            section = "pmds"
            continue
        m = PORT_RE.match(line) if section == "ports" else None
        if m:
            ports[m.group(1)] = (m.group(2),) + tuple(si_value(m.group(i)) for i in (3, 4, 5, 6)) + (int(m.group(7)),)
            order.append(m.group(1))
        m = PMD_RE.match(line) if section == "pmds" else None
        if m:
            pmds.append((int(m.group(1)), float(m.group(4)), m.group(7)))
    return ports, order, pmds


class Tmux:
    """A private tmux server (its own socket in the test's directory, no configuration
    file) with one detached session running `script` under bash."""

    def __init__(self, tb, name, script):
        self.base = ["tmux", "-S", os.path.join(tb.dir, "tmux.sock"), "-f", "/dev/null"]
        self.name = name
        path = os.path.join(tb.dir, name + ".sh")
        with open(path, "w") as f:
            f.write(script)
        self.run("new-session", "-d", "-s", name, "-x", "200", "-y", "50", "bash " + path)

    def run(self, *args, check=True):
        r = subprocess.run(self.base + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=10, stdin=subprocess.DEVNULL)
        if check and r.returncode != 0:
            raise AssertionError("tmux %s: %s" % (" ".join(args), r.stdout))
        return r

    def capture(self):
        return self.run("capture-pane", "-p", "-t", self.name).stdout

    def keys(self, *keys):
        self.run("send-keys", "-t", self.name, *keys)

    def pane_state(self):
        """(alternate screen on, cursor shown) of the pane."""
        out = self.run("display-message", "-p", "-t", self.name, "#{alternate_on} #{cursor_flag}").stdout.split()
        return out[0] == "1", out[1] == "1"

    def alive(self):
        return self.run("has-session", "-t", self.name, check=False).returncode == 0

    def wait_screen(self, cond, what, timeout=20):
        got = {}

        def ok():
            got["s"] = self.capture()
            return cond(got["s"])
        try:
            vltest._wait(ok, timeout, what, 0.25)
        except vltest.TestTimeout:
            log("pane:\n" + got.get("s", ""))
            raise
        return got["s"]

    def kill(self):
        self.run("kill-server", check=False)


class Top(unittest.TestCase):

    @vltest.ctest("interop_top_tmux", timeout=150)
    def test_top_in_tmux(self):
        if shutil.which("tmux") is None:
            self.fail("tmux is missing (scripts/install-deps.sh installs it)")
        cmds = vltest.readme_commands("### Live view")
        live = vltest.readme_command("virtlink top --control %s" % README_CTL)
        once = vltest.readme_command("virtlink top --control %s --once" % README_CTL)
        self.assertEqual(cmds, [live, once])
        with vltest.readme_paths((README_CTL,)), vltest.Testbed(self) as tb:
            tb.ctl_path = README_CTL
            tb.start_switch(ports=["a", "b"], forward="xconnect")
            rx = tb.start_testpmd("rx", [tb.virtio_user("b")], "rxonly")
            tb.wait_connected(["b"])
            tx = tb.start_testpmd("tx", [tb.virtio_user("a")], "txonly", args=["--txpkts=64"])
            tb.wait_connected(["a", "b"])
            tb.wait_counter("b", "tx_packets", 10000, timeout=30)
            self.one_frame(tb, once)
            tmux = Tmux(tb, "vltop", self.script(tb, live))
            try:
                self.live_view(tb, tmux)
                self.ctrl_c(tb, tmux)
            finally:
                tmux.kill()
            tb.stop_testpmd(tx)
            tb.stop_testpmd(rx)

    def script(self, tb, cmd):
        """The pane's shell: the README's command twice (ended by q, then by Ctrl-C), its
        exit status and the terminal's settings before and after each in files, a line
        after each, and a wait for Enter in between."""
        d = tb.dir
        return ("export PATH=%s:$PATH\ntrap : INT\ncd %s\nstty -g > stty.before\n"
                "for i in 1 2; do\n  %s\n  echo $? > status.$i\n  stty -g > stty.after.$i\n"
                "  echo top-exited-$i\n  read x\ndone\n" % (os.path.dirname(vltest.VIRTLINK), d, cmd))

    def read(self, tb, name):
        with open(os.path.join(tb.dir, name)) as f:
            return f.read().strip()

    def live_view(self, tb, tmux):
        screen = tmux.wait_screen(lambda s: "over the last" in s and "a/0" in s,
                                  "a frame with figures over an interval")
        log("pane:\n" + screen)
        self.assertEqual(tmux.pane_state(), (True, False))  # alternate screen, cursor hidden
        self.assertIn("keys: s/S next/previous sort column", screen)
        ports, order, pmds = parse(screen)
        self.assertEqual(set(ports), {"a", "b"}, screen)
        self.assertGreater(ports["a"][1], 1000, screen)  # a's rx pps: the sender's port
        self.assertGreater(ports["b"][3], 1000, screen)  # b's tx pps
        self.assertEqual(order, ["a", "b"])  # sorted by rx_pps, largest first
        self.assertIn("RX_PPS*", screen)
        self.assertIn("sorted by rx_pps, largest first", screen)
        self.assertEqual(len(pmds), 1, screen)
        self.assertGreater(pmds[0][1], 0.0, screen)
        self.assertIn("a/0", pmds[0][2])
        tmux.keys("s")  # the next column: rx_bps
        tmux.wait_screen(lambda s: "sorted by rx_bps" in s and "RX_BPS*" in s and "RX_PPS*" not in s,
                         "the sort marker on RX_BPS")
        tmux.keys("5")  # tx_pps: b, the receiver's port, comes first
        screen = tmux.wait_screen(lambda s: "TX_PPS*" in s and parse(s)[1] == ["b", "a"],
                                  "sorted by tx_pps with b first")
        self.assertIn("sorted by tx_pps, largest first", screen)
        tmux.keys("r")
        tmux.wait_screen(lambda s: "smallest first" in s and parse(s)[1] == ["a", "b"],
                         "the order reversed")
        tmux.keys("q")
        screen = tmux.wait_screen(lambda s: "top-exited-1" in s, "top gone after q")
        self.assertEqual(self.read(tb, "status.1"), "0")
        self.assertEqual(self.read(tb, "stty.after.1"), self.read(tb, "stty.before"))
        self.assertEqual(tmux.pane_state(), (False, True))  # main screen, cursor shown
        self.assertNotIn("PORT", screen)  # the frame was on the alternate screen
        tmux.keys("Enter")

    def ctrl_c(self, tb, tmux):
        tmux.wait_screen(lambda s: "over the last" in s, "the second view's frame")
        tmux.keys("C-c")
        tmux.wait_screen(lambda s: "top-exited-2" in s, "top gone after Ctrl-C")
        self.assertEqual(self.read(tb, "status.2"), "0")
        self.assertEqual(self.read(tb, "stty.after.2"), self.read(tb, "stty.before"))
        self.assertEqual(tmux.pane_state(), (False, True))
        tmux.keys("Enter")  # the script ends: its pane, the session and the server go
        vltest._wait(lambda: not tmux.alive(), 10, "the tmux session gone", 0.1)

    def one_frame(self, tb, cmd):
        """The README's one-frame command with stdout a pipe: one frame, status 0."""
        env = dict(os.environ, PATH=os.path.dirname(vltest.VIRTLINK) + ":" + os.environ["PATH"])
        t = time.monotonic()
        r = subprocess.run(["sh", "-c", cmd], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=20, stdin=subprocess.DEVNULL)
        log("%s (%.1f s):\n%s" % (cmd, time.monotonic() - t, r.stdout))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("\x1b", r.stdout)  # no escape codes
        ports, order, pmds = parse(r.stdout)
        self.assertEqual(order, ["b", "a"])  # --sort tx_pps
        self.assertGreater(ports["b"][3], 1000)
        self.assertGreater(ports["a"][1], 1000)
        self.assertEqual(len(pmds), 1)
        self.assertIn("over the last", r.stdout)


if __name__ == "__main__":
    vltest.main()
