#!/usr/bin/env python3
"""Hostile-peer scenarios: the MAC table in a table of one bucket. Ctest entry
`hostile_mactable` (labels hostile, and asan in a sanitizer build); the harness is
tests/hostile/harness.py, the front-end vltestlib.vhost_peer, the scenario list
tests/hostile/README.md.

    PYTHONPATH=pylib:bench python3 tests/hostile/test_mactable.py --virtlink build-asan/virtlink \
        [-v] [MacTable.test_01_flood_does_not_evict_fresh_entries]
"""
import random
import time

from harness import (MAC_A, MAC_B, MAC_D, HostileCase, main)
from vltestlib import vltest
from vltestlib.vhost_peer import (frame, mac_str)


# =========================================================================================
# Scenarios: the MAC table under attack, in a table of one bucket (8 entries) where every
# MAC collides whatever the hash key: no port evicts another port's fresh entry, one port
# cannot keep a bucket against a newcomer, and a port's share of the table is capped.
# =========================================================================================

@vltest.ctest("hostile_mactable", timeout=60, asan=True)
class MacTable(HostileCase):
    PORTS = ("a", "b", "c", "d")
    SWITCH_ARGS = ("--mac-table-buckets", "1", "--mac-limit", "6")

    def fdb(self):
        return {e["mac"]: e["port"] for e in self.h.ctl("fdb")}

    def assertNotLeaked(self, g, dmac, what):
        self.h.b.tx.send_frame(frame(dmac, MAC_B, b"SECRET " + what))
        self.assertTrue(self.h.b.tx.wait_done(3))
        time.sleep(0.3)
        leaked = [f for f in g.rx.take() if b"SECRET" in f]
        self.assertEqual(leaked, [], "unicast for %s was flooded to the attacker" % what.decode())

    def test_01_flood_does_not_evict_fresh_entries(self):
        """c sends 40 frames from 40 source MACs into the full bucket: a and b (seen within
        the last seconds) keep their entries; c churns its own; unicast to a stays unicast."""
        self.h.check_healthy()  # a and b seen now
        g = self.h.guest("c")
        g.rx.post()
        rnd = random.Random(7)
        for _ in range(40):
            m = ((rnd.getrandbits(48) & ~(1 << 40)) | (2 << 40)).to_bytes(6, "big")
            g.tx.send_frame(frame(m, m, b"evict"))
            self.assertTrue(g.tx.wait_done(3))
        t = self.fdb()
        self.assertEqual(t.get(mac_str(MAC_A)), "a", t)
        self.assertEqual(t.get(mac_str(MAC_B)), "b", t)
        self.assertLessEqual(sum(1 for p in t.values() if p == "c"), 6, t)
        self.assertNotLeaked(g, MAC_A, b"a")

    def test_02_full_bucket_yields_to_a_newcomer(self):
        """c fills every free entry of the bucket; d then appears: it is learned (c holds more
        than half the bucket, so c's oldest entry makes room), and unicast to d reaches only d."""
        self.h.check_healthy()
        g = self.h.guest("c")
        g.rx.post()
        for i in range(10):
            m = bytes([2, 0, 0, 0, 0xc0, i])
            g.tx.send_frame(frame(m, m, b"fill"))
            self.assertTrue(g.tx.wait_done(3))
        d = self.h.guest("d")
        d.rx.post()
        self.h.learn(d, MAC_D)
        t = self.fdb()
        self.assertEqual(t.get(mac_str(MAC_D)), "d", t)
        self.assertEqual(t.get(mac_str(MAC_A)), "a", t)
        self.assertNotLeaked(g, MAC_D, b"d")


if __name__ == "__main__":
    main()
