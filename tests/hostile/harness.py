"""The hostile-peer suite's harness (tests/hostile/README.md): one switch per test class
(`virtlink switch`, bridge, --pmd-cores 1; the ASan build under `ctest -L asan`), a healthy
pair of front-ends on ports a and b that must keep forwarding, hostile front-ends
(vltestlib.vhost_peer.Guest) on the other ports, and the checks made after every scenario
(Harness.after): the switch alive and `ctl` answering, the healthy pair forwarding both
ways frame for frame, the hostile ports disconnected, the switch's fd count and its
mappings of front-end memory back to their baseline, no ASan/UBSan report in its output.

    class Rings(HostileCase):          # one switch for the class, one scenario per test
        PORTS = ("a", "b", "c")
        def test_x(self):
            g = self.h.guest("c")      # a negotiated hostile front-end, closed after the test
            ...
            self.assertDelta("c", "bad_descriptor", 1)

Environment: VL_HOSTILE_SWITCH_ARGS (extra switch options), VL_HOSTILE_PMD_CORES
(--pmd-cores), VLTEST_KEEP=1 (keep the switch log).
"""
import contextlib
import os
import struct
import sys
import threading
import time
import unittest

from vltestlib import vltest
from vltestlib.vhost_peer import (ctl, frame, Guest, mac)


MAC_A, MAC_B = mac("02:00:00:00:00:0a"), mac("02:00:00:00:00:0b")
MAC_C, MAC_D, MAC_E = mac("02:00:00:00:00:0c"), mac("02:00:00:00:00:0d"), mac("02:00:00:00:00:0e")
BCAST = b"\xff" * 6

MAC_OF = {"c": MAC_C, "d": MAC_D, "e": MAC_E}
CONTROL_DEADLINE_S = 2.0  # `ctl` must answer within this while a hostile peer misbehaves


class _Named:
    def __init__(self, name):
        self._name = name

    def id(self):
        return "hostile." + self._name


def _log(msg):
    vltest.log(msg)


class Harness:
    """The switch, the healthy pair (Python front-ends on a and b) and the checks made
    after every scenario."""

    def __init__(self, name, ports=("a", "b", "c", "d"), healthy=True, extra=(), pmd_cores=None):
        self.tb = vltest.Testbed(_Named(name))
        try:
            # VL_HOSTILE_SWITCH_ARGS: extra switch options for exploring, e.g. "--pmd-mode interrupt".
            self.tb.start_switch(ports=list(ports), forward="bridge",
                                 pmd_cores=pmd_cores or os.environ.get("VL_HOSTILE_PMD_CORES", "1"),
                                 extra=list(extra) + os.environ.get("VL_HOSTILE_SWITCH_ARGS", "").split())
            self.pid = self.tb.switch.pid
            self.hostile_ports = [p for p in ports if p not in ("a", "b")]
            self.hostiles = []
            self.seq = 0
            self.log_seen = 0
            self.a = self.b = None
            if healthy:
                self.a = Guest(self.tb.sock("a")).negotiate()
                self.b = Guest(self.tb.sock("b")).negotiate()
                self.a.rx.post()
                self.b.rx.post()
                self.check_healthy()
            self.wait_ports_settled()
            self.base_fds = self.base_fd_count()
            self.base_maps = self.guest_maps()
        except BaseException:
            self.tb.close(failed=True)
            raise

    def close(self):
        for g in self.hostiles + [self.a, self.b]:
            if g is not None:
                g.close()
        self.tb.close()

    # -- observation -----------------------------------------------------------------------
    def ctl(self, cmd, timeout=CONTROL_DEADLINE_S, args=None):
        return ctl(self.tb.ctl_path, cmd, timeout, args)

    def stats(self):
        return {p["name"]: p for p in self.ctl("stats")["ports"]}

    def ports(self):
        return {p["name"]: p for p in self.ctl("ports")}

    def fd_count(self):
        """The switch's open fds, once stable (a `ctl` connection we just used may still be
        open for a moment on the switch's side)."""
        last = None
        for _ in range(50):
            n = len(os.listdir("/proc/%d/fd" % self.pid))
            if n == last:
                return n
            last = n
            time.sleep(0.02)
        return last

    def base_fd_count(self):
        """The baseline of fd_count(): the least of a few readings 60 ms apart, since a
        transient fd (a `ctl` connection the switch has not closed yet, which under ASan and
        load can outlast fd_count's 20 ms) only ever adds to the count."""
        n = self.fd_count()
        for _ in range(5):
            time.sleep(0.06)
            n = min(n, self.fd_count())
        return n

    def guest_maps(self):
        """(number, bytes) of the switch's mappings of front-end memfds."""
        n = size = 0
        with open("/proc/%d/maps" % self.pid) as f:
            for line in f:
                if "memfd:" in line:
                    lo, hi = line.split()[0].split("-")
                    n += 1
                    size += int(hi, 16) - int(lo, 16)
        return n, size

    def alive(self):
        return self.tb.switch.alive()

    def dump_switch_log(self, what, tail=80):
        """Writes the switch's last `tail` log lines to stderr, headed by `what`."""
        lines = self.tb.switch.output().splitlines()
        sys.stderr.write("----- switch log after %s failed (last %d of %d lines) -----\n%s\n" % (
            what, min(tail, len(lines)), len(lines), "\n".join(lines[-tail:])))
        sys.stderr.flush()

    def sanitizer_report(self):
        text = self.tb.switch.output()
        new = text[self.log_seen:]
        self.log_seen = len(text)
        return [m for m in vltest.SANITIZER_MARKERS if m in new], new

    @staticmethod
    def drops(st, port):
        return st[port]["drops"]

    @staticmethod
    def delta(before, after, port, key):
        if key in before[port]["drops"]:
            return after[port]["drops"][key] - before[port]["drops"][key]
        return after[port][key] - before[port][key]

    def wait_stats(self, cond, timeout=5.0, what="counters"):
        deadline = time.monotonic() + timeout
        while True:
            st = self.stats()
            if cond(st):
                return st
            if time.monotonic() > deadline:
                raise AssertionError("timed out waiting for %s: %s" % (what, vltest.fmt_stats(st)))
            time.sleep(0.05)

    def wait_taken(self, before, port, n, timeout=5.0):
        """Waits until the switch took `n` more chains from `port`'s transmit queue."""
        return self.wait_stats(lambda st: self.delta(before, st, port, "rx_packets") >= n,
                               timeout, "%d chains taken from %s" % (n, port))

    def wait_ports_settled(self, timeout=6.0):
        deadline = time.monotonic() + timeout
        while True:
            info = self.ports()
            busy = [p for p in self.hostile_ports if info[p]["state"] == "connected"]
            if not busy:
                return info
            if time.monotonic() > deadline:
                raise AssertionError("ports %s still connected after their front-ends left" % busy)
            time.sleep(0.05)

    # -- front-ends ------------------------------------------------------------------------
    def connect(self, port, **kw):
        g = Guest(self.tb.sock(port), **kw)
        self.hostiles.append(g)
        return g

    def guest(self, port, **negotiate):
        return self.connect(port).negotiate(**negotiate)

    def learn(self, g, m):
        """Lets the bridge learn MAC `m` on g's port (one frame to itself: no_destination)."""
        g.tx.send_frame(frame(m, m, b"learn"))
        if not g.tx.wait_done(5):
            raise AssertionError("the switch did not take the learning frame")

    def exchange(self, src, smac, dst, dmac, n=8, timeout=5.0, tag=b"XCHG"):
        """Sends n frames src -> dst; returns how many arrived intact and in order."""
        self.seq += 1
        dst.rx.take()  # drains what came before, and offers every receive buffer
        want = [frame(dmac, smac, tag + struct.pack(">IH", self.seq, i) + bytes(range(40)))
                for i in range(n)]
        for fr in want:
            if not src.tx.send_frame(fr, timeout=timeout):
                break
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            for fr in dst.rx.take():
                if fr[14:14 + len(tag) + 4] == tag + struct.pack(">I", self.seq):
                    got.append(fr[:len(want[0])])
            if len(got) < n:
                time.sleep(0.005)
        ok = 0
        for a, b in zip(want, got):
            if a != b:
                break
            ok += 1
        return ok

    def check_healthy(self, n=8, timeout=5.0):
        """The healthy pair still forwards both ways, every frame intact and in order."""
        if self.a is None:
            return
        ab = self.exchange(self.a, MAC_A, self.b, MAC_B, n, timeout, b"HLTH")
        ba = self.exchange(self.b, MAC_B, self.a, MAC_A, n, timeout, b"HLTH")
        if ab != n or ba != n:
            diag = ""
            try:  # what the switch says about it, for the report
                import json as _json
                ports = {p["name"]: p for p in self.ctl("stats")["ports"]}
                diag = "\npmd-rxq-show %s\npmd-stats %s\nstats %s\nqueues a %s\nqueues b %s\nswitch log:\n%s" % (
                    _json.dumps(self.ctl("pmd-rxq-show")), _json.dumps(self.ctl("pmd-stats")),
                    vltest.fmt_stats(ports), _json.dumps(ports["a"].get("queues")),
                    _json.dumps(ports["b"].get("queues")), self.tb.switch.output()[-3000:])
            except Exception as e:  # noqa: BLE001
                diag = "\n(no diagnostics: %r)" % e
            raise AssertionError("healthy pair broken: a->b %d/%d, b->a %d/%d%s" % (ab, n, ba, n, diag))

    def after(self, tc):
        """Checks made after every scenario, once its hostile front-ends are gone."""
        for g in self.hostiles:
            g.close()
        self.hostiles = []
        tc.assertTrue(self.alive(), "the switch died:\n" + self.tb.switch.output()[-3000:])
        self.wait_ports_settled()
        self.check_healthy()
        # fds and guest mappings back to what they were with only the healthy pair.
        deadline = time.monotonic() + 5
        while True:
            fds, maps = self.fd_count(), self.guest_maps()
            if fds == self.base_fds and maps == self.base_maps:
                break
            if time.monotonic() > deadline:
                tc.fail("resources not back to baseline: fds %d (baseline %d), guest maps %s "
                        "(baseline %s); fds: %s" % (fds, self.base_fds, maps, self.base_maps,
                                                    sorted(os.readlink("/proc/%d/fd/%s" % (self.pid, f))
                                                           for f in os.listdir("/proc/%d/fd" % self.pid))))
            time.sleep(0.05)
        info = self.ports()
        for p in self.hostile_ports:
            tc.assertEqual(info[p]["mapped_bytes"], 0, "port %s still maps guest memory" % p)
        found, text = self.sanitizer_report()
        tc.assertFalse(found, "sanitizer report in the switch output:\n" + text[-6000:])


class HostileCase(unittest.TestCase):
    """One switch per class; each test is one scenario; after each, Harness.after()."""

    PORTS = ("a", "b", "c", "d")
    HEALTHY = True
    SWITCH_ARGS = ()
    PMD_CORES = None  # --pmd-cores (default: VL_HOSTILE_PMD_CORES or "1")
    h = None

    @classmethod
    def setUpClass(cls):
        cls.h = Harness(cls.__name__, cls.PORTS, cls.HEALTHY, cls.SWITCH_ARGS, cls.PMD_CORES)

    @classmethod
    def tearDownClass(cls):
        if cls.h is not None:
            cls.h.close()

    def run(self, result=None):
        """unittest's run, and when this scenario failed or errored (in the scenario or in
        the checks after it), the switch's last log lines on stderr: the switch's side of
        what went wrong (the class's switch outlives the scenario, so nothing else shows it)."""
        bad = (lambda r: len(r.errors) + len(r.failures)) if result is not None else None
        n = bad(result) if bad else 0
        out = super().run(result)
        if bad and bad(result) > n and self.h is not None:
            self.h.dump_switch_log(self.id().split(".")[-1])
        return out

    def setUp(self):
        self.t0 = time.monotonic()
        self.before = self.h.stats()

    def tearDown(self):
        self.h.after(self)
        _log("%s: %.1f s" % (self.id().split(".")[-1], time.monotonic() - self.t0))

    # -- assertion helpers ---------------------------------------------------------------------
    @contextlib.contextmanager
    def looping(self, step):
        """Calls `step(i)` (i = 0, 1, ...) in a loop on a thread while the body runs; yields
        a one-item list holding the number of calls; fails the test if `step` raised."""
        stop = threading.Event()
        errors = []
        count = [0]

        def run():
            try:
                while not stop.is_set():
                    step(count[0])
                    count[0] += 1
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        th = threading.Thread(target=run, daemon=True)
        th.start()
        try:
            yield count
        finally:
            stop.set()
            th.join()
        self.assertFalse(errors, errors)

    def assertRefused(self, outcome, what):
        self.assertIn(outcome, ("nack", "closed"), "%s: the switch %s it" % (what, outcome))

    def assertDelta(self, port, key, n, st=None, before=None):
        st = st or self.h.stats()
        d = Harness.delta(before or self.before, st, port, key)
        self.assertEqual(d, n, "%s.%s moved by %d, expected %d: %s" % (port, key, d, n,
                                                                       vltest.fmt_stats(st)))

    def assertSameFrames(self, got, want, what):
        """got == want, reported by counts and the first difference (difflib on thousands
        of frames takes seconds)."""
        if got == want:
            return
        i = next((k for k, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
        self.fail("%s: %d frames, %d expected; first difference at %d: %r != %r" % (
            what, len(got), len(want), i, got[i][:24] if i < len(got) else None,
            want[i][:24] if i < len(want) else None))

    def assertClosed(self, g, timeout=4.0, what=""):
        self.assertTrue(g.closed_by_peer(timeout), "the switch kept the connection %s" % what)

    def assertControlResponsive(self):
        t0 = time.monotonic()
        self.h.stats()
        self.assertLess(time.monotonic() - t0, CONTROL_DEADLINE_S)


MAC_F = mac("02:00:00:00:00:0f")



def main():
    vltest.main(default_timeout=170)
