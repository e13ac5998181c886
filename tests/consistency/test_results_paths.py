#!/usr/bin/env python3
"""Every recorded bench result the documentation names exists (ctest entry
consistency_results_paths, label unit):

  * each `bench/results/...` path in README.md, docs/**/*.md and bench/README.md;
  * each result file name in backticks in bench/results/*.md (relative to bench/results:
    `p2p-quick-repeat3-16h26.*`, `history/2026-11-30/tcp-2026-11-30`, ...), recognised by
    the benches' file-name prefixes.

A name may use the shell's `*` and `{a,b}`; one without an extension names a run (its
NAME.* files). Reports file:line of each name that matches nothing.

    python3 tests/consistency/test_results_paths.py -v
"""
import glob
import os
import re
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "bench", "results")
# `bench/results/` then anything up to a space, quote, backtick or closing bracket.
FULL_PATH = re.compile(r"bench/results/[^\s`'\")\]<>|]*")
# The benches' result names (bench/results/README.md "Latest run per bench"; fuzz-:
# fuzz/run-long.sh).
RESULT_NAME = re.compile(r"(history/\d{4}-\d{2}-\d{2}/)?"
                         r"(p2p|p2v|pvp|pvvp|loopback|chain|batching|ping|tcp|soak|instructions|"
                         r"mq|fdb|driver|issue15|fuzz|uplink)-[A-Za-z0-9{},*._-]*")


def expand(name):
    """Brace expansion: a-{x,y}-b -> [a-x-b, a-y-b]."""
    m = re.search(r"\{([^{}]*)\}", name)
    if not m:
        return [name]
    return [e for alt in m.group(1).split(",")
            for e in expand(name[:m.start()] + alt + name[m.end():])]


def exists(base, name):
    """True if every expansion of `name` (relative to `base`) matches a file or directory."""
    for one in expand(name):
        path = os.path.join(base, one)
        if os.path.isdir(path):
            continue
        if glob.glob(path):
            continue
        if not re.search(r"\.[A-Za-z0-9*]+$", os.path.basename(one)) and glob.glob(path + ".*"):
            continue  # a run's stem: its NAME.json, NAME.txt, ...
        return False
    return True


def doc_files():
    out = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "bench", "README.md")]
    out += sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    return out


def missing():
    """[(file:line, name)] of every named result that does not exist."""
    bad = []
    for path in doc_files():
        with open(path) as f:
            for i, line in enumerate(f, 1):
                for m in FULL_PATH.finditer(line):
                    name = m.group(0).rstrip(".,:;")[len("bench/results/"):]
                    if not exists(RESULTS, name):
                        bad.append(("%s:%d" % (os.path.relpath(path, ROOT), i), m.group(0)))
    for path in sorted(glob.glob(os.path.join(RESULTS, "*.md"))):
        with open(path) as f:
            for i, line in enumerate(f, 1):
                for tok in re.findall(r"`([^`\n]+)`", line):
                    if RESULT_NAME.fullmatch(tok) and not exists(RESULTS, tok):
                        bad.append(("%s:%d" % (os.path.relpath(path, ROOT), i), tok))
    return bad


class ResultsPaths(unittest.TestCase):

    def test_named_results_exist(self):
        bad = missing()
        self.assertFalse(bad, "named results that do not exist:\n" +
                         "\n".join("  %s: %s" % b for b in bad))

    def test_the_check_sees_names(self):
        # A guard against patterns that silently match nothing: the recorded-results
        # README names dozens of runs, and the README names the results directory.
        n = 0
        with open(os.path.join(RESULTS, "README.md")) as f:
            for line in f:
                n += sum(1 for t in re.findall(r"`([^`\n]+)`", line) if RESULT_NAME.fullmatch(t))
        self.assertGreater(n, 30)
        with open(os.path.join(ROOT, "README.md")) as f:
            self.assertTrue(FULL_PATH.search(f.read()))

    def test_a_missing_name_is_reported(self):
        self.assertFalse(exists(RESULTS, "p2p-no-such-run.*"))
        self.assertFalse(exists(RESULTS, "history/2026-11-30/{tcp-2026-11-30,no-such}.json"))
        self.assertTrue(exists(RESULTS, "history/2026-11-30/tcp-2026-11-30"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
