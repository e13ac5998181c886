#!/usr/bin/env python3
"""A QEMU/TCG guest with 2 queue pairs (-netdev vhost-user,queues=2 -device
virtio-net-pci,mq=on,vectors=0: INTx interrupts, which TCG needs, serve all queues) on a
virtlink bridge, and the guest's `ethtool -L eth0 combined N`:

  combined 1  queue pair 1 is disabled in `ctl stats` (QEMU peer_detach sends
              SET_VRING_ENABLE 0 for vrings 2 and 3) and gets no frames;
  combined 2  it is enabled and ready, and flooded traffic from a `virtlink gen` with 64
              flows reaches the guest's receive queue 1 (spread by flow hash);
  combined 1  disabled again: queue 1's counter stops while queue 0's keeps growing.

    PYTHONPATH=pylib:bench python3 tests/interop/test_guest_mq.py --virtlink build/virtlink [-v]

Needs qemu-system-x86 and the guest image with ethtool (scripts/guest/build-guest.sh; the
ctest fixture guest_image builds it). CPUs: the switch's PMD on CPU 1, the generator on
CPU 0, QEMU unpinned (it shares both).
"""
import json
import os
import time
import unittest

from vltestlib import vltest
from vltestlib import vlguest
from vltestlib.vltest import log

MAC1 = "52:54:00:00:00:01"
IP1 = "10.0.0.1/24"


class GuestMq(unittest.TestCase):

    def queues(self, tb):
        return tb.switch_stats()["vm1"]["queues"]

    def wait_enabled(self, tb, on, timeout=20):
        def ok():
            qs = self.queues(tb)
            q1 = qs[1] if len(qs) > 1 else None
            if on:
                return q1 is not None and q1["enabled"] and q1["rx_ready"] and q1["tx_ready"]
            return q1 is None or (not q1["rx_ready"] and not q1["tx_ready"])
        vltest._wait(ok, timeout, "vm1 queue 1 %s" % ("enabled" if on else "disabled"), 0.2)

    @vltest.ctest("qemu_multiqueue_ethtool", timeout=150, qemu=True)
    def test_ethtool_combined(self):
        with vlguest.GuestTestbed(self) as tb:
            tb.start_switch(ports=["vm1", "s1", "s2"], forward="bridge")
            g1 = tb.start_guest("g1", "vm1", IP1, mac=MAC1, extra=["--queues", "2"])
            vlguest.wait_all_ready([g1])
            # Pair 0 ready (pair 1 is set up but may be disabled: the guest starts with
            # min(2, vCPUs) = 1 pair).
            vltest._wait(lambda: all(v["ready"] for v in tb.ports_info()["vm1"]["vrings"][:2]),
                         20, "vm1 queue pair 0 ready", 0.2)
            info = tb.ports_info()["vm1"]
            log("vm1 vrings: %s" % json.dumps(info["vrings"]))
            self.assertIn("MQ", tb.switch_stats()["vm1"]["feature_names"])
            self.assertEqual([v["index"] for v in info["vrings"]], [0, 1, 2, 3])
            out = g1.run("ethtool -l eth0")
            log("guest: ethtool -l eth0:\n%s" % out)
            self.assertRegex(out, r"(?s)Pre-set maximums:.*Combined:\s+2")

            # Flooded traffic: gen on s1 <-> s2 without learning, 64 flows, 2000 pps per
            # stream: every frame is flooded to vm1 as well.
            out = os.path.join(tb.dir, "gen.json")
            argv = [vltest.VIRTLINK, "gen", "--port", "g0=vhost-user-client:" + tb.sock("s1"),
                    "--port", "g1=vhost-user-client:" + tb.sock("s2"), "--no-learn",
                    "--rate", "2000", "--flows", "64", "--size", "128", "--duration", "60",
                    "--cpu", "0", "--json", out]
            gen = vltest.Proc("gen", argv, tb.dir)
            tb.procs.append(gen)

            g1.run("ethtool -L eth0 combined 1")
            self.wait_enabled(tb, False)
            vltest._wait(lambda: self.queues(tb)[0]["tx_packets"] > 500, 30,
                         "flooded frames on vm1 queue 0", 0.2)
            q = self.queues(tb)
            base1 = q[1]["tx_packets"] if len(q) > 1 else 0
            time.sleep(1.0)
            q = self.queues(tb)
            log("combined 1: %s" % json.dumps(q))
            self.assertEqual(q[1]["tx_packets"] if len(q) > 1 else 0, base1)

            g1.run("ethtool -L eth0 combined 2")
            self.wait_enabled(tb, True)
            out2 = g1.run("ethtool -l eth0")
            self.assertRegex(out2, r"(?s)Current hardware settings:.*Combined:\s+2")
            vltest._wait(lambda: self.queues(tb)[1]["tx_packets"] > base1 + 100, 30,
                         "frames on vm1 queue 1 once enabled", 0.2)
            q = self.queues(tb)
            log("combined 2: %s" % json.dumps(q))
            self.assertEqual(q[1]["concurrent_entries"], 0)

            g1.run("ethtool -L eth0 combined 1")
            self.wait_enabled(tb, False)
            q = self.queues(tb)
            frozen1, q0 = q[1]["tx_packets"], q[0]["tx_packets"]
            vltest._wait(lambda: self.queues(tb)[0]["tx_packets"] > q0 + 500, 30,
                         "frames on vm1 queue 0 after combined 1", 0.2)
            q = self.queues(tb)
            log("combined 1 again: %s" % json.dumps(q))
            self.assertEqual(q[1]["tx_packets"], frozen1, q)
            self.assertFalse(q[1]["enabled"], q)
            gen.stop()
            st = tb.wait_quiet()
            vltest.assert_no_corruption(self, st)
            self.assertEqual(st["vm1"]["tx_packets"],
                             sum(x["tx_packets"] for x in st["vm1"]["queues"]))
            # The guest is alive and its interface still works after both changes.
            self.assertIn("eth0", g1.run("ip link show eth0"))


if __name__ == "__main__":
    vlguest.main(default_timeout=170)
