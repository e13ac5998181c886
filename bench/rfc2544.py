"""RFC 2544 throughput search (section 26.1) for NDR and PDR, shared by every bench.

NDR (no-drop rate): the highest offered rate at which a trial loses no frame.
PDR (partial-drop rate): the highest offered rate at which a trial loses at most
`pdr_loss` of the frames it offered (0.5% by default).

Both are found by one binary search between 0 and `max_rate` that shares trials: a trial at
rate r narrows the NDR interval and the PDR interval at once (no loss: r is a lower bound
of both; loss <= pdr_loss: r is an upper bound of NDR and a lower bound of PDR; more loss:
an upper bound of both). The next trial bisects the NDR interval until it is narrower than
`precision`, then the PDR interval. The first trial is at `max_rate` (RFC 2544: start at the
maximum rate; if nothing is lost there, that is the result).

A trial function returns a Trial. A trial the generator could not run as asked (it fell
behind its schedule and offered less than the rate, `valid=False`) is repeated up to
`retries` times; if it stays invalid the rate counts as failed for both searches and the
result is marked limited by the generator when that bound is the final upper bound.

Rates are in whatever unit the caller uses (packets per second here); this module has no
I/O and is tested against a simulated device (tests/bench/test_rfc2544.py).
"""

import collections

Trial = collections.namedtuple("Trial", "rate loss valid info")
Trial.__new__.__defaults__ = (True, None)


class Result:
    """The outcome of search(): ndr, pdr (rates; 0 when even the lowest tried rate lost),
    the trial that established each, every trial in order, and whether an upper bound came
    from a generator that could not offer the rate (then the true value may be higher)."""

    def __init__(self):
        self.ndr = 0.0
        self.pdr = 0.0
        self.ndr_trial = None
        self.pdr_trial = None
        self.trials = []
        self.ndr_interval = None
        self.pdr_interval = None
        self.ndr_gen_limited = False
        self.pdr_gen_limited = False

    def __repr__(self):
        return "Result(ndr=%r, pdr=%r, trials=%d)" % (self.ndr, self.pdr, len(self.trials))


def search(trial_fn, max_rate, precision, pdr_loss=0.005, min_rate=0.0, retries=2,
           max_trials=40, progress=None):
    """Binary search for NDR and PDR in [min_rate, max_rate].

    trial_fn(rate) -> Trial(rate, loss, valid, info): `loss` is the lost fraction of the
    frames offered (0..1). `precision`: stop bisecting an interval once hi - lo <= precision
    (same unit as the rates). Returns a Result; its ndr/pdr are the highest passing rates
    (lower bounds of the intervals), so the true NDR lies in [ndr, ndr + precision] when the
    device is monotonic (no loss below some rate, loss above it). A trial only moves the
    bounds of an interval it falls in, so a noisy result (a pass above a failed rate) cannot
    make an interval inconsistent. `progress(trial, result)` is called after every trial.
    """
    if max_rate <= 0 or precision <= 0 or min_rate < 0 or min_rate >= max_rate:
        raise ValueError("need 0 <= min_rate < max_rate and precision > 0")
    res = Result()
    n_lo, n_hi, n_gen = min_rate, max_rate, False  # NDR interval; n_gen: n_hi is a generator limit
    p_lo, p_hi, p_gen = min_rate, max_rate, False  # PDR interval

    def run(rate):
        t = None
        for _ in range(retries + 1):
            t = trial_fn(rate)
            res.trials.append(t)
            if progress:
                progress(t, res)
            if t.valid or len(res.trials) >= max_trials:
                break
        return t

    rate = max_rate
    while len(res.trials) < max_trials:
        t = run(rate)
        gen = not t.valid
        ndr_ok = not gen and t.loss <= 0
        pdr_ok = not gen and t.loss <= pdr_loss
        if n_lo <= rate <= n_hi:
            if ndr_ok:
                n_lo, res.ndr, res.ndr_trial = rate, rate, t
            else:
                n_hi, n_gen = rate, gen
        if p_lo <= rate <= p_hi:
            if pdr_ok:
                p_lo, res.pdr, res.pdr_trial = rate, rate, t
            else:
                p_hi, p_gen = rate, gen
        # NDR <= PDR: what passes without loss passes with loss allowed.
        if n_lo > p_lo:
            p_lo, res.pdr, res.pdr_trial = n_lo, res.ndr, res.ndr_trial
        if p_hi < n_hi:
            n_hi, n_gen = p_hi, p_gen
        if n_hi - n_lo > precision:
            rate = (n_lo + n_hi) / 2.0
        elif p_hi - p_lo > precision:
            rate = (p_lo + p_hi) / 2.0
        else:
            break
    res.ndr_interval = (n_lo, n_hi)
    res.pdr_interval = (p_lo, p_hi)
    res.ndr_gen_limited = n_gen and res.ndr < max_rate
    res.pdr_gen_limited = p_gen and res.pdr < max_rate
    return res
