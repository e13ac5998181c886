#!/usr/bin/env python3
"""libvirt domains on virtlink ports, both modes of `<interface type='vhostuser'>`, with
Debian's own libvirt daemon (libvirt-daemon, libvirt-daemon-driver-qemu, libvirt-clients).

The test runs a private libvirtd of its own: the session (qemu:///session) daemon, as user
`nobody`, with HOME and the XDG directories in its temporary directory, so it touches no
system state and needs no systemd; its QEMU processes run as `nobody` too, the stand-in
for Debian's `libvirt-qemu` of a system daemon (docs/libvirt.md). It defines and starts the
two example domains of examples/libvirt/ (the test guest image, direct kernel boot):

  * vm1-client.xml, libvirt's client mode (`<source mode='client'>` with `<reconnect>`),
    on a virtlink server port (`vhost-user:`) whose socket is given to QEMU's user with
    `--socket-owner nobody` (mode 0600: no one else may connect);
  * vm2-server.xml, libvirt's server mode (`<source mode='server'>`), on a virtlink client
    port (`vhost-user-client:`) connecting to the socket QEMU creates.

What the test changes in the example files, and only that: the kernel and initrd paths
(the image in build/guest), the socket paths (its temporary directory), and the serial
console, a pty in the examples, becomes a unix socket with a log file, which the test
reads and types on (vlguest.Guest.attach). It checks that QEMU got `vectors=0` from the
`<qemu:override>` and the chardevs it should, that the guests ping each other through the
switch (10 of 10 replies, counters on both ports), then restarts the switch (SIGTERM, the
same command again) and checks both domains are connected again without a reboot and ping
the other way.

    PYTHONPATH=pylib:bench python3 tests/interop/test_libvirt.py --virtlink build/virtlink [-v]
"""
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
import types
import unittest
import xml.etree.ElementTree as ET

from vltestlib import vltest
from vltestlib import vlguest
from vltestlib.vltest import log

EXAMPLES = os.path.join(vltest.REPO, "examples", "libvirt")
QEMU_NS = "http://libvirt.org/schemas/domain/qemu/1.0"
USER = "nobody"  # the session daemon's (and so QEMU's) user: libvirt-qemu's stand-in
IP1, IP2 = "10.0.0.1/24", "10.0.0.2/24"


def sweep_orphans():
    """libvirtd and the QEMUs it starts do not die with a runner killed outright (setpriv's
    change of user clears PDEATHSIG, and libvirt daemonizes QEMU): kill those of runners
    that are gone. They are recognised by a /tmp/vlt-PID- path on their command line."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if os.path.basename(argv[0]) not in ("libvirtd", "qemu-system-x86_64", "virtlogd"):
            continue
        m = re.search(r"/tmp/vlt-(\d+)-", " ".join(argv))
        if m and int(m.group(1)) != os.getpid() and not vltest._pid_alive(int(m.group(1))):
            log("killing %s (pid %s) left by runner %s" % (argv[0], pid, m.group(1)))
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


class Session:
    """A libvirtd session daemon run as USER in a directory of its own (HOME and XDG_*
    there), and virsh talking to it."""

    def __init__(self, tb):
        self.tb = tb
        pw = pwd.getpwnam(USER)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        # A directory of its own with a short path: libvirt puts the QMP monitor's socket at
        # XDG_CONFIG_HOME/libvirt/qemu/lib/domain-N-NAME/monitor.sock, and a unix socket path
        # has at most 107 bytes. /tmp/vlt-PID-*: sweep_stale() removes it after a runner
        # killed outright.
        self.dir = tempfile.mkdtemp(prefix="vlt-%d-lv-" % os.getpid(), dir="/tmp")
        for d in ("", "run", "config", "config/libvirt", "cache", "data"):
            os.makedirs(os.path.join(self.dir, d), exist_ok=True)
            os.chown(os.path.join(self.dir, d), self.uid, self.gid)
        # QEMU's stdout/stderr and the serial log straight to files: no virtlogd spawned.
        with open(os.path.join(self.dir, "config/libvirt/qemu.conf"), "w") as f:
            f.write('stdio_handler = "file"\n')
        self.conf = os.path.join(self.dir, "config/libvirt/libvirtd.conf")
        with open(self.conf, "w") as f:
            f.write("log_level = 3\n")
        self.sock = os.path.join(self.dir, "run/libvirt/libvirt-sock")
        self.env = ["HOME=" + self.dir, "XDG_RUNTIME_DIR=" + self.dir + "/run",
                    "XDG_CONFIG_HOME=" + self.dir + "/config",
                    "XDG_CACHE_HOME=" + self.dir + "/cache",
                    "XDG_DATA_HOME=" + self.dir + "/data", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"]
        self.domains = []
        self.proc = vltest.Proc("libvirtd", self.as_user("libvirtd", "--config", self.conf),
                                tb.dir)
        tb.procs.append(self.proc)
        vltest._wait(self._answers, 30, "libvirtd's socket %s" % self.sock, 0.2)
        log("libvirtd %s" % self.virsh("version").replace("\n", "; "))

    def as_user(self, *argv):
        return ["setpriv", "--reuid=%d" % self.uid, "--regid=%d" % self.gid, "--clear-groups",
                "env", "-i"] + self.env + list(argv)

    def _answers(self):
        if not self.proc.alive():
            raise AssertionError("libvirtd exited (%s):\n%s" % (self.proc.p.returncode,
                                                                self.proc.output()[-3000:]))
        return os.path.exists(self.sock) and self.virsh("version", check=False)[0] == 0

    def virsh(self, *args, check=True, timeout=60):
        r = subprocess.run(self.as_user("virsh", "-c", "qemu:///session?socket=" + self.sock,
                                        *args),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           stdin=subprocess.DEVNULL, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError("virsh %s failed (%d): %s" % (" ".join(args), r.returncode,
                                                               r.stdout))
        return r.stdout.strip() if check else (r.returncode, r.stdout)

    def readable(self, path):
        return subprocess.run(self.as_user("test", "-r", path)).returncode == 0

    def own(self, path):
        os.chown(path, self.uid, self.gid)

    def define_and_start(self, xml_text, name):
        path = os.path.join(self.dir, name + ".xml")
        with open(path, "w") as f:
            f.write(xml_text)
        self.own(path)
        self.virsh("define", path)
        self.domains.append(name)
        t0 = time.monotonic()
        self.virsh("start", name)
        log("virsh start %s: %.1f s" % (name, time.monotonic() - t0))
        return DomainProc(self, name)

    def close(self):
        """Destroys every domain it started (libvirtd's exit would leave QEMU running), then
        kills any QEMU still there."""
        pids = []
        for name in self.domains:
            try:
                pids.append(DomainProc(self, name).pid)
            except (OSError, ValueError):
                pass
            if self.proc.alive():
                self.virsh("destroy", name, check=False, timeout=30)
        for pid in pids:
            if vltest._pid_alive(pid):
                log("QEMU pid %d outlived virsh destroy: SIGKILL" % pid)
                os.kill(pid, signal.SIGKILL)
        self.proc.stop(signal.SIGTERM, timeout=10)
        if self.tb.keep:
            log("kept %s" % self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class DomainProc:
    """A running domain's QEMU, as a vltest.Proc look-alike for vlguest.Guest.attach()."""

    def __init__(self, session, name):
        self.name = name
        with open(os.path.join(session.dir, "run/libvirt/qemu/run", name + ".pid")) as f:
            self.pid = int(f.read().strip())
        self.log_path = os.path.join(session.dir, "cache/libvirt/qemu/log", name + ".log")
        self.p = types.SimpleNamespace(returncode=None)

    def alive(self):
        try:
            with open("/proc/%d/stat" % self.pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    def output(self):
        try:
            return vltest.read_text(self.log_path)
        except OSError:
            return ""

    def cmdline(self):
        with open("/proc/%d/cmdline" % self.pid, "rb") as f:
            return f.read().decode().split("\0")

    def uid(self):
        with open("/proc/%d/status" % self.pid) as f:
            return int(re.search(r"^Uid:\s+(\d+)", f.read(), re.M).group(1))


def domain_xml(example, kernel, initrd, sock, console, serial_log):
    """The example file with only the test's substitutions (see the module's docstring)."""
    ET.register_namespace("qemu", QEMU_NS)
    root = ET.parse(os.path.join(EXAMPLES, example)).getroot()
    root.find("os/kernel").text = kernel
    root.find("os/initrd").text = initrd
    src = root.find("devices/interface/source")
    src.set("path", sock)
    devices = root.find("devices")
    serial = devices.find("serial")
    serial.attrib = {"type": "unix"}
    ET.SubElement(serial, "source", {"mode": "bind", "path": console})
    ET.SubElement(serial, "log", {"file": serial_log, "append": "off"})
    devices.remove(devices.find("console"))  # libvirt adds one on serial0 itself
    return ET.tostring(root, encoding="unicode")


class Libvirt(unittest.TestCase):

    @vltest.ctest("qemu_libvirt", timeout=180, qemu=True)
    def test_client_and_server_modes(self):
        if shutil.which("libvirtd") is None or shutil.which("virsh") is None:
            self.fail("libvirtd or virsh missing (scripts/install-deps.sh installs "
                      "libvirt-daemon, libvirt-daemon-driver-qemu, libvirt-clients)")
        sweep_orphans()
        with vlguest.GuestTestbed(self) as tb:
            os.chmod(tb.dir, 0o711)  # QEMU (USER) reaches DIR/vm1.sock, nothing else there
            lv = Session(tb)
            try:
                self.run_modes(tb, lv)
            finally:
                lv.close()

    def run_modes(self, tb, lv):
        # The guest image, where USER can read it (libvirt's session mode relabels nothing).
        files = []
        for f in ("vmlinux" if os.path.exists(os.path.join(vlguest.IMAGE_DIR, "vmlinux"))
                  else "vmlinuz", "initramfs.cpio.gz"):
            path = os.path.join(vlguest.IMAGE_DIR, f)
            if not lv.readable(path):
                shutil.copy(path, os.path.join(lv.dir, f))
                path = os.path.join(lv.dir, f)
                lv.own(path)
            files.append(path)
        kernel, initrd = files
        sock1 = tb.sock("vm1")                          # virtlink listens (libvirt client mode)
        sock2 = os.path.join(lv.dir, "vm2.sock")        # QEMU listens (libvirt server mode)
        switch_args = dict(ports=["vm1", "vm2=vhost-user-client:" + sock2], forward="bridge",
                           pmd_cores=None,
                           extra=["--pmd-mode", "interrupt", "--socket-owner", USER])
        tb.start_switch(**switch_args)
        st = os.stat(sock1)
        self.assertEqual((st.st_uid, st.st_mode & 0o777), (lv.uid, 0o600),
                         "vm1's socket: owner %d mode %o" % (st.st_uid, st.st_mode & 0o777))

        d1 = lv.define_and_start(domain_xml("vm1-client.xml", kernel, initrd, sock1,
                                            os.path.join(lv.dir, "vm1.console"),
                                            os.path.join(lv.dir, "vm1.serial")), "vl-vm1")
        d2 = lv.define_and_start(domain_xml("vm2-server.xml", kernel, initrd, sock2,
                                            os.path.join(lv.dir, "vm2.console"),
                                            os.path.join(lv.dir, "vm2.serial")), "vl-vm2")
        g1 = vlguest.Guest.attach(tb, "vm1", d1, os.path.join(lv.dir, "vm1.console"),
                                  os.path.join(lv.dir, "vm1.serial"), IP1)
        g2 = vlguest.Guest.attach(tb, "vm2", d2, os.path.join(lv.dir, "vm2.console"),
                                  os.path.join(lv.dir, "vm2.serial"), IP2)
        vlguest.wait_all_ready([g1, g2], timeout=120)

        # What libvirt made of the XML: QEMU runs as USER, the override gave vectors=0, the
        # memory is shared, and the chardevs are a reconnecting client and a server.
        for d, chardev in ((d1, "path=%s,reconnect=1" % sock1), (d2, "path=%s,server=on" % sock2)):
            argv = d.cmdline()
            self.assertEqual(d.uid(), lv.uid, "%s's QEMU runs as uid %d" % (d.name, d.uid()))
            dev = [json.loads(a) for a in argv if a.startswith("{") and "virtio-net-pci" in a]
            self.assertEqual(len(dev), 1, argv)
            self.assertEqual(dev[0].get("vectors"), 0, dev[0])
            # <memoryBacking>: the guest's RAM a shared memfd (libvirt 9.0 still logs
            # "vhost-user interface without any shared memory": its check looks only at
            # hugepages and NUMA cells)
            mem = [json.loads(a) for a in argv if a.startswith("{") and "memory-backend" in a]
            self.assertTrue(any(m.get("qom-type") == "memory-backend-memfd" and m.get("share")
                                for m in mem), mem)
            self.assertTrue(any(a.startswith("socket,id=charnet0,") and chardev in a
                                for a in argv), "%s: no chardev with %s in %s" %
                            (d.name, chardev, argv))

        tb.wait_connected(["vm1", "vm2"])
        info = tb.ports_info()
        self.assertEqual((info["vm1"]["type"], info["vm2"]["type"]),
                         ("vhost-user", "vhost-user-client"))
        vlguest.ping(self, g1, g2)
        st = tb.switch_stats()
        for port in ("vm1", "vm2"):
            self.assertGreaterEqual(st[port]["rx_packets"], 10, vltest.fmt_stats(st))
            self.assertGreaterEqual(st[port]["tx_packets"], 10, vltest.fmt_stats(st))
        vltest.assert_no_corruption(self, st)
        fdb = tb.fdb()
        for g, port in ((g1, "vm1"), (g2, "vm2")):
            mac = g.ready["mac"]
            self.assertEqual(fdb.get(mac), port, "FDB %s" % fdb)

        # Restart the switch with the same command: libvirt's client mode comes back through
        # <reconnect>, its server mode because virtlink's client port connects again.
        up1 = g1.uptime()
        tb.stop_switch()
        tb.start_switch(**switch_args)
        tb.wait_connected(["vm1", "vm2"], timeout=30)
        vlguest.ping(self, g2, g1)
        st = tb.switch_stats()  # a new switch: every count is since the restart
        for port in ("vm1", "vm2"):
            self.assertGreaterEqual(st[port]["rx_packets"], 10, vltest.fmt_stats(st))
            self.assertGreaterEqual(st[port]["tx_packets"], 10, vltest.fmt_stats(st))
        self.assertGreater(g1.uptime(), up1)
        for g in (g1, g2):
            self.assertEqual(g.console.count(r"^VL-READY "), 1, "%s booted again" % g.name)
            self.assertEqual(lv.virsh("domstate", "vl-" + g.name), "running")


if __name__ == "__main__":
    vlguest.main(default_timeout=170)
