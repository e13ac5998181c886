"""Hosts on one underlay, for the tests of tunnels between hosts (tests/interop/test_vxlan.py)
and of the cluster in miniature (tests/interop/test_cluster.py):

    under (a Linux bridge br0) -- veth bI/uI -- host namespace I (uI inside it), ...

    u = underlay.Underlay("vx1234")              # namespaces vx1234under, vx1234h1, ...
    u.build({1: "h1", 2: "h2"}, extra=["e1"])    # the bridge, the hosts' veths, more namespaces
    u.start_switch(tb, "h1", "switch-h1", ["--port", "up=af-packet:u1", ...])
    ...
    u.close(beds)                                # the test beds, then every namespace

Python 3 standard library only.
"""
import os
import subprocess
import time

from vltestlib import vltest


def sh(*args, ns=None, check=True, timeout=30):
    """Runs `args` (in namespace `ns`); check: a non-zero status fails with the output."""
    argv = (["ip", "netns", "exec", ns] if ns else []) + [str(a) for a in args]
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError("%s: %s%s" % (" ".join(argv), r.stdout, r.stderr))
    return r


class Underlay:
    def __init__(self, tag):
        self.tag = tag
        self.namespaces = []

    def ns(self, name):
        return self.tag + name

    def add_ns(self, name):
        """A new namespace (lo up), deleted by close()."""
        n = self.ns(name)
        sh("ip", "netns", "add", n)
        self.namespaces.append(n)
        sh("ip", "link", "set", "lo", "up", ns=n)
        return n

    def build(self, hosts, extra=()):
        """The bridge br0 in namespace "under", and for each {index: name} of `hosts` a
        namespace with veth u<index> whose peer b<index> is on the bridge; `extra`: more
        namespaces, made first."""
        for n in ["under"] + list(extra) + list(hosts.values()):
            self.add_ns(n)
        under = self.ns("under")
        sh("ip", "link", "add", "br0", "type", "bridge", ns=under)
        sh("ip", "link", "set", "br0", "up", ns=under)
        # Where br_netfilter is loaded, a bridge drops malformed IPv4 before it forwards: a
        # hostile test's packets must reach the switch as sent.
        for k in ("iptables", "ip6tables", "arptables"):
            sh("sysctl", "-qw", "net.bridge.bridge-nf-call-%s=0" % k, ns=under, check=False)
        for i, host in hosts.items():
            sh("ip", "link", "add", "u%d" % i, "netns", self.ns(host), "type", "veth", "peer", "name",
               "b%d" % i, ns=under)
            sh("ip", "link", "set", "b%d" % i, "master", "br0", "up", ns=under)
            sh("ip", "link", "set", "u%d" % i, "up", ns=self.ns(host))

    def start_switch(self, tb, host, name, args):
        """`virtlink switch ARGS --control <tb's>` in namespace `host`, as tb.switch; waits
        for its control socket."""
        argv = ["ip", "netns", "exec", self.ns(host), vltest.VIRTLINK, "--log-level", "info", "switch"]
        argv += list(args) + ["--control", tb.ctl_path]
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "abort_on_error=0:detect_leaks=1")
        tb.switch = vltest.Proc(name, argv, tb.dir, env=env)
        tb.procs.append(tb.switch)
        deadline = time.monotonic() + 20
        while not os.path.exists(tb.ctl_path):
            if not tb.switch.alive():
                raise AssertionError("%s exited: %s" % (name, tb.switch.output()))
            if time.monotonic() > deadline:
                raise AssertionError("%s: no control socket" % name)
            time.sleep(0.05)

    def close(self, beds):
        """Closes the test beds (their switches, guests and peers), then deletes every
        namespace; a bed's failure (a sanitizer report, an exit status) is raised after."""
        problems = []
        for tb in beds:
            try:
                tb.close()
            except AssertionError as e:
                problems.append(str(e))
        for n in self.namespaces:
            sh("ip", "netns", "del", n, check=False)
        self.namespaces = []
        if problems:
            raise AssertionError("; ".join(problems))
