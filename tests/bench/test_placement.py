#!/usr/bin/env python3
"""Unit tests of the loopback bench's core-placement rules (bench/virtlink_bench.py,
bench/topologies.py): which runs a figure comes from, which ratios stand (no processes,
no traffic).

    PYTHONPATH=pylib:bench python3 tests/bench/test_placement.py -v
"""
import types
import unittest

import topologies
import virtlink_bench as vb

CONFIGS = [("virtlink", "xconnect"), ("virtlink", "bridge"), ("testpmd", "io")]
HZ = 2445e6


def run(pl, mpps, cycles):
    return {"mpps": mpps, "placement": pl, "probe_cycles": [0, 0], "cycles": cycles,
            "gen_cycles": 100}


def opts_for(runs):
    return types.SimpleNamespace(gen_cycles={}, loaded=None, trial=2, tsc_hz=HZ, ring="split",
                                 queues=1, pmd_threads=1, loopback_runs=runs)


class Placement(unittest.TestCase):

    def test_probe_classification(self):
        self.assertEqual(topologies.placement(300, 450), "near")
        self.assertEqual(topologies.placement(1200, 1400), "far")
        self.assertEqual(topologies.placement(450, 1400), "changed")
        self.assertEqual(topologies.placement(topologies.NEAR_MAX_CYCLES,
                                              topologies.NEAR_MAX_CYCLES + 1), "changed")
        self.assertIsNone(topologies.placement(None, 450))

    def test_figures_from_the_placement_shared_with_the_anchor(self):
        # virtlink xconnect: near and far runs; testpmd: near and far; bridge: far only.
        runs = {
            ("virtlink", "xconnect", 64): [run("near", 12.0, 150), run("far", 4.0, 480),
                                           run("near", 13.0, 160)],
            ("virtlink", "bridge", 64): [run("far", 4.5, 500), run("changed", 9.0, 250)],
            ("testpmd", "io", 64): [run("far", 4.2, 520), run("near", 9.0, 270)],
        }
        o = opts_for(runs)
        res = vb.loopback_by_placement(runs, [64], CONFIGS, o)
        self.assertEqual(o.placement_used[("virtlink", "xconnect", 64)], "near")
        self.assertEqual(res[("virtlink", "xconnect", 64)], (12.5, [12.0, 13.0], 155))
        self.assertEqual(o.anchor_at[("virtlink", "xconnect", 64)], (9.0, [9.0], 270))
        self.assertEqual(o.placement_used[("virtlink", "bridge", 64)], "far")
        self.assertEqual(res[("virtlink", "bridge", 64)], (4.5, [4.5], 500))
        self.assertEqual(o.anchor_at[("virtlink", "bridge", 64)], (4.2, [4.2], 520))
        rows, lines = vb.loopback_table(res, [64], CONFIGS, o, "gen")
        by = {(r["switch"], r["mode"]): r for r in rows}
        self.assertAlmostEqual(by[("virtlink", "xconnect")]["cycles_ratio_to_testpmd"],
                               round(155 / 270, 3))
        self.assertAlmostEqual(by[("virtlink", "bridge")]["cycles_ratio_to_testpmd"],
                               round(500 / 520, 3))
        # Per-placement lines: xconnect near and far, bridge far only.
        at = [ln for ln in lines if ln.startswith("at ")]
        self.assertEqual(len(at), 3, at)
        self.assertTrue(any(ln.startswith("at far placement: virtlink/xconnect 64 B: 480 vs 520")
                            for ln in at), at)

    def test_no_shared_placement_no_ratio(self):
        runs = {
            ("virtlink", "xconnect", 64): [run("near", 12.0, 150)],
            ("testpmd", "io", 64): [run("far", 4.2, 520)],
        }
        o = opts_for(runs)
        res = vb.loopback_by_placement(runs, [64], CONFIGS, o)
        self.assertIsNone(o.placement_used[("virtlink", "xconnect", 64)])
        rows, lines = vb.loopback_table(res, [64], CONFIGS, o, "gen")
        xc = [r for r in rows if r["mode"] == "xconnect"][0]
        self.assertIsNone(xc["ratio_to_testpmd"])
        self.assertIsNone(xc["cycles_ratio_to_testpmd"])
        self.assertTrue(any("no run shares its core placement" in ln for ln in lines), lines)
        self.assertFalse(any(ln.startswith("at ") for ln in lines), lines)

    def test_rate_ratio_only_when_the_switch_was_busy(self):
        # 150 cycles x 12 Mpps = 74% of a 2445 MHz core: the generator set the rate.
        runs = {
            ("virtlink", "xconnect", 64): [run("near", 12.0, 150)],
            ("virtlink", "bridge", 64): [run("near", 12.0, 195)],  # 96% busy: stands
            ("testpmd", "io", 64): [run("near", 8.5, 280)],
        }
        o = opts_for(runs)
        res = vb.loopback_by_placement(runs, [64], CONFIGS, o)
        rows, _ = vb.loopback_table(res, [64], CONFIGS, o, "gen")
        by = {r["mode"]: r for r in rows}
        self.assertTrue(by["xconnect"]["lower_bound"])
        self.assertIsNone(by["xconnect"]["ratio_to_testpmd"])
        self.assertFalse(by["bridge"]["lower_bound"])
        self.assertAlmostEqual(by["bridge"]["ratio_to_testpmd"], round(12.0 / 8.5, 3))

    def test_unprobed_runs_all_count(self):
        runs = {("virtlink", "xconnect", 64): [run(None, 10.0, 200), run(None, 12.0, 180)],
                ("testpmd", "io", 64): [run(None, 8.0, 300)]}
        o = opts_for(runs)
        res = vb.loopback_by_placement(runs, [64], CONFIGS, o)
        self.assertEqual(o.placement_used[("virtlink", "xconnect", 64)], "any")
        self.assertEqual(res[("virtlink", "xconnect", 64)][1], [10.0, 12.0])


if __name__ == "__main__":
    unittest.main()
