#!/usr/bin/env bash
# The main job on a built-in default: build, write a small synthetic NVFP4 Qwen3-MoE checkpoint
# and inspect it. (Generation replaces this once the model lands.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
bash scripts/build.sh release
out=${1:-out/tiny-nvfp4}
./build/release/fp4serve synth --arch qwen3_moe --preset tiny --seed 0 --out "$out" --force
./build/release/fp4serve inspect "$out"
