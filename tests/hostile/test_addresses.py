#!/usr/bin/env python3
"""Hostile-peer scenarios: addresses and memory (items 7-9), memory tables replaced and memory
truncated under traffic, huge regions; the switch-wide cap on guest memory (item 22, class
MemoryCap). Ctest entries `hostile_addresses` and `hostile_memory_cap` (labels hostile, and
asan in a sanitizer build); the harness is tests/hostile/harness.py, the front-end
vltestlib.vhost_peer, the scenario list tests/hostile/README.md.

    PYTHONPATH=pylib:bench python3 tests/hostile/test_addresses.py --virtlink build-asan/virtlink \
        [-v] [Addresses.test_01_buffers_across_regions]
"""
import mmap
import os
import struct
import threading
import time

from harness import (MAC_A, MAC_B, MAC_C, MAC_D, MAC_E, Harness, HostileCase, main)
from vltestlib import vltest
from vltestlib.vhost_peer import (DESC_NEXT, DESC_WRITE, HDR_LEN, RX, SET_MEM_TABLE,
    SET_VRING_ADDR, SET_VRING_ENABLE, TX, frame, Memory, Region, Ring, RxQueue, span_read,
    span_write, two_region_memory)


# =========================================================================================
# Scenarios: addresses and memory (items 7-9), memory replaced or truncated under traffic
# =========================================================================================

@vltest.ctest("hostile_addresses", timeout=90, asan=True)
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
# Scenarios: the switch-wide cap on guest memory (item 22), with three big sparse tables
# =========================================================================================

BIG = 16 << 30  # a sparse memfd of 16 GiB per front-end: address space, no memory


def big_memory():
    return Memory([Region(BIG, 0x40000000, 0x7f1200000000)])


@vltest.ctest("hostile_memory_cap", timeout=60, asan=True)
class MemoryCap(HostileCase):
    """--max-total-guest-memory 33 (GiB) fits the healthy pair's 4 MiB each and two tables
    of 16 GiB, not three."""
    PORTS = ("a", "b", "c", "d", "e")
    SWITCH_ARGS = ("--max-total-guest-memory", "33")

    def switch_memory(self):
        return self.h.ctl("stats")["guest_memory"]

    def big_table(self, g):
        """A SET_MEM_TABLE of one 16 GiB region, its memfd closed with the front-end."""
        m = big_memory()
        payload, fds = g.mem_table(m.regions)
        g.owned_fds.append(m.regions[0].fd)
        m.regions[0].fd = -1
        m.regions[0].mm.close()
        return payload, fds

    def test_01_third_big_table_refused_until_one_leaves(self):
        """Item 22: c and d each map 16 GiB; e's table of 16 GiB does not fit under the cap:
        an error reply (REPLY_ACK), counted in `ctl stats` (guest_memory.refused and e's
        guest_memory_refused), e keeps its old table, c and d keep forwarding. Once c has
        left, e's 16 GiB fit, and a replaced table is not counted twice."""
        c = self.h.guest("c", mem=big_memory())
        d = self.h.guest("d", mem=big_memory())
        self.h.learn(c, MAC_C)
        self.h.learn(d, MAC_D)
        self.assertEqual(self.switch_memory()["mapped_bytes"], 2 * BIG + (8 << 20))
        e = self.h.guest("e")  # the default 4 MiB table fits
        mem0 = self.switch_memory()
        payload, fds = self.big_table(e)
        self.assertRefused(e.refused(SET_MEM_TABLE, payload, fds), "a third table of 16 GiB")
        mem1 = self.switch_memory()
        self.assertEqual(mem1["refused"], mem0["refused"] + 1)
        self.assertEqual(mem1["mapped_bytes"], mem0["mapped_bytes"])
        self.assertEqual(mem1["limit_bytes"], 33 << 30)
        self.assertEqual(self.h.stats()["e"]["guest_memory_refused"], 1)
        self.assertEqual(self.h.ports()["e"]["mapped_bytes"], 4 << 20)  # the old table kept
        self.assertEqual(self.h.exchange(c, MAC_C, d, MAC_D), 8)
        self.assertEqual(self.h.exchange(d, MAC_D, c, MAC_C), 8)
        # c leaves: its 16 GiB are given back, and e's table fits.
        c.close()
        deadline = time.monotonic() + 5
        while self.switch_memory()["mapped_bytes"] > BIG + (12 << 20) and time.monotonic() < deadline:
            time.sleep(0.05)
        payload, fds = self.big_table(e)
        self.assertEqual(e.request(SET_MEM_TABLE, payload, fds), 0)
        self.assertEqual(self.switch_memory()["mapped_bytes"], 2 * BIG + (8 << 20))
        # A full front-end on the freed room forwards with d; e's replaced 16 GiB table is
        # given back when e goes (its port no longer counts it).
        e.close()
        deadline = time.monotonic() + 5
        while self.switch_memory()["mapped_bytes"] > BIG + (8 << 20) and time.monotonic() < deadline:
            time.sleep(0.05)
        e = self.h.guest("e", mem=big_memory())
        self.h.learn(e, MAC_E)
        self.assertEqual(self.h.exchange(d, MAC_D, e, MAC_E), 8)
        self.assertEqual(self.h.exchange(e, MAC_E, d, MAC_D), 8)
        self.assertEqual(self.switch_memory()["mapped_bytes"], 2 * BIG + (8 << 20))

    def test_02_refusal_without_reply_ack_closes_only_that_connection(self):
        """Item 22: without REPLY_ACK a table over the cap closes that connection only; the
        others keep theirs and forward (Harness.after checks the healthy pair)."""
        c = self.h.guest("c", mem=big_memory())
        d = self.h.guest("d", mem=big_memory())
        self.h.learn(c, MAC_C)
        self.h.learn(d, MAC_D)
        e = self.h.guest("e", protocol=0)
        refused = self.switch_memory()["refused"]
        payload, fds = self.big_table(e)
        e.send(SET_MEM_TABLE, payload, fds)
        self.assertClosed(e, 5, "over the switch-wide cap without REPLY_ACK")
        self.assertEqual(self.switch_memory()["refused"], refused + 1)
        self.assertEqual(self.h.exchange(c, MAC_C, d, MAC_D), 8)
        self.assertEqual(self.h.ports()["c"]["mapped_bytes"], BIG)


if __name__ == "__main__":
    main()
