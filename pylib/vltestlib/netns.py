"""Network namespaces, veth pairs and what runs inside them, for the tests of uplinks.

    with netns.Lab("up") as lab:                   # names vlNNNNup-* (NNNN: this PID)
        sw = lab.netns("sw")                         # `ip netns add`, lo up
        peer = lab.netns("peer")
        lab.veth("vu0", sw, "vu0p", peer, mac_b="02:00:00:00:01:02")
        peer.addr("vu0p", "10.0.0.2/24")
        peer.ip("link", "set", "vu0p", "up")
        h = netns.NsHost(peer, "10.0.0.2")         # an endpoint of vlguest.ping/transfer/iperf
        with netns.Sniffer(peer, "vu0p") as sn:    # counts frames by source MAC
            ...
        sn.frames_from("52:54:00:00:00:01")

Everything a Lab made goes on every exit path (close(): processes stopped, namespaces
deleted, which deletes their veths and taps too); a namespace left by a test runner that
was killed outright (SIGKILL) is deleted by the next Lab (its name carries the dead PID).
Python 3 standard library only; the in-namespace helpers (sniffer, injector, file server)
are small `python3 -c` programs run with `ip netns exec`.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

from vltestlib import vltest
from vltestlib.vltest import log

_NAME = re.compile(r"^vl(\d+)[a-z]")
# iperf3 -J errors of a client whose test never started (see NsHost.iperf_client).
_IPERF_NOT_STARTED = re.compile(r'"error":\s*"(unable to connect|the server is busy|'
                                r'unable to receive control message: Connection reset)')


def sh(argv, check=True, timeout=30, input=None):
    """Runs `argv`; returns the CompletedProcess (text). check: a non-zero status fails the
    test with the command's output."""
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, input=input, stdin=None if input is not None else
                       subprocess.DEVNULL)
    if check and r.returncode != 0:
        raise AssertionError("`%s` exited with %d:\n%s%s" % (" ".join(argv), r.returncode,
                                                             r.stdout, r.stderr))
    return r


def sweep_stale():
    """Deletes the namespaces of Labs whose test runner no longer exists."""
    r = sh(["ip", "netns", "list"], check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _NAME.match(name)
        if m and int(m.group(1)) != os.getpid() and not vltest._pid_alive(int(m.group(1))):
            sh(["ip", "netns", "del", name], check=False)


class Netns:
    """One network namespace (created with its loopback up)."""

    def __init__(self, name):
        self.name = name
        sh(["ip", "netns", "add", name])
        self.ip("link", "set", "lo", "up")
        # No IPv6 (router solicitations, MLD, DAD) on its interfaces, veths and taps made in
        # it later included: the tests count frames.
        self.run("sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
                 "net.ipv6.conf.default.disable_ipv6=1")

    def argv(self, *args):
        return ["ip", "netns", "exec", self.name] + [str(a) for a in args]

    def run(self, *args, check=True, timeout=30, input=None):
        """Runs a command in the namespace; returns the CompletedProcess."""
        return sh(self.argv(*args), check=check, timeout=timeout, input=input)

    def ip(self, *args, check=True):
        return sh(["ip", "-n", self.name] + [str(a) for a in args], check=check)

    def addr(self, ifname, cidr):
        self.ip("addr", "add", cidr, "dev", ifname)

    def up(self, ifname):
        self.ip("link", "set", ifname, "up")

    def counters(self, ifname):
        """The interface's rx_packets, tx_packets, rx_dropped, ... (sysfs statistics)."""
        out = self.run("sh", "-c", "cd /sys/class/net/%s/statistics && grep . *" % ifname).stdout
        return {k: int(v) for k, v in (l.split(":", 1) for l in out.split())}

    def delete(self):
        sh(["ip", "netns", "del", self.name], check=False)

    def __repr__(self):
        return "netns %s" % self.name


class Lab:
    """The namespaces and in-namespace processes of one test; close() removes them all.

    `tag`: a few lowercase letters, part of every namespace name (vl<PID><tag><name>)."""

    def __init__(self, tag, logdir=None):
        sweep_stale()
        self.tag = tag
        self.namespaces = []
        self.procs = []
        self.logdir = logdir or "/tmp"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def netns(self, name):
        ns = Netns("vl%d%s%s" % (os.getpid(), self.tag, name))
        self.namespaces.append(ns)
        return ns

    def veth(self, a, ns_a, b, ns_b, mac_a=None, mac_b=None, mtu=None, up=True):
        """A veth pair: `a` in namespace `ns_a`, `b` in `ns_b` (Netns objects)."""
        ns_a.ip("link", "add", a, "type", "veth", "peer", "name", b, "netns", ns_b.name)
        for ns, i, mac in ((ns_a, a, mac_a), (ns_b, b, mac_b)):
            if mac:
                ns.ip("link", "set", i, "address", mac)
            if mtu:
                ns.ip("link", "set", i, "mtu", mtu)
            if up:
                ns.up(i)

    def start(self, ns, name, *args):
        """A vltest.Proc running `args` in namespace `ns`, stopped by close()."""
        p = vltest.Proc(name, ns.argv(*args), self.logdir)
        self.procs.append(p)
        return p

    def close(self):
        for p in reversed(self.procs):
            if p.returncode is None:
                p.stop(signal.SIGTERM, timeout=5)
        self.procs = []
        for ns in reversed(self.namespaces):
            ns.delete()
        self.namespaces = []


# ---------------------------------------------------------------------------------------
# An endpoint in a namespace, for vlguest.ping(), transfer() and iperf()

# Serves one file to the first client on a TCP port, then exits (prints LISTENING first).
_SERVE = r"""
import socket, sys
s = socket.socket(socket.AF_INET6); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("::", int(sys.argv[2]))); s.listen(1); print("LISTENING", flush=True)
c, _ = s.accept()
with open(sys.argv[1], "rb") as f:
    while True:
        b = f.read(1 << 16)
        if not b: break
        c.sendall(b)
c.close()
"""
# Connects to ADDR PORT and writes what arrives to FILE until the server closes.
_FETCH = r"""
import socket, sys
c = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=60)
with open(sys.argv[1], "wb") as f:
    while True:
        b = c.recv(1 << 16)
        if not b: break
        f.write(b)
"""


class NsHost:
    """A host stack in a namespace at `addr`, as an endpoint of vlguest's ping(),
    transfer() and iperf() (the same interface as vlguest.Guest's)."""

    def __init__(self, ns, addr, name=None, lab=None, workdir="/tmp"):
        self.ns = ns
        self.addr = addr
        self.name = name or ns.name
        self.lab = lab
        self.workdir = workdir
        self._server = None

    def _path(self, what):
        return os.path.join(self.workdir, "%s-%s" % (self.name, what))

    def ping_out(self, dst, count, interval, extra=""):
        argv = ["ping", "-c", count, "-i", interval, "-W", "2"] + extra.split() + [dst]
        r = self.ns.run(*argv, check=False, timeout=60 + count * float(interval))
        return r.stdout + r.stderr

    def make_file(self, kib):
        path = self._path("tx")
        with open("/dev/urandom", "rb") as src, open(path, "wb") as f:
            f.write(src.read(kib * 1024))
        return _md5(path), os.path.getsize(path)

    def serve_file(self, port):
        """Serves the file of make_file() to one client on `port`, in the background."""
        p = subprocess.Popen(self.ns.argv(sys.executable, "-c", _SERVE, self._path("tx"), port),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             preexec_fn=vltest._child_setup)
        line = p.stdout.readline()
        if "LISTENING" not in line:
            p.kill()
            raise AssertionError("%s: the file server did not start: %s%s" %
                                 (self.name, line, p.communicate()[0]))
        self._server = p

    def served(self, timeout=90):
        """Waits for the server of serve_file() to finish; asserts it exited 0."""
        p, self._server = self._server, None
        try:
            out = p.communicate(timeout=timeout)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            raise AssertionError("%s: the file server did not finish in %d s" %
                                 (self.name, timeout))
        if p.returncode != 0:
            raise AssertionError("%s: the file server failed: %s" % (self.name, out))

    def fetch_file(self, addr, port, timeout=90):
        path = self._path("rx")
        self.ns.run(sys.executable, "-c", _FETCH, path, addr, port, timeout=timeout)
        return _md5(path), os.path.getsize(path)

    def iperf_client(self, dst, seconds, reverse=False):
        """`iperf3 -c DST -t S -J [-R]`; returns (bytes sent, bytes received)."""
        argv = ["iperf3", "-c", dst, "-t", seconds, "-J"] + (["-R"] if reverse else [])
        for _ in range(20):
            r = self.ns.run(*argv, check=False, timeout=seconds + 60)
            # A server (`iperf3 -s`) between two tests listens again a moment after the
            # last one ended: refused or busy until then, or, for a client that connected
            # to the old listener just before the server closed it, reset before the
            # first control message. No test has started in any of these cases.
            if not _IPERF_NOT_STARTED.search(r.stdout):
                break
            time.sleep(0.25)
        try:
            end = json.loads(r.stdout)["end"]
            return end["sum_sent"]["bytes"], end["sum_received"]["bytes"]
        except (ValueError, KeyError) as e:
            raise AssertionError("%s: iperf3 -c %s failed (%s, %s):\n%s%s" %
                                 (self.name, dst, r.returncode, e, r.stdout[-2000:], r.stderr))

    def neigh(self, addr):
        return self.ns.run("ip", "neigh", "show", addr).stdout

    def cleanup(self):
        if self._server is not None:
            self._server.kill()
            self._server.wait()
            self._server = None
        for w in ("tx", "rx"):
            try:
                os.unlink(self._path(w))
            except OSError:
                pass


def _md5(path):
    import hashlib
    h = hashlib.md5()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------
# Raw frames: counting and injecting them in a namespace

# Counts the frames IFACE receives (not those it sends: PACKET_OUTGOING) by source MAC,
# ethertype and broadcast or not ("MAC/TYPE/b|u") until its standard input closes; then
# prints them as JSON.
_SNIFF = r"""
import json, select, socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((sys.argv[1], 0)); s.setblocking(False)
print("READY", flush=True)
by = {}
while True:
    r, _, _ = select.select([s, sys.stdin], [], [])
    if sys.stdin in r:
        break
    while True:
        try:
            b, a = s.recvfrom(65536)
        except BlockingIOError:
            break
        if a[2] == socket.PACKET_OUTGOING:
            continue
        k = "%s/%s/%s" % (b[6:12].hex(":"), b[12:14].hex(), "b" if b[:6] == b"\xff" * 6 else "u")
        by[k] = by.get(k, 0) + 1
print(json.dumps(by), flush=True)
"""


class Sniffer:
    """Counts the frames `ifname` in namespace `ns` receives, by source MAC and ethertype
    (`with Sniffer(ns, ifname) as s: ...`, then s.frames_from(MAC))."""

    def __init__(self, ns, ifname):
        self.ns, self.ifname = ns, ifname
        self.counts = None
        self.p = subprocess.Popen(ns.argv(sys.executable, "-c", _SNIFF, ifname),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True,
                                  preexec_fn=vltest._child_setup)
        if self.p.stdout.readline().strip() != "READY":
            self.p.kill()
            raise AssertionError("sniffer on %s/%s did not start: %s" %
                                 (ns.name, ifname, self.p.communicate()[1]))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def stop(self):
        """Stops counting; returns {"MAC/ethertype": frames}."""
        if self.counts is None:
            try:
                out, err = self.p.communicate("", timeout=10)
                self.counts = json.loads(out)
            except (subprocess.TimeoutExpired, ValueError):
                self.p.kill()
                out, err = self.p.communicate()
                raise AssertionError("sniffer on %s/%s: %s %s" % (self.ns.name, self.ifname,
                                                                   out, err))
        return self.counts

    def frames_from(self, mac, broadcast=None):
        """Frames from `mac` (broadcast: True, only those to ff:ff:ff:ff:ff:ff; False, only
        the others)."""
        c = self.stop()
        return sum(n for k, n in c.items() if k.split("/")[0] == mac.lower() and
                   (broadcast is None or (k.split("/")[2] == "b") == broadcast))


# Sends the frames of the JSON list on standard input ([hex, ...]) on IFACE, each once, and
# prints how many the kernel took and the errors of the others by errno name.
_INJECT = r"""
import errno, json, socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
sent, errs = 0, {}
for h in json.load(sys.stdin):
    try:
        s.send(bytes.fromhex(h)); sent += 1
    except OSError as e:
        k = errno.errorcode.get(e.errno, str(e.errno)); errs[k] = errs.get(k, 0) + 1
print(json.dumps({"sent": sent, "errors": errs}))
"""


def inject(ns, ifname, frames, timeout=60):
    """Sends `frames` (bytes each, sent as they are, FCS excepted) on `ifname` in `ns`
    through a raw packet socket. Returns {"sent": N, "errors": {ERRNO: N}}."""
    r = ns.run(sys.executable, "-c", _INJECT, ifname, timeout=timeout,
               input=json.dumps([f.hex() for f in frames]))
    return json.loads(r.stdout)


def mac_bytes(mac):
    return bytes.fromhex(mac.replace(":", ""))
