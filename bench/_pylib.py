"""Puts <repo>/pylib (the shared Python test library, vltestlib) on sys.path.

The bench scripts are run as `python3 bench/NAME.py` (and `virtlink bench` runs
bench/virtlink_bench.py), so Python only puts bench/ itself on the path: each script that
imports vltestlib imports this module first. ctest sets PYTHONPATH to the same directory,
so under ctest this is a no-op. Nothing else in the tree edits sys.path.
"""
import os
import sys

PYLIB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pylib")
if PYLIB not in sys.path:
    sys.path.insert(0, PYLIB)
