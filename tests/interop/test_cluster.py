#!/usr/bin/env python3
"""A Kubernetes cluster in miniature (docs/kubernetes.md): three "nodes" as network
namespaces on one bridge, each running its own virtlink switch with an af-packet uplink and
a VXLAN tunnel per network to the other nodes (the namespace topology of test_vxlan.py):

    under (a Linux bridge br0) -- veth -- n1, n2, n3: `virtlink switch --vlans`, uplink `up`,
                                                       vxa (VNI 5100, VLAN 100: network a),
                                                       vxb (VNI 5200, VLAN 200: network b)

"Pods" are made by calling virtlink-cni exactly as a container runtime does (CNI_* in the
environment, the network configuration on stdin; host-local from Debian's
containernetworking-plugins gives the addresses, each node its own range of the subnet),
each pod with its own network namespace (CNI_NETNS). The pods are QEMU/TCG guests (A on n1,
B on n2, network a: ping, and 10 MiB with matching md5) and DPDK testpmd in icmpecho mode
(on n3: isolation between networks); a pod cannot send from another pod's MAC (port
security); deleting pods frees everything on their node, and 50 pods added and deleted on
one node leave no port, socket, file, IP, fd or mapping behind.

    PYTHONPATH=pylib:bench python3 tests/interop/test_cluster.py --virtlink build/virtlink [-v]
"""
import json
import os
import subprocess
import time
import unittest

from vltestlib import underlay, vlguest, vltest
from vltestlib.underlay import sh
from vltestlib.vltest import log

NODES = (1, 2, 3)
NETS = {"a": (100, 5100, "10.10.0"), "b": (200, 5200, "10.20.0")}  # VLAN, VNI, subnet
PROBE_IP = "10.10.0.250"  # no pod has it: only an icmpecho testpmd answers for it
XFER_KIB = 10 * 1024


def vtep(i):
    return "192.168.70.%d" % i


def cni_path():
    return os.path.join(os.path.dirname(vltest.VIRTLINK), "virtlink-cni")


@vltest.ctest("cluster", timeout=300, qemu=True)
class Cluster(unittest.TestCase):
    net = underlay.Underlay("kc%d" % (os.getpid() % 10000))
    beds = {}

    @classmethod
    def ns(cls, name):
        return cls.net.ns(name)

    @classmethod
    def setUpClass(cls):
        try:
            cls.net.build({i: "n%d" % i for i in NODES})
            for i in NODES:
                cls.start_node(i)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def start_node(cls, i):
        """Node i's switch, as the DaemonSet's configuration has it: VLANs on for the pods
        added at run time, one tunnel per network carrying that network's VLAN."""
        tb = vlguest.GuestTestbed()
        cls.beds[i] = tb
        remotes = "+".join(vtep(j) for j in NODES if j != i)
        args = ["--vlans", "--port", "up=af-packet:u%d" % i]
        for net, (vlan, vni, _) in NETS.items():
            args += ["--port", "vx%s=vxlan:uplink=up,local=%s,vni=%d,remote=%s" % (net, vtep(i), vni, remotes),
                     "--port-set", "vx%s:vlan=%d" % (net, vlan)]
        args += ["--forward", "bridge", "--pmd-mode", "interrupt"]
        cls.net.start_switch(tb, "n%d" % i, "switch-n%d" % i, args)
        vltest._wait(lambda: all(p["state"] == "connected" for p in tb.ctl("ports")), 20,
                     "node n%d's uplink and tunnels up" % i, 0.1)
        tb.pods_dir = os.path.join(tb.dir, "pods")
        tb.ipam_dir = os.path.join(tb.dir, "ipam")

    @classmethod
    def tearDownClass(cls):
        cls.net.close(cls.beds.values())

    # -- the runtime's side --------------------------------------------------------------
    def netconf(self, node, net):
        """Network `net`'s configuration as node `node` gets it (Multus gives every node the
        same NAD; host-local allocates per node, so each node has its own range here)."""
        vlan, vni, subnet = NETS[net]
        tb = self.beds[node]
        return {"cniVersion": "1.0.0", "name": "virtlink-net-" + net, "type": "virtlink-cni",
                "control": tb.ctl_path, "socketDir": tb.pods_dir, "vlan": vlan, "vni": vni,
                "mtu": 1450,
                "ipam": {"type": "host-local", "dataDir": tb.ipam_dir,
                         "ranges": [[{"subnet": subnet + ".0/24", "rangeStart": "%s.%d" % (subnet, node * 50),
                                      "rangeEnd": "%s.%d" % (subnet, node * 50 + 49)}]]}}

    def cni(self, node, command, pod, net="a", ifname="net1"):
        """Runs virtlink-cni as a runtime does for pod `pod` (its container ID, netns and
        Kubernetes name derive from it). Returns (exit status, the JSON it printed or None)."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CNI_COMMAND": command,
               "CNI_CONTAINERID": "c0ffee%s" % pod, "CNI_NETNS": "/var/run/netns/" + self.ns(pod),
               "CNI_IFNAME": ifname, "CNI_PATH": "/usr/lib/cni",
               "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=%s" % pod}
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
            if k in os.environ:
                env[k] = os.environ[k]
        r = subprocess.run([cni_path()], input=json.dumps(self.netconf(node, net)), env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        out = json.loads(r.stdout) if r.stdout.strip() else None
        return r.returncode, out

    def add_pod(self, node, pod, net="a"):
        self.net.add_ns(pod)
        rc, res = self.cni(node, "ADD", pod, net)
        self.assertEqual(rc, 0, res)
        log("pod %s on n%d (network %s): %s %s %s" % (pod, node, net, res["interfaces"][0]["mac"],
                                                      res["ips"][0]["address"], res["interfaces"][0]["socketPath"]))
        return res

    def del_pod(self, node, pod, net="a"):
        rc, res = self.cni(node, "DEL", pod, net)
        self.assertEqual((rc, res), (0, None))
        sh("ip", "netns", "del", self.ns(pod), check=False)
        self.net.namespaces.remove(self.ns(pod))

    def start_guest(self, node, pod, res):
        """A QEMU guest pod on its socket, set up from the JSON file next to it as an
        application in the pod reads it (MAC, address, MTU: QEMU gives the guest no MTU of
        a vhost-user back-end's, so the guest sets the network's)."""
        itf = res["interfaces"][0]
        with open(os.path.splitext(itf["socketPath"])[0] + ".json") as f:
            doc = json.load(f)
        self.assertEqual((doc["mac"], doc["ips"][0], doc["hostSocketPath"]),
                         (itf["mac"], res["ips"][0]["address"], itf["socketPath"]))
        g = vlguest.Guest(self.beds[node], pod, itf["socketPath"], doc["ips"][0], mac=doc["mac"],
                          extra=["--mtu", str(doc["mtu"])])
        self.beds[node].guests.append(g)
        return g

    def start_icmpecho(self, node, pod, res):
        """A DPDK testpmd pod in icmpecho mode on its socket (it answers ARP and ping for
        any address), forwarding on CPU 0 at the lowest priority (SCHED_IDLE: the guests
        come first)."""
        itf = res["interfaces"][0]
        tb = self.beds[node]
        vdev = "net_virtio_user0,path=%s,mac=%s" % (itf["socketPath"], itf["mac"])
        return tb.start_testpmd(pod, [vdev], "icmpecho", mem_mb=256, nb_mbufs=4096,
                                interactive=False, eal_args=())

    def node_ports(self, node):
        return sorted(p["name"] for p in self.beds[node].ctl("ports"))

    def leftovers(self, node):
        """What pods of node `node` left: ports beyond the node's own, files under its
        socket directory, IP reservations of host-local."""
        ports = [p for p in self.node_ports(node) if p not in ("up", "vxa", "vxb")]
        tb = self.beds[node]
        files = []
        for d in (tb.pods_dir,):
            for root, dirs, names in os.walk(d):
                files += [os.path.join(root, n) for n in dirs + names]
        ips = []
        if os.path.isdir(tb.ipam_dir):
            for root, _, names in os.walk(tb.ipam_dir):
                ips += [n for n in names if n != "lock" and not n.startswith("last_reserved_ip")]
        return {"ports": ports, "files": files, "ips": ips}

    @staticmethod
    def mappings(pid):
        with open("/proc/%d/maps" % pid) as f:
            return len(f.read().splitlines())

    def drops(self, node, port, reason):
        st = self.beds[node].ctl("stats")["ports"]
        return next(p for p in st if p["name"] == port)["drops"][reason]

    def probe(self, g, count=3):
        """Pings PROBE_IP from guest `g`; returns the replies."""
        g.run("ip neigh flush dev eth0")
        p = vlguest.parse_ping(g.ping_out(PROBE_IP, count, 0.3))
        log("probe %s -> %s: %d/%d replies" % (g.name, PROBE_IP, p["rx"], p["tx"]))
        return p["rx"]

    def icmpecho_pod(self, node, pod, net):
        """An icmpecho testpmd pod of `net` on `node`, connected; returns (its Proc, result)."""
        res = self.add_pod(node, pod, net)
        tp = self.start_icmpecho(node, pod, res)
        name = next(p["name"] for p in self.beds[node].ctl("ports")
                    if p["external_ids"].get("cni_container_id") == "c0ffee" + pod)
        self.beds[node].wait_connected([name], timeout=30)
        return tp, res

    # -- parts ---------------------------------------------------------------------------
    def test_1_pods_on_two_nodes(self):
        res_a, res_b = self.add_pod(1, "pa"), self.add_pod(2, "pb")
        ga, gb = self.start_guest(1, "pa", res_a), self.start_guest(2, "pb", res_b)
        ga.wait_ready()
        gb.wait_ready()
        self.assertEqual(ga.ready.get("mtu"), "1450", "the network's MTU reaches the guest")
        vlguest.ping(self, ga, gb, count=5)
        vlguest.ping(self, gb, ga, count=5)
        vlguest.transfer(self, ga, gb, kib=XFER_KIB)
        # Isolation: a pod of network b on n3 answers any address; A (network a) must not
        # reach it. The same pod on network a does answer: the probe can see a leak.
        tp, _ = self.icmpecho_pod(3, "pc", "b")
        self.assertEqual(self.probe(ga), 0, "network a reached a pod of network b")
        self.beds[3].stop_testpmd(tp)
        self.del_pod(3, "pc", "b")
        tp, _ = self.icmpecho_pod(3, "pd", "a")
        self.assertEqual(self.probe(ga), 3, "a pod of network a on n3 is not reachable")
        self.beds[3].stop_testpmd(tp)
        self.del_pod(3, "pd", "a")
        # Port security: B takes A's MAC; its frames are dropped on its port, counted.
        port_b = next(p["name"] for p in self.beds[2].ctl("ports") if p["name"].startswith("cni-"))
        before = self.drops(2, port_b, "source_not_allowed")
        gb.run("ip link set eth0 address %s" % res_a["interfaces"][0]["mac"])
        p = vlguest.parse_ping(gb.ping_out(ga.addr, 3, 0.3))
        self.assertEqual(p["rx"], 0, "B reached A with A's own MAC")
        self.assertGreater(self.drops(2, port_b, "source_not_allowed"), before)
        gb.run("ip link set eth0 address %s" % res_b["interfaces"][0]["mac"])
        vlguest.ping(self, gb, ga, count=3)
        # Deleting the pods frees everything on their nodes.
        for node, pod, g in ((1, "pa", ga), (2, "pb", gb)):
            g.kill()
            self.del_pod(node, pod)
        for node in NODES:
            self.assertEqual(self.leftovers(node), {"ports": [], "files": [], "ips": []}, "n%d" % node)

    def test_2_fifty_pods_leave_nothing(self):
        tb = self.beds[3]
        pid = tb.switch.pid
        fds0 = len(os.listdir("/proc/%d/fd" % pid))
        maps0 = self.mappings(pid)
        t0 = time.monotonic()
        results = []
        for k in range(50):
            rc, res = self.cni(3, "ADD", "p%02d" % k)
            self.assertEqual(rc, 0, res)
            results.append(res)
        self.assertEqual(len(self.leftovers(3)["ports"]), 50)
        self.assertEqual(len({r["ips"][0]["address"] for r in results}), 50, "addresses repeat")
        self.assertEqual(len({r["interfaces"][0]["mac"] for r in results}), 50, "MACs repeat")
        for r in results:
            self.assertTrue(os.path.exists(r["interfaces"][0]["socketPath"]))
        for k in range(50):
            rc, res = self.cni(3, "DEL", "p%02d" % k)
            self.assertEqual((rc, res), (0, None))
        log("50 pods added and deleted on n3 in %.1f s" % (time.monotonic() - t0))
        self.assertEqual(self.leftovers(3), {"ports": [], "files": [], "ips": []})
        self.assertEqual(len(os.listdir("/proc/%d/fd" % pid)), fds0, "fds left in the switch")
        self.assertLessEqual(self.mappings(pid), maps0, "mappings left in the switch")
        self.assertEqual([e for e in tb.ctl("fdb") if e["port"] not in ("up", "vxa", "vxb")], [],
                         "MAC table entries of the deleted pods")


if __name__ == "__main__":
    vlguest.main(default_timeout=280)
