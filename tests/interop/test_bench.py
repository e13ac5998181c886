#!/usr/bin/env python3
"""The RFC 2544 harness end to end (`virtlink bench p2p`, one switch, one frame size, a
small search): it runs, prints its table, and writes bench JSON with every documented key
in every row (INTERFACES.md "Bench JSON"). Rates are not asserted (benchmarks are not
tests; the machine is shared).

    PYTHONPATH=pylib:bench python3 tests/interop/test_bench.py --virtlink build/virtlink [-v]
"""
import json
import os
import subprocess
import unittest

import report
from vltestlib import vltest

# `virtlink bench` as a user runs it: without ctest's PYTHONPATH, so bench/_pylib.py is what
# finds vltestlib.
BENCH_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


class Bench(unittest.TestCase):

    @vltest.ctest("interop_bench_p2p_schema", timeout=120)
    def test_p2p_schema(self):
        with vltest.Testbed(self) as tb:
            out = os.path.join(tb.dir, "p2p.json")
            argv = [vltest.VIRTLINK, "bench", "p2p", "--switches", "virtlink:xconnect",
                    "--frame-sizes", "64", "--trial", "0.5", "--max-mpps", "0.2",
                    "--precision", "25%", "--retries", "0", "--placement-wait", "1",
                    "--no-plot", "--json", out]
            r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, timeout=vltest.WATCHDOG_S - 10,
                               text=True, env=BENCH_ENV)
            vltest.log("bench stdout:\n" + r.stdout)
            self.assertEqual(r.returncode, 0, r.stderr[-4000:])
            self.assertIn("core plan:", r.stdout)
            self.assertRegex(r.stdout, r"virtlink\s+xconnect\s+64\s")
            self.assertRegex(r.stderr, r"trial 1 at 0\.200 Mpps")  # progress per trial
            with open(out) as f:
                doc = json.load(f)
            for k in ("command", "version", "machine", "core_plan", "rows"):
                self.assertIn(k, doc)
            self.assertTrue(doc["command"].startswith("virtlink bench p2p "), doc["command"])
            self.assertNotIn("--virtlink", doc["command"])
            self.assertEqual(len(doc["rows"]), 1, doc["rows"])
            row = doc["rows"][0]
            for k in report.ROW_KEYS:
                self.assertIn(k, row)
            self.assertEqual(row["experiment"], "p2p")
            self.assertEqual(row["topology"], "p2p")
            self.assertEqual(row["switch"], "virtlink")
            self.assertEqual(row["mode"], "xconnect")
            self.assertEqual(row["frame_size"], 64)
            self.assertEqual(row["vnfs"], 0)
            self.assertEqual(row["trial_s"], 0.5)
            self.assertIsNone(row["projected_ndr_mpps"])
            for k in ("path", "offloads", "streams", "throughput_mbps", "rtt_ns", "duration_s"):
                self.assertIsNone(row[k], k)
            self.assertIsInstance(row["ndr_mpps"], float)
            self.assertIsInstance(row["pdr_mpps"], float)
            self.assertLessEqual(row["ndr_mpps"], row["pdr_mpps"])
            self.assertLessEqual(row["pdr_mpps"], 0.2)
            trials = row["search"]["trials"]
            self.assertGreaterEqual(len(trials), 1)
            self.assertEqual(trials[0]["mpps"], 0.2)  # RFC 2544: the first trial at the maximum
            # Each trial's core placement (bench/README.md "Core placement"): probed with
            # build/bench/micro/core_to_core when it is built, else None.
            probed = os.access(os.path.join(os.path.dirname(vltest.VIRTLINK), "bench", "micro",
                                            "core_to_core"), os.X_OK)
            for t in trials:
                if probed:
                    self.assertIn(t["core_placement"], ("near", "far", "changed"), t)
                else:
                    self.assertIsNone(t["core_placement"], t)
            self.assertIsInstance(row["placement_repeats"], int)
            if probed:
                self.assertEqual(row["trials_not_near"],
                                 sum(1 for t in trials if t["core_placement"] != "near"))
            if row["latency_ns"] is not None:
                self.assertEqual(set(row["latency_ns"]),
                                 {"min", "avg", "max", "p50", "p99", "p999"})
            if row["cycles_per_packet"] is not None:
                self.assertIn("switch", row["cycles_per_packet"])

    @vltest.ctest("interop_bench_p2p_repeat", timeout=120)
    def test_p2p_repeat_reports_median_and_spread(self):
        # --repeat 3: three searches per point; the row's NDR and PDR are the medians of the
        # runs it lists, with their spread ((max - min) / median), and the table has a spread
        # column. The bench records whether the CPUs were busy before it started.
        with vltest.Testbed(self) as tb:
            out = os.path.join(tb.dir, "p2p.json")
            argv = [vltest.VIRTLINK, "bench", "p2p", "--switches", "virtlink:xconnect",
                    "--frame-sizes", "64", "--trial", "0.3", "--max-mpps", "0.1",
                    "--precision", "50%", "--retries", "0", "--latency-fraction", "0",
                    "--repeat", "3", "--placement", "any", "--no-plot", "--json", out]
            r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, timeout=vltest.WATCHDOG_S - 10,
                               text=True, env=BENCH_ENV)
            vltest.log("bench stdout:\n" + r.stdout)
            self.assertEqual(r.returncode, 0, r.stderr[-4000:])
            self.assertRegex(r.stdout, r"NDR Mpps\s+PDR Mpps\s+spread")
            self.assertEqual(r.stderr.count("repeat "), 3, r.stderr[-2000:])
            with open(out) as f:
                doc = json.load(f)
            self.assertIn("cpu_busy_before_start", doc)
            self.assertIsInstance(doc["loaded"], bool)
            row = doc["rows"][0]
            self.assertEqual(row["repeat"], 3)
            self.assertEqual(len(row["ndr_runs"]), 3)
            self.assertEqual(len(row["pdr_runs"]), 3)
            self.assertEqual(row["ndr_mpps"], round(sorted(row["ndr_runs"])[1], 4))
            self.assertEqual(row["pdr_mpps"], round(sorted(row["pdr_runs"])[1], 4))
            if row["ndr_mpps"]:
                lo, hi = min(row["ndr_runs"]), max(row["ndr_runs"])
                self.assertAlmostEqual(row["ndr_spread"], (hi - lo) / row["ndr_mpps"], places=3)
            if doc["loaded"]:
                self.assertIn("verdict: taken under load", r.stdout)

    @vltest.ctest("interop_bench_tcp_native_repeat", timeout=120)
    def test_tcp_native_repeat_writes_whole_json(self):
        # `bench tcp --paths native --repeat 2`: each run is a row with its index, and the JSON
        # is whole (the native path once wrote its iperf3 result where the index belonged, and
        # the JSON stopped there).
        with vltest.Testbed(self) as tb:
            out = os.path.join(tb.dir, "tcp.json")
            argv = [vltest.VIRTLINK, "bench", "tcp", "--paths", "native", "--seconds", "1",
                    "--streams", "1", "--offloads", "on", "--repeat", "2", "--json", out]
            r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, timeout=vltest.WATCHDOG_S - 10,
                               text=True, env=BENCH_ENV)
            vltest.log("bench stdout:\n" + r.stdout)
            self.assertEqual(r.returncode, 0, r.stderr[-4000:])
            with open(out) as f:
                doc = json.load(f)
            rows = [x for x in doc["rows"] if x["path"] == "native"]
            self.assertEqual(sorted(x["repeat"] for x in rows), [0, 1])
            for x in rows:
                self.assertGreater(x["throughput_mbps"], 0)
                self.assertGreater(x["iperf3"]["received_bytes"], 0)


if __name__ == "__main__":
    vltest.main(default_timeout=150)
