#!/usr/bin/env bash
# Long fuzzing runs, outside CI: each libFuzzer target for a fixed time, one after another,
# each with its own persistent corpus outside the repository, then a markdown table of what
# each run did.
#
#   fuzz/run-long.sh [--seconds N] [--targets "T1 T2 ..."] [--build DIR] [--out FILE]
#
#   --seconds N   wall time of each target, in seconds (default 600): -max_total_time=N
#   --targets L   space- or comma-separated target names (default: every fuzz_* executable
#                 in DIR/fuzz that has a seed directory fuzz/corpus/<target>/)
#   --build DIR   the ASan/libFuzzer build (default build-asan; `bash scripts/build.sh asan`)
#   --out FILE    the table (default DIR/fuzz-long/summary-YYYY-MM-DD-HHMM.md)
#
# Per target, in DIR/fuzz-long/<target>/: corpus/ (kept between runs; libFuzzer writes the
# units it finds there and starts from it, the checked-in seeds and regressions added),
# fuzz-0.log (this run's output: -jobs=1 runs the fuzzer in one child whose output goes
# there), crash-*/leak-*/timeout-*/oom-* (artifacts of this run or earlier ones).
# Run it under `nice -n 19` on a shared machine. Each target runs with -jobs=1
# -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 and its fuzz/<target>.dict if it has
# one, as under ctest.
#
# Table columns, per target: seconds asked; executions (stat::number_of_executed_units);
# exec/s (stat::average_exec_per_sec); hours 10^7 executions take at that rate; cov and ft
# (libFuzzer's covered edges and features, from the last status line); corpus (files and
# bytes of corpus/ after the run, seeds not counted); new units (stat::new_units_added);
# peak RSS (MB); crashes (artifacts this run wrote, named). A target whose log has no final
# stats (killed, or it crashed before them) says so in the row. Relative --build and --out
# paths are taken from the checkout's top directory. The exit status is 0 when every target
# ran, crashes or not: read the crashes column.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
need() { [[ $# -ge 2 && -n $2 ]] || { echo "run-long.sh: $1 takes a value (see --help)" >&2; exit 2; }; }
seconds=600
targets=""
build=build-asan
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) need "$@"; seconds=$2; shift 2 ;;
    --targets) need "$@"; targets=${2//,/ }; shift 2 ;;
    --build) need "$@"; build=$2; shift 2 ;;
    --out) need "$@"; out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run-long.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$seconds" =~ ^[0-9]+$ && "$seconds" -gt 0 ]] || { echo "run-long.sh: --seconds takes a positive integer" >&2; exit 2; }
build=$(cd "$build" && pwd)
if [[ -z "$targets" ]]; then
  for d in "$root"/fuzz/corpus/*/; do
    t=$(basename "$d")
    [[ -x "$build/fuzz/$t" ]] && targets+="$t "
  done
fi
[[ -n "$targets" ]] || { echo "run-long.sh: no fuzz targets in $build/fuzz (build with scripts/build.sh asan)" >&2; exit 2; }
base=$build/fuzz-long
mkdir -p "$base"
[[ -n "$out" ]] || out=$base/summary-$(date -u +%Y-%m-%d-%H%M).md

files_bytes() {  # "FILES BYTES" of the regular files directly in $1
  find "$1" -maxdepth 1 -type f -printf '%s\n' | awk '{n++; b+=$1} END {printf "%d %d\n", n, b}'
}
stat_of() {  # the value of stat::$2 in log $1, or "?"
  local v
  v=$(grep -a "^stat::$2:" "$1" | tail -1 | awk '{print $2}')
  echo "${v:-?}"
}

rows=()
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')  # at the start
started=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for t in $targets; do
  exe=$build/fuzz/$t
  [[ -x "$exe" ]] || { echo "run-long.sh: no executable $exe" >&2; exit 2; }
  dir=$base/$t
  mkdir -p "$dir/corpus"
  dirs=("$dir/corpus" "$root/fuzz/corpus/$t")
  [[ -d "$root/fuzz/regressions/$t" ]] && dirs+=("$root/fuzz/regressions/$t")
  dict=()  # the target's dictionary of protocol words, as under ctest
  [[ -f "$root/fuzz/$t.dict" ]] && dict=(-dict="$root/fuzz/$t.dict")
  before=$(find "$dir" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
  rm -f "$dir/fuzz-0.log"
  echo "== $t: ${seconds} s, corpus $dir/corpus ($(date -u +%H:%M:%S))"
  # libFuzzer exits non-zero on a crash; the row records it and the next target runs.
  (cd "$dir" && "$exe" -jobs=1 -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
     -print_final_stats=1 "${dict[@]}" -artifact_prefix="$dir/" "${dirs[@]}" >/dev/null 2>&1) || true
  log=$dir/fuzz-0.log
  [[ -f "$log" ]] || { echo "run-long.sh: $t wrote no $log" >&2; exit 1; }
  execs=$(stat_of "$log" number_of_executed_units)
  rate=$(stat_of "$log" average_exec_per_sec)
  added=$(stat_of "$log" new_units_added)
  rss=$(stat_of "$log" peak_rss_mb)
  last=$(grep -a -E '^#[0-9]+.*cov: ' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  read -r nfiles nbytes < <(files_bytes "$dir/corpus")
  after=$(find "$dir" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
  new=$(comm -13 <(echo "$before") <(echo "$after") | xargs -r -n1 basename | paste -sd' ' -)
  hours="?"
  [[ "$rate" =~ ^[0-9]+$ && "$rate" -gt 0 ]] && hours=$(awk -v r="$rate" 'BEGIN {printf "%.2f", 1e7 / r / 3600}')
  note=""
  [[ "$execs" == "?" ]] && note=" (no final stats in the log)"
  rows+=("| \`$t\` | $seconds | $execs | $rate | $hours | ${cov:-?} | ${ft:-?} | $nfiles / $nbytes | $added | $rss | ${new:-none}$note |")
  echo "   $execs executions, $rate exec/s, cov ${cov:-?} ft ${ft:-?}, corpus $nfiles files $nbytes bytes, crashes: ${new:-none}"
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
{
  echo "Long fuzzing run: \`fuzz/run-long.sh --seconds $seconds --targets \"$targets\"\`"
  echo "at $commit, build $build,"
  echo "started $started, ended $(date -u '+%Y-%m-%d %H:%M:%S UTC'); load average"
  echo "$load_start at the start, $load_end at the end, $(nproc) CPUs; nice $(nice)."
  echo
  echo "| target | s | executions | exec/s | h for 10^7 | cov | ft | corpus files / bytes | new units | peak RSS MB | crashes |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
} >"$out"
echo "table: $out"
cat "$out"
