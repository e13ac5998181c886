#!/usr/bin/env python3
"""`virtlink ctl` as a service's operator uses it (issue "Run it like a service", items 6
and 7): `ctl show`, `--json` on every command, the switch that answered named in every reply,
`ctl log-level` and `--log-level` after the subcommand, a client port's last connect error,
and the per-port rates of `ctl stats` checked against the switch's own samples under
traffic from DPDK testpmd.

    PYTHONPATH=pylib:bench python3 tests/interop/test_ctl.py --virtlink build/virtlink -v [Ctl.test_...]
"""
import json
import os
import re
import socket
import subprocess
import time
import unittest

from vltestlib import vltest


def raw_stats(path):
    """`stats` over the control socket itself (a few ms, where `virtlink ctl` takes tens)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    s.sendall(b'{"cmd": "stats"}\n')
    buf = b""
    while not buf.endswith(b"\n"):
        c = s.recv(1 << 20)
        if not c:
            break
        buf += c
    s.close()
    return json.loads(buf)["result"]


def ctl_commands():
    """The commands `virtlink ctl --help` lists (its footer, from the command table)."""
    out = subprocess.run([vltest.VIRTLINK, "ctl", "--help"], stdout=subprocess.PIPE,
                         check=True, timeout=10).stdout.decode()
    cmds = out.split("Commands:\n", 1)[1]
    return [line.split()[0] for line in cmds.splitlines() if line.startswith("  ")]


class Ctl(unittest.TestCase):

    @vltest.ctest("interop_ctl_show_json_identity", timeout=60)
    def test_show_json_on_every_command_and_who_answered(self):
        """Every command of the table takes --json and prints JSON (the result, as before:
        no wrapper); the text output ends with "(switch PID at PATH)", the PID the switch's;
        `ctl show` gives the switch, each port with its settings and a client port's last
        connect error, in text and in JSON; `ctl ports` has that error too."""
        with vltest.Testbed(self) as tb:
            missing = os.path.join(tb.dir, "nobody-listens.sock")
            tb.start_switch(ports=["a", "b", "c=vhost-user-client:" + missing],
                            forward="bridge", extra=["--flush", "b:interval=30",
                                                     "--port-set", "a:vlan=10"])
            pid = tb.switch.pid
            argv_of = {"set-flush": ["a", "immediate"], "link": ["a", "b"],
                       "unlink": ["a", "b"], "log-level": ["info"], "fdb": ["all"],
                       # each runs twice (--json, then text): the retry flags make that so
                       "add-port": ["--may-exist", "d", "vhost-user", tb.sock("d")],
                       "del-port": ["--if-exists", "d"], "set-port": ["a", "external-id:k=v"],
                       # (a second of nothing: no traffic here; mirrors: not with VLANs, off is)
                       "capture": ["a", "both", "--duration", "1", "--file", os.path.join(tb.dir, "c.pcap")],
                       "mirror": ["a", "off"],
                       "trace": ["a", "ffffffffffff020000000001" + "88b5" + "00" * 46]}

            cmds = ctl_commands()
            self.assertIn("show", cmds)
            self.assertIn("log-level", cmds)
            footer = "(switch %d at %s)" % (pid, tb.ctl_path)
            for cmd in cmds:
                args = [cmd] + argv_of.get(cmd, [])
                if cmd == "upgrade":  # twice, through the testbed: the switch's pid changes
                    ok, j = tb.upgrade()
                    self.assertTrue(ok, j)
                    ok, text = tb.upgrade(json_out=False)
                    self.assertTrue(ok, text)
                    self.assertRegex(text, r"^upgraded: pid %d \(.*\) handed over to pid %d "
                                     % (j["pid"], tb.switch.pid))
                    pid = tb.switch.pid  # the footer names the switch now at the path
                    footer = "(switch %d at %s)" % (pid, tb.ctl_path)
                else:
                    j = tb.ctl(*args)  # --json: fails unless exit 0 and valid JSON
                    if cmd == "unlink":
                        tb.ctl("link", "a", "b")  # again, for the text run
                    text = tb.ctl(*args, json_out=False)
                self.assertIsInstance(j, (dict, list), cmd)
                self.assertEqual(text.rstrip("\n").splitlines()[-1], footer, cmd)
                self.assertNotIn('"switch": {"control"', text, cmd)
            # stats --json stays INTERFACES.md's object: ports at the top, no wrapper.
            st = tb.ctl("stats")
            self.assertEqual(sorted(p["name"] for p in st["ports"]), ["a", "b", "c"])
            self.assertNotIn("result", st)
            # show, JSON
            show = tb.ctl("show")
            sw = show["switch"]
            self.assertEqual((sw["pid"], sw["control"], sw["forward"], sw["pmd_mode"]),
                             (pid, tb.ctl_path, "bridge", "poll"))
            self.assertEqual(sw["version"], tb.ctl("version")["version"])
            self.assertEqual([t["cpu"] for t in sw["pmds"]], [1])
            ports = {p["name"]: p for p in show["ports"]}
            self.assertEqual(ports["a"]["type"], "vhost-user")
            self.assertEqual(ports["a"]["target"], tb.sock("a"))
            self.assertEqual(ports["a"]["vlan"], {"mode": "access", "vlan": 10})
            self.assertEqual(ports["b"]["flush"], "interval=30")
            self.assertEqual(ports["a"]["flush"], "immediate")  # set-flush above
            self.assertEqual(ports["c"]["type"], "vhost-user-client")
            self.assertEqual(ports["c"]["state"], "waiting")
            for p in ports.values():
                for k in ("state", "mtu", "queues", "vlan", "flush", "direct_link", "link"):
                    self.assertIn(k, p, p["name"])
            # The client port's last connect error: in ports and show, JSON and text.
            vltest._wait(lambda: tb.ports_info()["c"]["last_connect_error"] is not None, 5,
                         "a failed connect of port c")
            err = tb.ports_info()["c"]["last_connect_error"]
            self.assertEqual((err["errno"], err["error"]), (2, "No such file or directory"))
            self.assertRegex(err["at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
            self.assertGreaterEqual(err["failures"], 1)
            self.assertLess(err["age_s"], 5)
            self.assertNotIn("last_connect_error", tb.ports_info()["a"])  # a server port
            self.assertEqual(tb.ctl("show")["ports"][2]["last_connect_error"]["errno"], 2)
            text = tb.ctl("ports", json_out=False)
            self.assertRegex(text, r"\n  last connect error: No such file or directory \(errno 2\) "
                                   r"at \S+Z, \d+ s ago; \d+ failed attempt")
            text = tb.ctl("show", json_out=False)
            self.assertTrue(text.startswith("virtlink %s (pid %d), control %s\n" % (
                sw["version"], pid, tb.ctl_path)), text)
            self.assertIn("  pmd 0 cpu 1:", text)
            self.assertIn("  port a: vhost-user %s, waiting" % tb.sock("a"), text)
            self.assertIn("access VLAN 10", text)
            self.assertIn("flush interval=30", text)
            self.assertIn("    last connect error: No such file or directory", text)
            # A link shows its partner on both ports (switched: nobody serves it).
            tb.ctl("link", "a", "b")
            ports = {p["name"]: p for p in tb.ctl("show")["ports"]}
            self.assertEqual(ports["a"]["link"], {"peer": "b", "serves": False, "state": "switched"})
            self.assertEqual(ports["b"]["link"], {"peer": "a", "serves": True, "state": "switched"})
            self.assertIn("direct link with b", tb.ctl("show", json_out=False))
            # Once the peer listens, the port connects; the error stays, its count restarts.
            srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            srv.bind(missing)
            srv.listen(1)
            try:
                vltest._wait(lambda: tb.ports_info()["c"]["connects"] >= 1, 5, "port c connected")
                err = tb.ports_info()["c"]["last_connect_error"]
                self.assertEqual((err["errno"], err["failures"]), (2, 0))
            finally:
                srv.close()

    @vltest.ctest("interop_ctl_log_level", timeout=60)
    def test_log_level_after_the_subcommand_and_at_run_time(self):
        """`virtlink switch --log-level debug ...` (after the subcommand) sets the level as
        before it does; `ctl log-level LEVEL` changes it at run time (the switch's log says
        so when the new level shows info); a level not of the six is a usage error (exit 2)
        and changes nothing."""
        with vltest.Testbed(self) as tb:
            argv = [vltest.VIRTLINK, "switch", "--log-level", "debug", "--port",
                    "a=vhost-user:" + tb.sock("a"), "--control", tb.ctl_path]
            tb.switch = vltest.Proc("switch", argv, tb.dir)
            tb.procs.append(tb.switch)
            vltest._wait(lambda: os.path.exists(tb.ctl_path), 15, "the control socket")
            self.assertEqual(tb.ctl("log-level"), {"log_level": "debug"})
            self.assertEqual(tb.ctl("log-level", "warn"), {"log_level": "warn", "previous": "debug"})
            self.assertEqual(tb.ctl("log-level", json_out=False).splitlines()[0], "log level warn")
            for bad in ("verbose", "warning"):
                r = subprocess.run([vltest.VIRTLINK, "ctl", "--control", tb.ctl_path,
                                    "log-level", bad], stderr=subprocess.PIPE,
                                   stdout=subprocess.PIPE, timeout=10)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("usage: log-level", r.stderr.decode())
            self.assertEqual(tb.ctl("log-level"), {"log_level": "warn"})
            tb.ctl("log-level", "info")
            vltest._wait(lambda: "log level set to info (was warn)" in tb.switch.output(), 5,
                         "the switch's log line")
            self.assertNotIn("log level set to warn", tb.switch.output())  # at warn: not shown

    @vltest.ctest("interop_ctl_rates", timeout=90)
    def test_rates_are_the_sampled_deltas_over_the_sampled_interval(self):
        """Under traffic (testpmd txonly on a -> switch -> rxonly on b), each port's rx_pps,
        tx_pps, rx_bps, tx_bps is the difference of the switch's two last samples of its
        counters (rate_counters) over the interval between them (rates.interval_ns, the
        switch's own clock); each sample lies between the counters of the replies made
        before and after it; the rates are positive while traffic flows and 0 two ticks
        after it stopped; the text table has the columns."""
        with vltest.Testbed(self) as tb:
            tb.start_switch(ports=["a", "b"], forward="xconnect")
            replies = []

            def during(tb):
                end = time.monotonic() + 3.5
                while time.monotonic() < end:
                    replies.append(raw_stats(tb.ctl_path))
                    time.sleep(0.05)
                text = tb.ctl("stats", json_out=False)
                self.assertRegex(text.splitlines()[0], r"RX_PPS +RX_BPS +TX_PPS +TX_BPS$")
            vltest.one_way(tb, "a", "b", traffic_s=0.5, during=during)
            checked = 0
            for prev, cur in zip(replies, replies[1:]):
                s0, s1 = prev["rates"]["sampled_ns"], cur["rates"]["sampled_ns"]
                if s1 == s0:
                    continue
                ns = cur["rates"]["interval_ns"]
                self.assertGreater(ns, 0)
                self.assertGreater(s1, s0)
                consecutive = s1 - ns == s0  # prev holds the sample this interval starts at
                for p0, p1 in zip(prev["ports"], cur["ports"]):
                    at = p1["rate_counters"]
                    for k in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes"):
                        # The sample was taken after prev was made and before cur was.
                        self.assertLessEqual(p0[k], at[k], (p1["name"], k))
                        self.assertLessEqual(at[k], p1[k], (p1["name"], k))
                    if not consecutive:
                        continue
                    base = p0["rate_counters"]
                    for rate, k, scale in (("rx_pps", "rx_packets", 1), ("tx_pps", "tx_packets", 1),
                                           ("rx_bps", "rx_bytes", 8), ("tx_bps", "tx_bytes", 8)):
                        want = scale * (at[k] - base[k]) * 1e9 / ns
                        self.assertAlmostEqual(p1[rate], want, delta=1e-6 * max(1.0, want),
                                               msg=(p1["name"], rate))
                    checked += 1
            vltest.log("%d replies, %d port intervals checked" % (len(replies), checked))
            self.assertGreaterEqual(checked, 2 * 2)  # two ports, at least two intervals
            busy = [r for r in replies if r["ports"][0]["rx_pps"] > 0]
            self.assertTrue(busy, "no rate while traffic flowed")
            self.assertTrue(any(r["ports"][1]["tx_bps"] > 0 for r in busy))
            # Traffic stopped (one_way drained it): two ticks later every rate is 0.
            first = raw_stats(tb.ctl_path)["rates"]["sampled_ns"]
            vltest._wait(lambda: raw_stats(tb.ctl_path)["rates"]["sampled_ns"] >= first + 1.5e9,
                         10, "two more samples")
            for p in raw_stats(tb.ctl_path)["ports"]:
                for k in ("rx_pps", "tx_pps", "rx_bps", "tx_bps"):
                    self.assertEqual(p[k], 0, (p["name"], k))


if __name__ == "__main__":
    vltest.main(default_timeout=170)
