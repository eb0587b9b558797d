#!/usr/bin/env bash
# Every test: the release build's suites, the same suites under ASan/UBSan, and a bounded
# libFuzzer run of the safetensors header parser.
set -euo pipefail
cd "$(dirname "$0")/.."
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

echo "== fuzz the safetensors header parser for ${fuzz_seconds}s"
bash scripts/build.sh fuzz safetensors_header_fuzz
corpus=$(mktemp -d)
cp fuzz/corpus/safetensors/* "$corpus"/
./build/fuzz/fuzz/safetensors_header_fuzz -max_total_time="$fuzz_seconds" -max_len=4096 "$corpus" 2>&1 | tail -3
rm -rf "$corpus"
echo "all test stages passed"
