#!/usr/bin/env bash
# Installs the Debian packages fp4serve builds and tests with. Idempotent: installs only what is
# missing, so it is cheap to call from every entry point (README commands, .ci/run).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libcli11-dev
  libsimdjson-dev  # the large JSON of big checkpoints (safetensors headers, the shard index)
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev  # libFuzzer and the sanitizer runtimes for the fuzz job
  libpcre2-dev libutf8proc-dev  # tokenizer: Unicode regex classes and NFC
  libcpp-httplib-dev  # server: HTTP/1.1 with chunked streaming
  python3 python3-venv  # server integration tests (venv below)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup-deps: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The server's integration tests drive the real binary with the official `openai` client; they
# run from a venv in .venv-tests/ (created once, reused; --no-test-venv skips it).
if [ "${1:-}" != "--no-test-venv" ]; then
  repo=$(cd "$(dirname "$0")/.." && pwd)
  venv="$repo/.venv-tests"
  if ! "$venv/bin/python" -c "import openai, pytest" 2>/dev/null; then
    echo "setup-deps: creating $venv with openai and pytest"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check openai pytest
  fi
fi
