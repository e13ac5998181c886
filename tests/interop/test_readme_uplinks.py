#!/usr/bin/env python3
"""The README's uplink recipes, run as printed (sections "Uplinks", "VXLAN" and "VLANs"): each
`virtlink switch` command is taken from README.md verbatim and run, with `virtlink` on the
PATH, in a private network namespace that has the interfaces it names (veth pairs); the
switch must start, show every port open and carry a ping across an af-packet port, and
exit 0 on SIGTERM.

    PYTHONPATH=pylib:bench python3 tests/interop/test_readme_uplinks.py --virtlink build/virtlink [-v]
"""
import json
import os
import re
import signal
import subprocess
import time
import unittest

from vltestlib import netns, vltest



class ReadmeUplinks(unittest.TestCase):

    def run_recipe(self, start, ifaces, ctl, checks):
        """Runs README command `start` in a namespace with veth pairs IFACE<->pK (the peer
        ends in a second namespace, p0 with 10.77.0.2/24; vltestlib.netns), then
        `checks(ctl_json, peer_ns, switch_ns, ctl)`. Its fixed paths (the control socket,
        /tmp/vm1.sock) are shared with the other README recipes: vltest.readme_paths()."""
        with vltest.readme_paths((ctl, "/tmp/vm1.sock")):
            self._run_recipe(start, ifaces, ctl, checks)

    def _run_recipe(self, start, ifaces, ctl, checks):
        cmd = vltest.readme_command(start)
        vltest.log(f"README command: {cmd}")
        env = dict(os.environ, PATH=os.path.dirname(os.path.abspath(vltest.VIRTLINK)) + ":" +
                   os.environ.get("PATH", ""))
        lab = netns.Lab("rd")
        proc = None
        try:
            ns, peer = lab.netns("d"), lab.netns("p")
            for k, i in enumerate(ifaces):
                lab.veth(i, ns, f"p{k}", peer)
                # Each peer end in a namespace of its own would be truer; one is enough for
                # the ports to open and a ping to cross one of them.
                if k == 0:
                    peer.addr(f"p{k}", "10.77.0.2/24")
            proc = subprocess.Popen(ns.argv("sh", "-c", "exec " + cmd),
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)
            stats = None
            for _ in range(100):
                r = subprocess.run([vltest.VIRTLINK, "ctl", "--control", ctl, "stats", "--json"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                if r.returncode == 0:
                    stats = json.loads(r.stdout)
                    if all(p["state"] == "connected" for p in stats["ports"]
                           if p["type"] not in ("vhost-user", "vhost-user-client")):
                        break
                if proc.poll() is not None:
                    break
                time.sleep(0.1)
            self.assertIsNotNone(stats, "the switch did not answer: " + (proc.stdout.read() if proc.poll() is not None else ""))
            checks(stats, peer, ns, ctl)
        finally:
            try:
                if proc:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        out, _ = proc.communicate(timeout=10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        out, _ = proc.communicate()
                    vltest.log("switch output:\n" + out[-4000:])
                    self.assertEqual(proc.returncode, 0, out[-2000:])
            finally:
                lab.close()

    @vltest.ctest("readme_uplinks_recipe", timeout=60)
    def test_uplinks(self):
        def checks(stats, peer, ns, ctl):
            by = {p["name"]: p for p in stats["ports"]}
            self.assertEqual(by["up"]["type"], "af-packet")
            self.assertEqual(by["up"]["state"], "connected")
            self.assertEqual(by["host"]["type"], "tap")
            self.assertEqual(by["host"]["state"], "connected")
            self.assertEqual(by["vm1"]["type"], "vhost-user")
            # The host's stack through the tap, the peer through eth1: one L2 segment.
            ns.addr("vl-host", "10.77.0.1/24")
            r = ns.run("ping", "-c", "3", "-i", "0.2", "-W", "2", "10.77.0.2", check=False)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            after = json.loads(subprocess.run([vltest.VIRTLINK, "ctl", "--control", ctl, "stats",
                                               "--json"], stdout=subprocess.PIPE, text=True,
                                              check=True).stdout)
            a = {p["name"]: p for p in after["ports"]}
            self.assertGreaterEqual(a["up"]["tx_packets"], 3)
            self.assertGreaterEqual(a["host"]["rx_packets"], 3)
        self.run_recipe("virtlink switch --port vm1=vhost-user:/tmp/vm1.sock --port up=af-packet:eth1",
                        ["eth1"], "/tmp/virtlink.ctl", checks)

    @vltest.ctest("readme_vlans_recipe", timeout=60)
    def test_vlans(self):
        ctl = "/run/virtlink/virtlink.ctl"  # the recipe gives no --control: the default

        def checks(stats, peer, ns, ctl_path):
            by = {p["name"]: p for p in stats["ports"]}
            for n in ("t10", "t20", "up"):
                self.assertEqual(by[n]["state"], "connected", n)
            # A broadcast from the peer of veth10 (access VLAN 10) leaves eth1 (a trunk)
            # tagged 10 and never reaches veth20 (VLAN 20).
            peer.run("ping", "-c", "2", "-i", "0.2", "-W", "1", "-b", "10.77.0.255", check=False)
            after = json.loads(subprocess.run([vltest.VIRTLINK, "ctl", "--control", ctl_path,
                                               "stats", "--json"], stdout=subprocess.PIPE,
                                              text=True, check=True).stdout)
            a = {p["name"]: p for p in after["ports"]}
            self.assertGreaterEqual(a["t10"]["rx_packets"], 2)
            self.assertGreaterEqual(a["up"]["tx_packets"], a["t10"]["rx_packets"])
            self.assertEqual(a["t20"]["tx_packets"], 0)
        self.run_recipe("virtlink switch --port t10=af-packet:veth10", ["veth10", "veth20", "eth1"],
                        ctl, checks)

    @vltest.ctest("readme_vxlan_recipe", timeout=60)
    def test_vxlan(self):
        def checks(stats, peer, ns, ctl_path):
            by = {p["name"]: p for p in stats["ports"]}
            self.assertEqual(by["vx"]["type"], "vxlan")
            self.assertEqual(by["vx"]["state"], "connected")
            # The far end: Linux's own VTEP at 10.77.0.2 on eth1's peer, 10.88.0.2 inside.
            peer.ip("link", "add", "vx0", "type", "vxlan", "id", "100", "dstport", "4789", "local",
                    "10.77.0.2", "remote", "10.77.0.1", "dev", "p0")
            peer.addr("vx0", "10.88.0.2/24")
            peer.up("vx0")
            ns.addr("vl-host", "10.88.0.1/24")
            ns.ip("link", "set", "vl-host", "mtu", "1450")
            r = ns.run("ping", "-c", "3", "-i", "0.2", "-W", "2", "10.88.0.2", check=False)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            ports = json.loads(subprocess.run([vltest.VIRTLINK, "ctl", "--control", ctl_path, "ports",
                                               "--json"], stdout=subprocess.PIPE, text=True,
                                              check=True).stdout)
            tun = next(p for p in ports if p["name"] == "vx")["tunnel"]
            self.assertEqual(tun["remotes"][0]["resolved"], True, tun)
            after = json.loads(subprocess.run([vltest.VIRTLINK, "ctl", "--control", ctl_path, "stats",
                                               "--json"], stdout=subprocess.PIPE, text=True,
                                              check=True).stdout)
            dev = next(p for p in after["ports"] if p["name"] == "vx")["uplink"]["device"]
            self.assertGreaterEqual(dev["decap_packets"], 3)
            self.assertGreaterEqual(dev["encap_packets"], 3)
        self.run_recipe("virtlink switch --port up=af-packet:eth1 --port host=tap:vl-host", ["eth1"],
                        "/tmp/virtlink.ctl", checks)


if __name__ == "__main__":
    vltest.main(default_timeout=90)
