#!/usr/bin/env python3
"""A QEMU/TCG guest with 2 queue pairs on packed rings (-netdev vhost-user,queues=2
-device virtio-net-pci,mq=on,packed=on,vectors=0: INTx interrupts, which TCG needs, serve
all queues) on a virtlink bridge, flooded traffic from a `virtlink gen` (64 flows) into it
and pings out of it on both transmit queues (XPS off, 8 flows), and the guest's
`ethtool -L eth0 combined N` twice over (hostile-inputs.md item 19):

  combined 1  queue pair 1 is disabled in `ctl stats` (QEMU peer_detach sends
              SET_VRING_ENABLE 0 for vrings 2 and 3) and its counters stop;
  combined 2  it is enabled and ready; frames reach the guest's receive queue 1 (its own
              `ethtool -S` counter, not only the switch's) and the switch takes frames from
              the guest's transmit queue 1.

The second round is the one that matters: by then queue pair 1's packed rings have moved
past slot 0, and a back-end that lost their positions across the toggle writes where the
driver no longer looks and reads where it wrote nothing.

    PYTHONPATH=pylib:bench python3 tests/interop/test_guest_mq.py --virtlink build/virtlink [-v]

Needs qemu-system-x86 and the guest image with ethtool (scripts/guest/build-guest.sh; the
ctest fixture guest_image builds it). CPUs: the switch's PMD on CPU 1, the generator on
CPU 0, QEMU unpinned (it shares both).
"""
import json
import os
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

    @staticmethod
    def guest_counters(g):
        """The guest driver's own per-queue counters (virtio_net `ethtool -S`)."""
        out = g.run("ethtool -S eth0")
        return {k.strip(): int(v) for k, v in
                (line.split(":", 1) for line in out.splitlines() if ":" in line)
                if v.strip().isdigit()}

    def combined_1(self, tb, g1, what):
        g1.run("ethtool -L eth0 combined 1")
        self.wait_enabled(tb, False)
        q = self.queues(tb)
        frozen = (q[1]["tx_packets"], q[1]["rx_packets"]) if len(q) > 1 else (0, 0)
        q0 = q[0]["tx_packets"]
        vltest._wait(lambda: self.queues(tb)[0]["tx_packets"] > q0 + 500, 30,
                     "flooded frames on vm1 queue 0 (%s)" % what, 0.2)
        q = self.queues(tb)
        log("%s: %s" % (what, json.dumps(q)))
        self.assertEqual((q[1]["tx_packets"], q[1]["rx_packets"]) if len(q) > 1 else (0, 0),
                         frozen, "queue pair 1 moved while disabled (%s)" % what)
        if len(q) > 1:
            self.assertFalse(q[1]["enabled"], q)

    def combined_2(self, tb, g1, what):
        q = self.queues(tb)
        base_tx, base_rx = q[1]["tx_packets"], q[1]["rx_packets"]
        guest_before = self.guest_counters(g1).get("rx_queue_1_packets", 0)
        g1.run("ethtool -L eth0 combined 2")
        self.wait_enabled(tb, True)
        self.assertRegex(g1.run("ethtool -l eth0"), r"(?s)Current hardware settings:.*Combined:\s+2")
        vltest._wait(lambda: self.queues(tb)[1]["tx_packets"] > base_tx + 100, 30,
                     "frames to vm1 queue 1 once enabled (%s)" % what, 0.2)
        vltest._wait(lambda: self.queues(tb)[1]["rx_packets"] > base_rx + 20, 30,
                     "frames from the guest's transmit queue 1 (%s)" % what, 0.2)
        vltest._wait(lambda: self.guest_counters(g1).get("rx_queue_1_packets", 0) > guest_before + 50,
                     30, "the guest's own rx_queue_1_packets counter moving (%s)" % what, 1.0)
        q = self.queues(tb)
        log("%s: %s" % (what, json.dumps(q)))
        self.assertEqual(q[1]["concurrent_entries"], 0)

    @vltest.ctest("qemu_multiqueue_ethtool", timeout=200, qemu=True)
    def test_ethtool_combined(self):
        with vlguest.GuestTestbed(self) as tb:
            tb.start_switch(ports=["vm1", "s1", "s2"], forward="bridge")
            g1 = tb.start_guest("g1", "vm1", IP1, mac=MAC1,
                                extra=["--queues", "2", "--extra-net-args", "packed=on"])
            vlguest.wait_all_ready([g1])
            # Pair 0 ready (pair 1 is set up but may be disabled: the guest starts with
            # min(2, vCPUs) = 1 pair).
            vltest._wait(lambda: all(v["ready"] for v in tb.ports_info()["vm1"]["vrings"][:2]),
                         20, "vm1 queue pair 0 ready", 0.2)
            info = tb.ports_info()["vm1"]
            log("vm1 vrings: %s" % json.dumps(info["vrings"]))
            names = tb.switch_stats()["vm1"]["feature_names"]
            self.assertIn("MQ", names)
            self.assertIn("RING_PACKED", names)
            self.assertEqual([v["index"] for v in info["vrings"]], [0, 1, 2, 3])
            self.assertEqual({v["layout"] for v in info["vrings"]}, {"packed"})
            out = g1.run("ethtool -l eth0")
            log("guest: ethtool -l eth0:\n%s" % out)
            self.assertRegex(out, r"(?s)Pre-set maximums:.*Combined:\s+2")

            # Flooded traffic: gen on s1 <-> s2 without learning, 64 flows, 2000 pps per
            # stream: every frame is flooded to vm1 as well.
            out = os.path.join(tb.dir, "gen.json")
            argv = [vltest.VIRTLINK, "gen", "--port", "g0=vhost-user-client:" + tb.sock("s1"),
                    "--port", "g1=vhost-user-client:" + tb.sock("s2"), "--no-learn",
                    "--rate", "2000", "--flows", "64", "--size", "128", "--duration", "90",
                    "--cpu", "0", "--json", out]
            gen = vltest.Proc("gen", argv, tb.dir)
            tb.procs.append(gen)
            # Pings out of the guest on both transmit queues: XPS off, so the driver picks
            # the queue by flow hash; 8 neighbours that do not exist (static entries), so
            # every echo request is flooded to s1 and s2 and no reply comes back.
            g1.run("for f in /sys/class/net/eth0/queues/tx-*/xps_cpus; do echo 0 > $f; done")
            g1.run("for k in 1 2 3 4 5 6 7 8; do ip neigh replace 10.0.0.$((100 + k)) "
                   "lladdr 02:00:00:00:01:0$k dev eth0; "
                   "(ping -q -i 0.05 10.0.0.$((100 + k)) > /dev/null 2>&1 &); done")

            for r in (1, 2):
                self.combined_1(tb, g1, "round %d, combined 1" % r)
                self.combined_2(tb, g1, "round %d, combined 2" % r)
            gen.stop()
            g1.run("killall ping || true", check=False)
            st = tb.wait_quiet()
            vltest.assert_no_corruption(self, st)
            self.assertEqual(st["vm1"]["tx_packets"],
                             sum(x["tx_packets"] for x in st["vm1"]["queues"]))
            # The guest is alive and its interface still works after the changes.
            self.assertIn("eth0", g1.run("ip link show eth0"))


if __name__ == "__main__":
    vlguest.main(default_timeout=170)
