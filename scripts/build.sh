#!/usr/bin/env bash
# Configures and builds one flavour of fp4serve into build/<flavour>:
#   release (default) | asan (AddressSanitizer + UBSan) | fuzz (clang + libFuzzer)
# Further arguments name the targets to build (default: all).
#   bash scripts/build.sh fuzz safetensors_header_fuzz
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=${1:-release}
shift || true
targets=()
for t in "$@"; do targets+=(--target "$t"); done
jobs=${JOBS:-$(nproc)}
case "$flavour" in
  release) args=(-DCMAKE_BUILD_TYPE=Release -DFP4SERVE_WERROR=ON) ;;
  # The benchmarks are built (and so compiled) by release; under the sanitizers they would only
  # take 250 MB of disk and build time, since nothing runs them there.
  asan)    args=(-DCMAKE_BUILD_TYPE=Debug -DFP4SERVE_WERROR=ON -DFP4SERVE_SANITIZE=ON
                 -DFP4SERVE_BENCH=OFF) ;;
  fuzz)    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP4SERVE_FUZZ=ON -DFP4SERVE_TESTS=OFF
                 -DCMAKE_CXX_COMPILER=clang++) ;;
  *) echo "build.sh: unknown flavour '$flavour' (release|asan|fuzz)" >&2; exit 2 ;;
esac
cmake -S . -B "build/$flavour" -G Ninja "${args[@]}" >/dev/null
cmake --build "build/$flavour" -j "$jobs" "${targets[@]}"
