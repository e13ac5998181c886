#!/usr/bin/env python3
"""(b) An io-forwarding loop: ONE testpmd owns two virtio-user ports (a and b), forwards
whatever one receives out of the other, and seeds the loop with one burst per port (start tx_first). The switch
cross-connects a <-> b, so frames circulate testpmd -> a -> switch -> b -> testpmd -> ...

After a few seconds the loop must still be running: both ports' rx_packets grow between two
samples one second apart, and no frame was dropped as bad_descriptor, bad_header or
ring_broken. Counter conservation is checked after the loop is stopped.

    PYTHONPATH=pylib:bench python3 tests/interop/test_ioloop.py --virtlink build/virtlink
"""
import time
import unittest

from vltestlib import vltest

WARMUP_S = 3.0


class IoLoop(unittest.TestCase):

    @vltest.ctest("interop_ioloop_xconnect", timeout=60, asan=True)
    def test_io_loop_xconnect(self):
        with vltest.Testbed(self) as tb:
            tb.start_switch(ports=["a", "b"], forward="xconnect")
            tp = tb.start_testpmd(
                "io", [tb.virtio_user("a", 0, mac="02:00:00:00:00:0a"),
                       tb.virtio_user("b", 1, mac="02:00:00:00:00:0b")],
                "io", tx_first=True)
            tb.wait_connected(["a", "b"])
            tb.wait_counter("a", "rx_packets", 1, timeout=20)
            tb.wait_counter("b", "rx_packets", 1, timeout=20)
            time.sleep(WARMUP_S)
            s1 = tb.switch_stats()
            time.sleep(1.0)
            s2 = tb.switch_stats()
            vltest.log("sample 1: %s" % vltest.fmt_stats(s1))
            vltest.log("sample 2: %s" % vltest.fmt_stats(s2))
            vltest.assert_drop_keys(self, s2)
            vltest.assert_no_corruption(self, s2)
            for n in ("a", "b"):
                self.assertGreater(s2[n]["rx_packets"], s1[n]["rx_packets"],
                                   "port %s stopped receiving: the loop died" % n)
                self.assertGreater(s2[n]["tx_packets"], s1[n]["tx_packets"],
                                   "port %s stopped delivering: the loop died" % n)
            for n in ("a", "b"):
                self.assertEqual(s2[n]["drops"]["no_destination"], 0)
                self.assertEqual(s2[n]["drops"]["too_big"], 0)

            res = tb.stop_testpmd(tp)
            st = tb.wait_quiet()
            vltest.log("final: %s; testpmd %s" % (vltest.fmt_stats(st), res["fwd"]))
            vltest.assert_no_corruption(self, st)
            # Conservation over the whole run: taken = delivered + dropped.
            self.assertEqual(st["a"]["rx_packets"] + st["b"]["rx_packets"],
                             st["a"]["tx_packets"] + st["b"]["tx_packets"] +
                             vltest.drops_total(st), vltest.fmt_stats(st))
            # testpmd stops forwarding (and then reads its counters) before it closes its
            # ports, and the switch keeps delivering the frames already in flight until
            # then: what testpmd received may trail the switch's tx_packets by at most the
            # loop's population (tx_first: one 32-frame burst per port), never exceed it.
            in_flight = 0
            for i, n in enumerate(("a", "b")):  # testpmd port 0 is a, port 1 is b
                nic = res["nic"][i]
                self.assertEqual(nic["RX-errors"], 0, nic)
                self.assertLessEqual(nic["RX-packets"], st[n]["tx_packets"])
                in_flight += st[n]["tx_packets"] - nic["RX-packets"]
                # The switch never took more from a port than testpmd sent on it.
                self.assertLessEqual(st[n]["rx_packets"], nic["TX-packets"])
            self.assertLessEqual(in_flight, 2 * 32)


if __name__ == "__main__":
    vltest.main(default_timeout=60)
