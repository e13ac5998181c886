#!/bin/sh
# Runs one fuzz target for ctest (fuzz/CMakeLists.txt): `run-ctest.sh TARGET ARGS...`.
# The target's output is passed through; when it fails, a summary follows at the very end,
# where a CI log's tail keeps it: the harness's own words (a target's die() prints
# "<target>: what", "  request:", "  reply:"), the sanitizer's first report lines, and the
# input that failed in base64 (its first 8 KiB), so the failure can be replayed from the log
# alone: `base64 -d > crash && TARGET crash`. Exit status: the target's.
log=$(mktemp) || exit 1
"$@" >"$log" 2>&1
rc=$?
cat "$log"
if [ "$rc" -ne 0 ]; then
  echo "=== fuzz failure (exit $rc) ==="
  grep -E '^fuzz_[a-z_]+: |^  (request|reply): |ERROR: |runtime error: |^SUMMARY: ' "$log" |
    head -n 12 | cut -c1-3000
  art=$(sed -n 's/.*Test unit written to \([^ ]*\).*/\1/p' "$log" | tail -n 1)
  if [ -n "$art" ] && [ -f "$art" ]; then
    echo "input ($(wc -c <"$art") bytes, $art), base64:"
    head -c 8192 "$art" | base64 -w 0
    echo
  fi
fi
rm -f "$log"
exit "$rc"
