#!/usr/bin/env python3
"""The Debian package (debian/, README "Installing the package"), built with the README's
command verbatim in a scratch copy of the tracked files (ccache reused: CCACHE_DIR,
CCACHE_BASEDIR and CCACHE_NOHASHDIR as scripts/build.sh sets them), then checked:

- the .deb's files (binary, unit, conffile, man pages, completion, docs) and its control
  data (the shlibs dependencies, the conffile, the version of CMakeLists.txt);
- lintian: no error and no warning (debian/virtlink.lintian-overrides says why for what it
  overrides);
- the unit: its settings, and `systemd-analyze verify` offline (PID 1 here is not systemd;
  ExecStart pointed at the extracted binary, man pages found through MANPATH);
- the packaged binary: --version, --help; the unit's own command line, with its paths moved
  under a scratch root, and the shipped /etc/virtlink/virtlink.toml (as shipped, and with
  every "#key = value" example uncommented) accepted: READY=1 on a NOTIFY_SOCKET of ours,
  `ctl show` answers, SIGTERM gives STOPPING=1 and exit status 0;
- the man pages render (man -l) and the switch's page has every option of its --help;
- the bash completion, sourced with the packaged binary: subcommands, the ctl commands of
  src/control/command_table.cpp, option values;
- a portable build: no -march=native in the build log's compile commands (DPDK's own
  -march=corei7 on the DPDK layer only), dpkg-buildflags' hardening flags in them.

    PYTHONPATH=pylib:bench python3 tests/package/test_package.py --virtlink build/virtlink -v
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import unittest

from vltestlib import vltest
from vltestlib.notify_socket import NotifySocket
from vltestlib.vltest import log

REPO = vltest.REPO
BUILD_CMD = "DEB_BUILD_OPTIONS=nocheck dpkg-buildpackage -us -uc -b"
# The commands of README "Installing the package" after the build: not run here, since PID
# 1 is not systemd and the tests install nothing on this machine (the unit is verified
# offline, its notify protocol in tests/interop/test_service.py).
NOT_RUN = ("apt install ../virtlink_{version}_amd64.deb", "systemctl enable --now virtlink",
           "systemctl reload virtlink")
CAPS = ("CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_SYS_NICE", "CAP_IPC_LOCK", "CAP_SYS_RESOURCE",
        "CAP_BPF", "CAP_PERFMON", "CAP_CHOWN", "CAP_FOWNER")


def run(argv, timeout=60, **kw):
    """`argv`'s stdout (stderr joined); AssertionError with the output when it fails."""
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       stdin=subprocess.DEVNULL, timeout=timeout, **kw)
    out = r.stdout.decode("utf-8", "replace")
    if r.returncode != 0:
        raise AssertionError("%s: exit status %d:\n%s" % (argv, r.returncode, out[-4000:]))
    return out


def run_group(argv, timeout, **kw):
    """run() for a command with children of its own (the package build): in a process
    group of its own, killed whole when the test stops waiting (timeout, watchdog, SIGTERM),
    so that no compiler outlives the test."""
    with open(os.devnull) as null:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=null,
                             start_new_session=True, **kw)
        try:
            out, _ = p.communicate(timeout=timeout)
        except BaseException:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    p.wait(10)
                    break
                except subprocess.TimeoutExpired:
                    pass
            raise
    out = out.decode("utf-8", "replace")
    if p.returncode != 0:
        raise AssertionError("%s: exit status %d:\n%s" % (argv, p.returncode, out[-6000:]))
    return out


def project_version():
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        return re.search(r"project\(virtlink VERSION ([0-9.]+)", f.read()).group(1)


def ccache_env(src):
    """scripts/build.sh's ccache settings for a build in `src`, and the cache directory
    itself: debhelper gives the build a HOME of its own, where ccache would start empty."""
    env = {"CCACHE_BASEDIR": src, "CCACHE_NOHASHDIR": "1"}
    if shutil.which("ccache"):
        env["CCACHE_DIR"] = run(["ccache", "-k", "cache_dir"]).strip()
    return env


def unit_settings(path):
    """{KEY: [values]} of a unit file's assignments (every section)."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith(("#", ";", "[")):
                k, v = line.split("=", 1)
                out.setdefault(k, []).append(v)
    return out


@vltest.ctest("package", timeout=1500)
class Package(unittest.TestCase):
    """One package build (setUpClass), every check on its products."""

    @classmethod
    def setUpClass(cls):
        vltest.sweep_stale()
        cls.dir = tempfile.mkdtemp(prefix="vlt-%d-package-" % os.getpid(), dir="/tmp")
        try:
            cls.build()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def build(cls):
        """The scratch copy, the README's build command in it, the .deb extracted."""
        cls.src = os.path.join(cls.dir, "virtlink")
        files = run(["git", "-C", REPO, "ls-files", "-z"]).split("\0")
        for rel in filter(None, files):
            dst = os.path.join(cls.src, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(os.path.join(REPO, rel), dst, follow_symlinks=False)
        cls.version = project_version()
        env = dict(os.environ, **ccache_env(cls.src))
        log("building the package in %s: %s" % (cls.src, BUILD_CMD))
        cls.build_log = run_group(["nice", "bash", "-c", BUILD_CMD], vltest.WATCHDOG_S,
                                  cwd=cls.src, env=env)
        log("built: %s" % ", ".join(sorted(f for f in os.listdir(cls.dir) if f != "virtlink")))
        cls.deb = os.path.join(cls.dir, "virtlink_%s_amd64.deb" % cls.version)
        cls.root = os.path.join(cls.dir, "root")
        run(["dpkg-deb", "-x", cls.deb, cls.root])
        cls.bin = os.path.join(cls.root, "usr/bin/virtlink")
        units = glob.glob(os.path.join(cls.root, "*lib/systemd/system/virtlink.service")) + \
            glob.glob(os.path.join(cls.root, "usr/lib/systemd/system/virtlink.service"))
        assert len(units) == 1, units
        cls.unit = units[0]

    @classmethod
    def tearDownClass(cls):
        if os.environ.get("VLTEST_KEEP") == "1":
            log("kept %s" % cls.dir)
        else:
            shutil.rmtree(cls.dir, ignore_errors=True)

    # -- the package ------------------------------------------------------------------------
    def test_readme_commands(self):
        """The README's section prints the build command this test ran, and after it only
        the commands listed in NOT_RUN (naming the .deb the build made)."""
        cmds = vltest.readme_commands("## Installing the package")
        self.assertEqual(cmds[0], BUILD_CMD)
        self.assertEqual(cmds[1:], [c.format(version=self.version) for c in NOT_RUN])
        self.assertTrue(os.path.exists(self.deb))

    def test_contents(self):
        listing = run(["dpkg-deb", "-c", self.deb])
        paths = {line.split()[-1].lstrip(".") for line in listing.splitlines()}
        for p in ("/usr/bin/virtlink", "/etc/virtlink/virtlink.toml",
                  "/usr/share/bash-completion/completions/virtlink",
                  "/usr/share/doc/virtlink/copyright", "/usr/share/doc/virtlink/README.md.gz",
                  "/usr/lib/cni/virtlink-cni"):
            self.assertIn(p, paths)
        self.assertIn("/" + os.path.relpath(self.unit, self.root), paths)
        for page in ("virtlink", "virtlink-switch", "virtlink-ctl", "virtlink-top", "virtlink-gen",
                     "virtlink-vnf"):
            self.assertIn("/usr/share/man/man1/%s.1.gz" % page, paths)
        for exe in ("/usr/bin/virtlink", "/usr/lib/cni/virtlink-cni"):
            self.assertIn("-rwxr-xr-x root/root", [l for l in listing.splitlines() if l.endswith(exe)][0])
        # The CNI plugin runs from the package as a runtime runs it (VERSION needs nothing).
        out = subprocess.run([os.path.join(self.root, "usr/lib/cni/virtlink-cni")], input='{"cniVersion":"1.0.0"}',
                             env={"CNI_COMMAND": "VERSION"}, stdout=subprocess.PIPE, text=True, timeout=10).stdout
        self.assertIn("1.1.0", json.loads(out)["supportedVersions"])
        # The shipped configuration is the tree's.
        with open(os.path.join(REPO, "examples/virtlink.toml")) as a, \
                open(os.path.join(self.root, "etc/virtlink/virtlink.toml")) as b:
            self.assertEqual(a.read(), b.read())

    def test_control(self):
        info = run(["dpkg-deb", "-I", self.deb])
        fields = dict(re.findall(r"^ ([A-Z][A-Za-z-]+): (.*)$", info, re.M))
        self.assertEqual(fields["Package"], "virtlink")
        self.assertEqual(fields["Version"], self.version)
        self.assertEqual(fields["Architecture"], "amd64")
        depends = fields["Depends"]
        self.assertNotIn("${", depends)
        for lib in ("libc6", "libstdc++6", "libsystemd0", "libxdp1", "libbpf1", "librte-eal23",
                    "libspdlog1", "libfmt9", "libtomlplusplus3"):
            self.assertIn(lib, depends, "shlibs dependencies: %s" % depends)
        ctrl = os.path.join(self.dir, "control")
        run(["dpkg-deb", "-e", self.deb, ctrl])
        with open(os.path.join(ctrl, "conffiles")) as f:
            self.assertEqual(f.read().split(), ["/etc/virtlink/virtlink.toml"])
        changelog = run(["dpkg-parsechangelog", "-l", os.path.join(self.src, "debian/changelog"),
                         "-S", "Version"]).strip()
        self.assertEqual(changelog, self.version, "debian/changelog against CMakeLists.txt")

    def test_lintian(self):
        changes = os.path.join(self.dir, "virtlink_%s_amd64.changes" % self.version)
        out = run(["lintian", "--allow-root", "--display-info", "--show-overrides", changes],
                  timeout=300)
        log("lintian:\n" + out)
        bad = [l for l in out.splitlines() if l.startswith(("E:", "W:"))]
        self.assertEqual(bad, [], "lintian errors or warnings")
        # It looked at the binary package: the override (debian/virtlink.lintian-overrides)
        # was needed and used.
        self.assertIn("O: virtlink: package-supports-alternative-init-but-no-init.d-script", out)

    def test_portable_build(self):
        compiles = [l for l in self.build_log.splitlines() if " -c " in l and "c++" in l]
        self.assertGreater(len(compiles), 50, "the build log's compile commands (ninja -v)")
        for line in compiles:
            self.assertNotIn("-march=native", line)
            for m in re.findall(r"-march=(\S+)", line):
                # DPDK's pkg-config flags, private to the DPDK layer (CMakeLists.txt): the
                # baseline Debian's DPDK libraries are built for.
                self.assertEqual(m, "corei7", line)
                self.assertIn("virtlink_wire.dir", line)
            self.assertIn("-D_FORTIFY_SOURCE=2", line)  # dpkg-buildflags' flags
            self.assertIn("-fstack-protector-strong", line)
        self.assertIn("-DVIRTLINK_NATIVE=OFF", self.build_log)

    # -- the unit -----------------------------------------------------------------------------
    def test_unit(self):
        u = unit_settings(self.unit)
        for key, value in (("Type", "notify"), ("WatchdogSec", "30s"), ("Restart", "on-failure"),
                           ("RuntimeDirectory", "virtlink"), ("StateDirectory", "virtlink"),
                           ("LimitMEMLOCK", "infinity"),
                           ("ExecReload", "/bin/kill -HUP $MAINPID")):
            self.assertEqual(u.get(key), [value], key)
        self.assertEqual(u["ExecStart"], [
            "/usr/bin/virtlink switch --config /etc/virtlink/virtlink.toml --control "
            "/run/virtlink/virtlink.ctl --db /var/lib/virtlink/state.json"])
        caps = u["CapabilityBoundingSet"][0].split()
        for c in CAPS:
            self.assertIn(c, caps)
        # Offline: the extracted binary for ExecStart, the extracted pages for
        # Documentation=man:...; any complaint (an unknown key is only a warning) fails.
        vdir = os.path.join(self.dir, "verify")
        os.makedirs(vdir, exist_ok=True)
        copy = os.path.join(vdir, "virtlink.service")
        with open(self.unit) as f, open(copy, "w") as g:
            g.write(f.read().replace("ExecStart=/usr/bin/virtlink ", "ExecStart=%s " % self.bin))
        env = dict(os.environ, MANPATH=os.path.join(self.root, "usr/share/man"))
        out = run(["systemd-analyze", "verify", copy], env=env)
        self.assertEqual(out.strip(), "", "systemd-analyze verify has something to say")

    # -- the packaged binary --------------------------------------------------------------
    def test_binary_runs(self):
        self.assertEqual(run([self.bin, "--version"]).strip(), self.version)
        self.assertIn("Run the vhost-user switch daemon", run([self.bin, "--help"]))
        self.assertIn("--db", run([self.bin, "switch", "--help"]))
        # No build path in it (VIRTLINK_BENCH_FROM_SOURCE=OFF): `bench` wants its harness named.
        with open(self.bin, "rb") as f:
            self.assertNotIn(self.src.encode(), f.read())
        r = subprocess.run([self.bin, "bench", "p2p"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=30,
                           env={k: v for k, v in os.environ.items() if k != "VIRTLINK_BENCH_DIR"})
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"set VIRTLINK_BENCH_DIR", r.stdout)

    def serve(self, argv, tmp):
        """Runs `argv` (a switch) with a NOTIFY_SOCKET of ours: READY=1, `ctl show` through
        the packaged binary, then SIGTERM: STOPPING=1 and exit status 0. The show's text."""
        with NotifySocket(os.path.join(tmp, "notify")) as ns:
            sw = vltest.Proc("switch", argv, tmp, env=dict(os.environ, **ns.env()))
            try:
                try:
                    ns.wait(lambda m: m.get("READY") == "1", 15, "READY=1")
                except AssertionError as e:
                    raise AssertionError("%s\n%s" % (e, sw.output())) from None
                show = run([self.bin, "ctl", "--control", os.path.join(tmp, "virtlink.ctl"),
                            "show"])
            finally:
                rc = sw.stop(signal.SIGTERM, timeout=15)
            self.assertEqual(rc, 0, sw.output())
            ns.wait(lambda m: m.get("STOPPING") == "1", 2, "STOPPING=1")
            return show

    def test_unit_command_and_shipped_config(self):
        """The unit's ExecStart, its paths moved under a scratch root: the shipped
        configuration, as it is, is served."""
        tmp = tempfile.mkdtemp(dir=self.dir)
        cmd = unit_settings(self.unit)["ExecStart"][0]
        cmd = cmd.replace("/usr/bin/virtlink", self.bin).replace(
            "/etc/virtlink/", os.path.join(self.root, "etc/virtlink/")).replace(
            "/run/virtlink/", tmp + "/").replace("/var/lib/virtlink/", tmp + "/")
        show = self.serve(cmd.split(), tmp)
        self.assertIn("forward bridge", show)
        self.assertIn("adaptive", show)
        self.assertTrue(os.path.exists(os.path.join(tmp, "state.json")))

    def test_config_examples(self):
        """Every example setting of the shipped configuration ("#key = value", "#[[port]]"
        lines) uncommented: the switch takes them all (its socket paths moved)."""
        tmp = tempfile.mkdtemp(dir=self.dir)
        with open(os.path.join(self.root, "etc/virtlink/virtlink.toml")) as f:
            text = f.read()
        examples = re.findall(r"^#[a-z\[]", text, re.M)
        self.assertGreater(len(examples), 20)
        text = re.sub(r"^#(?=[a-z\[])", "", text, flags=re.M).replace("/run/virtlink/", tmp + "/")
        cfg = os.path.join(tmp, "all.toml")
        with open(cfg, "w") as f:
            f.write(text)
        show = self.serve([self.bin, "switch", "--config", cfg, "--control",
                           os.path.join(tmp, "virtlink.ctl"), "--db",
                           os.path.join(tmp, "state.json")], tmp)
        self.assertIn("vm1", show)
        self.assertIn("vm2", show)

    def test_man_pages(self):
        man = os.path.join(self.root, "usr/share/man/man1")
        env = dict(os.environ, MANWIDTH="2000", LC_ALL="C.UTF-8")
        page = run(["man", "-l", os.path.join(man, "virtlink-switch.1.gz")], env=env)
        self.assertIn("virtlink-switch - Run the vhost-user switch daemon", page)
        self.assertIn("virtlink switch [OPTIONS]", page)
        helptext = run([self.bin, "switch", "--help"])
        options = set(re.findall(r"^  (--[a-z0-9-]+)", helptext, re.M))
        self.assertGreater(len(options), 30)
        for o in options:
            self.assertIn(o, page)
        for word in ("SIGHUP", "/etc/virtlink/virtlink.toml", "/var/lib/virtlink/state.json",
                     "NOTIFY_SOCKET"):
            self.assertIn(word, page)
        ctl = run(["man", "-l", os.path.join(man, "virtlink-ctl.1.gz")], env=env)
        for name in command_table():
            self.assertIn(name, ctl)
        top = run(["man", "-l", os.path.join(man, "virtlink.1.gz")], env=env)
        self.assertIn(self.version, top)
        self.assertNotIn(self.src, top + page + ctl, "a build path in a man page")

    def test_completion(self):
        """The packaged completion, with the packaged binary as `virtlink` on PATH."""
        bindir = tempfile.mkdtemp(dir=self.dir)
        os.symlink(self.bin, os.path.join(bindir, "virtlink"))
        script = os.path.join(self.root, "usr/share/bash-completion/completions/virtlink")

        def complete(*words):
            prog = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); '
                    'complete -p virtlink >/dev/null && _virtlink && printf "%s\\n" "${COMPREPLY[@]}"')
            env = dict(os.environ, PATH=bindir + ":" + os.environ["PATH"])
            return run(["bash", "--norc", "-c", prog, "bash", script, "virtlink"] + list(words),
                       env=env).split()

        self.assertEqual(complete(""), ["switch", "ctl", "top", "gen", "vnf", "bench"])
        self.assertEqual(complete("ctl", ""), command_table())
        self.assertEqual(complete("--log-level", "debug", "ctl", "--json", ""), command_table())
        self.assertEqual(complete("switch", "--forward", ""), ["bridge", "xconnect"])
        self.assertEqual(complete("switch", "--pmd-mode", ""), ["poll", "interrupt", "adaptive"])
        self.assertIn("--max-total-guest-memory", complete("switch", "--max"))
        self.assertEqual(complete("ctl", "log-level", "d"), ["debug"])
        self.assertEqual(complete("ctl", "--con"), ["--control"])


def command_table():
    """The ctl command names of src/control/command_table.cpp's kCommands, in order."""
    with open(os.path.join(REPO, "src/control/command_table.cpp")) as f:
        text = f.read()
    table = text.split("kCommands[] = {", 1)[1].split("\n};", 1)[0]
    names = re.findall(r'^\s*\{"([a-z-]+)",', table, re.M)
    assert len(names) > 10, names
    return names


if __name__ == "__main__":
    vltest.main(default_timeout=1490)
