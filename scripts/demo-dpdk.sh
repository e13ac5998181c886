#!/usr/bin/env bash
# The DPDK demo (the fallback of scripts/demo.sh): the virtlink switch (bridge mode, PMD thread on CPU 1) carrying traffic between
# two DPDK virtio-user peers. One testpmd (forwarding lcore on CPU 0) owns both peers "a"
# and "b" and forwards whatever one receives out of the other (io mode); a first burst
# (--tx-first) starts frames circulating a -> switch -> b -> testpmd -> a ... Unicast MACs
# are learned by the bridge. Prints the rate each second, the switch's counters, its MAC
# table and a summary. Ends by itself in about 15 s and removes every process and file it
# made. Core plan (2 CPUs): switch PMD thread on CPU 1; testpmd forwarding on CPU 0.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/demo-common.sh
PMDS=/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0
DURATION=${DEMO_SECONDS:-5}
MAC_A=02:00:00:00:00:0a
MAC_B=02:00:00:00:00:0b
wait_for() {  # FILE SECONDS
  for _ in $(seq $(( $2 * 10 ))); do [[ -e $1 ]] && return 0; sleep 0.1; done
  echo "demo: $1 did not appear" >&2; return 1
}
stat_field() {  # PORT FIELD
  "$VL" ctl --control "$dir/ctl" stats --json |
    python3 -c "import json,sys; print({p['name']:p for p in json.load(sys.stdin)['ports']}['$1']['$2'])"
}

echo "== virtlink switch: ports a, b (vhost-user servers), bridge, PMD thread on CPU 1"
"$VL" switch --port a=vhost-user:"$dir/a.sock" --port b=vhost-user:"$dir/b.sock" \
  --forward bridge --pmd-cores 1 --control "$dir/ctl" 2>"$dir/switch.log" &
pids+=($!)
wait_for "$dir/b.sock" 5
wait_for "$dir/ctl" 5

echo "== testpmd: virtio-user peers a ($MAC_A) and b ($MAC_B), io forwarding on CPU 0, 64-byte frames"
dpdk-testpmd -l 0,1 --main-lcore 1 --no-huge -m 512 --no-pci --file-prefix vl-demo \
  -d $PMDS/librte_net_virtio.so -d $PMDS/librte_mempool_ring.so \
  --vdev "net_virtio_user0,path=$dir/a.sock,queues=1,mac=$MAC_A" \
  --vdev "net_virtio_user1,path=$dir/b.sock,queues=1,mac=$MAC_B" -- \
  --no-mlockall --total-num-mbufs=8192 --forward-mode=io --tx-first --stats-period 1 \
  --eth-peer=0,$MAC_B --eth-peer=1,$MAC_A -a </dev/null >"$dir/testpmd.log" 2>&1 &
tp=$!
pids+=($tp)
prev=0
for s in $(seq "$DURATION"); do
  sleep 1
  now=$(stat_field a tx_packets)
  printf '  t=%ds  delivered to a: %.2f Mpps\n' "$s" "$(python3 -c "print(($now - $prev) / 1e6)")"
  prev=$now
done
echo
echo "== virtlink ctl ports"
"$VL" ctl --control "$dir/ctl" ports
echo
echo "== virtlink ctl fdb"
"$VL" ctl --control "$dir/ctl" fdb
"$VL" ctl --control "$dir/ctl" stats --json >"$dir/live.json"
kill -INT "$tp"
wait "$tp" 2>/dev/null || true
sleep 0.5
echo
echo "== virtlink ctl stats (rx = taken from the peer's TX queue, tx = put into its RX queue)"
"$VL" ctl --control "$dir/ctl" stats
"$VL" ctl --control "$dir/ctl" stats --json >"$dir/final.json"
python3 - "$dir/live.json" "$dir/final.json" "$DURATION" <<'PY'
import json, sys
live = {p["name"]: p for p in json.load(open(sys.argv[1]))["ports"]}
final = {p["name"]: p for p in json.load(open(sys.argv[2]))["ports"]}
secs = float(sys.argv[3])
rx = sum(p["rx_packets"] for p in final.values())
tx = sum(p["tx_packets"] for p in final.values())
drops = sum(sum(p["drops"].values()) for p in final.values())
print()
print("== summary")
print(f"the switch forwarded {tx} frames in {secs:.0f} s ({tx / secs / 1e6:.2f} Mpps, both directions)")
print(f"received {rx} = delivered {tx} + dropped {drops}: "
      f"{'every frame accounted for' if rx == tx + drops else 'MISMATCH'}")
nz = {f"{n}.{k}": v for n, p in final.items() for k, v in p["drops"].items() if v}
print("drops by reason:", nz or "none")
print("features negotiated with a:", " ".join(live["a"]["feature_names"]))
PY
echo "(core plan: switch PMD thread on CPU 1, testpmd forwarding on CPU 0)"
