#!/usr/bin/env python3
"""(a) testpmd txonly on port a -> switch -> testpmd rxonly on port b, in bridge and in
xconnect mode. Counter conservation after the sender stops and the switch drains:

    switch a.rx_packets == b.tx_packets + (every drop on every port)
    testpmd-b RX-packets == switch b.tx_packets           (exactly)

In bridge mode testpmd's txonly frames go to a fixed, never-learned destination MAC, so
the bridge floods them to b (the only other port).

    PYTHONPATH=pylib:bench python3 tests/interop/test_txrx.py --virtlink build/virtlink [-v] [TxRx.test_bridge]
"""
import unittest

from vltestlib import vltest

FRAME = 64
SRC_MAC = "02:00:00:00:00:0a"  # the sender's port MAC (virtio-user mac=)
DST_MAC = "02:00:00:00:00:00"  # testpmd txonly's default destination (--eth-peer)


class TxRx(unittest.TestCase):

    def run_txrx(self, forward):
        with vltest.Testbed(self) as tb:
            tb.start_switch(ports=["a", "b"], forward=forward)
            fdb = {}
            st, txres, rxres, after = vltest.one_way(
                tb, tx_args=["--txpkts=%d" % FRAME], tx_vdev_kw={"mac": SRC_MAC},
                during=lambda tb: fdb.update({e["mac"]: e["port"] for e in tb.ctl("fdb")}))
            a, b = st["a"], st["b"]
            vltest.log("%s: switch %s" % (forward, vltest.fmt_stats(st)))
            vltest.log("%s: testpmd-tx %s; testpmd-rx %s" % (forward, txres["fwd"][0],
                                                              rxres["fwd"][0]))

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
            # Byte counters: frame bytes (no virtio-net header, no FCS).
            self.assertEqual(a["rx_bytes"], FRAME * a["rx_packets"])
            self.assertEqual(b["tx_bytes"], FRAME * b["tx_packets"])
            # A receiver slower than the sender may only cost no_rx_buffer drops.
            by = vltest.drops_by_reason(st)
            self.assertEqual(by["too_big"], 0, by)
            self.assertEqual(by["no_destination"], 0, by)
            # The switch cannot have taken more than the sender sent.
            self.assertLessEqual(a["rx_packets"], txres["fwd"][0]["TX-packets"])
            # The receiver got exactly what the switch delivered: its port counters (since
            # the port started) and its forward statistics (since forwarding started;
            # nothing arrives before that, the sender starts later).
            nic = rxres["nic"][0]
            self.assertEqual(nic["RX-packets"], b["tx_packets"], nic)
            self.assertEqual(nic["RX-bytes"], FRAME * b["tx_packets"], nic)
            self.assertEqual(nic["RX-errors"], 0, nic)
            self.assertEqual(nic["TX-packets"], 0, nic)
            self.assertEqual(rxres["fwd"][0]["RX-packets"], b["tx_packets"])
            if forward == "bridge":
                # The sender's MAC was learned on a; testpmd's destination MAC (its default
                # peer address) never appears as a source, so it stays unknown: flooded.
                self.assertEqual(fdb.get(SRC_MAC), "a", fdb)
                self.assertNotIn(DST_MAC, fdb)
            # The receiver leaving changed no counter.
            for n in ("a", "b"):
                for k in ("rx_packets", "tx_packets", "drops"):
                    self.assertEqual(after[n][k], st[n][k], "%s.%s after the peers left" % (n, k))

    @vltest.ctest("interop_txrx_xconnect", timeout=60, asan=True)
    def test_xconnect(self):
        self.run_txrx("xconnect")

    @vltest.ctest("interop_txrx_bridge", timeout=60)
    def test_bridge(self):
        self.run_txrx("bridge")


if __name__ == "__main__":
    vltest.main(default_timeout=100)
