#!/usr/bin/env python3
"""Unit tests of bench/rfc2544.py's NDR/PDR search against simulated devices with known
loss curves (no processes, no traffic).

    PYTHONPATH=pylib:bench python3 tests/bench/test_rfc2544.py -v
"""
import math
import random
import unittest

import rfc2544


def capacity_device(cap):
    """Forwards at most `cap` pps: at rate r it loses (r - cap) / r of the frames."""
    def trial(rate):
        return rfc2544.Trial(rate, max(0.0, (rate - cap) / rate))
    return trial


class Search(unittest.TestCase):

    def check(self, cap, max_rate, precision, pdr_loss=0.005):
        res = rfc2544.search(capacity_device(cap), max_rate, precision, pdr_loss=pdr_loss)
        true_ndr = min(cap, max_rate)
        true_pdr = min(cap / (1 - pdr_loss), max_rate)
        self.assertLessEqual(res.ndr, true_ndr, res.trials)
        self.assertGreaterEqual(res.ndr, true_ndr - precision, res.trials)
        self.assertLessEqual(res.pdr, true_pdr + 1e-9, res.trials)
        self.assertGreaterEqual(res.pdr, true_pdr - precision, res.trials)
        self.assertLessEqual(res.ndr, res.pdr)
        # The reported rates were measured: the trial that established each passed.
        if res.ndr > 0:
            self.assertEqual(res.ndr_trial.rate, res.ndr)
            self.assertEqual(res.ndr_trial.loss, 0)
        if res.pdr > 0:
            self.assertEqual(res.pdr_trial.rate, res.pdr)
            self.assertLessEqual(res.pdr_trial.loss, pdr_loss)
        self.assertFalse(res.ndr_gen_limited or res.pdr_gen_limited)
        return res

    def test_ndr_pdr_within_precision(self):
        for cap in (1.0e6, 2.345e6, 4.99e6, 7.77e6, 9.5e6):
            for precision in (0.02 * 10e6, 10e3):
                with self.subTest(cap=cap, precision=precision):
                    res = self.check(cap, 10e6, precision)
                    # Bisection: about log2(range / precision) trials per interval.
                    bound = 2 * (math.ceil(math.log2(10e6 / precision)) + 1) + 1
                    self.assertLessEqual(len(res.trials), bound)

    def test_pdr_threshold(self):
        res = self.check(3e6, 10e6, 5e3, pdr_loss=0.05)
        self.assertGreater(res.pdr, res.ndr + 0.1e6)  # 5% loss allowed: about 3.16 Mpps

    def test_first_trial_at_max_rate(self):
        res = self.check(20e6, 10e6, 0.2e6)
        self.assertEqual([t.rate for t in res.trials], [10e6])
        self.assertEqual(res.ndr, 10e6)
        self.assertEqual(res.pdr, 10e6)

    def test_nothing_passes(self):
        res = rfc2544.search(lambda r: rfc2544.Trial(r, 0.5), 10e6, 0.2e6)
        self.assertEqual(res.ndr, 0)
        self.assertEqual(res.pdr, 0)
        self.assertIsNone(res.ndr_trial)
        self.assertLessEqual(res.ndr_interval[1], 0.2e6)

    def test_loss_curve_with_floor(self):
        # Zero loss below X; above, loss grows slowly (a bit of loss, then a wall).
        X = 4.2e6

        def trial(r):
            return rfc2544.Trial(r, 0.0 if r <= X else min(1.0, 1e-9 * (r - X) ** 1.2))
        res = rfc2544.search(trial, 10e6, 20e3)
        self.assertTrue(X - 20e3 <= res.ndr <= X, res.trials)
        # True PDR: 1e-9 * d^1.2 = 0.005 -> d = (5e6)^(1/1.2)
        pdr = X + (0.005 / 1e-9) ** (1 / 1.2)
        self.assertTrue(pdr - 20e3 <= res.pdr <= pdr, (res.pdr, pdr))

    def test_generator_limit(self):
        # The generator cannot offer more than G: those trials are invalid (retried).
        G, cap = 3e6, 6e6
        calls = []

        def trial(r):
            calls.append(r)
            if r > G:
                return rfc2544.Trial(r, 0.0, valid=False)
            return capacity_device(cap)(r)
        res = rfc2544.search(trial, 10e6, 50e3, retries=2)
        self.assertTrue(G - 50e3 <= res.ndr <= G, res.trials)
        self.assertTrue(res.ndr_gen_limited)
        self.assertTrue(res.pdr_gen_limited)
        # Each invalid rate was tried 3 times (1 + 2 retries).
        self.assertEqual(calls.count(10e6), 3)

    def test_retry_then_valid(self):
        seen = {}

        def trial(r):
            seen[r] = seen.get(r, 0) + 1
            if seen[r] == 1:
                return rfc2544.Trial(r, 0.0, valid=False)  # first attempt at each rate stalls
            return capacity_device(5e6)(r)
        res = rfc2544.search(trial, 10e6, 0.1e6)
        self.assertTrue(4.9e6 <= res.ndr <= 5e6)
        self.assertFalse(res.ndr_gen_limited)

    def test_noise_keeps_intervals_consistent(self):
        rnd = random.Random(7)
        for _ in range(50):
            cap = rnd.uniform(1e6, 9e6)

            def trial(r, cap=cap):
                loss = max(0.0, (r - cap) / r)
                if rnd.random() < 0.2:  # sporadic loss (a preempted device) or a lucky pass
                    loss = 0.001 if loss == 0 else 0.0
                return rfc2544.Trial(r, loss)
            res = rfc2544.search(trial, 10e6, 0.1e6)
            self.assertLessEqual(res.ndr_interval[0], res.ndr_interval[1])
            self.assertLessEqual(res.pdr_interval[0], res.pdr_interval[1])
            self.assertLessEqual(res.ndr, res.pdr)
            self.assertLessEqual(len(res.trials), 40)

    def test_bad_arguments(self):
        with self.assertRaises(ValueError):
            rfc2544.search(capacity_device(1), 0, 1)
        with self.assertRaises(ValueError):
            rfc2544.search(capacity_device(1), 10, 0)


if __name__ == "__main__":
    unittest.main()
