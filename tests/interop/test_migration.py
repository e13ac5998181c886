#!/usr/bin/env python3
"""Live migration of a QEMU guest between two virtlink ports (label `qemu`).

Guest A runs on port p1 in QEMU #1; QEMU #2 starts on port p2 with `-incoming unix:PATH`
and the same MAC; guest B on p3. B pings A and sends A 10 MiB (paced, so that it runs
across the migration) while QEMU #1 migrates A to QEMU #2 over QMP (`migrate unix:PATH`).
Asserts: the migration completes; A answers pings after it on p2 (the bridge learned A's
MAC there: the guest announced itself, VIRTIO_NET_F_GUEST_ANNOUNCE, since QEMU does not send
SEND_RARP when the guest negotiated it); the 10 MiB arrive in A with B's md5sum (every page
virtlink wrote into A's receive buffers during the migration was marked dirty and sent
again, or the TCP stream would be corrupt); virtlink's dirty-log counter of p1 moved.

    PYTHONPATH=pylib:bench python3 tests/interop/test_migration.py --virtlink build/virtlink -v
"""

import json
import os
import socket
import time
import unittest

from vltestlib import vlguest, vltest
from vltestlib.vltest import log

IP_A, IP_B = "10.0.0.1/24", "10.0.0.2/24"
MAC_A, MAC_B = "52:54:00:00:00:0a", "52:54:00:00:00:0b"
XFER_PORT = 5001
XFER_CHUNKS = 160  # x 64 KiB = 10 MiB
PING_COUNT = 150   # at 0.2 s: 30 s, longer than the transfer and the migration


class Qmp:
    """A minimal QMP client on a unix socket (QEMU listens)."""

    def __init__(self, path, timeout=20):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.s.connect(path)
                break
            except OSError:
                self.s.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.s.settimeout(timeout)
        self.buf = b""
        self.events = []
        self._read()  # greeting
        self.cmd("qmp_capabilities")

    def _read(self):
        while b"\n" not in self.buf:
            d = self.s.recv(65536)
            if not d:
                raise AssertionError("QMP connection closed")
            self.buf += d
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def cmd(self, name, **args):
        msg = {"execute": name}
        if args:
            msg["arguments"] = args
        self.s.sendall(json.dumps(msg).encode() + b"\n")
        while True:
            r = self._read()
            if "event" in r:
                self.events.append(r)
                continue
            if "error" in r:
                raise AssertionError("QMP %s: %s" % (name, r["error"]))
            return r.get("return")

    def close(self):
        self.s.close()


class Migration(unittest.TestCase):
    def start(self, tb, net_args=None):
        """The switch (p1, p2, p3), guest A on p1 and B on p3 (booted), and the destination
        QEMU on p2, waiting. Returns (a, b, a2, q1, q2, migration URI)."""
        tb.start_switch(ports=["p1", "p2", "p3"], forward="bridge")
        mig = "unix:" + os.path.join(tb.dir, "mig.sock")
        qmp1, qmp2 = os.path.join(tb.dir, "qmp1.sock"), os.path.join(tb.dir, "qmp2.sock")
        net = ["--extra-net-args", net_args] if net_args else []
        a = tb.start_guest("ga", "p1", IP_A, mac=MAC_A, extra=["--qmp", qmp1] + net)
        b = tb.start_guest("gb", "p3", IP_B, mac=MAC_B)
        vlguest.wait_all_ready([a, b])
        # The destination: the same machine and guest options as A's (same --name, --ip,
        # --mac), its own console, QMP and vhost-user port.
        a2 = tb.start_guest("ga-dst", "p2", IP_A, mac=MAC_A,
                            extra=["--name", "ga", "--qmp", qmp2, "--incoming", mig] + net)
        tb.wait_connected(["p1", "p3"])
        tb.wait_state("p2", ["connected"])  # its rings start when the migration ends
        q1, q2 = Qmp(qmp1), Qmp(qmp2)
        self.assertEqual(q2.cmd("query-status")["status"], "inmigrate")
        return a, b, a2, q1, q2, mig

    def migrate(self, q1, q2, mig):
        """Migrates QEMU #1 to QEMU #2; returns query-migrate's final answer once the
        destination runs."""
        q1.cmd("migrate-set-parameters", **{"max-bandwidth": 4 << 30, "downtime-limit": 300})
        t0 = time.monotonic()
        q1.cmd("migrate", uri=mig)
        while True:
            info = q1.cmd("query-migrate")
            st = info.get("status")
            if st in ("completed", "failed", "cancelled"):
                break
            self.assertLess(time.monotonic() - t0, 60, "migration not done in 60 s: %s" % info)
            time.sleep(0.2)
        t_mig = time.monotonic() - t0
        self.assertEqual(st, "completed", info)
        log("migration: %.1f s, QEMU says total %s ms, downtime %s ms, %s" %
            (t_mig, info.get("total-time"), info.get("downtime"),
             {k: info.get("ram", {}).get(k) for k in ("transferred", "dirty-sync-count",
                                                      "normal", "duplicate")}))
        deadline = time.monotonic() + 20
        while q2.cmd("query-status")["status"] != "running":
            self.assertLess(time.monotonic(), deadline, "destination not running")
            time.sleep(0.1)
        return info

    @vltest.ctest("qemu_migration", timeout=170, qemu=True)
    def test_migrate_under_traffic(self):
        with vlguest.GuestTestbed(self) as tb:
            a, b, a2, q1, q2, mig = self.start(tb)

            # B: 10 MiB of random bytes and a server that sends them paced (64 KiB every
            # 50 ms plus the guest's own time), so the transfer runs across the migration.
            tx = b.run("dd if=/dev/urandom of=/tmp/tx bs=65536 count=%d 2>/dev/null && "
                       "md5sum /tmp/tx && wc -c </tmp/tx" % XFER_CHUNKS, timeout=60)
            tx_sum, tx_len = tx.split()[0], int(tx.split()[-1])
            b.run("printf 'i=0; while [ $i -lt %d ]; do dd if=/tmp/tx bs=65536 skip=$i count=1 "
                  "2>/dev/null; i=$((i+1)); sleep 0.05; done\\n' >/tmp/pace.sh" % XFER_CHUNKS)
            b.run("nc -l -p %d -e sh /tmp/pace.sh >/dev/null 2>&1 &" % XFER_PORT)
            listening = "grep -q ':%04X 0*:0000 0A' /proc/net/tcp /proc/net/tcp6" % XFER_PORT
            b.run("i=0; while [ $i -lt 100 ] && ! %s; do i=$((i+1)); sleep 0.1; done; %s" %
                  (listening, listening))
            b.run("ping -i 0.2 -c %d %s >/tmp/ping.txt 2>&1 &" % (PING_COUNT, a.addr))
            a.run("nc %s %d </dev/null >/tmp/rx 2>/dev/null &" % (b.addr, XFER_PORT))
            time.sleep(2)  # the transfer and the pings are under way
            got0 = int(a.run("wc -c </tmp/rx").split()[-1])
            self.assertGreater(got0, 0, "the transfer did not start")
            self.assertLess(got0, tx_len, "the transfer ended before the migration")

            self.migrate(q1, q2, mig)
            # QEMU reports the destination running before the switch has read the device
            # start it sent (its vhost-user messages and this ctl request race): up to 5 s.
            deadline = time.monotonic() + 5
            st1 = tb.switch_stats()
            while ("GUEST_ANNOUNCE" not in st1["p2"]["feature_names"] and
                   time.monotonic() < deadline):
                time.sleep(0.05)
                st1 = tb.switch_stats()
            dirty = st1["p1"]["migration"]["dirty_pages_logged"]
            log("p1 migration counters: %s" % st1["p1"]["migration"])
            self.assertIn("GUEST_ANNOUNCE", st1["p2"]["feature_names"])
            q1.cmd("quit")
            q1.close()

            # A on the destination: the transfer was still running when the migration ended
            # (so virtlink wrote A's buffers during it), and completes with B's checksum.
            got1 = int(a2.run("wc -c </tmp/rx", timeout=30).split()[-1])
            log("received by A: %d B before the migration, %d B when it ended" % (got0, got1))
            self.assertLess(got1, tx_len, "the transfer ended before the migration did")
            rx = a2.run("wait; md5sum /tmp/rx && wc -c </tmp/rx", timeout=90)
            rx_sum, rx_len = rx.split()[0], int(rx.split()[-1])
            log("transfer gb -> ga across the migration: sent %d B md5 %s, received %d B md5 %s"
                % (tx_len, tx_sum, rx_len, rx_sum))
            self.assertEqual(tx_len, XFER_CHUNKS * 65536)
            self.assertEqual((rx_len, rx_sum), (tx_len, tx_sum), "the file arrived changed")

            # Pings: every one after the migration answered (by A on p2).
            b.run("wait", timeout=60)
            out = b.run("cat /tmp/ping.txt")
            p = vlguest.parse_ping(out)
            seqs = p["seqs"]
            lost = sorted(set(range(1, PING_COUNT + 1)) - set(seqs))
            log("ping gb -> ga across the migration: %s; lost icmp_seq %s" %
                (vlguest.fmt_ping(p), lost))
            self.assertIn(PING_COUNT, seqs, "the last ping was not answered")
            self.assertLessEqual(len(lost), 25, "more than 5 s of pings lost: %s" % lost)
            st = tb.switch_stats()
            fdb = tb.fdb()
            log("fdb: %s; p2 %s" % (fdb, {k: st["p2"][k] for k in ("rx_packets", "tx_packets")}))
            self.assertEqual(fdb.get(MAC_A), "p2", "the bridge did not learn A's new port")
            self.assertGreater(st["p2"]["tx_packets"], 0)
            # The rings alone are a few pages per dirty-log sync (3-4 syncs); the receive
            # buffers delivered during the migration add more, how many depends on how much
            # of the transfer falls inside the logging window (about 300 once; 23, 41 and 77
            # in runs on 2026-12-03, when 64 failed half the runs; 3-4 when deliver_frame's
            # marking was disabled as a control, a case the md5 does not catch: the guest
            # drops the stale frames and TCP sends them again).
            self.assertGreater(dirty, 16, "receive buffers not marked in the dirty log")
            q2.close()

    @vltest.ctest("qemu_migration_rarp", timeout=170, qemu=True)
    def test_migrate_send_rarp(self):
        """The guest without GUEST_ANNOUNCE (virtio-net guest_announce=off): QEMU announces
        it with SEND_RARP on the destination's connection, and the bridge learns its MAC on
        p2 from that; B's pings (started before the migration) resume."""
        with vlguest.GuestTestbed(self) as tb:
            a, b, a2, q1, q2, mig = self.start(tb, net_args="guest_announce=off")
            b.run("ping -i 0.2 -c 60 %s >/tmp/ping.txt 2>&1 &" % a.addr)
            time.sleep(1)
            self.migrate(q1, q2, mig)
            q1.cmd("quit")
            q1.close()
            st = tb.switch_stats()
            self.assertNotIn("GUEST_ANNOUNCE", st["p2"]["feature_names"])
            vltest_wait = time.monotonic() + 10
            while tb.fdb().get(MAC_A) != "p2":
                self.assertLess(time.monotonic(), vltest_wait, "A's MAC not on p2: %s" % tb.fdb())
                time.sleep(0.1)
            self.assertIn("SEND_RARP for %s: learned on this port" % MAC_A, tb.switch.output())
            b.run("wait", timeout=60)
            p = vlguest.parse_ping(b.run("cat /tmp/ping.txt"))
            lost = sorted(set(range(1, 61)) - set(p["seqs"]))
            log("ping gb -> ga across the migration (SEND_RARP): %s; lost icmp_seq %s" %
                (vlguest.fmt_ping(p), lost))
            self.assertIn(60, p["seqs"], "the last ping was not answered")
            self.assertLessEqual(len(lost), 25, lost)
            q2.close()


if __name__ == "__main__":
    vlguest.main(default_timeout=170)
