#!/usr/bin/env bash
# Spatial priority under MPS on the GPU host (compiler, CMake, CUDA, PyTorch): builds tessera,
# then runs `priority_bench.py spatial`: three latency-critical models (a small MLP, ResNet-50, a
# transformer decode step) each beside three best-effort shapes (full-GPU bf16 products of ~1.7 ms
# four to a step, an MLP training step, the products replayed from a CUDA graph), both under
# `tessera run --mode mps`. LC p99 against the LC alone under MPS; BE against its native solo
# rate. ~6 min on an H200 once tessera is built. Output folder: $1 (default
# build/spatial-out): spatial.json and BE's per-second logs; the table goes to stdout.
# LC_MODELS, BE_SHAPES, LC_DUTY narrow the run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-build/spatial-out}
mkdir -p "$out"
cmake --preset gpu >/dev/null
cmake --build build/gpu -j "$(nproc)" --target tessera tessera_hook 2>&1 | tail -n 3
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 test/gpu/priority_bench.py spatial "$PWD/build/gpu" "$(cd "$out" && pwd)"
