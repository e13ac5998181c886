#!/usr/bin/env bash
# The two set-up commands of the README. Run as root on Debian 12.
#   scripts/run.sh demo   install dependencies, build, run the demo (the switch carrying
#                         traffic between two peers, with a summary)
#   scripts/run.sh test   install dependencies, build (release + sanitizer), run every test
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-}
case "$cmd" in
  demo)
    scripts/install-deps.sh
    scripts/build.sh release virtlink  # the demo needs the binary only, not the tests
    exec scripts/demo.sh
    ;;
  test)
    start=$(date +%s)
    scripts/install-deps.sh
    scripts/build.sh all
    exec scripts/test.sh
    ;;
  *)
    echo "usage: $0 demo|test" >&2
    exit 2
    ;;
esac
