#!/usr/bin/env python3
"""Hostile-peer scenarios: live migration messages (SET_LOG_BASE, LOG_ALL, SEND_RARP). Ctest
entry `hostile_migration` (labels hostile, and asan in a sanitizer build); the harness is
tests/hostile/harness.py, the front-end vltestlib.vhost_peer, the scenario list
tests/hostile/README.md.

    PYTHONPATH=pylib:bench python3 tests/hostile/test_migration.py --virtlink build-asan/virtlink \
        [-v] [Migration.test_01_set_log_base_hostile]
"""
import fcntl
import os
import struct
import threading
import time

from harness import (MAC_A, MAC_B, MAC_C, _log, Harness, HostileCase, main)
from vltestlib import vltest
from vltestlib.vhost_peer import (DEFAULT_FEATURES, DEFAULT_PROTOCOL, GET_FEATURES,
    GET_QUEUE_NUM, GET_VRING_BASE, PROTO_LOG_SHMFD, PROTO_RARP, RX, SEND_RARP,
    SET_FEATURES, SET_LOG_BASE, SET_LOG_FD, SET_PROTOCOL_FEATURES, SET_VRING_ADDR,
    SET_VRING_BASE, SET_VRING_KICK, TX, VERSION, VHOST_F_LOG_ALL, VRING_F_LOG, DirtyLogFd,
    frame, fresh_fd, log_bytes_for, log_fd, mac, mac_str, Region, RxQueue)


# =========================================================================================
# Scenarios: live migration messages (SET_LOG_BASE, LOG_ALL, SEND_RARP)
# =========================================================================================

@vltest.ctest("hostile_migration", timeout=60, asan=True)
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


if __name__ == "__main__":
    main()
