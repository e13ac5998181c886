#!/usr/bin/env bash
# Builds the test guest image (Debian kernel + busybox initramfs) for QEMU.
#
# Usage: scripts/guest/build-guest.sh [OUTDIR]
#   OUTDIR defaults to <repo>/build/guest (a relative OUTDIR is taken relative to the
#   current directory). Produces:
#     OUTDIR/vmlinuz             Debian's kernel (the exact package linux-image-amd64 depends on)
#     OUTDIR/vmlinux             the same kernel uncompressed (ELF), booted by QEMU through its
#                                PVH entry point: ~4 s faster per boot under TCG
#     OUTDIR/initramfs.cpio.gz   busybox initramfs: /init (scripts/guest/init.sh), virtio-net
#                                modules, iputils ping, iperf3, iproute2 ip, coreutils timeout
#                                (+ their libraries)
#     OUTDIR/kernel-release      the kernel release string (e.g. 6.1.0-57-amd64)
#   The kernel package is downloaded with `apt-get download` into OUTDIR/cache/ and unpacked
#   with `dpkg -x` into a scratch directory; it is never installed on the host.
#
# Needs (Debian 12 packages, see scripts/install-deps.sh): busybox-static cpio iperf3
# iputils-ping iproute2 ethtool, plus apt/dpkg/gzip/coreutils/util-linux; xz-utils for OUTDIR/vmlinux
# (without it only the slower bzImage boot is available). Run as root (device nodes in the
# initramfs are created with mknod). Idempotent: prints "cached" and does nothing when
# OUTDIR/vmlinuz and OUTDIR/initramfs.cpio.gz are newer than this script and init.sh.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
SELF="$SCRIPT_DIR/$(basename "${BASH_SOURCE[0]}")"
INIT_TEMPLATE="$SCRIPT_DIR/init.sh"

OUTDIR=${1:-$REPO_ROOT/build/guest}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)

# Modules for virtio-net, in dependency order (all =m in Debian 12's kernel).
MODULES=(virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci
         failover net_failover virtio_net)
# Dynamically linked host programs copied into the guest with their libraries
# (ping: iputils, ip: iproute2, timeout: coreutils, so that `timeout N ping ...` runs iputils;
# ethtool: `ethtool -L eth0 combined N` for the multiqueue test).
PROGRAMS=(ping iperf3 ip timeout ethtool)

log() { echo "build-guest: $*" >&2; }
die() { echo "build-guest: error: $*" >&2; exit 1; }

# ---------------------------------------------------------------- cache check
# Serialize concurrent builds into the same OUTDIR (e.g. test suites started in parallel).
exec 9>"$OUTDIR/.build.lock"
flock 9
fresh() { [[ -f $1 && $1 -nt $SELF && $1 -nt $INIT_TEMPLATE ]]; }
if fresh "$OUTDIR/vmlinuz" && fresh "$OUTDIR/initramfs.cpio.gz" &&
   { fresh "$OUTDIR/vmlinux" || fresh "$OUTDIR/vmlinux.unsupported"; }; then
  echo "build-guest: cached ($OUTDIR)"
  exit 0
fi

[[ -f $INIT_TEMPLATE ]] || die "missing init template $INIT_TEMPLATE"
for tool in apt-get apt-cache dpkg cpio gzip ldd busybox "${PROGRAMS[@]}"; do
  command -v "$tool" >/dev/null || die "'$tool' not found (run scripts/install-deps.sh)"
done
BUSYBOX=$(command -v busybox)
# busybox-static must be static: the initramfs relies on it without libraries.
if ldd "$BUSYBOX" >/dev/null 2>&1; then
  die "$BUSYBOX is dynamically linked; install busybox-static"
fi

# ---------------------------------------------------------------- kernel
kernel_pkg() {
  apt-cache depends linux-image-amd64 2>/dev/null |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }'
}
KPKG=$(kernel_pkg || true)
if [[ -z $KPKG ]]; then
  log "apt-cache does not know linux-image-amd64; running apt-get update"
  apt-get update -qq
  KPKG=$(kernel_pkg || true)
  [[ -n $KPKG ]] || die "cannot resolve the kernel package from linux-image-amd64"
fi
log "kernel package: $KPKG"

# The .deb is kept in OUTDIR/cache/ (downloaded once); it is unpacked into a scratch
# directory for each build and removed afterwards (the unpacked tree is ~400 MB).
KCACHE="$OUTDIR/cache"
mkdir -p "$KCACHE"
deb=$(find "$KCACHE" -maxdepth 1 -name "${KPKG}_*.deb" | head -n1)
if [[ -z $deb ]]; then
  log "downloading $KPKG"
  # APT::Sandbox::User=root: the _apt user may not be able to write into OUTDIR.
  (cd "$KCACHE" && apt-get download -qq -o APT::Sandbox::User=root "$KPKG") ||
    die "apt-get download $KPKG failed"
  deb=$(find "$KCACHE" -maxdepth 1 -name "${KPKG}_*.deb" | head -n1)
  [[ -n $deb ]] || die "apt-get download left no ${KPKG}_*.deb in $KCACHE"
fi
KROOT="$OUTDIR/kernel.d"
STAGE="$OUTDIR/initramfs.d"
trap 'rm -rf "$KROOT" "$STAGE"' EXIT
rm -rf "$KROOT"
log "unpacking $(basename "$deb")"
dpkg -x "$deb" "$KROOT"

KREL=$(find "$KROOT/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | head -n1)
[[ -n $KREL && -d $KROOT/lib/modules/$KREL ]] || die "no lib/modules in $KROOT"
VMLINUZ="$KROOT/boot/vmlinuz-$KREL"
[[ -f $VMLINUZ ]] || die "missing $VMLINUZ"
KCONFIG="$KROOT/boot/config-$KREL"

# ---------------------------------------------------------------- initramfs tree
rm -rf "$STAGE"
mkdir -p "$STAGE"/{bin,dev,proc,sys,tmp,run,root,etc,lib/modules}
ln -s bin "$STAGE/sbin"
mkdir -p "$STAGE/usr"
ln -s ../bin "$STAGE/usr/bin"
ln -s ../bin "$STAGE/usr/sbin"
chmod 1777 "$STAGE/tmp"

# busybox and its applets (symlinks in /bin)
cp "$BUSYBOX" "$STAGE/bin/busybox"
while read -r applet; do
  [[ -n $applet && $applet != busybox ]] || continue
  ln -sf busybox "$STAGE/bin/$applet"
done < <("$BUSYBOX" --list)

# Dynamically linked programs with every library ldd lists (including the ELF interpreter),
# copied to the same path they have on the host.
copy_with_libs() {
  local src=$1 dest_name=$2 lib
  rm -f "$STAGE/bin/$dest_name"
  cp -L "$src" "$STAGE/bin/$dest_name"
  while read -r lib; do
    [[ -e $STAGE$lib ]] && continue
    mkdir -p "$STAGE$(dirname "$lib")"
    cp -L "$lib" "$STAGE$lib"
  done < <(ldd "$src" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }')
}
for prog in "${PROGRAMS[@]}"; do
  copy_with_libs "$(command -v "$prog")" "$prog"
done
# Debian's busybox-static is built with FEATURE_SH_STANDALONE and FEATURE_PREFER_APPLETS: its
# sh runs its own applet for a bare name like `ping` even when /bin/ping is another program.
# Shell functions take precedence over applets, so /etc/vl-profile (sourced by /init before the
# command, and by interactive shells through ENV) maps those names to the real programs.
# The applet list is read whole first: `busybox --list | grep -q` under pipefail fails at
# random when grep exits early and busybox gets SIGPIPE (a fresh image once lacked ping()).
applets=$("$BUSYBOX" --list)
{
  echo "# generated by build-guest.sh: prefer the real programs over busybox applets"
  for prog in "${PROGRAMS[@]}"; do
    if grep -qx "$prog" <<<"$applets"; then
      echo "$prog() { /bin/$prog \"\$@\"; }"
    fi
  done
} >"$STAGE/etc/vl-profile"
# ld.so looks in /lib64 for the interpreter path on x86-64; make sure it resolves.
if [[ ! -e $STAGE/lib64/ld-linux-x86-64.so.2 ]]; then
  die "ELF interpreter not copied (ldd output unexpected)"
fi

# virtio-net modules, flat in /lib/modules, plus the load order for /init
: >"$STAGE/lib/modules/load-order"
for m in "${MODULES[@]}"; do
  opt="CONFIG_$(echo "$m" | tr '[:lower:]' '[:upper:]')"
  ko=$(find "$KROOT/lib/modules/$KREL/kernel" \( -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" \) | head -n1)
  if [[ -z $ko ]]; then
    if [[ -f $KCONFIG ]] && grep -q "^$opt=y" "$KCONFIG"; then
      log "module $m is built into the kernel"
      continue
    fi
    die "module $m not found in $KPKG"
  fi
  case $ko in
    *.ko)     cp "$ko" "$STAGE/lib/modules/$m.ko" ;;
    *.ko.xz)  xz -dc "$ko" >"$STAGE/lib/modules/$m.ko" ;;
    *.ko.zst) zstd -qdc "$ko" >"$STAGE/lib/modules/$m.ko" ;;
  esac
  echo "$m" >>"$STAGE/lib/modules/load-order"
done
echo "$KREL" >"$STAGE/etc/kernel-release"

# minimal /etc
cat >"$STAGE/etc/hosts" <<'EOF'
127.0.0.1 localhost
EOF
echo "root:x:0:0:root:/root:/bin/sh" >"$STAGE/etc/passwd"
echo "root:x:0:" >"$STAGE/etc/group"
cat >"$STAGE/etc/nsswitch.conf" <<'EOF'
hosts: files
EOF

# /dev/console must exist in the initramfs, or the kernel starts /init without a console.
mknod -m 600 "$STAGE/dev/console" c 5 1
mknod -m 666 "$STAGE/dev/null" c 1 3

install -m 755 "$INIT_TEMPLATE" "$STAGE/init"

# ---------------------------------------------------------------- uncompressed kernel (PVH)
# Under TCG, the bzImage decompressing itself (xz) plus the firmware path takes ~4 s of a ~7 s
# boot. QEMU boots an uncompressed ELF vmlinux directly through its PVH entry point
# (CONFIG_PVH=y in Debian's kernel), so a guest reaches userspace in ~3 s. The payload is
# located with the bzImage header: (setup_sects + 1) * 512 + payload_offset, payload_length.
extract_vmlinux() {
  local bz=$1 out=$2 setup off len start magic
  setup=$(od -An -tu1 -j $((0x1f1)) -N1 "$bz" | tr -d ' ')
  off=$(od -An -tu4 -j $((0x248)) -N4 "$bz" | tr -d ' ')
  len=$(od -An -tu4 -j $((0x24c)) -N4 "$bz" | tr -d ' ')
  start=$(((setup + 1) * 512 + off))
  payload() { dd if="$bz" iflag=skip_bytes,count_bytes skip="$start" count="$len" bs=64K status=none; }
  magic=$(od -An -tx1 -j "$start" -N4 "$bz" | tr -d ' \n')
  case $magic in
    # (busybox unxz cannot decode the kernel's xz stream: xz-utils is needed for this one)
    fd377a58) command -v xz >/dev/null && payload | xz -dc --single-stream >"$out" ;;
    1f8b08*)  payload | gzip -dc >"$out" ;;
    28b52ffd) payload | zstd -qdc >"$out" ;;
    *) echo "unknown payload magic $magic" >&2; return 1 ;;
  esac
  [[ $(od -An -tx1 -N4 "$out" | tr -d ' \n') == 7f454c46 ]]  # ELF
}
rm -f "$OUTDIR/vmlinux" "$OUTDIR/vmlinux.unsupported"
if [[ -f $KCONFIG ]] && grep -q '^CONFIG_PVH=y' "$KCONFIG" &&
   extract_vmlinux "$VMLINUZ" "$OUTDIR/vmlinux.tmp" 2>/dev/null; then
  mv "$OUTDIR/vmlinux.tmp" "$OUTDIR/vmlinux"
else
  rm -f "$OUTDIR/vmlinux.tmp"
  log "warning: no PVH-bootable vmlinux (guests will boot the bzImage, slower)"
  echo "no PVH vmlinux could be extracted from $KREL" >"$OUTDIR/vmlinux.unsupported"
fi

# ---------------------------------------------------------------- archives
# Fixed mtimes, owners and order: the same inputs give a byte-identical initramfs.
find "$STAGE" -exec touch -h -d @0 {} +
(cd "$STAGE" && find . -mindepth 1 -print0 | LC_ALL=C sort -z |
  cpio --null --create --format=newc --owner=0:0 --reproducible --quiet) |
  gzip -9n >"$OUTDIR/initramfs.cpio.gz.tmp"
cp "$VMLINUZ" "$OUTDIR/vmlinuz.tmp"
echo "$KREL" >"$OUTDIR/kernel-release"
mv "$OUTDIR/vmlinuz.tmp" "$OUTDIR/vmlinuz"
mv "$OUTDIR/initramfs.cpio.gz.tmp" "$OUTDIR/initramfs.cpio.gz"

log "kernel $KREL: $OUTDIR/vmlinuz ($(du -h "$OUTDIR/vmlinuz" | cut -f1))"
[[ ! -f $OUTDIR/vmlinux ]] || log "uncompressed kernel (PVH boot): $OUTDIR/vmlinux"
log "initramfs: $OUTDIR/initramfs.cpio.gz ($(du -h "$OUTDIR/initramfs.cpio.gz" | cut -f1))"
