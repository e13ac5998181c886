#!/usr/bin/env python3
"""`virtlink gen` with packed virtqueues and several queue pairs (issue 9, driver side),
against virtlink's back-end and DPDK testpmd's net_vhost. Assertions are on counters and
sequence numbers, never on wall-clock throughput. Rates are low (5 kpps per stream) and
rings 1024 deep, so that a peer's forwarding thread preempted for ~200 ms on a loaded 2-core
machine loses nothing (we assert zero loss).

  GenRings.test_packed_through_virtlink  gen --ring packed -> virtlink xconnect, then bridge
                                         -> gen --ring packed, 4 flows, payload checked: the
                                         switch reports packed vrings on both ports; no loss,
                                         no duplicate, no reordering, no corruption.
  GenRings.test_packed_testpmd_io        the same through testpmd net_vhost (io forwarding).
  GenRings.test_mq_testpmd_io            gen --queues 2 (4 flows) -> testpmd net_vhost queues=2
                                         (--rxq=2 --txq=2, io): no loss, and testpmd's per-
                                         stream counters show both queues of both ports used
                                         (frames of one stream on two queues may be reordered
                                         between them: not checked).
  GenRings.test_mq_through_virtlink      gen --queues 2 (split, then packed), 4 flows ->
                                         virtlink bridge, 2 PMD threads -> gen: no loss; the
                                         switch's per-queue counters split the stream by flow.

    PYTHONPATH=pylib:bench python3 tests/interop/test_gen_rings.py --virtlink build/virtlink [-v] [GenRings.test_...]
"""
import json
import os
import re
import subprocess
import unittest

from vltestlib import vltest
from test_gen import run_gen, GEN_CPU

_STREAM = re.compile(r"Forward Stats for RX Port=\s*(\d+)/Queue=\s*(\d+) -> "
                     r"TX Port=\s*(\d+)/Queue=\s*(\d+)")


def testpmd_streams(text):
    """{(rx port, rx queue): RX-packets} from testpmd's per-stream forward statistics."""
    out = {}
    lines = text.splitlines()
    for i, l in enumerate(lines):
        m = _STREAM.search(l)
        if m and i + 1 < len(lines):
            r = re.search(r"RX-packets:\s*(\d+)", lines[i + 1])
            if r:
                out[(int(m.group(1)), int(m.group(2)))] = int(r.group(1))
    return out


class GenRings(unittest.TestCase):

    def check_clean(self, doc, min_tx=1000, in_order=True):
        """No loss, duplicate or corruption; with `in_order`, no reordering either (with
        several queues, frames of one stream on different queues may pass each other: the
        sequence numbers are per stream, not per flow)."""
        self.assertEqual(doc["fragmented"], 0)
        self.assertEqual(doc["corrupted"], 0)
        for s in doc["streams"]:
            self.assertGreater(s["tx"], min_tx, s)
            self.assertEqual(s["tx_ring_full"], 0, s)
            self.assertEqual(s["lost"], 0, s)
            self.assertEqual(s["rx"], s["tx"], s)
            self.assertEqual(s["duplicates"], 0, s)
            if in_order:
                self.assertEqual(s["reordered"], 0, s)
            self.assertEqual(s["out_of_range"], 0, s)

    @vltest.ctest("interop_gen_packed_virtlink", timeout=60)
    def test_packed_through_virtlink(self):
        for forward in ("xconnect", "bridge"):
            with vltest.Testbed(self) as tb:
                tb.start_switch(ports=["a", "b"], forward=forward)
                out = os.path.join(tb.dir, "gen.json")
                argv = [vltest.VIRTLINK, "gen", "--port", "g0=vhost-user-client:" + tb.sock("a"),
                        "--port", "g1=vhost-user-client:" + tb.sock("b"), "--ring", "packed",
                        "--rate", "5000", "--duration", "1.5", "--size", "256", "--flows", "4",
                        "--check-payload", "--queue-size", "1024", "--cpu", GEN_CPU,
                        "--json", out]
                p = vltest.Proc("gen-" + forward, argv, tb.dir)
                tb.procs.append(p)
                tb.wait_connected(["a", "b"])
                info = tb.ports_info()
                for port in ("a", "b"):
                    self.assertEqual([v["layout"] for v in info[port]["vrings"]],
                                     ["packed", "packed"], info[port])
                p.p.wait(60)
                self.assertEqual(p.stop(), 0, p.output()[-3000:])
                with open(out) as f:
                    doc = json.load(f)
                vltest.log("%s: %s" % (forward, " | ".join(
                    l for l in p.output().splitlines() if l.startswith(("stream", "clock")))))
                self.assertEqual(doc["ring"], "packed")
                self.assertEqual(doc["queues"], 1)
                self.check_clean(doc)
                st = tb.wait_quiet()
                vltest.assert_no_corruption(self, st)
                self.assertEqual(vltest.drops_total(st), 0, vltest.fmt_stats(st))
                # Every frame of each stream (and the 4 learning frames per port) went through.
                s0, s1 = doc["streams"]
                self.assertEqual(st["a"]["rx_packets"], s0["tx"] + 4, vltest.fmt_stats(st))
                self.assertEqual(st["b"]["rx_packets"], s1["tx"] + 4, vltest.fmt_stats(st))

    def start_testpmd_vhost(self, tb, queues):
        socks = [os.path.join(tb.dir, "tp%d.sock" % i) for i in range(2)]
        args = ["--rxq=%d" % queues, "--txq=%d" % queues] if queues > 1 else []
        tp = tb.start_testpmd("io", ["net_vhost%d,iface=%s,queues=%d" % (i, s, queues)
                                     for i, s in enumerate(socks)], "io", args=args,
                              main_lcore=0, plugins=("librte_net_vhost.so",
                                                     "librte_mempool_ring.so"))
        vltest._wait(lambda: all(os.path.exists(s) for s in socks), 20, "net_vhost sockets")
        return tp, [("g0", "vhost-user-client:" + socks[0]), ("g1", "vhost-user-client:" + socks[1])]

    @vltest.ctest("interop_gen_packed_testpmd", timeout=60)
    def test_packed_testpmd_io(self):
        with vltest.Testbed(self) as tb:
            tp, ports = self.start_testpmd_vhost(tb, 1)
            doc = run_gen(tb, ports, ["--ring", "packed", "--rate", "5000", "--duration", "1",
                                      "--no-learn", "--size", "128", "--flows", "4",
                                      "--check-payload", "--queue-size", "1024"])
            self.assertEqual(doc["ring"], "packed")
            self.check_clean(doc)
            res = tb.stop_testpmd(tp)
            s0, s1 = doc["streams"]
            self.assertEqual(res["nic"][0]["RX-packets"], s0["tx"], res["nic"])
            self.assertEqual(res["nic"][1]["RX-packets"], s1["tx"], res["nic"])

    @vltest.ctest("interop_gen_mq_testpmd", timeout=60)
    def test_mq_testpmd_io(self):
        with vltest.Testbed(self) as tb:
            tp, ports = self.start_testpmd_vhost(tb, 2)
            doc = run_gen(tb, ports, ["--queues", "2", "--rate", "5000", "--duration", "1",
                                      "--no-learn", "--size", "128", "--flows", "4",
                                      "--check-payload", "--queue-size", "1024"])
            self.assertEqual(doc["queues"], 2)
            self.check_clean(doc, in_order=False)
            res = tb.stop_testpmd(tp)
            s0, s1 = doc["streams"]
            self.assertEqual(res["nic"][0]["RX-packets"], s0["tx"], res["nic"])
            self.assertEqual(res["nic"][1]["RX-packets"], s1["tx"], res["nic"])
            # Flows 0, 2 on queue 0 and 1, 3 on queue 1: each queue carried half of a stream.
            per = testpmd_streams(tp.output())
            vltest.log("testpmd per stream: %s" % per)
            for port, s in ((0, s0), (1, s1)):
                self.assertEqual(per.get((port, 0), 0) + per.get((port, 1), 0), s["tx"], per)
                self.assertEqual(per.get((port, 0), 0), s["tx"] // 2 + s["tx"] % 2, per)


    @vltest.ctest("interop_gen_mq_virtlink", timeout=60)
    def test_mq_through_virtlink(self):
        """gen --queues 2, split then packed, through virtlink's bridge with 2 PMD threads:
        no loss, duplicate or corruption; the switch's per-queue counters: queue pair 0 took
        flows 0 and 2 (and the learning frames of flows 0, 2), pair 1 flows 1 and 3."""
        for ring in ("split", "packed"):
            with vltest.Testbed(self) as tb:
                tb.start_switch(ports=["a", "b"], forward="bridge", pmd_cores="0,1")
                doc = run_gen(tb, [("g0", "vhost-user-client:" + tb.sock("a")),
                                   ("g1", "vhost-user-client:" + tb.sock("b"))],
                              ["--queues", "2", "--ring", ring, "--rate", "5000",
                               "--duration", "1", "--size", "128", "--flows", "4",
                               "--check-payload", "--queue-size", "1024"], name="gen-" + ring)
                self.assertEqual(doc["queues"], 2)
                self.assertEqual(doc["ring"], ring)
                self.check_clean(doc, in_order=False)
                st = tb.wait_quiet()
                self.assertEqual(vltest.drops_total(st), 0, vltest.fmt_stats(st))
                for port, s in (("a", doc["streams"][0]), ("b", doc["streams"][1])):
                    qs = {q["queue"]: q for q in st[port]["queues"]}
                    vltest.log("%s %s queues: %s" % (ring, port, {
                        k: (q["rx_packets"], q["tx_packets"]) for k, q in qs.items()}))
                    self.assertEqual(qs[0]["rx_packets"], (s["tx"] + 1) // 2 + 2, qs)
                    self.assertEqual(qs[1]["rx_packets"], s["tx"] // 2 + 2, qs)
                    for q in qs.values():
                        self.assertEqual(q["concurrent_entries"], 0, q)


if __name__ == "__main__":
    vltest.main()
