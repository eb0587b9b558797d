#!/usr/bin/env bash
# The main job on a built-in default: build, write a small synthetic NVFP4 Qwen3-MoE checkpoint
# (unless a model directory is given), show what it is, and generate text with it. The kernel
# backend decisions go to stderr, then the text, then the timing line.
#   bash scripts/demo.sh [MODEL_DIR] [PROMPT]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
bash scripts/build.sh release
out=${1:-}
prompt=${2:-"The capital of France is"}
if [ -z "$out" ]; then
  out=out/tiny-nvfp4
  ./build/release/fp4serve synth --arch qwen3_moe --preset tiny --seed 0 --out "$out" --force --quiet
  ./build/release/fp4serve inspect "$out"
fi
./build/release/fp4serve run -m "$out" -p "$prompt" -n 32
