#!/usr/bin/env bash
# The demo: two QEMU guests (Debian's kernel, a busybox initramfs; TCG, or KVM where a
# probe guest boots) on two vhost-user ports of the virtlink switch (bridge mode, interrupt
# PMD: it sleeps on the guests' kicks, so their vCPUs get the CPUs; the mode that serves
# guests sharing the cores best, README "Which PMD mode for guests"). Guest 1 pings guest 2 (the first ping's ARP request is flooded,
# the reply learned), runs a short iperf3 to it, and the switch's counters and MAC table
# are printed with a summary. Ends by itself (about 1-2 minutes here) and removes every
# process and file it made. Where no guest can boot, it says why and runs the DPDK
# virtio-user demo (scripts/demo-dpdk.sh) instead.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/demo-common.sh
fallback() {
  echo "demo: $1" >&2
  echo "demo: falling back to two DPDK virtio-user peers" >&2
  cleanup
  trap - EXIT
  exec scripts/demo-dpdk.sh
}
wait_for_line() {  # FILE PATTERN SECONDS
  for _ in $(seq $(( $3 * 5 ))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.2; done
  return 1
}

echo "== guest image (Debian kernel + busybox initramfs; cached in build/guest)"
scripts/guest/build-guest.sh >"$dir/image.log" 2>&1 || fallback "the guest image could not be built: $(tail -1 "$dir/image.log")"
tail -1 "$dir/image.log"

echo "== virtlink switch: ports vm1, vm2; bridge; interrupt-mode PMD thread"
"$VL" switch --port vm1=vhost-user:"$dir/vm1.sock" --port vm2=vhost-user:"$dir/vm2.sock" \
  --forward bridge --pmd-mode interrupt --control "$dir/ctl" 2>"$dir/switch.log" &
pids+=($!)
wait_for_line "$dir/switch.log" "switch:" 5 || fallback "the switch did not start: $(tail -3 "$dir/switch.log")"

echo "== guest 2: 10.0.0.2, iperf3 server"
scripts/guest/run-guest.sh --name vm2 --sock "$dir/vm2.sock" --mac 52:54:00:00:00:02 \
  --ip 10.0.0.2/24 --iperf --keep --serial-log "$dir/vm2.log" >"$dir/qemu2.log" 2>&1 &
pids+=($!)
sleep 0.5
grep -m1 "accel=" "$dir/qemu2.log" || true
wait_for_line "$dir/vm2.log" "VL-READY" 90 || fallback "guest 2 did not boot within 90 s: $(tail -2 "$dir/qemu2.log")"
grep -a -m1 VL-READY "$dir/vm2.log"

echo "== guest 1: 10.0.0.1; ping, ARP table, iperf3 for 5 s"
cmd='ping -c 5 -i 0.2 10.0.0.2; echo "--- ARP:"; ip neigh; iperf3 -c 10.0.0.2 -t 5 -f m | tail -4'
scripts/guest/run-guest.sh --name vm1 --sock "$dir/vm1.sock" --mac 52:54:00:00:00:01 \
  --ip 10.0.0.1/24 --cmd "$cmd" --keep --serial-log "$dir/vm1.log" >"$dir/qemu1.log" 2>&1 &
pids+=($!)
wait_for_line "$dir/vm1.log" "VL-READY" 90 || fallback "guest 1 did not boot within 90 s"
wait_for_line "$dir/vm1.log" "VL-EXIT" 60 || echo "demo: guest 1's commands did not finish in 60 s" >&2
sed -n '/VL-READY/,/VL-EXIT/p' "$dir/vm1.log" | tr -d '\r' | grep -av "^\s*$" | sed 's/^/  vm1| /'

echo
echo "== virtlink ctl stats (rx = from the guest's transmit queue, tx = into its receive queue)"
"$VL" ctl --control "$dir/ctl" stats
echo
echo "== virtlink ctl fdb"
"$VL" ctl --control "$dir/ctl" fdb
echo
echo "== virtlink ctl pmd-stats"
"$VL" ctl --control "$dir/ctl" pmd-stats
"$VL" ctl --control "$dir/ctl" stats --json >"$dir/stats.json"
python3 - "$dir/stats.json" "$dir/vm1.log" <<'PY'
import json, re, sys
ports = {p["name"]: p for p in json.load(open(sys.argv[1]))["ports"]}
log = open(sys.argv[2], errors="replace").read()
ping = re.search(r"(\d+) packets transmitted, (\d+) received", log)
rtt = re.search(r"rtt min/avg/max/mdev = ([\d.]+)/([\d.]+)/([\d.]+)", log)
bw = re.findall(r"([\d.]+) Mbits/sec\s+\d*\s*(sender|receiver)", log)
print()
print("== summary")
if ping:
    print(f"ping: {ping.group(2)}/{ping.group(1)} replies" +
          (f", rtt avg {rtt.group(2)} ms (TCG guests)" if rtt else ""))
for v, who in bw:
    print(f"iperf3 {who}: {v} Mbit/s")
for n, p in ports.items():
    d = {k: v for k, v in p["drops"].items() if v}
    print(f"{n}: {p['state']}, rx {p['rx_packets']} frames, tx {p['tx_packets']} frames, "
          f"drops {d or 0}; features {' '.join(p['feature_names'])}")
PY
echo "(core plan: two TCG guests and the interrupt-mode PMD thread share the 2 CPUs)"
