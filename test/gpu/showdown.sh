#!/usr/bin/env bash
# The demo's enforcement half on the GPU host (compiler, CMake, CUDA, PyTorch): builds tessera,
# then runs test/gpu/showdown.py: the showdown's four pods at once, natively and each under
# `tessera run --gpu-memory <its ask>`. ~1 min on an H200. Output folder: $1 (default
# build/showdown-out): showdown.jsonl; the table goes to stdout.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-build/showdown-out}
mkdir -p "$out"
cmake --preset gpu >/dev/null
cmake --build build/gpu -j "$(nproc)" --target tessera tessera_hook 2>&1 | tail -n 3
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 test/gpu/showdown.py drive "$PWD/build/gpu/cmd/tessera/tessera" "$(cd "$out" && pwd)"
