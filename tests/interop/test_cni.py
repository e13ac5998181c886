#!/usr/bin/env python3
"""virtlink-cni (docs/kubernetes.md) against a real switch (`--vlans`, control socket in
the test bed) and Debian's host-local IPAM plugin (/usr/lib/cni, its dataDir in the test
bed), run as a container runtime runs a plugin: a clean environment of PATH and CNI_*
variables, the network configuration on stdin. Every outcome is checked where it lands:
the exit status, the JSON printed (every error a CNI error object), the switch's ports and
external ids (`ctl ports --json`), the pod's socket and JSON file, host-local's IP files.

ADD/CHECK/DEL for cniVersion 1.0.0, 1.1.0, 0.4.0 and 0.3.1; DEL twice and without ADD; the
MAC from CNI_ARGS and runtimeConfig.mac (a multicast one refused); bad configurations and
environments; a switch that is not running (ADD 11, STATUS 50); ADD twice; VERSION;
CHECK after the port was deleted behind the plugin's back; GC; a vni no tunnel carries.
After every failing command nothing is left: no port, no file, no address.

    PYTHONPATH=pylib:bench python3 tests/interop/test_cni.py --virtlink build/virtlink [-v]
"""
import ipaddress
import json
import os
import shutil
import socket
import stat
import subprocess
import unittest

from vltestlib import vltest

CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins: host-local
NETNS = "/var/run/netns/vlt-cni"  # the plugin only passes it on (sandbox)
SUBNET = ipaddress.ip_network("10.10.0.0/24")


def vtuple(v):
    return tuple(int(x) for x in v.split("."))


@vltest.ctest("cni", timeout=120, asan=True)
class Cni(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.cni = os.path.join(os.path.dirname(vltest.VIRTLINK), "virtlink-cni")
        if not os.access(cls.cni, os.X_OK):
            raise AssertionError("%s is missing: build the virtlink-cni target" % cls.cni)
        if not os.access(os.path.join(CNI_BIN_DIR, "host-local"), os.X_OK):
            raise AssertionError("host-local is missing in %s (containernetworking-plugins)" % CNI_BIN_DIR)
        cls.tb = vltest.Testbed()
        try:
            cls.tb.start_switch(ports=[], forward="bridge", extra=["--vlans", "--pmd-mode", "interrupt"])
        except BaseException:
            cls.tb.close(failed=True)
            raise
        cls.pods = os.path.join(cls.tb.dir, "pods")
        cls.ipam = os.path.join(cls.tb.dir, "ipam")

    @classmethod
    def tearDownClass(cls):
        cls.tb.close()  # raises on a sanitizer report or a bad exit status of the switch

    def setUp(self):
        self.added = []  # (conf, env) of every ADD, DELeted again in tearDown

    def tearDown(self):
        for conf, env in reversed(self.added):
            self.run_cni("DEL", conf, **env)

    # -- helpers ---------------------------------------------------------------------------
    def conf(self, version="1.0.0", name="net-a", **kw):
        """A network configuration; a keyword whose value is None removes that key."""
        c = {"cniVersion": version, "name": name, "type": "virtlink-cni",
             "control": self.tb.ctl_path, "socketDir": self.pods, "vlan": 100,
             "ipam": {"type": "host-local", "dataDir": self.ipam,
                      "ranges": [[{"subnet": str(SUBNET)}]], "routes": [{"dst": "0.0.0.0/0"}]}}
        c.update(kw)
        return {k: v for k, v in c.items() if v is not None}

    @staticmethod
    def pod_env(cid, pod=None, ifname="net1", extra_args=""):
        pod = pod or "pod-" + cid
        return {"CNI_CONTAINERID": cid, "CNI_IFNAME": ifname,
                "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=%s%s" % (pod, extra_args)}

    def run_cni(self, command, conf, **env):
        """Runs the plugin: CNI_COMMAND=`command`, `conf` (a dict, or text as it is) on stdin,
        PATH, CNI_NETNS, CNI_PATH and `env` (a value None leaves a variable out). Returns
        (exit status, stdout, its JSON or None)."""
        e = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CNI_COMMAND": command, "CNI_NETNS": NETNS,
             "CNI_PATH": CNI_BIN_DIR}
        e.update(env)
        e = {k: v for k, v in e.items() if v is not None}
        text = conf if isinstance(conf, str) else json.dumps(conf)
        r = subprocess.run([self.cni], input=text.encode(), env=e, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        out, err = r.stdout.decode(), r.stderr.decode(errors="replace")
        for m in vltest.SANITIZER_MARKERS:
            self.assertNotIn(m, err, "virtlink-cni %s: sanitizer report:\n%s" % (command, err))
        try:
            doc = json.loads(out) if out.strip() else None
        except ValueError:
            doc = None
        return r.returncode, out, doc

    def ok(self, r, what):
        """A successful command that prints nothing (DEL, CHECK, STATUS, GC)."""
        self.assertEqual((r[0], r[1]), (0, ""), "%s: %r" % (what, r[1]))

    def error(self, r, code, version=None, what=""):
        """A failure: non-zero exit status and a CNI error object on stdout with cniVersion
        (`version` when given), code `code` (an int) and msg (a string)."""
        rc, out, doc = r
        self.assertNotEqual(rc, 0, "%s: exit status 0: %r" % (what, out))
        self.assertIsInstance(doc, dict, "%s: stdout is not a JSON object: %r" % (what, out))
        self.assertIsInstance(doc.get("cniVersion"), str, "%s: %r" % (what, doc))
        if version:
            self.assertEqual(doc["cniVersion"], version, what)
        self.assertIs(type(doc.get("code")), int, "%s: %r" % (what, doc))
        self.assertIsInstance(doc.get("msg"), str, "%s: %r" % (what, doc))
        self.assertTrue(doc["msg"], what)
        self.assertEqual(doc["code"], code, "%s: %r" % (what, doc))
        return doc

    def add(self, conf, env):
        rc, out, doc = self.run_cni("ADD", conf, **env)
        self.added.append((conf, env))
        self.assertEqual(rc, 0, "ADD: %r" % out)
        self.assertIsInstance(doc, dict, out)
        return doc

    def ports(self):
        return self.tb.ctl("ports")

    def port_of(self, cid, ifname="net1"):
        found = [p for p in self.ports() if p.get("external_ids", {}).get("cni_container_id") == cid
                 and p["external_ids"].get("cni_ifname") == ifname]
        self.assertLessEqual(len(found), 1, found)
        return found[0] if found else None

    def ip_files(self):
        """host-local's reservations: files in dataDir/NETWORK/ but its lock and
        last_reserved_ip.N; {path: content}."""
        got = {}
        for d, _, files in os.walk(self.ipam):
            for f in files:
                if f != "lock" and not f.startswith("last_reserved_ip."):
                    with open(os.path.join(d, f)) as fh:
                        got[os.path.relpath(os.path.join(d, f), self.ipam)] = fh.read()
        return got

    def leftovers(self):
        """What the plugin made and left: cni ports, anything under socketDir, IP files."""
        files = []
        for d, dirs, fs in os.walk(self.pods):
            files += [os.path.relpath(os.path.join(d, n), self.pods) for n in dirs + fs]
        return {"ports": [p["name"] for p in self.ports()
                          if p["name"].startswith("cni-") or p.get("external_ids")],
                "files": sorted(files), "ips": sorted(self.ip_files())}

    def assert_nothing_left(self, what):
        self.assertEqual(self.leftovers(), {"ports": [], "files": [], "ips": []}, what)

    def pod_paths(self, cid, pod=None, ifname="net1"):
        d = os.path.join(self.pods, "default_" + (pod or "pod-" + cid))
        return d, os.path.join(d, ifname + ".sock"), os.path.join(d, ifname + ".json")

    def pod_doc(self, cid, pod=None):
        with open(self.pod_paths(cid, pod)[2]) as f:
            return json.load(f)

    # -- the tests -------------------------------------------------------------------------
    def test_add_check_del_versions(self):
        """ADD, CHECK, DEL for each cniVersion: the result, the files, the port, the address;
        after DEL nothing at all."""
        for version in ("1.0.0", "1.1.0", "0.4.0", "0.3.1"):
            with self.subTest(version=version):
                cid = "c" + version.replace(".", "")
                conf, env = self.conf(version), self.pod_env(cid)
                d, sock, js = self.pod_paths(cid)
                r = self.add(conf, env)
                self.assertEqual(r["cniVersion"], version)
                self.assertEqual(len(r["interfaces"]), 1, r)
                itf = r["interfaces"][0]
                self.assertEqual((itf["name"], itf["sandbox"], itf["socketPath"]), ("net1", NETNS, sock))
                mac = itf["mac"]
                self.assertRegex(mac, r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
                self.assertEqual(int(mac[:2], 16) & 3, 2, "not locally administered unicast: " + mac)
                self.assertEqual(len(r["ips"]), 1, r)
                ip = r["ips"][0]
                self.assertEqual(ip["interface"], 0)
                addr = ipaddress.ip_interface(ip["address"])
                self.assertEqual(addr.network, SUBNET)
                self.assertEqual(ip["gateway"], "10.10.0.1")
                if vtuple(version) < (1, 0, 0):
                    self.assertEqual(ip.get("version"), "4", r)
                else:
                    self.assertNotIn("version", ip, r)
                self.assertEqual(r.get("routes"), [{"dst": "0.0.0.0/0"}])
                # host-local's reservation: DATADIR/NETWORK/ADDRESS holding the container ID
                ips = self.ip_files()
                self.assertEqual(list(ips), ["net-a/%s" % addr.ip], ips)
                self.assertEqual(ips["net-a/%s" % addr.ip].split()[0], cid)
                # the pod's files
                self.assertTrue(stat.S_ISSOCK(os.lstat(sock).st_mode), sock)
                doc = self.pod_doc(cid)
                want = {"network": "net-a", "ifname": "net1", "socket": "net1.sock",
                        "hostSocketPath": sock, "mode": "client", "mac": mac, "ips": [ip["address"]],
                        "gateway": "10.10.0.1", "vlan": 100, "result": r}
                self.assertEqual({k: doc.get(k) for k in want}, want)
                # the port
                p = self.port_of(cid)
                self.assertIsNotNone(p, self.ports())
                self.assertRegex(p["name"], r"^cni-[0-9a-f]{16}$")
                self.assertEqual((p["type"], p["path"], p["vlan"], p["port_security"]),
                                 ("vhost-user", sock, {"mode": "access", "vlan": 100}, [mac]))
                self.assertEqual(p["external_ids"], {"cni_container_id": cid, "cni_ifname": "net1",
                                                     "cni_network": "net-a"})
                checked = dict(conf, prevResult=r)
                if vtuple(version) >= (0, 4, 0):
                    self.ok(self.run_cni("CHECK", checked, **env), "CHECK " + version)
                else:
                    self.error(self.run_cni("CHECK", checked, **env), 1, version, "CHECK " + version)
                self.ok(self.run_cni("DEL", checked, **env), "DEL " + version)
                self.assert_nothing_left("after DEL " + version)

    def test_del_twice_and_without_add(self):
        conf, env = self.conf(), self.pod_env("twice")
        self.add(conf, env)
        self.ok(self.run_cni("DEL", conf, **env), "first DEL")
        self.ok(self.run_cni("DEL", conf, **env), "second DEL")
        self.assert_nothing_left("after two DELs")
        self.ok(self.run_cni("DEL", conf, **self.pod_env("never-added")), "DEL without ADD")
        self.ok(self.run_cni("DEL", conf, CNI_CONTAINERID="never-added", CNI_IFNAME="net1"),
                "DEL without ADD or CNI_ARGS")
        self.assert_nothing_left("after DEL without ADD")

    def test_mac(self):
        """CNI_ARGS MAC= and runtimeConfig.mac are the pod's MAC; a multicast one is error 7."""
        cases = [("args", self.conf(), self.pod_env("mac-args", extra_args=";MAC=02:aa:bb:cc:dd:01"),
                  "02:aa:bb:cc:dd:01"),
                 ("runtimeConfig", self.conf(capabilities={"mac": True},
                                             runtimeConfig={"mac": "0a:00:00:00:00:02"}),
                  self.pod_env("mac-rc"), "0a:00:00:00:00:02")]
        for what, conf, env, mac in cases:
            r = self.add(conf, env)
            self.assertEqual(r["interfaces"][0]["mac"], mac, what)
            self.assertEqual(self.port_of(env["CNI_CONTAINERID"])["port_security"], [mac], what)
            self.assertEqual(self.pod_doc(env["CNI_CONTAINERID"])["mac"], mac, what)
            self.ok(self.run_cni("CHECK", dict(conf, prevResult=r), **env), "CHECK " + what)
            self.ok(self.run_cni("DEL", conf, **env), "DEL " + what)
        self.assert_nothing_left("after the MAC cases")
        self.error(self.run_cni("ADD", self.conf(), **self.pod_env("mac-mc", extra_args=";MAC=03:00:00:00:00:01")),
                   7, "1.0.0", "multicast MAC in CNI_ARGS")
        self.error(self.run_cni("ADD", self.conf(runtimeConfig={"mac": "01:00:5e:00:00:01"}),
                                **self.pod_env("mac-mc2")), 7, "1.0.0", "multicast runtimeConfig.mac")
        self.assert_nothing_left("after the multicast MACs")

    def test_bad_configs(self):
        memif = self.conf(type="userspace", host={"engine": "vpp", "iftype": "memif", "netType": "interface"})
        cases = [("not JSON", '{"cniVersion": "1.0.0", "name": ', 6, None),
                 ("cniVersion 9.9.9", self.conf("9.9.9"), 1, None),
                 ("no name", self.conf(name=None), 7, "1.0.0"),
                 ("vlan 5000", self.conf(vlan=5000), 7, "1.0.0"),
                 ("mode bogus", self.conf(mode="bogus"), 7, "1.0.0"),
                 ("userspace memif", memif, 2, "1.0.0"),
                 ("ipam not in CNI_PATH", self.conf(ipam={"type": "no-such-ipam", "dataDir": self.ipam}), 5, "1.0.0")]
        for i, (what, conf, code, version) in enumerate(cases):
            self.error(self.run_cni("ADD", conf, **self.pod_env("bad%d" % i)), code, version, what)
            self.assert_nothing_left(what)
        # The userspace CNI plugin's own configuration: host.vhost.mode client (the switch
        # connects), so a vhost-user-client port and the pod's side is the server.
        us = self.conf(type="userspace", vlan=None, host={"engine": "ovs-dpdk", "iftype": "vhostuser",
                                                          "netType": "bridge", "vhost": {"mode": "client"}},
                       container={"engine": "dpdk", "iftype": "vhostuser", "netType": "interface",
                                  "vhost": {"mode": "server"}})
        env = self.pod_env("userspace")
        _, sock, _ = self.pod_paths("userspace")
        r = self.add(us, env)
        p = self.port_of("userspace")
        self.assertEqual((p["type"], p["path"]), ("vhost-user-client", sock), p)
        self.assertEqual(r["interfaces"][0]["socketPath"], sock)
        self.assertEqual(self.pod_doc("userspace")["mode"], "server")
        self.ok(self.run_cni("CHECK", dict(us, prevResult=r), **env), "CHECK userspace")
        self.ok(self.run_cni("DEL", us, **env), "DEL userspace")
        self.assert_nothing_left("after the userspace configuration")

    def test_bad_env(self):
        conf = self.conf()
        env = self.pod_env("env")
        cases = [("CNI_COMMAND FOO", "FOO", {}),
                 ("no CNI_COMMAND", None, {}),
                 ("no CNI_CONTAINERID", "ADD", {"CNI_CONTAINERID": None}),
                 ("no CNI_IFNAME", "ADD", {"CNI_IFNAME": None}),
                 ("CNI_IFNAME a/b", "ADD", {"CNI_IFNAME": "a/b"})]
        for what, command, more in cases:
            self.error(self.run_cni(command, conf, **dict(env, **more)), 4, what=what)
            self.assert_nothing_left(what)

    def test_switch_not_running(self):
        """ADD against a control path nobody listens on (none at all; a socket file nobody
        accepts on): error 11, no address, no file. STATUS: 50 there, 0 on the switch."""
        stale = os.path.join(self.tb.dir, "stale.ctl")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(stale)  # bound, never listening: connect() is refused
        try:
            for ctl in (os.path.join(self.tb.dir, "nobody.ctl"), stale):
                self.error(self.run_cni("ADD", self.conf(control=ctl), **self.pod_env("down")), 11,
                           "1.0.0", "ADD with " + ctl)
                self.assert_nothing_left("ADD with " + ctl)
                self.error(self.run_cni("STATUS", self.conf("1.1.0", control=ctl)), 50, "1.1.0",
                           "STATUS with " + ctl)
        finally:
            s.close()
        # DEL while the switch is away: the address and the JSON file go, error 11; the port
        # and its socket (which the plugin cannot tell from another port's then) go with
        # the runtime's next DEL.
        conf, env = self.conf(), self.pod_env("del-down")
        self.add(conf, env)
        self.error(self.run_cni("DEL", self.conf(control=stale), **env), 11, "1.0.0", "DEL, switch away")
        d, sock, _ = self.pod_paths("del-down")
        self.assertEqual(self.leftovers(), {"ports": [self.port_of("del-down")["name"]],
                                            "files": sorted(os.path.relpath(p, self.pods) for p in (d, sock)),
                                            "ips": []})
        self.ok(self.run_cni("DEL", conf, **env), "DEL again")
        self.assert_nothing_left("after the second DEL")
        self.ok(self.run_cni("STATUS", self.conf("1.1.0")), "STATUS")
        self.error(self.run_cni("STATUS", self.conf("1.0.0")), 1, "1.0.0", "STATUS with 1.0.0")

    def test_switch_refuses(self):
        """A socket path the switch gives another port already: error 100, the address
        released, and the other port's socket left alone."""
        d, sock, js = self.pod_paths("refused")
        os.makedirs(d)
        self.addCleanup(shutil.rmtree, d, True)
        self.tb.ctl("add-port", "other", "vhost-user", sock)
        self.addCleanup(self.tb.ctl, "del-port", "--if-exists", "other")
        self.error(self.run_cni("ADD", self.conf(), **self.pod_env("refused")), 100, "1.0.0", "ADD")
        self.assertEqual(self.ip_files(), {})
        self.assertIsNone(self.port_of("refused"))
        self.assertFalse(os.path.exists(js))
        self.assertTrue(os.path.exists(sock) and stat.S_ISSOCK(os.lstat(sock).st_mode),
                        "the refused ADD removed port 'other''s socket %s" % sock)

    def test_add_twice(self):
        conf, env = self.conf(), self.pod_env("twice-add")
        r = self.add(conf, env)
        before = self.leftovers()
        doc = self.pod_doc("twice-add")
        self.error(self.run_cni("ADD", conf, **env), 7, "1.0.0", "second ADD")
        self.assertEqual(self.leftovers(), before)
        self.assertEqual(self.pod_doc("twice-add"), doc)
        self.assertEqual(len(self.ip_files()), 1)
        self.ok(self.run_cni("CHECK", dict(conf, prevResult=r), **env), "CHECK after the second ADD")
        self.ok(self.run_cni("DEL", conf, **env), "DEL")
        self.assert_nothing_left("after DEL")

    def test_version(self):
        rc, out, doc = self.run_cni("VERSION", {"cniVersion": "1.0.0"})
        self.assertEqual(rc, 0, out)
        self.assertEqual(doc["cniVersion"], "1.0.0")
        self.assertTrue({"0.3.1", "0.4.0", "1.0.0", "1.1.0"} <= set(doc["supportedVersions"]), doc)

    def test_check_after_port_deleted(self):
        conf, env = self.conf(), self.pod_env("behind")
        r = self.add(conf, env)
        self.assertTrue(self.tb.ctl("del-port", self.port_of("behind")["name"])["deleted"])
        self.error(self.run_cni("CHECK", dict(conf, prevResult=r), **env), 101, "1.0.0", "CHECK")
        self.ok(self.run_cni("DEL", dict(conf, prevResult=r), **env), "DEL")
        self.assert_nothing_left("after DEL")

    def test_gc(self):
        """GC with one of two attachments of net-a valid: the other's port and files go;
        the valid one, and one of network net-b (not GC's network), stay intact."""
        conf = self.conf("1.1.0")
        keep, gone, other = self.pod_env("gc-keep"), self.pod_env("gc-gone"), self.pod_env("gc-other")
        rk = self.add(conf, keep)
        self.add(conf, gone)
        ro = self.add(self.conf("1.1.0", name="net-b"), other)
        self.assertTrue(os.path.exists(self.pod_paths("gc-gone")[2]))
        gc = dict(conf, **{"cni.dev/valid-attachments": [{"containerID": "gc-keep", "ifname": "net1"}]})
        # A runtime's GC names no container: no CNI_CONTAINERID, CNI_IFNAME, CNI_NETNS, CNI_ARGS.
        self.ok(self.run_cni("GC", gc, CNI_NETNS=None), "GC")
        self.assertIsNone(self.port_of("gc-gone"), "the invalid attachment's port is still there")
        left = self.leftovers()["files"]
        self.assertFalse([f for f in left if f.startswith("default_pod-gc-gone")],
                         "the invalid attachment's files are still there: %s" % left)
        self.assertIsNotNone(self.port_of("gc-keep"))
        self.assertIsNotNone(self.port_of("gc-other"))
        self.ok(self.run_cni("CHECK", dict(conf, prevResult=rk), **keep), "CHECK of the valid attachment")
        self.ok(self.run_cni("CHECK", dict(self.conf("1.1.0", name="net-b"), prevResult=ro), **other),
                "CHECK of the other network's attachment")

    def test_vni_without_tunnel(self):
        self.error(self.run_cni("ADD", self.conf(vni=5100), **self.pod_env("vni")), 7, "1.0.0",
                   "vni without a vxlan port")
        self.assert_nothing_left("after the refused vni")


if __name__ == "__main__":
    vltest.main()
