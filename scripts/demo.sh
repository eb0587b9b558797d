#!/usr/bin/env bash
# The main job on a built-in default: build, write a small synthetic NVFP4 Qwen3-MoE checkpoint
# (unless a model directory is given), show what it is, generate text with it, then serve it
# over the OpenAI API and ask one chat completion with curl. The kernel backend decisions go to
# stderr, then the text, then the timing line, then the server's answer.
#   bash scripts/demo.sh [MODEL_DIR] [PROMPT]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh --no-test-venv
bash scripts/build.sh release
out=${1:-}
prompt=${2:-"The capital of France is"}
bin=./build/release/fp4serve
if [ -z "$out" ]; then
  out=out/tiny-nvfp4
  "$bin" synth --arch qwen3_moe --preset tiny --seed 0 --out "$out" --force --quiet
  "$bin" inspect "$out"
fi
"$bin" run -m "$out" -p "$prompt" -n 32

echo "== serving $out on the OpenAI API (one chat completion with curl, then SIGTERM)"
log=$(mktemp)
"$bin" serve -m "$out" --port 0 --served-model-name demo 2>"$log" &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -f "$log"' EXIT
port=""
for _ in $(seq 1 600); do
  port=$(sed -n 's|.*ready: .* on http://[^:]*:\([0-9]*\).*|\1|p' "$log")
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { cat "$log"; echo "server did not become ready"; exit 1; }
curl -sS "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
  -d "{\"model\": \"demo\", \"messages\": [{\"role\": \"user\", \"content\": \"$prompt\"}], \"max_tokens\": 16}"
echo
kill -TERM "$server"
wait "$server"
