#!/usr/bin/env bash
# Makes virtlink's man pages from the program's own --help with help2man: virtlink(1), and
# virtlink-switch(1), virtlink-ctl(1), virtlink-top(1), virtlink-gen(1), virtlink-vnf(1) from each
# subcommand's help (bench's --help is its Python harness's, which the package does not
# ship: virtlink(1) lists it). The NAME line of each subcommand's page is its line in
# `virtlink --help`; scripts/man/*.h2m add FILES, ENVIRONMENT and SEE ALSO.
# debian/rules runs it at package build time.
# Usage: scripts/make-man-pages.sh BINARY OUTDIR
set -euo pipefail
if (($# != 2)); then
  echo "usage: $0 BINARY OUTDIR" >&2
  exit 2
fi
bin=$(realpath "$1")
out=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
version=$("$bin" --version)
# `virtlink` on PATH, so that the help says "Usage: virtlink ..." (argv[0]), not the build
# path; one wrapper per subcommand, named as its page.
bindir=$(mktemp -d)
trap 'rm -rf "$bindir"' EXIT
ln -s "$bin" "$bindir/virtlink"
export PATH="$bindir:$PATH"

# The description of subcommand $1 in `virtlink --help` ("Subcommands:" section).
describe() {
  virtlink --help | awk -v s="$1" '/^Subcommands:/ { on = 1; next }
    on && $1 == s { $1 = ""; sub(/^ +/, ""); print; exit }'
}

page() {  # page NAME DESCRIPTION
  local name=$1 desc=$2 inc=()
  [[ -f $here/man/$name.h2m ]] && inc=(--include="$here/man/$name.h2m")
  help2man --no-info --section=1 --version-string="$version" --name="$desc" \
    "${inc[@]}" --include="$here/man/common.h2m" --output="$out/$name.1" "$name"
}

page virtlink "userspace virtio networking data plane (vhost-user switch)"
for sub in switch ctl top gen vnf; do
  printf '#!/bin/sh\nexec virtlink %s "$@"\n' "$sub" >"$bindir/virtlink-$sub"
  chmod +x "$bindir/virtlink-$sub"
  desc=$(describe "$sub")
  [[ -n $desc ]] || { echo "$0: no '$sub' in virtlink --help" >&2; exit 1; }
  page "virtlink-$sub" "$desc"
done
