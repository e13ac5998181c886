"""A stand-in for systemd's notification socket (sd_notify(3)), for tests on a machine whose
PID 1 is not systemd: an AF_UNIX SOCK_DGRAM socket bound where NOTIFY_SOCKET will name it,
and a thread that records every datagram with its arrival time.

    with NotifySocket(os.path.join(tb.dir, "notify")) as ns:
        tb.start_switch(..., env=ns.env(watchdog_usec=2000000))
        i = ns.wait(lambda m: m.get("READY") == "1", 10, "READY=1")
        t, fields = ns.messages[i]

Each message is (time.monotonic() at arrival, {KEY: VALUE}) from the datagram's
newline-separated KEY=VALUE assignments.
"""
import os
import socket
import threading
import time


class NotifySocket:
    def __init__(self, path, on_message=None):
        """`on_message(fields)`, if given, runs on the receiving thread as each datagram
        arrives, before the next is read (e.g. to probe the sender while it is at that
        point); what it returns is stored under the key "_probe"."""
        self.path = path
        self.messages = []
        self._on_message = on_message
        self._cv = threading.Condition()
        self._stop = False
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(path)
        self._sock.settimeout(0.1)
        self._thread = threading.Thread(target=self._run, name="notify-socket", daemon=True)
        self._thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def env(self, watchdog_usec=None, watchdog_pid=None):
        """The environment systemd gives a Type=notify unit (with WatchdogSec=)."""
        e = {"NOTIFY_SOCKET": self.path}
        if watchdog_usec is not None:
            e["WATCHDOG_USEC"] = str(watchdog_usec)
        if watchdog_pid is not None:
            e["WATCHDOG_PID"] = str(watchdog_pid)
        return e

    def _run(self):
        while not self._stop:
            try:
                data = self._sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            t = time.monotonic()
            fields = dict(line.split("=", 1) for line in data.decode("utf-8", "replace").split("\n")
                          if "=" in line)
            if self._on_message is not None:
                fields["_probe"] = self._on_message(fields)
            with self._cv:
                self.messages.append((t, fields))
                self._cv.notify_all()

    def wait(self, pred, timeout, what, start=0):
        """The index of the first message from index `start` on whose fields satisfy
        `pred`, waiting up to `timeout` s for it (AssertionError then)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for i in range(start, len(self.messages)):
                    if pred(self.messages[i][1]):
                        return i
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("no %s on %s within %.1f s; got %s" % (
                        what, self.path, timeout, [m[1] for m in self.messages[start:]]))
                self._cv.wait(left)

    def snapshot(self):
        with self._cv:
            return list(self.messages)

    def close(self):
        self._stop = True
        self._thread.join(5)
        self._sock.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
