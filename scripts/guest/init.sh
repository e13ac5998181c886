#!/bin/sh
# /init of the virtlink test guest (busybox sh). Installed into the initramfs by
# scripts/guest/build-guest.sh; configured through the kernel command line:
#
#   vl.ip=CIDR       address for eth0 (e.g. 10.0.0.1/24); eth0 and lo are brought up
#   vl.mtu=N         MTU for eth0
#   vl.cmd64=B64     base64 of a shell command to run after networking is up
#   vl.keep=1        after the command, keep running an interactive sh on /dev/ttyS0
#                    instead of powering off
#   vl.iperf=1       start `iperf3 -s -D` before VL-READY
#   vl.linkwait=S    wait up to S seconds (default 5) for eth0 to be up (the back-end connected)
#                    before VL-READY
#   vl.ipv6=1        keep IPv6 on eth0 (default: disabled, so the guest sends no
#                    router solicitations / MLD reports on its own)
#   vl.name=NAME     hostname
#   vl.debug=1       keep kernel messages on the console after boot
#
# Console markers (one line each, on ttyS0):
#   VL-READY mac=<eth0 MAC|none> ip=<CIDR|none> mtu=<N|none> carrier=<0|1> state=<operstate|none>
#            uptime=<seconds since kernel start>
#   VL-EXIT <status of the command; 0 when there was none>
#   VL-SHELL         (vl.keep=1) the serial shell is about to start
#   VL-ERROR <text>  something in the setup failed (the command still runs)
export PATH=/bin
export HOME=/root
# Shell functions that make `ping`, `ip`, `timeout` run the real programs rather than busybox
# applets (busybox sh prefers its applets); interactive shells read it through ENV.
export ENV=/etc/vl-profile
# shellcheck source=/dev/null
. /etc/vl-profile
umask 022

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /dev/shm
exec </dev/console >/dev/console 2>&1
# Start on a fresh line: the firmware leaves terminal escapes without a newline.
echo

VL_IP='' VL_MTU='' VL_CMD64='' VL_KEEP=0 VL_IPERF=0 VL_IPV6=0 VL_NAME=vl-guest VL_DEBUG=0
VL_LINKWAIT=5
read -r CMDLINE </proc/cmdline
set -f  # split the command line into words, without globbing
for arg in $CMDLINE; do
  case $arg in
    vl.ip=*)    VL_IP=${arg#vl.ip=} ;;
    vl.mtu=*)   VL_MTU=${arg#vl.mtu=} ;;
    vl.cmd64=*) VL_CMD64=${arg#vl.cmd64=} ;;
    vl.keep=*)  VL_KEEP=${arg#vl.keep=} ;;
    vl.iperf=*) VL_IPERF=${arg#vl.iperf=} ;;
    vl.ipv6=*)  VL_IPV6=${arg#vl.ipv6=} ;;
    vl.name=*)  VL_NAME=${arg#vl.name=} ;;
    vl.debug=*) VL_DEBUG=${arg#vl.debug=} ;;
    vl.linkwait=*) VL_LINKWAIT=${arg#vl.linkwait=} ;;
  esac
done
set +f

[ "$VL_DEBUG" = 1 ] || dmesg -n 1
hostname "$VL_NAME"

# ---- modules: insmod in the listed order; retry the failures (dependency order problems).
pending=$(cat /lib/modules/load-order 2>/dev/null)
for _pass in 1 2 3; do
  failed=
  for m in $pending; do
    insmod "/lib/modules/$m.ko" 2>/tmp/insmod.err || {
      grep -q 'File exists' /tmp/insmod.err || failed="$failed $m"
    }
  done
  pending=$failed
  [ -z "$pending" ] && break
done
[ -z "$pending" ] || echo "VL-ERROR modules not loaded:$pending"

# ---- networking
ip link set lo up
MAC=none
CARRIER=0
OPER=none
MTU=
IP_SET=
# With vl.ip, wait (up to 5 s) for eth0 to appear; eth0 is brought up whenever it exists.
i=0
while [ -n "$VL_IP" ] && [ ! -e /sys/class/net/eth0 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
if [ -e /sys/class/net/eth0 ]; then
  [ "$VL_IPV6" = 1 ] || echo 1 >/proc/sys/net/ipv6/conf/eth0/disable_ipv6
  [ -z "$VL_MTU" ] || ip link set eth0 mtu "$VL_MTU" || echo "VL-ERROR cannot set mtu $VL_MTU"
  if [ -n "$VL_IP" ]; then
    if ip addr add "$VL_IP" dev eth0; then IP_SET=$VL_IP; else echo "VL-ERROR cannot add address $VL_IP"; fi
  fi
  ip link set eth0 up || echo "VL-ERROR cannot bring eth0 up"
  # Wait (vl.linkwait, default 5 s) until eth0 is operationally up: a vhost-user NIC has carrier
  # only once its back-end is connected, and the kernel drops transmitted packets until linkwatch
  # has activated the queue after the carrier came on (operstate "up").
  i=0
  while [ "$(cat /sys/class/net/eth0/operstate 2>/dev/null)" != up ] && [ $i -lt $((VL_LINKWAIT * 10)) ]; do
    sleep 0.1; i=$((i + 1))
  done
elif [ -n "$VL_IP" ]; then
  echo "VL-ERROR no eth0"
fi
if [ -e /sys/class/net/eth0 ]; then
  MAC=$(cat /sys/class/net/eth0/address)
  MTU=$(cat /sys/class/net/eth0/mtu)
  CARRIER=$(cat /sys/class/net/eth0/carrier 2>/dev/null || echo 0)
  OPER=$(cat /sys/class/net/eth0/operstate)
fi

if [ "$VL_IPERF" = 1 ]; then
  iperf3 -s -D --logfile /tmp/iperf3.log || echo "VL-ERROR iperf3 server did not start"
fi

read -r UPTIME _ </proc/uptime
echo "VL-READY mac=$MAC ip=${IP_SET:-none} mtu=${MTU:-none} carrier=$CARRIER state=$OPER uptime=$UPTIME"

# ---- the command
status=0
if [ -n "$VL_CMD64" ]; then
  if echo "$VL_CMD64" | base64 -d >/tmp/vl-cmd.raw 2>/dev/null && [ -s /tmp/vl-cmd.raw ]; then
    { echo '. /etc/vl-profile'; cat /tmp/vl-cmd.raw; } >/tmp/vl-cmd.sh
    sh /tmp/vl-cmd.sh </dev/null
    status=$?
  else
    echo "VL-ERROR cannot decode vl.cmd64"
    status=127
  fi
fi
echo   # the command's output may not end with a newline
echo "VL-EXIT $status"

if [ "$VL_KEEP" = 1 ]; then
  echo "VL-SHELL"
  export PS1='vl# '
  while true; do
    # setsid + opening the tty makes ttyS0 the shell's controlling terminal (job control, ^C).
    setsid sh -c 'exec sh -i </dev/ttyS0 >/dev/ttyS0 2>&1'
    sleep 0.2
  done
fi

sync
poweroff -f
sleep 5
reboot -f
