#!/usr/bin/env bash
# Starts one QEMU guest (image from build-guest.sh) attached to a vhost-user socket.
# Runs QEMU in the foreground (exec), so callers can background it and kill it by PID.
#
# Usage: scripts/guest/run-guest.sh [options]
#   --name N              guest name (QEMU -name, guest hostname, default MAC); default vl0
#   --sock PATH           vhost-user socket (required unless --no-net, --user-net or --tap)
#   --server              QEMU listens on PATH (server=on,wait=off) and the switch connects;
#                         default: QEMU connects as a client (reconnect=1)
#   --mac MAC             eth0 MAC; default 52:54:00:xx:xx:xx derived from the name
#   --ip CIDR             eth0 address in the guest (vl.ip), e.g. 10.0.0.1/24
#   --mtu N               eth0 MTU in the guest (vl.mtu)
#   --cmd 'SHELL'         command run in the guest after VL-READY (passed base64-encoded)
#   --keep                do not power off after the command; run sh on the serial console
#   --iperf               start `iperf3 -s -D` in the guest before VL-READY
#   --link-wait S         the guest waits up to S seconds (default 5) for eth0's link (the
#                         back-end connected) before VL-READY; use with --server when the switch
#                         connects late
#   --mem SIZE            guest memory (shared memfd backend), default 256M
#   --smp N               vCPUs, default 1
#   --serial-log FILE     console output goes to FILE (instead of stdio)
#   --serial-sock PATH    console on a unix socket (QEMU listens, wait=off) for interactive
#                         use with --keep (e.g. `socat - UNIX-CONNECT:PATH`); combines with
#                         --serial-log (then the log is a copy of everything sent by the guest)
#   --pidfile FILE        QEMU writes its PID there
#   --qmp PATH            QMP monitor on a unix socket (QEMU listens, wait=off)
#   --incoming URI        start as a live-migration destination (-incoming, e.g. unix:PATH);
#                         the other options must match the source's (same --name and --mac)
#   --extra-net-args ARGS appended to -device virtio-net-pci (e.g. mrg_rxbuf=off,csum=off)
#   --queues N            vhost-user multiqueue: -netdev ...,queues=N and -device ...,mq=on
#                         (QEMU runs one vhost_dev per queue pair on the one socket; INTx
#                         interrupts, vectors=0, are shared by all queues; the guest starts
#                         with min(N, vCPUs) pairs, `ethtool -L eth0 combined K` changes it)
#   --no-net              no NIC at all (smoke test of the image)
#   --user-net            a virtio-net NIC on QEMU user networking (slirp) instead of vhost-user
#                         (guest 10.0.2.15/24, host reachable as 10.0.2.2)
#   --tap IFNAME          a virtio-net NIC on host tap device IFNAME (which must exist; QEMU's
#                         own userspace tap back-end: vhost=off, no scripts) instead of vhost-user
#   --accel kvm|tcg|auto  auto (default) = tcg unless scripts/guest/probe-kvm.sh succeeded
#                         (probed once per image directory, result cached there)
#   --boot pvh|bzimage    pvh (default when build-guest.sh produced vmlinux): QEMU loads the
#                         uncompressed vmlinux via its PVH entry (~3 s to VL-READY under TCG);
#                         bzimage: the compressed vmlinuz through SeaBIOS (~7 s)
#   --append 'ARGS'       extra kernel command line arguments
#   --image-dir DIR       where vmlinuz and initramfs.cpio.gz are; default <repo>/build/guest
#                         (or $VL_GUEST_DIR)
#   --dry-run             print the QEMU command line instead of running it
#
# Console markers printed by the guest's /init: VL-READY, VL-EXIT <status>, VL-SHELL,
# VL-ERROR (see docs/guest-image.md).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit "${1:-0}"; }
die() { echo "run-guest: error: $*" >&2; exit 2; }
# QEMU option values separate keys with commas; a comma inside a value is written twice.
qesc() { printf '%s' "${1//,/,,}"; }

NAME=vl0 SOCK='' SERVER=0 MAC='' IP='' MTU='' CMD='' KEEP=0 IPERF=0 MEM=256M SMP=1
QUEUES=1 SERIAL_LOG='' SERIAL_SOCK='' PIDFILE='' EXTRA_NET='' NET=vhost ACCEL=auto APPEND='' DRY=0 BOOT='' LINKWAIT='' TAP='' QMP='' INCOMING=''
IMAGE_DIR=${VL_GUEST_DIR:-$REPO_ROOT/build/guest}

while (($#)); do
  case $1 in
    --server|--keep|--iperf|--no-net|--user-net|--dry-run|-h|--help) ;;
    --*) (($# >= 2)) || die "$1 needs a value" ;;
  esac
  case $1 in
    --name) NAME=$2; shift 2 ;;
    --sock) SOCK=$2; shift 2 ;;
    --server) SERVER=1; shift ;;
    --mac) MAC=$2; shift 2 ;;
    --ip) IP=$2; shift 2 ;;
    --mtu) MTU=$2; shift 2 ;;
    --cmd) CMD=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --iperf) IPERF=1; shift ;;
    --link-wait) LINKWAIT=$2; shift 2 ;;
    --mem) MEM=$2; shift 2 ;;
    --smp) SMP=$2; shift 2 ;;
    --serial-log) SERIAL_LOG=$2; shift 2 ;;
    --serial-sock) SERIAL_SOCK=$2; shift 2 ;;
    --pidfile) PIDFILE=$2; shift 2 ;;
    --qmp) QMP=$2; shift 2 ;;
    --incoming) INCOMING=$2; shift 2 ;;
    --extra-net-args) EXTRA_NET=$2; shift 2 ;;
    --queues) QUEUES=$2; shift 2 ;;
    --no-net) NET=none; shift ;;
    --user-net) NET=user; shift ;;
    --tap) NET=tap TAP=$2; shift 2 ;;
    --accel) ACCEL=$2; shift 2 ;;
    --boot) BOOT=$2; shift 2 ;;
    --append) APPEND=$2; shift 2 ;;
    --image-dir) IMAGE_DIR=$2; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "run-guest: unknown option $1" >&2; usage 2 >&2 ;;
  esac
done

INITRD="$IMAGE_DIR/initramfs.cpio.gz"
[[ -f $IMAGE_DIR/vmlinuz && -f $INITRD ]] ||
  die "no guest image in $IMAGE_DIR (run scripts/guest/build-guest.sh)"
if [[ -z $BOOT ]]; then
  if [[ -f $IMAGE_DIR/vmlinux ]]; then BOOT=pvh; else BOOT=bzimage; fi
fi
case $BOOT in
  pvh) KERNEL="$IMAGE_DIR/vmlinux"
       [[ -f $KERNEL ]] || die "no $KERNEL (build-guest.sh needs xz-utils for it); use --boot bzimage" ;;
  bzimage) KERNEL="$IMAGE_DIR/vmlinuz" ;;
  *) die "--boot must be pvh or bzimage" ;;
esac
[[ $NAME =~ ^[A-Za-z0-9_-]+$ ]] || die "--name must match [A-Za-z0-9_-]+"
[[ $NET != vhost || -n $SOCK ]] || die "--sock PATH is required (or --no-net / --user-net / --tap)"
if [[ -z $MAC ]]; then
  # Stable per-name locally administered MAC under QEMU's 52:54:00 prefix.
  h=$(printf '%s' "$NAME" | md5sum)
  MAC="52:54:00:${h:0:2}:${h:2:2}:${h:4:2}"
fi

# ---- accelerator
case $ACCEL in
  tcg|kvm) ACCEL_WHY="requested" ;;
  auto)
    ACCEL=tcg ACCEL_WHY="default"
    if [[ -r /dev/kvm && -w /dev/kvm ]]; then
      probe_file="$IMAGE_DIR/kvm-probe.result"
      if [[ ! -f $probe_file || $probe_file -ot $KERNEL || $probe_file -ot $INITRD ]]; then
        if "$SCRIPT_DIR/probe-kvm.sh" --image-dir "$IMAGE_DIR" >&2; then
          echo ok >"$probe_file"
        else
          echo fail >"$probe_file"
        fi
      fi
      if [[ $(cat "$probe_file") == ok ]]; then
        ACCEL=kvm ACCEL_WHY="probe-kvm.sh succeeded"
      else
        ACCEL_WHY="probe-kvm.sh failed (cached in $probe_file)"
      fi
    else
      ACCEL_WHY="no usable /dev/kvm"
    fi
    ;;
  *) die "--accel must be kvm, tcg or auto" ;;
esac
echo "run-guest: $NAME: accel=$ACCEL ($ACCEL_WHY), boot=$BOOT" >&2
if [[ $ACCEL == kvm ]]; then CPU=host; else CPU=max; fi

# ---- kernel command line
KARGS="console=ttyS0 quiet panic=-1 vl.name=$NAME"
[[ -z $IP ]] || KARGS+=" vl.ip=$IP"
[[ -z $MTU ]] || KARGS+=" vl.mtu=$MTU"
[[ -z $CMD ]] || KARGS+=" vl.cmd64=$(printf '%s' "$CMD" | base64 -w0)"
((KEEP == 0)) || KARGS+=" vl.keep=1"
((IPERF == 0)) || KARGS+=" vl.iperf=1"
[[ -z $LINKWAIT ]] || KARGS+=" vl.linkwait=$LINKWAIT"
[[ -z $APPEND ]] || KARGS+=" $APPEND"
# x86 Linux truncates the command line at 2048 bytes (COMMAND_LINE_SIZE).
((${#KARGS} < 2048)) ||
  die "kernel command line is ${#KARGS} bytes (limit 2047): --cmd too long; put it in a script"

# ---- QEMU command line
QEMU=(qemu-system-x86_64
  -name "$NAME"
  -machine "accel=$ACCEL,memory-backend=mem"
  -cpu "$CPU"
  -smp "$SMP"
  -m "$MEM"
  -object "memory-backend-memfd,id=mem,size=$MEM,share=on"
  -nographic -no-reboot
  -kernel "$KERNEL" -initrd "$INITRD" -append "$KARGS")

# romfile=: no iPXE option ROM (the guest boots with -kernel; saves boot time).
DEV="virtio-net-pci,netdev=net0,mac=$MAC,romfile="
case $NET in
  vhost)
    if ((SERVER)); then
      QEMU+=(-chardev "socket,id=chr0,path=$(qesc "$SOCK"),server=on,wait=off")
    else
      QEMU+=(-chardev "socket,id=chr0,path=$(qesc "$SOCK"),reconnect=1")
    fi
    # vectors=0: QEMU 7.2 under TCG crashes in msix_set_vector_notifiers with MSI-X on a
    # vhost-user virtio-net device; legacy INTx avoids it.
    [[ $QUEUES =~ ^[1-8]$ ]] || die "--queues must be 1..8"
    MQ=''
    ((QUEUES > 1)) && MQ=",mq=on"
    QEMU+=(-netdev "vhost-user,chardev=chr0,id=net0,queues=$QUEUES"
           -device "$DEV,vectors=0$MQ${EXTRA_NET:+,$EXTRA_NET}")
    ;;
  user)
    QEMU+=(-netdev "user,id=net0" -device "$DEV${EXTRA_NET:+,$EXTRA_NET}")
    ;;
  tap)
    QEMU+=(-netdev "tap,id=net0,ifname=$(qesc "$TAP"),script=no,downscript=no,vhost=off"
           -device "$DEV${EXTRA_NET:+,$EXTRA_NET}")
    ;;
  none)
    QEMU+=(-nic none)
    ;;
esac

if [[ -n $SERIAL_SOCK ]]; then
  QEMU+=(-chardev "socket,id=ser0,path=$(qesc "$SERIAL_SOCK"),server=on,wait=off${SERIAL_LOG:+,logfile=$(qesc "$SERIAL_LOG")}"
         -serial chardev:ser0 -monitor none)
elif [[ -n $SERIAL_LOG ]]; then
  QEMU+=(-chardev "file,id=ser0,path=$(qesc "$SERIAL_LOG")" -serial chardev:ser0 -monitor none)
fi
[[ -z $PIDFILE ]] || QEMU+=(-pidfile "$PIDFILE")
[[ -z $QMP ]] || QEMU+=(-qmp "unix:$(qesc "$QMP"),server=on,wait=off")
[[ -z $INCOMING ]] || QEMU+=(-incoming "$INCOMING")

if ((DRY)); then
  printf '%q ' "${QEMU[@]}"
  echo
  exit 0
fi
exec "${QEMU[@]}"
