#!/usr/bin/env python3
"""The switch as virtlink.service runs it (debian/virtlink.service: Type=notify,
WatchdogSec=, ExecReload= sending SIGHUP), against a notification socket this test binds,
since PID 1 here is not systemd: NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID set as systemd
sets them (systemd.service(5), sd_notify(3)).

- READY=1 once the control socket answers (probed as the datagram arrives), with STATUS=;
- WATCHDOG=1 at least once per interval (2 s), only for the process WATCHDOG_PID names;
- SIGHUP: RELOADING=1 (MONOTONIC_USEC= from CLOCK_MONOTONIC) then READY=1, the file read
  again (a port added to it is in `ctl ports`); a refused file: RELOADING=1, READY=1 with
  STATUS= saying so, nothing changed; `ctl reload` the same;
- SIGTERM: STOPPING=1 and exit status 0.

    PYTHONPATH=pylib:bench python3 tests/interop/test_service.py --virtlink build/virtlink -v
"""
import os
import signal
import subprocess
import time
import unittest

from vltestlib import vhost_peer
from vltestlib import vltest
from vltestlib.notify_socket import NotifySocket

WATCHDOG_S = 2
# The switch's own PID in WATCHDOG_PID: a shell that sets it to $$ and execs the switch.
SELF_PID = ["sh", "-c", 'WATCHDOG_PID=$$ exec "$0" "$@"']


def config(tb, ports, forward="bridge"):
    """The switch's TOML (interrupt mode: an idle PMD thread sleeps), ports by name."""
    text = 'forward = "%s"\npmd_mode = "interrupt"\n' % forward
    for p in ports:
        text += '[[port]]\nname = "%s"\ntype = "vhost-user"\npath = "%s"\n' % (p, tb.sock(p))
    return text


def is_(key, value="1"):
    return lambda m: m.get(key) == value


@vltest.ctest("service", timeout=60)
class Service(unittest.TestCase):

    def probe_ready(self, tb):
        """On the first READY=1, a request on the control socket, at once: its reply."""
        def probe(fields):
            if fields.get("READY") != "1" or self.probed:
                return None
            self.probed = True
            try:
                return vhost_peer.ctl(tb.ctl_path, "version", timeout=5)
            except (OSError, AssertionError) as e:
                return "no answer: %s" % e
        self.probed = False
        return probe

    def start(self, tb, ns, ports, wrap=SELF_PID, **env):
        tb.start_switch(ports=[], forward=None, pmd_cores=None, config=config(tb, ports),
                        env=ns.env(**env), wrap=wrap)
        return ns.wait(is_("READY"), 10, "READY=1")

    def reload(self, tb, ns, send):
        """`send()` starts a reload: the RELOADING=1 and the READY=1 after it, checked."""
        n = len(ns.snapshot())
        before_us = time.monotonic_ns() // 1000
        send()
        r = ns.wait(is_("RELOADING"), 10, "RELOADING=1", start=n)
        done = ns.wait(is_("READY"), 10, "READY=1 after RELOADING=1", start=r)
        msgs = ns.snapshot()
        self.assertFalse([m for _, m in msgs[n:r] if "READY" in m], "READY=1 before RELOADING=1")
        mono = int(msgs[r][1]["MONOTONIC_USEC"])  # CLOCK_MONOTONIC, as time.monotonic
        self.assertLessEqual(before_us, mono)
        self.assertLessEqual(mono, int(msgs[r][0] * 1e6) + 1)
        return msgs[done][1]["STATUS"]

    def test_notify_watchdog_reload_stop(self):
        with vltest.Testbed(self) as tb, NotifySocket(os.path.join(tb.dir, "notify"),
                                                      self.probe_ready(tb)) as ns:
            ready = self.start(tb, ns, ["a"], watchdog_usec=WATCHDOG_S * 1000000)
            t_ready, m = ns.snapshot()[ready]
            self.assertEqual(ready, 0, "READY=1 is the first notification")
            self.assertIsInstance(m["_probe"], dict, "the control socket at READY=1: %s" % m["_probe"])
            self.assertIn("version", m["_probe"])
            self.assertEqual(m["STATUS"], "1 port(s), forward bridge, 1 PMD thread(s) in interrupt "
                             "mode, control %s" % tb.ctl_path)
            # Three watchdog intervals: a ping in each, no gap as long as the interval.
            time.sleep(3 * WATCHDOG_S + 0.2)
            pings = [t for t, f in ns.snapshot() if f.get("WATCHDOG") == "1" and
                     t <= t_ready + 3 * WATCHDOG_S]
            vltest.log("WATCHDOG=1 at +%s s" % ["%.2f" % (t - t_ready) for t in pings])
            self.assertGreaterEqual(len(pings), 3)
            gaps = [b - a for a, b in zip([t_ready] + pings, pings)]
            self.assertLess(max(gaps), WATCHDOG_S, "a watchdog interval without a ping")
            # SIGHUP (ExecReload=): the file gains port b.
            with open(os.path.join(tb.dir, "switch.toml"), "w") as f:
                f.write(config(tb, ["a", "b"]))
            status = self.reload(tb, ns, lambda: os.kill(tb.switch.pid, signal.SIGHUP))
            self.assertTrue(status.startswith("2 port(s)"), status)
            self.assertEqual(sorted(tb.ports_info()), ["a", "b"])
            self.assertIn("SIGHUP: configuration read again", tb.switch.output())
            # A file the switch refuses: still RELOADING=1 then READY=1, nothing changed.
            with open(os.path.join(tb.dir, "switch.toml"), "w") as f:
                f.write('forward = "sideways"\n')
            status = self.reload(tb, ns, lambda: os.kill(tb.switch.pid, signal.SIGHUP))
            self.assertTrue(status.startswith("reload refused ("), status)
            self.assertIn("2 port(s)", status)
            self.assertEqual(sorted(tb.ports_info()), ["a", "b"])
            # `ctl reload` of that file fails (exit 1) and says why, not only in the log.
            r = subprocess.run([vltest.VIRTLINK, "ctl", "--control", tb.ctl_path, "reload"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
            self.assertEqual(r.returncode, 1, r)
            self.assertIn("sideways", r.stderr.decode(), r.stderr)
            # `ctl reload` is the same reload: the file drops b.
            with open(os.path.join(tb.dir, "switch.toml"), "w") as f:
                f.write(config(tb, ["a"]))
            status = self.reload(tb, ns, lambda: tb.ctl("reload"))
            self.assertTrue(status.startswith("1 port(s)"), status)
            self.assertEqual(sorted(tb.ports_info()), ["a"])
            self.assertIn("port b: deleted (the configuration read again no longer names it)",
                          tb.switch.output())
            self.assertNotIn("a restart brings it back", tb.switch.output())
            # SIGTERM (systemctl stop): STOPPING=1, exit status 0.
            n = len(ns.snapshot())
            self.assertEqual(tb.switch.stop(signal.SIGTERM, timeout=15), 0)
            ns.wait(is_("STOPPING"), 2, "STOPPING=1", start=n)

    def test_watchdog_for_another_pid(self):
        """WATCHDOG_PID naming another process (sd_watchdog_enabled(3)): READY=1, no pings."""
        with vltest.Testbed(self) as tb, NotifySocket(os.path.join(tb.dir, "notify")) as ns:
            self.start(tb, ns, ["a"], wrap=(), watchdog_usec=WATCHDOG_S * 1000000,
                       watchdog_pid=os.getpid())
            time.sleep(WATCHDOG_S + 1)
            self.assertFalse([f for _, f in ns.snapshot() if "WATCHDOG" in f])
            self.assertEqual(tb.switch.stop(signal.SIGTERM, timeout=15), 0)
            ns.wait(is_("STOPPING"), 2, "STOPPING=1")


if __name__ == "__main__":
    vltest.main(default_timeout=50)
