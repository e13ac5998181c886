#!/usr/bin/env python3
"""Offline checks of the Kubernetes files in deploy/ (docs/kubernetes.md); no cluster.

Each check reads the YAML (yaml.safe_load_all) and returns the problems it finds: object
shapes and kinds, the DaemonSet's containers and volumes, socket and control paths against
the CNI plugin's defaults, the NetworkAttachmentDefinitions' configs, the testpmd pod's
mount, the switch configuration (TOML) in the ConfigMap, Guaranteed resources, the
Dockerfile and the document. Every check is also run on broken copies of the files, and
must report each break.

    python3 tests/deploy/test_deploy.py --root . [--cni PATH_TO_virtlink-cni] [-v]

The defaults come from `virtlink-cni --defaults` when --cni is given (the test fails if it
does not run), else from the values below.
"""
import argparse
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import unittest

import yaml

FALLBACK_DEFAULTS = {"control": "/run/virtlink/virtlink.ctl", "socketDir": "/run/virtlink/pods",
                     "cniVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]}
DS_FILE, NAD_FILE, POD_FILE = "virtlink-daemonset.yaml", "network-attachment.yaml", "pod-testpmd.yaml"
KINDS = {DS_FILE: [("v1", "Namespace"), ("v1", "ServiceAccount"), ("v1", "ConfigMap"),
                   ("apps/v1", "DaemonSet")],
         NAD_FILE: [("k8s.cni.cncf.io/v1", "NetworkAttachmentDefinition")] * 2,
         POD_FILE: [("v1", "Pod")]}
IMAGE = "virtlink:0.1.0"
UPLINK_TYPES = ("af-xdp", "af-packet", "tap", "dpdk")
ERROR_CODES = (1, 4, 6, 7, 11, 100, 101)
ARGS = argparse.Namespace(root=".", cni=None)


def cni_defaults():
    """The plugin's defaults: `CNI --defaults`, or FALLBACK_DEFAULTS without --cni."""
    if ARGS.cni is None:
        return FALLBACK_DEFAULTS
    try:
        r = subprocess.run([ARGS.cni, "--defaults"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise AssertionError("--cni %s: `%s --defaults` does not run: %s" % (ARGS.cni, ARGS.cni, e))
    if r.returncode != 0:
        raise AssertionError("%s --defaults: exit status %d: %s" % (ARGS.cni, r.returncode, r.stderr))
    d = json.loads(r.stdout)
    for key, kind in (("control", str), ("socketDir", str), ("cniVersions", list)):
        if not isinstance(d.get(key), kind):
            raise AssertionError("%s --defaults: no %s %s in %r" % (ARGS.cni, kind.__name__, key, d))
    return d


class Deploy:
    """deploy/ under a root: the YAML documents of each file, the Dockerfile, the doc."""

    def __init__(self, root):
        self.root = root
        self.docs = {}
        for name in KINDS:
            with open(os.path.join(root, "deploy", name), encoding="utf-8") as f:
                self.docs[name] = [d for d in yaml.safe_load_all(f) if d is not None]
        self.dockerfile = read_text(os.path.join(root, "deploy", "Dockerfile"))
        self.doc = read_text(os.path.join(root, "docs", "kubernetes.md"))

    def find(self, name, kind):
        return [d for d in self.docs[name] if isinstance(d, dict) and d.get("kind") == kind]

    def one(self, name, kind):
        found = self.find(name, kind)
        return found[0] if len(found) == 1 else {}

    def ds_spec(self):
        return dig(self.one(DS_FILE, "DaemonSet"), "spec", "template", "spec") or {}

    def switch_container(self):
        return next(iter(self.ds_spec().get("containers") or []), {})

    def nads(self):
        """[(NAD object, its config as parsed JSON or None)]."""
        out = []
        for n in self.find(NAD_FILE, "NetworkAttachmentDefinition"):
            try:
                out.append((n, json.loads(dig(n, "spec", "config"))))
            except (TypeError, ValueError):
                out.append((n, None))
        return out


def read_text(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def dig(obj, *keys):
    for k in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(k)
    return obj


def quantity(q):
    """A Kubernetes quantity as a number ("2" -> 2, "500m" -> 0.5, "1Gi" -> 2**30)."""
    m = re.fullmatch(r"([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?", str(q))
    if not m:
        return None
    scale = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}[m.group(2)]
    return float(m.group(1)) * scale


def option(argv, name):
    """The value after `name` in an argument list, or None."""
    argv = list(argv or [])
    return argv[argv.index(name) + 1] if name in argv[:-1] else None


def containers(spec):
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


def hostpath_mounts(spec):
    """[(container, mount, host path)] of every hostPath volume mount in a pod spec."""
    vols = {v.get("name"): dig(v, "hostPath", "path") for v in spec.get("volumes") or []}
    return [(c, m, vols[m.get("name")]) for c in containers(spec)
            for m in c.get("volumeMounts") or [] if vols.get(m.get("name"))]


def under(path, top):
    return os.path.normpath(path) == os.path.normpath(top) or \
        os.path.normpath(path).startswith(os.path.normpath(top) + "/")


# ---- the checks: each takes a Deploy and the defaults and returns a list of problems ----

def check_documents(d, defaults):
    """Every document: apiVersion, kind, metadata.name; each file its expected kinds."""
    problems = []
    for name, expected in KINDS.items():
        got = []
        for doc in d.docs[name]:
            if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind") \
                    or not dig(doc, "metadata", "name"):
                problems.append("%s: a document without apiVersion, kind or metadata.name" % name)
                continue
            got.append((doc["apiVersion"], doc["kind"]))
        if sorted(got) != sorted(expected):
            problems.append("%s: kinds %s, expected %s" % (name, got, expected))
    ns = dig(d.one(DS_FILE, "Namespace"), "metadata", "name")
    for kind in ("ServiceAccount", "ConfigMap", "DaemonSet"):
        if dig(d.one(DS_FILE, kind), "metadata", "namespace") != ns:
            problems.append("%s: %s not in the namespace %s" % (DS_FILE, kind, ns))
    if d.ds_spec().get("serviceAccountName") != dig(d.one(DS_FILE, "ServiceAccount"), "metadata", "name"):
        problems.append("DaemonSet: serviceAccountName is not the ServiceAccount's name")
    return problems


def spec_problems(spec, what):
    """A pod spec's containers (image, command or args) and volumes (each mounted, each
    mount's volume defined)."""
    problems = []
    if not spec.get("containers"):
        problems.append("%s: no containers" % what)
    vols = [v.get("name") for v in spec.get("volumes") or []]
    mounted = set()
    for c in containers(spec):
        if not c.get("image") or not (c.get("command") or c.get("args")):
            problems.append("%s: container %s without image or command/args" % (what, c.get("name")))
        for m in c.get("volumeMounts") or []:
            mounted.add(m.get("name"))
            if m.get("name") not in vols:
                problems.append("%s: container %s mounts volume %s, which is not defined"
                                % (what, c.get("name"), m.get("name")))
    for v in vols:
        if v not in mounted:
            problems.append("%s: volume %s is mounted by no container" % (what, v))
    return problems


def check_daemonset(d, defaults):
    """The DaemonSet: selector, containers, volumes, image, probe, host network, privileges,
    grace period, the init container's copy of the plugin into /opt/cni/bin."""
    ds = d.one(DS_FILE, "DaemonSet")
    spec = d.ds_spec()
    problems = spec_problems(spec, "DaemonSet")
    sel = dig(ds, "spec", "selector", "matchLabels") or {}
    labels = dig(ds, "spec", "template", "metadata", "labels") or {}
    if not sel or any(labels.get(k) != v for k, v in sel.items()):
        problems.append("DaemonSet: selector %s does not match the template's labels %s" % (sel, labels))
    for c in containers(spec):
        if c.get("image") != IMAGE:
            problems.append("DaemonSet: container %s image %s, not %s"
                            % (c.get("name"), c.get("image"), IMAGE))
    sw = d.switch_container()
    if (sw.get("args") or [None])[0] != "switch":
        problems.append("DaemonSet: the first container does not run `virtlink switch`")
    probe = dig(sw, "livenessProbe", "exec", "command") or []
    if probe[-1:] != ["version"] or "ctl" not in probe:
        problems.append("DaemonSet: no liveness probe `virtlink ctl ... version`")
    if spec.get("hostNetwork") is not True:
        problems.append("DaemonSet: not hostNetwork")
    if not isinstance(spec.get("terminationGracePeriodSeconds"), int):
        problems.append("DaemonSet: no terminationGracePeriodSeconds")
    if dig(sw, "securityContext", "privileged") is not True:
        problems.append("DaemonSet: the switch container is not privileged")
    copies = [c for c, m, hp in hostpath_mounts(spec) if hp == "/opt/cni/bin"
              and "/usr/lib/cni/virtlink-cni" in " ".join(c.get("command", []) + c.get("args", []))
              and m.get("mountPath") in " ".join(c.get("command", []) + c.get("args", []))]
    if not any(c in (spec.get("initContainers") or []) for c in copies):
        problems.append("DaemonSet: no init container copies /usr/lib/cni/virtlink-cni "
                        "to hostPath /opt/cni/bin")
    return problems


def check_paths(d, defaults):
    """The control socket and socketDir: the plugin's defaults in the switch's args, probe
    and the NADs; the DaemonSet's host directories mounted at the same paths; the pod's
    hostPath is socketDir; the init container makes socketDir; --db on a hostPath."""
    problems = []
    control, sockdir = defaults["control"], defaults["socketDir"]
    sw = d.switch_container()
    if option(sw.get("args"), "--control") != control:
        problems.append("DaemonSet: --control is %s, not %s"
                        % (option(sw.get("args"), "--control"), control))
    for probe in ("livenessProbe", "readinessProbe"):
        cmd = dig(sw, probe, "exec", "command")
        if cmd is not None and option(cmd, "--control") != control:
            problems.append("DaemonSet: %s --control is not %s" % (probe, control))
    mounts = [(m, hp) for c, m, hp in hostpath_mounts(d.ds_spec()) if c is sw]
    for path, what in ((sockdir, "socketDir"),
                       (os.path.dirname(control), "the control socket's directory"),
                       (option(sw.get("args"), "--db") or "?", "the --db file's directory")):
        if not any(under(path, hp) and m.get("mountPath") == hp for m, hp in mounts):
            problems.append("DaemonSet: %s %s is not under a hostPath mounted at its own path"
                            % (what, path))
    init = " ".join(" ".join(c.get("command", []) + c.get("args", []))
                    for c in d.ds_spec().get("initContainers") or [])
    if sockdir not in init:
        problems.append("DaemonSet: no init container makes socketDir %s" % sockdir)
    for nad, cfg in d.nads():
        for key, want in (("control", control), ("socketDir", sockdir)):
            if cfg is not None and cfg.get(key, want) != want:
                problems.append("NAD %s: %s %s, not %s"
                                % (dig(nad, "metadata", "name"), key, cfg.get(key), want))
    pod_paths = [hp for c, m, hp in hostpath_mounts(d.one(POD_FILE, "Pod").get("spec") or {})]
    if not pod_paths or any(hp != sockdir for hp in pod_paths):
        problems.append("Pod: hostPath %s, not socketDir %s" % (pod_paths, sockdir))
    return problems


def check_nads(d, defaults):
    """Each NAD's config: JSON with cniVersion (one the plugin takes), name, type
    virtlink-cni, ipam; distinct vlan and vni, non-overlapping subnets."""
    problems, vlans, vnis, subnets = [], [], [], []
    for nad, cfg in d.nads():
        name = dig(nad, "metadata", "name")
        if cfg is None:
            problems.append("NAD %s: spec.config is not JSON" % name)
            continue
        if cfg.get("cniVersion") not in defaults["cniVersions"]:
            problems.append("NAD %s: cniVersion %s is not one of %s"
                            % (name, cfg.get("cniVersion"), defaults["cniVersions"]))
        if cfg.get("name") != name or cfg.get("type") != "virtlink-cni":
            problems.append("NAD %s: config name %s, type %s" % (name, cfg.get("name"), cfg.get("type")))
        if not dig(cfg, "ipam", "type"):
            problems.append("NAD %s: no ipam type" % name)
        if cfg.get("mode", "server") not in ("server", "client"):
            problems.append("NAD %s: mode %s" % (name, cfg.get("mode")))
        vlan, vni = cfg.get("vlan"), cfg.get("vni")
        if not (isinstance(vlan, int) and 1 <= vlan <= 4094 and isinstance(vni, int)
                and 1 <= vni < 2**24):
            problems.append("NAD %s: vlan %s or vni %s out of range" % (name, vlan, vni))
        vlans.append(vlan)
        vnis.append(vni)
        for r in sum(dig(cfg, "ipam", "ranges") or [], []):
            try:
                subnets.append((name, ipaddress.ip_network(r.get("subnet"))))
            except (TypeError, ValueError):
                problems.append("NAD %s: subnet %s" % (name, r.get("subnet")))
    if len(set(vlans)) != len(vlans) or len(set(vnis)) != len(vnis):
        problems.append("NADs: vlans %s and vnis %s must differ between networks" % (vlans, vnis))
    for i, (a, na) in enumerate(subnets):
        for b, nb in subnets[i + 1:]:
            if na.version == nb.version and na.overlaps(nb):
                problems.append("NADs: subnets %s (%s) and %s (%s) overlap" % (na, a, nb, b))
    return problems


def pod_command(pod):
    c = next(iter(dig(pod, "spec", "containers") or []), {})
    return c, " ".join(c.get("command", []) + c.get("args", []))


def check_pod(d, defaults):
    """The testpmd pod: its network annotation names a NAD of its namespace, POD_NAME and
    POD_NAMESPACE from the downward API, the subPathExpr mount, the vdev path under the
    mount ending in net1.sock, its MAC from net1.json there, the switch nodes' selector."""
    pod = d.one(POD_FILE, "Pod")
    problems = spec_problems(pod.get("spec") or {}, "Pod")
    ns = dig(pod, "metadata", "namespace") or "default"
    nads = {(dig(n, "metadata", "namespace") or "default", dig(n, "metadata", "name"))
            for n, _ in d.nads()}
    net = dig(pod, "metadata", "annotations", "k8s.v1.cni.cncf.io/networks") or ""
    if not net or any((ns, n.strip()) not in nads for n in net.split(",")):
        problems.append("Pod: networks annotation %r names no NAD of namespace %s" % (net, ns))
    c, cmd = pod_command(pod)
    env = {e.get("name"): dig(e, "valueFrom", "fieldRef", "fieldPath") for e in c.get("env") or []}
    if env.get("POD_NAME") != "metadata.name" or env.get("POD_NAMESPACE") != "metadata.namespace":
        problems.append("Pod: POD_NAME/POD_NAMESPACE not from the downward API: %s" % env)
    mounts = [m for _, m, _ in hostpath_mounts(pod.get("spec") or {})]
    if len(mounts) != 1 or mounts[0].get("subPathExpr") != "$(POD_NAMESPACE)_$(POD_NAME)":
        problems.append("Pod: not one hostPath mount with subPathExpr $(POD_NAMESPACE)_$(POD_NAME)")
        return problems
    top = mounts[0].get("mountPath", "?")
    vdev = re.search(r"net_virtio_user\d*,(?:[^ '\"]*,)?path=([^, '\"]+)", cmd)
    if not vdev or not under(vdev.group(1), top) or not vdev.group(1).endswith("/net1.sock"):
        problems.append("Pod: vdev path %s is not net1.sock under %s" % (vdev and vdev.group(1), top))
    if not re.search(r"mac=\$\{?MAC\b", cmd) or os.path.join(top, "net1.json") not in cmd:
        problems.append("Pod: the vdev's mac= is not read from %s/net1.json" % top)
    if "--forward-mode=macswap" not in cmd:
        problems.append("Pod: testpmd not in macswap mode")
    if dig(pod, "spec", "nodeSelector") != d.ds_spec().get("nodeSelector"):
        problems.append("Pod: nodeSelector is not the switch DaemonSet's")
    return problems


def vxlan_args(path):
    """A vxlan port's path "uplink=up,local=IP,vni=N,remote=IP+IP" as a dict (remote a list)."""
    out = {"remote": []}
    for kv in str(path).split(","):
        k, _, v = kv.partition("=")
        if k == "remote":
            out["remote"] += v.split("+")
        else:
            out[k] = v
    return out


def node_configs(d):
    """{ConfigMap key: parsed TOML or the TOMLDecodeError} of the keys ending in .toml."""
    out = {}
    for key, text in (dig(d.one(DS_FILE, "ConfigMap"), "data") or {}).items():
        if key.endswith(".toml"):
            try:
                out[key] = tomllib.loads(text)
            except tomllib.TOMLDecodeError as e:
                out[key] = e
    return out


def config_wiring(d):
    """The switch's --config: the ConfigMap volume's mount and $(NODE_NAME).toml."""
    problems, spec, sw = [], d.ds_spec(), d.switch_container()
    cm = dig(d.one(DS_FILE, "ConfigMap"), "metadata", "name")
    vols = [v.get("name") for v in spec.get("volumes") or [] if dig(v, "configMap", "name") == cm]
    dirs = [m.get("mountPath") for m in sw.get("volumeMounts") or [] if m.get("name") in vols]
    conf = option(sw.get("args"), "--config") or ""
    env = {e.get("name"): dig(e, "valueFrom", "fieldRef", "fieldPath") for e in sw.get("env") or []}
    if os.path.dirname(conf) not in dirs or os.path.basename(conf) != "$(NODE_NAME).toml" \
            or env.get("NODE_NAME") != "spec.nodeName":
        problems.append("DaemonSet: --config %s is not $(NODE_NAME).toml in the ConfigMap %s's mount %s"
                        % (conf, cm, dirs))
    return problems


def check_config(d, defaults):
    """The ConfigMap: one TOML per node that parses, vlans = true, an uplink, one vxlan port
    per NAD with its vni and vlan, a full mesh of VTEPs; the switch reads its node's file."""
    problems, nets = config_wiring(d), [(c.get("vni"), c.get("vlan")) for _, c in d.nads() if c]
    configs, tunnels_of = node_configs(d), {}
    if not configs:
        problems.append("ConfigMap: no NODE.toml key")
    for key, cfg in configs.items():
        if isinstance(cfg, Exception):
            problems.append("ConfigMap %s: TOML does not parse: %s" % (key, cfg))
            continue
        if cfg.get("vlans") is not True:
            problems.append("ConfigMap %s: no vlans = true" % key)
        ports = {p.get("name"): p for p in cfg.get("port") or []}
        tunnels = [(p, vxlan_args(p.get("path"))) for p in ports.values() if p.get("type") == "vxlan"]
        for vni, vlan in nets:
            match = [p for p, a in tunnels if a.get("vni") == str(vni) and p.get("vlan") == vlan]
            if len(match) != 1:
                problems.append("ConfigMap %s: %d vxlan ports with vni %s and vlan %s"
                                % (key, len(match), vni, vlan))
        for p, a in tunnels:
            if dig(ports, a.get("uplink"), "type") not in UPLINK_TYPES:
                problems.append("ConfigMap %s: port %s: uplink %s is not an uplink port"
                                % (key, p.get("name"), a.get("uplink")))
        tunnels_of[key] = tunnels
    return problems + mesh_problems(tunnels_of)


def mesh_problems(tunnels_of):
    """{node key: [(port, vxlan args)]}: one VTEP address per node, its own; each tunnel's
    remotes are the other nodes' addresses."""
    problems, local = [], {}
    for key, tunnels in tunnels_of.items():
        addrs = {a.get("local") for _, a in tunnels}
        if len(addrs) != 1:
            problems.append("ConfigMap %s: VTEP addresses %s (one per node)"
                            % (key, sorted(map(str, addrs))))
        local[key] = next(iter(addrs), None)
    if len(set(local.values())) != len(local):
        problems.append("ConfigMap: nodes share a VTEP address: %s" % local)
    for key, tunnels in tunnels_of.items():
        others = {v for k, v in local.items() if k != key}
        for p, a in tunnels:
            if set(a["remote"]) != others:
                problems.append("ConfigMap %s: port %s: remotes %s, the other nodes are %s"
                                % (key, p.get("name"), a["remote"], sorted(map(str, others))))
    return problems


def check_resources(d, defaults):
    """Guaranteed QoS for the DaemonSet's and the pod's containers (init containers too):
    cpu and memory requests == limits, whole CPUs."""
    problems = []
    for what, spec in (("DaemonSet", d.ds_spec()), ("Pod", d.one(POD_FILE, "Pod").get("spec") or {})):
        for c in containers(spec):
            req, lim = dig(c, "resources", "requests") or {}, dig(c, "resources", "limits") or {}
            for r in ("cpu", "memory"):
                if r not in lim or quantity(req.get(r)) != quantity(lim.get(r)):
                    problems.append("%s: container %s: %s requests %s != limits %s"
                                    % (what, c.get("name"), r, req.get(r), lim.get(r)))
            cpu = quantity(lim.get("cpu"))
            if cpu is None or cpu < 1 or cpu != int(cpu):
                problems.append("%s: container %s: cpu %s is not a whole number"
                                % (what, c.get("name"), lim.get("cpu")))
    return problems


def check_dockerfile(d, defaults):
    """deploy/Dockerfile: FROM debian:12, the virtlink .deb installed with apt-get."""
    lines = [l.strip() for l in d.dockerfile.replace("\\\n", " ").splitlines()
             if l.strip() and not l.strip().startswith("#")]
    problems = []
    if not lines or lines[0] != "FROM debian:12" or sum(l.startswith("FROM ") for l in lines) != 1:
        problems.append("Dockerfile: not one stage FROM debian:12")
    text = "\n".join(lines)
    if not re.search(r"virtlink_[0-9.]+_amd64\.deb", text) \
            or not re.search(r"apt-get install[^\n]*/tmp/\$\{DEB\}", text):
        problems.append("Dockerfile: the virtlink .deb is not installed with apt-get")
    return problems


def check_doc(d, defaults):
    """docs/kubernetes.md: the defaults, every CNI error code in its table, the offline test."""
    problems = []
    if not d.doc:
        return ["docs/kubernetes.md: missing"]
    for value in (defaults["control"], defaults["socketDir"], "tests/deploy/test_deploy.py"):
        if value not in d.doc:
            problems.append("docs/kubernetes.md: %s is not mentioned" % value)
    for code in ERROR_CODES:
        if not re.search(r"^\| %d \|" % code, d.doc, re.M):
            problems.append("docs/kubernetes.md: no table row for CNI error code %d" % code)
    return problems


CHECKS = (check_documents, check_daemonset, check_paths, check_nads, check_pod, check_config,
          check_resources, check_dockerfile, check_doc)


# ---- broken copies: each mutation must be reported by its check ----

def edit_yaml(name, fn):
    """A mutation: fn(documents) on deploy/NAME, written back with yaml.safe_dump_all."""
    def mutate(root):
        path = os.path.join(root, "deploy", name)
        with open(path, encoding="utf-8") as f:
            docs = [x for x in yaml.safe_load_all(f) if x is not None]
        fn(docs)
        with open(path, "w", encoding="utf-8") as f:
            yaml.safe_dump_all(docs, f, sort_keys=False)
    return mutate


def edit_text(rel, old, new, count=-1):
    """A mutation: `old` replaced by `new` in the file ROOT/REL (which must contain it)."""
    def mutate(root):
        text = read_text(os.path.join(root, rel))
        if old not in text:
            raise AssertionError("%s: %r not found: the mutation no longer fits the file" % (rel, old))
        with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, count))
    return mutate


def ds(docs):
    return next(x for x in docs if x.get("kind") == "DaemonSet")


def tspec(docs):
    return ds(docs)["spec"]["template"]["spec"]


def sw(docs):
    return tspec(docs)["containers"][0]


def pod(docs):
    return docs[0]["spec"]


def set_opt(argv, name, value):
    argv[argv.index(name) + 1] = value


def nad(i, fn):
    """fn(config) on the i-th NAD's parsed config."""
    def edit(docs):
        cfg = json.loads(docs[i]["spec"]["config"])
        fn(cfg)
        docs[i]["spec"]["config"] = json.dumps(cfg)
    return edit_yaml(NAD_FILE, edit)


def ipam_subnet(subnet):
    return lambda c: c["ipam"]["ranges"][0][0].update(subnet=subnet)


D, T, P = DS_FILE, "docs/kubernetes.md", POD_FILE
W1 = "/etc/virtlink/$(NODE_NAME).toml"
MUTATIONS = [  # (check, what is broken, a text the report must contain, the mutation)
    (check_documents, "no metadata.name", "without apiVersion",
     edit_yaml(D, lambda x: x[0]["metadata"].pop("name"))),
    (check_documents, "old apiVersion", "kinds",
     edit_yaml(D, lambda x: ds(x).update(apiVersion="extensions/v1beta1"))),
    (check_documents, "a kind too many", "kinds", edit_yaml(P, lambda x: x.append(dict(x[0])))),
    (check_documents, "other namespace", "not in the namespace",
     edit_yaml(D, lambda x: x[2]["metadata"].update(namespace="default"))),
    (check_documents, "service account", "serviceAccountName",
     edit_yaml(D, lambda x: tspec(x).update(serviceAccountName="other"))),
    (check_daemonset, "selector", "selector",
     edit_yaml(D, lambda x: ds(x)["spec"]["template"]["metadata"].update(labels={"a": "b"}))),
    (check_daemonset, "volume gone", "not defined",
     edit_yaml(D, lambda x: tspec(x)["volumes"].pop(1))),
    (check_daemonset, "volume unused", "mounted by no container",
     edit_yaml(D, lambda x: tspec(x)["volumes"].append({"name": "x", "emptyDir": {}}))),
    (check_daemonset, "no command", "without image or command",
     edit_yaml(D, lambda x: [sw(x).pop(k) for k in ("command", "args")])),
    (check_daemonset, "image", "image",
     edit_yaml(D, lambda x: sw(x).update(image="virtlink:latest"))),
    (check_daemonset, "no probe", "liveness probe",
     edit_yaml(D, lambda x: sw(x).pop("livenessProbe"))),
    (check_daemonset, "host network", "hostNetwork",
     edit_yaml(D, lambda x: tspec(x).update(hostNetwork=False))),
    (check_daemonset, "grace period", "terminationGracePeriodSeconds",
     edit_yaml(D, lambda x: tspec(x).pop("terminationGracePeriodSeconds"))),
    (check_daemonset, "not privileged", "privileged",
     edit_yaml(D, lambda x: sw(x)["securityContext"].update(privileged=False))),
    (check_daemonset, "no plugin copy", "copies /usr/lib/cni/virtlink-cni",
     edit_text("deploy/" + D, "cp /usr/lib/cni/virtlink-cni", "true")),
    (check_paths, "pod hostPath", "Pod: hostPath",
     edit_text("deploy/" + P, "path: /run/virtlink/pods", "path: /run/virtlink/pod")),
    (check_paths, "--control", "--control is",
     edit_yaml(D, lambda x: set_opt(sw(x)["args"], "--control", "/tmp/v.ctl"))),
    (check_paths, "probe --control", "livenessProbe --control",
     edit_yaml(D, lambda x: set_opt(sw(x)["livenessProbe"]["exec"]["command"], "--control",
                                    "/tmp/v.ctl"))),
    (check_paths, "mounted elsewhere", "socketDir /run/virtlink/pods is not under",
     edit_text("deploy/" + D, "mountPath: /run/virtlink\n            - name: state",
               "mountPath: /host/run/virtlink\n            - name: state")),
    (check_paths, "--db elsewhere", "--db file",
     edit_yaml(D, lambda x: set_opt(sw(x)["args"], "--db", "/var/lib/other/state.json"))),
    (check_paths, "no mkdir", "makes socketDir",
     edit_text("deploy/" + D, "mkdir -p /run/virtlink/pods", "true")),
    (check_paths, "NAD control", "control /run/virtlink/other.ctl",
     nad(0, lambda c: c.update(control="/run/virtlink/other.ctl"))),
    (check_paths, "NAD socketDir", "socketDir /tmp", nad(1, lambda c: c.update(socketDir="/tmp"))),
    (check_nads, "not JSON", "not JSON",
     edit_text("deploy/" + NAD_FILE, '"vni": 5100,', '"vni": 5100')),
    (check_nads, "type", "type userspace", nad(0, lambda c: c.update(type="userspace"))),
    (check_nads, "name", "config name", nad(1, lambda c: c.update(name="net-b"))),
    (check_nads, "no ipam", "no ipam", nad(0, lambda c: c.pop("ipam"))),
    (check_nads, "cniVersion", "cniVersion 2.0.0", nad(0, lambda c: c.update(cniVersion="2.0.0"))),
    (check_nads, "same vlan", "must differ", nad(1, lambda c: c.update(vlan=100))),
    (check_nads, "same vni", "must differ", nad(1, lambda c: c.update(vni=5100))),
    (check_nads, "vlan range", "out of range", nad(1, lambda c: c.update(vlan=4095))),
    (check_nads, "mode", "mode", nad(1, lambda c: c.update(mode="listen"))),
    (check_nads, "overlap", "overlap", nad(1, ipam_subnet("10.10.0.128/25"))),
    (check_nads, "bad subnet", "subnet", nad(1, ipam_subnet("10.20.0.300/24"))),
    (check_pod, "subPathExpr", "subPathExpr",
     edit_text("deploy/" + P, "$(POD_NAMESPACE)_$(POD_NAME)", "$(POD_NAME)")),
    (check_pod, "env", "downward API",
     edit_yaml(P, lambda x: pod(x)["containers"][0]["env"][0].update(valueFrom=None, value="testpmd"))),
    (check_pod, "vdev elsewhere", "vdev path",
     edit_text("deploy/" + P, "path=/var/run/virtlink/net1.sock", "path=/tmp/net1.sock")),
    (check_pod, "vdev name", "vdev path",
     edit_text("deploy/" + P, "path=/var/run/virtlink/net1.sock", "path=/var/run/virtlink/net0.sock")),
    (check_pod, "mount moved", "vdev path",
     edit_text("deploy/" + P, "mountPath: /var/run/virtlink", "mountPath: /var/run/vl")),
    (check_pod, "no mac", "mac=", edit_text("deploy/" + P, ",mac=$MAC", "")),
    (check_pod, "json elsewhere", "net1.json",
     edit_text("deploy/" + P, "/var/run/virtlink/net1.json", "/tmp/net1.json")),
    (check_pod, "network", "networks annotation",
     edit_text("deploy/" + P, "networks: virtlink-net-a", "networks: virtlink-net-c")),
    (check_pod, "forward mode", "macswap",
     edit_text("deploy/" + P, "--forward-mode=macswap", "--forward-mode=io")),
    (check_pod, "nodeSelector", "nodeSelector", edit_yaml(P, lambda x: pod(x).pop("nodeSelector"))),
    (check_config, "no vlans", "no vlans = true",
     edit_text("deploy/" + D, "    vlans = true\n", "    vlans = false\n", 1)),
    (check_config, "tunnel vlan", "vxlan ports with vni 5100",
     edit_text("deploy/" + D, "vlan = 100", "vlan = 300", 1)),
    (check_config, "tunnel missing", "vxlan ports with vni 5200",
     edit_text("deploy/" + D, "vni=5200", "vni=5300", 1)),
    (check_config, "bad TOML", "does not parse",
     edit_text("deploy/" + D, 'forward = "bridge"', 'forward = bridge', 1)),
    (check_config, "remote", "remotes",
     edit_text("deploy/" + D, "remote=192.0.2.12", "remote=192.0.2.13", 1)),
    (check_config, "shared VTEP", "share a VTEP",
     edit_text("deploy/" + D, "local=192.0.2.12", "local=192.0.2.11")),
    (check_config, "two VTEPs", "one per node",
     edit_text("deploy/" + D, "local=192.0.2.12", "local=192.0.2.14", 1)),
    (check_config, "uplink", "is not an uplink port",
     edit_text("deploy/" + D, "uplink=up,", "uplink=down,", 1)),
    (check_config, "--config", "--config",
     edit_yaml(D, lambda x: set_opt(sw(x)["args"], "--config", "/etc/virtlink/virtlink.toml"))),
    (check_config, "NODE_NAME", "--config",
     edit_yaml(D, lambda x: sw(x)["env"][0]["valueFrom"]["fieldRef"].update(fieldPath="metadata.name"))),
    (check_resources, "pod memory", "memory requests",
     edit_yaml(P, lambda x: pod(x)["containers"][0]["resources"]["limits"].update(memory="2Gi"))),
    (check_resources, "fractional cpu", "whole number",
     edit_yaml(D, lambda x: [sw(x)["resources"][k].update(cpu="1500m") for k in ("requests", "limits")])),
    (check_resources, "init limits", "cpu requests",
     edit_yaml(D, lambda x: tspec(x)["initContainers"][0]["resources"].pop("limits"))),
    (check_dockerfile, "base", "FROM debian:12",
     edit_text("deploy/Dockerfile", "FROM debian:12", "FROM debian:11")),
    (check_dockerfile, "no install", ".deb is not installed",
     edit_text("deploy/Dockerfile", "apt-get install", "apt-get download")),
    (check_doc, "no doc", "missing", lambda root: os.remove(os.path.join(root, T))),
    (check_doc, "error code", "code 11", edit_text(T, "| 11 |", "| 12 |")),
    (check_doc, "defaults", "/run/virtlink/pods is not mentioned",
     edit_text(T, "/run/virtlink/pods", "/run/vl/pods")),
]


def scratch_copy(root, tmp):
    """deploy/ and docs/kubernetes.md of `root` copied under `tmp`."""
    shutil.copytree(os.path.join(root, "deploy"), os.path.join(tmp, "deploy"))
    os.makedirs(os.path.join(tmp, "docs"))
    shutil.copy(os.path.join(root, T), os.path.join(tmp, T))


class DeployFiles(unittest.TestCase):
    """The checks on the files as they are: no problem."""

    @classmethod
    def setUpClass(cls):
        cls.defaults = cni_defaults()
        cls.deploy = Deploy(ARGS.root)

    def test_cni_defaults(self):
        self.assertTrue(self.defaults["control"].startswith("/"), self.defaults)
        self.assertTrue(self.defaults["socketDir"].startswith("/"), self.defaults)

    def test_no_kubevirt_example(self):
        # docs/kubernetes.md, "KubeVirt": no binding plugin can take a CNI's vhost-user socket.
        self.assertFalse(os.path.exists(os.path.join(ARGS.root, "deploy", "kubevirt-vm.yaml")))


def _clean_test(check):
    def test(self):
        self.assertEqual(check(self.deploy, self.defaults), [])
    test.__doc__ = check.__doc__
    return test


for _check in CHECKS:
    setattr(DeployFiles, "test_" + _check.__name__[len("check_"):], _clean_test(_check))


class BrokenCopies(unittest.TestCase):
    """Each check run on copies of the files broken on purpose reports the break."""

    @classmethod
    def setUpClass(cls):
        cls.defaults = cni_defaults()

    def run_checks(self, mutate):
        with tempfile.TemporaryDirectory() as tmp:
            scratch_copy(ARGS.root, tmp)
            mutate(tmp)
            d = Deploy(tmp)
            return {c: c(d, self.defaults) for c in CHECKS}

    def test_round_trip_is_clean(self):
        """Rewriting the YAML (as the mutations do) changes nothing the checks see."""
        noop = lambda docs: None
        for name in KINDS:
            self.assertEqual(sum(self.run_checks(edit_yaml(name, noop)).values(), []), [], name)

    def test_mutations_are_reported(self):
        for check, what, expect, mutate in MUTATIONS:
            with self.subTest(check=check.__name__, broken=what):
                problems = self.run_checks(mutate)[check]
                self.assertTrue(any(expect in p for p in problems),
                                "%s did not report %r (%s): %s"
                                % (check.__name__, expect, what, problems))

    def test_every_check_is_exercised(self):
        self.assertEqual(set(CHECKS) - {m[0] for m in MUTATIONS}, set())


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--root", default=os.path.join(here, "..", ".."))
    p.add_argument("--cni", default=None)
    args, rest = p.parse_known_args()
    ARGS.root, ARGS.cni = os.path.abspath(args.root), args.cni
    if ARGS.cni is None:
        print("test_deploy: no --cni: the plugin's defaults are taken as %s and %s"
              % (FALLBACK_DEFAULTS["control"], FALLBACK_DEFAULTS["socketDir"]), file=sys.stderr)
    unittest.main(argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
