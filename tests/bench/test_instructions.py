#!/usr/bin/env python3
"""The README's recipe `python3 bench/instructions.py --virtlink build/virtlink`, run as
printed from the source tree (build/virtlink: the binary under test, linked there when the
build directory is elsewhere): the switch under callgrind forwarded frames in full bursts,
and every phase of the table is there with a busy total that is the sum of its phases."""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ap = argparse.ArgumentParser()
ap.add_argument("--virtlink", required=True)
a = ap.parse_args()
want = os.path.join(ROOT, "build", "virtlink")
if os.path.realpath(want) != os.path.realpath(a.virtlink):
    sys.exit("test_instructions: the recipe runs build/virtlink; run it from the release build")
# As printed: from the repository root, without ctest's PYTHONPATH.
env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
r = subprocess.run([sys.executable, "bench/instructions.py", "--virtlink", "build/virtlink"],
                   cwd=ROOT, capture_output=True, text=True, timeout=110, env=env)
print(r.stdout)
print(r.stderr, file=sys.stderr)
if r.returncode != 0:
    sys.exit("test_instructions: exit %d" % r.returncode)
m = re.search(r"frames forwarded (\d+) in (\d+) busy bursts \(([\d.]+) a burst\)", r.stdout)
if not m or int(m.group(1)) < 10000:
    sys.exit("test_instructions: too few frames forwarded")
if float(m.group(3)) < 16:
    sys.exit("test_instructions: bursts not full (%s a burst): the switch was not saturated" % m.group(3))
rows = dict(re.findall(r"^\s*(busy bursts, in all \(forward_burst\)|dequeue|classify|copy|"
                       r"write_back|notify|deliver|other)\s+([\d.-]+)$", r.stdout, re.M))
phases = ("dequeue", "classify", "copy", "write_back", "notify", "deliver", "other")
missing = [p for p in phases + ("busy bursts, in all (forward_burst)",) if p not in rows]
if missing:
    sys.exit("test_instructions: rows missing: %s" % missing)
total = float(rows["busy bursts, in all (forward_burst)"])
parts = sum(float(rows[p]) for p in phases)
if not 50 < total < 5000 or abs(total - parts) > 1.0:
    sys.exit("test_instructions: busy %.1f != sum of phases %.1f" % (total, parts))
if float(rows["other"]) < -1 or float(rows["copy"]) <= 0 or float(rows["dequeue"]) <= 0:
    sys.exit("test_instructions: implausible phases %s" % rows)
