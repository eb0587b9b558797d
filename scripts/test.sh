#!/usr/bin/env bash
# Every test: the release build's suites, the server's integration tests, the same suites under
# ASan/UBSan, and bounded libFuzzer runs of the safetensors header parser and the server's parsers.
set -euo pipefail
cd "$(dirname "$0")/.."

# The three builds take about 3 GB; a full disk otherwise surfaces halfway through as a linker's
# "No space left on device". Say so first, naming the directories and what is missing.
need_mb=${FP4SERVE_TEST_DISK_MB:-4096}
for dir in "$PWD" "${TMPDIR:-/tmp}"; do
  free_mb=$(df -Pm "$dir" 2>/dev/null | awk 'NR == 2 {print $4}') || free_mb=""
  if [ -z "$free_mb" ]; then
    echo "test.sh: cannot read the free space of $dir (does it exist?)" >&2
    exit 1
  fi
  if [ "$free_mb" -lt "$need_mb" ]; then
    echo "test.sh: $dir has ${free_mb} MB free; the release, ASan and fuzz builds and the tests need" \
         "about ${need_mb} MB (set FP4SERVE_TEST_DISK_MB to change the check)" >&2
    exit 1
  fi
done

bash scripts/setup-deps.sh
fuzz_seconds=${FUZZ_SECONDS:-60}

echo "== release build and tests"
bash scripts/build.sh release
ctest --test-dir build/release --output-on-failure -j "$(nproc)"

echo "== server integration tests (openai client and raw HTTP against a tiny synth model)"
FP4SERVE_BINARY="$PWD/build/release/fp4serve" .venv-tests/bin/python -m pytest -q tests/integration

echo "== ASan/UBSan build and tests"
bash scripts/build.sh asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build/asan --output-on-failure -j "$(nproc)"

echo "== fuzz the safetensors header and index parsers and the server's request/output parsers for ${fuzz_seconds}s each"
bash scripts/build.sh fuzz safetensors_header_fuzz safetensors_index_fuzz openai_request_fuzz
for target in safetensors:safetensors_header_fuzz safetensors_index:safetensors_index_fuzz openai:openai_request_fuzz; do
  corpus=$(mktemp -d)
  cp fuzz/corpus/"${target%%:*}"/* "$corpus"/
  ./build/fuzz/fuzz/"${target#*:}" -max_total_time="$fuzz_seconds" -max_len=4096 "$corpus" 2>&1 | tail -3
  rm -rf "$corpus"
done
echo "all test stages passed"
