"""Shared helpers for virtlink's interop tests (Python 3 standard library only).

The interop tests run the real switch binary against DPDK testpmd peers (virtio-user
front-ends, from the Debian `dpdk` package) and assert on counters, never on rates.

    with vltest.Testbed(self) as tb:
        sw = tb.start_switch(ports=["a", "b"], forward="xconnect")
        rx = tb.start_testpmd("rx", vdevs=[tb.virtio_user("b")], fwd="rxonly")
        tb.wait_connected(["b"])
        ...
        res = tb.stop_testpmd(rx)          # parsed final statistics
        stats = tb.switch_stats()          # {"a": {...}, "b": {...}} from `ctl stats --json`

Guarantees:
  * every child process is stopped (SIGINT, then SIGKILL) and every temporary file and
    DPDK runtime directory we made is removed, also when a test fails or times out;
  * children get PR_SET_PDEATHSIG=SIGKILL, so they die with the test runner even if it is
    killed with SIGKILL (e.g. by a ctest TIMEOUT);
  * every wait has a hard timeout, and the whole test process has a watchdog (SIGALRM);
  * on exit the switch must have exited with status 0 and its output must hold no
    sanitizer report ("ERROR: AddressSanitizer", "runtime error:", ...).

Core plan on the 2-core test machine: the switch's PMD thread on CPU 1, testpmd's
forwarding lcore on CPU 0 (main lcore 1, which idles). Several testpmd processes then share
CPU 0: that changes rates only, and the tests assert on counters.

Run a test file directly (from the repository root):
    PYTHONPATH=pylib:bench python3 tests/interop/test_xxx.py --virtlink build/virtlink [-v]
Environment: VLTEST_KEEP=1 keeps the temporary directory (logs) for inspection.
"""

import argparse
import contextlib
import ctypes
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

PMD_DIR = os.environ.get("VLTEST_DPDK_PMDS", "/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0")
TESTPMD = os.environ.get("VLTEST_TESTPMD", "dpdk-testpmd")
DPDK_RUNTIME_DIR = "/var/run/dpdk"

# The documented drop reasons (INTERFACES.md): always present, 0 when nothing was dropped.
DROP_KEYS = ("no_rx_buffer", "bad_descriptor", "bad_header", "too_big", "ring_broken",
             "no_destination", "bad_csum", "bad_gso", "handoff_full", "short_rx_buffer")
# Drops that mean the switch or a peer broke a ring: never expected with healthy peers.
CORRUPTION_DROPS = ("bad_descriptor", "bad_header", "ring_broken")

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "UndefinedBehaviorSanitizer", "AddressSanitizer:DEADLYSIGNAL",
                     "ThreadSanitizer")

# Set by main() from --virtlink.
VIRTLINK = None
# Seconds for the whole test process (the watchdog); main() sets it from --timeout.
WATCHDOG_S = 120


class TestTimeout(Exception):
    pass



REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def readme_command(start):
    """The README's command that begins with `start` (continuation lines joined): the
    recipe tests run the README's commands exactly as printed."""
    with open(os.path.join(REPO, "README.md")) as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if line.strip().startswith(start):
            cmd = line.strip()
            while cmd.endswith("\\"):
                i += 1
                cmd = cmd[:-1] + " " + lines[i].strip()
            return cmd
    raise AssertionError("README.md has no command starting with %r" % start)


def readme_commands(heading):
    """Every command README.md prints in its section `heading` (the heading line, e.g.
    "### Peers", up to the next heading of the same or a higher level): the lines of its
    indented blocks, continuation lines joined, in order. A recipe test can then assert
    that it ran each of them."""
    with open(os.path.join(REPO, "README.md")) as f:
        lines = f.read().split("\n")
    level = len(heading) - len(heading.lstrip("#"))
    try:
        i = lines.index(heading) + 1
    except ValueError:
        raise AssertionError("README.md has no heading %r" % heading)
    cmds, fenced, prev_blank, in_block = [], False, True, False
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,%d} " % level, line):
            break
        # an indented block starts after a blank line and goes on while lines are indented
        in_block = (not fenced and line.startswith("    ") and bool(line.strip()) and
                    (prev_blank or in_block))
        if in_block:
            cmd = line.strip()
            while cmd.endswith("\\"):
                i += 1
                cmd = cmd[:-1] + " " + lines[i].strip()
            cmds.append(cmd)
        prev_blank = not line.strip()
        i += 1
    return cmds

README_LOCK = "/tmp/virtlink-readme-recipes.lock"


@contextlib.contextmanager
def readme_paths(paths=(), timeout=600):
    """Held by a test while it runs README commands, whose fixed paths (/tmp/vm1.sock,
    /tmp/virtlink.ctl, the DPDK prefixes vm1 and vm2, ...) every README recipe shares.
    ctest runs these tests one at a time (RUN_SERIAL); this lock (flock on README_LOCK)
    keeps them apart across runs too (two build trees, a run by hand next to ctest). Then
    fails if one of `paths` is a socket someone still listens on (a switch of your own):
    the recipes would take it over."""
    fd = os.open(README_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TestTimeout("%s still held after %d s" % (README_LOCK, timeout))
                time.sleep(0.5)
        for p in paths:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(p)
                raise AssertionError("%s is in use (something listens on it): the README's "
                                     "commands would take it over" % p)
            except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
                pass
            finally:
                s.close()
        yield
    finally:
        os.close(fd)


def log(msg):
    sys.stderr.write("[vltest %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def read_text(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


# ---------------------------------------------------------------------------------------
# Child processes

_PR_SET_PDEATHSIG = 1
try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover
    _libc = None


def _child_setup():
    # Die with the test runner, whatever kills it.
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # Do not inherit the runner's blocked/ignored signal state.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


_PR_SET_CHILD_SUBREAPER = 36


class Orphan:
    """A switch's successor (`ctl upgrade`): not our child when it starts, ours once its
    predecessor exits (this process is a child subreaper then). The subset of Popen that
    Proc uses: pid, poll, wait, send_signal, kill, returncode, stdin."""

    def __init__(self, pid):
        self.pid = pid
        self.returncode = None
        self.stdin = None

    def poll(self):
        if self.returncode is None:
            try:
                got, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # not ours (no subreaper): alive while it exists
                if not os.path.exists("/proc/%d" % self.pid):
                    self.returncode = -1
                return self.returncode
            if got == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() >= end:
                raise subprocess.TimeoutExpired("pid %d" % self.pid, timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, sig):
        os.kill(self.pid, sig)

    def kill(self):
        self.send_signal(signal.SIGKILL)


def become_subreaper():
    """Orphans of our children (a switch's successor) become our children."""
    if _libc is not None:
        _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


class Proc:
    """A child process whose stdout+stderr go to a log file."""

    def __init__(self, name, argv, logdir, env=None):
        self.name = name
        self.argv = argv
        self.log_path = os.path.join(logdir, name + ".log")
        self._log = open(self.log_path, "wb")
        # stdin is a pipe we keep open: testpmd's non-interactive mode exits as soon as
        # stdin reaches end of file ("Press enter to exit").
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=self._log,
                                  stderr=subprocess.STDOUT, env=env, preexec_fn=_child_setup,
                                  close_fds=True)
        self.returncode = None
        self.interactive = False  # an interactive testpmd (commands on stdin)
        log("started %s (pid %d): %s" % (name, self.p.pid, " ".join(argv)))

    @property
    def pid(self):
        return self.p.pid

    def alive(self):
        return self.p.poll() is None

    def output(self):
        return read_text(self.log_path)

    def stop(self, sig=signal.SIGINT, timeout=10.0):
        """Sends `sig`, waits up to `timeout` s, then SIGKILL. Returns the exit status.

        An interactive testpmd does not exit on SIGINT/SIGTERM: it is sent "quit" first.
        """
        if self.p.poll() is None and self.interactive:
            try:
                self.p.stdin.write(b"stop\nquit\n")
                self.p.stdin.close()
                self.p.wait(timeout)
            except (OSError, subprocess.TimeoutExpired):
                log("%s (pid %d) did not quit" % (self.name, self.p.pid))
        if self.p.poll() is None:
            try:
                self.p.send_signal(sig)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                log("%s (pid %d) ignored signal %d for %.0f s: SIGKILL" %
                    (self.name, self.p.pid, sig, timeout))
                self.p.kill()
                self.p.wait(5)
        self.returncode = self.p.returncode
        try:
            if self.p.stdin:
                self.p.stdin.close()
        except OSError:
            pass
        self._log.close()
        return self.returncode


# ---------------------------------------------------------------------------------------
# testpmd output parsing

_FWD_HDR = re.compile(r"-+ Forward statistics for port\s+(\d+)\s+-+")
_NIC_HDR = re.compile(r"#+ NIC statistics for port\s+(\d+)\s+#+")
_KV = re.compile(r"([A-Za-z][A-Za-z-]*):\s+(\d+)")


def parse_testpmd(text):
    """Parses testpmd's output.

    Returns {"fwd": {port: {"RX-packets": n, "RX-dropped": n, "RX-total": n, "TX-packets": n,
    "TX-dropped": n, "TX-total": n}}, "nic": {port: {...}}, "done": bool}.
    "fwd" is the final per-port forward statistics block testpmd prints when it stops
    forwarding (on SIGINT/SIGTERM); "nic" is the last "NIC statistics" block of each port
    (printed every --stats-period seconds; it has RX-bytes and TX-bytes).
    """
    fwd, nic = {}, {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FWD_HDR.search(lines[i])
        target = None
        if m:
            target = fwd
        else:
            m = _NIC_HDR.search(lines[i])
            if m:
                target = nic
        if target is None:
            i += 1
            continue
        port = int(m.group(1))
        block = {}
        i += 1
        while i < len(lines) and not re.match(r"^\s*[-#+]{10,}\s*$", lines[i]):
            if _FWD_HDR.search(lines[i]) or _NIC_HDR.search(lines[i]):
                break
            for k, v in _KV.findall(lines[i]):
                block.setdefault(k, int(v))
            i += 1
        target[port] = block
    return {"fwd": fwd, "nic": nic, "done": "Telling cores to stop" in text}


# ---------------------------------------------------------------------------------------
# The test bed

def _wait(cond, timeout, what, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise TestTimeout("timed out after %.1f s waiting for %s" % (timeout, what))
        time.sleep(interval)


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def sweep_stale():
    """Removes what test runners that were killed outright (SIGKILL) left behind: our
    temporary directories (/tmp/vlt-PID-*) and DPDK runtime directories (vltPID*) whose
    runner PID no longer exists. Their child processes died with them (PDEATHSIG)."""
    for base, pat in (("/tmp", r"vlt-(\d+)-"), (DPDK_RUNTIME_DIR, r"vlt(\d+)[a-z]")):
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for n in names:
            m = re.match(pat, n)
            if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
                shutil.rmtree(os.path.join(base, n), ignore_errors=True)


class Testbed:
    """One switch plus any number of testpmd peers in a private temporary directory."""

    def __init__(self, test=None, keep=None):
        self.test = test
        self.keep = os.environ.get("VLTEST_KEEP") == "1" if keep is None else keep
        name = test.id().split(".")[-1] if test is not None else "vltest"
        # /tmp keeps unix socket paths well under 108 bytes.
        sweep_stale()
        self.dir = tempfile.mkdtemp(prefix="vlt-%d-%s-" % (os.getpid(), name[:24]), dir="/tmp")
        self.switch = None
        self.procs = []
        self.prefixes = []
        self.ctl_path = os.path.join(self.dir, "ctl")
        self.port_paths = {}
        self._n = 0
        self._close_t0 = 0.0

    # -- context manager: cleanup always runs ------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close(failed=exc_type is not None)
        return False

    def close(self, failed=False):
        # Cleanup must not be cut short by the watchdog: pause it (every step below has its
        # own timeout) and re-arm it with what is left afterwards.
        left = signal.alarm(0)
        self._close_t0 = time.monotonic()
        try:
            self._close(failed)
        finally:
            if left:
                signal.alarm(max(1, left - int(time.monotonic() - self._close_t0)))

    def _close(self, failed):
        problems = []
        for p in reversed(self.procs):
            if p is self.switch:
                continue
            if p.returncode is None:
                p.stop(signal.SIGINT, timeout=10)
        if self.switch is not None and self.switch.returncode is None:
            rc = self.switch.stop(signal.SIGTERM, timeout=15)
            if rc != 0:
                problems.append("switch exited with status %s" % rc)
        if self.switch is not None:
            problems += self.sanitizer_findings()
        for pre in self.prefixes:
            shutil.rmtree(os.path.join(DPDK_RUNTIME_DIR, pre), ignore_errors=True)
        if failed or problems:
            self.dump_logs()
        if self.keep:
            log("kept %s" % self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
        if problems and not failed:
            raise AssertionError("; ".join(problems))

    def dump_logs(self, tail=60):
        for p in self.procs:
            try:
                text = read_text(p.log_path)
            except OSError:
                continue
            lines = text.splitlines()
            sys.stderr.write("----- %s (last %d of %d lines) -----\n" %
                             (p.name, min(tail, len(lines)), len(lines)))
            sys.stderr.write("\n".join(lines[-tail:]) + "\n")
        sys.stderr.flush()

    def sanitizer_findings(self):
        text = read_text(self.switch.log_path)
        return ["switch output has a sanitizer report: %r" % m for m in SANITIZER_MARKERS
                if m in text]

    # -- the switch ---------------------------------------------------------------------
    def sock(self, port):
        return os.path.join(self.dir, port + ".sock")

    def start_switch(self, ports=("a", "b"), forward="xconnect", pmd_cores="1", config=None,
                     extra=(), log_level="info", netns=None, env=None, wrap=()):
        """Starts `virtlink switch` with vhost-user server ports NAME -> DIR/NAME.sock (an
        entry "NAME=TYPE:ARG" of `ports` is passed as it is, in its place: an uplink).

        `config`: optional TOML text written to DIR/switch.toml and passed with --config
        (its [[port]] tables may use tb.sock(NAME) paths; then leave `ports` empty for them).
        `netns`: the name of a network namespace to run it in (`ip netns exec`, which execs:
        the Proc's PID is the switch's). `env`: variables added to the switch's environment
        (e.g. NOTIFY_SOCKET); `wrap`: argv words before the switch's, a command that execs it
        (its PID stays the switch's). Waits until every socket file and the control socket
        exist.
        """
        assert VIRTLINK, "run through vltest.main() with --virtlink PATH"
        argv = ([] if netns is None else ["ip", "netns", "exec", netns]) + list(wrap) + [
            VIRTLINK, "--log-level", log_level, "switch"]
        if config is not None:
            cfg = os.path.join(self.dir, "switch.toml")
            with open(cfg, "w") as f:
                f.write(config)
            argv += ["--config", cfg]
            for m in re.finditer(r'path\s*=\s*"([^"]+)"', config):
                name = os.path.basename(m.group(1)).rsplit(".", 1)[0]
                self.port_paths[name] = m.group(1)
        for name in ports:
            if "=" in name:
                argv += ["--port", name]
                continue
            self.port_paths[name] = self.sock(name)
            argv += ["--port", "%s=vhost-user:%s" % (name, self.sock(name))]
        if forward:
            argv += ["--forward", forward]
        if pmd_cores:
            argv += ["--pmd-cores", pmd_cores]
        argv += ["--control", self.ctl_path]
        argv += list(extra)
        env = dict(os.environ, **(env or {}))
        # Sanitizer builds: make any finding fatal and visible; harmless otherwise.
        env.setdefault("ASAN_OPTIONS", "abort_on_error=0:detect_leaks=1")
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        self.switch = Proc("switch", argv, self.dir, env=env)
        self.procs.append(self.switch)
        paths = list(self.port_paths.values()) + [self.ctl_path]

        def ready():
            if not self.switch.alive():
                raise AssertionError("switch exited early with status %s:\n%s" %
                                     (self.switch.p.returncode, self.switch.output()))
            return all(os.path.exists(p) for p in paths)
        _wait(ready, 15, "the switch's sockets %s" % paths)
        return self.switch

    def ctl(self, *args, json_out=True, timeout=10):
        argv = [VIRTLINK, "ctl", "--control", self.ctl_path] + list(args)
        if json_out:
            argv.append("--json")
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise AssertionError("%s failed (%d): %s" % (" ".join(argv), r.returncode,
                                                         r.stderr.decode(errors="replace")))
        return json.loads(r.stdout) if json_out else r.stdout.decode()

    def upgrade(self, binary=None, timeout=90, json_out=True):
        """`virtlink ctl upgrade [BINARY] --json` (text without --json when not `json_out`).
        On success: the old switch process must exit with status 0, and the switch Proc
        follows the successor (its pid from the reply, or the text's footer); returns (True,
        the reply or the text). On failure: (False, ctl's stderr), the switch Proc as it was."""
        become_subreaper()
        argv = [VIRTLINK, "ctl", "--control", self.ctl_path, "upgrade"] + (
            [binary] if binary else []) + (["--json"] if json_out else [])
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            return False, r.stderr.decode(errors="replace")
        if json_out:
            res = json.loads(r.stdout)
            pid = res["pid"]
        else:
            res = r.stdout.decode()
            m = re.search(r"^\(switch (\d+) at ", res, re.M)
            if not m:
                raise AssertionError("no '(switch PID at PATH)' footer in:\n" + res)
            pid = int(m.group(1))
        old = self.switch.p
        rc = old.wait(15)
        if old.stdin:
            old.stdin.close()
        if rc != 0:
            raise AssertionError("the switch handed over, then exited with status %s" % rc)
        self.switch.p = Orphan(pid)
        log("upgraded: switch pid %d -> %d" % (old.pid, pid))
        return True, res

    def switch_stats(self):
        """`ctl stats --json` as {port name: port object}."""
        return {p["name"]: p for p in self.ctl("stats")["ports"]}

    def ports_info(self):
        return {p["name"]: p for p in self.ctl("ports")}

    def wait_connected(self, names, timeout=20):
        """Waits until each named port is connected with both vrings ready."""
        def ok():
            if not self.switch.alive():
                raise AssertionError("switch died:\n" + self.switch.output())
            for p in self.procs:  # a peer we did not stop must still be running
                if p is not self.switch and p.returncode is None and p.p.poll() is not None:
                    raise AssertionError("%s exited early (%s):\n%s" %
                                         (p.name, p.p.returncode, p.output()[-4000:]))
            info = self.ports_info()
            return all(info[n]["state"] == "connected" and
                       all(v["ready"] for v in info[n]["vrings"]) for n in names)
        _wait(ok, timeout, "ports %s connected with ready vrings" % list(names), 0.1)

    def wait_quiet(self, stable_s=0.6, timeout=20, interval=0.2):
        """Waits until no switch counter changes for `stable_s` seconds; returns the stats."""
        def key(st):
            return json.dumps({n: {k: p[k] for k in ("rx_packets", "rx_bytes", "tx_packets",
                                                      "tx_bytes", "drops")}
                               for n, p in st.items()}, sort_keys=True)
        deadline = time.monotonic() + timeout
        last = self.switch_stats()
        since = time.monotonic()
        while True:
            time.sleep(interval)
            cur = self.switch_stats()
            if key(cur) != key(last):
                last, since = cur, time.monotonic()
            elif time.monotonic() - since >= stable_s:
                return cur
            if time.monotonic() >= deadline:
                raise TestTimeout("switch counters still changing after %.0f s" % timeout)

    def wait_counter(self, port, field, minimum, timeout=20):
        """Waits until stats[port][field] >= minimum; returns the stats."""
        res = {}

        def ok():
            res["st"] = self.switch_stats()
            return res["st"][port][field] >= minimum
        _wait(ok, timeout, "%s.%s >= %d" % (port, field, minimum), 0.1)
        return res["st"]

    # -- testpmd ------------------------------------------------------------------------
    def virtio_user(self, port, index=None, **kw):
        """A --vdev string for a virtio-user front-end on the switch port `port`."""
        if index is None:
            index = self._n
            self._n += 1
        s = "net_virtio_user%d,path=%s,queues=1" % (index, self.port_paths.get(port,
                                                                             self.sock(port)))
        for k, v in kw.items():
            s += ",%s=%s" % (k, v)
        return s

    def start_testpmd(self, name, vdevs, fwd, args=(), mem_mb=1024, nb_mbufs=16384,
                      lcores="0,1", main_lcore=1, tx_first=False, interactive=True,
                      stats_period=None, eal_args=(),
                      plugins=("librte_net_virtio.so", "librte_mempool_ring.so"), start=True):
        """Starts testpmd with the given virtio-user vdevs; forwarding starts at once.

        Forwarding runs on the lcore that is not the main lcore (CPU 0 by default).
        interactive=True (default): testpmd reads commands from our stdin pipe; forwarding
        is started with -a, or with "start tx_first" when `tx_first` (--tx-first exists
        only without -i). stop_testpmd() then sends "stop", "show port stats all", "quit",
        which prints the final forward statistics and the NIC statistics (with RX-bytes)
        deterministically, after forwarding stopped.
        interactive=False: -a (and --tx-first); stop_testpmd() sends SIGINT, on which
        testpmd prints only its forward statistics (the NIC statistics blocks printed every
        --stats-period seconds are not reliable: under CPU contention whole periods were
        seen to be skipped).
        `plugins`: the DPDK PMD plugins to load from PMD_DIR (net_vhost vdevs need
        "librte_net_vhost.so"). `eal_args`: more EAL options (before "--").
        Returns its Proc; stop it with stop_testpmd() to get the parsed statistics.
        """
        prefix = "vlt%d%s" % (os.getpid(), name)
        self.prefixes.append(prefix)
        argv = [TESTPMD, "-l", lcores, "--main-lcore", str(main_lcore), "--no-huge",
                "-m", str(mem_mb), "--no-pci", "--file-prefix", prefix]
        for plugin in plugins:
            argv += ["-d", os.path.join(PMD_DIR, plugin)]
        for v in vdevs:
            argv += ["--vdev", v]
        argv += list(eal_args)
        argv += ["--", "--no-mlockall", "--total-num-mbufs=%d" % nb_mbufs,
                 "--forward-mode=%s" % fwd]
        if interactive:
            argv.append("-i")
            if not tx_first and start:  # start=False: ports set up, no lcore polling
                argv.append("-a")
        else:
            argv.append("-a")
            if tx_first:
                argv.append("--tx-first")
        if stats_period:
            argv += ["--stats-period", str(stats_period)]
        argv += list(args)
        env = dict(os.environ)
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LD_PRELOAD"):
            env.pop(k, None)
        if interactive:  # line-buffered stdout, so testpmd_port_stats() can read replies
            argv = ["stdbuf", "-oL"] + argv
        p = Proc("testpmd-" + name, argv, self.dir, env=env)
        p.interactive = interactive
        self.procs.append(p)
        if interactive and tx_first:
            # Queued until EAL and port setup are done; the ring is ready by the time
            # testpmd reads it (it starts the ports before reading commands).
            self.testpmd_cmd(p, "start tx_first")
        # Callers wait for the switch to see the port (wait_connected). Here only check
        # that EAL init did not fail outright.
        time.sleep(0.3)
        if not p.alive():
            raise AssertionError("%s exited at start (%s):\n%s" %
                                 (p.name, p.p.returncode, p.output()[-4000:]))
        return p

    def testpmd_cmd(self, p, *cmds):
        """Writes interactive commands to testpmd's stdin."""
        try:
            p.p.stdin.write("".join(c + "\n" for c in cmds).encode())
            p.p.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise AssertionError("%s: cannot send %s: %s" % (p.name, cmds, e))

    def testpmd_port_stats(self, p, nports, timeout=10):
        """Asks an interactive testpmd for "show port stats all" and returns the fresh NIC
        statistics ({port: {...}}, cumulative since it started) once it printed them."""
        want = [len(re.findall(r"NIC statistics for port\s+%d\b" % i, read_text(p.log_path))) + 1
                for i in range(nports)]
        self.testpmd_cmd(p, "show port stats all")
        deadline = time.monotonic() + timeout
        while True:
            text = read_text(p.log_path)
            if all(len(re.findall(r"NIC statistics for port\s+%d\b" % i, text)) >= want[i]
                   for i in range(nports)):
                # the block is complete once the closing line of the last port is there
                if re.search(r"NIC statistics for port\s+%d\b[\s\S]*?\n\s*#{10,}\s*\n" %
                             (nports - 1), text[text.rfind("NIC statistics for port"):] + "\n"):
                    return parse_testpmd(text)["nic"]
            if time.monotonic() > deadline:
                raise AssertionError("%s printed no port statistics within %.0f s" % (p.name, timeout))
            time.sleep(0.05)

    def stop_testpmd(self, p, timeout=15):
        """Stops testpmd and returns parse_testpmd() of its whole output (plus "rc").

        Interactive: "stop" (prints the forward statistics), "show port stats all" (the
        NIC statistics, final since nothing polls any more), "quit" (closes the ports,
        which disconnects them from the switch). Otherwise SIGINT (forward statistics).
        SIGKILL after `timeout` seconds either way.
        """
        interactive = p.interactive
        if interactive and p.alive():
            self.testpmd_cmd(p, "stop", "show port stats all", "quit")
            try:
                p.p.wait(timeout)
            except subprocess.TimeoutExpired:
                log("%s did not quit within %.0f s" % (p.name, timeout))
            p.interactive = False  # "quit" was sent: what is left is signals
        rc = p.stop(signal.SIGINT, timeout=timeout if not interactive else 3)
        text = read_text(p.log_path)
        res = parse_testpmd(text)
        res["rc"] = rc
        res["text"] = text
        if not res["fwd"]:
            raise AssertionError("%s printed no forward statistics (status %s):\n%s" %
                                 (p.name, rc, text[-4000:]))
        if interactive and not res["nic"]:
            raise AssertionError("%s printed no NIC statistics (status %s):\n%s" %
                                 (p.name, rc, text[-4000:]))
        return res


def one_way(tb, src="a", dst="b", tx_args=("--txpkts=64",), rx_args=(), rx_vdev_kw=None,
            tx_vdev_kw=None, traffic_s=2.0, min_delivered=1000, during=None):
    """testpmd txonly on port `src` -> switch -> testpmd rxonly on port `dst`.

    Starts the receiver first (so its ring is ready before traffic starts), then the sender;
    waits until the switch delivered `min_delivered` frames to `dst` (0: until it took
    1000 from `src`), lets traffic run `traffic_s` more seconds, stops the sender, waits
    until the switch's counters settle and stops the receiver.
    Returns (switch stats after draining, sender result, receiver result, stats after the
    receiver left). `during(tb)`, if given, is called while traffic flows.
    """
    rx = tb.start_testpmd("rx", [tb.virtio_user(dst, **(rx_vdev_kw or {}))], "rxonly",
                          args=list(rx_args))
    tb.wait_connected([dst])
    tx = tb.start_testpmd("tx", [tb.virtio_user(src, **(tx_vdev_kw or {}))], "txonly",
                          args=list(tx_args))
    tb.wait_connected([src])
    if min_delivered:
        tb.wait_counter(dst, "tx_packets", min_delivered, timeout=30)
    else:
        tb.wait_counter(src, "rx_packets", 1000, timeout=30)
    time.sleep(traffic_s)
    if during is not None:
        during(tb)
    txres = tb.stop_testpmd(tx)
    st = tb.wait_quiet()
    rxres = tb.stop_testpmd(rx)
    after = tb.switch_stats()
    return st, txres, rxres, after


# ---------------------------------------------------------------------------------------
# Assertion helpers

def vnf_stats(proc, timeout=5):
    """The statistics of a running `virtlink vnf` (Proc): SIGUSR1 makes it print them as one
    JSON line. Raises RuntimeError (with its output's tail) if none comes within `timeout` s."""
    before = proc.output().count("\n")
    os.kill(proc.pid, signal.SIGUSR1)
    deadline = time.time() + timeout
    while time.time() < deadline:
        lines = proc.output().splitlines()
        for line in reversed(lines[before:]):
            if line.startswith("{"):
                return json.loads(line)
        time.sleep(0.02)
    raise RuntimeError("%s printed no statistics:\n%s" % (proc.name, proc.output()[-3000:]))


def drops_total(stats):
    return sum(sum(p["drops"].values()) for p in stats.values())


def drops_by_reason(stats):
    out = {}
    for p in stats.values():
        for k, v in p["drops"].items():
            out[k] = out.get(k, 0) + v
    return out


def assert_drop_keys(test, stats):
    for name, p in stats.items():
        for k in DROP_KEYS:
            test.assertIn(k, p["drops"], "port %s: drop reason %s missing" % (name, k))
            test.assertIsInstance(p["drops"][k], int)
        for k in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "state", "features",
                  "feature_names", "name", "type", "path"):
            test.assertIn(k, p, "port %s: key %s missing" % (name, k))


def assert_no_corruption(test, stats):
    for name, p in stats.items():
        for k in CORRUPTION_DROPS:
            test.assertEqual(p["drops"][k], 0, "port %s: %s drops: %s" % (name, k, p["drops"]))


def fmt_stats(stats):
    rows = []
    for n, p in stats.items():
        d = {k: v for k, v in p["drops"].items() if v}
        rows.append("%s: rx %d pkts/%d B, tx %d pkts/%d B, drops %s" %
                    (n, p["rx_packets"], p["rx_bytes"], p["tx_packets"], p["tx_bytes"], d or 0))
    return "; ".join(rows)


# ---------------------------------------------------------------------------------------
# ctest registration


def run_gen(tb, ports, args, timeout=60, name="gen", netns=None, cpu="0"):
    """Runs `virtlink gen` once (one trial) for Testbed `tb` with `ports` [(name, spec)] and
    extra `args`, in network namespace `netns` if given, pinned to `cpu`; fails on a
    sanitizer report or a non-zero exit; returns its JSON."""
    out = os.path.join(tb.dir, name + ".json")
    argv = ([] if netns is None else ["ip", "netns", "exec", netns]) + [VIRTLINK, "gen"]
    for n, spec in ports:
        argv += ["--port", "%s=%s" % (n, spec)]
    argv += ["--cpu", str(cpu), "--json", out] + list(args)
    p = Proc(name, argv, tb.dir)
    tb.procs.append(p)
    try:
        p.p.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    rc = p.stop()
    text = p.output()
    for m in SANITIZER_MARKERS:
        if m in text:
            raise AssertionError("gen output has a sanitizer report: %r\n%s" % (m, text[-4000:]))
    if rc != 0:
        raise AssertionError("gen exited with status %s:\n%s" % (rc, text[-4000:]))
    with open(out) as f:
        doc = json.load(f)
    log("gen: " + " | ".join(l for l in text.splitlines() if l.startswith(("stream", "clock"))))
    return doc

def ctest(name, timeout, asan=False, qemu=False):
    """Registers the decorated test method (or test class: the whole class is one entry) as
    the ctest entry `name`, run as `python3 FILE --virtlink BIN --timeout W Class[.method]`.

    `timeout`: ctest's TIMEOUT in s (doubled in a sanitizer build); the test's watchdog W is
    10 s less (15 s with qemu), so it cleans up before ctest kills it. `asan`: also label
    `asan` in a sanitizer build (scripts/test.sh runs `ctest -L "unit|asan"` there). `qemu`:
    labels `interop;qemu` and the fixture `guest_image`. The other labels come from the
    directory: `interop` (tests/interop), `hostile` (tests/hostile), `package` (tests/package).

    tests/ctest_cases.py reads these decorators at configure time (ast, without importing
    the file), so the arguments must be literals. At run time the decorator only records
    them (as `obj.ctest`).
    """
    def mark(obj):
        obj.ctest = {"name": name, "timeout": timeout, "asan": asan, "qemu": qemu}
        return obj
    return mark


# ---------------------------------------------------------------------------------------
# Entry point

def _on_sigterm(signum, frame):
    raise KeyboardInterrupt("SIGTERM")


def _watchdog(signum, frame):
    raise TestTimeout("test process watchdog: over %d s" % WATCHDOG_S)


def main(default_timeout=90):
    """unittest.main() with --virtlink PATH (required) and --timeout S (the watchdog).

    Fails (exit 2) when testpmd or the DPDK plugins are missing: scripts/install-deps.sh
    installs them, so their absence is an install bug, not a reason to skip.
    """
    global VIRTLINK, WATCHDOG_S
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--virtlink", required=True)
    ap.add_argument("--timeout", type=int, default=default_timeout)
    opts, rest = ap.parse_known_args()
    VIRTLINK = os.path.abspath(opts.virtlink)
    WATCHDOG_S = opts.timeout
    if not os.access(VIRTLINK, os.X_OK):
        sys.stderr.write("vltest: %s is not an executable\n" % VIRTLINK)
        sys.exit(2)
    if shutil.which(TESTPMD) is None or not os.path.exists(
            os.path.join(PMD_DIR, "librte_net_virtio.so")):
        sys.stderr.write("vltest: %s or the DPDK plugins in %s are missing (run scripts/install-deps.sh)\n" %
                         (TESTPMD, PMD_DIR))
        sys.exit(2)
    # SIGTERM (ctest, the user) unwinds through the Testbed context managers: cleanup runs.
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGALRM, _watchdog)
    signal.alarm(WATCHDOG_S)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
