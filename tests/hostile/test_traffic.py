#!/usr/bin/env python3
"""Hostile-peer scenarios: DPDK testpmd floods through the switch while a hostile front-end
misbehaves. Ctest entry `hostile_traffic` (labels hostile, and asan in a sanitizer build);
the harness is tests/hostile/harness.py, the front-end vltestlib.vhost_peer, the scenario
list tests/hostile/README.md.

    PYTHONPATH=pylib:bench python3 tests/hostile/test_traffic.py --virtlink build-asan/virtlink \
        [-v] [Traffic.test_01_rx_ring_scribbled_under_flood]
"""
import random
import struct
import threading
import time

from harness import (HostileCase, main)
from vltestlib import vltest
from vltestlib.vhost_peer import (GET_VRING_BASE, RX, SET_VRING_BASE, SET_VRING_KICK,
    Guest)


# =========================================================================================
# Scenarios under real traffic: DPDK testpmd floods through the switch while a hostile
# front-end misbehaves (the testpmd pair is the healthy pair here).
# =========================================================================================

@vltest.ctest("hostile_traffic", timeout=90, asan=True)
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


if __name__ == "__main__":
    main()
