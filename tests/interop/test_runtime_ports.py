#!/usr/bin/env python3
"""Ports at run time ("Run it like a service"): ctl add-port / del-port / set-port under
traffic on other ports (DPDK virtio-user peers), retries with --may-exist / --if-exists,
fds and mappings back to their baseline after a delete, 200 add/delete cycles leaving RSS,
fds and mappings flat, the --db state file across a restart (ports, settings, external ids,
links; a DPDK server=1 peer resumes on its own), corrupt, truncated and unreadable state
files refused without loss, SIGHUP reading the config again, stats-clear.

    PYTHONPATH=pylib:bench python3 tests/interop/test_runtime_ports.py --virtlink build/virtlink -v
"""
import collections
import grp
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import unittest

from vltestlib import vhost_peer
from vltestlib import vlguest
from vltestlib import vltest
from vltestlib.vltest import log


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def guest_maps(pid):
    """The switch's mappings of front-end memory (memfds, shared files), sorted: the
    allocator's own anonymous mappings come and go (an ASan build's more so)."""
    return sorted(m for m in vlguest.proc_maps(pid) if m[1] and not m[1].startswith("["))


def raw_ctl(path, cmd, argv):
    """One control request over the socket, no process per request (the 200-cycle loop);
    raises unless the switch answers ok."""
    return vhost_peer.ctl(path, cmd, timeout=10, args={"argv": argv})


def ctl_rc(tb, *args):
    r = subprocess.run([vltest.VIRTLINK, "ctl", "--control", tb.ctl_path] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


class RuntimePorts(unittest.TestCase):

    @vltest.ctest("interop_runtime_ports_under_traffic", timeout=150, asan=True)
    def test_add_delete_under_traffic(self):
        """xconnect a<->b carries the generator's paced stream (10 kpps, a rate an ASan build keeps up with; both ways counted
        by sequence) while a port comes and goes in another slot three times, each time
        with a DPDK testpmd front-end: every frame of the untouched ports is delivered (the
        generator counts no loss, the switch no drop of any reason), retries with
        --may-exist / --if-exists succeed, a name or path in use is a usage error, and the
        switch's fds and mappings return to their baseline after each delete."""
        with vltest.Testbed(self) as tb:
            tb.start_switch(ports=["a", "b"], forward="xconnect")
            pid = tb.switch.pid
            res = {}

            def traffic():
                try:
                    res["doc"] = vltest.run_gen(
                        tb, [("g0", "vhost-user-client:" + tb.sock("a")),
                             ("g1", "vhost-user-client:" + tb.sock("b"))],
                        ["--rate", "10000", "--duration", "14", "--unidirectional", "--size", "64"],
                        timeout=60)
                except Exception as e:  # reported by the main thread
                    res["error"] = e
            t = threading.Thread(target=traffic)
            t.start()
            tb.wait_counter("b", "tx_packets", 1000, timeout=30)
            # A group name looked up once before the baseline: the first lookup loads the
            # C library's name service modules (mappings that stay).
            rc, _, err = ctl_rc(tb, "set-port", "a", "socket_group=no-such-group")
            self.assertEqual(rc, 2, err)
            fds0 = vlguest.proc_fds(pid)
            maps0 = guest_maps(pid)
            for cycle in range(3):
                c = tb.sock("c")
                out = tb.ctl("add-port", "c", "vhost-user", c, "external-id:iface-id=pod%d" % cycle,
                             "flush=immediate")
                self.assertTrue(out["created"])
                self.assertEqual(out["id"], 2)
                # A retry of the same request succeeds and changes nothing.
                self.assertFalse(tb.ctl("add-port", "--may-exist", "c", "vhost-user", c)["created"])
                rc, _, err = ctl_rc(tb, "add-port", "c", "vhost-user", c)
                self.assertEqual(rc, 2, err)
                rc, _, err = ctl_rc(tb, "add-port", "d", "vhost-user", tb.sock("a"))
                self.assertEqual(rc, 2, err)
                self.assertIn("port 'a'", err)
                info = tb.ports_info()
                self.assertEqual(info["c"]["external_ids"], {"iface-id": "pod%d" % cycle})
                self.assertNotIn("d", info)
                # A front-end on c: its memory is mapped, then unmapped by the delete.
                # (Not forwarding: its lcore would busy-poll the generator's CPU.)
                fe = tb.start_testpmd("c%d" % cycle, [tb.virtio_user("c")], "rxonly", start=False)
                tb.wait_connected(["c"])
                # What c's front-end brought: its memory's mappings and the fds it handed
                # over (compared by what they are, not by count: the generator on a and b
                # may end its run meanwhile on a slow machine, and its own go then).
                maps_c = collections.Counter(guest_maps(pid)) - collections.Counter(maps0)
                fds_c = {k: v for k, v in vlguest.proc_fds(pid).items() if fds0.get(k) != v}
                self.assertTrue(maps_c, "no mapping of c's memory")
                tb.ctl("set-port", "c", "external-id:owner=test")
                self.assertEqual(tb.ports_info()["c"]["external_ids"]["owner"], "test")
                self.assertIn("  external ids: iface-id=pod%d, owner=test\n" % cycle,
                              tb.ctl("ports", json_out=False))
                # The socket's permissions change in place: the front-end stays connected.
                connects = tb.ports_info()["c"]["connects"]
                out = tb.ctl("set-port", "c", "socket_mode=0660", "socket_group=daemon")
                self.assertFalse(out["restarted"], out)
                st_c = os.stat(c)
                self.assertEqual((st_c.st_mode & 0o777, st_c.st_gid), (0o660, grp.getgrnam("daemon").gr_gid))
                info = tb.ports_info()["c"]
                self.assertEqual((info["state"], info["connects"]), ("connected", connects), info)
                rc, _, err = ctl_rc(tb, "set-port", "c", "socket_group=no-such-group")
                self.assertEqual(rc, 2, err)
                self.assertEqual(os.stat(c).st_gid, grp.getgrnam("daemon").gr_gid)
                self.assertTrue(tb.ctl("del-port", "c")["deleted"])
                self.assertFalse(os.path.exists(c), "the deleted port's socket file is left")
                self.assertFalse(tb.ctl("del-port", "--if-exists", "c")["deleted"])
                rc, _, _ = ctl_rc(tb, "del-port", "c")
                self.assertEqual(rc, 2)
                fe.stop(signal.SIGINT, timeout=10)

                def back():
                    now = vlguest.proc_fds(pid)
                    return (not (maps_c & collections.Counter(guest_maps(pid))) and
                            not any(now.get(k) == v for k, v in fds_c.items()))
                vltest._wait(back, 10, "fds and mappings back to their baseline", 0.1)
            t.join(70)
            self.assertNotIn("error", res, res.get("error"))
            s = res["doc"]["streams"][0]
            st = tb.wait_quiet()
            log("stream %s; a rx %d, b tx %d, drops %s" % ({k: s[k] for k in ("tx", "rx")},
                st["a"]["rx_packets"], st["b"]["tx_packets"], vltest.drops_by_reason(st)))
            self.assertGreater(s["tx"], 20000)
            self.assertEqual(s["rx"], s["tx"], s)
            self.assertEqual(vltest.drops_total(st), 0, vltest.drops_by_reason(st))
            self.assertEqual(st["a"]["rx_packets"], st["b"]["tx_packets"])

    @vltest.ctest("interop_runtime_ports_cycles", timeout=120)
    def test_200_cycles_flat(self):
        """200 add/delete cycles (a vhost-user server port, and a tap uplink every tenth)
        leave the switch's RSS, fds and mappings where 20 warm-up cycles left them."""
        with vltest.Testbed(self) as tb:
            tb.start_switch(ports=["a"], forward="bridge")
            pid = tb.switch.pid

            def cycle(i):
                self.assertTrue(raw_ctl(tb.ctl_path, "add-port", [
                    "p", "vhost-user", tb.sock("p"), "external-id:n=%d" % i, "mtu=2000"])["created"])
                self.assertFalse(raw_ctl(tb.ctl_path, "set-port",
                                         ["p", "mac_limit=100", "flush=rx-batch"])["restarted"])
                self.assertTrue(raw_ctl(tb.ctl_path, "del-port", ["p"])["deleted"])
            for i in range(20):
                cycle(i)
            time.sleep(0.3)
            rss0, fds0, maps0 = rss_kib(pid), len(vlguest.proc_fds(pid)), len(vlguest.proc_maps(pid))
            for i in range(200):
                cycle(i)
            time.sleep(0.3)
            rss1, fds1, maps1 = rss_kib(pid), len(vlguest.proc_fds(pid)), len(vlguest.proc_maps(pid))
            log("RSS %d -> %d KiB, fds %d -> %d, mappings %d -> %d" % (rss0, rss1, fds0, fds1, maps0, maps1))
            self.assertEqual(fds1, fds0)
            self.assertEqual(maps1, maps0)
            self.assertLess(rss1 - rss0, 2048, "RSS grew by %d KiB over 200 cycles" % (rss1 - rss0))
            self.assertEqual(sorted(tb.ports_info()), ["a"])

    @vltest.ctest("interop_runtime_ports_db_unwritable", timeout=60)
    def test_db_unwritable(self):
        """A state file that cannot be written (its directory gone): the change is made, and
        the reply and `ctl` say the state file is behind (exit status 0); once it can be
        written again the next change writes it and the warning is gone. `ctl reload`'s
        text form says what changed."""
        with vltest.Testbed(self) as tb:
            sub = os.path.join(tb.dir, "state")
            os.mkdir(sub)
            db = os.path.join(sub, "state.json")
            cfg = os.path.join(tb.dir, "switch.toml")
            with open(cfg, "w") as f:
                f.write('[[port]]\nname = "a"\npath = "%s"\n' % tb.sock("a"))
            tb.start_switch(ports=[], forward="bridge", extra=["--config", cfg, "--db", db])
            shutil.rmtree(sub)
            rc, out, err = ctl_rc(tb, "add-port", "p", "vhost-user", tb.sock("p"))
            self.assertEqual(rc, 0, err)
            self.assertIn("warning: the state file is behind", err)
            self.assertIn(db, err)
            self.assertIn("p", tb.ports_info())
            os.mkdir(sub)
            out = tb.ctl("set-port", "p", "external-id:k=v")
            self.assertNotIn("warning", out)
            with open(db) as f:
                saved = json.load(f)
            self.assertIn("p", json.dumps(saved))
            with open(cfg, "a") as f:
                f.write('[[port]]\nname = "n"\npath = "%s"\n' % tb.sock("n"))
            text = tb.ctl("reload", json_out=False)
            self.assertIn("configuration read again: added n; removed none; reopened none", text)

    @vltest.ctest("interop_runtime_ports_db", timeout=150)
    def test_restart_with_db(self):
        """--db: ports added at run time (a client port whose DPDK peer is server=1, a server
        port), their settings and external ids, a set-port of a config port, a deletion of
        a config port and a link come back after SIGTERM and the same command; the DPDK
        peer resumes without a restart. Then the config-versus-db rule, SIGHUP, and corrupt,
        truncated and unreadable state files."""
        with vlguest.GuestTestbed(self) as tb:
            db = os.path.join(tb.dir, "state.json")
            cfg = os.path.join(tb.dir, "switch.toml")
            with open(cfg, "w") as f:
                f.write('forward = "bridge"\n[[port]]\nname = "a"\npath = "%s"\n'
                        '[[port]]\nname = "k"\npath = "%s"\n' % (tb.sock("a"), tb.sock("k")))
            argv = ["--config", cfg, "--db", db]
            tb.start_switch(ports=[], extra=argv)
            self.assertTrue(os.path.exists(db))
            # A DPDK peer in server mode on a run-time client port, sending.
            tx = tb.start_testpmd("srv", [tb.virtio_user("c", server=1)], "txonly",
                                  args=["--txpkts=64"])
            tb.ctl("add-port", "c", "vhost-user-client", tb.sock("c"), "external-id:vm=one",
                   "tx_retry_us=500")
            tb.ctl("add-port", "s", "vhost-user", tb.sock("s"), "flush=interval=50", "mtu=4000")
            tb.ctl("set-port", "a", "external-id:role=config-port", "flush=immediate")
            tb.ctl("del-port", "k")
            # A client port's socket is its peer's: its permissions are not the switch's.
            rc, _, err = ctl_rc(tb, "set-port", "c", "socket_mode=0660")
            self.assertEqual(rc, 2, err)
            self.assertIn("listens", err)
            # A setting that reopens the port keeps its own flush policy.
            self.assertTrue(raw_ctl(tb.ctl_path, "set-port", ["s", "mtu=5000"])["restarted"])
            self.assertEqual(tb.switch_stats()["s"]["flush"], "interval=50")
            tb.wait_connected(["c"])
            tb.wait_counter("c", "rx_packets", 1000, timeout=30)
            tb.stop_switch()
            with open(db) as f:
                saved = json.load(f)
            self.assertEqual(saved["format"], "virtlink-state")
            tb.port_paths.pop("k", None)
            tb.start_switch(ports=[], extra=argv)
            info = tb.ports_info()
            self.assertEqual(sorted(info), ["a", "c", "k", "s"])  # the config brings k back
            self.assertIn("deleted at run time, and the config names it", tb.switch.output())
            self.assertEqual(info["c"]["type"], "vhost-user-client")
            self.assertEqual(info["c"]["external_ids"], {"vm": "one"})
            self.assertEqual(info["s"]["mtu_config"], 5000)
            self.assertEqual(info["a"]["external_ids"], {"role": "config-port"})
            st = tb.switch_stats()
            self.assertEqual(st["a"]["flush"], "immediate")
            self.assertEqual(st["s"]["flush"], "interval=50")
            self.assertEqual(st["c"]["tx_retry_us"], 500)
            tb.wait_connected(["c"])  # the server=1 peer, untouched, is back
            tb.wait_counter("c", "rx_packets", 1000, timeout=30)
            # stats-clear: the counters start again from 0 (and grow again).
            tb.ctl("stats-clear")
            self.assertLess(tb.switch_stats()["c"]["rx_packets"], 1000000)
            tb.stop_testpmd(tx)
            # SIGHUP: the config drops k and adds n; ports added at run time stay.
            with open(cfg, "w") as f:
                f.write('forward = "bridge"\n[[port]]\nname = "a"\npath = "%s"\n'
                        '[[port]]\nname = "n"\npath = "%s"\n' % (tb.sock("a"), tb.sock("n")))
            os.kill(tb.switch.pid, signal.SIGHUP)
            vltest._wait(lambda: sorted(tb.ports_info()) == ["a", "c", "n", "s"], 10,
                         "the reloaded ports", 0.1)
            self.assertTrue(tb.switch.alive())
            self.assertFalse(os.path.exists(tb.sock("k")))
            tb.stop_switch()
            # Broken state files: refused with the file's name, and left as they were.
            with open(db, "rb") as f:
                good = f.read()
            cases = {"truncated": good[:len(good) // 2],
                     "corrupt": good.replace(b'"vm": "one"', b'"vm": "two"'),
                     "garbage": b"\x00\xff not json"}
            for what, data in cases.items():
                with open(db, "wb") as f:
                    f.write(data)
                r = subprocess.run([vltest.VIRTLINK, "switch", "--control", tb.ctl_path] + argv,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
                text = r.stdout.decode(errors="replace")
                self.assertNotEqual(r.returncode, 0, what)
                self.assertIn(db, text, what)
                with open(db, "rb") as f:
                    self.assertEqual(f.read(), data, "%s: the file changed" % what)
                log("%s: %s" % (what, text.strip().splitlines()[-1]))
            os.chmod(db, 0)
            with open(db, "wb") as f:
                f.write(good)
            os.chmod(db, 0)
            if os.geteuid() != 0:  # root reads a file of mode 0 anyway
                r = subprocess.run([vltest.VIRTLINK, "switch", "--control", tb.ctl_path] + argv,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
                self.assertNotEqual(r.returncode, 0)
            # A directory in its place: unreadable for root too.
            os.chmod(db, 0o600)
            os.rename(db, db + ".good")
            os.mkdir(db)
            r = subprocess.run([vltest.VIRTLINK, "switch", "--control", tb.ctl_path] + argv,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(db, r.stdout.decode(errors="replace"))
            os.rmdir(db)
            os.rename(db + ".good", db)
            with open(db, "rb") as f:
                self.assertEqual(f.read(), good)

    @vltest.ctest("interop_runtime_ports_reload_pinned", timeout=60, asan=True)
    def test_reload_keeps_a_tunnels_underlay(self):
        """SIGHUP / ctl reload with a config that changes a setting of a vxlan tunnel's
        underlay (a tap): the underlay is not reopened behind its tunnel's back (that left
        the tunnel on the closed port, and deleting the tunnel then crashed the switch); the
        reload says it failed for that port, the tunnel is still on its underlay and can be
        deleted, and the next reload reopens the uplink."""
        if os.geteuid() != 0:
            self.skipTest("a tap device needs root")
        tap = "vlrl%d" % (os.getpid() % 100000)
        with vlguest.GuestTestbed(self) as tb:
            cfg = os.path.join(tb.dir, "switch.toml")
            base = ('forward = "bridge"\n[[port]]\nname = "a"\npath = "%s"\n'
                    '[[port]]\nname = "up"\ntype = "tap"\npath = "%s"\n%s'
                    '[[port]]\nname = "vx"\ntype = "vxlan"\n'
                    'path = "uplink=up,local=10.77.0.1,vni=7,remote=10.77.0.2"\n')
            with open(cfg, "w") as f:
                f.write(base % (tb.sock("a"), tap, ""))
            tb.start_switch(ports=[], extra=["--config", cfg])
            with open(cfg, "w") as f:
                f.write(base % (tb.sock("a"), tap, "mtu = 1400\n"))
            r = tb.ctl("reload")
            self.assertEqual(r["reopened"], [])
            self.assertEqual([x["port"] for x in r["failed"]], ["up"])
            self.assertIn("direct link or a tunnel", r["failed"][0]["error"])
            shown = {p["name"]: p for p in tb.ctl("show")["ports"]}
            self.assertEqual(shown["up"]["mtu"], 1500)
            rc, _, err = ctl_rc(tb, "del-port", "vx")
            self.assertEqual(rc, 0, err)
            self.assertTrue(tb.switch.alive())
            r = tb.ctl("reload")
            self.assertEqual(r["reopened"], ["up"])
            self.assertEqual(sorted(tb.ports_info()), ["a", "up"])


if __name__ == "__main__":
    vltest.main(default_timeout=140)
