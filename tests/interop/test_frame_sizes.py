#!/usr/bin/env python3
"""(c) Frame sizes through the switch (xconnect a -> b), testpmd txonly -> rxonly:

  *   64 B  single-segment frames, default port settings;
  * 1518 B  single-segment frames, port MTU 1500 (the largest frame at MTU 1500: 1500 +
            Ethernet header + one VLAN tag, without FCS);
  * 9000 B  jumbo frames (split and packed rings), port MTU 9000 (TOML [[port]] mtu), sent by testpmd as a chain of
            5 mbufs (2048 x 4 + 808) and received over mergeable receive buffers (2 KiB
            mbufs: each frame spans 5 receive buffers). The receiving testpmd runs with
            --max-pkt-len=9018 --enable-scatter, as a jumbo-capable DPDK application would.

Each case asserts that frames of exactly that size were delivered (switch tx_bytes /
tx_packets, testpmd RX-bytes / RX-packets), counters are conserved, and nothing was dropped
except for want of receive buffers (no_rx_buffer: the receiver shares a CPU with the
sender).

    PYTHONPATH=pylib:bench python3 tests/interop/test_frame_sizes.py --virtlink build/virtlink [-v]
"""
import unittest

from vltestlib import vltest


def toml_two_ports(tb, mtu=None, forward="xconnect", extra_b=""):
    mtu_line = "mtu = %d\n" % mtu if mtu else ""
    return ('forward = "%s"\n'
            '[[port]]\nname = "a"\npath = "%s"\n%s'
            '[[port]]\nname = "b"\npath = "%s"\n%s%s') % (
                forward, tb.sock("a"), mtu_line, tb.sock("b"), mtu_line, extra_b)


class FrameSizes(unittest.TestCase):

    def run_size(self, size, tx_args, rx_args=(), mtu=None, min_delivered=1000, vdev_kw=None):
        with vltest.Testbed(self) as tb:
            tb.start_switch(ports=[], forward=None, config=toml_two_ports(tb, mtu))
            st, txres, rxres, _ = vltest.one_way(tb, tx_args=tx_args, rx_args=rx_args,
                                                 min_delivered=min_delivered,
                                                 rx_vdev_kw=vdev_kw, tx_vdev_kw=vdev_kw)
            a, b = st["a"], st["b"]
            vltest.log("%d B: switch %s" % (size, vltest.fmt_stats(st)))
            vltest.log("%d B: testpmd-rx fwd %s nic %s" % (size, rxres["fwd"][0],
                                                            rxres["nic"].get(0)))
            vltest.assert_drop_keys(self, st)
            by = vltest.drops_by_reason(st)
            for k, v in by.items():
                if k != "no_rx_buffer":
                    self.assertEqual(v, 0, "%d B frames: unexpected %s drops: %s" % (size, k, by))
            self.assertGreater(b["tx_packets"], 0)
            self.assertEqual(a["rx_packets"], b["tx_packets"] + vltest.drops_total(st))
            # Frames of exactly `size` bytes were taken and delivered.
            self.assertEqual(a["rx_bytes"], size * a["rx_packets"])
            self.assertEqual(b["tx_bytes"], size * b["tx_packets"])
            # ...and arrived at testpmd as such (its virtio PMD reassembled every frame).
            nic = rxres["nic"][0]
            self.assertEqual(nic["RX-packets"], b["tx_packets"], nic)
            self.assertEqual(nic["RX-bytes"], size * b["tx_packets"], nic)
            self.assertEqual(nic["RX-errors"], 0, nic)
            self.assertEqual(rxres["fwd"][0]["RX-packets"], b["tx_packets"])
            return st, rxres

    @vltest.ctest("interop_frame_64", timeout=60)
    def test_64(self):
        self.run_size(64, ["--txpkts=64"])

    @vltest.ctest("interop_frame_1518_mtu1500", timeout=60)
    def test_1518_mtu_1500(self):
        self.run_size(1518, ["--txpkts=1518"], mtu=1500)

    @vltest.ctest("interop_frame_9000_mergeable", timeout=60, asan=True)
    def test_9000_jumbo_mergeable(self):
        st, _ = self.run_size(9000, ["--mbuf-size=2048", "--txpkts=2048,2048,2048,2048,808"],
                              rx_args=["--mbuf-size=2048", "--max-pkt-len=9018",
                                       "--enable-scatter"],
                              mtu=9000, min_delivered=200)
        self.assertIn("MRG_RXBUF", st["b"]["feature_names"])

    @vltest.ctest("interop_frame_9000_mergeable_packed", timeout=60, asan=True)
    def test_9000_jumbo_mergeable_packed(self):
        """The same over packed virtqueues (virtio 1.2 §2.8): chained TX descriptors and
        receive frames spread over 5 mergeable buffers, each returned as a used descriptor."""
        st, _ = self.run_size(9000, ["--mbuf-size=2048", "--txpkts=2048,2048,2048,2048,808"],
                              rx_args=["--mbuf-size=2048", "--max-pkt-len=9018",
                                       "--enable-scatter"],
                              mtu=9000, min_delivered=200, vdev_kw={"packed_vq": 1})
        # (the sender has left by now: its features are gone with its connection)
        self.assertIn("MRG_RXBUF", st["b"]["feature_names"])
        self.assertIn("RING_PACKED", st["b"]["feature_names"])


if __name__ == "__main__":
    vltest.main(default_timeout=120)
