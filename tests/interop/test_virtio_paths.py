#!/usr/bin/env python3
"""Every DPDK virtio-user datapath through one switch: split/packed ring x mergeable RX
buffers x in-order x vectorized (the net_virtio_user devargs packed_vq, mrg_rxbuf, in_order,
vectorized), each at 64, 1518 and 9000 B.

One switch (xconnect a <-> b and c <-> d, MTU 9000) serves the whole matrix, two
combinations at a time. For each of the 16 combinations one testpmd runs two virtio-user
ports with those devargs, one on each port of a pair, in flowgen mode (each port sends frames of the current size and counts what it
receives); the sizes follow one another in that testpmd (`set txpkts`, flowgen subtracts
the 4-byte FCS). Checked for each combination:

  * negotiation: the switch's port has RING_PACKED, IN_ORDER and MRG_RXBUF exactly as the
    devargs asked (`ctl ports` features), and testpmd logged the Rx/Tx paths DPDK 22.11
    picks for them (vectorized only where DPDK allows it: packed needs IN_ORDER and AVX-512F
    in the CPU flags, and no mergeable buffers on Rx; split never vectorizes Tx nor Rx with
    IN_ORDER); on a CPU without AVX-512F the test expects the paths DPDK falls back to and
    prints the paths it could not check there;
  * per size: every frame the switch took and delivered had exactly that size
    (rx_bytes = size x rx_packets, tx_bytes = size x tx_packets, both ports), frames flowed
    both ways, and nothing was dropped except for want of receive buffers;
  * per combination: after a final drain (rxonly), each testpmd port received exactly the
    frames and bytes the switch delivered to it, and the switch took exactly the frames
    testpmd transmitted, with no receive errors.

9000 B frames are single mbufs here (flowgen sends one segment), so receive buffers are
10 KiB and mergeable buffers are not spread; test_frame_sizes.py covers frames spread over
mergeable buffers on both ring layouts.

    PYTHONPATH=pylib:bench python3 tests/interop/test_virtio_paths.py --virtlink build/virtlink [-v]
"""
import re
import time
import unittest

from vltestlib import vltest

SIZES = (64, 1518, 9000)
# (packed_vq, mrg_rxbuf, in_order, vectorized): all 16 combinations of the devargs
COMBOS = [(p, m, i, v) for p in (0, 1) for m in (0, 1) for i in (0, 1) for v in (0, 1)]


def cpu_flags(path="/proc/cpuinfo"):
    """The CPU feature flags the kernel reports (the first processor's "flags" line)."""
    with open(path) as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def packed_vec_supported(flags):
    """Whether DPDK 22.11 can select its packed-ring vectorized paths on this CPU: x86-64
    needs AVX-512F (virtio_dev_configure disables them otherwise, whatever the devargs;
    the simd bitwidth is forced to 512 by this test and IN_ORDER is checked per combination)."""
    return "avx512f" in flags


def expected_paths(packed, mrg, in_order, vec, avx512=True):
    """(Rx path, Tx path) as DPDK 22.11's virtio PMD names them (set_rxtx_funcs), on a CPU
    with (avx512=True) or without AVX-512F."""
    if packed:
        vec_ok = vec and in_order and avx512  # and --force-max-simd-bitwidth=512
        tx = "packed ring vectorized" if vec_ok else "packed ring standard"
        if vec_ok and not mrg:
            rx = "packed ring vectorized"
        elif mrg:
            rx = "packed ring mergeable buffer"
        else:
            rx = "packed ring standard"
        return rx, tx
    tx = "inorder" if in_order else "standard"
    if vec and not in_order and not mrg:
        rx = "vectorized"
    elif in_order:
        rx = "inorder"
    elif mrg:
        rx = "mergeable buffer"
    else:
        rx = "standard"
    return rx, tx


def unavailable_paths(avx512):
    """The (Rx or Tx) paths of the matrix that DPDK cannot select on this CPU."""
    every = {expected_paths(*c) for c in COMBOS}
    here = {expected_paths(*c, avx512=avx512) for c in COMBOS}
    names = lambda pairs: {"%s Rx" % rx for rx, _ in pairs} | {"%s Tx" % tx for _, tx in pairs}
    return sorted(names(every) - names(here))


def delta(after, before, port, key):
    return after[port][key] - before[port][key]


class VirtioPaths(unittest.TestCase):

    @vltest.ctest("interop_virtio_paths", timeout=240)
    def test_matrix(self):
        # Two combinations at a time (ports a<->b and c<->d) so that one testpmd's start-up
        # overlaps the other's traffic.
        cfg = 'forward = "xconnect"\n' + "".join(
            '[[port]]\nname = "%s"\npath = "%%s"\nmtu = 9000\n' % p for p in "abcd")
        combos = COMBOS
        self.avx512 = packed_vec_supported(cpu_flags())
        missing = unavailable_paths(self.avx512)
        if missing:
            vltest.log("not available on this CPU (no avx512f; DPDK picks the standard paths "
                       "instead, and they are expected): %s" % ", ".join(missing))
        with vltest.Testbed(self) as tb:
            tb.start_switch(ports=[], forward=None,
                            config=cfg % tuple(tb.sock(p) for p in "abcd"))
            for k in range(0, len(combos), 2):
                self.run_group(tb, k, [(combos[k], ("a", "b")), (combos[k + 1], ("c", "d"))])

    def run_group(self, tb, k, group):
        before = tb.switch_stats()
        tps = []
        for j, ((packed, mrg, in_order, vec), (pa, pb)) in enumerate(group):
            name = "p%dm%di%dv%d" % (packed, mrg, in_order, vec)
            kw = dict(packed_vq=packed, mrg_rxbuf=mrg, in_order=in_order, vectorized=vec)
            n = 2 * (k + j)
            tps.append((name, tb.start_testpmd(
                name, [tb.virtio_user(pa, index=n, **kw), tb.virtio_user(pb, index=n + 1, **kw)],
                "flowgen",
                args=["--mbuf-size=10240", "--max-pkt-len=9018", "--txpkts=%d" % (SIZES[0] + 4)],
                eal_args=["--log-level=pmd.net.virtio.init:info", "--force-max-simd-bitwidth=512"],
                mem_mb=256, nb_mbufs=4096)))
        tb.wait_connected(["a", "b", "c", "d"])
        info = tb.ports_info()
        for ((packed, mrg, in_order, vec), ports), (name, _) in zip(group, tps):
            for port in ports:
                feats = int(info[port]["features"], 16)
                self.assertEqual(bool(feats >> 34 & 1), bool(packed), "%s %s RING_PACKED" % (name, port))
                self.assertEqual(bool(feats >> 35 & 1), bool(in_order), "%s %s IN_ORDER" % (name, port))
                self.assertEqual(bool(feats >> 15 & 1), bool(mrg), "%s %s MRG_RXBUF" % (name, port))
                for v in info[port]["vrings"]:
                    self.assertEqual(v["layout"], "packed" if packed else "split", name)

        for i, size in enumerate(SIZES):
            if i:
                for _, tp in tps:
                    tb.testpmd_cmd(tp, "set txpkts %d" % (size + 4), "start")
            start = tb.switch_stats()
            for p in "abcd":
                tb.wait_counter(p, "tx_packets", start[p]["tx_packets"] + 200, timeout=30)
            for _, tp in tps:
                tb.testpmd_cmd(tp, "stop")
            # Drained when the switch took every frame testpmd transmitted (its transmit
            # rings are empty), not when the counters merely paused: a switch that is not
            # scheduled for a while (ASan, a loaded machine) would look quiet too.
            self.wait_taken(tb, before, group, tps)
            st = tb.wait_quiet(stable_s=0.4)
            for (_, ports), (name, _) in zip(group, tps):
                self.check_size(name, size, ports, start, st)
        # Drain what the switch put into the receive rings after the last stop: until each
        # testpmd port received at least what the switch delivered to it (more would be a
        # duplicate, and fails below).
        for _, tp in tps:
            tb.testpmd_cmd(tp, "set fwd rxonly", "start")
        end = tb.switch_stats()
        deadline = time.monotonic() + 20
        for (_, ports), (_, tp) in zip(group, tps):
            while time.monotonic() < deadline:
                nic = tb.testpmd_port_stats(tp, 2)
                if all(nic[i]["RX-packets"] >= delta(end, before, ports[i], "tx_packets")
                       for i in (0, 1)):
                    break
                time.sleep(0.1)
        for ((packed, mrg, in_order, vec), ports), (name, tp) in zip(group, tps):
            res = tb.stop_testpmd(tp)
            text = res["text"]
            rx_path, tx_path = expected_paths(packed, mrg, in_order, vec, self.avx512)
            found = re.findall(r"virtio: using .* path on port \d", text)
            for port in (0, 1):
                self.assertIn("virtio: using %s Rx path on port %d" % (rx_path, port), text,
                              "%s: %s" % (name, found))
                self.assertIn("virtio: using %s Tx path on port %d" % (tx_path, port), text,
                              "%s: %s" % (name, found))
            vltest.log("%s: %s" % (name, sorted(set(f.rsplit(" on port", 1)[0] for f in found))))
            for port, sw in ((0, ports[0]), (1, ports[1])):
                nic = res["nic"][port]
                self.assertEqual(nic["RX-errors"], 0, name)
                for tk, sk in (("RX-packets", "tx_packets"), ("RX-bytes", "tx_bytes"),
                               ("TX-packets", "rx_packets"), ("TX-bytes", "rx_bytes")):
                    self.assertEqual(nic[tk], delta(end, before, sw, sk),
                                     "%s port %d %s: %s" % (name, port, tk, nic))

    def wait_taken(self, tb, before, group, tps, timeout=30):
        """Waits until the switch took from each port every frame its testpmd transmitted."""
        deadline = time.monotonic() + timeout
        for (_, ports), (name, tp) in zip(group, tps):
            while True:
                nic = tb.testpmd_port_stats(tp, 2)
                st = tb.switch_stats()
                taken = [delta(st, before, ports[i], "rx_packets") for i in (0, 1)]
                sent = [nic[i]["TX-packets"] for i in (0, 1)]
                if taken == sent:
                    break
                if any(t > s for t, s in zip(taken, sent)) or time.monotonic() > deadline:
                    self.fail("%s: the switch took %s frames, testpmd sent %s" % (name, taken, sent))
                time.sleep(0.05)

    def check_size(self, name, size, ports, start, st):
        vltest.log("%s %d B: %s" % (name, size, vltest.fmt_stats(
            {p: {k: (st[p][k] - start[p][k] if k != "drops" else
                     {d: st[p]["drops"][d] - start[p]["drops"][d] for d in st[p]["drops"]})
                 for k in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "drops")}
             for p in ports})))
        for p in ports:
            rxp, txp = delta(st, start, p, "rx_packets"), delta(st, start, p, "tx_packets")
            self.assertGreater(txp, 0, "%s %d B: nothing delivered to %s" % (name, size, p))
            self.assertEqual(delta(st, start, p, "rx_bytes"), size * rxp, "%s %d B %s" % (name, size, p))
            self.assertEqual(delta(st, start, p, "tx_bytes"), size * txp, "%s %d B %s" % (name, size, p))
            for k, v in st[p]["drops"].items():
                if k != "no_rx_buffer":
                    self.assertEqual(v - start[p]["drops"][k], 0,
                                     "%s %d B %s drops %s" % (name, size, p, k))


if __name__ == "__main__":
    vltest.main(default_timeout=230)
