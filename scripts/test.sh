#!/usr/bin/env bash
# Runs every test: unit and interop tests on the release build, then the unit tests, the
# sanitizer-labelled interop tests and the fuzz targets (label fuzz: each fuzz target for
# 40 s, fuzz/CMakeLists.txt) on the ASan/UBSan build. Prints one closing line
# "tests: N passed, N failed" and exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
passed=0
failed=0

run_ctest() {  # DIR [ctest args...]
  local dir=$1; shift
  local log
  log=$(mktemp)
  ctest --test-dir "$dir" --output-on-failure "$@" 2>&1 | tee "$log"
  local line
  line=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$log" | tail -1)
  if [[ -n "$line" ]]; then
    local total fail
    total=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")
    fail=$(sed -E 's/.*tests passed, ([0-9]+) tests failed.*/\1/' <<<"$line")
    passed=$((passed + total - fail))
    failed=$((failed + fail))
  elif ! grep -q "No tests were found" "$log"; then
    failed=$((failed + 1))
  fi
  rm -f "$log"
}

echo "== release build: all tests"
run_ctest build
echo "== ASan/UBSan build: unit tests, sanitizer-labelled interop tests, fuzz targets"
run_ctest build-asan -L "unit|asan|fuzz"

echo "suite time: $(( $(date +%s) - start )) s"
echo "tests: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
