"""Linux guests (QEMU, TCG) on virtlink's vhost-user ports, for the interop tests.

Builds on vltest (pylib/vltestlib/vltest.py): the guests are vltest.Proc children of a vltest.Testbed, so they get
the same guarantees (PR_SET_PDEATHSIG, stopped on every exit path, logs dumped on failure,
the temporary directory removed).

    with vlguest.GuestTestbed(self) as tb:
        tb.start_switch(ports=["vm1", "vm2"], forward="bridge")
        g1 = tb.start_guest("g1", "vm1", "10.0.0.1/24")
        g2 = tb.start_guest("g2", "vm2", "10.0.0.2/24")
        vlguest.wait_all_ready([g1, g2])          # VL-READY and a live serial shell
        out = g1.run("ping -c 3 10.0.0.2")          # output; asserts exit status 0
        res = vlguest.parse_ping(out)
        vlguest.ping(self, g1, g2)                  # asserts every reply (also vlguest.transfer,
                                                    # iperf; either side may be a netns.NsHost)

The image is scripts/guest/build-guest.sh's (default <repo>/build/guest, or $VL_GUEST_DIR);
each guest is started with scripts/guest/run-guest.sh --keep, so after its boot markers
(VL-READY, VL-EXIT 0, VL-SHELL) it runs an interactive busybox shell on its serial console,
which QEMU serves on a unix socket (--serial-sock). A reader thread collects the console's
lines with the host's monotonic time of arrival; run() types one command and waits for a
marker it prints with the command's exit status. Everything the guest printed is also in
DIR/NAME.serial (QEMU's logfile), dumped on failure.

QEMU runs through run-guest.sh's `exec`, so the Proc's PID is QEMU's: SIGKILL it to kill
the guest outright; SIGINT (the Testbed's cleanup) makes QEMU exit.
"""

import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
import unittest

from vltestlib import vltest
from vltestlib.vltest import Proc, TestTimeout, log, read_text

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_GUEST = os.path.join(REPO, "scripts", "guest", "run-guest.sh")
IMAGE_DIR = os.environ.get("VL_GUEST_DIR", os.path.join(REPO, "build", "guest"))
QEMU = "qemu-system-x86_64"

# Typed after every command: prints the command's exit status. Written with %s so the
# echoed command line itself never matches the marker pattern.
_BEGIN = re.compile(r"VLBEGIN-(\d+)$")
_DONE = re.compile(r"VLDONE-(\d+)-(\d+)$")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][0-9A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]")


# ---------------------------------------------------------------------------------------
# Serial console

class Console:
    """Client of a guest's serial console socket (QEMU listens, wait=off).

    A daemon thread reads it; complete lines (escape sequences and \\r removed) are kept
    with their time of arrival (time.monotonic()).
    """

    def __init__(self, path, name, connect_timeout=20, alive=None):
        self.name = name
        self.path = path
        self.lines = []        # [(t, text)]
        self._partial = b""
        self._cv = threading.Condition()
        self.closed = False
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        deadline = time.monotonic() + connect_timeout
        while True:
            try:
                self.sock.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if alive is not None and not alive():
                    raise AssertionError("%s exited before its console socket %s appeared"
                                         % (name, path))
                if time.monotonic() >= deadline:
                    raise TestTimeout("%s: console socket %s did not appear in %d s" %
                                      (name, path, connect_timeout))
                time.sleep(0.05)
        self._thread = threading.Thread(target=self._reader, name="console-" + name,
                                         daemon=True)
        self._thread.start()

    def _reader(self):
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                data = b""
            now = time.monotonic()
            with self._cv:
                if not data:
                    self.closed = True
                    self._cv.notify_all()
                    return
                buf = self._partial + data
                *complete, self._partial = buf.split(b"\n")
                for raw in complete:
                    text = _ANSI.sub("", raw.decode("utf-8", "replace"))
                    self.lines.append((now, text))
                if complete:
                    self._cv.notify_all()

    def send(self, text):
        try:
            self.sock.sendall(text.encode())
        except OSError as e:
            raise AssertionError("%s: cannot write to the console: %s" % (self.name, e))

    def wait_line(self, pattern, start=0, timeout=30, what=None):
        """Waits for a line (from index `start`) that matches `pattern` (re.search).

        Returns (index, time, match).
        """
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        i = start
        with self._cv:
            while True:
                while i < len(self.lines):
                    m = rx.search(self.lines[i][1])
                    if m:
                        return i, self.lines[i][0], m
                    i += 1
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TestTimeout("%s: no console line matching %r within %.0f s%s" %
                                      (self.name, rx.pattern, timeout,
                                       " (%s)" % what if what else ""))
                if self.closed:
                    raise AssertionError("%s: console closed while waiting for %r" %
                                         (self.name, rx.pattern))
                self._cv.wait(min(left, 0.5))

    def count(self, pattern):
        rx = re.compile(pattern)
        with self._cv:
            return sum(1 for _, t in self.lines if rx.search(t))

    def snapshot(self, start=0, end=None):
        with self._cv:
            return list(self.lines[start:end])

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


# ---------------------------------------------------------------------------------------
# Guests

class Guest:
    """One guest: the QEMU Proc, its console, and what its boot markers said."""

    def __init__(self, tb, name, sock, ip, server=False, mac=None, mem=None, extra=()):
        self.tb = tb
        self.name = name
        self.sock = sock
        self.ip = ip
        self.addr = ip.split("/")[0] if ip else None
        self.mac = mac
        self.console_path = os.path.join(tb.dir, name + ".console")
        self.serial_log = os.path.join(tb.dir, name + ".serial")
        argv = [RUN_GUEST, "--name", name, "--sock", sock, "--keep", "--accel", "tcg",
                "--image-dir", IMAGE_DIR, "--serial-sock", self.console_path,
                "--serial-log", self.serial_log]
        if ip:
            argv += ["--ip", ip]
        if server:
            argv.append("--server")
        if mac:
            argv += ["--mac", mac]
        if mem:
            argv += ["--mem", mem]
        argv += list(extra)
        self.t_start = time.monotonic()
        self.proc = Proc("guest-" + name, argv, tb.dir)
        tb.procs.append(self.proc)
        self.console = Console(self.console_path, name, alive=self.proc.alive)
        self.ready = None      # VL-READY fields
        self.t_ready = None    # host time VL-READY arrived
        self._n = 0

    @classmethod
    def attach(cls, tb, name, proc, console_path, serial_log, ip, mac=None):
        """A guest whose QEMU was started by someone else (libvirt, a README command line)
        from this image with `vl.keep=1`, its serial console on a unix socket QEMU listens on
        (`server=on,wait=off`) at `console_path`, a copy of the console in `serial_log`.
        `proc` is its vltest.Proc, or an object with the same pid, alive(), output() and
        p.returncode. Appended to tb.guests (consoles dumped on failure, closed at the end)."""
        g = cls.__new__(cls)
        g.tb, g.name, g.sock, g.ip, g.mac = tb, name, None, ip, mac
        g.addr = ip.split("/")[0] if ip else None
        g.console_path, g.serial_log = console_path, serial_log
        g.t_start = time.monotonic()
        g.proc = proc
        g.console = Console(console_path, name, alive=proc.alive)
        g.ready, g.t_ready, g._n = None, None, 0
        tb.guests.append(g)
        return g

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.alive()

    def _check_alive(self):
        if not self.proc.alive():
            raise AssertionError("guest %s: QEMU exited (%s):\n%s" %
                                 (self.name, self.proc.p.returncode, self.proc.output()[-3000:]))

    def wait_ready(self, timeout=90):
        """Waits for VL-READY and VL-SHELL, then for a command round trip on the shell.

        QEMU waits for its vhost-user back-end before the guest starts, so the switch must
        be connecting (or listening) already. Returns the VL-READY fields (dict).
        """
        deadline = time.monotonic() + timeout
        _, t, m = self._wait(r"^VL-READY (.*)$", 0, timeout, "boot")
        self.t_ready = t
        self.ready = dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv)
        errs = [l for _, l in self.console.snapshot() if l.startswith("VL-ERROR")]
        if errs:
            raise AssertionError("guest %s: %s" % (self.name, errs))
        self._wait(r"^VL-SHELL$", 0, max(1, deadline - time.monotonic()), "shell")
        self.run("true", timeout=max(5, deadline - time.monotonic()))
        log("guest %s ready: %.1f s after start (guest uptime %s s): %s" %
            (self.name, self.t_ready - self.t_start, self.ready.get("uptime"),
             " ".join("%s=%s" % kv for kv in self.ready.items() if kv[0] != "uptime")))
        return self.ready

    def _wait(self, pattern, start, timeout, what):
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.console.wait_line(pattern, start, min(1.0, max(0.05, deadline -
                                                                          time.monotonic())),
                                              what)
            except TestTimeout:
                self._check_alive()
                if time.monotonic() >= deadline:
                    raise TestTimeout("guest %s: no %r within %.0f s (%s)" %
                                      (self.name, pattern, timeout, what))

    def start_cmd(self, cmd):
        """Types `cmd` on the serial shell; returns a handle for wait_cmd().

        The command runs in the foreground of the guest's shell (one at a time; end it with
        `&` to background it). It must be one line: the busybox line editor limits a line
        to about 1 KB.
        """
        assert "\n" not in cmd and len(cmd) < 900, "one short line per command"
        self._n += 1
        n = self._n
        start = len(self.console.lines)
        self.console.send("printf 'VL%%s-%%d\\n' BEGIN %d; { %s\n}; printf 'VL%%s-%%d-%%d\\n' "
                          "DONE %d $?\n" % (n, cmd, n))
        return (n, start, cmd, time.monotonic())

    def wait_cmd(self, h, timeout=30, check=True):
        """Waits for the command of handle `h`; returns (exit status, output lines)."""
        n, start, cmd, _ = h
        i0, _, _ = self._wait(r"^VLBEGIN-%d$" % n, start, timeout, cmd)
        i1, _, m = self._wait(r"^VLDONE-%d-(\d+)$" % n, i0, timeout, cmd)
        status = int(m.group(1))
        out = [t for _, t in self.console.snapshot(i0 + 1, i1)]
        if check and status != 0:
            raise AssertionError("guest %s: `%s` exited with %d:\n%s" %
                                 (self.name, cmd, status, "\n".join(out)))
        return status, out

    def run(self, cmd, timeout=30, check=True):
        """Runs `cmd` in the guest's shell; returns its output as one string (check: the
        exit status must be 0)."""
        status, out = self.wait_cmd(self.start_cmd(cmd), timeout, check)
        return "\n".join(out) if check else (status, "\n".join(out))

    def interrupt(self):
        """Ctrl-C on the serial shell (the shell owns the tty: it reaches the foreground
        command)."""
        self.console.send("\x03")

    def kill(self, sig=signal.SIGKILL):
        """Kills QEMU with `sig` and reaps it; returns its exit status."""
        rc = self.proc.stop(sig, timeout=10)
        self.console.close()
        return rc

    def uptime(self):
        return float(self.run("cat /proc/uptime").split()[0])

    # -- an endpoint of ping(), transfer() and iperf() (netns.NsHost has the same) --------
    def ping_out(self, dst, count, interval, extra=""):
        """iputils ping's output (`ping -c COUNT -i INTERVAL -W 2 [EXTRA] DST`)."""
        return self.run("ping -c %d -i %s -W 2 %s %s" % (count, interval, extra, dst),
                        timeout=60 + count * float(interval), check=False)[1]

    def make_file(self, kib):
        """KIB KiB of /dev/urandom in /tmp/tx; returns (md5, size)."""
        out = self.run("dd if=/dev/urandom of=/tmp/tx bs=1024 count=%d 2>/dev/null && "
                       "md5sum /tmp/tx && wc -c </tmp/tx" % kib)
        return out.split()[0], int(out.split()[-1])

    def serve_file(self, port):
        """Serves /tmp/tx to one client on `port` with busybox nc (-e cat FILE: after
        accepting, the socket becomes cat's stdin/stdout; cat's exit closes it), in the
        background; returns once it listens."""
        self.run("nc -l -p %d -e cat /tmp/tx >/dev/null 2>&1 &" % port)
        # Listening (state 0A; busybox nc listens on IPv6 "::", which takes IPv4 too).
        listening = "grep -q ':%04X 0*:0000 0A' /proc/net/tcp /proc/net/tcp6" % port
        self.run("i=0; while [ $i -lt 100 ] && ! %s; do i=$((i+1)); sleep 0.1; done; %s" %
                 (listening, listening))

    def served(self, timeout=30):
        self.run("wait", timeout=timeout)  # the server is done

    def fetch_file(self, addr, port, timeout=90):
        """Fetches from ADDR:PORT into /tmp/rx; returns (md5, size)."""
        out = self.run("nc %s %d </dev/null >/tmp/rx && md5sum /tmp/rx && wc -c </tmp/rx" %
                       (addr, port), timeout=timeout)
        return out.split()[0], int(out.split()[-1])

    def iperf_client(self, dst, seconds, reverse=False):
        """`iperf3 -c DST -t SECONDS -J [-R]`; returns (bytes sent, bytes received) of its
        end-of-test summary."""
        out = self.run("timeout %d iperf3 -c %s -t %d %s-J >/tmp/iperf.json; s=$?; sed -n "
                       "'/\"sum_sent\"/,/\"bytes\"/p;/\"sum_received\"/,/\"bytes\"/p' "
                       "/tmp/iperf.json | grep '\"bytes\"'; [ $s = 0 ]" %
                       (seconds + 60, dst, seconds, "-R " if reverse else ""),
                       timeout=seconds + 90)
        counts = [int(l.split(":")[1].strip().rstrip(",")) for l in out.splitlines()
                  if '"bytes"' in l]
        if len(counts) != 2:
            raise AssertionError("guest %s: iperf3 summary without two byte counts:\n%s" %
                                 (self.name, out))
        return counts[0], counts[1]

    def neigh(self, addr):
        return self.run("ip neigh show %s dev eth0" % addr)


class GuestTestbed(vltest.Testbed):
    """A vltest.Testbed that also runs guests, client-mode switch ports and a switch that
    is stopped and started again with the same sockets."""

    def __init__(self, test=None, keep=None):
        super().__init__(test, keep)
        self.guests = []
        self.old_switches = []

    def start_guest(self, name, port, ip, server=False, mac=None, **kw):
        """Starts a guest on switch port `port` (socket DIR/PORT.sock). server=True: QEMU
        listens there (the switch's port must be a client port)."""
        g = Guest(self, name, self.sock(port), ip, server=server, mac=mac, **kw)
        self.guests.append(g)
        return g

    def start_switch(self, ports=("a", "b"), forward="bridge", pmd_cores="1", config=None,
                     extra=(), log_level="info", client_ports=(), netns=None):
        """vltest's start_switch plus `client_ports`: vhost-user-client ports NAME ->
        DIR/NAME.sock (the switch connects; a QEMU --server guest listens there).

        Called again after stop_switch(), it starts a new switch on the same sockets and
        control path (the old switch's log is kept as switch-N.log).
        """
        if self.switch is not None:
            assert self.switch.returncode is not None, "stop_switch() first"
            self.old_switches.append(self.switch)
            old = self.switch.log_path
            new = old[:-len(".log")] + "-%d.log" % len(self.old_switches)
            os.rename(old, new)
            self.switch.log_path = new
            self.switch.name = "switch-%d" % len(self.old_switches)
        args = []
        for name in client_ports:
            args += ["--port", "%s=vhost-user-client:%s" % (name, self.sock(name))]
        sw = super().start_switch(ports=ports, forward=forward, pmd_cores=pmd_cores,
                                  config=config, extra=args + list(extra),
                                  log_level=log_level, netns=netns)
        # After a crash the old socket files are still there, so their existence says
        # nothing: wait until this switch answers on the control socket.
        def answers():
            if not sw.alive():
                raise AssertionError("switch exited early with status %s:\n%s" %
                                     (sw.p.returncode, sw.output()))
            try:
                self.ctl("version")
                return True
            except AssertionError:
                return False
        vltest._wait(answers, 15, "the switch's control socket", 0.1)
        return sw

    def stop_switch(self, sig=signal.SIGTERM, timeout=15):
        """Stops the switch; it must exit with status 0 and without sanitizer reports."""
        rc = self.switch.stop(sig, timeout=timeout)
        if rc != 0:
            raise AssertionError("switch exited with status %s:\n%s" %
                                 (rc, self.switch.output()[-3000:]))
        problems = self.sanitizer_findings()
        if problems:
            raise AssertionError("; ".join(problems))
        return rc

    def dump_logs(self, tail=60):
        super().dump_logs(tail)
        for g in self.guests:
            try:
                lines = read_text(g.serial_log).splitlines()
            except OSError:
                continue
            sys.stderr.write("----- %s console (last %d of %d lines) -----\n" %
                             (g.name, min(tail, len(lines)), len(lines)))
            sys.stderr.write("\n".join(lines[-tail:]) + "\n")
        sys.stderr.flush()

    def _close(self, failed):
        try:
            super()._close(failed)
        finally:
            for g in self.guests:
                g.console.close()

    # -- switch-side observations -------------------------------------------------------
    def fdb(self):
        """`ctl fdb --json` as {mac: port name}."""
        return {e["mac"]: e["port"] for e in self.ctl("fdb")}

    def wait_state(self, port, states, timeout=15):
        """Waits until `ctl ports` shows `port` in one of `states`."""
        def ok():
            return self.ports_info()[port]["state"] in states
        vltest._wait(ok, timeout, "port %s in state %s" % (port, states), 0.1)


def wait_all_ready(guests, timeout=90):
    """Waits for every guest's VL-READY and shell (they boot in parallel)."""
    deadline = time.monotonic() + timeout
    for g in guests:
        g.wait_ready(max(5, deadline - time.monotonic()))


# ---------------------------------------------------------------------------------------
# The switch process as the kernel sees it

def proc_cpu_s(pid):
    """utime + stime of the whole process (all threads), in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After "pid (comm)": state is field 3, utime 14, stime 15 (man 5 proc).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin_process(pid, cpus):
    """Pins every thread of process `pid` (a guest's QEMU: its vCPU, I/O and RCU threads) to
    the CPUs `cpus` (a set of ints); threads it starts later inherit it. Used where a
    busy-polling PMD thread must have its core to itself (--pmd-cores), as an operator
    would isolate it."""
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, FileNotFoundError):
            pass  # the thread ended meanwhile


def proc_fds(pid):
    """{fd: link target} of the process's open file descriptors."""
    out = {}
    d = "/proc/%d/fd" % pid
    for n in os.listdir(d):
        try:
            out[int(n)] = os.readlink(os.path.join(d, n))
        except OSError:
            pass
    return out


def proc_maps(pid):
    """[(size, path)] of the process's mappings."""
    out = []
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            parts = line.split(None, 5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.append((hi - lo, parts[5].strip() if len(parts) > 5 else ""))
    return out


def maps_diff(a, b):
    """Mappings in usage `b` and not in `a` (+) and the reverse (-), as text."""
    from collections import Counter
    ca, cb = Counter(a["map_list"]), Counter(b["map_list"])
    return ", ".join(["+%d %s" % m for m in sorted((cb - ca).elements())] +
                     ["-%d %s" % m for m in sorted((ca - cb).elements())]) or "none"


def proc_usage(pid):
    """A summary of the resources a guest connection holds in the switch."""
    maps = proc_maps(pid)
    fds = proc_fds(pid)
    return {"fds": len(fds),
            # socket:[INODE] -> socket:[]: which kinds of files, not which instances
            "fd_targets": sorted(re.sub(r"\[\d+\]$", "[]", t) for t in fds.values()),
            "map_list": sorted(maps),
            "maps": len(maps),
            "mapped_bytes": sum(s for s, _ in maps),
            "heap_bytes": sum(s for s, p in maps if p == "[heap]"),
            # anonymous memory: no path, or [heap]/[anon:...] (not [stack], [vdso], ...)
            "anon_bytes": sum(s for s, p in maps if p in ("", "[heap]") or
                              p.startswith("[anon")),
            "named_maps": sorted((s, p) for s, p in maps if p and p != "[heap]" and
                                 not p.startswith("[anon")),
            "memfd_maps": sum(1 for _, p in maps if p.startswith("/memfd:")),
            "memfd_bytes": sum(s for s, p in maps if p.startswith("/memfd:"))}


# ---------------------------------------------------------------------------------------
# Guest program output

_PING_SUMMARY = re.compile(r"(\d+) packets transmitted, (\d+) received(?:, \+(\d+) errors)?"
                           r".*?([\d.]+)% packet loss")
_PING_RTT = re.compile(r"rtt min/avg/max/mdev = ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms")
PING_REPLY = re.compile(r"bytes from ([\d.]+): icmp_seq=(\d+) ttl=\d+ time=([\d.]+) ms")


def parse_ping(text):
    """iputils ping's summary: {"tx", "rx", "loss", "rtt": (min, avg, max) ms or None,
    "seqs": [icmp_seq of each reply]}."""
    m = _PING_SUMMARY.search(text)
    if not m:
        raise AssertionError("no ping summary in:\n" + text)
    r = _PING_RTT.search(text)
    return {"tx": int(m.group(1)), "rx": int(m.group(2)), "loss": float(m.group(4)),
            "rtt": tuple(float(x) for x in r.groups()[:3]) if r else None,
            "seqs": [int(x.group(2)) for x in PING_REPLY.finditer(text)]}


def fmt_ping(p):
    rtt = "rtt min/avg/max %.2f/%.2f/%.2f ms" % p["rtt"] if p["rtt"] else "no rtt"
    return "%d/%d replies, %g%% loss, %s" % (p["rx"], p["tx"], p["loss"], rtt)


# ---------------------------------------------------------------------------------------
# Traffic between two endpoints: Guests, or netns.NsHost (a namespace's stack). Each has
# .name, .addr and ping_out(), make_file(), serve_file(), served(), fetch_file(),
# iperf_client().

XFER_PORT = 5001


def ping(test, src, dst, count=10, interval=0.2, extra=""):
    """`ping -c COUNT -i INTERVAL` from src to dst; asserts every reply came back. Returns
    parse_ping() of its output."""
    dst_addr = dst if isinstance(dst, str) else dst.addr
    out = src.ping_out(dst_addr, count, interval, extra)
    p = parse_ping(out)
    log("ping %s -> %s: %s" % (src.name, getattr(dst, "name", dst_addr), fmt_ping(p)))
    test.assertEqual((p["tx"], p["rx"], p["loss"]), (count, count, 0.0), out)
    return p


def transfer(test, src, dst, kib=1024, port=XFER_PORT):
    """src serves KIB KiB of random bytes on `port`; dst fetches them. Both sides' size and
    md5sum must match. Returns the checksum."""
    tx_sum, tx_len = src.make_file(kib)
    src.serve_file(port)
    rx_sum, rx_len = dst.fetch_file(src.addr, port)
    src.served()
    log("transfer %s -> %s: sent %d B md5 %s, received %d B md5 %s" %
        (src.name, dst.name, tx_len, tx_sum, rx_len, rx_sum))
    test.assertEqual(tx_len, kib * 1024)
    test.assertEqual((rx_len, rx_sum), (tx_len, tx_sum), "the file arrived changed")
    return rx_sum


def iperf(test, src, dst, seconds=2, reverse=False):
    """`iperf3 -c DST -t SECONDS` run by src (dst runs `iperf3 -s`: run-guest.sh --iperf for
    a guest); reverse: `-R`, dst sends. Returns (bytes sent, bytes received) of iperf3's
    end-of-test summary (the receiver's count is up to the end-of-test message, so it may
    be a little below the sender's: iperf3 stops counting with data still in flight)."""
    sent, received = src.iperf_client(dst.addr, seconds, reverse)
    log("iperf3 %s %s %s, %d s: sent %d B, received %d B" %
        (src.name, "<-" if reverse else "->", dst.name, seconds, sent, received))
    test.assertGreater(received, 0)
    test.assertLessEqual(received, sent)
    return sent, received


# ---------------------------------------------------------------------------------------
# Entry point

def main(default_timeout=120):
    """vltest.main()'s options and watchdog, for guest tests: --virtlink PATH (required),
    --timeout S. Fails (exit 2) when QEMU is missing (install-deps installs it) or the guest image is
    missing (the ctest fixture guest_image builds it)."""
    import argparse
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--virtlink", required=True)
    ap.add_argument("--timeout", type=int, default=default_timeout)
    opts, rest = ap.parse_known_args()
    vltest.VIRTLINK = os.path.abspath(opts.virtlink)
    vltest.WATCHDOG_S = opts.timeout
    if not os.access(vltest.VIRTLINK, os.X_OK):
        sys.stderr.write("vlguest: %s is not an executable\n" % vltest.VIRTLINK)
        sys.exit(2)
    if shutil.which(QEMU) is None:
        sys.stderr.write("vlguest: %s is missing (run scripts/install-deps.sh)\n" % QEMU)
        sys.exit(2)
    for f in ("vmlinuz", "initramfs.cpio.gz"):
        if not os.path.exists(os.path.join(IMAGE_DIR, f)):
            sys.stderr.write("vlguest: no guest image in %s (scripts/guest/build-guest.sh)\n"
                             % IMAGE_DIR)
            sys.exit(2)
    # SIGTERM (ctest, the user) unwinds through the Testbed context managers: cleanup runs.
    signal.signal(signal.SIGTERM, getattr(vltest, "_on_sigterm", _on_sigterm))
    signal.signal(signal.SIGALRM, vltest._watchdog)
    signal.alarm(vltest.WATCHDOG_S)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt("SIGTERM")
