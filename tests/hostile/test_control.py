#!/usr/bin/env python3
"""Hostile-peer scenarios: the control socket against a large MAC table, a client that
does not read, and clients holding a half request or reading slowly while a front-end comes
up (docs/reference/hostile-inputs.md item 23). Ctest entry `hostile_control`
(labels hostile, and asan in a sanitizer build); the harness is tests/hostile/harness.py,
the front-end vltestlib.vhost_peer, the scenario list tests/hostile/README.md.

    PYTHONPATH=pylib:bench python3 tests/hostile/test_control.py --virtlink build-asan/virtlink \
        [-v] [Control.test_01_large_fdb_listing_holds_no_other_client]
"""
import json
import socket
import struct
import threading
import time

from harness import HostileCase, main
from vltestlib import vltest
from vltestlib.vhost_peer import (GET_FEATURES, GET_QUEUE_NUM, PROTO_MQ, PROTO_RARP,
                                  PROTO_REPLY_ACK, SEND_RARP, VERSION)

# The bound a concurrent `ctl version` or vhost-user round trip must meet while another
# client lists the MAC table or sits on its reply: generous (an ASan build on a 2-core
# machine shared with builds, where an idle round trip was seen to take 20 ms and one
# beside a listing 600 ms), against the seconds it took before (3.7 s beside a listing of
# 300,000 MACs; 6.2 s, and over 5 s, beside a client that did not read).
BOUND_S = 1.0
# MACs the listing test learns: 300,000 take 5 s to teach on an idle machine and 25 s on a
# loaded one (one SEND_RARP per control-loop turn), too long for CI; 150,000 make a 7 MB
# listing that took 2 s in one go before (so a round trip beside it waited that long).
N_LISTING = 150000


def raw_ctl(path, cmd, argv=None, read=True, timeout=30.0):
    """One request; the whole reply object (not only its result), or with read=False the
    connected socket with the request sent."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    req = {"cmd": cmd}
    if argv:
        req["args"] = {"argv": argv}
    s.sendall((json.dumps(req) + "\n").encode())
    if not read:
        return s
    chunks = []
    try:
        while True:
            c = s.recv(1 << 20)
            if not c:
                break
            chunks.append(c)
            if c.endswith(b"\n"):
                break
    finally:
        s.close()
    return json.loads(b"".join(chunks))


# =========================================================================================
# Scenarios: `ctl fdb` of hundreds of thousands of MACs, and a client that never reads.
# =========================================================================================

@vltest.ctest("hostile_control", timeout=150, asan=True)
class Control(HostileCase):
    # d: a DPDK testpmd virtio-user front-end connects there while control clients hold on.
    PORTS = ("a", "b", "c", "d")
    # 2^18 buckets of 8 for N_LISTING MACs: a bucket seldom overflows (the keyed hash is
    # random), and then a MAC or two are not learned: counts are asserted within 0.1%.
    SWITCH_ARGS = ("--mac-limit", "400000", "--mac-table-buckets", "262144")
    PROTO = PROTO_RARP | PROTO_REPLY_ACK | PROTO_MQ

    def fill(self, n):
        """Port c teaches the bridge n MACs (SEND_RARP: one message each, learned on the
        control thread like a frame's source on a PMD thread); returns c's front-end."""
        g = self.h.guest("c", protocol=self.PROTO)
        msgs = b"".join(struct.pack("<III", SEND_RARP, VERSION, 8) +
                        (0x020000000000 + i).to_bytes(6, "big") + b"\0\0" for i in range(n))
        for k in range(0, len(msgs), 20 * 4096):
            g.raw_bytes(msgs[k:k + 20 * 4096])
        g.request(GET_QUEUE_NUM, reply=True)  # every SEND_RARP before it was handled
        return g

    def worst_concurrent(self, seconds, stop=None):
        """Over `seconds` (or until stop() is true), `ctl version` and a GET_FEATURES round
        trip on the healthy port a, back to back: the worst time of each."""
        worst_ctl = worst_vhost = 0.0
        n = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end and not (stop and stop()):
            t0 = time.monotonic()
            self.assertEqual(raw_ctl(self.h.tb.ctl_path, "version", timeout=5)["ok"], True)
            t1 = time.monotonic()
            self.h.a.request(GET_FEATURES, reply=True)
            t2 = time.monotonic()
            worst_ctl, worst_vhost = max(worst_ctl, t1 - t0), max(worst_vhost, t2 - t1)
            n += 1
            time.sleep(0.01)
        return worst_ctl, worst_vhost, n

    def test_01_large_fdb_listing_holds_no_other_client(self):
        """Item 23: with N_LISTING MACs, `ctl fdb` says how many it left out (total, shown,
        truncated), `ctl fdb all` lists them all, and while it is being made and sent a
        concurrent `ctl version` and a vhost-user round trip on another port each take less
        than BOUND_S (300,000 took 4.2 s on the control thread, in one go)."""
        n = N_LISTING
        t0 = time.monotonic()
        self.fill(n)
        vltest.log("%d SEND_RARPs learned in %.1f s" % (n, time.monotonic() - t0))
        r = raw_ctl(self.h.tb.ctl_path, "fdb")
        self.assertEqual(len(r["result"]), 1000)
        self.assertEqual((r["shown"], r["truncated"]), (1000, True))
        self.assertGreaterEqual(r["total"], n * 0.999)  # c's, and a's and b's
        total = r["total"]
        done = {}

        def listing():
            t = time.monotonic()
            done["reply"] = raw_ctl(self.h.tb.ctl_path, "fdb", ["all"], timeout=60)
            done["s"] = time.monotonic() - t
        th = threading.Thread(target=listing)
        th.start()
        worst_ctl, worst_vhost, rounds = self.worst_concurrent(30, stop=lambda: "s" in done)
        th.join(60)
        vltest.log("fdb all: %d entries in %.2f s; meanwhile %d rounds, ctl version at worst "
                   "%.1f ms, GET_FEATURES at worst %.1f ms" % (
                       len(done["reply"]["result"]), done["s"], rounds, 1e3 * worst_ctl,
                       1e3 * worst_vhost))
        rep = done["reply"]
        self.assertEqual((rep["shown"], rep["truncated"]), (rep["total"], False))
        self.assertEqual(len(rep["result"]), rep["total"])
        self.assertGreaterEqual(rep["total"], n * 0.999)
        self.assertLessEqual(abs(rep["total"] - total), 2)
        self.assertGreater(rounds, 0)
        self.assertLess(worst_ctl, BOUND_S)
        self.assertLess(worst_vhost, BOUND_S)
        # One port's listing counts only its entries.
        r = raw_ctl(self.h.tb.ctl_path, "fdb", ["c"])
        self.assertEqual((len(r["result"]), r["shown"]), (1000, 1000))
        self.assertEqual({e["port"] for e in r["result"]}, {"c"})
        self.assertLessEqual(r["total"], n)
        self.assertGreaterEqual(r["total"], n * 0.999)

    def test_02_client_that_never_reads_holds_no_other(self):
        """Item 23: a client asks for `ctl fdb all` of 50,000 MACs (2.5 MB) and never reads:
        other clients and the vhost-user ports are served within BOUND_S meanwhile (they
        waited 6.2 s behind it), and it is disconnected once its socket took nothing for
        2 s (ControlServer::kDrainStallMs), counted in `ctl stats` control.dropped_slow."""
        self.fill(50000)
        before = raw_ctl(self.h.tb.ctl_path, "stats")["result"]["control"]
        slow = raw_ctl(self.h.tb.ctl_path, "fdb", ["all"], read=False)
        try:
            time.sleep(0.2)
            worst_ctl, worst_vhost, rounds = self.worst_concurrent(1.5)
            vltest.log("beside a client that does not read: %d rounds, ctl version at worst "
                       "%.1f ms, GET_FEATURES at worst %.1f ms" % (rounds, 1e3 * worst_ctl,
                                                                  1e3 * worst_vhost))
            self.assertLess(worst_ctl, BOUND_S)
            self.assertLess(worst_vhost, BOUND_S)
            deadline = time.monotonic() + 6
            while True:
                after = raw_ctl(self.h.tb.ctl_path, "stats")["result"]["control"]
                if after["dropped_slow"] > before["dropped_slow"] or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            self.assertEqual(after["dropped_slow"], before["dropped_slow"] + 1, after)
            # It gets what was buffered, then the end: far less than the 2.5 MB reply.
            slow.settimeout(2)
            got = 0
            try:
                while True:
                    c = slow.recv(1 << 20)
                    if not c:
                        break
                    got += len(c)
            except (ConnectionResetError, socket.timeout):
                pass
            self.assertLess(got, 2 << 20)
        finally:
            slow.close()

    def test_03_held_request_and_slow_reader_hold_no_client_nor_frontend(self):
        """Item 23 with two clients holding on at once: one sent half a request line and
        waits, one reads a `ctl fdb all` of 50,000 MACs slowly (64 KiB every 50 ms, well
        inside the 2 s drain deadline). Meanwhile `ctl version` and a vhost-user round trip
        each take less than BOUND_S, a DPDK virtio-user front-end connecting to port d comes
        up (connected, vrings ready), the slow reader gets its whole listing, and the half
        request is dropped at its budget (control.dropped_idle), both by the switch's own
        counters."""
        self.fill(50000)
        path = self.h.tb.ctl_path
        before = raw_ctl(path, "stats")["result"]["control"]
        half = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        half.connect(path)
        half.sendall(b'{"cmd": "sta')  # no end of line: the request is never complete
        slow = raw_ctl(path, "fdb", ["all"], read=False)
        got = {"bytes": bytearray(), "done": False}

        def read_slowly():
            try:
                while True:
                    c = slow.recv(64 << 10)
                    if not c:
                        break
                    got["bytes"] += c
                    if c.endswith(b"\n"):
                        break
                    time.sleep(0.05)
            finally:
                got["done"] = True
        reader = threading.Thread(target=read_slowly)
        reader.start()
        pmd = None
        try:
            t0 = time.monotonic()
            pmd = self.h.tb.start_testpmd("d", vdevs=[self.h.tb.virtio_user("d")], fwd="rxonly")
            worst_ctl, worst_vhost, rounds = self.worst_concurrent(1.0)
            self.h.tb.wait_connected(["d"], timeout=30)
            up_s = time.monotonic() - t0
            holding = not got["done"]
            worst2 = self.worst_concurrent(0.5)
            worst_ctl, worst_vhost = max(worst_ctl, worst2[0]), max(worst_vhost, worst2[1])
            vltest.log("beside a half request and a slow reader: %d rounds, ctl version at worst "
                       "%.1f ms, GET_FEATURES at worst %.1f ms; testpmd on d up in %.1f s "
                       "(the reader still reading then: %s)" % (
                           rounds + worst2[2], 1e3 * worst_ctl, 1e3 * worst_vhost, up_s, holding))
            self.assertTrue(holding, "the slow reader finished before the front-end came up: "
                                     "the test did not test the overlap")
            self.assertLess(worst_ctl, BOUND_S)
            self.assertLess(worst_vhost, BOUND_S)
            reader.join(60)
            rep = json.loads(bytes(got["bytes"]))
            self.assertEqual((rep["shown"], rep["truncated"]), (rep["total"], False))
            self.assertEqual(len(rep["result"]), rep["total"])
            self.assertGreaterEqual(rep["total"], 50000 * 0.999)
            self.assertEqual(rep["switch"], {"control": path, "pid": self.h.pid})
            # The half request is dropped at its budget (3 s from connecting), counted.
            deadline = time.monotonic() + 10
            while True:
                after = raw_ctl(path, "stats")["result"]["control"]
                if after["dropped_idle"] > before["dropped_idle"] or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            self.assertEqual(after["dropped_idle"], before["dropped_idle"] + 1, after)
            self.assertEqual(after["dropped_slow"], before["dropped_slow"], after)
            self.assertGreaterEqual(after["streamed"], before["streamed"] + 1, after)
            half.settimeout(2)
            self.assertEqual(half.recv(100), b"")  # closed without a reply
        finally:
            half.close()
            slow.close()
            reader.join(10)
            if pmd is not None:
                self.h.tb.stop_testpmd(pmd)


if __name__ == "__main__":
    main()
