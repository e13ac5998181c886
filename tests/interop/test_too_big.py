#!/usr/bin/env python3
"""(d) Negative: frames the receiving port cannot take are dropped and counted as too_big.

  * 1518 B frames to a port with mtu = 1000 (TOML [[port]] mtu): every frame is dropped;
  * 9000 B frames to a port with mtu = 9000 but mrg_rxbuf = false: the receiver's single
    2 KiB buffers cannot hold a frame, so every frame is dropped.

In both cases nothing reaches the receiving testpmd, no other drop reason is counted, and
the switch's counters are conserved (a.rx_packets == sum of drops).

    PYTHONPATH=pylib:bench python3 tests/interop/test_too_big.py --virtlink build/virtlink [-v]
"""
import unittest

from vltestlib import vltest


def toml(tb, mtu_a, b_lines):
    return ('forward = "xconnect"\n'
            '[[port]]\nname = "a"\npath = "%s"\nmtu = %d\n'
            '[[port]]\nname = "b"\npath = "%s"\n%s\n') % (tb.sock("a"), mtu_a, tb.sock("b"),
                                                          b_lines)


class TooBig(unittest.TestCase):

    def run_too_big(self, size, tx_args, cfg_b, mtu_a, rx_args=()):
        with vltest.Testbed(self) as tb:
            tb.start_switch(ports=[], forward=None, config=toml(tb, mtu_a, cfg_b))
            st, txres, rxres, _ = vltest.one_way(tb, tx_args=tx_args, rx_args=rx_args,
                                                 min_delivered=0, traffic_s=1.0)
            a, b = st["a"], st["b"]
            vltest.log("%d B, b: %s: switch %s" % (size, cfg_b.replace("\n", " "),
                                                   vltest.fmt_stats(st)))
            vltest.assert_drop_keys(self, st)
            by = vltest.drops_by_reason(st)
            self.assertGreater(a["rx_packets"], 0)
            self.assertEqual(a["rx_bytes"], size * a["rx_packets"])
            # Every frame taken from a was dropped as too_big, and nothing else happened.
            self.assertEqual(b["tx_packets"], 0)
            self.assertEqual(b["tx_bytes"], 0)
            self.assertEqual(by["too_big"], a["rx_packets"], by)
            for k, v in by.items():
                if k != "too_big":
                    self.assertEqual(v, 0, "unexpected %s drops: %s" % (k, by))
            # Documented (src/port/port.h): too_big is counted on the egress port.
            self.assertEqual(b["drops"]["too_big"], a["rx_packets"], vltest.fmt_stats(st))
            self.assertEqual(rxres["nic"][0]["RX-packets"], 0)
            self.assertEqual(rxres["nic"][0]["RX-errors"], 0)

    @vltest.ctest("interop_too_big_mtu1000", timeout=60, asan=True)
    def test_1518_to_mtu_1000(self):
        self.run_too_big(1518, ["--txpkts=1518"], "mtu = 1000", mtu_a=1500)

    @vltest.ctest("interop_too_big_no_mergeable", timeout=60)
    def test_9000_without_mergeable_buffers(self):
        self.run_too_big(9000, ["--mbuf-size=2048", "--txpkts=2048,2048,2048,2048,808"],
                         "mtu = 9000\nmrg_rxbuf = false", mtu_a=9000,
                         rx_args=["--mbuf-size=2048"])


if __name__ == "__main__":
    vltest.main(default_timeout=90)
