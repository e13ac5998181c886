# Shared by scripts/demo.sh and scripts/demo-dpdk.sh (sourced, not run): a private
# directory, the processes started, and their removal on exit.
#   VL     the virtlink binary (VIRTLINK, default build/virtlink)
#   dir    a fresh temporary directory, removed on exit
#   pids   append every background process; each is killed on exit
VL=${VIRTLINK:-build/virtlink}
dir=$(mktemp -d /tmp/virtlink-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
