#!/usr/bin/env bash
# Builds virtlink. Usage: scripts/build.sh [release|asan|all] [TARGET...]
#   release  build/        g++ RelWithDebInfo (the binaries users run; -march=native -mno-avx512f)
#   asan     build-asan/   clang++ with AddressSanitizer + UndefinedBehaviorSanitizer, and the
#                          libFuzzer targets in fuzz/ (VIRTLINK_FUZZ)
# ccache is used when present, with paths taken relative to the checkout (CCACHE_BASEDIR,
# CCACHE_NOHASHDIR) so that a fresh clone elsewhere reuses the cache. Both builds are
# incremental.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
what=${1:-release}
shift || true
targets=("$@")  # ninja targets (release only; default: everything)
jobs=$(nproc)

build_release() {
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  ninja -C build -j"$jobs" "${targets[@]}"
}
build_asan() {
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
    -DVIRTLINK_SANITIZE=ON -DVIRTLINK_FUZZ=ON >/dev/null
  ninja -C build-asan -j"$jobs"
}
case "$what" in
  release) build_release ;;
  asan) build_asan ;;
  all) build_release; build_asan ;;
  *) echo "usage: $0 [release|asan|all]" >&2; exit 2 ;;
esac
