#!/usr/bin/env python3
"""Direct links (docs/direct-link.md): a vnf serves its neighbour's rings itself, the switch
hands over memory, rings and eventfds, and takes them back on unlink or disconnect.

Chains: gen:g0 -> [g0 | a0] -> vnf a -> [a1 | b0] -> vnf b -> ... -> [z1 | g1] -> gen:g1
(xconnect pairs in brackets). In direct mode each inner pair [x1 | y0] is a link "y0 <- x1":
vnf x serves the rings of vnf y's port 0, so only the first and last hop cross the switch.

  DirectLink.test_chain3_direct_intact   3 VNFs, both inner pairs linked: 5 kpps each way
        for 2 s with payload checks: every frame arrives once, in order, intact; the
        switch's counters on the linked ports stay 0 (no switch thread touched them) and the
        vnfs' link counters carry every frame; ctl ports/links report the links.
  DirectLink.test_link_unlink_under_traffic   2 VNFs, 30 kpps each way for 4 s while the
        link is made and revoked 4 times: the switch and vnfs keep running, the link ends
        switched, traffic flows switched afterwards, and every frame the generator sent is
        received or counted as dropped by the switch or a vnf (with the link's own drops,
        which the switch adds to the linked port on revocation).
  DirectLink.test_isolation_and_revocation   2 VNFs: only the vnf named as B maps the
        linked vnf's memory (memfd inode in /proc/PID/maps), never the generator's; after
        unlink its mappings and fd count are back to what they were before the link.
  DirectLink.test_fallback_no_capability   a vnf started with --no-direct-link: ctl link
        reports the link switched with the reason and traffic still flows.
  DirectLink.test_peer_blocks_call_fd   the linked port's front-end (a Python peer) makes its
        receive call eventfd blocking with a full counter, so the vnf's write to it blocks:
        the vnf's watchdog interrupts it within seconds (watchdog_interrupts >= 1), the vnf
        answers again and keeps forwarding the other direction.

    PYTHONPATH=pylib:bench python3 tests/interop/test_direct_link.py --virtlink build/virtlink [-v] [CASE]
"""
import json
import os
import subprocess
import time
import unittest

from vltestlib import vhost_peer, vltest

GEN_CPU = "0"


def chain_ports(n):
    """Switch ports of an n-VNF chain in xconnect pair order, and the vnfs' (port0, port1)."""
    names = [chr(ord("a") + i) for i in range(n)]
    ports = ["g0"]
    for v in names:
        ports += [v + "0", v + "1"]
    ports.append("g1")
    return ports, [(v + "0", v + "1") for v in names]


def start_chain(tb, n, vnf_args=()):
    ports, vnfs = chain_ports(n)
    tb.start_switch(ports=ports, forward="xconnect", log_level="info")
    procs = []
    for i, (p0, p1) in enumerate(vnfs):
        argv = [vltest.VIRTLINK, "--log-level", "info", "vnf", "--port",
                "vhost-user-client:" + tb.sock(p0), "--port", "vhost-user-client:" + tb.sock(p1),
                "--pmd-mode", "interrupt", "--queue-size", "1024"] + list(vnf_args[i] if vnf_args else [])
        p = vltest.Proc("vnf-" + p0[0], argv, tb.dir)
        tb.procs.append(p)
        procs.append(p)
    tb.wait_connected([p for pair in vnfs for p in pair])
    return ports, vnfs, procs


def gen_proc(tb, args, name="gen"):
    out = os.path.join(tb.dir, name + ".json")
    argv = [vltest.VIRTLINK, "gen", "--port", "g0=vhost-user-client:" + tb.sock("g0"),
            "--port", "g1=vhost-user-client:" + tb.sock("g1"), "--cpu", GEN_CPU,
            "--queue-size", "1024", "--no-learn", "--json", out] + list(args)
    p = vltest.Proc(name, argv, tb.dir)
    tb.procs.append(p)
    return p, out


def finish_gen(p, out, timeout=60):
    try:
        p.p.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    rc = p.stop()
    if rc != 0:
        raise AssertionError("gen exited with status %s:\n%s" % (rc, p.output()[-4000:]))
    with open(out) as f:
        return json.load(f)


vnf_stats = vltest.vnf_stats


def memfd_inodes(pid):
    """Inodes of the memfd mappings of a process (from /proc/PID/maps)."""
    out = set()
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5].startswith("/memfd:"):
                out.add((parts[5], parts[4]))
    return out


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def hostile_guest(tb, port):
    """A Python front-end on `port` (vltestlib.vhost_peer.Guest), negotiated; returns
    (the vhost_peer module, the Guest)."""
    return vhost_peer, vhost_peer.Guest(tb.sock(port)).negotiate()


def wait_link_state(tb, a, b, state, timeout=10):
    def ok():
        for l in tb.ctl("links"):
            if l["a"] == a and l["b"] == b:
                return l["state"] == state
        return False
    vltest._wait(ok, timeout, "link %s <- %s %s" % (a, b, state), 0.1)


class DirectLink(unittest.TestCase):

    @vltest.ctest("interop_direct_chain3_intact", timeout=60, asan=True)
    def test_chain3_direct_intact(self):
        with vltest.Testbed(self) as tb:
            ports, vnfs, procs = start_chain(tb, 3)
            for a, b in (("b0", "a1"), ("c0", "b1")):
                r = tb.ctl("link", a, b)
                self.assertEqual(r["state"], "direct", r)
            links = tb.ctl("links")
            self.assertEqual(sorted((l["a"], l["b"], l["state"]) for l in links),
                             [("b0", "a1", "direct"), ("c0", "b1", "direct")])
            info = tb.ports_info()
            self.assertEqual(info["b0"]["direct_link"], "rings served by a direct-link peer")
            self.assertEqual(info["a1"]["direct_link"], "serves a direct link")
            p, out = gen_proc(tb, ["--rate", "5000", "--duration", "2", "--size", "300",
                                   "--check-payload"])
            doc = finish_gen(p, out)
            self.assertTrue(doc["payload_checked"])
            self.assertEqual(doc["corrupted"], 0, doc)
            self.assertEqual(doc["foreign_frames"], 0, doc)
            total = 0
            for s in doc["streams"]:
                self.assertGreater(s["tx"], 2000, s)  # of 10000 planned (a loaded machine skips)
                # Every frame that entered the chain came out (a frame the switch did not
                # take from the generator's ring in time, on a loaded machine, never entered).
                self.assertEqual(s["rx"], s["tx"], s)
                self.assertEqual(s["lost"], s["tx_ring_full"], s)
                self.assertEqual(s["duplicates"], 0, s)
                self.assertEqual(s["reordered"], 0, s)
                total += s["tx"]
            st = tb.switch_stats()
            # No switch thread touched the linked pairs' rings.
            for n in ("a1", "b0", "b1", "c0"):
                self.assertEqual(st[n]["rx_packets"], 0, vltest.fmt_stats(st))
                self.assertEqual(st[n]["tx_packets"], 0, vltest.fmt_stats(st))
            # The first and last hop crossed the switch: each frame once each way.
            self.assertEqual(st["g0"]["rx_packets"] + st["g1"]["rx_packets"], total)
            # The vnfs serving links moved every frame both ways on them: g0 -> g1 frames
            # into the served port's receive queue, g1 -> g0 frames from its transmit queue.
            fwd = doc["streams"][0]["tx"] if doc["streams"][0]["tx_port"] == 0 else doc["streams"][1]["tx"]
            back = total - fwd
            for pr in procs[:2]:
                js = vnf_stats(pr)
                cur = js["direct_links"][1]
                self.assertTrue(cur["active"], js)
                self.assertEqual(cur["current"]["tx_packets"], fwd, js)
                self.assertEqual(cur["current"]["rx_packets"], back, js)
                self.assertEqual(sum(cur["current"]["drops"].values()), 0, js)
            for a, b in (("b0", "a1"), ("c0", "b1")):
                r = tb.ctl("unlink", a, b)
                self.assertEqual(r["state"], "switched", r)
            st = tb.switch_stats()
            # Revocation hands the vnfs' link counters to the switch (on the served port).
            self.assertEqual(st["b0"]["rx_packets"], back, vltest.fmt_stats(st))
            self.assertEqual(st["b0"]["tx_packets"], fwd, vltest.fmt_stats(st))
            self.assertEqual(tb.ctl("links"), [])

    @vltest.ctest("interop_direct_link_unlink_traffic", timeout=60, asan=True)
    def test_link_unlink_under_traffic(self):
        with vltest.Testbed(self) as tb:
            ports, vnfs, procs = start_chain(tb, 2)
            p, out = gen_proc(tb, ["--rate", "30000", "--duration", "4", "--size", "128",
                                   "--check-payload"])
            time.sleep(0.5)
            for i in range(4):
                r = tb.ctl("link", "b0", "a1")
                self.assertEqual(r["state"], "direct", r)
                time.sleep(0.3)
                r = tb.ctl("unlink", "b0", "a1")
                self.assertEqual(r["state"], "switched", r)
                time.sleep(0.2)
            doc = finish_gen(p, out)
            st = tb.wait_quiet()
            vs = [vnf_stats(pr) for pr in procs]
            for pr in procs:
                self.assertTrue(pr.alive(), pr.output()[-3000:])
            self.assertTrue(tb.switch.alive())
            self.assertEqual(tb.ctl("links"), [])
            self.assertEqual(doc["corrupted"], 0, doc)
            sent = sum(s["tx"] for s in doc["streams"])
            received = sum(s["rx"] for s in doc["streams"])
            switch_drops = sum(sum(p["drops"].values()) for p in st.values())
            vnf_drops = sum(pt["drop_tx_full"] + pt["drop_fragmented"]
                            for v in vs for pt in v["ports"])
            vltest.log("sent %d received %d; switch drops %d (%s); vnf drops %d; dups %d" % (
                sent, received, switch_drops, vltest.fmt_stats(st), vnf_drops,
                sum(s["duplicates"] for s in doc["streams"])))
            self.assertEqual(sum(s["duplicates"] for s in doc["streams"]), 0, doc)
            # Every frame is accounted for: received, or dropped and counted.
            self.assertEqual(sent - received, switch_drops + vnf_drops,
                             "sent %d received %d switch %s vnfs %s" % (
                                 sent, received, vltest.fmt_stats(st), vs))
            # Switched again: a second trial goes through the switch on every hop, no loss.
            before = tb.switch_stats()["b0"]["rx_packets"]
            p, out = gen_proc(tb, ["--rate", "10000", "--duration", "1", "--size", "128"],
                              name="gen2")
            doc = finish_gen(p, out)
            for s in doc["streams"]:
                self.assertEqual(s["lost"], 0, s)
            self.assertGreater(tb.switch_stats()["b0"]["rx_packets"], before)

    @vltest.ctest("interop_direct_isolation", timeout=60)
    def test_isolation_and_revocation(self):
        with vltest.Testbed(self) as tb:
            ports, vnfs, procs = start_chain(tb, 2)
            va, vb = procs
            p, out = gen_proc(tb, ["--rate", "1000", "--duration", "3", "--size", "64"])
            time.sleep(0.3)
            own_a, own_b = memfd_inodes(va.pid), memfd_inodes(vb.pid)
            gen_inodes = memfd_inodes(p.pid)
            self.assertTrue(own_a and own_b and gen_inodes)
            fds_a = fd_count(va.pid)
            r = tb.ctl("link", "b0", "a1")
            self.assertEqual(r["state"], "direct", r)
            now_a = memfd_inodes(va.pid)
            # vnf a (B of the link) maps vnf b's memory; nothing of the generator's.
            self.assertTrue(own_b <= now_a, (own_b, now_a))
            self.assertFalse(gen_inodes & now_a)
            # vnf b (not linked as B) maps nothing but its own memory.
            self.assertEqual(memfd_inodes(vb.pid), own_b)
            r = tb.ctl("unlink", "b0", "a1")
            self.assertEqual(r["state"], "switched", r)
            # Revoked: the mapping and the fds (memfd, kick, call) are gone.
            vltest._wait(lambda: memfd_inodes(va.pid) == own_a, 5, "vnf a unmapped b's memory")
            self.assertEqual(fd_count(va.pid), fds_a)
            # A link request naming a port already in a link, or an unknown port, is refused.
            with self.assertRaises(AssertionError):
                tb.ctl("link", "nosuch", "a1")
            doc = finish_gen(p, out)
            for s in doc["streams"]:
                self.assertEqual(s["duplicates"], 0, s)

    @vltest.ctest("interop_direct_fallback", timeout=60)
    def test_fallback_no_capability(self):
        with vltest.Testbed(self) as tb:
            ports, vnfs, procs = start_chain(tb, 2, vnf_args=[["--no-direct-link"], []])
            r = tb.ctl("link", "b0", "a1")
            self.assertEqual(r["state"], "switched", r)
            self.assertIn("cannot take a direct link", r["why"])
            p, out = gen_proc(tb, ["--rate", "10000", "--duration", "1", "--size", "128"])
            doc = finish_gen(p, out)
            for s in doc["streams"]:
                self.assertGreater(s["rx"], 0, s)
            # Switched: the frames crossed the switch on the inner pair.
            st = tb.switch_stats()
            self.assertGreater(st["b0"]["rx_packets"], 0)
            self.assertGreater(st["a1"]["rx_packets"], 0)
            r = tb.ctl("unlink", "b0", "a1")
            self.assertEqual(r["state"], "switched", r)


    @vltest.ctest("interop_direct_peer_blocks_call", timeout=60)
    def test_peer_blocks_call_fd(self):
        with vltest.Testbed(self) as tb:
            ports, vnfs, procs = start_chain(tb, 1)
            hp, g0 = hostile_guest(tb, "g0")
            _, g1 = hostile_guest(tb, "g1")
            try:
                tb.wait_connected(["g0", "g1"])
                r = tb.ctl("link", "g1", "a1")  # vnf a serves g1's rings
                self.assertEqual(r["state"], "direct", r)
                g0.rx.post()
                g1.rx.post()
                # The vnf makes the fds it was handed non-blocking when it starts serving
                # the link: wait for that before the peer makes them blocking again.
                vltest._wait(lambda: vnf_stats(procs[0])["direct_links"][1]["active"], 10,
                             "the vnf serving the link", 0.1)
                time.sleep(0.2)
                # g1's receive call fd: blocking, counter at its maximum. The next write the
                # vnf makes to it (after filling g1's receive ring) blocks.
                os.set_blocking(g1.call[hp.RX], True)
                os.eventfd_write(g1.call[hp.RX], 0xfffffffffffffffe)
                m0, m1 = hp.mac("02:00:00:00:00:a0"), hp.mac("02:00:00:00:00:a1")
                for i in range(4):
                    self.assertTrue(g0.tx.send_frame(hp.frame(m1, m0, b"blk%d" % i)))
                # Leave the vnf alone meanwhile: SIGUSR1 (vnf_stats) would interrupt the
                # blocked write too. The watchdog acts after 1 s without a pass.
                time.sleep(4)
                js = vnf_stats(procs[0], timeout=15)
                self.assertGreaterEqual(js["watchdog_interrupts"], 1, js)
                self.assertIsNone(procs[0].p.poll(), "the vnf exited")
                # The other direction still flows: g1 -> (link) -> vnf a -> a0 -> g0.
                for i in range(4):
                    self.assertTrue(g1.tx.send_frame(hp.frame(m0, m1, b"back%d" % i)))
                got = 0
                deadline = time.time() + 10
                while got < 4 and time.time() < deadline:
                    got += len(g0.rx.take())
                    time.sleep(0.01)
                self.assertEqual(got, 4)
            finally:
                g0.close()
                g1.close()


if __name__ == "__main__":
    vltest.main()
