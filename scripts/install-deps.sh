#!/usr/bin/env bash
# Installs everything virtlink needs to build, test and benchmark, from Debian 12 packages only.
# Usage: scripts/install-deps.sh            (as root; idempotent, quiet when all is present)
set -euo pipefail

PKGS=(
  # build
  cmake ninja-build g++ clang ccache pkg-config git
  # libraries
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libfmt-dev libspdlog-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # AF_XDP wires (libxdp's xsk API, its default program); xdp-loader and xdpdump to look
  libxdp-dev libbpf-dev xdp-tools
  # the dpdk wire (src/wire/dpdk.cpp): libdpdk to build; the dpdk package's driver plugins
  # (EAL loads them at run time), and testpmd as a peer for interop tests and benchmarks
  dpdk dpdk-dev
  # sanitizer and fuzzing runtime for clang
  libclang-rt-14-dev
  # real peers and guests for interop tests and benchmarks
  qemu-system-x86 busybox-static cpio kmod iperf3 iputils-ping iproute2 procps psmisc
  # bench tcp: offloads off on the native veth pair; the guest's ethtool -L (multiqueue test)
  ethtool
  # guest image: the uncompressed vmlinux for the faster PVH boot (build-guest.sh)
  xz-utils
  # libvirt domains on virtlink ports (tests/interop/test_libvirt.py runs its own private
  # session daemon; docs/libvirt.md)
  libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients
  # benchmark anchor: OVS-DPDK (bench/topologies.py runs its own private instance)
  openvswitch-switch-dpdk
  # reports; instructions per frame (bench/instructions.py: this VM has no hardware counters)
  gnuplot-nox python3 valgrind
  # running as a service: sd_notify and the journal (src/util/service_notify.cpp,
  # src/util/log_sinks.cpp)
  libsystemd-dev
  # the Prometheus endpoint (src/control/metrics_server.cpp: libmicrohttpd), and a real
  # Prometheus server and promtool for its test (tests/interop/test_metrics.py)
  libmicrohttpd-dev prometheus
  # packet capture (src/app/capture.cpp, src/cli/ctl_capture.cpp: libpcap) and tcpdump to
  # read what it wrote (tests/interop/test_capture.py); ctl trace --pcap
  # (src/cli/ctl_trace.cpp) and its test (tests/interop/test_trace.py)
  libpcap-dev tcpdump
  # a real terminal for `virtlink top`'s test (tests/interop/test_top.py runs it in tmux)
  tmux
  # the Debian package (debian/, tests/package/test_package.py): dpkg-buildpackage, debhelper,
  # lintian; help2man makes the man pages from --help; systemd-analyze verify checks the
  # unit offline; man-db (man -l) renders the pages
  dpkg-dev debhelper fakeroot lintian help2man systemd man-db
  # virtlink-cni's IPAM (host-local, /usr/lib/cni) in its tests (tests/interop/test_cni.py,
  # test_cluster.py); the deployment files' offline check reads YAML (tests/deploy/)
  containernetworking-plugins python3-yaml
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: missing packages: ${missing[*]} (run as root)" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "install-deps: all ${#PKGS[@]} packages present"
