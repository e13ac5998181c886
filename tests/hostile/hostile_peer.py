#!/usr/bin/env python3
"""A hostile vhost-user front-end, and the scenarios that attack a running switch with it.

Python 3 standard library only. The front-end is pylib/vltestlib/vhost_peer.py: it speaks
the wire protocol over the switch's Unix socket, lays out split virtqueues in memfds it maps
itself and can negotiate like QEMU (Guest.negotiate) and then misbehave in any way
(Guest.raw_bytes, Guest.send, the Ring methods).

Each test class starts one switch (`virtlink switch`, bridge, --pmd-cores 1) with two
well-behaved front-ends on ports a and b (or DPDK testpmd peers in Traffic) and hostile
front-ends on the other ports; each test is one scenario. After every scenario
(Harness.after): the switch is alive, the healthy pair forwards both ways frame for frame,
the hostile ports are disconnected, the switch's fd count and its mappings of front-end
memory are back to their baseline, and its output has no ASan/UBSan report. The scenarios
assert the drop counter that must move (`ctl stats`), or that the connection was closed.

    PYTHONPATH=pylib:bench python3 tests/hostile/hostile_peer.py --virtlink build-asan/virtlink [-v] [Rings.test_09...]

Groups (one ctest entry each, label `hostile`): Messages (hostile-inputs.md 1-6, message,
fd and connection storms, socket fds, GET_VRING_BASE/RESET_OWNER while running), Addresses
(7-9, tables replaced and memory truncated under traffic, huge regions), Rings (10-15, 17,
18, rings rewritten under the switch, 32768-entry queues, fragmented and 4 GiB frames, MTU),
Notify (call fds the front-end makes block), Shutdown (SIGTERM while a PMD thread is
blocked), Traffic (testpmd flooding while a front-end misbehaves).
`VLTEST_KEEP=1` keeps the switch log; see tests/hostile/README.md.
"""
import contextlib
import fcntl
import mmap
import os
import random
import signal
import socket
import struct
import sys
import threading
import time
import unittest

from vltestlib import vltest
from vltestlib.vhost_peer import (ADD_MEM_REG, DEFAULT_FEATURES, DEFAULT_PROTOCOL,
    DESC_INDIRECT, DESC_NEXT, DESC_WRITE, F_NEED_REPLY, F_REPLY, GET_CONFIG, GET_FEATURES,
    GET_QUEUE_NUM, GET_VRING_BASE, HDR_LEN, NET_SET_MTU, NOFD, PROTO_MTU, PROTO_RARP,
    PROTO_REPLY_ACK, RESET_OWNER, RX, SEND_RARP, SET_BACKEND_REQ_FD, SET_FEATURES,
    SET_LOG_BASE, SET_LOG_FD, SET_MEM_TABLE, SET_PROTOCOL_FEATURES, SET_VRING_ADDR,
    SET_VRING_BASE, SET_VRING_CALL, SET_VRING_ENABLE, SET_VRING_ERR, SET_VRING_KICK,
    SET_VRING_NUM, TX, VERSION, VHOST_USER_F_PROTOCOL_FEATURES, VIRTIO_F_VERSION_1,
    VIRTIO_NET_F_CSUM, VIRTIO_NET_F_HOST_TSO4, VIRTIO_NET_F_MRG_RXBUF, VIRTIO_NET_F_MTU,
    VIRTIO_RING_F_INDIRECT_DESC, Closed, Guest, Memory, Region, Ring, RxQueue, TxQueue,
    ctl, eventfd, frame, mac, tcp4_frame, tcp4_valid)


# =========================================================================================
# The harness: one switch (ASan build under ctest -L asan), two well-behaved front-ends on
# ports a and b, hostile front-ends on the other ports.
# =========================================================================================

MAC_A, MAC_B = mac("02:00:00:00:00:0a"), mac("02:00:00:00:00:0b")
MAC_C, MAC_D, MAC_E = mac("02:00:00:00:00:0c"), mac("02:00:00:00:00:0d"), mac("02:00:00:00:00:0e")
BCAST = b"\xff" * 6


def mac_str(m):
    """aa:bb:cc:dd:ee:ff as `ctl fdb` prints it."""
    return ":".join("%02x" % b for b in m)

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


def fresh_fd(kind):
    """An fd of a given kind for fd-type attacks."""
    if kind == "eventfd":
        return eventfd()
    if kind == "pipe":
        r, w = os.pipe()
        os.close(r)
        return w
    if kind == "devnull":
        return os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    if kind == "memfd":
        fd = os.memfd_create("vhu-small", os.MFD_CLOEXEC)
        os.ftruncate(fd, 4096)
        return fd
    raise ValueError(kind)


# =========================================================================================
# Scenarios: socket messages (hostile-inputs.md items 1-6) and message/fd/connection storms
# =========================================================================================
class Messages(HostileCase):

    def test_01_vring_index_out_of_range(self):
        """Item 1: vring indices with valid low bits but upper bits set, or past the last queue
        pair offered (8 pairs: vrings 0-15)."""
        g = self.h.guest("c")
        g.rx.post()
        for idx in (0x10001, 0x10000, 16, 17, 0x80000000, 0xffffffff):
            for req, num in ((SET_VRING_NUM, 256), (SET_VRING_BASE, 0), (SET_VRING_ENABLE, 1),
                             (GET_VRING_BASE, 0)):
                self.assertRefused(g.refused(req, struct.pack("<II", idx, num)),
                                   "request %d for vring %#x" % (req, idx))
            addr = struct.pack("<IIQQQQ", idx, 0, g.mem.uva(g.rx.desc), g.mem.uva(g.rx.used),
                               g.mem.uva(g.rx.avail), 0)
            self.assertRefused(g.refused(SET_VRING_ADDR, addr), "SET_VRING_ADDR %#x" % idx)
        for v in (0x10001, 16, 0xff, 1 << 32, (1 << 32) | NOFD, 16 | NOFD, 0x200, 1 << 63):
            for req in (SET_VRING_KICK, SET_VRING_CALL, SET_VRING_ERR):
                fds = [] if v & NOFD else [eventfd()]
                self.assertRefused(g.refused(req, struct.pack("<Q", v), fds),
                                   "vring fd request %d payload %#x" % (req, v))
                for fd in fds:
                    os.close(fd)
        info = self.h.ports()["c"]
        self.assertEqual([v["size"] for v in info["vrings"]], [256, 256])
        self.assertTrue(all(v["ready"] for v in info["vrings"]), info)
        self.h.learn(g, MAC_C)
        self.assertEqual(self.h.exchange(g, MAC_C, self.h.b, MAC_B), 8)
        self.assertEqual(self.h.exchange(self.h.a, MAC_A, g, MAC_C), 8)

    def test_02_vring_num_invalid(self):
        """Item 2: queue sizes 0, not a power of two, above 32768."""
        g = self.h.guest("c")
        for i in (RX, TX):
            for num in (0, 3, 255, 257, 32769, 65536, 0x80000000, 0xffffffff):
                self.assertRefused(g.refused(SET_VRING_NUM, struct.pack("<II", i, num)),
                                   "queue size %d" % num)
            for base in (0x10000, 0xffffffff):
                self.assertRefused(g.refused(SET_VRING_BASE, struct.pack("<II", i, base)),
                                   "base %#x" % base)
        self.assertEqual(g.state(SET_VRING_NUM, TX, 256), 0)
        self.h.learn(g, MAC_C)
        self.assertEqual(self.h.exchange(g, MAC_C, self.h.b, MAC_B), 8)

    def test_03_mem_table_invalid(self):
        """Item 3: too many regions, overflowing/overlapping/empty regions, wrong fd count,
        fds that are not mappable memory: refused, every fd closed, the old table kept."""
        g = self.h.guest("c")
        mapped = self.h.ports()["c"]["mapped_bytes"]
        fds_before = self.h.fd_count()
        G, U = 0x100000000, 0x7e0000000000
        M64 = (1 << 64) - 1
        big = Region(1 << 20, G, U)
        ro = os.open("/proc/self/fd/%d" % big.fd, os.O_RDONLY | os.O_CLOEXEC)
        sealed = Region(1 << 20, G, U)
        fcntl_ok = True
        try:
            import fcntl
            fcntl.fcntl(sealed.fd, 1033, 0x0010)  # F_ADD_SEALS, F_SEAL_FUTURE_WRITE
        except (OSError, ImportError):
            fcntl_ok = False
        cases = [
            ("9 regions", [(G + i * 0x1000, 0x1000, U + i * 0x1000, 0) for i in range(9)], [big.fd] * 8, {}),
            ("0 regions", [], [], {}),
            ("size 0", [(G, 0, U, 0)], [big.fd], {}),
            ("gpa overflow", [(M64 - 0xfff, 0x2000, U, 0)], [big.fd], {}),
            ("uva overflow", [(G, 0x2000, M64 - 0xfff, 0)], [big.fd], {}),
            ("offset overflow", [(G, 0x2000, U, M64 - 0xfff)], [big.fd], {}),
            ("offset+size+page overflow", [(G, 0x1000, U, M64 - 0x1fff)], [big.fd], {}),
            ("size 2^64-1", [(0, M64, 0, 0)], [big.fd], {}),
            ("overlapping gpa", [(G, 0x2000, U, 0), (G + 0x1000, 0x2000, U + 0x10000, 0)], [big.fd] * 2, {}),
            ("overlapping uva", [(G, 0x2000, U, 0), (G + 0x10000, 0x2000, U + 0x1000, 0)], [big.fd] * 2, {}),
            ("2 regions 1 fd", [(G, 0x1000, U, 0), (G + 0x10000, 0x1000, U + 0x10000, 0)], [big.fd], {}),
            ("1 region 2 fds", [(G, 0x1000, U, 0)], [big.fd, big.fd], {}),
            ("fd is a pipe", [(G, 0x1000, U, 0)], ["pipe"], {}),
            ("fd is /dev/null", [(G, 0x1000, U, 0)], ["devnull"], {}),
            ("fd is an eventfd", [(G, 0x1000, U, 0)], ["eventfd"], {}),
            ("fd smaller than the region", [(G, 0x2000, U, 0)], ["memfd"], {}),
            ("offset past the fd's end", [(G, 0x1000, U, 0x1000)], ["memfd"], {}),
            ("read-only fd", [(G, 0x1000, U, 0)], [ro], {}),
            ("payload for 2 regions, nregions 1", [(G, 0x1000, U, 0), (G + 0x10000, 0x1000, U + 0x10000, 0)],
             [big.fd], {"nregions": 1}),
            ("payload longer than needed", [(G, 0x1000, U, 0)], [big.fd], {"pad_to": 8 + 32 + 16}),
        ]
        if fcntl_ok:
            cases.append(("memfd sealed against writes", [(G, 0x1000, U, 0)], [sealed.fd], {}))
        for what, regions, fds, kw in cases:
            made = [fresh_fd(f) if isinstance(f, str) else None for f in fds]
            real = [m if m is not None else f for m, f in zip(made, fds)]
            payload, _ = g.mem_table(regions, fds=real, **kw)
            out = g.refused(SET_MEM_TABLE, payload, real)
            for m in made:
                if m is not None:
                    os.close(m)
            self.assertRefused(out, "SET_MEM_TABLE with " + what)
            if out == "closed":  # start over on a new connection
                g = self.h.guest("c")
        # A payload shorter than the table header, and a header claiming 8 regions with
        # room for 1.
        for payload in (b"\1\0\0\0", struct.pack("<II", 8, 0) + struct.pack("<QQQQ", G, 0x1000, U, 0)):
            self.assertRefused(g.refused(SET_MEM_TABLE, payload, [big.fd]), "short table")
        os.close(ro)
        big.close()
        sealed.close()
        self.assertEqual(self.h.ports()["c"]["mapped_bytes"], mapped, "the old table was not kept")
        self.assertEqual(self.h.fd_count(), fds_before, "fds of refused tables leaked")
        self.h.learn(g, MAC_C)
        self.assertEqual(self.h.exchange(g, MAC_C, self.h.b, MAC_B), 8)

    def test_04_framing(self):
        """Item 4: short headers, sizes over the limit, payloads shorter/longer than the
        request needs, unknown requests, bad flags: an error reply or the connection closed;
        nothing read past the message; no fd leaked."""
        fds_before = self.h.fd_count()
        # A header cut short, then the peer goes away.
        g = self.h.connect("c")
        g.raw_bytes(b"\1\0\0\0\0")
        g.close()
        self.h.wait_ports_settled()
        # A header delivered one byte at a time is fine.
        g = self.h.connect("c")
        for b in struct.pack("<III", GET_FEATURES, VERSION, 0):
            g.raw_bytes(bytes([b]))
            time.sleep(0.002)
        r, f, p = g.recv()
        self.assertEqual((r, len(p)), (GET_FEATURES, 8))
        g.close()
        self.h.wait_ports_settled()
        # Payload sizes over the limit.
        for size in (4097, 0x10000, 0xffffffff):
            g = self.h.connect("c")
            g.raw_bytes(struct.pack("<III", SET_MEM_TABLE, VERSION, size) + b"\0" * 64, [eventfd()])
            self.assertClosed(g, what="after a %d-byte size field" % size)
        # A payload cut short, with fds attached, then the peer goes away.
        g = self.h.connect("c")
        fds = [eventfd() for _ in range(3)]
        g.raw_bytes(struct.pack("<III", SET_MEM_TABLE, VERSION, 100) + b"\0" * 50, fds)
        for fd in fds:
            os.close(fd)
        g.close()
        self.h.wait_ports_settled()
        # Wrong payload sizes, unknown and unserved requests, bad flags (REPLY_ACK on).
        g = self.h.guest("c", rings=False)
        cases = [
            ("SET_FEATURES 4 bytes", SET_FEATURES, b"\0" * 4, None),
            ("SET_FEATURES 16 bytes", SET_FEATURES, b"\0" * 16, None),
            ("GET_FEATURES 8 bytes", GET_FEATURES, b"\0" * 8, None),
            ("SET_VRING_NUM 4 bytes", SET_VRING_NUM, b"\0" * 4, None),
            ("SET_VRING_NUM 12 bytes", SET_VRING_NUM, b"\0" * 12, None),
            ("SET_VRING_ADDR 39 bytes", SET_VRING_ADDR, b"\0" * 39, None),
            ("SET_VRING_KICK 0 bytes", SET_VRING_KICK, b"", None),
            ("NET_SET_MTU 67", NET_SET_MTU, struct.pack("<Q", 67), None),
            ("NET_SET_MTU 2^32", NET_SET_MTU, struct.pack("<Q", 1 << 32), None),
            ("SET_FEATURES not offered", SET_FEATURES, struct.pack("<Q", (1 << 64) - 1), None),
            ("SET_PROTOCOL_FEATURES not offered", SET_PROTOCOL_FEATURES, struct.pack("<Q", 1 << 63), None),
            ("request 0", 0, b"", None),
            ("request 0xffffffff", 0xffffffff, b"", None),
            ("request 0x80000001", 0x80000001, b"", None),
        ]
        for req in (SET_LOG_BASE, SET_LOG_FD, SET_BACKEND_REQ_FD, GET_CONFIG, ADD_MEM_REG, 34, 39, 40):
            cases.append(("unserved request %d" % req, req, b"\0" * 8, None))
        for what, req, payload, flags in cases:
            out = g.refused(req, payload)
            self.assertRefused(out, what)
            if out == "closed":
                g = self.h.guest("c", rings=False)
        for what, flags in (("reply flag", VERSION | F_REPLY | F_NEED_REPLY), ("version 0", F_NEED_REPLY),
                            ("version 2", 2 | F_NEED_REPLY), ("version 3", 3 | F_NEED_REPLY)):
            out = g.refused(GET_FEATURES, flags=flags)
            self.assertRefused(out, what)
            if out == "closed":
                g = self.h.guest("c", rings=False)
        # fds on requests that carry none: refused, fds closed.
        for _ in range(20):
            fds = [eventfd() for _ in range(8)]
            self.assertRefused(g.refused(GET_FEATURES, b"", fds), "GET_FEATURES with 8 fds")
            for fd in fds:
                os.close(fd)
        # Without REPLY_ACK a refused message closes the connection.
        g2 = self.h.connect("d")
        g2.send(SET_VRING_NUM, struct.pack("<II", 17, 256))  # 8 pairs: vrings 0-15
        self.assertClosed(g2, what="after a refused message without REPLY_ACK")
        g.close()
        g2.close()
        self.h.wait_ports_settled()
        self.assertEqual(self.h.fd_count(), fds_before)

    def test_05_vring_fds_without_fd(self):
        """Item 5: SET_VRING_KICK/CALL with the no-fd flag and no fd: polling mode works."""
        g = self.h.connect("c")
        g.negotiate(call=False, kick=False)  # kicks with NOFD
        for i in (RX, TX):
            self.assertEqual(g.vring_fd(SET_VRING_CALL, i, None), 0)
        info = self.h.ports()["c"]
        self.assertEqual([(v["kick"], v["call"], v["ready"]) for v in info["vrings"]],
                         [("polling", False, True)] * 2)
        self.h.learn(g, MAC_C)
        self.assertEqual(self.h.exchange(g, MAC_C, self.h.b, MAC_B), 8)
        self.assertEqual(self.h.exchange(self.h.a, MAC_A, g, MAC_C), 8)
        # NOFD with an fd, and neither flag nor fd: refused.
        fd = eventfd()
        self.assertRefused(g.refused(SET_VRING_CALL, struct.pack("<Q", RX | NOFD), [fd]), "NOFD + fd")
        os.close(fd)
        self.assertRefused(g.refused(SET_VRING_KICK, struct.pack("<Q", TX)), "no flag, no fd")

    def test_06_ring_enable_state(self):
        """Item 6: with PROTOCOL_FEATURES rings start disabled (nothing sent to them) until
        SET_VRING_ENABLE; without it they start enabled. One queue pair used (8 offered)."""
        g = self.h.guest("c", enable=False)
        self.assertEqual(struct.unpack("<Q", g.request(GET_QUEUE_NUM, reply=True))[0], 8)
        info = self.h.ports()["c"]
        self.assertEqual([v["why_not"] for v in info["vrings"]], ["disabled", "disabled"])
        g.rx.post()
        for _ in range(4):
            self.h.a.tx.send_frame(frame(BCAST, MAC_A, b"to all"))
        self.h.check_healthy()
        self.assertEqual(g.rx.used_idx(), 0, "the switch wrote into a disabled receive ring")
        self.assertEqual(g.state(SET_VRING_ENABLE, RX, 1), 0)
        self.h.a.tx.send_frame(frame(BCAST, MAC_A, b"to all"))
        deadline = time.monotonic() + 3
        while g.rx.used_idx() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertGreater(g.rx.used_idx(), 0, "nothing delivered after SET_VRING_ENABLE")
        # Enabled then disabled again: nothing more is delivered.
        self.assertEqual(g.state(SET_VRING_ENABLE, RX, 0), 0)
        used = g.rx.used_idx()
        self.h.a.tx.send_frame(frame(BCAST, MAC_A, b"to all"))
        self.h.check_healthy()
        self.assertEqual(g.rx.used_idx(), used)
        # Without VHOST_USER_F_PROTOCOL_FEATURES the rings start enabled.
        d = self.h.guest("d", features=VIRTIO_F_VERSION_1 | VIRTIO_NET_F_MRG_RXBUF)
        info = self.h.ports()["d"]
        self.assertTrue(all(v["ready"] for v in info["vrings"]), info)
        d.rx.post()
        self.h.a.tx.send_frame(frame(BCAST, MAC_A, b"to all"))
        deadline = time.monotonic() + 3
        while d.rx.used_idx() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertGreater(d.rx.used_idx(), 0)

    def test_07_message_storms(self):
        """Thousands of valid messages that each pause the port, and requests whose replies
        are never read: the healthy pair and `ctl` stay responsive."""
        g = self.h.guest("c")
        lat = []
        stop = threading.Event()

        def probe():
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    self.h.stats()
                except Exception:  # noqa: BLE001
                    lat.append(99.0)
                    return
                lat.append(time.monotonic() - t0)
                time.sleep(0.05)
        th = threading.Thread(target=probe, daemon=True)
        th.start()
        try:
            batch = b"".join(struct.pack("<III", SET_VRING_ENABLE, VERSION | F_NEED_REPLY, 8) +
                             struct.pack("<II", TX, i & 1) for i in range(200))
            for _ in range(10):  # 2000 enable toggles, acks read in batches
                g.raw_bytes(batch)
                for _ in range(200):
                    g.recv()
            self.assertEqual(g.state(SET_VRING_ENABLE, TX, 1), 0)
            self.h.learn(g, MAC_C)
            # GET_FEATURES flood whose replies are never read: the switch's send buffer
            # fills; it must drop the connection rather than wait forever.
            d = self.h.connect("d")
            d.sock.settimeout(10)
            msg = struct.pack("<III", GET_FEATURES, VERSION, 0) * 1000
            try:
                for _ in range(200):
                    d.raw_bytes(msg)
            except (Closed, OSError, socket.timeout):
                pass
            self.assertClosed(d, 5, "that never read its replies")
            self.h.check_healthy()
        finally:
            stop.set()
            th.join()
        _log("ctl latency under the storms: max %.2f s" % max(lat))
        self.assertLess(max(lat), CONTROL_DEADLINE_S, "ctl latency under a message storm: %s" % max(lat))

    def test_08_fd_floods(self):
        """Many fds on one message, many messages with fds, one memfd for 8 regions."""
        fds_before = self.h.fd_count()
        g = self.h.connect("c")
        many = [eventfd() for _ in range(250)]
        try:
            g.raw_bytes(struct.pack("<III", GET_FEATURES, VERSION, 0), many)
        except Closed:
            pass
        for fd in many:
            os.close(fd)
        self.assertClosed(g, what="after a message with 250 fds")
        g.close()
        self.h.wait_ports_settled()
        # One memfd mapped as 8 regions, replaced 30 times; then 100 tables of a fresh fd each.
        g = self.h.guest("c", rings=False)
        r = Region(8 << 20, 0x100000000, 0x7e0000000000)
        regs = [(0x100000000 + i * (1 << 20), 1 << 20, 0x7e0000000000 + i * (1 << 20), i * (1 << 20))
                for i in range(8)]
        for _ in range(30):
            payload, _ = g.mem_table(regs, fds=[r.fd] * 8)
            self.assertEqual(g.request(SET_MEM_TABLE, payload, [r.fd] * 8), 0)
        self.assertEqual(self.h.ports()["c"]["mapped_bytes"], 8 << 20)  # each from its offset's page
        for _ in range(100):
            fd = fresh_fd("memfd")
            payload, _ = g.mem_table([(0x100000000, 4096, 0x7e0000000000, 0)], fds=[fd])
            self.assertEqual(g.request(SET_MEM_TABLE, payload, [fd]), 0)
            os.close(fd)
        self.assertEqual(self.h.ports()["c"]["mapped_bytes"], 4096)
        r.close()
        # + the connection and the current memory table's fd (kept for direct links,
        # docs/direct-link.md; closed with the table)
        self.assertEqual(self.h.fd_count(), fds_before + 2)

    def test_09_socket_fds(self):
        """A socket passed as an fd (no request carries one): a TCP socket with SO_LINGER
        and unsent data would make close() wait up to its linger time on the control thread.
        Also as the 9th fd of a message (the kernel closes what does not fit our buffer)."""
        keep = []

        def lingering_socket():
            srv = socket.socket()
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            srv.bind(("127.0.0.1", 0))
            srv.listen(1)
            cli = socket.socket()
            cli.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            cli.connect(srv.getsockname())
            conn, _ = srv.accept()
            cli.setblocking(False)
            try:
                while True:
                    cli.send(b"x" * 65536)
            except BlockingIOError:
                pass
            cli.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 60))
            keep.extend([srv, conn])
            return cli

        try:
            for variant in ("alone", "ninth", "as call fd", "unix"):
                g = self.h.connect("c")
                if variant == "unix":
                    s1, s2 = socket.socketpair()
                    keep.extend([s1, s2])
                    sock = s1
                else:
                    sock = lingering_socket()
                if variant == "as call fd":
                    g.negotiate()
                    hdr = struct.pack("<III", SET_VRING_CALL, VERSION, 8)
                    rest = struct.pack("<Q", RX)
                    fds = [sock.fileno()]
                else:
                    hdr = struct.pack("<III", GET_FEATURES, VERSION, 0)
                    rest = b""
                    fds = [sock.fileno()] if variant != "ninth" else [eventfd() for _ in range(8)] + [sock.fileno()]
                # The fd travels with the first half of the header; our copy is closed
                # before the rest is sent, so the switch holds the last reference.
                g.raw_bytes(hdr[:6], fds)
                sock.close()
                for fd in fds[:-1]:
                    os.close(fd)
                time.sleep(0.1)
                try:
                    g.raw_bytes(hdr[6:] + rest)
                except Closed:
                    pass
                self.assertClosed(g, what="after a socket fd (%s)" % variant)
                self.assertControlResponsive()
                g.close()
                self.h.wait_ports_settled()
        finally:
            for s in keep:
                s.close()

    def test_10_connection_storms(self):
        """64 connections at once, 300 connect/close cycles, 40 full negotiations."""
        log_before = len(self.h.tb.switch.output().splitlines())
        socks = []
        for _ in range(64):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(self.h.tb.sock("c"))
            except (BlockingIOError, OSError):
                pass
            socks.append(s)
        time.sleep(0.2)
        for s in socks:
            s.close()
        for i in range(300):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.h.tb.sock("c"))
                if i % 2:
                    s.sendall(struct.pack("<III", GET_FEATURES, VERSION, 0))
            except OSError:
                pass
            s.close()
        for _ in range(40):
            g = Guest(self.h.tb.sock("c"), connect_timeout=5).negotiate()
            g.close()
        self.h.wait_ports_settled(10)
        self.assertControlResponsive()
        lines = len(self.h.tb.switch.output().splitlines()) - log_before
        _log("connection storm: %d switch log lines" % lines)

    def test_11_get_vring_base_while_running(self):
        """GET_VRING_BASE stops a running ring (nothing taken or delivered after it);
        SET_VRING_BASE + SET_VRING_KICK start it again where it stopped."""
        g = self.h.guest("c")
        g.rx.post()
        self.h.learn(g, MAC_C)
        self.assertEqual(self.h.exchange(g, MAC_C, self.h.b, MAC_B, 4), 4)
        base = struct.unpack("<II", g.request(GET_VRING_BASE, struct.pack("<II", TX, 0), reply=True))
        self.assertEqual(base, (TX, g.tx.avail_idx))
        info = self.h.ports()["c"]
        self.assertEqual(info["vrings"][TX]["why_not"], "not started")
        used = g.tx.used_idx()
        for i in range(3):
            g.tx.send_frame(frame(MAC_B, MAC_C, b"stopped%d" % i))
        time.sleep(0.3)
        self.assertEqual(g.tx.used_idx(), used, "the switch used a stopped ring")
        self.assertEqual(g.state(SET_VRING_BASE, TX, base[1]), 0)
        self.assertEqual(g.vring_fd(SET_VRING_KICK, TX, g.kick[TX]), 0)
        self.assertTrue(g.tx.wait_done(3), "the restarted ring did not resume")
        # The same on the receive ring, while frames arrive for it.
        base = struct.unpack("<II", g.request(GET_VRING_BASE, struct.pack("<II", RX, 0), reply=True))
        used = g.rx.used_idx()
        self.assertEqual(self.h.exchange(self.h.a, MAC_A, g, MAC_C, 4, timeout=0.5), 0)
        self.assertEqual(g.rx.used_idx(), used)
        self.assertEqual(g.state(SET_VRING_BASE, RX, base[1]), 0)
        self.assertEqual(g.vring_fd(SET_VRING_KICK, RX, g.kick[RX]), 0)
        g.rx.take()
        self.assertEqual(self.h.exchange(self.h.a, MAC_A, g, MAC_C, 4), 4)

    def test_12_reset_owner_while_running(self):
        """RESET_OWNER unmaps the memory and stops the rings; the connection can start over."""
        g = self.h.guest("c")
        self.h.learn(g, MAC_C)
        # NEED_REPLY is asked for, but RESET_OWNER also resets the protocol features, so the
        # switch may or may not ack it: accept both.
        g.send(RESET_OWNER, flags=VERSION | F_NEED_REPLY)
        try:
            g.recv(0.3)
        except TimeoutError:
            pass
        info = self.h.ports()["c"]
        self.assertEqual(info["mapped_bytes"], 0)
        self.assertFalse(any(v["ready"] for v in info["vrings"]))
        g.mem.close()
        g.mem = None
        g.protocol = 0
        g.negotiate()
        self.h.learn(g, MAC_C)
        self.assertEqual(self.h.exchange(g, MAC_C, self.h.b, MAC_B), 8)


# =========================================================================================
# Scenarios: addresses and memory (items 7-9), memory replaced or truncated under traffic
# =========================================================================================

    def test_13_control_socket_abuse(self):
        """The control socket is local but shared by every operator tool: a request with
        args of the wrong type, a deeply nested one, a client that trickles bytes and
        idle connections get an error or are dropped; none stops the switch, and the
        control thread (which also serves vhost-user messages) stays responsive."""
        def raw(line, wait=2.0):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(wait)
            s.connect(self.h.tb.ctl_path)
            s.sendall(line)
            try:
                return s.recv(65536)
            finally:
                s.close()
        for a in (b"[]", b"null", b'"x"', b"5"):
            r = raw(b'{"cmd":"set-flush","args":' + a + b"}\n")
            self.assertIn(b'"ok":false', r, a)
            self.assertTrue(self.h.alive(), "args %r killed the switch" % a)
        deep = b'{"cmd":"version","args":' + b"[" * 10000 + b"]" * 10000 + b"}\n"
        self.assertIn(b"nested", raw(deep))
        self.assertTrue(self.h.alive())
        # A client trickling one byte at a time, and idle clients: connections are
        # multiplexed, so ctl keeps answering meanwhile, and each is dropped when its
        # request budget (3 s from connecting) runs out.
        idle = []
        for _ in range(12):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(self.h.tb.ctl_path)
            idle.append(c)
        slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        slow.connect(self.h.tb.ctl_path)
        t_end = time.monotonic() + 6.0  # the budget is 3 s
        dropped = False
        while time.monotonic() < t_end and not dropped:
            try:
                slow.send(b" ")
            except OSError:
                dropped = True
            time.sleep(0.1)
        self.assertTrue(dropped, "a client trickling bytes held its connection for 6 s")
        t0 = time.monotonic()
        self.h.stats()
        self.assertLess(time.monotonic() - t0, 4.0, "ctl stats slowed by idle clients")
        for c in idle + [slow]:
            c.close()
        self.assertControlResponsive()


def two_region_memory(size=1 << 20, gpa=0x40000000, uva0=0x7f1200000000, uva1=0x7f5600000000):
    """Two memfds, contiguous in guest-physical space, far apart in front-end virtual space
    (so never contiguous in the switch's mappings either)."""
    return Memory([Region(size, gpa, uva0, name="vhu-r0"), Region(size, gpa + size, uva1, name="vhu-r1")])


def span_write(mem, gpa, data):
    while data:
        r = mem._find(gpa, 1)
        n = min(len(data), r.gpa + r.size - gpa)
        mem.write(gpa, data[:n])
        gpa, data = gpa + n, data[n:]


def span_read(mem, gpa, n):
    out = b""
    while n:
        r = mem._find(gpa, 1)
        k = min(n, r.gpa + r.size - gpa)
        out += mem.read(gpa, k)
        gpa, n = gpa + k, n - k
    return out


class Addresses(HostileCase):

    def test_01_buffers_across_regions(self):
        """Item 7: buffers that run from one region into the next (contiguous in guest-physical
        space only) are copied piecewise, byte for byte, in both directions."""
        mem = two_region_memory()
        g = self.h.guest("c", mem=mem)
        self.h.learn(g, MAC_C)
        edge = mem.regions[1].gpa
        fr = frame(MAC_B, MAC_C, b"SPAN" + bytes(range(200)), size=300)
        data = b"\0" * HDR_LEN + fr
        before = self.h.stats()
        span_write(mem, edge - 100, data)
        g.tx.set_desc(0, edge - 100, len(data))
        g.tx.free.remove(0)
        g.tx.put_avail(0)
        self.h.wait_taken(before, "c", 1)
        got = []
        deadline = time.monotonic() + 3
        while not got and time.monotonic() < deadline:
            got = [f for f in self.h.b.rx.take() if f[14:18] == b"SPAN"]
        self.assertEqual(got[:1], [fr], "frame spanning two regions corrupted")
        # Receive: one buffer across the edge.
        g.rx.set_desc(0, edge - 50, 2048, DESC_WRITE)
        g.rx.put_avail(0)
        fr2 = frame(MAC_C, MAC_A, b"SPAN" + bytes(range(100, 250)), size=400)
        self.h.a.tx.send_frame(fr2)
        deadline = time.monotonic() + 3
        while g.rx.used_idx() == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        head, ln = g.rx.used_elem(0)
        self.assertEqual((head, ln), (0, HDR_LEN + len(fr2)))
        self.assertEqual(span_read(mem, edge - 50 + HDR_LEN, len(fr2)), fr2)

    def test_02_buffers_past_the_end(self):
        """Item 7: a transmit buffer that runs past the last region: bad_descriptor; a receive
        buffer that does: the receive ring is broken (ring_broken), nothing written past it."""
        g = self.h.guest("c")
        self.h.learn(g, MAC_C)
        end = g.mem.regions[0].gpa + g.mem.regions[0].size
        before = self.h.stats()
        g.tx.set_desc(0, end - 40, 100)
        g.tx.free.remove(0)
        g.tx.put_avail(0)
        st = self.h.wait_taken(before, "c", 1)
        self.assertDelta("c", "bad_descriptor", 1, st, before)
        g.rx.set_desc(0, end - 40, 2048, DESC_WRITE)
        g.rx.put_avail(0)
        before = self.h.stats()
        self.h.a.tx.send_frame(frame(MAC_C, MAC_A, b"past the end"))
        self.h.wait_stats(lambda s: Harness.delta(before, s, "c", "ring_broken") == 1, 3, "ring_broken on c")
        # The bad chain may be handed back, but empty: nothing was written.
        self.assertLessEqual(g.rx.used_idx(), 1)
        if g.rx.used_idx():
            self.assertEqual(g.rx.used_elem(0), (0, 0))

    def test_03_addresses_in_no_region(self):
        """Item 8: descriptor addresses in no region, with length 0 too, and at region edges."""
        mem = Memory([Region(1 << 20, 0x40000000, 0x7f1200000000), Region(1 << 20, 0x40200000, 0x7f5600000000)])
        g = self.h.guest("c", mem=mem)
        self.h.learn(g, MAC_C)
        gap = 0x40100000  # between the two regions
        end = 0x40300000  # past the last one
        buf = g.tx.buf_of[0]
        g.mem.write(buf, b"\0" * HDR_LEN + frame(MAC_C, MAC_C, b"x"))
        bad_chains = [
            [(gap, 0, 0)], [(gap, 64, 0)], [(0, 0, 0)], [(end, 0, 0)], [((1 << 64) - 1, 2, 0)],
            [(gap - 1, 2, 0)],                                   # runs into the gap
            [(buf, HDR_LEN + 64, DESC_NEXT), (gap, 0, 0)],       # a valid buffer, then 0 bytes nowhere
            [(buf, HDR_LEN + 64, DESC_NEXT), (end, 0, 0)],
        ]
        before = self.h.stats()
        for chain in bad_chains:
            g.tx.reclaim()
            for j, (addr, ln, flags) in enumerate(chain):
                g.tx.set_desc(j, addr, ln, flags, j + 1)
            g.tx.put_avail(0)
            while g.tx.used_idx() != g.tx.avail_idx:
                time.sleep(0.002)
        st = self.h.stats()
        self.assertDelta("c", "bad_descriptor", len(bad_chains), st, before)
        self.assertDelta("c", "rx_packets", len(bad_chains), st, before)
        # An empty descriptor on the last byte of a region translates: the chain is fine.
        last = 0x40000000 + (1 << 20) - 1
        fr = frame(MAC_B, MAC_C, b"EDGE", size=80)
        g.mem.write(buf, b"\0" * HDR_LEN + fr)
        g.tx.set_desc(0, buf, HDR_LEN + len(fr), DESC_NEXT, 1)
        g.tx.set_desc(1, last, 0, 0, 0)
        g.tx.put_avail(0)
        deadline = time.monotonic() + 3
        got = []
        while not got and time.monotonic() < deadline:
            got = [f for f in self.h.b.rx.take() if f[14:18] == b"EDGE"]
        self.assertEqual(got[:1], [fr])
        g.tx.free = [i for i in range(len(g.tx.buf_of))]

    def test_04_ring_addresses(self):
        """Item 9: rings in no region, across a region's end, misaligned: the ring does not
        start and `ctl ports` says why; a valid address afterwards starts it."""
        g = self.h.guest("c")
        m = g.mem
        r = m.regions[0]
        end_uva = r.uva + r.size
        num = 256
        good = (m.uva(g.tx.desc), m.uva(g.tx.used), m.uva(g.tx.avail))
        bad = {
            "desc in no region": (0x1000, good[1], good[2]),
            "used in no region": (good[0], 0xdead0000, good[2]),
            "avail past the end": (good[0], good[1], end_uva - 10),
            "used 2 bytes past the end": (good[0], end_uva - (6 + 8 * num) + 2, good[2]),
            "desc misaligned": (good[0] + 8, good[1], good[2]),
            "used misaligned": (good[0], good[1] + 2, good[2]),
            "avail misaligned": (good[0], good[1], good[2] + 1),
            "desc across the uva space end": ((1 << 64) - 16, good[1], good[2]),
        }
        for what, (d, u, a) in bad.items():
            self.assertEqual(g.request(SET_VRING_ADDR, struct.pack("<IIQQQQ", TX, 0, d, u, a, 0)), 0)
            info = self.h.ports()["c"]["vrings"][TX]
            self.assertFalse(info["ready"], what)
            self.assertEqual(info["why_not"], "ring address not in guest memory", what)
        # The used ring ending exactly at the region's end is fine.
        self.assertEqual(g.request(SET_VRING_ADDR, struct.pack("<IIQQQQ", TX, 0, good[0],
                                                              end_uva - (6 + 8 * num) & ~3, good[2], 0)), 0)
        self.assertTrue(self.h.ports()["c"]["vrings"][TX]["ready"])
        self.assertEqual(g.request(SET_VRING_ADDR, g.tx.addr_msg(TX)), 0)
        self.assertTrue(self.h.ports()["c"]["vrings"][TX]["ready"])
        self.h.learn(g, MAC_C)
        self.assertEqual(self.h.exchange(g, MAC_C, self.h.b, MAC_B), 8)

    def test_05_mem_table_replaced_under_traffic(self):
        """SET_MEM_TABLE again and again while the port transmits: every frame delivered
        once, old tables unmapped."""
        g = self.h.guest("c")
        self.h.learn(g, MAC_C)
        stop = threading.Event()
        errors = []

        def remap():
            try:
                while not stop.is_set():
                    self.assertEqual(g.set_mem_table(g.mem.regions), 0)
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        th = threading.Thread(target=remap, daemon=True)
        th.start()
        n = 300
        sent = []
        got = []
        try:
            for i in range(n):
                fr = frame(MAC_B, MAC_C, b"SWAP" + struct.pack(">I", i))
                g.tx.send_frame(fr)
                sent.append(fr)
                got += [f for f in self.h.b.rx.take() if f[14:18] == b"SWAP"]
        finally:
            stop.set()
            th.join()
        self.assertFalse(errors, errors)
        self.assertTrue(g.tx.wait_done(5))
        deadline = time.monotonic() + 3
        while len(got) < n and time.monotonic() < deadline:
            got += [f for f in self.h.b.rx.take() if f[14:18] == b"SWAP"]
        self.assertEqual(got, sent, "frames lost, duplicated or reordered across table swaps")
        # Swap to a new memfd (a copy) a few times: the old ones are unmapped.
        for _ in range(5):
            old = g.mem.regions[0]
            new = Region(old.size, old.gpa, old.uva, name="vhu-guest")
            new.mm[:] = old.mm[:]
            self.assertEqual(g.set_mem_table([new]), 0)
            g.mem.regions[0] = new
            g.mem._next[id(new)] = g.mem._next.pop(id(old))
            old.close()
        self.assertEqual(self.h.guest_maps()[0], self.h.base_maps[0] + 1)
        self.assertEqual(self.h.exchange(g, MAC_C, self.h.b, MAC_B), 8)

    def test_06_memory_truncated(self):
        """The front-end shrinks its memfd after SET_MEM_TABLE: the switch's next access
        would raise SIGBUS. The switch survives and closes that connection. Truncated to 0
        (the rings fault while the PMD polls them) and to just the rings' pages (a frame
        copied into, or out of, a buffer beyond them faults)."""
        for direction in ("poll", "rx", "tx"):
            g = self.h.guest("c")
            self.h.learn(g, MAC_C)
            r = g.mem.regions[0]
            # Keep the pages of both rings (the transmit ring comes last); the transmit
            # buffers lie beyond them.
            keep = (g.tx.used + 6 + 8 * g.tx.num - r.gpa + 4095) & ~4095
            self.assertGreaterEqual(g.tx.buf_of[-1], r.gpa + keep)
            if direction == "rx":
                g.rx.set_desc(0, g.tx.buf_of[-1], 2048, DESC_WRITE)
                g.rx.put_avail(0)
            elif direction == "tx":  # a frame in a buffer past `keep`, not yet published
                buf = g.tx.buf_of[-1]
                fr = frame(MAC_B, MAC_C, b"from truncated memory")
                g.mem.write(buf, b"\0" * HDR_LEN + fr)
                g.tx.set_desc(5, buf, HDR_LEN + len(fr))
                g.tx.put_avail(5, publish=False)
            r.mm.close()
            r.mm = None
            os.ftruncate(r.fd, 0 if direction == "poll" else keep)
            if direction == "rx":
                self.h.a.tx.send_frame(frame(MAC_C, MAC_A, b"into truncated memory"))
            elif direction == "tx":
                with mmap.mmap(r.fd, keep) as mm:
                    mm[g.tx.avail + 2 - r.gpa:g.tx.avail + 4 - r.gpa] = struct.pack("<H", g.tx.avail_idx)
            self.assertClosed(g, 5, "whose memory was truncated (%s)" % direction)
            self.assertTrue(self.h.alive())
            g.mem.regions = []  # nothing of it is ours to touch any more
            os.close(r.fd)
            g.close()
            self.h.wait_ports_settled()

    def test_08_truncated_region_touched_page_by_page(self):
        """A truncated region whose transmit buffers lie on every other page: every chain
        faults on a new page. Repairing page by page created one mapping per page (a PMD
        thread makes ~25000 a second; vm.max_map_count is 65530, after which mmap fails - in
        the SIGBUS handler too, and in malloc - and the switch dies). Now one repair per
        region: the switch's mapping count stays flat."""
        G, U = 0x40000000, 0x7f1200000000
        mem = Memory([Region(64 << 20, G, U)])
        g = self.h.connect("c")
        g.negotiate(rings=False, mem=mem)
        N = 4096
        g.tx = Ring(mem, N)
        g.rx = RxQueue(mem, 256)
        r = mem.regions[0]
        keep = (g.rx.buf_of[-1] + RxQueue.BUF - G + 4095) & ~4095
        g.mem.write(g.tx.desc, b"".join(struct.pack("<QIHH", G + keep + 8192 * j, 64, 0, 0) for j in range(N)))
        g.mem.write(g.tx.avail + 4, b"".join(struct.pack("<H", j) for j in range(N)))
        for i, q in ((RX, g.rx), (TX, g.tx)):
            g.start_vring(i, q)
        for i in (RX, TX):
            self.assertEqual(g.state(SET_VRING_ENABLE, i, 1), 0)

        def nmaps():
            with open("/proc/%d/maps" % self.h.pid) as f:
                return sum(1 for _ in f)
        base = nmaps()
        r.mm.close()
        r.mm = None
        os.ftruncate(r.fd, keep)
        with mmap.mmap(r.fd, keep) as mm:
            mm[g.tx.avail + 2 - G:g.tx.avail + 4 - G] = struct.pack("<H", N & 0xffff)
        most = base
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            most = max(most, nmaps())
            time.sleep(0.01)
        self.assertClosed(g, 5, "whose memory was truncated")
        self.assertLess(most - base, 50, "the switch made a mapping per faulting page")
        g.mem.regions = []
        os.close(r.fd)

    def test_07_huge_sparse_regions(self):
        """Sparse memfds of terabytes: a table of more than the per-connection cap (1 TiB by
        default, --max-guest-memory) is refused; 512 GiB plus a region at a 3 TiB file offset
        are mapped, the latter from its offset's page (not from offset 0: 1 MiB mapped, not
        3 TiB), and unmapped again after the front-end leaves."""
        TB = 1 << 40
        fd = os.memfd_create("vhu-huge", os.MFD_CLOEXEC)
        os.ftruncate(fd, 4 * TB)
        try:
            g = self.h.guest("c", rings=False)
            regs = [(0x100000000, 2 * TB, 0x100000000000, 0), (0x100000000 + 2 * TB, 1 << 20, 0x300000000000, 3 * TB)]
            payload, _ = g.mem_table(regs, fds=[fd, fd])
            self.assertRefused(g.refused(SET_MEM_TABLE, payload, [fd, fd]), "a 2 TiB memory table")
            self.assertEqual(self.h.ports()["c"]["mapped_bytes"], 4 << 20)  # the old table kept
            g.close()
            g = self.h.guest("c", rings=False)
            regs = [(0x100000000, TB // 2, 0x100000000000, 0), (0x100000000 + TB, 1 << 20, 0x300000000000, 3 * TB)]
            payload, _ = g.mem_table(regs, fds=[fd, fd])
            self.assertEqual(g.request(SET_MEM_TABLE, payload, [fd, fd]), 0)
            self.assertEqual(self.h.ports()["c"]["mapped_bytes"], TB // 2 + (1 << 20))
        finally:
            os.close(fd)


# =========================================================================================
# Scenarios: ring walking (items 10-15, 18) and the guest rewriting rings under the switch
# =========================================================================================
class Rings(HostileCase):

    def send_chain(self, g, descs, head=0):
        """Writes descriptors [(addr, len, flags[, next])] at 0.. and makes `head` available,
        once the switch has returned every earlier chain (so it never sees a mix of two)."""
        deadline = time.monotonic() + 5
        while g.tx.used_idx() != g.tx.avail_idx:
            if time.monotonic() > deadline:
                self.fail("the switch did not return a chain")
            time.sleep(0.001)
        for j, d in enumerate(descs):
            addr, ln, flags = d[:3]
            nxt = d[3] if len(d) > 3 else j + 1
            g.tx.set_desc(j, addr, ln, flags, nxt)
        g.tx.put_avail(head)

    def frame_buf(self, g, fr, idx=0):
        buf = g.tx.buf_of[idx]
        g.mem.write(buf, b"\0" * HDR_LEN + fr)
        return buf, HDR_LEN + len(fr)

    def expect_at_b(self, tag, fr, timeout=3.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = [f for f in self.h.b.rx.take() if f[14:14 + len(tag)] == tag]
            if got:
                self.assertEqual(got[0][:len(fr)], fr)
                return
            time.sleep(0.005)
        self.fail("frame %r not delivered" % tag)

    def test_01_cycles_and_long_chains(self):
        """Item 10: next pointers forming cycles (all lengths 0), a chain longer than the
        queue: dropped as bad_descriptor, no hang."""
        g = self.h.guest("c")
        self.h.learn(g, MAC_C)
        g.tx.free = []
        buf = g.tx.buf_of[0]
        chains = [
            [(buf, 0, DESC_NEXT, 1), (buf, 0, DESC_NEXT, 0)],          # 0 -> 1 -> 0
            [(buf, 0, DESC_NEXT, 0)],                                   # 0 -> 0
            [(buf, 12, DESC_NEXT, 0)],                                  # 0 -> 0 with bytes
            [(buf, 0, DESC_NEXT, (j + 1) % 256) for j in range(256)],   # 256-long cycle
            [(buf, 1, DESC_NEXT, 255 - j) for j in range(256)],         # 0 -> 255 -> 1 -> 254...
        ]
        before = self.h.stats()
        for ch in chains:
            self.send_chain(g, ch)
        st = self.h.wait_taken(before, "c", len(chains))
        self.assertDelta("c", "bad_descriptor", len(chains), st, before)
        self.assertEqual(g.tx.used_idx(), g.tx.avail_idx)
        g.tx.take_used()
        g.tx.free = list(range(len(g.tx.buf_of)))
        self.assertEqual(self.h.exchange(g, MAC_C, self.h.b, MAC_B), 8)

    def test_02_avail_index_jumps(self):
        """Item 11: an avail index more than a queue ahead: the ring is broken (ring_broken),
        the queue stops, nothing is re-processed; restarting the ring recovers it."""
        g = self.h.guest("c")
        self.h.learn(g, MAC_C)
        before = self.h.stats()
        used = g.tx.used_idx()
        g.tx.publish((g.tx.avail_idx + 257) & 0xffff)
        st = self.h.wait_stats(lambda s: Harness.delta(before, s, "c", "ring_broken") == 1, 3, "ring_broken")
        time.sleep(0.2)
        st = self.h.stats()
        self.assertDelta("c", "ring_broken", 1, st, before)
        self.assertDelta("c", "rx_packets", 0, st, before)
        self.assertEqual(g.tx.used_idx(), used)
        g.tx.publish()  # back to the real index, then restart the ring
        self.assertEqual(g.state(SET_VRING_BASE, TX, g.tx.avail_idx), 0)
        self.assertEqual(g.vring_fd(SET_VRING_KICK, TX, g.kick[TX]), 0)
        self.assertEqual(self.h.exchange(g, MAC_C, self.h.b, MAC_B), 8)
        # The receive side: the avail index jumps while frames arrive for it.
        g.rx.post()
        g.rx.publish((g.rx.avail_idx + 1000) & 0xffff)
        before = self.h.stats()
        self.h.a.tx.send_frame(frame(MAC_C, MAC_A, b"to a broken ring"))
        self.h.wait_stats(lambda s: Harness.delta(before, s, "c", "ring_broken") == 1, 3, "ring_broken (rx)")
        self.h.a.tx.send_frame(frame(MAC_C, MAC_A, b"to a broken ring"))
        st = self.h.wait_stats(lambda s: Harness.delta(before, s, "a", "no_destination") == 1, 3,
                               "no_destination for frames to a stopped receive ring")
        self.assertEqual(g.rx.used_idx(), 0)

    def test_03_indirect_tables(self):
        """Item 12: indirect tables with a bad length, nested, longer than the queue, in no
        region or across its end: bad_descriptor. A valid table at an address that is not
        16-byte aligned is delivered."""
        g = self.h.guest("c")
        self.h.learn(g, MAC_C)
        m = g.mem
        tbl = m.alloc(16 * 300, 64)
        fr = frame(MAC_B, MAC_C, b"INDR" + bytes(range(30)), size=90)
        buf, ln = self.frame_buf(g, fr, 1)
        end = m.regions[0].gpa + m.regions[0].size

        def table(entries, at=tbl):
            for j, (a, l, f, n) in enumerate(entries):
                g.tx.set_desc(j, a, l, f, n, table=at)
        cases = []
        table([(buf, ln, 0, 0)])
        cases += [[(tbl, 17, DESC_INDIRECT)], [(tbl, 0, DESC_INDIRECT)], [(tbl, 15, DESC_INDIRECT)],
                  [(tbl, 16 * 257, DESC_INDIRECT)],                    # more than the queue size
                  [(0x1000, 16, DESC_INDIRECT)],                        # in no region
                  [(end - 16, 32, DESC_INDIRECT)]]                      # across the region's end
        before = self.h.stats()
        for ch in cases:
            self.send_chain(g, ch)
        st = self.h.wait_taken(before, "c", len(cases))
        self.assertDelta("c", "bad_descriptor", len(cases), st, before)
        # Nested: the table holds an indirect descriptor.
        table([(tbl + 16 * 10, 16, DESC_INDIRECT, 0)])
        table([(buf, ln, 0, 0)], tbl + 16 * 10)
        # A table entry whose next points past the table.
        tbl2 = m.alloc(64, 64)
        table([(buf, 6, DESC_NEXT, 5), (buf + 6, ln - 6, 0, 0)], tbl2)
        before = self.h.stats()
        self.send_chain(g, [(tbl, 16, DESC_INDIRECT)])
        self.send_chain(g, [(tbl2, 32, DESC_INDIRECT)])
        st = self.h.wait_taken(before, "c", 2)
        self.assertDelta("c", "bad_descriptor", 2, st, before)
        # Valid, 8 bytes off 16-byte alignment, header and frame in separate entries.
        odd = m.alloc(64, 64) + 8
        table([(buf, HDR_LEN, DESC_NEXT, 1), (buf + HDR_LEN, len(fr), 0, 0)], odd)
        self.send_chain(g, [(odd, 32, DESC_INDIRECT)])
        self.expect_at_b(b"INDR", fr)
        # An indirect descriptor where INDIRECT_DESC was not negotiated.
        d = self.h.guest("d", features=DEFAULT_FEATURES & ~VIRTIO_RING_F_INDIRECT_DESC)
        dbuf, dln = self.frame_buf(d, frame(MAC_B, MAC_D, b"x"))
        dt = d.mem.alloc(64, 64)
        d.tx.set_desc(0, dbuf, dln, 0, 0, table=dt)
        before = self.h.stats()
        d.tx.set_desc(0, dt, 16, DESC_INDIRECT, 0)
        d.tx.put_avail(0)
        st = self.h.wait_taken(before, "d", 1)
        self.assertDelta("d", "bad_descriptor", 1, st, before)

    def test_04_garbage_heads(self):
        """Item 14: avail ring entries naming heads far above the queue size."""
        g = self.h.guest("c")
        self.h.learn(g, MAC_C)
        before = self.h.stats()
        for head in (256, 257, 0x7fff, 0xffff):
            g.tx.put_avail(head)
        st = self.h.wait_taken(before, "c", 4)
        self.assertDelta("c", "bad_descriptor", 4, st, before)
        g.tx.used_seen = g.tx.used_idx()
        self.assertEqual(self.h.exchange(g, MAC_C, self.h.b, MAC_B), 8)

    def test_05_short_chains_and_split_headers(self):
        """Item 15: chains no longer than the virtio-net header (or header plus less than an
        Ethernet header): bad_header. A header split over 3 or 12 descriptors: delivered."""
        g = self.h.guest("c")
        self.h.learn(g, MAC_C)
        buf = g.tx.buf_of[0]
        g.tx.free = []
        before = self.h.stats()
        for ch in ([(buf, HDR_LEN, 0)], [(buf, HDR_LEN + 13, 0)], [(buf, 0, 0)],
                   [(buf, 4, DESC_NEXT), (buf, 4, DESC_NEXT), (buf, 4, 0)]):
            self.send_chain(g, ch)
        st = self.h.wait_taken(before, "c", 4)
        self.assertDelta("c", "bad_header", 4, st, before)
        fr = frame(MAC_B, MAC_C, b"SPL3" + bytes(range(50)), size=100)
        g.mem.write(buf, b"\0" * HDR_LEN + fr)
        self.send_chain(g, [(buf, 4, DESC_NEXT), (buf + 4, 4, DESC_NEXT), (buf + 8, 4, DESC_NEXT),
                            (buf + 12, len(fr), 0)])
        self.expect_at_b(b"SPL3", fr)
        fr = frame(MAC_B, MAC_C, b"SPLC" + bytes(range(80)), size=120)
        g.mem.write(buf, b"\0" * HDR_LEN + fr)
        descs = [(buf + j, 1, DESC_NEXT) for j in range(HDR_LEN)]
        descs += [(buf + HDR_LEN + k, min(7, len(fr) - k), DESC_NEXT) for k in range(0, len(fr), 7)]
        descs[-1] = descs[-1][:2] + (0,)
        self.send_chain(g, descs)
        self.expect_at_b(b"SPLC", fr)
        g.tx.take_used()
        g.tx.free = list(range(len(g.tx.buf_of)))

    def test_06_wrong_direction(self):
        """A device-writable buffer on the transmit queue: bad_descriptor. A device-readable
        buffer on the receive queue: the receive ring is broken."""
        g = self.h.guest("c")
        self.h.learn(g, MAC_C)
        buf, ln = self.frame_buf(g, frame(MAC_B, MAC_C, b"x"))
        g.tx.free = []
        before = self.h.stats()
        self.send_chain(g, [(buf, ln, DESC_WRITE)])
        self.send_chain(g, [(buf, HDR_LEN, DESC_NEXT), (buf + HDR_LEN, ln - HDR_LEN, DESC_WRITE)])
        st = self.h.wait_taken(before, "c", 2)
        self.assertDelta("c", "bad_descriptor", 2, st, before)
        g.tx.take_used()
        g.tx.free = list(range(len(g.tx.buf_of)))
        g.rx.set_desc(0, g.rx.buf_of[0], 2048, 0)
        g.rx.put_avail(0)
        before = self.h.stats()
        self.h.a.tx.send_frame(frame(MAC_C, MAC_A, b"to a read-only buffer"))
        self.h.wait_stats(lambda s: Harness.delta(before, s, "c", "ring_broken") == 1, 3, "ring_broken")
        self.assertLessEqual(g.rx.used_idx(), 1)  # handed back empty, if at all
        if g.rx.used_idx():
            self.assertEqual(g.rx.used_elem(0), (0, 0))

    def test_07_rings_rewritten_under_the_switch(self):
        """Item 13: the front-end rewrites descriptors (address, length, flags, next), avail
        entries, the virtio-net header and the frame while the switch walks and copies them;
        on both queues. Every field must be read once; nothing outside guest memory touched."""
        import random
        rnd = random.Random(1234)
        g = self.h.guest("c")
        self.h.learn(g, MAC_C)
        g.rx.post()
        m = g.mem
        lo, hi = m.regions[0].gpa, m.regions[0].gpa + m.regions[0].size
        stop = threading.Event()

        def scribble():
            addrs = [lo, hi - 1, hi, hi - 16, 0, (1 << 64) - 1, lo + 4096]
            while not stop.is_set():
                q = g.tx if rnd.random() < 0.7 else g.rx
                j = rnd.randrange(q.num)
                addr = rnd.choice(addrs) if rnd.random() < 0.3 else rnd.randrange(lo, hi)
                ln = rnd.choice([0, 1, 11, 12, 13, 26, 64, 2048, 0xffffffff, rnd.randrange(1 << 32)])
                q.set_desc(j, addr, ln, rnd.randrange(8), rnd.randrange(0x10000) if rnd.random() < 0.2 else rnd.randrange(q.num))
                if rnd.random() < 0.2:
                    m.w16(q.avail + 4 + 2 * rnd.randrange(q.num), rnd.randrange(0x10000) if rnd.random() < 0.1 else rnd.randrange(q.num))
                if rnd.random() < 0.3:
                    b = g.tx.buf_of[rnd.randrange(len(g.tx.buf_of))]
                    m.write(b, bytes(rnd.randrange(256) for _ in range(26)))
        th = threading.Thread(target=scribble, daemon=True)
        th.start()
        t_end = time.monotonic() + 2.5
        try:
            i = 0
            while time.monotonic() < t_end:
                # Transmit: valid chains the scribbler keeps corrupting.
                for _ in range(16):
                    j = i % len(g.tx.buf_of)
                    buf = g.tx.buf_of[j]
                    m.write(buf, b"\0" * HDR_LEN + frame(MAC_C, MAC_C, b"tctou"))
                    g.tx.set_desc(j, buf, HDR_LEN + 64, 0, 0)
                    g.tx.put_avail(j)
                    i += 1
                # Receive: buffers offered again while frames arrive for them.
                g.rx.posted.clear()
                g.rx.post(32)
                self.h.a.tx.send_frame(frame(MAC_C, MAC_A, b"to a scribbled ring"), wait=False)
                g.tx.publish((g.tx.used_idx() + 128) & 0xffff)
                time.sleep(0.005)
        finally:
            stop.set()
            th.join()
        st = self.h.stats()
        self.assertGreater(Harness.delta(self.before, st, "c", "rx_packets"), 0)
        _log("scribbled rings: %s" % vltest.fmt_stats({"c": st["c"]}))

    def test_08_full_queue_of_32768(self):
        """A queue of 32768 entries, all of them made available at once (exactly a queue
        ahead: legal), every chain the same descriptor: all taken, all accounted."""
        g = self.h.connect("c")
        g.negotiate(rings=False, mem=Memory.simple(8 << 20))
        N = 32768
        g.tx = Ring(g.mem, N)
        g.rx = RxQueue(g.mem, 256)
        buf = g.mem.alloc(256)
        g.mem.write(buf, b"\0" * HDR_LEN + frame(MAC_C, MAC_C, b"full"))
        g.tx.set_desc(0, buf, HDR_LEN + 64, 0, 0)
        g.mem.write(g.tx.avail + 4, b"\0\0" * N)
        for i, q in ((RX, g.rx), (TX, g.tx)):
            g.start_vring(i, q)
        for i in (RX, TX):
            self.assertEqual(g.state(SET_VRING_ENABLE, i, 1), 0)
        before = self.h.stats()
        t0 = time.monotonic()
        g.tx.publish(N & 0xffff)
        st = self.h.wait_taken(before, "c", N, timeout=20)
        _log("32768 chains taken in %.2f s" % (time.monotonic() - t0))
        self.assertEqual(g.tx.used_idx(), N & 0xffff)
        # Each frame teaches the bridge MAC_C on c and goes back to c: no_destination.
        self.assertDelta("c", "rx_packets", N, st, before)
        self.assertDelta("c", "no_destination", N, st, before)

    def test_09_rx_chains_sharing_one_long_chain(self):
        """Item 17 (bounded work): every receive avail entry names the same 32768-descriptor
        chain of empty buffers. Without a per-frame bound, one frame costs 2^30 descriptor
        reads (seconds of the PMD thread shared by every port). Now: the ring is broken
        after a bounded walk, and the healthy pair does not notice."""
        g = self.h.connect("c")
        g.negotiate(rings=False, mem=Memory.simple(8 << 20))
        N = 32768
        g.rx = Ring(g.mem, N)
        g.tx = TxQueue(g.mem, 256)
        buf = g.mem.alloc(4096)
        g.mem.write(g.rx.desc, b"".join(struct.pack("<QIHH", buf, 0, DESC_WRITE | (DESC_NEXT if j < N - 1 else 0),
                                                    j + 1 if j < N - 1 else 0) for j in range(N)))
        g.mem.write(g.rx.avail + 4, b"\0\0" * N)
        for i, q in ((RX, g.rx), (TX, g.tx)):
            g.start_vring(i, q)
        for i in (RX, TX):
            self.assertEqual(g.state(SET_VRING_ENABLE, i, 1), 0)
        g.rx.publish(N & 0xffff)
        before = self.h.stats()
        t0 = time.monotonic()
        self.h.a.tx.send_frame(frame(BCAST, MAC_A, b"flooded"))
        self.h.wait_stats(lambda s: Harness.delta(before, s, "c", "ring_broken") == 1, 5, "ring_broken on c")
        self.h.check_healthy(timeout=2)
        _log("hostile receive ring stopped after %.2f s" % (time.monotonic() - t0))
        self.assertLess(time.monotonic() - t0, 3.0)

    def test_10_rx_empty_buffers(self):
        """Mergeable receive buffers of 0 bytes, a queue full of them: the frame does not fit
        (no_rx_buffer), bounded by the queue size, and nothing is written."""
        g = self.h.connect("c")
        g.negotiate(rings=False, mem=Memory.simple(8 << 20))
        N = 4096
        g.rx = Ring(g.mem, N)
        g.tx = TxQueue(g.mem, 256)
        buf = g.mem.alloc(64)
        g.mem.write(g.rx.desc, b"".join(struct.pack("<QIHH", buf, 0, DESC_WRITE, 0) for _ in range(N)))
        g.mem.write(g.rx.avail + 4, b"".join(struct.pack("<H", j) for j in range(N)))
        for i, q in ((RX, g.rx), (TX, g.tx)):
            g.start_vring(i, q)
        for i in (RX, TX):
            self.assertEqual(g.state(SET_VRING_ENABLE, i, 1), 0)
        g.rx.publish(N)
        self.h.learn(g, MAC_C)
        before = self.h.stats()
        for _ in range(5):
            self.h.a.tx.send_frame(frame(MAC_C, MAC_A, b"no room"))
        st = self.h.wait_stats(lambda s: Harness.delta(before, s, "c", "no_rx_buffer") == 5, 5, "no_rx_buffer")
        self.assertDelta("c", "tx_packets", 0, st, before)
        self.assertEqual(g.rx.used_idx(), 0)

    def test_11_slow_receiver(self):
        """Item 18: a port that posts 4 receive buffers and never more: 4 delivered, the rest
        counted as no_rx_buffer on that port; the healthy pair is unaffected."""
        g = self.h.guest("c")
        self.h.learn(g, MAC_C)
        g.rx.post(4)
        before = self.h.stats()
        for i in range(50):
            self.h.b.tx.send_frame(frame(MAC_C, MAC_B, b"slow%d" % i))
        st = self.h.wait_stats(lambda s: Harness.delta(before, s, "b", "rx_packets") == 50, 5, "50 frames from b")
        st = self.h.wait_stats(lambda s: Harness.delta(before, s, "c", "tx_packets") +
                               Harness.delta(before, s, "c", "no_rx_buffer") == 50, 3, "accounting")
        self.assertDelta("c", "tx_packets", 4, st, before)
        self.assertDelta("c", "no_rx_buffer", 46, st, before)
        for p in ("a", "b"):
            for k in vltest.DROP_KEYS:
                self.assertDelta(p, k, 0, st, before)
        self.assertEqual(len(g.rx.take(repost=False)), 4)

    def test_13_fragmented_frames(self):
        """Item 17: a frame over 4000 one-byte descriptors is delivered intact (it fits the
        per-chain segment limit of 4096); over 5000 it is dropped as too_big on the sending
        port (too fragmented), without overflowing any per-burst array."""
        g = self.h.connect("c")
        g.negotiate(rings=False, mem=Memory.simple(8 << 20))
        N = 8192
        g.tx = Ring(g.mem, N)
        g.rx = RxQueue(g.mem, 256)
        for i, q in ((RX, g.rx), (TX, g.tx)):
            g.start_vring(i, q)
        for i in (RX, TX):
            self.assertEqual(g.state(SET_VRING_ENABLE, i, 1), 0)
        buf = g.mem.alloc(8192)
        for n, tag in ((4000, b"FRAG"), (5000, b"FRG2")):
            fr = frame(MAC_B, MAC_C, tag + bytes(i & 0xff for i in range(n)), size=n - HDR_LEN)
            data = b"\0" * HDR_LEN + fr
            g.mem.write(buf, data)
            g.mem.write(g.tx.desc, b"".join(struct.pack("<QIHH", buf + j, 1, DESC_NEXT if j < len(data) - 1 else 0, j + 1)
                                            for j in range(len(data))))
            before = self.h.stats()
            g.tx.put_avail(0)
            st = self.h.wait_taken(before, "c", 1)
            if n == 4000:
                deadline = time.monotonic() + 3
                got = []
                while not got and time.monotonic() < deadline:
                    got = [f for f in self.h.b.rx.take() if f[14:18] == tag]
                self.assertEqual(got[:1], [fr])
            else:
                self.assertDelta("c", "too_big", 1, st, before)
            while g.tx.used_idx() != g.tx.avail_idx:
                time.sleep(0.001)

    def test_14_huge_lengths(self):
        """Descriptors of 4 GiB - 1 bytes in an 8 GiB sparse region: a 4 GiB frame is too big
        for any port (too_big on the egress port, nothing copied); two of them exceed 32 bits
        (too_big on the sending port)."""
        GiB = 1 << 30
        mem = Memory([Region(4 << 20, 0x40000000, 0x7f1200000000),
                      Region(8 * GiB, 0x100000000, 0x7f2000000000, fd=self.sparse_fd(8 * GiB))])
        g = self.h.guest("c", mem=mem)
        self.h.learn(g, MAC_C)
        big = 0x100000000
        mem.write(big, b"\0" * HDR_LEN + MAC_B + MAC_C)
        g.tx.free = []
        before = self.h.stats()
        g.tx.set_desc(0, big, 0xffffffff, 0, 0)
        g.tx.put_avail(0)
        self.h.wait_taken(before, "c", 1)
        while g.tx.used_idx() != g.tx.avail_idx:
            time.sleep(0.001)
        g.tx.set_desc(0, big, 0xffffffff, DESC_NEXT, 1)
        g.tx.set_desc(1, big + 0xffffffff, 0xffffffff, 0, 0)
        g.tx.put_avail(0)
        # The first goes to b and is dropped there (too big for its port); the second is
        # dropped when it is taken, on c.
        st = self.h.wait_stats(lambda s: sum(Harness.delta(before, s, p, "too_big") for p in s) == 2,
                               3, "too_big on b and c")
        for p in ("b", "c"):
            self.assertDelta(p, "too_big", 1, st, before)
        self.assertDelta("c", "rx_bytes", 0xffffffff - HDR_LEN, st, before)
        rss = int([l for l in open("/proc/%d/status" % self.h.pid) if l.startswith("VmRSS")][0].split()[1])
        self.assertLess(rss, 2 << 20, "the switch touched the 4 GiB buffers (RSS %d KiB)" % rss)
        g.tx.take_used()
        g.tx.free = list(range(len(g.tx.buf_of)))

    def test_15_frames_above_the_mtu(self):
        """Item 16: a port whose front-end set MTU 1500 (NET_SET_MTU) gets frames up to 1518
        bytes (MTU + Ethernet header + one VLAN tag); a 1519-byte frame is dropped as too_big
        on that port. A TSO frame (from a sender that negotiated HOST_TSO4) is segmented by
        its gso_size into frames that fit, with valid checksums; one whose segments would
        not fit is too_big; one with a GSO header on a frame that is not TCP is bad_gso on
        the sender's port. Nothing oversized is delivered."""
        d = self.h.guest("d", features=DEFAULT_FEATURES | VIRTIO_NET_F_MTU, protocol=DEFAULT_PROTOCOL | PROTO_MTU)
        self.assertEqual(d.u64(NET_SET_MTU, 1500), 0)
        d.rx.post()
        self.h.learn(d, MAC_D)
        c = self.h.guest("c", features=DEFAULT_FEATURES | VIRTIO_NET_F_CSUM | VIRTIO_NET_F_HOST_TSO4)
        self.h.learn(c, MAC_C)
        ok = frame(MAC_D, MAC_C, b"MTU1", size=1518)
        c.tx.send_frame(ok)
        deadline = time.monotonic() + 3
        got = []
        while not got and time.monotonic() < deadline:
            got = [f for f in d.rx.take() if f[14:18] == b"MTU1"]
        self.assertEqual(got[:1], [ok])
        before = self.h.stats()
        gso = lambda mss: struct.pack("<BBHHHHH", 1, 1, 54, mss, 34, 16, 0)  # NEEDS_CSUM, TCPV4  # noqa: E731
        c.tx.send_frame(frame(MAC_D, MAC_C, b"MTU2", size=1519), hdr=gso(1448))
        c.tx.send_frame(frame(MAC_D, MAC_C, b"MTU3", size=1519))
        payload = bytes((i * 7) & 0xff for i in range(1900))
        c.tx.send_frame(tcp4_frame(MAC_D, MAC_C, payload), hdr=gso(1000))
        c.tx.send_frame(tcp4_frame(MAC_D, MAC_C, payload), hdr=gso(1600))
        # One snapshot reads the ports one after the other: wait for every counter at once.
        st = self.h.wait_stats(lambda s: (Harness.delta(before, s, "d", "too_big"),
                                          Harness.delta(before, s, "c", "bad_gso"),
                                          Harness.delta(before, s, "d", "tx_packets")) == (2, 1, 1),
                               3, "too_big on d, bad_gso on c, the TSO frame")
        segs = []
        deadline = time.monotonic() + 3
        while len(segs) < 2 and time.monotonic() < deadline:
            segs += [f for f in d.rx.take() if f[12:14] == b"\x08\x00"]
        self.assertEqual([len(f) for f in segs], [54 + 1000, 54 + 900])
        self.assertTrue(all(tcp4_valid(f) for f in segs))
        self.assertEqual(segs[0][54:] + segs[1][54:], payload)
        self.assertEqual(st["d"]["offload"]["sw_gso_segments"] - before["d"]["offload"]["sw_gso_segments"], 2)

    def test_17_hostile_offload_metadata(self):
        """Items 16-17: offload metadata is checked before use. gso_size 0, csum_start or
        csum_offset past the frame, NEEDS_CSUM or TSO from a front-end that did not negotiate
        CSUM / HOST_TSO4, UFO: dropped and counted (bad_gso, bad_csum) on the sender's port,
        never delivered; a well-formed TSO frame right after them still is."""
        c = self.h.guest("c", features=DEFAULT_FEATURES | VIRTIO_NET_F_CSUM | VIRTIO_NET_F_HOST_TSO4)
        self.h.learn(c, MAC_C)
        e = self.h.guest("d")  # negotiated no offloads
        self.h.learn(e, MAC_D)
        before = self.h.stats()
        tso = tcp4_frame(MAC_B, MAC_C, bytes(1900))  # the buffers hold 2048 bytes
        hdr = lambda flags, gtype, mss, start, off: struct.pack("<BBHHHHH", flags, gtype, 54, mss, start, off, 0)  # noqa: E731
        n = len(tso)
        for h in (hdr(1, 1, 0, 34, 16),          # gso_size 0
                  hdr(1, 3, 1448, 34, 6),        # UFO
                  hdr(1, 0x81, 1448, 34, 16)):   # ECN without HOST_ECN
            c.tx.send_frame(tso, hdr=h)
        for h in (hdr(1, 1, 1448, n, 16),        # csum_start past the frame
                  hdr(1, 0, 0, n - 10, 9),       # csum field past the end
                  hdr(1, 1, 1448, 0xffff, 0xffff)):
            c.tx.send_frame(tso, hdr=h)
        e.tx.send_frame(tso[:1500], hdr=hdr(1, 0, 0, 34, 16))   # NEEDS_CSUM without CSUM
        e.tx.send_frame(tso, hdr=hdr(0, 1, 1448, 34, 16))       # TSO without HOST_TSO4
        st = self.h.wait_taken(before, "c", 6)
        st = self.h.wait_taken(before, "d", 2)
        self.assertDelta("c", "bad_gso", 3, st, before)
        self.assertDelta("c", "bad_csum", 3, st, before)
        self.assertDelta("d", "bad_csum", 1, st, before)
        self.assertDelta("d", "bad_gso", 1, st, before)
        self.assertDelta("b", "tx_packets", 0, st, before)
        c.tx.send_frame(tcp4_frame(MAC_B, MAC_C, b"TSOK" + bytes(1896)), hdr=hdr(1, 1, 1448, 34, 16))
        got = []
        deadline = time.monotonic() + 3
        while len(got) < 2 and time.monotonic() < deadline:
            got += [f for f in self.h.b.rx.take() if f[12:14] == b"\x08\x00"]
        self.assertEqual([len(f) for f in got], [54 + 1448, 54 + 452])
        self.assertEqual(got[0][54:58], b"TSOK")
        self.assertTrue(all(tcp4_valid(f) for f in got))

    def test_16_mac_table_eviction(self):
        """16 frames from source MACs that collide with a victim's bucket under the old public
        hash (multiply-shift by 0x9e3779b97f4a7c15): the MAC table's hash is keyed now, and
        another port's fresh entry is never evicted anyway (the MacTable group attacks a
        one-bucket table, where every MAC collides). Unicast to a is not flooded to c."""
        K = 0x9e3779b97f4a7c15
        buckets = 1 << 16  # SwitchConfig::fdb_buckets default

        def bucket(m):
            return ((m * K) % (1 << 64) >> 40) & (buckets - 1)
        victim = bucket(int.from_bytes(MAC_A, "big"))
        rnd = random.Random(5)
        coll = []
        while len(coll) < 16:
            m = (rnd.getrandbits(48) & ~(1 << 40)) | (2 << 40)  # unicast, locally administered
            if bucket(m) == victim:
                coll.append(m.to_bytes(6, "big"))
        g = self.h.guest("c")
        g.rx.post()
        for m in coll:
            g.tx.send_frame(frame(m, m, b"evict"))
        self.assertTrue(g.tx.wait_done(3))
        self.h.b.tx.send_frame(frame(MAC_A, MAC_B, b"SECRET for a"))
        time.sleep(0.3)
        leaked = [f for f in g.rx.take() if b"SECRET" in f]
        self.assertEqual(leaked, [], "unicast for a was flooded to the attacker")

    @staticmethod
    def sparse_fd(size):
        fd = os.memfd_create("vhu-sparse", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        return fd

    def test_12_used_ring_in_odd_places(self):
        """The used ring on top of the descriptor table (legal addresses, hostile layout), and
        ending on the last byte of the region: the switch writes only there."""
        g = self.h.guest("c")
        m = g.mem
        addr = struct.pack("<IIQQQQ", TX, 0, m.uva(g.tx.desc), m.uva(g.tx.desc), m.uva(g.tx.avail), 0)
        self.assertEqual(g.request(SET_VRING_ADDR, addr), 0)
        self.assertTrue(self.h.ports()["c"]["vrings"][TX]["ready"])
        before = self.h.stats()
        for i in range(20):
            buf = g.tx.buf_of[i]
            m.write(buf, b"\0" * HDR_LEN + frame(MAC_C, MAC_C, b"x"))
            g.tx.set_desc(i, buf, HDR_LEN + 64)
            g.tx.put_avail(i)
        time.sleep(0.3)
        self.assertGreater(Harness.delta(before, self.h.stats(), "c", "rx_packets"), 0)


# =========================================================================================
# Scenarios: the MAC table under attack, in a table of one bucket (8 entries) where every
# MAC collides whatever the hash key: no port evicts another port's fresh entry, one port
# cannot keep a bucket against a newcomer, and a port's share of the table is capped.
# =========================================================================================
class MacTable(HostileCase):
    PORTS = ("a", "b", "c", "d")
    SWITCH_ARGS = ("--mac-table-buckets", "1", "--mac-limit", "6")

    def fdb(self):
        return {e["mac"]: e["port"] for e in self.h.ctl("fdb")}

    def assertNotLeaked(self, g, dmac, what):
        self.h.b.tx.send_frame(frame(dmac, MAC_B, b"SECRET " + what))
        self.assertTrue(self.h.b.tx.wait_done(3))
        time.sleep(0.3)
        leaked = [f for f in g.rx.take() if b"SECRET" in f]
        self.assertEqual(leaked, [], "unicast for %s was flooded to the attacker" % what.decode())

    def test_01_flood_does_not_evict_fresh_entries(self):
        """c sends 40 frames from 40 source MACs into the full bucket: a and b (seen within
        the last seconds) keep their entries; c churns its own; unicast to a stays unicast."""
        self.h.check_healthy()  # a and b seen now
        g = self.h.guest("c")
        g.rx.post()
        rnd = random.Random(7)
        for _ in range(40):
            m = ((rnd.getrandbits(48) & ~(1 << 40)) | (2 << 40)).to_bytes(6, "big")
            g.tx.send_frame(frame(m, m, b"evict"))
            self.assertTrue(g.tx.wait_done(3))
        t = self.fdb()
        self.assertEqual(t.get(mac_str(MAC_A)), "a", t)
        self.assertEqual(t.get(mac_str(MAC_B)), "b", t)
        self.assertLessEqual(sum(1 for p in t.values() if p == "c"), 6, t)
        self.assertNotLeaked(g, MAC_A, b"a")

    def test_02_full_bucket_yields_to_a_newcomer(self):
        """c fills every free entry of the bucket; d then appears: it is learned (c holds more
        than half the bucket, so c's oldest entry makes room), and unicast to d reaches only d."""
        self.h.check_healthy()
        g = self.h.guest("c")
        g.rx.post()
        for i in range(10):
            m = bytes([2, 0, 0, 0, 0xc0, i])
            g.tx.send_frame(frame(m, m, b"fill"))
            self.assertTrue(g.tx.wait_done(3))
        d = self.h.guest("d")
        d.rx.post()
        self.h.learn(d, MAC_D)
        t = self.fdb()
        self.assertEqual(t.get(mac_str(MAC_D)), "d", t)
        self.assertEqual(t.get(mac_str(MAC_A)), "a", t)
        self.assertNotLeaked(g, MAC_D, b"d")


# =========================================================================================
# Scenarios: notification fds the front-end makes block (the watchdog and the hold-down)
# =========================================================================================
class Notify(HostileCase):
    PORTS = ("a", "b", "c", "d", "e", "f")

    def block_and_measure(self, g, trigger, what):
        """Runs `trigger` (which makes a PMD write to g's call fd block), then measures how
        long the healthy pair is stalled and checks the switch closes g's connection."""
        t0 = time.monotonic()
        trigger()
        self.assertClosed(g, 8, "whose call fd blocked the datapath (%s)" % what)
        self.h.check_healthy(timeout=3)
        stall = time.monotonic() - t0
        _log("%s: connection closed and healthy pair forwarding %.2f s after the block" % (what, stall))
        # The watchdog acts within two control ticks (2 s); the rest is the test's own
        # polling and, on a loaded 2-CPU machine, scheduling (7.2 s seen under load 19).
        # Without the watchdog the stall never ends.
        self.assertLess(stall, 10.0)
        # The port is held down: a new connection is closed at once.
        again = self.h.connect(g.path.rsplit("/", 1)[1].split(".")[0])
        self.assertClosed(again, 3, "on a held-down port")

    def test_01_call_counter_full_nonblocking(self):
        """The call eventfd's counter at its maximum, left non-blocking: writes fail with
        EAGAIN, delivery goes on, the connection stays."""
        g = self.h.guest("c")
        g.rx.post()
        self.h.learn(g, MAC_C)
        os.eventfd_write(g.call[RX], 0xfffffffffffffffe)
        self.assertEqual(self.h.exchange(self.h.a, MAC_A, g, MAC_C, 16), 16)
        self.assertFalse(g.closed_by_peer(0.2))

    def test_01b_call_fds_of_other_kinds(self):
        """Call fds that are a pipe with no reader (EPIPE; SIGPIPE must not kill the switch),
        /dev/null, a regular file: delivery goes on; nothing blocks, nothing dies."""
        for kind in ("pipe", "devnull", "memfd"):
            g = self.h.guest("c")
            g.rx.post()
            self.h.learn(g, MAC_C)
            fd = fresh_fd(kind)
            g.owned_fds.append(fd)
            self.assertEqual(g.vring_fd(SET_VRING_CALL, RX, fd), 0, kind)
            self.assertEqual(g.vring_fd(SET_VRING_CALL, TX, fd), 0, kind)
            self.assertEqual(self.h.exchange(self.h.a, MAC_A, g, MAC_C, 16), 16, kind)
            self.assertEqual(self.h.exchange(g, MAC_C, self.h.b, MAC_B, 16), 16, kind)
            self.assertFalse(g.closed_by_peer(0.1))
            g.close()
            self.h.wait_ports_settled()

    def test_02_call_pipe_never_read(self):
        """The call fd is a pipe nobody reads, made blocking again after SET_VRING_CALL (the
        front-end shares the file description): the PMD's write blocks when it fills."""
        import fcntl
        g = self.h.guest("d")
        self.h.learn(g, MAC_D)
        r, w = os.pipe()
        fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ: one page, 512 notifications
        g.owned_fds += [r, w]
        self.assertEqual(g.vring_fd(SET_VRING_CALL, RX, w), 0)
        os.set_blocking(w, True)
        g.rx.post()

        def trigger():
            # One write per burst delivered to d; frames may share a burst, so send until
            # the switch stops taking them (the pipe is full and the PMD blocked).
            deadline = time.monotonic() + 10
            i = 0
            while time.monotonic() < deadline:
                if not self.h.b.tx.send_frame(frame(MAC_D, MAC_B, b"fill%d" % i), timeout=0.2):
                    break
                g.rx.take()
                i += 1
        self.block_and_measure(g, trigger, "pipe")

    def test_03_call_eventfd_saturated_blocking(self):
        """The call eventfd made blocking and its counter filled: the next write blocks."""
        g = self.h.guest("e")
        g.rx.post()
        os.set_blocking(g.call[RX], True)
        os.eventfd_write(g.call[RX], 0xfffffffffffffffe)
        self.block_and_measure(g, lambda: self.h.a.tx.send_frame(frame(BCAST, MAC_A, b"wake")),
                               "eventfd, receive queue")

    def test_04_tx_call_eventfd_saturated_blocking(self):
        """The same on the transmit queue's call fd: the front-end's own transmit blocks."""
        g = self.h.guest("f")
        os.set_blocking(g.call[TX], True)
        os.eventfd_write(g.call[TX], 0xfffffffffffffffe)
        self.block_and_measure(g, lambda: g.tx.send_frame(frame(MAC_F, MAC_F, b"x")),
                               "eventfd, transmit queue")


MAC_F = mac("02:00:00:00:00:0f")


class Shutdown(HostileCase):
    """SIGTERM while a front-end keeps a PMD thread blocked: the switch still exits (status
    0, no sanitizer report) instead of waiting forever for the thread to join."""
    PORTS = ("a", "b", "c")

    def tearDown(self):
        found, text = self.h.sanitizer_report()
        self.assertFalse(found, "sanitizer report in the switch output:\n" + text[-6000:])

    def test_01_sigterm_while_a_pmd_is_blocked(self):
        g = self.h.guest("c")
        g.rx.post()
        os.set_blocking(g.call[RX], True)
        os.eventfd_write(g.call[RX], 0xfffffffffffffffe)
        self.h.a.tx.send_frame(frame(BCAST, MAC_A, b"wake"))
        time.sleep(0.2)
        t0 = time.monotonic()
        rc = self.h.tb.switch.stop(signal.SIGTERM, timeout=8)
        _log("switch exited with %s %.2f s after SIGTERM" % (rc, time.monotonic() - t0))
        self.assertEqual(rc, 0)
        self.assertLess(time.monotonic() - t0, 5)


# =========================================================================================
# Scenarios under real traffic: DPDK testpmd floods through the switch while a hostile
# front-end misbehaves (the testpmd pair is the healthy pair here).
# =========================================================================================
class Traffic(HostileCase):
    PORTS = ("a", "b", "c")
    HEALTHY = False

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tb = cls.h.tb
        try:
            cls.rx = tb.start_testpmd("rx", [tb.virtio_user("b")], "rxonly")
            tb.wait_connected(["b"])
            cls.tx = tb.start_testpmd("tx", [tb.virtio_user("a")], "txonly", args=["--txpkts=64"])
            tb.wait_connected(["a"])
            tb.wait_counter("b", "tx_packets", 1000, timeout=30)
            cls.h.base_fds = cls.h.base_fd_count()
            cls.h.base_maps = cls.h.guest_maps()
        except BaseException:
            cls.h.tb.close(failed=True)
            cls.h = None
            raise

    @classmethod
    def tearDownClass(cls):
        h = cls.h
        if h is None:
            return
        try:
            tb = h.tb
            tb.stop_testpmd(cls.tx)
            st = tb.wait_quiet()
            rxres = tb.stop_testpmd(cls.rx)
            vltest.log("traffic: %s" % vltest.fmt_stats(st))
            for p in ("a", "b"):
                for k in vltest.CORRUPTION_DROPS:
                    assert st[p]["drops"][k] == 0, "%s.%s = %d" % (p, k, st[p]["drops"][k])
            assert rxres["nic"][0]["RX-packets"] == st["b"]["tx_packets"], (rxres["nic"][0], st["b"])
        finally:
            super().tearDownClass()

    def check_flowing(self):
        st = self.h.stats()
        time.sleep(0.3)
        st2 = self.h.stats()
        self.assertGreater(st2["b"]["tx_packets"], st["b"]["tx_packets"], "traffic a -> b stopped")

    def tearDown(self):
        self.check_flowing()
        super().tearDown()

    def drain_loop(self, g, stop, scribble=False):
        import random
        rnd = random.Random(7)
        while not stop.is_set():
            try:
                g.rx.take()
                if scribble:
                    j = rnd.randrange(g.rx.num)
                    g.rx.set_desc(j, rnd.randrange(g.mem.regions[0].gpa - 4096, g.mem.regions[0].gpa + g.mem.regions[0].size + 4096),
                                  rnd.choice([0, 1, 12, 100, 2048, 0xffffffff]), rnd.randrange(8), rnd.randrange(300))
            except (ValueError, AttributeError, TypeError):
                return
            time.sleep(0.001)

    def test_01_rx_ring_scribbled_under_flood(self):
        """The flood reaches c's receive ring while c rewrites it at random, re-offers
        buffers and restarts the ring (SET_VRING_BASE/KICK) whenever it broke."""
        for _ in range(3):
            g = self.h.guest("c")
            g.rx.post()
            stop = threading.Event()
            th = threading.Thread(target=self.drain_loop, args=(g, stop, True), daemon=True)
            th.start()
            time.sleep(0.7)
            stop.set()
            th.join()
            self.check_flowing()
            g.close()

    def test_02_mem_table_swapped_under_flood(self):
        """SET_MEM_TABLE again and again while the flood fills c's receive ring."""
        g = self.h.guest("c")
        g.rx.post()
        stop = threading.Event()
        th = threading.Thread(target=self.drain_loop, args=(g, stop), daemon=True)
        th.start()
        try:
            for _ in range(40):
                self.assertEqual(g.set_mem_table(g.mem.regions), 0)
        finally:
            stop.set()
            th.join()
        self.assertGreater(self.h.stats()["c"]["tx_packets"], 0)

    def test_03_rings_stopped_and_restarted_under_flood(self):
        """GET_VRING_BASE / SET_VRING_BASE / SET_VRING_KICK cycles under the flood."""
        g = self.h.guest("c")
        g.rx.post()
        for _ in range(20):
            base = struct.unpack("<II", g.request(GET_VRING_BASE, struct.pack("<II", RX, 0), reply=True))[1]
            g.rx.take()
            self.assertEqual(g.state(SET_VRING_BASE, RX, base), 0)
            self.assertEqual(g.vring_fd(SET_VRING_KICK, RX, g.kick[RX]), 0)
            time.sleep(0.01)

    def test_04_reconnect_storm_under_flood(self):
        """c connects, negotiates, takes some of the flood and leaves, 25 times."""
        for _ in range(25):
            g = Guest(self.h.tb.sock("c")).negotiate()
            g.rx.post()
            time.sleep(0.01)
            g.close()
        self.h.wait_ports_settled()


# =========================================================================================
# Scenarios: live migration messages (SET_LOG_BASE, LOG_ALL, SEND_RARP)
# =========================================================================================
PROTO_LOG_SHMFD = 1 << 1
VHOST_F_LOG_ALL = 1 << 26


def log_fd(size):
    fd = os.memfd_create("vhu-log", os.MFD_CLOEXEC)
    os.ftruncate(fd, size)
    return fd


VRING_F_LOG = 1  # VHOST_VRING_F_LOG: SET_VRING_ADDR's log_guest_addr is valid
LOG_PAGE = 4096


def log_bytes_for(end):
    """Bytes of dirty log covering guest-physical [0, end) (one bit per 4 KiB page)."""
    return ((end + LOG_PAGE - 1) // LOG_PAGE + 7) // 8


class DirtyLogFd:
    """A dirty log as QEMU makes one: a memfd of `size` bytes at `offset`, with `slack`
    bytes of guard after it whose contents must stay untouched."""

    def __init__(self, size, offset=0, slack=4096, file_size=None):
        self.size, self.offset = size, offset
        self.fd = os.memfd_create("vhu-log", os.MFD_CLOEXEC | getattr(os, "MFD_ALLOW_SEALING", 2))
        self.file_size = file_size if file_size is not None else offset + size + slack
        os.ftruncate(self.fd, self.file_size)
        self.mm = mmap.mmap(self.fd, self.file_size) if self.file_size else None

    def payload(self, size=None, offset=None):
        return struct.pack("<QQ", self.size if size is None else size,
                           self.offset if offset is None else offset)

    def bit(self, gpa):
        page = gpa // LOG_PAGE
        return bool(self.mm[self.offset + page // 8] >> (page % 8) & 1)

    def outside_untouched(self):
        """True if no byte before the log or after its end was written."""
        return (not any(self.mm[:self.offset]) and
                not any(self.mm[self.offset + self.size:self.file_size]))

    def clear(self):
        self.mm[self.offset:self.offset + self.size] = bytes(self.size)

    def close(self):
        if self.mm is not None:
            self.mm.close()
            self.mm = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Migration(HostileCase):
    PORTS = ("a", "b", "c")
    PROTO = DEFAULT_PROTOCOL | PROTO_LOG_SHMFD | PROTO_RARP
    # Memory.simple(): 4 MiB at 0x40000000, so the log must cover 0x40400000 bytes of
    # guest-physical space: 0x40400 pages, 0x8080 bytes.
    LOG_BYTES = 0x8080

    def test_01_set_log_base_hostile(self):
        """SET_LOG_BASE with size 0, offset past the fd, offset + size overflowing 64 bits, an
        fd smaller than the log, a log too small for the memory table, a pipe, /dev/null, an
        eventfd, no fd, two fds, a short payload: refused each (error reply or closed), no fd
        kept; then a good log is acked and, with LOG_ALL, frames delivered to the port mark
        pages in it (ctl stats migration.dirty_pages_logged)."""
        g = self.h.guest("c", protocol=self.PROTO)
        n = self.LOG_BYTES
        cases = [
            ("size 0", 0, 0, ["memfd"]),
            ("offset past the fd", 64, n + 4096, ["memfd"]),
            ("offset + size overflows", n, (1 << 64) - 64, ["memfd"]),
            ("fd smaller than the log", n, 0, ["small"]),
            ("log too small for the memory table", n - 1, 0, ["memfd"]),
            ("size above the cap", 1 << 40, 0, ["memfd"]),
            ("a pipe", n, 0, ["pipe"]),
            ("/dev/null", n, 0, ["devnull"]),
            ("an eventfd", n, 0, ["eventfd"]),
            ("no fd", n, 0, []),
            ("two fds", n, 0, ["memfd", "memfd"]),
        ]
        for what, size, off, kinds in cases:
            fds = [log_fd(n + 8192) if k == "memfd" else fresh_fd("memfd" if k == "small" else k)
                   for k in kinds]
            out = g.refused(SET_LOG_BASE, struct.pack("<QQ", size, off), fds)
            for fd in fds:
                os.close(fd)
            self.assertRefused(out, what)
            if out == "closed":
                g = self.h.guest("c", protocol=self.PROTO)
        fd = log_fd(n + 8192)
        self.assertRefused(g.refused(SET_LOG_BASE, struct.pack("<Q", n), [fd]), "8-byte payload")
        if g.closed_by_peer(0.2):
            g = self.h.guest("c", protocol=self.PROTO)
        # A good log (QEMU's way: no NEED_REPLY; the reply comes anyway with LOG_SHMFD).
        g.send(SET_LOG_BASE, struct.pack("<QQ", n, 4096), [fd])
        r, flags, p = g.recv()
        self.assertEqual((r, len(p), struct.unpack("<Q", p)[0]), (SET_LOG_BASE, 8, 0))
        self.assertEqual(g.u64(SET_FEATURES, g.features | VHOST_F_LOG_ALL), 0)
        self.assertTrue(self.h.stats()["c"]["migration"]["logging"])
        g.rx.post()
        self.h.learn(g, MAC_C)
        st0 = self.h.stats()["c"]
        before = st0["migration"]["dirty_pages_logged"]
        for i in range(8):
            self.assertTrue(self.h.a.tx.send_frame(frame(MAC_C, MAC_A, b"logged %d" % i)))
        self.h.wait_stats(lambda st: st["c"]["tx_packets"] >= st0["tx_packets"] + 8,
                          what="8 frames to c")
        bm = os.pread(fd, n, 4096)
        os.close(fd)
        marked = sum(bin(b).count("1") for b in bm)
        st = self.h.stats()["c"]["migration"]
        self.assertGreater(marked, 0, "no bit set in the log")
        self.assertGreater(st["dirty_pages_logged"], before, st)
        self.assertEqual(st["dirty_log_out_of_range"], 0, st)
        self.assertIn("LOG_ALL", self.h.stats()["c"]["feature_names"])

    def test_02_send_rarp_learns_the_mac_on_the_port(self):
        """SEND_RARP (a migrated guest's MAC) makes the bridge learn that MAC on the port, and
        unicast to it goes there; a multicast MAC is not learned."""
        g = self.h.guest("c", protocol=self.PROTO)
        g.rx.post()
        m = mac("02:00:00:00:ab:01")
        self.assertEqual(g.request(SEND_RARP, m + b"\0\0"), 0)
        mc = mac("03:00:00:00:ab:02")
        self.assertEqual(g.request(SEND_RARP, mc + b"\0\0"), 0)
        deadline = time.monotonic() + 3
        while True:
            fdb = {e["mac"]: e["port"] for e in self.h.ctl("fdb")}
            if fdb.get(mac_str(m)) == "c" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(fdb.get(mac_str(m)), "c", fdb)
        self.assertNotIn(mac_str(mc), fdb)
        tx0 = self.h.stats()["c"]["tx_packets"]
        self.assertTrue(self.h.a.tx.send_frame(frame(m, MAC_A, b"to the migrated guest")))
        self.h.wait_stats(lambda st: st["c"]["tx_packets"] >= tx0 + 1, what="the frame to c")

    def mig_guest(self, port="c", **kw):
        g = self.h.guest(port, protocol=self.PROTO, features=DEFAULT_FEATURES | VHOST_F_LOG_ALL,
                         **kw)
        # negotiate() masked LOG_ALL in when offered; migration starts with it off.
        g.features &= ~VHOST_F_LOG_ALL
        self.assertEqual(g.u64(SET_FEATURES, g.features), 0)
        self.assertTrue(g.protocol & PROTO_LOG_SHMFD, "LOG_SHMFD not offered")
        return g

    def set_log(self, g, log, size=None, offset=None):
        """SET_LOG_BASE as QEMU sends it (no NEED_REPLY; a u64 reply comes anyway)."""
        p = g.request(SET_LOG_BASE, log.payload(size, offset), [log.fd], reply=True)
        self.assertEqual(p, struct.pack("<Q", 0))

    def log_all(self, g, on):
        f = g.features | VHOST_F_LOG_ALL if on else g.features & ~VHOST_F_LOG_ALL
        self.assertEqual(g.u64(SET_FEATURES, f), 0)

    def mem_end(self, g):
        return max(r.gpa + r.size for r in g.mem.regions)

    def test_03_log_base_more_hostile(self):
        """SET_LOG_BASE beyond test_01: sizes 2^63 and 2^64-1, offset 2^63, offset + size
        one byte past the fd, a directory, /dev/zero, a read-only fd of the memfd, a memfd
        sealed against writes, payloads of 0-4096 bytes with the fd, SET_LOG_FD: an error
        reply each, nothing mapped, no fd kept; the connection goes on working and takes a
        good log afterwards; without LOG_SHMFD negotiated, refused."""
        g = self.mig_guest()
        need = log_bytes_for(self.mem_end(g))
        good = DirtyLogFd(need)
        try:
            ro = os.open("/proc/self/fd/%d" % good.fd, os.O_RDONLY | os.O_CLOEXEC)
            sealed = DirtyLogFd(need)
            sealed.mm.close()
            sealed.mm = None
            fcntl.fcntl(sealed.fd, 1033, 0x0008)  # F_ADD_SEALS, F_SEAL_WRITE
            dirfd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            zero = os.open("/dev/zero", os.O_RDWR | os.O_CLOEXEC)
            extra = [ro, dirfd, zero]
            cases = [
                ("size 2^63", good.payload(1 << 63, 0), [good.fd]),
                ("size 2^64-1", good.payload((1 << 64) - 1, 0), [good.fd]),
                ("size above the 256 MiB cap", good.payload((256 << 20) + 1, 0), [good.fd]),
                ("offset + size past the end by one",
                 good.payload(need, good.file_size - need + 1), [good.fd]),
                ("offset + size overflowing", good.payload(need, (1 << 64) - 4096), [good.fd]),
                ("offset 2^63", good.payload(need, 1 << 63), [good.fd]),
                ("log one byte too small for guest memory", good.payload(need - 1, 0), [good.fd]),
                ("a directory", good.payload(), [dirfd]),
                ("/dev/zero", good.payload(), [zero]),
                ("a read-only fd of the memfd", good.payload(), [ro]),
                ("a memfd sealed against writes", good.payload(), [sealed.fd]),
            ]
            for what, payload, fds in cases:
                self.assertRefused(g.refused(SET_LOG_BASE, payload, fds), what)
            # Wrong payload sizes, with and without the fd; SET_LOG_FD (not served).
            for size in (0, 8, 15, 17, 24, 4096):
                self.assertRefused(g.refused(SET_LOG_BASE, bytes(size), [good.fd]),
                                   "payload of %d bytes" % size)
            self.assertRefused(g.refused(SET_LOG_FD, bytes(8), [good.fd]), "SET_LOG_FD")
            self.assertEqual(self.h.guest_maps()[0], self.h.base_maps[0] + 1,
                             "a refused log was mapped")
            self.assertFalse(self.h.stats()["c"]["migration"]["logging"])
            # The connection still works, and a good log is taken after all that.
            self.h.learn(g, MAC_C)
            self.assertEqual(self.h.exchange(g, MAC_C, self.h.b, MAC_B), 8)
            self.set_log(g, good)
            self.assertEqual(self.h.guest_maps()[0], self.h.base_maps[0] + 2)
            # Without LOG_SHMFD negotiated: refused (a second connection).
            g.close()
            self.h.wait_ports_settled()
            g2 = self.h.guest("c")
            self.assertRefused(g2.refused(SET_LOG_BASE, good.payload(), [good.fd]),
                               "SET_LOG_BASE without LOG_SHMFD")
            sealed.close()
            for fd in extra:
                os.close(fd)
        finally:
            good.close()

    def test_04_log_before_memory_and_memory_growing(self):
        """A log sent before SET_MEM_TABLE (nothing to check it against), then a memory
        table reaching far past what it covers, a table growing while logging, a log at an
        odd offset: pages past the log are counted, never written; the bytes of the fd
        around the log stay untouched; pages inside it are marked."""
        g = self.h.connect("c")
        off = 100  # not page-aligned: the switch maps from the page holding it
        log = DirtyLogFd(log_bytes_for(0x40400000), offset=off, slack=8192)
        try:
            offered = struct.unpack("<Q", g.request(GET_FEATURES, reply=True))[0]
            self.assertTrue(offered & VHOST_F_LOG_ALL)
            g.features = DEFAULT_FEATURES & offered
            g.send(SET_PROTOCOL_FEATURES, struct.pack("<Q", DEFAULT_PROTOCOL | PROTO_LOG_SHMFD))
            g.protocol = DEFAULT_PROTOCOL | PROTO_LOG_SHMFD
            self.set_log(g, log)  # before SET_FEATURES and SET_MEM_TABLE
            self.set_log(g, log)  # twice
            g.protocol = 0
            g.negotiate(features=DEFAULT_FEATURES, protocol=DEFAULT_PROTOCOL | PROTO_LOG_SHMFD)
            g.rx.post()
            self.h.learn(g, MAC_C)
            self.log_all(g, True)
            self.assertTrue(self.h.stats()["c"]["migration"]["logging"])
            self.assertEqual(self.h.exchange(self.h.a, MAC_A, g, MAC_C, 8), 8)
            self.assertEqual(self.h.exchange(g, MAC_C, self.h.b, MAC_B, 8), 8)
            for q in (g.rx, g.tx):
                self.assertTrue(log.bit(q.used), "used ring page not marked")
            self.assertTrue(log.bit(g.rx.buf_of[0]), "receive buffer page not marked")
            self.assertTrue(log.outside_untouched(), "bytes outside the log written")
            # Memory grows: a second region at 64 GiB (the log covers 1 GiB + 4 MiB), the
            # receive buffers moved there. Frames still arrive; their pages are counted.
            hi = Region(1 << 20, 64 << 30, 0x7f3400000000)
            g.mem.regions.append(hi)
            g.mem._next[id(hi)] = 0
            self.assertEqual(g.set_mem_table(g.mem.regions), 0)
            g.rx = RxQueue(g.mem, 64, region=1)  # ring and buffers up there
            g.start_vring(RX, g.rx)
            g.rx.post()
            before = self.h.stats()["c"]["migration"]
            self.assertEqual(self.h.exchange(self.h.a, MAC_A, g, MAC_C, 8), 8)
            after = self.h.stats()["c"]["migration"]
            self.assertGreater(after["dirty_log_out_of_range"], before["dirty_log_out_of_range"])
            self.assertTrue(log.outside_untouched(), "bytes outside the log written")
            # Off again: nothing more is marked.
            self.log_all(g, False)
            log.clear()
            self.assertEqual(self.h.exchange(g, MAC_C, self.h.b, MAC_B, 8), 8)
            self.assertFalse(any(log.mm[:]), "marked with LOG_ALL off")
        finally:
            g.close()
            log.close()

    def test_05_vring_log_addresses(self):
        """SET_VRING_ADDR with VHOST_VRING_F_LOG and log_guest_addr in no region, across the
        end of memory, wrapping 2^64: the ring does not start (why_not says so); with a
        valid one the used ring's page there is marked; odd GET/SET_VRING_BASE while
        logging."""
        g = self.mig_guest()
        log = DirtyLogFd(log_bytes_for(self.mem_end(g)))
        try:
            self.set_log(g, log)
            self.log_all(g, True)
            self.h.learn(g, MAC_C)
            end = self.mem_end(g)
            for what, la in (("in no region", 0x1000), ("across the end", end - 8),
                             ("wrapping", (1 << 64) - 8), ("at the end", end)):
                a = bytearray(g.tx.addr_msg(TX))
                struct.pack_into("<I", a, 4, VRING_F_LOG)
                struct.pack_into("<Q", a, 32, la)
                self.assertIsNotNone(g.request(SET_VRING_ADDR, bytes(a)))  # ack or nack
                v = self.h.ports()["c"]["vrings"][TX]
                self.assertFalse(v["ready"], "ring started with a log address %s" % what)
                self.assertIn("log", v["why_not"])
            # Unknown flags refused.
            a = bytearray(g.tx.addr_msg(TX))
            struct.pack_into("<I", a, 4, 0xfffffffe)
            self.assertRefused(g.refused(SET_VRING_ADDR, bytes(a)), "unknown vring address flags")
            # A valid log address that is not the used ring (the front-end's choice): that
            # page is marked, the ring works.
            other = g.mem.alloc(4096, 4096)
            a = bytearray(g.tx.addr_msg(TX))
            struct.pack_into("<I", a, 4, VRING_F_LOG)
            struct.pack_into("<Q", a, 32, other)
            self.assertEqual(g.request(SET_VRING_ADDR, bytes(a)), 0)
            self.assertTrue(self.h.ports()["c"]["vrings"][TX]["ready"])
            log.clear()
            self.assertEqual(self.h.exchange(g, MAC_C, self.h.b, MAC_B, 8), 8)
            self.assertTrue(log.bit(other), "the log_guest_addr page not marked")
            # GET_VRING_BASE / SET_VRING_BASE with odd values while logging.
            for base in (0xffff, 0x8000, 0x1_0000, 0xffffffff, g.tx.avail_idx + 300):
                g.request(GET_VRING_BASE, struct.pack("<II", TX, 0), reply=True)
                r = g.refused(SET_VRING_BASE, struct.pack("<II", TX, base))
                self.assertIn(r, ("nack", "accepted", "closed"))
                if r == "closed":
                    break
                g.vring_fd(SET_VRING_KICK, TX, g.kick[TX])
                g.tx.send_frame(frame(MAC_B, MAC_C, b"odd base"), wait=False)
                time.sleep(0.02)
            self.assertTrue(log.outside_untouched())
            # SEND_RARP with garbage: 6 bytes of a multicast MAC, zeros, wrong sizes.
            for p in (b"\xff" * 8, bytes(8), MAC_A + b"\0\0"):
                self.assertIn(g.refused(SEND_RARP, p), ("nack", "accepted", "closed"))
            for size in (0, 6, 16):
                self.assertRefused(g.refused(SEND_RARP, bytes(size)), "SEND_RARP of %d bytes" % size)
        finally:
            g.close()
            log.close()

    def test_06_logging_toggled_under_traffic(self):
        """While frames flow both ways through c: LOG_ALL toggled on and off, the log
        replaced by new memfds, the used ring's log address set again. Every frame c sends
        arrives once, intact and in order; frames to c arrive intact and in order, or are
        counted as no_destination (each message pauses the port: frames for it are dropped
        while it is reconfigured); old logs are unmapped; the bytes around each log stay
        untouched; pages are logged and none out of range."""
        g = self.mig_guest()
        g.rx.post()
        self.h.learn(g, MAC_C)
        need = log_bytes_for(self.mem_end(g))
        logs = []
        stop = threading.Event()
        errors = []

        def churn():
            try:
                k = 0
                while not stop.is_set():
                    k += 1
                    if k % 3 == 0:
                        log = DirtyLogFd(need, offset=4096 * (k % 4) + 8 * k % 512)
                        logs.append(log)
                        self.set_log(g, log)
                    self.log_all(g, k % 2 == 0)
                    if k % 5 == 0:
                        q, idx = (g.rx, RX) if k % 2 else (g.tx, TX)
                        a = bytearray(q.addr_msg(idx))
                        struct.pack_into("<I", a, 4, VRING_F_LOG)
                        struct.pack_into("<Q", a, 32, q.used)
                        self.assertEqual(g.request(SET_VRING_ADDR, bytes(a)), 0)
                    time.sleep(0.002)  # QEMU sends a handful; this is thousands a second
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        th = threading.Thread(target=churn, daemon=True)
        to_c, at_c, to_b, at_b = [], [], [], []

        def collect():
            nonlocal at_c, at_b
            at_c += [f for f in g.rx.take() if f[14:18] == b"MIGR"]
            at_b += [f for f in self.h.b.rx.take() if f[14:18] == b"BACK"]
        th.start()
        try:
            t_end = time.monotonic() + 2.5
            i = 0
            while time.monotonic() < t_end:
                fr = frame(MAC_C, MAC_A, b"MIGR" + struct.pack(">I", i))
                if self.h.a.tx.send_frame(fr, timeout=1):
                    to_c.append(fr)
                fr = frame(MAC_B, MAC_C, b"BACK" + struct.pack(">I", i))
                if g.tx.send_frame(fr, timeout=1):
                    to_b.append(fr)
                collect()
                i += 1
        finally:
            stop.set()
            th.join()
        self.assertFalse(errors, errors)
        self.assertTrue(g.tx.wait_done(3) and self.h.a.tx.wait_done(3))
        deadline = time.monotonic() + 3
        while len(at_b) < len(to_b) and time.monotonic() < deadline:
            collect()
            time.sleep(0.005)
        collect()
        self.assertEqual(len(at_b), len(to_b), "frames from c lost or duplicated")
        self.assertTrue(at_b == to_b, "frames from c reordered or corrupted")
        st = self.h.stats()
        dropped = Harness.delta(self.before, st, "a", "no_destination")
        self.assertEqual(len(at_c) + dropped, len(to_c), "frames to c unaccounted for: %s" %
                         vltest.fmt_stats(st))
        it = iter(to_c)
        self.assertTrue(all(f in it for f in at_c), "frames to c reordered, duplicated or corrupted")
        self.assertGreater(len(at_c), 0, "no frame reached c")
        _log("to c: %d sent, %d arrived, %d dropped while paused; from c: %d" %
             (len(to_c), len(at_c), dropped, len(to_b)))
        self.assertGreaterEqual(len(logs), 3)
        m, b = st["c"]["migration"], self.before["c"]["migration"]
        self.assertGreater(m["dirty_pages_logged"], b["dirty_pages_logged"])
        self.assertEqual(m["dirty_log_out_of_range"], b["dirty_log_out_of_range"])
        # Only the last log (and the guest memory) still mapped.
        self.assertEqual(self.h.guest_maps()[0], self.h.base_maps[0] + 2)
        for log in logs:
            self.assertTrue(log.outside_untouched(), "bytes outside a log written")
            log.close()

    def test_07_log_truncated_under_the_switch(self):
        """The front-end shrinks the log's memfd after SET_LOG_BASE: the switch's next mark
        would raise SIGBUS. The switch survives and closes that connection."""
        for direction in ("rx", "tx"):
            g = self.mig_guest()
            g.rx.post()
            self.h.learn(g, MAC_C)
            log = DirtyLogFd(log_bytes_for(self.mem_end(g)))
            self.set_log(g, log)
            self.log_all(g, True)
            log.mm.close()
            log.mm = None
            os.ftruncate(log.fd, 0)
            if direction == "rx":
                self.h.a.tx.send_frame(frame(MAC_C, MAC_A, b"marks a truncated log"))
            else:
                g.tx.send_frame(frame(MAC_B, MAC_C, b"marks a truncated log"), wait=False)
            self.assertClosed(g, 5, "whose dirty log was truncated (%s)" % direction)
            self.assertTrue(self.h.alive(), "the switch died:\n" + self.h.tb.switch.output()[-3000:])
            log.close()
            g.close()
            self.h.wait_ports_settled()

    def test_08_log_replaced_while_rings_are_broken(self):
        """Both rings broken by the front-end (avail index jumps) while logging, then the log
        replaced and LOG_ALL toggled: a broken ring keeps its queue (and the old log's
        address) until restarted, so the old log must never be written again; once the
        rings are restarted, frames flow and the new log is marked."""
        g = self.mig_guest()
        self.h.learn(g, MAC_C)
        need = log_bytes_for(self.mem_end(g))
        old, new = DirtyLogFd(need), DirtyLogFd(need)
        try:
            self.set_log(g, old)
            self.log_all(g, True)
            before = self.h.stats()
            g.tx.publish((g.tx.avail_idx + 257) & 0xffff)
            g.rx.post()
            g.rx.publish((g.rx.avail_idx + 1000) & 0xffff)
            self.h.a.tx.send_frame(frame(MAC_C, MAC_A, b"to a broken ring"))
            self.h.wait_stats(lambda s: Harness.delta(before, s, "c", "ring_broken") == 2, 3,
                              "both rings broken")
            self.set_log(g, new)  # the old log is unmapped now
            old.clear()
            for on in (False, True, False, True):
                self.log_all(g, on)
            for i in range(4):
                self.h.a.tx.send_frame(frame(MAC_C, MAC_A, b"still broken %d" % i))
            self.assertTrue(self.h.a.tx.wait_done(3))
            time.sleep(0.1)
            self.assertFalse(any(old.mm[:]), "the replaced log was written")
            self.assertTrue(old.outside_untouched() and new.outside_untouched())
            # Restart both rings where they are: traffic flows, the new log is marked.
            g.tx.publish()
            g.rx.publish()
            for i, q in ((TX, g.tx), (RX, g.rx)):
                base = struct.unpack("<II", g.request(GET_VRING_BASE, struct.pack("<II", i, 0),
                                                      reply=True))[1]
                self.assertEqual(g.state(SET_VRING_BASE, i, base), 0)
                self.assertEqual(g.vring_fd(SET_VRING_KICK, i, g.kick[i]), 0)
            g.rx.take()
            new.clear()
            self.assertEqual(self.h.exchange(self.h.a, MAC_A, g, MAC_C), 8)
            self.assertEqual(self.h.exchange(g, MAC_C, self.h.b, MAC_B), 8)
            self.assertTrue(new.bit(g.rx.used) and new.bit(g.tx.used) and new.bit(g.rx.buf_of[0]))
            self.assertFalse(any(old.mm[:]), "the replaced log was written")
        finally:
            g.close()
            old.close()
            new.close()

    def test_09_send_rarp_flood(self):
        """20000 SEND_RARPs of changing MACs (no reply asked, the way QEMU sends it): the
        switch's log does not grow with them (rate-limited), the control socket answers,
        the port stays within its MAC limit (8192) and the healthy pair's entries stay."""
        g = self.h.guest("c", protocol=self.PROTO)
        lines0 = len(self.h.tb.switch.output().splitlines())
        msgs = b"".join(struct.pack("<III", SEND_RARP, VERSION, 8) +
                        mac("02:00:%02x:%02x:%02x:01" % (i >> 16 & 255, i >> 8 & 255, i & 255)) + b"\0\0"
                        for i in range(20000))
        for k in range(0, len(msgs), 20 * 1000):
            g.raw_bytes(msgs[k:k + 20 * 1000])
        self.assertEqual(struct.unpack("<Q", g.request(GET_QUEUE_NUM, reply=True))[0] >= 1, True)
        self.assertControlResponsive()
        time.sleep(0.3)
        grown = len(self.h.tb.switch.output().splitlines()) - lines0
        self.assertLess(grown, 200, "the switch logged %d lines for a SEND_RARP flood" % grown)
        # Every SEND_RARP is learned on c, up to its MAC limit; a and b keep their entries.
        for p, m in (("a", MAC_A), ("b", MAC_B)):
            fdb = {e["mac"]: e["port"] for e in self.h.ctl("fdb", args={"argv": [p]})}
            self.assertEqual(fdb.get(mac_str(m)), p)
        n = len(self.h.ctl("fdb", timeout=20, args={"argv": ["c", "all"]}))  # slow under ASan
        self.assertLessEqual(n, 8192, "port c holds %d MACs, above its limit" % n)

    def test_10_send_rarps_back_to_back(self):
        """Two SEND_RARPs of different unicast MACs in one write: both MACs are learned on
        the port (the switch took one SEND_RARP per control-thread wake-up, so the second
        overwrote the first; test_02 failed now and then when its two SEND_RARPs arrived
        together)."""
        g = self.h.guest("c", protocol=self.PROTO)
        m1, m2 = mac("02:00:00:00:ab:11"), mac("02:00:00:00:ab:12")
        g.raw_bytes(b"".join(struct.pack("<III", SEND_RARP, VERSION, 8) + m + b"\0\0"
                             for m in (m1, m2)))
        deadline = time.monotonic() + 3
        while True:
            fdb = {e["mac"]: e["port"] for e in self.h.ctl("fdb")}
            if (fdb.get(mac_str(m1)), fdb.get(mac_str(m2))) == ("c", "c") or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual((fdb.get(mac_str(m1)), fdb.get(mac_str(m2))), ("c", "c"), fdb)


# =========================================================================================
# Scenarios: multiqueue (VIRTIO_NET_F_MQ, vrings 2q/2q+1, SET_VRING_ENABLE per ring) and
# several PMD threads (rxqs reassigned by `ctl pmd-rebalance` while ports come and go)
# =========================================================================================
VIRTIO_NET_F_MQ = 1 << 22


def flow_frame(dst, src, tag, i):
    """A frame of flow i (IPv4 ethertype; bytes 12-19 of the payload are the addresses the
    flow hash reads, dp/flow_hash.h), tagged `tag` + i."""
    body = (tag + struct.pack(">I", i)).ljust(12, b"\0") + struct.pack(">II", 0x0a000000 + i, 0x0a800000)
    return frame(dst, src, body, ethertype=0x0800)


def start_pair(g, q, num=64, enable=True, kick=True):
    """Sets up queue pair q (vrings 2q, 2q+1) of an already negotiated Guest in its memory:
    returns (RxQueue, TxQueue); each ring's call eventfd is its call_fd. kick: True an
    eventfd, None the no-fd flag (the switch must poll), False no SET_VRING_KICK (the ring
    never starts). The fds are closed with the Guest."""
    rx, tx = RxQueue(g.mem, num), TxQueue(g.mem, num)
    kicks = []
    for i, ring in ((2 * q, rx), (2 * q + 1, tx)):
        call, k = eventfd(), eventfd()
        g.owned_fds += [call, k]
        ring.call_fd = call
        Guest.check(g.state(SET_VRING_NUM, i, num), "SET_VRING_NUM %d" % i)
        Guest.check(g.state(SET_VRING_BASE, i, 0), "SET_VRING_BASE %d" % i)
        Guest.check(g.request(SET_VRING_ADDR, ring.addr_msg(i)), "SET_VRING_ADDR %d" % i)
        Guest.check(g.vring_fd(SET_VRING_CALL, i, call), "SET_VRING_CALL %d" % i)
        if kick:
            Guest.check(g.vring_fd(SET_VRING_KICK, i, k), "SET_VRING_KICK %d" % i)
            ring.kick_fd = k
        elif kick is None:  # polling: SET_VRING_KICK with the no-fd flag
            Guest.check(g.vring_fd(SET_VRING_KICK, i, None), "SET_VRING_KICK %d" % i)
        if enable:
            Guest.check(g.state(SET_VRING_ENABLE, i, 1), "SET_VRING_ENABLE %d" % i)
        kicks.append(k)
    return rx, tx


class MultiQueue(HostileCase):
    """A front-end with several queue pairs, on a switch with two PMD threads: vring
    indexes at and past 2N in every vring message, rings enabled before they exist or with
    odd values, enables toggled under traffic, MQ without PROTOCOL_F_MQ, rxqs reassigned in a
    loop while ports connect and leave. Nothing is written into a ring that is not enabled,
    no queue is entered by two threads at once, every frame is delivered or counted."""

    PMD_CORES = "0,1"
    FEATURES = DEFAULT_FEATURES | VIRTIO_NET_F_MQ

    def mq_guest(self, port="c", **kw):
        g = self.h.guest(port, features=self.FEATURES, **kw)
        self.assertTrue(g.features & VIRTIO_NET_F_MQ, "MQ not offered")
        return g

    def queues(self, port):
        return {q["queue"]: q for q in self.h.stats()[port]["queues"]}

    def assertNoConcurrentEntries(self):
        for name, p in self.h.stats().items():
            for q in p.get("queues", []):
                self.assertEqual(q["concurrent_entries"], 0, "%s queue %d entered by two "
                                 "PMD threads at once" % (name, q["queue"]))

    def test_01_vring_indexes_past_the_queues(self):
        """Every vring message with index 2N (N = GET_QUEUE_NUM), 2N+1, 255, 256, low bits
        valid with upper bits set, 2^31, 2^32-2, 2^32-1: an error reply each; GET_QUEUE_NUM
        before the features and with a payload; the port's rings are unchanged after."""
        g = self.h.connect("c")
        n = struct.unpack("<Q", g.request(GET_QUEUE_NUM, reply=True))[0]  # before anything
        self.assertGreater(n, 1)
        self.assertLessEqual(n, 8)
        g.negotiate(features=self.FEATURES)
        self.assertEqual(struct.unpack("<Q", g.request(GET_QUEUE_NUM, reply=True))[0], n)
        self.assertRefused(g.refused(GET_QUEUE_NUM, bytes(8)), "GET_QUEUE_NUM with a payload")
        bad = (2 * n, 2 * n + 1, 255, 256, 0x10000 | 2, 0x100 | 3, 1 << 31, 0xfffffffe, 0xffffffff)
        for idx in bad:
            for req, payload in (
                    (SET_VRING_NUM, struct.pack("<II", idx, 64)),
                    (SET_VRING_BASE, struct.pack("<II", idx, 0)),
                    (GET_VRING_BASE, struct.pack("<II", idx, 0)),
                    (SET_VRING_ENABLE, struct.pack("<II", idx, 1)),
                    (SET_VRING_ADDR, struct.pack("<IIQQQQ", idx, 0, g.mem.uva(g.rx.desc),
                                                 g.mem.uva(g.rx.used), g.mem.uva(g.rx.avail), 0))):
                self.assertRefused(g.refused(req, payload), "request %d, vring %#x" % (req, idx))
        # u64 payloads: bits 0-7 the index, bit 8 no-fd; the rest must be 0.
        for v in (2 * n, 2 * n + 1, 255, (2 * n) | NOFD, 0x1ff, (1 << 32) | 2, (1 << 63) | 2):
            for req in (SET_VRING_KICK, SET_VRING_CALL, SET_VRING_ERR):
                fds = [] if v & NOFD else [eventfd()]
                self.assertRefused(g.refused(req, struct.pack("<Q", v), fds),
                                   "request %d, value %#x" % (req, v))
                for fd in fds:
                    os.close(fd)
        info = self.h.ports()["c"]
        self.assertTrue(info["vrings"][RX]["ready"] and info["vrings"][TX]["ready"])
        self.h.learn(g, MAC_C)
        g.rx.post()
        self.assertEqual(self.h.exchange(self.h.a, MAC_A, g, MAC_C), 8)

    def test_02_rings_enabled_before_they_exist(self):
        """SET_VRING_ENABLE on every ring of pairs 1..N-1 that was never set up, then with
        only a size, then without a kick: none becomes ready, every frame to the port goes
        to pair 0; enable values 2 and 2^32-1 refused."""
        g = self.mq_guest()
        n = struct.unpack("<Q", g.request(GET_QUEUE_NUM, reply=True))[0]
        g.rx.post()
        self.h.learn(g, MAC_C)
        for i in range(2, 2 * n):
            self.assertEqual(g.state(SET_VRING_ENABLE, i, 1), 0)
        for v in (2, 0xffffffff):
            self.assertRefused(g.refused(SET_VRING_ENABLE, struct.pack("<II", 2, v)),
                               "enable value %d" % v)
        self.assertEqual(g.state(SET_VRING_NUM, 2, 64), 0)  # size, no address
        self.assertEqual(g.state(SET_VRING_NUM, 5, 0x10000), 1)  # refused size: nack
        rx1 = RxQueue(g.mem, 64)
        self.assertEqual(g.state(SET_VRING_NUM, 4, 64), 0)
        self.assertEqual(g.request(SET_VRING_ADDR, rx1.addr_msg(4)), 0)  # no kick yet
        rx1.post()
        info = self.h.ports()["c"]["vrings"]
        self.assertFalse(any(v["ready"] for v in info if v["index"] >= 2), info)
        used = [rx1.used_idx()]
        for i in range(32):  # 32 flows: a spread would use every ready queue
            self.h.a.tx.send_frame(flow_frame(MAC_C, MAC_A, b"flow", i))
        deadline = time.monotonic() + 3
        got = []
        while len(got) < 32 and time.monotonic() < deadline:
            got += g.rx.take()
            time.sleep(0.005)
        self.assertEqual(len(got), 32, "frames to c not all on pair 0")
        self.assertEqual(rx1.used_idx(), used[0], "written into a ring that is not ready")

    def test_03_enable_toggled_under_traffic(self):
        """Pair 1's rings disabled and enabled in a tight loop while a sends c frames of many
        flows and c sends b frames on both pairs: c's frames all arrive once; frames to c
        arrive intact or are counted; once pair 1's receive ring is disabled for good,
        nothing more is written into it; no queue entered by two PMD threads at once."""
        g = self.mq_guest()
        g.rx.post()
        self.h.learn(g, MAC_C)
        rx1, tx1 = start_pair(g, 1)
        rx1.post()
        stop = threading.Event()
        errors = []
        toggles = [0]

        def toggle():
            try:
                k = 0
                while not stop.is_set():
                    k += 1
                    self.assertEqual(g.state(SET_VRING_ENABLE, 2 + (k & 1), (k >> 1) & 1), 0)
                    toggles[0] += 1
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        th = threading.Thread(target=toggle, daemon=True)
        sent_b, got_b, got_c = [], [], []
        sent_c = 0
        th.start()
        try:
            t_end = time.monotonic() + 2
            i = 0
            while time.monotonic() < t_end:
                fr = flow_frame(MAC_C, MAC_A, b"TOC", i)
                if self.h.a.tx.send_frame(fr, timeout=1):
                    sent_c += 1
                # b posts 128 receive buffers: at most 96 of c's frames in flight.
                t_pace = time.monotonic() + 2
                while len(sent_b) - len(got_b) > 96 and time.monotonic() < t_pace:
                    got_b += [f for f in self.h.b.rx.take() if f[14:17] == b"TOB"]
                for tx in (g.tx, tx1):
                    fr = frame(MAC_B, MAC_C, b"TOB" + struct.pack(">I", i))
                    if tx.send_frame(fr, timeout=0.2):
                        sent_b.append(fr)
                    i += 1
                got_b += [f for f in self.h.b.rx.take() if f[14:17] == b"TOB"]
                got_c += [f for f in g.rx.take() + rx1.take() if f[14:17] == b"TOC"]
        finally:
            stop.set()
            th.join()
        self.assertFalse(errors, errors)
        for i in (2, 3):
            self.assertEqual(g.state(SET_VRING_ENABLE, i, 1), 0)
        self.assertTrue(g.tx.wait_done(3) and tx1.wait_done(3), "c's chains not all used")
        deadline = time.monotonic() + 3
        while len(got_b) < len(sent_b) and time.monotonic() < deadline:
            got_b += [f for f in self.h.b.rx.take() if f[14:17] == b"TOB"]
            time.sleep(0.005)
        self.assertSameFrames(sorted(got_b), sorted(sent_b), "c's frames at b")
        got_c += [f for f in g.rx.take() + rx1.take() if f[14:17] == b"TOC"]
        st = self.h.stats()
        lost = (Harness.delta(self.before, st, "a", "no_destination") +
                Harness.delta(self.before, st, "c", "no_rx_buffer"))
        self.assertEqual(len(got_c) + lost, sent_c, "frames to c unaccounted for: %s" %
                         vltest.fmt_stats(st))
        self.assertEqual(len(set(got_c)), len(got_c), "a frame to c delivered twice")
        _log("%d toggles; to c %d sent, %d arrived; from c %d" % (toggles[0], sent_c,
                                                                    len(got_c), len(sent_b)))
        # Pair 1's receive ring disabled for good: nothing more is written into it.
        self.assertEqual(g.state(SET_VRING_ENABLE, 2, 0), 0)
        rx1.take()
        used = rx1.used_idx()
        for i in range(32):
            self.h.a.tx.send_frame(flow_frame(MAC_C, MAC_A, b"TOC", i))
        self.assertTrue(self.h.a.tx.wait_done(3))
        time.sleep(0.1)
        self.assertEqual(rx1.used_idx(), used, "written into a disabled receive ring")
        self.assertNoConcurrentEntries()

    def test_04_mq_without_protocol_mq(self):
        """VIRTIO_NET_F_MQ negotiated while the protocol features lack MQ, and with no
        protocol features at all (rings enabled from the start): pair 1 set up anyway. The
        switch refuses or serves it; it stays consistent and c's frames arrive."""
        for features, protocol in ((self.FEATURES, PROTO_REPLY_ACK),
                                   (self.FEATURES & ~VHOST_USER_F_PROTOCOL_FEATURES, 0)):
            g = self.h.guest("c", features=features, protocol=protocol)
            self.h.learn(g, MAC_C)
            try:
                rx1, tx1 = start_pair(g, 1, enable=bool(protocol))
            except (AssertionError, Closed):
                g.close()
                self.h.wait_ports_settled()
                continue
            rx1.post()
            g.rx.post()
            sent = [frame(MAC_B, MAC_C, b"PAIR1" + bytes([i])) for i in range(8)]
            for fr in sent:
                tx1.send_frame(fr)
            self.assertTrue(tx1.wait_done(3), "pair 1's transmit ring not served")
            deadline = time.monotonic() + 3
            got = []
            while len(got) < 8 and time.monotonic() < deadline:
                got += [f for f in self.h.b.rx.take() if f[14:19] == b"PAIR1"]
                time.sleep(0.005)
            self.assertEqual(got, sent)
            g.close()
            self.h.wait_ports_settled()

    # Once quarantined as a switch bug: b's receive ring was stopped as "more than a queue
    # ahead" in about 1 of 15 ASan runs. The switch was right: the harness's own driver had
    # torn a 16-bit used index read (Memory.r16, fixed), consumed 256 stale used entries
    # and re-posted buffers it had already posted.
    def test_05_rebalance_loop_while_ports_come_and_go(self):
        """`ctl pmd-rebalance` in a loop while d connects with 4 queue pairs and leaves
        again, and c sends b frames on 2 pairs: c's frames all arrive, in order per pair; the
        control socket stays responsive; no queue entered by two PMD threads at once."""
        g = self.mq_guest()
        self.h.learn(g, MAC_C)
        _, tx1 = start_pair(g, 1)
        stop = threading.Event()
        errors = []
        counts = {"rebalance": 0, "cycles": 0}

        counts["closed"] = 0

        def rebalance():
            try:
                while not stop.is_set():
                    self.h.ctl("pmd-rebalance")
                    counts["rebalance"] += 1
            except Exception as e:  # noqa: BLE001
                errors.append(("pmd-rebalance", e))

        def churn():
            try:
                while not stop.is_set():
                    try:
                        d = Guest(self.h.tb.sock("d")).negotiate(features=self.FEATURES)
                    except (BrokenPipeError, ConnectionResetError):
                        # Seen once in a fresh-clone CI run (not reproduced since): the
                        # switch closed a connection of d while it negotiated. This test is
                        # about rebalancing under churn; d's sessions are counted, c's
                        # frames and the switch's health are checked below.
                        counts["closed"] += 1
                        continue
                    try:
                        for q in (1, 2, 3):
                            start_pair(d, q)
                        d.tx.send_frame(frame(MAC_B, MAC_D, b"from d"), wait=False)
                    finally:
                        d.close()
                    counts["cycles"] += 1
            except Exception as e:  # noqa: BLE001
                errors.append(("churn", e))
        ths = [threading.Thread(target=f, daemon=True) for f in (rebalance, churn)]
        for t in ths:
            t.start()
        sent = {0: [], 1: []}
        got = []
        try:
            t_end = time.monotonic() + 2.5
            i = 0
            while time.monotonic() < t_end:
                t_pace = time.monotonic() + 2  # b posts 128 receive buffers
                while len(sent[0]) + len(sent[1]) - len(got) > 96 and time.monotonic() < t_pace:
                    got += [f for f in self.h.b.rx.take() if f[14:16] == b"RB"]
                for q, tx in ((0, g.tx), (1, tx1)):
                    fr = frame(MAC_B, MAC_C, b"RB" + bytes([q]) + struct.pack(">I", i))
                    if tx.send_frame(fr, timeout=1):
                        sent[q].append(fr)
                i += 1
                got += [f for f in self.h.b.rx.take() if f[14:16] == b"RB"]
        finally:
            stop.set()
            for t in ths:
                t.join()
        self.assertFalse(errors, errors)
        self.assertTrue(g.tx.wait_done(3) and tx1.wait_done(3))
        deadline = time.monotonic() + 3
        while len(got) < len(sent[0]) + len(sent[1]) and time.monotonic() < deadline:
            got += [f for f in self.h.b.rx.take() if f[14:16] == b"RB"]
            time.sleep(0.005)
        for q in (0, 1):
            self.assertSameFrames([f for f in got if f[16] == q], sent[q], "pair %d's frames at b" % q)
        _log("%d rebalances, %d connections of d (%d closed by the switch while negotiating), "
             "%d frames from c" % (counts["rebalance"], counts["cycles"], counts["closed"], len(got)))
        # Under ASan on a loaded 2-CPU machine a connection of d takes up to ~1 s.
        self.assertGreater(counts["rebalance"], 5)
        self.assertGreaterEqual(counts["cycles"], 1)
        self.assertControlResponsive()
        self.assertNoConcurrentEntries()

    def test_06_pair0_receive_ring_disabled(self):
        """Pair 0's receive ring disabled while pair 1's is enabled: every frame to c goes
        to pair 1 and nothing into pair 0's ring; both disabled: frames to c are dropped as
        no_destination; pair 0 enabled again: frames arrive there."""
        g = self.mq_guest()
        self.h.learn(g, MAC_C)
        rx1, _ = start_pair(g, 1)
        rx1.post()
        g.rx.post()
        self.assertEqual(g.state(SET_VRING_ENABLE, RX, 0), 0)
        used0 = g.rx.used_idx()

        def send_flows(tag, n=32):
            for i in range(n):
                self.h.a.tx.send_frame(flow_frame(MAC_C, MAC_A, tag, i))
            self.assertTrue(self.h.a.tx.wait_done(3))

        def collect(q, tag, n):
            got, deadline = [], time.monotonic() + 3
            while len(got) < n and time.monotonic() < deadline:
                got += [f for f in q.take() if f[14:14 + len(tag)] == tag]
                time.sleep(0.005)
            return got
        send_flows(b"P1ONLY")
        self.assertEqual(len(collect(rx1, b"P1ONLY", 32)), 32)
        self.assertEqual(g.rx.used_idx(), used0, "written into a disabled receive ring")
        self.assertEqual(g.state(SET_VRING_ENABLE, 2, 0), 0)
        before = self.h.stats()
        send_flows(b"NONE")
        st = self.h.wait_stats(lambda s: Harness.delta(before, s, "a", "no_destination") >= 32,
                               3, "frames to a port with no receive ring dropped")
        self.assertEqual(Harness.delta(before, st, "a", "no_destination"), 32)
        self.assertEqual(g.rx.used_idx(), used0)
        self.assertEqual(g.state(SET_VRING_ENABLE, RX, 1), 0)
        send_flows(b"P0AGAIN")
        self.assertEqual(len(collect(g.rx, b"P0AGAIN", 32)), 32)

    def test_07_enables_rebalance_and_traffic_at_random(self):
        """Three pairs; one thread enables and disables any of their six rings at random,
        another runs `ctl pmd-rebalance`, while frames flow both ways: the switch stays
        consistent (no queue entered by two PMD threads, control socket responsive); with
        every ring enabled again, every chain c made available is used and c's frames all
        reach b."""
        g = self.mq_guest()
        self.h.learn(g, MAC_C)
        pairs = [(g.rx, g.tx)] + [start_pair(g, q) for q in (1, 2)]
        for rx, _ in pairs:
            rx.post()
        stop = threading.Event()
        errors = []
        rnd = random.Random(7)

        def toggle():
            try:
                while not stop.is_set():
                    self.assertEqual(g.state(SET_VRING_ENABLE, rnd.randrange(6), rnd.randrange(2)), 0)
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        def rebalance():
            try:
                while not stop.is_set():
                    self.h.ctl("pmd-rebalance")
                    time.sleep(0.005)
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        ths = [threading.Thread(target=f, daemon=True) for f in (toggle, rebalance)]
        for t in ths:
            t.start()
        sent, got = [], []
        try:
            t_end = time.monotonic() + 2
            i = 0
            while time.monotonic() < t_end:
                t_pace = time.monotonic() + 1
                while len(sent) - len(got) > 96 and time.monotonic() < t_pace:
                    got += [f for f in self.h.b.rx.take() if f[14:17] == b"RND"]
                rx, tx = pairs[i % 3]
                fr = frame(MAC_B, MAC_C, b"RND" + struct.pack(">I", i))
                if tx.send_frame(fr, timeout=0.05):
                    sent.append(fr)
                self.h.a.tx.send_frame(flow_frame(MAC_C, MAC_A, b"IN", i), timeout=0.05)
                for r, _ in pairs:
                    r.take()
                got += [f for f in self.h.b.rx.take() if f[14:17] == b"RND"]
                i += 1
        finally:
            stop.set()
            for t in ths:
                t.join()
        self.assertFalse(errors, errors)
        for v in range(6):
            self.assertEqual(g.state(SET_VRING_ENABLE, v, 1), 0)
        for _, tx in pairs:
            self.assertTrue(tx.wait_done(3), "chains of c left unused")
        deadline = time.monotonic() + 3
        while len(got) < len(sent) and time.monotonic() < deadline:
            got += [f for f in self.h.b.rx.take() if f[14:17] == b"RND"]
            time.sleep(0.005)
        self.assertSameFrames(sorted(got), sorted(sent), "c's frames at b")
        self.assertControlResponsive()
        self.assertNoConcurrentEntries()

    def test_08_pair1_call_fd_blocks_a_pmd(self):
        """Pair 1's receive ring takes every frame to d (pair 0's is disabled) and its call
        eventfd is made blocking and full: the PMD thread writing it blocks. The watchdog
        interrupts it, d's connection is closed and the port held down; the healthy pair
        forwards again."""
        g = self.mq_guest("d")
        rx1, _ = start_pair(g, 1)
        rx1.post()
        self.assertEqual(g.state(SET_VRING_ENABLE, RX, 0), 0)
        self.h.learn(g, MAC_D)
        os.set_blocking(rx1.call_fd, True)
        os.eventfd_write(rx1.call_fd, 0xfffffffffffffffe)
        t0 = time.monotonic()
        self.h.a.tx.send_frame(flow_frame(MAC_D, MAC_A, b"wake", 1))
        self.assertClosed(g, 8, "whose pair-1 call fd blocked a PMD thread")
        self.h.check_healthy(timeout=3)
        stall = time.monotonic() - t0
        _log("pair-1 call fd: closed and healthy pair forwarding %.2f s after the block" % stall)
        self.assertLess(stall, 10.0)  # as Notify.block_and_measure
        again = self.h.connect("d")
        self.assertClosed(again, 3, "on a held-down port")

    def test_09_kickless_pairs(self):
        """Pairs 1-3 set up without kick fds (SET_VRING_KICK with the no-fd flag: the
        front-end never kicks), pair 0 with one: whatever the PMD mode (the suite passes in
        interrupt and adaptive mode too), every frame c makes available on any pair is
        taken and reaches b, and frames to c arrive."""
        g = self.mq_guest()
        self.h.learn(g, MAC_C)
        pairs = [(g.rx, g.tx)] + [start_pair(g, q, kick=None) for q in (1, 2, 3)]
        for rx, _ in pairs:
            rx.post()
        sent, got = [], []
        for i in range(64):
            tx = pairs[i % 4][1]
            fr = frame(MAC_B, MAC_C, b"KL" + struct.pack(">I", i))
            self.assertTrue(tx.send_frame(fr, timeout=2), "pair %d's ring not served" % (i % 4))
            sent.append(fr)
            time.sleep(0.002)  # let an interrupt-mode PMD fall asleep between frames
            got += [f for f in self.h.b.rx.take() if f[14:16] == b"KL"]
        for _, tx in pairs:
            self.assertTrue(tx.wait_done(3), "chains left on a kickless ring")
        deadline = time.monotonic() + 3
        while len(got) < len(sent) and time.monotonic() < deadline:
            got += [f for f in self.h.b.rx.take() if f[14:16] == b"KL"]
            time.sleep(0.005)
        self.assertSameFrames(sorted(got), sorted(sent), "frames from kickless pairs at b")
        got_c = []
        for i in range(32):
            self.h.a.tx.send_frame(flow_frame(MAC_C, MAC_A, b"KLIN", i))
        deadline = time.monotonic() + 3
        while len(got_c) < 32 and time.monotonic() < deadline:
            for rx, _ in pairs:
                got_c += [f for f in rx.take() if f[14:18] == b"KLIN"]
            time.sleep(0.005)
        self.assertEqual(len(got_c), 32)


# =========================================================================================
# Scenarios: the lock-free handoff between PMD threads (dp/handoff.h). Two PMD threads,
# single-queue ports: the thread that writes a port's receive queue is (port id) mod 2
# (PortDp::build_rx_targets), so frames polled by the other thread are handed off.
# =========================================================================================
class BigRxQueue(RxQueue):
    """A receive queue of 64 KiB buffers (a 64 KiB frame in one buffer)."""
    BUF = 65536 + 64


class Handoff(HostileCase):
    """Frames handed from one PMD thread to the other while the receiver misbehaves: its
    receive ring toggled, never refilled, its memory table replaced, the front-end gone and
    back; rxqs rebalanced in a loop; 64 KiB frames. Every frame to the hostile port is
    delivered once, in order, or counted (no_rx_buffer, handoff_full, no_destination); the
    handoff path was taken (queues[].handoff_packets); no queue has two writers."""

    PMD_CORES = "0,1"

    def q0(self, st, port):
        return {q["queue"]: q for q in st[port]["queues"]}[0]

    def handed(self, st, port):
        return self.q0(st, port)["handoff_packets"]

    def assertNoConcurrentEntries(self):
        for name, p in self.h.stats().items():
            for q in p.get("queues", []):
                self.assertEqual(q["concurrent_entries"], 0, "%s queue %d entered by two "
                                 "PMD threads at once" % (name, q["queue"]))

    def senders_to(self, port):
        """The healthy front-ends whose frames to `port` are handed off (their rxq is polled
        by a thread that does not write `port`'s receive queue), and the others."""
        st = self.h.stats()
        writer = self.q0(st, port)["rx_writer_pmd"]
        self.assertGreaterEqual(writer, 0, "%s has no writer" % port)
        via = [(g, m) for g, m, n in ((self.h.a, MAC_A, "a"), (self.h.b, MAC_B, "b"))
               if self.q0(st, n)["pmd"] != writer]
        self.assertTrue(via, "both healthy ports polled by %s's writer: %s" % (port, vltest.fmt_stats(st)))
        return via

    def flows_to(self, g, dmac, tag, seconds, side=None, repost=True):
        """a and b send frames to g (each a numbered sequence) for `seconds` while `side()`
        runs between frames; returns (sent per sender, frames got in order of arrival)."""
        sent = {b"A": 0, b"B": 0}
        got = []
        i = 0
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            for src, smac, k in ((self.h.a, MAC_A, b"A"), (self.h.b, MAC_B, b"B")):
                fr = frame(dmac, smac, tag + k + struct.pack(">I", sent[k]))
                if src.tx.send_frame(fr, timeout=1):
                    sent[k] += 1
            i += 1
            if side:
                side(i)
            if g.rx is not None and g.mem is not None:
                got += [f for f in g.rx.take(repost) if f[14:14 + len(tag)] == tag]
        self.assertTrue(self.h.a.tx.wait_done(3) and self.h.b.tx.wait_done(3))
        return sent, got

    def assertOrderedOnce(self, got, tag):
        """Per sender: sequence numbers strictly increasing (no duplicate, no reordering)."""
        last = {}
        for f in got:
            k = f[14 + len(tag):15 + len(tag)]
            n = struct.unpack(">I", f[15 + len(tag):19 + len(tag)])[0]
            self.assertGreater(n, last.get(k, -1), "frame %r %d after %d: duplicated or reordered"
                               % (k, n, last.get(k, -1)))
            last[k] = n

    def accounted(self, st, port, sent, got):
        lost = (Harness.delta(self.before, st, port, "no_rx_buffer") +
                Harness.delta(self.before, st, port, "handoff_full") +
                Harness.delta(self.before, st, "a", "no_destination") +
                Harness.delta(self.before, st, "b", "no_destination"))
        return len(got) + lost, sum(sent.values())

    def wait_accounted(self, g, port, sent, got, tag):
        deadline = time.monotonic() + 3
        while True:
            got += [f for f in g.rx.take() if f[14:14 + len(tag)] == tag]
            st = self.h.stats()
            have, want = self.accounted(st, port, sent, got)
            if have >= want or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        self.assertEqual(have, want, "frames to %s: %d sent, %d arrived, the rest not all "
                         "counted: %s" % (port, want, len(got), vltest.fmt_stats(st)))
        return st

    def test_01_receiver_never_refills(self):
        """c posts 4 receive buffers and never more while a and b send it 2 s of frames
        (some handed off): 4 delivered, every other frame counted on c as no_rx_buffer or
        handoff_full; the healthy pair keeps forwarding meanwhile."""
        g = self.h.guest("c")
        self.h.learn(g, MAC_C)
        self.senders_to("c")
        g.rx.post(4)
        got = []

        def side(i):
            if i % 50 == 0:
                self.assertEqual(self.h.exchange(self.h.a, MAC_A, self.h.b, MAC_B, 4), 4)
        sent, got = self.flows_to(g, MAC_C, b"NR", 1.5, side, repost=False)
        got += [f for f in g.rx.take(repost=False) if f[14:16] == b"NR"]
        deadline = time.monotonic() + 3
        while True:
            st = self.h.stats()
            lost = (Harness.delta(self.before, st, "c", "no_rx_buffer") +
                    Harness.delta(self.before, st, "c", "handoff_full"))
            got += [f for f in g.rx.take(repost=False) if f[14:16] == b"NR"]
            if len(got) + lost >= sum(sent.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        self.assertEqual(len(got), 4, "c posted 4 buffers")
        self.assertEqual(len(got) + lost, sum(sent.values()), vltest.fmt_stats(st))
        self.assertGreater(self.handed(st, "c") - self.handed(self.before, "c"), 0,
                           "no frame to c was handed off")
        self.assertOrderedOnce(got, b"NR")
        self.assertNoConcurrentEntries()

    def test_02_receive_ring_toggled(self):
        """c's receive ring disabled and enabled (SET_VRING_ENABLE) in a loop from another
        thread while a and b send it frames: each arrives once and in order per sender, or
        is counted (no_destination on the sender, no_rx_buffer/handoff_full on c)."""
        g = self.h.guest("c")
        self.h.learn(g, MAC_C)
        self.senders_to("c")
        g.rx.post()

        def toggle(k):  # enable first, then disable, ...
            self.assertEqual(g.state(SET_VRING_ENABLE, RX, (k + 1) & 1), 0)
        with self.looping(toggle) as toggles:
            sent, got = self.flows_to(g, MAC_C, b"TG", 2.0)
        self.assertEqual(g.state(SET_VRING_ENABLE, RX, 1), 0)
        st = self.wait_accounted(g, "c", sent, got, b"TG")
        self.assertOrderedOnce(got, b"TG")
        _log("%d toggles; to c %s sent, %d arrived, %d handed off" % (
            toggles[0], sent, len(got), self.handed(st, "c") - self.handed(self.before, "c")))
        self.assertGreater(self.handed(st, "c") - self.handed(self.before, "c"), 0)
        self.assertNoConcurrentEntries()

    def test_03_memory_table_replaced(self):
        """c's memory table replaced in a loop (SET_MEM_TABLE: the same memfd again, then
        with a second region of a new memfd added, then without it) while a and b send it
        frames: every frame arrives once and in order, or is counted; the extra regions'
        mappings are gone after (after())."""
        g = self.h.guest("c")
        self.h.learn(g, MAC_C)
        self.senders_to("c")
        g.rx.post()

        def remap(k):
            if k % 3 == 1:
                extra = Region(1 << 20, 0x80000000, 0x7f3400000000, name="vhu-extra")
                self.assertEqual(g.set_mem_table(g.mem.regions + [extra]), 0)
                extra.close()  # the switch keeps its own mapping until the next table
            else:
                self.assertEqual(g.set_mem_table(g.mem.regions), 0)
        with self.looping(remap) as swaps:
            sent, got = self.flows_to(g, MAC_C, b"MT", 2.0)
        self.assertEqual(g.set_mem_table(g.mem.regions), 0)
        st = self.wait_accounted(g, "c", sent, got, b"MT")
        self.assertOrderedOnce(got, b"MT")
        _log("%d table changes; to c %s sent, %d arrived" % (swaps[0], sent, len(got)))
        self.assertGreater(self.handed(st, "c") - self.handed(self.before, "c"), 0)
        self.assertNoConcurrentEntries()

    def test_04_receiver_reconnects(self):
        """c disconnects and reconnects (a new session each time: new memory, new rings) in
        a loop while a and b send it frames: the switch stays up, nothing from an old
        session is written into a new one (each session's frames arrive in order), the
        healthy pair forwards (after())."""
        cycles = 0
        t_end = time.monotonic() + 2.5
        handed = 0
        while time.monotonic() < t_end:
            g = self.h.guest("c")
            g.rx.post()
            self.h.learn(g, MAC_C)
            sent, got = self.flows_to(g, MAC_C, b"RC", 0.15)
            self.assertOrderedOnce(got, b"RC")
            g.close()
            self.h.hostiles.remove(g)
            cycles += 1
        st = self.h.stats()
        _log("%d sessions of c" % cycles)
        self.assertGreater(self.handed(st, "c") - self.handed(self.before, "c"), 0)
        self.assertNoConcurrentEntries()

    def test_05_rebalance_loop(self):
        """`ctl pmd-rebalance` in a loop while a and b exchange frames both ways and c and
        d send each other frames: every frame arrives once and in order."""
        c = self.h.guest("c")
        d = self.h.guest("d")
        for g, m in ((c, MAC_C), (d, MAC_D)):
            g.rx.post()
            self.h.learn(g, m)
        pairs = ((self.h.a, MAC_A, self.h.b, MAC_B), (self.h.b, MAC_B, self.h.a, MAC_A),
                 (c, MAC_C, d, MAC_D), (d, MAC_D, c, MAC_C))
        bad = []
        with self.looping(lambda k: self.h.ctl("pmd-rebalance")) as n:
            t_end = time.monotonic() + 2.5
            while time.monotonic() < t_end:
                for src, sm, dst, dm in pairs:
                    ok = self.h.exchange(src, sm, dst, dm, 16, 3, b"RBAL")
                    if ok != 16:
                        bad.append((mac_str(sm), mac_str(dm), ok))
        self.assertFalse(bad, "exchanges short (src, dst, frames in order of 16): %s" % bad)
        _log("%d rebalances" % n[0])
        self.assertGreater(n[0], 3)
        self.assertNoConcurrentEntries()

    def test_06_jumbo_frames_handed_off(self):
        """64 KiB frames (no GSO: one frame each, max frame 65549 bytes) from d to c, which
        posts 64 KiB receive buffers (d's frames are handed off: asserted): 4 frames sent
        one at a time all arrive byte for byte; then bursts of 4, then one of 16 (as many as
        c posts; the 2 MiB ring holds 31) all arrive too."""
        mem = Memory.simple(size=16 << 20)
        c = self.h.connect("c")
        c.negotiate(mem=mem, rings=False)
        c.rx = BigRxQueue(c.mem, 16)
        c.tx = TxQueue(c.mem, 64)
        for i, q in ((RX, c.rx), (TX, c.tx)):
            c.start_vring(i, q)
        for i in (RX, TX):
            Guest.check(c.state(SET_VRING_ENABLE, i, 1), "SET_VRING_ENABLE")
        c.rx.post()
        self.h.learn(c, MAC_C)
        d = self.h.guest("d", mem=Memory.simple(size=16 << 20))
        self.h.learn(d, MAC_D)
        st = self.h.stats()
        self.assertNotEqual(self.q0(st, "d")["pmd"], self.q0(st, "c")["rx_writer_pmd"],
                            "d's frames to c would not be handed off: %s" % vltest.fmt_stats(st))
        bufs = [d.mem.alloc(65536 + 64, 64) for _ in range(16)]

        def big(i, k):
            body = (b"JUMBO" + struct.pack(">HH", k, i)) + bytes(((j * 13 + i) & 0xff for j in range(65535 - 9)))
            return frame(MAC_C, MAC_D, body, size=65535 + 14)[:65535 + 14]

        def send_burst(frames):
            heads = []
            for j, fr in enumerate(frames):
                d.tx.reclaim()
                h = d.tx.free.pop(0)
                d.mem.write(bufs[j], b"\0" * HDR_LEN + fr)
                d.tx.set_desc(h, bufs[j], HDR_LEN + len(fr))
                d.tx.put_avail(h, publish=False)
                heads.append(h)
            d.tx.publish()
            self.assertTrue(d.tx.wait_done(5))

        def receive(n):
            got = []
            deadline = time.monotonic() + 5
            while len(got) < n and time.monotonic() < deadline:
                got += [f for f in c.rx.take() if f[14:19] == b"JUMBO"]
                time.sleep(0.005)
            return got
        # A burst of 16 overflowed the first, 512 KiB ring (7 fitted: handoff_full although c
        # had 16 buffers posted); the 2 MiB ring takes it.
        bursts = [(0, 1), (1, 1), (2, 1), (3, 1), (4, 4), (5, 4), (6, 16)]
        for k, burst in bursts:
            frames = [big(i, k) for i in range(burst)]
            send_burst(frames)
            got = receive(burst)
            st = self.h.stats()
            self.assertEqual([len(f) for f in got], [len(f) for f in frames],
                             "burst %d: %s" % (k, vltest.fmt_stats(st)))
            self.assertTrue(got == frames, "burst %d: frames corrupted" % k)
        st = self.h.stats()
        self.assertGreaterEqual(self.handed(st, "c") - self.handed(self.before, "c"), 12)
        self.assertNoConcurrentEntries()

    def test_07_oversized_frames_do_not_starve_the_ring(self):
        """d floods 200 KB frames without GSO (above any port's largest frame: too_big) to
        the healthy port written by the thread that does not poll d, while the healthy port
        polled by d's thread sends it frames through the same handoff ring: every healthy
        frame arrives in order, the flood is too_big on the receiver, nothing is
        handoff_full. (The oversized frames used to be copied into the ring, two fill it,
        and ~1 healthy frame in 6 was dropped as handoff_full.)"""
        d = self.h.guest("d", mem=Memory.simple(size=16 << 20))
        self.h.learn(d, MAC_D)
        st = self.h.stats()
        dp = self.q0(st, "d")["pmd"]
        if self.q0(st, "a")["rx_writer_pmd"] != dp:
            vname, vmac, src, smac, sname = "a", MAC_A, self.h.b, MAC_B, "b"
        else:
            vname, vmac, src, smac, sname = "b", MAC_B, self.h.a, MAC_A, "a"
        self.assertNotEqual(self.q0(st, vname)["rx_writer_pmd"], dp, vltest.fmt_stats(st))
        self.assertEqual(self.q0(st, sname)["pmd"], dp, "%s and d polled by different "
                         "threads: %s" % (sname, self.h.ctl("pmd-rxq-show")))
        fr = frame(vmac, MAC_D, b"HUGE", size=200000)
        buf = d.mem.alloc(HDR_LEN + len(fr), 64)
        d.mem.write(buf, b"\0" * HDR_LEN + fr)
        def flood(k):
            d.tx.reclaim()
            for _ in range(min(8, len(d.tx.free))):
                h = d.tx.free.pop(0)
                d.tx.set_desc(h, buf, HDR_LEN + len(fr))
                d.tx.put_avail(h, publish=False)
            d.tx.publish()
            time.sleep(0.0005)
        short = total = 0
        with self.looping(flood):
            t_end = time.monotonic() + 2
            while time.monotonic() < t_end:
                ok = self.h.exchange(src, smac, self.h.a if vname == "a" else self.h.b, vmac,
                                     16, 2, b"VICT")
                total += 16
                short += 16 - ok
        self.assertTrue(d.tx.wait_done(3))
        st = self.h.stats()
        self.assertEqual(short, 0, "%d of %d frames %s -> %s lost or out of order while d "
                         "flooded: %s" % (short, total, sname, vname, vltest.fmt_stats(st)))
        self.assertGreater(Harness.delta(self.before, st, vname, "too_big"), 0)
        self.assertDelta(vname, "handoff_full", 0, st)
        self.assertGreater(self.handed(st, vname) - self.handed(self.before, vname), 0)


class HandoffInterrupt(Handoff):
    """The Handoff scenarios with `--pmd-mode interrupt` (the writer sleeps when idle), and
    a frame handed to a sleeping writer: it must be woken (not wait for its 1 s epoll
    timeout or the next kick)."""

    SWITCH_ARGS = ("--pmd-mode", "interrupt")

    def test_00_frame_to_a_sleeping_writer(self):
        """10 times each way: both PMD threads idle 50 ms (asleep in interrupt mode), then
        one frame a -> b or b -> a that is handed off (asserted): it arrives, and the
        switch's own queue age for it (the receiver's queue_age_histogram: from the poll of
        the sender's burst to the delivery into the guest, handoff wait included) is at most
        2^24 ns (16.8 ms) for most of them (a writer left asleep would deliver at its 1 s
        epoll timeout). Not all: on this loaded 2-CPU machine a woken PMD thread now and
        then waits hundreds of ms for its CPU, direct deliveries as much (measured)."""
        def hist(st, name):
            return {e: n for e, n in st[name]["queue_age_histogram"]}
        for (src, sm, dst, dm, name) in ((self.h.a, MAC_A, self.h.b, MAC_B, "b"),
                                         (self.h.b, MAC_B, self.h.a, MAC_A, "a")):
            via = [g for g, _ in self.senders_to(name)]
            if src not in via:
                continue
            st0 = self.h.stats()
            for i in range(10):
                dst.rx.take()
                time.sleep(0.05)  # both threads idle: asleep in interrupt mode
                fr = frame(dm, sm, b"SLEEP" + struct.pack(">I", i))
                src.tx.send_frame(fr)
                deadline = time.monotonic() + 3
                got = []
                while not got and time.monotonic() < deadline:
                    got = [f for f in dst.rx.take() if f[14:19] == b"SLEEP"]
                    time.sleep(0.001)
                self.assertEqual(got, [fr], "frame %d to %s" % (i, name))
            st = self.h.stats()
            self.assertGreaterEqual(self.handed(st, name) - self.handed(st0, name), 10)
            h0, h1 = hist(st0, name), hist(st, name)
            # The last bucket's edge is the running maximum: compare by edge, new edges count.
            grew = sorted(e for e, n in h1.items() if n > h0.get(e, 0))
            _log("queue age buckets (upper edge ns) of these frames at %s: %s" % (name, grew))
            self.assertTrue(grew, "no delivery counted in %s's queue age" % name)
            fast = sum(n - h0.get(e, 0) for e, n in h1.items() if e <= 1 << 24)
            self.assertGreaterEqual(fast, 7, "of 10 frames handed to a sleeping writer only %d "
                                    "delivered within 16.8 ms: %s (before: %s)" % (fast, h1, h0))
        pmds = self.h.ctl("pmd-stats")
        _log("pmd-stats: %s" % pmds)


def main():
    vltest.main(default_timeout=170)


if __name__ == "__main__":
    main()
