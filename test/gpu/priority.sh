#!/usr/bin/env bash
# Priority under sharing (part c) on the GPU host (compiler, CMake, CUDA, PyTorch): builds
# tessera, then runs test/gpu/priority_bench.py: a paced batch-1 inference service (ResNet-50 and a
# small Transformer, latency-critical) beside a bf16 training loop (best-effort), alone, natively
# shared, under tessera time-sliced and under tessera MPS. ~4-5 min on an H200 once tessera is
# built. Output folder: $1 (default build/priority-out): priority.json and BE's per-second logs;
# the tables go to stdout.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-build/priority-out}
mkdir -p "$out"
cmake --preset gpu >/dev/null
cmake --build build/gpu -j "$(nproc)" --target tessera tessera_hook 2>&1 | tail -n 3
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 test/gpu/priority_bench.py drive "$PWD/build/gpu" "$(cd "$out" && pwd)"
