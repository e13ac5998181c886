#!/usr/bin/env python3
"""(a) testpmd txonly on port a -> switch -> testpmd rxonly on port b, in bridge and in
xconnect mode. Counter conservation after the sender stops and the switch drains:

    switch a.rx_packets == b.tx_packets + (every drop on every port)
    testpmd-b RX-packets == switch b.tx_packets           (exactly)

In bridge mode testpmd's txonly frames go to a fixed, never-learned destination MAC, so
the bridge floods them to b (the only other port).

    python3 tests/interop/test_txrx.py --virtlink build/virtlink
"""
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vltest  # noqa: E402

TRAFFIC_S = 2.0


class TxRx(unittest.TestCase):

    def run_txrx(self, forward):
        with vltest.Testbed(self) as tb:
            tb.start_switch(ports=["a", "b"], forward=forward)
            rx = tb.start_testpmd("rx", [tb.virtio_user("b")], "rxonly")
            tb.wait_connected(["b"])
            tx = tb.start_testpmd("tx", [tb.virtio_user("a")], "txonly", args=["--txpkts=64"])
            tb.wait_connected(["a"])
            tb.wait_counter("b", "tx_packets", 1000, timeout=20)
            time.sleep(TRAFFIC_S)
            txres = tb.stop_testpmd(tx)
            st = tb.wait_quiet()
            rxres = tb.stop_testpmd(rx)
            st2 = tb.switch_stats()
            a, b = st["a"], st["b"]
            vltest.log("%s: switch %s" % (forward, vltest.fmt_stats(st)))
            vltest.log("%s: testpmd-tx %s; testpmd-rx %s" % (forward, txres["fwd"],
                                                              rxres["fwd"]))

            vltest.assert_drop_keys(self, st)
            vltest.assert_no_corruption(self, st)
            self.assertGreater(a["rx_packets"], 0)
            self.assertGreater(b["tx_packets"], 0)
            # Conservation: every frame taken from a was delivered to b or counted as a drop.
            self.assertEqual(a["rx_packets"], b["tx_packets"] + vltest.drops_total(st),
                             vltest.fmt_stats(st))
            # Nothing went the other way.
            self.assertEqual(b["rx_packets"], 0)
            self.assertEqual(a["tx_packets"], 0)
            # Frames are 64 bytes (no virtio-net header, no FCS) on both sides.
            self.assertEqual(a["rx_bytes"], 64 * a["rx_packets"])
            self.assertEqual(b["tx_bytes"], 64 * b["tx_packets"])
            # The only drop a slow receiver may cause.
            by = vltest.drops_by_reason(st)
            self.assertEqual(by["too_big"], 0, by)
            self.assertEqual(by["no_destination"], 0, by)
            # The sender cannot have had more taken than it sent.
            self.assertLessEqual(a["rx_packets"], txres["fwd"][0]["TX-packets"])
            # The receiver got exactly what the switch delivered.
            self.assertEqual(rxres["fwd"][0]["RX-packets"], b["tx_packets"])
            self.assertEqual(rxres["fwd"][0]["TX-packets"], 0)
            # Stopping the receiver changed no counter but its connection state.
            for n in ("a", "b"):
                for k in ("rx_packets", "tx_packets", "drops"):
                    self.assertEqual(st2[n][k], st[n][k], "%s.%s after the peers left" % (n, k))

    def test_xconnect(self):
        self.run_txrx("xconnect")

    def test_bridge(self):
        self.run_txrx("bridge")


if __name__ == "__main__":
    vltest.main(default_timeout=100)
