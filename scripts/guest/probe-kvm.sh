#!/usr/bin/env bash
# Checks whether a guest actually boots with KVM on this machine (nested KVM may open
# /dev/kvm and create VMs, yet hang the guest in early boot).
#
# Usage: scripts/guest/probe-kvm.sh [--image-dir DIR] [--timeout SECONDS]
#   Boots the guest image (no NIC, command `true`) with -accel kvm and waits for
#   "VL-EXIT 0" on its console. Exit status 0 when it appears within the timeout
#   (default 20 s), 1 otherwise. run-guest.sh --accel auto uses this.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IMAGE_DIR=${VL_GUEST_DIR:-$SCRIPT_DIR/../../build/guest}
TIMEOUT=20
while (($#)); do
  case $1 in
    --image-dir) IMAGE_DIR=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "probe-kvm: unknown option $1" >&2; exit 2 ;;
  esac
done

if [[ ! -r /dev/kvm || ! -w /dev/kvm ]]; then
  echo "probe-kvm: no usable /dev/kvm" >&2
  exit 1
fi

tmp=$(mktemp -d)
qpid=
# shellcheck disable=SC2317  # invoked through the EXIT trap
cleanup() {
  if [[ -n $qpid ]] && kill -0 "$qpid" 2>/dev/null; then
    kill "$qpid" 2>/dev/null || true
    wait "$qpid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

"$SCRIPT_DIR/run-guest.sh" --name kvmprobe --accel kvm --no-net --cmd true \
  --image-dir "$IMAGE_DIR" --serial-log "$tmp/console.log" </dev/null >"$tmp/qemu.out" 2>&1 &
qpid=$!

start=$SECONDS
while ((SECONDS - start < TIMEOUT)); do
  if grep -q 'VL-EXIT 0' "$tmp/console.log" 2>/dev/null; then
    echo "probe-kvm: KVM guest booted in $((SECONDS - start)) s" >&2
    exit 0
  fi
  kill -0 "$qpid" 2>/dev/null || break
  sleep 0.5
done
echo "probe-kvm: KVM guest did not reach VL-EXIT 0 within ${TIMEOUT} s" >&2
tail -n 5 "$tmp/qemu.out" >&2 || true
exit 1
