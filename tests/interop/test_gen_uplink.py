#!/usr/bin/env python3
"""`virtlink gen` on uplink port types: the generator behind veths, in a network namespace
of its own (bench/topologies.py VethLinks), through virtlink's switch and back. Assertions
are on counters, never on rates.

  GenUplink.test_af_packet_both_ways  gen g0, g1 = af-packet on two veths -> virtlink
                                      xconnect of two af-packet uplinks: 5 kpps each way for
                                      1 s, no loss, no duplicates; the gen's wire counters,
                                      the switch's port counters and the kernel's agree.
  GenUplink.test_af_xdp_to_vhost      P2V: gen g0 = af-xdp on a veth -> virtlink af-xdp
                                      uplink -> vhost-user port -> gen g1 (vhost-user
                                      client), one way: every frame the gen's wire sent is
                                      received or counted dropped where it was (the veth,
                                      the switch's AF_XDP socket, the switch), the JSON's
                                      ports say what each port is.
  GenUplink.test_dpdk_af_xdp_p2v      P2V with DPDK's net_af_xdp on both ends: gen g0 =
                                      dpdk:net_af_xdp0,iface=PEER (EAL in the generator)
                                      -> virtlink dpdk: uplink of the default queue size ->
                                      vhost-user port -> gen g1: frames cross and are
                                      counted (rx + lost == offered), the ports say dpdk.
  GenUplink.test_bench_p2v_uplink     `virtlink bench p2v --uplink af-packet` in its
                                      quickest form: bench JSON with every documented key,
                                      the uplink recorded, something measured.
  GenUplink.test_readme_recipe        the README's generator-behind-an-uplink recipe (section
                                      "Traffic generator and VNF"), run as printed.

    PYTHONPATH=pylib:bench python3 tests/interop/test_gen_uplink.py --virtlink build/virtlink [-v]
"""
import json
import os
import signal
import subprocess
import unittest

import report
import topologies
from vltestlib import vltest

BENCH_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def run_gen(tb, links, ports, args, timeout=60):
    """Runs `virtlink gen` once in the links' namespace with `ports` [(name, spec)] and
    returns its JSON."""
    return vltest.run_gen(tb, ports, args, timeout=timeout, netns=links.ns)


def link_counter(dev, name, ns=None):
    """/sys/class/net/DEV/statistics/NAME (in namespace `ns`)."""
    argv = (["ip", "netns", "exec", ns] if ns else []) + [
        "cat", "/sys/class/net/%s/statistics/%s" % (dev, name)]
    return int(subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=True).stdout)


class GenUplink(unittest.TestCase):

    def check_clean_stream(self, s, lossless=True):
        self.assertGreater(s["offered"], 0, s)
        self.assertEqual(s["tx_refused"], 0, s)
        self.assertEqual(s["tx_ring_full"], 0, s)
        self.assertEqual(s["offered"], s["tx"], s)
        self.assertEqual(s["rx"] + s["lost"], s["offered"], s)
        if lossless:
            self.assertEqual(s["lost"], 0, s)
        self.assertGreater(s["rx"], 0, s)
        self.assertEqual(s["duplicates"], 0, s)
        lat = s["latency_ns"]
        self.assertGreater(lat["min"], 0, lat)
        self.assertLessEqual(lat["min"], lat["avg"])
        self.assertLessEqual(lat["avg"], lat["max"])

    @vltest.ctest("interop_gen_uplink_af_packet", timeout=60, asan=True)
    def test_af_packet_both_ways(self):
        with topologies.VethLinks(["u0", "u1"]) as links, vltest.Testbed(self) as tb:
            tb.start_switch(ports=["u0=af-packet:" + links.sw("u0"),
                                   "u1=af-packet:" + links.sw("u1")], forward="xconnect")
            vltest._wait(lambda: all(p["state"] == "connected"
                                     for p in tb.switch_stats().values()), 10, "uplinks up")
            doc = run_gen(tb, links, [("g0", "af-packet:" + links.gen("u0")),
                                      ("g1", "af-packet:" + links.gen("u1"))],
                          ["--rate", "5000", "--duration", "1", "--size", "128"])
            self.assertEqual(len(doc["streams"]), 2)
            for s in doc["streams"]:
                self.check_clean_stream(s)
            ports = {p["name"]: p for p in doc["ports"]}
            for n, u in (("g0", "u0"), ("g1", "u1")):
                self.assertEqual(ports[n]["type"], "af-packet")
                self.assertEqual(ports[n]["target"], links.gen(u))
                self.assertEqual(ports[n]["wire_tx_refused"], 0)
                self.assertIsInstance(ports[n]["device"], dict)
            st = tb.wait_quiet()
            # Every frame the generator's wires took (learning frames included) reached the
            # switch's uplink on that veth, and the other way round; nothing dropped.
            self.assertEqual(st["u0"]["rx_packets"], ports["g0"]["wire_tx_packets"])
            self.assertEqual(st["u1"]["rx_packets"], ports["g1"]["wire_tx_packets"])
            self.assertEqual(ports["g1"]["wire_rx_packets"], st["u1"]["tx_packets"])
            self.assertEqual(ports["g0"]["wire_rx_packets"], st["u0"]["tx_packets"])
            self.assertEqual(vltest.drops_total(st), 0, vltest.fmt_stats(st))
            for n in ("g0", "g1"):
                self.assertEqual(ports[n]["device"].get("kernel_rx_dropped", 0), 0, ports[n])

    @vltest.ctest("interop_gen_uplink_af_xdp_p2v", timeout=60)
    def test_af_xdp_to_vhost(self):
        with topologies.VethLinks(["u0"]) as links, vltest.Testbed(self) as tb:
            tb.start_switch(ports=["u0=af-xdp:" + links.sw("u0"), "g1"], forward="xconnect")
            doc = run_gen(tb, links, [("g0", "af-xdp:" + links.gen("u0")),
                                      ("g1", "vhost-user-client:" + tb.sock("g1"))],
                          ["--rate", "20000", "--duration", "1", "--unidirectional"])
            self.assertEqual(len(doc["streams"]), 1)
            s = doc["streams"][0]
            self.assertEqual((s["tx_port"], s["rx_port"]), (0, 1))
            # Not lossless on a loaded machine: a PMD thread kept off its CPU for longer
            # than the AF_XDP ring holds (2048 frames, 0.1 s here) loses frames at the
            # socket. Where each frame went is asserted below.
            self.check_clean_stream(s, lossless=False)
            ports = {p["name"]: p for p in doc["ports"]}
            # af-xdp, or af-packet where XDP cannot attach (the wire says which it is).
            self.assertIn(ports["g0"]["type"], ("af-xdp", "af-packet"))
            self.assertEqual(ports["g1"]["type"], "vhost-user-client")
            self.assertIsNone(ports["g1"]["wire_tx_packets"])
            self.assertIsNone(ports["g1"]["device"])
            self.assertEqual(doc["ring"], "split")
            st = tb.wait_quiet()
            self.assertIn(st["u0"]["type"], ("af-xdp", "af-packet"))
            # The gen's wire -> the veth (drops: its tx_dropped, the peer's rx_dropped) ->
            # the switch's socket (rx_dropped: AF_XDP, kernel_rx_dropped: a packet socket)
            # -> the switch (its drops) -> g1, where the gen counted them.
            dev = st["u0"]["uplink"]["device"]
            kernel = dev.get("rx_dropped", 0) + dev.get("kernel_rx_dropped", 0)
            veth = link_counter(links.gen("u0"), "tx_dropped", links.ns) + \
                link_counter(links.sw("u0"), "rx_dropped")
            self.assertEqual(st["u0"]["rx_packets"] + kernel + veth,
                             ports["g0"]["wire_tx_packets"], (dev, veth))
            self.assertEqual(st["g1"]["tx_packets"] + vltest.drops_total(st),
                             st["u0"]["rx_packets"], vltest.fmt_stats(st))
            self.assertEqual(vltest.drops_total(st), st["g1"]["drops"]["no_rx_buffer"])
            self.assertGreaterEqual(st["g1"]["tx_packets"], s["rx"])
            # g1 also got g0's learning frame (taken and dropped before the trial).
            self.assertLessEqual(st["g1"]["tx_packets"] - s["rx"], 1)

    @vltest.ctest("interop_gen_uplink_dpdk_p2v", timeout=60)
    def test_dpdk_af_xdp_p2v(self):
        with topologies.VethLinks(["u0"]) as links, vltest.Testbed(self) as tb:
            tb.start_switch(ports=["u0=dpdk:net_af_xdp0,iface=" + links.sw("u0"), "g1"],
                            forward="xconnect")
            vltest._wait(lambda: tb.switch_stats()["u0"]["state"] == "connected", 15,
                         "the dpdk uplink's link up")
            doc = run_gen(tb, links, [("g0", "dpdk:net_af_xdp0,iface=" + links.gen("u0")),
                                      ("g1", "vhost-user-client:" + tb.sock("g1"))],
                          ["--rate", "10000", "--duration", "1", "--unidirectional"])
            s = doc["streams"][0]
            self.check_clean_stream(s, lossless=False)
            ports = {p["name"]: p for p in doc["ports"]}
            self.assertEqual(ports["g0"]["type"], "dpdk")
            self.assertEqual(ports["g0"]["target"], "net_af_xdp0,iface=" + links.gen("u0"))
            self.assertGreaterEqual(ports["g0"]["wire_tx_packets"], s["tx"])
            self.assertIn("eth_tx_packets", ports["g0"]["device"])
            st = tb.wait_quiet()
            self.assertEqual(st["u0"]["type"], "dpdk")
            self.assertGreaterEqual(st["g1"]["tx_packets"], s["rx"])
            self.assertEqual(st["g1"]["tx_packets"] + vltest.drops_total(st),
                             st["u0"]["rx_packets"], vltest.fmt_stats(st))

    @vltest.ctest("interop_bench_p2v_uplink", timeout=90)
    def test_bench_p2v_uplink(self):
        with vltest.Testbed(self) as tb:
            out = os.path.join(tb.dir, "p2v.json")
            argv = [vltest.VIRTLINK, "bench", "p2v", "--uplink", "af-packet", "--switches",
                    "virtlink:xconnect", "--frame-sizes", "64", "--trial", "0.5",
                    "--max-mpps", "0.05", "--precision", "25%", "--retries", "0",
                    "--placement", "any", "--latency-fraction", "0", "--no-plot",
                    "--json", out]
            r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, timeout=vltest.WATCHDOG_S - 10,
                               text=True, env=BENCH_ENV)
            vltest.log("bench stdout:\n" + r.stdout)
            self.assertEqual(r.returncode, 0, r.stderr[-4000:])
            self.assertRegex(r.stdout, r"virtlink\s+xconnect\s+64\s")
            self.assertIn("cyc/f@max", r.stdout)  # the cycles table of the uplink benches
            self.assertIn("a veth pair per uplink", r.stdout)  # the core plan says so
            with open(out) as f:
                doc = json.load(f)
            self.assertTrue(doc["command"].startswith("virtlink bench p2v --uplink af-packet"))
            self.assertEqual(len(doc["rows"]), 1, doc["rows"])
            row = doc["rows"][0]
            for k in report.ROW_KEYS:
                self.assertIn(k, row)
            self.assertEqual((row["experiment"], row["topology"], row["switch"], row["mode"]),
                             ("p2v", "p2v", "virtlink", "xconnect"))
            self.assertEqual(row["uplink"], "af-packet")
            self.assertEqual(row["gen_wire"], "af-xdp")
            self.assertEqual(row["streams"], 1)
            self.assertEqual(row["vnfs"], 0)
            trials = row["search"]["trials"]
            self.assertEqual(trials[0]["mpps"], 0.05)
            # Measured: frames crossed (a trial offered its rate) and the switch counted its
            # cycles.
            self.assertGreater(max(t["offered_mpps"] for t in trials), 0)
            self.assertIsInstance(row["ndr_mpps"], float)
            self.assertLessEqual(row["ndr_mpps"], row["pdr_mpps"])
            if row["ndr_mpps"]:
                self.assertIn("switch", row["cycles_per_packet"])
            up = doc["diagnostics"]["virtlink/xconnect"]["uplinks"]["u0"]
            self.assertEqual(up["type"], "af-packet")
            self.assertGreater(up["wire_rx_packets"], 0)
        # The namespace and its veths are gone.
        ns = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE, text=True).stdout
        self.assertNotIn("vlb-", ns)

    @vltest.ctest("readme_gen_uplink_recipe", timeout=60)
    def test_readme_recipe(self):
        # The switch's and the generator's recipes, as printed: the switch in a namespace
        # with veth0, the generator in another with veth1 (its peer).
        sw_cmd = vltest.readme_command("virtlink switch --port up=af-xdp:veth0")
        gen_cmd = vltest.readme_command("virtlink gen --port p=af-xdp:veth1")
        vltest.log("README commands:\n  %s\n  %s" % (sw_cmd, gen_cmd))
        env = dict(os.environ, PATH=os.path.dirname(vltest.VIRTLINK) + ":" + os.environ["PATH"])
        ns_sw, ns_gen = "vlrs%d" % os.getpid(), "vlrg%d" % os.getpid()
        sw = None
        tmp = None
        try:
            for n in (ns_sw, ns_gen):
                subprocess.run(["ip", "netns", "add", n], check=True)
            subprocess.run(["ip", "-n", ns_sw, "link", "add", "veth0", "type", "veth", "peer",
                            "name", "veth1", "netns", ns_gen], check=True)
            for n, dev in ((ns_sw, "veth0"), (ns_gen, "veth1")):
                subprocess.run(["ip", "netns", "exec", n, "sysctl", "-qw",
                                "net.ipv6.conf.%s.disable_ipv6=1" % dev], check=True)
                subprocess.run(["ip", "-n", n, "link", "set", dev, "up"], check=True)
            # The recipe's fixed paths are shared with the other README recipes.
            with vltest.readme_paths(("/tmp/vm1.sock", "/tmp/virtlink.ctl")), \
                    vltest.Testbed(self) as tb:
                tmp = tb.dir
                sw = subprocess.Popen(["ip", "netns", "exec", ns_sw, "sh", "-c", "exec " + sw_cmd],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True)
                ctl = "/tmp/virtlink.ctl"

                def up():
                    if sw.poll() is not None:
                        raise AssertionError("the switch exited: " + sw.stdout.read())
                    r = subprocess.run([vltest.VIRTLINK, "ctl", "--control", ctl, "stats",
                                        "--json"], stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True)
                    # Its own uplink (the recipe's paths are fixed: another switch on
                    # /tmp/virtlink.ctl would answer too; this one then exits, above).
                    return r.returncode == 0 and any(
                        p["name"] == "up" and p["path"] == "veth0" and
                        p["state"] == "connected" for p in json.loads(r.stdout)["ports"])
                vltest._wait(up, 15, "the README switch's uplink")
                g = subprocess.run(["ip", "netns", "exec", ns_gen, "sh", "-c", gen_cmd],
                                   env=env, cwd=tmp, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True,
                                   timeout=vltest.WATCHDOG_S - 20)
                vltest.log("gen output:\n" + g.stdout[-3000:])
                self.assertEqual(g.returncode, 0, g.stdout[-3000:])
                with open(os.path.join(tmp, "p2v.json")) as f:
                    doc = json.load(f)
                s = doc["streams"][0]
                self.assertGreater(s["rx"], 0, s)
                self.assertEqual(s["rx"] + s["lost"], s["offered"], s)
                st = json.loads(subprocess.run([vltest.VIRTLINK, "ctl", "--control", ctl,
                                                "stats", "--json"], stdout=subprocess.PIPE,
                                               text=True, check=True).stdout)
                by = {p["name"]: p for p in st["ports"]}
                self.assertGreaterEqual(by["vm1"]["tx_packets"], s["rx"])
        finally:
            if sw is not None:
                sw.send_signal(signal.SIGTERM)
                try:
                    out, _ = sw.communicate(timeout=10)
                except subprocess.TimeoutExpired:
                    sw.kill()
                    out, _ = sw.communicate()
                vltest.log("switch output:\n" + out[-3000:])
            for n in (ns_sw, ns_gen):
                subprocess.run(["ip", "netns", "del", n], stderr=subprocess.DEVNULL)
        self.assertEqual(sw.returncode, 0)


if __name__ == "__main__":
    vltest.main(default_timeout=90)
