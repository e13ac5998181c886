#!/usr/bin/env python3
"""Hostile-peer scenarios: ring walking (items 10-18): cycles, index jumps, indirect tables,
rings rewritten under the switch, 32768-entry queues, fragmented and huge frames, the MTU,
offload metadata. Ctest entry `hostile_rings` (labels hostile, and asan in a sanitizer
build); the harness is tests/hostile/harness.py, the front-end vltestlib.vhost_peer, the
scenario list tests/hostile/README.md.

    PYTHONPATH=pylib:bench python3 tests/hostile/test_rings.py --virtlink build-asan/virtlink \
        [-v] [Rings.test_09_rx_chains_sharing_one_long_chain]
"""
import os
import random
import struct
import threading
import time

from harness import (BCAST, MAC_A, MAC_B, MAC_C, MAC_D, _log, Harness, HostileCase, main)
from vltestlib import vltest
from vltestlib.vhost_peer import (DEFAULT_FEATURES, DEFAULT_PROTOCOL, DESC_INDIRECT,
    DESC_NEXT, DESC_WRITE, HDR_LEN, NET_SET_MTU, PROTO_MTU, RX, SET_VRING_ADDR,
    SET_VRING_BASE, SET_VRING_ENABLE, SET_VRING_KICK, TX, VIRTIO_NET_F_CSUM,
    VIRTIO_NET_F_HOST_TSO4, VIRTIO_NET_F_MTU, VIRTIO_RING_F_INDIRECT_DESC, frame, Memory,
    Region, Ring, RxQueue, tcp4_frame, tcp4_valid, TxQueue)


# =========================================================================================
# Scenarios: ring walking (items 10-15, 18) and the guest rewriting rings under the switch
# =========================================================================================

@vltest.ctest("hostile_rings", timeout=90, asan=True)
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
        reads (seconds of the PMD thread shared by every port). Now a frame costs one walk
        of that chain: it can hold no frame (item 21), so it is returned unused and the
        frame dropped (short_rx_buffer), and the healthy pair does not notice."""
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
        self.h.wait_stats(lambda s: Harness.delta(before, s, "c", "short_rx_buffer") == 1, 5,
                          "short_rx_buffer on c")
        self.h.check_healthy(timeout=2)
        _log("hostile receive ring stopped after %.2f s" % (time.monotonic() - t0))
        self.assertLess(time.monotonic() - t0, 3.0)

    def test_10_rx_empty_buffers(self):
        """Mergeable receive buffers of 0 bytes, a queue full of them (item 21): each frame
        costs one of them, returned unused (used length 0, short_rx_buffer), and nothing is
        written."""
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
        st = self.h.wait_stats(lambda s: Harness.delta(before, s, "c", "short_rx_buffer") == 5, 5,
                               "short_rx_buffer")
        self.assertDelta("c", "tx_packets", 0, st, before)
        self.assertDelta("c", "no_rx_buffer", 0, st, before)
        self.assertEqual(g.rx.used_idx(), 5)
        self.assertEqual([ln for _, ln in g.rx.take_used()], [0] * 5)
        self.assertEqual(g.mem.read(buf, 64), b"\0" * 64, "written into a 0-byte buffer")

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

    def test_18_receive_buffers_shorter_than_the_header(self):
        """Item 21: c (mergeable buffers, 12-byte header) posts receive buffers of 8, 10, 0
        and 11 bytes, then good ones. Each short buffer is returned unused (used length 0)
        and costs one frame (short_rx_buffer on c, logged once); the frames after them
        arrive intact with num_buffers 1; the queue never stalls; a and b keep forwarding."""
        g = self.h.guest("c")
        self.h.learn(g, MAC_C)
        g.rx.take()  # (nothing posted yet: the learning frame was no_destination)
        short = (8, 10, 0, 11)
        q = g.rx
        for i, n in enumerate(short):
            q.set_desc(i, q.buf_of[i], n, DESC_WRITE, 0)
            q.put_avail(i, publish=False)
        for i in range(len(short), len(short) + 8):
            q.set_desc(i, q.buf_of[i], q.BUF, DESC_WRITE, 0)
            q.put_avail(i, publish=False)
        q.publish()
        before = self.h.stats()
        sent = [frame(MAC_C, MAC_A, b"SHRT%d" % k, size=100 + k) for k in range(8)]
        for f in sent:
            self.h.a.tx.send_frame(f)
        st = self.h.wait_stats(lambda s: Harness.delta(before, s, "c", "short_rx_buffer") == 4 and
                               Harness.delta(before, s, "c", "tx_packets") == 4, 5,
                               "4 short buffers returned, 4 frames delivered")
        used = []
        deadline = time.monotonic() + 3
        while len(used) < 8 and time.monotonic() < deadline:
            used += q.take_used()
        self.assertEqual([u for u in used[:4]], [(i, 0) for i in range(4)], "short buffers")
        for (head, ln), f in zip(used[4:], sent[4:]):
            data = g.mem.read(q.buf_of[head], ln)
            self.assertEqual(struct.unpack("<H", data[10:12])[0], 1)
            self.assertEqual(data[HDR_LEN:], f)
        self.assertDelta("c", "no_rx_buffer", 0, st, before)
        log = self.h.tb.switch.output()
        self.assertEqual(log.count("port c: receive buffer shorter than the virtio-net header"), 1,
                         "the short buffers are logged once")

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


if __name__ == "__main__":
    main()
