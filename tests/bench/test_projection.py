#!/usr/bin/env python3
"""Unit tests of the projected NDR (bench/projection.py) and bench chain's goals on it,
against cases computed by hand (no processes, no traffic).

    PYTHONPATH=pylib:bench python3 tests/bench/test_projection.py -v
"""
import types
import unittest

import chain_bench
import projection as pj

HZ = 2.4e9


def delta(packets, cpu_ns, busy_cycles=0, sleeps=0, passes=0):
    return {"packets": packets, "cpu_ns": cpu_ns, "busy_cycles": busy_cycles,
            "sleeps": sleeps, "passes": passes}


class Arithmetic(unittest.TestCase):

    def test_hand_computed_chain(self):
        # Switch: 200 cycles per packet, crossed 3 times = 600 cycles per frame.
        # vnf0: 1e6 frames in 0.25 s of CPU at 2.4 GHz = 600 cycles per frame.
        # vnf1: 1e6 frames in 0.5 s = 1200 cycles per frame: 2.4e9 / 1200 = 2.0 Mpps.
        cyc, busy, wake = pj.component_cycles(
            200, 3, [delta(10**6, 250e6, busy_cycles=3e8, sleeps=500, passes=20000),
                     delta(10**6, 500e6, busy_cycles=9e8)], HZ)
        self.assertEqual(cyc, {"switch": 600, "vnf0": 600, "vnf1": 1200})
        self.assertEqual(busy, {"vnf0": 300, "vnf1": 900})
        self.assertEqual(wake["vnf0"], {"sleeps": 0.5, "passes": 20.0})
        self.assertEqual(pj.projection(cyc, HZ), (2.0, "vnf1"))

    def test_switch_limits(self):
        # Direct mode: 2 crossings of a 700-cycle switch (1400) against 1000-cycle VNFs.
        cyc, _, _ = pj.component_cycles(700, 2, [delta(10**6, 1000e6 / 2.4)] * 2, HZ)
        self.assertEqual(cyc, {"switch": 1400, "vnf0": 1000, "vnf1": 1000})
        rate, k = pj.projection(cyc, HZ)
        self.assertEqual(k, "switch")
        self.assertAlmostEqual(rate, 2.4e9 / 1400 / 1e6, places=4)

    def test_missing_figures(self):
        # A vnf that forwarded nothing has no figure and does not limit the projection;
        # no figure at all gives no projection.
        cyc, busy, wake = pj.component_cycles(None, 2, [delta(0, 1e6), delta(10**6, 250e6)], HZ)
        self.assertEqual(cyc, {"vnf0": None, "vnf1": 600})
        self.assertIsNone(busy["vnf0"])
        self.assertEqual(wake["vnf0"], {"sleeps": None, "passes": None})
        self.assertEqual(pj.projection(cyc, HZ), (4.0, "vnf1"))
        self.assertEqual(pj.projection({"vnf0": None}, HZ), (None, None))

    def test_median(self):
        self.assertEqual(pj.median([3, None, 1, 2]), 2)
        self.assertEqual(pj.median([4, 1, 3, 2]), 2)  # the lower of the middle two
        self.assertIsNone(pj.median([None]))


class Trial(unittest.TestCase):
    """cycles_trial() on a stand-in topology: counters before and after, CPU time, the
    generator's figures."""

    def test_cycles_trial(self):
        snaps = iter([{"packets": 100, "busy_cycles": 0, "sleeps": 7, "passes": 10},
                      {"packets": 100 + 10**6, "busy_cycles": 3e8, "sleeps": 1007,
                       "passes": 10010, "tsc_hz": HZ}])
        cpu = iter([1000, 1000 + 250e6])
        run = types.SimpleNamespace(rx=3 * 10**6, duration_s=1.5, cycles={"switch": 150},
                                    doc={"clock": {"hz": HZ}, "loop_ceiling_mpps": 9.5})
        calls = []

        def trial(rate, size, secs, flows=1):
            calls.append((rate, size, secs, flows))
            return run
        topo = types.SimpleNamespace(vnfs=[types.SimpleNamespace(pid=1)], trial=trial)
        saved = pj.vnf_snapshot, pj.cpu_ns
        pj.vnf_snapshot, pj.cpu_ns = (lambda p: next(snaps)), (lambda pid: next(cpu))
        try:
            carried, cyc, tsc, ceiling, busy, wake = pj.cycles_trial(topo, 64, 0.5, 2, flows=10)
        finally:
            pj.vnf_snapshot, pj.cpu_ns = saved
        self.assertEqual(calls, [(0, 64, 0.5, 10)])  # back-pressured: rate 0
        self.assertEqual(carried, 2e6)
        self.assertEqual(cyc, {"switch": 300, "vnf0": 600})
        self.assertEqual((tsc, ceiling), (HZ, 9.5))
        self.assertEqual(busy, {"vnf0": 300})
        self.assertEqual(wake, {"vnf0": {"sleeps": 1.0, "passes": 10.0}})


def chain_row(mode, n, size, proj, cyc):
    return {"topology": "chain", "chain_mode": mode, "vnfs": n, "frame_size": size,
            "projected_ndr_mpps": proj, "cycles_per_packet": cyc}


class ChainGoals(unittest.TestCase):

    def test_chain_cycles(self):
        r = chain_row("direct", 2, 64, 1.0, {"switch": 400, "vnf0": 300, "vnf1": 350})
        self.assertEqual(chain_bench.chain_cycles(r), 1050)
        r["cycles_per_packet"]["vnf1"] = None
        self.assertIsNone(chain_bench.chain_cycles(r))

    def test_goals(self):
        rows = [
            # p2p: measured 3.6 against min(projected 4.0, generator 5.0) = 4.0: 0.90.
            {"topology": "p2p", "frame_size": 64, "ndr_mpps": 3.6, "projected_with_gen_mpps": 4.0},
            chain_row("direct", 2, 64, 2.0, {"switch": 600, "vnf0": 500, "vnf1": 500}),
            chain_row("direct", 5, 64, 1.7, {"switch": 600, "vnf0": 500, "vnf1": 500,
                                             "vnf2": 500, "vnf3": 500, "vnf4": 500}),
            chain_row("virtlink", 2, 64, 1.5, {"switch": 900, "vnf0": 300, "vnf1": 300}),
        ]
        text = "\n".join(chain_bench.goals(rows, [64], [2, 5]))
        self.assertIn("method check 64 B: measured/projected 0.90 (goal 0.80-1.20): met", text)
        # 1.7 / 2.0 = 0.85 < 0.9.
        self.assertIn("direct 64 B: projected NDR N=5 / N=2 0.850 (goal >= 0.90): NOT met", text)
        # switched 900 + 600 = 1500, direct 600 + 1000 = 1600: dearer by 100 per inner hop.
        self.assertIn("64 B N=2: cycles per frame of every process, switched 1500, direct 1600: "
                      "a direct hop dearer than a switched one (+100 cycles per inner hop): "
                      "NOT met", text)


if __name__ == "__main__":
    unittest.main()
