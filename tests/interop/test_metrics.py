#!/usr/bin/env python3
"""The Prometheus endpoint ("See inside it" item 1): `virtlink switch --metrics ADDR:PORT`
scraped by Debian's own Prometheus server (started by the test, scrape interval 1 s) while
DPDK virtio-user peers send through the switch; its HTTP API returns the series, and
`virtlink_port_rx_packets_total` equals `ctl stats` once the traffic stopped; `promtool
check metrics` accepts a scrape; hostile HTTP clients (slow headers, a huge request, many
connections) neither stop forwarding nor a legitimate scrape."""

import json
import os
import shutil
import socket
import subprocess
import time
import unittest
import urllib.error
import urllib.request

from vltestlib import vltest
from vltestlib.vltest import log


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def get_status(url):
    try:
        return get(url)[0]
    except urllib.error.HTTPError as e:
        return e.code


class Prometheus:
    """A private Prometheus server scraping `target` every second (its own data directory,
    loopback only)."""

    def __init__(self, tb, target=None, config=None):
        """`config`: the prometheus.yml text (else one scraping `target` every second)."""
        self.port = free_port()
        d = os.path.join(tb.dir, "prometheus")
        os.makedirs(d)
        cfg = os.path.join(d, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write(config or "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
                    "scrape_configs:\n  - job_name: virtlink\n    static_configs:\n"
                    "      - targets: ['%s']\n" % target)
        self.proc = vltest.Proc("prometheus", [
            shutil.which("prometheus"), "--config.file=" + cfg, "--storage.tsdb.path=" + d + "/data",
            "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"], tb.dir)
        tb.procs.append(self.proc)
        vltest._wait(self.ready, 30, "prometheus ready", 0.3)

    def ready(self):
        try:
            return get("http://127.0.0.1:%d/-/ready" % self.port, 2)[0] == 200
        except OSError:
            return False

    def query(self, q):
        """The instant vector of `q` as {port label: value}."""
        url = "http://127.0.0.1:%d/api/v1/query?query=%s" % (self.port, urllib.request.quote(q))
        doc = json.loads(get(url)[1])
        assert doc["status"] == "success", doc
        return {r["metric"].get("port", ""): float(r["value"][1]) for r in doc["data"]["result"]}


def readme_yaml():
    """The ```yaml block of README "Metrics"."""
    with open(os.path.join(vltest.REPO, "README.md")) as f:
        text = f.read()
    section = text.split("### Metrics", 1)[1]
    return section.split("```yaml\n", 1)[1].split("```", 1)[0]


class Metrics(unittest.TestCase):

    @vltest.ctest("interop_metrics_prometheus", timeout=150)
    def test_prometheus_scrapes_the_switch(self):
        with vltest.Testbed(self) as tb:
            mport = free_port()
            tb.start_switch(ports=["a", "b"], forward="xconnect",
                            extra=["--metrics", "127.0.0.1:%d" % mport])
            url = "http://127.0.0.1:%d/metrics" % mport
            prom = Prometheus(tb, "127.0.0.1:%d" % mport)
            rx = tb.start_testpmd("rx", [tb.virtio_user("b")], "rxonly")
            tx = tb.start_testpmd("tx", [tb.virtio_user("a")], "txonly", args=["--txpkts=64"])
            tb.wait_connected(["a", "b"])
            tb.wait_counter("a", "rx_packets", 10000, timeout=30)
            t0 = time.monotonic()
            self.hostile_clients(tb, mport, url)
            while time.monotonic() - t0 < 20:  # about 20 s of traffic, scraped every second
                time.sleep(1)
            tb.stop_testpmd(tx)
            st = tb.wait_quiet()
            time.sleep(3)  # two more scrapes of the final counters
            got = prom.query("virtlink_port_rx_packets_total")
            log("prometheus: rx_packets %s; ctl stats: a %d, b %d" %
                (got, st["a"]["rx_packets"], st["b"]["rx_packets"]))
            self.assertGreater(st["a"]["rx_packets"], 100000)
            self.assertEqual(got.get("a"), float(st["a"]["rx_packets"]))
            self.assertEqual(got.get("b"), float(st["b"]["rx_packets"]))
            self.assertEqual(prom.query("virtlink_port_tx_packets_total").get("b"),
                             float(st["b"]["tx_packets"]))
            # The series over time: Prometheus kept many scrapes of a rising counter.
            n = prom.query("count_over_time(virtlink_port_rx_packets_total[1m])")
            self.assertGreaterEqual(n.get("a", 0), 15, n)
            self.assertEqual(prom.query("up").get("", 0), 1.0)
            # promtool lints a scrape.
            body = get(url)[1]
            r = subprocess.run(["promtool", "check", "metrics"], input=body.encode(),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
            self.assertEqual(r.returncode, 0, r.stdout.decode())
            self.assertIn('virtlink_port_drops_total{port="a",reason="no_rx_buffer"}', body)
            self.assertIn("virtlink_port_queue_age_seconds_bucket", body)
            # The endpoint counts its own work: Prometheus' scrapes, and the 404 below.
            self.assertEqual(get_status(url.replace("/metrics", "/nothing")), 404)
            body = get(url)[1]
            self.assertRegex(body, r"virtlink_metrics_scrapes_total (1[5-9]|[2-9][0-9]|[0-9]{3,})\n")
            self.assertIn("virtlink_metrics_not_found_total 1\n", body)
            tb.stop_testpmd(rx)

    @vltest.ctest("readme_metrics_recipe", timeout=60)
    def test_readme_recipe(self):
        """README "Metrics": the command as printed serves the port's series at
        http://127.0.0.1:9100/metrics."""
        cmd = vltest.readme_command("virtlink switch --port vm1=vhost-user:/tmp/vm1.sock --port "
                                    "vm2=vhost-user:/tmp/vm2.sock --control /tmp/virtlink.ctl --metrics")
        vltest.log("README command: %s" % cmd)
        env = dict(os.environ, PATH=os.path.dirname(vltest.VIRTLINK) + ":" + os.environ["PATH"])
        with vltest.readme_paths(("/tmp/vm1.sock", "/tmp/vm2.sock", "/tmp/virtlink.ctl")):
            sw = subprocess.Popen(["sh", "-c", "exec " + cmd], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
            try:
                got = {}

                def served():
                    if sw.poll() is not None:
                        raise AssertionError("the switch exited: " + sw.stdout.read())
                    try:
                        got["body"] = get("http://127.0.0.1:9100/metrics", 2)[1]
                        return True
                    except OSError:
                        return False
                vltest._wait(served, 20, "the README's metrics endpoint", 0.2)
                body = got["body"]
                self.assertIn('virtlink_port_up{port="vm1"} 0', body)
                self.assertIn('virtlink_port_rx_packets_total{port="vm2"} 0', body)
                self.assertIn("# TYPE virtlink_port_queue_age_seconds histogram", body)
                # The README's prometheus.yml, as printed, scrapes it.
                with vltest.Testbed(self) as tb:
                    prom = Prometheus(tb, config=readme_yaml())
                    vltest._wait(lambda: prom.query("up").get("", 0) == 1.0, 20,
                                 "Prometheus with the README's config scraping the switch", 0.5)
                    self.assertEqual(prom.query("virtlink_port_rx_packets_total"), {"vm1": 0.0, "vm2": 0.0})
            finally:
                sw.terminate()
                sw.wait(15)

    def hostile_clients(self, tb, mport, url):
        """Slow headers, a huge request and many connections from 127.0.0.2 (the
        per-address limit takes them; Prometheus scrapes from 127.0.0.1): forwarding goes
        on and a scrape from 127.0.0.1 is answered meanwhile; the huge request is refused."""
        held = []
        for i in range(40):  # connections that send part of a request line and wait
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", mport))
                s.sendall(b"GET /metr")
                held.append(s)
            except OSError:
                s.close()
        big = socket.create_connection(("127.0.0.1", mport), timeout=5, source_address=("127.0.0.2", 0))
        try:
            big.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (200 << 10) + b"\r\n\r\n")
        except OSError:
            pass  # the server closed the connection while we sent: a refusal too
        try:
            answer = big.recv(100)
        except OSError:
            answer = b""
        big.close()
        self.assertFalse(answer.startswith(b"HTTP/1.1 200"), answer)
        before = tb.switch_stats()["b"]["tx_packets"]
        t = time.monotonic()
        status, body = get(url, timeout=3)
        took = time.monotonic() - t
        time.sleep(1)
        after = tb.switch_stats()["b"]["tx_packets"]
        log("beside %d held connections and a 200 KiB request (answered %r): a scrape in %.0f ms, "
            "b delivered %d frames in about 1 s" % (len(held), answer[:40], 1e3 * took, after - before))
        self.assertEqual(status, 200)
        self.assertIn("virtlink_port_rx_packets_total", body)
        self.assertGreater(after, before)
        for s in held:
            s.close()


if __name__ == "__main__":
    vltest.main()
